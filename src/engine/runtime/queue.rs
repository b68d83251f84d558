//! A work queue with controller-runtime's guarantees: a key waits in the
//! queue at most once (adds are deduplicated), a key is never handed to two
//! workers at once (an add while it is being processed runs it once more
//! afterwards), and a delayed add keeps only the earliest due time.
//!
//! Each waiting key is stored once, behind an `Arc`: the ready list, the
//! sets and the timers share it instead of holding copies.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The queue. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub(super) struct Queue<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
}

#[derive(Debug)]
struct Inner<K> {
    ready: VecDeque<Arc<K>>,
    queued: HashSet<Arc<K>>,
    active: HashSet<Arc<K>>,
    dirty: HashSet<Arc<K>>,
    timers: BTreeMap<(Instant, u64), Arc<K>>,
    due: HashMap<Arc<K>, (Instant, u64)>,
    /// When each waiting key became ready, for how long it waited.
    since: HashMap<Arc<K>, Instant>,
    seq: u64,
    closed: bool,
}

impl<K: Clone + Eq + Hash> Default for Queue<K> {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                ready: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                dirty: HashSet::new(),
                timers: BTreeMap::new(),
                due: HashMap::new(),
                since: HashMap::new(),
                seq: 0,
                closed: false,
            }),
            notify: Notify::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> Inner<K> {
    fn add(&mut self, key: Arc<K>) {
        if let Some(t) = self.due.remove(&key) {
            self.timers.remove(&t);
        }
        if self.active.contains(&key) {
            self.dirty.insert(key);
        } else if self.queued.insert(key.clone()) {
            self.since.insert(key.clone(), Instant::now());
            self.ready.push_back(key);
        }
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some((&(at, seq), _)) = self.timers.first_key_value() {
            if at > now {
                break;
            }
            if let Some(key) = self.timers.remove(&(at, seq)) {
                self.due.remove(&key);
                self.add(key);
            }
        }
    }
}

impl<K: Clone + Eq + Hash> Queue<K> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K>> {
        // A worker that panicked while holding the lock leaves consistent
        // state (every method finishes its updates), so poisoning is ignored.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `key` now.
    pub(super) fn add(&self, key: K) {
        let mut inner = self.lock();
        if inner.closed {
            return;
        }
        inner.add(Arc::new(key));
        drop(inner);
        self.notify.notify_one();
    }

    /// Queues `key` after `delay`, unless it is already due sooner.
    pub(super) fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let mut inner = self.lock();
        if inner.closed || inner.queued.contains(&key) {
            return;
        }
        let at = Instant::now() + delay;
        if let Some(&(existing, seq)) = inner.due.get(&key) {
            if existing <= at {
                return;
            }
            inner.timers.remove(&(existing, seq));
        }
        inner.seq += 1;
        let seq = inner.seq;
        let key = Arc::new(key);
        inner.timers.insert((at, seq), key.clone());
        inner.due.insert(key, (at, seq));
        drop(inner);
        // A worker may be sleeping until a later timer.
        self.notify.notify_one();
    }

    /// Waits for the next key and says how long it waited since it became
    /// ready; `None` once the queue is shut down.
    pub(super) async fn next(&self) -> Option<(K, Duration)> {
        loop {
            let wake_at = {
                let mut inner = self.lock();
                if inner.closed {
                    return None;
                }
                inner.fire_timers(Instant::now());
                if let Some(key) = inner.ready.pop_front() {
                    inner.queued.remove(&key);
                    inner.active.insert(key.clone());
                    let waited = inner
                        .since
                        .remove(&key)
                        .map(|t| t.elapsed())
                        .unwrap_or_default();
                    if !inner.ready.is_empty() {
                        self.notify.notify_one();
                    }
                    return Some((K::clone(&key), waited));
                }
                inner.timers.first_key_value().map(|(&(at, _), _)| at)
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        () = self.notify.notified() => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => self.notify.notified().await,
            }
        }
    }

    /// Marks `key` as processed; if it was added meanwhile, queues it again.
    pub(super) fn done(&self, key: &K) {
        let mut inner = self.lock();
        inner.active.remove(key);
        if let Some(key) = inner.dirty.take(key) {
            inner.add(key);
            drop(inner);
            self.notify.notify_one();
        }
    }

    /// Keys waiting (not counting delayed ones).
    pub(super) fn len(&self) -> usize {
        self.lock().ready.len()
    }

    /// Whether no key is waiting.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wakes every worker with `None`; later adds are ignored.
    pub(super) fn shutdown(&self) {
        self.lock().closed = true;
        self.notify.notify_waiters();
        self.notify.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn adds_are_deduplicated() {
        let q = Queue::default();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        assert_eq!(q.next().await.map(|(k, _)| k), Some("a"));
        assert_eq!(q.next().await.map(|(k, _)| k), Some("b"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_being_processed_is_not_handed_out_again_until_done() {
        let q = Queue::default();
        q.add("a");
        assert_eq!(q.next().await.map(|(k, _)| k), Some("a"));
        q.add("a"); // an event arrives mid-reconcile
        assert!(q.is_empty(), "not handed to a second worker");
        q.done(&"a");
        assert_eq!(
            q.next().await.map(|(k, _)| k),
            Some("a"),
            "but processed once more afterwards"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_keep_the_earliest_due_time() {
        let q = Queue::default();
        q.add_after("a", Duration::from_secs(60));
        q.add_after("a", Duration::from_secs(5));
        q.add_after("a", Duration::from_secs(30));
        let started = Instant::now();
        let (key, waited) = q.next().await.unwrap();
        assert_eq!(key, "a");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert_eq!(
            waited,
            Duration::ZERO,
            "the wait is counted from when the key became due"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_immediate_add_preempts_a_delayed_one() {
        let q = Queue::default();
        q.add_after("a", Duration::from_secs(300));
        q.add("a");
        let started = Instant::now();
        assert_eq!(q.next().await.map(|(k, _)| k), Some("a"));
        assert!(started.elapsed() < Duration::from_millis(1));
        q.done(&"a");
        // The delayed add was consumed by the immediate one.
        let next = tokio::time::timeout(Duration::from_secs(400), q.next()).await;
        assert!(next.is_err(), "no second run: {next:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_key_is_stored_once() {
        let q = Queue::default();
        q.add_after("a".to_owned(), Duration::from_secs(60));
        let inner = q.lock();
        let (_, timer) = inner.timers.first_key_value().unwrap();
        let (due, _) = inner.due.get_key_value(&String::from("a")).unwrap();
        assert!(
            Arc::ptr_eq(timer, due),
            "the timer and the due map share one key"
        );
        assert_eq!(Arc::strong_count(timer), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_while_active_is_stored_once() {
        let q = Queue::default();
        q.add("a".to_owned());
        let (key, _) = q.next().await.unwrap();
        q.add("a".to_owned());
        q.done(&key);
        let inner = q.lock();
        assert_eq!(inner.ready.len(), 1);
        assert!(Arc::ptr_eq(
            &inner.ready[0],
            inner.queued.get(&String::from("a")).unwrap()
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_releases_waiting_workers() {
        let q = std::sync::Arc::new(Queue::<&str>::default());
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.next().await.map(|(k, _)| k) }
        });
        tokio::task::yield_now().await;
        q.shutdown();
        assert_eq!(waiter.await.unwrap(), None);
    }
}
