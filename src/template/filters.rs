//! Filters kiln adds to minijinja's built-ins. Each is pure: no files, no
//! environment, no network. Every filter, kiln's and minijinja's, is
//! registered [`guarded`]: its inputs and result are size-checked.

use sha2::{Digest, Sha256};

use super::collections;
use super::limits::guarded;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use jsonpath_rust::JsonPath;
use minijinja::filters as builtin;
use minijinja::{Environment, Error, ErrorKind, Value};

/// Adds kiln's filters to `env` and replaces minijinja's built-in filters
/// with guarded ones; returns the names of all of them.
pub fn register(env: &mut Environment<'static>) -> Vec<&'static str> {
    let filters = [
        ("b64encode", Value::from_function(b64encode)),
        ("b64decode", Value::from_function(b64decode)),
        ("sha256", Value::from_function(sha256)),
        ("sha1", Value::from_function(sha1)),
        ("hmac_sha256", Value::from_function(hmac_sha256)),
        ("to_json", Value::from_function(to_json)),
        ("from_json", Value::from_function(from_json)),
        ("to_yaml", Value::from_function(to_yaml)),
        ("from_yaml", Value::from_function(from_yaml)),
        ("jsonpath", Value::from_function(jsonpath)),
        ("dns1123", Value::from_function(dns1123)),
        ("each", Value::from_function(collections::each)),
        ("product", Value::from_function(collections::product)),
        ("fnv1a64", Value::from_function(fnv1a64)),
        ("quantity", Value::from_function(collections::quantity)),
        // minijinja's, as `defaults.rs` registers them.
        ("safe", Value::from_function(builtin::safe)),
        ("escape", Value::from_function(builtin::escape)),
        ("e", Value::from_function(builtin::escape)),
        ("lower", Value::from_function(builtin::lower)),
        ("upper", Value::from_function(builtin::upper)),
        ("title", Value::from_function(builtin::title)),
        ("capitalize", Value::from_function(builtin::capitalize)),
        ("replace", Value::from_function(builtin::replace)),
        ("length", Value::from_function(builtin::length)),
        ("count", Value::from_function(builtin::length)),
        ("dictsort", Value::from_function(builtin::dictsort)),
        ("items", Value::from_function(builtin::items)),
        ("reverse", Value::from_function(builtin::reverse)),
        ("trim", Value::from_function(builtin::trim)),
        ("join", Value::from_function(builtin::join)),
        ("split", Value::from_function(builtin::split)),
        ("lines", Value::from_function(builtin::lines)),
        ("default", Value::from_function(builtin::default)),
        ("d", Value::from_function(builtin::default)),
        ("round", Value::from_function(builtin::round)),
        ("abs", Value::from_function(builtin::abs)),
        ("int", Value::from_function(builtin::int)),
        ("float", Value::from_function(builtin::float)),
        ("attr", Value::from_function(builtin::attr)),
        ("first", Value::from_function(builtin::first)),
        ("last", Value::from_function(builtin::last)),
        ("min", Value::from_function(builtin::min)),
        ("max", Value::from_function(builtin::max)),
        ("sort", Value::from_function(builtin::sort)),
        ("list", Value::from_function(builtin::list)),
        ("string", Value::from_function(builtin::string)),
        ("bool", Value::from_function(builtin::bool)),
        ("batch", Value::from_function(builtin::batch)),
        ("slice", Value::from_function(builtin::slice)),
        ("sum", Value::from_function(builtin::sum)),
        ("indent", Value::from_function(builtin::indent)),
        ("select", Value::from_function(builtin::select)),
        ("reject", Value::from_function(builtin::reject)),
        ("selectattr", Value::from_function(builtin::selectattr)),
        ("rejectattr", Value::from_function(builtin::rejectattr)),
        ("map", Value::from_function(builtin::map)),
        ("groupby", Value::from_function(builtin::groupby)),
        ("unique", Value::from_function(builtin::unique)),
        ("chain", Value::from_function(builtin::chain)),
        ("zip", Value::from_function(builtin::zip)),
        ("pprint", Value::from_function(builtin::pprint)),
        ("format", Value::from_function(builtin::format)),
        ("tojson", Value::from_function(builtin::tojson)),
    ];
    let mut names = Vec::with_capacity(filters.len());
    for (name, filter) in filters
        .into_iter()
        .chain(super::time::filters())
        .chain(super::image::filters())
    {
        env.add_filter(name, guarded(name, filter));
        names.push(name);
    }
    names
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.into())
}

fn json(value: &Value) -> Result<serde_json::Value, Error> {
    if value.is_undefined() {
        return Err(Error::new(
            ErrorKind::UndefinedError,
            "the filter's input is undefined",
        ));
    }
    serde_json::to_value(value)
        .map_err(|e| invalid(format!("value is not representable as JSON: {e}")))
}

/// The bytes a filter works on: a string as is, anything else as compact JSON.
fn bytes_of(value: &Value) -> Result<Vec<u8>, Error> {
    match value.as_str() {
        Some(s) => Ok(s.as_bytes().to_vec()),
        None => serde_json::to_vec(&json(value)?).map_err(|e| invalid(e.to_string())),
    }
}

/// `"abc" | b64encode` → `"YWJj"`
fn b64encode(value: &Value) -> Result<String, Error> {
    Ok(STANDARD.encode(bytes_of(value)?))
}

/// `"YWJj" | b64decode` → `"abc"`; fails unless the result is UTF-8 text.
fn b64decode(value: &str) -> Result<String, Error> {
    let bytes = STANDARD
        .decode(value.trim())
        .map_err(|e| invalid(format!("b64decode: {e}")))?;
    String::from_utf8(bytes).map_err(|_| invalid("b64decode: the decoded bytes are not UTF-8 text"))
}

/// SHA-256 of a string, or of the compact JSON of any other value: hex, or
/// `sha256("base64")` for base64 of the raw digest.
fn sha256(value: &Value, encoding: Option<&str>) -> Result<String, Error> {
    collections::digest(&bytes_of(value)?, encoding)
}

/// SHA-1 of a string, or of the compact JSON of any other value: hex, or
/// `sha1("base64")`. For hashes other tools compare with (Reloader's), not
/// for security.
fn sha1(value: &Value, encoding: Option<&str>) -> Result<String, Error> {
    let raw = sha1::Sha1::digest(bytes_of(value)?);
    collections::encode("sha1", &raw, encoding)
}

/// 64-bit FNV-1a of a string (or the compact JSON of any other value): hex,
/// or `fnv1a64("base64")` for base64 of its 8 bytes, big-endian.
fn fnv1a64(value: &Value, encoding: Option<&str>) -> Result<String, Error> {
    collections::fnv1a64(&bytes_of(value)?, encoding)
}

/// Fewest bytes an `hmac_sha256` key may have: a shorter key can be guessed.
const MIN_KEY: usize = 16;

/// Hex HMAC-SHA-256 (RFC 2104) of a string, or of the compact JSON of any
/// other value, keyed with `key` (a string, or any value's compact JSON).
/// Without the key, the digest tells nothing about the value, even a
/// guessable one.
fn hmac_sha256(value: &Value, key: &Value) -> Result<String, Error> {
    let key = bytes_of(key)?;
    if key.len() < MIN_KEY {
        return Err(invalid(format!(
            "hmac_sha256: the key has {} bytes; it needs at least {MIN_KEY} (e.g. a random_secret(32) kept in a Secret)",
            key.len()
        )));
    }
    let digest = hmac(&key, &bytes_of(value)?);
    Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
}

fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// Compact JSON text of a value.
fn to_json(value: &Value) -> Result<String, Error> {
    serde_json::to_string(&json(value)?).map_err(|e| invalid(e.to_string()))
}

/// Parses JSON text into a value.
fn from_json(value: &str) -> Result<Value, Error> {
    let parsed: serde_json::Value =
        serde_json::from_str(value).map_err(|e| invalid(format!("from_json: {e}")))?;
    Ok(Value::from(minijinja::value::Serde(parsed)))
}

/// YAML text of a value (for ConfigMap data, say).
fn to_yaml(value: &Value) -> Result<String, Error> {
    crate::yaml_out::to_string(&json(value)?).map_err(|e| invalid(format!("to_yaml: {e}")))
}

/// Parses YAML text (one document) into a value; a YAML value JSON cannot
/// hold (a non-string key, NaN) is an error.
fn from_yaml(value: &str) -> Result<Value, Error> {
    let parsed: serde_json::Value =
        serde_norway::from_str(value).map_err(|e| invalid(format!("from_yaml: {e}")))?;
    Ok(Value::from(minijinja::value::Serde(parsed)))
}

/// Every match of a JSONPath expression, as a list: `obj | jsonpath("$.items[*].name")`.
fn jsonpath(value: &Value, path: &str) -> Result<Value, Error> {
    let doc = json(value)?;
    let found = doc
        .query(path)
        .map_err(|e| invalid(format!("jsonpath `{path}`: {e}")))?;
    Ok(Value::from(minijinja::value::Serde(found)))
}

/// A valid DNS-1123 label made from any string: lower-case, runs of other
/// characters become one `-`, trimmed, at most 63 characters.
fn dns1123(value: &str) -> Result<String, Error> {
    let mut out = String::with_capacity(value.len().min(63));
    for c in value.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.truncate(63);
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() {
        return Err(invalid(format!(
            "dns1123: `{value}` has no letters or digits to make a name from"
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, ctx: serde_json::Value) -> Result<String, Error> {
        let mut env = Environment::new();
        register(&mut env);
        env.render_str(src, Value::from(minijinja::value::Serde(ctx)))
    }

    #[test]
    fn b64_round_trips_text() {
        assert_eq!(
            render(r#"{{ "hunter2" | b64encode }}"#, serde_json::json!({})).unwrap(),
            "aHVudGVyMg=="
        );
        assert_eq!(
            render(r#"{{ "aHVudGVyMg==" | b64decode }}"#, serde_json::json!({})).unwrap(),
            "hunter2"
        );
        let err = render(r#"{{ "!!" | b64decode }}"#, serde_json::json!({})).unwrap_err();
        assert!(err.to_string().contains("b64decode"), "{err}");
        let err = render(r#"{{ "/w==" | b64decode }}"#, serde_json::json!({})).unwrap_err();
        assert!(err.to_string().contains("not UTF-8"), "{err}");
    }

    #[test]
    fn sha256_hashes_strings_and_values() {
        assert_eq!(
            render(r#"{{ "abc" | sha256 }}"#, serde_json::json!({})).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // A map hashes as its compact JSON, so a config change changes the hash.
        let a = render("{{ m | sha256 }}", serde_json::json!({"m": {"a": 1}})).unwrap();
        let b = render("{{ m | sha256 }}", serde_json::json!({"m": {"a": 2}})).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231_and_needs_a_real_key() {
        // RFC 4231, test case 2 (a 4-byte key: checked with the inner
        // function, as the filter refuses so short a key).
        let hex = |d: [u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(
            hex(hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block is hashed first.
        assert_eq!(
            hex(hmac(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
        let ctx = serde_json::json!({"m": {"password": "aHVudGVyMg=="}, "k": "0123456789abcdef"});
        let keyed = render("{{ m | hmac_sha256(k) }}", ctx.clone()).unwrap();
        let plain = render("{{ m | sha256 }}", ctx.clone()).unwrap();
        assert_eq!(keyed.len(), 64);
        assert_ne!(keyed, plain);
        let other = render("{{ m | hmac_sha256(k ~ 'x') }}", ctx.clone()).unwrap();
        assert_ne!(keyed, other, "another key, another digest");
        let err = render("{{ m | hmac_sha256('short') }}", ctx.clone()).unwrap_err();
        assert!(err.to_string().contains("at least 16"), "{err}");
        let err = render("{{ m | hmac_sha256(nope) }}", ctx).unwrap_err();
        assert!(err.to_string().contains("undefined"), "{err}");
    }

    #[test]
    fn json_and_yaml_conversions() {
        assert_eq!(
            render(
                "{{ m | to_json }}",
                serde_json::json!({"m": {"a": [1, true]}})
            )
            .unwrap(),
            r#"{"a":[1,true]}"#
        );
        assert_eq!(
            render(
                r#"{{ ('{"a": 2}' | from_json).a + 1 }}"#,
                serde_json::json!({})
            )
            .unwrap(),
            "3"
        );
        assert!(
            render(r#"{{ "{nope" | from_json }}"#, serde_json::json!({}))
                .unwrap_err()
                .to_string()
                .contains("from_json")
        );
        assert_eq!(
            render(
                "{{ m | to_yaml }}",
                serde_json::json!({"m": {"a": 1, "b": "x"}})
            )
            .unwrap(),
            "a: 1\nb: x\n"
        );
    }

    #[test]
    fn from_yaml_parses_what_to_yaml_writes() {
        let ctx = serde_json::json!({"doc": "a: 1\nb:\n  - x\n  - y\n"});
        assert_eq!(
            render("{{ (doc | from_yaml).b | join(',') }}", ctx.clone()).unwrap(),
            "x,y"
        );
        assert_eq!(
            render("{{ doc | from_yaml | to_yaml }}", ctx).unwrap(),
            // `y` is a boolean to YAML 1.1 readers: quoted, so it stays a string.
            "a: 1\nb:\n- x\n- \"y\"\n"
        );
        let err = render(r#"{{ "a: [" | from_yaml }}"#, serde_json::json!({})).unwrap_err();
        assert!(err.to_string().contains("from_yaml"), "{err}");
    }

    #[test]
    fn sha1_and_fnv1a64_hash_raw_bytes_in_hex_or_base64() {
        // FIPS 180-1's "abc".
        assert_eq!(
            render(r#"{{ "abc" | sha1 }}"#, serde_json::json!({})).unwrap(),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            render(r#"{{ "abc" | sha1("base64") }}"#, serde_json::json!({})).unwrap(),
            "qZk+NkcGgWq6PiVxeFDCbJzQ2J0="
        );
        assert_eq!(
            render(r#"{{ "foobar" | fnv1a64 }}"#, serde_json::json!({})).unwrap(),
            "85944171f73967e8"
        );
        // The same 8 bytes, big-endian, in base64.
        assert_eq!(
            render(
                r#"{{ "foobar" | fnv1a64("base64") }}"#,
                serde_json::json!({})
            )
            .unwrap(),
            "hZRBcfc5Z+g="
        );
        let err = render(r#"{{ "x" | sha1("hex2") }}"#, serde_json::json!({})).unwrap_err();
        assert!(err.to_string().contains("sha1: unknown encoding"), "{err}");
    }

    #[test]
    fn jsonpath_returns_every_match() {
        let ctx = serde_json::json!({"o": {"items": [{"n": "a"}, {"n": "b"}]}});
        assert_eq!(
            render(
                r#"{{ o | jsonpath("$.items[*].n") | join(",") }}"#,
                ctx.clone()
            )
            .unwrap(),
            "a,b"
        );
        assert_eq!(
            render(r#"{{ o | jsonpath("$.missing") | length }}"#, ctx.clone()).unwrap(),
            "0"
        );
        assert!(
            render(r#"{{ o | jsonpath("$[") }}"#, ctx)
                .unwrap_err()
                .to_string()
                .contains("jsonpath")
        );
    }

    #[test]
    fn dns1123_makes_valid_labels() {
        for (input, want) in [
            ("My_App.v2", "my-app-v2"),
            ("--Hello   World--", "hello-world"),
            ("ok", "ok"),
            ("Ünïcode", "n-code"),
        ] {
            assert_eq!(dns1123(input).unwrap(), want, "{input}");
        }
        let long = "a".repeat(62) + "-b";
        assert_eq!(dns1123(&long).unwrap(), "a".repeat(62));
        assert!(dns1123("___").is_err());
    }
}
