//! The decision: what one reconcile should do, as values computed from a
//! snapshot (`plan`), with the pieces it is made of (diff, status, failure,
//! related objects, ownership, placing, budget, claims, decorations), what
//! a primary's deletion does (`deletion`) and how a reconcile ends
//! (`outcome`). No kube client in here: everything it reads is handed to it;
//! the runtime only carries the decisions out.
//!
//! The runtime reaches the modules it drives (`pub(crate)`); the rest of
//! kiln (the offline commands: `render`, `diff`, `explain`, `test`) only
//! what is re-exported here.

mod adoption;
pub(crate) mod budget;
pub(crate) mod claims;
pub(crate) mod decorate;
pub(crate) mod deletion;
pub(crate) mod diff;
pub(crate) mod existing;
mod external;
pub(crate) mod failure;
mod history;
pub(crate) mod hooked;
mod live;
pub(crate) mod next;
pub(crate) mod observe;
pub(crate) mod outcome;
pub(crate) mod placed;
pub(crate) mod placing;
pub(crate) mod plan;
pub(crate) mod related;
mod remember;
pub(crate) mod reown;
mod replace;
pub(crate) mod schema;
pub(crate) mod status;
pub(crate) mod suspend;
pub(crate) mod touch;

pub use decorate::{
    Decorations, Done, Verdict as DecorationVerdict, of_plan as decorations, plan as decorate,
};
pub use diff::{equal, satisfied};
pub use live::LiveChild;
pub use observe::{Live, Reading, Source, child_mark, decide, read, snapshot};
pub use placed::{believed as placed_believed, identity as placed_identity};
pub use plan::{ChildVerdict, Draft, Known, Observed, Occupants, Plan, Verdict, draft};
pub use related::{Found, Refusal, Target, seen as related_seen, target as related_target};
pub use schema::{StatusSchema, StatusWrites, status_writes};
pub use status::{Contributor, Outcome, compose as compose_status, reasons};
pub use suspend::message as suspended_message;
