//! What kiln adds to a rendered child before it is applied: its namespace
//! (checked against the primary's), kiln's mark of the primary, names the
//! API server takes, and the hash of it all.

use serde_json::{Value, json};

use super::{APPLIED_ANNOTATION, RenderFailure, ScopeOf};
use crate::rules::{Gvk, Rule};

/// The primary, as its children's marks name it.
pub(super) struct Owner {
    namespace: Option<String>,
    name: String,
    /// Empty when the primary has none (a file given to `kiln render`).
    uid: String,
    api_version: String,
    kind: String,
}

impl Owner {
    pub(super) fn of(primary: &Value, gvk: &Gvk) -> Self {
        let meta = &primary["metadata"];
        Self {
            namespace: meta["namespace"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            name: meta["name"].as_str().unwrap_or_default().to_string(),
            uid: meta["uid"].as_str().unwrap_or_default().to_string(),
            api_version: gvk.api_version(),
            kind: gvk.kind.clone(),
        }
    }

    /// The mark of its child `id` of `rule`, placed as the rule says.
    fn mark(&self, rule: &Rule, child: &crate::rules::Child) -> crate::ownership::Mark {
        use crate::ownership::Placement;
        let placement = if child.deletion_policy == crate::rules::DeletionPolicy::Orphan {
            Placement::Orphaned
        } else if child.outside {
            Placement::Outside {
                api_version: self.api_version.clone(),
                kind: self.kind.clone(),
                namespace: self.namespace.clone(),
            }
        } else {
            Placement::Owned {
                api_version: self.api_version.clone(),
                kind: self.kind.clone(),
            }
        };
        crate::ownership::Mark {
            rule: rule.name.clone(),
            child: child.id.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            placement,
        }
    }
}

/// Checks a rendered child and adds what kiln owns: namespace, labels, owner,
/// and the hash of it all. Returns the object, its namespace and its name.
pub(super) fn finish_child(
    rule: &Rule,
    child: &crate::rules::Child,
    mut object: Value,
    owner: &Owner,
    scope_of: ScopeOf<'_>,
) -> Result<(Value, Option<String>, String), RenderFailure> {
    let (id, gvk) = (child.id.as_str(), &child.gvk);
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Err(RenderFailure::child(id, "metadata must render to a map"));
    };
    match meta.get("name") {
        Some(Value::String(n)) if !n.is_empty() => {}
        Some(other) => {
            return Err(RenderFailure::child(
                id,
                format!("metadata.name rendered to {other}, not a non-empty string"),
            ));
        }
        None => return Err(RenderFailure::child(id, "metadata.name is missing")),
    }
    let namespaced = scope_of(gvk).unwrap_or(true);
    let rendered_ns = meta
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    use crate::rules::scope::{Misplaced, placement};
    let outside = child.outside;
    // An `outside` child goes where its template says (its name and
    // namespace come from the primary's identity only, checked at load).
    let here = if outside && rendered_ns.is_some() {
        rendered_ns.as_deref()
    } else {
        owner.namespace.as_deref()
    };
    let placed = placement(here, namespaced, rendered_ns.as_deref())
        .or_else(|m| match m {
            Misplaced::ClusterScopedChild if outside => Ok(None),
            m => Err(m),
        })
        .map_err(|m| {
            let message = match m {
                Misplaced::OtherNamespace { child, primary } => format!(
                    "would be created in namespace `{child}`, but its primary is in `{primary}`: a namespaced primary may only own children in its own namespace"
                ),
                Misplaced::ClusterScopedChild => format!(
                    "{gvk} is cluster-scoped; a namespaced primary cannot own cluster-scoped children"
                ),
                Misplaced::NamespaceMissing => {
                    format!("{gvk} is namespaced and the primary is not: set metadata.namespace")
                }
                Misplaced::NamespaceOnClusterScoped => {
                    format!("{gvk} is cluster-scoped: remove metadata.namespace")
                }
            };
            RenderFailure::child(id, message)
        })?;
    if let Some(ns) = placed {
        meta.insert("namespace".into(), Value::String(ns));
    }
    crate::ownership::stamp(meta, &owner.mark(rule, child))
        .map_err(|e| RenderFailure::child(id, e.to_string()))?;
    let namespace = meta
        .get("namespace")
        .and_then(Value::as_str)
        .map(str::to_string);
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    check_names(id, gvk, namespace.as_deref(), &name)?;
    stamp(&mut object).map_err(|message| RenderFailure::child(id, message))?;
    Ok((object, namespace, name))
}

/// A child a hook returned for `primary`, finished as a rendered one:
/// placed, marked with `child`'s id, named as the API server takes names.
pub(crate) fn hooked(
    rule: &Rule,
    child: &crate::rules::Child,
    object: Value,
    primary: &Value,
    scope_of: ScopeOf<'_>,
) -> Result<super::DesiredChild, RenderFailure> {
    let owner = Owner::of(primary, &rule.primary.gvk);
    let (object, namespace, name) = finish_child(rule, child, object, &owner, scope_of)?;
    Ok(super::DesiredChild {
        id: child.id.clone(),
        gvk: child.gvk.clone(),
        namespace,
        name,
        object,
        generated: Vec::new(),
    })
}

/// Refuses a name or namespace the API server would not take, before it
/// becomes part of a URL.
fn check_names(
    id: &str,
    gvk: &Gvk,
    namespace: Option<&str>,
    name: &str,
) -> Result<(), RenderFailure> {
    use crate::rules::names::{dns_label, object_name, shown};
    let refuse = |what: &str, value: &str, why: String| RenderFailure::Name {
        id: id.to_string(),
        message: format!("{what} `{}` is not valid: it {why}", shown(value)),
    };
    if let Some(ns) = namespace {
        dns_label(ns).map_err(|why| refuse("metadata.namespace", ns, why))?;
    }
    object_name(gvk, name).map_err(|why| refuse("metadata.name", name, why))
}

/// Sets [`APPLIED_ANNOTATION`] to a hash of the object without it.
fn stamp(object: &mut Value) -> Result<(), &'static str> {
    use sha2::Digest;
    let annotations = object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .map(|m| m.entry("annotations").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
        .ok_or("metadata.annotations must render to a map")?;
    annotations.remove(APPLIED_ANNOTATION);
    if annotations.is_empty() {
        // Keep the object as rendered: no empty map the template did not ask for.
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("annotations");
        }
    }
    let digest = sha2::Sha256::digest(object.to_string().as_bytes());
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    object["metadata"]
        .as_object_mut()
        .ok_or("metadata must render to a map")?
        .entry("annotations")
        .or_insert_with(|| json!({}))[APPLIED_ANNOTATION] = Value::String(hash);
    Ok(())
}
