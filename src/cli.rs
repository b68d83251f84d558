//! The command line: one subcommand per job, each a thin call into the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Run the test cases (`*.test.yaml`) beside the rules, offline: exit 0
    /// when all pass, 1 when one fails, 2 on bad input.
    Test(TestArgs),
    /// Explain one object from the cluster: the rules that select it (and why
    /// others do not), each child applied / would change / missing, its
    /// conditions and kiln's recent Events. Reads only.
    Explain(ExplainArgs),
    /// Show what the given rules would change in the cluster, before they
    /// run: per selected object, children created / changed (a YAML diff of
    /// the fields kiln sends) / pruned and status. Reads only. Exit 0 when
    /// nothing would change, 1 when something would, 2 on error.
    Diff(DiffArgs),
    /// Print the least-privilege ClusterRole the given rules need.
    Rbac(RbacArgs),
    /// Print the CustomResourceDefinitions the rules define (`spec.api`),
    /// for GitOps and review; `kiln run` applies the same ones.
    Crd(CrdArgs),
    /// Print a ConfigMap holding the given rule files (to mount or to read with --rules-configmap).
    Configmap(ConfigmapArgs),
    /// Package a rule directory for a cluster: the rule files and the
    /// ClusterRole they need, as Helm values for the kiln chart or as a
    /// kustomize overlay of `deploy/`.
    Package(PackageArgs),
    /// Print the JSON Schema of the rule format (for editors; the repo keeps it in
    /// rules/rule.schema.json), or with --tests of test files (rules/test.schema.json).
    Schema(SchemaArgs),
    /// Start or stop a local control plane (etcd, kube-apiserver,
    /// kube-controller-manager) built from Go modules, for development and tests.
    #[command(subcommand)]
    Controlplane(ControlplaneCommand),
}

/// `kiln run`: its settings, by area.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub source: RuleSourceArgs,
    #[command(flatten)]
    pub reload: ReloadArgs,
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub serving: ServingArgs,
    #[command(flatten)]
    pub election: ElectionArgs,
    #[command(flatten)]
    pub conversion: ConversionArgs,
}

/// The CRD conversion webhook, for rules whose API has several versions.
#[derive(Debug, Args)]
#[command(next_help_heading = "Conversion webhook")]
pub struct ConversionArgs {
    /// Where to serve the conversion webhook over TLS (`:9443`; `0`, the
    /// default, turns it off). Every replica serves it, leading or not.
    #[arg(long, default_value = "0", value_parser = parse_bind)]
    pub conversion_addr: Bind,
    #[command(flatten)]
    pub endpoint: ConversionEndpointArgs,
    /// The Secret (in kiln's namespace) holding the webhook's CA and
    /// certificate, shared by every replica.
    #[arg(long, default_value = kiln::api::webhook::DEFAULT_SECRET)]
    pub conversion_secret: String,
    /// kiln's namespace, where the Secret is (default: the pod's namespace,
    /// else `default`).
    #[arg(long)]
    pub conversion_namespace: Option<String>,
    /// How long the webhook's certificates are valid; they are renewed once
    /// two thirds of it have passed.
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    pub conversion_cert_validity: Duration,
}

/// Where the API server reaches kiln's conversion webhook (`kiln run` and
/// `kiln crd` take the same).
#[derive(Debug, Args)]
pub struct ConversionEndpointArgs {
    /// `NAMESPACE/NAME[:PORT]` of the Service the API server reaches the
    /// webhook through (port 443 by default).
    #[arg(long, value_parser = parse_service, conflicts_with = "conversion_url")]
    pub conversion_service: Option<(String, String, u16)>,
    /// The URL the API server reaches the webhook at, when kiln runs
    /// outside the cluster (e.g. `https://127.0.0.1:9443`).
    #[arg(long)]
    pub conversion_url: Option<String>,
}

/// Where the rules are read from (one at least).
#[derive(Debug, Args)]
#[command(next_help_heading = "Rule source")]
#[group(id = "source", required = true, multiple = true)]
pub struct RuleSourceArgs {
    /// Rule files or directories (repeatable); watched and hot-reloaded.
    #[arg(long = "rules")]
    pub rules: Vec<PathBuf>,
    /// `NAMESPACE/NAME` of the ConfigMap holding the rules. Without `--rules`,
    /// the rules are read from it through the API (no kubelet sync delay);
    /// with `--rules`, invalid reloads are reported as Events on it.
    #[arg(long, value_parser = parse_configmap)]
    pub rules_configmap: Option<(String, String)>,
    /// Read the rules from cluster-scoped `Rule` resources (`rules.kiln.dev`,
    /// the CRD in deploy/rule-crd.yaml) instead, listed and watched; each
    /// Rule's status says whether it runs and why not. An empty set is
    /// allowed with this source (deleting every Rule stops every rule).
    #[arg(long, conflicts_with_all = ["rules", "rules_configmap"])]
    pub rules_from_cluster: bool,
}

/// How a new version of the rules replaces the running one.
#[derive(Debug, Args)]
#[command(next_help_heading = "Reload")]
pub struct ReloadArgs {
    /// When a rule is removed from the set, delete the children it made
    /// (default: they stay).
    #[arg(long)]
    pub prune_on_rule_removal: bool,
    /// Accept a rule source with no rules, at start and on reload (every rule
    /// stops). Without it, an empty or vanished source is refused like an
    /// invalid one and the last good rules keep running.
    #[arg(long)]
    pub allow_empty_rules: bool,
}

/// The connection to the API server.
#[derive(Debug, Args)]
#[command(next_help_heading = "Client")]
pub struct ClientArgs {
    /// Kubeconfig file (default: in-cluster config, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long)]
    pub context: Option<String>,
    /// How long a request to the API server (not a watch) may wait for its
    /// answer before it is given up and retried on a new connection, e.g.
    /// `70s` (above the API server's own 60 s limit); `0` waits forever.
    #[arg(long, default_value = "70s", value_parser = parse_timeout)]
    pub request_timeout: Timeout,
}

/// What the engine runs on and how.
#[derive(Debug, Args)]
#[command(next_help_heading = "Engine")]
pub struct EngineArgs {
    /// Watch only this namespace (repeatable; default: all).
    #[arg(long = "namespace")]
    pub namespaces: Vec<String>,
    /// Field manager for server-side apply.
    #[arg(long, default_value = "kiln")]
    pub field_manager: String,
    /// Workers per rule.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// How long in-flight reconciles may take to finish on shutdown, e.g. `30s`.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
}

/// The endpoints kiln serves.
#[derive(Debug, Args)]
#[command(next_help_heading = "Serving")]
pub struct ServingArgs {
    /// Where to serve Prometheus metrics (`:8080`, `127.0.0.1:9090`; `0` turns it off).
    #[arg(long, default_value = ":8080", value_parser = parse_bind)]
    pub metrics_bind_address: Bind,
    /// Where to serve `/healthz` and `/readyz` (`0` turns it off).
    #[arg(long, default_value = ":8081", value_parser = parse_bind)]
    pub health_probe_bind_address: Bind,
}

/// Leader election, or sharing the primaries among replicas.
#[derive(Debug, Args)]
#[command(next_help_heading = "Election and shards")]
pub struct ElectionArgs {
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
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stands down.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often replicas read the Lease (and the leader renews it).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,
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

/// A request timeout; `None`: wait forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeout(pub Option<Duration>);

/// An address to serve on; `None`: switched off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bind(pub Option<SocketAddr>);

/// A duration as rules write them (`30s`, `1m30s`).
fn parse_duration(s: &str) -> Result<Duration, String> {
    kiln::rules::duration::parse(s)
}

/// A duration, `0` (or zero) meaning none.
fn parse_timeout(s: &str) -> Result<Timeout, String> {
    match s.trim() {
        "0" => Ok(Timeout(None)),
        text => parse_duration(text).map(|d| Timeout(Some(d).filter(|d| !d.is_zero()))),
    }
}

/// A bind address the controller-runtime way (`:8080`, `HOST:PORT`, `0`).
fn parse_bind(s: &str) -> Result<Bind, String> {
    kiln::serve::parse_bind(s).map(Bind)
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
    /// Name of the ClusterRole, and of the Role in kiln's namespace.
    #[arg(long, default_value = "kiln")]
    pub name: String,
    /// Ask this cluster's discovery for resource names instead of deriving
    /// them from kinds (for CRDs with irregular plurals).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// kiln's namespace: where it keeps its Leases, ConfigMaps and Secrets
    /// (the Role and RoleBinding for them are there, and grant nothing
    /// elsewhere).
    #[arg(long, default_value = "kiln-system")]
    pub namespace: String,
    /// kiln's ServiceAccount (in `--namespace`), bound to that Role.
    #[arg(long, default_value = "kiln")]
    pub service_account: String,
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

/// `kiln package`
#[derive(Debug, Args)]
pub struct PackageArgs {
    /// Directory of rule files.
    #[arg(long = "rules")]
    pub rules: PathBuf,
    /// What to write.
    #[arg(long, value_enum)]
    pub format: PackageFormat,
    /// helm-values: a file to write (default: stdout). kustomize: the
    /// overlay's directory (required).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// kustomize: the base to overlay: a local directory (named in the
    /// overlay relative to `--out`), or a remote base, written as given.
    #[arg(long)]
    pub base: Option<String>,
    /// Name of the ClusterRole (in the base, for kustomize).
    #[arg(long, default_value = "kiln")]
    pub name: String,
    /// kustomize: name of the rules ConfigMap in the base.
    #[arg(long, default_value = "kiln-rules")]
    pub configmap_name: String,
    /// Ask this cluster's discovery for resource names instead of deriving
    /// them from kinds (for CRDs with irregular plurals).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// What `kiln package` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PackageFormat {
    /// A values file for `charts/kiln` (`rules.files`, `rbac.rules`).
    HelmValues,
    /// A kustomize overlay replacing the base's rules and ClusterRole.
    Kustomize,
}

/// `kiln validate`
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Rule files or directories of them.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// A CustomResourceDefinition file (repeatable; a file may hold several):
    /// templates of rules on its kind may read only the `self.spec` and
    /// `self.status` fields its schema declares.
    #[arg(long = "crd")]
    pub crds: Vec<PathBuf>,
}

/// `kiln crd`
#[derive(Debug, Args)]
pub struct CrdArgs {
    /// Rule files or directories (repeatable).
    #[arg(long = "rules", required = true)]
    pub rules: Vec<PathBuf>,
    /// CRDs as they are now (a file, e.g. the committed output of `kiln
    /// crd`; repeatable): report each change that would break their stored
    /// objects, which `kiln run` refuses unless the rule allows it, and exit
    /// 1 when there is one it would refuse.
    #[arg(long = "compare")]
    pub compare: Vec<PathBuf>,
    /// Where the API server reaches kiln's conversion webhook, as given to
    /// `kiln run`: a CRD with several versions is printed pointed at it
    /// (`kiln run` adds the CA bundle), and refused without it.
    #[command(flatten)]
    pub conversion: ConversionEndpointArgs,
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
    #[arg(long = "rules", required_unless_present_any = ["rules_configmap", "rules_from_cluster"])]
    pub rules: Vec<PathBuf>,
    /// Read the rules kiln runs from this ConfigMap, `NAMESPACE/NAME`, in the
    /// cluster (as `kiln run --rules-configmap` does) instead of files.
    #[arg(long, value_parser = parse_configmap, conflicts_with = "rules")]
    pub rules_configmap: Option<(String, String)>,
    /// Read the rules kiln runs from the cluster's `Rule` resources (as
    /// `kiln run --rules-from-cluster` does) instead of files.
    #[arg(long, conflicts_with_all = ["rules", "rules_configmap"])]
    pub rules_from_cluster: bool,
    /// Kubeconfig file (default: in-cluster config, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long)]
    pub context: Option<String>,
    /// The field manager `kiln run` applies as (its `--field-manager`):
    /// what a decorator already set is read from that manager's fields.
    #[arg(long, default_value = "kiln")]
    pub field_manager: String,
}

/// `kiln diff`
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Rule files or directories (repeatable): the rules to compare with
    /// the cluster (they need not be the ones running).
    #[arg(long = "rules", required = true)]
    pub rules: Vec<PathBuf>,
    /// Only objects in this namespace (default: every namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Kubeconfig file (default: in-cluster config, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long)]
    pub context: Option<String>,
    /// The field manager `kiln run` applies as (its `--field-manager`):
    /// what a decorator already set is read from that manager's fields.
    #[arg(long, default_value = "kiln")]
    pub field_manager: String,
}

/// `kiln schema`
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Print the schema of test files (`*.test.yaml`) instead of rules.
    #[arg(long)]
    pub tests: bool,
}

/// `kiln test`
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Test files, or directories whose `*.test.yaml` files are run.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Write the results as JUnit XML to this file.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Write what each case makes (every child whole, the status, the
    /// pruned children and errors) to `NAME.test.snap` beside its test
    /// file; once that file exists, a case fails on any difference from it.
    #[arg(long)]
    pub update: bool,
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
    /// The primary's CustomResourceDefinition file (repeatable): its schema's
    /// defaults are filled in before rendering, as the API server does (a
    /// rule that defines its API uses its own).
    #[arg(long = "crd")]
    pub crds: Vec<PathBuf>,
    /// The instant `now()` gives, RFC 3339 (default: the clock, read once).
    /// Set it to make a render that reads the time reproducible.
    #[arg(long, value_parser = parse_now)]
    pub now: Option<jiff::Timestamp>,
    /// The field manager `kiln run` applies as (its `--field-manager`):
    /// what a decorator already set is read from that manager's fields.
    #[arg(long, default_value = "kiln")]
    pub field_manager: String,
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

/// `NAMESPACE/NAME[:PORT]` of a Service (port 443 when not given).
fn parse_service(s: &str) -> Result<(String, String, u16), String> {
    let (rest, port) = match s.rsplit_once(':') {
        Some((rest, port)) => (
            rest,
            port.parse().map_err(|e| format!("port `{port}`: {e}"))?,
        ),
        None => (s, 443),
    };
    let (ns, name) = parse_configmap(rest)?;
    Ok((ns, name, port))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_settings_are_typed_as_they_are_parsed() {
        let cli = Cli::try_parse_from([
            "kiln",
            "run",
            "--rules",
            "r",
            "--request-timeout",
            "0",
            "--metrics-bind-address",
            ":9090",
            "--health-probe-bind-address",
            "0",
            "--leader-elect-retry-period",
            "500ms",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.client.request_timeout, Timeout(None));
        assert_eq!(
            run.serving.metrics_bind_address,
            Bind(Some("0.0.0.0:9090".parse().unwrap()))
        );
        assert_eq!(run.serving.health_probe_bind_address, Bind(None));
        assert_eq!(
            run.election.leader_elect_retry_period,
            Duration::from_millis(500)
        );
        assert_eq!(
            run.election.leader_elect_lease_duration,
            Duration::from_secs(15)
        );
        assert_eq!(run.engine.shutdown_timeout, Duration::from_secs(30));
    }
}
