//! Every example rule renders children that a real API server accepts:
//! the primary (and its related objects) are created for real, rendered with
//! the same function the engine uses, and every child is applied with
//! server-side dry-run.

use std::collections::HashMap;

use kiln::render::{self, Inputs};
use kiln::rules::{self, Gvk, Rule};
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::support::{self, MANAGER, TestNamespace};

fn load_rule(name: &str) -> std::sync::Arc<Rule> {
    let set =
        rules::load(&[support::repo_root().join("rules")]).unwrap_or_else(|d| panic!("{}", d[0]));
    set.get(name)
        .cloned()
        .unwrap_or_else(|| panic!("no rule {name}"))
}

fn read_example(path: &str) -> Value {
    let text = std::fs::read_to_string(support::repo_root().join(path)).unwrap();
    let docs = kiln::yaml::parse_documents(&text, kiln::yaml::Limits::default()).unwrap();
    docs[0].to_json()
}

async fn resolve(client: &Client, gvk: &Gvk) -> (ApiResource, Scope) {
    let gvk = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
    let (ar, caps) = discovery::pinned_kind(client, &gvk).await.unwrap();
    (ar, caps.scope)
}

/// Creates `object` for real (in `ns` when given) and returns it as stored.
async fn create(client: &Client, mut object: Value, ns: Option<&str>) -> Value {
    if let Some(ns) = ns {
        object["metadata"]["namespace"] = json!(ns);
    }
    let types: kube::core::TypeMeta = serde_json::from_value(object.clone()).unwrap();
    let gvk = GroupVersionKind::try_from(&types).unwrap();
    let (ar, caps) = discovery::pinned_kind(client, &gvk).await.unwrap();
    let obj: DynamicObject = serde_json::from_value(object).unwrap();
    let name = obj.metadata.name.clone().unwrap();
    let api: Api<DynamicObject> = match ns {
        Some(ns) if caps.scope == Scope::Namespaced => {
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        _ => Api::all_with(client.clone(), &ar),
    };
    let live = api
        .patch(&name, &PatchParams::apply(MANAGER), &Patch::Apply(&obj))
        .await
        .unwrap();
    serde_json::to_value(live).unwrap()
}

/// Renders `rule` for `inputs` and dry-run applies every child; returns the
/// objects the server answered with.
async fn dry_run_children(client: &Client, rule: &Rule, inputs: &Inputs) -> Vec<Value> {
    let mut kinds = HashMap::new();
    for child in &rule.children {
        kinds.insert(child.gvk.clone(), resolve(client, &child.gvk).await);
    }
    let scope_of = |gvk: &Gvk| kinds.get(gvk).map(|(_, scope)| *scope == Scope::Namespaced);
    let rendered = render::render(rule, inputs, &scope_of).unwrap();
    assert!(!rendered.children.is_empty());
    let mut accepted = Vec::new();
    for child in &rendered.children {
        let (ar, scope) = &kinds[&child.gvk];
        let obj: DynamicObject = serde_json::from_value(child.object.clone()).unwrap();
        let name = obj.metadata.name.clone().unwrap();
        let api: Api<DynamicObject> = match (scope, obj.metadata.namespace.as_deref()) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, ar),
            _ => Api::all_with(client.clone(), ar),
        };
        let answer = api
            .patch(
                &name,
                &PatchParams::apply("kiln").dry_run(),
                &Patch::Apply(&obj),
            )
            .await
            .unwrap_or_else(|e| panic!("{} {name} refused by the API server: {e}", child.gvk));
        accepted.push(serde_json::to_value(answer).unwrap());
    }
    accepted
}

#[tokio::test]
async fn webapp_children_are_accepted_by_the_api_server() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "ex-webapp").await;
    support::install_crds(&client, "examples/webapp").await;
    let secret = create(
        &client,
        read_example("examples/webapp/secret.yaml"),
        Some(ns.name()),
    )
    .await;
    let primary = create(
        &client,
        read_example("examples/webapp/webapp.yaml"),
        Some(ns.name()),
    )
    .await;
    let mut inputs = Inputs {
        primary,
        ..Inputs::default()
    };
    inputs.related.insert("credentials".into(), secret);

    let accepted = dry_run_children(&client, &load_rule("webapp"), &inputs).await;
    let kinds: Vec<&str> = accepted
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["ConfigMap", "Secret", "Deployment", "Service"]);
    assert_eq!(
        accepted[2]["spec"]["replicas"], 2,
        "replicas stayed an integer"
    );
    assert_eq!(
        accepted[2]["metadata"]["ownerReferences"][0]["kind"],
        "WebApp"
    );
    ns.delete().await;
}

#[tokio::test]
async fn database_children_are_accepted_by_the_api_server() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "ex-db").await;
    support::install_crds(&client, "examples/database").await;
    let mut sample = read_example("examples/database/database.yaml");
    // The sample carries a fixed uid for the golden test; the server assigns its own.
    let meta = sample["metadata"].as_object_mut().unwrap();
    meta.remove("uid");
    meta.remove("creationTimestamp");
    let primary = create(&client, sample, Some(ns.name())).await;
    let accepted = dry_run_children(
        &client,
        &load_rule("database"),
        &Inputs {
            primary,
            ..Inputs::default()
        },
    )
    .await;
    let kinds: Vec<&str> = accepted
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Secret", "Service", "StatefulSet"]);
    assert_eq!(accepted[1]["spec"]["clusterIP"], "None");
    ns.delete().await;
}

#[tokio::test]
async fn schedule_children_are_accepted_by_the_api_server() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "ex-sched").await;
    support::install_crds(&client, "examples/schedule").await;
    let primary = create(
        &client,
        read_example("examples/schedule/schedule.yaml"),
        Some(ns.name()),
    )
    .await;
    let accepted = dry_run_children(
        &client,
        &load_rule("schedule"),
        &Inputs {
            primary,
            ..Inputs::default()
        },
    )
    .await;
    let names: Vec<&str> = accepted
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nightly-vacuum-db", "nightly-report"]);
    ns.delete().await;
}

#[tokio::test]
async fn tenant_children_of_a_built_in_namespace_are_accepted_by_the_api_server() {
    let client = support::admin_client().await;
    let mut sample = read_example("examples/tenant/namespace.yaml");
    let name = format!("kiln-tenant-{}", std::process::id());
    sample["metadata"]["name"] = json!(name);
    let primary = create(&client, sample, None).await;
    let accepted = dry_run_children(
        &client,
        &load_rule("tenant"),
        &Inputs {
            primary,
            ..Inputs::default()
        },
    )
    .await;
    let kinds: Vec<&str> = accepted
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["ResourceQuota", "LimitRange", "RoleBinding"]);
    assert_eq!(
        accepted[0]["spec"]["hard"]["pods"], "200",
        "size=large picked the large quota"
    );
    assert!(
        accepted
            .iter()
            .all(|o| o["metadata"]["namespace"] == json!(name))
    );
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .delete(&name, &Default::default())
        .await;
}

#[tokio::test]
async fn default_network_policy_of_a_namespace_is_accepted_by_the_api_server() {
    let client = support::admin_client().await;
    let mut sample = read_example("examples/default-network-policy/namespace.yaml");
    let name = format!("kiln-ddeny-ex-{}", std::process::id());
    sample["metadata"]["name"] = json!(name);
    let primary = create(&client, sample, None).await;
    let accepted = dry_run_children(
        &client,
        &load_rule("default-network-policy"),
        &Inputs {
            primary,
            ..Inputs::default()
        },
    )
    .await;
    assert_eq!(accepted.len(), 1);
    assert_eq!(accepted[0]["kind"], "NetworkPolicy");
    assert_eq!(accepted[0]["metadata"]["namespace"], json!(name));
    assert_eq!(
        accepted[0]["spec"]["policyTypes"],
        json!(["Ingress", "Egress"])
    );
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .delete(&name, &Default::default())
        .await;
}
