//! The `kiln` binary's command line, run as a user would.
#![allow(clippy::unwrap_used, missing_docs, reason = "test code")]

use std::process::Command;

fn kiln(args: &[&str]) -> (bool, String, String) {
    kiln_in(std::path::Path::new("."), args)
}

/// `kiln ARGS…` run in `dir`: whether it succeeded, stdout, stderr.
fn kiln_in(dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn version_names_kiln_and_the_kubernetes_api() {
    let (ok, out, _) = kiln(&["version"]);
    assert!(ok);
    assert_eq!(
        out.trim(),
        format!("kiln {} (Kubernetes API 1.36)", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn help_lists_the_subcommands() {
    let (ok, out, _) = kiln(&["--help"]);
    assert!(ok);
    for sub in ["version", "controlplane"] {
        assert!(out.contains(sub), "--help lacks {sub}:\n{out}");
    }
}

#[test]
fn controlplane_down_without_a_running_one_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, err) = kiln(&[
        "controlplane",
        "down",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("no running control plane recorded in"),
        "{err}"
    );
}

#[test]
fn the_shipped_rules_validate() {
    let (ok, out, err) = kiln(&["validate", concat!(env!("CARGO_MANIFEST_DIR"), "/rules")]);
    assert!(ok, "{err}");
    assert!(out.starts_with("ok: 8 rules in 8 files"), "{out}");
    assert!(
        out.contains("note: webapps.apps.demo.kiln.dev has several versions: kiln run serves it only with the conversion webhook (--conversion-addr"),
        "{out}"
    );
}

#[test]
fn the_committed_json_schema_is_fresh() {
    let (ok, out, _) = kiln(&["schema"]);
    assert!(ok);
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/rules/rule.schema.json"
    ))
    .unwrap();
    assert_eq!(
        out.trim(),
        committed.trim(),
        "rules/rule.schema.json is stale: run `cargo run -- schema > rules/rule.schema.json`"
    );
    let schema: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(schema["title"], "Kiln Rule");
    assert!(schema["properties"]["spec"].is_object());
}

fn kiln_in_repo(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn deploy_generated_files_are_fresh() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, args) in [
        (
            "deploy/clusterrole.yaml",
            &["rbac", "--rules", "rules/"][..],
        ),
        (
            "deploy/rules-configmap.yaml",
            &["configmap", "--rules", "rules/"][..],
        ),
    ] {
        let committed = std::fs::read_to_string(root.join(file)).unwrap();
        assert_eq!(
            kiln_in_repo(args),
            committed,
            "{file} is stale: run `make deploy-manifests`"
        );
    }
}

#[test]
fn deploy_and_the_chart_ship_the_same_rule_crd() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    assert_eq!(
        read("deploy/rule-crd.yaml"),
        read("charts/kiln/crds/rules.kiln.dev.yaml"),
        "deploy/rule-crd.yaml and charts/kiln/crds/rules.kiln.dev.yaml differ"
    );
}

#[test]
fn the_committed_staticsite_crd_is_kiln_crd_output() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let committed = std::fs::read_to_string(root.join("examples/staticsite/crd.yaml")).unwrap();
    assert_eq!(
        kiln_in_repo(&["crd", "--rules", "rules/staticsite.yaml"]),
        committed,
        "examples/staticsite/crd.yaml is stale: run `kiln crd --rules rules/staticsite.yaml > examples/staticsite/crd.yaml`"
    );
}

#[test]
fn crd_compare_names_each_breaking_change_against_the_committed_crd() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let committed = root.join("examples/staticsite/crd.yaml");
    let committed = committed.to_str().unwrap();
    let rules = root.join("rules/staticsite.yaml");
    let (ok, out, _) = kiln(&[
        "crd",
        "--rules",
        rules.to_str().unwrap(),
        "--compare",
        committed,
    ]);
    assert!(ok);
    assert_eq!(out, "staticsites.demo.kiln.dev: no breaking change\n");
    let dir = tempfile::tempdir().unwrap();
    let narrower = std::fs::read_to_string(&rules)
        .unwrap()
        .replace("maximum=5", "maximum=3")
        .replace("            tags: \"[]string | uniqueItems=true\"\n", "");
    let edited = dir.path().join("staticsite.yaml");
    std::fs::write(&edited, narrower).unwrap();
    let (ok, out, _) = kiln(&[
        "crd",
        "--rules",
        edited.to_str().unwrap(),
        "--compare",
        committed,
    ]);
    assert!(!ok, "a change kiln run would refuse fails the comparison");
    assert_eq!(
        out,
        "staticsites.demo.kiln.dev: 2 breaking change(s), kiln run refuses them unless the rule sets spec.api.allowBreakingChanges: true:\n  v1 `spec.replicas`: maximum lowered from 5 to 3\n  v1 `spec.tags`: the field was removed\n"
    );
}

#[test]
fn crd_compare_names_a_map_made_an_object_whose_other_keys_would_be_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let rule = |env: &str| {
        format!(
            "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: sites}}\nspec:\n  api:\n    group: sites.example.com\n    kind: Site\n    versions:\n      - name: v1\n        schema:\n          spec:\n            env: {env}\n"
        )
    };
    let file = dir.path().join("rule.yaml");
    std::fs::write(&file, rule("\"map[string]string\"")).unwrap();
    let file = file.to_str().unwrap();
    let (ok, committed, err) = kiln(&["crd", "--rules", file]);
    assert!(ok, "{err}");
    let old = dir.path().join("crd.yaml");
    std::fs::write(&old, committed).unwrap();
    std::fs::write(file, rule("{A: string}")).unwrap();
    let (ok, out, _) = kiln(&["crd", "--rules", file, "--compare", old.to_str().unwrap()]);
    assert!(!ok, "kiln run would refuse it");
    assert!(
        out.contains("v1 `spec.env`: a map became an object with fixed fields: every stored key but `A` is pruned, for good"),
        "{out}"
    );
}

#[test]
fn crd_compare_reads_the_crds_of_a_list_as_kubectl_get_crds_prints_them() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let committed = std::fs::read_to_string(root.join("examples/staticsite/crd.yaml")).unwrap();
    let crd: serde_json::Value =
        serde_norway::from_str(committed.trim_start_matches("---\n")).unwrap();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [crd]});
    let dir = tempfile::tempdir().unwrap();
    let current = dir.path().join("crds.yaml");
    std::fs::write(&current, serde_json::to_string(&list).unwrap()).unwrap();
    let narrower = std::fs::read_to_string(root.join("rules/staticsite.yaml"))
        .unwrap()
        .replace("maximum=5", "maximum=3");
    let edited = dir.path().join("staticsite.yaml");
    std::fs::write(&edited, narrower).unwrap();
    let (ok, out, _) = kiln(&[
        "crd",
        "--rules",
        edited.to_str().unwrap(),
        "--compare",
        current.to_str().unwrap(),
    ]);
    assert!(!ok, "kiln run would refuse it: {out}");
    assert!(
        out.contains("v1 `spec.replicas`: maximum lowered from 5 to 3"),
        "{out}"
    );
}

#[test]
fn crd_prints_a_crd_with_several_versions_only_pointed_at_the_webhook() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let (ok, out, err) = kiln_in(root, &["crd", "--rules", "rules/webapp-api.yaml"]);
    assert!(!ok, "without the webhook's endpoint nothing is printed");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("webapps.apps.demo.kiln.dev has several versions (v1, v1alpha1)")
            && err.contains(
                "--conversion-service NAMESPACE/NAME[:PORT] or --conversion-url https://HOST:PORT"
            ),
        "{err}"
    );
    let printed = kiln_in_repo(&[
        "crd",
        "--rules",
        "rules/webapp-api.yaml",
        "--conversion-service",
        "kiln-system/kiln-webhook:443",
    ]);
    let crd: serde_json::Value =
        serde_norway::from_str(printed.trim_start_matches("---\n")).unwrap();
    assert_eq!(
        crd["spec"]["conversion"],
        serde_json::json!({"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": "kiln-system", "name": "kiln-webhook", "port": 443, "path": "/convert"}},
        }}),
        "pointed at the webhook; kiln run adds the CA bundle"
    );
    let committed = std::fs::read_to_string(root.join("examples/webapp-api/crd.yaml")).unwrap();
    assert_eq!(
        printed, committed,
        "examples/webapp-api/crd.yaml is stale: run `kiln crd --rules rules/webapp-api.yaml --conversion-service kiln-system/kiln-webhook:443 > examples/webapp-api/crd.yaml`"
    );
    let (ok, out, _) = kiln_in(root, &["crd", "--rules", "rules/staticsite.yaml"]);
    assert!(
        ok && out.contains("staticsites.demo.kiln.dev"),
        "one version needs no webhook"
    );
}

#[test]
fn validate_with_a_crd_finds_a_misspelled_spec_field_at_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let rule = dir.path().join("rule.yaml");
    std::fs::write(
        &rule,
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {name: typo}\nspec:\n  for: {apiVersion: demo.kiln.dev/v1, kind: WebApp}\n  children:\n    - id: cm\n      template:\n        apiVersion: v1\n        kind: ConfigMap\n        metadata: {name: \"{{ self.metadata.name }}\"}\n        data: {image: \"{{ self.spec.imagee }}\"}\n",
    )
    .unwrap();
    let rule = rule.to_str().unwrap();
    let (ok, _, err) = kiln(&["validate", rule]);
    assert!(ok, "without the CRD the schema is not known: {err}");
    let crd = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/webapp/crd.yaml");
    let (ok, _, err) = kiln(&["validate", "--crd", crd, rule]);
    assert!(!ok);
    assert!(
        err.contains(&format!("{rule}:12:16"))
            && err.contains("`self.spec.imagee` is not declared in the schema of WebApp (webapps.demo.kiln.dev) (`self.spec` has image, replicas, port, secretName, config)"),
        "{err}"
    );
}

#[test]
fn render_applies_the_defaults_of_a_rule_defined_api() {
    let out = kiln_in_repo(&[
        "render",
        "--rules",
        "rules/staticsite.yaml",
        "--object",
        "examples/staticsite/staticsite.yaml",
    ]);
    assert!(out.contains("replicas: 1\n"), "replicas defaulted:\n{out}");
    assert!(
        out.contains("demo.kiln.dev/theme: light\n"),
        "theme defaulted:\n{out}"
    );
}

#[test]
fn render_reads_a_primary_given_at_another_version_through_the_rules_conversions() {
    let out = kiln_in_repo(&[
        "render",
        "--rules",
        "rules/webapp-api.yaml",
        "--object",
        "examples/webapp-api/webapp-v1alpha1.yaml",
    ]);
    assert!(
        out.contains("reads examples/webapp-api/webapp-v1alpha1.yaml at apps.demo.kiln.dev/v1"),
        "{out}"
    );
    // v1alpha1's `nginx:1.27`, split into v1's repository and tag and
    // joined again by the rule's `vars.image`.
    assert!(out.contains("image: nginx:1.27\n"), "{out}");
    assert!(out.contains("containerPort: 80\n"), "{out}");
    // A version the API does not have is named with those it has.
    let dir = tempfile::tempdir().unwrap();
    let v2 = dir.path().join("v2.yaml");
    std::fs::write(
        &v2,
        "apiVersion: apps.demo.kiln.dev/v2\nkind: WebApp\nmetadata: {name: x, namespace: default}\nspec: {}\n",
    )
    .unwrap();
    let (ok, _, err) = kiln(&[
        "render",
        "--rules",
        "rules/webapp-api.yaml",
        "--object",
        v2.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("webapps.apps.demo.kiln.dev has no version `v2` (versions: v1alpha1, v1)"),
        "{err}"
    );
}

#[test]
fn render_applies_the_defaults_of_a_crd_given() {
    let args = [
        "render",
        "--rules",
        "rules/webapp.yaml",
        "--object",
        "tests/fixtures/objects/webapp-without-port.yaml",
        "--related",
        "credentials=examples/webapp/secret.yaml",
    ];
    let (ok, _, err) = kiln(&args);
    assert!(!ok);
    assert!(err.contains("`self.spec.replicas` is undefined"), "{err}");
    let with = kiln_in_repo(&[&args[..], &["--crd", "examples/webapp/crd.yaml"]].concat());
    assert!(
        with.contains("replicas: 1\n"),
        "the CRD's default replicas:\n{with}"
    );
    assert!(
        with.contains("containerPort: 8080\n"),
        "the CRD's default port:\n{with}"
    );
}

#[test]
fn render_says_when_the_rule_does_not_select_the_object() {
    let dir = tempfile::tempdir().unwrap();
    let object = dir.path().join("ns.yaml");
    std::fs::write(
        &object,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: plain, labels: {other: x}}\n",
    )
    .unwrap();
    let (ok, out, err) = kiln(&[
        "render",
        "--rules",
        concat!(env!("CARGO_MANIFEST_DIR"), "/rules"),
        "--object",
        object.to_str().unwrap(),
    ]);
    assert!(!ok, "{out}");
    assert!(out.trim().is_empty(), "nothing is rendered: {out}");
    assert!(
        err.contains("rule `tenant` does not select")
            && err.contains("do not match spec.for.selector"),
        "{err}"
    );
}

#[test]
fn render_errors_never_show_a_secret_value() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(
        rules.join("leak.yaml"),
        r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: leak}
spec:
  for: {apiVersion: demo.kiln.dev/v1, kind: App}
  watches:
    - {name: creds, apiVersion: v1, kind: Secret, ref: {name: creds}}
  children:
    - id: cm
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ related.creds.data.password | b64decode }}"}
"#,
    )
    .unwrap();
    let object = dir.path().join("app.yaml");
    std::fs::write(&object, "apiVersion: demo.kiln.dev/v1\nkind: App\nmetadata: {name: a, namespace: t, uid: u}\nspec: {}\n").unwrap();
    let secret = dir.path().join("secret.yaml");
    // `Hunter2-Secret`: an invalid object name, so the error is about it.
    std::fs::write(&secret, "apiVersion: v1\nkind: Secret\nmetadata: {name: creds, namespace: t}\ndata: {password: SHVudGVyMi1TZWNyZXQ=}\n").unwrap();
    let (ok, out, err) = kiln(&[
        "render",
        "--rules",
        rules.to_str().unwrap(),
        "--object",
        object.to_str().unwrap(),
        "--related",
        &format!("creds={}", secret.display()),
    ]);
    assert!(!ok);
    assert!(
        err.contains("metadata.name `[redacted]` is not valid"),
        "{err}"
    );
    for output in [&out, &err] {
        assert!(
            !output.contains("Hunter2-Secret") && !output.contains("SHVudGVyMi1TZWNyZXQ="),
            "{output}"
        );
    }
}

#[test]
fn validate_explains_a_watch_that_reads_every_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let rule = dir.path().join("peers.yaml");
    std::fs::write(
        &rule,
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {name: peers}\nspec:\n  for: {apiVersion: demo.kiln.dev/v1, kind: App}\n  watches:\n    - {name: peers, apiVersion: v1, kind: ConfigMap, selector: {allNamespaces: true}}\n",
    )
    .unwrap();
    let (ok, out, err) = kiln(&["validate", rule.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        out.contains("note: rule `peers`: related.peers reads the ConfigMap objects it selects in every namespace kiln watches (allNamespaces)"),
        "{out}"
    );
}

#[test]
fn a_shard_identity_or_group_that_cannot_name_a_lease_is_refused_at_once() {
    let (ok, _, err) = kiln(&["run", "--shards", "--shard-identity", "Bench_0"]);
    assert!(!ok);
    assert!(
        err.contains("`Bench_0` cannot name a Lease"),
        "stderr: {err}"
    );
    let (ok, _, err) = kiln(&["run", "--shards", "--shard-group", "a.b"]);
    assert!(!ok);
    assert!(
        err.contains("`a.b` cannot be a shard group"),
        "stderr: {err}"
    );
}

/// A kubeconfig in `dir` naming an API server nobody answers on.
fn unreachable_kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\n\
         clusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: c, context: {cluster: c, user: u}}]\n\
         current-context: c\n",
    )
    .unwrap();
    kubeconfig
}

#[test]
fn kiln_run_without_the_webhook_refuses_an_api_with_several_versions_and_names_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/rules/webapp-api.yaml");
    let (ok, _, err) = kiln(&[
        "run",
        "--rules",
        rules,
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--metrics-bind-address",
        "0",
        "--health-probe-bind-address",
        "0",
    ]);
    assert!(!ok, "nothing started");
    assert!(
        err.contains("webapps.apps.demo.kiln.dev has several versions (v1, v1alpha1)")
            && err.contains(
                "Give --conversion-addr :9443 and --conversion-service NAMESPACE/NAME[:PORT]"
            ),
        "{err}"
    );
}

#[test]
fn a_log_that_is_not_a_terminal_is_plain_text() {
    use std::io::{BufRead, BufReader};
    // An API server nobody answers on: kiln starts, logs, and retries.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["run", "--rules", "rules/staticsite.yaml", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--metrics-bind-address", "127.0.0.1:0"])
        .args(["--health-probe-bind-address", "127.0.0.1:0"])
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref().take(50) {
        let line = line.unwrap();
        let started = line.contains("kiln running");
        seen.push(line);
        if started {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        seen.iter()
            .any(|l| l.contains("INFO kiln::commands::run: kiln running")),
        "{seen:#?}"
    );
    assert!(
        seen.iter().all(|l| !l.contains('\u{1b}')),
        "terminal colour codes in a piped log: {seen:#?}"
    );
}

#[test]
fn a_request_timeout_that_is_no_duration_is_refused_at_once() {
    let (ok, _, err) = kiln(&["run", "--rules", "rules/", "--request-timeout", "soon"]);
    assert!(!ok);
    assert!(err.contains("--request-timeout"), "stderr: {err}");
}

#[test]
fn the_example_repository_s_packaged_values_are_fresh() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/my-platform");
    let (ok, out, err) = kiln_in(
        &repo,
        &["package", "--rules", "rules/", "--format", "helm-values"],
    );
    assert!(ok, "{err}");
    let committed = std::fs::read_to_string(repo.join("kiln-values.yaml")).unwrap();
    assert_eq!(
        out, committed,
        "examples/my-platform/kiln-values.yaml is stale: run `make deploy-manifests`"
    );
}

#[test]
fn package_as_helm_values_holds_the_rule_files_and_what_kiln_rbac_grants() {
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/rules");
    let (ok, out, err) = kiln(&["package", "--rules", rules, "--format", "helm-values"]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("# Generated by `kiln package --rules "),
        "{out}"
    );
    let values: serde_json::Value = serde_norway::from_str(&out).unwrap();
    let files = values["rules"]["files"].as_object().unwrap();
    let shipped = std::fs::read_dir(rules)
        .unwrap()
        .filter(|e| {
            let path = e.as_ref().unwrap().path();
            path.extension().is_some_and(|x| x == "yaml")
                && !path.to_string_lossy().ends_with(".test.yaml")
        })
        .count();
    assert_eq!(files.len(), shipped, "{:?}", files.keys());
    let webapp = std::fs::read_to_string(format!("{rules}/webapp.yaml")).unwrap();
    assert_eq!(files["webapp.yaml"], webapp.as_str());
    let (ok, role, _) = kiln(&["rbac", "--rules", rules]);
    assert!(ok);
    // The ClusterRole first; the conversion webhook's Role and RoleBinding
    // (in kiln's namespace, which the chart's own Role covers) follow.
    let documents: Vec<&str> = role.split("\n---\n").collect();
    let role: serde_json::Value = serde_norway::from_str(documents[0]).unwrap();
    assert_eq!(values["rbac"]["rules"], role["rules"]);
    assert!(documents[1..].iter().any(|d| d.contains("kind: Role\n")));
}

#[test]
fn package_as_kustomize_writes_an_overlay_and_needs_its_base_and_directory() {
    const REMOTE: &str = "https://github.com/example/kiln//deploy?ref=v0.1.0";
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/my-platform/rules");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("overlay");
    let out_s = out.to_str().unwrap();
    let package = |extra: &[&str]| {
        let mut args = vec!["package", "--rules", rules, "--format", "kustomize"];
        args.extend_from_slice(extra);
        kiln(&args)
    };
    let (ok, _, err) = package(&["--out", out_s]);
    assert!(!ok);
    assert!(err.contains("--base"), "{err}");
    let (ok, _, err) = package(&["--base", REMOTE]);
    assert!(!ok);
    assert!(err.contains("--out"), "{err}");
    let (ok, _, err) = package(&["--base", REMOTE, "--out", out_s]);
    assert!(ok, "{err}");
    let read = |name: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(out.join(name)).unwrap();
        assert!(text.starts_with("# Generated by `kiln package"), "{text}");
        serde_norway::from_str(&text).unwrap()
    };
    let k = read("kustomization.yaml");
    assert_eq!(k["resources"], serde_json::json!([REMOTE]));
    let data = &read("rules-patch.yaml")[0]["value"];
    assert!(
        data["team-config.yaml"]
            .as_str()
            .unwrap()
            .contains("name: team-config")
    );
    let role = read("clusterrole-patch.yaml");
    assert!(
        role[0]["value"].to_string().contains("networkpolicies"),
        "{role}"
    );
}

#[test]
fn invalid_rules_are_not_packaged() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\n",
    )
    .unwrap();
    let (ok, out, err) = kiln(&[
        "package",
        "--rules",
        dir.path().to_str().unwrap(),
        "--format",
        "helm-values",
    ]);
    assert!(!ok);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("run `kiln validate`"), "{err}");
}

/// Installed as `kubectl-kiln`, the binary is a kubectl plugin: kubectl
/// finds it on PATH and runs it for `kubectl kiln …`, and its help names the
/// command the user typed.
#[test]
fn as_kubectl_kiln_it_is_a_kubectl_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("kubectl-kiln");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kiln"), &plugin).unwrap();
    let out = Command::new(&plugin).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("Usage: kubectl kiln [OPTIONS] <COMMAND>"),
        "{help}"
    );
    let out = Command::new(&plugin)
        .args(["explain", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("Usage: kubectl kiln explain"), "{help}");
    let out = Command::new(&plugin)
        .args(["validate", concat!(env!("CARGO_MANIFEST_DIR"), "/rules")])
        .output()
        .unwrap();
    assert!(out.status.success());

    // Through kubectl itself (the one built for the local control plane).
    let bins =
        kiln::controlplane::Binaries::locate(&kiln::controlplane::Binaries::default_source())
            .unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(bins.path("kubectl"))
        .env("PATH", path)
        .args(["kiln", "version"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8(out.stdout).unwrap().starts_with("kiln "));
}

/// `kiln test` with its exit code, stdout and stderr.
fn kiln_test(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("test")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn test_runs_the_cases_of_the_ported_chaospod() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/ported/chaospod");
    let (code, out, err) = kiln_test(&[dir]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("3 passed, 0 failed"), "{out}");
}

#[test]
fn test_runs_the_recorded_hook_answers_of_the_ported_hello_world() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/ported/hello-hook");
    let (code, out, err) = kiln_test(&[dir]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("3 passed, 0 failed"), "{out}");
}

/// A test file beside a copy of the webapp rule, with `expect` as given.
fn webapp_test(dir: &std::path::Path, expect: &str) -> std::path::PathBuf {
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/rules/webapp.yaml");
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/webapp");
    let file = dir.join("webapp.test.yaml");
    std::fs::write(
        &file,
        format!(
            "rules: [{rules}]\ncrds: [{examples}/crd.yaml]\ncases:\n  - name: replicas\n    primaryFile: {examples}/webapp.yaml\n    related:\n      credentials: {{apiVersion: v1, kind: Secret, metadata: {{name: shop-credentials}}, data: {{p: eA==}}}}\n    expect:\n{expect}"
        ),
    )
    .unwrap();
    file
}

#[test]
fn test_runs_the_cases_of_every_shipped_rule() {
    let (code, out, err) = kiln_test(&[concat!(env!("CARGO_MANIFEST_DIR"), "/rules")]);
    assert_eq!(code, Some(0), "{out}{err}");
    for rule in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/rules"))
        .unwrap()
        .flatten()
    {
        let name = rule.file_name().into_string().unwrap();
        if let Some(stem) = name.strip_suffix(".yaml").filter(|s| !s.ends_with(".test")) {
            assert!(
                out.contains(&format!(
                    "PASS {}",
                    rule.path()
                        .with_file_name(format!("{stem}.test.yaml"))
                        .display()
                )),
                "every shipped rule has a passing case: {stem}\n{out}"
            );
        }
    }
}

/// Runs a webapp case expecting the Deployment's `spec` given: exit code,
/// stdout, stderr and the JUnit XML written.
fn webapp_deployment_case(spec: &str) -> (Option<i32>, String, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = webapp_test(
        dir.path(),
        &format!(
            "      children:\n        - {{kind: Deployment, metadata: {{name: shop}}, spec: {spec}}}\n"
        ),
    );
    let junit = dir.path().join("junit.xml");
    let (code, out, err) = kiln_test(&[file.to_str().unwrap(), "--junit", junit.to_str().unwrap()]);
    (code, out, err, std::fs::read_to_string(&junit).unwrap())
}

#[test]
fn test_a_wrong_expectation_fails_naming_the_field() {
    let (code, out, err, xml) = webapp_deployment_case("{replicas: 5}");
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("FAIL "), "{out}");
    assert!(
        out.contains("children[Deployment shop].spec.replicas: expected 5, got 2"),
        "{out}"
    );
    assert!(xml.contains("tests=\"1\" failures=\"1\""), "{xml}");
    assert!(
        xml.contains(
            "<failure message=\"children[Deployment shop].spec.replicas: expected 5, got 2\""
        ),
        "{xml}"
    );
}

#[test]
fn test_passes_a_right_expectation_and_writes_junit() {
    let (code, out, err, xml) = webapp_deployment_case("{replicas: 2, paused: null}");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        xml.contains("tests=\"1\" failures=\"0\"") && xml.contains("name=\"replicas\"/>"),
        "{xml}"
    );
}

#[test]
fn test_bad_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = webapp_test(dir.path(), "      childrn: []\n");
    let (code, out, err) = kiln_test(&[file.to_str().unwrap()]);
    assert_eq!(code, Some(2), "an unknown field is bad input: {out}{err}");
    assert!(err.contains("childrn"), "{err}");
    let (code, _, _) = kiln_test(&[dir.path().join("nothing.test.yaml").to_str().unwrap()]);
    assert_eq!(code, Some(2));
}

/// A reader that stops reading (`kiln render … | head -1`) ends every
/// printing command quietly: exit 0, no panic, no word of the pipe. The
/// pipe's read end is closed before kiln writes a byte, so every write
/// fails with EPIPE.
#[test]
fn every_command_exits_quietly_when_its_reader_stops_reading() {
    let root = env!("CARGO_MANIFEST_DIR");
    let commands: &[&[&str]] = &[
        &[
            "render",
            "--rules",
            "rules/",
            "--object",
            "examples/tenant/namespace.yaml",
        ],
        &["rbac", "--rules", "rules/"],
        &[
            "crd",
            "--rules",
            "rules/",
            "--conversion-service",
            "kiln-system/kiln-webhook:443",
        ],
        &["configmap", "--rules", "rules/", "--name", "kiln-rules"],
        &["package", "--rules", "rules/", "--format", "helm-values"],
        &["validate", "rules/"],
        &["schema"],
        &["version"],
        &["--help"],
    ];
    for args in commands {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .current_dir(root)
            .args(*args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("panicked") && !stderr.contains("pipe"),
            "kiln {args:?}: {:?}, stderr: {stderr}",
            out.status
        );
    }
}
#[test]
fn the_committed_test_file_schema_is_fresh_and_takes_the_shipped_tests() {
    let (ok, out, _) = kiln(&["schema", "--tests"]);
    assert!(ok);
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/rules/test.schema.json"
    ))
    .unwrap();
    assert_eq!(
        out.trim(),
        committed.trim(),
        "rules/test.schema.json is stale: run `cargo run -- schema --tests > rules/test.schema.json`"
    );
    let schema: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(schema["title"], "Kiln rule tests");
    assert_eq!(schema["required"], serde_json::json!(["cases"]));
    // Every top-level key and case key of the shipped test files is one the
    // schema declares (it forbids any other).
    let case = &schema["$defs"]["Case"]["properties"];
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/rules")).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".test.yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let file: serde_json::Value = serde_norway::from_str(&text).unwrap();
        for key in file.as_object().unwrap().keys() {
            assert!(schema["properties"][key].is_object(), "{path:?}: {key}");
        }
        for c in file["cases"].as_array().unwrap() {
            for key in c.as_object().unwrap().keys() {
                assert!(case[key].is_object(), "{path:?}: case key {key}");
            }
        }
    }
}

/// `kiln diff` with rules that do not load, or a cluster it cannot reach:
/// exit 2 (as `kubectl diff` exits above 1 on an error), the reason on stderr.
#[test]
fn kiln_diff_exits_2_on_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {name: bad}\nspec: {for: {}}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["diff", "--rules"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.yaml:"), "{stderr}");

    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "diff",
            "--rules",
            concat!(env!("CARGO_MANIFEST_DIR"), "/rules/webapp.yaml"),
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(out.stdout.is_empty());
}

/// `kiln render` of a Widget `w` with one rule file holding `children`
/// (YAML under `spec.children`): whether it succeeded, stdout, stderr, and
/// the rule file's path.
fn render_widget(children: &str) -> (bool, String, String, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let rule = dir.path().join("r.yaml");
    std::fs::write(
        &rule,
        format!("apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: r}}\nspec:\n  for: {{apiVersion: test.kiln.dev/v1, kind: Widget}}\n  children:\n{children}"),
    )
    .unwrap();
    let object = dir.path().join("w.yaml");
    std::fs::write(
        &object,
        "apiVersion: test.kiln.dev/v1\nkind: Widget\nmetadata: {name: w, namespace: d, uid: u}\nspec: {}\n",
    )
    .unwrap();
    let (ok, out, err) = kiln(&[
        "render",
        "--rules",
        rule.to_str().unwrap(),
        "--object",
        object.to_str().unwrap(),
    ]);
    (ok, out, err, rule)
}

/// A template that fails in `kiln render` is pointed at in its rule file,
/// as `kiln validate` points at a problem: `--> FILE:LINE:COL`.
#[test]
fn kiln_render_points_a_failing_template_at_its_file_and_line() {
    let (ok, _, err, rule) = render_widget(
        "    - id: main\n      template:\n        apiVersion: v1\n        kind: ConfigMap\n        metadata: {name: \"{{ self.metadata.name }}\"}\n        data:\n          x: \"{{ self.spec.missing.deeper }}\"\n",
    );
    assert!(!ok);
    assert!(
        err.contains("spec.children[0].template.data.x: undefined value"),
        "{err}"
    );
    assert!(
        err.contains(&format!("  --> {}:13:11", rule.display())),
        "{err}"
    );
}

/// Offline, a child that reads another child is rendered with that child's
/// rendered form when no `--observed` file gives it, and render says so.
#[test]
fn kiln_render_reads_a_child_another_waits_for_as_rendered_and_says_so() {
    let (ok, out, err, _) = render_widget(
        "    - id: a\n      template:\n        apiVersion: v1\n        kind: ConfigMap\n        metadata: {name: \"{{ self.metadata.name }}-a\"}\n        data: {color: blue}\n    - id: b\n      template:\n        apiVersion: v1\n        kind: ConfigMap\n        metadata: {name: \"{{ self.metadata.name }}-b\"}\n        data: {copied: \"{{ children.a.data.color }}\"}\n",
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("# note: children.a is read as rendered (no --observed a=FILE given)"),
        "{out}"
    );
    assert!(out.contains("copied: blue"), "{out}");
}

#[test]
fn the_conversion_webhook_needs_to_know_where_the_api_server_reaches_it() {
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/rules/webapp-api.yaml");
    let (ok, _, err) = kiln(&["run", "--rules", rules, "--conversion-addr", ":9443"]);
    assert!(!ok);
    assert!(
        err.contains("--conversion-addr needs --conversion-service"),
        "{err}"
    );
    let (ok, _, err) = kiln(&[
        "run",
        "--rules",
        rules,
        "--conversion-addr",
        ":9443",
        "--conversion-url",
        "http://127.0.0.1:9443",
    ]);
    assert!(!ok);
    assert!(err.contains("must start with https://"), "{err}");
    let (ok, _, err) = kiln(&[
        "run",
        "--rules",
        rules,
        "--conversion-service",
        "kiln-system",
    ]);
    assert!(!ok);
    assert!(err.contains("expected NAMESPACE/NAME"), "{err}");
}

/// A child field that renders `none` is left out of what `kiln render`
/// prints (and the engine applies), not rendered as `null`.
#[test]
fn kiln_render_leaves_out_a_child_field_that_renders_none() {
    let (ok, out, err, _) = render_widget(
        "    - id: d\n      template:\n        apiVersion: apps/v1\n        kind: Deployment\n        metadata: {name: \"{{ self.metadata.name }}\"}\n        spec:\n          replicas: \"{{ self.spec.replicas if self.spec.replicas is defined else none }}\"\n          selector: {matchLabels: {app: w}}\n",
    );
    assert!(ok, "{err}");
    assert!(!out.contains("replicas"), "{out}");
    assert!(!out.contains("null"), "{out}");
    assert!(out.contains("matchLabels"), "{out}");
}

/// The schemas of KRO's examples (kubernetes-sigs/kro at
/// 0302e659ede72a24c62f9faa666b0045ebf39731, `examples/**`), each pasted
/// into `spec.api` unchanged (`tests/fixtures/kro/`), pass `kiln validate`;
/// those KRO's own parser refuses (a `default=` of several unquoted words),
/// kiln refuses too.
#[test]
fn kro_example_schemas_pasted_into_spec_api_validate_as_in_kro() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kro");
    let yaml_in = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        files
    };
    let accepted = yaml_in(&dir);
    assert!(accepted.len() >= 50, "{} examples", accepted.len());
    for file in accepted {
        let (ok, _, err) = kiln(&["validate", file.to_str().unwrap()]);
        assert!(ok, "{}: {err}", file.display());
    }
    for file in yaml_in(&dir.join("refused")) {
        let (ok, _, err) = kiln(&["validate", file.to_str().unwrap()]);
        assert!(!ok, "{} is refused by KRO", file.display());
        assert!(err.contains("has no value"), "{}: {err}", file.display());
    }
}

/// A rule's own Events and finalizer are checked at validate time: a
/// literal CamelCase reason, `Normal` or `Warning`, templates that compile
/// on `self`, `rule` and `outcome`; a finalizer that is a qualified name,
/// neither one the API server acts on nor in a domain Kubernetes or kiln
/// keeps (another controller's name is the author's to avoid).
#[test]
fn rule_events_and_finalizer_names_are_checked_at_validate_time() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.yaml");
    std::fs::write(
        &file,
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n  for: {apiVersion: test.kiln.dev/v1, kind: Widget}\n  deletion: {finalizer: orphan}\n  events:\n    - {reason: 'not camel', message: x}\n    - {reason: Synced, type: Info, message: x}\n    - {reason: Synced, message: '{{ children.x }}', when: related.y}\n",
    )
    .unwrap();
    let (ok, _, err) = kiln(&["validate", file.to_str().unwrap()]);
    assert!(!ok);
    for said in [
        "finalizer `orphan` is one the API server acts on itself",
        "reason `not camel` must be literal CamelCase",
        "type `Info`: `Normal` or `Warning`",
        "spec.events[2].when",
        "spec.events[2].message",
    ] {
        assert!(err.contains(said), "{said}:\n{err}");
    }
    let rule = |name: &str| {
        format!(
            "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: {name}}}\nspec:\n  for: {{apiVersion: test.kiln.dev/v1, kind: Widget}}\n  deletion: {{finalizer: finalizers.example.com}}\n"
        )
    };
    std::fs::write(&file, format!("{}---\n{}", rule("a"), rule("b"))).unwrap();
    let (ok, _, err) = kiln(&["validate", file.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("finalizer `finalizers.example.com` is already named by rule `a` on Widget"),
        "{err}"
    );
}

/// Every shipped test file (under `rules/` and `examples/`), each with
/// its rule file; each must have its snapshot.
fn snapshotted_tests() -> Vec<(std::path::PathBuf, std::path::PathBuf)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let mut dirs = vec![root.join("rules"), root.join("examples")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            let Some(stem) = name.strip_suffix(".test.yaml") else {
                continue;
            };
            assert!(
                path.with_file_name(format!("{stem}.test.snap")).exists(),
                "{} has no snapshot: run `kiln test --update`",
                path.display()
            );
            out.push((path.clone(), path.with_file_name(format!("{stem}.yaml"))));
        }
    }
    out.sort();
    out
}

/// The paths of every scalar under `value`, as JSON pointers from `at`.
fn leaves(value: &serde_json::Value, at: String, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                leaves(
                    v,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                leaves(v, format!("{at}/{i}"), out);
            }
        }
        serde_json::Value::Null => {}
        _ => out.push(at),
    }
}

/// `value` changed: a string gets a character more, a number one more, a
/// boolean the other value.
fn mutated(value: &serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::String(s) => serde_json::Value::String(format!("{s}x")),
        serde_json::Value::Bool(b) => serde_json::Value::Bool(!b),
        serde_json::Value::Number(n) => serde_json::json!(n.as_f64().unwrap() as i64 + 1),
        other => other.clone(),
    }
}

/// The test file, with every path it names made absolute and its rule
/// the one at `rule`, written into `dir` beside a copy of its snapshot.
fn relocated_test(
    test: &std::path::Path,
    rule: &std::path::Path,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    let here = test.parent().unwrap();
    let mut spec: serde_json::Value =
        serde_norway::from_str(&std::fs::read_to_string(test).unwrap()).unwrap();
    let absolute = |v: &serde_json::Value| serde_json::json!(here.join(v.as_str().unwrap()));
    spec["rules"] = serde_json::json!([rule]);
    if let Some(crds) = spec.get_mut("crds").and_then(|c| c.as_array_mut()) {
        for c in crds.iter_mut() {
            *c = absolute(c);
        }
    }
    for case in spec["cases"].as_array_mut().unwrap() {
        if case.get("primaryFile").is_some() {
            case["primaryFile"] = absolute(&case["primaryFile"]);
        }
    }
    let name = test.file_name().unwrap();
    let out = dir.join(name);
    std::fs::write(&out, serde_norway::to_string(&spec).unwrap()).unwrap();
    let snap = test.with_extension("snap");
    std::fs::copy(&snap, out.with_extension("snap")).unwrap();
    out
}

#[test]
fn mutating_any_rendered_field_of_a_shipped_rule_fails_its_tests() {
    let mut survived = Vec::new();
    let mut tried = 0;
    for (test, rule_file) in snapshotted_tests() {
        let dir = tempfile::tempdir().unwrap();
        let rule: serde_json::Value =
            serde_norway::from_str(&std::fs::read_to_string(&rule_file).unwrap()).unwrap();
        let copy = dir.path().join("rule.yaml");
        std::fs::write(&copy, serde_norway::to_string(&rule).unwrap()).unwrap();
        let relocated = relocated_test(&test, &copy, dir.path());
        // Unchanged, the relocated copy passes: each failure below is the
        // mutation's.
        let (code, out, err) = kiln_test(&[relocated.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{}: {out}{err}", test.display());
        let mut paths = Vec::new();
        for (i, _) in rule["spec"]["children"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let at = format!("/spec/children/{i}/template");
            leaves(
                rule.pointer(&at).unwrap_or(&serde_json::Value::Null),
                at,
                &mut paths,
            );
        }
        leaves(
            &rule["spec"]["status"]["fields"],
            "/spec/status/fields".into(),
            &mut paths,
        );
        for path in paths {
            let mut changed = rule.clone();
            let leaf = changed.pointer_mut(&path).unwrap();
            *leaf = mutated(leaf);
            std::fs::write(&copy, serde_norway::to_string(&changed).unwrap()).unwrap();
            let (code, _, _) = kiln_test(&[relocated.to_str().unwrap()]);
            tried += 1;
            if code == Some(0) {
                survived.push(format!("{}: {path}", rule_file.display()));
            }
        }
    }
    assert!(tried > 100, "only {tried} leaves mutated");
    assert!(
        survived.is_empty(),
        "these rendered fields can change with every test still passing:\n{}",
        survived.join("\n")
    );
}

#[test]
fn test_update_writes_a_snapshot_and_a_case_then_fails_on_any_difference() {
    let dir = tempfile::tempdir().unwrap();
    let file = webapp_test(dir.path(), "      children: []\n");
    let (code, out, err) = kiln_test(&[file.to_str().unwrap(), "--update"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let snap = dir.path().join("webapp.test.snap");
    assert!(
        out.contains(&format!("UPDATED {}", snap.display())),
        "{out}"
    );
    let (code, out, err) = kiln_test(&[file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "the snapshot holds:\n{out}{err}");
    let text = std::fs::read_to_string(&snap).unwrap();
    assert!(
        text.contains("    - name: http\n      port: 80\n"),
        "{text}"
    );
    std::fs::write(&snap, text.replace("      port: 80\n", "      port: 81\n")).unwrap();
    let (code, out, _) = kiln_test(&[file.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("children[Service default/shop].spec.ports[0].port: expected 81, got 80"),
        "{out}"
    );
}

#[test]
fn a_sample_secret_given_with_string_data_is_read_as_stored_and_a_missing_operand_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let secret = |name: &str, body: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: shop-credentials, namespace: default}}\n{body}"),
        )
        .unwrap();
        path
    };
    let render = |secret: &std::path::Path| {
        kiln(&[
            "render",
            "--rules",
            "rules/webapp.yaml",
            "--crd",
            "examples/webapp/crd.yaml",
            "--object",
            "examples/webapp/webapp.yaml",
            "--related",
            &format!("credentials={}", secret.display()),
        ])
    };
    let hash = |out: &str| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix("kiln.dev/credentials-hash: "))
            .map(str::to_string)
    };
    let (ok, data, err) = render(&secret("data.yaml", "data: {password: aHVudGVyMg==}\n"));
    assert!(ok, "{err}");
    let (ok, string_data, err) =
        render(&secret("string.yaml", "stringData: {password: hunter2}\n"));
    assert!(ok, "stringData is stored as data:\n{err}");
    assert!(hash(&data).is_some());
    assert_eq!(hash(&data), hash(&string_data));
    let (ok, _, err) = render(&secret("empty.yaml", ""));
    assert!(!ok);
    assert!(
        err.contains(
            "undefined value: `related.credentials.data` is undefined (the input of `hmac_sha256`)"
        ),
        "{err}"
    );
}

#[test]
fn test_says_once_that_cel_validations_are_not_evaluated_offline() {
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/rules");
    let (code, out, err) = kiln_test(&[
        &format!("{rules}/staticsite.test.yaml"),
        &format!("{rules}/webapp-api.test.yaml"),
        &format!("{rules}/webapp.test.yaml"),
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let notes: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("validations not evaluated offline"))
        .collect();
    assert_eq!(notes.len(), 1, "{out}");
    assert!(notes[0].contains("staticsite"), "{out}");
    assert!(!notes[0].contains("webapp-api"), "{out}");
    // Without CEL rules, no note.
    let (_, out, _) = kiln_test(&[&format!("{rules}/webapp.test.yaml")]);
    assert!(!out.contains("not evaluated offline"), "{out}");
}

/// A rule on WebApps with the `children` given, written in `dir`.
fn typed_rule(dir: &std::path::Path, children: &str) -> String {
    let rule = dir.join("rule.yaml");
    let text = format!(
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: typed}}\nspec:\n  for: {{apiVersion: demo.kiln.dev/v1, kind: WebApp}}\n  children:\n{children}"
    );
    std::fs::write(&rule, text).unwrap();
    rule.to_str().unwrap().to_string()
}

#[test]
fn validate_refuses_a_field_the_child_kind_does_not_have_at_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let rule = typed_rule(
        dir.path(),
        "    - id: app\n      template:\n        apiVersion: apps/v1\n        kind: Deployment\n        metadata: {name: \"{{ self.metadata.name }}\"}\n        spec:\n          replicsa: \"{{ self.spec.replicas }}\"\n",
    );
    let (ok, _, err) = kiln(&["validate", &rule]);
    assert!(!ok, "{err}");
    assert!(
        err.contains(&format!("{rule}:13:11"))
            && err.contains(
                "apps/v1/Deployment: unknown field `replicsa` (did you mean `replicas`?)"
            ),
        "{err}"
    );
}

#[test]
fn validate_warns_when_an_immutable_field_is_templated_from_the_spec() {
    let dir = tempfile::tempdir().unwrap();
    let rule = typed_rule(
        dir.path(),
        "    - id: svc\n      template:\n        apiVersion: v1\n        kind: Service\n        metadata: {name: \"{{ self.metadata.name }}\"}\n        spec:\n          clusterIP: \"{{ self.spec.address }}\"\n          ports: [{port: \"{{ self.spec.port }}\"}]\n",
    );
    let (ok, out, err) = kiln(&["validate", &rule]);
    assert!(ok, "a warning does not refuse the rule: {err}");
    assert!(out.starts_with("ok: 1 rule"), "{out}");
    assert!(
        err.contains("warning: v1/Service: `spec.clusterIP` is immutable")
            && err.contains(&format!("{rule}:13:11")),
        "{err}"
    );
    assert!(!err.contains("spec.ports"), "ports may change: {err}");
}

#[test]
fn validate_says_once_which_child_kinds_it_cannot_type() {
    let dir = tempfile::tempdir().unwrap();
    let child = |id: &str| {
        format!(
            "    - id: {id}\n      template:\n        apiVersion: example.com/v1\n        kind: Gadget\n        metadata: {{name: \"{{{{ self.metadata.name }}}}-{id}\"}}\n        spec: {{anything: 1}}\n"
        )
    };
    let rule = typed_rule(dir.path(), &(child("a") + &child("b")));
    let (ok, out, err) = kiln(&["validate", &rule]);
    assert!(ok, "{err}");
    let note = "note: example.com/v1/Gadget is unchecked: kiln has no schema for it";
    assert_eq!(out.matches(note).count(), 1, "{out}");
}

/// `kiln render` of the rule in `dir` for a WebApp with `spec`.
fn render_typed(dir: &std::path::Path, rule: &str, spec: &str) -> (bool, String, String) {
    let object = dir.join("webapp.yaml");
    std::fs::write(
        &object,
        format!("apiVersion: demo.kiln.dev/v1\nkind: WebApp\nmetadata: {{name: shop, namespace: team}}\nspec: {spec}\n"),
    )
    .unwrap();
    kiln(&[
        "render",
        "--rules",
        rule,
        "--object",
        object.to_str().unwrap(),
    ])
}

#[test]
fn render_writes_an_integer_into_a_configmap_value_as_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let rule = typed_rule(
        dir.path(),
        "    - id: config\n      template:\n        apiVersion: v1\n        kind: ConfigMap\n        metadata: {name: \"{{ self.metadata.name }}\"}\n        data: {replicas: \"{{ self.spec.replicas }}\"}\n",
    );
    let (ok, out, err) = render_typed(dir.path(), &rule, "{replicas: 2}");
    assert!(ok, "{err}");
    assert!(out.contains("replicas: '2'\n"), "{out}");
}

#[test]
fn render_refuses_a_value_its_field_cannot_take_and_names_the_template_line() {
    let dir = tempfile::tempdir().unwrap();
    let rule = typed_rule(
        dir.path(),
        "    - id: app\n      template:\n        apiVersion: apps/v1\n        kind: Deployment\n        metadata: {name: \"{{ self.metadata.name }}\"}\n        spec:\n          replicas: \"{{ self.spec.size }}\"\n",
    );
    let (ok, _, err) = render_typed(dir.path(), &rule, "{size: large}");
    assert!(!ok);
    assert!(
        err.contains("spec.replicas: expected an integer, got the string \"large\"")
            && err.contains(&format!("(at {rule}:13:11)")),
        "{err}"
    );
    let (ok, out, err) = render_typed(dir.path(), &rule, "{size: \"3\"}");
    assert!(ok, "{err}");
    assert!(out.contains("replicas: 3\n"), "{out}");
}
