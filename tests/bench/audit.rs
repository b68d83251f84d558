//! Requests a contender issued, from the API server's audit log.
//!
//! Each contender talks to the API server as a ServiceAccount of its own, and
//! the audit policy logs only that user, at `Metadata` level, without the
//! `RequestReceived` stage. A request then appears once (`ResponseComplete`)
//! or, for a watch, twice (`ResponseStarted`, `ResponseComplete`); events are
//! counted once per `auditID`.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde::Deserialize;

/// The ServiceAccount namespace and name every contender runs as.
pub const NAMESPACE: &str = "bench";
/// See [`NAMESPACE`].
pub const SERVICE_ACCOUNT: &str = "contender";

/// The audit policy handed to kube-apiserver.
pub fn policy() -> String {
    format!(
        "apiVersion: audit.k8s.io/v1\n\
         kind: Policy\n\
         omitStages: [RequestReceived]\n\
         rules:\n\
         - level: Metadata\n\
         \x20 users: [\"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}\"]\n\
         - level: None\n"
    )
}

/// One request, as far as the benchmark cares.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, …
    pub verb: String,
    /// When the API server received it, in seconds since the Unix epoch.
    pub at: f64,
    /// Whether it was about a Lease (a sharded kiln's membership, not work).
    pub lease: bool,
}

impl Request {
    /// Whether the request changes state.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    #[serde(rename = "auditID")]
    audit_id: String,
    verb: String,
    request_received_timestamp: String,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
}

#[derive(Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: Option<String>,
}

/// Errors reading the audit log.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("reading the audit log {path}: {source}")]
    Read {
        /// The log file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line was not an audit event.
    #[error("audit log line {line}: {reason}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// Why.
        reason: String,
    },
}

/// Reads every request in the log `path` and in the files the API server
/// rotated it into (`audit-<time>.log` beside it, every 100 MB), once each.
pub fn read(path: &Path) -> Result<Vec<Request>, Error> {
    let read_error = |source| Error::Read {
        path: path.display().to_string(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("audit");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(read_error)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_part_of(p, stem))
        .collect();
    // `audit-<time>.log` sorts before `audit.log`: oldest first.
    files.sort();
    // Line by line: at N=10000 a hand-written contender's log is several
    // hundred MB.
    let mut parser = Parser::default();
    for file in files {
        let reader = std::io::BufReader::new(std::fs::File::open(&file).map_err(read_error)?);
        for line in std::io::BufRead::lines(reader) {
            parser.line(&line.map_err(read_error)?)?;
        }
    }
    Ok(parser.requests)
}

/// `audit.log` itself or one of its rotated files.
fn is_part_of(path: &Path, stem: &str) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    name == format!("{stem}.log")
        || (name.starts_with(&format!("{stem}-")) && name.ends_with(".log"))
}

/// Requests so far, each `auditID` once.
#[derive(Default)]
struct Parser {
    seen: HashSet<String>,
    requests: Vec<Request>,
    lines: usize,
}

impl Parser {
    fn line(&mut self, line: &str) -> Result<(), Error> {
        self.lines += 1;
        if line.trim().is_empty() {
            return Ok(());
        }
        let parse_error = |reason: String| Error::Parse {
            line: self.lines,
            reason,
        };
        let event: Event = serde_json::from_str(line).map_err(|e| parse_error(e.to_string()))?;
        if !self.seen.insert(event.audit_id) {
            return Ok(());
        }
        let at = rfc3339_seconds(&event.request_received_timestamp).ok_or_else(|| {
            parse_error(format!("timestamp {}", event.request_received_timestamp))
        })?;
        let lease = event
            .object_ref
            .and_then(|o| o.resource)
            .is_some_and(|r| r == "leases");
        self.requests.push(Request {
            verb: event.verb,
            at,
            lease,
        });
        Ok(())
    }
}

#[cfg(test)]
fn parse(text: &str) -> Result<Vec<Request>, Error> {
    let mut parser = Parser::default();
    for line in text.lines() {
        parser.line(line)?;
    }
    Ok(parser.requests)
}

/// Requests per verb among those received in `[from, to)` (Unix seconds).
pub fn by_verb(requests: &[Request], from: f64, to: f64) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for r in requests.iter().filter(|r| r.at >= from && r.at < to) {
        *counts.entry(r.verb.clone()).or_insert(0) += 1;
    }
    counts
}

/// Writes among the requests received in `[from, to)`, Leases' renewals left
/// out (they keep a sharded kiln's membership; they are not work).
pub fn writes(requests: &[Request], from: f64, to: f64) -> u64 {
    requests
        .iter()
        .filter(|r| r.at >= from && r.at < to && r.is_write() && !r.lease)
        .count() as u64
}

/// `2026-11-21T10:00:01.123456Z` → Unix seconds. The API server always
/// writes UTC with a `Z`; anything else is refused rather than misread.
fn rfc3339_seconds(s: &str) -> Option<f64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    let frac: f64 = format!("0.{frac}").parse().ok()?;
    let days = days_from_civil(y, m, day);
    Some((days * 86_400 + hh * 3600 + mm * 60 + ss) as f64 + frac)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// well-known `days_from_civil` algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_timestamps() {
        assert_eq!(rfc3339_seconds("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(
            rfc3339_seconds("2026-11-21T00:00:00Z"),
            Some(1_795_219_200.0)
        );
        let t = rfc3339_seconds("2026-11-21T00:00:01.250000Z").unwrap();
        assert!((t - 1_795_219_201.25).abs() < 1e-6);
        assert_eq!(rfc3339_seconds("2026-11-21T00:00:01+01:00"), None);
    }

    #[test]
    fn counts_each_request_once_and_by_window() {
        let log = r#"{"auditID":"a","stage":"ResponseStarted","verb":"watch","requestReceivedTimestamp":"2026-11-21T00:00:01.000000Z"}
{"auditID":"b","stage":"ResponseComplete","verb":"patch","requestReceivedTimestamp":"2026-11-21T00:00:02.000000Z"}
{"auditID":"a","stage":"ResponseComplete","verb":"watch","requestReceivedTimestamp":"2026-11-21T00:00:01.000000Z"}
{"auditID":"c","stage":"ResponseComplete","verb":"get","requestReceivedTimestamp":"2026-11-21T00:00:03.000000Z"}
"#;
        let reqs = parse(log).unwrap();
        assert_eq!(reqs.len(), 3);
        let t0 = 1_795_219_200.0;
        let all = by_verb(&reqs, t0, t0 + 10.0);
        assert_eq!(all.get("watch"), Some(&1));
        assert_eq!(all.values().sum::<u64>(), 3);
        assert_eq!(writes(&reqs, t0, t0 + 10.0), 1);
        assert_eq!(writes(&reqs, t0 + 2.5, t0 + 10.0), 0);
    }

    #[test]
    fn lease_renewals_are_requests_but_not_writes() {
        let log = r#"{"auditID":"a","verb":"update","objectRef":{"resource":"leases"},"requestReceivedTimestamp":"2026-11-21T00:00:01Z"}
{"auditID":"b","verb":"patch","objectRef":{"resource":"configmaps"},"requestReceivedTimestamp":"2026-11-21T00:00:01Z"}
"#;
        let reqs = parse(log).unwrap();
        let t0 = 1_795_219_200.0;
        assert_eq!(by_verb(&reqs, t0, t0 + 10.0).values().sum::<u64>(), 2);
        assert_eq!(writes(&reqs, t0, t0 + 10.0), 1);
    }

    #[test]
    fn rotated_files_are_read_too() {
        let dir = tempfile::tempdir().unwrap();
        let line = |id: &str| {
            format!(
                r#"{{"auditID":"{id}","verb":"patch","requestReceivedTimestamp":"2026-11-21T00:00:01Z"}}"#
            ) + "\n"
        };
        std::fs::write(
            dir.path().join("audit-2026-11-21T18-39-00.914.log"),
            line("a"),
        )
        .unwrap();
        std::fs::write(dir.path().join("audit.log"), line("b")).unwrap();
        std::fs::write(dir.path().join("audit-policy.yaml"), "x").unwrap();
        let reqs = read(&dir.path().join("audit.log")).unwrap();
        assert_eq!(reqs.len(), 2);
    }

    #[test]
    fn a_bad_line_is_named() {
        let err = parse("{}\n").unwrap_err();
        assert!(err.to_string().starts_with("audit log line 1:"), "{err}");
    }
}
