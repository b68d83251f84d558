//! `decorators`: fields kiln sets on objects it does not own.

use super::*;

impl<'a> Checker<'a> {
    /// A decorator's `target`: `self` or `related.<name>` of a declared watch.
    fn decorator_target(
        &mut self,
        at: &[Step],
        target: &str,
        watches: &[String],
    ) -> Option<DecoratorTarget> {
        match target.trim() {
            "self" => Some(DecoratorTarget::Primary),
            t => match t.strip_prefix("related.") {
                Some(name) if watches.iter().any(|w| w == name) => {
                    Some(DecoratorTarget::Related(name.to_string()))
                }
                _ => {
                    let declared = if watches.is_empty() {
                        "none".to_string()
                    } else {
                        watches.join(", ")
                    };
                    self.error(
                        at,
                        format!(
                            "target `{t}` is neither `self` nor `related.<name>` of a watch in spec.watches (declared: {declared})"
                        ),
                    );
                    None
                }
            },
        }
    }

    pub(super) fn decorators(&mut self, watches: &[String], ids: &[String]) -> Vec<Decorator> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        let scope = Scope {
            roots: &[
                "self", "related", "external", "children", "rule", "vars", "target",
            ],
        };
        for (i, d) in self.raw.spec.decorate.iter().enumerate() {
            let at = vec![key("spec"), key("decorate"), Step::Index(i)];
            let with = |k: &str| [at.as_slice(), &[key(k)]].concat();
            if !is_identifier(&d.id) {
                self.error(
                    &with("id"),
                    format!("decorator id `{}` must be letters, digits and `_` (it names the field manager `kiln.<rule>.<id>`)", d.id),
                );
            } else if !seen.insert(d.id.clone()) {
                self.error(&with("id"), format!("duplicate decorator id `{}`", d.id));
            } else if let Some(why) = manager_too_long(&self.raw.metadata.name, &d.id) {
                self.error(&with("id"), why);
            }
            let target = self.decorator_target(&with("target"), &d.target, watches);
            let when = d
                .when
                .as_ref()
                .and_then(|e| self.expr(&with("when"), e, &scope, watches, ids));
            let patch_at = with("patch");
            let Some(map) = d.patch.as_object() else {
                self.error(&patch_at, "the patch must be a map of fields to set");
                continue;
            };
            for field in ["apiVersion", "kind"] {
                if map.contains_key(field) {
                    self.error(
                        &[patch_at.as_slice(), &[key(field)]].concat(),
                        format!("`{field}` is the target's; remove it from the patch"),
                    );
                }
            }
            if let Some(meta) = map.get("metadata").and_then(Value::as_object) {
                for field in ["name", "namespace", "ownerReferences", "managedFields"] {
                    if meta.contains_key(field) {
                        self.error(
                            &[patch_at.as_slice(), &[key("metadata"), key(field)]].concat(),
                            format!("a decorator cannot set `metadata.{field}`; it patches the target as it is"),
                        );
                    }
                }
            }
            let patch = self.tree(&patch_at, &d.patch, &scope, watches, ids);
            let allow_names = self.allow_names(&at, d, target.as_ref());
            if let (Some(target), Some(patch)) = (target, patch) {
                out.push(Decorator {
                    id: d.id.clone(),
                    target,
                    when,
                    patch,
                    force: d.force,
                    allow_names,
                });
            }
        }
        out
    }
}
