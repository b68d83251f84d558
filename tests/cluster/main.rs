//! Integration tests against a real control plane (etcd, kube-apiserver,
//! kube-controller-manager built from Go modules; see `tests/controlplane/`).
//!
//! One control plane serves every test in this binary; each test works in a
//! namespace of its own.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    reason = "test code fails loudly by design"
)]

mod support;

mod accepted_rules;
mod admission;
mod adoption;
mod annotations;
mod api;
mod chaospod;
mod chart;
mod collections;
mod conversion;
mod crd_ownership;
mod cronjob;
mod declarative;
mod decorators;
mod dependencies;
mod deploy;
mod engine;
mod examples;
mod explain;
mod external;
mod faults;
mod first_steps;
mod forged_children;
mod foundation;
mod generate;
mod history;
mod hooks;
mod hostile_fights;
mod hostile_generated;
mod hostile_leases;
mod hostile_names;
mod hostile_objects;
mod hostile_secrets;
mod hostile_status;
mod hostile_templates;
mod hostile_tenants;
mod kiln_diff;
mod lifecycle;
mod missing_information;
mod no_status;
mod outside;
mod own_events;
mod ownership;
mod projection;
mod read_only;
mod readiness;
mod reload;
mod reload_check;
mod reload_crds;
mod rule_resources;
mod rule_set;
mod selecting;
mod sharding;
mod status_schema;
mod stopping;
mod stored_data;
mod stranded;
mod typed_children;
mod unserved_kinds;
mod unwatched;
mod validations;
mod verdicts;
mod webhook_secret;
mod what_kiln_writes;
