//! The results: a markdown table, a JSON file, and the ratios of kiln to
//! the others, printed last.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Figures for one contender.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Figures {
    /// `kiln`, `kube-rs`, `controller-runtime`, `ceiling`.
    pub name: String,
    /// Whether every primary converged within the time allowed.
    pub converged: bool,
    /// From the start of the contender (all primaries exist) to every child
    /// existing and every primary Ready.
    pub convergence_seconds: Option<f64>,
    /// CPU seconds of the contender's process(es) until convergence.
    pub cpu_seconds_convergence: f64,
    /// CPU seconds of the contender's process(es) over the whole run.
    pub cpu_seconds_total: f64,
    /// Peak resident set size, MiB.
    pub peak_rss_mib: f64,
    /// Every request the contender issued over the whole run, by verb.
    pub requests_by_verb: BTreeMap<String, u64>,
    /// Writes (create, update, patch, delete) until convergence.
    pub writes_convergence: u64,
    /// From the first `spec.replicas` change to every Deployment showing it
    /// and every primary Ready again.
    pub update_seconds: Option<f64>,
    /// Per primary, from its spec change to its Deployment showing it: median.
    pub update_latency_p50_ms: Option<f64>,
    /// The same, 99th percentile.
    pub update_latency_p99_ms: Option<f64>,
    /// CPU seconds over the idle window (no changes, no resync due).
    pub idle_cpu_seconds: Option<f64>,
    /// Requests during the resync window, in which every primary is
    /// reconciled once with nothing to change.
    pub resync_requests: Option<u64>,
    /// Writes during that window (target 0).
    pub resync_writes: Option<u64>,
    /// When each phase began (Unix seconds), to read the audit log again:
    /// `start`, `converged`, `update`, `updated`, `idle`, `resync`, `end`.
    pub phases: BTreeMap<String, f64>,
    /// A sharded contender's peak RSS per replica, MiB (empty otherwise).
    pub replica_peak_rss_mib: Vec<f64>,
    /// Of the peak RSS, the resident pages of mapped files (`RssFile`: the
    /// binary and its libraries, read at the end), MiB. A fixed cost that
    /// does not grow with N, nor divide between replicas.
    pub mapped_mib: Option<f64>,
    /// The same per replica of a sharded contender.
    pub replica_mapped_mib: Vec<f64>,
    /// kiln only: objects in each process's caches at convergence (its
    /// `kiln_cached_objects`, every kind): one entry, or one per replica.
    #[serde(default)]
    pub cached_objects: Vec<u64>,
    /// The same in MiB of their compact form (`kiln_cached_bytes`).
    #[serde(default)]
    pub cached_mib: Vec<f64>,
    /// RSS (`VmRSS`) of the same binary with no primaries: started on the
    /// same control plane on an empty namespace before the run, read after
    /// it settled. One-process contenders only.
    pub empty_rss_mib: Option<f64>,
    /// RSS (`VmRSS`) at the end of the idle window: N primaries cached and
    /// converged, nothing happening.
    pub idle_rss_mib: Option<f64>,
}

impl Figures {
    /// Total requests.
    pub fn requests(&self) -> u64 {
        self.requests_by_verb.values().sum()
    }

    /// What one primary and its children add, KiB: (idle RSS − RSS with no
    /// primaries) / N.
    pub fn kib_per_primary(&self, n: usize) -> Option<f64> {
        let (idle, empty) = (self.idle_rss_mib?, self.empty_rss_mib?);
        (n > 0).then(|| (idle - empty) * 1024.0 / n as f64)
    }
}

/// The machine the benchmark ran on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model.
    pub cpu: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// Memory, GiB.
    pub memory_gib: f64,
    /// `uname -r`.
    pub kernel: String,
}

impl Machine {
    /// Reads `/proc`.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string();
        Self {
            cpu,
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            memory_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            kernel,
        }
    }
}

/// The whole run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Primaries.
    pub n: usize,
    /// Workers / concurrent requests per contender.
    pub concurrency: usize,
    /// Resync period every controller was given.
    pub resync_seconds: u64,
    /// Length of the idle window.
    pub idle_seconds: u64,
    /// The control plane.
    pub kubernetes: String,
    /// Where it ran.
    pub machine: Machine,
    /// When it started (RFC 3339).
    pub started: String,
    /// One entry per contender, in run order.
    pub contenders: Vec<Figures>,
}

/// Nearest-rank percentile of `values` (unsorted); `None` when empty.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v.get(rank.clamp(1, v.len()) - 1).copied()
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{v:.digits$}"))
}

fn verbs(by_verb: &BTreeMap<String, u64>) -> String {
    by_verb
        .iter()
        .map(|(verb, n)| format!("{verb} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Report {
    fn get(&self, name: &str) -> Option<&Figures> {
        self.contenders.iter().find(|c| c.name == name)
    }

    /// The markdown table, with the set-up above it.
    pub fn markdown(&self) -> String {
        let m = &self.machine;
        let mut out = format!(
            "N = {} WebApps (3 children + status each), concurrency {}, resync {} s, \
             Kubernetes {}, on {} × {} ({} GiB, Linux {}), {}.\n\n",
            self.n,
            self.concurrency,
            self.resync_seconds,
            self.kubernetes,
            m.cpus,
            m.cpu,
            m.memory_gib,
            m.kernel,
            self.started
        );
        out.push_str(
            "| contender | converge s | CPU s (converge) | CPU s (run) | peak RSS MiB \
             | of it mapped files MiB | requests | writes in resync | update p50 / p99 ms \
             | update s | idle CPU s |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for c in &self.contenders {
            let converge = match c.convergence_seconds {
                Some(s) if c.converged => format!("{s:.2}"),
                _ => "did not converge".into(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} | {:.2} | {:.1} | {} | {} | {} | {} / {} | {} | {} |",
                c.name,
                converge,
                c.cpu_seconds_convergence,
                c.cpu_seconds_total,
                c.peak_rss_mib,
                opt(c.mapped_mib, 1),
                c.requests(),
                c.resync_writes
                    .map_or_else(|| "—".into(), |w| w.to_string()),
                opt(c.update_latency_p50_ms, 0),
                opt(c.update_latency_p99_ms, 0),
                opt(c.update_seconds, 2),
                opt(c.idle_cpu_seconds, 2),
            );
        }
        for c in self
            .contenders
            .iter()
            .filter(|c| !c.replica_peak_rss_mib.is_empty())
        {
            out.push('\n');
            out.push_str(&crate::sharded::note(c, self.get("kiln")));
        }
        let per_primary: Vec<String> = self
            .contenders
            .iter()
            .filter_map(|c| {
                let kib = c.kib_per_primary(self.n)?;
                Some(format!(
                    "- {}: {kib:.2} KiB (idle RSS {} MiB, with no primaries {} MiB)",
                    c.name,
                    opt(c.idle_rss_mib, 1),
                    opt(c.empty_rss_mib, 1)
                ))
            })
            .collect();
        if !per_primary.is_empty() {
            out.push_str(
                "\nPer primary, (idle RSS − RSS with no primaries) / N, each binary started \
                 alone on an empty namespace of the same control plane first:\n\n",
            );
            for line in per_primary {
                let _ = writeln!(out, "{line}");
            }
        }
        out.push_str("\nRequests by verb over the whole run:\n\n");
        for c in &self.contenders {
            let _ = writeln!(out, "- {}: {}", c.name, verbs(&c.requests_by_verb));
        }
        out
    }

    /// kiln's figures divided by each other contender's (lower is better).
    pub fn ratios(&self) -> String {
        let Some(kiln) = self.get("kiln") else {
            return "no kiln run, no ratios\n".into();
        };
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
            _ => "—".into(),
        };
        let converge = |c: &Figures| c.convergence_seconds.filter(|_| c.converged);
        let mut out = String::new();
        for other in ["ceiling", "kube-rs", "controller-runtime"] {
            let Some(o) = self.get(other) else { continue };
            let _ = write!(
                out,
                "kiln/{other}: convergence {}",
                ratio(converge(kiln), converge(o))
            );
            if other != "ceiling" {
                let _ = write!(
                    out,
                    ", CPU {}, peak RSS {}, requests {}, update p99 {}",
                    ratio(
                        Some(kiln.cpu_seconds_convergence),
                        Some(o.cpu_seconds_convergence)
                    ),
                    ratio(Some(kiln.peak_rss_mib), Some(o.peak_rss_mib)),
                    ratio(Some(kiln.requests() as f64), Some(o.requests() as f64)),
                    ratio(kiln.update_latency_p99_ms, o.update_latency_p99_ms),
                );
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn ratios_divide_kiln_by_the_others() {
        let fig = |name: &str, secs: f64, cpu: f64| Figures {
            name: name.into(),
            converged: true,
            convergence_seconds: Some(secs),
            cpu_seconds_convergence: cpu,
            peak_rss_mib: 10.0,
            ..Figures::default()
        };
        let report = Report {
            n: 1,
            concurrency: 1,
            resync_seconds: 1,
            idle_seconds: 1,
            kubernetes: "v".into(),
            machine: Machine::detect(),
            started: "t".into(),
            contenders: vec![
                fig("kiln", 3.0, 1.0),
                fig("ceiling", 2.0, 0.5),
                fig("kube-rs", 6.0, 2.0),
            ],
        };
        let r = report.ratios();
        assert!(r.contains("kiln/ceiling: convergence 1.50×"), "{r}");
        assert!(
            r.contains("kiln/kube-rs: convergence 0.50×, CPU 0.50×"),
            "{r}"
        );
        assert!(!r.contains("controller-runtime"), "{r}");
        assert!(report.markdown().contains("| kiln | 3.00 |"));
    }

    #[test]
    fn cost_per_primary_is_idle_above_empty_over_n() {
        let fig = Figures {
            name: "kiln".into(),
            empty_rss_mib: Some(15.0),
            idle_rss_mib: Some(25.0),
            ..Figures::default()
        };
        assert_eq!(fig.kib_per_primary(1024), Some(10.0));
        assert_eq!(fig.kib_per_primary(0), None);
        let no_baseline = Figures {
            empty_rss_mib: None,
            ..fig.clone()
        };
        assert_eq!(no_baseline.kib_per_primary(1024), None);
    }
}
