//! The user documentation holds together, offline: every relative link of
//! the README, the changelog and the book (`docs/`) points at a file that
//! exists, every `#anchor` at a heading of its page, and the book's pages
//! link only inside the book (what `mdbook build` turns into HTML). The
//! README stays a front page: short, with no development history.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    reason = "test code fails loudly by design"
)]

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The pages checked: the front page, the changelog, the READMEs users are
/// sent to, and every page of the book.
fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = [
        "README.md",
        "CHANGELOG.md",
        "rules/README.md",
        "deploy/README.md",
        "examples/README.md",
        "examples/my-platform/README.md",
        "charts/kiln/README.md",
    ]
    .iter()
    .map(|p| root().join(p))
    .filter(|p| p.exists())
    .collect();
    let book = root().join("docs/src");
    for entry in std::fs::read_dir(&book).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    pages
}

/// The page's text as mdBook sees it: `{{#include PATH}}` replaced by the
/// file, relative to the page.
fn expanded(page: &Path) -> String {
    let text = std::fs::read_to_string(page).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        match line
            .trim()
            .strip_prefix("{{#include ")
            .and_then(|l| l.strip_suffix("}}"))
        {
            Some(target) => {
                let included = page.parent().unwrap().join(target.trim());
                out.push_str(&std::fs::read_to_string(&included).unwrap_or_else(|e| {
                    panic!("{}: cannot include {}: {e}", page.display(), target)
                }));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Lines outside fenced code blocks, with inline code removed.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            lines.push(String::new());
            continue;
        }
        if fenced {
            lines.push(String::new());
            continue;
        }
        lines.push(without_inline_code(line));
    }
    lines
}

fn without_inline_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push('`');
        } else if !in_code {
            out.push(c);
        } else {
            out.push('x');
        }
    }
    out
}

/// GitHub's and mdBook's anchor for a heading: lower case, letters, digits,
/// `-` and `_` kept, spaces to `-`, the rest dropped; repeats get `-1`, `-2`.
fn slug(heading: &str) -> String {
    let text = strip_links(heading);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// `[text](target)` → `text`.
fn strip_links(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](").and_then(|close| {
            after[close + 2..]
                .find(')')
                .map(|end| (close, close + 2 + end + 1))
        }) {
            Some((close, end)) => {
                out.push_str(&after[..close]);
                rest = &after[end..];
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn anchors(text: &str) -> HashSet<String> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced || !trimmed.starts_with('#') {
            continue;
        }
        let heading = trimmed.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let mut id = base.clone();
        let mut n = 1;
        while seen.contains(&id) {
            id = format!("{base}-{n}");
            n += 1;
        }
        seen.insert(id);
    }
    seen
}

/// Every inline link target of the page's prose: `[text](target)`.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in prose(text).iter().enumerate() {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            found.push((n + 1, target.to_string()));
            rest = &after[end..];
        }
    }
    found
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn problems_of(page: &Path) -> Vec<String> {
    let text = expanded(page);
    let rel = page.strip_prefix(root()).unwrap().display().to_string();
    let book = root().join("docs/src");
    let mut problems = Vec::new();
    for (line, target) in links(&text) {
        if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() {
            page.to_path_buf()
        } else {
            normalize(&page.parent().unwrap().join(path))
        };
        if !file.exists() {
            problems.push(format!("{rel}:{line}: {target}: no such file"));
            continue;
        }
        if page.starts_with(&book) && !file.starts_with(&book) {
            problems.push(format!(
                "{rel}:{line}: {target}: leaves the book (mdbook build cannot link it); name the path as code instead"
            ));
        }
        if let Some(anchor) = anchor {
            let target_text = if file == page {
                text.clone()
            } else if file.extension().is_some_and(|e| e == "md") {
                expanded(&file)
            } else {
                continue;
            };
            if !anchors(&target_text).contains(anchor) {
                problems.push(format!("{rel}:{line}: {target}: no heading #{anchor}"));
            }
        }
    }
    problems
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let problems: Vec<String> = pages().iter().flat_map(|p| problems_of(p)).collect();
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_book_page_is_in_the_summary() {
    let summary = std::fs::read_to_string(root().join("docs/src/SUMMARY.md")).unwrap();
    let listed: HashSet<String> = links(&summary).into_iter().map(|(_, t)| t).collect();
    for page in pages() {
        let Ok(name) = page.strip_prefix(root().join("docs/src")) else {
            continue;
        };
        let name = name.display().to_string();
        if name != "SUMMARY.md" {
            assert!(
                listed.contains(&name),
                "docs/src/{name} is not in SUMMARY.md"
            );
        }
    }
}

/// A 7 to 40 digit hex word with a digit and a letter in it: a commit hash.
fn looks_like_a_commit(word: &str) -> bool {
    let w = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    (7..=40).contains(&w.len())
        && w.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        && w.chars().any(|c| c.is_ascii_digit())
        && w.chars().any(|c| c.is_ascii_alphabetic())
}

/// A line naming an issue: `issue` or `issues` before a number, or `(#`
/// and a number.
fn names_an_issue(line: &str) -> bool {
    let lower = line.to_lowercase();
    let after_word = ["issue ", "issues "].iter().any(|w| {
        lower
            .match_indices(w)
            .any(|(at, _)| lower[at + w.len()..].starts_with(|c: char| c.is_ascii_digit()))
    });
    after_word
        || lower
            .match_indices("(#")
            .any(|(at, _)| lower[at + 2..].starts_with(|c: char| c.is_ascii_digit()))
}

#[test]
fn the_readme_is_a_front_page() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; move detail to docs/"
    );
    for page in std::iter::once(root().join("README.md")).chain(
        pages()
            .into_iter()
            .filter(|p| p.starts_with(root().join("docs"))),
    ) {
        let text = std::fs::read_to_string(&page).unwrap();
        for (n, line) in text.lines().enumerate() {
            let at = format!("{}:{}", page.display(), n + 1);
            assert!(
                !names_an_issue(line),
                "{at}: development history in user docs: {line}"
            );
            for word in line.split_whitespace() {
                assert!(
                    !looks_like_a_commit(word),
                    "{at}: a commit hash in user docs: {line}"
                );
            }
        }
    }
}

#[test]
fn anchors_follow_github_and_mdbook() {
    assert_eq!(
        slug(" Scaling out: `kiln run --shards`"),
        "scaling-out-kiln-run---shards"
    );
    assert_eq!(
        slug(" 2. Read the [conditions](x.md) and Events"),
        "2-read-the-conditions-and-events"
    );
    let a = anchors("# A\n## A\n```\n# not a heading\n```\n");
    assert!(a.contains("a") && a.contains("a-1") && !a.contains("not-a-heading"));
}

/// Every file of the repository, as paths relative to its root (build
/// outputs and hidden directories left out).
fn repository_files() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if name == ".git" || name == "target" || name == "book" {
                continue;
            }
            if path.is_dir() {
                walk(&path, out);
            }
            let relative = path.strip_prefix(root()).unwrap();
            out.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
    let mut out = Vec::new();
    walk(root(), &mut out);
    out
}

/// The code ARCHITECTURE.md points at, in backticks: a path with a `/` or
/// ending in `.rs` (`src/gate.rs`, or `decision/plan.rs` under some folder),
/// or a Rust path `module::item` whose module is a file or folder and whose
/// item is declared somewhere in `src/`.
fn architecture_pointers(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, part) in text.split('`').enumerate() {
        let looks_like_path = part.ends_with(".rs")
            || (part.contains('/')
                && !part.contains(' ')
                && part
                    .split('/')
                    .all(|s| !s.is_empty() || part.ends_with('/')));
        let looks_like_item = part.contains("::")
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        if i % 2 == 1 && (looks_like_path || looks_like_item) {
            out.push(part.to_string());
        }
    }
    out
}

#[test]
fn every_path_architecture_md_names_exists() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let files = repository_files();
    let sources: String = files
        .iter()
        .filter(|f| f.starts_with("src/") && f.ends_with(".rs"))
        .map(|f| std::fs::read_to_string(root().join(f)).unwrap())
        .collect();
    let file_exists = |p: &str| {
        let p = p.trim_end_matches('/');
        files
            .iter()
            .any(|f| f == p || f.ends_with(&format!("/{p}")))
    };
    let declared = |item: &str| {
        [
            "fn",
            "struct",
            "enum",
            "mod",
            "const",
            "static",
            "trait",
            "type",
            "macro_rules!",
        ]
        .iter()
        .any(|kw| sources.contains(&format!("{kw} {item}")))
            || sources.contains(&format!("pub {item}: "))
            || sources.contains(&format!("    {item}("))
            || sources.contains(&format!("    {item},"))
            || sources.contains(&format!("    {item} {{"))
    };
    // A path is checked when it starts at a folder of the repository (so
    // `kubernetes.io/tls` is not one); a Rust path when it starts at a
    // module (a file or folder) or a type declared in `src/`.
    let folder = |name: &str| {
        files
            .iter()
            .any(|f| f == name || f.ends_with(&format!("/{name}")))
    };
    let mut stale = Vec::new();
    for pointer in architecture_pointers(&text) {
        let found = if pointer.contains("::") {
            let segments: Vec<&str> = pointer.split("::").filter(|s| !s.is_empty()).collect();
            let head = segments[0];
            let item = segments[segments.len() - 1];
            let head_exists = if head.starts_with(char::is_uppercase) {
                declared(head)
            } else {
                head == "kiln" || file_exists(&format!("{head}.rs")) || file_exists(head)
            };
            head_exists && declared(item)
        } else if pointer.ends_with(".rs") || folder(pointer.split('/').next().unwrap_or_default())
        {
            file_exists(&pointer)
        } else {
            true
        };
        if !found {
            stale.push(pointer);
        }
    }
    assert!(
        stale.is_empty(),
        "ARCHITECTURE.md names code that is not there: {stale:#?}"
    );
}

#[test]
fn the_crate_table_of_contents_names_every_top_level_module() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let missing: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .filter(|m| !lib.contains(&format!("//! - [`{m}`]")))
        .collect();
    assert!(
        missing.is_empty(),
        "src/lib.rs's list leaves out {missing:?}"
    );
}
