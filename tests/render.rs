//! Golden tests: `kiln render` on every example, compared with committed
//! snapshots (tests/snapshots/). A change in what a rule renders shows up as
//! a snapshot diff to review.
#![allow(clippy::unwrap_used, missing_docs, reason = "test code")]

use std::process::Command;

fn render(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["render", "--rules", "rules/"])
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
fn tenant_namespace() {
    insta::assert_snapshot!(render(&["--object", "examples/tenant/namespace.yaml"]));
}

#[test]
fn schedule_for_each() {
    insta::assert_snapshot!(render(&["--object", "examples/schedule/schedule.yaml"]));
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
        stderr.contains("required related object(s) not given (credentials)"),
        "{stderr}"
    );
}
