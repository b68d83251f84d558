//! `kiln controlplane up|down`

use std::process::ExitCode;

use anyhow::Context as _;
use kiln::controlplane::{Binaries, ControlPlane, NODE_NAME, NodePaths, Options, State, Tether};

use crate::cli::{DirArgs, UpArgs};

/// `kiln controlplane up`
pub fn up(args: UpArgs) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(up_async(args))
}

async fn up_async(args: UpArgs) -> anyhow::Result<ExitCode> {
    let dir = std::path::absolute(&args.dir.dir).context("resolving --dir")?;
    if State::load(&dir).is_ok() {
        anyhow::bail!(
            "a control plane is already recorded in {}; stop it with `kiln controlplane down --dir {}`",
            dir.display(),
            dir.display()
        );
    }
    let source = args.source.unwrap_or_else(Binaries::default_source);
    let mut opts = if args.node {
        let mut opts = Options::new(Binaries::locate_node(&source)?);
        opts.node = Some(NodePaths::new(&source));
        opts
    } else {
        Options::new(Binaries::locate(&source)?)
    };
    opts.dir = Some(dir);
    opts.tether = if args.detach {
        Tether::Detached
    } else {
        Tether::Lifeline
    };
    let cp = ControlPlane::start(opts).await?;
    println!("control plane ready at {}", cp.server());
    println!("  export KUBECONFIG={}", cp.kubeconfig_path().display());
    if let Some(node) = cp.node() {
        println!(
            "  node {NODE_NAME} Ready; images: ctr --address {} -n k8s.io images import --base-name NAME ARCHIVE",
            node.containerd_socket().display()
        );
    }
    if args.detach {
        let state = cp.detach()?;
        let pids: Vec<String> = state.pids.iter().map(|(n, p)| format!("{n}={p}")).collect();
        println!("  running detached: {}", pids.join(" "));
        return Ok(ExitCode::SUCCESS);
    }
    println!("  press Ctrl-C to stop");
    super::shutdown_signal().await?;
    drop(cp);
    Ok(ExitCode::SUCCESS)
}

/// `kiln controlplane down`
pub fn down(args: &DirArgs) -> anyhow::Result<ExitCode> {
    let stopped = State::stop(&args.dir)?;
    let what = if stopped.is_empty() {
        "nothing".to_string()
    } else {
        stopped.join(", ")
    };
    println!("stopped: {what}");
    Ok(ExitCode::SUCCESS)
}
