//! Inline `if` without `else` (`{{ ',' if not loop.last }}`): valid Jinja,
//! where the missing `else` gives an undefined that prints as nothing.
//! Kiln refuses to write an undefined value, so before compiling, each such
//! expression gets an explicit `else ''`: the empty string Jinja would print.

use minijinja::machinery::{Span, Token, tokenize};
use minijinja::syntax::SyntaxConfig;

/// `source` with ` else ''` added to every inline `if` that has no `else`,
/// or `None` when there is none (or the source does not tokenize: the
/// compiler reports that).
pub fn complete(source: &str) -> Option<String> {
    let tokens: Vec<(Token<'_>, Span)> = tokenize(source, false, SyntaxConfig::default())
        .collect::<Result<_, _>>()
        .ok()?;
    let mut inserts = Vec::new();
    let mut start = 0;
    while start < tokens.len() {
        let opens = matches!(tokens[start].0, Token::VariableStart | Token::BlockStart);
        if !opens {
            start += 1;
            continue;
        }
        let end = (start + 1..tokens.len())
            .find(|&i| matches!(tokens[i].0, Token::VariableEnd | Token::BlockEnd))
            .unwrap_or(tokens.len());
        let tag = &tokens[start + 1..end];
        inserts.extend(missing_elses(tag));
        start = end + 1;
    }
    if inserts.is_empty() {
        return None;
    }
    let mut out = source.to_string();
    inserts.sort_unstable();
    for at in inserts.into_iter().rev() {
        out.insert_str(at, " else ''");
    }
    Some(out)
}

/// Byte offsets where an `else` is missing in one tag's tokens (each right
/// after the token that ends the inline `if`).
fn missing_elses(tag: &[(Token<'_>, Span)]) -> Vec<usize> {
    // The `if` of `{% if %}`/`{% elif %}` is a statement's; a `{% for %}`'s
    // top-level `if` filters the loop.
    let statement = match tag.first() {
        Some((Token::Ident("if" | "elif"), _)) => Some(0),
        Some((Token::Ident("for"), _)) => None,
        _ => Some(usize::MAX),
    };
    let depths = depths(tag);
    let mut out = Vec::new();
    for (i, (token, _)) in tag.iter().enumerate() {
        let after_dot = i > 0 && matches!(tag[i - 1].0, Token::Dot);
        if !matches!(token, Token::Ident("if")) || after_dot || statement == Some(i) {
            continue;
        }
        let depth = depths[i];
        if statement.is_none() && depth == 0 {
            continue;
        }
        if let Some(at) = end_without_else(tag, &depths, i, depth) {
            out.push(at);
        }
    }
    out
}

/// The bracket depth before each token.
fn depths(tag: &[(Token<'_>, Span)]) -> Vec<usize> {
    let mut depth = 0usize;
    tag.iter()
        .map(|(t, _)| {
            let here = depth;
            match t {
                Token::ParenOpen | Token::BracketOpen | Token::BraceOpen => depth += 1,
                Token::ParenClose | Token::BracketClose | Token::BraceClose => {
                    depth = depth.saturating_sub(1);
                }
                _ => {}
            }
            here
        })
        .collect()
}

/// Where the inline `if` at `i` ends, if it ends without an `else`: before
/// a `,` or a closing bracket of its own depth, or at the tag's end.
fn end_without_else(
    tag: &[(Token<'_>, Span)],
    depths: &[usize],
    i: usize,
    depth: usize,
) -> Option<usize> {
    let end_of = |j: usize| tag.get(j).map(|(_, span)| span.end_offset as usize);
    for (j, (token, _)) in tag.iter().enumerate().skip(i + 1) {
        if depths[j] != depth {
            continue;
        }
        match token {
            Token::Ident("else") => return None,
            Token::Comma | Token::ParenClose | Token::BracketClose | Token::BraceClose => {
                return end_of(j - 1);
            }
            _ => {}
        }
    }
    end_of(tag.len() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_the_missing_else_only() {
        for (source, want) in [
            (
                "{{ ',' if not loop.last }}",
                Some("{{ ',' if not loop.last else '' }}"),
            ),
            ("{{ 'a' if x else 'b' }}", None),
            ("{% if x %}y{% endif %}", None),
            ("{% for i in xs if i %}{{ i }}{% endfor %}", None),
            ("{{ [1 if a, 2] }}", Some("{{ [1 if a else '', 2] }}")),
            (
                "{{ f(1 if a) ~ ('b' if c) }}",
                Some("{{ f(1 if a else '') ~ ('b' if c else '') }}"),
            ),
            (
                "{% set x = 'a' if c %}",
                Some("{% set x = 'a' if c else '' %}"),
            ),
            ("{{ x.if }} {{ 'if' }}", None),
            (
                "{{ a if (b if c else d) }}",
                Some("{{ a if (b if c else d) else '' }}"),
            ),
            ("no template", None),
        ] {
            assert_eq!(complete(source).as_deref(), want, "{source}");
        }
    }
}
