//! `kiln run`: the operator.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use kiln::engine::{Engine, Options};
use kiln::reload::{self, ReloadOptions, Reloader, RuleSource};
use kiln::rules::{self, load::Source};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::cli::RunArgs;

/// Loads the rules, connects, runs (reloading rules as they change) until a
/// signal, then shuts down gracefully.
pub fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let shutdown_grace = rules::duration::parse(&args.shutdown_timeout)
        .map_err(|e| anyhow::anyhow!("--shutdown-timeout: {e}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = client(args).await?;
        let (source, sources, read_errors) = match (&args.rules[..], &args.rules_configmap) {
            ([], Some((ns, name))) => {
                let sources = reload::read_configmap(&client, ns, name)
                    .await
                    .with_context(|| format!("reading the rules ConfigMap {ns}/{name}"))?;
                (
                    RuleSource::ConfigMap {
                        namespace: ns.clone(),
                        name: name.clone(),
                    },
                    sources,
                    Vec::new(),
                )
            }
            (paths, _) => {
                let (sources, errors) = rules::load::read_sources(paths);
                (RuleSource::Paths(paths.to_vec()), sources, errors)
            }
        };
        let set = match first_load(sources.clone(), read_errors) {
            Ok(set) => set,
            Err(code) => return Ok(code),
        };
        let options = Options {
            field_manager: args.field_manager.clone(),
            namespaces: args.namespaces.clone(),
            concurrency: args.concurrency,
            shutdown_grace,
            ..Options::default()
        };
        let engine = Arc::new(Engine::new(client.clone(), options));
        engine.start_all(&set);
        let names: Vec<&str> = set.rules.iter().map(|r| r.name.as_str()).collect();
        tracing::info!(rules = ?names, version = kiln::version::KILN, "kiln running");

        let reload_options = ReloadOptions {
            prune_on_rule_removal: args.prune_on_rule_removal,
            configmap: args.rules_configmap.clone(),
            ..ReloadOptions::default()
        };
        let reloader = Reloader::new(engine.clone(), &client, set, &sources, reload_options);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let reloading = tokio::spawn(reloader.run(client, source, async move {
            let _ = stop_rx.await;
        }));
        super::shutdown_signal().await?;
        tracing::info!("shutting down: letting in-flight reconciles finish");
        let _ = stop_tx.send(());
        let _ = reloading.await;
        engine.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// The first load must be valid: there is no last good set to keep.
fn first_load(
    sources: Vec<Source>,
    read_errors: Vec<rules::Diagnostic>,
) -> Result<rules::RuleSet, ExitCode> {
    let result = rules::load_sources(sources);
    let diagnostics = match (result, read_errors.is_empty()) {
        (Ok(set), true) => return Ok(set),
        (Ok(_), false) => read_errors,
        (Err(more), _) => read_errors.into_iter().chain(more).collect(),
    };
    for d in &diagnostics {
        eprintln!("{d}");
    }
    eprintln!(
        "error: the rules are invalid ({} problems); nothing was started",
        diagnostics.len()
    );
    Err(ExitCode::from(1))
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
