//! The rule's kinds and where its primaries come from: the API version, the
//! schema references, `for`, the primary, exclusions and selectors.

use super::*;

impl<'a> Checker<'a> {
    /// `spec.api`, compiled into its CRD.
    pub(super) fn api(&mut self) -> Option<crate::api::Api> {
        let rule = self.raw;
        let raw = rule.spec.api.as_ref()?;
        if let Some(f) = &rule.spec.for_
            && let Some(why) = crate::api::rule::for_mismatch(raw, f)
        {
            self.error(&[key("spec"), key("for")], why);
        }
        let status = rule.spec.status.as_ref();
        let fields: Vec<String> = status
            .map(|s| s.fields.keys().cloned().collect())
            .unwrap_or_default();
        let at = [key("spec"), key("api")];
        match crate::api::compile(raw, &rule.metadata.name, &fields, &at) {
            Ok(mut api) => {
                api.locate(|at| self.doc.diagnostic(at, "").location());
                Some(api)
            }
            Err(errors) => {
                errors
                    .into_iter()
                    .for_each(|e| self.error(&e.at, e.message));
                None
            }
        }
    }

    /// Every `self.spec...`/`self.status...` a template reads, and every
    /// status field the rule writes, declared by the primary's schema (the
    /// rule's own API, or a CRD given to check against).
    pub(super) fn schema_references(
        &mut self,
        api: Option<&crate::api::Api>,
        primary: Option<&Primary>,
    ) {
        let Some((schema, whose)) = self.primary_schema(api, primary) else {
            return;
        };
        for (at, id) in std::mem::take(&mut self.compiled) {
            for path in self.set.self_paths(&id) {
                if let Err(why) = crate::api::refs::check(&schema, &path, &whose) {
                    self.error(&at, why);
                }
            }
        }
        let rule = self.raw;
        let fields = rule.spec.status.iter().flat_map(|s| s.fields.keys());
        for field in fields {
            let path = format!("self.status.{field}");
            if let Err(why) = crate::api::refs::check(&schema, &path, &whose) {
                let at = [key("spec"), key("status"), key("fields"), key(field)];
                self.error(
                    &at,
                    format!("{why}: the API server would refuse the status kiln writes"),
                );
            }
        }
    }

    /// The primary's schema (the rule's own API, or a CRD given to check
    /// against), and whose it is, for messages.
    pub(super) fn primary_schema(
        &self,
        api: Option<&crate::api::Api>,
        primary: Option<&Primary>,
    ) -> Option<(Value, String)> {
        let gvk = &primary?.gvk;
        let (schema, whose) = match api {
            Some(api) => (api.schema(&gvk.version), format!("{} (spec.api)", gvk.kind)),
            None => {
                let found =
                    crate::api::rule::schema_among(self.crds, &gvk.group, &gvk.version, &gvk.kind);
                let whose = format!("{} ({})", gvk.kind, found.map_or("", |f| f.0));
                (found.map(|f| f.1), whose)
            }
        };
        Some((schema?.clone(), whose))
    }

    /// `spec.for`, or what `spec.api` implies.
    pub(super) fn for_(&self) -> Option<RawFor> {
        let spec = &self.raw.spec;
        spec.for_
            .clone()
            .or_else(|| spec.api.as_ref().map(crate::api::rule::implied_for))
    }

    pub(super) fn primary(&mut self) -> Option<Primary> {
        let Some(f) = self.for_() else {
            self.error(
                &[key("spec")],
                "missing field `for` (or `api`, to define the primary kind here)",
            );
            return None;
        };
        let f = &f;
        let base = [key("spec"), key("for")];
        let gvk = self.gvk(&base, &f.api_version, &f.kind);
        for (i, ns) in f.namespaces.iter().enumerate() {
            if let Err(why) = dns_label(ns) {
                self.error(
                    &[key("spec"), key("for"), key("namespaces"), Step::Index(i)],
                    format!("namespace `{ns}` {why}"),
                );
            }
        }
        let at = [key("spec"), key("for"), key("selector")];
        let selector = f.selector.as_ref().map(|sel| self.selector(&at, sel));
        self.exclusions(&f.namespaces, &f.exclude_namespaces);
        let at = [key("spec"), key("for"), key("namespaceSelector")];
        let namespace_selector = f.namespace_selector.as_ref().map(|sel| {
            if gvk.as_ref().and_then(well_known_scope) == Some(false) {
                self.error(&at, format!("{} is cluster-scoped: its objects are in no namespace, so namespaceSelector would take none (select them with `selector`)", f.kind));
            }
            self.selector(&at, sel)
        });
        Some(Primary {
            gvk: gvk?,
            namespaces: f.namespaces.clone(),
            exclude_namespaces: f.exclude_namespaces.clone(),
            selector,
            namespace_selector,
            take_existing: f.take_existing,
        })
    }

    /// `spec.for.excludeNamespaces`: namespace names, none also listed in
    /// `namespaces` (it would take nothing from there).
    pub(super) fn exclusions(&mut self, included: &[String], excluded: &[String]) {
        for (i, ns) in excluded.iter().enumerate() {
            let at = [
                key("spec"),
                key("for"),
                key("excludeNamespaces"),
                Step::Index(i),
            ];
            if let Err(why) = dns_label(ns) {
                self.error(&at, format!("namespace `{}` {why}", ns.escape_debug()));
            } else if included.contains(ns) {
                self.error(
                    &at,
                    format!("namespace `{ns}` is both in spec.for.namespaces and excluded"),
                );
            }
        }
    }

    pub(super) fn gvk(&mut self, at: &[Step], api_version: &str, kind: &str) -> Option<Gvk> {
        let with = |k: &str| [at, &[key(k)]].concat();
        let parsed = parse_api_version(api_version);
        if let Err(why) = &parsed {
            self.error(&with("apiVersion"), why.clone());
        }
        let kind_ok = kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && kind.chars().all(|c| c.is_ascii_alphanumeric());
        if !kind_ok {
            self.error(&with("kind"), format!("kind `{kind}` must be CamelCase letters and digits, starting upper-case (e.g. `Deployment`)"));
        }
        let (group, version) = parsed.ok()?;
        kind_ok.then(|| Gvk {
            group,
            version,
            kind: kind.to_string(),
        })
    }

    pub(super) fn selector(&mut self, at: &[Step], sel: &RawLabelSelector) -> LabelSelector {
        let mut match_expressions = Vec::new();
        for (i, req) in sel.match_expressions.iter().enumerate() {
            let here = [at, &[key("matchExpressions"), Step::Index(i)]].concat();
            let operator = match req.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                op => {
                    self.error(
                        &[here.as_slice(), &[key("operator")]].concat(),
                        format!("unknown operator `{op}` (use In, NotIn, Exists or DoesNotExist)"),
                    );
                    continue;
                }
            };
            let takes_values = matches!(operator, Operator::In | Operator::NotIn);
            match (takes_values, req.values.is_empty()) {
                (true, true) => self.error(
                    &here,
                    format!("operator `{}` needs at least one value", req.operator),
                ),
                (false, false) => self.error(
                    &here,
                    format!("operator `{}` takes no values", req.operator),
                ),
                _ => {}
            }
            match_expressions.push(Requirement {
                key: req.key.clone(),
                operator,
                values: req.values.clone(),
            });
        }
        LabelSelector {
            match_labels: sel.match_labels.clone(),
            match_expressions,
        }
    }
}
