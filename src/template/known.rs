//! Filters, tests and functions a template calls that kiln does not have
//! (`b64encod`, `truncate`), found in its compiled code at validation, with
//! where (line and column in the template) and the nearest known name.
//! A rule calling one would fail on every render; it is refused instead.

use std::collections::BTreeSet;
use std::fmt;

use minijinja::Environment;
use minijinja::machinery::{Instruction, Instructions, get_compiled_template};

use super::{CAPTURE, TemplateId, TemplateSet};

/// What a name is called as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Callable {
    /// `x | name`
    Filter,
    /// `x is name`
    Test,
    /// `name(...)`
    Function,
}

impl fmt::Display for Callable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Filter => "filter",
            Self::Test => "test",
            Self::Function => "function",
        })
    }
}

/// A call of a name kiln does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown {
    /// Filter, test or function.
    pub kind: Callable,
    /// The name called.
    pub name: String,
    /// Line in the template's text, from 1.
    pub line: usize,
    /// Column in that line, in characters, from 1.
    pub col: usize,
    /// The text of that line.
    pub line_text: String,
    /// The closest known name of the same kind, when one is close.
    pub hint: Option<String>,
}

impl fmt::Display for Unknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} `{}`", self.kind, self.name)?;
        if let Some(hint) = &self.hint {
            write!(f, " (did you mean `{hint}`?)")?;
        }
        Ok(())
    }
}

/// minijinja's tests (kiln adds none).
const TESTS: &[&str] = &[
    "undefined",
    "defined",
    "none",
    "safe",
    "escaped",
    "boolean",
    "odd",
    "even",
    "divisibleby",
    "number",
    "integer",
    "int",
    "float",
    "string",
    "sequence",
    "iterable",
    "mapping",
    "startingwith",
    "endingwith",
    "lower",
    "upper",
    "sameas",
    "eq",
    "equalto",
    "ne",
    "lt",
    "lessthan",
    "le",
    "gt",
    "greaterthan",
    "ge",
    "in",
    "true",
    "false",
    "filter",
    "test",
];

/// Functions the compiler provides besides the environment's globals.
const BUILT_IN_CALLS: &[&str] = &["super", "loop", "caller", "varargs", "kwargs"];

impl TemplateSet {
    /// Whether `name` is a function templates can call (`now`, `range`).
    pub fn is_function(&self, name: &str) -> bool {
        self.env.globals().any(|(g, _)| g == name)
    }

    /// Every filter, test and function `id` calls that kiln does not have,
    /// in the order they appear.
    pub fn unknown_names(&self, id: &TemplateId) -> Vec<Unknown> {
        let Ok(template) = id.template() else {
            return Vec::new();
        };
        let locals_excluded = template.undeclared_variables(false);
        let compiled = get_compiled_template(&template);
        let mut out = Vec::new();
        let all = std::iter::once(&compiled.instructions).chain(compiled.blocks.values());
        for instructions in all {
            for (idx, kind, name) in calls(instructions) {
                let known = match kind {
                    Callable::Filter => is_filter(self.env, name),
                    Callable::Test => is_test(self.env, name),
                    Callable::Function => {
                        !locals_excluded.contains(name)
                            || BUILT_IN_CALLS.contains(&name)
                            || self.env.globals().any(|(g, _)| g == name)
                    }
                };
                if !known
                    && !out
                        .iter()
                        .any(|u: &Unknown| u.name == name && u.kind == kind)
                {
                    out.push(self.unknown(instructions, idx, kind, name));
                }
            }
        }
        out
    }

    fn unknown(&self, code: &Instructions<'_>, idx: u32, kind: Callable, name: &str) -> Unknown {
        let source = code.source();
        let span_start = code.get_span(idx).map_or(0, |s| s.start_offset as usize);
        let at = source
            .get(span_start..)
            .and_then(|rest| rest.find(name))
            .map_or(span_start, |i| span_start + i);
        let (line, mut col, mut line_text) = line_col(source, at);
        // An expression is compiled inside a wrapper that captures its value.
        let wrapper = format!("{{% set {CAPTURE} = (");
        if line == 1 && source.starts_with(&wrapper) {
            col = col.saturating_sub(wrapper.len()).max(1);
            line_text = line_text
                .get(wrapper.len()..)
                .unwrap_or_default()
                .to_string();
        }
        let candidates: Vec<String> = match kind {
            Callable::Filter => self.filters.iter().map(ToString::to_string).collect(),
            Callable::Test => TESTS.iter().map(ToString::to_string).collect(),
            Callable::Function => self.env.globals().map(|(g, _)| g.to_string()).collect(),
        };
        Unknown {
            kind,
            name: name.to_string(),
            line,
            col,
            line_text,
            hint: closest(name, candidates.iter().map(String::as_str)),
        }
    }
}

/// Each filter, test and function call in `code`: (instruction, kind, name).
fn calls<'s>(code: &Instructions<'s>) -> Vec<(u32, Callable, &'s str)> {
    let mut out = Vec::new();
    let mut idx = 0;
    while let Some(instruction) = code.get(idx) {
        match instruction {
            Instruction::ApplyFilter(name, ..) => out.push((idx, Callable::Filter, *name)),
            Instruction::PerformTest(name, ..) => out.push((idx, Callable::Test, *name)),
            Instruction::CallFunction(name, _) => out.push((idx, Callable::Function, *name)),
            _ => {}
        }
        idx += 1;
    }
    out
}

/// Every name a template stores anywhere (`{% set %}`, loop and macro
/// variables), in any branch.
pub(super) fn stored_locals(template: &minijinja::Template<'_, '_>) -> BTreeSet<String> {
    let compiled = get_compiled_template(template);
    let mut out = BTreeSet::new();
    for code in std::iter::once(&compiled.instructions).chain(compiled.blocks.values()) {
        let mut idx = 0;
        while let Some(instruction) = code.get(idx) {
            if let Instruction::StoreLocal(name) = instruction {
                out.insert((*name).to_string());
            }
            idx += 1;
        }
    }
    out
}

fn is_filter(env: &Environment<'static>, name: &str) -> bool {
    minijinja::tests::is_filter(&env.empty_state(), name)
}

fn is_test(env: &Environment<'static>, name: &str) -> bool {
    minijinja::tests::is_test(&env.empty_state(), name)
}

/// Line (from 1), column (characters, from 1) and the line's text at byte
/// `at` of `source`.
fn line_col(source: &str, at: usize) -> (usize, usize, String) {
    let before = source.get(..at).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = source.get(start..at).map_or(0, |s| s.chars().count()) + 1;
    let text = source[start..]
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    (line, col, text)
}

/// The candidate nearest to `name` by edit distance, if it is close: at
/// most a third of the name's length (and at least 1) edits away.
pub fn closest<'c>(name: &str, candidates: impl Iterator<Item = &'c str>) -> Option<String> {
    let most = (name.chars().count() / 3).max(1);
    candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= most)
        .min()
        .map(|(_, c)| c.to_string())
}

/// Levenshtein distance, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown(source: &str) -> Vec<String> {
        let mut set = TemplateSet::new();
        let id = set.add_text("t", source).expect("compiles");
        set.unknown_names(&id)
            .iter()
            .map(|u| format!("{}:{} {u}", u.line, u.col))
            .collect()
    }

    #[test]
    fn unknown_filters_tests_and_functions_are_found_with_a_hint() {
        assert_eq!(
            unknown("a: {{ x | b64encod }}\nb: {{ x is definedd }} {{ random_secrte(32) }}"),
            [
                "1:11 unknown filter `b64encod` (did you mean `b64encode`?)",
                "2:12 unknown test `definedd` (did you mean `defined`?)",
                "2:27 unknown function `random_secrte` (did you mean `random_secret`?)",
            ]
        );
        assert_eq!(
            unknown("{{ x | truncate(3) }}"),
            ["1:8 unknown filter `truncate`"]
        );
        assert_eq!(
            unknown("{% filter upperr %}x{% endfilter %}"),
            ["1:11 unknown filter `upperr` (did you mean `upper`?)"]
        );
    }

    #[test]
    fn what_exists_is_not_reported() {
        let fine = "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1) }}{{ x | b64encode | default('') }}\
            {% set f = namespace(n=1) %}{{ range(3) | list }}{{ x is defined }}{{ seeded_string('s', 4) }}\
            {% for i in [1] %}{{ loop.index }}{% endfor %}";
        assert!(unknown(fine).is_empty(), "{:?}", unknown(fine));
    }

    #[test]
    fn closest_needs_to_be_close() {
        let names = ["b64encode", "sha256", "upper"];
        assert_eq!(
            closest("b64encod", names.into_iter()).as_deref(),
            Some("b64encode")
        );
        assert_eq!(closest("frobnicate", names.into_iter()), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
