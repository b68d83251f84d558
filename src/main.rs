//! The `kiln` binary: parse the command line, set up logging, dispatch.

mod cli;
mod commands;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use cli::{Cli, Command, ControlplaneCommand, LogFormat};

/// jemalloc instead of glibc's malloc: at the benchmark's N=3000 kiln's
/// peak RSS was 61.7 MiB with glibc (its per-thread arenas keep the holes
/// that convergence's short-lived objects leave between cached ones) and
/// about 52 MiB with jemalloc, the same work done. Its defaults are set at
/// build time in `.cargo/config.toml` (one arena) and by the
/// `background_threads` feature (freed pages returned while idle).
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    commands::broken_pipe::exit_quietly();
    let cli = parse_command_line();
    init_logging(cli.log_level.as_deref(), cli.log_format);
    let result = match cli.command {
        Command::Version => {
            println!("{}", kiln::version::describe());
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(args) => commands::run::run(&args),
        Command::Demo(args) => commands::demo::run(&args),
        Command::Validate(args) => commands::validate::run(&args),
        Command::Render(args) => commands::render::run(&args),
        Command::Test(args) => commands::test::run(&args),
        Command::Explain(args) => commands::explain::run(&args),
        Command::Diff(args) => commands::diff::run(&args),
        Command::Schema(args) => commands::schema::run(&args),
        Command::Rbac(args) => commands::package::rbac(&args),
        Command::Crd(args) => commands::crd::run(&args),
        Command::Configmap(args) => commands::package::configmap(&args),
        Command::Package(args) => commands::bundle::package(&args),
        Command::Controlplane(ControlplaneCommand::Up(args)) => commands::controlplane::up(args),
        Command::Controlplane(ControlplaneCommand::Down(args)) => {
            commands::controlplane::down(&args)
        }
    };
    result.unwrap_or_else(|err| {
        eprintln!("error: {err:#}");
        ExitCode::from(2)
    })
}

/// The command line, parsed. Installed as `kubectl-kiln`, the binary is a
/// kubectl plugin (`kubectl kiln explain …` runs `kubectl-kiln explain …`):
/// its help and errors then name the command the user typed.
fn parse_command_line() -> Cli {
    let mut command = Cli::command();
    if let Some(name) = std::env::args_os().next().and_then(|a| bin_name(&a)) {
        command = command.bin_name(name);
    }
    let matches = command.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit())
}

/// `kubectl kiln` when run as the kubectl plugin (a file or symlink named
/// `kubectl-kiln`); otherwise clap's own choice, the file name.
fn bin_name(argv0: &std::ffi::OsStr) -> Option<&'static str> {
    let file = std::path::Path::new(argv0).file_stem()?;
    (file == "kubectl-kiln").then_some("kubectl kiln")
}

fn init_logging(level: Option<&str>, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    // kube's client logs every non-2xx response at ERROR; kiln reports the
    // errors it acts on itself, so that layer stays quiet unless asked for.
    // kube's client logs a whole response body it cannot decode, and its
    // watcher every failed list: kiln logs those itself, rate-limited and
    // without bodies (src/engine/watch_health.rs).
    let filter = level
        .map(EnvFilter::new)
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new(
            "info,kube_client::client::builder=off,kube_client::client=error,kube_runtime::watcher=error",
        ));
    // Colours only for a person at a terminal: a log file, a pipe or a
    // container's log (kubectl logs) gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().with_current_span(true).init(),
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    #[test]
    fn named_kubectl_kiln_it_is_the_kubectl_plugin() {
        assert_eq!(
            super::bin_name(OsStr::new("/usr/local/bin/kubectl-kiln")),
            Some("kubectl kiln")
        );
        assert_eq!(
            super::bin_name(OsStr::new("kubectl-kiln")),
            Some("kubectl kiln")
        );
        assert_eq!(
            super::bin_name(OsStr::new("kubectl-kiln.exe")),
            Some("kubectl kiln")
        );
        assert_eq!(super::bin_name(OsStr::new("/usr/bin/kiln")), None);
        assert_eq!(super::bin_name(OsStr::new("kubectl-kilnx")), None);
    }
}
