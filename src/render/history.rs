//! `children[].history`, rendered: each live child the rule no longer
//! renders, filed in the first class whose `when` holds for it, with the
//! class's `keep`. What stays is decided by `engine::decision::history`.

use minijinja::Value as JinjaValue;
use serde_json::{Map, Value};

use super::DesiredChild;
use crate::rules::Rule;
use crate::rules::history::HistoryClass;
use crate::template::{Budget, RenderError, TemplateSet, to_jinja};

/// A live child no longer rendered, filed in a class of its history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filed {
    /// The child's id in the rule.
    pub id: String,
    /// Its namespace.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The class (its index in `history`).
    pub class: usize,
    /// How many of the class stay.
    pub keep: usize,
    /// Its `metadata.creationTimestamp` (RFC 3339, UTC: sorts as text).
    pub created: String,
}

/// The live children of every child with a `history` that `rendered` does
/// not hold, each filed in its class; a child no class takes is left out
/// (pruned as usual).
pub(super) fn file(
    rule: &Rule,
    set: &TemplateSet,
    ctx: &JinjaValue,
    observed: &Map<String, Value>,
    rendered: &[DesiredChild],
    budget: &mut Budget,
) -> Result<Vec<Filed>, RenderError> {
    let mut out = Vec::new();
    for child in rule.children.iter().filter(|c| !c.history.is_empty()) {
        let keeps = child
            .history
            .iter()
            .map(|h| keep(set, h, ctx, budget))
            .collect::<Result<Vec<_>, _>>()?;
        let live = match observed.get(&child.id) {
            Some(Value::Array(items)) => items.iter().collect(),
            Some(Value::Null) | None => Vec::new(),
            Some(one) => vec![one],
        };
        for obj in live {
            let meta = &obj["metadata"];
            let name = meta["name"].as_str().unwrap_or_default().to_string();
            let namespace = meta["namespace"].as_str().map(str::to_string);
            if rendered
                .iter()
                .any(|c| c.id == child.id && c.name == name && c.namespace == namespace)
            {
                continue;
            }
            let c = minijinja::context! { child => to_jinja(obj), ..ctx.clone() };
            let mut class = None;
            for (i, h) in child.history.iter().enumerate() {
                let takes = match &h.when {
                    None => true,
                    Some(when) => set.eval_bool(when, &c)?,
                };
                if takes {
                    class = Some(i);
                    break;
                }
            }
            let Some(class) = class else { continue };
            out.push(Filed {
                id: child.id.clone(),
                namespace,
                name,
                class,
                keep: keeps[class],
                created: meta["creationTimestamp"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            });
        }
    }
    Ok(out)
}

/// A class's `keep`, a non-negative integer.
fn keep(
    set: &TemplateSet,
    h: &HistoryClass,
    ctx: &JinjaValue,
    budget: &mut Budget,
) -> Result<usize, RenderError> {
    let value = set.eval(&h.keep, ctx, budget)?;
    value
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            RenderError::new(
                h.keep.path(),
                format!("gives {value}, not a non-negative integer"),
            )
        })
}
