//! When a reconcile looks at its primary again.

use std::time::Duration;

/// What to do with a primary after a reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing until something changes.
    Done,
    /// Reconcile again after this long.
    After(Duration),
}

impl Next {
    /// The sooner of this and a wake `after` this long (`spec.requeue.at`).
    pub(crate) fn no_later_than(self, after: Option<Duration>) -> Self {
        match (self, after) {
            (Self::After(d), Some(a)) => Self::After(d.min(a)),
            (Self::Done, Some(a)) => Self::After(a),
            (next, None) => next,
        }
    }
}
