//! The egress a rule set needs: every external source's scheme, host and
//! port, with the addresses its rule allows beyond the defaults (what a
//! NetworkPolicy for kiln must let out).

use std::collections::BTreeSet;

use crate::rules::RuleSet;

/// One destination a rule set reaches.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Egress {
    /// The host as written.
    pub host: String,
    /// The port.
    pub port: u16,
    /// The rules and sources reaching it (`rule/source`).
    pub sources: Vec<String>,
    /// Allow entries of those sources (CIDRs and hosts).
    pub allow: Vec<String>,
}

/// Every destination of `set`, by host and port.
pub fn of(set: &RuleSet) -> Vec<Egress> {
    let mut out: Vec<Egress> = Vec::new();
    for rule in &set.rules {
        for source in &rule.external {
            let (host, port) = (
                source.destination.host().to_string(),
                source.destination.port(),
            );
            let name = format!("{}/{}", rule.name, source.name);
            let allow = source
                .allow
                .cidrs
                .iter()
                .map(ToString::to_string)
                .chain(source.allow.hosts.iter().cloned());
            match out.iter_mut().find(|e| e.host == host && e.port == port) {
                Some(e) => {
                    e.sources.push(name);
                    e.allow.extend(allow);
                }
                None => out.push(Egress {
                    host,
                    port,
                    sources: vec![name],
                    allow: allow.collect(),
                }),
            }
        }
    }
    for e in &mut out {
        e.allow = e
            .allow
            .drain(..)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
    }
    out.sort();
    out
}
