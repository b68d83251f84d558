//! The engine: controller-runtime's Manager with the Reconcile function
//! replaced by rules. Each rule runs as a [`runtime::controller::RuleController`]
//! over shared informers (one watch per GVK, however many rules use it).
//!
//! A rule whose kinds are not served yet (a CRD not installed) waits and
//! starts by itself once discovery finds them.
//!
//! Three layers, one folder each: [`cache`] (watches and stores),
//! [`decision`] (what a reconcile should do, no API calls) and [`runtime`]
//! (queues, workers, the executor of plans). [`key`], [`backoff`] and
//! [`options`] are leaves they share. This module only names what the rest
//! of kiln uses.

pub mod backoff;
pub mod cache;
pub mod decision;
pub mod key;
pub mod options;
pub mod runtime;

pub use options::Options;
pub(crate) use runtime::crd::{SchemaRead, status_schema};
pub use runtime::engine::{Engine, RuleState};
pub use runtime::shared::Fence;
pub(crate) use runtime::start::kinds_of;
