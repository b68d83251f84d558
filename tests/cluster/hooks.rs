//! Rules whose children come from a hook speaking Metacontroller's
//! CompositeController JSON (`spec.hooks`). The hook is the test's own
//! server on loopback (allowed by the engine's test-only setting), written
//! as a Metacontroller hook: it reads `parent` and `children["Pod.v1"]` and
//! answers `status`, `children` and, when finalizing, `finalized`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::hook_server::{HookServer, Reply};
use crate::support::scene::{Scene, condition};
use crate::support::{self, eventually, rule_from_yaml};

const HELLO: (&str, &str) = ("example.com/v1", "HelloWorld");

/// Metacontroller's hello-world sync hook, as a hook author writes it: a
/// Pod greeting `spec.who`, and how many Pods there are.
fn hello_world(request: &Value) -> Value {
    let parent = &request["parent"];
    let who = parent["spec"]["who"].as_str().unwrap_or("World");
    let pods = request["children"]["Pod.v1"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let succeeded = pods
        .values()
        .filter(|p| p["status"]["phase"] == "Succeeded")
        .count();
    json!({
        "status": {"replicas": pods.len(), "succeeded": succeeded},
        "children": [{
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": parent["metadata"]["name"]},
            "spec": {
                "restartPolicy": "OnFailure",
                "containers": [{"name": "hello", "image": "busybox",
                    "command": ["echo", format!("Hello, {who}!")]}],
            },
        }],
    })
}

/// The shipped example rule, pointed at `server`.
fn rule(server: &HookServer) -> Arc<kiln::rules::Rule> {
    let path = support::repo_root().join("examples/ported/hello-hook/rule.yaml");
    let text = std::fs::read_to_string(path)
        .unwrap()
        .replace("http://hello-world.hooks.svc/sync", &server.url("/sync"));
    rule_from_yaml(&text)
}

/// A namespace with the HelloWorld CRD and an engine running `rule`,
/// allowed to reach the test's hook on loopback.
async fn hook_scene(prefix: &str, rule: Arc<kiln::rules::Rule>) -> Scene {
    Scene::new(prefix)
        .await
        .with_crds("examples/ported/hello-hook")
        .await
        .allowing_loopback()
        .running(&[rule])
        .await
}

async fn hello(scene: &Scene, name: &str) {
    scene
        .apply(
            json!({"apiVersion": HELLO.0, "kind": HELLO.1, "metadata": {"name": name},
            "spec": {"who": "kiln"}}),
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metacontroller_hello_world_hook_runs_unchanged() {
    let server = HookServer::start(|_, request| Reply::json(&hello_world(request))).await;
    let scene = hook_scene("hook-hello", rule(&server)).await;
    hello(&scene, "greeter").await;

    let pod = scene
        .until("the hook's Pod", ("v1", "Pod", "greeter"), |_| true)
        .await;
    assert_eq!(
        pod["spec"]["containers"][0]["command"],
        json!(["echo", "Hello, kiln!"])
    );
    let owner = &pod["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "HelloWorld");
    assert_eq!(owner["controller"], true);
    // The hook is told about the Pod on the next call, and counts it.
    let hello = scene
        .until("status.replicas 1", (HELLO.0, HELLO.1, "greeter"), |h| {
            h["status"]["replicas"] == 1
        })
        .await;
    assert_eq!(hello["status"]["succeeded"], 0);
    assert_eq!(
        condition(&hello, "Ready")["status"],
        "False",
        "the Pod never runs here"
    );

    // What the hook was sent is Metacontroller's request.
    let sent = server.requests("/sync");
    let last = sent.last().unwrap();
    assert_eq!(last["parent"]["metadata"]["name"], "greeter");
    assert_eq!(last["finalizing"], false);
    assert_eq!(last["controller"]["kind"], "CompositeController");
    assert!(
        sent.iter()
            .any(|r| r["children"]["Pod.v1"]["greeter"]["metadata"]["uid"].is_string()),
        "the live Pod is sent whole, keyed by name under Pod.v1"
    );
    scene.end().await;
}

/// How the test's hook misbehaves, in turn.
const MODES: [(&str, &str); 6] = [
    ("500", "answered 500"),
    ("not json", "not a hook's JSON"),
    ("secret", "a kind spec.hooks.children does not list"),
    ("elsewhere", "its primary is in"),
    ("slow", "no answer within 1s"),
    ("huge", "larger than"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_hook_applies_nothing_and_says_why() {
    // 0: good; 1..=6: each way of failing; 7: good again, with a second Pod.
    let mode = Arc::new(AtomicUsize::new(0));
    let m = mode.clone();
    let server = HookServer::start(move |_, request| {
        let mut good = hello_world(request);
        let extra =
            |kind: &str, meta: Value| json!({"apiVersion": "v1", "kind": kind, "metadata": meta});
        let mut second = good["children"][0].clone();
        second["metadata"]["name"] = json!("second");
        let mut with = |child: Value| {
            good["children"].as_array_mut().unwrap().push(child);
            Reply::json(&good)
        };
        match m.load(Ordering::SeqCst) {
            1 => Reply {
                status: 500,
                body: b"{}".to_vec(),
                delay: Duration::ZERO,
            },
            2 => Reply {
                status: 200,
                body: b"<html>".to_vec(),
                delay: Duration::ZERO,
            },
            3 => with(extra("Secret", json!({"name": "stolen"}))),
            4 => with(extra(
                "Pod",
                json!({"name": "intruder", "namespace": "default"}),
            )),
            5 => Reply {
                delay: Duration::from_secs(3),
                ..Reply::json(&good)
            },
            6 => Reply {
                status: 200,
                body: vec![b' '; 1024 * 1024],
                delay: Duration::ZERO,
            },
            7 => with(second),
            _ => Reply::json(&good),
        }
    })
    .await;
    let path = support::repo_root().join("examples/ported/hello-hook/rule.yaml");
    // The slow mode's 3 s is over this rule's 1 s timeout; failures are
    // retried within 2 s.
    let text = std::fs::read_to_string(path)
        .unwrap()
        .replace("http://hello-world.hooks.svc/sync", &server.url("/sync"))
        .replace("timeout: 10s", "timeout: 1s");
    let text = rule_from_yaml(&format!(
        "{text}  requeue:\n    onError: {{initial: 1s, max: 2s}}\n"
    ));
    let scene = hook_scene("hook-failed", text).await;
    hello(&scene, "greeter").await;
    let pod = scene
        .until("the hook's Pod", ("v1", "Pod", "greeter"), |_| true)
        .await;
    scene
        .until("status.replicas 1", (HELLO.0, HELLO.1, "greeter"), |h| {
            h["status"]["replicas"] == 1
        })
        .await;

    for (i, (what, why)) in MODES.iter().enumerate() {
        mode.store(i + 1, Ordering::SeqCst);
        let hello = scene
            .until(
                &format!("HookFailed for {what}"),
                (HELLO.0, HELLO.1, "greeter"),
                |h| {
                    let c = condition(h, "Reconciled");
                    c["reason"] == "HookFailed"
                        && c["message"].as_str().unwrap_or_default().contains(why)
                },
            )
            .await;
        // Nothing applied, nothing pruned, the hook's status kept.
        let now = scene.get("v1", "Pod", "greeter").await.unwrap();
        assert_eq!(now["metadata"]["uid"], pod["metadata"]["uid"], "{what}");
        assert_eq!(
            now["metadata"]["resourceVersion"], pod["metadata"]["resourceVersion"],
            "{what}"
        );
        assert_eq!(hello["status"]["replicas"], 1, "{what}: the status stays");
        assert!(
            scene.get("v1", "Secret", "stolen").await.is_none(),
            "{what}"
        );
        let elsewhere = support::get(&scene.client, "v1", "Pod", "default", "intruder").await;
        assert!(elsewhere.is_none(), "{what}");
    }
    let events = support::events_about(&scene.client, scene.ns(), "greeter", "HookFailed").await;
    assert!(!events.is_empty(), "a Warning Event says the hook failed");

    // The hook recovers: its answer is applied again.
    mode.store(7, Ordering::SeqCst);
    scene
        .until("the second Pod", ("v1", "Pod", "second"), |_| true)
        .await;
    scene
        .until("Reconciled again", (HELLO.0, HELLO.1, "greeter"), |h| {
            condition(h, "Reconciled")["status"] == "True"
        })
        .await;
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_finalize_hook_runs_before_the_finalizer_is_released() {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let server = HookServer::start(move |path, request| {
        if path == "/finalize" {
            // Metacontroller's pattern: no children wanted any more; done
            // once none is left (and the test lets it be done).
            let pods = request["children"]["Pod.v1"]
                .as_object()
                .map_or(0, |p| p.len());
            let finalized = pods == 0 && d.load(Ordering::SeqCst);
            return Reply::json(&json!({"children": [], "finalized": finalized}));
        }
        Reply::json(&hello_world(request))
    })
    .await;
    let finalize = format!("    finalize:\n      url: {}\n", server.url("/finalize"));
    let path = support::repo_root().join("examples/ported/hello-hook/rule.yaml");
    let text = std::fs::read_to_string(path)
        .unwrap()
        .replace("http://hello-world.hooks.svc/sync", &server.url("/sync"))
        .replace(
            "      timeout: 10s\n",
            &format!("      timeout: 10s\n{finalize}"),
        );
    let scene = hook_scene("hook-finalize", rule_from_yaml(&text)).await;
    hello(&scene, "greeter").await;
    scene
        .until("the hook's Pod", ("v1", "Pod", "greeter"), |_| true)
        .await;
    let held = scene
        .until("kiln's finalizer", (HELLO.0, HELLO.1, "greeter"), |h| {
            h["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
        })
        .await;
    assert_eq!(
        held["metadata"]["finalizers"],
        json!(["hello-world.kiln.dev/ordered-deletion"])
    );

    support::delete(&scene.client, HELLO, Some(scene.ns()), "greeter").await;
    // The finalize hook is asked, its answer applied (the Pod pruned), and
    // the primary held while it says it is not done.
    eventually(
        "the Pod pruned by the finalize hook's answer",
        support::PATIENCE,
        || async {
            scene
                .get("v1", "Pod", "greeter")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    let waiting = scene
        .until(
            "waiting for the finalize hook",
            (HELLO.0, HELLO.1, "greeter"),
            |h| condition(h, "Waiting")["status"] == "True",
        )
        .await;
    assert!(!waiting["metadata"]["deletionTimestamp"].is_null());
    let asked = server.requests("/finalize");
    assert!(asked.iter().all(|r| r["finalizing"] == true), "{asked:?}");
    let calls = asked.len();
    eventually(
        "the finalize hook asked again",
        support::PATIENCE,
        || async { (server.requests("/finalize").len() > calls).then_some(()) },
    )
    .await;
    assert!(
        scene.get(HELLO.0, HELLO.1, "greeter").await.is_some(),
        "still held"
    );

    done.store(true, Ordering::SeqCst);
    eventually(
        "the HelloWorld gone once finalized",
        support::PATIENCE,
        || async {
            scene
                .get(HELLO.0, HELLO.1, "greeter")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_whose_every_answer_differs_is_asked_at_most_once_a_second() {
    // Each answer stamps its own call number on the Pod: every apply's echo
    // would ask again, at once, for ever.
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let server = HookServer::start(move |_, request| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        let mut answer = hello_world(request);
        answer["children"][0]["metadata"]["annotations"] = json!({"call": n.to_string()});
        Reply::json(&answer)
    })
    .await;
    let scene = hook_scene("hook-loop", rule(&server)).await;
    hello(&scene, "greeter").await;
    scene
        .until("the hook's Pod", ("v1", "Pod", "greeter"), |_| true)
        .await;
    let before = calls.load(Ordering::SeqCst);
    let started = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let asked = calls.load(Ordering::SeqCst) - before;
    let bound = started.elapsed().as_secs() as usize + 2;
    assert!(asked <= bound, "{asked} calls in 6 s: at most one a second");
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_on_loopback_is_refused_without_the_test_only_setting() {
    let server = HookServer::start(|_, request| Reply::json(&hello_world(request))).await;
    // No `allowing_loopback`: the engine's egress client as `kiln run` has it.
    let scene = Scene::new("hook-loopback")
        .await
        .with_crds("examples/ported/hello-hook")
        .await
        .running(&[rule(&server)])
        .await;
    hello(&scene, "greeter").await;
    let refused = scene
        .until("HookFailed: refused", (HELLO.0, HELLO.1, "greeter"), |h| {
            condition(h, "Reconciled")["reason"] == "HookFailed"
        })
        .await;
    let message = condition(&refused, "Reconciled")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("refused"), "{message}");
    assert!(
        server.requests("/sync").is_empty(),
        "nothing reached the hook"
    );
    assert!(scene.get("v1", "Pod", "greeter").await.is_none());
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_does_not_answer_holds_only_its_own_rule() {
    // `/slow` answers only once the test lets it: until then each call
    // outlasts the rule's 20 s timeout, and is asked again after it.
    let released = Arc::new(AtomicBool::new(false));
    let r = released.clone();
    let server = HookServer::start(move |path, request| {
        let mut reply = Reply::json(&hello_world(request));
        if path == "/slow" && !r.load(Ordering::SeqCst) {
            reply.delay = Duration::from_secs(120);
        }
        reply
    })
    .await;
    let text = |name: &str, path: &str, slow: bool| {
        let path_of = support::repo_root().join("examples/ported/hello-hook/rule.yaml");
        let text = std::fs::read_to_string(path_of)
            .unwrap()
            .replace("name: hello-world", &format!("name: {name}"))
            .replace("http://hello-world.hooks.svc/sync", &server.url(path))
            .replace("timeout: 10s", "timeout: 20s")
            .replace(
                "kind: HelloWorld}",
                &format!("kind: HelloWorld, selector: {{matchLabels: {{slow: '{slow}'}}}}}}"),
            );
        rule_from_yaml(&text)
    };
    let scene = Scene::new("hook-starve")
        .await
        .with_crds("examples/ported/hello-hook")
        .await
        .allowing_loopback()
        .running(&[text("stuck", "/slow", true), text("quick", "/sync", false)])
        .await;
    for (name, slow) in [("s1", true), ("s2", true), ("s3", true), ("f1", false)] {
        scene
            .apply(json!({"apiVersion": HELLO.0, "kind": HELLO.1,
                "metadata": {"name": name, "labels": {"slow": slow.to_string()}},
                "spec": {"who": name}}))
            .await;
    }
    // The other rule's primary is served while every worker of the stuck
    // rule waits on its hook.
    scene.until("f1's Pod", ("v1", "Pod", "f1"), |_| true).await;
    assert!(
        !server.requests("/slow").is_empty(),
        "the stuck hook was asked"
    );
    assert!(scene.get("v1", "Pod", "s1").await.is_none());
    released.store(true, Ordering::SeqCst);
    for name in ["s1", "s2", "s3"] {
        scene.until(name, ("v1", "Pod", name), |_| true).await;
    }
    scene.end().await;
}
