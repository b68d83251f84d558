//! Keeps Secret values out of messages: conditions, Events, logs and
//! `kiln render` errors quote templates and API answers, and either may echo
//! a value a template read from a Secret (a name rendered from it, an
//! invalid value the API server quotes back).

use base64::Engine as _;
use serde_json::Value;

/// What replaces a Secret value in a message.
pub const REDACTED: &str = "[redacted]";

/// Shorter values are left alone: redacting `1` or `yes` everywhere would
/// garble messages and protects nothing.
const SHORTEST: usize = 4;

/// The values of the Secrets in `secrets` (Secret objects, or lists of
/// them: the caller knows their kind, which cached objects do not carry),
/// as stored (base64) and decoded, longest first.
pub fn secret_values<'a>(secrets: impl IntoIterator<Item = &'a Value>) -> Vec<String> {
    let mut out = Vec::new();
    for value in secrets {
        let objects: Vec<&Value> = match value {
            Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        for obj in objects {
            for (encoded, map) in [(true, &obj["data"]), (false, &obj["stringData"])] {
                let Some(map) = map.as_object() else { continue };
                for s in map.values().filter_map(Value::as_str) {
                    out.push(s.to_string());
                    if encoded
                        && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(s)
                        && let Ok(text) = String::from_utf8(bytes)
                    {
                        out.push(text);
                    }
                }
            }
        }
    }
    out.retain(|s| s.len() >= SHORTEST);
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

/// `secrets` and the values `random_secret` drew (as drawn and base64
/// encoded), longest first.
pub fn with_drawn<'a>(
    mut secrets: Vec<String>,
    drawn: impl IntoIterator<Item = &'a String>,
) -> Vec<String> {
    for value in drawn {
        secrets.push(base64::engine::general_purpose::STANDARD.encode(value));
        secrets.push(value.clone());
    }
    secrets.retain(|s| s.len() >= SHORTEST);
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    secrets
}

/// `message` with every one of `secrets` replaced by [`REDACTED`].
pub fn redact(message: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(message.to_string(), |m, s| m.replace(s.as_str(), REDACTED))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_values_are_redacted_stored_and_decoded() {
        let secret = json!({"kind": "Secret", "data": {"password": "aHVudGVyMi1zZWNyZXQ=", "n": "MQ=="}, "stringData": {"token": "abcd-efgh"}});
        let secrets = secret_values([&json!([secret])]);
        let message = "name `hunter2-secret` is not valid; aHVudGVyMi1zZWNyZXQ= and abcd-efgh; not-a-secret; 1";
        assert_eq!(
            redact(message, &secrets),
            "name `[redacted]` is not valid; [redacted] and [redacted]; not-a-secret; 1"
        );
    }

    #[test]
    fn drawn_values_are_redacted_as_drawn_and_encoded() {
        let drawn = ["Zq3vN8pLw2Xk7TbRcY1mA5sD9fGhJ4eU".to_string()];
        let encoded = base64::engine::general_purpose::STANDARD.encode(&drawn[0]);
        let secrets = with_drawn(Vec::new(), &drawn);
        let message = format!("data.password: Invalid value: {encoded} ({})", drawn[0]);
        assert_eq!(
            redact(&message, &secrets),
            "data.password: Invalid value: [redacted] ([redacted])"
        );
    }
}
