//! Faults: kiln keeps working through them and loses nothing. Each test that
//! breaks the control plane starts one of its own, so the other tests'
//! cluster is never touched. Every test ends converged: every child exists
//! once, with its rendered value, and no hot loop follows.

use std::sync::Arc;
use std::time::Duration;

use kiln::controlplane::{Binaries, ControlPlane, Options as ControlPlaneOptions};
use kiln::engine::{Engine, Options, RuleState};
use kube::Client;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::engine::{WIDGET_RULE, widget};
use crate::support::counts;
use crate::support::{self, TestNamespace, eventually};

const PRIMARIES: usize = 300;
const CONVERGE: Duration = Duration::from_secs(120);

async fn own_control_plane(apiserver_args: &[&str]) -> ControlPlane {
    let mut opts = ControlPlaneOptions::new(Binaries::locate(&Binaries::default_source()).unwrap());
    opts.apiserver_args = apiserver_args.iter().map(|s| (*s).to_string()).collect();
    ControlPlane::start(opts).await.unwrap()
}

async fn widgets_api(client: &Client, ns: &str) -> kube::Api<DynamicObject> {
    support::dynamic_api(
        client,
        &json!("test.kiln.dev/v1"),
        &json!("Widget"),
        Some(ns),
    )
    .await
}

/// Creates `n` widgets w0..w{n-1}.
async fn create_widgets(client: &Client, ns: &str, n: usize) {
    let api = widgets_api(client, ns).await;
    let pp = PatchParams::apply("fault-test");
    for i in 0..n {
        let obj: DynamicObject =
            serde_json::from_value(widget(&format!("w{i}"), json!({"value": format!("v{i}")})))
                .unwrap();
        api.patch(&format!("w{i}"), &pp, &Patch::Apply(&obj))
            .await
            .unwrap();
    }
}

/// Every widget has exactly its one ConfigMap with its value (and nothing
/// else carries the rule's label), and reports Ready.
async fn converged(client: &Client, ns: &str, n: usize) -> Option<()> {
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), ns);
    let cms = api
        .list(&ListParams::default().labels("kiln.dev/rule=widgets"))
        .await
        .ok()?;
    if cms.items.len() != n {
        return None;
    }
    let children_ok = cms.items.iter().all(|cm| {
        let name = cm.metadata.name.as_deref().unwrap_or_default();
        let owners = cm.metadata.owner_references.as_deref().unwrap_or_default();
        owners.len() == 1
            && cm
                .data
                .as_ref()
                .and_then(|d| d.get("value"))
                .map(String::as_str)
                == Some(&format!("v{}", &name[1..]))
    });
    let widgets = widgets_api(client, ns)
        .await
        .list(&ListParams::default())
        .await
        .ok()?;
    let ready = widgets.items.iter().all(|w| {
        w.data["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    });
    (children_ok && ready).then_some(())
}

async fn engine_on(client: Client, ns: &str) -> Arc<Engine> {
    let engine = Arc::new(Engine::new(
        client,
        Options {
            namespaces: vec![ns.to_string()],
            kind_retry: Duration::from_millis(200),
            ..Options::default()
        },
    ));
    engine.start(support::rule_from_yaml(WIDGET_RULE));
    engine
}

/// After convergence kiln goes quiet: retries scheduled during a fault may
/// still fire (each a no-op), but within a minute three seconds pass with at
/// most two reconciles. A hot loop never gets there.
async fn assert_no_hot_loop(engine: &Engine) {
    let reconciles = || counts::reconciles(engine);
    eventually("kiln to go quiet", support::PATIENCE, || async {
        let before = reconciles();
        tokio::time::sleep(Duration::from_secs(3)).await;
        (reconciles() - before <= 2).then_some(())
    })
    .await;
    let writes = counts::writes(engine);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        counts::writes(engine),
        writes,
        "kiln still writes once quiet"
    );
}

/// How many requests the API server answered with 429, from its own metrics.
async fn throttled_requests(client: &Client) -> f64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains("code=\"429\""))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

async fn fault_during_convergence(component: &str) {
    let mut cp = own_control_plane(&[]).await;
    let client = cp.client().await.unwrap();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let ns = "faults";
    let _ = support::apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        None,
    )
    .await;
    create_widgets(&client, ns, PRIMARIES).await;
    let engine = engine_on(cp.client().await.unwrap(), ns).await;
    eventually("the rule to start", CONVERGE, || async {
        (engine.state("widgets") == Some(RuleState::Running)).then_some(())
    })
    .await;
    // Mid-convergence: some children exist, not all.
    tokio::time::sleep(Duration::from_millis(300)).await;
    cp.stop_component(component);
    if component == "kube-apiserver" {
        // While the API server is down kiln is not ready, and says
        // which watch fails.
        let why = eventually("kiln to turn unready", support::PATIENCE, || async {
            engine.readiness().err()
        })
        .await;
        assert!(why.contains("watch of"), "{why}");
    } else {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    cp.start_component(component).await.unwrap();
    eventually(
        &format!("convergence after restarting {component}"),
        CONVERGE,
        || converged(&client, ns, PRIMARIES),
    )
    .await;
    eventually("kiln to be ready again", CONVERGE, || async {
        engine.readiness().ok()
    })
    .await;
    assert_no_hot_loop(&engine).await;
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_through_an_api_server_restart() {
    fault_during_convergence("kube-apiserver").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_through_an_etcd_restart() {
    fault_during_convergence("etcd").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_under_api_throttling() {
    // One mutating request at a time, no priority and fairness: the API
    // server answers 429 with Retry-After to kiln's parallel writes.
    let cp = own_control_plane(&[
        "--max-requests-inflight=5",
        "--max-mutating-requests-inflight=1",
        "--enable-priority-and-fairness=false",
    ])
    .await;
    let client = cp.client().await.unwrap();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let ns = "throttled";
    let _ = support::apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        None,
    )
    .await;
    create_widgets(&client, ns, 100).await;
    // system:masters is exempt from in-flight limits: kiln runs as an
    // ordinary ServiceAccount, as it would in a cluster.
    for obj in [
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kiln", "namespace": ns}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "throttled-kiln"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
               "subjects": [{"kind": "ServiceAccount", "name": "kiln", "namespace": ns}]}),
    ] {
        // Namespaced objects carry their namespace; it decides the API path.
        let ns = obj["metadata"]["namespace"].as_str().map(str::to_string);
        support::apply(&client, obj, ns.as_deref()).await;
    }
    let token = support::token_of(&client, ns, "kiln").await;
    // The client `kiln run` makes: kube's own retry of a 429 backs off up
    // to 1000 s between its 15 tries, and only the request timeout bounds
    // how long one throttled write holds a worker.
    let kc = kube::config::Kubeconfig::from_yaml(&support::token_kubeconfig(
        cp.kubeconfig_yaml(),
        &token,
    ))
    .unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let as_kiln = kiln::request_timeout::client(config, Some(KILN_RUN_REQUEST_TIMEOUT)).unwrap();
    let engine = Arc::new(Engine::new(
        as_kiln,
        Options {
            namespaces: vec![ns.to_string()],
            concurrency: 16,
            ..Options::default()
        },
    ));
    engine.start(support::rule_from_yaml(WIDGET_RULE));
    eventually("convergence under throttling", CONVERGE, || {
        converged(&client, ns, 100)
    })
    .await;
    let throttled = throttled_requests(&client).await;
    assert!(
        throttled > 0.0,
        "the API server never throttled kiln, so this test proved nothing"
    );
    assert_no_hot_loop(&engine).await;
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_after_being_killed_at_several_points() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "fault-kill").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    create_widgets(&client, n, PRIMARIES).await;
    for pause in [300, 700, 1200] {
        let mut kiln = support::KilnProcess::start(WIDGET_RULE, &["--namespace", n]);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        kiln.child.kill().unwrap(); // SIGKILL: no clean-up of any kind
        kiln.child.wait().unwrap();
    }
    let _kiln = support::KilnProcess::start(WIDGET_RULE, &["--namespace", n]);
    eventually("convergence after three SIGKILLs", CONVERGE, || {
        converged(&client, n, PRIMARIES)
    })
    .await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_field_manager_is_overruled_without_a_fight_loop() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "fault-fight").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    create_widgets(&client, n, 1).await;
    let engine = engine_on(support::admin_client().await, n).await;
    eventually("the child", CONVERGE, || converged(&client, n, 1)).await;
    support::settled("kiln's applies", || counts::applies(&engine)).await;
    let applies_before = counts::applies(&engine);
    let cms = support::dynamic_api(&client, &json!("v1"), &json!("ConfigMap"), Some(n)).await;
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w0"}, "data": {"value": "theirs"}});
    for _ in 0..5 {
        cms.patch(
            "w0",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(&theirs),
        )
        .await
        .unwrap();
        eventually("kiln to restore the value", CONVERGE, || async {
            let cm = support::get(&client, "v1", "ConfigMap", n, "w0").await?;
            (cm["data"]["value"] == "v0").then_some(())
        })
        .await;
    }
    let applies = counts::applies(&engine) - applies_before;
    assert!(
        (5..=7).contains(&applies),
        "{applies} applies to answer 5 changes"
    );
    assert_no_hot_loop(&engine).await;
    let value: Value = support::get(&client, "v1", "ConfigMap", n, "w0")
        .await
        .unwrap();
    assert_eq!(value["data"]["value"], "v0");
    engine.shutdown().await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_that_does_not_force_reports_a_conflict_instead() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "fault-conflict").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    // Someone else already owns data.value of the ConfigMap the rule renders.
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w0"}, "data": {"value": "theirs"}});
    let cms = support::dynamic_api(&client, &json!("v1"), &json!("ConfigMap"), Some(n)).await;
    let obj: DynamicObject = serde_json::from_value(theirs).unwrap();
    cms.patch(
        "w0",
        &PatchParams::apply("someone-else"),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap();
    create_widgets(&client, n, 1).await;
    // The rule takes the existing ConfigMap over on purpose (`adopt`): kiln
    // never takes over an object it did not create otherwise.
    let polite = WIDGET_RULE
        .replace(
            "  status:\n    fields:",
            "  apply: {forceConflicts: false}\n  status:\n    fields:",
        )
        .replace("    - id: main\n", "    - id: main\n      adopt: true\n");
    let engine = Arc::new(Engine::new(
        support::admin_client().await,
        Options {
            namespaces: vec![n.to_string()],
            kind_retry: Duration::from_millis(200),
            ..Options::default()
        },
    ));
    engine.start(support::rule_from_yaml(&polite));
    let condition = eventually("a Conflict condition", CONVERGE, || async {
        let w = support::get(&client, "test.kiln.dev/v1", "Widget", n, "w0").await?;
        w["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Reconciled" && c["reason"] == "Conflict")
            .cloned()
    })
    .await;
    assert!(
        condition["message"]
            .as_str()
            .unwrap()
            .contains("someone-else"),
        "{condition}"
    );
    let cm = support::get(&client, "v1", "ConfigMap", n, "w0")
        .await
        .unwrap();
    assert_eq!(
        cm["data"]["value"], "theirs",
        "the other manager's value stays"
    );
    engine.shutdown().await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mistyped_primary_gets_a_condition_and_the_others_go_on() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "fault-mistyped").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    create_widgets(&client, n, 3).await;
    // A map where the rule expects a string: the ConfigMap it renders is invalid.
    support::apply(
        &client,
        widget("bad", json!({"value": {"nested": true}})),
        Some(n),
    )
    .await;
    let engine = engine_on(support::admin_client().await, n).await;
    let bad = eventually("an Invalid condition on bad", CONVERGE, || async {
        let w = support::get(&client, "test.kiln.dev/v1", "Widget", n, "bad").await?;
        w["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Reconciled" && c["reason"] == "Invalid")
            .cloned()
    })
    .await;
    assert!(
        bad["message"].as_str().unwrap().contains("ConfigMap"),
        "{bad}"
    );
    for i in 0..3 {
        let name = format!("w{i}");
        let cm = eventually("the good widgets' children", CONVERGE, || {
            support::get(&client, "v1", "ConfigMap", n, &name)
        })
        .await;
        assert_eq!(cm["data"]["value"], format!("v{i}"));
    }
    let for_bad = support::events_about(&client, n, "bad", "Invalid")
        .await
        .len();
    assert_eq!(for_bad, 1, "one Event, not a storm");
    engine.shutdown().await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_watch_is_relisted_and_what_changed_meanwhile_converges() {
    use futures::StreamExt;
    // No watch cache and compaction every second: a watch resumed from an
    // old resourceVersion gets 410 Gone.
    let mut cp = own_control_plane(&["--etcd-compaction-interval=1s", "--watch-cache=false"]).await;
    let client = cp.client().await.unwrap();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let ns = "expired";
    let _ = support::apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        None,
    )
    .await;
    create_widgets(&client, ns, 3).await;
    let engine = engine_on(cp.client().await.unwrap(), ns).await;
    eventually("first convergence", CONVERGE, || converged(&client, ns, 3)).await;
    let old_rv = widgets_api(&client, ns)
        .await
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();

    // kiln's API server goes away; the cluster changes through another one.
    let second_yaml = cp.start_second_apiserver().await.unwrap();
    let second = kiln::controlplane::client_from_kubeconfig(&second_yaml)
        .await
        .unwrap();
    cp.stop_component("kube-apiserver");
    let widgets = widgets_api(&second, ns).await;
    let pp = PatchParams::apply("fault-test").force();
    for (name, value) in [("w1", "changed"), ("w3", "v3")] {
        let obj: DynamicObject =
            serde_json::from_value(widget(name, json!({"value": value}))).unwrap();
        widgets.patch(name, &pp, &Patch::Apply(&obj)).await.unwrap();
    }
    widgets.delete("w0", &Default::default()).await.unwrap();
    let filler = support::dynamic_api(&second, &json!("v1"), &json!("ConfigMap"), Some(ns)).await;
    for i in 0..20 {
        let obj: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "filler"}, "data": {"i": format!("{i}")}})).unwrap();
        filler
            .patch("filler", &pp, &Patch::Apply(&obj))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    // The precondition, checked: resuming from the old resourceVersion is refused.
    let expired = eventually(
        "the old resourceVersion to be compacted away",
        CONVERGE,
        || async {
            let mut events = match widgets
                .watch(&kube::api::WatchParams::default().timeout(5), &old_rv)
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 410 => return Some(()),
                Err(_) => return None,
                Ok(events) => events.boxed(),
            };
            match events.next().await {
                Some(Ok(kube::api::WatchEvent::Error(s))) if s.code == 410 => Some(()),
                _ => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    None
                }
            }
        },
    );
    expired.await;

    // kiln's server comes back: its watches resume from old resourceVersions,
    // get 410, re-list, and everything that changed meanwhile converges.
    cp.start_component("kube-apiserver").await.unwrap();
    eventually("w1's child to follow its change", CONVERGE, || async {
        let cm = support_get(&client, ns, "w1").await?;
        (cm["data"]["value"] == "changed").then_some(())
    })
    .await;
    eventually("w3's child to appear", CONVERGE, || async {
        let cm = support_get(&client, ns, "w3").await?;
        (cm["data"]["value"] == "v3").then_some(())
    })
    .await;
    eventually("w0's child to be collected", CONVERGE, || async {
        support_get(&client, ns, "w0").await.is_none().then_some(())
    })
    .await;
    assert_no_hot_loop(&engine).await;
    engine.shutdown().await;
}

/// Every connection kiln has open to the API server goes silent at once,
/// in the middle of convergence: a peer gone without a word (a node lost, a
/// NAT or load balancer that dropped the connections' state). The requests
/// waiting on them are given up after the request timeout and sent again on
/// new connections, so every Widget gets its child. Without the limit they
/// wait until TCP gives up (about fifteen minutes), and so does every worker
/// (`REQUEST_TIMEOUT` unset: the test times out). The watches, silent too,
/// are made again within about a minute (kube's default: five).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_on_connections_gone_silent_are_given_up_and_sent_again() {
    let admin = support::admin_client().await;
    support::install_crds(&admin, "tests/fixtures/crds").await;
    let ns = TestNamespace::new(&admin, "silent").await;
    create_widgets(&admin, ns.name(), PRIMARIES).await;
    // kiln reaches the API server through a proxy that can silence it.
    let proxy = support::stall::StallingProxy::start(support::stall::api_server_port()).await;
    let through = support::stall::kubeconfig_through(proxy.port);
    let kc = kube::config::Kubeconfig::from_yaml(&through).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kiln::request_timeout::client(config, REQUEST_TIMEOUT).unwrap();
    let engine = engine_on(client, ns.name()).await;
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(admin.clone(), ns.name());
    let children = || async {
        let listed = cms
            .list(&ListParams::default().labels("kiln.dev/rule=widgets"))
            .await
            .unwrap();
        listed
            .items
            .iter()
            .filter(|cm| {
                let name = cm.metadata.name.as_deref().unwrap_or_default();
                cm.data.as_ref().and_then(|d| d.get("value")) == Some(&format!("v{}", &name[1..]))
            })
            .count()
    };
    // Mid-convergence: some children written, not all.
    eventually("kiln's first child", CONVERGE, || async {
        (children().await > 0).then_some(())
    })
    .await;
    proxy.stall();
    let before = children().await;
    assert!(
        before < PRIMARIES,
        "kiln converged before its connections went silent"
    );
    eventually(
        "every child, once the silent requests were given up",
        KILN_RUN_REQUEST_TIMEOUT + support::PATIENCE,
        || async { (children().await == PRIMARIES).then_some(()) },
    )
    .await;
    // kiln's watches went silent too: each is made again once it said
    // nothing for its timeout (60 s, plus kube's 5 s), so a change made now
    // reaches kiln within about a minute of the silence, not five.
    let silenced = std::time::Instant::now();
    let pp = PatchParams::apply("fault-test");
    let changed: DynamicObject =
        serde_json::from_value(widget("w0", json!({"value": "after the silence"}))).unwrap();
    widgets_api(&admin, ns.name())
        .await
        .patch("w0", &pp, &Patch::Apply(&changed))
        .await
        .unwrap();
    eventually(
        "w0's change, through a watch made again",
        KILN_RUN_REQUEST_TIMEOUT + support::PATIENCE,
        || async {
            let cm = support_get(&admin, ns.name(), "w0").await?;
            (cm["data"]["value"] == "after the silence").then_some(())
        },
    )
    .await;
    eprintln!("w0 followed {:?} after the silence", silenced.elapsed());
    engine.shutdown().await;
    drop(proxy);
    ns.delete().await;
}

/// `kiln run --request-timeout`'s default.
const KILN_RUN_REQUEST_TIMEOUT: Duration = Duration::from_secs(70);

/// The limit on an unanswered request in the test above (`kiln run
/// --request-timeout`).
const REQUEST_TIMEOUT: Option<Duration> = Some(Duration::from_secs(3));

async fn support_get(client: &Client, ns: &str, name: &str) -> Option<Value> {
    support::get(client, "v1", "ConfigMap", ns, name).await
}
