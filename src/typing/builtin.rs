//! The schemas of built-in kinds, from the table `make schemas` generates
//! (`kubernetes.json`, see `generate.rs`). The table is part of the binary;
//! only its index (where each line is) is built, on first use, and each
//! named schema is parsed when a kind first needs it and kept.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use super::node::Node;

/// The committed table.
static TABLE: &str = include_str!("kubernetes.json");

/// Where each kind's and each named schema's line is.
struct Index {
    /// `group/version/Kind` (`version/Kind` for the core group) → its schema's name.
    kinds: HashMap<&'static str, &'static str>,
    /// Name → its schema's JSON text, and the schema once parsed.
    defs: HashMap<&'static str, (&'static str, Parsed)>,
}

/// A named schema once parsed (`None`: its line is not a schema).
type Parsed = OnceLock<Option<Arc<Node>>>;

/// `"key":value` (with a trailing comma) → (key, value).
fn entry(line: &'static str) -> Option<(&'static str, &'static str)> {
    let line = line.strip_suffix(',').unwrap_or(line);
    let rest = line.strip_prefix('"')?;
    let end = rest.find("\":")?;
    Some((&rest[..end], &rest[end + 2..]))
}

fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut index = Index {
            kinds: HashMap::new(),
            defs: HashMap::new(),
        };
        let mut in_defs = false;
        for line in TABLE.lines().skip(1) {
            if line.starts_with("},\"defs\"") {
                in_defs = true;
                continue;
            }
            let Some((key, value)) = entry(line) else {
                continue;
            };
            if in_defs {
                index.defs.insert(key, (value, OnceLock::new()));
            } else {
                index.kinds.insert(key, value.trim_matches('"'));
            }
        }
        index
    })
}

/// The named schema `name`, parsed once.
pub fn def(name: &str) -> Option<Arc<Node>> {
    let (text, parsed) = index().defs.get(name)?;
    parsed
        .get_or_init(|| serde_json::from_str::<Node>(text).ok().map(Arc::new))
        .clone()
}

/// The schema of a built-in kind (`group` empty for the core group).
pub fn kind(group: &str, version: &str, kind: &str) -> Option<Arc<Node>> {
    let key = if group.is_empty() {
        format!("{version}/{kind}")
    } else {
        format!("{group}/{version}/{kind}")
    };
    def(index().kinds.get(key.as_str())?)
}

/// The Kubernetes release the table was generated from.
pub fn source() -> &'static str {
    TABLE
        .lines()
        .next()
        .and_then(|l| l.split('"').nth(3))
        .unwrap_or_default()
}

/// Object metadata, which every kind's `metadata` is.
pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::typing::node::Ty;

    #[test]
    fn built_in_kinds_are_found_with_their_fields() {
        let deployment = kind("apps", "v1", "Deployment").expect("Deployment");
        let spec = deployment.properties["spec"]
            .reference
            .clone()
            .unwrap_or_default();
        let spec = def(&spec).expect("DeploymentSpec");
        assert_eq!(spec.properties["replicas"].ty, Some(Ty::Integer));
        let config_map = kind("", "v1", "ConfigMap").expect("ConfigMap");
        let data = config_map.properties["data"].additional.as_deref();
        assert_eq!(data.and_then(|d| d.ty), Some(Ty::String));
        assert!(kind("apps", "v1", "Nothing").is_none());
        assert!(source().starts_with("k8s.io/kubernetes@v"), "{}", source());
    }

    #[test]
    fn immutability_is_where_the_source_says_it() {
        let service = def("io.k8s.api.core.v1.ServiceSpec").expect("ServiceSpec");
        assert!(service.properties["clusterIP"].immutable);
        assert!(!service.properties["ports"].immutable);
        let deployment = def("io.k8s.api.apps.v1.DeploymentSpec").expect("DeploymentSpec");
        assert!(deployment.properties["template"].template);
        let meta = def(OBJECT_META).expect("ObjectMeta");
        assert!(!meta.properties["name"].immutable);
        let config_map = kind("", "v1", "ConfigMap").expect("ConfigMap");
        assert!(!config_map.properties["immutable"].immutable);
        assert!(!config_map.properties["kind"].immutable);
    }
}
