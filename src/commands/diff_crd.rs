//! The CustomResourceDefinitions a rule set would create or change, for
//! `kiln diff`: each rule that defines an API, its CRD against the one in
//! the cluster (the fields kiln would send against the live values of
//! them), and the installer's own verdict on the change (`api::install`'s
//! `vet`, which `kiln run` asks before it writes a CRD): what it would
//! refuse, and the breaking changes a rule allows. It reads, never writes.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kiln::api::install::{InstallError, Installer, manager_of};
use kiln::api::{Api, compat};
use kiln::rules::Rule;
use kube::Client;

use super::live_diff;

/// What kiln would do to `rule`'s CRD, as text (empty: nothing, or the rule
/// defines no API). `field_manager` is `kiln run`'s, whose CRD manager
/// tells kiln's CRDs from others'.
pub async fn crd_diff(client: &Client, rule: &Rule, field_manager: &str) -> anyhow::Result<String> {
    let Some(api) = rule.api.as_deref() else {
        return Ok(String::new());
    };
    let name = api.name();
    let head = |sign: &str, what: &str| {
        format!(
            "{sign} CustomResourceDefinition {name} (rule {}): {what}\n",
            rule.name
        )
    };
    let crds = kube::Api::<CustomResourceDefinition>::all(client.clone());
    let Some(live) = crds.get_opt(&name).await? else {
        let body = serde_norway::to_string(&api.crd["spec"])?;
        return Ok(head("+", "kiln would create this CRD") + &live_diff::line_diff("", &body));
    };
    let live = serde_json::to_value(&live)?;
    let sent = live_diff::sent_fields_of(&live["spec"], &api.crd["spec"]);
    let mut out = String::new();
    if !kiln::engine::decision::equal(&sent, &api.crd["spec"]) {
        out.push_str(&head("~", "changed"));
        out.push_str(&live_diff::line_diff(
            &serde_norway::to_string(&sent)?,
            &serde_norway::to_string(&api.crd["spec"])?,
        ));
    }
    let installer = Installer::new(client, manager_of(field_manager));
    match installer.vet(api).await {
        Ok(_) => out.push_str(&allowed(api, &live)),
        Err(e) => out.push_str(&refused(&head("!", "kiln would refuse this change"), &e)),
    }
    Ok(out)
}

/// The breaking changes a rule allows (`allowBreakingChanges`), one a line.
fn allowed(api: &Api, live: &serde_json::Value) -> String {
    compat::breaking(live, api)
        .iter()
        .map(|b| format!("!   breaking, applied (spec.api.allowBreakingChanges): {b}\n"))
        .collect()
}

/// Why the installer refuses the CRD: each breaking change on its line.
fn refused(head: &str, e: &InstallError) -> String {
    let mut out = head.to_string();
    match e {
        InstallError::Breaking { changes, .. } => {
            for b in changes {
                out.push_str(&format!("!   breaking: {b}\n"));
            }
            out.push_str("!   (set spec.api.allowBreakingChanges: true to apply it anyway)\n");
        }
        InstallError::BreakingAdoption { changes, .. } => {
            for b in changes {
                out.push_str(&format!("!   breaking another owner's objects: {b}\n"));
            }
        }
        other => out.push_str(&format!("!   {other}\n")),
    }
    out
}
