//! `image_ref`: a container image reference split into its parts as
//! container runtimes read it, `[host[:port]/]path[:tag][@digest]`. A `:`
//! before the last `/` belongs to the registry host (its port), never to a
//! tag: `registry.local:5000/shop` has no tag.

use minijinja::{Error, ErrorKind, Value};

/// The filters of this module, for `filters::register`.
pub fn filters() -> [(&'static str, Value); 1] {
    [("image_ref", Value::from_function(image_ref))]
}

/// The parts of an image reference: the repository (with its registry
/// host and port), and the tag and digest when it has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRef<'a> {
    /// Everything before the tag and digest: `registry.local:5000/shop`.
    pub repository: &'a str,
    /// After the last `:` of the last path segment: `1.2`.
    pub tag: Option<&'a str>,
    /// After `@`: `sha256:…`.
    pub digest: Option<&'a str>,
}

/// At most this many characters of a value are quoted in an error: a
/// tenant's value may be as long as an object holds (1 MiB).
const QUOTED: usize = 80;

/// `text` as an error quotes it: escaped, cut to [`QUOTED`] characters,
/// saying how long it was when cut.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED) {
        None => text.escape_debug().to_string(),
        Some((end, _)) => format!(
            "{}…` ({} bytes in all) `",
            text[..end].escape_debug(),
            text.len()
        ),
    }
}

/// Splits `text` into its parts; a reference no runtime would pull (empty,
/// with spaces, an empty part) is an error saying which part, quoting at
/// most the first [`QUOTED`] characters of what it quotes.
pub fn parse(text: &str) -> Result<ImageRef<'_>, String> {
    if text.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "`{}` is not an image reference (empty, or with spaces)",
            quoted(text)
        ));
    }
    let (named, digest) = match text.split_once('@') {
        Some((named, digest)) => (named, Some(digest)),
        None => (text, None),
    };
    if let Some(d) = digest
        && (d.contains('@')
            || !d
                .split_once(':')
                .is_some_and(|(algorithm, hex)| !algorithm.is_empty() && !hex.is_empty()))
    {
        return Err(format!(
            "`{}`: the digest after `@` must be `algorithm:hex`, got `{}`",
            quoted(text),
            quoted(d)
        ));
    }
    // Only the last path segment may carry a tag.
    let last = named.rfind('/').map_or(0, |slash| slash + 1);
    let (repository, tag) = match named[last..].rfind(':') {
        Some(colon) => (&named[..last + colon], Some(&named[last + colon + 1..])),
        None => (named, None),
    };
    if repository.is_empty() || repository.ends_with('/') {
        return Err(format!("`{}` names no repository", quoted(text)));
    }
    if let Some(t) = tag
        && (t.is_empty()
            || t.len() > 128
            || t.starts_with(['.', '-'])
            || !t
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "`{}`: the tag `{}` is not a tag (1 to 128 letters, digits, `_`, `.` or `-`, not first `.` or `-`)",
            quoted(text),
            quoted(t)
        ));
    }
    Ok(ImageRef {
        repository,
        tag,
        digest,
    })
}

/// `image | image_ref`: `{repository, tag, digest}`, each part present
/// only when the reference has it.
fn image_ref(text: &str) -> Result<Value, Error> {
    let parts = parse(text)
        .map_err(|why| Error::new(ErrorKind::InvalidOperation, format!("image_ref: {why}")))?;
    let mut map = serde_json::Map::new();
    map.insert("repository".into(), parts.repository.into());
    if let Some(tag) = parts.tag {
        map.insert("tag".into(), tag.into());
    }
    if let Some(digest) = parts.digest {
        map.insert("digest".into(), digest.into());
    }
    Ok(Value::from(minijinja::value::Serde(
        serde_json::Value::Object(map),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_port_in_the_registry_host_is_no_tag() {
        let r = |repository, tag, digest| {
            Ok(ImageRef {
                repository,
                tag,
                digest,
            })
        };
        assert_eq!(
            parse("registry.local:5000/shop:1.2"),
            r("registry.local:5000/shop", Some("1.2"), None)
        );
        assert_eq!(
            parse("registry.local:5000/shop"),
            r("registry.local:5000/shop", None, None)
        );
        assert_eq!(parse("nginx"), r("nginx", None, None));
        assert_eq!(parse("nginx:1.27"), r("nginx", Some("1.27"), None));
        assert_eq!(
            parse("ghcr.io/a/b:v1@sha256:abc"),
            r("ghcr.io/a/b", Some("v1"), Some("sha256:abc"))
        );
        assert_eq!(
            parse("localhost:5000/a@sha256:abc"),
            r("localhost:5000/a", None, Some("sha256:abc"))
        );
    }

    #[test]
    fn an_error_quotes_a_bounded_prefix_of_a_huge_value() {
        let huge = format!("nginx:{}", "x".repeat(1 << 20));
        for text in [
            huge.clone(),
            format!("{huge} "),
            format!("{huge}/"),
            format!("nginx@sha256:{}@x", "a".repeat(1 << 20)),
        ] {
            let why = parse(&text).unwrap_err();
            assert!(why.len() < 600, "{} bytes: {}", why.len(), &why[..600]);
            assert!(why.contains("bytes in all"), "{why}");
        }
        // Short values are quoted whole, multi-byte characters cut whole.
        assert_eq!(quoted("nginx latest"), "nginx latest");
        let long = "é".repeat(100);
        assert!(quoted(&long).starts_with(&"é".repeat(80)));
    }

    #[test]
    fn what_no_runtime_would_pull_is_refused_naming_the_part() {
        for (text, why) in [
            ("", "not an image reference"),
            ("nginx latest", "not an image reference"),
            (":1.2", "names no repository"),
            ("host:5000/", "names no repository"),
            ("nginx:", "is not a tag"),
            ("nginx:-x", "is not a tag"),
            ("nginx@", "algorithm:hex"),
            ("nginx@sha256", "algorithm:hex"),
            ("nginx@sha256:abc@sha256:def", "algorithm:hex"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn the_filter_gives_only_the_parts_the_reference_has() {
        let mut set = crate::template::TemplateSet::new();
        let id = set.add_expr("t", "self | image_ref").unwrap();
        let eval = |image: &str| {
            let ctx = minijinja::context! { self => image };
            set.eval(&id, &ctx, &mut crate::template::Budget::default())
        };
        assert_eq!(
            eval("registry.local:5000/shop:1.2").unwrap(),
            json!({"repository": "registry.local:5000/shop", "tag": "1.2"})
        );
        assert_eq!(eval("shop").unwrap(), json!({"repository": "shop"}));
        let err = eval("shop:").unwrap_err().to_string();
        assert!(err.contains("image_ref: `shop:`"), "{err}");
    }

    /// The shipped `rules/webapp-api.yaml`'s rule.
    fn webapp_api() -> std::sync::Arc<crate::rules::Rule> {
        let path = std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/rules/webapp-api.yaml"
        ));
        crate::rules::load(&[path]).unwrap().rules[0].clone()
    }

    /// The shipped `rules/webapp-api.yaml` stores the v1alpha1 image
    /// `registry.local:5000/shop:1.2` with its tag, and gives it back whole.
    #[test]
    fn the_shipped_webapp_api_keeps_a_registry_port_out_of_the_tag() {
        let rule = webapp_api();
        let api = rule.api.as_ref().unwrap();
        let conversions = api.conversions.as_ref().unwrap();
        for (image, stored) in [
            (
                "registry.local:5000/shop:1.2",
                json!({"repository": "registry.local:5000/shop", "tag": "1.2"}),
            ),
            (
                "registry.local:5000/shop",
                json!({"repository": "registry.local:5000/shop"}),
            ),
            (
                "shop@sha256:abc",
                json!({"repository": "shop", "digest": "sha256:abc"}),
            ),
        ] {
            let old = json!({
                "apiVersion": "apps.demo.kiln.dev/v1alpha1", "kind": "WebApp",
                "metadata": {"name": "shop", "namespace": "team-a"},
                "spec": {"image": image, "replicas": 1, "port": 8080},
            });
            let v1 = conversions.convert(&old, "v1").unwrap();
            assert_eq!(v1["spec"]["image"], stored, "{image}");
            assert_eq!(conversions.convert(&v1, "v1alpha1").unwrap(), old);
        }
    }

    /// Hostile references (huge, many colons and `@`, slashes, multi-byte
    /// characters) are split or refused, never a panic; what is split
    /// gives the reference back whole.
    #[test]
    fn hostile_references_never_panic() {
        let huge = "a".repeat(1 << 20);
        let many = |part: &str| part.repeat(1 << 18);
        for text in [
            huge.clone(),
            format!("{huge}:{huge}"),
            format!("{huge}@sha256:{huge}"),
            many(":"),
            many("@"),
            many("/"),
            many("a:"),
            many("a@"),
            many("é:ü/"),
            "ñ/ü:é".into(),
            "host:5000/:1".into(),
            "/:x".into(),
            "a/b:c:d".into(),
            ":@:".into(),
            "\u{202e}x".into(),
            "a\u{0}b".into(),
            "a\u{a0}b".into(),
        ] {
            match parse(&text) {
                Ok(r) => {
                    // What it splits gives the reference back whole.
                    let whole = format!(
                        "{}{}{}",
                        r.repository,
                        r.tag.map(|t| format!(":{t}")).unwrap_or_default(),
                        r.digest.map(|d| format!("@{d}")).unwrap_or_default()
                    );
                    assert_eq!(whole, text);
                }
                Err(why) => assert!(!why.is_empty()),
            }
        }
    }

    /// Every v1 image the shipped `rules/webapp-api.yaml`'s v1 schema takes
    /// survives v1 → v1alpha1 → v1 (a v1alpha1 client's read-modify-write):
    /// one that would not come back whole (a `:` in the repository's last
    /// part, a tag with a `:`, a second `@`) is refused by its patterns.
    #[test]
    fn the_shipped_webapp_api_takes_only_v1_images_that_survive_v1alpha1() {
        let rule = webapp_api();
        let api = rule.api.as_ref().unwrap();
        let image = &api.schema("v1").unwrap()["properties"]["spec"]["properties"]["image"];
        let accepts = |field: &str, value: &str| {
            // A field with no pattern takes any string.
            image["properties"][field]["pattern"]
                .as_str()
                .is_none_or(|p| regex::Regex::new(p).unwrap().is_match(value))
        };
        let conversions = api.conversions.as_ref().unwrap();
        for (repository, tag, digest) in [
            ("registry.local:5000/shop", Some("1.2"), None),
            ("shop", None, Some("sha256:abc")),
            ("registry.local:5000/shop", None, None),
            ("shop:1", None, None),
            ("host:5000/shop:1", Some("2"), None),
            ("shop", Some("1:2"), None),
            ("shop", Some(""), None),
            ("shop", None, Some("sha256:a@b:c")),
            ("shop@x", None, None),
            ("shop/", None, None),
            ("", None, None),
        ] {
            let accepted = accepts("repository", repository)
                && tag.is_none_or(|t| accepts("tag", t))
                && digest.is_none_or(|d| accepts("digest", d));
            let mut stored = json!({"repository": repository});
            if let Some(t) = tag {
                stored["tag"] = json!(t);
            }
            if let Some(d) = digest {
                stored["digest"] = json!(d);
            }
            let v1 = json!({
                "apiVersion": "apps.demo.kiln.dev/v1", "kind": "WebApp",
                "metadata": {"name": "shop", "namespace": "team-a"},
                "spec": {"image": stored, "replicas": 1, "port": 8080},
            });
            let back = conversions
                .convert(&v1, "v1alpha1")
                .and_then(|old| conversions.convert(&old, "v1"));
            let survives = back.as_ref().is_ok_and(|b| b == &v1);
            assert!(!accepted || survives, "{stored} taken: {back:?}");
        }
    }
}
