//! kiln installed with its Helm chart on the local node's real pods, as the
//! book's install page says: `kiln package` of a rule directory, `helm
//! install`; a changed rule shipped with `helm upgrade` reloads in the
//! running pod (same pod, no restart); `helm uninstall` leaves nothing of
//! the chart behind.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kiln::controlplane::ControlPlane;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::support::{eventually, repo_root, run_ok as run};

const RELEASE: &str = "kiln-helm";
const NS: &str = "kiln-helm";
const TEAM: &str = "kiln-helm-team";
/// `helm install --wait`: the image is local, the machine busy.
const INSTALL: &str = "300s";
const CONVERGE: Duration = crate::support::PATIENCE;
/// The kubelet refreshes ConfigMap volumes every `syncFrequency` (10 s on the
/// node), kiln re-reads its rules on file events or every 10 s.
const VOLUME_UPDATE: Duration = Duration::from_secs(150);

/// The example repository's rule, as written (`v1`) or with one more key
/// in its ConfigMap (`v2`).
fn rules_dir(work: &Path, version: &str) -> PathBuf {
    let rule =
        std::fs::read_to_string(repo_root().join("examples/my-platform/rules/team-config.yaml"))
            .unwrap();
    let rule = match version {
        "v1" => rule,
        _ => rule.replace(
            "          owner: \"{{ self.metadata.labels.owner | default('unknown') }}\"\n",
            "          owner: \"{{ self.metadata.labels.owner | default('unknown') }}\"\n          tier: gold\n",
        ),
    };
    assert!(version == "v1" || rule.contains("tier: gold"), "{rule}");
    let dir = work.join(version);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("team-config.yaml"), rule).unwrap();
    dir
}

struct Helm {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    fn new(cp: &ControlPlane) -> Self {
        let out = run(Command::new("bash").arg(repo_root().join("tests/tools/helm.sh")));
        Self {
            bin: PathBuf::from(out.lines().last().unwrap().trim()),
            kubeconfig: cp.kubeconfig_path().to_path_buf(),
            home: tempfile::tempdir().unwrap(),
        }
    }

    fn run(&self, args: &[&str]) -> String {
        let home = self.home.path();
        run(Command::new(&self.bin)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .args(args))
    }

    /// `helm upgrade --install` with the rules of `dir`, packaged by `kiln package`.
    fn install(&self, dir: &Path, work: &Path) {
        let values = work.join(format!(
            "{}.values.yaml",
            dir.file_name().unwrap().to_string_lossy()
        ));
        run(Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["package", "--format", "helm-values", "--rules"])
            .arg(dir)
            .arg("--out")
            .arg(&values));
        let chart = repo_root().join("charts/kiln");
        self.run(&[
            "upgrade",
            "--install",
            RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            NS,
            "--create-namespace",
            "--values",
            values.to_str().unwrap(),
            "--set",
            "replicas=1",
            "--wait",
            "--timeout",
            INSTALL,
        ]);
    }
}

pub async fn scenario(cp: &ControlPlane, client: &Client) {
    let helm = Helm::new(cp);
    let work = tempfile::tempdir().unwrap();

    let t = Instant::now();
    helm.install(&rules_dir(work.path(), "v1"), work.path());
    eprintln!("node: helm install --wait took {:?}", t.elapsed());
    let pod = kiln_pod(client).await;

    // The packaged rule runs: a labelled namespace gets its ConfigMap.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let team: Namespace = serde_json::from_value(json!({
        "metadata": {"name": TEAM, "labels": {"team": "true", "owner": "alice"}}
    }))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &team)
        .await
        .unwrap();
    let settings = || async {
        Api::<ConfigMap>::namespaced(client.clone(), TEAM)
            .get("team-settings")
            .await
            .ok()?
            .data
    };
    let data = eventually(
        "team-settings made by the installed rule",
        CONVERGE,
        settings,
    )
    .await;
    assert_eq!(data["owner"], "alice");
    assert!(!data.contains_key("tier"), "{data:?}");

    // helm upgrade with a changed rule: the same pod reloads it.
    let t = Instant::now();
    helm.install(&rules_dir(work.path(), "v2"), work.path());
    let data = eventually(
        "team-settings with the upgraded rule's key",
        VOLUME_UPDATE,
        || async {
            settings()
                .await
                .filter(|d| d.get("tier").is_some_and(|t| t == "gold"))
        },
    )
    .await;
    assert_eq!(data["owner"], "alice");
    eprintln!(
        "node: helm upgrade's rule took effect {:?} after the upgrade began",
        t.elapsed()
    );
    let after = kiln_pod(client).await;
    assert_eq!(after.metadata.uid, pod.metadata.uid, "the pod was replaced");
    assert_eq!(restarts(&after), 0, "the pod restarted");

    // helm uninstall: nothing of the chart is left.
    let t = Instant::now();
    helm.run(&[
        "uninstall",
        RELEASE,
        "--namespace",
        NS,
        "--wait",
        "--timeout",
        INSTALL,
    ]);
    eventually(
        "kiln's pods gone after helm uninstall",
        CONVERGE,
        || async {
            let pods = Api::<Pod>::namespaced(client.clone(), NS)
                .list(&ListParams::default())
                .await
                .ok()?;
            pods.items.is_empty().then_some(())
        },
    )
    .await;
    eprintln!("node: helm uninstall took {:?}", t.elapsed());
    assert_eq!(left_behind(client).await, Vec::<String>::new());
    // The children stay: they are the rule's, not the chart's.
    assert!(settings().await.is_some());

    for ns in [TEAM, NS] {
        namespaces
            .delete(ns, &DeleteParams::default())
            .await
            .unwrap();
    }
}

/// The one kiln pod of the release.
async fn kiln_pod(client: &Client) -> Pod {
    let pods = Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}")))
        .await
        .unwrap();
    assert_eq!(
        pods.items.len(),
        1,
        "{:?}",
        pods.items
            .iter()
            .map(|p| &p.metadata.name)
            .collect::<Vec<_>>()
    );
    pods.items.into_iter().next().unwrap()
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0)
}

/// Every object of a kind the chart makes that is still there: in the
/// release's namespace (but the namespace's own ServiceAccount and CA
/// ConfigMap), and the cluster-scoped RBAC of the release.
async fn left_behind(client: &Client) -> Vec<String> {
    let mut left = Vec::new();
    macro_rules! namespaced {
        ($kind:ty, $skip:expr) => {
            for o in Api::<$kind>::namespaced(client.clone(), NS)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
            {
                let name = o.metadata.name.unwrap_or_default();
                if !$skip.contains(&name.as_str()) {
                    left.push(format!("{} {name}", stringify!($kind)));
                }
            }
        };
    }
    namespaced!(ServiceAccount, ["default"]);
    // kiln's own record of the rules it accepted is kiln's, not the
    // chart's: it stays, as kiln's Leases do (docs/src/operations.md).
    let accepted = format!("{RELEASE}-accepted-rules");
    namespaced!(ConfigMap, ["kube-root-ca.crt", accepted.as_str()]);
    namespaced!(Role, [""; 0]);
    namespaced!(RoleBinding, [""; 0]);
    namespaced!(Deployment, [""; 0]);
    namespaced!(Service, [""; 0]);
    namespaced!(k8s_openapi::api::policy::v1::PodDisruptionBudget, [""; 0]);
    let roles = Api::<ClusterRole>::all(client.clone());
    if roles.get_opt(RELEASE).await.unwrap().is_some() {
        left.push(format!("ClusterRole {RELEASE}"));
    }
    let bindings = Api::<ClusterRoleBinding>::all(client.clone());
    if bindings.get_opt(RELEASE).await.unwrap().is_some() {
        left.push(format!("ClusterRoleBinding {RELEASE}"));
    }
    left
}
