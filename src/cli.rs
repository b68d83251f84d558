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

    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "plain")]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// For people.
    Plain,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the version of kiln and of the Kubernetes API it was built for.
    Version,
    /// Run the rules against a cluster until SIGTERM or Ctrl-C.
    Run(Box<RunArgs>),
    /// The demo (`make run`): install the example CRDs and objects and run the
    /// example rules, on the cluster in $KUBECONFIG or on a local control plane.
    Demo(DemoArgs),
    /// Check rule files and report every problem with file, line and column.
    Validate(ValidateArgs),
    /// Show what rules render for an object, exactly as the engine would apply it; no cluster needed.
    Render(RenderArgs),
    /// Explain one object from the cluster: the rules that select it (and why
    /// others do not), each child applied / would change / missing, its
    /// conditions and kiln's recent Events. Reads only.
    Explain(ExplainArgs),
    /// Print the least-privilege ClusterRole the given rules need.
    Rbac(RbacArgs),
    /// Print a ConfigMap holding the given rule files (to mount or to read with --rules-configmap).
    Configmap(ConfigmapArgs),
    /// Print the JSON Schema of the rule format (for editors; the repo keeps it in rules/rule.schema.json).
    Schema,
    /// Start or stop a local control plane (etcd, kube-apiserver,
    /// kube-controller-manager) built from Go modules, for development and tests.
    #[command(subcommand)]
    Controlplane(ControlplaneCommand),
}

/// `kiln run`
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("source").required(true).multiple(true).args(["rules", "rules_configmap"]))]
pub struct RunArgs {
    /// Rule files or directories (repeatable); watched and hot-reloaded.
    #[arg(long = "rules")]
    pub rules: Vec<PathBuf>,
    /// `NAMESPACE/NAME` of the ConfigMap holding the rules. Without `--rules`,
    /// the rules are read from it through the API (no kubelet sync delay);
    /// with `--rules`, invalid reloads are reported as Events on it.
    #[arg(long, value_parser = parse_configmap)]
    pub rules_configmap: Option<(String, String)>,
    /// When a rule is removed from the set, delete the children it made
    /// (default: they stay).
    #[arg(long)]
    pub prune_on_rule_removal: bool,
    /// Accept a rule source with no rules, at start and on reload (every rule
    /// stops). Without it, an empty or vanished source is refused like an
    /// invalid one and the last good rules keep running.
    #[arg(long)]
    pub allow_empty_rules: bool,
    /// Kubeconfig file (default: in-cluster config, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long)]
    pub context: Option<String>,
    /// Watch only this namespace (repeatable; default: all).
    #[arg(long = "namespace")]
    pub namespaces: Vec<String>,
    /// Field manager for server-side apply.
    #[arg(long, default_value = "kiln")]
    pub field_manager: String,
    /// Workers per rule.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// How long a request to the API server (not a watch) may wait for its
    /// answer before it is given up and retried on a new connection, e.g.
    /// `70s` (above the API server's own 60 s limit); `0` waits forever.
    #[arg(long, default_value = "70s")]
    pub request_timeout: String,
    /// How long in-flight reconciles may take to finish on shutdown, e.g. `30s`.
    #[arg(long, default_value = "30s")]
    pub shutdown_timeout: String,
    /// Where to serve Prometheus metrics (`:8080`, `127.0.0.1:9090`; `0` turns it off).
    #[arg(long, default_value = ":8080")]
    pub metrics_bind_address: String,
    /// Where to serve `/healthz` and `/readyz` (`0` turns it off).
    #[arg(long, default_value = ":8081")]
    pub health_probe_bind_address: String,
    /// Run only while holding a coordination.k8s.io Lease, so that several
    /// replicas can run with one of them active.
    #[arg(long)]
    pub leader_elect: bool,
    /// Name of the Lease.
    #[arg(long, default_value = "kiln")]
    pub leader_elect_id: String,
    /// Namespace of the Lease (default: the pod's namespace, else `default`).
    #[arg(long)]
    pub leader_elect_namespace: Option<String>,
    /// How long a Lease is valid without renewal.
    #[arg(long, default_value = "15s")]
    pub leader_elect_lease_duration: String,
    /// How long the leader keeps trying to renew before it stands down.
    #[arg(long, default_value = "10s")]
    pub leader_elect_renew_deadline: String,
    /// How often replicas read the Lease (and the leader renews it).
    #[arg(long, default_value = "2s")]
    pub leader_elect_retry_period: String,
    /// Share the primaries with the other replicas of the shard group: each
    /// holds a Lease of its own (in `--leader-elect-namespace`, with the
    /// `--leader-elect-*` timings) and reconciles, caches and writes only
    /// its share. Instead of `--leader-elect`.
    #[arg(long, conflicts_with = "leader_elect")]
    pub shards: bool,
    /// The shard group: replicas of one group share the primaries.
    #[arg(long, default_value = "kiln", value_parser = parse_shard_group)]
    pub shard_group: String,
    /// This replica's name in the shard group (its Lease's name), which
    /// decides its share: unique in the group, and stable across restarts
    /// so a restarted replica takes back the same buckets. Default:
    /// `$POD_NAME` when set, else the hostname and the pid.
    #[arg(long, requires = "shards", value_parser = parse_shard_identity)]
    pub shard_identity: Option<String>,
}

/// `kiln demo`
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The rules to run.
    #[arg(long, default_value = "rules")]
    pub rules: PathBuf,
    /// Directory of example directories (CRDs and objects).
    #[arg(long, default_value = "examples")]
    pub examples: PathBuf,
    /// Where a local control plane keeps its files, when one is started.
    #[arg(long, default_value = ".kiln/demo")]
    pub dir: PathBuf,
}

/// `kiln rbac`
#[derive(Debug, Args)]
pub struct RbacArgs {
    /// Rule files or directories (repeatable).
    #[arg(long = "rules", required = true)]
    pub rules: Vec<PathBuf>,
    /// Name of the ClusterRole.
    #[arg(long, default_value = "kiln")]
    pub name: String,
    /// Ask this cluster's discovery for resource names instead of deriving
    /// them from kinds (for CRDs with irregular plurals).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// `kiln configmap`
#[derive(Debug, Args)]
pub struct ConfigmapArgs {
    /// Directory of rule files.
    #[arg(long = "rules")]
    pub rules: PathBuf,
    /// Name of the ConfigMap.
    #[arg(long, default_value = "kiln-rules")]
    pub name: String,
    /// Its namespace.
    #[arg(long, default_value = "kiln-system")]
    pub namespace: String,
}

/// `kiln validate`
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Rule files or directories of them.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
}

/// `kiln explain`
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The object's apiVersion, e.g. `demo.kiln.dev/v1`.
    pub api_version: String,
    /// Its kind, e.g. `WebApp`.
    pub kind: String,
    /// `NAMESPACE/NAME`, or `NAME` for a cluster-scoped object.
    pub object: String,
    /// Rule files or directories (repeatable): the rules kiln runs.
    #[arg(long = "rules", required = true)]
    pub rules: Vec<PathBuf>,
    /// Kubeconfig file (default: in-cluster config, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long)]
    pub context: Option<String>,
}

/// `kiln render`
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Rule files or directories (repeatable).
    #[arg(long = "rules", required = true)]
    pub rules: Vec<PathBuf>,
    /// The primary object (YAML).
    #[arg(long)]
    pub object: PathBuf,
    /// A related object for a watch: `NAME=FILE` (a file with several documents gives a list).
    #[arg(long = "related", value_parser = parse_named)]
    pub related: Vec<(String, PathBuf)>,
    /// A live child, for readyWhen and status: `ID=FILE`.
    #[arg(long = "observed", value_parser = parse_named)]
    pub observed: Vec<(String, PathBuf)>,
    /// Only this rule (default: every rule whose primary kind matches the object).
    #[arg(long)]
    pub rule: Option<String>,
    /// Print only the children (no status patch), e.g. to pipe into kubectl.
    #[arg(long)]
    pub children_only: bool,
    /// The instant `now()` gives, RFC 3339 (default: the clock, read once).
    /// Set it to make a render that reads the time reproducible.
    #[arg(long, value_parser = parse_now)]
    pub now: Option<jiff::Timestamp>,
}

fn parse_now(s: &str) -> Result<jiff::Timestamp, String> {
    kiln::template::time::parse(s)
}

fn parse_configmap(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(format!("expected NAMESPACE/NAME, got `{s}`")),
    }
}

/// A shard identity names a Lease: a DNS-1123 subdomain.
fn parse_shard_identity(s: &str) -> Result<String, String> {
    kiln::rules::names::dns_subdomain(s)
        .map(|()| s.to_string())
        .map_err(|why| format!("`{s}` cannot name a Lease: it {why}"))
}

/// A shard group is a label's value on the members' Leases: a DNS-1123
/// label here (a label value may also hold `_` and `.`, kept out for a
/// name that reads the same everywhere).
fn parse_shard_group(s: &str) -> Result<String, String> {
    kiln::rules::names::dns_label(s)
        .map(|()| s.to_string())
        .map_err(|why| format!("`{s}` cannot be a shard group: it {why}"))
}

fn parse_named(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_string(), PathBuf::from(file)))
        }
        _ => Err(format!("expected NAME=FILE, got `{s}`")),
    }
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
    /// Also run the machine's single node (containerd, kubelet, kube-proxy,
    /// kube-scheduler), so pods run; the apiserver then serves on the node's
    /// bridge, 10.244.0.1. Root only; one per machine
    /// (tests/controlplane/NODE.md).
    #[arg(long)]
    pub node: bool,
}
