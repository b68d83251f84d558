//! The runtime: the queue, the workers and the executor of each plan, with
//! the status board shared by rules and the Events they publish.
//!
//! What the rest of kiln uses is re-exported here; the modules are the
//! runtime's own.

mod board;
mod controller;
mod crd;
mod decorations;
mod engine;
mod events;
mod no_status;
mod queue;
mod ready_tally;
mod shared;
mod since;
mod start;
mod unwatched;
mod workers;

pub use decorations::{Sent, send as send_decoration};
pub use engine::Engine;
pub use shared::Fence;
pub use start::RuleState;

pub(crate) use controller::RuleController;
pub(crate) use crd::{SchemaRead, status_schema};
pub(crate) use start::kinds_of;
pub(crate) use unwatched::unwatched;
