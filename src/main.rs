//! The `kiln` binary: parse the command line, set up logging, dispatch.

mod cli;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use kiln::controlplane::{Binaries, ControlPlane, Options, State, Tether};

use cli::{Cli, Command, ControlplaneCommand, UpArgs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_level.as_deref());
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Version => {
            println!("{}", kiln::version::describe());
            Ok(ExitCode::SUCCESS)
        }
        Command::Controlplane(ControlplaneCommand::Up(args)) => runtime()?.block_on(up(args)),
        Command::Controlplane(ControlplaneCommand::Down(args)) => {
            let stopped = State::stop(&args.dir)?;
            println!(
                "stopped: {}",
                if stopped.is_empty() {
                    "nothing".into()
                } else {
                    stopped.join(", ")
                }
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn up(args: UpArgs) -> anyhow::Result<ExitCode> {
    let dir = std::path::absolute(&args.dir.dir).context("resolving --dir")?;
    if State::load(&dir).is_ok() {
        anyhow::bail!(
            "a control plane is already recorded in {}; stop it with `kiln controlplane down --dir {}`",
            dir.display(),
            dir.display()
        );
    }
    let source = args.source.unwrap_or_else(Binaries::default_source);
    let mut opts = Options::new(Binaries::locate(&source)?);
    opts.dir = Some(dir);
    opts.tether = if args.detach {
        Tether::Detached
    } else {
        Tether::Lifeline
    };
    let cp = ControlPlane::start(opts).await?;
    let kubeconfig = cp.kubeconfig_path().display().to_string();
    println!("control plane ready at {}", cp.server());
    println!("  export KUBECONFIG={kubeconfig}");
    if args.detach {
        let state = cp.detach()?;
        let pids: Vec<String> = state.pids.iter().map(|(n, p)| format!("{n}={p}")).collect();
        println!("  running detached: {}", pids.join(" "));
        return Ok(ExitCode::SUCCESS);
    }
    println!("  press Ctrl-C to stop");
    shutdown_signal().await?;
    drop(cp);
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn init_logging(level: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    let filter = level
        .map(EnvFilter::new)
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
