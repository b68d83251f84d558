//! A real, local Kubernetes control plane: etcd, kube-apiserver and
//! kube-controller-manager built from their Go modules and started on
//! loopback with envtest-like flags; optionally with the machine's single
//! node ([`Options::node`], `node.rs`), so pods run.
//!
//! It backs the integration tests, `make cluster-up` and the demo. Nothing in
//! it is faked: RBAC is enforced, the garbage collector deletes children of a
//! deleted owner, and the namespace controller empties deleted namespaces.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kiln::controlplane::Error> {
//! use kiln::controlplane::{Binaries, ControlPlane, Options};
//! let bins = Binaries::locate(&Binaries::default_source())?;
//! let cp = ControlPlane::start(Options::new(bins)).await?;
//! let client = cp.client().await?;
//! # Ok(()) }
//! ```

mod binaries;
mod kubeconfig;
mod node;
mod pki;
mod ports;
mod process;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use binaries::Binaries;
pub use node::{NODE_NAME, NodePaths, unsupported as node_unsupported};
pub use pki::{ADMIN_GROUP, ADMIN_USER};
pub use ports::free_port;
use process::Component;
pub use process::Tether;

/// Errors starting or stopping a control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A filesystem or process operation failed.
    #[error("failed to {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The Go wrapper modules are not where they were expected.
    #[error(
        "control-plane sources not found: {} does not exist (run from a Kiln checkout, \
         or set KILN_CONTROLPLANE_BIN_DIR to a directory with etcd, kube-apiserver and \
         kube-controller-manager)",
        script.display()
    )]
    NoSources {
        /// The build script that was looked for.
        script: PathBuf,
    },
    /// The build script failed; its output went to stderr.
    #[error("building the control plane with {} failed ({status}); its output is above", script.display())]
    Build {
        /// The build script.
        script: PathBuf,
        /// Its exit status.
        status: String,
    },
    /// A binary is missing from the binary directory.
    #[error("missing control-plane binary {}", path.display())]
    MissingBinary {
        /// The expected path.
        path: PathBuf,
    },
    /// Key or certificate generation failed.
    #[error("generating certificates failed: {0}")]
    Pki(#[from] rcgen::Error),
    /// A component exited while starting.
    #[error("{component} exited during start-up ({status}); last lines of {}:\n{tail}", log.display())]
    Exited {
        /// Which component.
        component: &'static str,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: PathBuf,
        /// The end of that log.
        tail: String,
    },
    /// A component did not become ready in time.
    #[error("{component} was not ready after {waited:?} (last check: {last})")]
    NotReady {
        /// Which component.
        component: &'static str,
        /// How long we waited.
        waited: Duration,
        /// What the last check said.
        last: String,
    },
    /// The generated kubeconfig could not be written or used.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// The local node cannot run here, or its scripts failed.
    #[error("local node: {0}")]
    Node(String),
    /// The state file of a detached control plane is missing or unreadable.
    #[error("no running control plane recorded in {}: {reason}", path.display())]
    State {
        /// The state file.
        path: PathBuf,
        /// Why it could not be used.
        reason: String,
    },
}

impl Error {
    fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// How to start a control plane.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the binaries are.
    pub binaries: Binaries,
    /// Working directory (certificates, etcd data, logs, kubeconfig). `None`
    /// makes a temporary one that is removed when the control plane stops.
    pub dir: Option<PathBuf>,
    /// How the processes' lifetime is tied to this one.
    pub tether: Tether,
    /// How long start-up may take before it is an error.
    pub start_timeout: Duration,
    /// Extra kube-apiserver flags (appended, so they override defaults).
    pub apiserver_args: Vec<String>,
    /// Also run the machine's single node (`tests/controlplane/NODE.md`):
    /// containerd, kubelet, kube-proxy and kube-scheduler, with the apiserver
    /// on the node's bridge. Needs root and binaries from
    /// [`Binaries::locate_node`]. `None`: no node.
    pub node: Option<NodePaths>,
}

impl Options {
    /// Defaults: a temporary directory, processes tethered to this one, and a
    /// start-up budget that fits a busy two-core machine.
    pub fn new(binaries: Binaries) -> Self {
        Self {
            binaries,
            dir: None,
            tether: Tether::Lifeline,
            start_timeout: Duration::from_secs(120),
            apiserver_args: Vec::new(),
            node: None,
        }
    }
}

/// What `kiln controlplane up --detach` leaves behind for `down` and for users.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// The API server's URL.
    pub server: String,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// Component name and PID, in start order.
    pub pids: Vec<(String, u32)>,
    /// The node, when one runs (`up --node`): `down` tears it down.
    #[serde(default)]
    pub node: Option<NodePaths>,
}

impl State {
    /// The state file inside a control plane's directory.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("state.json")
    }

    /// Reads the state of a detached control plane.
    pub fn load(dir: &Path) -> Result<Self, Error> {
        let path = Self::path(dir);
        let text = std::fs::read_to_string(&path).map_err(|e| Error::State {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        serde_json::from_str(&text).map_err(|e| Error::State {
            path,
            reason: e.to_string(),
        })
    }

    /// Stops the processes of a detached control plane (newest first) and
    /// removes its state file. Returns the names of the processes stopped.
    pub fn stop(dir: &Path) -> Result<Vec<String>, Error> {
        let state = Self::load(dir)?;
        let mut stopped = Vec::new();
        for (name, pid) in state.pids.iter().rev() {
            if process::alive(*pid) {
                process::terminate(*pid, grace(name), || !process::alive(*pid));
                stopped.push(name.clone());
            }
        }
        // The guard tears the node down when stopped; if it was gone already,
        // do it here.
        if let Some(node) = &state.node {
            node.teardown()?;
        }
        let path = Self::path(dir);
        std::fs::remove_file(&path).map_err(|source| Error::io("remove", &path, source))?;
        Ok(stopped)
    }
}

/// A running control plane. Dropping it stops every process.
#[derive(Debug)]
pub struct ControlPlane {
    server: String,
    kubeconfig: PathBuf,
    kubeconfig_yaml: String,
    components: Vec<Component>,
    node: Option<NodePaths>,
    // Declared last: removed after the processes are stopped.
    _tempdir: Option<tempfile::TempDir>,
}

const TEMP_PREFIX: &str = "kiln-controlplane-";

impl ControlPlane {
    /// Starts etcd, kube-apiserver and kube-controller-manager and waits until
    /// the API server is ready and the `default` namespace exists.
    pub async fn start(opts: Options) -> Result<Self, Error> {
        let (dir, tempdir) = work_dir(opts.dir.as_deref())?;
        if let Some(reason) = opts.node.as_ref().and_then(|_| node::unsupported()) {
            return Err(Error::Node(reason));
        }
        let pki = pki::Pki::generate(&dir.join("pki"))?;
        let ports = Ports::pick()?;
        let api_host = match opts.node {
            Some(_) => pki::NODE_BRIDGE_IP.to_string(),
            None => "127.0.0.1".to_string(),
        };
        let server = format!("https://{api_host}:{}", ports.api);
        let kubeconfig = dir.join("kubeconfig");
        let kubeconfig_yaml =
            kubeconfig::render(&server, &pki).map_err(|e| Error::Kubeconfig(e.to_string()))?;
        std::fs::write(&kubeconfig, &kubeconfig_yaml)
            .map_err(|source| Error::io("write", &kubeconfig, source))?;

        let mut this = Self {
            server,
            kubeconfig,
            kubeconfig_yaml,
            components: Vec::new(),
            node: opts.node.clone(),
            _tempdir: tempdir,
        };
        let launch = Launch {
            dir: &dir,
            bins: &opts.binaries,
            tether: opts.tether,
            deadline: Instant::now() + opts.start_timeout,
        };
        if let Some(node) = &opts.node {
            // First: the lock, the bridge the apiserver binds, containerd.
            this.start_guard(node, &dir, launch.bins, opts.tether)
                .await?;
        }
        this.start_etcd(&launch, &ports).await?;
        let client = this
            .start_apiserver(&launch, &ports, &pki.files, &opts)
            .await?;
        this.start_controller_manager(&launch, &pki.files, opts.node.as_ref())
            .await?;
        if let Some(node) = &opts.node {
            this.start_node(node, &dir, launch.bins, opts.tether, &client)
                .await?;
        }
        Ok(this)
    }

    /// Starts component `name` (its binary of that name) with `args`.
    fn launch(
        &mut self,
        launch: &Launch<'_>,
        name: &'static str,
        args: &[String],
    ) -> Result<(), Error> {
        self.spawn(
            name,
            &launch.bins.path(name),
            args,
            launch.dir,
            launch.tether,
        )
    }

    /// Starts etcd and waits until it is healthy.
    async fn start_etcd(&mut self, launch: &Launch<'_>, ports: &Ports) -> Result<(), Error> {
        let (etcd_url, peer_url) = (ports.etcd_url(), ports.peer_url());
        let args = vec![
            "--name=default".to_string(),
            format!("--data-dir={}", launch.dir.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            "--unsafe-no-fsync=true".to_string(),
            "--log-level=warn".to_string(),
        ];
        self.launch(launch, "etcd", &args)?;
        self.wait_for("etcd", launch.deadline, || etcd_healthy(ports.etcd))
            .await
    }

    /// Starts kube-apiserver and waits until it is ready and the `default`
    /// namespace exists; returns an admin client.
    async fn start_apiserver(
        &mut self,
        launch: &Launch<'_>,
        ports: &Ports,
        f: &pki::PkiFiles,
        opts: &Options,
    ) -> Result<Client, Error> {
        let api_port = ports.api;
        let mut args = vec![
            format!("--etcd-servers={}", ports.etcd_url()),
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={api_port}"),
            format!("--tls-cert-file={}", f.serving_cert.display()),
            format!("--tls-private-key-file={}", f.serving_key.display()),
            format!("--client-ca-file={}", f.ca_cert.display()),
            format!("--cert-dir={}", launch.dir.join("pki").display()),
            "--authorization-mode=RBAC".to_string(),
            format!("--service-account-issuer=https://127.0.0.1:{api_port}/"),
            format!("--service-account-key-file={}", f.sa_public_key.display()),
            format!(
                "--service-account-signing-key-file={}",
                f.sa_private_key.display()
            ),
            "--service-cluster-ip-range=10.0.0.0/24".to_string(),
            "--allow-privileged=true".to_string(),
            // For a local node (tests/controlplane/NODE.md): reach kubelets by
            // their InternalIP (the node name does not resolve here) with the
            // admin's client certificate, which they trust through the CA.
            // Unused, and harmless, while no kubelet runs.
            "--kubelet-preferred-address-types=InternalIP".to_string(),
            format!("--kubelet-client-certificate={}", f.admin_cert.display()),
            format!("--kubelet-client-key={}", f.admin_key.display()),
        ];
        match opts.node {
            // Pods get their ServiceAccount token, and reach the apiserver.
            Some(_) => args.extend(node::apiserver_overrides()),
            // No pods run: no token controller is needed to admit them.
            None => args.push("--disable-admission-plugins=ServiceAccount".to_string()),
        }
        args.extend(opts.apiserver_args.iter().cloned());
        self.launch(launch, "kube-apiserver", &args)?;
        let client = self.client().await?;
        self.wait_for("kube-apiserver", launch.deadline, || readyz(&client))
            .await?;
        self.wait_for("kube-apiserver", launch.deadline, || {
            default_namespace(&client)
        })
        .await?;
        Ok(client)
    }

    /// Starts kube-controller-manager and checks it is still running half a
    /// second later.
    async fn start_controller_manager(
        &mut self,
        launch: &Launch<'_>,
        files: &pki::PkiFiles,
        node: Option<&NodePaths>,
    ) -> Result<(), Error> {
        let mut args = vec![
            format!("--kubeconfig={}", self.kubeconfig.display()),
            "--controllers=garbagecollector,namespace,serviceaccount".to_string(),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
        ];
        if let Some(node) = node {
            // Later flags win: the node's controller list replaces the above.
            args.extend(node::controller_manager_args(files, node));
        }
        self.launch(launch, "kube-controller-manager", &args)?;
        // The controller manager has no port to probe when serving is off;
        // it must at least survive its own flag parsing and first sync.
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.ensure_running()
    }

    /// Starts `node/guard.sh` (lock, leftover teardown, prepare, containerd)
    /// and waits for its ready marker.
    async fn start_guard(
        &mut self,
        node: &NodePaths,
        dir: &Path,
        bins: &Binaries,
        tether: Tether,
    ) -> Result<(), Error> {
        let args = node.guard_args(dir, &bins.dir);
        self.spawn(node::GUARD, Path::new("bash"), &args, dir, tether)?;
        // Waiting for another node, installing packages and building the
        // pause binary may take a while.
        let deadline = Instant::now() + Duration::from_secs(600) + node.lock_wait;
        let marker = node.ready_marker();
        self.wait_for(node::GUARD, deadline, || {
            let ready = marker.exists();
            async move {
                if ready {
                    Ok(())
                } else {
                    Err("containerd and the images are not ready yet".to_string())
                }
            }
        })
        .await
    }

    /// Starts kube-scheduler, kubelet and kube-proxy (logs in `dir`, which
    /// outlives the node's own directory), and waits until the node is Ready
    /// and schedulable.
    async fn start_node(
        &mut self,
        node: &NodePaths,
        dir: &Path,
        bins: &Binaries,
        tether: Tether,
        client: &Client,
    ) -> Result<(), Error> {
        let kubeconfig = self.kubeconfig.clone();
        let agents = [
            ("kube-scheduler", node::scheduler_args(&kubeconfig)),
            ("kubelet", node.kubelet_args(&kubeconfig)),
            ("kube-proxy", node.proxy_args()),
        ];
        for (name, args) in agents {
            self.spawn(name, &bins.path(name), &args, dir, tether)?;
            let pid = self.components.last().map_or(0, Component::pid);
            node.write_pid(name, pid)?;
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        self.wait_for("kubelet", deadline, || node::node_ready(client))
            .await
    }

    /// The node's paths, when this control plane runs one.
    pub fn node(&self) -> Option<&NodePaths> {
        self.node.as_ref()
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Path of the admin kubeconfig.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The admin kubeconfig as YAML.
    pub fn kubeconfig_yaml(&self) -> &str {
        &self.kubeconfig_yaml
    }

    /// A client authenticated as the admin (`system:masters`).
    pub async fn client(&self) -> Result<Client, Error> {
        client_from_kubeconfig(&self.kubeconfig_yaml).await
    }

    /// PIDs of the running components, in start order.
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.components
            .iter()
            .map(|c| (c.name().to_string(), c.pid()))
            .collect()
    }

    /// Fails if any component has exited.
    pub fn ensure_running(&mut self) -> Result<(), Error> {
        self.components
            .iter_mut()
            .try_for_each(Component::ensure_running)
    }

    /// Leaves the processes running, writes `state.json` next to the
    /// kubeconfig for [`State::stop`], and returns that state.
    pub fn detach(mut self) -> Result<State, Error> {
        let dir = self
            .kubeconfig
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let pids = std::mem::take(&mut self.components)
            .into_iter()
            .map(|c| (c.name().to_string(), c.release()))
            .collect();
        let state = State {
            server: self.server.clone(),
            kubeconfig: self.kubeconfig.clone(),
            pids,
            node: self.node.take(),
        };
        let path = State::path(&dir);
        let text = serde_json::to_string_pretty(&state).map_err(|e| Error::State {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        std::fs::write(&path, text).map_err(|source| Error::io("write", &path, source))?;
        Ok(state)
    }

    /// Stops one component (`etcd`, `kube-apiserver`, `kube-controller-manager`),
    /// for fault tests. Its data (etcd's included) is kept.
    pub fn stop_component(&mut self, name: &str) {
        if let Some(c) = self.components.iter_mut().find(|c| c.name() == name) {
            c.stop(Duration::from_secs(10));
        }
    }

    /// Starts a stopped component again with the same flags and ports, and
    /// waits until the API server is ready again.
    pub async fn start_component(&mut self, name: &str) -> Result<(), Error> {
        if let Some(c) = self.components.iter_mut().find(|c| c.name() == name) {
            c.restart()?;
        }
        let client = self.client().await?;
        let deadline = Instant::now() + Duration::from_secs(120);
        self.wait_for("kube-apiserver", deadline, || readyz(&client))
            .await
    }

    /// Starts a second kube-apiserver on the same etcd (same flags, another
    /// port), for tests that need the cluster to change while the first one
    /// is down. Returns a kubeconfig for it; it stops with this control plane.
    pub async fn start_second_apiserver(&mut self) -> Result<String, Error> {
        let first = self
            .components
            .iter()
            .find(|c| c.name() == "kube-apiserver")
            .ok_or_else(|| Error::Kubeconfig("no kube-apiserver to copy".into()))?;
        let port = ports::free_port()?;
        let args: Vec<String> = first
            .args()
            .iter()
            .map(|a| {
                if a.starts_with("--secure-port=") {
                    format!("--secure-port={port}")
                } else {
                    a.clone()
                }
            })
            .collect();
        let bin = first.bin().to_path_buf();
        let dir = self
            .kubeconfig
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let log = dir.join("kube-apiserver-2.log");
        self.components.push(Component::spawn(
            "kube-apiserver-2",
            &bin,
            &args,
            log,
            Tether::Lifeline,
        )?);
        let yaml = self
            .kubeconfig_yaml
            .replace(&self.server, &format!("https://127.0.0.1:{port}"));
        let client = client_from_kubeconfig(&yaml).await?;
        let deadline = Instant::now() + Duration::from_secs(120);
        self.wait_for("kube-apiserver-2", deadline, || readyz(&client))
            .await?;
        Ok(yaml)
    }

    /// Stops every component, newest first.
    pub fn stop(&mut self) {
        while let Some(mut c) = self.components.pop() {
            c.stop(grace(c.name()));
        }
    }

    fn spawn(
        &mut self,
        name: &'static str,
        bin: &Path,
        args: &[String],
        dir: &Path,
        tether: Tether,
    ) -> Result<(), Error> {
        let log = dir.join(format!("{name}.log"));
        self.components
            .push(Component::spawn(name, bin, args, log, tether)?);
        Ok(())
    }

    /// Polls `check` until it returns `Ok`, failing early if a process died.
    async fn wait_for<F, Fut>(
        &mut self,
        component: &'static str,
        deadline: Instant,
        mut check: F,
    ) -> Result<(), Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        let started = Instant::now();
        loop {
            self.ensure_running()?;
            let last = match check().await {
                Ok(()) => return Ok(()),
                Err(last) => last,
            };
            if Instant::now() >= deadline {
                return Err(Error::NotReady {
                    component,
                    waited: started.elapsed(),
                    last,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How long a component may take to exit on SIGTERM: the node's guard runs
/// `teardown.sh` then (containers, mounts, iptables, cgroups).
fn grace(component: &str) -> Duration {
    if component == node::GUARD {
        Duration::from_secs(120)
    } else {
        Duration::from_secs(10)
    }
}

/// Builds a client from kubeconfig YAML.
pub async fn client_from_kubeconfig(yaml: &str) -> Result<Client, Error> {
    let kc = Kubeconfig::from_yaml(yaml).map_err(|e| Error::Kubeconfig(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    Client::try_from(config).map_err(|e| Error::Kubeconfig(e.to_string()))
}

/// etcd's own health endpoint, over plain HTTP on loopback.
async fn etcd_healthy(port: u16) -> Result<(), String> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .map_err(|e| e.to_string())?;
    if response.contains("\"health\":\"true\"") {
        Ok(())
    } else {
        Err(response.lines().last().unwrap_or_default().to_string())
    }
}

async fn readyz(client: &Client) -> Result<(), String> {
    let req = http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match client.request_text(req).await {
        Ok(body) if body.trim() == "ok" => Ok(()),
        Ok(body) => Err(body),
        Err(e) => Err(e.to_string()),
    }
}

async fn default_namespace(client: &Client) -> Result<(), String> {
    Api::<Namespace>::all(client.clone())
        .get("default")
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// What starting each component needs: where it runs, its binaries, how
/// it is tied to this process, and when waiting for it ends.
struct Launch<'a> {
    dir: &'a Path,
    bins: &'a Binaries,
    tether: Tether,
    deadline: Instant,
}

/// The loopback ports a control plane listens on.
struct Ports {
    /// etcd's clients.
    etcd: u16,
    /// etcd's peers.
    peer: u16,
    /// The API server.
    api: u16,
}

impl Ports {
    fn pick() -> Result<Self, Error> {
        Ok(Self {
            etcd: ports::free_port()?,
            peer: ports::free_port()?,
            api: ports::free_port()?,
        })
    }

    fn etcd_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer)
    }
}

/// The directory the control plane keeps its files in: `dir` (created), or
/// a new temporary one (after removing those of processes gone).
fn work_dir(dir: Option<&Path>) -> Result<(PathBuf, Option<tempfile::TempDir>), Error> {
    match dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|source| Error::io("create", dir, source))?;
            Ok((dir.to_path_buf(), None))
        }
        None => {
            sweep_stale_tempdirs();
            let tmp = tempfile::Builder::new()
                .prefix(&format!("{TEMP_PREFIX}{}-", std::process::id()))
                .tempdir()
                .map_err(|source| Error::io("create", &std::env::temp_dir(), source))?;
            Ok((tmp.path().to_path_buf(), Some(tmp)))
        }
    }
}

/// Removes temporary directories left by earlier processes that died without
/// cleaning up (their processes are gone too, thanks to the lifeline).
fn sweep_stale_tempdirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else {
            continue;
        };
        let owner = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if owner.is_some_and(|pid| !process::alive(pid)) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
