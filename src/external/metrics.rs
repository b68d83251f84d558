//! Per-source metrics: requests by result class, cache hits, bytes and
//! latency. Labels are the rule's and the source's names and a fixed
//! class: never a URL or an error's text.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

fn latency() -> Histogram {
    // 5 ms × 2ⁿ up to about 80 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// The external sources' metrics.
#[derive(Clone)]
pub struct ExternalMetrics {
    /// `kiln_external_requests_total{rule,source,result}`: requests sent,
    /// by result (`ok` or the error's class).
    pub requests: Family<Labels, Counter>,
    /// `kiln_external_cache_hits_total{rule,source}`: reconciles served an
    /// answer (or a held failure) without a request.
    pub cache_hits: Family<Labels, Counter>,
    /// `kiln_external_response_bytes_total{rule,source}`: bytes of good answers.
    pub bytes: Family<Labels, Counter>,
    /// `kiln_external_request_duration_seconds{rule,source}`.
    pub duration: Family<Labels, Histogram, fn() -> Histogram>,
}

impl Default for ExternalMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            cache_hits: Family::default(),
            bytes: Family::default(),
            duration: Family::new_with_constructor(latency),
        }
    }
}

impl ExternalMetrics {
    /// Registers them in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kiln_external_requests",
            "Requests to external sources, per rule, source and result",
            self.requests.clone(),
        );
        registry.register(
            "kiln_external_cache_hits",
            "Reconciles served by an external source's cache, per rule and source",
            self.cache_hits.clone(),
        );
        registry.register(
            "kiln_external_response_bytes",
            "Bytes of good answers from external sources, per rule and source",
            self.bytes.clone(),
        );
        registry.register(
            "kiln_external_request_duration_seconds",
            "Time of requests to external sources, per rule and source",
            self.duration.clone(),
        );
    }
}

/// The labels of a source.
pub fn source(rule: &str, name: &str) -> Labels {
    vec![("rule", rule.to_string()), ("source", name.to_string())]
}

/// The labels of a source's request with its result.
pub fn result(rule: &str, name: &str, result: &str) -> Labels {
    let mut l = source(rule, name);
    l.push(("result", result.to_string()));
    l
}
