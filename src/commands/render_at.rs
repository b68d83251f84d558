//! Where in its rule file a render failure comes from: `kiln render` prints
//! `--> FILE:LINE:COL` under a failure, as `kiln validate` does under a
//! diagnostic. The failure names its template's path in the rule
//! (`spec.children[0].template.data.x: …`) or its child (`child `id`: …`);
//! the rule's file is read again for the position of that path.

use kiln::rules::Rule;
use kiln::yaml::{self, Limits, Step};

/// `--> FILE:LINE:COL` for a failure message of `rule`, when it names a
/// place in the rule that its file still holds.
pub fn locate(rule: &Rule, message: &str) -> Option<String> {
    let path = path_of(rule, message)?;
    let text = std::fs::read_to_string(&rule.file).ok()?;
    let docs = yaml::parse_documents(&text, Limits::default()).ok()?;
    let doc = docs.iter().find(|d| {
        d.get(&[Step::Key("metadata".into()), Step::Key("name".into())])
            .is_some_and(|n| n.to_json() == rule.name.as_str())
    })?;
    doc.get(&path[..1])?;
    Some(format!(
        "  --> {}:{}",
        rule.file.display(),
        doc.locate(&path)
    ))
}

/// The path in the rule a failure message starts with.
fn path_of(rule: &Rule, message: &str) -> Option<Vec<Step>> {
    if let Some(rest) = message.strip_prefix("child `") {
        let id = rest.split('`').next()?;
        let i = rule.children.iter().position(|c| c.id == id)?;
        return Some(vec![
            Step::Key("spec".into()),
            Step::Key("children".into()),
            Step::Index(i),
        ]);
    }
    let (path, _) = message.split_once(": ")?;
    path.starts_with("spec").then(|| parse(path)).flatten()
}

/// `spec.children[0].template["a.b"]` → its steps.
fn parse(path: &str) -> Option<Vec<Step>> {
    let mut steps = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('[') {
            let (inside, after) = r.split_once(']')?;
            steps.push(match inside.parse::<usize>() {
                Ok(i) => Step::Index(i),
                Err(_) => Step::Key(serde_json::from_str(inside).ok()?),
            });
            rest = after;
        } else {
            let r = rest.strip_prefix('.').unwrap_or(rest);
            let end = r.find(['.', '[']).unwrap_or(r.len());
            steps.push(Step::Key(r[..end].to_string()));
            rest = &r[end..];
        }
    }
    Some(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_path_parses_into_steps() {
        assert_eq!(
            parse("spec.children[0].template[\"a.b\"].x"),
            Some(vec![
                Step::Key("spec".into()),
                Step::Key("children".into()),
                Step::Index(0),
                Step::Key("template".into()),
                Step::Key("a.b".into()),
                Step::Key("x".into()),
            ])
        );
    }
}
