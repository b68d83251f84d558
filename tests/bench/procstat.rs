//! CPU time and peak memory of a process, from `/proc`.

use std::path::PathBuf;

/// What `/proc` says about one process at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// User plus system CPU time so far, in seconds.
    pub cpu_seconds: f64,
    /// Peak resident set size so far (`VmHWM`), in bytes.
    pub peak_rss_bytes: u64,
    /// Resident pages of mapped files now (`RssFile`: the binary and its
    /// libraries), in bytes.
    pub file_rss_bytes: u64,
}

/// Reads `/proc/<pid>` (`None` for `self`). `None` when the process is gone.
pub fn sample(pid: Option<u32>) -> Option<Sample> {
    let dir = match pid {
        Some(pid) => PathBuf::from(format!("/proc/{pid}")),
        None => PathBuf::from("/proc/self"),
    };
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    Some(Sample {
        cpu_seconds: cpu_ticks(&stat)? as f64 / clock_ticks_per_second(),
        peak_rss_bytes: status_kib(&status, "VmHWM:")? * 1024,
        file_rss_bytes: status_kib(&status, "RssFile:").unwrap_or(0) * 1024,
    })
}

/// `utime + stime` from a `/proc/<pid>/stat` line. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted after its last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A field of `/proc/<pid>/status` given in kB (`VmRSS:`, `VmHWM:`), in
/// bytes. `None` when the process is gone.
pub fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(status_kib(&status, field)? * 1024)
}

/// A field in kB (`VmHWM:`, `RssFile:`) of `/proc/<pid>/status`.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `sysconf(_SC_CLK_TCK)`: 100 on every Linux this runs on; `getconf` confirms it.
fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_a_name_holding_spaces_and_parens() {
        let stat = "42 (my (odd) name) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1 0";
        assert_eq!(cpu_ticks(stat), Some(325));
    }

    #[test]
    fn parses_vmhwm_and_rssfile() {
        let status = "Name:\tkiln\nVmPeak:\t  9000 kB\nVmHWM:\t  18900 kB\nVmRSS:\t 17000 kB\nRssFile:\t 15100 kB\n";
        assert_eq!(status_kib(status, "VmHWM:"), Some(18900));
        assert_eq!(status_kib(status, "RssFile:"), Some(15100));
        assert_eq!(status_kib(status, "RssShmem:"), None);
    }

    #[test]
    fn samples_this_process() {
        let s = sample(None);
        assert!(s.is_some_and(|s| s.peak_rss_bytes > 0 && s.file_rss_bytes > 0));
    }
}
