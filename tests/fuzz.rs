//! Property-based fuzzing of everything that reads untrusted input: the YAML
//! reader, rule loading and validation, and template compilation and
//! rendering. Each property says "no panic, and a clear error or a result".
//!
//! `cargo test --test fuzz` runs a short pass (part of `make test`);
//! `make fuzz` runs many more cases (PROPTEST_CASES). A failure is shrunk
//! and recorded under tests/fuzz.proptest-regressions, which is committed,
//! so every crash found becomes a regression test.
#![allow(clippy::unwrap_used, missing_docs, reason = "test code")]

use kiln::rules::{self, load::Source};
use kiln::template::{Budget, TemplateSet, Tree, to_jinja};
use kiln::yaml::{self, Limits};
use proptest::prelude::*;
use serde_json::{Value, json};

fn config() -> ProptestConfig {
    // PROPTEST_CASES (read by the default config) sets the depth for `make fuzz`.
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 256;
    }
    config
}

/// The shipped rules, as mutation seeds.
fn seeds() -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/rules");
    rules::load::list_dir(std::path::Path::new(dir))
        .unwrap()
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

fn load(text: String) {
    let source = Source {
        file: "fuzz.yaml".into(),
        text,
    };
    match rules::load_sources(vec![source]) {
        Ok(set) => assert!(set.rules.iter().all(|r| !r.name.is_empty())),
        Err(diagnostics) => {
            assert!(!diagnostics.is_empty());
            for d in diagnostics {
                assert!(!d.message.is_empty());
                let _ = d.to_string();
            }
        }
    }
}

/// Text that looks like YAML: indentation, keys, flow collections, quotes,
/// anchors, aliases, tags, templates.
fn yamlish() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("\n".to_string()),
        Just("  ".to_string()),
        Just("- ".to_string()),
        Just(": ".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just(", ".to_string()),
        Just("\"".to_string()),
        Just("'".to_string()),
        Just("&a ".to_string()),
        Just("*a".to_string()),
        Just("!!str ".to_string()),
        Just("---\n".to_string()),
        Just("{{ self.spec.x }}".to_string()),
        Just("{% for i in range(3) %}".to_string()),
        Just("#".to_string()),
        "[a-zA-Z0-9_.-]{1,8}",
        any::<char>().prop_map(|c| c.to_string()),
    ];
    prop::collection::vec(token, 0..80).prop_map(|t| t.concat())
}

/// A line-level mutation of a seed: delete, duplicate, or replace a line,
/// or insert junk at a character position.
fn mutated_seed() -> impl Strategy<Value = String> {
    let seeds = seeds();
    (0..seeds.len(), any::<usize>(), 0u8..4, "[ -~]{0,12}").prop_map(move |(s, at, op, junk)| {
        let mut lines: Vec<String> = seeds[s].lines().map(str::to_string).collect();
        let i = at % lines.len().max(1);
        match op {
            0 => {
                lines.remove(i);
            }
            1 => {
                let l = lines[i].clone();
                lines.insert(i, l);
            }
            2 => lines[i] = junk,
            _ => {
                let l = &mut lines[i];
                let cut = l
                    .char_indices()
                    .nth(at % (l.chars().count() + 1))
                    .map_or(l.len(), |(b, _)| b);
                l.insert_str(cut, &junk);
            }
        }
        lines.join("\n")
    })
}

fn template_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("{{ ".to_string()),
        Just(" }}".to_string()),
        Just("{% if x %}".to_string()),
        Just("{% endif %}".to_string()),
        Just("{% for i in x %}".to_string()),
        Just("{% endfor %}".to_string()),
        Just("self.spec".to_string()),
        Just(".a".to_string()),
        Just("[0]".to_string()),
        Just(" | default(1)".to_string()),
        Just(" | sha256".to_string()),
        Just(" | hmac_sha256('0123456789abcdef')".to_string()),
        Just("random_secret(16)".to_string()),
        Just(" | b64decode".to_string()),
        Just(" | from_json".to_string()),
        Just(" | to_yaml".to_string()),
        Just(" | dns1123".to_string()),
        Just(" | jsonpath('$.a[*]')".to_string()),
        Just(" ~ ".to_string()),
        Just(" * 1000".to_string()),
        Just("range(1000)".to_string()),
        "[a-z0-9 ]{0,6}",
        any::<char>().prop_map(|c| c.to_string()),
    ];
    prop::collection::vec(piece, 0..24).prop_map(|t| t.concat())
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        (-1e9f64..1e9).prop_map(|f| json!(f)),
        "[ -~]{0,10}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,5}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_yaml_reader_never_panics(text in yamlish()) {
        let _ = yaml::parse_documents(&text, Limits::default());
    }

    #[test]
    fn arbitrary_text_never_panics_the_rule_loader(text in yamlish()) {
        load(text);
    }

    #[test]
    fn mutated_real_rules_never_panic_the_rule_loader(text in mutated_seed()) {
        load(text);
    }

    #[test]
    fn templates_compile_and_render_or_fail_cleanly(template in template_text(), spec in json_value()) {
        let mut set = TemplateSet::new();
        let mut errors = Vec::new();
        let tree = Tree::compile(&Value::String(template), &mut Vec::new(), &mut set, &mut errors);
        if errors.is_empty() {
            let ctx = to_jinja(&json!({"self": {"spec": spec}, "x": [1, 2]}));
            let _ = tree.render(&set, &ctx, &mut Budget::new(64 * 1024));
        }
    }

    #[test]
    fn a_lone_expression_keeps_any_value_exactly(value in json_value()) {
        let mut set = TemplateSet::new();
        let mut errors = Vec::new();
        let tree = Tree::compile(&json!({"out": "{{ self.v }}"}), &mut Vec::new(), &mut set, &mut errors);
        prop_assert!(errors.is_empty());
        let rendered = tree.render(&set, &to_jinja(&json!({"self": {"v": value.clone()}})), &mut Budget::default()).unwrap();
        prop_assert_eq!(&rendered["out"], &value);
    }
}
