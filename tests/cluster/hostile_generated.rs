//! Predictable "generated" secrets. Someone with `view`
//! on a Database could recompute its password from `uid` and
//! `creationTimestamp`; someone with `view` on a Deployment could test
//! guessed passwords against the plain sha256 of the Secret's data in its
//! pod annotation. Now the password is drawn at random once and kept, and
//! the annotation is keyed with a key only Secret readers can see.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kiln::rules::Rule;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::counts;
use crate::support::scene::{CONVERGE, Scene, condition};
use crate::support::{self, eventually};

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Stops the scene's engine and starts a new one with `rules`; waits until
/// it reconciled `n` primaries and its writes settled; returns the scene and the
/// writes the new engine made.
async fn restarted(scene: Scene, rules: &[Arc<Rule>], n: u64) -> (Scene, u64) {
    scene.engine().shutdown().await;
    let scene = scene.running(rules).await;
    eventually("the new engine's reconciles", CONVERGE, || async {
        (counts::reconciles(scene.engine()) >= n).then_some(())
    })
    .await;
    support::settled("the new engine's writes", || scene.writes()).await;
    let writes = scene.writes();
    (scene, writes)
}

/// Asserts that the Secret `before` still holds its data, unwritten.
async fn unwritten(scene: &Scene, before: &Value) {
    let name = before["metadata"]["name"].as_str().unwrap();
    let now = scene.get("v1", "Secret", name).await.unwrap();
    assert_eq!(now["data"], before["data"], "{name} changed");
    assert_eq!(
        now["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "{name} was written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_cannot_recompute_the_generated_password() {
    let scene = Scene::new("gen-db").await;
    support::install_crds(&scene.client, "examples/database").await;
    let mut db = support::example("examples/database/database.yaml");
    let meta = db["metadata"].as_object_mut().unwrap();
    meta.remove("uid");
    meta.remove("creationTimestamp");
    let db = scene.apply(db).await;
    let rule = support::shipped_rule("database", |t| t);
    let scene = scene.running(std::slice::from_ref(&rule)).await;

    let secret = scene
        .until(
            "the credentials Secret",
            ("v1", "Secret", "orders-credentials"),
            |s| s["data"]["password"].is_string(),
        )
        .await;
    let stored = secret["data"]["password"].as_str().unwrap().to_string();
    let password = String::from_utf8(STANDARD.decode(&stored).unwrap()).unwrap();

    // What anyone who may `get` the Database could compute before.
    let meta = &db["metadata"];
    let identity = format!(
        "{}{}",
        meta["uid"].as_str().unwrap(),
        meta["creationTimestamp"].as_str().unwrap()
    );
    let recomputed = sha256_hex(identity.as_bytes());
    assert_ne!(password, recomputed, "the password is the old formula");
    assert_ne!(stored, STANDARD.encode(&recomputed));
    assert!(
        password.len() == 32 && password.bytes().all(|b| b.is_ascii_alphanumeric()),
        "32 random letters and digits, got {} characters",
        password.len()
    );
    // And nothing a viewer reads holds it: the Database, the StatefulSet.
    let db = scene
        .until(
            "the Database reconciled",
            ("demo.kiln.dev/v1", "Database", "orders"),
            |d| condition(d, "Reconciled")["status"] == "True",
        )
        .await;
    let sts = scene.get("apps/v1", "StatefulSet", "orders").await.unwrap();
    for viewable in [&db, &sts] {
        let text = viewable.to_string();
        assert!(!text.contains(&password) && !text.contains(&stored));
    }

    // Kept: a forced resync writes nothing and draws nothing.
    assert_eq!(scene.writes_during_resync("database", 1).await, 0);
    unwritten(&scene, &secret).await;

    // Kept across a restart of kiln: the new engine reads it back.
    let (scene, writes) = restarted(scene, &[rule], 1).await;
    assert_eq!(writes, 0, "the restarted engine wrote");
    unwritten(&scene, &secret).await;
    scene.end().await;
}

fn credentials_hash(deployment: &Value) -> String {
    deployment["spec"]["template"]["metadata"]["annotations"]["kiln.dev/credentials-hash"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_cannot_test_password_guesses_against_the_restart_annotation() {
    let scene = Scene::new("gen-web").await;
    support::install_crds(&scene.client, "examples/webapp").await;
    let secret = scene
        .apply(support::example("examples/webapp/secret.yaml"))
        .await;
    // Two WebApps on the same Secret.
    let shop = support::example("examples/webapp/webapp.yaml");
    let mut other = shop.clone();
    other["metadata"]["name"] = json!("other");
    scene.apply(shop).await;
    scene.apply(other).await;
    let rule = support::shipped_rule("webapp", |t| t);
    let scene = scene.running(std::slice::from_ref(&rule)).await;

    let hashed = |d: &Value| credentials_hash(d).len() == 64;
    let shop = scene
        .until(
            "shop's Deployment",
            ("apps/v1", "Deployment", "shop"),
            hashed,
        )
        .await;
    let other = scene
        .until(
            "other's Deployment",
            ("apps/v1", "Deployment", "other"),
            hashed,
        )
        .await;
    // What a viewer of the Deployment could test a guess against before:
    // the plain sha256 of the Secret's data ({"password": base64(guess)}).
    let guess = json!({"password": STANDARD.encode("hunter2")});
    assert_eq!(guess, secret["data"]);
    let plain = sha256_hex(guess.to_string().as_bytes());
    assert_ne!(
        credentials_hash(&shop),
        plain,
        "the unkeyed hash of the data"
    );
    // Keyed per WebApp: the same data gives another hash, so it is no
    // function of the data alone.
    assert_ne!(credentials_hash(&shop), credentials_hash(&other));

    // Still restart-on-change: new data, new hash.
    scene
        .apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shop-credentials"}, "data": {"password": STANDARD.encode("correct horse")}}))
        .await;
    let before = credentials_hash(&shop);
    let changed = scene
        .until(
            "the hash to follow the Secret",
            ("apps/v1", "Deployment", "shop"),
            |d| hashed(d) && credentials_hash(d) != before,
        )
        .await;
    let key = scene.get("v1", "Secret", "shop-hash-key").await.unwrap();

    // The key and the hash are kept across a resync and a restart.
    scene
        .until(
            "shop reconciled",
            ("demo.kiln.dev/v1", "WebApp", "shop"),
            |w| condition(w, "Reconciled")["status"] == "True",
        )
        .await;
    assert_eq!(scene.writes_during_resync("webapp", 2).await, 0);
    let (scene, writes) = restarted(scene, &[rule], 2).await;
    assert_eq!(writes, 0, "the restarted engine wrote");
    let now = scene.get("apps/v1", "Deployment", "shop").await.unwrap();
    assert_eq!(credentials_hash(&now), credentials_hash(&changed));
    unwritten(&scene, &key).await;
    scene.end().await;
}

/// A child that adopts an existing Secret and would draw its password.
const ADOPTER: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: adopter}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: creds
      adopt: true
      template:
        apiVersion: v1
        kind: Secret
        metadata: {name: "{{ self.metadata.name }}-creds"}
        data:
          password: >-
            {{ children.creds.data.password if children.creds.data.password is defined
               else random_secret(32) | b64encode }}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_draw_never_overwrites_an_existing_password() {
    let scene = Scene::new("gen-keep").await.with_widgets().await;
    // kiln's cache does not show this Secret as the Widget's child (it is
    // not kiln's yet), so the render draws a new password for it; the
    // API server, asked before the write, says it exists.
    let kept = scene
        .apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "w-creds"}, "data": {"password": STANDARD.encode("kept-password-0123")}}))
        .await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let scene = scene.running(&[support::rule_from_yaml(ADOPTER)]).await;
    let message = scene.refused("w", "ApplyFailed").await;
    assert!(message.contains("nothing is written"), "{message}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    unwritten(&scene, &kept).await;
    scene.end().await;
}
