//! YAML documents with the position of every node, so that any problem found
//! later (a wrong type, an unknown field, a template that does not compile)
//! can be reported at its file, line and column.
//!
//! Scalars resolve by the YAML 1.2 core schema (`yes` and `on` stay strings).
//! Hostile input is bounded: nesting depth and the number of nodes (which
//! includes alias expansion, so "billion laughs" documents fail fast).

use std::collections::HashMap;
use std::fmt;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::{Map, Number, Value};

/// A position in a file, both 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub col: usize,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

impl From<&Span> for Pos {
    fn from(span: &Span) -> Self {
        Self {
            line: span.start.line(),
            col: span.start.col() + 1,
        }
    }
}

/// A node of a YAML document and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Where the node starts.
    pub pos: Pos,
    /// What it holds.
    pub kind: Kind,
}

/// The value of a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// `null`, `~` or nothing.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float (finite: JSON has no NaN or infinity).
    Float(f64),
    /// A string.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in document order.
    Map(Vec<Entry>),
}

/// One key of a mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The key (mapping keys are scalars, kept as their text).
    pub key: String,
    /// Where the key starts.
    pub key_pos: Pos,
    /// The value.
    pub value: Node,
}

/// One step of a path into a document: a mapping key or a sequence index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A mapping key.
    Key(String),
    /// A sequence index.
    Index(usize),
}

/// Renders a path the way users write it: `spec.children[1].template`.
pub fn path_string(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k)
                if k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Key(k) => out.push_str(&format!("[{k:?}]")),
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Bounds on what one document may contain.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Deepest nesting of mappings and sequences.
    pub max_depth: usize,
    /// Most nodes in one document, counting every alias expansion.
    pub max_nodes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_depth: 64,
            max_nodes: 100_000,
        }
    }
}

/// A YAML syntax error, or input outside the [`Limits`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    /// Where it was found.
    pub pos: Pos,
    /// What is wrong.
    pub message: String,
}

impl Error {
    fn at(pos: Pos, message: impl Into<String>) -> Self {
        Self {
            pos,
            message: message.into(),
        }
    }
}

enum Frame {
    Seq {
        pos: Pos,
        anchor: usize,
        items: Vec<Node>,
        nodes: usize,
    },
    Map {
        pos: Pos,
        anchor: usize,
        entries: Vec<Entry>,
        key: Option<(String, Pos)>,
        nodes: usize,
    },
}

/// Parses every document of a YAML stream. Empty documents are skipped.
pub fn parse_documents(text: &str, limits: Limits) -> Result<Vec<Node>, Error> {
    let mut builder = Builder {
        limits,
        docs: Vec::new(),
        stack: Vec::new(),
        anchors: HashMap::new(),
        doc_nodes: 0,
        root: None,
    };
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| {
            let m = e.marker();
            Error::at(
                Pos {
                    line: m.line(),
                    col: m.col() + 1,
                },
                e.info().to_string(),
            )
        })?;
        builder.event(event, Pos::from(&span))?;
    }
    Ok(builder.docs)
}

/// A YAML stream built into documents one parser event at a time.
struct Builder {
    limits: Limits,
    /// The documents finished.
    docs: Vec<Node>,
    /// The collections open in the current document, innermost last.
    stack: Vec<Frame>,
    /// Anchor id -> (node, node count), for aliases.
    anchors: HashMap<usize, (Node, usize)>,
    /// Nodes in the current document so far, aliases counted in full.
    doc_nodes: usize,
    /// The current document's root, once finished.
    root: Option<Node>,
}

impl Builder {
    fn event(&mut self, event: Event<'_>, pos: Pos) -> Result<(), Error> {
        let done: Option<(Node, usize, usize)> = match event {
            Event::DocumentStart(_) => {
                self.anchors.clear();
                self.doc_nodes = 0;
                self.root = None;
                None
            }
            Event::DocumentEnd => {
                if let Some(node) = self.root.take()
                    && node.kind != Kind::Null
                {
                    self.docs.push(node);
                }
                None
            }
            Event::Scalar(value, style, anchor, tag) => {
                count_nodes(&mut self.doc_nodes, 1, self.limits, pos)?;
                let kind = resolve_scalar(&value, style, tag.as_deref(), pos)?;
                Some((Node { pos, kind }, anchor, 1))
            }
            Event::Alias(id) => {
                let (node, count) = self
                    .anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| Error::at(pos, "alias to an unknown anchor"))?;
                count_nodes(&mut self.doc_nodes, count, self.limits, pos)?;
                Some((node, 0, count))
            }
            Event::SequenceStart(anchor, _) => {
                let items = Vec::new();
                self.open(
                    Frame::Seq {
                        pos,
                        anchor,
                        items,
                        nodes: 1,
                    },
                    pos,
                )?;
                None
            }
            Event::MappingStart(anchor, _) => {
                let (entries, key) = (Vec::new(), None);
                self.open(
                    Frame::Map {
                        pos,
                        anchor,
                        entries,
                        key,
                        nodes: 1,
                    },
                    pos,
                )?;
                None
            }
            Event::SequenceEnd | Event::MappingEnd => Some(self.close(pos)?),
            Event::StreamStart | Event::StreamEnd | Event::Nothing => None,
        };
        if let Some((node, anchor, count)) = done {
            if anchor != 0 {
                self.anchors.insert(anchor, (node.clone(), count));
            }
            attach(&mut self.stack, &mut self.root, node, count)?;
        }
        Ok(())
    }

    /// A collection starts: it counts as a node and nests one level deeper.
    fn open(&mut self, frame: Frame, pos: Pos) -> Result<(), Error> {
        count_nodes(&mut self.doc_nodes, 1, self.limits, pos)?;
        push(&mut self.stack, frame, self.limits, pos)
    }

    /// The innermost collection ends: its node, anchor and node count.
    fn close(&mut self, pos: Pos) -> Result<(Node, usize, usize), Error> {
        let (pos, anchor, kind, nodes) = match self.stack.pop() {
            Some(Frame::Seq {
                pos,
                anchor,
                items,
                nodes,
            }) => (pos, anchor, Kind::Seq(items), nodes),
            Some(Frame::Map {
                pos,
                anchor,
                entries,
                nodes,
                ..
            }) => (pos, anchor, Kind::Map(entries), nodes),
            None => return Err(Error::at(pos, "unbalanced end of a collection")),
        };
        Ok((Node { pos, kind }, anchor, nodes))
    }
}

fn count_nodes(total: &mut usize, add: usize, limits: Limits, pos: Pos) -> Result<(), Error> {
    *total = total.saturating_add(add);
    if *total > limits.max_nodes {
        return Err(Error::at(
            pos,
            format!(
                "document has more than {} nodes (an alias counts its whole target each time)",
                limits.max_nodes
            ),
        ));
    }
    Ok(())
}

fn push(stack: &mut Vec<Frame>, frame: Frame, limits: Limits, pos: Pos) -> Result<(), Error> {
    if stack.len() >= limits.max_depth {
        return Err(Error::at(
            pos,
            format!("nesting deeper than {} levels", limits.max_depth),
        ));
    }
    stack.push(frame);
    Ok(())
}

/// Adds a finished node to its parent (or makes it the document's root).
fn attach(
    stack: &mut [Frame],
    root: &mut Option<Node>,
    node: Node,
    count: usize,
) -> Result<(), Error> {
    match stack.last_mut() {
        None => *root = Some(node),
        Some(Frame::Seq { items, nodes, .. }) => {
            *nodes = nodes.saturating_add(count);
            items.push(node);
        }
        Some(Frame::Map {
            entries,
            key,
            nodes,
            ..
        }) => {
            *nodes = nodes.saturating_add(count);
            match key.take() {
                None => {
                    let text = match node.kind {
                        Kind::Str(s) => s,
                        Kind::Int(i) => i.to_string(),
                        Kind::Float(f) => f.to_string(),
                        Kind::Bool(b) => b.to_string(),
                        Kind::Null => "null".to_string(),
                        Kind::Seq(_) | Kind::Map(_) => {
                            return Err(Error::at(node.pos, "mapping keys must be scalars"));
                        }
                    };
                    if entries.iter().any(|e| e.key == text) {
                        return Err(Error::at(node.pos, format!("duplicate key `{text}`")));
                    }
                    *key = Some((text, node.pos));
                }
                Some((k, key_pos)) => entries.push(Entry {
                    key: k,
                    key_pos,
                    value: node,
                }),
            }
        }
    }
    Ok(())
}

fn resolve_scalar(
    value: &str,
    style: ScalarStyle,
    tag: Option<&saphyr_parser::Tag>,
    pos: Pos,
) -> Result<Kind, Error> {
    if let Some(tag) = tag {
        let core = tag.is_yaml_core_schema();
        return match (core, tag.suffix.as_str()) {
            (true, "str") => Ok(Kind::Str(value.to_string())),
            (true, "null" | "bool" | "int" | "float") => {
                let kind = resolve_plain(value, pos)?;
                let ok = matches!(
                    (tag.suffix.as_str(), &kind),
                    ("null", Kind::Null)
                        | ("bool", Kind::Bool(_))
                        | ("int", Kind::Int(_))
                        | ("float", Kind::Float(_) | Kind::Int(_))
                );
                if ok {
                    Ok(kind)
                } else {
                    Err(Error::at(
                        pos,
                        format!("`{value}` is not a valid !!{}", tag.suffix),
                    ))
                }
            }
            _ => Err(Error::at(
                pos,
                format!("unsupported tag `{}{}`", tag.handle, tag.suffix),
            )),
        };
    }
    match style {
        ScalarStyle::Plain => resolve_plain(value, pos),
        _ => Ok(Kind::Str(value.to_string())),
    }
}

/// Whether kiln reads the plain (unquoted) scalar `value` as a string.
pub fn plain_is_string(value: &str) -> bool {
    matches!(resolve_plain(value, Pos::default()), Ok(Kind::Str(_)))
}

fn resolve_plain(value: &str, pos: Pos) -> Result<Kind, Error> {
    Ok(match value {
        "" | "~" | "null" | "Null" | "NULL" => Kind::Null,
        "true" | "True" | "TRUE" => Kind::Bool(true),
        "false" | "False" | "FALSE" => Kind::Bool(false),
        _ => {
            if let Some(i) = parse_int(value) {
                Kind::Int(i)
            } else if looks_like_float(value) {
                match value.parse::<f64>() {
                    Ok(f) if f.is_finite() => Kind::Float(f),
                    _ => return Err(Error::at(pos, format!("`{value}` is not a finite number"))),
                }
            } else if matches!(
                value.trim_start_matches(['-', '+']),
                ".inf" | ".Inf" | ".INF"
            ) || matches!(value, ".nan" | ".NaN" | ".NAN")
            {
                return Err(Error::at(
                    pos,
                    format!("`{value}` cannot be represented in JSON"),
                ));
            } else {
                Kind::Str(value.to_string())
            }
        }
    })
}

fn parse_int(v: &str) -> Option<i64> {
    if let Some(hex) = v.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok();
    }
    if let Some(oct) = v.strip_prefix("0o") {
        return i64::from_str_radix(oct, 8).ok();
    }
    let digits = v.strip_prefix(['-', '+']).unwrap_or(v);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse().ok();
    }
    None
}

fn looks_like_float(v: &str) -> bool {
    let body = v.strip_prefix(['-', '+']).unwrap_or(v);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let digits_dot = |s: &str| {
        !s.is_empty()
            && s != "."
            && s.bytes().filter(|b| *b == b'.').count() <= 1
            && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    };
    let exp_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
    });
    digits_dot(mantissa) && (mantissa.contains('.') || exponent.is_some()) && exp_ok
}

impl Node {
    /// The node as JSON.
    pub fn to_json(&self) -> Value {
        match &self.kind {
            Kind::Null => Value::Null,
            Kind::Bool(b) => Value::Bool(*b),
            Kind::Int(i) => Value::Number((*i).into()),
            Kind::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Kind::Str(s) => Value::String(s.clone()),
            Kind::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Kind::Map(entries) => {
                let mut map = Map::with_capacity(entries.len());
                for e in entries {
                    map.insert(e.key.clone(), e.value.to_json());
                }
                Value::Object(map)
            }
        }
    }

    /// The node at `path`, if there is one.
    pub fn get(&self, path: &[Step]) -> Option<&Node> {
        let Some((first, rest)) = path.split_first() else {
            return Some(self);
        };
        match (&self.kind, first) {
            (Kind::Map(entries), Step::Key(k)) => {
                entries.iter().find(|e| &e.key == k)?.value.get(rest)
            }
            (Kind::Seq(items), Step::Index(i)) => items.get(*i)?.get(rest),
            _ => None,
        }
    }

    /// The position of the deepest node on `path` that exists; for a path
    /// ending in a key that exists, the position of that key.
    pub fn locate(&self, path: &[Step]) -> Pos {
        let Some((first, rest)) = path.split_first() else {
            return self.pos;
        };
        match (&self.kind, first) {
            (Kind::Map(entries), Step::Key(k)) => match entries.iter().find(|e| &e.key == k) {
                Some(e) if rest.is_empty() => e.key_pos,
                Some(e) => e.value.locate(rest),
                None => self.pos,
            },
            (Kind::Seq(items), Step::Index(i)) => {
                items.get(*i).map_or(self.pos, |n| n.locate(rest))
            }
            _ => self.pos,
        }
    }
}
