//! Which built-in kinds are namespaced, known without a cluster (for
//! `kiln render` and for validation; the engine asks discovery).

use super::Gvk;

/// Why a child cannot go where its template puts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misplaced {
    /// A namespaced primary's child in another namespace.
    OtherNamespace {
        /// Where the child would go.
        child: String,
        /// The primary's namespace.
        primary: String,
    },
    /// A namespaced primary's child of a cluster-scoped kind.
    ClusterScopedChild,
    /// A cluster-scoped primary's namespaced child without a namespace.
    NamespaceMissing,
    /// A cluster-scoped child given a namespace.
    NamespaceOnClusterScoped,
}

/// Where a child goes: the one rule for validation (with what is known
/// statically) and for render (with discovery). `primary` is the primary's
/// namespace (`None`: cluster-scoped), `namespaced` whether the child's kind
/// is, `named` the namespace the child's template gives. Returns the
/// namespace the child gets (`None`: cluster-scoped).
pub fn placement(
    primary: Option<&str>,
    namespaced: bool,
    named: Option<&str>,
) -> Result<Option<String>, Misplaced> {
    match (primary, namespaced, named) {
        (Some(own), true, None) => Ok(Some(own.to_string())),
        (Some(own), true, Some(ns)) if ns != own => Err(Misplaced::OtherNamespace {
            child: ns.to_string(),
            primary: own.to_string(),
        }),
        (Some(_), false, _) => Err(Misplaced::ClusterScopedChild),
        (None, true, None) => Err(Misplaced::NamespaceMissing),
        (None, false, Some(_)) => Err(Misplaced::NamespaceOnClusterScoped),
        (_, true, Some(ns)) => Ok(Some(ns.to_string())),
        (None, false, None) => Ok(None),
    }
}

/// Scope of well-known built-in kinds, for rendering without a cluster.
/// `None` for kinds it does not know (the engine asks discovery instead).
pub fn well_known_scope(gvk: &Gvk) -> Option<bool> {
    const CLUSTER: &[(&str, &str)] = &[
        ("", "Namespace"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("storage.k8s.io", "StorageClass"),
        ("scheduling.k8s.io", "PriorityClass"),
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration",
        ),
        (
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration",
        ),
        ("networking.k8s.io", "IngressClass"),
    ];
    const NAMESPACED: &[(&str, &str)] = &[
        ("", "ConfigMap"),
        ("", "Secret"),
        ("", "Service"),
        ("", "ServiceAccount"),
        ("", "Pod"),
        ("", "PersistentVolumeClaim"),
        ("", "ResourceQuota"),
        ("", "LimitRange"),
        ("apps", "Deployment"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("batch", "Job"),
        ("batch", "CronJob"),
        ("rbac.authorization.k8s.io", "Role"),
        ("rbac.authorization.k8s.io", "RoleBinding"),
        ("networking.k8s.io", "Ingress"),
        ("networking.k8s.io", "NetworkPolicy"),
        ("policy", "PodDisruptionBudget"),
    ];
    let key = (gvk.group.as_str(), gvk.kind.as_str());
    if CLUSTER.contains(&key) {
        Some(false)
    } else if NAMESPACED.contains(&key) {
        Some(true)
    } else {
        None
    }
}
