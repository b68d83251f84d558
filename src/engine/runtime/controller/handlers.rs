//! The handlers: each cache change becomes the key of the primary it
//! concerns, added to the rule's queue. They read nothing but the change and
//! the caches' indexes, and never block.

use super::*;

impl RuleController {
    pub(super) fn on_primary(&self, change: &Change<'_>) {
        match change {
            Change::Applied(obj) => {
                if !self.selects(obj.namespace().as_deref(), obj.labels()) && !self.holds(obj) {
                    return;
                }
                let key = ObjKey::of(obj);
                let print = Some(fingerprint(obj));
                let mut states = lock(&self.states);
                let state = states.entry(key.clone()).or_default();
                if std::mem::replace(&mut state.fingerprint, print) != print {
                    drop(states);
                    self.enqueue(key);
                }
            }
            Change::Deleted(obj) => {
                let key = ObjKey::of(obj);
                lock(&self.states).remove(&key);
                lock(&self.told).remove(&key);
                lock(&self.reverse).forget(&key);
                lock(&self.asked).remove(&key);
                let touched = lock(&self.claims).forget(&key);
                for other in touched {
                    self.enqueue(other);
                }
                self.shared.board.forget(&self.rule.primary.gvk, &key);
                self.shared.ready.forget(&self.rule.name, &key);
                self.shared
                    .no_status
                    .forget(obj.metadata.uid.as_deref().unwrap_or_default());
            }
        }
    }

    pub(super) fn on_child(&self, change: &Change<'_>) {
        let (Change::Applied(obj) | Change::Deleted(obj)) = change;
        let Some(mark) = crate::ownership::read(&obj.metadata) else {
            return;
        };
        let gvk = &self.rule.primary.gvk;
        if mark.rule != self.rule.name || !mark.kind_is(&gvk.api_version(), &gvk.kind) {
            return;
        }
        // An `outside` child names its primary's namespace; an owned or
        // orphaned one lives in it.
        let namespaced = self.wiring.primary.kind().namespaced;
        // An `outside` child left to outlive its primary (`Orphan`) names
        // it by uid alone: the primary's namespace is that of the primary
        // cached with that uid, not the child's.
        let outside = mark.orphaned()
            && namespaced
            && self
                .rule
                .children
                .iter()
                .any(|c| c.id == mark.child && c.outside);
        let namespace = if outside {
            let entries = self.wiring.primary.entries();
            let found = entries
                .iter()
                .find(|p| p.uid().is_some_and(|u| u.to_string() == mark.uid));
            let Some(primary) = found else {
                return;
            };
            primary.namespace().map(str::to_string)
        } else {
            mark.primary_namespace(obj.namespace().as_deref(), namespaced)
        };
        self.enqueue(ObjKey {
            namespace,
            name: mark.name,
        });
    }

    /// A Namespace changed (its labels, say): its primaries are looked at
    /// again, as `spec.for.namespaceSelector` may take them now.
    pub(super) fn on_namespace(&self, change: &Change<'_>) {
        let (Change::Applied(ns) | Change::Deleted(ns)) = change;
        let name = ns.name_any();
        for obj in self.wiring.primary.entries() {
            let namespace = obj.namespace();
            if namespace == Some(name.as_str()) && self.selects(namespace, &obj.labels()) {
                self.enqueue(obj.key());
            }
        }
    }

    pub(super) fn on_related(&self, watch: &str, change: &Change<'_>) {
        let (Change::Applied(obj) | Change::Deleted(obj)) = change;
        let key = ObjKey::of(obj);
        let primaries = lock(&self.reverse).primaries_for(watch, &key, obj.labels());
        for primary in primaries {
            self.enqueue(primary);
        }
    }

    /// Whether the rule takes the object in `namespace` with `labels` as a primary.
    pub fn selects<L: LabelSource + ?Sized>(&self, namespace: Option<&str>, labels: &L) -> bool {
        let primary = &self.rule.primary;
        primary.selects(namespace, labels)
            && namespace_takes(primary, namespace, self.wiring.namespaces.as_deref())
    }
}

pub(super) fn handler(weak: &Weak<RuleController>, f: fn(&RuleController, &Change<'_>)) -> Handler {
    let weak = weak.clone();
    Arc::new(move |change: &Change<'_>| {
        if let Some(this) = weak.upgrade() {
            f(&this, change);
        }
    })
}

/// Whether `spec.for.namespaceSelector` (if any) takes `obj`, by the labels
/// of its Namespace in `namespaces` (the shared Namespace cache). A
/// Namespace not in a synced cache takes nothing; its arrival queues the
/// object again. A cache that cannot be trusted (forbidden, not synced)
/// takes everything: the reconcile then waits, saying why, and changes
/// nothing (never "not selected" on missing information).
pub(super) fn namespace_takes(
    primary: &crate::rules::Primary,
    namespace: Option<&str>,
    namespaces: Option<&Informer>,
) -> bool {
    if primary.namespace_selector.is_none() {
        return true;
    }
    let (Some(namespaces), Some(ns)) = (namespaces, namespace) else {
        return false;
    };
    if blindness(namespaces).is_some() {
        return true;
    }
    let found = namespaces.entry(&ObjKey {
        namespace: None,
        name: ns.to_string(),
    });
    let labels = found.as_ref().map(|n| n.labels());
    primary
        .namespace_refusal(ns, labels.as_ref().map(|l| l as &dyn LabelSource))
        .is_none()
}

/// The cached objects in `namespace` (or in every namespace, with `all`)
/// that `selector` matches, by name (then namespace).
pub(super) fn matching(
    informer: &Informer,
    namespace: Option<&str>,
    all: bool,
    selector: &LabelSelector,
) -> Vec<Value> {
    informer
        .entries()
        .into_iter()
        .filter(|o| (all || o.namespace() == namespace) && selector.matches(&o.labels()))
        .map(|o| o.to_value())
        .collect()
}
