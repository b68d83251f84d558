use super::*;
use crate::rules;
use serde_json::json;

fn rule(children: &str) -> Rule {
    rule_with("", children)
}

/// A rule on `App` with `spec` text before its children (e.g. `vars`).
fn rule_with(before: &str, children: &str) -> Rule {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.yaml");
    let text = format!(
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: r}}\nspec:\n  for: {{apiVersion: demo.kiln.dev/v1, kind: App}}\n{before}  children:\n{children}"
    );
    std::fs::write(&file, text).unwrap();
    let mut set = rules::load(&[file]).unwrap_or_else(|d| panic!("{}", d[0]));
    std::sync::Arc::into_inner(set.rules.remove(0)).unwrap()
}

#[test]
fn status_sees_for_each_children_in_the_order_rendered() {
    let r = rule(
        "    - id: cm\n      forEach: self.spec.items\n      template:\n        apiVersion: v1\n        kind: ConfigMap\n        metadata: {name: \"a-{{ item }}\"}\n  status:\n    fields:\n      names: \"{{ children.cm | map(attribute='metadata') | map(attribute='name') | list }}\"\n",
    );
    let mut inputs = primary(Some("ns"), json!({"items": ["z", "b", "m"]}));
    // As the engine hands them over: by name, one no longer rendered.
    let live: Vec<Value> = ["a-b", "a-m", "a-old", "a-z"]
            .iter()
            .map(|n| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "namespace": "ns"}}))
            .collect();
    inputs.observed.insert("cm".into(), Value::Array(live));
    let out = render(&r, &inputs, &well_known_scope).unwrap();
    assert_eq!(out.status["names"], json!(["a-z", "a-b", "a-m", "a-old"]));
}

fn primary(namespace: Option<&str>, spec: Value) -> Inputs {
    let mut meta = json!({"name": "a", "uid": "u-1"});
    if let Some(ns) = namespace {
        meta["namespace"] = json!(ns);
    }
    Inputs {
        primary: json!({"apiVersion": "demo.kiln.dev/v1", "kind": "App", "metadata": meta, "spec": spec}),
        ..Inputs::default()
    }
}

/// A Secret holding a key drawn once, and a ConfigMap keying a hash with it.
const KEPT: &str = r#"    - id: key
      template:
        apiVersion: v1
        kind: Secret
        metadata: {name: a-key}
        data:
          key: "{{ children.key.data.key if children.key is defined else random_secret(32) | b64encode }}"
    - id: cm
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: a-hash}
        data:
          hash: "{{ self.spec | hmac_sha256(children.key.data.key) }}"
"#;

#[test]
fn a_value_is_drawn_only_for_a_missing_child_and_later_children_see_it() {
    let r = rule(KEPT);
    let inputs = primary(Some("team"), json!({"a": 1}));
    let first = render(&r, &inputs, &well_known_scope).unwrap();
    let key = first.children[0].object["data"]["key"]
        .as_str()
        .unwrap()
        .to_string();
    let drawn = &first.children[0].generated;
    assert_eq!(drawn.len(), 1);
    assert_eq!(drawn[0].len(), 32);
    assert_eq!(
        key,
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &drawn[0])
    );
    assert!(first.children[1].generated.is_empty());
    // The ConfigMap was keyed with the key just drawn, not left undefined.
    let hash = first.children[1].object["data"]["hash"].clone();
    assert_eq!(hash.as_str().map(str::len), Some(64));
    assert!(
        !first.readiness[0].ready,
        "a drawn child does not exist yet"
    );

    // Once the Secret exists, its value is read back: nothing is drawn,
    // and the render is what was applied.
    let mut inputs = inputs;
    inputs
        .observed
        .insert("key".into(), first.children[0].object.clone());
    let again = render(&r, &inputs, &well_known_scope).unwrap();
    assert!(again.children.iter().all(|c| c.generated.is_empty()));
    assert_eq!(again.children[0].object, first.children[0].object);
    assert_eq!(again.children[1].object["data"]["hash"], hash);
    // A second draw for another primary differs.
    let other = render(
        &r,
        &primary(Some("team"), json!({"a": 1})),
        &well_known_scope,
    )
    .unwrap();
    assert_ne!(other.children[0].object["data"]["key"], json!(key));
}

#[test]
fn a_template_that_would_draw_again_fails_on_its_first_render() {
    let r = rule(
        "    - id: key\n      template: {apiVersion: v1, kind: Secret, metadata: {name: k}, data: {key: \"{{ random_secret(32) | b64encode }}\"}}\n",
    );
    let inputs = primary(Some("team"), json!({}));
    let err = render(&r, &inputs, &well_known_scope)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("draws a new value for `k`, which will exist"),
        "{err}"
    );
    let mut live = inputs;
    live.observed.insert(
        "key".into(),
        json!({"metadata": {"name": "k"}, "data": {"key": "eA=="}}),
    );
    let err = render(&r, &live, &well_known_scope)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("draws a new value for `k`, which exists"),
        "{err}"
    );
    assert!(!err.contains("eA=="), "{err}");
}

#[test]
fn kiln_render_prints_a_placeholder() {
    let r = rule(KEPT);
    let mut inputs = primary(Some("team"), json!({}));
    inputs.draw = Draw::Placeholder;
    let out = render(&r, &inputs, &well_known_scope).unwrap();
    let again = render(&r, &inputs, &well_known_scope).unwrap();
    assert_eq!(out, again, "the same output every time");
    assert_eq!(out.children[0].generated, ["<random_secret(32)>"]);
}

const CM: &str = "    - id: cm\n      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: \"{{ self.spec.ns }}\"}}\n";

#[test]
fn children_get_namespace_labels_and_a_controller_owner() {
    let r = rule(
        "    - id: cm\n      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n",
    );
    let out = render(&r, &primary(Some("team"), json!({})), &well_known_scope).unwrap();
    let meta = &out.children[0].object["metadata"];
    assert_eq!(meta["namespace"], "team");
    assert_eq!(meta["labels"][MANAGED_BY_LABEL], "kiln");
    assert_eq!(meta["labels"][RULE_LABEL], "r");
    assert_eq!(
        meta["ownerReferences"],
        json!([{"apiVersion": "demo.kiln.dev/v1", "kind": "App", "name": "a", "uid": "u-1", "controller": true, "blockOwnerDeletion": true}])
    );
}

#[test]
fn a_managed_by_the_template_renders_is_kept() {
    let r = rule(
        "    - id: cm\n      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, labels: {app.kubernetes.io/managed-by: Helm}}}\n",
    );
    let out = render(&r, &primary(Some("team"), json!({})), &well_known_scope).unwrap();
    let labels = &out.children[0].object["metadata"]["labels"];
    assert_eq!(labels[MANAGED_BY_LABEL], "Helm");
    assert_eq!(labels[RULE_LABEL], "r", "kiln's own marks are still set");
    assert_eq!(labels[CHILD_LABEL], "cm");
}

#[test]
fn a_status_field_that_renders_none_is_left_out() {
    let r = rule(
        "    - id: cm\n      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n  status:\n    fields:\n      last: \"{{ self.spec.last if self.spec.last is defined else none }}\"\n      phase: \"{{ self.spec.phase }}\"\n",
    );
    let out = render(
        &r,
        &primary(Some("t"), json!({"phase": "a"})),
        &well_known_scope,
    )
    .unwrap();
    assert_eq!(Value::Object(out.status), json!({"phase": "a"}));
}

#[test]
fn a_child_field_that_renders_none_is_left_out() {
    let r = rule(
        "    - id: deploy\n      template:\n        apiVersion: apps/v1\n        kind: Deployment\n        metadata: {name: x}\n        spec:\n          replicas: \"{{ self.spec.replicas if self.spec.replicas is defined else none }}\"\n          template: {spec: {containers: [{name: app, image: \"{{ none }}\"}]}}\n",
    );
    let out = render(&r, &primary(Some("t"), json!({})), &well_known_scope).unwrap();
    let spec = &out.children[0].object["spec"];
    assert_eq!(spec.get("replicas"), None, "{spec}");
    assert_eq!(
        spec["template"]["spec"]["containers"],
        json!([{"name": "app"}])
    );
    let out = render(
        &r,
        &primary(Some("t"), json!({"replicas": 2})),
        &well_known_scope,
    )
    .unwrap();
    assert_eq!(out.children[0].object["spec"]["replicas"], 2);
}

#[test]
fn a_namespaced_primary_cannot_reach_another_namespace() {
    let r = rule(CM);
    let err = render(
        &r,
        &primary(Some("team"), json!({"ns": "kube-system"})),
        &well_known_scope,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("would be created in namespace `kube-system`, but its primary is in `team`"),
        "{err}"
    );
    // Its own namespace, spelled out, is fine.
    assert!(
        render(
            &r,
            &primary(Some("team"), json!({"ns": "team"})),
            &well_known_scope
        )
        .is_ok()
    );
}

#[test]
fn a_namespaced_primary_cannot_own_cluster_scoped_children() {
    let r = rule(
        "    - id: role\n      template: {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: x}}\n",
    );
    let err = render(&r, &primary(Some("team"), json!({})), &well_known_scope).unwrap_err();
    assert!(
        err.to_string()
            .contains("cluster-scoped; a namespaced primary cannot own cluster-scoped children"),
        "{err}"
    );
}

#[test]
fn a_cluster_scoped_primary_must_name_the_namespace() {
    let r = rule(
        "    - id: cm\n      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n",
    );
    let err = render(&r, &primary(None, json!({})), &well_known_scope).unwrap_err();
    assert!(err.to_string().contains("set metadata.namespace"), "{err}");
    let r = rule(CM);
    let out = render(
        &r,
        &primary(None, json!({"ns": "anywhere"})),
        &well_known_scope,
    )
    .unwrap();
    assert_eq!(out.children[0].object["metadata"]["namespace"], "anywhere");
}

#[test]
fn for_each_renders_one_child_per_item_and_refuses_duplicates() {
    let each = "    - id: cm\n      forEach: self.spec.items\n      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ item }}\"}, data: {i: \"{{ index }}\"}}\n";
    let r = rule(each);
    let out = render(
        &r,
        &primary(Some("t"), json!({"items": ["a", "b"]})),
        &well_known_scope,
    )
    .unwrap();
    let names: Vec<&Value> = out
        .children
        .iter()
        .map(|c| &c.object["metadata"]["name"])
        .collect();
    assert_eq!(names, [&json!("a"), &json!("b")]);
    // Typed by ConfigMap's schema: the index is written as a string.
    assert_eq!(out.children[1].object["data"]["i"], json!("1"));
    let err = render(
        &r,
        &primary(Some("t"), json!({"items": ["a", "a"]})),
        &well_known_scope,
    )
    .unwrap_err();
    assert!(err.to_string().contains("renders `a` twice"), "{err}");
    let err = render(
        &r,
        &primary(Some("t"), json!({"items": "nope"})),
        &well_known_scope,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("forEach must give a list, got a string"),
        "{err}"
    );
    let many: Vec<String> = (0..=MAX_FOR_EACH).map(|i| format!("n{i}")).collect();
    let err = render(
        &r,
        &primary(Some("t"), json!({"items": many})),
        &well_known_scope,
    )
    .unwrap_err();
    assert!(err.to_string().contains("at most 1000"), "{err}");
}

#[test]
fn when_false_leaves_the_child_out_and_ready_when_reads_the_live_child() {
    let r = rule(
        "    - id: cm\n      when: self.spec.on\n      readyWhen: child.data.ok == 'yes'\n      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n",
    );
    let off = render(
        &r,
        &primary(Some("t"), json!({"on": false})),
        &well_known_scope,
    )
    .unwrap();
    assert!(off.children.is_empty());
    let mut inputs = primary(Some("t"), json!({"on": true}));
    let on = render(&r, &inputs, &well_known_scope).unwrap();
    assert!(!on.all_ready(), "a child not observed yet is not ready");
    inputs.observed.insert(
        "cm".into(),
        json!({"metadata": {"name": "x"}, "data": {"ok": "yes"}}),
    );
    assert!(render(&r, &inputs, &well_known_scope).unwrap().all_ready());
}

#[test]
fn rule_conditions_render_status_reason_and_message() {
    let r = rule(concat!(
        "    - id: cm\n      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n",
        "  status:\n    conditions:\n",
        "      - {type: Available, status: self.spec.up, reason: \"{{ 'Up' if self.spec.up else 'Down' }}\", message: \"{{ self.spec.why }}\"}\n",
        "      - {type: Degraded, status: self.spec.degraded, reason: Checked}\n",
    ));
    let cases = [
        (
            json!({"up": true, "why": "ok", "degraded": "Unknown"}),
            Ok(("True", "Up", "Unknown")),
        ),
        (
            json!({"up": false, "why": "no", "degraded": "False"}),
            Ok(("False", "Down", "False")),
        ),
        (
            json!({"up": true, "why": "ok", "degraded": "maybe"}),
            Err("got \"maybe\""),
        ),
        (
            json!({"up": true, "why": "ok"}),
            Err("`self.spec.degraded` is undefined"),
        ),
    ];
    for (spec, expected) in cases {
        let got = render(&r, &primary(Some("t"), spec.clone()), &well_known_scope);
        match (got, expected) {
            (Ok(rendered), Ok((available, reason, degraded))) => {
                let c = &rendered.conditions;
                assert_eq!(
                    (c[0].status, c[0].reason.as_str()),
                    (available, reason),
                    "{spec}"
                );
                assert_eq!(c[0].message, spec["why"].as_str().unwrap());
                assert_eq!(
                    (c[1].status, c[1].message.as_str()),
                    (degraded, ""),
                    "{spec}"
                );
            }
            (Err(e), Err(text)) => assert!(e.to_string().contains(text), "{spec}: {e}"),
            (got, expected) => panic!("{spec}: {got:?}, expected {expected:?}"),
        }
    }
    let bad = rule(concat!(
        "    - id: cm\n      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n",
        "  status:\n    conditions:\n",
        "      - {type: Available, status: \"true\", reason: \"{{ self.spec.reason }}\"}\n",
    ));
    let e = render(
        &bad,
        &primary(Some("t"), json!({"reason": "not camel"})),
        &well_known_scope,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("reason `not camel` is not CamelCase"),
        "{e}"
    );
}

#[test]
fn a_malformed_primary_fails_with_the_missing_field_named() {
    let r = rule(
        "    - id: cm\n      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ self.spec.name }}\"}}\n",
    );
    let err = render(&r, &primary(Some("t"), json!({})), &well_known_scope).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.children[0].template.metadata.name: undefined value: `self.spec.name` is undefined"
    );
}

fn rule_with_vars(vars: &str, children: &str) -> Rule {
    let status = "  status:\n    fields:\n      host: \"{{ vars.host }}\"\n";
    rule_with(&format!("  vars:\n{vars}"), &format!("{children}{status}"))
}

#[test]
fn vars_are_evaluated_in_order_and_every_template_sees_them() {
    let r = rule_with_vars(
        "    name: \"{{ self.metadata.name }}-web\"\n    host: \"{{ vars.name }}.{{ self.spec.domain }}\"\n    ports: \"{{ self.spec.ports }}\"\n    labels: {app: \"{{ vars.name }}\"}\n",
        "    - id: cm\n      when: vars.ports | length > 0\n      template:\n        apiVersion: v1\n        kind: ConfigMap\n        metadata: {name: \"{{ vars.name }}\", labels: \"{{ vars.labels }}\"}\n        data:\n          host: \"{{ vars.host }}\"\n          ports: \"{{ vars.ports | each('vars.name ~ \\\":\\\" ~ item') | join(',') }}\"\n",
    );
    let out = render(
        &r,
        &primary(
            Some("t"),
            json!({"domain": "example.com", "ports": [80, 443]}),
        ),
        &well_known_scope,
    )
    .unwrap();
    let cm = &out.children[0].object;
    assert_eq!(cm["metadata"]["name"], "a-web");
    assert_eq!(cm["metadata"]["labels"]["app"], "a-web");
    assert_eq!(cm["data"]["host"], "a-web.example.com");
    assert_eq!(cm["data"]["ports"], "a-web:80,a-web:443");
    assert_eq!(out.status["host"], "a-web.example.com");
    let none = render(
        &r,
        &primary(Some("t"), json!({"domain": "x", "ports": []})),
        &well_known_scope,
    )
    .unwrap();
    assert!(none.children.is_empty(), "`when` sees vars too");
}

#[test]
fn a_failing_var_fails_the_render_naming_it() {
    let r = rule_with_vars(
        "    host: \"{{ self.spec.domain }}\"\n",
        "    - id: cm\n      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n",
    );
    let err = render(&r, &primary(Some("t"), json!({})), &well_known_scope).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.vars.host: undefined value: `self.spec.domain` is undefined"
    );
}

#[test]
fn ready_of_a_for_each_child_holds_when_every_item_is_ready() {
    let r = rule(
        "    - id: items\n      forEach: self.spec.items\n      readyWhen: child.data.ok == 'yes'\n      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ item }}\"}}\n    - id: summary\n      template: {apiVersion: v1, kind: ConfigMap, metadata: {name: s}, data: {all: \"{{ ready.items }}\"}}\n",
    );
    let mut inputs = primary(Some("t"), json!({"items": ["a", "b"]}));
    let live = |name: &str, ok: &str| json!({"metadata": {"name": name}, "data": {"ok": ok}});
    inputs
        .observed
        .insert("items".into(), json!([live("a", "yes"), live("b", "no")]));
    let out = render(&r, &inputs, &well_known_scope).unwrap();
    assert_eq!(out.waiting.len(), 1, "one item is not ready: {out:?}");
    assert_eq!(out.waiting[0].waits_for, ["`items` to be ready"]);
    inputs
        .observed
        .insert("items".into(), json!([live("a", "yes"), live("b", "yes")]));
    let out = render(&r, &inputs, &well_known_scope).unwrap();
    assert!(out.waiting.is_empty());
    assert_eq!(out.children[2].object["data"]["all"], "true");
}

#[test]
fn a_past_requeue_at_fires_once_never_in_a_loop() {
    let t = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
    let now = t("2026-05-17T10:00:00Z");
    let wake = |at: &str| wake_at(&json!(at), now).unwrap();
    assert_eq!(
        wake("2026-05-17T10:01:30Z").map(|w| w.after.as_secs()),
        Some(90)
    );
    // This render is at or after the instant: it is the one the instant
    // asked for, and asks for no other.
    assert_eq!(wake("2026-05-17T09:00:00Z"), None);
    assert_eq!(wake("2026-05-17T10:00:00Z"), None);
    assert_eq!(
        wake_at(
            &json!(["2020-01-01T00:00:00Z", "2026-05-17T10:00:05Z"]),
            now
        )
        .unwrap()
        .map(|w| w.after.as_secs()),
        Some(5),
        "the earliest instant still to come counts"
    );
}
