//! Cron schedules as Kubernetes CronJobs write them: five fields (minute,
//! hour, day of month, month, day of week) with lists, ranges, steps and
//! names (`JAN`, `MON`; Sunday is 0 or 7), the descriptors `@hourly`,
//! `@daily`/`@midnight`, `@weekly`, `@monthly` and `@yearly`/`@annually`,
//! and a `CRON_TZ=<zone>` (or `TZ=<zone>`) prefix. When both day fields are
//! restricted, a day matching either runs (as in cron); when one is `*`, the
//! other decides. Times are matched on the zone's wall clock: a time a
//! daylight-saving jump skips runs at the first instant after the jump, a
//! time the clock passes twice runs once.

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// A schedule that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cron schedule `{schedule}`: {why}")]
pub struct CronError {
    /// The schedule as written.
    pub schedule: String,
    /// What is wrong.
    pub why: String,
}

/// A parsed schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// Both day fields restricted: either matching is enough.
    either_day: bool,
    /// The zone of its `CRON_TZ=` prefix.
    pub zone: Option<String>,
}

/// Years searched for the next (or previous) time before giving up: a
/// schedule such as `0 0 30 2 *` never runs.
const SEARCH_YEARS: i16 = 10;

const MONTHS: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Schedule {
    /// Parses a schedule.
    pub fn parse(schedule: &str) -> Result<Self, CronError> {
        let fail = |why: String| CronError {
            schedule: schedule.to_string(),
            why,
        };
        let mut text = schedule.trim();
        let mut zone = None;
        for prefix in ["CRON_TZ=", "TZ="] {
            if let Some(rest) = text.strip_prefix(prefix) {
                let (name, rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                zone = Some(name.to_string());
                text = rest.trim_start();
            }
        }
        let expanded = match text {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(fail(format!(
                    "unknown descriptor `{other}` (use @hourly, @daily, @weekly, @monthly or @yearly)"
                )));
            }
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(fail(format!(
                "has {} fields; a schedule has 5 (minute hour day-of-month month day-of-week)",
                fields.len()
            )));
        };
        let weekdays =
            field(weekday, 0, 7, WEEKDAYS).map_err(|e| fail(format!("day of week: {e}")))?;
        Ok(Self {
            minutes: field(minute, 0, 59, &[]).map_err(|e| fail(format!("minute: {e}")))?,
            hours: field(hour, 0, 23, &[]).map_err(|e| fail(format!("hour: {e}")))?,
            days: field(day, 1, 31, &[]).map_err(|e| fail(format!("day of month: {e}")))?,
            months: field(month, 1, 12, MONTHS).map_err(|e| fail(format!("month: {e}")))?,
            // Sunday is 0 and 7.
            weekdays: (weekdays | (weekdays >> 7)) & 0x7f,
            either_day: !is_any(day) && !is_any(weekday),
            zone,
        })
    }

    fn day_matches(&self, t: DateTime) -> bool {
        let day = has(self.days, t.day());
        let weekday = has(self.weekdays, t.weekday().to_sunday_zero_offset());
        if self.either_day {
            day || weekday
        } else {
            day && weekday
        }
    }

    /// The wall-clock time `t` runs at, or where to look next going
    /// `forward` (or backward) when it does not.
    fn step(&self, t: DateTime, forward: bool) -> Result<DateTime, DateTime> {
        let (unit, start) = if !has(self.months, t.month()) {
            (1.month(), t.first_of_month().start_of_day())
        } else if !self.day_matches(t) {
            (1.day(), t.start_of_day())
        } else if !has(self.hours, t.hour()) {
            (1.hour(), t.with().minute(0).build().unwrap_or(t))
        } else if !has(self.minutes, t.minute()) {
            (1.minute(), t)
        } else {
            return Ok(t);
        };
        let moved = if forward {
            start.checked_add(unit)
        } else {
            start.checked_sub(1.minute())
        };
        Err(moved.unwrap_or(if forward {
            DateTime::MAX
        } else {
            DateTime::MIN
        }))
    }

    /// The first time after `after` the schedule runs, in `tz`.
    pub fn next(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let start = minute_of(after, tz)?;
        self.search(
            start.checked_add(1.minute()).ok()?,
            tz,
            |at| at > after,
            true,
        )
    }

    /// The last time at or before `at` the schedule ran, in `tz`.
    pub fn previous(&self, at: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let start = minute_of(at, tz)?;
        self.search(start, tz, |t| t <= at, false)
    }

    fn search(
        &self,
        mut t: DateTime,
        tz: &TimeZone,
        fits: impl Fn(Timestamp) -> bool,
        forward: bool,
    ) -> Option<Timestamp> {
        let (first, years) = (t.year(), SEARCH_YEARS);
        while (t.year() - first).abs() <= years {
            match self.step(t, forward) {
                Ok(run) => {
                    let instant = tz.to_ambiguous_timestamp(run).compatible().ok()?;
                    if fits(instant) {
                        return Some(instant);
                    }
                    let minute = 1.minute();
                    t = if forward {
                        run.checked_add(minute)
                    } else {
                        run.checked_sub(minute)
                    }
                    .ok()?;
                }
                Err(moved) => t = moved,
            }
        }
        None
    }
}

/// The wall-clock minute `t` falls in, in `tz`.
fn minute_of(t: Timestamp, tz: &TimeZone) -> Option<DateTime> {
    let civil = tz.to_datetime(t);
    civil.with().second(0).subsec_nanosecond(0).build().ok()
}

fn has(bits: u64, n: impl Into<i64>) -> bool {
    u32::try_from(n.into()).is_ok_and(|n| n < 64 && bits & (1 << n) != 0)
}

fn is_any(field: &str) -> bool {
    field.starts_with('*') || field == "?"
}

/// The values a field allows, as bits; `names` spell values from `min`.
fn field(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, String> {
    let mut bits = 0u64;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().map_err(|_| format!("`{s}` is not a step"))?;
                if step == 0 {
                    return Err("a step of 0".into());
                }
                (r, step)
            }
            None => (item, 1),
        };
        let (lo, hi) = match range {
            "*" | "?" => (min, max),
            r => match r.split_once('-') {
                Some((a, b)) => (value(a, min, max, names)?, value(b, min, max, names)?),
                // `5/15`: from 5 to the end.
                None if step > 1 || item.contains('/') => (value(r, min, max, names)?, max),
                None => {
                    let v = value(r, min, max, names)?;
                    (v, v)
                }
            },
        };
        if lo > hi {
            return Err(format!("the range `{range}` runs backwards"));
        }
        for v in (lo..=hi).step_by(step as usize) {
            bits |= 1 << v;
        }
    }
    Ok(bits)
}

fn value(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = names.iter().position(|n| *n == lower) {
        return Ok(min + u32::try_from(i).unwrap_or(0));
    }
    match text.parse::<u32>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        Ok(v) => Err(format!("{v} is out of range ({min}-{max})")),
        Err(_) => Err(format!("`{text}` is not a number or a name")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next (or previous) run from `at`, or "" for none.
    fn run(schedule: &str, at: &str, forward: bool) -> String {
        let s = Schedule::parse(schedule).unwrap();
        let tz = s
            .zone
            .as_deref()
            .map_or(TimeZone::UTC, |z| TimeZone::get(z).unwrap());
        let at = at.parse().unwrap();
        let found = if forward {
            s.next(at, &tz)
        } else {
            s.previous(at, &tz)
        };
        found.map(|t| t.to_string()).unwrap_or_default()
    }

    fn next(schedule: &str, after: &str) -> String {
        run(schedule, after, true)
    }

    fn previous(schedule: &str, at: &str) -> String {
        run(schedule, at, false)
    }

    #[test]
    fn fields_lists_ranges_steps_and_names() {
        let t = "2026-01-01T00:00:00Z";
        assert_eq!(
            next("*/15 * * * *", "2026-01-01T00:07:30Z"),
            "2026-01-01T00:15:00Z"
        );
        assert_eq!(next("5,35 9-17 * * *", t), "2026-01-01T09:05:00Z");
        assert_eq!(
            next("0 0 * * MON-FRI", "2026-01-02T12:00:00Z"),
            "2026-01-05T00:00:00Z"
        );
        assert_eq!(next("0 0 1 mar *", t), "2026-03-01T00:00:00Z");
        assert_eq!(next("10/20 * * * *", t), "2026-01-01T00:10:00Z");
        assert_eq!(next("0 0 * * 7", t), "2026-01-04T00:00:00Z", "7 is Sunday");
        assert_eq!(next("0 0 * * 0", t), "2026-01-04T00:00:00Z");
        // Strictly after: a run at exactly `after` is not the next one.
        assert_eq!(
            next("0 * * * *", "2026-01-01T05:00:00Z"),
            "2026-01-01T06:00:00Z"
        );
        assert_eq!(next("0 0 29 2 *", t), "2028-02-29T00:00:00Z");
        assert_eq!(next("0 0 30 2 *", t), "", "never runs");
    }

    #[test]
    fn descriptors() {
        let t = "2026-05-17T10:20:00Z";
        assert_eq!(next("@hourly", t), "2026-05-17T11:00:00Z");
        assert_eq!(next("@daily", t), "2026-05-18T00:00:00Z");
        assert_eq!(next("@weekly", t), "2026-05-24T00:00:00Z");
        assert_eq!(next("@monthly", t), "2026-06-01T00:00:00Z");
        assert_eq!(next("@yearly", t), "2027-01-01T00:00:00Z");
        assert_eq!(next("@annually", t), "2027-01-01T00:00:00Z");
    }

    #[test]
    fn either_day_field_when_both_are_restricted() {
        // The 13th, or any Friday (2026-02-06 is a Friday).
        assert_eq!(
            next("0 0 13 * 5", "2026-02-01T00:00:00Z"),
            "2026-02-06T00:00:00Z"
        );
        // Only Fridays when the day of month is `*`.
        assert_eq!(
            next("0 0 * * 5", "2026-02-07T00:00:00Z"),
            "2026-02-13T00:00:00Z"
        );
    }

    #[test]
    fn time_zones_and_daylight_saving() {
        // 09:00 in Berlin is 08:00 UTC in winter, 07:00 in summer.
        assert_eq!(
            next("CRON_TZ=Europe/Berlin 0 9 * * *", "2026-01-10T12:00:00Z"),
            "2026-01-11T08:00:00Z"
        );
        assert_eq!(
            next("TZ=Europe/Berlin 0 9 * * *", "2026-07-10T12:00:00Z"),
            "2026-07-11T07:00:00Z"
        );
        // 02:30 does not exist on 2026-03-08 in New York: it runs at 03:30 EDT.
        assert_eq!(
            next(
                "CRON_TZ=America/New_York 30 2 * * *",
                "2026-03-08T00:00:00Z"
            ),
            "2026-03-08T07:30:00Z"
        );
        // 01:30 happens twice on 2026-11-01: it runs once.
        let first = next(
            "CRON_TZ=America/New_York 30 1 * * *",
            "2026-11-01T00:00:00Z",
        );
        assert_eq!(first, "2026-11-01T05:30:00Z");
        assert_eq!(
            next("CRON_TZ=America/New_York 30 1 * * *", &first),
            "2026-11-02T06:30:00Z"
        );
    }

    #[test]
    fn previous_is_the_last_run_at_or_before() {
        assert_eq!(
            previous("*/15 * * * *", "2026-01-01T00:07:30Z"),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            previous("0 * * * *", "2026-01-01T05:00:00Z"),
            "2026-01-01T05:00:00Z"
        );
        assert_eq!(
            previous("@monthly", "2026-03-15T00:00:00Z"),
            "2026-03-01T00:00:00Z"
        );
        assert_eq!(
            previous("0 0 * * MON", "2026-01-01T00:00:00Z"),
            "2025-12-29T00:00:00Z"
        );
        assert_eq!(
            previous("0 0 29 2 *", "2026-01-01T00:00:00Z"),
            "2024-02-29T00:00:00Z"
        );
    }

    #[test]
    fn bad_schedules_say_why() {
        for (schedule, why) in [
            ("* * * *", "has 4 fields"),
            ("60 * * * *", "minute: 60 is out of range"),
            ("* * * * funday", "day of week: `funday` is not a number"),
            ("*/0 * * * *", "a step of 0"),
            ("5-1 * * * *", "runs backwards"),
            ("@every 5m", "unknown descriptor"),
        ] {
            let err = Schedule::parse(schedule).unwrap_err();
            assert!(err.to_string().contains(why), "{schedule}: {err}");
        }
    }
}
