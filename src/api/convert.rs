//! Declarative conversion between the versions of a rule-defined API: each
//! version but the storage one has two templates, `toStorage` and
//! `fromStorage`, rendered with `self` the object in the version converted
//! from. They render the object's fields (`spec`, and `status`, which passes
//! through as it is when not rendered); `apiVersion` is set to the version
//! converted to and `metadata` passes through unchanged, as the API server
//! requires. Pure: the webhook (`super::webhook`) and `kiln validate`
//! (`super::roundtrip`) call it.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::SchemaError;
use super::spec::RawApi;
use crate::template::{Budget, TemplateSet, Tree, to_jinja};
use crate::yaml::{Step, path_string};

/// Fields a conversion template may not render: they pass through.
const PASSED_THROUGH: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// One version's two templates.
struct Pair {
    to_storage: Tree,
    from_storage: Tree,
}

/// The compiled conversions of one API.
pub struct Conversions {
    /// The CRD's name, `<plural>.<group>`.
    crd: String,
    group: String,
    kind: String,
    storage: String,
    set: TemplateSet,
    pairs: BTreeMap<String, Pair>,
    /// Where each template is written in the rule, by template path.
    steps: BTreeMap<String, Vec<Step>>,
    /// Where each template is written (`file:line:col`), by template path.
    locations: BTreeMap<String, String>,
    /// The templates as written, to compare two compiled APIs.
    raw: Vec<(usize, String, Value, Value)>,
}

impl std::fmt::Debug for Conversions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversions")
            .field("storage", &self.storage)
            .field("versions", &self.pairs.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl PartialEq for Conversions {
    fn eq(&self, other: &Self) -> bool {
        self.group == other.group && self.storage == other.storage && self.raw == other.raw
    }
}

/// Why one object could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("converting {kind} {object} from {from} to {to}: {what}")]
pub struct ConvertError {
    /// The kind.
    pub kind: String,
    /// `namespace/name` (or `name`) of the object.
    pub object: String,
    /// The version converted from.
    pub from: String,
    /// The version asked for.
    pub to: String,
    /// What failed: the template's path and place in the rule, and why.
    pub what: String,
}

fn key(k: &str) -> Step {
    Step::Key(k.to_string())
}

/// Compiles the conversions of `raw` (written at `at`), whose storage
/// version is `storage`; none when it has one version.
pub fn compile(
    raw: &RawApi,
    storage: &str,
    at: &[Step],
) -> Result<Option<Conversions>, Vec<SchemaError>> {
    let mut errors = Vec::new();
    let mut conversions = Conversions {
        crd: format!("{}.{}", super::crd::plural_of(raw), raw.group),
        group: raw.group.clone(),
        kind: raw.kind.clone(),
        storage: storage.to_string(),
        set: TemplateSet::new(),
        pairs: BTreeMap::new(),
        steps: BTreeMap::new(),
        locations: BTreeMap::new(),
        raw: Vec::new(),
    };
    for (i, v) in raw.versions.iter().enumerate() {
        let here = [at, &[key("versions"), Step::Index(i)]].concat();
        match (&v.conversion, v.name == storage) {
            (None, true) => {}
            (Some(_), true) => errors.push(SchemaError {
                at: [here.as_slice(), &[key("conversion")]].concat(),
                message: format!(
                    "`{}` is the storage version: objects are stored in it and it needs no conversion",
                    v.name
                ),
            }),
            (None, false) => errors.push(SchemaError {
                at: here.clone(),
                message: format!(
                    "version `{}` is not the storage version (`{storage}`): it needs `conversion` with `toStorage` and `fromStorage` templates",
                    v.name
                ),
            }),
            (Some(c), false) => {
                let base = [here.as_slice(), &[key("conversion")]].concat();
                let to = conversions.tree(&base, "toStorage", &c.to_storage, &mut errors);
                let from = conversions.tree(&base, "fromStorage", &c.from_storage, &mut errors);
                conversions.raw.push((
                    i,
                    v.name.clone(),
                    c.to_storage.clone(),
                    c.from_storage.clone(),
                ));
                conversions.pairs.insert(
                    v.name.clone(),
                    Pair {
                        to_storage: to,
                        from_storage: from,
                    },
                );
            }
        }
    }
    match (errors.is_empty(), raw.versions.len()) {
        (false, _) => Err(errors),
        (true, 1) => Ok(None),
        (true, _) => Ok(Some(conversions)),
    }
}

impl Conversions {
    /// Compiles one template (a mapping of the object's fields).
    fn tree(
        &mut self,
        base: &[Step],
        name: &str,
        value: &Value,
        errors: &mut Vec<SchemaError>,
    ) -> Tree {
        let at = [base, &[key(name)]].concat();
        let Some(map) = value.as_object() else {
            errors.push(SchemaError {
                at,
                message: format!(
                    "`{name}` is a mapping of the converted object's fields (`spec`, `status`)"
                ),
            });
            return Tree::Value(Value::Null);
        };
        for field in PASSED_THROUGH.iter().filter(|f| map.contains_key(**f)) {
            errors.push(SchemaError {
                at: [at.as_slice(), &[key(field)]].concat(),
                message: format!(
                    "`{field}` passes through a conversion unchanged (the API server requires it); render `spec` and `status` only"
                ),
            });
        }
        let mut steps = at.clone();
        each_string(value, &mut steps, &mut |p| {
            self.steps.insert(path_string(p), p.to_vec());
        });
        let mut path = at.clone();
        let mut compile_errors = Vec::new();
        let tree = Tree::compile(value, &mut path, &mut self.set, &mut compile_errors);
        for (p, e) in compile_errors {
            errors.push(SchemaError {
                at: p,
                message: format!("template does not compile: {}", e.message),
            });
        }
        tree
    }

    /// Records where each template is written, for run-time messages:
    /// `locate` turns a path in the rule into `file:line:col`.
    pub fn locate(&mut self, locate: impl Fn(&[Step]) -> String) {
        self.locations = self
            .steps
            .iter()
            .map(|(name, steps)| (name.clone(), locate(steps)))
            .collect();
    }

    /// Where a template (by path) is written in the rule.
    pub fn steps_of(&self, template: &str) -> Option<&[Step]> {
        self.steps.get(template).map(Vec::as_slice)
    }

    /// The versions converted to and from the storage version.
    pub fn versions(&self) -> impl Iterator<Item = &str> {
        self.pairs.keys().map(String::as_str)
    }

    /// The CRD's name, `<plural>.<group>`.
    pub fn crd(&self) -> &str {
        &self.crd
    }

    /// The storage version.
    pub fn storage(&self) -> &str {
        &self.storage
    }

    /// The `self.*` paths read by the templates whose `self` is at
    /// `version`, each with the template's path in the rule.
    pub fn self_paths_reading(&self, version: &str) -> Vec<(String, String)> {
        let trees: Vec<&Tree> = if version == self.storage {
            self.pairs.values().map(|p| &p.from_storage).collect()
        } else {
            self.pairs
                .get(version)
                .map(|p| &p.to_storage)
                .into_iter()
                .collect()
        };
        let mut out = Vec::new();
        for id in trees.into_iter().flat_map(|t| t.templates()) {
            for path in self.set.self_paths(id) {
                out.push((id.path().trim_end_matches(" (key)").to_string(), path));
            }
        }
        out
    }

    /// `object` (any served version of this API) in version `to`.
    pub fn convert(&self, object: &Value, to: &str) -> Result<Value, ConvertError> {
        let from = object["apiVersion"]
            .as_str()
            .and_then(|v| v.strip_prefix(&format!("{}/", self.group)))
            .unwrap_or_default()
            .to_string();
        let fail = |what: String| ConvertError {
            kind: self.kind.clone(),
            object: object_name(object),
            from: from.clone(),
            to: to.to_string(),
            what,
        };
        let known = |v: &str| v == self.storage || self.pairs.contains_key(v);
        if !known(&from) {
            return Err(fail(format!("`{from}` is not a version of this API")));
        }
        if !known(to) {
            return Err(fail(format!("`{to}` is not a version of this API")));
        }
        if from == to {
            return Ok(object.clone());
        }
        let mut current = object.clone();
        if from != self.storage {
            let tree = &self.pairs[&from].to_storage;
            current = self.step(tree, &current, &self.storage).map_err(&fail)?;
        }
        if to != self.storage {
            let tree = &self.pairs[to].from_storage;
            current = self.step(tree, &current, to).map_err(&fail)?;
        }
        Ok(current)
    }

    /// Renders one template over `object`, giving the object at `to`.
    fn step(&self, tree: &Tree, object: &Value, to: &str) -> Result<Value, String> {
        let ctx = minijinja::context! { self => to_jinja(object) };
        let mut budget = Budget::default();
        let rendered = tree.render(&self.set, &ctx, &mut budget).map_err(|e| {
            let at = self
                .locations
                .get(e.path.trim_end_matches(" (key)"))
                .map(|l| format!(" ({l})"))
                .unwrap_or_default();
            format!("{}{at}: {}", e.path, e.message)
        })?;
        let Value::Object(fields) = rendered else {
            return Err("the template did not render a mapping".into());
        };
        Ok(assemble(object, fields, &format!("{}/{to}", self.group)))
    }
}

/// The converted object: the source's metadata and kind, `api_version`, the
/// rendered fields, and the source's status when none was rendered.
fn assemble(source: &Value, fields: Map<String, Value>, api_version: &str) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version.to_string()));
    for k in ["kind", "metadata"] {
        if let Some(v) = source.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    for (k, v) in fields {
        if !PASSED_THROUGH.contains(&k.as_str()) && !v.is_null() {
            out.insert(k, crate::template::tree::without_nulls(v));
        }
    }
    if !out.contains_key("status")
        && let Some(status) = source.get("status")
    {
        out.insert("status".into(), status.clone());
    }
    Value::Object(out)
}

/// `namespace/name`, or `name`.
fn object_name(object: &Value) -> String {
    let meta = &object["metadata"];
    let name = meta["name"].as_str().unwrap_or("(no name)");
    match meta["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// Calls `f` with the path of every string in `value` holding template syntax.
fn each_string(value: &Value, at: &mut Vec<Step>, f: &mut impl FnMut(&[Step])) {
    match value {
        Value::String(s) if s.contains("{{") || s.contains("{%") => f(at),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                at.push(Step::Index(i));
                each_string(item, at, f);
                at.pop();
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                at.push(Step::Key(k.clone()));
                each_string(v, at, f);
                at.pop();
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn api(yaml: &str) -> RawApi {
        serde_norway::from_str(yaml).unwrap()
    }

    const WEBAPP: &str = r#"
group: demo.kiln.dev
kind: WebApp
versions:
  - name: v1alpha1
    schema:
      spec:
        image: string
        replicas: integer
    conversion:
      toStorage:
        spec:
          image:
            repository: "{{ self.spec.image.split(':')[0] }}"
            tag: "{{ self.spec.image.split(':')[1] }}"
          replicas: "{{ self.spec.replicas }}"
      fromStorage:
        spec:
          image: "{{ self.spec.image.repository }}:{{ self.spec.image.tag }}"
          replicas: "{{ self.spec.replicas }}"
  - name: v1
    storage: true
    schema:
      spec:
        image:
          repository: string
          tag: string
        replicas: integer
"#;

    fn conversions() -> Conversions {
        compile(&api(WEBAPP), "v1", &[]).unwrap().unwrap()
    }

    fn old(image: &str) -> Value {
        json!({
            "apiVersion": "demo.kiln.dev/v1alpha1", "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "team-a", "uid": "u1", "labels": {"a": "b"}},
            "spec": {"image": image, "replicas": 2},
            "status": {"url": "http://shop/"},
        })
    }

    #[test]
    fn an_object_goes_to_the_storage_version_and_back_with_metadata_and_status_unchanged() {
        let c = conversions();
        let stored = c.convert(&old("nginx:1.27"), "v1").unwrap();
        assert_eq!(
            stored,
            json!({
                "apiVersion": "demo.kiln.dev/v1", "kind": "WebApp",
                "metadata": {"name": "shop", "namespace": "team-a", "uid": "u1", "labels": {"a": "b"}},
                "spec": {"image": {"repository": "nginx", "tag": "1.27"}, "replicas": 2},
                "status": {"url": "http://shop/"},
            })
        );
        assert_eq!(c.convert(&stored, "v1alpha1").unwrap(), old("nginx:1.27"));
        assert_eq!(c.convert(&stored, "v1").unwrap(), stored, "same version");
    }

    #[test]
    fn a_failing_template_names_the_object_and_the_template() {
        let mut c = conversions();
        c.locate(|at| format!("webapp.yaml:{}", at.len()));
        let err = c.convert(&old("nginx"), "v1").unwrap_err();
        assert_eq!(err.object, "team-a/shop");
        assert_eq!((err.from.as_str(), err.to.as_str()), ("v1alpha1", "v1"));
        let text = err.to_string();
        assert!(
            text.contains("versions[0].conversion.toStorage.spec.image.tag (webapp.yaml:7)"),
            "{text}"
        );
        assert!(text.contains("WebApp team-a/shop"), "{text}");
    }

    #[test]
    fn unknown_versions_are_refused_per_object() {
        let c = conversions();
        let mut o = old("a:b");
        o["apiVersion"] = json!("demo.kiln.dev/v9");
        assert!(c.convert(&o, "v1").unwrap_err().what.contains("`v9`"));
        assert!(
            c.convert(&old("a:b"), "v2")
                .unwrap_err()
                .what
                .contains("`v2`")
        );
    }

    #[test]
    fn every_other_version_needs_both_templates_and_the_storage_version_none() {
        let mut raw = api(WEBAPP);
        raw.versions[0].conversion = None;
        let errs = compile(&raw, "v1", &[]).unwrap_err();
        assert!(errs[0].message.contains("needs `conversion`"), "{errs:?}");
        let mut raw = api(WEBAPP);
        raw.versions[1].conversion = raw.versions[0].conversion.clone();
        let errs = compile(&raw, "v1", &[]).unwrap_err();
        assert!(errs[0].message.contains("needs no conversion"), "{errs:?}");
    }

    #[test]
    fn metadata_is_not_rendered_and_templates_must_compile() {
        let mut raw = api(WEBAPP);
        raw.versions[0].conversion.as_mut().unwrap().to_storage =
            json!({"metadata": {"name": "x"}, "spec": {"image": "{{ self.spec.image"}});
        let errs = compile(&raw, "v1", &[]).unwrap_err();
        let messages: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
        assert!(
            messages
                .iter()
                .any(|m| m.contains("`metadata` passes through")),
            "{messages:?}"
        );
        assert!(
            messages.iter().any(|m| m.contains("does not compile")),
            "{messages:?}"
        );
    }

    #[test]
    fn a_single_version_has_no_conversions() {
        let mut raw = api(WEBAPP);
        raw.versions.remove(0);
        assert!(compile(&raw, "v1", &[]).unwrap().is_none());
    }
}
