//! Which existing objects an `adopt: true` child may take over.
//!
//! Whoever writes a primary decides values, not which existing object kiln
//! takes over (and later deletes with the primary). A child that adopts
//! only in its primary's own namespace is bounded by that namespace. One
//! that adopts anywhere else (an `outside` child, a cluster-scoped child or
//! a child of a cluster-scoped primary) may adopt only what the rule names
//! literally: its `adoptNames`, or its own name when the template writes it
//! as a literal.

use super::{Checker, key, loose_gvk};
use crate::rules::names::{dns_label, dns_subdomain};
use crate::rules::scope::well_known_scope;
use crate::rules::spec::RawChild;
use crate::yaml::Step;

/// Whether a template string has template syntax.
fn templated(s: &str) -> bool {
    s.contains("{{") || s.contains("{%")
}

impl Checker<'_> {
    /// Whether the primary is known to be cluster-scoped.
    pub(super) fn primary_cluster_scoped(&self) -> bool {
        match (&self.raw.spec.api, self.for_()) {
            (Some(api), _) => api.scope == crate::api::spec::ApiScope::Cluster,
            (None, Some(f)) => well_known_scope(&loose_gvk(&f.api_version, &f.kind)) == Some(false),
            (None, None) => false,
        }
    }

    /// The objects child `c` (at `at`) may take over outside its primary's
    /// namespace: `adoptNames` (`name`, or `namespace/name`), and its own
    /// name when literal. An `adopt: true` that may reach outside the
    /// primary's namespace through a name the primary gives, with no
    /// `adoptNames`, is refused.
    pub(super) fn adopt_names(&mut self, at: &[Step], c: &RawChild) -> Vec<String> {
        let mut names = Vec::new();
        for (j, entry) in c.adopt_names.iter().enumerate() {
            let here = [at, &[key("adoptNames"), Step::Index(j)]].concat();
            let (namespace, name) = match entry.split_once('/') {
                Some((ns, name)) => (Some(ns), name),
                None => (None, entry.as_str()),
            };
            if let Some(Err(why)) = namespace.map(dns_label) {
                self.error(
                    &here,
                    format!("namespace in `{}` {why}", entry.escape_debug()),
                );
            } else if let Err(why) = dns_subdomain(name) {
                self.error(&here, format!("name `{}` {why}", entry.escape_debug()));
            } else {
                names.push(entry.clone());
            }
        }
        if !c.adopt {
            if !c.adopt_names.is_empty() {
                self.error(
                    &[at, &[key("adoptNames")]].concat(),
                    "`adoptNames` bounds what `adopt: true` takes over; without `adopt` it does nothing",
                );
            }
            return names;
        }
        let meta = &c.template["metadata"];
        let name = meta["name"].as_str().unwrap_or_default();
        let namespace = meta["namespace"].as_str();
        let literal_name = !name.is_empty() && !templated(name);
        match namespace {
            Some(ns) if !templated(ns) && literal_name => names.push(format!("{ns}/{name}")),
            None if literal_name => names.push(name.to_string()),
            _ => {}
        }
        let kind = loose_gvk(
            c.template["apiVersion"].as_str().unwrap_or_default(),
            c.template["kind"].as_str().unwrap_or_default(),
        );
        let elsewhere =
            c.outside || self.primary_cluster_scoped() || well_known_scope(&kind) == Some(false);
        if elsewhere && names.is_empty() {
            self.error(
                &[at, &[key("adopt")]].concat(),
                format!(
                    "child `{}` takes over an existing {} outside its primary's namespace by a name the primary gives (a tenant could name someone else's): list the names it may take over in `adoptNames`",
                    c.id, kind.kind
                ),
            );
        }
        names
    }
}
