//! `kiln render`: what the engine would apply for one object, without a cluster.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use kiln::engine::decision::Plan;
use kiln::render::{self, Inputs, Rendered};
use kiln::rules::{self, Rule};
use kiln::template::generate::Draw;
use kiln::yaml::{self, Limits};
use serde_json::Value;

use super::offline;
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
    let matching = matching(&set, &primary, args.rule.as_deref())?;
    let mut crds = Vec::new();
    for file in &args.crds {
        crds.extend(documents(file)?);
    }
    if primary["metadata"]["uid"].is_null() {
        eprintln!(
            "note: {} has no metadata.uid, so ownerReferences are left out (the engine sets them)",
            args.object.display()
        );
    }
    let inputs = inputs_of(args, primary)?;

    let mut failed = false;
    let namespace = inputs.primary["metadata"]["namespace"].as_str();
    let labels: std::collections::BTreeMap<String, String> =
        serde_json::from_value(inputs.primary["metadata"]["labels"].clone()).unwrap_or_default();
    // Several rules on the kind (none picked with --rule): the object needs
    // only one of them to select it.
    let several = matching.len() > 1;
    let mut selected = 0;
    for rule in &matching {
        if let Some(why) = rule.primary.refusal(namespace, &labels) {
            eprintln!(
                "rule `{}` does not select {}: {why}; the engine would not reconcile it",
                rule.name,
                args.object.display()
            );
            failed |= !several;
            continue;
        }
        selected += 1;
        // The API server fills in the schema's defaults, and converts an
        // object given at another version, before anyone reads it; so
        // does render.
        let read = match offline::read_by(&set, rule, &crds, &inputs.primary) {
            Ok(read) => read,
            Err(e) => {
                eprintln!("rule `{}`: {e}", rule.name);
                failed = true;
                continue;
            }
        };
        if read["apiVersion"] != inputs.primary["apiVersion"] {
            println!(
                "# note: rule `{}` reads {} at {}: converted as the API server serves it",
                rule.name,
                args.object.display(),
                rule.primary.gvk.api_version()
            );
        }
        let inputs = Inputs {
            primary: read,
            ..inputs.clone()
        };
        if let (Some(ns), Some(_)) = (namespace, &rule.primary.namespace_selector) {
            eprintln!(
                "note: rule `{}` takes objects only in namespaces matching spec.for.namespaceSelector; the labels of `{ns}` are not known offline, so that is not checked",
                rule.name
            );
        }
        failed |= !render_rule(rule, &inputs, args, &crds)?;
    }
    Ok(if failed || selected == 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The rules on the object's kind (only the one `--rule` names, if given);
/// an error naming every rule when none is.
fn matching<'a>(
    set: &'a rules::RuleSet,
    primary: &Value,
    only: Option<&str>,
) -> anyhow::Result<Vec<&'a Rule>> {
    let matching = offline::matching(set, primary, only);
    if matching.is_empty() {
        let api_version = primary["apiVersion"].as_str().unwrap_or_default();
        let kind = primary["kind"].as_str().unwrap_or_default();
        let known: Vec<String> = set
            .rules
            .iter()
            .map(|r| format!("{} ({})", r.name, r.primary.gvk))
            .collect();
        bail!(
            "no rule takes {api_version}/{kind}{}; rules: {}",
            only.map(|r| format!(" named `{r}`")).unwrap_or_default(),
            known.join(", ")
        );
    }
    Ok(matching)
}

/// What rendering reads: the primary, and the related objects and live
/// children given as files.
fn inputs_of(args: &RenderArgs, primary: Value) -> anyhow::Result<Inputs> {
    let mut inputs = Inputs {
        primary,
        // No cluster keeps a drawn value here, and the output must not
        // change from run to run: `random_secret(n)` prints a placeholder.
        draw: Draw::Placeholder,
        now: Some(args.now.unwrap_or_else(kiln::template::time::current)),
        ..Inputs::default()
    };
    for (name, file) in &args.related {
        inputs.related.insert(name.clone(), read_value(file)?);
    }
    for (id, file) in &args.observed {
        inputs.observed.insert(id.clone(), read_value(file)?);
    }
    Ok(inputs)
}

/// Prints what `rule`, which selects the object, renders and plans for it;
/// false when it fails.
fn render_rule(
    rule: &Rule,
    inputs: &Inputs,
    args: &RenderArgs,
    crds: &[Value],
) -> anyhow::Result<bool> {
    println!("# rule: {}", rule.name);
    let inputs = offline::with_empty_selections(rule, inputs);
    let (decided, as_rendered) = offline::decide_reading_rendered(rule, &inputs);
    for id in &as_rendered {
        println!(
            "# note: children.{id} is read as rendered (no --observed {id}=FILE given): the children that wait for it render as they will once it exists"
        );
    }
    match decided {
        Ok((rendered, plan)) => {
            let status = (!args.children_only).then(|| offline::status_schema(rule, crds));
            print_rendered(rule, &inputs, &rendered, &plan, status.as_ref())?;
            Ok(args.children_only || print_decorations(rule, &inputs, &plan, &args.field_manager)?)
        }
        Err(plan) => {
            eprint!("rule `{}`: {}", rule.name, super::verdict::lines(&plan, ""));
            if let kiln::engine::decision::Outcome::Failed { message, .. } = &plan.status.outcome
                && let Some(at) = super::render_at::locate(rule, message)
            {
                eprintln!("{at}");
            }
            Ok(false)
        }
    }
}

fn print_rendered(
    rule: &Rule,
    inputs: &Inputs,
    rendered: &Rendered,
    plan: &Plan,
    status: Option<&offline::StatusView>,
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
        if let Some(v) = plan
            .children
            .iter()
            .find(|v| v.id == child.id && v.name == child.name)
        {
            println!("# plan: {}", super::verdict::line(plan, v));
        }
        if !child.generated.is_empty() {
            println!(
                "# random_secret(n) printed as `<random_secret(n)>`: the engine draws it once, when the child does not exist yet, and keeps it"
            );
        }
        print!("{}", kiln::yaml_out::to_string(&child.object)?);
    }
    for v in plan.children.iter().filter(|v| v.ready.is_none()) {
        println!("# plan: {}", super::verdict::line(plan, v));
    }
    let has_status = !rule.status_fields.is_empty() || !rule.conditions.is_empty();
    if let Some(view) = status.filter(|_| has_status) {
        print_status(rule, &inputs.primary, plan, view)?;
    }
    if status.is_some()
        && let Some(wake) = rendered.wake
    {
        println!(
            "# requeue.at: reconciles again at {} ({}s after now())",
            wake.at,
            wake.after.as_secs()
        );
    }
    Ok(())
}

/// Prints the status the engine would write, cut to the primary's status
/// schema as the engine cuts it, or that it writes none.
fn print_status(
    rule: &Rule,
    primary: &Value,
    plan: &Plan,
    view: &offline::StatusView,
) -> anyhow::Result<()> {
    println!("---");
    let Some(schema) = &view.schema else {
        println!(
            "# status: none: kiln writes no status on {} (a built-in kind, or its CRD has no status subresource)",
            rule.primary.gvk
        );
        return Ok(());
    };
    println!(
        "# status: server-side apply to the status subresource (as the engine composes it; `<now>` is the time of the write)"
    );
    if !view.known {
        println!(
            "# note: the primary's CustomResourceDefinition was not given (--crd FILE): the status is not cut to its schema, as the engine cuts it"
        );
    }
    let patch = offline::status_patch(rule, primary, plan, schema);
    print!("{}", kiln::yaml_out::to_string(&patch)?);
    Ok(())
}

/// Prints what each decorator would apply to the objects given (the
/// primary, `--related` ones), and the engine's verdict on each object
/// decorated; false when a decorator fails to render.
fn print_decorations(
    rule: &Rule,
    inputs: &Inputs,
    plan: &Plan,
    field_manager: &str,
) -> anyhow::Result<bool> {
    let this = kiln::template::to_jinja(&inputs.primary);
    let decorations = kiln::template::limits::render_stack(|| {
        kiln::engine::decision::decorations(
            plan,
            rule,
            field_manager,
            || render::context(rule, &this, inputs),
            inputs,
        )
    });
    let decorations = match decorations {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rule `{}`: decorating: {e}", rule.name);
            return Ok(false);
        }
    };
    for d in &decorations.apply {
        println!("---");
        println!(
            "# decorator: server-side apply to {} {} as field manager {}{}",
            d.gvk.kind,
            d.name,
            d.manager,
            if d.force { ", forced" } else { "" }
        );
        print!("{}", kiln::yaml_out::to_string(&d.body)?);
    }
    for v in &decorations.verdicts {
        println!("# plan: {}", super::verdict::decoration(v));
    }
    Ok(true)
}

/// Every YAML document of a file, as JSON.
pub fn documents(file: &Path) -> anyhow::Result<Vec<Value>> {
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

fn read_value(file: &Path) -> anyhow::Result<Value> {
    let mut docs = documents(file)?;
    Ok(if docs.len() == 1 {
        docs.remove(0)
    } else {
        Value::Array(docs)
    })
}
