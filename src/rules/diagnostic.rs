//! A problem in a rule file, reported like a compiler error: what is wrong,
//! where (file, line, column), and the path inside the rule.
//!
//! ```text
//! error: unknown field `replica`, expected one of `id`, `when`, ...
//!   --> rules/webapp.yaml:14:7
//!    |
//! 14 |       replica: 3
//!    |       ^
//!    = at spec.children[0] in rule `webapp`
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use crate::yaml::Pos;

/// One problem found while loading or validating rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file it is in.
    pub file: PathBuf,
    /// Where in the file, when known.
    pub pos: Option<Pos>,
    /// The path inside the rule, e.g. `spec.children[1].template.spec.replicas`.
    pub path: String,
    /// The rule's name, when known.
    pub rule: Option<String>,
    /// What is wrong.
    pub message: String,
    /// The source line at `pos`, for context.
    pub source_line: Option<String>,
    /// A warning: the rule loads, but the problem shows when it runs.
    pub warning: bool,
}

impl Diagnostic {
    /// A problem at a position in `text` (the file's contents).
    pub fn new(file: &Path, text: &str, pos: Option<Pos>, path: String, message: String) -> Self {
        let source_line = pos
            .and_then(|p| text.lines().nth(p.line.saturating_sub(1)))
            .map(str::to_string);
        Self {
            file: file.to_path_buf(),
            pos,
            path,
            rule: None,
            message,
            source_line,
            warning: false,
        }
    }

    /// The same problem, as a warning.
    pub fn as_warning(mut self) -> Self {
        self.warning = true;
        self
    }

    /// The same problem, attributed to a rule.
    pub fn in_rule(mut self, rule: &str) -> Self {
        self.rule = Some(rule.to_string());
        self
    }

    /// `file:line:col`, the form editors and terminals make clickable.
    pub fn location(&self) -> String {
        match self.pos {
            Some(p) => format!("{}:{}", self.file.display(), p),
            None => self.file.display().to_string(),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = if self.warning { "warning" } else { "error" };
        writeln!(f, "{level}: {}", self.message)?;
        let gutter = self.pos.map_or(1, |p| p.line.to_string().len());
        let pad = " ".repeat(gutter);
        writeln!(f, "{pad}--> {}", self.location())?;
        if let (Some(pos), Some(line)) = (self.pos, &self.source_line) {
            writeln!(f, "{pad} |")?;
            writeln!(f, "{} | {line}", pos.line)?;
            writeln!(f, "{pad} | {}^", " ".repeat(pos.col.saturating_sub(1)))?;
        }
        match (&self.rule, self.path.is_empty()) {
            (Some(rule), false) => writeln!(f, "{pad} = at {} in rule `{rule}`", self.path),
            (Some(rule), true) => writeln!(f, "{pad} = in rule `{rule}`"),
            (None, false) => writeln!(f, "{pad} = at {}", self.path),
            (None, true) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_a_compiler_error() {
        let text = "a: 1\nspec:\n  replica: 3\n";
        let d = Diagnostic::new(
            Path::new("rules/x.yaml"),
            text,
            Some(Pos { line: 3, col: 3 }),
            "spec".into(),
            "unknown field `replica`".into(),
        )
        .in_rule("x");
        assert_eq!(
            d.to_string(),
            "error: unknown field `replica`\n --> rules/x.yaml:3:3\n  |\n3 |   replica: 3\n  |   ^\n  = at spec in rule `x`\n"
        );
    }
}
