//! The body of each subcommand. `anyhow` lives here and in `main`, nowhere else.

pub mod broken_pipe;
pub mod bundle;
pub mod controlplane;
pub mod crd;
pub mod demo;
pub mod diff;
pub mod diff_crd;
pub mod explain;
pub mod explain_rules;
pub mod live_diff;
pub mod observe;
pub mod offline;
pub mod package;
pub mod render;
pub mod render_at;
pub mod run;
pub mod schema;
pub mod test;
pub mod test_match;
pub mod test_snapshot;
pub mod validate;
pub mod verdict;
pub mod webhook;

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() -> anyhow::Result<()> {
    StopSignals::catch()?.received().await;
    Ok(())
}

/// SIGTERM and Ctrl-C (SIGINT), caught from the moment this is made: one
/// arriving before [`StopSignals::received`] is awaited is not lost, and
/// no longer ends the process on the spot.
pub struct StopSignals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Catches both signals from now on.
    pub fn catch() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves once either arrived.
    pub async fn received(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}
