//! `events` and `deletion.finalizer`: the Events a rule records and the
//! name of its finalizer, as the operator it ports writes them.

use super::*;

/// Finalizers the API server and its garbage collector act on: a rule that
/// held one would change how its primaries are deleted.
const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];

/// Domains whose finalizers belong to Kubernetes or to kiln itself.
const RESERVED_DOMAINS: [&str; 3] = ["kubernetes.io", "k8s.io", "kiln.dev"];

impl<'a> Checker<'a> {
    pub(super) fn events(&mut self) -> Vec<RuleEvent> {
        let scope = Scope {
            roots: &["self", "rule", "outcome"],
        };
        let mut out = Vec::new();
        for (i, e) in self.raw.spec.events.iter().enumerate() {
            let at = |k: &str| vec![key("spec"), key("events"), Step::Index(i), key(k)];
            if e.reason.len() > 128 || !is_condition_reason(&e.reason) {
                self.error(
                    &at("reason"),
                    format!(
                        "reason `{}` must be literal CamelCase (a letter, then letters, digits, `_`, `,` or `:`), at most 128 characters",
                        e.reason.escape_debug()
                    ),
                );
            }
            let warning = match e.type_.as_deref() {
                None | Some("Normal") => false,
                Some("Warning") => true,
                Some(other) => {
                    self.error(
                        &at("type"),
                        format!("type `{}`: `Normal` or `Warning`", other.escape_debug()),
                    );
                    false
                }
            };
            let when = e.when.as_deref().unwrap_or("outcome.reconciled");
            let when = self.expr(&at("when"), when, &scope, &[], &[]);
            let text = Value::String(e.message.clone());
            let message = self.tree(&at("message"), &text, &scope, &[], &[]);
            if let (Some(when), Some(message)) = (when, message) {
                out.push(RuleEvent {
                    reason: e.reason.clone(),
                    warning,
                    message,
                    when,
                });
            }
        }
        out
    }

    pub(super) fn finalizer(&mut self) -> Option<String> {
        let name = self.raw.spec.deletion.as_ref()?.finalizer.clone()?;
        let at = [key("spec"), key("deletion"), key("finalizer")];
        match finalizer_refusal(&name) {
            Some(why) => {
                self.error(&at, format!("finalizer `{}` {why}", name.escape_debug()));
                None
            }
            None => Some(name),
        }
    }
}

/// Why `name` may not be a rule's finalizer: not a qualified name as the
/// API server takes it (`[prefix/]name`), a standard finalizer, or one of a
/// domain Kubernetes or kiln keeps.
fn finalizer_refusal(name: &str) -> Option<String> {
    let (prefix, local) = match name.split_once('/') {
        Some((p, l)) => (Some(p), l),
        None => (None, name),
    };
    let local_ok = (1..=63).contains(&local.len())
        && local.starts_with(|c: char| c.is_ascii_alphanumeric())
        && local.ends_with(|c: char| c.is_ascii_alphanumeric())
        && local
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !local_ok {
        return Some(
            "is not a qualified name: `[prefix/]name`, the name 1 to 63 letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit".into(),
        );
    }
    if let Some(Err(why)) = prefix.map(dns_subdomain) {
        return Some(format!("has a prefix that {why}"));
    }
    if STANDARD_FINALIZERS.contains(&name) {
        return Some("is one the API server acts on itself".into());
    }
    // The domain is the prefix, or the name itself when unprefixed
    // (`finalizers.fluxcd.io`).
    let domain = prefix.unwrap_or(local);
    RESERVED_DOMAINS
        .iter()
        .find(|d| domain == **d || domain.ends_with(&format!(".{d}")))
        .map(|d| {
            format!("is in the domain `{d}`, which Kubernetes or kiln keeps for its own finalizers")
        })
}

#[cfg(test)]
mod tests {
    use super::finalizer_refusal;

    #[test]
    fn a_finalizer_is_a_qualified_name_outside_reserved_domains() {
        for ok in [
            "finalizers.fluxcd.io",
            "example.com/cleanup",
            "foo.samplecontroller.example/finalizer",
        ] {
            assert_eq!(finalizer_refusal(ok), None, "{ok}");
        }
        for (bad, why) in [
            ("", "qualified name"),
            ("a b", "qualified name"),
            ("-x", "qualified name"),
            ("Example.COM/x", "prefix"),
            ("orphan", "acts on itself"),
            ("foregroundDeletion", "acts on itself"),
            ("kubernetes.io/pv-protection", "kubernetes.io"),
            ("batch.k8s.io/x", "k8s.io"),
            ("shop.kiln.dev/ordered-deletion", "kiln.dev"),
            ("finalizers.kiln.dev", "kiln.dev"),
        ] {
            let refusal = finalizer_refusal(bad).unwrap_or_default();
            assert!(refusal.contains(why), "{bad}: {refusal}");
        }
    }
}
