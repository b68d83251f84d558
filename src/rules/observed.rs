//! `observed.<id>`: a rule's live child, read without waiting for it.
//!
//! `children.<id>` both reads a child and orders: the reader waits until
//! the child exists, so two children reading each other are a cycle.
//! `observed.<id>` reads the same live object (undefined until it exists)
//! and adds no edge: the reader renders at once, with whatever is there
//! now, and renders again when the child changes. It may be read wherever
//! `children` may.

/// The root templates use.
pub const ROOT: &str = "observed";

/// Why a reference `observed.<name>` is wrong where the template stands
/// (`children_here`: whether `children` may be read there), if it is.
pub fn problem(children_here: bool, name: Option<&str>, ids: &[String]) -> Option<String> {
    if !children_here {
        return Some(format!(
            "unknown variable `{ROOT}`: it reads live children, which only templates that may read `children` can"
        ));
    }
    let name = name?;
    if ids.iter().any(|id| id == name) {
        return None;
    }
    let known = if ids.is_empty() {
        "none".to_string()
    } else {
        ids.join(", ")
    };
    Some(format!(
        "`{ROOT}.{name}` is not declared in spec.children (declared: {known})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observed_reads_declared_children_where_children_may_be_read() {
        let ids = vec!["service".to_string()];
        assert_eq!(problem(true, Some("service"), &ids), None);
        assert_eq!(problem(true, None, &ids), None, "the whole map");
        assert!(
            problem(true, Some("svc"), &ids)
                .unwrap()
                .contains("declared: service")
        );
        assert!(problem(false, Some("service"), &ids).is_some(), "a watch");
    }
}
