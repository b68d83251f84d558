//! What the schemas of typed children hold in memory: the resident memory
//! (VmRSS) this process gains by loading the built-in kinds the rule files
//! given name (by default the shipped rules) with every named schema they
//! reach, then every named schema of the table.
//! `cargo run --example typing-memory [RULES_DIR]`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "a measurement"
)]

use std::collections::BTreeSet;

use kiln::typing::{Node, builtin};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// Every named schema `node` reaches, loaded.
fn reach(node: &Node, seen: &mut BTreeSet<String>) {
    if let Some(name) = &node.reference
        && seen.insert(name.to_string())
        && let Some(named) = builtin::def(name)
    {
        reach(&named, seen);
    }
    for inner in node.properties.values() {
        reach(inner, seen);
    }
    for inner in [&node.items, &node.additional].into_iter().flatten() {
        reach(inner, seen);
    }
}

/// `apiVersion: X` followed by `kind: Y`, in every YAML file of `dir`.
fn kinds_named(dir: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(dir).expect("a directory").flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for pair in lines.windows(2) {
            if let (Some(v), Some(k)) = (
                pair[0].strip_prefix("apiVersion: "),
                pair[1].strip_prefix("kind: "),
            ) {
                out.insert((v.to_string(), k.to_string()));
            }
        }
    }
    out
}

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "rules".into());
    let start = rss_kib();
    let mut seen = BTreeSet::new();
    let mut held = Vec::new();
    for (api_version, kind) in kinds_named(&dir) {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
        if let Some(node) = builtin::kind(group, version, kind.as_str()) {
            reach(&node, &mut seen);
            held.push(format!("{api_version}/{kind}"));
        }
    }
    let after_rules = rss_kib();
    let table = include_str!("../../src/typing/kubernetes.json");
    let all = table
        .lines()
        .skip_while(|l| !l.starts_with("},\"defs\""))
        .skip(1);
    let names = all
        .filter_map(|l| l.split('"').nth(1))
        .filter(|n| builtin::def(n).is_some())
        .count();
    let after_all = rss_kib();
    println!("built-in kinds named in {dir}: {}", held.join(", "));
    println!(
        "their schemas and the {} named schemas they reach: +{} KiB resident",
        seen.len(),
        after_rules - start
    );
    println!(
        "every named schema of the table ({names}): +{} KiB resident",
        after_all - start
    );
}
