//! The command line: one subcommand per job, each a thin call into the library.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Kiln: a declarative Kubernetes operator driven by YAML rules.
#[derive(Debug, Parser)]
#[command(name = "kiln", version = kiln::version::KILN, about, long_about = None)]
pub struct Cli {
    /// Log filter, e.g. `info` or `kiln=debug,kube=info` (overrides RUST_LOG).
    #[arg(long, global = true, env = "KILN_LOG")]
    pub log_level: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the version of kiln and of the Kubernetes API it was built for.
    Version,
    /// Start or stop a local control plane (etcd, kube-apiserver,
    /// kube-controller-manager) built from Go modules, for development and tests.
    #[command(subcommand)]
    Controlplane(ControlplaneCommand),
}

/// `kiln controlplane ...`
#[derive(Debug, Subcommand)]
pub enum ControlplaneCommand {
    /// Build (once, cached) and start a local control plane.
    Up(UpArgs),
    /// Stop a control plane started with `up --detach`.
    Down(DirArgs),
}

/// Where a local control plane keeps its state.
#[derive(Debug, Args)]
pub struct DirArgs {
    /// Directory for certificates, etcd data, logs, the kubeconfig and state.
    #[arg(long, default_value = ".kiln/controlplane")]
    pub dir: PathBuf,
}

/// `kiln controlplane up`
#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Return once ready and leave the processes running (stop them with
    /// `kiln controlplane down`). Without it, kiln stays in the foreground and
    /// stops the control plane on Ctrl-C.
    #[arg(long)]
    pub detach: bool,
    /// Directory of the Go wrapper modules (default: this checkout's).
    #[arg(long)]
    pub source: Option<PathBuf>,
}
