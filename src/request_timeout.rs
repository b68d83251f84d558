//! A limit on how long a request to the API server waits for its answer.
//!
//! kube's client has no read timeout by default: a request sent on a
//! connection that died silently (a peer gone, a NAT or load balancer that
//! dropped the connection's state) waits until TCP gives up, about fifteen
//! minutes, and the reconcile, the worker and, sharded, the bucket's
//! handover wait with it. This layer gives up a request whose response has
//! not begun within the limit; the caller retries it on a new connection.
//!
//! Watches are left alone: a quiet watch rightly says nothing for minutes.
//! A silent one is found by kube's watcher instead, which makes a watch
//! again when nothing came for its server-side timeout plus 5 s: kiln asks
//! for [`WATCH_TIMEOUT_SECS`], not kube's 290 s, so a watch on a dead
//! connection is made again within about a minute.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Request;
use tower::{Layer, Service};

/// How long the API server runs one watch before it ends it (kiln then
/// watches again from where it was). A watch that says nothing for this
/// long, plus kube's 5 s margin, is taken for a dead connection. client-go
/// finds one in about 45 s (its HTTP/2 health check: 30 s without a read,
/// then a ping answered within 15 s); kube's default, 290 s, would leave
/// kiln blind for five minutes.
pub const WATCH_TIMEOUT_SECS: u32 = 60;

/// A watch's configuration as kiln makes them all: ended by the API server
/// after [`WATCH_TIMEOUT_SECS`].
pub fn watch_config() -> kube::runtime::watcher::Config {
    kube::runtime::watcher::Config::default().timeout(WATCH_TIMEOUT_SECS)
}

/// A client for `config` that gives up a request (not a watch) unanswered
/// after `limit` (`None`: it waits as long as the connection lives).
pub fn client(config: kube::Config, limit: Option<Duration>) -> Result<kube::Client, kube::Error> {
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(match limit {
        Some(limit) => builder.with_layer(&RequestTimeout::new(limit)).build(),
        None => builder.build(),
    })
}

/// The error of a request given up.
#[derive(Debug, thiserror::Error)]
#[error(
    "the API server did not answer within {0:?} (request given up; retried on a new connection)"
)]
pub struct TimedOut(pub Duration);

/// Gives up a request (not a watch) unanswered after `limit`.
#[derive(Debug, Clone, Copy)]
pub struct RequestTimeout {
    limit: Duration,
}

impl RequestTimeout {
    /// A layer giving up requests unanswered after `limit`.
    pub fn new(limit: Duration) -> Self {
        Self { limit }
    }
}

impl<S> Layer<S> for RequestTimeout {
    type Service = Timed<S>;

    fn layer(&self, inner: S) -> Timed<S> {
        Timed {
            inner,
            limit: self.limit,
        }
    }
}

/// The service [`RequestTimeout`] makes.
#[derive(Debug, Clone)]
pub struct Timed<S> {
    inner: S,
    limit: Duration,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> Service<Request<B>> for Timed<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let watch = is_watch(request.uri().query());
        let limit = self.limit;
        let answer = self.inner.call(request);
        Box::pin(async move {
            if watch {
                return answer.await.map_err(Into::into);
            }
            match tokio::time::timeout(limit, answer).await {
                Ok(answered) => answered.map_err(Into::into),
                Err(_) => Err(Box::new(TimedOut(limit)) as BoxError),
            }
        })
    }
}

/// Whether a request's query asks for a watch (`watch=true` or `watch=1`).
fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    type Answer = Pin<Box<dyn Future<Output = Result<&'static str, BoxError>> + Send>>;

    /// Answers a request after `delay`.
    fn answering_after(
        delay: Duration,
    ) -> impl Service<Request<()>, Response = &'static str, Error = BoxError, Future = Answer> + Clone
    {
        tower::service_fn(move |_: Request<()>| {
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                Ok::<_, BoxError>("answer")
            }) as Answer
        })
    }

    fn get(uri: &str) -> Request<()> {
        Request::get(uri).body(()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_unanswered_in_time_is_given_up_and_a_watch_never_is() {
        let slow = RequestTimeout::new(Duration::from_secs(5))
            .layer(answering_after(Duration::from_secs(3600)));
        let started = tokio::time::Instant::now();
        let given_up = slow
            .clone()
            .oneshot(get("/api/v1/namespaces/a/configmaps/b"))
            .await
            .unwrap_err();
        assert!(given_up.downcast_ref::<TimedOut>().is_some(), "{given_up}");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        let listed = slow
            .clone()
            .oneshot(get("/api/v1/configmaps?limit=500&watch=false"))
            .await;
        assert!(listed.is_err(), "a list is a request too");
        let watched = slow
            .oneshot(get(
                "/api/v1/configmaps?allowWatchBookmarks=true&watch=true",
            ))
            .await;
        assert_eq!(watched.unwrap(), "answer");
        let quick = RequestTimeout::new(Duration::from_secs(5))
            .layer(answering_after(Duration::from_secs(4)));
        assert_eq!(quick.oneshot(get("/version")).await.unwrap(), "answer");
    }

    #[test]
    fn a_watch_is_told_by_its_query() {
        assert!(is_watch(Some("watch=true")));
        assert!(is_watch(Some(
            "resourceVersion=5&watch=1&timeoutSeconds=290"
        )));
        assert!(!is_watch(Some("watch=false")));
        assert!(!is_watch(Some(
            "fieldSelector=metadata.name%3Dwatch%3Dtrue"
        )));
        assert!(!is_watch(None));
    }
}
