//! A rule's external sources (`spec.external`), compiled: the literal
//! destination checked, the parts a primary fills compiled as templates,
//! the bounds parsed.

use std::sync::Arc;
use std::time::Duration;

use crate::egress::{AllowList, Destination, Limits, Method};
use crate::template::{Piece, TemplateId, Tree};

/// How long an answer is used when the rule says nothing.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
/// The shortest `interval` a rule may set.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The rate limit when the rule says nothing: one request a second.
pub const DEFAULT_MIN_INTERVAL: Duration = Duration::from_secs(1);

/// A Secret named by the rule author.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SecretRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// One external source.
#[derive(Debug, Clone)]
pub struct External {
    /// The name templates use (`external.<name>`).
    pub name: String,
    /// GET or POST.
    pub method: Method,
    /// Where the request goes, as written.
    pub destination: Arc<Destination>,
    /// Path segments below the destination, rendered per primary.
    pub path: Vec<Piece>,
    /// Query parameters, rendered per primary.
    pub query: Vec<(String, Piece)>,
    /// Headers, literal.
    pub headers: Vec<(String, String)>,
    /// The JSON body of a POST, rendered per primary.
    pub body: Option<Tree>,
    /// Where the credentials, CA bundle and client certificate are.
    pub secret: Option<SecretRef>,
    /// What it may reach beyond the defaults.
    pub allow: AllowList,
    /// Timeout and body limit.
    pub limits: Limits,
    /// How long an answer is used; how often a waiting primary asks again.
    pub interval: Duration,
    /// The fewest time between two requests.
    pub min_interval: Duration,
    /// While false of the answer, the primary waits.
    pub ready_when: Option<TemplateId>,
    /// How old a last good answer may be and still be used after a failure.
    pub last_good: Option<Duration>,
}
