//! kiln installed as the README says, on real pods: the local control plane
//! with its single node (`tests/controlplane/NODE.md`), the image from
//! `deploy/image.sh` imported into the node's containerd, `kubectl apply -k
//! deploy/`; then with the Helm chart (`node/helm.rs`): install, upgrade
//! with a changed rule, uninstall. A test target of its own, so its node
//! runs alone (one per machine). Needs root; skipped with a message
//! otherwise.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    dead_code,
    reason = "test code fails loudly by design; shares the cluster tests' support"
)]

#[path = "cluster/support/mod.rs"]
mod support;

#[path = "node/helm.rs"]
mod helm;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ResourceQuota};
use kiln::controlplane::{Binaries, ControlPlane, NodePaths, Options};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde_json::json;

use support::{events_about, eventually, repo_root};

const NS: &str = "kiln-system";
/// Image pulls are local, but two pods start on a busy two-core machine.
const AVAILABLE: Duration = Duration::from_secs(240);
/// The kubelet refreshes ConfigMap volumes every `syncFrequency` (10 s on the
/// node), kiln re-reads its rules on file events or every 10 s.
const VOLUME_UPDATE: Duration = Duration::from_secs(150);
const CONVERGE: Duration = support::PATIENCE;

#[test]
fn kiln_installed_with_kubectl_apply_k_runs_on_real_pods() {
    if let Some(reason) = root_required() {
        eprintln!("SKIPPED kiln_installed_with_kubectl_apply_k_runs_on_real_pods: {reason}");
        return;
    }
    let machine_before = machine_state();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let source = Binaries::default_source();
        let bins = Binaries::locate_node(&source).expect("build.sh --node");
        let mut opts = Options::new(bins.clone());
        let mut node = NodePaths::new(&source);
        // Another test run on this machine may hold the node for a while.
        node.lock_wait = Duration::from_secs(900);
        opts.node = Some(node);
        let started = Instant::now();
        let cp = ControlPlane::start(opts)
            .await
            .expect("control plane with a node");
        eprintln!(
            "node: control plane and node Ready in {:?}",
            started.elapsed()
        );
        install(&cp, &bins);
        let client = cp.client().await.unwrap();
        scenario(&client).await;
        helm::scenario(&cp, &client).await;
        let stopped = Instant::now();
        drop(cp);
        eprintln!("node: stopped and torn down in {:?}", stopped.elapsed());
    });
    assert_eq!(
        machine_state(),
        machine_before,
        "the node left something on the machine"
    );
}

fn root_required() -> Option<&'static str> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_string));
    (uid.as_deref() != Some("0")).then_some(
        "the local node needs root (containerd, CNI, cgroups, iptables); run as root to test kiln on real pods",
    )
}

/// The image of the binary cargo built for this test run, stripped, imported
/// into the node; then `kubectl apply -k deploy/` as the README says.
fn install(cp: &ControlPlane, bins: &Binaries) {
    let work = tempfile::tempdir().unwrap();
    let bin = work.path().join("kiln");
    run(Command::new("strip")
        .arg("-o")
        .arg(&bin)
        .arg(env!("CARGO_BIN_EXE_kiln")));
    let out = run(Command::new("bash")
        .arg(repo_root().join("deploy/image.sh"))
        .arg(&bin)
        .arg(work.path().join("image")));
    let archive = PathBuf::from(out.lines().last().unwrap().trim());
    let node = cp.node().unwrap();
    node.import_image(&archive, "localhost/kiln").unwrap();
    run(Command::new(bins.path("kubectl"))
        .env("KUBECONFIG", cp.kubeconfig_path())
        .arg("apply")
        .arg("-k")
        .arg(repo_root().join("deploy")));
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

async fn scenario(client: &Client) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let available = || async {
        let d = deployments.get("kiln").await.ok()?;
        let status = d.status?;
        let cond = status
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Available")?;
        (cond.status == "True" && status.available_replicas == Some(2)).then_some(())
    };
    let t = Instant::now();
    eventually(
        "Deployment kiln Available with 2 replicas (probes passing)",
        AVAILABLE,
        available,
    )
    .await;
    eprintln!("node: Deployment Available {:?} after apply", t.elapsed());
    let pods = kiln_pods(client).await;
    assert_eq!(pods.len(), 2, "{pods:?}");

    // The rules came from the mounted ConfigMap: the tenant rule acts.
    tenant(client, "kiln-node-t1").await;
    assert_eq!(
        quota_pods(client, "kiln-node-t1", CONVERGE, "20").await,
        "20"
    );

    // A valid edit reaches the pods through the kubelet's volume update.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let original = cms.get("kiln-rules").await.unwrap();
    let rule = original.data.as_ref().unwrap()["tenant.yaml"].clone();
    assert!(rule.contains(r#""pods": "20""#), "{rule}");
    let edited = rule.replace(r#""pods": "20""#, r#""pods": "21""#);
    set_rule(&cms, &edited).await;
    let t = Instant::now();
    quota_pods(client, "kiln-node-t1", VOLUME_UPDATE, "21").await;
    eprintln!(
        "node: rule edit took effect {:?} after the ConfigMap write",
        t.elapsed()
    );

    // ... in the running pods: none was replaced or restarted.
    assert_eq!(kiln_pods(client).await, pods);
    assert_eq!(restarts(client).await, 0);

    // An invalid edit changes nothing, and is a Warning Event on the ConfigMap.
    let invalid = edited
        .replace(r#""pods": "21""#, r#""pods": "22""#)
        .replace("  for:", "  fro:");
    set_rule(&cms, &invalid).await;
    let t = Instant::now();
    let event = eventually(
        "a Warning Event InvalidRules on kiln-rules",
        VOLUME_UPDATE,
        || async {
            events_about(client, NS, "kiln-rules", "InvalidRules")
                .await
                .into_iter()
                .next()
        },
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    eprintln!(
        "node: invalid edit reported {:?} after the write: {:?}",
        t.elapsed(),
        event.note
    );
    tenant(client, "kiln-node-t2").await;
    assert_eq!(
        quota_pods(client, "kiln-node-t2", CONVERGE, "21").await,
        "21"
    );
    assert_eq!(
        quota_pods(client, "kiln-node-t1", CONVERGE, "21").await,
        "21"
    );
    eventually("Deployment still Available", CONVERGE, available).await;
    // Back to a valid set, so a replacement pod can start.
    set_rule(&cms, &edited).await;

    // Deleting the leader's pod: the kubelet's SIGTERM ends in a graceful
    // shutdown that releases the Lease (without it, no one could take over
    // for the lease duration, 15 s), and another replica takes over.
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let leader = eventually("a Lease holder", CONVERGE, || async {
        leases.get("kiln").await.ok()?.spec?.holder_identity
    })
    .await;
    // The identity is `POD_NAME-PID`.
    let leader_pod = pod_of(&pods, &leader);
    // Watching from before the delete, so the released version is seen.
    let (listed, watching) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(next_holder(leases.clone(), leader.clone(), listed));
    tokio::time::timeout(CONVERGE, watching)
        .await
        .expect("the Lease listed in time")
        .unwrap();
    let t = Instant::now();
    Api::<Pod>::namespaced(client.clone(), NS)
        .delete(&leader_pod, &DeleteParams::default())
        .await
        .unwrap();
    let (released, successor) = tokio::time::timeout(CONVERGE, watch)
        .await
        .expect("a new Lease holder in time")
        .unwrap();
    let took_over = t.elapsed();
    eprintln!("node: {successor} took over {took_over:?} after deleting {leader}");
    assert!(
        released,
        "the leader's Lease was never released (no graceful shutdown)"
    );
    // The standby or the ReplicaSet's replacement, whichever asked first
    // after the release: either way a live replica that is not the old one.
    let successor_pod = pod_of(&kiln_pods(client).await, &successor);
    assert_ne!(successor_pod, leader_pod);
    let role = if pods.contains(&successor_pod) {
        "the standby"
    } else {
        "the replacement pod"
    };
    eprintln!("node: the new leader is {role}");
    tenant(client, "kiln-node-t3").await;
    assert_eq!(
        quota_pods(client, "kiln-node-t3", CONVERGE, "21").await,
        "21"
    );
    eventually("Deployment Available again", AVAILABLE, available).await;
}

/// The pod (one of `pods`) a Lease identity `POD_NAME-PID` belongs to.
fn pod_of(pods: &[String], identity: &str) -> String {
    pods.iter()
        .find(|p| identity.starts_with(&format!("{p}-")))
        .unwrap_or_else(|| panic!("{identity} is not a replica of {pods:?}"))
        .clone()
}

/// kiln's pods, terminating ones included.
async fn kiln_pod_objects(client: &Client) -> Vec<Pod> {
    let lp = ListParams::default().labels("app.kubernetes.io/name=kiln");
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&lp)
        .await
        .unwrap()
        .items
}

/// Container restarts over kiln's pods.
async fn restarts(client: &Client) -> i32 {
    kiln_pod_objects(client)
        .await
        .iter()
        .filter_map(|p| p.status.as_ref()?.container_statuses.as_ref())
        .flatten()
        .map(|c| c.restart_count)
        .sum()
}

/// Names of kiln's pods that are not terminating.
async fn kiln_pods(client: &Client) -> Vec<String> {
    kiln_pod_objects(client)
        .await
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// Watches the Lease; returns whether a released version (no holder, as
/// kiln writes it on shutdown) went by, and the first holder that is not `old`;
/// `listed` is told once the watch follows the Lease.
async fn next_holder(
    leases: Api<Lease>,
    old: String,
    listed: tokio::sync::oneshot::Sender<()>,
) -> (bool, String) {
    let config = watcher::Config::default().fields("metadata.name=kiln");
    let mut events = watcher::watcher(leases, config).boxed();
    let mut released = false;
    let mut listed = Some(listed);
    while let Some(event) = events.next().await {
        if let Ok(Event::InitDone) = event {
            listed.take().map(|tx| tx.send(()));
        }
        let (Ok(Event::Apply(lease)) | Ok(Event::InitApply(lease))) = event else {
            continue;
        };
        match lease.spec.and_then(|s| s.holder_identity) {
            None => released = true,
            Some(holder) if holder != old => return (released, holder),
            Some(_) => {}
        }
    }
    panic!("the Lease watch ended")
}

async fn tenant(client: &Client, name: &str) {
    let ns = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kiln.dev/tenant": "yes", support::TEST_LABEL: "true"}},
    });
    Api::<Namespace>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply(support::MANAGER),
            &Patch::Apply(&ns),
        )
        .await
        .unwrap();
}

/// Waits until the tenant quota in `ns` says `pods: want`; returns it.
async fn quota_pods(client: &Client, ns: &str, limit: Duration, want: &str) -> String {
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), ns);
    eventually(
        &format!("ResourceQuota {ns}/tenant-quota with pods={want}"),
        limit,
        || async {
            let q = quotas.get("tenant-quota").await.ok()?;
            let pods = q.spec?.hard?.get("pods")?.0.clone();
            (pods == want).then_some(pods)
        },
    )
    .await
}

async fn set_rule(cms: &Api<ConfigMap>, tenant_yaml: &str) {
    let patch = json!({"data": {"tenant.yaml": tenant_yaml}});
    cms.patch("kiln-rules", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// What a node may leave on the machine: the bridge, kubepods cgroups, KUBE
/// iptables chains, the node directory, the sysctls the kubelet and
/// kube-proxy set.
fn machine_state() -> Vec<String> {
    let mut state = Vec::new();
    let link = Command::new("ip").args(["link", "show", "kiln0"]).output();
    state.push(format!(
        "bridge kiln0: {}",
        link.is_ok_and(|o| o.status.success())
    ));
    for dir in glob_dirs("/sys/fs/cgroup", "kubepods") {
        state.push(format!("cgroup {}", dir.display()));
    }
    for save in ["iptables-save", "ip6tables-save"] {
        let out = Command::new(save)
            .output()
            .map(|o| o.stdout)
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&out);
        state.extend(
            text.lines()
                .filter(|l| l.contains("KUBE-"))
                .map(|l| format!("{save}: {l}")),
        );
    }
    let node = NodePaths::new(&Binaries::default_source());
    state.push(format!("{}: {}", node.dir.display(), node.dir.exists()));
    for s in [
        "vm/overcommit_memory",
        "kernel/panic",
        "kernel/panic_on_oops",
        "net/ipv4/ip_forward",
        "net/ipv4/conf/all/route_localnet",
    ] {
        let v = std::fs::read_to_string(Path::new("/proc/sys").join(s)).unwrap_or_default();
        state.push(format!("{s}={}", v.trim()));
    }
    state
}

/// `root/*/name` and `root/name` that are directories.
fn glob_dirs(root: &str, name: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join(name))
        .chain([Path::new(root).join(name)])
        .filter(|p| p.is_dir())
        .collect();
    found.sort();
    found
}
