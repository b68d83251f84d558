//! `bench compare`: the same contenders at several N (one results.json per
//! run), side by side, with each one's cost per primary: the growth of its
//! peak RSS from the smallest N to the largest, divided by the growth of N.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;

use crate::report::Report;

/// Reads `files` (results.json of `bench run`) and prints the comparison.
pub fn run(files: &[PathBuf]) -> anyhow::Result<()> {
    let mut reports = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let report: Report =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
        reports.push(report);
    }
    print!("{}", table(&reports));
    Ok(())
}

/// Peak RSS per contender and N, and the cost per primary (KiB) between
/// the smallest and the largest N each contender ran at.
pub fn table(reports: &[Report]) -> String {
    // contender → N → peak RSS MiB (the last run of an N counts).
    let mut rss: BTreeMap<&str, BTreeMap<usize, f64>> = BTreeMap::new();
    for report in reports {
        for c in &report.contenders {
            rss.entry(c.name.as_str())
                .or_default()
                .insert(report.n, c.peak_rss_mib);
        }
    }
    let mut ns: Vec<usize> = reports.iter().map(|r| r.n).collect();
    ns.sort_unstable();
    ns.dedup();
    let mut out = String::from("| contender |");
    for n in &ns {
        let _ = write!(out, " peak RSS MiB, N={n} |");
    }
    out.push_str(" KiB per primary |\n|---|");
    for _ in &ns {
        out.push_str("---:|");
    }
    out.push_str("---:|\n");
    for (name, by_n) in &rss {
        let _ = write!(out, "| {name} |");
        for n in &ns {
            match by_n.get(n) {
                Some(v) => {
                    let _ = write!(out, " {v:.1} |");
                }
                None => out.push_str(" — |"),
            }
        }
        let per = per_primary(by_n).map_or_else(|| "—".into(), |k| format!("{k:.1}"));
        let _ = writeln!(out, " {per} |");
    }
    out
}

/// (RSS at the largest N − RSS at the smallest) / (largest − smallest N),
/// in KiB; `None` with fewer than two N.
fn per_primary(by_n: &BTreeMap<usize, f64>) -> Option<f64> {
    let (&lo, &rss_lo) = by_n.iter().next()?;
    let (&hi, &rss_hi) = by_n.iter().next_back()?;
    (hi > lo).then(|| (rss_hi - rss_lo) * 1024.0 / (hi - lo) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Figures, Machine};

    fn report(n: usize, rss: &[(&str, f64)]) -> Report {
        Report {
            n,
            concurrency: 16,
            resync_seconds: 1,
            idle_seconds: 1,
            kubernetes: "v".into(),
            machine: Machine::detect(),
            started: "t".into(),
            contenders: rss
                .iter()
                .map(|(name, mib)| Figures {
                    name: (*name).into(),
                    peak_rss_mib: *mib,
                    ..Figures::default()
                })
                .collect(),
        }
    }

    #[test]
    fn the_cost_per_primary_is_the_rss_growth_over_the_growth_of_n() {
        let t = table(&[
            report(3000, &[("kiln", 50.0), ("kube-rs", 40.0)]),
            report(1000, &[("kiln", 30.0), ("kube-rs", 20.0)]),
            report(10000, &[("kiln", 100.0)]),
        ]);
        // kiln: (100 − 30) MiB over 9000 primaries = 7.96 KiB each.
        assert!(t.contains("| kiln | 30.0 | 50.0 | 100.0 | 8.0 |"), "{t}");
        // kube-rs: (40 − 20) MiB over 2000 = 10.24 KiB; no N=10000 run.
        assert!(t.contains("| kube-rs | 20.0 | 40.0 | — | 10.2 |"), "{t}");
    }

    #[test]
    fn a_results_file_reads_back() {
        let r = report(1000, &[("kiln", 30.0)]);
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.contenders[0].peak_rss_mib, 30.0);
    }
}
