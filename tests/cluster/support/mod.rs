//! Test support: one real control plane per test binary, a namespace per test,
//! CRD installation that waits for discovery.
//!
//! With `KILN_TEST_KUBECONFIG` set, the tests run against that cluster instead
//! of starting one (each test still gets its own namespace).
//!
//! With `KILN_TEST_LOGS=<dir>` set, the log of every `kiln run` process a
//! failing test started is kept in `<dir>` (see [`KilnProcess`]).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kiln::controlplane::{Binaries, ControlPlane, Options, client_from_kubeconfig};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client, discovery};
use serde::Deserialize;

pub mod counts;
pub mod hook_server;
pub mod scene;
pub mod stall;

/// The field manager tests write with.
pub const MANAGER: &str = "kiln-test";

/// How long a test waits for anything the system under test is expected to
/// do (converge, notice, exit): long enough for a loaded 2-core machine, so
/// a wait for an event or condition never decides pass or fail by how fast
/// the machine is.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// How long a counter must stay still for [`settled`] to call it settled.
pub const QUIET: Duration = Duration::from_millis(1500);

/// Label put on every namespace a test creates, so leftovers can be found.
pub const TEST_LABEL: &str = "kiln.dev/test";

struct Cluster {
    kubeconfig_yaml: String,
    /// Kept alive for the whole run; its processes also exit with this one.
    _control_plane: Option<ControlPlane>,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();

fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(|| {
        if let Ok(path) = std::env::var("KILN_TEST_KUBECONFIG") {
            let kubeconfig_yaml = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("KILN_TEST_KUBECONFIG={path}: {e}"));
            return Cluster {
                kubeconfig_yaml,
                _control_plane: None,
            };
        }
        // Tests run on their own (current-thread) runtimes; start-up gets a
        // runtime of its own on a plain thread so any test may be first.
        let cp = std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let bins = Binaries::locate(&Binaries::default_source())?;
            rt.block_on(ControlPlane::start(Options::new(bins)))
                .map_err(anyhow::Error::from)
        })
        .join()
        .expect("control-plane start-up thread panicked")
        .unwrap_or_else(|e| panic!("starting the local control plane: {e:#}"));
        Cluster {
            kubeconfig_yaml: cp.kubeconfig_yaml().to_string(),
            _control_plane: Some(cp),
        }
    })
}

/// The admin kubeconfig of the test cluster.
pub fn kubeconfig_yaml() -> &'static str {
    &cluster().kubeconfig_yaml
}

/// A client authenticated as the cluster admin, bound to the calling runtime.
pub async fn admin_client() -> Client {
    client_from_kubeconfig(kubeconfig_yaml())
        .await
        .expect("admin client")
}

/// A client that authenticates with a bearer token instead of the admin's
/// client certificate (same server, same CA).
pub async fn token_client(token: &str) -> Client {
    token_client_for(kubeconfig_yaml(), token).await
}

/// A bearer-token client for the cluster of `kubeconfig` (another control plane).
pub async fn token_client_for(kubeconfig: &str, token: &str) -> Client {
    client_from_kubeconfig(&token_kubeconfig(kubeconfig, token))
        .await
        .expect("token client")
}

/// `kubeconfig` with its user authenticating by `token`.
pub fn token_kubeconfig(kubeconfig: &str, token: &str) -> String {
    let mut kc = Kubeconfig::from_yaml(kubeconfig).expect("kubeconfig");
    let user = kc.auth_infos.first_mut().expect("kubeconfig has a user");
    user.auth_info = Some(serde_json::from_value(serde_json::json!({ "token": token })).unwrap());
    serde_norway::to_string(&kc).unwrap()
}

/// A namespace of its own for one test, named after it.
pub struct TestNamespace {
    name: String,
    client: Client,
}

impl TestNamespace {
    /// Creates `kiln-<prefix>-<n>`.
    pub async fn new(client: &Client, prefix: &str) -> Self {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("kiln-{prefix}-{}-{n}", std::process::id());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "labels": { TEST_LABEL: "true" } }
        }))
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        Self {
            name,
            client: client.clone(),
        }
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the namespace (the namespace controller empties it).
    pub async fn delete(self) {
        let _ = Api::<Namespace>::all(self.client)
            .delete(&self.name, &DeleteParams::default())
            .await;
    }
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Applies every CustomResourceDefinition in the YAML files under `dir`
/// (relative to the repository root) and waits until discovery serves each
/// of their served versions. Returns the resolved resources.
pub async fn install_crds(client: &Client, dir: &str) -> Vec<ApiResource> {
    let crds = read_crds(&repo_root().join(dir));
    assert!(
        !crds.is_empty(),
        "no CustomResourceDefinition found under {dir}"
    );
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let pp = PatchParams::apply(MANAGER).force();
    for crd in &crds {
        let name = crd.metadata.name.as_deref().expect("CRD has a name");
        api.patch(name, &pp, &Patch::Apply(crd)).await.unwrap();
    }
    let mut resolved = Vec::new();
    for crd in &crds {
        for version in crd.spec.versions.iter().filter(|v| v.served) {
            let gvk = GroupVersionKind::gvk(&crd.spec.group, &version.name, &crd.spec.names.kind);
            resolved.push(wait_for_kind(client, &gvk, PATIENCE).await);
        }
    }
    resolved
}

/// Polls discovery until `gvk` is served.
pub async fn wait_for_kind(
    client: &Client,
    gvk: &GroupVersionKind,
    limit: Duration,
) -> ApiResource {
    let started = Instant::now();
    loop {
        match discovery::pinned_kind(client, gvk).await {
            Ok((ar, _caps)) => return ar,
            Err(e) if started.elapsed() > limit => {
                panic!("{gvk:?} not served after {limit:?}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn read_crds(dir: &Path) -> Vec<CustomResourceDefinition> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let mut crds = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_norway::Deserializer::from_str(&text) {
            let value = serde_json::Value::deserialize(doc).unwrap();
            if value.get("kind").and_then(|k| k.as_str()) == Some("CustomResourceDefinition") {
                crds.push(serde_json::from_value(value).unwrap());
            }
        }
    }
    crds
}

/// Polls `check` every 100 ms until it returns `Some`, or panics with `what`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`eventually`] for a check that says why it is not there yet: the last
/// reason goes with the panic.
pub async fn until<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    loop {
        let why = match check().await {
            Ok(v) => return v,
            Err(why) => why,
        };
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}: {why}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (up to [`PATIENCE`]) until `count` stays the same for [`QUIET`]:
/// the system has settled, so a "nothing happens" check that follows
/// measures only what it causes.
pub async fn settled(what: &str, count: impl Fn() -> u64) {
    eventually(what, PATIENCE, || async {
        let before = count();
        tokio::time::sleep(QUIET).await;
        (count() == before).then_some(())
    })
    .await;
}

/// Counts the write requests (anything but GET) a client sends, so tests can
/// assert "no writes" independently of the engine's own bookkeeping.
#[derive(Clone, Default)]
pub struct WriteCounter(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl WriteCounter {
    /// Writes so far.
    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// An admin client whose writes are counted.
pub async fn counting_client() -> (Client, WriteCounter) {
    client_counting(kubeconfig_yaml(), |req| req.method() != http::Method::GET).await
}

/// A client for `kubeconfig` that counts the requests `counts` picks.
pub async fn client_counting(
    kubeconfig: &str,
    counts: impl Fn(&http::Request<kube::client::Body>) -> bool + Clone + Send + Sync + 'static,
) -> (Client, WriteCounter) {
    use kube::client::ClientBuilder;
    let counter = WriteCounter::default();
    let kc = Kubeconfig::from_yaml(kubeconfig).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    let seen = counter.clone();
    let layer = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
        if counts(&req) {
            seen.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        req
    });
    let client = ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&layer)
        .build();
    (client, counter)
}

/// Loads one rule from YAML text (for rules written inside a test).
pub fn rule_from_yaml(yaml: &str) -> std::sync::Arc<kiln::rules::Rule> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rule.yaml");
    std::fs::write(&file, yaml).unwrap();
    let mut set = kiln::rules::load(&[file]).unwrap_or_else(|d| panic!("{}", d[0]));
    set.rules.remove(0)
}

/// The shipped rule `name` from rules/, with `edit` applied to its text first.
pub fn shipped_rule(
    name: &str,
    edit: impl Fn(String) -> String,
) -> std::sync::Arc<kiln::rules::Rule> {
    let text = std::fs::read_to_string(repo_root().join(format!("rules/{name}.yaml"))).unwrap();
    rule_from_yaml(&edit(text))
}

/// Server-side applies `object` (as the test's own field manager) in `ns`
/// when given, resolving its kind through discovery; returns it as stored.
pub async fn apply(
    client: &Client,
    mut object: serde_json::Value,
    ns: Option<&str>,
) -> serde_json::Value {
    use kube::api::DynamicObject;
    if let Some(ns) = ns {
        object["metadata"]["namespace"] = serde_json::json!(ns);
    }
    let api = dynamic_api(client, &object["apiVersion"], &object["kind"], ns).await;
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let obj: DynamicObject = serde_json::from_value(object).unwrap();
    let live = api
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap();
    serde_json::to_value(live).unwrap()
}

/// A user's edit of one object (a merge patch, as `kubectl edit` makes);
/// returns it as stored.
pub async fn edit(
    client: &Client,
    (api_version, kind): (&str, &str),
    ns: Option<&str>,
    name: &str,
    patch: serde_json::Value,
) -> serde_json::Value {
    let api = dynamic_api(client, &api_version.into(), &kind.into(), ns).await;
    let edited = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    serde_json::to_value(edited).unwrap()
}

/// Deletes one object (in the background, as `kubectl delete` does).
pub async fn delete(
    client: &Client,
    (api_version, kind): (&str, &str),
    ns: Option<&str>,
    name: &str,
) {
    let api = dynamic_api(client, &api_version.into(), &kind.into(), ns).await;
    api.delete(name, &kube::api::DeleteParams::default())
        .await
        .unwrap();
}

/// An API for a kind named by apiVersion and kind, in `ns` when namespaced.
pub async fn dynamic_api(
    client: &Client,
    api_version: &serde_json::Value,
    kind: &serde_json::Value,
    ns: Option<&str>,
) -> Api<kube::api::DynamicObject> {
    let types = kube::core::TypeMeta {
        api_version: api_version.as_str().unwrap().to_string(),
        kind: kind.as_str().unwrap().to_string(),
    };
    let gvk = GroupVersionKind::try_from(&types).unwrap();
    let (ar, caps) = discovery::pinned_kind(client, &gvk).await.unwrap();
    match ns {
        Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        _ => Api::all_with(client.clone(), &ar),
    }
}

/// One object as JSON, if it exists.
pub async fn get(
    client: &Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Option<serde_json::Value> {
    let api = dynamic_api(
        client,
        &serde_json::json!(api_version),
        &serde_json::json!(kind),
        Some(ns),
    )
    .await;
    api.get_opt(name)
        .await
        .unwrap()
        .map(|o| serde_json::to_value(o).unwrap())
}

/// Reads an example file's first document as JSON.
pub fn example(path: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(repo_root().join(path)).unwrap();
    kiln::yaml::parse_documents(&text, kiln::yaml::Limits::default()).unwrap()[0].to_json()
}

/// A TCP port free now, that no outgoing connection takes meanwhile.
pub fn free_port() -> u16 {
    kiln::controlplane::free_port().unwrap()
}

/// A plain HTTP GET on loopback: (status, body), or `None` when nothing answers.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    let code = out.get(9..12)?.parse().ok()?;
    Some((
        code,
        out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string(),
    ))
}

/// `kiln run` as a child process, killed when dropped.
pub struct KilnProcess {
    /// The process.
    pub child: std::process::Child,
    /// Its metrics port.
    pub metrics: u16,
    /// Its health port.
    pub health: u16,
    dir: tempfile::TempDir,
}

impl KilnProcess {
    /// Starts `kiln run` on the test cluster with `rule_yaml` and extra args.
    pub fn start(rule_yaml: &str, extra: &[&str]) -> Self {
        Self::start_on(kubeconfig_yaml(), rule_yaml, extra)
    }

    /// Starts `kiln run` on the cluster of `kubeconfig`.
    pub fn start_on(kubeconfig: &str, rule_yaml: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rule.yaml"), rule_yaml).unwrap();
        let rules = dir.path().join("rule.yaml");
        let mut args = vec!["--rules", rules.to_str().unwrap()];
        args.extend(extra);
        Self::spawn(dir, kubeconfig, &args)
    }

    /// Starts `kiln run ARGS…` (a rule source among them) on the test cluster.
    pub fn run(args: &[&str]) -> Self {
        Self::spawn(tempfile::tempdir().unwrap(), kubeconfig_yaml(), args)
    }

    fn spawn(dir: tempfile::TempDir, kubeconfig: &str, args: &[&str]) -> Self {
        std::fs::write(dir.path().join("kubeconfig"), kubeconfig).unwrap();
        let (metrics, health) = (free_port(), free_port());
        let log = std::fs::File::create(dir.path().join("kiln.log")).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(dir.path().join("kubeconfig"))
            .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
            .args([
                "--health-probe-bind-address",
                &format!("127.0.0.1:{health}"),
            ])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Self {
            child,
            metrics,
            health,
            dir,
        }
    }

    /// The kubeconfig file it runs with.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Replaces its rule file (written then renamed, as editors do): a reload.
    pub fn rewrite_rule(&self, rule_yaml: &str) {
        let tmp = self.dir.path().join(".rule.yaml.tmp");
        std::fs::write(&tmp, rule_yaml).unwrap();
        std::fs::rename(tmp, self.dir.path().join("rule.yaml")).unwrap();
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        terminate(&self.child);
    }

    /// Waits for the process to exit.
    pub async fn exited(&mut self, limit: Duration) -> std::process::ExitStatus {
        exited(&mut self.child, limit).await
    }

    /// The value of a metric line starting with `prefix`, if exported.
    pub async fn metric(&self, prefix: &str) -> Option<f64> {
        let (_, body) = http_get(self.metrics, "/metrics").await?;
        body.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }
}

impl Drop for KilnProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            return;
        }
        // A failing test: what kiln said last goes with the failure (CI
        // shows nothing else), and the whole log is kept when asked.
        let log = self.dir.path().join("kiln.log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(LOG_TAIL)..];
        eprintln!(
            "--- the last {} lines of kiln {}'s log ---\n{}",
            tail.len(),
            self.child.id(),
            tail.join("\n")
        );
        if let Some(dir) = std::env::var_os("KILN_TEST_LOGS") {
            keep_log(self.dir.path(), Path::new(&dir), self.child.id());
        }
    }
}

/// Sends SIGTERM to `child`.
pub fn terminate(child: &std::process::Child) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
}

/// Waits for `child` to exit, at most `limit`.
pub async fn exited(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "kiln did not exit within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Lines of a kiln's log printed when a test fails.
const LOG_TAIL: usize = 25;

/// Copies `kiln.log` of a process's directory to `into` as
/// `kiln-<time>-<pid>.log`, saying where on stderr.
fn keep_log(from: &Path, into: &Path, pid: u32) {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let to = into.join(format!("kiln-{stamp}-{pid}.log"));
    let kept =
        std::fs::create_dir_all(into).and_then(|()| std::fs::copy(from.join("kiln.log"), &to));
    match kept {
        Ok(_) => eprintln!("kiln log kept: {}", to.display()),
        Err(e) => eprintln!("could not keep the kiln log in {}: {e}", into.display()),
    }
}

/// `kiln run` arguments for a replica of namespace `ns` with leader
/// election on a short Lease (6 s, renewed within 4 s, read every second).
pub fn elected_in(ns: &str) -> Vec<String> {
    [
        "--namespace",
        ns,
        "--leader-elect",
        "--leader-elect-namespace",
        ns,
        "--leader-elect-lease-duration",
        "6s",
        "--leader-elect-renew-deadline",
        "4s",
        "--leader-elect-retry-period",
        "1s",
    ]
    .map(str::to_string)
    .to_vec()
}

/// Makes `holder` the holder of the Lease `ns/kiln`, renewed now, for
/// `seconds`: another replica took it.
pub async fn hand_lease_to(client: &Client, ns: &str, holder: &str, seconds: i32) {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let taken = Lease {
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(seconds),
            renew_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                k8s_openapi::jiff::Timestamp::now(),
            )),
            ..Default::default()
        }),
        ..Default::default()
    };
    leases
        .patch(
            "kiln",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&taken),
        )
        .await
        .unwrap();
}

/// Events in `ns` about the object `name` with this reason.
pub async fn events_about(
    client: &Client,
    ns: &str,
    name: &str,
    reason: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

/// A token of a new ServiceAccount `name` in `ns`, bound cluster-wide to a
/// ClusterRole with exactly `rules` (a JSON list of PolicyRules).
pub async fn service_account_token(
    client: &Client,
    ns: &str,
    name: &str,
    rules: serde_json::Value,
) -> String {
    use serde_json::json;
    let role = format!("{ns}-{name}");
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
        Some(ns),
    )
    .await;
    apply(
        client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": role}, "rules": rules}),
        None,
    )
    .await;
    apply(
        client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
        None,
    )
    .await;
    token_of(client, ns, name).await
}

/// A fresh token (an hour long) of the existing ServiceAccount `ns/name`.
pub async fn token_of(client: &Client, ns: &str, name: &str) -> String {
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), ns);
    let request: k8s_openapi::api::authentication::v1::TokenRequest = serde_json::from_value(
        serde_json::json!({"spec": {"audiences": [], "expirationSeconds": 3600}}),
    )
    .unwrap();
    sas.create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .expect("a token")
}

/// Runs `kiln explain API_VERSION KIND OBJECT` with the admin kubeconfig
/// and `rules` (file name, text) as its rule directory; returns stdout,
/// having checked it succeeded.
pub fn kiln_explain(api_version: &str, kind: &str, object: &str, rules: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let rules_dir = dir.path().join("rules");
    std::fs::create_dir(&rules_dir).unwrap();
    for (file, text) in rules {
        std::fs::write(rules_dir.join(file), text).unwrap();
    }
    kiln_explain_with(
        api_version,
        kind,
        object,
        &["--rules", rules_dir.to_str().unwrap()],
    )
}

/// `kiln explain` of the object, with `rules` saying where its rules are
/// (`--rules DIR`, `--rules-configmap NS/NAME`).
pub fn kiln_explain_with(api_version: &str, kind: &str, object: &str, rules: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, kubeconfig_yaml()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["explain", api_version, kind, object])
        .args(rules)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout
}

/// Runs `cmd`, checks it succeeded (its output goes with the panic), and
/// returns its stdout.
pub fn run_ok(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
