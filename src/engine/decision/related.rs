//! What a rule's `watches` read for one primary, and what templates see of
//! it (`related.<name>`): one definition for the engine, which reads its
//! caches, and `kiln explain`, which reads the API server — so explain
//! renders exactly what the engine applies.
//!
//! Pure: rendering a watch's target ([`target`], within the tenant
//! boundary) and turning what was found into the template value and the
//! "missing" description ([`seen`]).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::engine::key::ObjKey;
use crate::rules::{LabelSelector, Watch, WatchTarget};
use crate::template::Piece;

/// Why a primary's watches cannot be read.
#[derive(Debug)]
pub enum Refusal {
    /// A reference did not render.
    Template(String),
    /// A reference points where the rule does not allow the primary to point.
    Namespace(String),
}

/// Where a watch looks for one primary.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// One object, by namespace and name.
    Named(ObjKey),
    /// The objects a label selector matches.
    Selected {
        /// Where to look (`None`: cluster-scoped kind, or every namespace).
        namespace: Option<String>,
        /// Every namespace (`allNamespaces`).
        all_namespaces: bool,
        /// The rendered selector.
        selector: LabelSelector,
    },
}

/// What was found at a [`Target`].
#[derive(Debug)]
pub enum Found {
    /// The named object, if it exists.
    Named(Option<Value>),
    /// Every object selected, in any order.
    Selected(Vec<Value>),
}

/// Renders `watch`'s target for the primary `primary` of a namespaced kind
/// or not (`namespaced`: whether the watched kind is), with `text`
/// rendering one template piece.
pub fn target(
    watch: &Watch,
    namespaced: bool,
    primary: &ObjKey,
    text: &mut impl FnMut(&Piece) -> Result<String, Refusal>,
) -> Result<Target, Refusal> {
    Ok(match &watch.target {
        WatchTarget::Ref { name, namespace } => Target::Named(ObjKey {
            namespace: namespace_of(watch, namespaced, namespace, primary, text)?,
            name: text(name)?,
        }),
        WatchTarget::Selector {
            match_labels,
            match_expressions,
            namespace,
            all_namespaces,
        } => {
            let mut labels = BTreeMap::new();
            for (k, piece) in match_labels {
                labels.insert(k.clone(), text(piece)?);
            }
            let namespace = match all_namespaces {
                true => None,
                false => namespace_of(watch, namespaced, namespace, primary, text)?,
            };
            Target::Selected {
                namespace,
                all_namespaces: *all_namespaces,
                selector: LabelSelector {
                    match_labels: labels,
                    match_expressions: match_expressions.clone(),
                },
            }
        }
    })
}

/// What templates see of `watch` (`None`: `related.<name>` is undefined)
/// and, when it is required and nothing was found, what is missing.
/// A selector that finds nothing is an empty list, not undefined: a
/// template may count what it selects. The selected objects are sorted by
/// name, then namespace.
pub fn seen(watch: &Watch, target: &Target, found: Found) -> (Option<Value>, Option<String>) {
    let kind = &watch.gvk.kind;
    match (target, found) {
        (Target::Named(key), Found::Named(found)) => {
            let missing = (found.is_none() && watch.required)
                .then(|| format!("{kind} {key} (related.{})", watch.name));
            (found, missing)
        }
        (Target::Selected { selector, .. }, Found::Selected(mut found)) => {
            let missing = (found.is_empty() && watch.required).then(|| {
                format!(
                    "{kind} with labels {:?} (related.{})",
                    selector.match_labels, watch.name
                )
            });
            found.sort_by(|a, b| {
                let at = |o: &Value| {
                    (
                        o["metadata"]["name"].as_str().map(str::to_string),
                        o["metadata"]["namespace"].as_str().map(str::to_string),
                    )
                };
                at(a).cmp(&at(b))
            });
            (Some(Value::Array(found)), missing)
        }
        // A target read the other way: nothing is known of it.
        _ => (None, None),
    }
}

/// The namespace a watch looks in: none for a cluster-scoped kind, the
/// rendered one (within the tenant boundary, see [`may_read`]), or the
/// primary's.
fn namespace_of(
    watch: &Watch,
    namespaced: bool,
    template: &Option<Piece>,
    primary: &ObjKey,
    text: &mut impl FnMut(&Piece) -> Result<String, Refusal>,
) -> Result<Option<String>, Refusal> {
    match template {
        _ if !namespaced => Ok(None),
        Some(Piece::Literal(ns)) => Ok(Some(ns.clone())),
        Some(piece) => may_read(watch, primary, Some(text(piece)?)),
        None => Ok(primary.namespace.clone()),
    }
}

/// Tenant boundary: a namespace that comes from a namespaced primary may be
/// read only when it is the primary's own or the rule allows it.
fn may_read(
    watch: &Watch,
    primary: &ObjKey,
    namespace: Option<String>,
) -> Result<Option<String>, Refusal> {
    match (&primary.namespace, &namespace) {
        (Some(own), Some(ns)) if own != ns && !watch.allow_namespaces.contains(ns) => {
            Err(Refusal::Namespace(format!(
                "related.{}: the namespace `{}` comes from the object, and it is not the object's own (`{own}`): a rule reads other namespaces only when it names them (a literal `namespace` or `allowNamespaces`)",
                watch.name,
                crate::rules::names::shown(ns)
            )))
        }
        _ => Ok(namespace),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::rules::Gvk;

    fn watch(target: WatchTarget, required: bool) -> Watch {
        Watch {
            name: "peers".into(),
            gvk: Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            target,
            required,
            allow_namespaces: vec!["shared".into()],
        }
    }

    fn selector_watch(required: bool) -> Watch {
        let labels = vec![("peer-of".to_string(), Piece::Literal("w".into()))];
        watch(
            WatchTarget::Selector {
                match_labels: labels,
                match_expressions: Vec::new(),
                namespace: None,
                all_namespaces: false,
            },
            required,
        )
    }

    fn primary() -> ObjKey {
        ObjKey {
            namespace: Some("team".into()),
            name: "w".into(),
        }
    }

    fn literal(p: &Piece) -> Result<String, Refusal> {
        match p {
            Piece::Literal(s) => Ok(s.clone()),
            _ => Ok("rendered".into()),
        }
    }

    #[test]
    fn a_selector_that_finds_nothing_is_an_empty_list_and_missing_only_when_required() {
        for required in [false, true] {
            let w = selector_watch(required);
            let t = target(&w, true, &primary(), &mut literal).unwrap();
            let (value, missing) = seen(&w, &t, Found::Selected(Vec::new()));
            assert_eq!(value, Some(json!([])));
            assert_eq!(missing.is_some(), required);
        }
    }

    #[test]
    fn selected_objects_are_sorted_by_name_then_namespace() {
        let w = selector_watch(false);
        let t = target(&w, true, &primary(), &mut literal).unwrap();
        let o = |ns: &str, name: &str| json!({"metadata": {"namespace": ns, "name": name}});
        let (value, _) = seen(
            &w,
            &t,
            Found::Selected(vec![o("b", "y"), o("b", "x"), o("a", "y")]),
        );
        assert_eq!(value, Some(json!([o("b", "x"), o("a", "y"), o("b", "y")])));
    }

    #[test]
    fn a_named_object_that_is_missing_is_undefined_and_described_when_required() {
        let w = watch(
            WatchTarget::Ref {
                name: Piece::Literal("creds".into()),
                namespace: None,
            },
            true,
        );
        let t = target(&w, true, &primary(), &mut literal).unwrap();
        assert_eq!(
            t,
            Target::Named(ObjKey {
                namespace: Some("team".into()),
                name: "creds".into()
            })
        );
        let (value, missing) = seen(&w, &t, Found::Named(None));
        assert_eq!(value, None);
        assert_eq!(
            missing.as_deref(),
            Some("ConfigMap team/creds (related.peers)")
        );
    }

    #[test]
    fn a_namespace_from_the_object_stays_within_the_tenant_boundary() {
        let set = crate::rules::load_sources_with(
            vec![crate::rules::load::Source {
                file: "r.yaml".into(),
                text: r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  watches:
    - name: creds
      apiVersion: v1
      kind: Secret
      ref: {name: creds, namespace: "{{ self.spec.ns }}"}
      allowNamespaces: [shared]
  children: []
"#
                .into(),
            }],
            Vec::new(),
        )
        .unwrap();
        let w = &set.rules[0].watches[0];
        let to = |ns: &'static str| {
            move |p: &Piece| match p {
                Piece::Literal(s) => Ok::<_, Refusal>(s.clone()),
                _ => Ok(ns.to_string()),
            }
        };
        assert!(matches!(
            target(w, true, &primary(), &mut to("elsewhere")),
            Err(Refusal::Namespace(_))
        ));
        for allowed in ["team", "shared"] {
            assert!(target(w, true, &primary(), &mut to(allowed)).is_ok());
        }
        // A cluster-scoped kind has no namespace to cross.
        let t = target(w, false, &primary(), &mut to("elsewhere")).unwrap();
        assert_eq!(
            t,
            Target::Named(ObjKey {
                namespace: None,
                name: "creds".into()
            })
        );
    }
}
