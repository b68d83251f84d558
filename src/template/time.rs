//! Time in templates. Times are RFC 3339 strings (`2026-05-17T10:20:00Z`);
//! every function here takes any RFC 3339 time (any offset) and gives one
//! back in UTC, whole seconds unless it has a fraction. Durations are
//! Go-style text (`90s`, `1h30m`) or a number of seconds.
//!
//! `now()` does not read the clock: it gives the instant the render was
//! started with (the variable [`NOW`] in the context), so one render sees
//! one instant however often it asks, and `kiln render --now` reproduces a
//! render exactly. The time-zone database is built in: a zone means the
//! same on every machine.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind, State};

use super::cron::Schedule;

/// The context variable holding the render's instant.
pub const NOW: &str = "__kiln_now";

/// Adds the time functions and filters to `env`.
pub fn register(env: &mut Environment<'static>) {
    env.add_function("now", now);
    env.add_function("cron_next", cron_next);
    env.add_function("cron_prev", cron_prev);
    env.add_function("time_diff", time_diff);
    env.add_function("parse_time", parse_time);
}

/// The filters: (name, function), registered guarded with the others.
pub fn filters() -> [(&'static str, Value); 5] {
    [
        ("parse_time", Value::from_function(parse_time)),
        ("format_time", Value::from_function(format_time)),
        ("add_duration", Value::from_function(add_duration)),
        ("sub_duration", Value::from_function(sub_duration)),
        ("unix", Value::from_function(unix)),
    ]
}

/// The instant a render starts at: now, to the whole second (as Kubernetes
/// keeps times).
pub fn current() -> Timestamp {
    let now = Timestamp::now();
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.into())
}

/// Parses an RFC 3339 time.
pub fn parse(text: &str) -> Result<Timestamp, String> {
    text.trim()
        .parse::<Timestamp>()
        .map_err(|_| format!("`{text}` is not an RFC 3339 time (e.g. 2026-05-17T10:20:00Z)"))
}

fn time(what: &str, value: &Value) -> Result<Timestamp, Error> {
    if value.is_undefined() || value.is_none() {
        return Err(Error::new(
            ErrorKind::UndefinedError,
            format!("{what}: the time is undefined"),
        ));
    }
    let text = value.as_str().ok_or_else(|| {
        invalid(format!(
            "{what}: a time is an RFC 3339 string, not {}",
            value.kind()
        ))
    })?;
    parse(text).map_err(|e| invalid(format!("{what}: {e}")))
}

fn show(t: Timestamp) -> String {
    t.to_string()
}

/// `now()`: the render's instant.
fn now(state: &State) -> Result<String, Error> {
    let value = state.lookup(NOW).unwrap_or_default();
    time("now()", &value).map(show)
}

/// `parse_time(text)` / `text | parse_time`: the time in UTC (to compare
/// or show times written with other offsets).
fn parse_time(value: &Value) -> Result<String, Error> {
    time("parse_time", value).map(show)
}

/// `t | format_time("%Y-%m-%d %H:%M", tz="Europe/Berlin")`: strftime-style.
fn format_time(value: &Value, format: &str, kwargs: Kwargs) -> Result<String, Error> {
    let t = time("format_time", value)?;
    let zone: Option<&str> = kwargs.get("tz")?;
    kwargs.assert_all_used()?;
    let zoned = t.to_zoned(zone_named("format_time", zone)?);
    jiff::fmt::strtime::format(format, &zoned).map_err(|e| invalid(format!("format_time: {e}")))
}

/// A duration: Go-style text, or a number of seconds (negative allowed).
fn duration(what: &str, value: &Value) -> Result<SignedDuration, Error> {
    if let Some(text) = value.as_str() {
        let (negative, text) = match text.trim().strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let d = crate::rules::duration::parse(text).map_err(|e| invalid(format!("{what}: {e}")))?;
        let d = SignedDuration::try_from(d).map_err(|e| invalid(format!("{what}: {e}")))?;
        return Ok(if negative { -d } else { d });
    }
    match f64::try_from(value.clone()) {
        Ok(seconds) if seconds.is_finite() && seconds.abs() < 1e15 => {
            Ok(SignedDuration::from_secs_f64(seconds))
        }
        _ => Err(invalid(format!(
            "{what}: a duration is text like `90s` or `1h30m`, or seconds, not {}",
            value.kind()
        ))),
    }
}

fn shifted(what: &str, value: &Value, by: SignedDuration) -> Result<String, Error> {
    let t = time(what, value)?;
    t.checked_add(by)
        .map(show)
        .map_err(|e| invalid(format!("{what}: {e}")))
}

/// `t | add_duration("1h30m")`
fn add_duration(value: &Value, d: &Value) -> Result<String, Error> {
    shifted("add_duration", value, duration("add_duration", d)?)
}

/// `t | sub_duration("90s")`
fn sub_duration(value: &Value, d: &Value) -> Result<String, Error> {
    shifted("sub_duration", value, -duration("sub_duration", d)?)
}

/// `t | unix`: seconds since 1970-01-01T00:00:00Z.
fn unix(value: &Value) -> Result<i64, Error> {
    time("unix", value).map(|t| t.as_second())
}

/// `time_diff(a, b)`: seconds from `b` to `a` (positive when `a` is later);
/// whole seconds as an integer.
fn time_diff(a: &Value, b: &Value) -> Result<Value, Error> {
    let d = time("time_diff", a)?.duration_since(time("time_diff", b)?);
    Ok(if d.subsec_nanos() == 0 {
        Value::from(d.as_secs())
    } else {
        Value::from(d.as_secs_f64())
    })
}

fn zone_named(what: &str, name: Option<&str>) -> Result<TimeZone, Error> {
    match name {
        None | Some("UTC") => Ok(TimeZone::UTC),
        Some(name) => {
            TimeZone::get(name).map_err(|_| invalid(format!("{what}: unknown time zone `{name}`")))
        }
    }
}

/// A schedule and the zone it runs in: its `CRON_TZ=` prefix, or `tz=`.
fn schedule(what: &str, text: &str, kwargs: &Kwargs) -> Result<(Schedule, TimeZone), Error> {
    let schedule = Schedule::parse(text).map_err(|e| invalid(format!("{what}: {e}")))?;
    let tz: Option<&str> = kwargs.get("tz")?;
    kwargs.assert_all_used()?;
    let zone = match (schedule.zone.as_deref(), tz) {
        (Some(a), Some(b)) if a != b => {
            return Err(invalid(format!(
                "{what}: the schedule says CRON_TZ={a} and tz is `{b}`"
            )));
        }
        (Some(z), _) | (None, Some(z)) => Some(z),
        (None, None) => None,
    };
    let tz = zone_named(what, zone)?;
    Ok((schedule, tz))
}

/// `cron_next(schedule, after, tz=None)`: the first time after `after`
/// the schedule runs; none when it never does.
fn cron_next(text: &str, after: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let (schedule, tz) = schedule("cron_next", text, &kwargs)?;
    let after = time("cron_next", after)?;
    Ok(schedule.next(after, &tz).map(show).into())
}

/// `cron_prev(schedule, at, tz=None)`: the last time at or before `at` the
/// schedule ran; none when it never did.
fn cron_prev(text: &str, at: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let (schedule, tz) = schedule("cron_prev", text, &kwargs)?;
    let at = time("cron_prev", at)?;
    Ok(schedule.previous(at, &tz).map(show).into())
}

/// The earliest time a rendered `requeue.at` names: an RFC 3339 string, a
/// list of them (nulls and empty strings skipped), or null/empty for none.
pub fn earliest(value: &serde_json::Value) -> Result<Option<Timestamp>, String> {
    earliest_after(value, Timestamp::MIN)
}

/// The earliest time of `value` (as [`earliest`] reads it) that is after
/// `after`: none when every one is at or before it.
pub fn earliest_after(
    value: &serde_json::Value,
    after: Timestamp,
) -> Result<Option<Timestamp>, String> {
    use serde_json::Value as Json;
    let one = |v: &Json| -> Result<Option<Timestamp>, String> {
        match v {
            Json::Null => Ok(None),
            Json::String(s) if s.trim().is_empty() => Ok(None),
            Json::String(s) => parse(s).map(Some),
            other => Err(format!(
                "expected an RFC 3339 time, got {}",
                serde_json::to_string(other).unwrap_or_default()
            )),
        }
    };
    match value {
        Json::Array(items) => {
            let times: Vec<Option<Timestamp>> = items.iter().map(one).collect::<Result<_, _>>()?;
            Ok(times.into_iter().flatten().filter(|t| *t > after).min())
        }
        other => Ok(one(other)?.filter(|t| *t > after)),
    }
}

/// How long from `now` to wake at `at`: at least a second, so a time
/// already past wakes soon, never in a loop.
pub fn wait_until(now: Timestamp, at: Timestamp) -> std::time::Duration {
    let wait = at.duration_since(now);
    std::time::Duration::try_from(wait)
        .unwrap_or_default()
        .max(std::time::Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(expr: &str) -> Result<serde_json::Value, String> {
        let mut set = crate::template::TemplateSet::new();
        let id = set.add_expr("t", expr).map_err(|e| e.to_string())?;
        let ctx = minijinja::context! { __kiln_now => "2026-05-17T10:20:30Z" };
        set.eval(&id, &ctx, &mut crate::template::Budget::default())
            .map_err(|e| e.to_string())
    }

    fn ok(expr: &str) -> serde_json::Value {
        eval(expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
    }

    #[test]
    fn earliest_of_a_time_a_list_or_nothing() {
        let t = |s: &str| s.parse::<Timestamp>().unwrap();
        use serde_json::json;
        assert_eq!(
            earliest(&json!("2026-05-17T10:20:30Z")),
            Ok(Some(t("2026-05-17T10:20:30Z")))
        );
        assert_eq!(
            earliest(&json!([
                "2026-05-17T11:00:00Z",
                null,
                "",
                "2026-05-17T10:00:00+02:00"
            ])),
            Ok(Some(t("2026-05-17T08:00:00Z")))
        );
        assert_eq!(earliest(&json!(null)), Ok(None));
        assert_eq!(earliest(&json!("")), Ok(None));
        assert_eq!(earliest(&json!([])), Ok(None));
        assert!(
            earliest(&json!(5))
                .unwrap_err()
                .contains("expected an RFC 3339 time, got 5")
        );
        assert!(
            earliest(&json!("soon"))
                .unwrap_err()
                .contains("`soon` is not an RFC 3339")
        );
        let now = t("2026-05-17T10:00:00Z");
        assert_eq!(wait_until(now, t("2026-05-17T10:01:30Z")).as_secs(), 90);
        assert_eq!(wait_until(now, t("2026-05-17T09:00:00Z")).as_secs(), 1);
    }

    #[test]
    fn now_is_the_render_instant_every_time() {
        assert_eq!(ok("now()"), "2026-05-17T10:20:30Z");
        assert_eq!(ok("now() == now()"), true);
        let mut env = Environment::new();
        register(&mut env);
        let err = env.render_str("{{ now() }}", ()).unwrap_err();
        assert!(
            err.to_string().contains("now(): the time is undefined"),
            "{err}"
        );
    }

    #[test]
    fn parsing_and_formatting_rfc_3339() {
        assert_eq!(
            ok("parse_time('2026-05-17T12:20:30+02:00')"),
            "2026-05-17T10:20:30Z"
        );
        assert_eq!(
            ok("'2026-05-17T10:20:30.5Z' | parse_time"),
            "2026-05-17T10:20:30.5Z"
        );
        assert_eq!(
            ok("now() | format_time('%Y-%m-%d %H:%M')"),
            "2026-05-17 10:20"
        );
        assert_eq!(
            ok("now() | format_time('%H:%M %Z', tz='Europe/Berlin')"),
            "12:20 CEST"
        );
        assert_eq!(ok("now() | unix"), 1_779_013_230);
        let err = eval("'yesterday' | parse_time").unwrap_err();
        assert!(err.contains("`yesterday` is not an RFC 3339 time"), "{err}");
        let err = eval("now() | format_time('%H', tz='Mars/Olympus')").unwrap_err();
        assert!(err.contains("unknown time zone `Mars/Olympus`"), "{err}");
    }

    #[test]
    fn duration_arithmetic() {
        assert_eq!(ok("now() | add_duration('1h30m')"), "2026-05-17T11:50:30Z");
        assert_eq!(ok("now() | sub_duration('90s')"), "2026-05-17T10:19:00Z");
        assert_eq!(ok("now() | add_duration(-30)"), "2026-05-17T10:20:00Z");
        assert_eq!(ok("now() | add_duration('-30s')"), "2026-05-17T10:20:00Z");
        assert_eq!(ok("time_diff(now() | add_duration('1h'), now())"), 3600);
        assert_eq!(ok("time_diff('2026-05-17T10:20:00Z', now())"), -30);
        assert_eq!(ok("time_diff('2026-05-17T10:20:31.5Z', now())"), 1.5);
        let err = eval("now() | add_duration('5 minutes')").unwrap_err();
        assert!(err.contains("add_duration"), "{err}");
        let err = eval("now() | add_duration([1])").unwrap_err();
        assert!(err.contains("a duration is text"), "{err}");
    }

    #[test]
    fn cron_next_and_prev_with_zones() {
        assert_eq!(
            ok("cron_next('*/5 * * * *', now())"),
            "2026-05-17T10:25:00Z"
        );
        assert_eq!(
            ok("cron_prev('*/5 * * * *', now())"),
            "2026-05-17T10:20:00Z"
        );
        assert_eq!(
            ok("cron_next('0 9 * * *', now(), tz='Europe/Berlin')"),
            "2026-05-18T07:00:00Z"
        );
        assert_eq!(
            ok("cron_next('CRON_TZ=Europe/Berlin 0 9 * * *', now())"),
            "2026-05-18T07:00:00Z"
        );
        assert_eq!(
            ok("cron_next('0 0 30 2 *', now())"),
            serde_json::Value::Null
        );
        let err =
            eval("cron_next('CRON_TZ=UTC 0 9 * * *', now(), tz='Europe/Berlin')").unwrap_err();
        assert!(
            err.contains("CRON_TZ=UTC and tz is `Europe/Berlin`"),
            "{err}"
        );
        let err = eval("cron_next('61 * * * *', now())").unwrap_err();
        assert!(err.contains("minute: 61 is out of range"), "{err}");
        let err = eval("cron_next('@hourly', undefined_thing)").unwrap_err();
        assert!(err.contains("is undefined"), "{err}");
    }
}
