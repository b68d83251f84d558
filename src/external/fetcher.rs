//! Asking the sources: one shared cache per source, one request in flight
//! per rendered request (every primary making it waits for that one), the
//! source's rate limit kept by one gate per source, credentials read from
//! the rule's Secret when a request goes. A failure is remembered as a
//! failure, beside the last good answer, never in its place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::answer::{Answer, State};
use super::asked::Asked;
use super::cache::{Failed, Lookup, SourceCache};
use super::credentials;
use super::metrics::{self, ExternalMetrics};
use crate::egress::{self, Request};
use crate::rules::Rule;
use crate::rules::external::External;

/// A wait for the rate limit up to this long is waited out in the
/// reconcile; a longer one (a `Retry-After`) makes the primary wait.
const WAIT_INLINE: Duration = Duration::from_secs(2);

type SourceId = (String, String);

/// What went wrong with a request, for the cache.
struct Failure {
    message: String,
    class: &'static str,
    retry_after: Option<Duration>,
}

/// The engine's one fetcher.
pub struct Fetcher {
    client: egress::Client,
    kube: Option<kube::Client>,
    caches: Mutex<HashMap<SourceId, SourceCache>>,
    flights: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    gates: Mutex<HashMap<SourceId, Arc<tokio::sync::Mutex<()>>>>,
    metrics: ExternalMetrics,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Fetcher {
    /// A fetcher sending through `client`, reading Secrets with `kube`
    /// (`None`: a source naming a Secret fails).
    pub fn new(
        client: egress::Client,
        kube: Option<kube::Client>,
        metrics: ExternalMetrics,
    ) -> Self {
        Self {
            client,
            kube,
            caches: Mutex::default(),
            flights: Mutex::default(),
            gates: Mutex::default(),
            metrics,
        }
    }

    /// Every source's answer for one primary, asked together.
    pub async fn answers(
        &self,
        rule: &Rule,
        asked: Vec<(usize, Result<Asked, String>)>,
    ) -> Vec<Answer> {
        let each = asked.into_iter().filter_map(|(i, asked)| {
            let source = rule.external.get(i)?;
            Some(async move {
                match asked {
                    Ok(asked) => self.answer(&rule.name, source, asked).await,
                    Err(why) => Answer {
                        name: source.name.clone(),
                        request: format!("{} {}", source.method.as_str(), source.destination),
                        state: State::Unrenderable(why),
                    },
                }
            })
        });
        futures::future::join_all(each).await
    }

    /// One source's answer: from the cache, else from one request shared
    /// by every primary asking the same at once.
    pub async fn answer(&self, rule: &str, source: &External, asked: Asked) -> Answer {
        let id = (rule.to_string(), source.name.clone());
        let labels = metrics::source(rule, &source.name);
        if let Some(state) = self.cached(&id, source, &asked.key) {
            self.metrics.cache_hits.get_or_create(&labels).inc();
            return answer(source, &asked, state);
        }
        let flight = Arc::clone(lock(&self.flights).entry(asked.key.clone()).or_default());
        let state = {
            let _one = flight.lock().await;
            match self.cached(&id, source, &asked.key) {
                Some(state) => {
                    self.metrics.cache_hits.get_or_create(&labels).inc();
                    state
                }
                None => self.ask(&id, source, &asked).await,
            }
        };
        lock(&self.flights).remove(&asked.key);
        answer(source, &asked, state)
    }

    /// What the cache answers now, unless a request must go.
    fn cached(&self, id: &SourceId, source: &External, key: &str) -> Option<State> {
        let now = Instant::now();
        let mut caches = lock(&self.caches);
        let cache = caches.entry(id.clone()).or_default();
        match cache.lookup(key, now, source.interval) {
            Lookup::Fresh { value, age } => Some(State::Fresh {
                value,
                age,
                refresh_in: source.interval.saturating_sub(age),
            }),
            Lookup::Failing { failed, good } => {
                let retry_in = failed.retry_at.saturating_duration_since(now);
                Some(held(source, failed.message, retry_in, good))
            }
            Lookup::Wait { until, good } => {
                let retry_in = until.saturating_duration_since(now);
                (retry_in > WAIT_INLINE).then(|| {
                    let why = format!(
                        "the source's next request may go in {}s (its rate limit, or the server's Retry-After)",
                        retry_in.as_secs()
                    );
                    held(source, why, retry_in, good)
                })
            }
            Lookup::Ask => None,
        }
    }

    /// Sends the request once the source's rate limit lets it, and
    /// remembers what came of it.
    async fn ask(&self, id: &SourceId, source: &External, asked: &Asked) -> State {
        let gate = Arc::clone(lock(&self.gates).entry(id.clone()).or_default());
        {
            let _turn = gate.lock().await;
            let now = Instant::now();
            let until = {
                let mut caches = lock(&self.caches);
                let cache = caches.entry(id.clone()).or_default();
                match cache.lookup(&asked.key, now, source.interval) {
                    Lookup::Wait { until, .. } => Some(until),
                    _ => None,
                }
            };
            if let Some(until) = until {
                tokio::time::sleep_until(until.into()).await;
            }
            let mut caches = lock(&self.caches);
            let cache = caches.entry(id.clone()).or_default();
            cache.asking(Instant::now(), source.min_interval);
            cache.sweep(
                Instant::now(),
                source.interval.max(source.last_good.unwrap_or_default()) * 4,
            );
        }
        let result = self.send(&id.0, source, asked.request.clone()).await;
        let now = Instant::now();
        let mut caches = lock(&self.caches);
        let cache = caches.entry(id.clone()).or_default();
        match result {
            Ok((value, bytes)) => {
                cache.succeeded(&asked.key, value.clone(), bytes, now);
                State::Fresh {
                    value,
                    age: Duration::ZERO,
                    refresh_in: source.interval,
                }
            }
            Err(f) => {
                let failed: Failed =
                    cache.failed(&asked.key, f.message, f.class, f.retry_after, now);
                let good = match cache.lookup(&asked.key, now, source.interval) {
                    Lookup::Failing { good, .. } => good,
                    _ => None,
                };
                held(
                    source,
                    failed.message,
                    failed.retry_at.saturating_duration_since(now),
                    good,
                )
            }
        }
    }

    async fn send(
        &self,
        rule: &str,
        source: &External,
        mut request: Request,
    ) -> Result<(Value, usize), Failure> {
        if let Some(at) = &source.secret {
            let Some(kube) = &self.kube else {
                return Err(Failure {
                    message: format!("Secret {}/{} cannot be read here", at.namespace, at.name),
                    class: "credentials",
                    retry_after: None,
                });
            };
            let (auth, tls) = credentials::read(kube, at).await.map_err(|e| Failure {
                message: chain(&e),
                class: "credentials",
                retry_after: None,
            })?;
            request.auth = auth;
            request.tls = tls;
        }
        let started = Instant::now();
        let result = self
            .client
            .send(&request)
            .await
            .and_then(|r| r.json().map(|v| (v, r.body.len())));
        let labels = metrics::source(rule, &source.name);
        self.metrics
            .duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        let class = result.as_ref().map_or_else(|e| e.class(), |_| "ok");
        self.metrics
            .requests
            .get_or_create(&metrics::result(rule, &source.name, class))
            .inc();
        match result {
            Ok((value, bytes)) => {
                self.metrics
                    .bytes
                    .get_or_create(&labels)
                    .inc_by(bytes as u64);
                Ok((value, bytes))
            }
            Err(e) => Err(Failure {
                message: chain(&e),
                class: e.class(),
                retry_after: e.retry_after(),
            }),
        }
    }
}

/// The state of a request that failed (now or earlier): the last good
/// answer when the rule opts in and it is young enough, else the failure.
fn held(
    source: &External,
    error: String,
    retry_in: Duration,
    good: Option<(Value, Duration)>,
) -> State {
    match (good, source.last_good) {
        (Some((value, age)), Some(max_age)) if age <= max_age => State::Stale {
            value,
            age,
            error,
            retry_in,
        },
        _ => State::Failed { error, retry_in },
    }
}

fn answer(source: &External, asked: &Asked, state: State) -> Answer {
    Answer {
        name: source.name.clone(),
        request: asked.shown.clone(),
        state,
    }
}

/// An error and its causes, one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}
