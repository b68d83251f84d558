//! `vars` and `needs`: names, references, and the order children are made in
//! (no cycles).

use super::*;

impl<'a> Checker<'a> {
    /// `spec.vars`: each a template that may use the vars before it.
    pub(super) fn vars(&mut self, watches: &[String], ids: &[String]) -> Vec<(String, Tree)> {
        let scope = Scope {
            roots: &["self", "related", "external", "children", "rule", "vars"],
        };
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, (name, value)) in self.raw.spec.vars.iter().enumerate() {
            let at = [key("spec"), key("vars"), key(name)];
            self.unique_identifier(&at, &mut seen, "var name", name, "vars.<name>");
            self.var_limit = Some(i);
            self.child_refs = Some(Vec::new());
            let tree = self.tree(&at, value, &scope, watches, ids);
            let read = self.child_refs.take().unwrap_or_default();
            self.var_children
                .insert(name.clone(), read.into_iter().map(|r| r.id).collect());
            if let Some(tree) = tree {
                out.push((name.clone(), tree));
            }
        }
        self.var_limit = None;
        out
    }

    /// Why a var being checked may not use `vars.<name>`: itself or a var
    /// written after it (vars are evaluated in order, so no cycle can form).
    pub(super) fn var_reference(&self, name: Option<&str>) -> Option<String> {
        let limit = self.var_limit?;
        let name = name?;
        let pos = self.var_names.iter().position(|n| n == name)?;
        let current = &self.var_names[limit];
        if pos == limit {
            Some(format!("var `{current}` refers to itself"))
        } else if pos > limit {
            Some(format!(
                "`vars.{name}` is written after `{current}`: a var can use only the vars before it (they are evaluated in order)"
            ))
        } else {
            None
        }
    }

    /// The children a child waits for: those its templates refer to
    /// (`children.<id>`: until it exists; `ready.<id>`: until it is ready)
    /// and those it names in `dependsOn`.
    pub(super) fn needs(&mut self, at: &[Step], c: &RawChild, ids: &[String]) -> Vec<Need> {
        let mut needs: Vec<Need> = Vec::new();
        let add = |needs: &mut Vec<Need>, id: &str, ready: bool| match needs
            .iter_mut()
            .find(|n| n.id == id)
        {
            Some(n) => n.ready |= ready,
            None => needs.push(Need {
                id: id.to_string(),
                ready,
            }),
        };
        for r in self.child_refs.take().unwrap_or_default() {
            if !ids.contains(&r.id) {
                continue; // reported as undeclared
            }
            if r.id == c.id {
                if r.root == "ready" {
                    self.error(
                        &r.at,
                        format!("child `{}` cannot wait for its own readiness", c.id),
                    );
                }
                continue; // a child reading itself back (random_secret) waits for nothing
            }
            self.edges.push((c.id.clone(), r.id.clone(), r.at));
            add(&mut needs, &r.id, r.root == "ready");
        }
        for (j, d) in c.depends_on.iter().enumerate() {
            let here = [at, &[key("dependsOn"), Step::Index(j), key("id")]].concat();
            if d.id == c.id {
                self.error(&here, format!("child `{}` cannot depend on itself", c.id));
            } else if !ids.contains(&d.id) {
                self.error(
                    &here,
                    format!(
                        "`{}` is not declared in spec.children (declared: {})",
                        d.id,
                        ids.join(", ")
                    ),
                );
            } else {
                self.edges.push((c.id.clone(), d.id.clone(), here));
                add(&mut needs, &d.id, d.ready);
            }
        }
        needs
    }

    /// The order children are rendered in: each after the children it waits
    /// for, otherwise as written. A cycle is refused, spelled out.
    pub(super) fn order(&mut self, children: &[Child]) -> Vec<usize> {
        let mut order: Vec<usize> = Vec::new();
        while order.len() < children.len() {
            let placed = |id: &str| {
                order
                    .iter()
                    .any(|&k| children.get(k).is_some_and(|c| c.id == id))
            };
            let next = (0..children.len())
                .find(|i| !order.contains(i) && children[*i].needs.iter().all(|n| placed(&n.id)));
            match next {
                Some(i) => order.push(i),
                None => {
                    let left: Vec<usize> =
                        (0..children.len()).filter(|i| !order.contains(i)).collect();
                    self.cycle(children, &left);
                    order.extend(left);
                }
            }
        }
        order
    }

    /// Reports one cycle among `left` (children none of which can go first).
    pub(super) fn cycle(&mut self, children: &[Child], left: &[usize]) {
        let id_of = |i: usize| children[i].id.clone();
        let mut path: Vec<String> = left.first().map(|&i| id_of(i)).into_iter().collect();
        loop {
            let Some(last) = path.last().cloned() else {
                return;
            };
            // Every child left waits for another child left.
            let Some(next) = children
                .iter()
                .find(|c| c.id == last)
                .and_then(|c| {
                    c.needs
                        .iter()
                        .find(|n| left.iter().any(|&i| children[i].id == n.id))
                })
                .map(|n| n.id.clone())
            else {
                return;
            };
            if let Some(start) = path.iter().position(|p| *p == next) {
                let mut cycle = path.split_off(start);
                cycle.push(next.clone());
                let at = self
                    .edges
                    .iter()
                    .find(|(from, to, _)| *from == last && *to == next)
                    .map(|(_, _, at)| at.clone())
                    .unwrap_or_else(|| vec![key("spec"), key("children")]);
                self.error(
                    &at,
                    format!(
                        "children wait for each other in a cycle: {} (a child waits for the children its templates refer to as `children.<id>` or `ready.<id>`, and for its `dependsOn`)",
                        cycle.join(" → ")
                    ),
                );
                return;
            }
            path.push(next);
        }
    }

    /// Checks a name templates refer to (`related.<name>`, `children.<id>`):
    /// an identifier, not used twice in the rule.
    pub(super) fn unique_identifier(
        &mut self,
        at: &[Step],
        seen: &mut BTreeSet<String>,
        what: &str,
        name: &str,
        usage: &str,
    ) {
        if !is_identifier(name) {
            self.error(
                at,
                format!(
                    "{what} `{name}` must be letters, digits and `_` (templates write `{usage}`)"
                ),
            );
        } else if !seen.insert(name.to_string()) {
            self.error(at, format!("duplicate {what} `{name}`"));
        }
    }
}
