//! What kiln can tell of a CEL expression without a CEL engine: that it is
//! not empty, not longer than [`MAX_LEN`], its string literals closed and
//! its brackets balanced; and which of `self`'s top-level fields it reads,
//! so a whole-object validation that reads only `self.spec` can sit on
//! `spec` (where the API server ratchets it per spec) rewritten to read the
//! spec as `self`. Names, types, functions and cost are the API server's to
//! check when the CRD is applied.

/// The longest expression (or message expression) kiln accepts.
pub const MAX_LEN: usize = 4096;

/// One piece of an expression: code, or a string literal (quotes included).
enum Piece<'a> {
    Code(&'a str),
    Literal(&'a str),
}

/// Why an expression is refused offline.
pub fn check(expr: &str) -> Result<(), String> {
    if expr.trim().is_empty() {
        return Err("empty CEL expression".into());
    }
    if expr.len() > MAX_LEN {
        return Err(format!(
            "the CEL expression is {} bytes long, more than kiln's bound of {MAX_LEN}",
            expr.len()
        ));
    }
    let mut open = Vec::new();
    for piece in pieces(expr)? {
        let Piece::Code(code) = piece else { continue };
        for c in code.chars() {
            match c {
                '(' | '[' | '{' => open.push(c),
                ')' | ']' | '}' => {
                    let want = match c {
                        ')' => '(',
                        ']' => '[',
                        _ => '{',
                    };
                    if open.pop() != Some(want) {
                        return Err(format!("unbalanced `{c}` in the CEL expression"));
                    }
                }
                _ => {}
            }
        }
    }
    match open.last() {
        Some(c) => Err(format!("`{c}` is never closed in the CEL expression")),
        None => Ok(()),
    }
}

/// The expression split into code and string literals; an unclosed
/// literal is an error.
fn pieces(expr: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let (bytes, mut start, mut i) = (expr.as_bytes(), 0, 0);
    while i < bytes.len() {
        let c = bytes[i];
        if c != b'"' && c != b'\'' {
            i += 1;
            continue;
        }
        // A raw or bytes prefix (`r"…"`, `b'…'`) belongs to the literal.
        let raw = i > 0 && matches!(bytes[i - 1], b'r' | b'R');
        let triple = bytes[i..].starts_with(&[c, c, c]);
        let quote = if triple { 3 } else { 1 };
        let mut j = i + quote;
        let end = loop {
            if j >= bytes.len() {
                return Err("a string literal is never closed in the CEL expression".into());
            }
            if bytes[j] == b'\\' && !raw {
                j += 2;
                continue;
            }
            if bytes[j..].starts_with(&vec![c; quote]) {
                break j + quote;
            }
            if !triple && bytes[j] == b'\n' {
                return Err("a string literal is never closed in the CEL expression".into());
            }
            j += 1;
        };
        out.push(Piece::Code(&expr[start..i]));
        out.push(Piece::Literal(&expr[i..end]));
        (start, i) = (end, end);
    }
    out.push(Piece::Code(&expr[start..]));
    Ok(out)
}

fn ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `expr` rewritten to read the spec as `self` (and `oldSelf`), when every
/// `self` and `oldSelf` it names is followed by `.spec.` and a field; `None` when it
/// reads anything else of the object (its metadata, its status, the whole
/// object) or cannot be scanned.
pub fn on_spec(expr: &str) -> Option<String> {
    let mut out = String::with_capacity(expr.len());
    for piece in pieces(expr).ok()? {
        match piece {
            Piece::Literal(l) => out.push_str(l),
            Piece::Code(code) => out.push_str(&code_on_spec(code)?),
        }
    }
    Some(out)
}

fn code_on_spec(code: &str) -> Option<String> {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find(|c: char| ident(c) || c == '.') {
        out.push_str(&rest[..at]);
        let word_len = rest[at..]
            .find(|c: char| !(ident(c) || c == '.'))
            .unwrap_or(rest.len() - at);
        let word = &rest[at..at + word_len];
        // A word is a dotted path: `self.spec.x`, `a.b`, `.x` after a call.
        let root = word.split('.').next().unwrap_or_default();
        let mut parts = word.splitn(3, '.');
        let (first, second) = (parts.next(), parts.next());
        if root == "self" || root == "oldSelf" {
            // `self.spec` alone stays whole: `has(self)` is not CEL.
            let (Some(_), Some("spec"), Some(tail)) = (first, second, parts.next()) else {
                return None;
            };
            out.push_str(root);
            out.push('.');
            out.push_str(tail);
        } else {
            out.push_str(word);
        }
        rest = &rest[at + word_len..];
    }
    out.push_str(rest);
    Some(out)
}

/// A field path (`.spec.schedule`, `.metadata.name`) moved onto `spec`, or
/// `None` when it is outside it.
pub fn path_on_spec(path: &str) -> Option<String> {
    let tail = path.strip_prefix(".spec")?;
    match tail.chars().next() {
        None => Some(String::new()),
        Some('.' | '[') => Some(tail.to_string()),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_closed_and_bounded_expressions_pass() {
        assert!(check("self.spec.schedule.split(' ').size() == 5").is_ok());
        assert!(check(r#"self.spec.x.matches('^[(]+$') && "}" != ")""#).is_ok());
        assert!(check(r"r'\d' == '\\d'").is_ok());
    }

    #[test]
    fn what_check_refuses() {
        for (expr, want) in [
            ("  ", "empty"),
            ("size(self.spec.x", "never closed"),
            ("self.spec.x)", "unbalanced `)`"),
            ("self.spec[0)", "unbalanced `)`"),
            ("self.spec.x == 'a", "string literal is never closed"),
            ("'''a", "string literal is never closed"),
        ] {
            let err = check(expr).unwrap_err();
            assert!(err.contains(want), "{expr}: {err}");
        }
        let long = format!("self.spec.x == '{}'", "a".repeat(MAX_LEN));
        assert!(check(&long).unwrap_err().contains("kiln's bound"));
    }

    #[test]
    fn an_expression_reading_only_the_spec_moves_onto_it() {
        assert_eq!(
            on_spec("has(self.spec.a) && self.spec.a != oldSelf.spec.a").as_deref(),
            Some("has(self.a) && self.a != oldSelf.a")
        );
        // `self.spec` inside a literal is text, not a read.
        assert_eq!(
            on_spec("self.spec.s != 'self.metadata'").as_deref(),
            Some("self.s != 'self.metadata'")
        );
        // A bound variable named like a field is not `self`.
        assert_eq!(
            on_spec("self.spec.xs.all(myself, myself.size() > 0)").as_deref(),
            Some("self.xs.all(myself, myself.size() > 0)")
        );
        for whole in [
            "self.metadata.name.startsWith('a')",
            "self.spec.a == self.status.a",
            "has(self.spec)",
            "self.spec == oldSelf.spec",
            "self.spec.a == 1 && self == oldSelf",
            "self .spec.a == 1",
        ] {
            assert_eq!(on_spec(whole), None, "{whole}");
        }
    }

    #[test]
    fn field_paths_move_onto_the_spec_only_from_inside_it() {
        assert_eq!(path_on_spec(".spec.schedule").as_deref(), Some(".schedule"));
        assert_eq!(path_on_spec(".spec['a b']").as_deref(), Some("['a b']"));
        assert_eq!(path_on_spec(".specs.x"), None);
        assert_eq!(path_on_spec(".metadata.name"), None);
    }
}
