//! Whose CustomResourceDefinition is it? kiln writes a CRD (its schema, its
//! `spec.conversion`) only when this kiln created it, or a rule adopted it
//! explicitly. The proof is what the API server recorded, not a mark anyone
//! may copy: the CRD's `metadata.managedFields` show kiln's own field
//! manager (`<--field-manager>-api`, `kiln-api` by default) applying kiln's
//! annotation (`kiln.dev/rule`). kiln applies that annotation with every
//! CRD it creates or adopts; an annotation copied onto another CRD is
//! recorded under the manager that copied it, and the CRD stays foreign.
//! Kiln's own CRDs (its Rule resources) are never any rule's. Pure.

use std::fmt;

use serde_json::Value;

use super::crd::RULE_ANNOTATION;

/// The CRDs kiln itself ships: no rule defines or adopts them.
pub const RESERVED: &[&str] = &["rules.kiln.dev"];

/// Whose a CRD in the cluster is, to the kiln applying as one field manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Whose {
    /// This kiln created (or adopted) it: its field manager applied kiln's
    /// annotation.
    Kilns,
    /// One of kiln's own CRDs (its Rule resources).
    Reserved,
    /// Someone else's: the field managers that wrote it.
    Foreign(Vec<Manager>),
}

/// One field manager of an object, as `managedFields` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manager {
    /// Its name (`helm`, `kubectl-client-side-apply`, `kiln-api`…).
    pub name: String,
    /// `Apply` or `Update`.
    pub operation: String,
}

impl fmt::Display for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.operation)
    }
}

/// Whose the CRD `crd` (as read from the API server) is, to the kiln whose
/// CRD field manager is `manager`.
pub fn whose(crd: &Value, manager: &str) -> Whose {
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    if RESERVED.contains(&name) {
        return Whose::Reserved;
    }
    let entries = crd["metadata"]["managedFields"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    // The object itself, not its status (the API server's own writes).
    let on_object = entries
        .iter()
        .filter(|e| e["subresource"].as_str().unwrap_or_default().is_empty());
    let mut managers: Vec<Manager> = Vec::new();
    for entry in on_object {
        let found = Manager {
            name: entry["manager"].as_str().unwrap_or_default().to_string(),
            operation: entry["operation"].as_str().unwrap_or_default().to_string(),
        };
        if found.name == manager && found.operation == "Apply" && marks(entry) {
            return Whose::Kilns;
        }
        if !managers.contains(&found) {
            managers.push(found);
        }
    }
    Whose::Foreign(managers)
}

/// Whether a `managedFields` entry holds kiln's annotation.
fn marks(entry: &Value) -> bool {
    let key = format!("f:{RULE_ANNOTATION}");
    entry["fieldsV1"]["f:metadata"]["f:annotations"]
        .get(&key)
        .is_some()
}

/// `a (Apply), b (Update)`, or `none recorded`.
pub fn list(managers: &[Manager]) -> String {
    if managers.is_empty() {
        return "none recorded".into();
    }
    managers
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(name: &str, entries: Value) -> Value {
        json!({"metadata": {"name": name, "managedFields": entries}})
    }

    fn entry(manager: &str, operation: &str, annotations: Value) -> Value {
        json!({
            "manager": manager, "operation": operation,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": annotations}, "f:spec": {"f:group": {}}},
        })
    }

    #[test]
    fn a_crd_is_kilns_when_its_manager_applied_kilns_annotation() {
        let mark = json!({"f:kiln.dev/rule": {}});
        let ours = crd(
            "sites.x.dev",
            json!([
                entry("kiln-api", "Apply", mark.clone()),
                entry("kubectl-label", "Update", json!({"f:team": {}})),
                {"manager": "kube-apiserver", "operation": "Update", "subresource": "status"},
            ]),
        );
        assert_eq!(whose(&ours, "kiln-api"), Whose::Kilns);
        // Another kiln (another field manager) does not take it for its own.
        let Whose::Foreign(managers) = whose(&ours, "blue-api") else {
            panic!("another kiln's CRD taken as its own");
        };
        assert_eq!(
            list(&managers),
            "kiln-api (Apply), kubectl-label (Update)",
            "the status writer is not named"
        );
    }

    #[test]
    fn a_copied_annotation_or_a_borrowed_name_is_not_provenance() {
        let mark = json!({"f:kiln.dev/rule": {}});
        for (why, entries) in [
            (
                "the annotation copied by someone else",
                json!([entry("helm", "Update", mark.clone())]),
            ),
            (
                "kiln's manager updating, not applying",
                json!([entry("kiln-api", "Update", mark.clone())]),
            ),
            (
                "kiln's manager applying without its annotation",
                json!([entry("kiln-api", "Apply", json!({}))]),
            ),
            ("no managedFields at all", json!([])),
        ] {
            assert!(
                matches!(
                    whose(&crd("sites.x.dev", entries), "kiln-api"),
                    Whose::Foreign(_)
                ),
                "{why}"
            );
        }
    }

    #[test]
    fn kilns_own_rule_crd_is_nobodys_to_write() {
        let entries = json!([entry("kiln-api", "Apply", json!({"f:kiln.dev/rule": {}}))]);
        assert_eq!(
            whose(&crd("rules.kiln.dev", entries), "kiln-api"),
            Whose::Reserved
        );
    }
}
