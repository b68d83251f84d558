//! The bad-input corpus: every file under tests/invalid/ is a broken rule.
//! Each must be refused with its exact diagnostics (committed as snapshots
//! in tests/snapshots/), every diagnostic must carry a line and column
//! (except for files that cannot be read as text at all), and nothing panics.
#![allow(clippy::unwrap_used, clippy::panic, missing_docs, reason = "test code")]

use std::path::{Path, PathBuf};

use kiln::rules;

fn relative(path: &Path) -> PathBuf {
    path.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap()
        .to_path_buf()
}

/// Files that are refused before any YAML is read, so have no position.
const WHOLE_FILE_ERRORS: &[&str] = &["binary-junk.yaml", "utf16-file.yaml"];

#[test]
fn every_invalid_rule_gives_exact_diagnostics() {
    let mut count = 0;
    insta::glob!("invalid/*.yaml", |path| {
        count += 1;
        let file = relative(path);
        let diagnostics = match rules::load(std::slice::from_ref(&file)) {
            Ok(set) => panic!(
                "{} was accepted: {:?}",
                file.display(),
                set.rules.iter().map(|r| &r.name).collect::<Vec<_>>()
            ),
            Err(d) => d,
        };
        let name = file.file_name().unwrap().to_str().unwrap();
        for d in &diagnostics {
            assert_eq!(d.file, file);
            assert!(!d.message.is_empty());
            if !WHOLE_FILE_ERRORS.contains(&name) {
                assert!(
                    d.pos.is_some(),
                    "{}: no line/column for: {}",
                    file.display(),
                    d.message
                );
            }
        }
        let text: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
        insta::assert_snapshot!(text.join("\n"));
    });
    assert!(count >= 100, "the corpus shrank to {count} files");
}

#[test]
fn all_problems_of_a_rule_are_reported_at_once() {
    let file = PathBuf::from("tests/invalid/many-problems-at-once.yaml");
    let diagnostics = rules::load(&[file]).unwrap_err();
    let paths: Vec<&str> = diagnostics.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.for.kind",
            "spec.children[0].id",
            "spec.children[0].template.spec.replicas",
            "spec.requeue.resync"
        ]
    );
}

#[test]
fn a_file_over_the_size_limit_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("huge.yaml");
    let line = "# padding padding padding padding padding padding padding padding\n";
    std::fs::write(&file, line.repeat(17_000)).unwrap();
    let diagnostics = rules::load(std::slice::from_ref(&file)).unwrap_err();
    assert_eq!(diagnostics.len(), 1);
    assert!(
        diagnostics[0]
            .message
            .contains("rule files may be at most 1048576 bytes"),
        "{}",
        diagnostics[0]
    );
}

#[test]
fn a_directory_is_read_in_name_order_skipping_hidden_and_other_files() {
    let dir = tempfile::tempdir().unwrap();
    let rule = |name: &str| {
        format!(
            "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: {name}}}\nspec:\n  for: {{apiVersion: v1, kind: ConfigMap}}\n"
        )
    };
    std::fs::write(dir.path().join("b.yaml"), rule("second")).unwrap();
    std::fs::write(dir.path().join("a.yml"), rule("first")).unwrap();
    std::fs::write(dir.path().join(".hidden.yaml"), "not: [valid").unwrap();
    std::fs::write(dir.path().join("README.md"), "# not a rule").unwrap();
    let set = rules::load(&[dir.path().to_path_buf()]).unwrap();
    let names: Vec<&str> = set.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["first", "second"]);
}
