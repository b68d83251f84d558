//! Filters for building lists, hashing the way other tools do, and
//! comparing Kubernetes quantities, and the Python-style
//! methods (`s.split('.')`) that KRO and Kyverno users write. Each is pure
//! and bounded before it allocates: a result that would pass the template
//! value limit is refused up front, never built.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{Error, ErrorKind, State};
use sha2::{Digest, Sha256};

use super::limits::{VALUE_LIMIT, check, estimate};

/// Most items `each` and `product` may give.
pub const MAX_ITEMS: usize = 10_000;

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.into())
}

/// `list | each("expr")`: a new list, `expr` evaluated once per item with
/// `item` and `index` bound, and `self`, `related`, `children`, `vars` and
/// `ready` as in the template (KRO's `.map()`):
/// `self.spec.ports | each("{'name': 'p' ~ index, 'port': item}")`.
pub fn each(state: &State, list: &Value, expr: &str) -> Result<Value, Error> {
    let items = items_of(list, "each")?;
    let compiled = state
        .env()
        .compile_expression_owned(expr.to_string())
        .map_err(|e| invalid(format!("each: `{expr}` is not an expression: {e}")))?;
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let ctx = minijinja::context! {
            item => item,
            index => index,
            self => state.lookup("self"),
            related => state.lookup("related"),
            children => state.lookup("children"),
            observed => state.lookup("observed"),
            vars => state.lookup("vars"),
            ready => state.lookup("ready"),
        };
        let value = compiled.eval(ctx)?;
        check(&value, "a value of `each`")?;
        out.push(value);
    }
    Ok(Value::from(out))
}

/// `a | product(b, …)`: every combination, one item from each list, as a
/// list of lists in order (`[1, 2] | product(["x", "y"])` →
/// `[[1, "x"], [1, "y"], [2, "x"], [2, "y"]]`).
pub fn product(first: &Value, rest: Rest<Value>) -> Result<Value, Error> {
    let mut lists = vec![items_of(first, "product")?];
    for other in rest.iter() {
        lists.push(items_of(other, "product")?);
    }
    let total = lists
        .iter()
        .try_fold(1usize, |n, l| n.checked_mul(l.len()))
        .filter(|n| *n <= MAX_ITEMS)
        .ok_or_else(|| invalid(format!("product: more than {MAX_ITEMS} combinations")))?;
    let mut out = Vec::with_capacity(total);
    let mut at = vec![0usize; lists.len()];
    for _ in 0..total {
        out.push(Value::from(
            at.iter()
                .zip(&lists)
                .map(|(i, l)| l[*i].clone())
                .collect::<Vec<_>>(),
        ));
        // Count up like an odometer: the last list turns fastest.
        for k in (0..lists.len()).rev() {
            at[k] += 1;
            if at[k] < lists[k].len() {
                break;
            }
            at[k] = 0;
        }
    }
    Ok(Value::from(out))
}

/// The string literals passed to `each(…)` in a template's source, so that
/// `kiln validate` compiles them with the rule (a broken one is a located
/// diagnostic, not a render-time surprise).
pub fn each_literals(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("each(") {
        rest = rest[at + "each(".len()..].trim_start();
        let Some(quote) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            continue;
        };
        let mut literal = String::new();
        let mut chars = rest[1..].char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, next)) = chars.next() {
                        literal.push(next);
                    }
                }
                c if c == quote => {
                    end = Some(i + 2);
                    break;
                }
                c => literal.push(c),
            }
        }
        let Some(end) = end else { break };
        out.push(literal);
        rest = &rest[end..];
    }
    out
}

fn items_of(value: &Value, filter: &str) -> Result<Vec<Value>, Error> {
    if !matches!(value.kind(), ValueKind::Seq | ValueKind::Iterable) {
        return Err(invalid(format!(
            "{filter}: needs a list, got {}",
            value.kind()
        )));
    }
    let iter = value.try_iter()?;
    let mut items = Vec::new();
    for item in iter {
        if items.len() == MAX_ITEMS {
            return Err(invalid(format!("{filter}: more than {MAX_ITEMS} items")));
        }
        items.push(item);
    }
    Ok(items)
}

/// SHA-256 of `bytes` as `hex` (the default), `base64` or `base64url` (of
/// the raw digest, as KRO and most tools produce it).
pub fn digest(bytes: &[u8], encoding: Option<&str>) -> Result<String, Error> {
    encode("sha256", &Sha256::digest(bytes), encoding)
}

/// A hash's raw bytes as `hex` (the default), `base64` or `base64url`
/// (unpadded); `filter` names the filter in the error.
pub fn encode(filter: &str, raw: &[u8], encoding: Option<&str>) -> Result<String, Error> {
    match encoding.unwrap_or("hex") {
        "hex" => Ok(raw.iter().map(|b| format!("{b:02x}")).collect()),
        "base64" => Ok(STANDARD.encode(raw)),
        "base64url" => Ok(URL_SAFE_NO_PAD.encode(raw)),
        other => Err(invalid(format!(
            "{filter}: unknown encoding `{other}` (use hex, base64 or base64url)"
        ))),
    }
}

/// 64-bit FNV-1a of `bytes` (the hash Kubernetes' sharded list/watch uses),
/// big-endian: 16 hex digits by default.
pub fn fnv1a64(bytes: &[u8], encoding: Option<&str>) -> Result<String, Error> {
    let hash = crate::shard::ring::fnv1a64(bytes);
    encode("fnv1a64", &hash.to_be_bytes(), encoding)
}

/// A Kubernetes quantity as a number, so quantities compare:
/// `("1Gi" | quantity) > ("512Mi" | quantity)`, `"250m" | quantity` → 0.25.
/// Whole numbers come back as integers.
pub fn quantity(value: &Value) -> Result<Value, Error> {
    let parsed = match value.kind() {
        ValueKind::Number => return Ok(value.clone()),
        ValueKind::String => parse_quantity(value.as_str().unwrap_or_default()),
        other => Err(format!("needs a string like `512Mi`, got {other}")),
    };
    let n = parsed.map_err(|why| invalid(format!("quantity: {why}")))?;
    #[allow(
        clippy::cast_possible_truncation,
        clippy::float_cmp,
        reason = "only a whole number within i64 is given back as an integer"
    )]
    let whole = n.fract() == 0.0 && n.abs() < 9.0e15;
    #[allow(clippy::cast_possible_truncation, reason = "checked just above")]
    Ok(if whole {
        Value::from(n as i64)
    } else {
        Value::from(n)
    })
}

/// Parses `<number><suffix>`: binary (`Ki` … `Ei`), decimal (`n`, `u`, `m`,
/// `k`, `M` … `E`) or an exponent (`1e3`), the way Kubernetes does.
pub fn parse_quantity(text: &str) -> Result<f64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a quantity (expected e.g. 500m, 2, 1.5Gi)"))?;
    let factor = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        e if (e.starts_with('e') || e.starts_with('E')) && e.len() > 1 => {
            let exp: i32 = e[1..]
                .parse()
                .map_err(|_| format!("`{text}`: bad exponent `{e}`"))?;
            10f64.powi(exp)
        }
        other => return Err(format!("`{text}`: unknown suffix `{other}`")),
    };
    Ok(value * factor)
}

/// Python-style methods on strings and maps (`s.split('.')`, `s.upper()`,
/// `m.items()`), as KRO and Kyverno users write them; those whose result
/// could outgrow their inputs are bounded first, and `format` is refused.
pub fn method(
    state: &mut State,
    value: &Value,
    name: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if name == "format" {
        return Err(Error::new(
            ErrorKind::UnknownMethod,
            "str.format is not available; use `~` or the `format` filter",
        ));
    }
    // Sized like the filters of the same name (their arguments in filter order).
    let as_filter: Option<Vec<Value>> = match name {
        "replace" => Some(
            std::iter::once(value.clone())
                .chain(args.iter().cloned())
                .collect(),
        ),
        "join" => args.first().map(|items| vec![items.clone(), value.clone()]),
        _ => None,
    };
    if let Some(filter_args) = as_filter
        && estimate(name, &filter_args).is_some_and(|n| n > VALUE_LIMIT)
    {
        return Err(invalid(format!(
            "value too large: `{name}` would give more than {VALUE_LIMIT} bytes"
        )));
    }
    for arg in args {
        check(arg, &format!("an argument of `.{name}()`"))?;
    }
    let out = minijinja_contrib::pycompat::unknown_method_callback(state, value, name, args)?;
    check(&out, &format!("the result of `.{name}()`"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_literals_are_found_for_validation() {
        let source =
            r#"{{ a | each("{'p': item}") }} {{ b | each('item ~ "x"') }} {{ c | each(v) }}"#;
        assert_eq!(each_literals(source), ["{'p': item}", r#"item ~ "x""#]);
    }

    #[test]
    fn quantities_parse_the_kubernetes_way() {
        let cases = [
            ("1Gi", 1_073_741_824.0),
            ("512Mi", 536_870_912.0),
            ("250m", 0.25),
            ("1.5", 1.5),
            ("2k", 2000.0),
            ("1e3", 1000.0),
            ("100n", 1e-7),
            ("3", 3.0),
        ];
        for (text, want) in cases {
            let got = parse_quantity(text).unwrap();
            assert!((got - want).abs() < 1e-12 * want.max(1.0), "{text}: {got}");
        }
        assert!(
            parse_quantity("1Gb")
                .unwrap_err()
                .contains("unknown suffix")
        );
        assert!(parse_quantity("lots").is_err());
    }

    #[test]
    fn fnv1a64_matches_the_published_vectors() {
        assert_eq!(fnv1a64(b"", None).unwrap(), "cbf29ce484222325");
        assert_eq!(fnv1a64(b"a", None).unwrap(), "af63dc4c8601ec8c");
        assert_eq!(fnv1a64(b"foobar", None).unwrap(), "85944171f73967e8");
    }

    #[test]
    fn sha256_in_hex_and_base64_of_the_raw_digest() {
        assert_eq!(
            digest(b"abc", None).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            digest(b"abc", Some("base64")).unwrap(),
            "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="
        );
        assert_eq!(
            digest(b"abc", Some("base64url")).unwrap(),
            "ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0"
        );
        assert!(digest(b"abc", Some("rot13")).is_err());
    }
}
