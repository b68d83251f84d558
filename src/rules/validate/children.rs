//! `children`: each child's template, where it may go (namespaces, names
//! allowed), and what its `where` may name.

use super::*;

impl<'a> Checker<'a> {
    /// A child's `readyWhen`, compiled (`None` for `exists`, which is
    /// told apart by the second value).
    fn ready_when(
        &mut self,
        at: &[Step],
        c: &RawChild,
        roots: &[&str],
        watches: &[String],
        ids: &[String],
    ) -> (Option<TemplateId>, bool) {
        let ready_roots: Vec<&str> = roots.iter().copied().chain(["child"]).collect();
        let on_exists = c
            .ready_when
            .as_deref()
            .is_some_and(crate::readiness::is_exists);
        let ready_when = c.ready_when.as_ref().filter(|_| !on_exists).and_then(|e| {
            self.expr(
                at,
                e,
                &Scope {
                    roots: &ready_roots,
                },
                watches,
                ids,
            )
        });
        (ready_when, on_exists)
    }

    pub(super) fn children(&mut self, watches: &[String], ids: &[String]) -> Vec<Child> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, c) in self.raw.spec.children.iter().enumerate() {
            let at = vec![key("spec"), key("children"), Step::Index(i)];
            let with = |k: &str| [at.as_slice(), &[key(k)]].concat();
            self.unique_identifier(&with("id"), &mut seen, "child id", &c.id, "children.<id>");
            self.child_refs = Some(Vec::new());
            let base: &[&str] = &[
                "self", "related", "external", "children", "rule", "vars", "ready",
            ];
            let item: &[&str] = &[
                "self", "related", "external", "children", "rule", "vars", "ready", "item", "index",
            ];
            let roots = if c.for_each.is_some() { item } else { base };
            // Only a child's template may draw a value (kept in the child).
            let drawing: Vec<&str> = roots.iter().copied().chain([DRAW]).collect();
            let scope = Scope { roots: &drawing };
            let plain = Scope { roots: base };
            let when = c
                .when
                .as_ref()
                .and_then(|e| self.expr(&with("when"), e, &plain, watches, ids));
            // A `when` that reads no other child is decided before waiting:
            // a child switched off is left out, not kept waiting.
            let when_first = self
                .child_refs
                .as_ref()
                .is_none_or(|refs| refs.iter().all(|r| r.id == c.id));
            let for_each = c
                .for_each
                .as_ref()
                .and_then(|e| self.expr(&with("forEach"), e, &plain, watches, ids));
            let (ready_when, on_exists) =
                self.ready_when(&with("readyWhen"), c, roots, watches, ids);
            let template = self.child_template(&with("template"), c, &scope, watches, ids);
            let history = self.history(&at, c, watches, ids);
            if c.outside {
                self.outside(&with("outside"), c, template.as_ref().map(|(_, tree)| tree));
            }
            let needs = self.needs(&at, c, ids);
            let adopt_names = self.adopt_names(&at, c);
            let (replace, problems) = crate::rules::child_options::check(c);
            for (field, message) in problems {
                self.error(&with(field), message);
            }
            if let Some((gvk, template)) = template {
                out.push(Child {
                    id: c.id.clone(),
                    gvk,
                    when,
                    for_each,
                    template,
                    ready_when,
                    ready_on_exists: on_exists,
                    adopt: c.adopt,
                    adopt_names,
                    update_policy: c.update_policy,
                    recreate: c.recreate,
                    replace,
                    deletion_policy: c.deletion_policy,
                    outside: c.outside,
                    needs,
                    when_first,
                    history,
                    typing: crate::typing::Typing::Unchecked,
                    typed_at: Vec::new(),
                    from_hook: false,
                });
            }
        }
        out
    }

    /// An `outside` child: no `forEach`, and a place drawn only from the
    /// primary's identity.
    fn outside(&mut self, at: &[Step], c: &RawChild, tree: Option<&Tree>) {
        if c.for_each.is_some() {
            self.error(
                at,
                "an `outside` child cannot use `forEach`: its name and namespace come from the primary's identity, not from a list the primary's author writes",
            );
        }
        if let Some(tree) = tree {
            self.where_only_from_identity(tree);
        }
    }

    /// A child template's metadata: a name (one per item with `forEach`)
    /// and no owner references (kiln sets those).
    fn child_metadata(&mut self, at: &[Step], c: &RawChild, metadata: Option<&Value>) {
        match metadata.and_then(|m| m.get("name")) {
            Some(Value::String(name)) => {
                if c.for_each.is_some() && !name.contains("{{") {
                    self.error(
                    &[at, &[key("metadata"), key("name")]].concat(),
                    "with `forEach`, metadata.name must differ per item (use `item` or `index` in it)",
                );
                }
            }
            Some(_) => self.error(
                &[at, &[key("metadata"), key("name")]].concat(),
                "metadata.name must be a string",
            ),
            None => {
                let here = if metadata.is_some() {
                    [at, &[key("metadata")]].concat()
                } else {
                    at.to_vec()
                };
                self.error(&here, "the child template has no metadata.name");
            }
        }
        if metadata.and_then(|m| m.get("ownerReferences")).is_some() {
            self.error(
                &[at, &[key("metadata"), key("ownerReferences")]].concat(),
                "kiln sets ownerReferences on children itself; remove them",
            );
        }
    }

    pub(super) fn child_template(
        &mut self,
        at: &[Step],
        c: &RawChild,
        scope: &Scope<'_>,
        watches: &[String],
        ids: &[String],
    ) -> Option<(Gvk, Tree)> {
        let Value::Object(obj) = &c.template else {
            self.error(at, "a child template must be a mapping: a Kubernetes object with apiVersion, kind and metadata");
            return None;
        };
        let with = |k: &str| [at, &[key(k)]].concat();
        let literal = |k: &str| {
            obj.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.contains("{{") && !s.contains("{%"))
        };
        let (api_version, kind) = (literal("apiVersion"), literal("kind"));
        for (field, value) in [("apiVersion", api_version), ("kind", kind)] {
            if value.is_none() {
                let msg = if obj.contains_key(field) {
                    format!(
                        "`{field}` must be a literal string: kiln watches each child kind, so it cannot vary per object"
                    )
                } else {
                    format!("the child template has no `{field}`")
                };
                self.error(
                    &if obj.contains_key(field) {
                        with(field)
                    } else {
                        at.to_vec()
                    },
                    msg,
                );
            }
        }
        let metadata = obj.get("metadata");
        self.child_metadata(at, c, metadata);
        if obj.contains_key("status") {
            self.error(
                &with("status"),
                "a child's status belongs to its own controller; remove `status` from the template",
            );
        }
        let gvk = match (api_version, kind) {
            (Some(v), Some(k)) => self.gvk(at, v, k),
            _ => None,
        };
        if let Some(gvk) = &gvk
            && !c.outside
        {
            self.namespace_escape(at, gvk, metadata);
        }
        let tree = self.tree(at, &c.template, scope, watches, ids)?;
        Some((gvk?, tree))
    }

    /// For a primary of a kind known to be namespaced: children must stay in
    /// its namespace and cannot be cluster-scoped. (For other primaries the
    /// engine checks the same at render time, with discovery.)
    pub(super) fn namespace_escape(&mut self, at: &[Step], child: &Gvk, metadata: Option<&Value>) {
        let Some(f) = self.for_() else {
            return;
        };
        let Ok((group, version)) = parse_api_version(&f.api_version) else {
            return;
        };
        let primary = Gvk {
            group,
            version,
            kind: f.kind.clone(),
        };
        if well_known_scope(&primary) != Some(true) {
            return;
        }
        // The primary's namespace is not known here: any literal namespace
        // is another one.
        const PRIMARY: &str = "\u{0}the primary's namespace";
        let literal = metadata
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .filter(|ns| !ns.contains("{{"));
        let namespaced = well_known_scope(child).unwrap_or(true);
        match placement(Some(PRIMARY), namespaced, literal) {
            Err(Misplaced::ClusterScopedChild) => self.error(
                &[at, &[key("kind")]].concat(),
                format!("{child} is cluster-scoped; a namespaced primary ({}) cannot own cluster-scoped children", primary.kind),
            ),
            Err(Misplaced::OtherNamespace { child: ns, .. }) => self.error(
                &[at, &[key("metadata"), key("namespace")]].concat(),
                format!(
                    "a namespaced primary ({}) may only own children in its own namespace; remove the literal namespace `{ns}`",
                    primary.kind
                ),
            ),
            _ => {}
        }
    }

    /// An `outside` child's name and namespace decide where kiln writes:
    /// they may come from the primary's identity and the rule, never from
    /// what the primary's author writes in its spec (tenant boundary).
    pub(super) fn where_only_from_identity(&mut self, tree: &Tree) {
        const IDENTITY: &[&str] = &[
            "self.metadata.name",
            "self.metadata.namespace",
            "self.metadata.uid",
            "rule.name",
        ];
        let ids: Vec<TemplateId> = tree.templates().into_iter().cloned().collect();
        for id in ids {
            let path = id.path().trim_end_matches(" (key)");
            if !(path.ends_with(".template.metadata.name")
                || path.ends_with(".template.metadata.namespace"))
            {
                continue;
            }
            let bad: Vec<String> = self
                .set
                .references(&id)
                .into_iter()
                .chain(self.set.self_paths(&id))
                .filter(|r| !IDENTITY.contains(&r.as_str()))
                .collect();
            if !bad.is_empty() {
                let at = self.steps_of(&id, &[]);
                self.error(
                    &at,
                    format!(
                        "an `outside` child's name and namespace may use only {}, not `{}`: the rule decides where kiln writes, not the primary's author",
                        IDENTITY.iter().map(|r| format!("`{r}`")).collect::<Vec<_>>().join(", "),
                        bad.join("`, `")
                    ),
                );
            }
        }
    }

    /// The cluster-scoped objects decorator `d` may patch for a namespaced
    /// primary: its `allowNames`, and the watch's name when it is literal.
    /// A watch of a kind known to be cluster-scoped found by a templated
    /// name or a selector, with no `allowNames`, is refused: whoever writes
    /// a primary would choose which cluster-wide object kiln writes.
    pub(super) fn allow_names(
        &mut self,
        at: &[Step],
        d: &RawDecorator,
        target: Option<&DecoratorTarget>,
    ) -> Vec<String> {
        let mut names = d.allow_names.clone();
        for (j, name) in d.allow_names.iter().enumerate() {
            if let Err(why) = dns_subdomain(name) {
                let here = [at, &[key("allowNames"), Step::Index(j)]].concat();
                self.error(&here, format!("name `{}` {why}", name.escape_debug()));
            }
        }
        let Some(DecoratorTarget::Related(watch)) = target else {
            return names;
        };
        let Some(w) = self.raw.spec.watches.iter().find(|w| &w.name == watch) else {
            return names;
        };
        let literal = w
            .ref_
            .as_ref()
            .map(|r| r.name.as_str())
            .filter(|n| !n.contains("{{") && !n.contains("{%"));
        if let Some(name) = literal {
            names.push(name.to_string());
            return names;
        }
        let cluster_scoped = well_known_scope(&loose_gvk(&w.api_version, &w.kind)) == Some(false);
        let primary_cluster_scoped = self.primary_cluster_scoped();
        if cluster_scoped && !primary_cluster_scoped && names.is_empty() {
            self.error(
                &[at, &[key("target")]].concat(),
                format!(
                    "decorator `{}` patches {} objects (cluster-scoped) found by a name or labels the primary gives: list the names it may patch in `allowNames`",
                    d.id, w.kind
                ),
            );
        }
        names
    }
}
