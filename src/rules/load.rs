//! Reading rule files: paths → files → YAML documents (with positions) →
//! [`RawRule`]s. Files and directories may be mixed; a directory contributes
//! its `*.yaml` / `*.yml` files (not hidden ones: a mounted ConfigMap keeps its
//! real files under `..data`), in name order.

use std::path::{Path, PathBuf};

use super::diagnostic::Diagnostic;
use super::spec::{API_VERSION, KIND, RawRule};
use crate::yaml::{self, Kind, Limits, Node, Step};

/// Largest rule file read; a bigger one is refused, not parsed.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// One rule file's text.
#[derive(Debug, Clone)]
pub struct Source {
    /// Where it came from.
    pub file: PathBuf,
    /// Its contents.
    pub text: String,
}

/// A rule document as parsed, with its YAML tree for positions.
#[derive(Debug, Clone)]
pub struct Document {
    /// The file it is in.
    pub file: PathBuf,
    /// The file's text (for diagnostics).
    pub text: std::sync::Arc<str>,
    /// The document's YAML tree.
    pub node: Node,
    /// The document as a rule.
    pub raw: RawRule,
}

impl Document {
    /// A diagnostic at `path` inside this document.
    pub fn diagnostic(&self, path: &[Step], message: impl Into<String>) -> Diagnostic {
        Diagnostic::new(
            &self.file,
            &self.text,
            Some(self.node.locate(path)),
            yaml::path_string(path),
            message.into(),
        )
        .in_rule(&self.raw.metadata.name)
    }
}

/// Reads every rule file named by `paths` (files, or directories of files).
pub fn read_sources(paths: &[PathBuf]) -> (Vec<Source>, Vec<Diagnostic>) {
    let mut sources = Vec::new();
    let mut diagnostics = Vec::new();
    for path in paths {
        let files = if path.is_dir() {
            match list_dir(path) {
                Ok(files) => files,
                Err(e) => {
                    diagnostics.push(file_error(path, format!("cannot read directory: {e}")));
                    continue;
                }
            }
        } else {
            vec![path.clone()]
        };
        for file in files {
            match read_file(&file) {
                Ok(text) => sources.push(Source { file, text }),
                Err(message) => diagnostics.push(file_error(&file, message)),
            }
        }
    }
    (sources, diagnostics)
}

/// The rule files of a directory, sorted, hidden files skipped.
pub fn list_dir(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_rule_file(p) && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// Whether a path names a rule file: `*.yaml` or `*.yml`, not hidden, and
/// not a test file (`*.test.yaml`, read by `kiln test`).
pub fn is_rule_file(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    !name.starts_with('.')
        && (name.ends_with(".yaml") || name.ends_with(".yml"))
        && !is_test_file(path)
}

/// Whether a path names a `kiln test` file: `*.test.yaml` or `*.test.yml`.
pub fn is_test_file(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    !name.starts_with('.') && (name.ends_with(".test.yaml") || name.ends_with(".test.yml"))
}

fn read_file(file: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(file).map_err(|e| format!("cannot read file: {e}"))?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!(
            "file is {} bytes; rule files may be at most {MAX_FILE_BYTES} bytes",
            meta.len()
        ));
    }
    let bytes = std::fs::read(file).map_err(|e| format!("cannot read file: {e}"))?;
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "file is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

fn file_error(file: &Path, message: String) -> Diagnostic {
    Diagnostic::new(file, "", None, String::new(), message)
}

/// Parses the rule documents of one file.
pub fn parse(source: &Source) -> (Vec<Document>, Vec<Diagnostic>) {
    let text: std::sync::Arc<str> = source.text.as_str().into();
    let nodes = match yaml::parse_documents(&source.text, Limits::default()) {
        Ok(nodes) => nodes,
        Err(e) => {
            let message = format!("invalid YAML: {}", e.message);
            return (Vec::new(), vec![diagnostic(source, e.pos, &[], message)]);
        }
    };
    let mut docs = Vec::new();
    let mut diagnostics = Vec::new();
    for node in nodes {
        if let Some(message) = not_a_rule(&node) {
            diagnostics.push(diagnostic(source, node.pos, &[], message));
            continue;
        }
        match serde_path_to_error::deserialize::<_, RawRule>(node.to_json()) {
            Ok(raw) => docs.push(Document {
                file: source.file.clone(),
                text: text.clone(),
                node,
                raw,
            }),
            Err(e) => diagnostics.push(undecodable(source, &node, &e)),
        }
    }
    (docs, diagnostics)
}

/// A problem at `pos` (and `path`) of `source`.
fn diagnostic(source: &Source, pos: yaml::Pos, path: &[Step], message: String) -> Diagnostic {
    Diagnostic::new(
        &source.file,
        &source.text,
        Some(pos),
        yaml::path_string(path),
        message,
    )
}

/// Why a document is not a kiln rule at all, if it is not.
fn not_a_rule(node: &Node) -> Option<String> {
    if !matches!(node.kind, Kind::Map(_)) {
        return Some("a rule must be a mapping with apiVersion, kind, metadata and spec".into());
    }
    let field = |k: &str| node.get(&[Step::Key(k.into())]).map(Node::to_json);
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    if api_version.as_ref().and_then(|v| v.as_str()) == Some(API_VERSION)
        && kind.as_ref().and_then(|v| v.as_str()) == Some(KIND)
    {
        return None;
    }
    let show = |v: Option<serde_json::Value>| v.map_or("nothing".to_string(), |v| v.to_string());
    Some(format!(
        "not a kiln rule: expected apiVersion `{API_VERSION}` and kind `{KIND}`, found {} and {}",
        show(api_version),
        show(kind)
    ))
}

/// A rule document that does not decode: where, and why, in the words of
/// the YAML its author wrote.
fn undecodable(
    source: &Source,
    node: &Node,
    e: &serde_path_to_error::Error<serde_json::Error>,
) -> Diagnostic {
    let mut path = steps(e.path());
    // serde names our internal types ("struct RawFor"); users wrote YAML.
    let message = plain_types(&e.inner().to_string());
    // Point at the offending key itself, not at its parent map.
    if let Some(field) = message
        .strip_prefix("unknown field `")
        .and_then(|m| m.split('`').next())
        && path.last() != Some(&Step::Key(field.to_string()))
    {
        path.push(Step::Key(field.to_string()));
    }
    let name = node
        .get(&[Step::Key("metadata".into()), Step::Key("name".into())])
        .map(Node::to_json);
    let d = diagnostic(source, node.locate(&path), &path, message);
    match name {
        Some(serde_json::Value::String(name)) => d.in_rule(&name),
        _ => d,
    }
}

fn steps(path: &serde_path_to_error::Path) -> Vec<Step> {
    use serde_path_to_error::Segment;
    path.iter()
        .filter_map(|s| match s {
            Segment::Seq { index } => Some(Step::Index(*index)),
            Segment::Map { key } => Some(Step::Key(key.clone())),
            Segment::Enum { variant } => Some(Step::Key(variant.clone())),
            Segment::Unknown => None,
        })
        .collect()
}

/// Replaces serde's names of kiln's internal types with what a user sees.
fn plain_types(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find("struct Raw") {
        out.push_str(&rest[..i]);
        out.push_str("a mapping");
        let tail = &rest[i + "struct Raw".len()..];
        rest = tail.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_lists_rule_files_and_skips_test_files() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a.yaml", "a.test.yaml", "b.yml", "b.test.yml", ".c.yaml"] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        let names: Vec<String> = list_dir(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.yaml", "b.yml"]);
        assert!(is_test_file(Path::new("x/a.test.yaml")));
        assert!(!is_test_file(Path::new("x/a.yaml")));
    }
}
