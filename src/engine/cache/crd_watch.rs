//! One watch per CustomResourceDefinition, shared by every rule whose
//! primary it defines.
//!
//! A running rule notices its primary's CRD being edited in place (its
//! status schema may have changed). Each rule used to watch that CRD itself:
//! with HTTP/1.1 every watch holds a connection of its own, with its TLS and
//! read buffers, so two hundred rules held two hundred connections and about
//! 150 KiB each before any object existed. Here the first rule on a CRD
//! starts its watch, which stops [`LINGER`] after the last one went, so a
//! rule replaced by a reload finds it running and nothing is listed again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{Event, watcher};
use serde_json::Value;
use tokio::sync::watch;

/// How long a watch outlives its last subscription (as informers do).
pub(crate) const LINGER: std::time::Duration = super::registry::LINGER;

/// The CRD as last seen by its watch (`None` until the first one arrives).
pub(crate) type Seen = Option<Arc<Value>>;

/// The shared watches, by CRD name.
#[derive(Default)]
pub struct CrdWatches {
    watches: Mutex<HashMap<String, Weak<Shared>>>,
}

/// One CRD's watch, stopped when the last [`Subscription`] is dropped.
struct Shared {
    seen: watch::Receiver<Seen>,
    task: tokio::task::AbortHandle,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A rule's view of one CRD's watch.
pub struct Subscription {
    /// Keeps the watch running.
    shared: Arc<Shared>,
    seen: watch::Receiver<Seen>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // Kept a while for the rule that replaces this one.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let keep = self.shared.clone();
            runtime.spawn(async move {
                tokio::time::sleep(LINGER).await;
                drop(keep);
            });
        }
    }
}

impl Subscription {
    /// The next version of the CRD the watch sees: the one it holds now
    /// first, if any, then each change; each version once.
    pub async fn next(&mut self) -> Option<Arc<Value>> {
        loop {
            // The watch task never ends on its own: an error is its abort.
            self.seen.changed().await.ok()?;
            if let Some(crd) = self.seen.borrow_and_update().clone() {
                return Some(crd);
            }
        }
    }

    fn new(shared: Arc<Shared>) -> Self {
        let mut seen = shared.seen.clone();
        // What the watch holds already is news to this rule.
        seen.mark_changed();
        Self { shared, seen }
    }

    /// Whether `other` follows the same watch (for tests).
    #[cfg(test)]
    fn shares_with(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl CrdWatches {
    /// A subscription to the watch of the CRD `name`, started if no rule
    /// follows it yet.
    pub fn subscribe(&self, client: &Client, name: &str) -> Subscription {
        let mut watches = self
            .watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        watches.retain(|_, w| w.strong_count() > 0);
        let shared = match watches.get(name).and_then(Weak::upgrade) {
            Some(shared) => shared,
            None => {
                let shared = Arc::new(start(client.clone(), name.to_string()));
                watches.insert(name.to_string(), Arc::downgrade(&shared));
                shared
            }
        };
        Subscription::new(shared)
    }

    /// Stops every watch now, lingering ones included: the engine stops,
    /// and nothing it started may go on asking the API server (a rule
    /// following a watch sees it end).
    pub fn stop_all(&self) {
        let watches = std::mem::take(
            &mut *self
                .watches
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for shared in watches.values().filter_map(Weak::upgrade) {
            shared.task.abort();
        }
    }

    /// Watches running (for tests and metrics).
    pub fn running(&self) -> usize {
        self.watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }
}

fn start(client: Client, name: String) -> Shared {
    let (tx, seen) = watch::channel(None);
    let task = tokio::spawn(follow(client, name, tx)).abort_handle();
    Shared { seen, task }
}

/// Hands every version of the CRD `name` to `tx` (a deletion is not one:
/// the rules learn of it through discovery).
async fn follow(client: Client, name: String, tx: watch::Sender<Seen>) {
    let api = kube::Api::<CustomResourceDefinition>::all(client);
    let config = crate::request_timeout::watch_config().fields(&format!("metadata.name={name}"));
    let events = watcher(api, config).default_backoff();
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        let crd = match event {
            Ok(Event::Apply(crd) | Event::InitApply(crd)) => crd,
            Ok(_) => continue,
            Err(error) => {
                tracing::warn!(crd = %name, %error, "watching a CustomResourceDefinition failed; retrying with backoff");
                continue;
            }
        };
        let json = serde_json::to_value(&crd).unwrap_or_default();
        tx.send_replace(Some(Arc::new(json)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        Client::try_from(config).expect("client")
    }

    #[tokio::test]
    async fn a_subscription_hands_out_what_the_watch_holds_then_each_change_once() {
        let (tx, seen) = watch::channel(Some(Arc::new(serde_json::json!(1))));
        let task = tokio::spawn(std::future::pending::<()>()).abort_handle();
        let mut sub = Subscription::new(Arc::new(Shared { seen, task }));
        assert_eq!(sub.next().await, Some(Arc::new(serde_json::json!(1))));
        let again = tokio::time::timeout(std::time::Duration::from_millis(50), sub.next()).await;
        assert!(again.is_err(), "an unchanged CRD is not handed out again");
        tx.send_replace(Some(Arc::new(serde_json::json!(2))));
        assert_eq!(sub.next().await, Some(Arc::new(serde_json::json!(2))));
    }

    #[tokio::test(start_paused = true)]
    async fn rules_on_one_crd_share_one_watch_which_stops_a_while_after_the_last() {
        let watches = CrdWatches::default();
        let client = client();
        let a = watches.subscribe(&client, "apps.example.com");
        let b = watches.subscribe(&client, "apps.example.com");
        let other = watches.subscribe(&client, "dbs.example.com");
        assert!(a.shares_with(&b));
        assert!(!a.shares_with(&other));
        assert_eq!(watches.running(), 2);
        drop(a);
        drop(b);
        drop(other);
        tokio::time::sleep(LINGER / 2).await;
        let again = watches.subscribe(&client, "apps.example.com");
        assert_eq!(
            watches.running(),
            2,
            "a rule replaced meanwhile finds its watch"
        );
        drop(again);
        tokio::time::sleep(LINGER * 2).await;
        assert_eq!(watches.running(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_ends_every_watch_at_once_lingering_ones_too() {
        let watches = CrdWatches::default();
        let client = client();
        let mut kept = watches.subscribe(&client, "apps.example.com");
        drop(watches.subscribe(&client, "dbs.example.com"));
        watches.stop_all();
        assert_eq!(watches.running(), 0, "no linger after a stop");
        assert_eq!(kept.next().await, None, "a follower sees its watch end");
    }
}
