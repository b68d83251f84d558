//! Which operand of a template was undefined, in the words of the template:
//! the expression a user wrote (`related.credentials.data`), never the
//! filter call around it. A filter that fails on an undefined operand says
//! which one (`guarded` in `limits.rs`: its input, or its argument `i`);
//! here the operand's text is cut from the template's source.

use std::ops::Range;

/// The detail of a filter's error when its input was undefined.
pub(crate) fn input_detail(filter: &str) -> String {
    format!("the input of `{filter}` is undefined")
}

/// The detail of a filter's error when its argument `i` (from 1) was undefined.
pub(crate) fn argument_detail(filter: &str, i: usize) -> String {
    format!("argument {i} of `{filter}` is undefined")
}

/// The message of an undefined-value error at `range` of `source`, with
/// the error's `detail`.
pub(crate) fn message(source: &str, range: Option<Range<usize>>, detail: Option<&str>) -> String {
    let Some(range) = range else {
        return "undefined value".to_string();
    };
    let operand = detail.and_then(|d| operand(source, &range, d));
    if let Some((text, role)) = operand {
        return format!("undefined value: `{text}` is undefined ({role})");
    }
    match enclosing_expression(source, range) {
        Some(expr) => format!("undefined value: `{expr}` is undefined"),
        None => "undefined value".to_string(),
    }
}

/// The operand a filter's `detail` names, and its role: the input (the
/// expression before the last `|` before the call) or an argument (inside
/// the call's parentheses).
fn operand<'a>(source: &'a str, range: &Range<usize>, detail: &str) -> Option<(&'a str, String)> {
    let call = source.get(range.clone())?;
    let filter = call.split('(').next()?.trim();
    if detail == input_detail(filter) {
        let before = source.get(..range.start)?;
        let start = expression_start(before);
        let input = before.get(start..)?.trim_end().strip_suffix('|')?.trim();
        return (!input.is_empty()).then(|| (input, format!("the input of `{filter}`")));
    }
    let i: usize = detail
        .strip_prefix("argument ")?
        .split(' ')
        .next()?
        .parse()
        .ok()?;
    if detail != argument_detail(filter, i) {
        return None;
    }
    let inside = call.get(call.find('(')? + 1..call.rfind(')')?)?;
    let arg = top_level_split(inside).into_iter().nth(i.checked_sub(1)?)?;
    Some((arg.trim(), format!("argument {i} of `{filter}`")))
}

/// Where the expression ending at the end of `before` starts: after the
/// last `{{`, or after `= (` (a whole-value template is compiled as `{% set
/// … = (EXPR) %}`), else at 0.
fn expression_start(before: &str) -> usize {
    let braces = before.rfind("{{").map(|i| i + 2);
    let set = before.rfind("= (").map(|i| i + 3);
    braces.max(set).unwrap_or(0)
}

/// `text` split at the commas outside brackets and quotes.
fn top_level_split(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut quote, mut start) = (0i32, None, 0);
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') => depth -= 1,
            (None, ',') if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

/// The text of the `{{ ... }}` around a byte range of a template's source.
fn enclosing_expression(source: &str, range: Range<usize>) -> Option<&str> {
    let start = source
        .get(..range.start)?
        .rfind("{{")
        .map_or(range.start, |i| i + 2);
    let end = source
        .get(range.end..)?
        .find("}}")
        .map_or(range.end, |i| range.end + i);
    let expr = source
        .get(start..end)?
        .trim_matches(|c: char| c.is_whitespace() || c == '-' || c == '+');
    Some(expr.split('|').next().unwrap_or(expr).trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_names_its_undefined_input_or_argument_as_written() {
        let source = "{% set v = (related.credentials.data | hmac_sha256(children.hashkey.data.key, 'x')\n) %}";
        let call = source.find("hmac_sha256").unwrap();
        let range = call..source.find("'x')").unwrap() + 4;
        assert_eq!(
            message(
                source,
                Some(range.clone()),
                Some(&input_detail("hmac_sha256"))
            ),
            "undefined value: `related.credentials.data` is undefined (the input of `hmac_sha256`)"
        );
        assert_eq!(
            message(
                source,
                Some(range),
                Some(&argument_detail("hmac_sha256", 1))
            ),
            "undefined value: `children.hashkey.data.key` is undefined (argument 1 of `hmac_sha256`)"
        );
    }
}
