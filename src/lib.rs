//! Kiln is a generic, declarative Kubernetes operator: YAML rules name a
//! primary kind, the children to render for each of its objects, the objects
//! they depend on and how to requeue, and one `kiln` process runs them all.
//!
//! The crate is organised as one module per job:
//!
//! - [`api`]: rules that define their own API: `spec.api` → the CRD, its checks.
//! - [`controlplane`]: a real local control plane (etcd, kube-apiserver,
//!   kube-controller-manager built from Go modules) for tests and the demo.
//! - [`yaml`]: YAML documents with the position of every node.
//! - [`yaml_out`]: YAML text kiln writes, read back by any reader as written.
//! - [`rules`]: the rule format, loading and validation.
//! - [`template`]: typed templates (minijinja), compiled once per rule.
//! - [`engine`]: `kiln run`: shared informers, per-rule queues and workers, reconcile.
//! - [`egress`]: requests to systems outside the cluster, guarded (SSRF, size, time).
//! - [`hook`]: Metacontroller's hook request and answer JSON (pure).
//! - [`lease`]: leader election on a Lease (client-go's algorithm).
//! - [`metrics`]: Prometheus metrics (controller-runtime names, kiln's own).
//! - [`serve`]: the `/metrics`, `/healthz` and `/readyz` endpoints.
//! - [`rbac`]: the least-privilege ClusterRole a rule set needs.
//! - [`reload`]: hot reload of the rule set from files or a ConfigMap.
//! - [`readiness`]: whether a live child is ready, by its kind (kstatus rules).
//! - [`render`]: one rule for one primary → children and status (pure).
//! - [`ownership`]: the mark kiln stamps on its children, and reading it back.
//! - [`redact`]: Secret values kept out of messages.
//! - [`request_timeout`]: a request to the API server unanswered too long is given up.
//! - [`shard`]: active-active sharding: which replica acts on which primary.
//! - [`gate`]: the one door every write to the API server goes through, with its warrant.
//! - [`listener`]: the bounded TCP/TLS listener behind every port kiln serves.
//! - [`version`]: what this build is.

pub mod api;
pub mod controlplane;
pub mod egress;
pub mod engine;
pub mod gate;
pub mod hook;
pub mod lease;
pub mod listener;
pub mod metrics;
pub mod ownership;
pub mod rbac;
pub mod readiness;
pub mod redact;
pub mod reload;
pub mod render;
pub mod request_timeout;
pub mod rules;
pub mod serve;
pub mod shard;
pub mod template;
pub mod version;
pub mod yaml;
pub mod yaml_out;
