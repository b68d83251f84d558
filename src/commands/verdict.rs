//! A plan, for people: one line per child saying what the engine does with
//! it. `kiln explain` and `kiln render` print the engine's own plan
//! through this, so neither restates a verdict of its own.

use kiln::engine::decision::{
    ChildVerdict, DecorationVerdict, Decorations, Done, Outcome, Plan, Verdict, reasons,
};

/// The plan's lines, each starting with `indent`.
pub fn lines(plan: &Plan, indent: &str) -> String {
    lines_with(plan, indent, |_| None)
}

/// [`lines`], with what `more` says of a child after its line, in brackets.
pub fn lines_with(
    plan: &Plan,
    indent: &str,
    more: impl Fn(&ChildVerdict) -> Option<String>,
) -> String {
    let mut out = String::new();
    if plan.suspended {
        out.push_str(&format!(
            "{indent}suspended: {}\n",
            kiln::engine::decision::suspended_message()
        ));
    }
    match &plan.status.outcome {
        Outcome::Waiting { .. } if plan.suspended => {}
        Outcome::Waiting { missing } => {
            out.push_str(&format!(
                "{indent}waiting: nothing is rendered until these exist: {}\n",
                missing.join(", ")
            ));
        }
        Outcome::Awaiting {
            reason,
            message,
            detail,
        } => {
            out.push_str(&format!(
                "{indent}waiting ({reason}): nothing is applied or pruned: {message}; {detail}\n"
            ));
        }
        Outcome::Failed { reason, message } => {
            out.push_str(&format!("{indent}failed ({reason}): {message}\n"));
        }
        Outcome::Applied { .. } => {}
    }
    for child in &plan.children {
        let more = more(child).map(|m| format!(" ({m})")).unwrap_or_default();
        out.push_str(&format!("{indent}{}{more}\n", line(plan, child)));
    }
    out
}

/// One child's line: id, kind, name and what the engine does with it.
pub fn line(plan: &Plan, c: &ChildVerdict) -> String {
    let readiness = match c.ready {
        Some(true) => ", ready",
        Some(false) => ", not ready",
        None => "",
    };
    let what = match &c.verdict {
        Verdict::Create => "missing: kiln would create it".to_string(),
        Verdict::Applied => format!("applied{readiness}"),
        Verdict::Change => {
            "would change: the live object lacks or differs in a field the rule sets".to_string()
        }
        Verdict::CreatedOnce(true) => {
            let how = plan
                .reown
                .iter()
                .find(|r| r.gvk == c.gvk && r.key.name == c.name)
                .map_or("owning", |r| r.to.describe());
            format!(
                "created once: kiln writes only its owner ({how} it, as its deletionPolicy now says){readiness}"
            )
        }
        Verdict::CreatedOnce(false) => {
            format!("created once: kiln does not write it again{readiness}")
        }
        Verdict::Forgone => {
            "created once and deleted since: kiln does not create it again (recreate: false)"
                .to_string()
        }
        Verdict::Replace => {
            "would remove keys the rule does not render under its `replace` fields".to_string()
        }
        Verdict::Waits(what) => {
            return format!(
                "{}: waits for {what}: not applied yet (kept as it is if it exists)",
                c.id
            );
        }
        Verdict::Prune => "no longer rendered: kiln would delete it".to_string(),
        Verdict::Left => {
            "no longer rendered: left as it is (orphaned, or being deleted)".to_string()
        }
        Verdict::Kept => {
            "no longer rendered: kept as history (among the newest its class keeps)".to_string()
        }
        Verdict::Suspended => "suspended: left as it is".to_string(),
    };
    format!("{} {} {}: {what}", c.id, c.gvk.kind, c.name)
}

/// The decorations' lines, each starting with `indent`: one per object a
/// decorator sets fields on or takes its fields back from, or why the
/// decorators cannot render (the engine's failure).
pub fn decorations(decorations: &Result<Decorations, String>, indent: &str) -> String {
    match decorations {
        Err(message) => format!(
            "{indent}failed ({}): decorating: {message}\n",
            reasons::INVALID
        ),
        Ok(d) => d
            .verdicts
            .iter()
            .map(|v| format!("{indent}{}\n", decoration(v)))
            .collect(),
    }
}

/// One decoration's line: the decorator, the object and what the engine
/// does with it.
pub fn decoration(v: &DecorationVerdict) -> String {
    let at = v
        .namespace
        .as_ref()
        .map_or(String::new(), |n| format!("{n}/"));
    let what = match v.done {
        Done::Applied => "applied",
        Done::Apply => "would set the fields it lacks",
        Done::TakeBack => "no longer decorated: kiln would take its fields back",
    };
    format!("decorate {} {} {at}{}: {what}", v.id, v.gvk.kind, v.name)
}
