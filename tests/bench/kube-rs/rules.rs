//! The kube-rs contender of the benchmark's rules axis (`tests/bench/README.md`,
//! "The rules axis"): the job of R bench rules written by hand, one
//! `Controller` per kind of `App0` … `App(--kinds - 1)` in one process
//! (`apps.rs`). A binary of its own, so that the WebApp contender's
//! (`main.rs`) holds none of this code.

mod apps;
mod common;

use std::time::Duration;

use clap::Parser;
use kube::Client;

/// Command-line flags: the contract's, then the rules axis's.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    contract: common::Contract,
    /// Do the job of this many bench rules over `App0` ….
    #[arg(long, default_value_t = 1)]
    rules: usize,
    /// Rule `i` is on kind `App(i mod kinds)`, at most 10.
    #[arg(long, default_value_t = 10)]
    kinds: usize,
    /// The generation label of every rule's children.
    #[arg(long, default_value = "g0")]
    generation: String,
    /// Other generations of some rules, `r000=e1,…`.
    #[arg(long, default_value = "")]
    generation_of: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    let args = Args::parse();
    let rules = args.rules.max(1);
    let client = Client::try_default().await?;
    let job = apps::Job {
        rules,
        kinds: args.kinds.min(10).min(rules).max(1),
        generation: args.generation,
        generation_of: apps::parse_generations(&args.generation_of)?,
        manager: args.contract.field_manager,
        resync: Duration::from_secs(args.contract.resync_seconds),
        concurrency: args.contract.concurrency,
    };
    apps::run(client, &args.contract.namespace, job).await;
    Ok(())
}
