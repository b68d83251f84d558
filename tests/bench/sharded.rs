//! The sharded contender: `kiln-sharded`, three `kiln run
//! --shards` processes sharing the WebApps. Its CPU is the sum of the three;
//! its peak RSS is the sum of each one's peak (an upper bound of the three
//! together), and each replica's peak is reported beside it.

use std::path::Path;

use tokio::process::Command;

use crate::report::Figures;
use crate::workload::NAMESPACE;

/// How many replicas the sharded contender runs.
pub const REPLICAS: usize = 3;

/// The commands of the replicas: each one's `base` (kiln's own command
/// line, built by the caller: its own metrics address) with the sharding
/// flags; each logs to its own file.
pub fn commands(
    kiln: &Path,
    bases: Vec<Vec<String>>,
    log_dir: &Path,
) -> Vec<(Command, std::path::PathBuf)> {
    bases
        .into_iter()
        .enumerate()
        .map(|(i, base)| {
            let mut cmd = Command::new(kiln);
            cmd.args(base).args([
                "--shards",
                "--shard-group",
                "bench",
                "--leader-elect-namespace",
                NAMESPACE,
            ]);
            // Fixed identities, so the shares are the same on every run
            // (bench-0/1/2 hold 20, 21 and 23 of the 64 buckets).
            cmd.args(["--shard-identity", &format!("bench-{i}")]);
            (cmd, log_dir.join(format!("contender-{i}.log")))
        })
        .collect()
}

/// The lines of a sharded contender: each replica's peak RSS and its ratio
/// to one kiln's (`single`, when it ran); then the same above each one's
/// mapped files (binary and libraries), the part that can divide.
pub fn note(sharded: &Figures, single: Option<&Figures>) -> String {
    let replicas = &sharded.replica_peak_rss_mib;
    let mut out = format!(
        "{}: {} replicas, peak RSS per replica {} MiB (sum {:.1}){}.\n",
        sharded.name,
        replicas.len(),
        list(replicas, 1),
        replicas.iter().sum::<f64>(),
        largest(replicas, single.map(|k| k.peak_rss_mib), 1)
    );
    let mapped = &sharded.replica_mapped_mib;
    if mapped.len() == replicas.len() {
        let above: Vec<f64> = replicas.iter().zip(mapped).map(|(p, m)| p - m).collect();
        let single_above = single.and_then(|k| Some(k.peak_rss_mib - k.mapped_mib?));
        out.push_str(&format!(
            "Above their mapped files ({} MiB each): {} MiB{}.\n",
            list(mapped, 1),
            list(&above, 1),
            largest(&above, single_above, 1)
        ));
    }
    let objects = &sharded.cached_objects;
    if objects.len() == replicas.len() && !objects.is_empty() {
        let objects: Vec<f64> = objects.iter().map(|&o| o as f64).collect();
        let one = single.and_then(|k| k.cached_objects.first().map(|&o| o as f64));
        out.push_str(&format!(
            "Objects in the caches at convergence: {} ({} MiB compact){}.\n",
            list(&objects, 0),
            list(&sharded.cached_mib, 1),
            largest(&objects, one, 0)
        ));
    }
    out
}

/// `a / b / c`, each with `decimals` digits after the point.
fn list(values: &[f64], decimals: usize) -> String {
    let each: Vec<String> = values.iter().map(|v| format!("{v:.decimals$}")).collect();
    each.join(" / ")
}

/// `; the largest is R× one replica's (S)`, when `single` is known (`S`
/// with `decimals` digits after the point).
fn largest(values: &[f64], single: Option<f64>, decimals: usize) -> String {
    let max = values.iter().copied().fold(0.0_f64, f64::max);
    single.filter(|s| *s > 0.0).map_or_else(String::new, |s| {
        format!(
            "; the largest is {:.2}× one replica's ({s:.decimals$})",
            max / s
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_gives_each_replica_and_the_ratio_to_one_also_above_mapped_files() {
        let sharded = Figures {
            name: "kiln-sharded".into(),
            replica_peak_rss_mib: vec![20.0, 22.0, 21.0],
            replica_mapped_mib: vec![15.0, 15.0, 15.0],
            cached_objects: vec![4010, 3990, 4001],
            cached_mib: vec![3.04, 3.0, 3.02],
            ..Figures::default()
        };
        let single = Figures {
            peak_rss_mib: 60.0,
            mapped_mib: Some(15.0),
            cached_objects: vec![12001],
            cached_mib: vec![9.1],
            ..Figures::default()
        };
        assert_eq!(
            note(&sharded, Some(&single)),
            "kiln-sharded: 3 replicas, peak RSS per replica 20.0 / 22.0 / 21.0 MiB (sum 63.0); \
             the largest is 0.37× one replica's (60.0).\n\
             Above their mapped files (15.0 / 15.0 / 15.0 MiB each): 5.0 / 7.0 / 6.0 MiB; \
             the largest is 0.16× one replica's (45.0).\n\
             Objects in the caches at convergence: 4010 / 3990 / 4001 (3.0 / 3.0 / 3.0 MiB compact); \
             the largest is 0.33× one replica's (12001).\n"
        );
        assert_eq!(
            note(
                &Figures {
                    replica_mapped_mib: vec![],
                    cached_objects: vec![],
                    ..sharded
                },
                None
            ),
            "kiln-sharded: 3 replicas, peak RSS per replica 20.0 / 22.0 / 21.0 MiB (sum 63.0).\n"
        );
    }
}
