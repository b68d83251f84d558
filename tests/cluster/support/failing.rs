//! A client whose chosen requests the API server never sees: a layer in
//! the client answers them `503 Service Unavailable`, a given number of
//! times (an API server briefly overloaded, for that request only).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};

use http_body_util::BodyExt as _;
use hyper::body::Bytes;
use kube::Client;
use kube::client::{Body, ClientBuilder, DynBody};
use kube::config::{KubeConfigOptions, Kubeconfig};

type Picks = Arc<dyn Fn(&http::Request<Body>) -> bool + Send + Sync>;

/// How many more picked requests are answered 503.
#[derive(Clone, Default)]
pub struct Failures(Arc<AtomicU32>);

impl Failures {
    /// Answers the next `n` picked requests 503.
    pub fn fail(&self, n: u32) {
        self.0.store(n, Ordering::SeqCst);
    }

    fn take(&self) -> bool {
        self.0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// A client on `kubeconfig` whose requests that `picks` are answered 503
/// while the returned [`Failures`] has some left (none at first).
pub async fn client_failing(
    kubeconfig: &str,
    picks: impl Fn(&http::Request<Body>) -> bool + Send + Sync + 'static,
) -> (Client, Failures) {
    let kc = Kubeconfig::from_yaml(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    let failures = Failures::default();
    let layer = FailingLayer {
        picks: Arc::new(picks),
        failures: failures.clone(),
    };
    let client = ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&layer)
        .build();
    (client, failures)
}

struct FailingLayer {
    picks: Picks,
    failures: Failures,
}

impl<S> tower::Layer<S> for FailingLayer {
    type Service = Failing<S>;

    fn layer(&self, inner: S) -> Failing<S> {
        Failing {
            inner,
            picks: self.picks.clone(),
            failures: self.failures.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Failing<S> {
    inner: S,
    picks: Picks,
    failures: Failures,
}

impl<S> tower::Service<http::Request<Body>> for Failing<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Box<DynBody>>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Box<DynBody>>;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        if (self.picks)(&req) && self.failures.take() {
            let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "the test's layer answers 503", "reason": "ServiceUnavailable", "code": 503});
            let body = http_body_util::Full::new(Bytes::from(status.to_string()))
                .map_err(|never| -> tower::BoxError { match never {} });
            let response = http::Response::builder()
                .status(503)
                .header("content-type", "application/json")
                .body(Box::new(body) as Box<DynBody>)
                .unwrap();
            return Box::pin(async move { Ok(response) });
        }
        Box::pin(self.inner.call(req))
    }
}
