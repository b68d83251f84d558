//! Finalizers no running rule would ever remove: a rule that held its
//! finalizer on a kind's objects and no longer runs on that kind (removed,
//! renamed or moved to another kind) while kiln was down or while another
//! replica held the Lease. Each is owed a release: kiln lets go of that
//! rule's finalizer (its own field manager's, never a copy of the string
//! someone else wrote) on every object of the old kind, or deleting one
//! (and the old CRD) would hang.
//!
//! What is owed is found by comparing the accepted set saved in the
//! cluster with the one about to be saved ([`owed`], pure), kept in the
//! saved set until done (so a restart or a standby taking over carries it
//! on), and carried out by the replica that runs the engine ([`Releaser`]).
//! A kind kiln may not list or patch, or a list that fails, leaves the
//! release owed: it is tried again, and said.

use std::collections::BTreeSet;

use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde::{Deserialize, Serialize};

use super::accepted::{Accepted, Entry};
use crate::engine::cache::kinds::{KindError, Kinds};
use crate::engine::decision::{decorate, deletion};
use crate::gate::{self, Warrant};
use crate::rules::{Gvk, RuleSet};

/// A rule's finalizer owed a release on the objects of one kind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Release {
    /// The rule whose finalizer it is.
    pub rule: String,
    /// The kind's group (empty for the core group).
    pub group: String,
    /// The version the rule read the kind at.
    pub version: String,
    /// The kind.
    pub kind: String,
    /// The finalizer the rule held, when it named one (empty: the name
    /// kiln gives a rule's finalizer).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub finalizer: String,
}

impl Release {
    /// The finalizer string let go of.
    fn finalizer(&self) -> String {
        match self.finalizer.as_str() {
            "" => deletion::unnamed_finalizer(&self.rule),
            named => named.to_string(),
        }
    }

    fn gvk(&self) -> Gvk {
        Gvk {
            group: self.group.clone(),
            version: self.version.clone(),
            kind: self.kind.clone(),
        }
    }

    /// Whether the rule of this name is on this kind: running, or accepted
    /// but not running now (refused at this engine's start, say), which
    /// removes its finalizer itself once it runs.
    fn covered(&self, accepted: &Accepted, running: &RuleSet) -> bool {
        let on = |gvk: &Gvk| gvk.group == self.group && gvk.kind == self.kind;
        match running.get(&self.rule) {
            Some(rule) => on(&rule.primary.gvk),
            None => accepted
                .get(&self.rule)
                .and_then(compiled)
                .is_some_and(|rule| on(&rule.primary.gvk)),
        }
    }
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} on {}", self.finalizer(), self.gvk())
    }
}

/// What is owed once `saved` (the accepted set saved in the cluster, with
/// `pending`, the releases it still owes) gives way to `accepted`, which
/// runs as `running`: every release pending or newly owed that no accepted
/// rule covers (the same rule on the same kind removes its finalizer
/// itself), without those in `done`.
///
/// A saved rule owes a release when it held its finalizer and its name no
/// longer runs on its kind. A saved rule identical to its accepted version
/// runs on the same kind, so it is not compiled again.
pub fn owed(
    saved: &Accepted,
    pending: &[Release],
    accepted: &Accepted,
    running: &RuleSet,
    done: &[Release],
) -> Vec<Release> {
    let mut out: BTreeSet<Release> = pending.iter().cloned().collect();
    for entry in &saved.rules {
        if accepted
            .get(&entry.name)
            .is_some_and(|e| e.text == entry.text)
        {
            continue;
        }
        out.extend(held(entry));
    }
    out.into_iter()
        .filter(|r| !done.contains(r) && !r.covered(accepted, running))
        .collect()
}

/// An accepted rule compiled alone (`None`, said, when it no longer compiles).
fn compiled(entry: &Entry) -> Option<std::sync::Arc<crate::rules::Rule>> {
    let source = crate::rules::load::Source {
        file: entry.file.clone(),
        text: entry.text.clone(),
    };
    match crate::rules::load_sources(vec![source]) {
        Ok(set) => set.rules.into_iter().next(),
        Err(diagnostics) => {
            let why = diagnostics.first().map(|d| d.message.clone());
            tracing::warn!(rule = %entry.name, why = ?why, "an accepted rule no longer compiles: kiln cannot tell which kind it held a finalizer on");
            None
        }
    }
}

/// The finalizer a saved rule held, if it held one.
fn held(entry: &Entry) -> Option<Release> {
    let rule = compiled(entry)?;
    deletion::needed(&rule).then(|| Release {
        rule: rule.name.clone(),
        group: rule.primary.gvk.group.clone(),
        version: rule.primary.gvk.version.clone(),
        kind: rule.primary.gvk.kind.clone(),
        finalizer: rule.finalizer.clone().unwrap_or_default(),
    })
}

/// Why a release could not be carried out (it stays owed).
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// Discovery failed.
    #[error("releasing {release}: {source}")]
    Discovery {
        /// The release.
        release: Release,
        /// Why.
        #[source]
        source: KindError,
    },
    /// Listing or patching the kind's objects failed (forbidden, say).
    #[error("releasing {release}: {doing}: {source}")]
    Api {
        /// The release.
        release: Release,
        /// What kiln was doing.
        doing: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
}

/// Carries out releases, in the namespaces kiln watches (every namespace
/// when none is given).
#[derive(Clone)]
pub struct Releaser {
    client: Client,
    namespaces: Vec<String>,
}

/// Objects listed per request.
const PAGE: u32 = 500;

impl Releaser {
    /// A releaser for the engine watching `namespaces` (empty: all).
    pub fn new(client: Client, namespaces: Vec<String>) -> Self {
        Self { client, namespaces }
    }

    /// Lets go of `release`'s finalizer on every object of its kind that
    /// holds it; how many were patched. A kind the API server does not
    /// serve (at any version) has no objects left to hold it.
    pub async fn release(&self, release: &Release) -> Result<usize, ReleaseError> {
        let kinds = Kinds::new(self.client.clone());
        let kind = match kinds.resolve(&release.gvk()).await {
            Ok(kind) => kind,
            Err(KindError::NotServed(_)) => match self.served_elsewhere(release).await? {
                Some(gvk) => {
                    kinds
                        .resolve(&gvk)
                        .await
                        .map_err(|source| ReleaseError::Discovery {
                            release: release.clone(),
                            source,
                        })?
                }
                None => return Ok(0),
            },
            Err(source) => {
                return Err(ReleaseError::Discovery {
                    release: release.clone(),
                    source,
                });
            }
        };
        let apis: Vec<Api<DynamicObject>> = match (kind.namespaced, &self.namespaces[..]) {
            (true, some) if !some.is_empty() => some
                .iter()
                .map(|ns| Api::namespaced_with(self.client.clone(), ns, &kind.ar))
                .collect(),
            _ => vec![Api::all_with(self.client.clone(), &kind.ar)],
        };
        let mut patched = 0;
        for api in apis {
            patched += self.release_in(&api, release, &kind.gvk).await?;
        }
        Ok(patched)
    }

    /// The kind at the version its group serves it now, when the version
    /// the rule read it at is gone (`None`: not served at all).
    async fn served_elsewhere(&self, release: &Release) -> Result<Option<Gvk>, ReleaseError> {
        let api_error = |source| ReleaseError::Api {
            release: release.clone(),
            doing: "discovering its group".into(),
            source,
        };
        let group = match kube::discovery::group(&self.client, &release.group).await {
            Ok(group) => group,
            Err(kube::Error::Discovery(_)) => return Ok(None),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
            Err(e) => return Err(api_error(e)),
        };
        Ok(group.recommended_kind(&release.kind).map(|(ar, _)| Gvk {
            group: ar.group,
            version: ar.version,
            kind: ar.kind,
        }))
    }

    /// Lets go of the finalizer on each object `api` lists holding it.
    async fn release_in(
        &self,
        api: &Api<DynamicObject>,
        release: &Release,
        gvk: &Gvk,
    ) -> Result<usize, ReleaseError> {
        let finalizer = release.finalizer();
        let mut params = ListParams::default().limit(PAGE);
        let mut patched = 0;
        loop {
            let page = api
                .list(&params)
                .await
                .map_err(|source| ReleaseError::Api {
                    release: release.clone(),
                    doing: "listing its objects".into(),
                    source,
                })?;
            for obj in page
                .items
                .iter()
                .filter(|o| o.finalizers().contains(&finalizer))
            {
                let done = let_go(api, obj, &release.rule, gvk).await;
                done.map_err(|source| ReleaseError::Api {
                    release: release.clone(),
                    doing: format!("patching {}", obj.name_any()),
                    source,
                })?;
                patched += 1;
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(patched),
            }
        }
    }
}

/// Applies, as the rule's finalizer manager, no finalizer on `obj`: kiln's
/// own entry goes, any other manager's copy of it stays. With the uid
/// listed: an object deleted meanwhile is never created again.
async fn let_go(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    rule: &str,
    gvk: &Gvk,
) -> kube::Result<()> {
    let mut fields = serde_json::Map::new();
    fields.insert(
        "metadata".into(),
        serde_json::json!({ "finalizers": Vec::<String>::new() }),
    );
    let namespace = obj.metadata.namespace.as_deref();
    let name = obj.name_any();
    let uid = obj.metadata.uid.as_deref();
    let body = decorate::apply_body(gvk, namespace, &name, uid, &fields);
    let pp = PatchParams::apply(&deletion::manager(rule)).force();
    match gate::patch(api, &name, &pp, &Patch::Apply(&body), Warrant::Primary).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.message.contains("uid mismatch") => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reload::source::Version;

    fn rule(name: &str, kind: &str, ordered: bool) -> Entry {
        let deletion = if ordered {
            "  deletion: {ordered: true}\n"
        } else {
            ""
        };
        Entry {
            name: name.into(),
            file: format!("{name}.yaml").into(),
            text: format!(
                "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: {name}}}\nspec:\n  for: {{apiVersion: test.kiln.dev/v1, kind: {kind}}}\n{deletion}  children:\n    - id: c\n      template:\n        apiVersion: v1\n        kind: ConfigMap\n        metadata: {{name: \"{{{{ self.metadata.name }}}}-c\"}}\n"
            ),
            generation: None,
        }
    }

    fn accepted(entries: &[Entry]) -> Accepted {
        Accepted {
            rules: entries.to_vec(),
        }
    }

    fn compiled(a: &Accepted) -> RuleSet {
        let v: Version = a.to_version();
        crate::rules::load_sources(v.sources).unwrap()
    }

    fn release(rule: &str, kind: &str) -> Release {
        Release {
            rule: rule.into(),
            group: "test.kiln.dev".into(),
            version: "v1".into(),
            kind: kind.into(),
            finalizer: String::new(),
        }
    }

    #[test]
    fn a_rule_renamed_to_another_kind_or_removed_owes_a_release_of_its_old_kind() {
        let saved = accepted(&[rule("a", "Widget", true), rule("b", "Widget", true)]);
        let now = accepted(&[rule("a", "Gadget", true)]);
        let owed = owed(&saved, &[], &now, &compiled(&now), &[]);
        assert_eq!(owed, [release("a", "Widget"), release("b", "Widget")]);
    }

    #[test]
    fn nothing_is_owed_by_a_rule_on_the_same_kind_or_one_without_a_finalizer() {
        let saved = accepted(&[rule("a", "Widget", true), rule("b", "Widget", false)]);
        // `a` changed, still on Widget; `b` renamed but never held one.
        let now = accepted(&[rule("a", "Widget", false), rule("b", "Gadget", true)]);
        assert_eq!(owed(&saved, &[], &now, &compiled(&now), &[]), []);
    }

    #[test]
    fn a_pending_release_stays_until_done_or_covered_again() {
        let pending = [release("a", "Widget"), release("b", "Widget")];
        let now = accepted(&[rule("a", "Widget", true)]);
        let running = compiled(&now);
        // `a` is back on Widget: it removes its finalizer itself.
        assert_eq!(
            owed(&now, &pending, &now, &running, &[]),
            [release("b", "Widget")]
        );
        let done = [release("b", "Widget")];
        assert_eq!(owed(&now, &pending, &now, &running, &done), []);
    }

    #[test]
    fn an_accepted_rule_on_the_same_kind_that_does_not_run_now_owes_nothing() {
        // `a` changed on Widget and was refused at this engine's start: it
        // does not run, but it is still the accepted rule on Widget.
        let saved = accepted(&[rule("a", "Widget", true)]);
        let now = accepted(&[rule("a", "Widget", false)]);
        assert_eq!(owed(&saved, &[], &now, &RuleSet::default(), &[]), []);
        // Moved to Gadget and not running: the Widgets are owed a release.
        let moved = accepted(&[rule("a", "Gadget", true)]);
        assert_eq!(
            owed(&saved, &[], &moved, &RuleSet::default(), &[]),
            [release("a", "Widget")]
        );
    }
}
