//! Whole-object validations of a rule-defined API (`spec.api.validations`)
//! against the real API server: the kubebuilder CronJob tutorial's
//! validating webhook (a cron schedule, a name short enough for its Jobs),
//! written as CEL. A bad object is refused with the rule's message, a good
//! one accepted; an object stored before the validations were added stays
//! readable and updatable (the API server ratchets a rule on `spec` while
//! the spec is unchanged); a CRD adopted from another owner gains no rule.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kiln::rules::{self, RuleSet};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::api::source;
use crate::support::{self, TestNamespace};

/// The tutorial's checks: five cron fields with a minute of 0-59 (or a
/// `@` shorthand), and a name of at most 52 characters (its Jobs append 11).
const VALIDATIONS: &str = r#"    validations:
      - expression: |-
          self.spec.schedule.matches(r'^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|(\*|[0-5]?[0-9](-[0-5]?[0-9])?)(/[0-9]+)?(,(\*|[0-5]?[0-9](-[0-5]?[0-9])?)(/[0-9]+)?)*( +[^ ]+){4})$')
        message: the schedule must be a cron schedule whose minute is 0-59
        messageExpression: "'schedule ' + self.spec.schedule + ' is not a cron schedule whose minute is 0-59'"
        fieldPath: .spec.schedule
      - expression: self.metadata.name.size() <= 52
        message: the name must be no more than 52 characters (its Jobs add 11)
        reason: FieldValueInvalid
"#;

fn rule(group: &str, validations: &str) -> String {
    format!(
        r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: cronjobs}}
spec:
  api:
    group: {group}
    kind: CronJob
{validations}    versions:
      - name: v1
        schema:
          spec:
            schedule: string | required=true maxLength=64
            suspend: boolean | default=false
  children:
    - id: note
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: "{{{{ self.metadata.name }}}}"}}
        data: {{schedule: "{{{{ self.spec.schedule }}}}"}}
"#
    )
}

fn load(yaml: &str) -> RuleSet {
    rules::load_sources(vec![source(yaml)]).unwrap_or_else(|d| panic!("{}", d[0]))
}

fn cronjobs(client: &Client, group: &str, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "CronJob".into(),
        plural: "cronjobs".into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn cronjob(group: &str, name: &str, schedule: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "CronJob",
        "metadata": {"name": name}, "spec": {"schedule": schedule},
    }))
    .unwrap()
}

/// The message of a refused write.
fn refusal<T: std::fmt::Debug>(result: kube::Result<T>) -> String {
    match result {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            e.message
        }
        other => panic!("the write was not refused by validation: {other:?}"),
    }
}

async fn patch(api: &Api<DynamicObject>, name: &str, body: Value) -> kube::Result<DynamicObject> {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
}

#[tokio::test]
async fn a_bad_cron_schedule_is_refused_by_the_api_server_and_objects_stored_before_stay_usable() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "validations").await;
    let group = format!("cron{}.validations.kiln.dev", std::process::id());
    let before = load(&rule(&group, ""));
    kiln::api::install::install_set(&client, None, &before)
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    let api = cronjobs(&client, &group, ns.name());
    let pp = PostParams::default();
    // Stored before the rule validates the schedule.
    api.create(&pp, &cronjob(&group, "stored", "61 * * * *"))
        .await
        .unwrap();

    // The validations added: a change, not a breaking one.
    let after = load(&rule(&group, VALIDATIONS));
    kiln::api::install::install_set(&client, Some(&before), &after)
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get(&format!("cronjobs.{group}"))
        .await
        .unwrap();
    let crd = serde_json::to_value(crd).unwrap();
    let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    assert_eq!(
        root["properties"]["spec"]["x-kubernetes-validations"][0]["fieldPath"], ".schedule",
        "the schedule rule sits on spec: {root}"
    );
    assert_eq!(
        root["x-kubernetes-validations"][0]["rule"], "self.metadata.name.size() <= 52",
        "the name rule sits on the root: {root}"
    );

    // Refused, each with its message; nothing is stored.
    let message = refusal(api.create(&pp, &cronjob(&group, "bad", "61 * * * *")).await);
    assert!(
        message.contains("spec.schedule")
            && message.contains("schedule 61 * * * * is not a cron schedule whose minute is 0-59"),
        "{message}"
    );
    let long = "x".repeat(53);
    let message = refusal(api.create(&pp, &cronjob(&group, &long, "5 * * * *")).await);
    assert!(
        message.contains("the name must be no more than 52 characters"),
        "{message}"
    );
    assert!(api.get_opt("bad").await.unwrap().is_none());
    assert!(api.get_opt(&long).await.unwrap().is_none());

    // Accepted.
    for (name, schedule) in [
        ("good", "*/15 * * * *"),
        ("range", "0-30/5,45 9 * * 1-5"),
        ("daily", "@daily"),
    ] {
        api.create(&pp, &cronjob(&group, name, schedule))
            .await
            .unwrap_or_else(|e| panic!("{schedule}: {e}"));
    }

    // The object stored before: readable, its labels and status updatable
    // (the spec is unchanged, so the rule on it is not checked again)...
    let stored = api.get("stored").await.unwrap();
    assert_eq!(stored.data["spec"]["schedule"], "61 * * * *");
    patch(
        &api,
        "stored",
        json!({"metadata": {"labels": {"team": "a"}}}),
    )
    .await
    .unwrap();
    api.patch_status(
        "stored",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"observedGeneration": 1}})),
    )
    .await
    .unwrap();
    // ...a spec change that keeps the bad schedule is refused, one that
    // fixes it accepted.
    let message = refusal(patch(&api, "stored", json!({"spec": {"suspend": true}})).await);
    assert!(message.contains("minute is 0-59"), "{message}");
    patch(
        &api,
        "stored",
        json!({"spec": {"schedule": "1 * * * *", "suspend": true}}),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn an_adopted_crd_gains_no_validation_on_the_takeover() {
    let client = support::admin_client().await;
    let group = format!("adopt{}.validations.kiln.dev", std::process::id());
    // Another owner's CRD, as kiln would make it without validations.
    let mut theirs = kiln::api::compile(
        &serde_json::from_value(
            serde_norway::from_str::<Value>(&rule(&group, "    adopt: true\n")).unwrap()["spec"]["api"]
                .clone(),
        )
        .unwrap(),
        "theirs",
        &[],
        &[],
    )
    .unwrap()
    .crd;
    theirs["metadata"]["annotations"] = json!({});
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.patch(
        &format!("cronjobs.{group}"),
        &PatchParams::apply("another-operator").force(),
        &Patch::Apply(&theirs),
    )
    .await
    .unwrap();

    let adopting = load(&rule(&group, &format!("    adopt: true\n{VALIDATIONS}")));
    let refusal = kiln::api::install::install_set(&client, None, &adopting)
        .await
        .unwrap_err();
    let message = refusal.diagnostics[0].to_string();
    assert!(message.contains("validation rule"), "{message}");
    let crd = serde_json::to_value(crds.get(&format!("cronjobs.{group}")).await.unwrap()).unwrap();
    assert!(
        !crd.to_string().contains("x-kubernetes-validations"),
        "the CRD is unchanged: {crd}"
    );

    // Adopted as it is, then tightened by a later change: applied.
    let adopted = load(&rule(&group, "    adopt: true\n"));
    kiln::api::install::install_set(&client, None, &adopted)
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    kiln::api::install::install_set(&client, Some(&adopted), &adopting)
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
}
