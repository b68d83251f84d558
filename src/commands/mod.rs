//! The body of each subcommand. `anyhow` lives here and in `main`, nowhere else.

pub mod broken_pipe;
pub mod bundle;
pub mod controlplane;
pub mod crd;
pub mod demo;
pub mod diff;
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
pub mod validate;
pub mod verdict;
pub mod webhook;

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
