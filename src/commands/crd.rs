//! `kiln crd --rules DIR`: the CustomResourceDefinitions rules define, as
//! `kiln run` applies them (an API with several versions pointed at the
//! conversion webhook given by the same flags, and refused without them);
//! with `--compare FILE`, the changes from the CRDs in FILE that would
//! break stored objects.

use std::process::ExitCode;

use kiln::api::served;
use kiln::api::webhook::Endpoint;
use serde_json::Value;

use crate::cli::CrdArgs;

/// Prints each rule-defined API's CRD as a YAML document, in rule order
/// (or, with `--compare`, the breaking changes).
pub fn run(args: &CrdArgs) -> anyhow::Result<ExitCode> {
    let set = super::render::load_rules(&args.rules)?;
    let apis: Vec<_> = set.rules.iter().filter_map(|r| r.api.as_ref()).collect();
    if apis.is_empty() {
        eprintln!("note: no rule defines an API (spec.api); nothing to print");
    }
    if !args.compare.is_empty() {
        let mut current = Vec::new();
        for file in &args.compare {
            let documents = super::render::documents(file)?;
            current.extend(documents.into_iter().flat_map(listed));
        }
        return Ok(compare(&apis, &current));
    }
    let endpoint = super::webhook::endpoint(&args.conversion)?;
    let mut out = String::new();
    let mut refused = Vec::new();
    for api in apis {
        match printed(api, endpoint.as_ref()) {
            Ok(crd) => out.push_str(&format!("---\n{}", kiln::yaml_out::to_string(&crd)?)),
            Err(why) => refused.push(why),
        }
    }
    if !refused.is_empty() {
        anyhow::bail!("{}", refused.join("\nerror: "));
    }
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// The objects a document holds: the items of a list (`kubectl get crds
/// -o yaml` prints one), else the document itself.
fn listed(document: Value) -> Vec<Value> {
    let is_list = document["kind"]
        .as_str()
        .is_some_and(|k| k.ends_with("List"));
    match document.get("items") {
        Some(Value::Array(items)) if is_list => items.clone(),
        _ => vec![document],
    }
}

/// The CRD as `kiln run` applies it: with several versions, pointed at the
/// conversion webhook at `endpoint` (the CA bundle is added by `kiln run`,
/// from its Secret); refused without an endpoint.
fn printed(api: &kiln::api::Api, endpoint: Option<&Endpoint>) -> Result<Value, String> {
    let mut crd = api.crd.clone();
    if api.conversions.is_none() {
        return Ok(crd);
    }
    let Some(endpoint) = endpoint else {
        return Err(served::needs_webhook(api, served::CRD_FLAGS).unwrap_or_default());
    };
    let mut conversion = endpoint.conversion("");
    if let Some(client) = conversion["webhook"]["clientConfig"].as_object_mut() {
        client.remove("caBundle");
    }
    crd["spec"]["conversion"] = conversion;
    Ok(crd)
}

/// Prints every breaking change from `current` to each API's CRD; fails
/// when one would be refused.
fn compare(apis: &[&std::sync::Arc<kiln::api::Api>], current: &[Value]) -> ExitCode {
    let mut refused = false;
    for api in apis {
        let name = api.name();
        let Some(old) = current
            .iter()
            .find(|c| c["metadata"]["name"] == name.as_str())
        else {
            println!("{name}: new");
            continue;
        };
        for t in kiln::api::compat::tightened(old, &api.crd) {
            println!("{name}: stored objects may not satisfy a new rule: {t}");
        }
        let changes = kiln::api::compat::breaking(old, api);
        if changes.is_empty() {
            println!("{name}: no breaking change");
            continue;
        }
        let verdict = if api.allow_breaking_changes {
            "allowed by allowBreakingChanges"
        } else {
            refused = true;
            "kiln run refuses them unless the rule sets spec.api.allowBreakingChanges: true"
        };
        println!("{name}: {} breaking change(s), {verdict}:", changes.len());
        for c in changes {
            println!("  {c}");
        }
    }
    if refused {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
