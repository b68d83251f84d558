//! An object as the API server serves it at another version of its CRD:
//! written at one version (defaulted and pruned to that version's schema),
//! converted to the storage version and stored (pruned and defaulted
//! there), then read at the version asked for (converted, pruned and
//! defaulted again). `kiln render` and `kiln test` read a primary given at
//! any served version so, as the engine would read it. Pure.

use serde_json::Value;

use super::convert::Conversions;
use super::defaults;
use super::roundtrip::prune_object;

/// Why an object cannot be read at another version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServedError {
    /// The object's version is not one the CRD has.
    #[error("{crd} has no version `{version}` (versions: {known})")]
    NoSuchVersion {
        /// The CRD's name.
        crd: String,
        /// The version asked for or given.
        version: String,
        /// The versions it has.
        known: String,
    },
    /// The CRD converts through a webhook whose conversions kiln does not hold.
    #[error(
        "{crd} converts between versions through a webhook kiln does not know offline: give the object at `{to}`"
    )]
    Webhook {
        /// The CRD's name.
        crd: String,
        /// The version the object is read at.
        to: String,
    },
    /// A conversion template failed.
    #[error(transparent)]
    Convert(#[from] super::convert::ConvertError),
}

/// `object` (at any version of `crd`) as the API server serves it at `to`.
/// `conversions` are the API's own (a rule-defined API with several
/// versions); without them the CRD must convert with `strategy: None`
/// (only `apiVersion` changes).
pub fn served_at(
    crd: &Value,
    conversions: Option<&Conversions>,
    object: &Value,
    to: &str,
) -> Result<Value, ServedError> {
    let from = version_of(object);
    let written = schema(crd, from)?;
    let mut current = object.clone();
    defaults::apply(written, &mut current);
    if from == to {
        return Ok(current);
    }
    let storage = storage_version(crd).unwrap_or(to).to_string();
    for version in [storage, to.to_string()] {
        current = prune_object(&current, schema(crd, version_of(&current))?);
        current = convert(crd, conversions, &current, &version)?;
        let target = schema(crd, &version)?;
        current = prune_object(&current, target);
        defaults::apply(target, &mut current);
    }
    Ok(current)
}

/// One step of conversion, by the API's templates or by `strategy: None`.
fn convert(
    crd: &Value,
    conversions: Option<&Conversions>,
    object: &Value,
    to: &str,
) -> Result<Value, ServedError> {
    if let Some(c) = conversions {
        return Ok(c.convert(object, to)?);
    }
    let strategy = crd["spec"]["conversion"]["strategy"]
        .as_str()
        .unwrap_or("None");
    if strategy != "None" && version_of(object) != to {
        return Err(ServedError::Webhook {
            crd: name(crd),
            to: to.to_string(),
        });
    }
    let mut out = object.clone();
    let group = crd["spec"]["group"].as_str().unwrap_or_default();
    out["apiVersion"] = Value::String(format!("{group}/{to}"));
    Ok(out)
}

/// The `openAPIV3Schema` of `version`, or which versions there are.
fn schema<'a>(crd: &'a Value, version: &str) -> Result<&'a Value, ServedError> {
    super::version_schema(crd, version).ok_or_else(|| {
        let known: Vec<&str> = crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["name"].as_str())
            .collect();
        ServedError::NoSuchVersion {
            crd: name(crd),
            version: version.to_string(),
            known: known.join(", "),
        }
    })
}

fn storage_version(crd: &Value) -> Option<&str> {
    crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["storage"] == true)?["name"]
        .as_str()
}

fn name(crd: &Value) -> String {
    crd["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The version part of an object's `apiVersion`.
fn version_of(object: &Value) -> &str {
    let version = object["apiVersion"].as_str().unwrap_or_default();
    version.rsplit('/').next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const API: &str = r#"
group: demo.kiln.dev
kind: WebApp
versions:
  - name: v1alpha1
    schema:
      spec:
        image: string | required=true
        replicas: integer | default=1
    conversion:
      toStorage:
        spec:
          image: {repository: "{{ self.spec.image }}"}
          replicas: "{{ self.spec.replicas }}"
      fromStorage:
        spec:
          image: "{{ self.spec.image.repository }}"
          replicas: "{{ self.spec.replicas }}"
  - name: v1
    storage: true
    schema:
      spec:
        image: {repository: string | required=true}
        replicas: integer
        port: integer | default=8080
"#;

    fn api() -> super::super::Api {
        let raw = serde_norway::from_str(API).unwrap();
        super::super::compile(&raw, "webapp", &[], &[]).unwrap()
    }

    fn at(version: &str, spec: Value) -> Value {
        json!({
            "apiVersion": format!("demo.kiln.dev/{version}"), "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "a"},
            "spec": spec,
        })
    }

    #[test]
    fn an_object_written_at_another_version_is_read_converted_pruned_and_defaulted() {
        let api = api();
        let given = at("v1alpha1", json!({"image": "nginx", "typo": 1}));
        let read = served_at(&api.crd, api.conversions.as_deref(), &given, "v1").unwrap();
        assert_eq!(
            read,
            at(
                "v1",
                json!({"image": {"repository": "nginx"}, "replicas": 1, "port": 8080})
            )
        );
    }

    #[test]
    fn a_version_the_crd_does_not_have_is_named_with_those_it_has() {
        let api = api();
        let given = at("v2", json!({}));
        let e = served_at(&api.crd, api.conversions.as_deref(), &given, "v1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "webapps.demo.kiln.dev has no version `v2` (versions: v1alpha1, v1)"
        );
    }

    #[test]
    fn a_crd_converting_through_a_foreign_webhook_is_not_guessed() {
        let mut crd = api().crd;
        crd["spec"]["conversion"] = json!({"strategy": "Webhook"});
        let given = at("v1alpha1", json!({"image": "nginx"}));
        let e = served_at(&crd, None, &given, "v1").unwrap_err();
        assert!(matches!(e, ServedError::Webhook { .. }), "{e}");
    }
}
