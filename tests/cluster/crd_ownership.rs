//! Whose CustomResourceDefinition is it? kiln writes only the CRDs it
//! created (or a rule adopted explicitly, when that breaks nothing):
//! another operator's CRD, kiln's own `rules.kiln.dev` and another kiln's
//! are never written, a change refused at start never runs, the conversion
//! keeper never points a foreign CRD at kiln, and an edit held back for
//! another reason writes no CRD.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kiln::metrics::Metrics;
use kiln::reload::{Checker, Loader, ReloadOptions, Teller, Version};
use kiln::rules::{self, load::Source};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::support::{self, KilnProcess, TestNamespace, eventually, free_port};

const CONVERGE: Duration = Duration::from_secs(120);

/// The field manager of the operator that owns the foreign CRDs.
const OTHER: &str = "other-operator";

/// A rule defining `Site` in `group` (spec fields as SimpleSchema lines),
/// with one ConfigMap child; `extra` goes under `spec.api`.
fn site_rule(name: &str, group: &str, fields: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: {name}}}
spec:
  api:
    group: {group}
    kind: Site
{extra}    versions:
      - name: v1
        schema:
          spec:
{fields}  children:
    - id: page
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: "{{{{ self.metadata.name }}}}-page"}}
        data: {{title: "{{{{ self.spec.title }}}}"}}
"#
    )
}

const FIELDS: &str = "            title: string\n            tags: \"[]string\"\n";

/// A rule on labelled ConfigMaps that copies each: a rule with no API of
/// its own, to show the others keep running.
fn copy_rule() -> String {
    r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: copies}
spec:
  for:
    apiVersion: v1
    kind: ConfigMap
    selector: {matchLabels: {copy: "yes"}}
  children:
    - id: copy
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-copy"}
        data: {from: "{{ self.metadata.name }}"}
"#
    .to_string()
}

fn source(yaml: &str) -> Source {
    Source {
        file: "rule.yaml".into(),
        text: yaml.to_string(),
    }
}

/// A version of the rules source: `yaml`, beside the copy rule the
/// loaders of these tests start with, so that an edit refused alone leaves
/// the rest of the source as it was (rules are accepted one by one).
fn version(yaml: &str) -> Version {
    let mut sources = vec![source(&copy_rule())];
    if yaml != copy_rule() {
        sources.push(Source {
            file: "edit.yaml".into(),
            text: yaml.to_string(),
        });
    }
    Version {
        sources,
        read_errors: Vec::new(),
        generations: std::collections::BTreeMap::new(),
    }
}

fn load(yaml: &str) -> rules::RuleSet {
    rules::load_sources(vec![source(yaml)]).unwrap_or_else(|d| panic!("{}", d[0]))
}

fn crds(client: &Client) -> Api<CustomResourceDefinition> {
    Api::all(client.clone())
}

async fn crd(client: &Client, name: &str) -> Value {
    serde_json::to_value(crds(client).get(name).await.unwrap()).unwrap()
}

/// The CRD `rule` defines, as another operator would have made it: no
/// kiln annotation, a printer column and a description of its own.
fn as_another_operator_makes_it(rule: &str) -> Value {
    let set = load(rule);
    let mut crd = set.rules[0].api.as_ref().unwrap().crd.clone();
    crd["metadata"]["annotations"] = json!({"example.com/owner": "other-operator"});
    for v in crd["spec"]["versions"].as_array_mut().unwrap() {
        v["additionalPrinterColumns"] =
            json!([{"name": "Theirs", "type": "string", "jsonPath": ".metadata.name"}]);
        v["schema"]["openAPIV3Schema"]["description"] = json!("the other operator's");
    }
    crd
}

/// Applies `crd` as the other operator and waits until it is Established.
async fn create_foreign(client: &Client, crd: &Value) -> Value {
    let name = crd["metadata"]["name"].as_str().unwrap().to_string();
    crds(client)
        .patch(&name, &PatchParams::apply(OTHER), &Patch::Apply(crd))
        .await
        .unwrap();
    established(client, &name).await
}

async fn established(client: &Client, name: &str) -> Value {
    eventually("the CRD is Established", CONVERGE, || async {
        let crd = crd(client, name).await;
        let ok = crd["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        ok.then_some(crd)
    })
    .await
}

/// The field managers that wrote the CRD's spec or metadata.
fn managers(crd: &Value) -> Vec<String> {
    crd["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["subresource"].as_str().unwrap_or_default().is_empty())
        .map(|m| m["manager"].as_str().unwrap().to_string())
        .collect()
}

/// The rule loader of `kiln run` on `first` (a set that defines no API),
/// checking with `client` and telling on the ConfigMap `ns/rules`.
async fn loader(client: &Client, checker: Client, ns: &str, first: &str) -> (Arc<Metrics>, Loader) {
    support::apply(
        client,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rules"}}),
        Some(ns),
    )
    .await;
    let metrics = Arc::new(Metrics::new());
    let teller = Teller::new(
        client,
        Some((ns.to_string(), "rules".to_string())),
        Arc::new(|| true),
    );
    let loader = Loader::first(
        version(first),
        ReloadOptions::default(),
        metrics.clone(),
        teller,
    )
    .unwrap_or_else(|r| panic!("{:?}", r.diagnostics()))
    .checking(Checker::new(checker, vec![ns.to_string()]));
    (metrics, loader)
}

/// The notes of the `RuleRefused` Events on the ConfigMap `ns/rules`.
async fn refusals(client: &Client, ns: &str) -> Vec<String> {
    support::events_about(client, ns, "rules", "RuleRefused")
        .await
        .into_iter()
        .filter_map(|e| e.note)
        .collect()
}

#[tokio::test]
async fn a_rule_naming_another_operators_crd_is_refused_and_the_crd_untouched() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "own-foreign").await;
    let group = format!("foreign{}.own.kiln.dev", std::process::id());
    let name = format!("sites.{group}");
    let rule = site_rule("sites-foreign", &group, FIELDS, "");
    let theirs = create_foreign(&client, &as_another_operator_makes_it(&rule)).await;
    let (metrics, mut loader) = loader(&client, client.clone(), ns.name(), &copy_rule()).await;

    // The rule breaks nothing stored, but the CRD is not kiln's: refused.
    loader.consider(version(&rule)).await;
    assert_eq!(metrics.reloads("error"), 1, "the rule was refused");
    assert_eq!(metrics.reloads("success"), 0);
    let after = crd(&client, &name).await;
    assert_eq!(
        after["metadata"]["resourceVersion"], theirs["metadata"]["resourceVersion"],
        "nothing was written to the other operator's CRD"
    );
    assert_eq!(managers(&after), [OTHER]);
    // The diagnostic names who wrote the CRD.
    let notes = eventually("a RuleRefused Event", CONVERGE, || async {
        let notes = refusals(&client, ns.name()).await;
        (!notes.is_empty()).then_some(notes)
    })
    .await;
    assert!(
        notes[0].contains("sites-foreign")
            && notes[0].contains(OTHER)
            && notes[0].contains("adopt"),
        "{notes:?}"
    );
    let _ = crds(&client).delete(&name, &Default::default()).await;
    ns.delete().await;
}

#[tokio::test]
async fn a_rule_naming_kilns_own_rules_crd_is_refused() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "own-rules-crd").await;
    support::install_crds(&client, "charts/kiln/crds").await;
    let before = crd(&client, "rules.kiln.dev").await;
    let (metrics, mut loader) = loader(&client, client.clone(), ns.name(), &copy_rule()).await;
    // A careless author defines kiln's own Rule kind, breaking changes and all.
    for extra in [
        "    allowBreakingChanges: true\n",
        "    allowBreakingChanges: true\n    adopt: true\n",
    ] {
        let rule = format!(
            r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: rules-again}}
spec:
  api:
    group: kiln.dev
    kind: Rule
    scope: Cluster
{extra}    versions:
      - name: v1alpha1
        schema:
          spec:
            anything: string
"#
        );
        loader.consider(version(&rule)).await;
    }
    assert_eq!(metrics.reloads("success"), 0, "no version was accepted");
    assert_eq!(metrics.reloads("error"), 2, "both were refused");
    let after = crd(&client, "rules.kiln.dev").await;
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "kiln's own Rule CRD untouched"
    );
    ns.delete().await;
}

#[tokio::test]
async fn a_breaking_change_refused_at_start_does_not_run() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "own-start").await;
    let group = format!("start{}.own.kiln.dev", std::process::id());
    let name = format!("sites.{group}");
    // kiln made the CRD with `tags`; the rule now drops `tags`.
    let before = site_rule("sites-start", &group, FIELDS, "");
    kiln::api::install::install_set(&client, None, &load(&before))
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    let installed = established(&client, &name).await;
    let site = json!({"apiVersion": format!("{group}/v1"), "kind": "Site",
        "metadata": {"name": "one"}, "spec": {"title": "One", "tags": ["a"]}});
    support::apply(&client, site, Some(ns.name())).await;

    let breaking = site_rule("sites-start", &group, "            title: string\n", "");
    let kiln = KilnProcess::start(
        &format!("{breaking}---\n{}", copy_rule()),
        &["--namespace", ns.name()],
    );
    eventually("the rule refused at start", CONVERGE, || async {
        let refused = kiln
            .metric("kiln_rule_edit_refused{rule=\"sites-start\"}")
            .await;
        (refused == Some(1.0)).then_some(())
    })
    .await;
    // The other rule runs.
    support::apply(
        &client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "trigger", "labels": {"copy": "yes"}}}),
        Some(ns.name()),
    )
    .await;
    eventually("the other rule's child", CONVERGE, || async {
        support::get(&client, "v1", "ConfigMap", ns.name(), "trigger-copy").await
    })
    .await;
    // The refused one does not: no child, and its CRD as it was.
    assert!(
        support::get(&client, "v1", "ConfigMap", ns.name(), "one-page")
            .await
            .is_none(),
        "the refused rule ran"
    );
    let after = crd(&client, &name).await;
    assert_eq!(
        after["metadata"]["resourceVersion"],
        installed["metadata"]["resourceVersion"]
    );
    drop(kiln);
    ns.delete().await;
}

#[tokio::test]
async fn a_rule_refused_at_start_does_not_hold_back_the_next_edit_of_another_rule() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "own-next").await;
    let group = format!("next{}.own.kiln.dev", std::process::id());
    let name = format!("sites.{group}");
    // kiln made the CRD with `tags`; the rule now drops `tags`: refused at
    // start, by the first install round.
    let before = site_rule("sites-next", &group, FIELDS, "");
    kiln::api::install::install_set(&client, None, &load(&before))
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    established(&client, &name).await;
    let breaking = site_rule("sites-next", &group, "            title: string\n", "");
    let kiln = KilnProcess::start(
        &format!("{breaking}---\n{}", copy_rule()),
        &["--namespace", ns.name()],
    );
    eventually("the rule refused at start", CONVERGE, || async {
        let refused = kiln
            .metric("kiln_rule_edit_refused{rule=\"sites-next\"}")
            .await;
        (refused == Some(1.0)).then_some(())
    })
    .await;
    trigger(&client, ns.name(), "first").await;
    eventually("the copy rule runs", CONVERGE, || async {
        support::get(&client, "v1", "ConfigMap", ns.name(), "first-copy").await
    })
    .await;

    // The copy rule is edited, the refused rule left as it is: the edit
    // runs, as an edit of any other rule would.
    let edited = copy_rule().replace("from: \"{{ self.metadata.name }}\"", "from: \"edited\"");
    assert_ne!(edited, copy_rule());
    kiln.rewrite_rule(&format!("{breaking}---\n{edited}"));
    trigger(&client, ns.name(), "second").await;
    eventually("the edited copy rule runs", CONVERGE, || async {
        let copy = support::get(&client, "v1", "ConfigMap", ns.name(), "second-copy").await?;
        (copy["data"]["from"] == "edited").then_some(())
    })
    .await;
    assert!(
        support::get(&client, "v1", "ConfigMap", ns.name(), "one-page")
            .await
            .is_none(),
        "the refused rule ran"
    );
    drop(kiln);
    let _ = crds(&client).delete(&name, &Default::default()).await;
    ns.delete().await;
}

#[tokio::test]
async fn a_crd_replaced_by_another_operators_while_its_rule_runs_is_not_reconciled() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "own-swapped").await;
    let group = format!("swapped{}.own.kiln.dev", std::process::id());
    let name = format!("sites.{group}");
    let rule = site_rule("sites-swapped", &group, FIELDS, "");
    let kiln = KilnProcess::start(
        &format!("{rule}---\n{}", copy_rule()),
        &["--namespace", ns.name()],
    );
    eventually("kiln creates the CRD", CONVERGE, || async {
        crds(&client).get_opt(&name).await.ok()?
    })
    .await;
    established(&client, &name).await;
    site(&client, &group, ns.name(), "one").await;
    eventually("the rule runs on kiln's CRD", CONVERGE, || async {
        support::get(&client, "v1", "ConfigMap", ns.name(), "one-page").await
    })
    .await;

    // Another operator deletes kiln's CRD and makes one of its own, with
    // an object of its own: kiln's rule does not run on them.
    crds(&client)
        .delete(&name, &Default::default())
        .await
        .unwrap();
    eventually("the CRD gone", CONVERGE, || async {
        match crds(&client).get_opt(&name).await {
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await;
    create_foreign(&client, &as_another_operator_makes_it(&rule)).await;
    eventually("the rule refused", CONVERGE, || async {
        let refused = kiln
            .metric("kiln_rule_refused{rule=\"sites-swapped\"}")
            .await;
        (refused == Some(1.0)).then_some(())
    })
    .await;
    site(&client, &group, ns.name(), "theirs").await;
    // The copy rule has run since: kiln is not merely slow.
    trigger(&client, ns.name(), "after").await;
    eventually("the other rule's child", CONVERGE, || async {
        support::get(&client, "v1", "ConfigMap", ns.name(), "after-copy").await
    })
    .await;
    assert!(
        support::get(&client, "v1", "ConfigMap", ns.name(), "theirs-page")
            .await
            .is_none(),
        "the rule ran on the other operator's CRD"
    );
    let theirs = support::get(&client, &format!("{group}/v1"), "Site", ns.name(), "theirs")
        .await
        .unwrap();
    assert!(
        theirs["metadata"].get("finalizers").is_none() && theirs.get("status").is_none(),
        "kiln wrote on the other operator's object: {theirs}"
    );
    drop(kiln);
    let _ = crds(&client).delete(&name, &Default::default()).await;
    ns.delete().await;
}

/// A rule defining `App` in `group` at `v1alpha1` and `v1` (storing), with
/// conversion templates between them.
fn app_rule(name: &str, group: &str) -> String {
    format!(
        r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: {name}}}
spec:
  for: {{apiVersion: {group}/v1, kind: App}}
  api:
    group: {group}
    kind: App
    versions:
      - name: v1alpha1
        schema:
          spec:
            image: string | required=true
        conversion:
          toStorage:
            spec:
              image: {{repository: "{{{{ self.spec.image }}}}"}}
          fromStorage:
            spec:
              image: "{{{{ self.spec.image.repository }}}}"
      - name: v1
        storage: true
        schema:
          spec:
            image:
              repository: string | required=true
"#
    )
}

/// `kiln run` of `rules` in `ns`, serving conversion (its keeper going
/// round every 2 s).
fn converting(rules: &str, ns: &str) -> KilnProcess {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let url = format!("https://127.0.0.1:{port}");
    let args = [
        "--conversion-addr",
        &addr,
        "--conversion-url",
        &url,
        "--conversion-namespace",
        ns,
        "--conversion-cert-validity",
        "40s",
        "--namespace",
        ns,
    ];
    KilnProcess::start(rules, &args)
}

fn pointed(crd: &Value) -> bool {
    crd["spec"]["conversion"]["strategy"] == "Webhook"
}

/// Waits until the CRD `name` is pointed at kiln's webhook.
async fn pointed_at_kiln(client: &Client, name: &str) {
    eventually("the CRD pointed at kiln", CONVERGE, || async {
        let c = crds(client).get_opt(name).await.ok()??;
        pointed(&serde_json::to_value(c).unwrap()).then_some(())
    })
    .await;
}

/// Points the CRD `name` away from any webhook, as another writer would.
async fn unpoint(client: &Client, name: &str) {
    let patch = json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}});
    crds(client)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_keeper_never_points_a_crd_replaced_by_another_operators_at_kiln() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "own-replaced").await;
    let pid = std::process::id();
    let (replaced, sentinel) = (
        format!("replaced{pid}.own.kiln.dev"),
        format!("sentinel{pid}.own.kiln.dev"),
    );
    let (replaced_crd, sentinel_crd) = (format!("apps.{replaced}"), format!("apps.{sentinel}"));
    // The keeper goes round the rules in this order.
    let rules = format!(
        "{}---\n{}",
        app_rule("replaced", &replaced),
        app_rule("sentinel", &sentinel)
    );
    let kiln = converting(&rules, ns.name());
    pointed_at_kiln(&client, &replaced_crd).await;
    pointed_at_kiln(&client, &sentinel_crd).await;
    // Another operator deletes kiln's CRD and makes one of its own, while
    // the rule runs.
    crds(&client)
        .delete(&replaced_crd, &Default::default())
        .await
        .unwrap();
    eventually("the CRD gone", CONVERGE, || async {
        match crds(&client).get_opt(&replaced_crd).await {
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await;
    let theirs = as_another_operator_makes_it(&app_rule("replaced", &replaced));
    let made = create_foreign(&client, &theirs).await;
    // Two rounds of the keeper since: the sentinel pointed again twice
    // (the second round began after the foreign CRD was made).
    for _ in 0..2 {
        unpoint(&client, &sentinel_crd).await;
        pointed_at_kiln(&client, &sentinel_crd).await;
    }
    let after = crd(&client, &replaced_crd).await;
    assert!(!pointed(&after), "{}", after["spec"]["conversion"]);
    assert_eq!(
        after["metadata"]["resourceVersion"], made["metadata"]["resourceVersion"],
        "nothing was written to the other operator's CRD"
    );
    drop(kiln);
    for name in [replaced_crd, sentinel_crd] {
        let _ = crds(&client).delete(&name, &Default::default()).await;
    }
    ns.delete().await;
}

#[tokio::test]
async fn the_keeper_never_points_a_foreign_crd_at_kiln() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "own-keeper").await;
    let pid = std::process::id();
    let (theirs, ours) = (
        format!("theirs{pid}.own.kiln.dev"),
        format!("ours{pid}.own.kiln.dev"),
    );
    // Another operator's two-version CRD, converting nothing (as it chose).
    let foreign = as_another_operator_makes_it(&app_rule("theirs", &theirs));
    let made = create_foreign(&client, &foreign).await;
    assert_eq!(made["spec"]["conversion"]["strategy"], "None");

    let rules = format!(
        "{}---\n{}",
        app_rule("ours", &ours),
        app_rule("theirs", &theirs)
    );
    let kiln = converting(&rules, ns.name());
    eventually("the foreign rule refused", CONVERGE, || async {
        let refused = kiln.metric("kiln_rule_edit_refused{rule=\"theirs\"}").await;
        (refused == Some(1.0)).then_some(())
    })
    .await;
    // kiln's own CRD is pointed at the webhook: the keeper has been round.
    pointed_at_kiln(&client, &format!("apps.{ours}")).await;
    let after = crd(&client, &format!("apps.{theirs}")).await;
    assert!(!pointed(&after), "{}", after["spec"]["conversion"]);
    assert_eq!(
        after["metadata"]["resourceVersion"], made["metadata"]["resourceVersion"],
        "nothing was written to the other operator's CRD"
    );
    drop(kiln);
    for name in [format!("apps.{ours}"), format!("apps.{theirs}")] {
        let _ = crds(&client).delete(&name, &Default::default()).await;
    }
    ns.delete().await;
}

#[tokio::test]
async fn an_edit_held_back_for_permissions_writes_no_crd() {
    let admin = support::admin_client().await;
    let ns = TestNamespace::new(&admin, "own-held").await;
    let group = format!("held{}.own.kiln.dev", std::process::id());
    let name = format!("sites.{group}");
    let running = site_rule("sites-held", &group, FIELDS, "");
    let set = load(&running);
    kiln::api::install::install_set(&admin, None, &set)
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    let installed = established(&admin, &name).await;
    // kiln may do what the running rule needs, and no more.
    let role = kiln::rbac::cluster_role(&set, "x", &kiln::rbac::guess_plural);
    let token =
        support::service_account_token(&admin, ns.name(), "kiln", role["rules"].clone()).await;
    let kiln = support::token_client(&token).await;
    // RBAC takes a moment to see a new binding.
    support::until("kiln may read its CRD", CONVERGE, || async {
        crds(&kiln).get(&name).await.map_err(|e| e.to_string())
    })
    .await;
    let (metrics, mut loader) = loader(&admin, kiln, ns.name(), &running).await;

    // The edit adds a field (a change the CRD takes) and a Secret child
    // kiln may not make: held back, and the CRD must not change.
    let edited = site_rule(
        "sites-held",
        &group,
        "            title: string\n            tags: \"[]string\"\n            subtitle: string\n",
        "",
    )
    .replace(
        "  children:\n",
        "  children:\n    - id: secret\n      template:\n        apiVersion: v1\n        kind: Secret\n        metadata: {name: \"{{ self.metadata.name }}-secret\"}\n",
    );
    loader.consider(version(&edited)).await;
    assert!(loader.waiting(), "the edit is held back");
    assert_eq!(metrics.reloads("refused"), 1);
    let after = crd(&admin, &name).await;
    assert_eq!(
        after["metadata"]["resourceVersion"], installed["metadata"]["resourceVersion"],
        "the held-back edit wrote the CRD"
    );
    ns.delete().await;
}

#[tokio::test]
async fn adopting_a_foreign_crd_takes_it_over_only_when_nothing_stored_breaks() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "own-adopt").await;
    let group = format!("adopt{}.own.kiln.dev", std::process::id());
    let name = format!("sites.{group}");
    let rule = site_rule("sites-adopt", &group, FIELDS, "");
    create_foreign(&client, &as_another_operator_makes_it(&rule)).await;
    let (metrics, mut loader) = loader(&client, client.clone(), ns.name(), &copy_rule()).await;

    // Adopting it while dropping `tags` (which it stores) is refused.
    let dropping = site_rule(
        "sites-adopt",
        &group,
        "            title: string\n",
        "    adopt: true\n    allowBreakingChanges: true\n",
    );
    loader.consider(version(&dropping)).await;
    assert_eq!(metrics.reloads("error"), 1);
    assert_eq!(managers(&crd(&client, &name).await), [OTHER]);

    // Adopting it as it is: taken over, and kiln's from then on.
    let adopting = site_rule("sites-adopt", &group, FIELDS, "    adopt: true\n");
    loader.consider(version(&adopting)).await;
    assert_eq!(metrics.reloads("success"), 1, "the adoption was accepted");
    let after = crd(&client, &name).await;
    assert!(
        managers(&after).contains(&"kiln-api".to_string()),
        "{:?}",
        managers(&after)
    );
    assert_eq!(
        after["metadata"]["annotations"]["kiln.dev/rule"], "sites-adopt",
        "kiln's mark applied"
    );
    // Later edits need no `adopt`.
    let later = site_rule(
        "sites-adopt",
        &group,
        "            title: string\n            tags: \"[]string\"\n            subtitle: string\n",
        "",
    );
    loader.consider(version(&later)).await;
    assert_eq!(metrics.reloads("success"), 2);
    let _ = crds(&client).delete(&name, &Default::default()).await;
    ns.delete().await;
}

/// `kiln run` of `rules` with leader election in `ns`.
fn elected(rules: &str, ns: &str) -> KilnProcess {
    let args = support::elected_in(ns);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    KilnProcess::start(rules, &args)
}

/// A labelled ConfigMap the copy rule copies.
async fn trigger(client: &Client, ns: &str, name: &str) {
    support::apply(
        client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"copy": "yes"}}}),
        Some(ns),
    )
    .await;
}

/// A `Site` named `name` in `ns`.
async fn site(client: &Client, group: &str, ns: &str, name: &str) {
    let site = json!({"apiVersion": format!("{group}/v1"), "kind": "Site",
        "metadata": {"name": name}, "spec": {"title": name, "tags": ["a"]}});
    support::apply(client, site, Some(ns)).await;
}

/// Waits until `kiln` refuses `rule` and a rule without an API still runs
/// (the copy of `copied` made), then checks the refused rule made nothing
/// for `site`.
async fn refused_alone(
    kiln: &KilnProcess,
    client: &Client,
    ns: &str,
    rule: &str,
    copied: &str,
    site: &str,
) {
    let gauge = format!("kiln_rule_edit_refused{{rule=\"{rule}\"}}");
    eventually("the rule refused", CONVERGE, || async {
        (kiln.metric(&gauge).await == Some(1.0)).then_some(())
    })
    .await;
    let copy = format!("{copied}-copy");
    eventually("the other rule's child", CONVERGE, || async {
        support::get(client, "v1", "ConfigMap", ns, &copy).await
    })
    .await;
    let page = format!("{site}-page");
    assert!(
        support::get(client, "v1", "ConfigMap", ns, &page)
            .await
            .is_none(),
        "the refused rule ran"
    );
}

#[tokio::test]
async fn a_crd_moved_on_while_standing_by_refuses_the_rule_when_taking_over() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "own-standby").await;
    let group = format!("standby{}.own.kiln.dev", std::process::id());
    let rule = site_rule("sites-standby", &group, FIELDS, "");
    kiln::api::install::install_set(&client, None, &load(&rule))
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    // Another replica leads for a while; this one stands by.
    support::apply(
        &client,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "kiln"}}),
        Some(ns.name()),
    )
    .await;
    support::hand_lease_to(&client, ns.name(), "another-replica", 12).await;
    let kiln = elected(&format!("{rule}---\n{}", copy_rule()), ns.name());
    // Meanwhile the other replica's newer rules extend the CRD: this
    // replica's version would drop `subtitle`.
    let newer = site_rule(
        "sites-standby",
        &group,
        "            title: string\n            tags: \"[]string\"\n            subtitle: string\n",
        "",
    );
    kiln::api::install::install_set(&client, None, &load(&newer))
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    site(&client, &group, ns.name(), "one").await;
    trigger(&client, ns.name(), "first").await;
    refused_alone(&kiln, &client, ns.name(), "sites-standby", "first", "one").await;
    drop(kiln);
    let _ = crds(&client)
        .delete(&format!("sites.{group}"), &Default::default())
        .await;
    ns.delete().await;
}

#[tokio::test]
async fn a_crd_moved_on_while_the_lease_was_lost_refuses_the_rule_on_winning_it_back() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "own-rewin").await;
    let group = format!("rewin{}.own.kiln.dev", std::process::id());
    let rule = site_rule("sites-rewin", &group, FIELDS, "");
    let kiln = elected(&format!("{rule}---\n{}", copy_rule()), ns.name());
    let name = format!("sites.{group}");
    eventually("kiln creates the CRD", CONVERGE, || async {
        crds(&client).get_opt(&name).await.ok()?
    })
    .await;
    established(&client, &name).await;
    site(&client, &group, ns.name(), "one").await;
    eventually("the rule runs while leading", CONVERGE, || async {
        support::get(&client, "v1", "ConfigMap", ns.name(), "one-page").await
    })
    .await;
    // Another replica takes the Lease, and its newer rules extend the CRD.
    support::hand_lease_to(&client, ns.name(), "another-replica", 12).await;
    eventually("the Lease lost", CONVERGE, || async {
        (kiln.metric("kiln_leader ").await == Some(0.0)).then_some(())
    })
    .await;
    let newer = site_rule(
        "sites-rewin",
        &group,
        "            title: string\n            tags: \"[]string\"\n            subtitle: string\n",
        "",
    );
    kiln::api::install::install_set(&client, None, &load(&newer))
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    site(&client, &group, ns.name(), "two").await;
    trigger(&client, ns.name(), "second").await;
    // Won back once the other stops renewing: the rule is refused.
    refused_alone(&kiln, &client, ns.name(), "sites-rewin", "second", "two").await;
    drop(kiln);
    let _ = crds(&client)
        .delete(&format!("sites.{group}"), &Default::default())
        .await;
    ns.delete().await;
}

#[tokio::test]
async fn every_rule_refused_at_once_is_named_by_an_event_of_its_own() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "own-told").await;
    // Two rules refused in one version (an unclosed template each), beside
    // the copy rule that runs.
    let broken = |name: &str| {
        copy_rule()
            .replace("name: copies", &format!("name: {name}"))
            .replace(
                "\"{{ self.metadata.name }}-copy\"",
                "\"{{ self.metadata.name\"",
            )
    };
    let (metrics, loader) = loader(&client, client.clone(), ns.name(), &copy_rule()).await;
    drop(metrics);
    let mut loader = loader;
    loader
        .consider(version(&format!(
            "{}---\n{}",
            broken("first-broken"),
            broken("second-broken")
        )))
        .await;
    let notes = eventually("both refusals told", CONVERGE, || async {
        let notes = refusals(&client, ns.name()).await;
        (notes.len() >= 2).then_some(notes)
    })
    .await;
    for rule in ["first-broken", "second-broken"] {
        assert!(
            notes
                .iter()
                .any(|n| n.contains(&format!("rule {rule} is refused"))),
            "{rule} is not named: {notes:?}"
        );
    }
    ns.delete().await;
}
