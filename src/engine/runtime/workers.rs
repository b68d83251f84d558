//! A rule's workers: at most `n` reconciles at once, each a task started
//! when the queue hands out its key and ended with it.
//!
//! A task is allocated at the size of the biggest state its future can be
//! in, and a reconcile's is several KiB. Workers parked on an empty queue
//! held that much each, `n` per rule whether or not anything was to be
//! done (at `--concurrency 16`, about 60 KiB per idle rule). Here an idle
//! rule holds one small task waiting on its queue, and the finished
//! reconciles are reaped as they end.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::queue::Queue;

/// Hands the keys of `queue` to `work`, at most `n` at once, until the
/// queue shuts down; then waits for the reconciles under way. Dropping
/// this future (the rule aborted) cancels them.
pub(super) async fn run<K, F, Fut>(queue: &Queue<K>, n: usize, work: F)
where
    K: Clone + Eq + Hash,
    F: Fn(K, Duration) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(n.max(1)));
    let mut running = JoinSet::new();
    loop {
        // Cancel-safe: the queue hands out a key only in the poll that
        // returns it, and an unused permit goes back.
        let next = async {
            let permit = permits.clone().acquire_owned().await.ok()?;
            let (key, waited) = queue.next().await?;
            Some((permit, key, waited))
        };
        tokio::select! {
            Some(_) = running.join_next(), if !running.is_empty() => {}
            next = next => {
                let Some((permit, key, waited)) = next else { break };
                let reconcile = work(key, waited);
                running.spawn(async move {
                    reconcile.await;
                    drop(permit);
                });
            }
        }
    }
    while running.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn runs_at_most_n_at_once_and_every_key_once() {
        let queue = Arc::new(Queue::default());
        for k in 0..20 {
            queue.add(k);
        }
        let (now, most, done) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let work = |key: i32, _| {
            let (now, most, done, queue) = (now.clone(), most.clone(), done.clone(), queue.clone());
            async move {
                let at = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(at, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                queue.done(&key);
                if done.fetch_add(1, Ordering::SeqCst) + 1 == 20 {
                    queue.shutdown();
                }
            }
        };
        run(&queue, 3, work).await;
        assert_eq!(done.load(Ordering::SeqCst), 20);
        assert_eq!(most.load(Ordering::SeqCst), 3);
    }
}
