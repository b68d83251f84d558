//! `watches`: the related objects a rule reads, and where it may read them.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn watches(&mut self) -> Vec<Watch> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        // A watch is found from the primary alone.
        let scope = Scope {
            roots: &["self", "rule"],
        };
        for (i, w) in self.raw.spec.watches.iter().enumerate() {
            let at = vec![key("spec"), key("watches"), Step::Index(i)];
            let with = |k: &str| [at.as_slice(), &[key(k)]].concat();
            self.unique_identifier(
                &with("name"),
                &mut seen,
                "watch name",
                &w.name,
                "related.<name>",
            );
            let gvk = self.gvk(&at, &w.api_version, &w.kind);
            let target = self.watch_target(&at, w, &scope);
            for (j, ns) in w.allow_namespaces.iter().enumerate() {
                if let Err(why) = dns_label(ns) {
                    let here = [with("allowNamespaces").as_slice(), &[Step::Index(j)]].concat();
                    self.error(&here, format!("namespace `{}` {why}", ns.escape_debug()));
                }
            }
            if let (Some(gvk), Some(target)) = (gvk, target) {
                out.push(Watch {
                    name: w.name.clone(),
                    gvk,
                    target,
                    required: w.required,
                    allow_namespaces: w.allow_namespaces.clone(),
                });
            }
        }
        out
    }

    pub(super) fn watch_target(
        &mut self,
        at: &[Step],
        w: &RawWatch,
        scope: &Scope<'_>,
    ) -> Option<WatchTarget> {
        match (&w.ref_, &w.selector) {
            (Some(r), None) => {
                let base = [at, &[key("ref")]].concat();
                let name = self.piece(
                    &[base.as_slice(), &[key("name")]].concat(),
                    &r.name,
                    scope,
                    &[],
                    &[],
                );
                let namespace = r
                    .namespace
                    .as_ref()
                    .map(|ns| self.namespace_piece(&base, ns, scope));
                Some(WatchTarget::Ref {
                    name: name?,
                    namespace: namespace.flatten(),
                })
            }
            (None, Some(sel)) => {
                let base = [at, &[key("selector")]].concat();
                if sel.all_namespaces && sel.namespace.is_some() {
                    self.error(
                        &[base.as_slice(), &[key("allNamespaces")]].concat(),
                        "a watch selector looks in one `namespace` or in `allNamespaces`, not both",
                    );
                }
                let expressions = RawLabelSelector {
                    match_labels: Default::default(),
                    match_expressions: sel.match_expressions.clone(),
                };
                let match_expressions = self.selector(&base, &expressions).match_expressions;
                let mut labels = Vec::new();
                for (k, v) in &sel.match_labels {
                    let p = [base.as_slice(), &[key("matchLabels"), key(k)]].concat();
                    if let Some(piece) = self.piece(&p, v, scope, &[], &[]) {
                        labels.push((k.clone(), piece));
                    }
                }
                let namespace = sel
                    .namespace
                    .as_ref()
                    .and_then(|ns| self.namespace_piece(&base, ns, scope));
                Some(WatchTarget::Selector {
                    match_labels: labels,
                    match_expressions,
                    namespace,
                    all_namespaces: sel.all_namespaces,
                })
            }
            (Some(_), Some(_)) => {
                self.error(at, "a watch takes either `ref` or `selector`, not both");
                None
            }
            (None, None) => {
                self.error(
                    at,
                    "a watch needs `ref` (one object by name) or `selector` (objects by label)",
                );
                None
            }
        }
    }

    /// A watch's `namespace` template (found from the primary alone).
    pub(super) fn namespace_piece(
        &mut self,
        base: &[Step],
        ns: &str,
        scope: &Scope<'_>,
    ) -> Option<Piece> {
        self.piece(&[base, &[key("namespace")]].concat(), ns, scope, &[], &[])
    }
}
