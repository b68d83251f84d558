//! The accepted rule set, rule by rule: what runs, each rule with the text
//! it was compiled from and the generation of the source it came from.
//!
//! Every version a source hands out is accepted per rule
//! ([`compose`]): a rule whose new version is invalid (or whose file
//! cannot be read or parsed) keeps its accepted version, a new invalid rule
//! is left out, and every other rule takes its new version. So one bad rule
//! costs that rule only, at start as on every reload. The accepted set is
//! saved in the cluster ([`super::saved`]) so that a restart, a standby
//! taking over or a new pod start from it when the source is invalid or
//! cannot be read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::source::Version;
use super::{Refusal, ReloadOptions};
use crate::rules::load::{self, Source};
use crate::rules::{self, Diagnostic, RuleSet};

/// One accepted rule: its document and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The rule's name.
    pub name: String,
    /// The file (or `rule/<name>`, `configmap/…/<key>`) it was read from.
    pub file: PathBuf,
    /// The rule document, as JSON (the rule's fingerprint is the same as
    /// the YAML it was written in).
    pub text: String,
    /// The generation of the source object it came from (a `Rule`'s
    /// `metadata.generation`), when the source has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
}

/// The accepted rules, in the order of the set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    /// Each rule.
    pub rules: Vec<Entry>,
}

impl Accepted {
    /// The entry of rule `name`.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.rules.iter().find(|e| e.name == name)
    }

    /// Whether no rule is accepted.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Each rule's generation, where known.
    pub fn generations(&self) -> BTreeMap<String, i64> {
        self.rules
            .iter()
            .filter_map(|e| Some((e.name.clone(), e.generation?)))
            .collect()
    }

    /// These rules with each of `refused` replaced by its version in
    /// `before` (left out when it has none there).
    #[must_use]
    pub fn replacing(&self, refused: &BTreeSet<String>, before: &Accepted) -> Accepted {
        let rules = self
            .rules
            .iter()
            .filter_map(|e| match refused.contains(&e.name) {
                true => before.get(&e.name).cloned(),
                false => Some(e.clone()),
            })
            .collect();
        Accepted { rules }
    }

    /// The accepted rules as a version of a source, one file per rule.
    pub fn to_version(&self) -> Version {
        Version {
            sources: self.rules.iter().map(Entry::source).collect(),
            generations: self
                .rules
                .iter()
                .filter_map(|e| Some((e.file.clone(), e.generation?)))
                .collect(),
            ..Version::default()
        }
    }

    /// Compiles the accepted rules (the saved ones, read back at start).
    pub fn compile(&self) -> Result<RuleSet, Vec<Diagnostic>> {
        rules::load_sources(self.rules.iter().map(Entry::source).collect())
    }
}

impl Entry {
    fn source(&self) -> Source {
        Source {
            file: self.file.clone(),
            text: self.text.clone(),
        }
    }
}

/// A version accepted rule by rule.
#[derive(Debug)]
pub struct Composed {
    /// The rules that run.
    pub set: RuleSet,
    /// What they are, to save.
    pub accepted: Accepted,
    /// Why the new version of each refused rule (or file) was refused; empty
    /// when the whole version was accepted.
    pub refused: Vec<Diagnostic>,
    /// The refused rules that keep their accepted version.
    pub kept: Vec<String>,
}

/// Accepts `version` rule by rule against the `accepted` rules: each valid
/// rule takes its new version, each refused one keeps its accepted version
/// (or is left out when it has none). `Err` only when nothing valid is
/// left and nothing was accepted before (or the version holds no rules and
/// an empty set is not allowed), with why.
pub fn compose(
    version: &Version,
    accepted: &Accepted,
    options: &ReloadOptions,
) -> Result<Composed, Refusal> {
    let (allow_empty, conversion) = (options.allow_empty, options.serves_conversion);
    let entries = split(version);
    let sources = version.sources.clone();
    match valid(sources, version.read_errors.clone(), conversion) {
        Ok(set) if set.rules.is_empty() && !allow_empty => {
            keep_all(accepted, vec![super::empty_set()], Refusal::Empty)
        }
        Ok(set) => Ok(Composed {
            accepted: Accepted {
                rules: ordered(&set, entries),
            },
            set,
            refused: Vec::new(),
            kept: Vec::new(),
        }),
        Err(refused) => fall_back(entries, accepted, refused, options),
    }
}

/// Validates rules for this process: also refused, a rule whose API needs
/// the conversion webhook when the process serves none (`conversion`).
fn valid(
    sources: Vec<Source>,
    read_errors: Vec<Diagnostic>,
    conversion: bool,
) -> Result<RuleSet, Vec<Diagnostic>> {
    let set = rules::load_sources_with(sources, read_errors)?;
    if conversion {
        return Ok(set);
    }
    let refused = crate::api::served::refused_without_webhook(&set);
    match refused.is_empty() {
        true => Ok(set),
        false => Err(refused),
    }
}

/// Nothing of the new version runs (it is refused as a whole, or the
/// source could not be read): every accepted rule keeps running.
pub fn keep_all(
    accepted: &Accepted,
    refused: Vec<Diagnostic>,
    refusal: Refusal,
) -> Result<Composed, Refusal> {
    if accepted.is_empty() {
        return Err(refusal);
    }
    let set = accepted.compile().map_err(Refusal::Invalid)?;
    Ok(Composed {
        set,
        accepted: accepted.clone(),
        refused,
        kept: accepted.rules.iter().map(|e| e.name.clone()).collect(),
    })
}

/// Where an entry comes from while a version is composed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum From {
    New,
    Accepted,
}

/// The rules of a version that is not valid as a whole: the refused ones
/// (by rule, else by file) replaced by their accepted version, until what
/// is left is valid. Each round replaces or drops at least one entry, so
/// it ends.
fn fall_back(
    new: Vec<Entry>,
    accepted: &Accepted,
    refused: Vec<Diagnostic>,
    options: &ReloadOptions,
) -> Result<Composed, Refusal> {
    let allow_empty = options.allow_empty;
    let (bad_rules, bad_files) = blamed(&refused);
    let mut entries: Vec<(Entry, From)> = Vec::new();
    let mut kept = Vec::new();
    for e in new {
        if bad_rules.contains(&e.name) || bad_files.contains(&e.file) {
            if let Some(old) = accepted.get(&e.name) {
                kept.push(e.name.clone());
                entries.push((old.clone(), From::Accepted));
            }
        } else {
            entries.push((e, From::New));
        }
    }
    // A rule or file that could not be read or decoded: its accepted rules stay.
    for old in &accepted.rules {
        let named = entries.iter().any(|(e, _)| e.name == old.name);
        if !named && (bad_files.contains(&old.file) || bad_rules.contains(&old.name)) {
            kept.push(old.name.clone());
            entries.push((old.clone(), From::Accepted));
        }
    }
    let mut refused = refused;
    for _ in 0..=entries.len() {
        let sources = entries.iter().map(|(e, _)| e.source()).collect();
        let problems = match valid(sources, Vec::new(), options.serves_conversion) {
            Ok(set) if set.rules.is_empty() && (accepted.is_empty() || !allow_empty) => break,
            Ok(set) => {
                kept.retain(|k| set.get(k).is_some());
                let rules = entries.into_iter().map(|(e, _)| e).collect();
                return Ok(Composed {
                    set,
                    accepted: Accepted { rules },
                    refused,
                    kept,
                });
            }
            Err(problems) => problems,
        };
        let (rules, files) = blamed(&problems);
        refused.extend(problems);
        let before = std::mem::take(&mut entries);
        for (e, from) in &before {
            if !rules.contains(&e.name) && !files.contains(&e.file) {
                entries.push((e.clone(), *from));
            } else if let (From::New, Some(old)) = (from, accepted.get(&e.name)) {
                kept.push(e.name.clone());
                entries.push((old.clone(), From::Accepted));
            }
        }
        if entries == before {
            break;
        }
    }
    keep_all(accepted, refused.clone(), Refusal::Invalid(refused))
}

/// The rules and the files the problems are on (a problem that names no
/// rule blames its whole file).
fn blamed(problems: &[Diagnostic]) -> (BTreeSet<String>, BTreeSet<PathBuf>) {
    let mut rules = BTreeSet::new();
    let mut files = BTreeSet::new();
    for d in problems {
        match &d.rule {
            Some(rule) => rules.insert(rule.clone()),
            None => files.insert(d.file.clone()),
        };
    }
    (rules, files)
}

/// Every rule document of a version, one entry each (documents that do
/// not parse are left out: their problems blame their file).
fn split(version: &Version) -> Vec<Entry> {
    let mut entries = Vec::new();
    for source in &version.sources {
        let (docs, _) = load::parse(source);
        for doc in docs {
            let text = serde_json::to_string(&doc.node.to_json()).unwrap_or_default();
            entries.push(Entry {
                name: doc.raw.metadata.name.clone(),
                generation: version.generations.get(&source.file).copied(),
                file: source.file.clone(),
                text,
            });
        }
    }
    entries
}

/// The entries of `set`'s rules, in its order.
fn ordered(set: &RuleSet, entries: Vec<Entry>) -> Vec<Entry> {
    let mut by_name: BTreeMap<String, Entry> =
        entries.into_iter().map(|e| (e.name.clone(), e)).collect();
    set.rules
        .iter()
        .filter_map(|r| by_name.remove(&r.name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, kind: &str) -> String {
        format!(
            "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: {name}}}\nspec:\n  for: {{apiVersion: v1, kind: {kind}}}\n"
        )
    }

    fn version(files: &[(&str, String)]) -> Version {
        Version {
            sources: files
                .iter()
                .map(|(file, text)| Source {
                    file: PathBuf::from(file),
                    text: text.clone(),
                })
                .collect(),
            ..Version::default()
        }
    }

    fn allowing(empty: bool) -> ReloadOptions {
        ReloadOptions {
            allow_empty: empty,
            serves_conversion: true,
            ..ReloadOptions::default()
        }
    }

    fn names(set: &RuleSet) -> Vec<(String, String)> {
        set.rules
            .iter()
            .map(|r| (r.name.clone(), r.primary.gvk.kind.clone()))
            .collect()
    }

    fn pair(name: &str, kind: &str) -> (String, String) {
        (name.to_string(), kind.to_string())
    }

    #[test]
    fn a_refused_rule_keeps_its_accepted_version_and_the_others_take_their_new_one() {
        let first = version(&[
            ("a.yaml", rule("a", "ConfigMap")),
            ("b.yaml", rule("b", "Secret")),
        ]);
        let start = compose(&first, &Accepted::default(), &allowing(false)).unwrap();
        assert!(start.refused.is_empty());
        let edit = version(&[
            ("a.yaml", rule("a", "Pod")),
            ("b.yaml", rule("b", "Secret").replace("for:", "fro:")),
        ]);
        let now = compose(&edit, &start.accepted, &allowing(false)).unwrap();
        assert_eq!(
            names(&now.set),
            [pair("a", "Pod"), pair("b", "Secret")],
            "a's edit runs, b keeps its accepted version"
        );
        assert_eq!(now.kept, ["b"]);
        assert!(!now.refused.is_empty());
    }

    #[test]
    fn an_accepted_rule_compiles_to_the_same_fingerprint_as_its_yaml() {
        let v = version(&[("a.yaml", rule("a", "ConfigMap"))]);
        let c = compose(&v, &Accepted::default(), &allowing(false)).unwrap();
        let again = c.accepted.compile().unwrap();
        assert_eq!(
            again.rules[0].fingerprint, c.set.rules[0].fingerprint,
            "a restart on the saved text swaps nothing"
        );
    }

    #[test]
    fn a_file_that_cannot_be_parsed_keeps_the_rules_it_held() {
        let first = version(&[
            ("a.yaml", rule("a", "ConfigMap")),
            ("b.yaml", rule("b", "Secret")),
        ]);
        let start = compose(&first, &Accepted::default(), &allowing(false)).unwrap();
        let broken = version(&[("a.yaml", rule("a", "Pod")), ("b.yaml", "[:".into())]);
        let now = compose(&broken, &start.accepted, &allowing(false)).unwrap();
        assert_eq!(names(&now.set), [pair("a", "Pod"), pair("b", "Secret")]);
    }

    #[test]
    fn nothing_valid_and_nothing_accepted_is_refused_and_a_new_invalid_rule_is_left_out() {
        let bad = version(&[("a.yaml", rule("a", "Pod").replace("for:", "fro:"))]);
        assert!(compose(&bad, &Accepted::default(), &allowing(false)).is_err());
        let mixed = version(&[
            ("a.yaml", rule("a", "Pod").replace("for:", "fro:")),
            ("b.yaml", rule("b", "Secret")),
        ]);
        let now = compose(&mixed, &Accepted::default(), &allowing(false)).unwrap();
        assert_eq!(names(&now.set), [pair("b", "Secret")]);
        assert!(now.kept.is_empty());
    }

    #[test]
    fn an_empty_version_keeps_every_accepted_rule_unless_empty_is_allowed() {
        let first = version(&[("a.yaml", rule("a", "ConfigMap"))]);
        let start = compose(&first, &Accepted::default(), &allowing(false)).unwrap();
        let empty = version(&[]);
        let now = compose(&empty, &start.accepted, &allowing(false)).unwrap();
        assert_eq!(names(&now.set), [pair("a", "ConfigMap")]);
        assert!(
            compose(&empty, &start.accepted, &allowing(true))
                .unwrap()
                .set
                .rules
                .is_empty()
        );
    }

    #[test]
    fn an_unreadable_source_keeps_its_accepted_rules() {
        let first = version(&[("a.yaml", rule("a", "ConfigMap"))]);
        let start = compose(&first, &Accepted::default(), &allowing(false)).unwrap();
        let unread = Version {
            read_errors: vec![Diagnostic::new(
                std::path::Path::new("a.yaml"),
                "",
                None,
                String::new(),
                "cannot read".into(),
            )],
            ..Version::default()
        };
        let now = compose(&unread, &start.accepted, &allowing(false)).unwrap();
        assert_eq!(names(&now.set), [pair("a", "ConfigMap")]);
    }
}
