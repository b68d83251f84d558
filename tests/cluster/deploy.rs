//! `deploy/` against the real control plane: the kustomize output passes
//! server-side dry-run, and kiln converges the webapp example with nothing
//! but the ServiceAccount and roles it defines, which grant no Lease
//! outside kiln's namespace.

use std::time::Duration;

use kiln::controlplane::Binaries;
use kiln::engine::{Engine, Options, RuleState};
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::{self, TestNamespace, eventually};

const CONVERGE: Duration = support::PATIENCE;

/// `kubectl kustomize deploy/`, with the kubectl built beside the control plane.
pub(crate) fn kustomize() -> Vec<Value> {
    kustomize_dir(&support::repo_root().join("deploy"))
}

/// `kubectl kustomize` of `dir`.
pub(crate) fn kustomize_dir(dir: &std::path::Path) -> Vec<Value> {
    let bins = Binaries::locate(&Binaries::default_source()).unwrap();
    let out = std::process::Command::new(bins.path("kubectl"))
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    kiln::yaml::parse_documents(&text, kiln::yaml::Limits::default())
        .unwrap()
        .iter()
        .map(kiln::yaml::Node::to_json)
        .collect()
}

pub(crate) async fn apply(
    client: &kube::Client,
    obj: &Value,
    dry_run: bool,
) -> Result<(), kube::Error> {
    let ns = obj["metadata"]["namespace"].as_str();
    let api = support::dynamic_api(client, &obj["apiVersion"], &obj["kind"], ns).await;
    let name = obj["metadata"]["name"].as_str().unwrap();
    let mut pp = PatchParams::apply("kiln-test").force();
    pp.dry_run = dry_run;
    let typed: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    api.patch(name, &pp, &Patch::Apply(&typed)).await.map(drop)
}

pub(crate) fn of_kind<'a>(objects: &'a [Value], kinds: &[&str]) -> Vec<&'a Value> {
    objects
        .iter()
        .filter(|o| kinds.iter().any(|k| o["kind"] == *k))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_passes_server_side_dry_run() {
    let client = support::admin_client().await;
    support::install_crds(&client, "examples/webapp").await;
    let objects = kustomize();
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    for k in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "CustomResourceDefinition",
    ] {
        assert!(
            kinds.contains(&k),
            "kustomize output lacks a {k}: {kinds:?}"
        );
    }
    // Namespaced objects need their namespace to exist, even for a dry run.
    for ns in of_kind(&objects, &["Namespace"]) {
        apply(&client, ns, false).await.unwrap();
    }
    for obj in &objects {
        apply(&client, obj, true)
            .await
            .unwrap_or_else(|e| panic!("{} {} refused: {e}", obj["kind"], obj["metadata"]["name"]));
    }
    let deployment = of_kind(&objects, &["Deployment"])[0];
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "localhost/kiln:0.1.0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_role_is_enough_for_the_examples_and_nothing_else() {
    let admin = support::admin_client().await;
    let ns = TestNamespace::new(&admin, "least-priv").await;
    let n = ns.name();
    support::install_crds(&admin, "examples/webapp").await;
    support::install_crds(&admin, "examples/database").await;
    // kiln's identity and permissions, exactly as deploy/ defines them.
    let objects = kustomize();
    let as_kiln = as_deployed(&admin, &objects).await;

    let engine = Engine::new(
        as_kiln,
        Options {
            namespaces: vec![n.to_string()],
            kind_retry: Duration::from_millis(200),
            ..Options::default()
        },
    );
    engine.start(support::shipped_rule("webapp", |t| t));
    // A rule that needs a kind the role does not grant (PodDisruptionBudget).
    let pdb_rule = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: db-pdb}
spec:
  for: {apiVersion: demo.kiln.dev/v1, kind: Database}
  children:
    - id: pdb
      template:
        apiVersion: policy/v1
        kind: PodDisruptionBudget
        metadata: {name: "{{ self.metadata.name }}"}
        spec:
          maxUnavailable: 1
          selector: {matchLabels: {app.kubernetes.io/name: "{{ self.metadata.name }}"}}
"#;
    engine.start(support::rule_from_yaml(pdb_rule));

    apply_webapp_example(&admin, n).await;
    let condition = |o: &Value, t: &str| -> Value {
        o["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == t).cloned())
            .unwrap_or(Value::Null)
    };
    eventually(
        "the webapp converged under kiln's role",
        CONVERGE,
        || async {
            let cm = support::get(&admin, "v1", "ConfigMap", n, "shop-config").await?;
            let deploy = support::get(&admin, "apps/v1", "Deployment", n, "shop").await?;
            let svc = support::get(&admin, "v1", "Service", n, "shop").await?;
            let webapp = support::get(&admin, "demo.kiln.dev/v1", "WebApp", n, "shop").await?;
            (cm["data"]["LOG_LEVEL"] == "info"
                && deploy["spec"]["replicas"] == 2
                && svc["spec"]["ports"][0]["port"] == 80
                && condition(&webapp, "Reconciled")["status"] == "True")
                .then_some(())
        },
    )
    .await;

    let mut db = support::example("examples/database/database.yaml");
    let meta = db["metadata"].as_object_mut().unwrap();
    meta.remove("uid");
    meta.remove("creationTimestamp");
    support::apply(&admin, db, Some(n)).await;
    let refused = eventually(
        "a Forbidden condition on the Database",
        CONVERGE,
        || async {
            let db = support::get(&admin, "demo.kiln.dev/v1", "Database", n, "orders").await?;
            let c = condition(&db, "Reconciled");
            (c["reason"] == "Forbidden").then_some(c)
        },
    )
    .await;
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("PodDisruptionBudget"),
        "{refused}"
    );
    assert_eq!(
        engine.state("db-pdb"),
        Some(RuleState::Running),
        "the rule runs and reports; it did not crash"
    );
    assert_eq!(engine.state("webapp"), Some(RuleState::Running));
    engine.shutdown().await;
    ns.delete().await;
}

/// The webapp example (its Secret and WebApp) in namespace `n`, as admin.
async fn apply_webapp_example(admin: &kube::Client, n: &str) {
    for file in ["examples/webapp/secret.yaml", "examples/webapp/webapp.yaml"] {
        support::apply(admin, support::example(file), Some(n)).await;
    }
}

/// The Namespace, ServiceAccount, roles and bindings of `objects` (as
/// `deploy/` defines them) applied; a client as kiln's ServiceAccount.
async fn as_deployed(admin: &kube::Client, objects: &[Value]) -> kube::Client {
    for obj in of_kind(
        objects,
        &[
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ],
    ) {
        apply(admin, obj, false).await.unwrap();
    }
    let token = support::token_of(admin, "kiln-system", "kiln").await;
    support::token_client(&token).await
}

/// `kiln run` as kiln's ServiceAccount, with exactly the roles `deploy/`
/// (generated by `kiln rbac`) grants: it wins its Lease in kiln's
/// namespace and converges the webapp example; the same identity may not
/// create a Lease in `kube-system`, nor take over one there (the
/// controller-manager's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kiln_runs_with_the_generated_rbac_and_may_not_write_a_lease_in_kube_system() {
    use k8s_openapi::api::coordination::v1::Lease;
    let admin = support::admin_client().await;
    let ns = TestNamespace::new(&admin, "least-lease").await;
    let n = ns.name();
    support::install_crds(&admin, "examples/webapp").await;
    let as_kiln = as_deployed(&admin, &kustomize()).await;

    let token = support::token_of(&admin, "kiln-system", "kiln").await;
    let kubeconfig = support::token_kubeconfig(support::kubeconfig_yaml(), &token);
    let id = format!("least-lease-{}", std::process::id());
    let rule = std::fs::read_to_string(support::repo_root().join("rules/webapp.yaml")).unwrap();
    let kiln = support::KilnProcess::start_on(
        &kubeconfig,
        &rule,
        &[
            "--namespace",
            n,
            "--leader-elect",
            "--leader-elect-namespace",
            "kiln-system",
            "--leader-elect-id",
            &id,
        ],
    );
    apply_webapp_example(&admin, n).await;
    eventually(
        "the webapp converged as kiln's ServiceAccount",
        Duration::from_secs(120),
        || async {
            let deploy = support::get(&admin, "apps/v1", "Deployment", n, "shop").await?;
            (deploy["spec"]["replicas"] == 2).then_some(())
        },
    )
    .await;
    let leases: kube::Api<Lease> = kube::Api::namespaced(admin.clone(), "kiln-system");
    let held = leases.get(&id).await.unwrap();
    assert!(held.spec.and_then(|s| s.holder_identity).is_some());

    let forbidden = |result: Result<Lease, kube::Error>| match result {
        Err(kube::Error::Api(s)) => s.code == 403,
        _ => false,
    };
    let system: kube::Api<Lease> = kube::Api::namespaced(as_kiln.clone(), "kube-system");
    let lease: Lease = serde_json::from_value(
        json!({"metadata": {"name": id}, "spec": {"holderIdentity": "kiln"}}),
    )
    .unwrap();
    assert!(
        forbidden(system.create(&Default::default(), &lease).await),
        "kiln may create a Lease in kube-system"
    );
    let theirs: kube::Api<Lease> = kube::Api::namespaced(admin.clone(), "kube-system");
    for mut other in theirs.list(&Default::default()).await.unwrap() {
        let name = other.metadata.name.clone().unwrap();
        other
            .spec
            .get_or_insert_with(Default::default)
            .holder_identity = Some("kiln".into());
        assert!(
            forbidden(system.replace(&name, &Default::default(), &other).await),
            "kiln may take over kube-system's Lease {name}"
        );
    }
    drop(kiln);
    let _ = leases.delete(&id, &Default::default()).await;
    ns.delete().await;
}

/// `deploy/` with the `deploy/sharded` component, as a user's kustomization
/// (kustomize takes only relative paths to them).
fn kustomize_sharded() -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let up = "../".repeat(dir.path().components().count() - 1);
    let root = support::repo_root();
    let root = root.to_str().unwrap().trim_start_matches('/');
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{up}{root}/deploy]\ncomponents: [{up}{root}/deploy/sharded]\n"
        ),
    )
    .unwrap();
    kustomize_dir(dir.path())
}

/// The sharded component runs three replicas with `--shards`
/// instead of `--leader-elect`, and its RBAC is enough for a member to join
/// the group as the kiln ServiceAccount (create its Lease, list the group's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sharded_component_runs_three_members_the_role_lets_join() {
    let admin = support::admin_client().await;
    let objects = kustomize_sharded();
    for ns in of_kind(&objects, &["Namespace"]) {
        apply(&admin, ns, false).await.unwrap();
    }
    for obj in &objects {
        apply(&admin, obj, true)
            .await
            .unwrap_or_else(|e| panic!("{} {} refused: {e}", obj["kind"], obj["metadata"]["name"]));
    }
    let deployment = of_kind(&objects, &["Deployment"])[0];
    assert_eq!(deployment["spec"]["replicas"], 3);
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap();
    assert!(args.contains(&json!("--shards")));
    assert!(!args.contains(&json!("--leader-elect")));

    for obj in of_kind(
        &objects,
        &[
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ],
    ) {
        apply(&admin, obj, false).await.unwrap();
    }
    let token = support::token_of(&admin, "kiln-system", "kiln").await;
    let as_kiln = support::token_client(&token).await;
    let group = format!("deploy-test-{}", std::process::id());
    for _ in 0..2 {
        // The second join takes its own Lease back (get and update).
        let shard = kiln::shard::Shard::new(Duration::from_secs(10));
        let mut member = kiln::shard::member::Member::new(
            as_kiln.clone(),
            "kiln-system",
            &group,
            &group,
            kiln::lease::Timing::default(),
            shard.clone(),
        );
        member.join().await.unwrap();
        assert!(shard.lease_fresh());
        assert_eq!(shard.members(), 1);
    }
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(admin, "kiln-system");
    let _ = leases.delete(&group, &Default::default()).await;
}
