//! The body of each subcommand. `anyhow` lives here and in `main`, nowhere else.

pub mod controlplane;
pub mod render;
pub mod schema;
pub mod validate;
