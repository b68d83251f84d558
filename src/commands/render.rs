//! `kiln render`: what the engine would apply for one object, without a cluster.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use kiln::render::{self, Inputs, Rendered};
use kiln::rules::{self, Rule};
use kiln::template::generate::Draw;
use kiln::yaml::{self, Limits};
use serde_json::Value;

use crate::cli::RenderArgs;

/// Loads the rules, or prints every diagnostic and fails.
pub fn load_rules(paths: &[std::path::PathBuf]) -> anyhow::Result<rules::RuleSet> {
    rules::load(paths).or_else(|diagnostics| {
        for d in &diagnostics {
            eprintln!("{d}");
        }
        bail!(
            "the rules are invalid ({} problems); run `kiln validate` for details",
            diagnostics.len()
        )
    })
}

/// Renders every matching rule and prints children (and status patches) as YAML.
pub fn run(args: &RenderArgs) -> anyhow::Result<ExitCode> {
    let set = load_rules(&args.rules)?;
    let primary = read_one(&args.object)?;
    let api_version = primary["apiVersion"].as_str().unwrap_or_default();
    let kind = primary["kind"].as_str().unwrap_or_default();
    let matching: Vec<&Rule> = set
        .rules
        .iter()
        .map(AsRef::as_ref)
        .filter(|r| args.rule.as_ref().is_none_or(|n| &r.name == n))
        .filter(|r| r.primary.gvk.api_version() == api_version && r.primary.gvk.kind == kind)
        .collect();
    if matching.is_empty() {
        let known: Vec<String> = set
            .rules
            .iter()
            .map(|r| format!("{} ({})", r.name, r.primary.gvk))
            .collect();
        bail!(
            "no rule takes {api_version}/{kind}{}; rules: {}",
            args.rule
                .as_ref()
                .map(|r| format!(" named `{r}`"))
                .unwrap_or_default(),
            known.join(", ")
        );
    }
    if primary["metadata"]["uid"].is_null() {
        eprintln!(
            "note: {} has no metadata.uid, so ownerReferences are left out (the engine sets them)",
            args.object.display()
        );
    }

    let mut inputs = Inputs {
        primary,
        // No cluster keeps a drawn value here, and the output must not
        // change from run to run: `random_secret(n)` prints a placeholder.
        draw: Draw::Placeholder,
        ..Inputs::default()
    };
    for (name, file) in &args.related {
        inputs.related.insert(name.clone(), read_value(file)?);
    }
    for (id, file) in &args.observed {
        inputs.observed.insert(id.clone(), read_value(file)?);
    }

    let mut failed = false;
    let namespace = inputs.primary["metadata"]["namespace"].as_str();
    let labels: std::collections::BTreeMap<String, String> =
        serde_json::from_value(inputs.primary["metadata"]["labels"].clone()).unwrap_or_default();
    for rule in matching {
        if let Some(why) = rule.primary.refusal(namespace, &labels) {
            eprintln!(
                "rule `{}` does not select {}: {why}; the engine would not reconcile it",
                rule.name,
                args.object.display()
            );
            failed = true;
            continue;
        }
        println!("# rule: {}", rule.name);
        let missing = render::missing_required(rule, &inputs);
        if !missing.is_empty() {
            eprintln!(
                "rule `{}`: required related object(s) not given ({}): the engine would set Waiting and render nothing; pass --related NAME=FILE",
                rule.name,
                missing.join(", ")
            );
            failed = true;
            continue;
        }
        match render::render(rule, &inputs, &render::well_known_scope) {
            Ok(rendered) => print_rendered(rule, &inputs, &rendered, args.children_only)?,
            Err(e) => {
                let secrets = kiln::engine::plan::Observed {
                    inputs: inputs.clone(),
                    ..Default::default()
                }
                .secrets(rule);
                let message = kiln::redact::redact(&e.to_string(), &secrets);
                eprintln!("rule `{}`: {message}", rule.name);
                failed = true;
            }
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_rendered(
    rule: &Rule,
    inputs: &Inputs,
    rendered: &Rendered,
    children_only: bool,
) -> anyhow::Result<()> {
    for (child, readiness) in rendered.children.iter().zip(&rendered.readiness) {
        println!("---");
        if inputs.observed.contains_key(&child.id) {
            println!("# child: {} (ready: {})", child.id, readiness.ready);
        } else {
            println!(
                "# child: {} (not observed: pass --observed {}=FILE for readiness)",
                child.id, child.id
            );
        }
        if !child.generated.is_empty() {
            println!(
                "# random_secret(n) printed as `<random_secret(n)>`: the engine draws it once, when the child does not exist yet, and keeps it"
            );
        }
        print!("{}", serde_norway::to_string(&child.object)?);
    }
    for wait in &rendered.waiting {
        println!(
            "# child: {} waits for {}: not rendered yet (pass --observed ID=FILE for the children it waits for)",
            wait.id,
            wait.waits_for.join(" and ")
        );
    }
    if !children_only && !rule.status_fields.is_empty() {
        println!("---");
        println!(
            "# status: server-side apply to the status subresource (the engine adds observedGeneration and conditions)"
        );
        print!(
            "{}",
            serde_norway::to_string(&render::status_patch(
                rule,
                &inputs.primary,
                &rendered.status
            ))?
        );
    }
    Ok(())
}

fn documents(file: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let docs = yaml::parse_documents(&text, Limits::default()).map_err(|e| {
        anyhow::anyhow!("{}:{}: invalid YAML: {}", file.display(), e.pos, e.message)
    })?;
    Ok(docs.iter().map(yaml::Node::to_json).collect())
}

/// One object from a file.
fn read_one(file: &Path) -> anyhow::Result<Value> {
    let mut docs = documents(file)?;
    match docs.len() {
        1 => Ok(docs.remove(0)),
        n => bail!(
            "{} holds {n} documents; expected one object",
            file.display()
        ),
    }
}

/// One object, or a list when the file holds several documents.
fn read_value(file: &Path) -> anyhow::Result<Value> {
    let mut docs = documents(file)?;
    Ok(if docs.len() == 1 {
        docs.remove(0)
    } else {
        Value::Array(docs)
    })
}
