//! Kiln is a generic, declarative Kubernetes operator: YAML rules name a
//! primary kind, the children to render for each of its objects, the objects
//! they depend on and how to requeue, and one `kiln` process runs them all.
//!
//! The crate is organised as one module per job:
//!
//! - [`controlplane`]: a real local control plane (etcd, kube-apiserver,
//!   kube-controller-manager built from Go modules) for tests and the demo.
//! - [`version`]: what this build is.

pub mod controlplane;
pub mod version;
