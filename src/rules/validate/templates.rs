//! Templates and expressions: compiled once, and every name they read
//! (`related.<name>`, `children.<id>`, vars) checked against the rule.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn piece(
        &mut self,
        at: &[Step],
        s: &str,
        scope: &Scope<'_>,
        watches: &[String],
        ids: &[String],
    ) -> Option<Piece> {
        match Piece::compile(s, at, &path_string(at), &mut self.set) {
            Ok(piece) => {
                if let Some(id) = piece.template() {
                    self.references(at, id, scope, watches, ids);
                }
                Some(piece)
            }
            Err((p, e)) => {
                self.error(&p, format!("template does not compile: {}", e.message));
                None
            }
        }
    }

    pub(super) fn expr(
        &mut self,
        at: &[Step],
        e: &str,
        scope: &Scope<'_>,
        watches: &[String],
        ids: &[String],
    ) -> Option<TemplateId> {
        let source = e.trim();
        let source = source
            .strip_prefix("{{")
            .and_then(|s| s.strip_suffix("}}"))
            .unwrap_or(source);
        match self.set.add_expr(&path_string(at), source) {
            Ok(id) => {
                self.references(at, &id, scope, watches, ids);
                Some(id)
            }
            Err(err) => {
                self.error(at, format!("expression does not compile: {}", err.message));
                None
            }
        }
    }

    pub(super) fn tree(
        &mut self,
        at: &[Step],
        value: &Value,
        scope: &Scope<'_>,
        watches: &[String],
        ids: &[String],
    ) -> Option<Tree> {
        let mut errors = Vec::new();
        let mut path = at.to_vec();
        let tree = Tree::compile(value, &mut path, &mut self.set, &mut errors);
        let ok = errors.is_empty();
        for (p, e) in errors {
            self.error(&p, format!("template does not compile: {}", e.message));
        }
        let ids_in_tree: Vec<TemplateId> = tree.templates().into_iter().cloned().collect();
        for id in &ids_in_tree {
            let steps = self.steps_of(id, at);
            self.references(&steps, id, scope, watches, ids);
        }
        ok.then_some(tree)
    }

    /// Finds the YAML path of a compiled template (its name is that path).
    pub(super) fn steps_of(&self, id: &TemplateId, fallback: &[Step]) -> Vec<Step> {
        let name = id.path().trim_end_matches(" (key)");
        find_path(&self.doc.node, name).unwrap_or_else(|| fallback.to_vec())
    }

    /// Refuses calls of filters, tests and functions kiln does not have,
    /// each at its line and column; returns the unknown functions' names.
    pub(super) fn unknown_names(&mut self, at: &[Step], id: &TemplateId) -> Vec<String> {
        let mut functions = Vec::new();
        for unknown in self.set.unknown_names(id) {
            let start = self.doc.node.locate(at);
            let pos = pos_in_scalar(&self.doc.text, start, &unknown);
            let diagnostic = Diagnostic::new(
                &self.doc.file,
                &self.doc.text,
                Some(pos),
                path_string(at),
                unknown.to_string(),
            );
            self.errors
                .push(diagnostic.in_rule(&self.raw.metadata.name));
            if unknown.kind == Callable::Function {
                functions.push(unknown.name);
            }
        }
        functions
    }

    /// Notes that a template at `at` reads child `name` (through
    /// `children.<name>`, `ready.<name>`, or a var that reads children),
    /// when child references are being collected.
    fn note_child_ref(&mut self, root: &str, name: &str, at: &[Step]) {
        let Some(refs) = &mut self.child_refs else {
            return;
        };
        let through_var = self.var_children.get(name).filter(|_| root == "vars");
        let read: Vec<String> = match root {
            "children" | "ready" => vec![name.to_string()],
            _ => through_var.cloned().unwrap_or_default(),
        };
        let root = if root == "ready" { "ready" } else { "children" };
        refs.extend(read.into_iter().map(|id| ChildRef {
            root: root.to_string(),
            id,
            at: at.to_vec(),
        }));
    }

    pub(super) fn references(
        &mut self,
        at: &[Step],
        id: &TemplateId,
        scope: &Scope<'_>,
        watches: &[String],
        ids: &[String],
    ) {
        self.compiled.push((at.to_vec(), id.clone()));
        let unknown_functions = self.unknown_names(at, id);
        for var in self.set.references(id) {
            let mut parts = var.split('.');
            let root = parts.next().unwrap_or_default();
            if GLOBALS.contains(&root) || unknown_functions.iter().any(|f| f == root) {
                continue;
            }
            if root == DRAW {
                if let Some(message) = draw_misplaced(scope, id.path()) {
                    self.error(at, message);
                }
                continue;
            }
            if self.set.is_function(root) {
                continue;
            }
            if root == crate::rules::observed::ROOT {
                let here = scope.roots.contains(&"children");
                if let Some(m) = crate::rules::observed::problem(here, parts.next(), ids) {
                    self.error(at, m);
                }
                continue;
            }
            if !scope.roots.contains(&root) {
                let allowed: Vec<String> = scope
                    .roots
                    .iter()
                    .filter(|r| **r != DRAW)
                    .map(|r| format!("`{r}`"))
                    .collect();
                self.error(
                    at,
                    format!(
                        "unknown variable `{root}`: here templates can use {}",
                        allowed.join(", ")
                    ),
                );
                continue;
            }
            if root == "vars"
                && let Some(message) = self.var_reference(parts.clone().next())
            {
                self.error(at, message);
                continue;
            }
            let (var_names, external) = (self.var_names.clone(), self.external_names.clone());
            let declared = match root {
                "external" => Some(("spec.external", external.as_slice())),
                "related" => Some(("spec.watches", watches)),
                "children" | "ready" => Some(("spec.children", ids)),
                "vars" => Some(("spec.vars", var_names.as_slice())),
                _ => None,
            };
            if let Some(name) = parts.clone().next() {
                self.note_child_ref(root, name, at);
            }
            if let (Some((section, names)), Some(name)) = (declared, parts.next())
                && !names.iter().any(|n| n == name)
            {
                let known = if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                };
                self.error(
                    at,
                    format!("`{root}.{name}` is not declared in {section} (declared: {known})"),
                );
            }
        }
    }
}

/// Why `random_secret()` may not be called at `path` (a template's path in
/// the rule) where templates see `scope`, if it may not.
fn draw_misplaced(scope: &Scope<'_>, path: &str) -> Option<&'static str> {
    if !scope.roots.contains(&DRAW) {
        Some(
            "random_secret() draws a value only in a child's `template`, where the child keeps it (read it back from `children.<id>`); not here",
        )
    } else if path.ends_with(".metadata.name") || path.ends_with(".metadata.namespace") {
        Some(
            "random_secret() cannot make a child's name or namespace: a child's name must be the same on every render",
        )
    } else {
        None
    }
}
