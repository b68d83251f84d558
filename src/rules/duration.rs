//! Durations written the Kubernetes (Go) way: `300ms`, `30s`, `5m`, `1h30m`,
//! `1.5s`. A bare number is refused: the unit is never guessed.

use std::time::Duration;

/// Parses a Go-style duration. Negative durations are refused.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') {
        return Err(format!("`{text}` is negative"));
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, after) = rest.split_at(num_len);
        if num.is_empty() || num == "." {
            return Err(format!(
                "`{text}` is not a duration (expected e.g. `30s`, `5m`, `1h30m`)"
            ));
        }
        let value: f64 = num
            .parse()
            .map_err(|_| format!("`{num}` in `{text}` is not a number"))?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, tail) = after.split_at(unit_len);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => {
                return Err(format!(
                    "`{text}` has a number without a unit (use e.g. `{num}s`)"
                ));
            }
            other => {
                return Err(format!(
                    "unknown unit `{other}` in `{text}` (use ns, us, ms, s, m or h)"
                ));
            }
        };
        total += value * seconds;
        rest = tail;
    }
    // About 292 years: anything longer is surely a typo.
    if total > 9.2e9 {
        return Err(format!("`{text}` is too long"));
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        for (text, ms) in [
            ("0", 0),
            ("300ms", 300),
            ("30s", 30_000),
            ("5m", 300_000),
            ("1h30m", 5_400_000),
            ("1.5s", 1_500),
            ("2h45m30.5s", 9_930_500),
            ("+10s", 10_000),
        ] {
            assert_eq!(parse(text).unwrap(), Duration::from_millis(ms), "{text}");
        }
        assert_eq!(parse("250us").unwrap(), Duration::from_micros(250));
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        for (text, why) in [
            ("", "empty"),
            ("10", "without a unit"),
            ("5 m", "unknown unit"),
            ("-5s", "negative"),
            ("5d", "unknown unit `d`"),
            ("s", "not a duration"),
            ("1..2s", "not a number"),
            ("100000000h", "too long"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(
                err.contains(why.trim_matches('`')) || err.contains(why),
                "{text}: {err}"
            );
        }
    }
}
