//! Proof that the control plane is real: the server reports the version it was
//! built from, server-side apply works on dynamic objects, the garbage
//! collector runs, RBAC is enforced, and the processes die with their parent.

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Api, Resource, discovery};
use serde_json::json;

use crate::support::{self, MANAGER, TestNamespace, eventually};

#[tokio::test]
async fn server_reports_the_kubernetes_version_it_was_built_from() {
    let client = support::admin_client().await;
    let pinned =
        std::fs::read_to_string(support::repo_root().join("tests/controlplane/versions.env"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("K8S_VERSION=").map(str::to_string))
            .expect("versions.env names K8S_VERSION");
    let info = client.apiserver_version().await.unwrap();
    if std::env::var_os("KILN_TEST_KUBECONFIG").is_none() {
        assert_eq!(info.git_version, pinned);
    }
    assert_eq!(info.major, "1");
}

#[tokio::test]
async fn server_side_apply_of_a_dynamic_object_resolved_through_discovery() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "ssa").await;
    support::install_crds(&client, "examples/webapp").await;

    let gvk = GroupVersionKind::gvk("demo.kiln.dev", "v1", "WebApp");
    let (ar, caps) = discovery::pinned_kind(&client, &gvk).await.unwrap();
    assert_eq!(ar.plural, "webapps");
    assert!(
        caps.subresources
            .iter()
            .any(|(sr, _)| sr.plural == "status")
    );
    let api: Api<DynamicObject> =
        Api::dynamic(client.clone(), &ar, &caps.scope).constrain(ns.name());

    let apply = |image: &str| {
        DynamicObject::new("shop", &ar)
            .within(ns.name())
            .data(json!({ "spec": { "image": image, "secretName": "shop-db" } }))
    };
    let pp = PatchParams::apply(MANAGER);
    api.patch("shop", &pp, &Patch::Apply(apply("nginx:1.27")))
        .await
        .unwrap();

    let live = api.get("shop").await.unwrap();
    assert_eq!(live.data["spec"]["image"], "nginx:1.27");
    assert_eq!(
        live.data["spec"]["replicas"], 1,
        "the CRD's structural default was applied"
    );
    let fields = live.meta().managed_fields.clone().unwrap_or_default();
    assert!(
        fields
            .iter()
            .any(|f| f.manager.as_deref() == Some(MANAGER)
                && f.operation.as_deref() == Some("Apply")),
        "{MANAGER} owns fields through Apply: {fields:?}"
    );
    let first_generation = live.metadata.generation;

    // Re-applying the same intent changes nothing; a new intent bumps generation.
    api.patch("shop", &pp, &Patch::Apply(apply("nginx:1.27")))
        .await
        .unwrap();
    assert_eq!(
        api.get("shop").await.unwrap().metadata.generation,
        first_generation
    );
    api.patch("shop", &pp, &Patch::Apply(apply("nginx:1.28")))
        .await
        .unwrap();
    let live = api.get("shop").await.unwrap();
    assert_eq!(live.data["spec"]["image"], "nginx:1.28");
    assert_eq!(live.metadata.generation, first_generation.map(|g| g + 1));

    // Another manager touching the same field conflicts unless it forces.
    let err = api
        .patch(
            "shop",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(apply("evil")),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn garbage_collector_deletes_children_of_a_deleted_owner() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    let owner: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "owner" } })).unwrap();
    let owner = cms.create(&PostParams::default(), &owner).await.unwrap();
    let owner_ref = owner.controller_owner_ref(&()).unwrap();
    let child: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "child", "ownerReferences": [owner_ref] },
        "data": { "k": "v" },
    }))
    .unwrap();
    cms.create(&PostParams::default(), &child).await.unwrap();

    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually(
        "the child to be garbage-collected",
        support::PATIENCE,
        || async {
            match cms.get_opt("child").await.unwrap() {
                None => Some(()),
                Some(_) => None,
            }
        },
    )
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn rbac_refuses_a_service_account_until_a_role_allows_it() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "rbac").await;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns.name());
    let sa: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": "reader" } })).unwrap();
    sas.create(&PostParams::default(), &sa).await.unwrap();
    let request: TokenRequest =
        serde_json::from_value(json!({ "spec": { "audiences": [], "expirationSeconds": 600 } }))
            .unwrap();
    let token = sas
        .create_token_request("reader", &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .expect("token request has a status")
        .token
        .expect("token request returned a token");

    let as_sa = support::token_client(&token).await;
    let sa_cms: Api<ConfigMap> = Api::namespaced(as_sa.clone(), ns.name());
    let err = sa_cms.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "expected forbidden: {err}"
    );

    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": "read-configmaps" },
        "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"] }],
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), ns.name())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "reader" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-configmaps" },
        "subjects": [{ "kind": "ServiceAccount", "name": "reader", "namespace": ns.name() }],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), ns.name())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    eventually(
        "the role binding to take effect",
        support::PATIENCE,
        || async { sa_cms.list(&ListParams::default()).await.ok() },
    )
    .await;
    // Only what the role grants: secrets stay forbidden.
    let err = Api::<Secret>::namespaced(as_sa, ns.name())
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "expected forbidden: {err}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn control_plane_processes_die_with_a_killed_parent() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let mut kiln = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["controlplane", "up", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(kiln.stdout.take().unwrap());
    let ready = tokio::task::spawn_blocking(move || {
        stdout
            .lines()
            .map_while(Result::ok)
            .any(|l| l.starts_with("control plane ready"))
    });
    assert!(
        ready.await.unwrap(),
        "kiln controlplane up never became ready"
    );

    let children = children_of(kiln.id());
    let names: Vec<&str> = children.iter().map(|(_, n)| n.as_str()).collect();
    for expected in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        assert!(
            names
                .iter()
                .any(|n| n.starts_with(&expected[..expected.len().min(15)])),
            "{names:?}"
        );
    }

    kiln.kill().unwrap(); // SIGKILL: no destructor runs in kiln
    kiln.wait().unwrap();
    eventually(
        "the control plane to follow its parent",
        support::PATIENCE,
        || async {
            children
                .iter()
                .all(|(pid, _)| !std::path::Path::new(&format!("/proc/{pid}")).exists())
                .then_some(())
        },
    )
    .await;
}

/// (pid, comm) of the direct children of `parent`, from /proc.
fn children_of(parent: u32) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // stat is "pid (comm) state ppid ..."; comm may contain spaces.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let ppid = stat[close + 2..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            found.push((pid, comm));
        }
    }
    found
}
