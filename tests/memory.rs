//! What rules hold in memory, counted byte by byte: jemalloc's counters of
//! the bytes each thread allocated and freed, so each figure is the heap
//! the measured work left behind on the test's thread, the same on every
//! run (no RSS, no timing). Rules as the rules axis of the
//! benchmark writes them, with ten ConfigMap children each over one kind.
//!
//! `cargo test --test memory -- --nocapture` prints the figures
//! (docs/src/benchmarks.md, "The rules axis").
#![allow(clippy::unwrap_used, missing_docs, reason = "test code")]

use std::sync::Arc;

use kiln::metrics::Metrics;
use kiln::reload::{Loader, ReloadOptions, Teller, Version};
use kiln::rules::RuleSet;
use kiln::rules::load::Source;
use tikv_jemalloc_ctl::thread;

/// jemalloc, as kiln runs on: its size classes are the bytes counted.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Bytes this thread holds now: what it allocated less what it freed
/// (jemalloc's per-thread counters, in its size classes).
fn held() -> i64 {
    let allocated = thread::allocatedp::read().unwrap().get();
    let freed = thread::deallocatedp::read().unwrap().get();
    allocated as i64 - freed as i64
}

/// Rules in the rules-axis case measured here.
const RULES: usize = 200;
/// Children per rule.
const CHILDREN: usize = 10;
/// Full reloads, each replacing every rule.
const RELOADS: usize = 20;

/// Compiled texts are shared by every rule of the process: one measure at
/// a time, so that none finds another's texts compiled.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Rule `i` of the benchmark's rules axis, with `children` ConfigMaps,
/// labelled with `generation`, over one kind; with `own_texts`, each of its
/// templates names the rule, so no other rule has the same text.
fn rule(i: usize, children: usize, generation: &str) -> Source {
    rule_with(i, children, generation, false)
}

fn rule_with(i: usize, children: usize, generation: &str, own_texts: bool) -> Source {
    let name = format!("r{i:03}");
    let (suffix, data) = if own_texts {
        (format!("-{name}"), format!("{{'rule': '{name}'}}"))
    } else {
        (String::new(), "{}".to_string())
    };
    let mut text = format!(
        "apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata:
  name: {name}
spec:
  for:
    apiVersion: bench.kiln.dev/v1
    kind: App0
    selector:
      matchLabels:
        bench.kiln.dev/rule: {name}
  children:
"
    );
    for c in 0..children {
        text.push_str(&format!(
            "    - id: config{c}
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: \"{{{{ self.metadata.name }}}}{suffix}-config{c}\"
          labels:
            bench.kiln.dev/rule: {name}
            bench.kiln.dev/gen: {generation}
        data: \"{{{{ self.spec.config | default({data}) }}}}\"
"
        ));
    }
    text.push_str(&format!(
        "  status:
    fields:
      config{i:03}: \"{{{{ self.metadata.name }}}}-config0\"
"
    ));
    Source {
        file: format!("{name}.yaml").into(),
        text,
    }
}

fn sources(rules: usize, children: usize, generation: &str) -> Vec<Source> {
    (0..rules).map(|i| rule(i, children, generation)).collect()
}

fn own_sources(rules: usize, children: usize) -> Vec<Source> {
    (0..rules)
        .map(|i| rule_with(i, children, "g0", true))
        .collect()
}

fn version(generation: &str) -> Version {
    Version {
        sources: sources(RULES, CHILDREN, generation),
        read_errors: Vec::new(),
        generations: Default::default(),
    }
}

/// Bytes a rule set compiled from `texts` holds, the texts freed.
fn set_bytes(texts: Vec<Source>) -> i64 {
    let before = held();
    let set: RuleSet = kiln::rules::load_sources(texts).unwrap();
    let bytes = held() - before;
    drop(set);
    bytes
}

/// What the first use builds once per process (the template environment,
/// the validation's tables, the table of compiled texts at its size) is
/// built before anything is measured.
fn warm_up() {
    drop(kiln::rules::load_sources(own_sources(RULES, CHILDREN)).unwrap());
}

fn kib(bytes: i64) -> f64 {
    bytes as f64 / 1024.0
}

#[test]
fn a_rule_costs_what_its_templates_are() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    warm_up();
    let per_rule = |bytes: i64| bytes / RULES as i64;
    let shared = set_bytes(sources(RULES, CHILDREN, "g0"));
    let one_child = set_bytes(sources(RULES, 1, "g0"));
    let own = set_bytes(own_sources(RULES, CHILDREN));
    let own_one_child = set_bytes(own_sources(RULES, 1));
    // Each rule of `own` holds nine children more than one of
    // `own_one_child`, each with a name of its own (the data's text is the
    // same in every child of a rule).
    let per_text = (own - own_one_child) / (RULES as i64 * (CHILDREN as i64 - 1));
    println!(
        "{RULES} rules x {CHILDREN} children: {:.1} MiB held, {:.1} KiB per rule ({:.1} KiB with one child); \
         each rule's texts its own: {:.1} MiB, {:.1} KiB per rule ({:.1} KiB with one child), {:.1} KiB per child",
        kib(shared) / 1024.0,
        kib(per_rule(shared)),
        kib(per_rule(one_child)),
        kib(own) / 1024.0,
        kib(per_rule(own)),
        kib(per_rule(own_one_child)),
        kib(per_text),
    );
    assert!(
        per_rule(shared) < 24 * 1024,
        "a rule of {CHILDREN} children whose texts other rules share holds {:.1} KiB",
        kib(per_rule(shared))
    );
    assert!(
        per_text < 16 * 1024,
        "a child of its own texts costs {:.1} KiB",
        kib(per_text)
    );
}

#[test]
fn full_reloads_return_to_the_memory_before_them() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    runtime.block_on(async {
        warm_up();
        // A client that is never called: no rules ConfigMap to tell on.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let teller = Teller::new(&client, None, Arc::new(|| false));
        let metrics = Arc::new(Metrics::new());
        let options = ReloadOptions::default();
        let start = held();
        let mut loader = Loader::first(version("g0"), options, metrics, teller).unwrap();
        let first = held() - start;
        let mut after = Vec::new();
        for n in 1..=RELOADS {
            let before = loader.rules().get();
            loader.consider(version(&format!("g{n}"))).await;
            let now = loader.rules().get();
            let replaced = before.rules.iter().zip(&now.rules);
            assert!(
                replaced.filter(|(a, b)| a.fingerprint != b.fingerprint).count() == RULES,
                "reload {n} replaces every rule"
            );
            drop((before, now));
            after.push(held() - start);
        }
        let last = *after.last().unwrap();
        println!(
            "{RULES} rules x {CHILDREN} children: {:.1} MiB after the first load, after each of {RELOADS} full reloads (MiB): {:?}",
            kib(first) / 1024.0,
            after
                .iter()
                .map(|b| (kib(*b) / 102.4).round() / 10.0)
                .collect::<Vec<_>>()
        );
        assert!(
            (last - first).abs() * 20 <= first,
            "{RELOADS} full reloads: {:.1} MiB held after them, {:.1} MiB after the first load",
            kib(last) / 1024.0,
            kib(first) / 1024.0
        );
    });
}
