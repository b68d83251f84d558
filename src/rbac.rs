//! The least privilege a rule set needs. A ClusterRole for what is
//! cluster-wide: read every kind a rule touches, write children, patch the
//! status of custom-resource primaries and read their CRD (for its status
//! schema), publish Events, read the Rule resources. A Role in kiln's own
//! namespace for what kiln keeps there, and nowhere else: its Leases, the
//! rules ConfigMap, the record of a rule's first load, the conversion
//! webhook's Secret (only when a rule converts). Pure: the plural of each
//! kind comes from the caller (discovery, or a guess without a cluster).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::rules::{Gvk, Rule, RuleSet};
use crate::template::Tree;

/// Verbs to read and watch a kind.
const READ: &[&str] = &["get", "list", "watch"];
/// Verbs to manage children with server-side apply and pruning.
const WRITE: &[&str] = &["create", "patch", "delete"];

/// What a rule set needs on the kinds its rules touch: (group, resource)
/// to verbs, and (group, resource, resourceName) to verbs.
#[derive(Debug, Default)]
pub struct Grants {
    /// Verbs on every object of a resource.
    pub all: BTreeMap<(String, String), BTreeSet<&'static str>>,
    /// Verbs on one named object of a resource.
    pub named: BTreeMap<(String, String, String), BTreeSet<&'static str>>,
}

/// What the rules of `set` need on the kinds they touch (Events, Leases and
/// the rules ConfigMap left out); `plural` names each kind's resource.
pub fn rule_grants(set: &RuleSet, plural: &dyn Fn(&Gvk) -> String) -> Grants {
    // The kinds rules define carry their own resource names.
    let defined: BTreeMap<(String, String), String> = set
        .rules
        .iter()
        .filter_map(|r| r.api.as_ref())
        .map(|a| ((a.group.clone(), a.kind.clone()), a.plural.clone()))
        .collect();
    let plural = |g: &Gvk| {
        defined
            .get(&(g.group.clone(), g.kind.clone()))
            .cloned()
            .unwrap_or_else(|| plural(g))
    };
    let mut grants = Grants::default();
    for rule in &set.rules {
        grants.for_primary(rule, &plural);
        grants.for_related(rule, &plural);
        grants.for_children(rule, &plural);
    }
    grants
}

/// The CRDs' resource, in their group.
const CRDS: (&str, &str) = ("apiextensions.k8s.io", "customresourcedefinitions");

impl Grants {
    /// `verbs` on every object of `g`'s `resource`.
    fn grant(&mut self, g: &Gvk, resource: String, verbs: &[&'static str]) {
        self.all
            .entry((g.group.clone(), resource))
            .or_default()
            .extend(verbs);
    }

    /// `verbs` on the object `name` of `resource` in `group`.
    fn grant_named(
        &mut self,
        (group, resource): (&str, &str),
        name: String,
        verbs: &[&'static str],
    ) {
        self.named
            .entry((group.into(), resource.into(), name))
            .or_default()
            .extend(verbs);
    }

    /// What `rule` needs on its primary's kind and its CRD.
    fn for_primary(&mut self, rule: &Rule, plural: &dyn Fn(&Gvk) -> String) {
        let p = &rule.primary.gvk;
        self.grant(p, plural(p), READ);
        // kiln writes status only to custom resources, and reads (and
        // watches) the CRD of a kind that may have one, for whether it is
        // custom and for its status schema.
        if p.may_be_crd() {
            // (A read-only rule writes nothing on its primary.)
            if !rule.read_only && p.is_custom() {
                self.grant(p, format!("{}/status", plural(p)), &["patch"]);
            }
            self.grant_named(CRDS, format!("{}.{}", plural(p), p.group), READ);
        }
        // A rule that defines its API applies its CRD and reads it back.
        // Server-side apply that creates the CRD is authorized as `create`
        // too, with the name known, so even that is granted by name.
        if let Some(api) = &rule.api {
            self.grant_named(CRDS, api.name(), &["get", "create", "patch"]);
        }
        if rule.ordered_deletion || rule.hook.as_ref().is_some_and(|h| h.finalize.is_some()) {
            // Its finalizer (ordered deletion, a finalize hook), applied to
            // the primary itself.
            self.grant(p, plural(p), &["patch"]);
        }
        // blockOwnerDeletion on children's owner references.
        self.grant(p, format!("{}/finalizers", plural(p)), &["update"]);
        // A finalizer on the primary while the rule has `outside` children.
        if !rule.read_only && rule.children.iter().any(|c| c.outside) {
            self.grant(p, plural(p), &["patch"]);
        }
    }

    /// What `rule` needs on what it watches besides its primary and
    /// children: related objects (patched by decorators too) and namespaces.
    fn for_related(&mut self, rule: &Rule, plural: &dyn Fn(&Gvk) -> String) {
        for w in &rule.watches {
            self.grant(&w.gvk, plural(&w.gvk), READ);
        }
        // Decorators patch the primary or related objects they do not own.
        for d in &rule.decorators {
            let target = match &d.target {
                crate::rules::DecoratorTarget::Primary => Some(&rule.primary.gvk),
                crate::rules::DecoratorTarget::Related(name) => rule
                    .watches
                    .iter()
                    .find(|w| &w.name == name)
                    .map(|w| &w.gvk),
            };
            if let Some(gvk) = target {
                self.grant(gvk, plural(gvk), &["patch"]);
            }
        }
        if rule.primary.namespace_selector.is_some() {
            let ns = crate::rules::namespace_gvk();
            self.grant(&ns, plural(&ns), READ);
        }
    }

    /// What `rule` needs on its children's kinds, and to bind the roles its
    /// RoleBindings name.
    fn for_children(&mut self, rule: &Rule, plural: &dyn Fn(&Gvk) -> String) {
        for c in &rule.children {
            self.grant(&c.gvk, plural(&c.gvk), READ);
            self.grant(&c.gvk, plural(&c.gvk), WRITE);
            if let Some((kind, role)) = bound_role(&c.gvk, &c.template) {
                let resource = if kind == "ClusterRole" {
                    "clusterroles"
                } else {
                    "roles"
                };
                self.grant_named(("rbac.authorization.k8s.io", resource), role, &["bind"]);
            }
        }
    }
}

/// The ClusterRole `name` for `set`; `plural` names each kind's resource.
/// Only what is cluster-wide: the kinds the rules touch, Events on their
/// objects, the Rule resources. What kiln keeps of its own (Leases, its
/// ConfigMaps and Secrets) is in [`own_role`], in kiln's namespace only.
pub fn cluster_role(set: &RuleSet, name: &str, plural: &dyn Fn(&Gvk) -> String) -> Value {
    let Grants {
        all: mut grants,
        named,
    } = rule_grants(set, plural);
    let core = |g: &str, r: &str| (g.to_string(), r.to_string());
    grants
        .entry(core("events.k8s.io", "events"))
        .or_default()
        .extend(["create", "patch"]);
    // The Rule resources (`kiln run --rules-from-cluster`): always granted,
    // so switching the source needs no new role.
    grants
        .entry(core("kiln.dev", "rules"))
        .or_default()
        .extend(READ);
    grants
        .entry(core("kiln.dev", "rules/status"))
        .or_default()
        .extend(["patch"]);
    let mut rules: Vec<Value> = grants
        .into_iter()
        .map(|((group, resource), verbs)| json!({"apiGroups": [group], "resources": [resource], "verbs": verbs}))
        .collect();
    rules.extend(named.into_iter().map(|((group, resource, name), verbs)| {
        json!({"apiGroups": [group], "resources": [resource], "resourceNames": [name], "verbs": verbs})
    }));
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "kiln"}},
        "rules": rules,
    })
}

/// One thing kiln keeps in its own namespace, and the verbs it needs on it.
struct Own {
    /// The API group.
    group: &'static str,
    /// The resource.
    resource: &'static str,
    /// The objects' names, when the verbs can be limited to them (`create`
    /// and `list` cannot).
    names: &'static [&'static str],
    /// The verbs.
    verbs: &'static [&'static str],
}

/// What kiln needs in its own namespace for `set`, one [`Own`] per need:
/// a new thing kiln keeps there is one more row.
fn own_needs(set: &RuleSet) -> Vec<Own> {
    let own = |group, resource, names, verbs| Own {
        group,
        resource,
        names,
        verbs,
    };
    // Leader election and shard membership: each replica's Lease, read,
    // created and renewed (a shard group also lists its Leases: the
    // sharded deployments add `list`).
    let mut needs = vec![
        own(
            "coordination.k8s.io",
            "leases",
            &[],
            &["create", "get", "update"],
        ),
        // The rules ConfigMap (`--rules-configmap`): read, then watched.
        own("", "configmaps", &[], READ),
    ];
    // ConfigMaps of kiln's own, created here: the accepted rules
    // (reload/saved.rs), then replaced by name only, and the record of a
    // rule's first load when a rule takes only new primaries
    // (engine/runtime/since.rs).
    needs.push(own("", "configmaps", &[], &["create"]));
    needs.push(own(
        "",
        "configmaps",
        &[crate::reload::saved::DEFAULT_NAME],
        &["update"],
    ));
    // The conversion webhook's certificates: a Secret created here
    // (`create` cannot be limited to a name), then read and renewed by name.
    if set.converts() {
        needs.push(own("", "secrets", &[], &["create"]));
        needs.push(own(
            "",
            "secrets",
            &[crate::api::webhook::DEFAULT_SECRET],
            &["get", "patch"],
        ));
    }
    needs
}

/// The rules of the Role kiln needs in its own namespace for `set`.
pub fn own_rules(set: &RuleSet) -> Vec<Value> {
    own_needs(set)
        .into_iter()
        .map(|o| {
            let mut rule =
                json!({"apiGroups": [o.group], "resources": [o.resource], "verbs": o.verbs});
            if !o.names.is_empty() {
                rule["resourceNames"] = json!(o.names);
            }
            rule
        })
        .collect()
}

/// The Role `name` in kiln's namespace `namespace`: what kiln keeps of its
/// own there ([`own_rules`]), and nowhere else.
pub fn own_role(set: &RuleSet, name: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "kiln"}},
        "rules": own_rules(set),
    })
}

/// The RoleBinding of [`own_role`] `name` to kiln's ServiceAccount
/// `service_account`, both in `namespace`.
pub fn own_role_binding(name: &str, namespace: &str, service_account: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "kiln"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    })
}

/// For a RoleBinding or ClusterRoleBinding child with a literal `roleRef`,
/// the role it binds: Kubernetes only lets kiln create the binding if kiln
/// holds every permission of that role, or `bind` on it.
fn bound_role(gvk: &Gvk, template: &Tree) -> Option<(String, String)> {
    if gvk.group != "rbac.authorization.k8s.io" || !gvk.kind.ends_with("Binding") {
        return None;
    }
    let role_ref = template.literal_at("roleRef")?;
    Some((
        role_ref["kind"].as_str()?.to_string(),
        role_ref["name"].as_str()?.to_string(),
    ))
}

/// The resource name of a kind without asking a cluster: lower-case, with
/// English plural rules (what Kubernetes itself generates for CRDs by default).
pub fn guess_plural(gvk: &Gvk) -> String {
    let lower = gvk.kind.to_lowercase();
    if lower.ends_with('s')
        || lower.ends_with("ch")
        || lower.ends_with("sh")
        || lower.ends_with('x')
    {
        format!("{lower}es")
    } else if lower.ends_with('y')
        && !lower.ends_with("ay")
        && !lower.ends_with("ey")
        && !lower.ends_with("oy")
    {
        format!("{}ies", &lower[..lower.len() - 1])
    } else {
        format!("{lower}s")
    }
}

/// A ConfigMap holding the rule files (for `deploy/` and for users who
/// package their own rules).
pub fn rules_configmap(name: &str, namespace: &str, files: &[(String, String)]) -> Value {
    let data: serde_json::Map<String, Value> = files
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "kiln"}},
        "data": data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gvk(group: &str, kind: &str) -> Gvk {
        Gvk {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn plurals_follow_the_usual_english_rules() {
        for (kind, plural) in [
            ("WebApp", "webapps"),
            ("Ingress", "ingresses"),
            ("NetworkPolicy", "networkpolicies"),
            ("Gateway", "gateways"),
            ("Database", "databases"),
            ("Proxy", "proxies"),
        ] {
            assert_eq!(guess_plural(&gvk("x", kind)), plural);
        }
    }

    #[test]
    fn decorated_kinds_and_primaries_with_outside_children_may_be_patched() {
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let set = crate::rules::load(&[
            root.join("examples/ported/service-per-pod/rule.yaml"),
            root.join("tests/fixtures/rules/space.yaml"),
        ])
        .unwrap();
        let role = cluster_role(&set, "kiln", &guess_plural);
        let grants = |group: &str, resource: &str| -> Vec<String> {
            role["rules"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["apiGroups"][0] == group && r["resources"][0] == resource)
                .flat_map(|r| r["verbs"].as_array().unwrap().clone())
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        // Pods are decorated (patched), never created or deleted.
        assert_eq!(grants("", "pods"), ["get", "list", "patch", "watch"]);
        // The Widget carries the finalizer of its rule's `outside` children.
        assert!(grants("test.kiln.dev", "widgets").contains(&"patch".to_string()));
        assert!(grants("", "namespaces").contains(&"delete".to_string()));
    }

    #[test]
    fn the_roles_cover_reads_writes_status_events_leases_and_bindings() {
        let set = crate::rules::load(&[std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/rules"
        ))])
        .unwrap();
        let role = cluster_role(&set, "kiln", &guess_plural);
        let rules = role["rules"].as_array().unwrap();
        let verbs = |group: &str, resource: &str| -> Vec<String> {
            rules
                .iter()
                .filter(|r| {
                    r["apiGroups"][0] == group
                        && r["resources"][0] == resource
                        && r.get("resourceNames").is_none()
                })
                .flat_map(|r| {
                    r["verbs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap().to_string())
                })
                .collect()
        };
        assert_eq!(verbs("demo.kiln.dev", "webapps"), ["get", "list", "watch"]);
        assert_eq!(verbs("demo.kiln.dev", "webapps/status"), ["patch"]);
        assert!(
            rules
                .iter()
                .any(|r| r["resources"][0] == "customresourcedefinitions"
                    && r["resourceNames"][0] == "webapps.demo.kiln.dev"
                    && r["verbs"] == json!(["get", "list", "watch"]))
        );
        assert!(
            verbs("", "namespaces/status").is_empty(),
            "kiln never writes the status of a built-in primary"
        );
        assert_eq!(
            verbs("apps", "deployments"),
            ["create", "delete", "get", "list", "patch", "watch"]
        );
        assert_eq!(
            verbs("", "secrets"),
            ["create", "delete", "get", "list", "patch", "watch"],
            "database children + webapp watch"
        );
        assert_eq!(
            verbs("", "namespaces"),
            ["get", "list", "watch"],
            "tenant primary"
        );
        assert_eq!(verbs("events.k8s.io", "events"), ["create", "patch"]);
        assert_eq!(verbs("kiln.dev", "rules"), ["get", "list", "watch"]);
        assert_eq!(verbs("kiln.dev", "rules/status"), ["patch"]);
        assert!(rules.iter().any(|r| r["resources"][0] == "clusterroles"
            && r["resourceNames"][0] == "admin"
            && r["verbs"][0] == "bind"));
        assert!(
            !rules
                .iter()
                .any(|r| r["resourceNames"][0] == "kiln-conversion-webhook"),
            "the conversion webhook's Secret is granted in kiln's namespace only"
        );
        assert!(
            verbs("coordination.k8s.io", "leases").is_empty(),
            "Leases in kiln's namespace only"
        );
        let own = own_role(&set, "kiln", "kiln-system");
        assert_eq!(own["kind"], "Role");
        assert_eq!(own["metadata"]["namespace"], "kiln-system");
        assert_eq!(
            own["rules"],
            json!([
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "update"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["kiln-accepted-rules"], "verbs": ["update"]},
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["kiln-conversion-webhook"], "verbs": ["get", "patch"]},
            ]),
            "the webhook's Secret: create in kiln's namespace (it cannot be limited by name), read and renew by name"
        );
        assert!(
            verbs("", "pods").is_empty(),
            "nothing the rules do not need"
        );
    }

    #[test]
    fn kiln_s_own_leases_configmaps_and_secrets_are_granted_in_its_namespace_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.yaml");
        std::fs::write(&file, "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n  for: {apiVersion: demo.kiln.dev/v1, kind: Widget}\n").unwrap();
        let set = crate::rules::load(std::slice::from_ref(&file)).unwrap();
        let cluster = cluster_role(&set, "kiln", &guess_plural);
        let resources: Vec<&str> = cluster["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["resources"][0].as_str().unwrap())
            .collect();
        for own in ["leases", "configmaps", "secrets"] {
            assert!(
                !resources.contains(&own),
                "{own} granted cluster-wide: {resources:?}"
            );
        }
        let own = own_role(&set, "kiln", "kiln-system");
        assert_eq!(
            own["rules"],
            json!([
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "update"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["kiln-accepted-rules"], "verbs": ["update"]},
            ]),
            "no Secret while no rule converts; the accepted rules saved, replaced by name only"
        );
        let binding = own_role_binding("kiln", "kiln-system", "kiln");
        assert_eq!(binding["roleRef"]["name"], "kiln");
        assert_eq!(binding["subjects"][0]["namespace"], "kiln-system");
    }

    #[test]
    fn ordered_deletion_may_patch_the_primary_for_its_finalizer() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.yaml");
        let rule = "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n  for: {apiVersion: demo.kiln.dev/v1, kind: Widget}\n  deletion: {ordered: ORDERED}\n";
        let may_patch = |ordered: &str| {
            std::fs::write(&file, rule.replace("ORDERED", ordered)).unwrap();
            let set = crate::rules::load(std::slice::from_ref(&file)).unwrap();
            let role = cluster_role(&set, "kiln", &guess_plural);
            role["rules"].as_array().unwrap().iter().any(|r| {
                r["resources"][0] == "widgets"
                    && r["verbs"].as_array().unwrap().contains(&"patch".into())
            })
        };
        assert!(may_patch("true"));
        assert!(!may_patch("false"), "only what the rules need");
        // A finalize hook holds the primary with the same finalizer.
        let hook = "false}\n  hooks:\n    finalize: {url: 'http://h.example/f'";
        assert!(may_patch(hook));
    }

    #[test]
    fn a_read_only_rule_may_not_write_its_primary_or_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.yaml");
        let rule = "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n  for: {apiVersion: demo.kiln.dev/v1, kind: Widget, readOnly: RO}\n  children:\n    - {id: c, outside: true, deletionPolicy: Orphan, template: {apiVersion: v1, kind: Namespace, metadata: {name: \"{{ self.metadata.name }}\"}}}\n";
        let writes = |read_only: &str| -> Vec<String> {
            std::fs::write(&file, rule.replace("RO", read_only)).unwrap();
            let set = crate::rules::load(std::slice::from_ref(&file)).unwrap();
            let role = cluster_role(&set, "kiln", &guess_plural);
            role["rules"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| {
                    ["widgets", "widgets/status"].contains(&r["resources"][0].as_str().unwrap())
                        && r["verbs"].as_array().unwrap().contains(&"patch".into())
                })
                .map(|r| r["resources"][0].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(writes("false"), ["widgets", "widgets/status"]);
        assert!(writes("true").is_empty(), "{:?}", writes("true"));
    }

    #[test]
    fn a_namespace_selector_needs_to_read_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.yaml");
        std::fs::write(
            &file,
            "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n  for: {apiVersion: demo.kiln.dev/v1, kind: App, namespaceSelector: {matchLabels: {tier: gold}}}\n",
        )
        .unwrap();
        let set = crate::rules::load(&[file]).unwrap();
        let role = cluster_role(&set, "kiln", &guess_plural);
        let namespaces = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["apiGroups"][0] == "" && r["resources"][0] == "namespaces")
            .map(|r| r["verbs"].clone());
        assert_eq!(
            namespaces,
            Some(serde_json::json!(["get", "list", "watch"]))
        );
    }
}
