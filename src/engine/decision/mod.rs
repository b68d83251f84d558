//! The decision: what one reconcile should do, as values computed from a
//! snapshot (`plan`), with the pieces it is made of (diff, status, failure,
//! related objects, ownership, placing, budget, claims, decorations), what
//! a primary's deletion does (`deletion`) and how a reconcile ends
//! (`outcome`). No kube client in here: everything it reads is handed to it;
//! the runtime only carries the decisions out.

pub mod adoption;
pub mod budget;
pub mod claims;
pub mod decorate;
pub mod deletion;
pub mod diff;
pub mod failure;
pub mod history;
pub mod outcome;
pub mod placed;
pub mod placing;
pub mod plan;
pub mod related;
pub mod remember;
pub mod reown;
pub mod replace;
pub mod schema;
pub mod status;
pub mod suspend;
pub mod touch;
