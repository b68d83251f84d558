//! The runtime: the queue, the workers and the executor of each plan, with
//! the status board shared by rules and the Events they publish.

pub mod board;
pub mod controller;
pub mod crd;
pub mod decorations;
pub mod engine;
pub mod events;
pub mod no_status;
pub mod queue;
pub mod ready_tally;
pub mod shared;
pub mod since;
pub mod start;
pub mod unwatched;
pub mod workers;
