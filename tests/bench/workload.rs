//! The objects of the benchmark: N WebApps sharing one Secret, and the
//! children the contract (`tests/bench/README.md`) says each one gets.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The namespace everything lives in.
pub const NAMESPACE: &str = crate::audit::NAMESPACE;
/// The Secret every WebApp names.
pub const SECRET: &str = "credentials";
/// `spec.replicas` at creation; the update phase sets [`UPDATED_REPLICAS`].
pub const INITIAL_REPLICAS: i64 = 1;
/// See [`INITIAL_REPLICAS`].
pub const UPDATED_REPLICAS: i64 = 2;

/// The name of the `i`th WebApp.
pub fn name(i: usize) -> String {
    format!("app-{i:05}")
}

/// The `i`th WebApp.
pub fn webapp(i: usize) -> Value {
    json!({
        "apiVersion": "demo.kiln.dev/v1",
        "kind": "WebApp",
        "metadata": { "name": name(i), "namespace": NAMESPACE },
        "spec": {
            "image": "nginx:1.27",
            "replicas": INITIAL_REPLICAS,
            "port": 8080,
            "secretName": SECRET,
            "config": { "LOG_LEVEL": "info", "INSTANCE": i.to_string() },
        },
    })
}

/// The Secret.
pub fn secret() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": { "name": SECRET, "namespace": NAMESPACE },
        "data": { "password": "aHVudGVyMg==" },
    })
}

/// Hex SHA-256 of a value's compact JSON.
fn sha256(value: &Value) -> String {
    let digest = Sha256::digest(value.to_string().as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the ceiling needs to know about a primary.
pub struct Primary<'a> {
    /// The WebApp as listed.
    pub object: &'a Value,
    /// The Secret's `data`.
    pub secret_data: &'a Value,
    /// The field manager, also the `managed-by` label.
    pub manager: &'a str,
}

impl Primary<'_> {
    fn field(&self, path: &str) -> &Value {
        self.object.pointer(path).unwrap_or(&Value::Null)
    }

    fn owned_meta(&self, name: &str, labels: Value) -> Value {
        let mut labels = labels;
        labels["app.kubernetes.io/managed-by"] = json!(self.manager);
        json!({
            "name": name,
            "namespace": self.field("/metadata/namespace"),
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": "demo.kiln.dev/v1",
                "kind": "WebApp",
                "name": self.field("/metadata/name"),
                "uid": self.field("/metadata/uid"),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        })
    }

    /// `spec.config`, `{}` when unset.
    fn config(&self) -> Value {
        match self.field("/spec/config") {
            Value::Null => json!({}),
            c => c.clone(),
        }
    }

    /// The ConfigMap `<name>-config`.
    pub fn config_map(&self) -> Value {
        let name = self.field("/metadata/name").as_str().unwrap_or_default();
        let config = self.config();
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": self.owned_meta(&format!("{name}-config"), json!({})),
            "data": config,
        })
    }

    /// The Deployment.
    pub fn deployment(&self) -> Value {
        let name = self.field("/metadata/name").as_str().unwrap_or_default();
        let config = self.config();
        let selector = json!({ "app.kubernetes.io/name": name });
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self.owned_meta(name, selector.clone()),
            "spec": {
                "replicas": self.field("/spec/replicas"),
                "selector": { "matchLabels": selector },
                "template": {
                    "metadata": {
                        "labels": selector,
                        "annotations": {
                            "kiln.dev/config-hash": sha256(&config),
                            "kiln.dev/credentials-hash": sha256(self.secret_data),
                        },
                    },
                    "spec": {
                        "containers": [{
                            "name": "app",
                            "image": self.field("/spec/image"),
                            "ports": [{ "name": "http", "containerPort": self.field("/spec/port") }],
                            "envFrom": [{ "configMapRef": { "name": format!("{name}-config") } }],
                            "env": [{
                                "name": "PASSWORD",
                                "valueFrom": { "secretKeyRef": {
                                    "name": self.field("/spec/secretName"), "key": "password",
                                } },
                            }],
                        }],
                    },
                },
            },
        })
    }

    /// The Service.
    pub fn service(&self) -> Value {
        let name = self.field("/metadata/name").as_str().unwrap_or_default();
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.owned_meta(name, json!({})),
            "spec": {
                "selector": { "app.kubernetes.io/name": name },
                "ports": [{ "name": "http", "port": 80, "targetPort": "http" }],
            },
        })
    }

    /// The status a controller writes after applying the children: first
    /// not ready (the Deployment has no ready replicas yet), then ready.
    pub fn status(&self, ready: bool, now: &str) -> Value {
        let generation = self.field("/metadata/generation");
        let condition = |kind: &str, ok: bool, reason: &str, message: &str| {
            json!({
                "type": kind, "status": if ok { "True" } else { "False" }, "reason": reason,
                "message": message, "lastTransitionTime": now, "observedGeneration": generation,
            })
        };
        let name = self.field("/metadata/name").as_str().unwrap_or_default();
        let ready_condition = if ready {
            condition("Ready", true, "AllChildrenReady", "all children are ready")
        } else {
            condition(
                "Ready",
                false,
                "ChildrenNotReady",
                &format!("not ready: deployment/{name}"),
            )
        };
        json!({
            "apiVersion": "demo.kiln.dev/v1",
            "kind": "WebApp",
            "metadata": {
                "name": self.field("/metadata/name"),
                "namespace": self.field("/metadata/namespace"),
            },
            "status": {
                "observedGeneration": generation,
                "conditions": [
                    ready_condition,
                    condition("Reconciled", true, "Applied", "all children applied"),
                ],
                "url": format!(
                    "http://{}.{}.svc",
                    self.field("/metadata/name").as_str().unwrap_or_default(),
                    self.field("/metadata/namespace").as_str().unwrap_or_default(),
                ),
                "readyReplicas": if ready { self.field("/spec/replicas").clone() } else { json!(0) },
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_follow_the_contract() {
        let mut w = webapp(7);
        w["metadata"]["uid"] = json!("u-7");
        w["metadata"]["generation"] = json!(1);
        let data = secret()["data"].clone();
        let p = Primary {
            object: &w,
            secret_data: &data,
            manager: "ceiling",
        };
        let d = p.deployment();
        assert_eq!(d["metadata"]["name"], "app-00007");
        assert_eq!(d["metadata"]["ownerReferences"][0]["uid"], "u-7");
        assert_eq!(d["spec"]["replicas"], 1);
        let annotations = &d["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(
            annotations["kiln.dev/config-hash"].as_str().map(str::len),
            Some(64)
        );
        assert_eq!(p.config_map()["data"]["INSTANCE"], "7");
        assert_eq!(p.service()["spec"]["ports"][0]["targetPort"], "http");
        assert_eq!(
            p.status(true, "t")["status"]["conditions"][0]["status"],
            "True"
        );
        assert_eq!(p.status(false, "t")["status"]["readyReplicas"], 0);
    }
}
