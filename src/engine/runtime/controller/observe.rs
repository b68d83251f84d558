//! Observe: the engine's [`Source`], this rule's caches. The reconcile
//! reads its snapshot through it and the decision's [`observe::read`]
//! decides, as `kiln explain` does from the API server and `kiln render`
//! from files.

use futures::FutureExt;
use std::convert::Infallible;

use super::*;
use crate::engine::decision::observe::{self, Live, Source};
use crate::render::Rendered;
use crate::rules::Watch;

/// This rule's caches, read for one primary.
pub(super) struct Caches<'a> {
    pub(super) controller: &'a RuleController,
    pub(super) primary: &'a DynamicObject,
    /// What the rule's hook answered, asked before the read
    /// (`RuleController::call_hook`): the caches answer at once, a hook
    /// does not.
    pub(super) hook: Option<crate::hook::Called>,
    /// The external sources' answers, asked before the reconcile.
    pub(super) answers: Vec<crate::external::Answer>,
}

impl Source for Caches<'_> {
    type Error = Infallible;

    fn blind(&self) -> Vec<Blind> {
        self.controller.blind()
    }

    fn namespaced(&self, gvk: &Gvk) -> Option<bool> {
        self.controller.shared.kinds.namespaced(gvk)
    }

    async fn related(&self, watch: &Watch, target: &Target) -> Result<Option<Found>, Infallible> {
        let Some(informer) = self.controller.wiring.related.get(&watch.name) else {
            return Ok(None);
        };
        Ok(Some(match target {
            Target::Named(key) => Found::Named(informer.get_value(key)),
            Target::Selected {
                namespace,
                all_namespaces,
                selector,
            } => Found::Selected(matching(
                informer,
                namespace.as_deref(),
                *all_namespaces,
                selector,
            )),
        }))
    }

    async fn children(&self, _rule: &Rule, _primary: &Value) -> Result<Vec<Live>, Infallible> {
        Ok(self.controller.live_children(self.primary))
    }

    async fn holder(
        &self,
        rule: &Rule,
        gvk: &Gvk,
        at: &ObjKey,
        uid: &str,
    ) -> Result<Option<String>, Infallible> {
        // The live children are read before the render, the names' holders
        // after it: a child whose create came back through the watch in
        // between is no stranger (a false "already exists" on kiln's own
        // RoleBinding, seen at the demo's start).
        let found = self
            .controller
            .wiring
            .children
            .get(gvk)
            .and_then(|informer| informer.get(at));
        Ok(found.and_then(|f| stranger(&f, &rule.name, uid)))
    }

    fn answers(&self, _rule: &Rule, _primary: &JinjaValue) -> Vec<crate::external::Answer> {
        self.answers.clone()
    }

    fn unseen(&self, rule: &Rule, rendered: &Rendered) -> Option<String> {
        unwatched::unseen(rule, rendered, &self.controller.shared.options.namespaces)
    }

    async fn hook(
        &self,
        _rule: &Rule,
        _endpoint: &crate::rules::hook::Endpoint,
        _request: &Value,
    ) -> Result<crate::hook::Called, Infallible> {
        // Not asked before the read (what it saw then did not call for
        // it): the change that completed the snapshot queues the primary
        // again, and that reconcile asks.
        Ok(self.hook.clone().unwrap_or(crate::hook::Called::NotCalled))
    }
}

/// What a reconcile decided from the caches.
pub(super) struct Decided {
    /// The plan.
    pub(super) plan: Plan,
    /// The Secret values it saw, kept out of every message.
    pub(super) secrets: Vec<String>,
    /// The decorations, or why they cannot render.
    pub(super) decorations: Result<Decorations, String>,
}

impl RuleController {
    /// Observes and plans from the caches.
    pub(super) fn decide(
        &self,
        key: &ObjKey,
        obj: &DynamicObject,
        primary: Value,
        this: &JinjaValue,
        hook: Option<crate::hook::Called>,
        answers: Vec<crate::external::Answer>,
    ) -> Result<Decided, Failure> {
        let known = lock(&self.states)
            .get(key)
            .and_then(|s| s.rare.as_ref().and_then(|r| r.known().cloned()))
            .unwrap_or_default();
        let inputs = render::Inputs {
            primary,
            // One instant for all of this reconcile's templates (`now()`).
            now: Some(crate::template::time::current()),
            unserved: self.wiring.unserved.clone(),
            ..render::Inputs::default()
        };
        let source = Caches {
            controller: self,
            primary: obj,
            hook,
            answers,
        };
        let read = observe::read(&source, &self.rule, this, inputs, &known, false);
        let Some(Ok(reading)) = read.now_or_never() else {
            let why = "a read of the caches did not complete at once";
            return Err(Failure::new(Category::Transient, why));
        };
        let observe::Reading { observed, plan, .. } = reading;
        if observed.blind.is_empty() {
            self.remember_targets(key, &observed.targets);
        }
        let drawn = plan.apply.iter().flat_map(|c| &c.generated);
        let secrets = crate::redact::with_drawn(observed.secrets(&self.rule), drawn);
        let decorations = decorate::of_plan(
            &plan,
            &self.rule,
            &self.shared.options.field_manager,
            || crate::render::context(&self.rule, this, &observed.inputs),
            &observed.inputs,
        );
        Ok(Decided {
            plan,
            secrets,
            decorations,
        })
    }

    /// The rule's live children of `obj` in the caches: the objects naming
    /// its uid that [`observe::child_mark`] takes as this rule's.
    pub(super) fn live_children(&self, obj: &DynamicObject) -> Vec<Live> {
        let meta = &obj.metadata;
        let uid = meta.uid.as_deref().unwrap_or_default();
        let identity = placed::identity(meta);
        let mut live = Vec::new();
        for (gvk, informer) in &self.wiring.children {
            // The index finds every object naming the uid; the mark says
            // whether it is this rule's child of this primary.
            for entry in informer.owned_entries(uid) {
                let key = entry.key();
                let object = entry.to_value();
                let meta = &object["metadata"];
                let Some(mark) = observe::child_mark(&self.rule, uid, &identity, meta, &key) else {
                    continue;
                };
                let child = LiveChild {
                    id: mark.child.clone(),
                    gvk: gvk.clone(),
                    key,
                    uid: meta["uid"].as_str().map(str::to_string),
                    deleting: !meta["deletionTimestamp"].is_null(),
                    orphan: mark.orphaned(),
                };
                live.push(Live { child, object });
            }
        }
        live
    }

    /// Records in the reverse index what the primary's watches read, so a
    /// change there queues it.
    fn remember_targets(&self, key: &ObjKey, targets: &[(String, Target)]) {
        let mut refs = Vec::new();
        let mut selectors = Vec::new();
        for (watch, target) in targets {
            match target {
                Target::Named(at) => refs.push((watch.clone(), at.clone())),
                Target::Selected {
                    namespace,
                    all_namespaces,
                    selector,
                } => selectors.push(SelectorRef {
                    watch: watch.clone(),
                    namespace: namespace.clone(),
                    all_namespaces: *all_namespaces,
                    selector: selector.clone(),
                }),
            }
        }
        lock(&self.reverse).set(key, refs, selectors);
    }

    /// The caches of related and child kinds (and of Namespaces, when the
    /// rule selects primaries by theirs) that cannot be trusted now.
    pub(super) fn blind(&self) -> Vec<Blind> {
        let mut blind: Vec<Blind> = Vec::new();
        let informers = self
            .wiring
            .related
            .values()
            .chain(self.wiring.children.values())
            .chain(&self.wiring.namespaces);
        for b in informers.filter_map(|i| blindness(i)) {
            if !blind.contains(&b) {
                blind.push(b);
            }
        }
        blind
    }

    /// Why the Namespace cache `spec.for.namespaceSelector` reads cannot be
    /// trusted now, if it cannot.
    pub(super) fn namespaces_blind(&self) -> Option<Blind> {
        self.wiring.namespaces.as_deref().and_then(blindness)
    }
}

/// Why a cache cannot be trusted now (an object it lacks may exist), if it cannot.
pub(super) fn blindness(informer: &Informer) -> Option<Blind> {
    let kind = informer.kind().gvk.kind.clone();
    if informer.is_forbidden() {
        Some(Blind::Forbidden(kind))
    } else if !informer.is_synced() {
        Some(Blind::Unsynced(kind))
    } else {
        None
    }
}

/// Who holds a child's name in the cache, unless it is this rule's own
/// child of this primary.
pub(super) fn stranger(found: &DynamicObject, rule: &str, primary_uid: &str) -> Option<String> {
    crate::ownership::holder(&found.metadata, rule, primary_uid)
}

/// The rule's status field names and condition types.
pub(super) fn status_names<'a>(
    rule: &'a Rule,
    owned: &'a [String],
    others: &[&str],
) -> (Vec<&'a str>, Vec<&'a str>) {
    let mut fields: Vec<&str> = rule.status_fields.iter().map(|(n, _)| n.as_str()).collect();
    // A sync hook's fields are what it answers: those kiln wrote before
    // (and no other rule names) are its, so a hook that fails leaves them
    // as they are instead of taking them away.
    if rule.hook.as_ref().is_some_and(|h| h.sync.is_some()) {
        let engine = ["observedGeneration", "conditions"];
        fields.extend(
            owned
                .iter()
                .map(String::as_str)
                .filter(|k| !engine.contains(k) && !others.contains(k)),
        );
    }
    (
        fields,
        rule.conditions.iter().map(|c| c.type_.as_str()).collect(),
    )
}
