//! `kiln run`: the operator.

use std::process::ExitCode;

use anyhow::Context as _;
use kiln::engine::{Engine, Options};
use kiln::rules;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::cli::RunArgs;

/// Loads the rules, connects, runs until a signal, shuts down gracefully.
pub fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let set = match rules::load(&args.rules) {
        Ok(set) => set,
        Err(diagnostics) => {
            for d in &diagnostics {
                eprintln!("{d}");
            }
            eprintln!(
                "error: the rules are invalid ({} problems); nothing was started",
                diagnostics.len()
            );
            return Ok(ExitCode::from(1));
        }
    };
    let shutdown_grace = rules::duration::parse(&args.shutdown_timeout)
        .map_err(|e| anyhow::anyhow!("--shutdown-timeout: {e}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = client(args).await?;
        let options = Options {
            field_manager: args.field_manager.clone(),
            namespaces: args.namespaces.clone(),
            concurrency: args.concurrency,
            shutdown_grace,
            ..Options::default()
        };
        let engine = Engine::new(client, options);
        engine.start_all(&set);
        let names: Vec<&str> = set.rules.iter().map(|r| r.name.as_str()).collect();
        tracing::info!(rules = ?names, version = kiln::version::KILN, "kiln running");
        super::shutdown_signal().await?;
        tracing::info!("shutting down: letting in-flight reconciles finish");
        engine.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

async fn client(args: &RunArgs) -> anyhow::Result<kube::Client> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options).await?,
        (None, None) => kube::Config::infer()
            .await
            .context("no cluster configured (in-cluster, $KUBECONFIG or ~/.kube/config)")?,
    };
    Ok(kube::Client::try_from(config)?)
}
