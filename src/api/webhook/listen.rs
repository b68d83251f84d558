//! The webhook listens only while a rule needs it: while the running rules
//! define an API with several versions and conversions. Bound at start
//! when they do (a port that cannot be bound then fails `kiln run`), bound
//! when a reload brings the first such rule, drained and closed when the
//! last one goes. A CRD a removed rule leaves pointed at the webhook could
//! not be converted either way: no rule defines its conversions any more.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use super::review::Lookup;
use super::server::{self, Bounds, Certificate, Serving};
use crate::metrics::Metrics;

/// How long a review in flight is given when the last rule needing the
/// webhook goes.
const UNNEEDED_DRAIN: Duration = Duration::from_secs(10);

/// How soon binding is tried again after it failed.
const REBIND: Duration = Duration::from_secs(5);

/// What the listener serves, to bind it again.
struct Listen {
    addr: SocketAddr,
    bounds: Bounds,
    cert: Arc<Certificate>,
    lookup: Arc<dyn Lookup + Send + Sync>,
    metrics: Arc<Metrics>,
}

impl Listen {
    async fn bind(&self) -> std::io::Result<Serving> {
        let (cert, lookup) = (self.cert.clone(), self.lookup.clone());
        let serving =
            server::spawn(self.addr, self.bounds, cert, lookup, self.metrics.clone()).await?;
        tracing::info!(bound = %serving.bound, "serving CRD conversion");
        Ok(serving)
    }
}

/// The webhook following the rules: [`Webhook::drain`] stops it.
#[derive(Debug)]
pub struct Webhook {
    stop: watch::Sender<Option<Duration>>,
    drained: oneshot::Receiver<bool>,
}

impl Webhook {
    /// Turns true once [`Webhook::drain`] starts.
    pub(crate) fn draining(&self) -> watch::Receiver<bool> {
        let mut stop = self.stop.subscribe();
        let (tx, rx) = watch::channel(stop.borrow().is_some());
        tokio::spawn(async move {
            if stop.wait_for(Option::is_some).await.is_ok() {
                let _ = tx.send(true);
            }
        });
        rx
    }

    /// Stops listening and answers the reviews in flight, at most `grace`
    /// ([`Serving::drain`]); whether all finished in time.
    pub async fn drain(self, grace: Duration) -> bool {
        let _ = self.stop.send(Some(grace));
        self.drained.await.unwrap_or(true)
    }
}

/// Serves conversion on `addr` (within `bounds`) while `rules` need it.
pub async fn follow<T: Send + Sync + 'static>(
    addr: SocketAddr,
    bounds: Bounds,
    cert: Arc<Certificate>,
    lookup: Arc<dyn Lookup + Send + Sync>,
    metrics: Arc<Metrics>,
    mut rules: watch::Receiver<T>,
    needed: fn(&T) -> bool,
) -> std::io::Result<Webhook> {
    let listen = Listen {
        addr,
        bounds,
        cert,
        lookup,
        metrics,
    };
    let mut serving = if needed(&rules.borrow_and_update()) {
        Some(listen.bind().await?)
    } else {
        tracing::info!("no rule needs conversion: the webhook does not listen");
        None
    };
    let (stop, mut stopping) = watch::channel(None);
    let (done, drained) = oneshot::channel();
    tokio::spawn(async move {
        let grace = loop {
            let needed = needed(&rules.borrow_and_update());
            serving = match (needed, serving.take()) {
                (true, None) => listen
                    .bind()
                    .await
                    .inspect_err(|error| tracing::error!(%error, addr = %listen.addr, "the conversion webhook cannot listen"))
                    .ok(),
                (false, Some(s)) => {
                    tracing::info!("no rule needs conversion any more: the webhook stops listening");
                    s.drain(UNNEEDED_DRAIN).await;
                    None
                }
                (_, s) => s,
            };
            let retry = needed && serving.is_none();
            tokio::select! {
                changed = rules.changed() => if changed.is_err() {
                    break UNNEEDED_DRAIN;
                },
                () = tokio::time::sleep(REBIND), if retry => {}
                grace = stopping.wait_for(Option::is_some) => {
                    break grace.ok().and_then(|g| *g).unwrap_or(UNNEEDED_DRAIN);
                }
            }
        };
        let all = match serving {
            Some(s) => s.drain(grace).await,
            None => true,
        };
        let _ = done.send(all);
    });
    Ok(Webhook { stop, drained })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::api::convert::Conversions;

    struct Nothing;
    impl Lookup for Nothing {
        fn conversions(&self, _: &str, _: &str) -> Option<Arc<Conversions>> {
            None
        }
    }

    pub(in crate::api::webhook) fn rules(text: &str) -> crate::rules::RuleSet {
        crate::rules::load_sources(vec![crate::rules::load::Source {
            file: "rule.yaml".into(),
            text: text.into(),
        }])
        .unwrap()
    }

    const PLAIN: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: plain}
spec:
  for: {apiVersion: v1, kind: ConfigMap}
  children:
    - id: cm
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-copy"}
"#;

    pub(in crate::api::webhook) const CONVERTING: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: apps}
spec:
  for: {apiVersion: demo.kiln.dev/v1, kind: App}
  api:
    group: demo.kiln.dev
    kind: App
    versions:
      - name: v1alpha1
        schema: {spec: {image: string | required=true}}
        conversion:
          toStorage: {spec: {image: {name: "{{ self.spec.image }}"}}}
          fromStorage: {spec: {image: "{{ self.spec.image.name }}"}}
      - name: v1
        storage: true
        schema: {spec: {image: {name: string | required=true}}}
  children:
    - id: cm
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-app"}
"#;

    async fn listens(addr: SocketAddr, wanted: bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let up = tokio::net::TcpStream::connect(addr).await.is_ok();
            if up == wanted {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "listening: {up}, wanted {wanted}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_webhook_listens_only_while_a_rule_needs_it() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let (set, changes) = watch::channel(Arc::new(rules(PLAIN)));
        let webhook = follow(
            port,
            Bounds::default(),
            Arc::new(Certificate::default()),
            Arc::new(Nothing),
            Arc::new(Metrics::new()),
            changes,
            |set| set.converts(),
        )
        .await
        .unwrap();
        assert!(
            tokio::net::TcpStream::connect(port).await.is_err(),
            "no rule converts: nothing listens"
        );
        set.send_replace(Arc::new(rules(&format!("{PLAIN}---{CONVERTING}"))));
        listens(port, true).await;
        set.send_replace(Arc::new(rules(PLAIN)));
        listens(port, false).await;
        assert!(webhook.drain(Duration::from_secs(10)).await);
    }
}
