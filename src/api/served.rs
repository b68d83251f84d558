//! Which rule-defined APIs need kiln's conversion webhook to be served:
//! every API with several versions. Objects cross its versions only through
//! its conversion templates, which the webhook runs. A CRD serving several
//! versions without it (`spec.conversion.strategy: None`) makes the API
//! server store an object written at one version as the storage version
//! with only its `apiVersion` changed, pruning every field the storage
//! version names differently: data lost without a word. So `kiln run`
//! refuses such a rule when it serves no webhook, and `kiln crd` prints its
//! CRD only with the webhook's endpoint, as `kiln run` applies it.
//!
//! (Serving only the storage version instead would look like it works while
//! every client of the other versions breaks, and unserving a version is
//! itself a breaking change; a refusal names the flags to add.)

use crate::rules::{Diagnostic, RuleSet};

use super::Api;

/// The `kiln run` flags that serve the conversion webhook.
pub const RUN_FLAGS: &str = "--conversion-addr :9443 and --conversion-service NAMESPACE/NAME[:PORT] (kiln in the cluster) or --conversion-url https://HOST:PORT (kiln outside it)";

/// The `kiln crd` flags that say where the API server reaches the webhook.
pub const CRD_FLAGS: &str = "--conversion-service NAMESPACE/NAME[:PORT] or --conversion-url https://HOST:PORT, as kiln run gets them";

/// Why the API cannot be served without the conversion webhook (`flags`:
/// the ones to add), or `None` when it has one version.
pub fn needs_webhook(api: &Api, flags: &str) -> Option<String> {
    let conversions = api.conversions.as_ref()?;
    let mut versions: Vec<&str> = conversions.versions().collect();
    versions.push(conversions.storage());
    versions.sort_unstable();
    Some(format!(
        "{} has several versions ({}): the API server converts between them only through kiln's conversion webhook, which is not configured; without it an object written at one version would be stored at {} with every field that version names differently dropped. Give {flags}",
        api.name(),
        versions.join(", "),
        api.storage_version,
    ))
}

/// A diagnostic per rule of `set` whose API needs the webhook, for a
/// `kiln run` that serves none.
pub fn refused_without_webhook(set: &RuleSet) -> Vec<Diagnostic> {
    set.rules
        .iter()
        .filter_map(|rule| {
            let why = needs_webhook(rule.api.as_deref()?, RUN_FLAGS)?;
            Some(
                Diagnostic::new(&rule.file, "", None, "spec.api.versions".into(), why)
                    .in_rule(&rule.name),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::load::Source;

    fn set(yaml: &str) -> RuleSet {
        crate::rules::load_sources(vec![Source {
            file: "rule.yaml".into(),
            text: yaml.into(),
        }])
        .unwrap()
    }

    #[test]
    fn an_api_with_several_versions_is_refused_without_the_webhook_and_names_the_flags() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/rules/webapp-api.yaml");
        let two = set(&std::fs::read_to_string(path).unwrap());
        let refused = refused_without_webhook(&two);
        assert_eq!(refused.len(), 1);
        let text = refused[0].to_string();
        for part in [
            "webapps.apps.demo.kiln.dev has several versions (v1, v1alpha1)",
            "stored at v1",
            "--conversion-addr :9443",
            "--conversion-service NAMESPACE/NAME[:PORT]",
            "--conversion-url https://HOST:PORT",
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
        let one = set(
            "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {name: sites}\nspec:\n  api:\n    group: sites.example.com\n    kind: Site\n    versions:\n      - name: v1\n        schema:\n          spec: {title: string}\n",
        );
        assert!(
            refused_without_webhook(&one).is_empty(),
            "one version converts nothing"
        );
    }
}
