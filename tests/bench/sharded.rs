//! The sharded contender (issue 17): `kiln-sharded`, three `kiln run
//! --shards` processes sharing the WebApps. Its CPU is the sum of the three;
//! its peak RSS is the sum of each one's peak (an upper bound of the three
//! together), and each replica's peak is reported beside it.

use std::path::Path;

use tokio::process::Command;

use crate::workload::NAMESPACE;

/// How many replicas the sharded contender runs.
pub const REPLICAS: usize = 3;

/// The commands of the replicas: `base` (kiln's own command line, built by
/// the caller) with the sharding flags; each logs to its own file.
pub fn commands(
    kiln: &Path,
    base: &[String],
    log_dir: &Path,
) -> Vec<(Command, std::path::PathBuf)> {
    (0..REPLICAS)
        .map(|i| {
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

/// One line per sharded contender: each replica's peak RSS, and its ratio
/// to the single replica's peak when `single` (kiln's peak) is known.
pub fn note(name: &str, replicas: &[f64], single: Option<f64>) -> String {
    let peaks: Vec<String> = replicas.iter().map(|p| format!("{p:.1}")).collect();
    let max = replicas.iter().copied().fold(0.0_f64, f64::max);
    let ratio = single.filter(|s| *s > 0.0).map_or_else(String::new, |s| {
        format!("; the largest is {:.2}× one replica's peak", max / s)
    });
    format!(
        "{name}: {} replicas, peak RSS per replica {} MiB (sum {:.1}){ratio}.\n",
        replicas.len(),
        peaks.join(" / "),
        replicas.iter().sum::<f64>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_gives_each_replica_and_the_ratio_to_one() {
        assert_eq!(
            note("kiln-sharded", &[20.0, 22.0, 21.0], Some(60.0)),
            "kiln-sharded: 3 replicas, peak RSS per replica 20.0 / 22.0 / 21.0 MiB (sum 63.0); the largest is 0.37× one replica's peak.\n"
        );
    }
}
