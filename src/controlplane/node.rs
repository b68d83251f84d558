//! The single local node of `tests/controlplane/NODE.md`: containerd (under
//! `node/guard.sh`), kubelet, kube-proxy and kube-scheduler next to the
//! control plane, so pods really run.
//!
//! One node per machine (the bridge `kiln0`, the kubelet's ports and the
//! sysctls it sets are global): the node directory is fixed, and the guard
//! holds a lock next to it for as long as the node lives. The guard tears
//! down a directory a killed run left, prepares the machine before the
//! apiserver starts (the apiserver binds the bridge address), and runs
//! `node/teardown.sh` when it is stopped or when its parent dies.
//!
//! This module only builds command lines and checks the node; the shell
//! scripts own the machine-level steps.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node as NodeObject;
use kube::{Api, Client};
use serde::{Deserialize, Serialize};

use super::Error;
use super::pki::{NODE_BRIDGE_IP, PkiFiles};

/// The node's name (`kubectl get nodes`).
pub const NODE_NAME: &str = "kiln-node";

/// The component name of the guard (`node/guard.sh`).
pub const GUARD: &str = "kiln-node-guard";

/// Where a node lives and where its scripts are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePaths {
    /// The node's directory (containerd root and state, kubelet root, CNI,
    /// images, pid files). Fixed per machine: `$TMPDIR/kiln-node`.
    pub dir: PathBuf,
    /// The lock file the guard holds while the node lives.
    pub lock: PathBuf,
    /// `tests/controlplane/node` (guard.sh, prepare.sh, teardown.sh, configs).
    pub scripts: PathBuf,
    /// How long to wait for a node that another process runs on this
    /// machine to go (0: fail at once, saying so).
    #[serde(default)]
    pub lock_wait: Duration,
}

impl NodePaths {
    /// The machine's node directory and lock, with the scripts of `source`
    /// (the directory of `build.sh`).
    pub fn new(source: &Path) -> Self {
        let tmp = std::env::temp_dir();
        Self {
            dir: tmp.join("kiln-node"),
            lock: tmp.join("kiln-node.lock"),
            scripts: source.join("node"),
            lock_wait: Duration::ZERO,
        }
    }

    /// The file the guard writes once containerd runs with the images.
    pub fn ready_marker(&self) -> PathBuf {
        self.dir.join("ready")
    }

    /// containerd's socket.
    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd/containerd.sock")
    }

    /// `bash guard.sh NODE_DIR CP_DIR BIN_DIR LOCK LOCK_WAIT_SECONDS`.
    pub fn guard_args(&self, cp_dir: &Path, bin_dir: &Path) -> Vec<String> {
        let mut args: Vec<String> = [
            self.scripts.join("guard.sh"),
            self.dir.clone(),
            cp_dir.to_path_buf(),
            bin_dir.to_path_buf(),
            self.lock.clone(),
        ]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
        args.push(self.lock_wait.as_secs().to_string());
        args
    }

    /// The kubelet's flags; its config is written by `prepare.sh`.
    pub fn kubelet_args(&self, kubeconfig: &Path) -> Vec<String> {
        vec![
            format!(
                "--config={}",
                self.dir.join("kubelet/config.yaml").display()
            ),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--root-dir={}", self.dir.join("kubelet/root").display()),
            format!("--cert-dir={}", self.dir.join("kubelet/pki").display()),
            format!("--hostname-override={NODE_NAME}"),
            format!("--node-ip={NODE_BRIDGE_IP}"),
        ]
    }

    /// kube-proxy's flags (iptables mode; config by `prepare.sh`).
    pub fn proxy_args(&self) -> Vec<String> {
        vec![format!(
            "--config={}",
            self.dir.join("proxy/config.yaml").display()
        )]
    }

    /// Where `teardown.sh` looks for the pid of a component it must stop.
    pub fn pid_file(&self, component: &str) -> Option<PathBuf> {
        let rel = match component {
            "kubelet" => "kubelet/kubelet.pid",
            "kube-proxy" => "proxy/pid",
            "kube-scheduler" => "sched/pid",
            _ => return None,
        };
        Some(self.dir.join(rel))
    }

    /// Records a component's pid for `teardown.sh`.
    pub fn write_pid(&self, component: &str, pid: u32) -> Result<(), Error> {
        let Some(path) = self.pid_file(component) else {
            return Ok(());
        };
        std::fs::write(&path, pid.to_string()).map_err(|source| Error::io("write", &path, source))
    }

    /// Runs `teardown.sh` on the node directory (for `kiln controlplane down`
    /// when the guard is gone). A missing directory is nothing to do.
    pub fn teardown(&self) -> Result<(), Error> {
        if !self.dir.exists() {
            return Ok(());
        }
        let script = self.scripts.join("teardown.sh");
        let status = Command::new("bash")
            .arg(&script)
            .arg(&self.dir)
            .status()
            .map_err(|source| Error::io("run", &script, source))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Node(format!(
                "{} failed ({status})",
                script.display()
            )))
        }
    }

    /// Imports an OCI image archive into the node's containerd as
    /// `BASE_NAME:<tag in the archive>` (pods use it with no registry).
    pub fn import_image(&self, archive: &Path, base_name: &str) -> Result<(), Error> {
        let output = Command::new("ctr")
            .arg("--address")
            .arg(self.containerd_socket())
            .args(["-n", "k8s.io", "images", "import", "--base-name", base_name])
            .arg(archive)
            .output()
            .map_err(|source| Error::io("run ctr for", archive, source))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(Error::Node(format!(
                "ctr images import {} failed ({}): {}",
                archive.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )))
        }
    }
}

/// Why there can be no node here, if there cannot: it needs root (containerd,
/// CNI, cgroups, iptables). `None` when a node may be started.
pub fn unsupported() -> Option<String> {
    if nix::unistd::geteuid().is_root() {
        None
    } else {
        Some("the local node needs root (containerd, CNI, cgroups, iptables)".to_string())
    }
}

/// kube-apiserver flags that replace the loopback-only defaults when a node
/// runs: serve on the bridge address, which pods reach through the
/// `kubernetes` Service, and advertise it there.
pub fn apiserver_overrides() -> Vec<String> {
    vec![
        format!("--bind-address={NODE_BRIDGE_IP}"),
        format!("--advertise-address={NODE_BRIDGE_IP}"),
    ]
}

/// The controllers a node needs besides the garbage collector, namespace and
/// serviceaccount ones: Deployments, ReplicaSets, endpoints, the
/// `kube-root-ca.crt` ConfigMap that projected token volumes need, and the
/// node lifecycle controller (it removes the `not-ready` taint).
pub const NODE_CONTROLLERS: &str = "garbagecollector,namespace,serviceaccount,nodelifecycle,\
deployment,replicaset,statefulset,daemonset,job,cronjob,endpoint,endpointslice,\
endpointslicemirroring,root-ca-cert-publisher,podgc,ttl,ttl-after-finished,\
disruption,resourcequota,persistentvolume-binder,persistentvolume-expander,\
pvc-protection,pv-protection,attachdetach";

/// kube-controller-manager flags for a node cluster.
pub fn controller_manager_args(pki: &PkiFiles, node: &NodePaths) -> Vec<String> {
    vec![
        format!("--controllers={NODE_CONTROLLERS}"),
        format!("--root-ca-file={}", pki.ca_cert.display()),
        format!(
            "--service-account-private-key-file={}",
            pki.sa_private_key.display()
        ),
        // Otherwise the flex-volume probe creates /usr/libexec/kubernetes/...
        format!(
            "--flex-volume-plugin-dir={}",
            node.dir.join("kcm-volume-plugins").display()
        ),
    ]
}

/// kube-scheduler's flags.
pub fn scheduler_args(kubeconfig: &Path) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".to_string(),
        "--secure-port=0".to_string(),
    ]
}

/// `Ok` once the node is `Ready` and the `not-ready` taint is gone (pods
/// can be scheduled on it).
pub async fn node_ready(client: &Client) -> Result<(), String> {
    let node = Api::<NodeObject>::all(client.clone())
        .get(NODE_NAME)
        .await
        .map_err(|e| e.to_string())?;
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    if !ready {
        return Err(format!("node {NODE_NAME} is not Ready yet"));
    }
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/not-ready"));
    if tainted {
        return Err(format!("node {NODE_NAME} still has the not-ready taint"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_lives_at_a_fixed_place_with_its_lock_beside_it() {
        let p = NodePaths::new(Path::new("/src/tests/controlplane"));
        assert!(p.dir.ends_with("kiln-node"));
        assert_eq!(p.lock, p.dir.with_file_name("kiln-node.lock"));
        assert_eq!(p.scripts, Path::new("/src/tests/controlplane/node"));
        let args = p.guard_args(Path::new("/cp"), Path::new("/bins"));
        assert!(args[0].ends_with("node/guard.sh"));
        assert_eq!(args[2..4], ["/cp", "/bins"]);
        assert_eq!(args[5], "0");
    }

    #[test]
    fn teardown_finds_the_pids_of_the_node_agents() {
        let p = NodePaths::new(Path::new("/s"));
        assert_eq!(
            p.pid_file("kubelet"),
            Some(p.dir.join("kubelet/kubelet.pid"))
        );
        assert_eq!(p.pid_file("kube-proxy"), Some(p.dir.join("proxy/pid")));
        assert_eq!(p.pid_file("kube-scheduler"), Some(p.dir.join("sched/pid")));
        assert_eq!(p.pid_file("etcd"), None);
    }

    #[test]
    fn the_kubelet_is_reached_on_the_bridge_and_named_kiln_node() {
        let p = NodePaths::new(Path::new("/s"));
        let args = p.kubelet_args(Path::new("/cp/kubeconfig"));
        assert!(args.contains(&"--node-ip=10.244.0.1".to_string()));
        assert!(args.contains(&"--hostname-override=kiln-node".to_string()));
        assert!(args.contains(&"--kubeconfig=/cp/kubeconfig".to_string()));
    }

    #[test]
    fn a_node_cluster_runs_the_controllers_pods_need() {
        for c in [
            "nodelifecycle",
            "deployment",
            "replicaset",
            "endpointslice",
            "root-ca-cert-publisher",
            "garbagecollector",
        ] {
            assert!(NODE_CONTROLLERS.split(',').any(|x| x == c), "{c}");
        }
        assert_eq!(
            apiserver_overrides(),
            [
                "--bind-address=10.244.0.1",
                "--advertise-address=10.244.0.1"
            ]
        );
    }
}
