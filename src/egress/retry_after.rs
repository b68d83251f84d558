//! `Retry-After`: seconds or an HTTP date, bounded to an hour so a server
//! cannot silence a source for longer.

use std::time::Duration;

/// The longest wait a `Retry-After` may ask.
pub const MAX: Duration = Duration::from_secs(3600);

/// The wait `value` asks, bounded to [`MAX`]; `None` when it is neither
/// form.
pub fn parse(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs).min(MAX));
    }
    let at = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(value)
        .ok()?;
    let wait = at.duration_since(jiff::Timestamp::now());
    Some(Duration::try_from(wait).unwrap_or(Duration::ZERO).min(MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_dates_are_read_and_bounded() {
        assert_eq!(parse("120"), Some(Duration::from_secs(120)));
        assert_eq!(parse("99999999"), Some(MAX));
        assert_eq!(parse("Wed, 21 Oct 2015 07:28:00 GMT"), Some(Duration::ZERO));
        assert_eq!(parse("soon"), None);
        assert_eq!(parse("-5"), None);
        let later = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(90);
        let text = jiff::fmt::rfc2822::DateTimePrinter::new()
            .timestamp_to_rfc9110_string(&later)
            .unwrap();
        let got = parse(&text).unwrap();
        assert!(
            got <= Duration::from_secs(90) && got >= Duration::from_secs(80),
            "{got:?}"
        );
    }
}
