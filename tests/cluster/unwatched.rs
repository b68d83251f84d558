//! An unwatched namespace is taken over: kiln run with `--namespace`,
//! and a rule whose `outside` child goes to another namespace. kiln sees
//! nothing there, so it could not tell someone else's object holds the
//! child's name; it would overwrite it and never delete what it made. The
//! rule is refused, with a reason, and writes nothing.

use std::time::Duration;

use kiln::engine::{Engine, Options, RuleState};
use serde_json::json;

use crate::support::scene::{CONVERGE, Scene};
use crate::support::{self, eventually, rule_from_yaml};

/// `{ns}`: where the `outside` child goes (a template or a literal).
const SPACE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: unwatched}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: settings
      outside: true
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: settings
          namespace: "{ns}"
        data: {team: "{{ self.metadata.name }}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwatched_namespace_is_not_taken_over() {
    let scene = Scene::new("unwatched").await.with_widgets().await;
    let space = format!("{}-space", scene.ns());
    support::apply(
        &scene.client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": space}}),
        None,
    )
    .await;
    // Someone else's ConfigMap where the child would go.
    support::apply(
        &scene.client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings"}, "data": {"team": "theirs"}}),
        Some(&space),
    )
    .await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {}}))
        .await;
    // kiln watches the Widget's namespace only.
    let (client, writes) = support::counting_client().await;
    let options = Options {
        namespaces: vec![scene.ns().to_string()],
        kind_retry: Duration::from_millis(200),
        ..Options::default()
    };
    let engine = Engine::new(client, options);
    // Its namespace literal: the rule is refused, and writes nothing.
    engine.start(rule_from_yaml(&SPACE.replace("{ns}", &space)));
    let why = eventually("the rule refused", CONVERGE, || async {
        match engine.state("unwatched") {
            Some(RuleState::Refused(why)) => Some(why),
            _ => None,
        }
    })
    .await;
    assert!(
        why.contains("child `settings`") && why.contains(&format!("watches only {}", scene.ns())),
        "{why}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(writes.get(), 0, "a refused rule writes nothing");
    engine.shutdown().await;

    // Its namespace templated: refused for the primary it renders it for.
    let templated = SPACE.replace("{ns}", "{{ self.metadata.namespace }}-space");
    let scene = scene.running(&[rule_from_yaml(&templated)]).await;
    let message = scene.refused("w", "NamespaceNotAllowed").await;
    assert!(
        message.contains(&format!("namespace `{space}`")),
        "{message}"
    );
    let theirs = support::get(&scene.client, "v1", "ConfigMap", &space, "settings")
        .await
        .unwrap();
    assert_eq!(theirs["data"]["team"], "theirs", "{theirs}");
    assert!(theirs["metadata"]["labels"].is_null(), "{theirs}");
    support::delete(&scene.client, ("v1", "Namespace"), None, &space).await;
    scene.end().await;
}
