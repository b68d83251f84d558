//! The engine: controller-runtime's Manager with the Reconcile function
//! replaced by rules. Each rule runs as a `RuleController` (the runtime's)
//! over shared informers (one watch per GVK, however many rules use it).
//!
//! A rule whose kinds are not served yet (a CRD not installed) waits and
//! starts by itself once discovery finds them.
//!
//! Three layers, one folder each: [`cache`] (watches and stores),
//! [`decision`] (what a reconcile should do, no API calls) and [`runtime`]
//! (queues, workers, the executor of plans). `key`, `backoff` and
//! `options` are leaves they share. This module only names what the rest
//! of kiln uses; each folder's `mod.rs` is the facade of its layer, and
//! `unreachable_pub` keeps every item that is not part of it `pub(crate)`
//! or narrower.

#![warn(unreachable_pub)]

pub(crate) mod backoff;
pub mod cache;
pub mod decision;
mod key;
mod options;
pub mod runtime;

pub use key::ObjKey;
pub use options::Options;
pub use runtime::{Engine, Fence, RuleState};
pub(crate) use runtime::{SchemaRead, kinds_of, status_schema};
