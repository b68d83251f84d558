//! Writes the table of built-in kinds (`kubernetes.json`) from the API
//! server's published OpenAPI v3 documents: one line per kind (its named
//! schema) and one line per named schema, in the compact form of
//! [`Node`]. `make schemas` writes it; a test checks that the committed
//! table is what this gives for the Kubernetes version of the local control
//! plane (`tests/controlplane/versions.env`).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::node::Node;

/// Why the table could not be made.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// A document could not be read.
    #[error("reading {path}")]
    Read {
        /// The document.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A document is not JSON.
    #[error("{path} is not JSON")]
    Json {
        /// The document.
        path: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// Two documents give one named schema two forms.
    #[error("the schema {0} differs between two documents")]
    Differs(String),
}

/// The named schema of a pod template: immutability its pods' fields state
/// does not hold for a template (a Deployment's containers change).
const POD_TEMPLATE: &str = "io.k8s.api.core.v1.PodTemplateSpec";
/// Object metadata: `name` and `namespace` "cannot be updated" because
/// they are the object's key, not a field a child changes.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Marks every field that is a pod template, at any depth.
fn mark_templates(node: &mut Node) {
    if node.reference.as_deref() == Some(POD_TEMPLATE) {
        node.template = true;
    }
    node.properties.values_mut().for_each(mark_templates);
    for inner in [&mut node.items, &mut node.additional]
        .into_iter()
        .flatten()
    {
        mark_templates(inner);
    }
}

fn clear_immutable(node: &mut Node) {
    node.immutable = false;
    node.properties.values_mut().for_each(clear_immutable);
}

/// The table, from the `*.json` documents in `dir`.
pub fn reduce(dir: &Path, source: &str) -> Result<String, GenerateError> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map_err(|source| read(dir, source))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    let mut kinds = BTreeMap::new();
    let mut defs: BTreeMap<String, Node> = BTreeMap::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|source| read(&path, source))?;
        let doc: Value = serde_json::from_str(&text).map_err(|source| GenerateError::Json {
            path: path.display().to_string(),
            source,
        })?;
        let schemas = doc["components"]["schemas"].as_object();
        for (name, schema) in schemas.into_iter().flatten() {
            for gvk in schema["x-kubernetes-group-version-kind"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let (g, v, k) = (&gvk["group"], &gvk["version"], &gvk["kind"]);
                let (Some(g), Some(v), Some(k)) = (g.as_str(), v.as_str(), k.as_str()) else {
                    continue;
                };
                let key = if g.is_empty() {
                    format!("{v}/{k}")
                } else {
                    format!("{g}/{v}/{k}")
                };
                kinds.insert(key, name.clone());
            }
            let mut node = Node::from_openapi(schema);
            for field in ["apiVersion", "kind"] {
                if let Some(f) = node.properties.get_mut(field) {
                    f.immutable = false;
                }
            }
            if name == OBJECT_META {
                clear_immutable(&mut node);
            }
            mark_templates(&mut node);
            match defs.get(name) {
                Some(before) if *before != node => {
                    return Err(GenerateError::Differs(name.clone()));
                }
                _ => {
                    defs.insert(name.clone(), node);
                }
            }
        }
    }
    Ok(write(source, &kinds, &defs))
}

fn read(path: &Path, source: std::io::Error) -> GenerateError {
    GenerateError::Read {
        path: path.display().to_string(),
        source,
    }
}

/// One kind or named schema a line, so the table is read a line at a time.
fn write(source: &str, kinds: &BTreeMap<String, String>, defs: &BTreeMap<String, Node>) -> String {
    let quote = |s: &str| Value::String(s.to_string()).to_string();
    let mut out = format!("{{\"source\":{},\"kinds\":{{\n", quote(source));
    let lines: Vec<String> = kinds
        .iter()
        .map(|(k, d)| format!("{}:{}", quote(k), quote(d)))
        .collect();
    out.push_str(&lines.join(",\n"));
    out.push_str("\n},\"defs\":{\n");
    let lines: Vec<String> = defs
        .iter()
        .map(|(k, d)| {
            let node = serde_json::to_string(d).unwrap_or_default();
            format!("{}:{node}", quote(k))
        })
        .collect();
    out.push_str(&lines.join(",\n"));
    out.push_str("\n}}\n");
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    /// The Kubernetes version of the local control plane.
    fn version() -> Option<String> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let env = std::fs::read_to_string(root.join("tests/controlplane/versions.env")).ok()?;
        env.lines()
            .find_map(|l| l.strip_prefix("K8S_VERSION="))
            .map(str::to_string)
    }

    /// Where the control-plane build put the kubernetes module.
    fn documents(version: &str) -> Option<PathBuf> {
        let out = std::process::Command::new("go")
            .args(["env", "GOMODCACHE"])
            .output()
            .ok()?;
        let cache = String::from_utf8(out.stdout).ok()?;
        let dir = PathBuf::from(cache.trim())
            .join(format!("k8s.io/kubernetes@{version}/api/openapi-spec/v3"));
        dir.is_dir().then_some(dir)
    }

    /// `make schemas` (KILN_WRITE_SCHEMAS=1) writes the table; otherwise the
    /// committed one must be what the generator gives.
    #[test]
    fn the_committed_table_is_the_generators_output() {
        let Some(version) = version() else {
            panic!("tests/controlplane/versions.env names no K8S_VERSION");
        };
        let Some(dir) = documents(&version) else {
            // Built with the control plane (make controlplane); CI has it.
            assert!(
                std::env::var_os("CI").is_none(),
                "k8s.io/kubernetes@{version} is not in the Go module cache: run make controlplane"
            );
            return;
        };
        let source = format!("k8s.io/kubernetes@{version} api/openapi-spec/v3");
        let table = super::reduce(&dir, &source).unwrap_or_else(|e| panic!("{e}"));
        let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/typing/kubernetes.json");
        if std::env::var_os("KILN_WRITE_SCHEMAS").is_some() {
            std::fs::write(&file, &table).unwrap_or_else(|e| panic!("{e}"));
        }
        let committed = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(
            committed == table,
            "src/typing/kubernetes.json is not what the generator gives for {version}: run make schemas"
        );
    }
}
