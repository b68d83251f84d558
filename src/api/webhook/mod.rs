//! The CRD conversion webhook every replica serves (leader or not): an
//! HTTPS listener answering `ConversionReview`s with the conversions of
//! the rules running now ([`server`], [`review`]), its certificates made
//! and kept in a Secret shared by the replicas ([`certs`], [`secret`]), and
//! a keeper that renews them and points every multi-version CRD the rules
//! define at the webhook (`spec.conversion`, with the CA bundle).
//!
//! ```text
//! keeper ──ensure──▶ Secret (CA, serving cert) ──▶ CRDs' spec.conversion (caBundle)
//!        ──then──▶ server's certificate          API server ──POST /convert──▶ review::answer
//! ```

mod body;
pub mod certs;
mod keeper;
pub mod listen;
pub mod review;
pub mod secret;
pub mod server;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

pub use keeper::{FIELD_MANAGER, start};
pub use listen::Webhook;
pub use server::Serving;

/// The Secret holding the webhook's certificates, unless told otherwise.
pub const DEFAULT_SECRET: &str = "kiln-conversion-webhook";

/// Where the API server reaches the webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A URL (kiln outside the cluster), e.g. `https://127.0.0.1:9443`.
    Url(String),
    /// A Service in the cluster.
    Service {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its port.
        port: u16,
    },
}

impl Endpoint {
    /// The host names the serving certificate is for.
    pub fn hosts(&self) -> Vec<String> {
        match self {
            Self::Url(url) => {
                let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
                let authority = rest.split('/').next().unwrap_or_default();
                let host = match authority.strip_prefix('[') {
                    Some(v6) => v6.split(']').next().unwrap_or_default(),
                    None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
                };
                vec![host.to_string()]
            }
            Self::Service {
                namespace, name, ..
            } => vec![
                format!("{name}.{namespace}.svc"),
                format!("{name}.{namespace}.svc.cluster.local"),
            ],
        }
    }

    /// The CRD's `spec.conversion` pointing at it, trusting `bundle` (PEM).
    pub fn conversion(&self, bundle: &str) -> Value {
        let ca = base64::engine::general_purpose::STANDARD.encode(bundle);
        let client = match self {
            Self::Url(url) => json!({
                "url": format!("{}{}", url.trim_end_matches('/'), server::PATH),
                "caBundle": ca,
            }),
            Self::Service {
                namespace,
                name,
                port,
            } => json!({
                "service": {"namespace": namespace, "name": name, "port": port, "path": server::PATH},
                "caBundle": ca,
            }),
        };
        json!({
            "strategy": "Webhook",
            "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": client},
        })
    }
}

/// How `kiln run` serves conversion.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where the API server reaches it.
    pub endpoint: Endpoint,
    /// kiln's namespace (the Secret's).
    pub namespace: String,
    /// The Secret's name.
    pub secret: String,
    /// How long a certificate is valid (renewed after two thirds).
    pub validity: Duration,
    /// kiln's field manager for CRDs: only a CRD it created (or adopted) is
    /// pointed at the webhook.
    pub crd_manager: String,
}

/// The `spec.conversion` this process points CRDs at, once its
/// certificates are known; the CRD installer writes it with the CRD.
static CONVERSION: RwLock<Option<Value>> = RwLock::new(None);

/// Whether this process serves conversion (set when the listener starts).
static SERVES: AtomicBool = AtomicBool::new(false);

/// The `spec.conversion` multi-version CRDs get, when this process serves
/// conversion and has its certificates.
pub fn conversion() -> Option<Value> {
    CONVERSION.read().ok()?.clone()
}

/// Whether an installer waits for the certificate (a CRD about to be
/// created pointed at the webhook, its rule not running yet).
static WANTED: AtomicBool = AtomicBool::new(false);

fn wanted() -> bool {
    WANTED.load(Ordering::SeqCst)
}

fn serves() {
    SERVES.store(true, Ordering::SeqCst);
}

/// The `spec.conversion` a multi-version CRD is created with: none when
/// this process does not serve conversion; else once the listener serves
/// its certificate (waiting for it at most `wait`), so the API server is
/// never pointed at a webhook that cannot answer. `Err` when it is not
/// ready in time.
pub async fn ready_conversion(wait: Duration) -> Result<Option<Value>, NotReady> {
    if !SERVES.load(Ordering::SeqCst) {
        return Ok(None);
    }
    WANTED.store(true, Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if let Some(c) = conversion() {
            return Ok(Some(c));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(NotReady(wait));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The webhook did not serve a certificate in time.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the conversion webhook serves no certificate yet (waited {0:?})")]
pub struct NotReady(pub Duration);

fn set_conversion(value: Value) {
    if let Ok(mut slot) = CONVERSION.write() {
        *slot = Some(value);
    }
}

/// The running rules' conversions, found by group and kind.
pub struct RulesLookup(pub crate::reload::CurrentRules);

impl review::Lookup for RulesLookup {
    fn conversions(
        &self,
        group: &str,
        kind: &str,
    ) -> Option<Arc<crate::api::convert::Conversions>> {
        self.0
            .get()
            .rules
            .iter()
            .filter_map(|r| r.api.as_ref())
            .find(|a| a.group == group && a.kind == kind)
            .and_then(|a| a.conversions.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An API server that is gone: it closes every connection at once and
    /// counts them.
    async fn gone_api_server() -> (kube::Client, Arc<std::sync::atomic::AtomicU64>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let tried = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counting = tried.clone();
        tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                counting.fetch_add(1, Ordering::SeqCst);
                drop(connection);
            }
        });
        let url = format!("http://127.0.0.1:{port}").parse().expect("url");
        let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
        (client, tried)
    }

    /// Waits (at most two minutes) until `count` stays the same for 1.5 s;
    /// returns it.
    async fn settled(count: &std::sync::atomic::AtomicU64) -> u64 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let before = count.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let after = count.load(Ordering::SeqCst);
            if after == before {
                return after;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "still asking: {after}"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn draining_the_webhook_stops_its_keeper_asking_the_api_server() {
        let (client, tried) = gone_api_server().await;
        let settings = Settings {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            endpoint: Endpoint::Url("https://127.0.0.1:9443".into()),
            namespace: "kiln".into(),
            secret: DEFAULT_SECRET.into(),
            validity: Duration::from_secs(3600),
            crd_manager: crate::api::install::FIELD_MANAGER.into(),
        };
        // A rule converts: the keeper keeps the Secret and the CRDs.
        let rules =
            crate::reload::CurrentRules::new(listen::tests::rules(listen::tests::CONVERTING));
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let serving = start(client, settings, rules, metrics)
            .await
            .expect("listening");
        // The Secret cannot be read: the keeper asks again every second.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while tried.load(Ordering::SeqCst) < 2 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the keeper never asked"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        serving.drain(Duration::from_secs(1)).await;
        let stopped = settled(&tried).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            tried.load(Ordering::SeqCst),
            stopped,
            "the keeper asked the API server after the webhook stopped"
        );
    }

    #[test]
    fn the_certificate_names_the_host_the_api_server_calls() {
        assert_eq!(
            Endpoint::Url("https://127.0.0.1:9443".into()).hosts(),
            ["127.0.0.1"]
        );
        assert_eq!(Endpoint::Url("https://[::1]:9443/".into()).hosts(), ["::1"]);
        let svc = Endpoint::Service {
            namespace: "kiln-system".into(),
            name: "kiln-webhook".into(),
            port: 443,
        };
        assert_eq!(
            svc.hosts(),
            [
                "kiln-webhook.kiln-system.svc",
                "kiln-webhook.kiln-system.svc.cluster.local"
            ]
        );
        let c = svc.conversion("PEM");
        assert_eq!(c["webhook"]["clientConfig"]["service"]["path"], "/convert");
        assert_eq!(c["webhook"]["clientConfig"]["caBundle"], "UEVN");
        let u = Endpoint::Url("https://127.0.0.1:9443/".into()).conversion("PEM");
        assert_eq!(
            u["webhook"]["clientConfig"]["url"],
            "https://127.0.0.1:9443/convert"
        );
    }
}
