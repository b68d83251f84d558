//! What this build of kiln is, for `kiln version` and the logs.

/// Kiln's own version (from `Cargo.toml`).
pub const KILN: &str = env!("CARGO_PKG_VERSION");

/// The newest Kubernetes API version the built-in types were generated for.
pub const KUBERNETES_API: &str = "1.36";

/// One line for humans: `kiln 0.1.0 (Kubernetes API 1.36)`.
pub fn describe() -> String {
    format!("kiln {KILN} (Kubernetes API {KUBERNETES_API})")
}
