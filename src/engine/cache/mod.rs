//! The cache: one watch and one compact store per kind, shared by every
//! rule (informers, decoding, projection, watch health, discovery of kinds,
//! the reverse index of related objects).

pub mod cached;
pub mod crd_watch;
pub mod decode;
pub mod elsewhere;
pub mod informer;
pub mod kinds;
pub mod owned_status;
pub mod projection;
pub mod registry;
pub mod reverse;
pub mod store;
pub mod undecodable;
pub mod watch_health;
