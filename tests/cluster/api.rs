//! Rules that define their own API (`spec.api`) against the real API
//! server: the CRD kiln generates is installed and Established, every
//! marker is enforced with its message, defaults are applied, an immutable
//! field cannot change, printer columns show in a Table; `kiln run` owns the
//! CRD; a breaking reload is refused unless allowed; a removed rule leaves
//! its CRD.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kiln::api::webhook::DEFAULT_SECRET;
use kiln::api::webhook::secret::{self, SecretError};
use kiln::metrics::Metrics;
use kiln::reload::{Checker, Loader, ReloadOptions, Teller, Version};
use kiln::rules::{self, load::Source};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::support::{self, KilnProcess, TestNamespace, eventually, until};

const CONVERGE: Duration = support::PATIENCE;

/// A rule defining `Site` in `group`, with `spec` fields (SimpleSchema lines)
/// and a ConfigMap child.
fn site_rule(name: &str, group: &str, spec: &str, extra_api: &str) -> String {
    format!(
        r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: {name}}}
spec:
  api:
    group: {group}
    kind: Site
{extra_api}    versions:
      - name: v1
        schema:
          spec:
{spec}          types:
            Page:
              name: string | required=true
              body: string | default="empty"
          validation:
            - expression: "!has(self.pages) || self.pages.all(p, p.name != 'admin')"
              message: "the page name admin is reserved"
          additionalPrinterColumns:
            - {{name: Domain, type: string, jsonPath: .spec.domain}}
            - {{name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}}
  children:
    - id: page
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: "{{{{ self.metadata.name }}}}-page"}}
        data: {{title: "{{{{ self.spec.title }}}}", theme: "{{{{ self.spec.theme }}}}"}}
"#
    )
}

const SPEC: &str = r#"            title: string | required=true minLength=2 maxLength=10
            domain: string | required=true immutable=true pattern="^[a-z.]+$"
            replicas: integer | default=1 minimum=1 maximum=5
            theme: string | default="light" enum="light,dark"
            pages: "[]Page | maxItems=2"
            tags: "[]string | uniqueItems=true minItems=1"
"#;

fn load(yaml: &str) -> rules::RuleSet {
    rules::load_sources(vec![source(yaml)]).unwrap_or_else(|d| panic!("{}", d[0]))
}

pub(crate) fn source(yaml: &str) -> Source {
    Source {
        file: "rule.yaml".into(),
        text: yaml.to_string(),
    }
}

pub(crate) fn sites(client: &Client, group: &str, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Site".into(),
        plural: "sites".into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

pub(crate) fn site(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "x/v1", "kind": "Site",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

pub(crate) async fn crd(client: &Client, name: &str) -> Option<Value> {
    Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
        .map(|c| serde_json::to_value(c).unwrap())
}

/// The apiVersion the typed object must carry for the group.
pub(crate) fn fix_version(mut obj: DynamicObject, group: &str) -> DynamicObject {
    obj.types = Some(kube::core::TypeMeta {
        api_version: format!("{group}/v1"),
        kind: "Site".into(),
    });
    obj
}

/// Creates a Site of each spec and checks the API server refuses it with
/// its message (each case: the marker, the spec, the message).
async fn each_refused(api: &Api<DynamicObject>, group: &str, refused: Vec<(&str, Value, &str)>) {
    for (i, (marker, spec, message)) in refused.into_iter().enumerate() {
        let obj = fix_version(site(&format!("bad-{i}"), spec), group);
        let err = api
            .create(&PostParams::default(), &obj)
            .await
            .expect_err(&format!("{marker}: a bad object was accepted"));
        assert!(
            err.to_string().contains(message),
            "{marker}: expected {message:?} in {err}"
        );
    }
}

#[tokio::test]
async fn a_rule_defined_api_enforces_its_markers_defaults_and_immutability() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "api-markers").await;
    let group = format!("markers{}.api.kiln.dev", std::process::id());
    let set = load(&site_rule("sites", &group, SPEC, ""));
    kiln::api::install::install_set(&client, None, &set)
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    let api = sites(&client, &group, ns.name());
    let good =
        json!({"title": "Docs", "domain": "docs.example", "tags": ["a"], "pages": [{"name": "x"}]});
    let with = |k: &str, v: Value| {
        let mut s = good.clone();
        s[k] = v;
        s
    };
    let without = |k: &str| {
        let mut s = good.clone();
        s.as_object_mut().unwrap().remove(k);
        s
    };
    let refused: Vec<(&str, Value, &str)> = vec![
        ("required", without("title"), "spec.title: Required value"),
        (
            "minLength",
            with("title", json!("D")),
            "spec.title: Invalid value",
        ),
        (
            "maxLength",
            with("title", json!("Documentation")),
            "spec.title: Too long",
        ),
        (
            "pattern",
            with("domain", json!("Docs!")),
            "spec.domain in body should match",
        ),
        (
            "minimum",
            with("replicas", json!(0)),
            "spec.replicas in body should be greater than or equal to 1",
        ),
        (
            "maximum",
            with("replicas", json!(6)),
            "spec.replicas in body should be less than or equal to 5",
        ),
        (
            "enum",
            with("theme", json!("blue")),
            "supported values: \"light\", \"dark\"",
        ),
        (
            "maxItems",
            with(
                "pages",
                json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]),
            ),
            "spec.pages: Too many",
        ),
        (
            "minItems",
            with("tags", json!([])),
            "spec.tags in body should have at least 1 items",
        ),
        (
            "uniqueItems",
            with("tags", json!(["a", "a"])),
            "spec.tags[1]: Duplicate value",
        ),
        (
            "type",
            with("replicas", json!("three")),
            "spec.replicas in body must be of type integer",
        ),
        (
            "validation",
            with("pages", json!([{"name": "admin"}])),
            "the page name admin is reserved",
        ),
        (
            "nested required",
            with("pages", json!([{"body": "b"}])),
            "spec.pages[0].name: Required value",
        ),
    ];
    each_refused(&api, &group, refused).await;
    let created = api
        .create(
            &PostParams::default(),
            &fix_version(site("good", good), &group),
        )
        .await
        .unwrap();
    let spec = &serde_json::to_value(&created).unwrap()["spec"];
    assert_eq!(spec["replicas"], 1, "default applied");
    assert_eq!(spec["theme"], "light", "default applied");
    assert_eq!(
        spec["pages"][0]["body"], "empty",
        "a named type's default applied"
    );

    let err = api
        .patch(
            "good",
            &PatchParams::apply("test").force(),
            &Patch::Apply(json!({"apiVersion": format!("{group}/v1"), "kind": "Site", "spec": {"domain": "other.example"}})),
        )
        .await
        .expect_err("an immutable field changed");
    assert!(err.to_string().contains("this field is immutable"), "{err}");

    // Printer columns: in the CRD and in a Table GET.
    let crd = crd(&client, &format!("sites.{group}")).await.unwrap();
    let columns = &crd["spec"]["versions"][0]["additionalPrinterColumns"];
    assert_eq!(columns[0]["name"], "Domain");
    assert_eq!(crd["metadata"]["annotations"]["kiln.dev/rule"], "sites");
    let request = http::Request::get(format!("/apis/{group}/v1/namespaces/{}/sites", ns.name()))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let table: Value = client.request(request).await.unwrap();
    let headers: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(headers, ["Name", "Domain", "Ready"]);
    assert_eq!(table["rows"][0]["cells"][1], "docs.example");
    ns.delete().await;
}

/// KRO's SimpleSchema as KRO writes it (its docs and examples): a nested
/// object without required fields whose fields have defaults is defaulted
/// to `{}` and so gets those defaults; `listType=map listMapKey=…` merges
/// and refuses duplicate keys; `validation="CEL"` is checked on the field;
/// a value in braces holds spaces.
const KRO_SPEC: &str = r#"            title: string | required=true
            domain: string | required=true
            theme: string | default="light"
            config:
              field: string
              field2: integer | default=200
            pages: '[]Page | listType=map listMapKey=name'
            replicas: integer | validation="self % 2 == 1" validation="self < 10"
            labels: 'map[string]string | default={"team": "web ops"}'
"#;

#[tokio::test]
async fn kro_simple_schema_pasted_unchanged_is_enforced_as_in_kro() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "api-kro").await;
    let group = format!("kro{}.api.kiln.dev", std::process::id());
    let set = load(&site_rule("sites", &group, KRO_SPEC, ""));
    kiln::api::install::install_set(&client, None, &set)
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    let api = sites(&client, &group, ns.name());
    let good = json!({"title": "Docs", "domain": "docs.example"});
    let with = |k: &str, v: Value| {
        let mut s = good.clone();
        s[k] = v;
        s
    };
    let refused: Vec<(&str, Value, &str)> = vec![
        (
            "listType=map",
            with("pages", json!([{"name": "a"}, {"name": "a"}])),
            "Duplicate value",
        ),
        (
            "validation",
            with("replicas", json!(2)),
            "validation failed",
        ),
        (
            "second validation",
            with("replicas", json!(11)),
            "validation failed",
        ),
    ];
    each_refused(&api, &group, refused).await;
    let created = api
        .create(
            &PostParams::default(),
            &fix_version(site("good", with("replicas", json!(3))), &group),
        )
        .await
        .unwrap();
    let spec = &serde_json::to_value(&created).unwrap()["spec"];
    assert_eq!(
        spec["config"],
        json!({"field2": 200}),
        "a nested object is created with its fields' defaults"
    );
    assert_eq!(spec["labels"], json!({"team": "web ops"}));
    ns.delete().await;
}

#[tokio::test]
async fn kiln_run_creates_its_crd_then_runs_the_rule_on_it() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "api-run").await;
    let group = format!("run{}.api.kiln.dev", std::process::id());
    let rule = site_rule("sites-run", &group, SPEC, "");
    let kiln = KilnProcess::start(&rule, &["--namespace", ns.name()]);
    let name = format!("sites.{group}");
    let established = eventually("the CRD is Established", CONVERGE, || async {
        let crd = crd(&client, &name).await?;
        let ok = crd["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        ok.then_some(crd)
    })
    .await;
    let managers: Vec<&str> = established["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["operation"] == "Apply")
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["kiln-api"]);
    sites(&client, &group, ns.name())
        .create(
            &PostParams::default(),
            &fix_version(
                site(
                    "one",
                    json!({"title": "One", "domain": "one.example", "tags": ["a"]}),
                ),
                &group,
            ),
        )
        .await
        .unwrap();
    let cm = eventually("the child ConfigMap", CONVERGE, || async {
        support::get(&client, "v1", "ConfigMap", ns.name(), "one-page").await
    })
    .await;
    assert_eq!(cm["data"], json!({"title": "One", "theme": "light"}));
    drop(kiln);
    ns.delete().await;
}

/// The rule set loader of `kiln run` (checking and installing what the
/// rules define in the cluster), started on `yaml`.
pub(crate) async fn reloader(client: &Client, yaml: &str) -> (Arc<Metrics>, Loader) {
    let set = load(yaml);
    kiln::api::install::install_set(client, None, &set)
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    let metrics = Arc::new(Metrics::new());
    let teller = Teller::new(client, None, Arc::new(|| true));
    let loader = Loader::first(
        version(vec![source(yaml)]),
        ReloadOptions::default(),
        metrics.clone(),
        teller,
    )
    .unwrap_or_else(|r| panic!("{:?}", r.diagnostics()))
    .checking(Checker::new(client.clone(), Vec::new()));
    (metrics, loader)
}

pub(crate) fn version(sources: Vec<Source>) -> Version {
    Version {
        sources,
        ..Version::default()
    }
}

#[tokio::test]
async fn a_breaking_reload_is_refused_unless_allowed_and_a_removed_rule_leaves_its_crd() {
    let client = support::admin_client().await;
    let group = format!("breaking{}.api.kiln.dev", std::process::id());
    let name = format!("sites.{group}");
    let (metrics, mut reloader) = reloader(&client, &site_rule("sites-b", &group, SPEC, "")).await;
    let fields = |crd: &Value| -> Vec<String> {
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    assert!(fields(&crd(&client, &name).await.unwrap()).contains(&"tags".to_string()));

    // `tags` removed, `replicas` bounded tighter: refused, nothing changes.
    let narrower = SPEC
        .replace(
            "            tags: \"[]string | uniqueItems=true minItems=1\"\n",
            "",
        )
        .replace("maximum=5", "maximum=3");
    reloader
        .consider(version(vec![source(&site_rule(
            "sites-b", &group, &narrower, "",
        ))]))
        .await;
    assert_eq!(
        metrics.reloads("error"),
        1,
        "the breaking reload was refused"
    );
    let after = crd(&client, &name).await.unwrap();
    assert!(
        fields(&after).contains(&"tags".to_string()),
        "the CRD is unchanged"
    );

    // The same change, allowed: applied.
    let allowed = site_rule(
        "sites-b",
        &group,
        &narrower,
        "    allowBreakingChanges: true\n",
    );
    reloader.consider(version(vec![source(&allowed)])).await;
    assert_eq!(metrics.reloads("success"), 1);
    let after = crd(&client, &name).await.unwrap();
    assert!(
        !fields(&after).contains(&"tags".to_string()),
        "the CRD was updated"
    );

    // The rule removed (another takes its place): the CRD stays.
    let other = "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {name: other}\nspec:\n  for: {apiVersion: v1, kind: Namespace}\n";
    reloader.consider(version(vec![source(other)])).await;
    assert_eq!(metrics.reloads("success"), 2);
    assert!(
        crd(&client, &name).await.is_some(),
        "kiln never deletes a CRD"
    );
}

#[tokio::test]
async fn the_role_kiln_rbac_prints_is_enough_to_create_and_update_the_crd() {
    let admin = support::admin_client().await;
    let ns = TestNamespace::new(&admin, "api-rbac").await;
    let group = format!("rbac{}.api.kiln.dev", std::process::id());
    let set = load(&site_rule("sites-rbac", &group, SPEC, ""));
    let role = kiln::rbac::cluster_role(&set, "x", &kiln::rbac::guess_plural);
    let crd_rules: Vec<Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["resources"][0] == "customresourcedefinitions")
        .cloned()
        .collect();
    assert_eq!(
        crd_rules,
        [
            json!({"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                "resourceNames": [format!("sites.{group}")], "verbs": ["create", "get", "list", "patch", "watch"]})
        ],
        "get, create and patch on the rule's own CRD, nothing on any other"
    );
    let token =
        support::service_account_token(&admin, ns.name(), "kiln", role["rules"].clone()).await;
    let kiln = support::token_client(&token).await;
    // RBAC takes a moment to see a new binding.
    until("the CRD created with kiln's role", CONVERGE, || async {
        kiln::api::install::install_set(&kiln, None, &set)
            .await
            .map_err(|r| r.diagnostics[0].message.clone())
    })
    .await;
    let changed = load(&site_rule(
        "sites-rbac",
        &group,
        &SPEC.replace("maximum=5", "maximum=9"),
        "",
    ));
    kiln::api::install::install_set(&kiln, Some(&set), &changed)
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    let crd = crd(&admin, &format!("sites.{group}")).await.unwrap();
    let replicas = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["replicas"];
    assert_eq!(replicas["maximum"].as_f64(), Some(9.0));
    ns.delete().await;
}

/// Whether `result` is the API server's 403.
fn forbidden(result: Result<kiln::api::webhook::certs::Material, SecretError>) -> bool {
    matches!(result, Err(SecretError::Api { source: kube::Error::Api(s), .. }) if s.code == 403)
}

#[tokio::test]
async fn the_webhook_role_kiln_rbac_prints_keeps_its_secret_in_kilns_namespace_only() {
    let admin = support::admin_client().await;
    let ns = TestNamespace::new(&admin, "api-rbac-secret").await;
    let other = TestNamespace::new(&admin, "api-rbac-other").await;
    let set = rules::load(&[support::repo_root().join("rules/webapp-api.yaml")])
        .unwrap_or_else(|d| panic!("{}", d[0]));
    let cluster = kiln::rbac::cluster_role(&set, "x", &kiln::rbac::guess_plural);
    assert!(
        !cluster["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"][0] == "secrets"),
        "no Secret granted cluster-wide"
    );
    let token =
        support::service_account_token(&admin, ns.name(), "kiln", cluster["rules"].clone()).await;
    let role = kiln::rbac::own_role(
        &set,
        "kiln-own",
        ns.name(),
        kiln::api::webhook::DEFAULT_SECRET,
    );
    support::apply(&admin, role, Some(ns.name())).await;
    let binding = kiln::rbac::own_role_binding("kiln-own", ns.name(), "kiln");
    support::apply(&admin, binding, Some(ns.name())).await;
    let kiln = support::token_client(&token).await;
    let secrets: Api<Secret> = Api::namespaced(kiln.clone(), ns.name());
    let validity = Duration::from_secs(600);
    let hosts = vec!["127.0.0.1".to_string()];
    // RBAC takes a moment to see a new binding.
    let made = until("the Secret made with kiln's Role", CONVERGE, || async {
        secret::ensure(&secrets, DEFAULT_SECRET, &hosts, validity, None)
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    // Renewed (for other hosts) by a patch on that one name.
    let renewed = secret::ensure(
        &secrets,
        DEFAULT_SECRET,
        &["localhost".into()],
        validity,
        None,
    )
    .await
    .unwrap();
    assert_ne!(renewed.ca, made.ca);
    // Any other Secret in kiln's namespace may be created (`create` cannot
    // be limited by name) but not read; none in another namespace.
    assert!(forbidden(
        secret::ensure(&secrets, "someone-elses", &hosts, validity, None).await
    ));
    let elsewhere: Api<Secret> = Api::namespaced(kiln, other.name());
    assert!(forbidden(
        secret::ensure(&elsewhere, DEFAULT_SECRET, &hosts, validity, None).await
    ));
    ns.delete().await;
    other.delete().await;
}

#[tokio::test]
async fn the_staticsite_example_is_defaulted_by_its_committed_crd_and_its_children_accepted() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "api-example").await;
    support::install_crds(&client, "examples/staticsite").await;
    let mut object = support::example("examples/staticsite/staticsite.yaml");
    object["metadata"]["namespace"] = json!(ns.name());
    support::apply(&client, object.clone(), Some(ns.name())).await;
    let stored = support::get(&client, "demo.kiln.dev/v1", "StaticSite", ns.name(), "docs")
        .await
        .unwrap();
    // What the API server stored is what `kiln render` renders from.
    let mut rendered_from = object;
    let set = rules::load(&[support::repo_root().join("rules/staticsite.yaml")])
        .unwrap_or_else(|d| panic!("{}", d[0]));
    let rule = set.get("staticsite").unwrap();
    kiln::api::defaults::apply(
        rule.api.as_ref().unwrap().schema("v1").unwrap(),
        &mut rendered_from,
    );
    assert_eq!(stored["spec"], rendered_from["spec"]);
    assert_eq!(stored["spec"]["replicas"], 1);
    assert_eq!(stored["spec"]["theme"], "light");
    let inputs = kiln::render::Inputs {
        primary: stored,
        ..kiln::render::Inputs::default()
    };
    let rendered = kiln::render::render(rule, &inputs, &kiln::render::well_known_scope).unwrap();
    for child in &rendered.children {
        let gvk = &child.gvk;
        let api = support::dynamic_api(
            &client,
            &json!(gvk.api_version()),
            &json!(gvk.kind),
            Some(ns.name()),
        )
        .await;
        let obj: DynamicObject = serde_json::from_value(child.object.clone()).unwrap();
        api.patch(
            &child.name,
            &PatchParams::apply("kiln").dry_run(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap_or_else(|e| panic!("{gvk} {} refused: {e}", child.name));
    }
    assert_eq!(rendered.children.len(), 3);
    ns.delete().await;
}

/// A CRD of `Gadget` in `group`, whose spec has `size` and, `with_color`,
/// `color` defaulting to `blue`.
fn gadget_crd(group: &str, with_color: bool) -> Value {
    let mut spec = json!({"size": {"type": "integer"}});
    if with_color {
        spec["color"] = json!({"type": "string", "default": "blue"});
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": spec},
                }}},
            }],
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_gaining_a_defaulted_field_refreshes_what_kiln_holds_of_its_objects() {
    use crate::support::scene::Scene;
    let scene = Scene::new("crd-default").await.projecting();
    let group = format!("refresh{}.api.kiln.dev", std::process::id());
    support::apply(&scene.client, gadget_crd(&group, false), None).await;
    let gvk = kube::api::GroupVersionKind::gvk(&group, "v1", "Gadget");
    support::wait_for_kind(&scene.client, &gvk, CONVERGE).await;
    let api_version = format!("{group}/v1");
    for name in ["g", "h"] {
        scene
            .apply(json!({"apiVersion": api_version, "kind": "Gadget",
                "metadata": {"name": name}, "spec": {"size": 1}}))
            .await;
    }
    let rule = support::rule_from_yaml(&format!(
        r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: gadgets}}
spec:
  for: {{apiVersion: {api_version}, kind: Gadget}}
  children:
    - id: cm
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: "{{{{ self.metadata.name }}}}-gadget"}}
        data: {{color: "{{{{ self.spec.color | default('unset') }}}}"}}
"#
    ));
    let scene = scene.running(&[rule]).await;
    let cm = ("v1", "ConfigMap", "g-gadget");
    scene
        .until("the child of the first schema", cm, |c| {
            c["data"]["color"] == "unset"
        })
        .await;
    // The CRD gains a defaulted field: the API server now gives it on every
    // read of `g`, which is not written again.
    support::apply(&scene.client, gadget_crd(&group, true), None).await;
    // Another object written meanwhile: kiln's watch moves past the
    // schema change, so resuming it needs no list again.
    for size in 2..6 {
        support::edit(
            &scene.client,
            (&api_version, "Gadget"),
            Some(scene.ns()),
            "h",
            json!({"spec": {"size": size}}),
        )
        .await;
    }
    scene
        .until("the child sees the default the API server gives", cm, |c| {
            c["data"]["color"] == "blue"
        })
        .await;
    scene.end().await;
}

/// A rule defining `Part` in `group` (one version), its spec the
/// SimpleSchema `fields`, with a ConfigMap child whose data is `data`.
fn part_rule(group: &str, fields: &str, data: &str) -> String {
    format!(
        r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: parts}}
spec:
  api:
    group: {group}
    kind: Part
    versions:
      - name: v1
        schema:
          spec:
{fields}  children:
    - id: cm
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: "{{{{ self.metadata.name }}}}-part"}}
        data: {data}
"#
    )
}

#[tokio::test]
async fn a_rule_defined_api_gaining_a_defaulted_field_is_read_with_it_after_the_reload() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "api-default").await;
    let group = format!("parts{}.api.kiln.dev", std::process::id());
    let size = "            size: integer\n";
    let kiln = KilnProcess::start(
        &part_rule(&group, size, r#"{size: "{{ self.spec.size | string }}"}"#),
        &["--namespace", ns.name()],
    );
    let gvk = kube::api::GroupVersionKind::gvk(&group, "v1", "Part");
    let ar = support::wait_for_kind(&client, &gvk, CONVERGE).await;
    let parts: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns.name(), &ar);
    for name in ["a", "b"] {
        let part = json!({"apiVersion": format!("{group}/v1"), "kind": "Part",
            "metadata": {"name": name}, "spec": {"size": 1}});
        parts
            .create(
                &PostParams::default(),
                &serde_json::from_value(part).unwrap(),
            )
            .await
            .unwrap();
    }
    let cm = |name: &'static str| {
        let client = client.clone();
        let ns = ns.name().to_string();
        async move { support::get(&client, "v1", "ConfigMap", &ns, name).await }
    };
    eventually("the child of the first version", CONVERGE, || async {
        cm("a-part").await.filter(|c| c["data"]["size"] == "1")
    })
    .await;
    // The rule gains `color` (default blue) and reads it.
    kiln.rewrite_rule(&part_rule(
        &group,
        &format!("{size}            color: string | default=\"blue\"\n"),
        r#"{color: "{{ self.spec.color }}"}"#,
    ));
    let name = format!("parts.{group}");
    eventually("kiln applied the new CRD", CONVERGE, || async {
        let crd = crd(&client, &name).await?;
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["color"]
            .is_object()
            .then_some(())
    })
    .await;
    // Another object written meanwhile: kiln's watch moves past the
    // schema change, so resuming it needs no list again.
    for size in 2..6 {
        support::edit(
            &client,
            (&format!("{group}/v1"), "Part"),
            Some(ns.name()),
            "b",
            json!({"spec": {"size": size}}),
        )
        .await;
    }
    eventually(
        "the child of `a` has the default the API server gives",
        CONVERGE,
        || async { cm("a-part").await.filter(|c| c["data"]["color"] == "blue") },
    )
    .await;
    drop(kiln);
    ns.delete().await;
}
