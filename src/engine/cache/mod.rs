//! The cache: one watch and one compact store per kind, shared by every
//! rule (informers, decoding, projection, watch health, discovery of kinds,
//! the reverse index of related objects).
//!
//! The runtime reaches the modules it drives (`pub(crate)`); the rest of
//! kiln only what is re-exported here.

mod cached;
pub(crate) mod crd_watch;
mod decode;
mod elsewhere;
pub(crate) mod informer;
pub(crate) mod kinds;
pub(crate) mod owned_status;
pub(crate) mod projection;
pub(crate) mod registry;
pub(crate) mod reverse;
mod store;
pub(crate) mod undecodable;
mod watch_health;

pub use kinds::Kinds;
