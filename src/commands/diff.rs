//! `kiln diff --rules DIR`: what the given rules would change in the
//! cluster, before they run. For every primary the rules select: the
//! children kiln would create, change (a YAML diff of the fields it would
//! send against the live object's values) or prune, the objects its
//! decorators would patch (judged by the fields of `--field-manager`, the
//! one `kiln run` applies as) and the status it would write. The snapshot and plan are those of `kiln explain`
//! (`super::observe`), the engine's own. It reads, never writes.
//!
//! Exit codes as `kubectl diff`: 0 nothing would change, 1 something
//! would, 2 an error (invalid rules, a read that failed).

use std::collections::BTreeMap;
use std::process::ExitCode;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kiln::engine::ObjKey;
use kiln::engine::decision::{
    ChildVerdict, Done, StatusSchema, StatusWrites, Verdict, status_writes,
};
use kiln::rules::{Gvk, Rule};
use kube::Client;
use kube::api::ListParams;
use kube::discovery::Scope;
use serde_json::Value;

use super::live_diff;
use super::observe::{self, Reading};
use crate::cli::DiffArgs;

/// Exit code when something would change.
const CHANGES: u8 = 1;
/// Exit code of an error.
const ERROR: u8 = 2;

/// Prints what would change; see the module's exit codes.
pub fn run(args: &DiffArgs) -> anyhow::Result<ExitCode> {
    let set = match super::render::load_rules(&args.rules) {
        Ok(set) => set,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(ERROR));
        }
    };
    let outcome = observe::with_client(
        args.kubeconfig.as_deref(),
        args.context.as_deref(),
        async |client| {
            let at = Target {
                namespace: args.namespace.as_deref(),
                field_manager: &args.field_manager,
            };
            let mut totals = Totals::default();
            // One rule that cannot be diffed (a read refused, a kind not
            // served) leaves every other rule diffed.
            for rule in &set.rules {
                let mut out = String::new();
                match diff_rule(&client, rule, &at, &mut out).await {
                    Ok(changed) => totals.changed |= changed,
                    Err(e) => {
                        eprintln!("error: rule {}: {e:#}", rule.name);
                        totals.failed = true;
                    }
                }
                print!("{out}");
            }
            anyhow::Ok(totals)
        },
    );
    Ok(match outcome {
        Ok(Totals { failed: true, .. }) => ExitCode::from(ERROR),
        Ok(Totals { changed: false, .. }) => ExitCode::SUCCESS,
        Ok(Totals { changed: true, .. }) => ExitCode::from(CHANGES),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(ERROR)
        }
    })
}

/// What the rules diffed came to.
#[derive(Default)]
struct Totals {
    /// Something would change.
    changed: bool,
    /// A rule could not be diffed.
    failed: bool,
}

/// Where a diff reads: the namespace (`None`: all), and the field manager
/// the engine applies as.
struct Target<'a> {
    namespace: Option<&'a str>,
    field_manager: &'a str,
}

/// Appends what `rule` would change to `out` (its CRD first, when it
/// defines its API); true when anything would.
async fn diff_rule(
    client: &Client,
    rule: &Rule,
    at: &Target<'_>,
    out: &mut String,
) -> anyhow::Result<bool> {
    let crd = super::diff_crd::crd_diff(client, rule, at.field_manager).await?;
    out.push_str(&crd);
    let gvk = &rule.primary.gvk;
    let Some((ar, caps)) = observe::served(client, gvk).await? else {
        // As the engine does: the rule waits until its kind is served.
        let why = match &rule.api {
            Some(_) => "kind not served yet: kiln creates its CRD, then the rule runs",
            None => "kind not served: the rule will wait",
        };
        out.push_str(&format!("# {gvk} (rule {}): {why}\n", rule.name));
        return Ok(!crd.is_empty());
    };
    let waiting = unserved(client, rule).await?;
    if !waiting.is_empty() {
        out.push_str(&format!(
            "# {gvk} (rule {}): kind not served: {}: the rule will wait\n",
            rule.name,
            waiting.join(", ")
        ));
        return Ok(!crd.is_empty());
    }
    let changed = diff_primaries(client, rule, at, (ar, caps), out).await?;
    Ok(changed || !crd.is_empty())
}

/// The kinds of the rule's children and watches the cluster does not
/// serve (the engine starts a rule once all its kinds are served).
async fn unserved(client: &Client, rule: &Rule) -> anyhow::Result<Vec<String>> {
    let kinds = rule.children.iter().map(|c| &c.gvk);
    let mut out: Vec<String> = Vec::new();
    for gvk in kinds.chain(rule.watches.iter().map(|w| &w.gvk)) {
        let name = gvk.to_string();
        if !out.contains(&name) && observe::served(client, gvk).await?.is_none() {
            out.push(name);
        }
    }
    Ok(out)
}

/// Appends what `rule` would change for each primary it selects; true
/// when anything would.
async fn diff_primaries(
    client: &Client,
    rule: &Rule,
    at: &Target<'_>,
    (ar, caps): (kube::core::ApiResource, kube::discovery::ApiCapabilities),
    out: &mut String,
) -> anyhow::Result<bool> {
    let status = live_status(client, &rule.primary.gvk, &ar.plural, &caps).await?;
    let namespace = at.namespace.filter(|_| caps.scope == Scope::Namespaced);
    let listed = observe::api(client, &ar, &caps.scope, namespace)
        .list(&ListParams::default())
        .await?;
    let mut namespace_labels: BTreeMap<String, Option<BTreeMap<String, String>>> = BTreeMap::new();
    let mut changed = false;
    for object in listed.items {
        let key = ObjKey::of(&object);
        let labels = object.metadata.labels.clone().unwrap_or_default();
        if rule
            .primary
            .refusal(key.namespace.as_deref(), &labels)
            .is_some()
        {
            continue;
        }
        if let (Some(ns), Some(_)) = (&key.namespace, &rule.primary.namespace_selector) {
            if !namespace_labels.contains_key(ns) {
                let got = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
                    .get_opt(ns)
                    .await?
                    .map(|n| n.metadata.labels.unwrap_or_default());
                namespace_labels.insert(ns.clone(), got);
            }
            let labels = namespace_labels[ns].as_ref().map(|l| l as _);
            if rule.primary.namespace_refusal(ns, labels).is_some() {
                continue;
            }
        }
        let primary = serde_json::to_value(&object)?;
        let title = format!("{} {key} (rule {})", rule.primary.gvk.kind, rule.name);
        let reading = match observe::read(client, rule, &primary, at.field_manager).await? {
            Ok(reading) => reading,
            Err(why) => anyhow::bail!("{title}: its watches cannot be read: {why}"),
        };
        let text = match &reading.decorations {
            Ok(_) => primary_diff(rule, &reading, status.as_ref())?,
            Err(why) => anyhow::bail!("{title}: decorating: {why}"),
        };
        if !text.is_empty() {
            out.push_str(&format!("# {title}\n{text}"));
            changed = true;
        }
    }
    Ok(changed)
}

/// What the plan changes for one primary, as text (empty: nothing).
fn primary_diff(
    rule: &Rule,
    reading: &Reading,
    status: Option<&StatusSchema>,
) -> anyhow::Result<String> {
    let plan = &reading.plan;
    let mut out = String::new();
    if plan.suspended {
        return Ok(out);
    }
    for v in &plan.children {
        out.push_str(&child_diff(reading, v)?);
    }
    for r in &plan.reown {
        out.push_str(&format!(
            "~ {} {}: ownership: {}\n",
            r.gvk.kind,
            r.key,
            r.to.describe()
        ));
    }
    let decorations = reading.decorations.iter().flat_map(|d| &d.verdicts);
    for d in decorations.filter(|d| !matches!(d.done, Done::Applied)) {
        out.push_str(&format!("~ {}\n", super::verdict::decoration(d)));
    }
    if let Some(schema) = status {
        out.push_str(&status_diff(rule, reading, schema)?);
    }
    Ok(out)
}

/// What the engine may write to the primary's status (`None`: none),
/// decided as the engine decides it, from the kind's CRD in the cluster. A
/// CRD the user may not read is taken as its group's name suggests, with a
/// schema that keeps everything.
async fn live_status(
    client: &Client,
    gvk: &Gvk,
    plural: &str,
    caps: &kube::discovery::ApiCapabilities,
) -> anyhow::Result<Option<StatusSchema>> {
    let subresource = caps.subresources.iter().any(|(s, _)| s.plural == "status");
    let name = format!("{plural}.{}", gvk.group);
    let crds = kube::Api::<CustomResourceDefinition>::all(client.clone());
    let crd = match gvk.may_be_crd() {
        false => None,
        true => match crds.get_opt(&name).await {
            Ok(crd) => crd.map(serde_json::to_value).transpose()?,
            Err(kube::Error::Api(s)) if s.code == 403 => {
                return Ok((gvk.is_custom() && subresource).then(StatusSchema::open));
            }
            Err(e) => return Err(e.into()),
        },
    };
    Ok(match status_writes(gvk, subresource, crd.is_some()) {
        StatusWrites::Yes => Some(match &crd {
            Some(crd) => StatusSchema::from_crd(crd, &gvk.version)?,
            None => StatusSchema::open(),
        }),
        StatusWrites::NoSubresource | StatusWrites::Builtin => None,
    })
}

/// One child's change, as text (empty: none).
fn child_diff(reading: &Reading, v: &ChildVerdict) -> anyhow::Result<String> {
    let head =
        |sign: &str, what: &str| format!("{sign} {} {} ({}): {what}\n", v.gvk.kind, v.name, v.id);
    Ok(match &v.verdict {
        Verdict::Create => {
            let Some((desired, _)) = live_diff::pair(reading, v) else {
                return Ok(String::new());
            };
            let body = serde_norway::to_string(&desired.object)?;
            head("+", "created") + &live_diff::line_diff("", &body)
        }
        Verdict::Change => {
            let Some((desired, Some(live))) = live_diff::pair(reading, v) else {
                return Ok(String::new());
            };
            let what = live_diff::changed_fields(reading, v).unwrap_or_default();
            let before =
                serde_norway::to_string(&live_diff::sent_fields_of(&live, &desired.object))?;
            let after = serde_norway::to_string(&desired.object)?;
            head("~", &format!("changed ({what})")) + &live_diff::line_diff(&before, &after)
        }
        Verdict::Prune => head("-", "pruned"),
        _ => String::new(),
    })
}

/// The primary's status as kiln would write it against the live one
/// (transition times left out), as a diff (empty: the same).
fn status_diff(rule: &Rule, reading: &Reading, schema: &StatusSchema) -> anyhow::Result<String> {
    let primary = &reading.observed.inputs.primary;
    let patch = super::offline::status_patch(rule, primary, &reading.plan, schema);
    let mut after = patch["status"].clone();
    let mut before = live_diff::sent_fields_of(&primary["status"], &after);
    for status in [&mut before, &mut after] {
        for c in status["conditions"].as_array_mut().into_iter().flatten() {
            if let Some(c) = c.as_object_mut() {
                c.remove("lastTransitionTime");
            }
        }
    }
    if kiln::engine::decision::equal(&before, &after) {
        return Ok(String::new());
    }
    let wrap = |s: Value| serde_json::json!({"status": s});
    let diff = live_diff::line_diff(
        &serde_norway::to_string(&wrap(before))?,
        &serde_norway::to_string(&wrap(after))?,
    );
    Ok(format!("~ status:\n{diff}"))
}
