//! Kubernetes name rules: what a namespace or an object's name may be, so a
//! rendered name is checked before it becomes part of a request's URL (a name
//! such as `x/../../kube-system/configmaps/evil` or `e4/status` never leaves
//! kiln).

use super::Gvk;

/// Checks a DNS-1123 label (namespaces, rule names, label-like names).
pub fn dns_label(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 63 {
        return Err("must be 1 to 63 characters".into());
    }
    let ok_chars = s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok_chars || s.starts_with('-') || s.ends_with('-') {
        return Err("must be lower-case letters, digits and `-`, starting and ending with a letter or digit".into());
    }
    Ok(())
}

/// Whether `version` is a Kubernetes API version: `v1`, `v1beta1`, `v2alpha3`.
pub fn is_version(version: &str) -> bool {
    version.strip_prefix('v').is_some_and(|rest| {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(digits_end);
        let tail_ok = tail.is_empty()
            || ["alpha", "beta"].iter().any(|p| {
                tail.strip_prefix(p)
                    .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            });
        !num.is_empty() && !num.starts_with('0') && tail_ok
    })
}

/// Checks a DNS-1123 subdomain (most object names, API groups).
pub fn dns_subdomain(s: &str) -> Result<(), String> {
    if s.len() > 253 {
        return Err("must be at most 253 characters".into());
    }
    s.split('.')
        .try_for_each(dns_label)
        .map_err(|why| format!("must be dot-separated parts that each {why}"))
}

/// Checks a name usable as one path segment (RBAC objects allow `:`).
fn path_segment(s: &str) -> Result<(), String> {
    if s.is_empty() || s == "." || s == ".." || s.contains(['/', '%']) {
        return Err("may not be empty, `.` or `..`, or contain `/` or `%`".into());
    }
    Ok(())
}

/// Checks an object name by the rule the API server applies to its kind.
pub fn object_name(gvk: &Gvk, name: &str) -> Result<(), String> {
    match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("", "Namespace" | "Service") => dns_label(name),
        ("rbac.authorization.k8s.io", _) => path_segment(name),
        _ => dns_subdomain(name),
    }
}

/// A name as it may appear in a message: escaped, and cut when long.
pub fn shown(name: &str) -> String {
    const MAX: usize = 80;
    let escaped = name.escape_debug().to_string();
    match escaped.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &escaped[..i]),
        None => escaped,
    }
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
    fn names_that_would_escape_their_url_are_refused_for_every_kind() {
        for kind in [
            gvk("", "ConfigMap"),
            gvk("", "Service"),
            gvk("rbac.authorization.k8s.io", "Role"),
        ] {
            for bad in [
                "x/../../../kube-system/configmaps/evil",
                "e4/status",
                "..",
                "a%2Fb",
                "",
            ] {
                assert!(object_name(&kind, bad).is_err(), "{kind} {bad}");
            }
        }
    }

    #[test]
    fn each_kind_takes_the_names_its_api_takes() {
        assert!(object_name(&gvk("", "ConfigMap"), "shop.v1-config").is_ok());
        assert!(
            object_name(&gvk("", "Service"), "shop.v1").is_err(),
            "a Service name is a label"
        );
        assert!(
            object_name(
                &gvk("rbac.authorization.k8s.io", "ClusterRole"),
                "system:kiln"
            )
            .is_ok()
        );
        assert!(object_name(&gvk("", "ConfigMap"), "Upper").is_err());
        assert!(object_name(&gvk("", "ConfigMap"), &"a".repeat(254)).is_err());
    }

    #[test]
    fn shown_names_are_escaped_and_cut() {
        assert_eq!(shown("a\nb"), "a\\nb");
        assert_eq!(shown(&"x".repeat(100)).chars().count(), 81);
    }
}
