//! What an engine did, read from its metrics registry (the one `/metrics`
//! serves): reconciles, and writes by verb.

use kiln::engine::Engine;

/// The sum of every sample of `metric` whose labels include `labels`.
pub fn total(engine: &Engine, metric: &str, labels: &[(&str, &str)]) -> u64 {
    let text = engine.metrics().encode();
    let sum: f64 = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (name, rest) = series.split_once('{').unwrap_or((series, ""));
            (name == metric
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().ok())
            .flatten()
        })
        .sum();
    sum as u64
}

/// Reconciles started, every rule: those ended
/// (`controller_runtime_reconcile_total`, every result) and those under way
/// (`controller_runtime_active_workers`), so a reconcile counts from its
/// start, before the writes it makes.
pub fn reconciles(engine: &Engine) -> u64 {
    total(engine, "controller_runtime_reconcile_total", &[])
        + total(engine, "controller_runtime_active_workers", &[])
}

/// Applies and patches sent (`kiln_writes_total{verb="apply"|"patch"}`):
/// children, decorations, owner references taken back.
pub fn applies(engine: &Engine) -> u64 {
    total(engine, "kiln_writes_total", &[("verb", "apply")])
        + total(engine, "kiln_writes_total", &[("verb", "patch")])
}

/// Every write sent (`kiln_writes_total`).
pub fn writes(engine: &Engine) -> u64 {
    total(engine, "kiln_writes_total", &[])
}
