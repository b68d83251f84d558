//! `charts/kiln` and `kiln package` against `deploy/` and the real control
//! plane: the chart lints clean; rendered with the example rules (packaged
//! by `kiln package`) it makes what `deploy/` makes; every object it renders
//! passes server-side dry-run; and the kustomize overlay `kiln package`
//! writes replaces the base's rules and permissions whole.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::deploy::{apply, kustomize, kustomize_dir, of_kind};
use crate::support::{self, TestNamespace, run_ok as run};

/// helm, built from its Go module by `tests/tools/helm.sh` (cached).
fn helm() -> PathBuf {
    let out = run(Command::new("bash").arg(support::repo_root().join("tests/tools/helm.sh")));
    PathBuf::from(out.lines().last().unwrap().trim())
}

fn chart() -> PathBuf {
    support::repo_root().join("charts/kiln")
}

/// `kiln package --rules DIR --format helm-values --out FILE`.
fn packaged_values(rules: &Path, file: &Path) {
    run(Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["package", "--format", "helm-values", "--rules"])
        .arg(rules)
        .arg("--out")
        .arg(file));
}

/// `helm template kiln charts/kiln -n NS ARGS…`, as JSON documents.
fn template(namespace: &str, args: &[&str]) -> Vec<Value> {
    let text = run(Command::new(helm())
        .args(["template", "kiln"])
        .arg(chart())
        .args(["--namespace", namespace])
        .args(args));
    kiln::yaml::parse_documents(&text, kiln::yaml::Limits::default())
        .unwrap()
        .iter()
        .map(kiln::yaml::Node::to_json)
        .filter(|o| !o.is_null())
        .collect()
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(objects, &[kind]);
    assert_eq!(found.len(), 1, "one {kind} expected: {objects:#?}");
    found[0]
}

/// A ClusterRole's rules as a sorted set of JSON texts.
fn rule_set(role: &Value) -> Vec<String> {
    let mut rules: Vec<String> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(Value::to_string)
        .collect();
    rules.sort();
    rules.dedup();
    rules
}

#[test]
fn the_chart_lints_clean_with_defaults_and_with_every_option() {
    let work = tempfile::tempdir().unwrap();
    let values = work.path().join("values.yaml");
    packaged_values(&support::repo_root().join("rules"), &values);
    run(Command::new(helm()).args(["lint", "--strict"]).arg(chart()));
    run(Command::new(helm())
        .args(["lint", "--strict"])
        .arg(chart())
        .arg("-f")
        .arg(&values)
        .args([
            "--set",
            "mode=shards,replicas=3,metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,webhook.service.enabled=true,webhook.networkPolicy.enabled=true,webhook.networkPolicy.apiServerCIDRs={10.0.0.0/24}",
        ]));
}

#[test]
fn the_webhook_network_policy_admits_only_the_api_server_to_the_webhook() {
    let on = "webhook.networkPolicy.enabled=true,webhook.networkPolicy.apiServerCIDRs={10.0.0.0/24,10.1.0.5/32}";
    let objects = template("kiln", &["--set", on]);
    let policy = one(&objects, "NetworkPolicy");
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(
        ingress[0]["ports"],
        json!([{"port": "webhook", "protocol": "TCP"}])
    );
    assert_eq!(
        ingress[0]["from"],
        json!([{"ipBlock": {"cidr": "10.0.0.0/24"}}, {"ipBlock": {"cidr": "10.1.0.5/32"}}])
    );
    assert!(
        ingress[1].get("from").is_none(),
        "metrics and probes stay open"
    );
    // Off by default; on without the API server's addresses, refused.
    let default = template("kiln", &[]);
    assert!(default.iter().all(|o| o["kind"] != "NetworkPolicy"));
    let refused = Command::new(helm())
        .args(["template", "kiln"])
        .arg(chart())
        .args(["--set", "webhook.networkPolicy.enabled=true"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("apiServerCIDRs"), "{stderr}");
}

#[test]
fn the_chart_with_the_example_rules_makes_what_deploy_makes() {
    let work = tempfile::tempdir().unwrap();
    let values = work.path().join("values.yaml");
    packaged_values(&support::repo_root().join("rules"), &values);
    let chart = template(
        "kiln-system",
        &["-f", values.to_str().unwrap(), "--include-crds"],
    );
    let deploy = kustomize();

    // The same Rule CRD.
    assert_eq!(
        one(&chart, "CustomResourceDefinition"),
        one(&deploy, "CustomResourceDefinition")
    );

    // The same rules (the permissions: below).
    assert_eq!(
        one(&chart, "ConfigMap")["data"],
        one(&deploy, "ConfigMap")["data"]
    );
    assert_eq!(one(&chart, "ConfigMap")["metadata"]["name"], "kiln-rules");
    assert_eq!(
        one(&deploy, "RoleBinding")["roleRef"]["name"],
        one(&deploy, "Role")["metadata"]["name"]
    );

    // The same pod: arguments (the chart names the Lease explicitly, `kiln`
    // being the default), image, ports, probes, resources, security.
    let pod = |objects: &[Value]| one(objects, "Deployment")["spec"]["template"]["spec"].clone();
    let (c, d) = (pod(&chart), pod(&deploy));
    let mut args = c["containers"][0]["args"].as_array().unwrap().clone();
    args.retain(|a| a != "--leader-elect-id=kiln");
    assert_eq!(Value::Array(args), d["containers"][0]["args"]);
    for field in [
        "image",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
        "volumeMounts",
        "env",
    ] {
        assert_eq!(
            c["containers"][0][field], d["containers"][0][field],
            "container {field}"
        );
    }
    assert_eq!(c["securityContext"], d["securityContext"]);
    assert_eq!(c["volumes"], d["volumes"]);
    assert_eq!(
        one(&chart, "Deployment")["spec"]["replicas"],
        one(&deploy, "Deployment")["spec"]["replicas"]
    );
    // The same Services (metrics, the conversion webhook), by name and ports.
    let services = |objects: &[Value]| {
        let mut s: Vec<String> = of_kind(objects, &["Service"])
            .iter()
            .map(|s| format!("{} {}", s["metadata"]["name"], s["spec"]["ports"]))
            .collect();
        s.sort();
        s
    };
    assert_eq!(services(&chart), services(&deploy));
    assert!(services(&chart)[0].starts_with("\"kiln-metrics\""));
}

/// Every grant of the roles of `kind` among `objects`, one line each:
/// `namespace group/resource[/name] verb` (`*` for every name).
fn grants(objects: &[Value], kind: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for role in of_kind(objects, &[kind]) {
        let ns = role["metadata"]["namespace"].as_str().unwrap_or("*");
        for rule in role["rules"].as_array().unwrap() {
            let list = |field: &str| -> Vec<String> {
                rule[field].as_array().map_or_else(
                    || vec!["*".to_string()],
                    |a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect(),
                )
            };
            for group in list("apiGroups") {
                for resource in list("resources") {
                    for name in list("resourceNames") {
                        for verb in list("verbs") {
                            out.insert(format!("{ns} {group}/{resource}/{name} {verb}"));
                        }
                    }
                }
            }
        }
    }
    out
}

/// `kiln rbac --rules DIR`, as JSON documents.
fn kiln_rbac(rules: &Path) -> Vec<Value> {
    kiln_rbac_with(rules, &[])
}

/// `kiln rbac --rules DIR ARGS…`, as JSON documents.
fn kiln_rbac_with(rules: &Path, args: &[&str]) -> Vec<Value> {
    let text = run(Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["rbac", "--rules"])
        .arg(rules)
        .args(args));
    kiln::yaml::parse_documents(&text, kiln::yaml::Limits::default())
        .unwrap()
        .iter()
        .map(kiln::yaml::Node::to_json)
        .collect()
}

/// `kiln rbac`, the chart (with `kiln package`'s values) and `deploy/`
/// grant the same, grant for grant: cluster-wide only what the rules need,
/// Events and the Rule resources; kiln's Leases and ConfigMaps in its own
/// namespace only (no Lease anywhere else, e.g. `kube-system`'s).
#[test]
fn kiln_rbac_the_chart_and_deploy_grant_the_same_and_no_lease_cluster_wide() {
    let rules = support::repo_root().join("rules");
    let work = tempfile::tempdir().unwrap();
    let values = work.path().join("values.yaml");
    packaged_values(&rules, &values);
    let chart = template("kiln-system", &["-f", values.to_str().unwrap()]);
    let deploy = kustomize();
    let printed = kiln_rbac(&rules);
    for kind in ["ClusterRole", "Role"] {
        let from_kiln = grants(&printed, kind);
        assert!(!from_kiln.is_empty(), "{kind}");
        assert_eq!(grants(&chart, kind), from_kiln, "the chart's {kind}");
        assert_eq!(grants(&deploy, kind), from_kiln, "deploy's {kind}");
    }
    let cluster_wide = grants(&printed, "ClusterRole");
    assert!(
        !cluster_wide.iter().any(|g| g.contains("leases")),
        "{cluster_wide:#?}"
    );
    assert!(
        grants(&printed, "Role")
            .iter()
            .all(|g| g.starts_with("kiln-system ")),
        "kiln's own in its namespace only"
    );
}

/// The conversion webhook's Secret under another name (`kiln run
/// --conversion-secret`): `kiln rbac` grants that name, and the chart
/// (with `kiln package`'s values) both grants it and runs kiln with it.
#[test]
fn another_conversion_secret_name_is_granted_by_rbac_and_the_chart() {
    let rules = support::repo_root().join("rules");
    let work = tempfile::tempdir().unwrap();
    let values = work.path().join("values.yaml");
    run(Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["package", "--format", "helm-values", "--rules"])
        .arg(&rules)
        .args(["--conversion-secret", "webhook-certs", "--out"])
        .arg(&values));
    let printed = kiln_rbac_with(&rules, &["--conversion-secret", "webhook-certs"]);
    let own = grants(&printed, "Role");
    for verb in ["get", "patch"] {
        assert!(
            own.contains(&format!("kiln-system /secrets/webhook-certs {verb}")),
            "{own:#?}"
        );
    }
    assert!(
        !own.iter().any(|g| g.contains("kiln-conversion-webhook")),
        "{own:#?}"
    );
    let chart = template("kiln-system", &["-f", values.to_str().unwrap()]);
    assert_eq!(grants(&chart, "Role"), own, "the chart's Role");
    let args = &one(&chart, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array()
            .unwrap()
            .contains(&json!("--conversion-secret=webhook-certs")),
        "{args}"
    );
}

/// With rules that convert nothing, neither `kiln rbac` nor the chart
/// (its webhook Service on or off) grants any Secret of kiln's own.
#[test]
fn no_rule_converts_no_secret_is_granted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        support::repo_root().join("rules/webapp.yaml"),
        dir.path().join("webapp.yaml"),
    )
    .unwrap();
    let work = tempfile::tempdir().unwrap();
    let values = work.path().join("values.yaml");
    packaged_values(dir.path(), &values);
    let own = grants(&kiln_rbac(dir.path()), "Role");
    assert!(!own.iter().any(|g| g.contains("secrets")), "{own:#?}");
    for webhook in ["true", "false"] {
        let chart = template(
            "kiln-system",
            &[
                "-f",
                values.to_str().unwrap(),
                "--set",
                &format!("webhook.service.enabled={webhook}"),
            ],
        );
        assert_eq!(grants(&chart, "Role"), own, "webhook Service {webhook}");
    }
}

/// The values combinations the dry run renders: the packaged example rules
/// and each way of running kiln the chart offers.
fn combinations(values: &str) -> Vec<Vec<String>> {
    let set = |s: &str| {
        vec![
            "--set".to_string(),
            format!("{s},fullnameOverride=kiln-dry-run"),
        ]
    };
    let mut packaged = vec!["-f".to_string(), values.to_string()];
    packaged.extend(set(
        "webhook.service.enabled=true,webhook.networkPolicy.enabled=true,webhook.networkPolicy.apiServerCIDRs={10.0.0.0/24}",
    ));
    vec![
        packaged,
        set("rules.source=resources"),
        set("rules.existingConfigMap=my-rules"),
        set("mode=shards,replicas=3,shardGroup=tenants"),
        set(
            "podDisruptionBudget.enabled=false,metrics.service.enabled=false,rbac.create=false,serviceAccount.create=false,serviceAccount.name=kiln-sa",
        ),
        set(
            "watchNamespaces={a,b},pruneOnRuleRemoval=true,logLevel=debug,extraArgs={--request-timeout=30s}",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_passes_server_side_dry_run() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "chart").await;
    let work = tempfile::tempdir().unwrap();
    let values = work.path().join("values.yaml");
    packaged_values(&support::repo_root().join("rules"), &values);
    // Every combination, with its CRD; everything but the Prometheus
    // Operator's kinds, whose CRDs this control plane does not have (helm
    // lint checks those).
    for args in combinations(values.to_str().unwrap()) {
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.push("--include-crds");
        let objects = template(ns.name(), &args);
        for obj in &objects {
            apply(&client, obj, true).await.unwrap_or_else(|e| {
                panic!(
                    "{args:?}: {} {} refused: {e}",
                    obj["kind"], obj["metadata"]["name"]
                )
            });
        }
    }
    let objects = template(
        ns.name(),
        &[
            "-f",
            values.to_str().unwrap(),
            "--set",
            "webhook.service.enabled=true",
        ],
    );
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for k in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
    ] {
        assert!(kinds.contains(&k), "the chart lacks a {k}: {kinds:?}");
    }
    let sharded = template(ns.name(), &["--set", "mode=shards,replicas=3"]);
    let args = &one(&sharded, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array().unwrap().contains(&json!("--shards")),
        "{args}"
    );
    assert!(
        !args.as_array().unwrap().contains(&json!("--leader-elect")),
        "{args}"
    );
    // No rules given: kiln is told an empty set is expected, or it would
    // refuse to start.
    assert!(
        args.as_array()
            .unwrap()
            .contains(&json!("--allow-empty-rules")),
        "{args}"
    );
    ns.delete().await;
}

#[test]
fn with_rules_from_resources_the_chart_runs_the_rule_objects_and_makes_no_configmap() {
    let objects = template("kiln-system", &["--set", "rules.source=resources"]);
    assert!(of_kind(&objects, &["ConfigMap"]).is_empty(), "{objects:#?}");
    let pod = &one(&objects, "Deployment")["spec"]["template"]["spec"];
    let args: Vec<&str> = pod["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--rules-from-cluster"), "{args:?}");
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--rules=") || a.starts_with("--rules-configmap")),
        "{args:?}"
    );
    assert!(pod.get("volumes").is_none(), "{pod}");
    // The role reads the Rules and writes their status with no packaged
    // rules too, as `kiln rbac` always grants.
    let role = rule_set(one(&objects, "ClusterRole"));
    assert!(
        role.iter().any(|r| r.contains("\"rules/status\"")),
        "{role:?}"
    );
    assert!(
        role.iter()
            .any(|r| r.contains("\"rules\"") && r.contains("\"watch\"")),
        "{role:?}"
    );
}

#[test]
fn the_kustomize_package_replaces_the_base_s_rules_and_role() {
    let work = tempfile::tempdir().unwrap();
    let overlay = work.path().join("overlay");
    let deploy = support::repo_root().join("deploy");
    run(Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["package", "--format", "kustomize", "--rules"])
        .arg(support::repo_root().join("examples/my-platform/rules"))
        .arg("--base")
        .arg(&deploy)
        .arg("--out")
        .arg(&overlay));
    let objects = kustomize_dir(&overlay);
    let cm = one(&objects, "ConfigMap");
    let keys: Vec<&String> = cm["data"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["team-config.yaml"], "only the packaged rules remain");
    assert_eq!(cm["metadata"]["namespace"], "kiln-system");
    let role = rule_set(one(&objects, "ClusterRole"));
    assert!(
        role.iter().any(|r| r.contains("networkpolicies")),
        "{role:?}"
    );
    assert!(
        !role.iter().any(|r| r.contains("demo.kiln.dev")),
        "the base's permissions are gone: {role:?}"
    );
    // kiln's Role in its namespace holds what `kiln rbac` gives the
    // packaged rules (no Secret: none converts).
    let packaged = kiln_rbac(&support::repo_root().join("examples/my-platform/rules"));
    assert_eq!(grants(&objects, "Role"), grants(&packaged, "Role"));
    // The rest of the base is unchanged.
    let base = kustomize();
    assert_eq!(one(&objects, "Deployment"), one(&base, "Deployment"));
}

/// Every metric name in `text`: `kiln_…`, `controller_runtime_…`, `workqueue_…`.
fn metric_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| {
            ["kiln_", "controller_runtime_", "workqueue_"]
                .iter()
                .any(|p| w.starts_with(p))
        })
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_alerts_and_the_dashboard_use_metrics_kiln_exports() {
    let objects = template(
        "kiln-system",
        &[
            "--set",
            "metrics.prometheusRule.enabled=true,metrics.dashboard.enabled=true",
        ],
    );
    let sharded = template(
        "kiln-system",
        &["--set", "mode=shards,metrics.prometheusRule.enabled=true"],
    );
    let text = format!(
        "{}\n{}\n{}",
        one(&objects, "PrometheusRule")["spec"],
        one(&sharded, "PrometheusRule")["spec"],
        objects
            .iter()
            .find(|o| o["metadata"]["name"] == "kiln-dashboard")
            .expect("the dashboard ConfigMap")["data"]["kiln.json"]
            .as_str()
            .unwrap()
    );
    let source = std::fs::read_to_string(support::repo_root().join("src/metrics.rs")).unwrap();
    let names = metric_names(&text);
    assert!(names.len() >= 10, "{names:?}");
    for name in names {
        // Counters are registered without `_total`; histograms are read
        // through their `_bucket` series.
        let registered = ["_total", "_bucket"]
            .iter()
            .fold(name.as_str(), |n, suffix| {
                n.strip_suffix(suffix).unwrap_or(n)
            });
        assert!(
            source.contains(&format!("\"{registered}\"")),
            "{name} is not a metric kiln exports (src/metrics.rs)"
        );
    }
}
