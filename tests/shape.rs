//! The source keeps its shape, read from the files:
//!
//! - no production file in `src/` is over [`MAX_FILE_LINES`] lines and no
//!   production function over [`MAX_FN_LINES`]; tests (`#[cfg(test)]`
//!   items, the files only they declare, `#[test]` functions) do not count;
//! - the engine's layers import no cycle: `engine::cache` uses neither
//!   `decision` nor `runtime`, `engine::decision` neither `cache` nor
//!   `runtime` (both only themselves and the engine's shared leaves), and
//!   the decision holds no kube client (`kube::Api`, `kube::Client`);
//! - no two modules of the crate use each other, directly or
//!   through others: what both need lives in a leaf;
//! - each engine layer (`src/engine/<layer>/mod.rs`) declares no `pub mod`:
//!   what the rest of kiln uses is re-exported there, its facade;
//! - comments in `src/` and `tests/` say what the code does, not which
//!   issue asked for it.
//!
//! Files are parsed with `syn`; the module tree is followed from
//! `src/lib.rs` and `src/main.rs`, so a file only a `#[cfg(test)] mod`
//! declares is a test file.

#![allow(clippy::panic, reason = "test code")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

/// The most lines a production file may have.
const MAX_FILE_LINES: usize = 800;
/// The most lines a production function may have, from `fn` to its `}`.
const MAX_FN_LINES: usize = 80;

/// Functions under `src/engine/` still being reshaped (file, function name):
/// each is printed, not failed, while over; the list is to end empty.
/// Nothing outside `src/engine/` may be listed.
const ENGINE_STILL_LONG: &[(&str, &str)] = &[];

/// What the layers under `src/engine/` may use besides themselves: the
/// leaves they share.
const ENGINE_LEAVES: &[&str] = &["key", "backoff", "options", "Options"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One source file of the crate's module tree.
struct Module {
    /// Relative to the repository: `src/render.rs`.
    file: String,
    /// Its module path: `["crate", "render"]`.
    path: Vec<String>,
    text: String,
    ast: syn::File,
}

/// Every production module file of the library and the binary.
fn modules() -> Vec<Module> {
    let mut out = Vec::new();
    for top in ["src/lib.rs", "src/main.rs"] {
        load(top, vec!["crate".to_string()], &mut out);
    }
    out
}

fn load(file: &str, path: Vec<String>, out: &mut Vec<Module>) {
    let text = std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    let dir = children_dir(file);
    let mut declared = Vec::new();
    declared_modules(&ast.items, &dir, &path, &mut declared);
    out.push(Module {
        file: file.to_string(),
        path,
        text,
        ast,
    });
    for (child, child_path) in declared {
        load(&child, child_path, out);
    }
}

/// Where the files of a file's `mod x;` are: beside `lib.rs`, `main.rs`
/// and `mod.rs`, in a folder of the file's name otherwise.
fn children_dir(file: &str) -> String {
    let p = Path::new(file);
    let parent = p
        .parent()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    match p.file_name().and_then(|n| n.to_str()) {
        Some("lib.rs" | "main.rs" | "mod.rs") => parent,
        _ => format!(
            "{parent}/{}",
            p.file_stem().and_then(|s| s.to_str()).unwrap_or("")
        ),
    }
}

/// The files of the production `mod x;` among `items` (inline modules
/// followed), with their module paths.
fn declared_modules(
    items: &[syn::Item],
    dir: &str,
    path: &[String],
    out: &mut Vec<(String, Vec<String>)>,
) {
    for item in items {
        let syn::Item::Mod(m) = item else { continue };
        if is_test(&m.attrs) {
            continue;
        }
        let name = m.ident.to_string();
        let mut child_path = path.to_vec();
        child_path.push(name.clone());
        if let Some((_, inner)) = &m.content {
            declared_modules(inner, &format!("{dir}/{name}"), &child_path, out);
            continue;
        }
        assert!(
            !m.attrs.iter().any(|a| a.path().is_ident("path")),
            "{dir}: #[path] on mod {name} is not followed by this test"
        );
        let flat = format!("{dir}/{name}.rs");
        let file = if root().join(&flat).exists() {
            flat
        } else {
            format!("{dir}/{name}/mod.rs")
        };
        out.push((file, child_path));
    }
}

/// `#[cfg(test)]` (or a `cfg` needing `test`), `#[test]`, `#[tokio::test]`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let last = a.path().segments.last().map(|s| s.ident.to_string());
        if last.as_deref() == Some("test") {
            return true;
        }
        if !a.path().is_ident("cfg") {
            return false;
        }
        let tokens = match &a.meta {
            syn::Meta::List(l) => l.tokens.to_string(),
            _ => return false,
        };
        let words: Vec<&str> = tokens
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .collect();
        words.contains(&"test") && !words.contains(&"not")
    })
}

fn attrs_of(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// A file's lines, less those of its test items.
fn production_lines(module: &Module) -> usize {
    let total = module.text.lines().count();
    let test: usize = module
        .ast
        .items
        .iter()
        .filter(|i| is_test(attrs_of(i)))
        .map(|i| {
            let start = attrs_of(i)
                .first()
                .map_or(i.span().start().line, |a| a.span().start().line);
            i.span().end().line + 1 - start
        })
        .sum();
    total - test
}

/// A production function: where it starts and how many lines it has.
struct Function {
    name: String,
    line: usize,
    lines: usize,
}

fn function(name: &syn::Ident, fn_token: &syn::token::Fn, block: &syn::Block) -> Function {
    let line = fn_token.span.start().line;
    let end = block.brace_token.span.close().end().line;
    Function {
        name: name.to_string(),
        line,
        lines: end + 1 - line,
    }
}

/// Every production function among `items`: free functions, methods and
/// trait methods with a body, in inline modules too.
fn functions(items: &[syn::Item], out: &mut Vec<Function>) {
    for item in items.iter().filter(|i| !is_test(attrs_of(i))) {
        match item {
            syn::Item::Fn(f) => out.push(function(&f.sig.ident, &f.sig.fn_token, &f.block)),
            syn::Item::Impl(i) => {
                for it in &i.items {
                    if let syn::ImplItem::Fn(f) = it
                        && !is_test(&f.attrs)
                    {
                        out.push(function(&f.sig.ident, &f.sig.fn_token, &f.block));
                    }
                }
            }
            syn::Item::Trait(t) => {
                for it in &t.items {
                    if let syn::TraitItem::Fn(f) = it
                        && let Some(block) = &f.default
                        && !is_test(&f.attrs)
                    {
                        out.push(function(&f.sig.ident, &f.sig.fn_token, block));
                    }
                }
            }
            syn::Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    functions(inner, out);
                }
            }
            _ => {}
        }
    }
}

/// What is too long in `modules`, and the still-long engine functions let
/// through.
fn too_long(modules: &[Module]) -> (Vec<String>, Vec<String>) {
    let mut failures = Vec::new();
    let mut let_through = Vec::new();
    for module in modules {
        let lines = production_lines(module);
        if lines > MAX_FILE_LINES {
            failures.push(format!(
                "{}: {lines} production lines (at most {MAX_FILE_LINES})",
                module.file
            ));
        }
        let mut fns = Vec::new();
        functions(&module.ast.items, &mut fns);
        for f in fns.into_iter().filter(|f| f.lines > MAX_FN_LINES) {
            let what = format!(
                "{}:{}: fn {} has {} lines (at most {MAX_FN_LINES})",
                module.file, f.line, f.name, f.lines
            );
            if ENGINE_STILL_LONG.contains(&(module.file.as_str(), f.name.as_str())) {
                let_through.push(what);
            } else {
                failures.push(what);
            }
        }
    }
    (failures, let_through)
}

#[test]
fn no_production_file_or_function_is_too_long() {
    for (file, name) in ENGINE_STILL_LONG {
        assert!(
            file.starts_with("src/engine/"),
            "{file} ({name}): only src/engine/ may be listed in ENGINE_STILL_LONG"
        );
    }
    let modules = modules();
    assert!(modules.len() > 50, "the module tree was not followed");
    let (failures, let_through) = too_long(&modules);
    for what in &let_through {
        eprintln!("still long, listed in ENGINE_STILL_LONG: {what}");
    }
    for (file, name) in ENGINE_STILL_LONG {
        let over = let_through
            .iter()
            .any(|w| w.starts_with(&format!("{file}:")) && w.contains(&format!(" fn {name} ")));
        if !over {
            eprintln!("ENGINE_STILL_LONG lists {file} ({name}), which is no longer too long");
        }
    }
    assert!(
        failures.is_empty(),
        "too long; split by meaning (named steps, small structs for grouped arguments):\n{}",
        failures.join("\n")
    );
}

/// Every path a module's production code names, `use` trees spread out.
#[derive(Default)]
struct Paths {
    found: Vec<(usize, Vec<String>)>,
}

impl Paths {
    fn spread(&mut self, line: usize, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.spread(line, prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.push(line, prefix, &n.ident),
            syn::UseTree::Rename(r) => self.push(line, prefix, &r.ident),
            syn::UseTree::Glob(_) => self.found.push((line, prefix.clone())),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.spread(line, prefix, t);
                }
            }
        }
    }

    fn push(&mut self, line: usize, prefix: &[String], last: &syn::Ident) {
        let mut path = prefix.to_vec();
        path.push(last.to_string());
        self.found.push((line, path));
    }
}

impl<'a> Visit<'a> for Paths {
    fn visit_item(&mut self, item: &'a syn::Item) {
        if !is_test(attrs_of(item)) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'a syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, u: &'a syn::ItemUse) {
        self.spread(u.span().start().line, &mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'a syn::Path) {
        let segments = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.found.push((p.span().start().line, segments));
        syn::visit::visit_path(self, p);
    }
}

/// `path` as seen from module `from`, made absolute when it starts with
/// `crate`, `self` or `super`; as written otherwise.
fn resolved(from: &[String], path: &[String]) -> Vec<String> {
    match path.first().map(String::as_str) {
        Some("crate") => path.to_vec(),
        Some("self") => from.iter().chain(&path[1..]).cloned().collect(),
        Some("super") => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let kept = from.len().saturating_sub(ups);
            from[..kept].iter().chain(&path[ups..]).cloned().collect()
        }
        _ => path.to_vec(),
    }
}

/// `kube::Api`, `kube::Client`, `kube::api::Api`, `kube::client::Client`
/// (and what follows them).
fn is_kube_client(path: &[String]) -> bool {
    let names: Vec<&str> = path.iter().map(String::as_str).collect();
    matches!(
        names.as_slice(),
        ["kube", "Api" | "Client", ..] | ["kube", "api" | "client", "Api" | "Client", ..]
    )
}

/// What a module under `crate::engine::<layer>` must not use.
fn layer_breaches(module: &Module) -> Vec<String> {
    let Some(layer @ ("cache" | "decision")) = module.path.get(2).map(String::as_str) else {
        return Vec::new();
    };
    if module.path[..2] != ["crate", "engine"] {
        return Vec::new();
    }
    let mut paths = Paths::default();
    paths.visit_file(&module.ast);
    let mut out = BTreeSet::new();
    for (line, path) in paths.found {
        let abs = resolved(&module.path, &path);
        let other_layer = abs.len() > 2
            && abs[..2] == ["crate", "engine"]
            && abs[2] != layer
            && !ENGINE_LEAVES.contains(&abs[2].as_str());
        let client = layer == "decision" && is_kube_client(&abs);
        if other_layer || client {
            out.insert(format!(
                "{}:{line}: engine::{layer} uses {}",
                module.file,
                abs.join("::")
            ));
        }
    }
    out.into_iter().collect()
}

#[test]
fn the_engine_layers_import_no_cycle() {
    let breaches: Vec<String> = modules().iter().flat_map(layer_breaches).collect();
    assert!(
        breaches.is_empty(),
        "engine::cache uses neither decision nor runtime, engine::decision neither cache \
         nor runtime nor a kube client (ARCHITECTURE.md, Layers):\n{}",
        breaches.join("\n")
    );
}

/// The modules each module's production code names, as edges between
/// files of the module tree: the longest module path each used path
/// starts with. A module and its ancestors are not edges (a parent
/// declares its children, a child reaches its parent's items with
/// `super`).
fn module_edges(modules: &[Module]) -> Vec<BTreeSet<usize>> {
    let index: std::collections::HashMap<&[String], usize> = modules
        .iter()
        .enumerate()
        .map(|(i, m)| (m.path.as_slice(), i))
        .collect();
    modules
        .iter()
        .map(|module| {
            let mut paths = Paths::default();
            paths.visit_file(&module.ast);
            paths
                .found
                .iter()
                .filter_map(|(_, path)| {
                    let abs = resolved(&module.path, path);
                    (1..=abs.len())
                        .rev()
                        .find_map(|n| index.get(&abs[..n]).copied())
                })
                .filter(|&to| {
                    let (a, b) = (&module.path, &modules[to].path);
                    !a.starts_with(b) && !b.starts_with(a)
                })
                .collect()
        })
        .collect()
}

/// The strongly connected components of more than one module (Tarjan's
/// algorithm): each is an import cycle.
fn cycles(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct Walk<'e> {
        edges: &'e [BTreeSet<usize>],
        next: usize,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        out: Vec<Vec<usize>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in self.edges[v].iter() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(i) if self.on_stack[w] => self.low[v] = self.low[v].min(i),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort_unstable();
                    self.out.push(component);
                }
            }
        }
    }
    let n = edges.len();
    let mut walk = Walk {
        edges,
        next: 0,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        out: Vec::new(),
    };
    for v in 0..n {
        if walk.index[v].is_none() {
            walk.visit(v);
        }
    }
    walk.out
}

/// The import cycles among the modules under `scope`, each as the files
/// in it and the edges that close it.
fn cycles_under(modules: &[Module], scope: &[&str]) -> Vec<String> {
    let edges = module_edges(modules);
    let inside = |i: usize| {
        modules[i]
            .path
            .starts_with(&scope.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    };
    cycles(&edges)
        .into_iter()
        .filter(|c| c.iter().all(|&i| inside(i)))
        .map(|c| {
            let uses: Vec<String> = c
                .iter()
                .flat_map(|&a| {
                    let c = &c;
                    edges[a]
                        .iter()
                        .filter(move |b| c.contains(b))
                        .map(move |&b| {
                            format!("  {} uses {}", modules[a].file, modules[b].path.join("::"))
                        })
                })
                .collect();
            uses.join("\n")
        })
        .collect()
}

#[test]
fn no_module_imports_a_cycle() {
    let modules = modules();
    assert!(modules.len() > 50, "the module tree was not followed");
    let found = cycles_under(&modules, &["crate"]);
    assert!(
        found.is_empty(),
        "modules that use each other: move what both need into a leaf module \
         (as engine::key, decision::live):\n{}",
        found.join("\n\n")
    );
}

/// The `pub mod` declarations of an engine layer's `mod.rs`: a layer's
/// modules are private or `pub(crate)`, its facade re-exports the rest.
fn public_submodules(module: &Module) -> Vec<String> {
    let layer = module.path.len() == 3
        && module.path[..2] == ["crate", "engine"]
        && module.file.ends_with("/mod.rs");
    if !layer {
        return Vec::new();
    }
    module
        .ast
        .items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(m) if matches!(m.vis, syn::Visibility::Public(_)) => Some(format!(
                "{}:{}: pub mod {}",
                module.file,
                m.ident.span().start().line,
                m.ident
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn the_engine_layers_keep_their_facade() {
    let modules = modules();
    let layers = modules
        .iter()
        .filter(|m| m.path.len() == 3 && m.path[..2] == ["crate", "engine"])
        .filter(|m| m.file.ends_with("/mod.rs"))
        .count();
    assert_eq!(layers, 3, "cache, decision and runtime were not all found");
    let public: Vec<String> = modules.iter().flat_map(public_submodules).collect();
    assert!(
        public.is_empty(),
        "an engine layer's modules are private or pub(crate); re-export what \
         the rest of kiln uses from its mod.rs instead:\n{}",
        public.join("\n")
    );
}

/// A line naming an issue: `issue` or `issues` before a number, or `(#`
/// and a number.
fn names_an_issue(line: &str) -> bool {
    let lower = line.to_lowercase();
    let after = |word: &str| {
        lower
            .match_indices(word)
            .any(|(at, _)| lower[at + word.len()..].starts_with(|c: char| c.is_ascii_digit()))
    };
    after("issue ") || after("issues ") || after("(#")
}

/// Every file under `dir` ending in one of `extensions`.
fn files_under(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, extensions, out);
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| extensions.contains(&e))
        {
            out.push(path);
        }
    }
}

#[test]
fn sources_name_no_issue() {
    let mut files = Vec::new();
    for dir in ["src", "tests"] {
        files_under(&root().join(dir), &["rs", "yaml", "yml", "sh"], &mut files);
    }
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if names_an_issue(line) {
                let at = file
                    .strip_prefix(root())
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                found.push(format!("{at}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "say what the code does, not which issue asked for it:\n{}",
        found.join("\n")
    );
}

/// The write verbs of a kube `Api` (and an Event recorder's `publish`, an
/// `Entry`'s `commit`, a `Client`'s raw requests), with the number of
/// arguments each takes: a method of that name and arity is taken for a
/// write (`str::replace` takes two, `Api::replace` three). `Api::restart`
/// and `Client::send` are left out: their names and arity are those of
/// kiln's informers and of every channel.
const WRITE_VERBS: &[(&str, usize)] = &[
    ("create", 2),
    ("patch", 3),
    ("patch_status", 3),
    ("patch_metadata", 3),
    ("patch_scale", 3),
    ("patch_approval", 3),
    ("patch_resize", 3),
    ("patch_ephemeral_containers", 3),
    ("patch_subresource", 4),
    ("replace", 3),
    ("replace_status", 3),
    ("replace_scale", 3),
    ("replace_resize", 3),
    ("replace_ephemeral_containers", 3),
    ("replace_subresource", 4),
    ("delete", 2),
    ("delete_collection", 2),
    ("create_subresource", 4),
    ("create_token_request", 3),
    ("evict", 2),
    ("cordon", 1),
    ("uncordon", 1),
    ("commit", 1),
    ("request", 1),
    ("request_text", 1),
    ("request_status", 1),
    ("publish", 2),
];

/// Whether `verb` with `args` arguments is a write verb.
fn is_write(verb: &str, args: usize) -> bool {
    WRITE_VERBS.contains(&(verb, args))
}

/// The write verbs called as methods in a macro's tokens (`.verb(a, b)`),
/// which syn does not parse: `(verb, line)`.
fn writes_in_tokens(tokens: proc_macro2::TokenStream, out: &mut Vec<(String, usize)>) {
    use proc_macro2::{Delimiter, TokenTree};
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, tree) in trees.iter().enumerate() {
        if let TokenTree::Group(g) = tree {
            writes_in_tokens(g.stream(), out);
        }
        let [
            TokenTree::Punct(dot),
            TokenTree::Ident(verb),
            TokenTree::Group(args),
        ] = trees.get(i..i + 3).unwrap_or_default()
        else {
            continue;
        };
        if dot.as_char() != '.' || args.delimiter() != Delimiter::Parenthesis {
            continue;
        }
        if is_write(&verb.to_string(), arguments(args.stream())) {
            out.push((verb.to_string(), verb.span().start().line));
        }
    }
}

/// How many comma-separated arguments `tokens` holds.
fn arguments(tokens: proc_macro2::TokenStream) -> usize {
    use proc_macro2::TokenTree;
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    if trees.is_empty() {
        return 0;
    }
    let comma = |t: &TokenTree| matches!(t, TokenTree::Punct(p) if p.as_char() == ',');
    let commas = trees.iter().filter(|t| comma(t)).count();
    commas + usize::from(!trees.last().is_some_and(comma))
}

/// The one module that sends writes, and the development commands that
/// write what their user asks on a cluster they start (the local control
/// plane and the demo): no rule's write passes through them.
const MAY_WRITE: &[&str] = &["src/gate.rs", "src/controlplane/", "src/commands/demo.rs"];

/// Each write verb called outside the write gate, as `file:line: .verb(..)`.
fn writes_outside_the_gate(modules: &[Module]) -> Vec<String> {
    struct Calls<'a> {
        file: &'a str,
        out: Vec<String>,
    }
    impl<'ast> Visit<'ast> for Calls<'_> {
        fn visit_item(&mut self, item: &'ast syn::Item) {
            if !is_test(attrs_of(item)) {
                syn::visit::visit_item(self, item);
            }
        }
        fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
            if !is_test(&f.attrs) {
                syn::visit::visit_impl_item_fn(self, f);
            }
        }
        fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
            let verb = call.method.to_string();
            if is_write(&verb, call.args.len()) {
                let line = call.method.span().start().line;
                self.out.push(format!("{}:{line}: .{verb}(..)", self.file));
            }
            syn::visit::visit_expr_method_call(self, call);
        }
        // `Api::delete(&api, ..)`: the receiver is one more argument; the
        // gate's own functions (`gate::delete`) are what is wanted.
        fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
            if let syn::Expr::Path(p) = &*call.func {
                let segments: Vec<String> = p
                    .path
                    .segments
                    .iter()
                    .map(|s| s.ident.to_string())
                    .collect();
                if let [.., owner, verb] = segments.as_slice()
                    && owner != "gate"
                    && is_write(verb, call.args.len().saturating_sub(1))
                {
                    let line = p.path.span().start().line;
                    self.out
                        .push(format!("{}:{line}: {owner}::{verb}(..)", self.file));
                }
            }
            syn::visit::visit_expr_call(self, call);
        }
        fn visit_macro(&mut self, mac: &'ast syn::Macro) {
            let mut found = Vec::new();
            writes_in_tokens(mac.tokens.clone(), &mut found);
            for (verb, line) in found {
                self.out.push(format!("{}:{line}: .{verb}(..)", self.file));
            }
        }
    }
    let mut out = Vec::new();
    for m in modules {
        if MAY_WRITE.iter().any(|w| m.file.starts_with(w)) {
            continue;
        }
        let mut calls = Calls {
            file: &m.file,
            out: Vec::new(),
        };
        calls.visit_file(&m.ast);
        out.extend(calls.out);
    }
    out
}

#[test]
fn every_write_goes_through_the_gate() {
    let found = writes_outside_the_gate(&modules());
    assert!(
        found.is_empty(),
        "every create, patch, update, delete and Event goes through src/gate.rs with its Warrant:\n{}",
        found.join("\n")
    );
}

// The checks themselves, on made-up sources: each can fail.

fn made_up(file: &str, path: &[&str], text: &str) -> Module {
    Module {
        file: file.to_string(),
        path: path.iter().map(|s| s.to_string()).collect(),
        text: text.to_string(),
        ast: syn::parse_file(text).unwrap_or_else(|e| panic!("{e}")),
    }
}

fn long_fn(name: &str, body_lines: usize) -> String {
    format!(
        "fn {name}() {{\n{}}}\n",
        "    let _ = 1;\n".repeat(body_lines)
    )
}

#[test]
fn a_long_function_fails_and_a_test_one_does_not() {
    let text = format!(
        "{}{}\nimpl S {{\n{}}}\n#[cfg(test)]\nmod tests {{\n{}}}\n",
        long_fn("short", 78),
        long_fn("long", 79),
        long_fn("method", 90),
        long_fn("in_a_test", 200)
    );
    let (failures, _) = too_long(&[made_up("src/x.rs", &["crate", "x"], &text)]);
    assert_eq!(
        failures,
        [
            "src/x.rs:81: fn long has 81 lines (at most 80)",
            "src/x.rs:164: fn method has 92 lines (at most 80)",
        ]
    );
}

#[test]
fn a_long_file_fails_and_its_tests_do_not_count() {
    let body = "const A: u8 = 1;\n".repeat(790);
    let tests = format!("#[cfg(test)]\nmod tests {{\n{}}}\n", "// t\n".repeat(100));
    let fits = made_up("src/f.rs", &["crate", "f"], &format!("{body}{tests}"));
    assert_eq!(production_lines(&fits), 790);
    let long = made_up(
        "src/f.rs",
        &["crate", "f"],
        &format!("{body}{}", "// x\n".repeat(11)),
    );
    let (failures, _) = too_long(&[long]);
    assert_eq!(failures, ["src/f.rs: 801 production lines (at most 800)"]);
}

#[test]
fn a_layer_using_another_fails() {
    let cache = made_up(
        "src/engine/cache/x.rs",
        &["crate", "engine", "cache", "x"],
        "use crate::engine::key::ObjKey;\nuse super::store::Store;\n\
         use super::super::decision::plan::Plan;\n\
         fn f() { crate::engine::runtime::go(); }\n\
         #[cfg(test)]\nmod tests { use crate::engine::decision::diff; }\n",
    );
    assert_eq!(
        layer_breaches(&cache),
        [
            "src/engine/cache/x.rs:3: engine::cache uses crate::engine::decision::plan::Plan",
            "src/engine/cache/x.rs:4: engine::cache uses crate::engine::runtime::go",
        ]
    );
    let decision = made_up(
        "src/engine/decision/y.rs",
        &["crate", "engine", "decision", "y"],
        "use kube::{Api, Error};\nfn f(e: kube::Error) { kube::Error::Api(e) }\n\
         use crate::engine::Engine;\nfn g() { kube::client::Client::new(); }\n",
    );
    assert_eq!(
        layer_breaches(&decision),
        [
            "src/engine/decision/y.rs:1: engine::decision uses kube::Api",
            "src/engine/decision/y.rs:3: engine::decision uses crate::engine::Engine",
            "src/engine/decision/y.rs:4: engine::decision uses kube::client::Client::new",
        ]
    );
}

#[test]
fn issue_numbers_are_recognised() {
    assert!(names_an_issue(concat!("// Fencing (iss", "ue 13, item 5)")));
    assert!(names_an_issue(concat!("/// Iss", "ues 3 and 4")));
    assert!(names_an_issue(concat!("// fixed (", "#12)")));
    assert!(!names_an_issue(
        "// an issue 'names' a problem; #12 alone is a number"
    ));
}

#[test]
fn a_public_module_in_a_layer_fails() {
    let layer = made_up(
        "src/engine/cache/mod.rs",
        &["crate", "engine", "cache"],
        "mod a;\npub(crate) mod b;\npub(super) mod c;\npub mod d;\npub use a::X;\n",
    );
    assert_eq!(
        public_submodules(&layer),
        ["src/engine/cache/mod.rs:4: pub mod d"]
    );
    let leaf = made_up(
        "src/engine/cache/store.rs",
        &["crate", "engine", "cache", "store"],
        "pub mod inner {}\n",
    );
    assert!(public_submodules(&leaf).is_empty());
}

#[test]
fn a_cycle_between_two_modules_is_found_and_a_parent_is_not_one() {
    let modules = vec![
        made_up(
            "src/engine/mod.rs",
            &["crate", "engine"],
            "pub(crate) mod a;\npub(crate) mod b;\npub struct Shared;",
        ),
        made_up(
            "src/engine/a.rs",
            &["crate", "engine", "a"],
            "use super::b::B;\nuse super::Shared;\npub struct A;",
        ),
        made_up(
            "src/engine/b.rs",
            &["crate", "engine", "b"],
            "pub struct B;\nfn f() -> crate::engine::a::A { todo!() }",
        ),
        made_up(
            "src/engine/c.rs",
            &["crate", "engine", "c"],
            "use super::a::A;",
        ),
    ];
    assert_eq!(
        cycles_under(&modules, &["crate", "engine"]),
        ["  src/engine/a.rs uses crate::engine::b\n  src/engine/b.rs uses crate::engine::a"]
    );
    let without = &modules[..1];
    assert!(cycles_under(without, &["crate", "engine"]).is_empty());
}

#[test]
fn a_write_outside_the_gate_is_found_and_a_string_replace_is_not() {
    let text = "async fn f(api: Api<Secret>) {\n    let _ = \"a\".replace('a', \"b\");\n    api.delete(\"x\", &dp).await;\n}\n#[cfg(test)]\nmod tests {\n    fn t() { api.delete(\"y\", &dp); }\n}\n";
    let outside = made_up("src/x.rs", &["crate", "x"], text);
    assert_eq!(
        writes_outside_the_gate(&[outside]),
        ["src/x.rs:3: .delete(..)"]
    );
    let gate = made_up("src/gate.rs", &["crate", "gate"], text);
    assert!(writes_outside_the_gate(&[gate]).is_empty());
}

#[test]
fn a_write_in_a_macro_a_path_call_or_a_rarer_verb_is_found() {
    let text = r#"async fn f(api: Api<Secret>, client: Client) {
    let _ = tokio::join!(api.delete("x", &dp), async {});
    let _ = Api::create(&api, &pp, &s).await;
    let _ = api.patch_metadata("x", &pp, &p).await;
    let _ = client.request_text(req).await;
    let _ = api.entry("x").await.unwrap().or_insert(Secret::default).commit(&pp).await;
    let _ = api.evict("x", &ep).await;
    let _ = gate::delete(&api, "x", &dp, Warrant::Child).await;
    let _ = format!("{}", "a".replace('a', "b"));
}
"#;
    let outside = made_up("src/x.rs", &["crate", "x"], text);
    assert_eq!(
        writes_outside_the_gate(&[outside]),
        [
            "src/x.rs:2: .delete(..)",
            "src/x.rs:3: Api::create(..)",
            "src/x.rs:4: .patch_metadata(..)",
            "src/x.rs:5: .request_text(..)",
            "src/x.rs:6: .commit(..)",
            "src/x.rs:7: .evict(..)",
        ]
    );
}
