//! Golden tests: `kiln render` on every example, compared with committed
//! snapshots (tests/snapshots/). A change in what a rule renders shows up as
//! a snapshot diff to review.
#![allow(clippy::unwrap_used, missing_docs, reason = "test code")]

use std::process::Command;

fn render(args: &[&str]) -> String {
    render_fixture("rules/", args)
}

/// `kiln render --rules RULES ARGS`, which must succeed.
fn render_fixture(rules: &str, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["render", "--rules", rules])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        out.status.success(),
        "kiln render {args:?} failed:\n{stderr}"
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn webapp() {
    insta::assert_snapshot!(render(&[
        "--object",
        "examples/webapp/webapp.yaml",
        "--related",
        "credentials=examples/webapp/secret.yaml",
    ]));
}

#[test]
fn webapp_with_observed_children_reports_readiness_and_status() {
    insta::assert_snapshot!(render(&[
        "--object",
        "examples/webapp/webapp.yaml",
        "--related",
        "credentials=examples/webapp/secret.yaml",
        "--observed",
        "deployment=tests/fixtures/observed/shop-deployment.yaml",
        "--observed",
        "config=tests/fixtures/observed/shop-config.yaml",
        "--observed",
        "service=tests/fixtures/observed/shop-service.yaml",
    ]));
}

#[test]
fn database() {
    insta::assert_snapshot!(render(&["--object", "examples/database/database.yaml"]));
}

#[test]
fn database_keeps_an_existing_password() {
    let out = render(&[
        "--object",
        "examples/database/database.yaml",
        "--observed",
        "credentials=tests/fixtures/observed/orders-credentials.yaml",
    ]);
    assert!(out.contains("password: a2VwdC1hcy1pcw=="), "{out}");
}

#[test]
fn database_draws_its_password_once_offline_as_a_placeholder() {
    let out = render(&["--object", "examples/database/database.yaml"]);
    // base64 of `<random_secret(32)>`: nothing random, nothing derived
    // from the object's uid and creation time.
    assert!(
        out.contains("password: PHJhbmRvbV9zZWNyZXQoMzIpPg=="),
        "{out}"
    );
}

#[test]
fn webapp_keeps_its_hash_key_and_keys_the_credentials_hash_with_it() {
    let out = render(&[
        "--object",
        "examples/webapp/webapp.yaml",
        "--related",
        "credentials=examples/webapp/secret.yaml",
        "--observed",
        "hashkey=tests/fixtures/observed/shop-hash-key.yaml",
    ]);
    assert!(
        out.contains("key: a2VwdC1oYXNoLWtleS0wMTIzNDU2Nzg5YWJjZGVm"),
        "{out}"
    );
    assert!(!out.contains("random_secret"), "nothing drawn: {out}");
    // HMAC-SHA-256 of the Secret's data (compact JSON), keyed with the kept
    // key (Python's hmac module agrees); the plain sha256 of the data,
    // ba3b27ff…, which anyone can recompute for a guessed password, is gone.
    assert!(
        out.contains(
            "kiln.dev/credentials-hash: cbb9132e8909138df693e75d42dde72752eb6df953be2d0c6cc2a3d09f9fd8e1"
        ),
        "{out}"
    );
    assert!(!out.contains("ba3b27ff42274af9"), "{out}");
}

#[test]
fn tenant_namespace() {
    insta::assert_snapshot!(render(&["--object", "examples/tenant/namespace.yaml"]));
}

#[test]
fn schedule_for_each() {
    insta::assert_snapshot!(render(&["--object", "examples/schedule/schedule.yaml"]));
}

#[test]
fn default_network_policy_created_once() {
    insta::assert_snapshot!(render(&[
        "--object",
        "examples/default-network-policy/namespace.yaml",
    ]));
}

#[test]
fn application_renders_what_waits_for_nothing_and_says_what_waits() {
    insta::assert_snapshot!(render(&[
        "--object",
        "examples/application/application.yaml",
    ]));
}

#[test]
fn lifecycle_policies_created_once_and_orphaned() {
    insta::assert_snapshot!(render_fixture(
        "tests/fixtures/lifecycle/rules",
        &["--object", "tests/fixtures/lifecycle/widget.yaml"],
    ));
}

#[test]
fn a_created_once_child_that_exists_is_not_written() {
    let out = render_fixture(
        "tests/fixtures/lifecycle/rules",
        &[
            "--object",
            "tests/fixtures/lifecycle/widget.yaml",
            "--observed",
            "defaults=tests/fixtures/lifecycle/w-defaults.yaml",
        ],
    );
    assert!(
        out.contains(
            "# plan: defaults ConfigMap w-defaults: created once: kiln does not write it again"
        ),
        "{out}"
    );
}

#[test]
fn a_created_once_child_left_by_another_policy_gets_only_its_owner_written() {
    let out = render_fixture(
        "tests/fixtures/lifecycle/rules",
        &[
            "--object",
            "tests/fixtures/lifecycle/widget.yaml",
            "--observed",
            "defaults=tests/fixtures/lifecycle/w-defaults-orphaned.yaml",
        ],
    );
    assert!(
        out.contains("# plan: defaults ConfigMap w-defaults: created once: kiln writes only its owner (owning it, as its deletionPolicy now says)"),
        "{out}"
    );
}

#[test]
fn application_with_a_ready_deployment_renders_its_service_and_ingress() {
    insta::assert_snapshot!(render(&[
        "--object",
        "examples/application/application.yaml",
        "--observed",
        "deployment=tests/fixtures/observed/my-awesome-app-deployment.yaml",
        "--observed",
        "service=tests/fixtures/observed/my-awesome-app-service.yaml",
    ]));
}

#[test]
fn webapp_without_its_required_secret_waits() {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "render",
            "--rules",
            "rules/",
            "--object",
            "examples/webapp/webapp.yaml",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(
            "waiting: nothing is rendered until these exist: Secret default/shop-credentials (related.credentials: not given; pass --related credentials=FILE, or give it under `related:` in a test case)"
        ),
        "{stderr}"
    );
}

/// forEach over a product, each(), quantity, Python-style split, hashes.
#[test]
fn fleet_renders_every_region_and_tier_in_list_order() {
    insta::assert_snapshot!(render_fixture(
        "tests/fixtures/rules/fleet.yaml",
        &["--object", "tests/fixtures/objects/fleet-widget.yaml"],
    ));
}

/// Metacontroller's service-per-pod, ported: a Service per Pod, and each
/// Pod decorated with its own label.
#[test]
fn service_per_pod_decorates_each_pod() {
    let dir = "examples/ported/service-per-pod";
    insta::assert_snapshot!(render_fixture(
        &format!("{dir}/rule.yaml"),
        &[
            "--object",
            &format!("{dir}/statefulset.yaml"),
            "--related",
            &format!("pods={dir}/pods.yaml"),
        ],
    ));
}

/// Children outside the primary's namespace: no owner reference, kiln's
/// owner label and annotation instead.
#[test]
fn outside_children_carry_the_owner_label_not_a_reference() {
    insta::assert_snapshot!(render_fixture(
        "tests/fixtures/rules/space.yaml",
        &["--object", "tests/fixtures/objects/space-widget.yaml"],
    ));
}

/// The template functions and the manners fixed with them: see the rule's
/// header for what each key shows.
#[test]
fn template_functions_and_manners() {
    let out = render_fixture(
        "tests/fixtures/rules/manners.yaml",
        &[
            "--object",
            "tests/fixtures/objects/manners-widget.yaml",
            "--now",
            "2026-05-17T10:20:30Z",
        ],
    );
    // A templated block scalar ends with its newline, as a literal one does.
    assert!(
        out.contains("block: |\n    team: blue\n    regions: eu,us,ap\n  branches"),
        "{out}"
    );
    assert!(out.contains("branches: port=443"), "{out}");
    // A selector watch not given with --related selects nothing, as in the engine.
    assert!(out.contains("peers: peers=0"), "{out}");
    insta::assert_snapshot!(out);
}

/// `now()` is what `--now` says, so a render reading the time is the same
/// every time; without `--now` it is the clock.
#[test]
fn now_is_settable_and_one_instant_per_render() {
    let args = [
        "--object",
        "tests/fixtures/objects/manners-widget.yaml",
        "--now",
        "2026-05-17T12:20:30+02:00",
    ];
    let a = render_fixture("tests/fixtures/rules/manners.yaml", &args);
    let b = render_fixture("tests/fixtures/rules/manners.yaml", &args);
    assert_eq!(a, b);
    assert!(a.contains("rendered: 2026-05-17T10:20:30Z"), "{a}");
}

/// `kiln render` of the kubebuilder book's CronJob, ported
/// (examples/ported/cronjob): `object` with the live Jobs in `jobs` (if
/// any), at `now`.
fn cronjob(object: &str, jobs: Option<&str>, now: &str) -> String {
    let jobs = jobs.map(|file| format!("jobs={file}"));
    let mut args = vec!["--object", object, "--now", now];
    if let Some(jobs) = &jobs {
        args.extend(["--observed", jobs]);
    }
    render_fixture("examples/ported/cronjob/rule.yaml", &args)
}

const CRONJOB: &str = "examples/ported/cronjob/cronjob.yaml";
const RUNNING: &str = "tests/fixtures/observed/cronjob-running.yaml";

/// At 10:16 the 10:15 run is due; the oldest completed Job is past the
/// history limit; the next run is at 10:30.
#[test]
fn cronjob_runs_the_latest_scheduled_time_and_trims_history() {
    let jobs = "examples/ported/cronjob/jobs.yaml";
    let out = cronjob(CRONJOB, Some(jobs), "2026-05-17T10:16:00Z");
    let names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("  name: report-"))
        .collect();
    // 10:15 new; the finished Jobs are history: 09:30 and 09:45 completed
    // (limit 2) and 10:00 failed (limit 1) stay, 09:15 goes.
    assert_eq!(names, ["1779012900"]);
    for kept in ["1779010200", "1779011100", "1779012000"] {
        let line = format!("# plan: jobs Job report-{kept}: no longer rendered: kept as history");
        assert!(out.contains(&line), "{out}");
    }
    assert!(
        out.contains(
            "# plan: jobs Job report-1779009300: no longer rendered: kiln would delete it"
        ),
        "{out}"
    );
    assert!(
        out.contains("lastScheduleTime: 2026-05-17T10:15:00Z"),
        "{out}"
    );
    assert!(
        out.contains("# requeue.at: reconciles again at 2026-05-17T10:30:00Z (840s after now())"),
        "{out}"
    );
    insta::assert_snapshot!(out);
}

#[test]
fn cronjob_forbid_skips_the_run_while_a_job_is_active() {
    let out = cronjob(CRONJOB, Some(RUNNING), "2026-05-17T10:16:00Z");
    assert!(out.contains("name: report-1779012000"), "{out}");
    assert!(!out.contains("name: report-1779012900"), "{out}");
    assert!(
        out.contains("lastScheduleTime: 2026-05-17T10:00:00Z"),
        "{out}"
    );
    insta::assert_snapshot!(out);
}

#[test]
fn cronjob_replace_runs_the_new_job_in_place_of_the_active_one() {
    let replace = "tests/fixtures/objects/cronjob-replace.yaml";
    let out = cronjob(replace, Some(RUNNING), "2026-05-17T10:16:00Z");
    assert!(!out.contains("name: report-1779012000"), "{out}");
    assert!(out.contains("name: report-1779012900"), "{out}");
    assert!(
        out.contains("lastScheduleTime: 2026-05-17T10:15:00Z"),
        "{out}"
    );
}

#[test]
fn cronjob_skips_a_run_missed_past_its_starting_deadline() {
    // 10:15 + 300 s: still on time.
    let on_time = cronjob(CRONJOB, None, "2026-05-17T10:20:00Z");
    assert!(on_time.contains("name: report-1779012900"), "{on_time}");
    // A second later the 10:15 run is skipped; lastScheduleTime stays.
    let late = cronjob(CRONJOB, None, "2026-05-17T10:20:01Z");
    assert!(!late.contains("name: report-"), "{late}");
    assert!(
        late.contains("lastScheduleTime: 2026-05-17T10:00:00Z"),
        "{late}"
    );
}

#[test]
fn cronjob_runs_when_its_status_holds_no_schedule_time_yet() {
    let never = "tests/fixtures/objects/cronjob-never-run.yaml";
    let out = cronjob(never, None, "2026-05-17T10:16:00Z");
    assert!(out.contains("name: report-1779012900"), "{out}");
    assert!(
        out.contains("lastScheduleTime: 2026-05-17T10:15:00Z"),
        "{out}"
    );
}

/// A reconcile that sees the new Job before its own status write: the
/// Job counts as run (no second render of it), and the status says so.
#[test]
fn cronjob_counts_a_live_job_as_run_when_its_status_is_behind() {
    let never = "tests/fixtures/objects/cronjob-never-run.yaml";
    let created = "tests/fixtures/observed/cronjob-just-created.yaml";
    let out = cronjob(never, Some(created), "2026-05-17T10:16:00Z");
    let rendered = out.matches("\n  name: report-1779012900\n").count();
    assert_eq!(rendered, 1, "{out}");
    assert!(
        out.contains("lastScheduleTime: 2026-05-17T10:15:00Z"),
        "{out}"
    );
}

#[test]
fn observed_remembered_and_replaced_children_in_a_plan() {
    let object = ["--object", "tests/fixtures/generate/widget.yaml"];
    let bare = render_fixture("tests/fixtures/generate/rules", &object);
    assert!(bare.contains("ip: ''"), "no Service yet: {bare}");
    assert!(
        bare.contains("starter ConfigMap w-starter: created once and deleted since"),
        "{bare}"
    );
    let seen = [
        object[0],
        object[1],
        "--observed",
        "service=tests/fixtures/generate/service.yaml",
        "--observed",
        "quota=tests/fixtures/generate/quota.yaml",
    ];
    let out = render_fixture("tests/fixtures/generate/rules", &seen);
    assert!(out.contains("ip: 10.96.0.7"), "{out}");
    assert!(
        out.contains("quota ResourceQuota w-quota: would remove keys"),
        "{out}"
    );
}

#[test]
fn a_status_is_cut_to_what_the_primarys_crd_declares() {
    let out = render_fixture(
        "tests/fixtures/rules-k8s-io/",
        &[
            "--object",
            "tests/fixtures/objects/probe.yaml",
            "--crd",
            "tests/fixtures/crds-k8s-io/probe.yaml",
        ],
    );
    assert!(out.contains("phase: Ready"), "{out}");
    assert!(
        !out.contains("conditions"),
        "the CRD declares no conditions, so the engine writes none:\n{out}"
    );
}

#[test]
fn a_status_the_crd_has_no_subresource_for_is_not_shown_as_written() {
    let out = render_fixture(
        "tests/fixtures/rules-k8s-io/",
        &[
            "--object",
            "tests/fixtures/objects/probe.yaml",
            "--crd",
            "tests/fixtures/crds-offline/probe-no-status.yaml",
        ],
    );
    assert!(
        out.contains("# status: none: kiln writes no status"),
        "{out}"
    );
    assert!(!out.contains("phase: Ready"), "{out}");
}
