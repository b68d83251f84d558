//! Which built-in kinds are namespaced, known without a cluster (for
//! `kiln render` and for validation; the engine asks discovery).

use super::Gvk;

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
