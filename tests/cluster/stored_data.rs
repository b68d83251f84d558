//! kiln never loses stored data through an edit of a rule-defined API: an
//! edit after which the API server would prune what objects hold (a map
//! made a fixed object, the storage moved to a version lacking a field, two
//! versions served without the conversion webhook) is refused, the CRD
//! stays as it was, and the stored objects keep every field through their
//! next write.

use std::time::Duration;

use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::api::{crd, fix_version, reloader, site, sites, source, version};
use crate::support::{self, KilnProcess, TestNamespace};

/// A rule defining `Site` in `group` with the `versions` (YAML, indented as
/// the list's items) and a ConfigMap child.
fn rule(group: &str, versions: &str) -> String {
    format!(
        r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: sites}}
spec:
  api:
    group: {group}
    kind: Site
    versions:
{versions}  children:
    - id: page
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: "{{{{ self.metadata.name }}}}-page"}}
        data: {{title: "{{{{ self.spec.title }}}}"}}
"#
    )
}

/// One version, `v1`, with the `spec` fields (SimpleSchema lines, indented).
fn v1(fields: &str) -> String {
    format!("      - name: v1\n        schema:\n          spec:\n{fields}")
}

/// Creates a `Site` at v1 with `spec`.
async fn create(client: &kube::Client, group: &str, ns: &str, spec: Value) {
    sites(client, group, ns)
        .create(
            &PostParams::default(),
            &fix_version(site("one", spec), group),
        )
        .await
        .unwrap();
}

/// The Site's spec after a write (a label patched): what the API server
/// stores from now on.
async fn spec_after_a_write(client: &kube::Client, group: &str, ns: &str) -> Value {
    let api = sites(client, group, ns);
    let patch = json!({"metadata": {"labels": {"written": "again"}}});
    let written = api
        .patch("one", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(written.metadata.labels.unwrap()["written"], "again");
    api.get("one").await.unwrap().data["spec"].clone()
}

/// The `versions` of the CRD named `name`.
async fn versions(client: &kube::Client, name: &str) -> Vec<Value> {
    crd(client, name).await.unwrap()["spec"]["versions"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn a_map_to_object_edit_is_refused_and_stored_keys_survive() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "stored-map").await;
    let group = format!("map{}.stored.kiln.dev", std::process::id());
    let map = rule(
        &group,
        &v1("            title: string\n            env: \"map[string]string\"\n"),
    );
    let (metrics, mut reloader) = reloader(&client, &map).await;
    let spec = json!({"title": "t", "env": {"A": "1", "B": "2"}});
    create(&client, &group, ns.name(), spec.clone()).await;

    // `env` made an object with one field: the API server would prune `B`.
    let fixed = rule(
        &group,
        &v1("            title: string\n            env:\n              A: string\n"),
    );
    reloader.consider(version(vec![source(&fixed)])).await;
    assert_eq!(metrics.reloads("error"), 1, "the edit was refused");
    let env = &versions(&client, &format!("sites.{group}")).await[0]["schema"]["openAPIV3Schema"]["properties"]
        ["spec"]["properties"]["env"];
    assert!(
        env.get("additionalProperties").is_some(),
        "the CRD still has the map: {env}"
    );
    assert_eq!(spec_after_a_write(&client, &group, ns.name()).await, spec);
    ns.delete().await;
}

/// `v1` (`title`, `color`) and `v2`, the storage version, with `title`
/// only; v1's conversion carries the title alone.
fn storage_moved_to_v2(group: &str) -> String {
    let versions = format!(
        "{}        conversion:\n          toStorage:\n            spec: {{title: \"{{{{ self.spec.title }}}}\"}}\n          fromStorage:\n            spec: {{title: \"{{{{ self.spec.title }}}}\"}}\n      - name: v2\n        storage: true\n        schema:\n          spec:\n            title: string | required=true\n",
        v1(
            "            title: string | required=true\n            color: string | required=true\n"
        ),
    );
    rule(group, &versions)
}

#[tokio::test]
async fn a_storage_move_dropping_a_field_is_refused() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "stored-move").await;
    let group = format!("move{}.stored.kiln.dev", std::process::id());
    let before = rule(
        &group,
        &v1(
            "            title: string | required=true\n            color: string | required=true\n",
        ),
    );
    let (metrics, mut reloader) = reloader(&client, &before).await;
    let spec = json!({"title": "t", "color": "blue"});
    create(&client, &group, ns.name(), spec.clone()).await;

    let moved = storage_moved_to_v2(&group);
    let Err(refusal) = kiln::reload::load(version(vec![source(&moved)]), false) else {
        panic!("a storage move that drops `color` was accepted");
    };
    let refusal = refusal.diagnostics();
    assert!(
        refusal.iter().any(|d| d.message.contains("spec.color")),
        "{refusal:?}"
    );
    reloader.consider(version(vec![source(&moved)])).await;
    assert_eq!(metrics.reloads("error"), 1, "the edit was refused");
    let now = versions(&client, &format!("sites.{group}")).await;
    assert_eq!(now.len(), 1, "the CRD still stores at v1 alone: {now:?}");
    assert_eq!(spec_after_a_write(&client, &group, ns.name()).await, spec);
    ns.delete().await;
}

/// `v1` and `v1alpha1` (`name` for v1's `title`), lossless both ways.
const TWO_VERSIONS: &str = r#"      - name: v1alpha1
        schema:
          spec:
            name: string | required=true
        conversion:
          toStorage:
            spec: {title: "{{ self.spec.name }}"}
          fromStorage:
            spec: {name: "{{ self.spec.title }}"}
      - name: v1
        storage: true
        schema:
          spec:
            title: string | required=true
"#;

#[tokio::test]
async fn a_two_version_api_without_the_webhook_is_refused_or_serves_storage_only() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "stored-nowebhook").await;

    // Hot reload: a second version added to a running API without the
    // webhook is refused; the CRD keeps one version.
    let group = format!("reload{}.stored.kiln.dev", std::process::id());
    let one = rule(&group, &v1("            title: string | required=true\n"));
    let (metrics, mut reloader) = reloader(&client, &one).await;
    create(&client, &group, ns.name(), json!({"title": "t"})).await;
    reloader
        .consider(version(vec![source(&rule(&group, TWO_VERSIONS))]))
        .await;
    assert_eq!(metrics.reloads("error"), 1, "the edit was refused");
    let crd_now = crd(&client, &format!("sites.{group}")).await.unwrap();
    assert_eq!(crd_now["spec"]["versions"].as_array().unwrap().len(), 1);

    // At start: `kiln run` without `--conversion-*` refuses the rule and
    // exits; no CRD is created.
    let group = format!("start{}.stored.kiln.dev", std::process::id());
    let mut kiln = KilnProcess::start(&rule(&group, TWO_VERSIONS), &["--namespace", ns.name()]);
    let status = kiln.exited(Duration::from_secs(120)).await;
    assert!(!status.success(), "kiln run refused the rule: {status:?}");
    assert!(
        crd(&client, &format!("sites.{group}")).await.is_none(),
        "no CRD served both versions without the webhook"
    );
    ns.delete().await;
}
