//! `history` on a child: which of the live children a rule no longer
//! renders stay (the newest `keep` of each class) instead of being pruned —
//! the finished Jobs a CronJob keeps.

use crate::template::TemplateId;

/// One class of a child's history (`children[].history[]`), compiled.
#[derive(Debug, Clone)]
pub struct HistoryClass {
    /// An expression on `child` (the live object): the live children it
    /// holds for take this class (the first class that does). Default: all.
    pub when: Option<TemplateId>,
    /// An expression giving how many of the class stay (a non-negative
    /// integer), the newest by creation time.
    pub keep: TemplateId,
}
