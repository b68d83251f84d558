//! Observe: one complete snapshot of what a reconcile decides on (the
//! primary, its related objects, its live children, the caches that cannot
//! be trusted, who holds each name), read from the caches, then handed to
//! the decision.

use super::*;

impl RuleController {
    /// Observes and plans; returns the plan and the Secret values it saw
    /// (kept out of every message).
    pub(super) fn decide(
        &self,
        key: &ObjKey,
        obj: &DynamicObject,
        primary: Value,
        this: &JinjaValue,
    ) -> (Plan, Vec<String>, Result<Decorations, String>) {
        let mut observed = match self.observe(key, obj, primary, this) {
            Ok(observed) => observed,
            // A watch reference that does not render, or points where it
            // may not, fails for this object like any template.
            Err(refusal) => {
                let (reason, message) = match refusal {
                    Refusal::Template(m) => (reasons::TEMPLATE_ERROR, m),
                    Refusal::Namespace(m) => (reasons::NAMESPACE_NOT_ALLOWED, m),
                };
                let plan = Plan::refused(reason, message, obj.metadata.generation);
                return (plan, Vec::new(), Ok(Decorations::default()));
            }
        };
        let known = lock(&self.states)
            .get(key)
            .and_then(|s| s.rare.as_ref().and_then(|r| r.known().cloned()))
            .unwrap_or_default();
        let kinds = &self.shared.kinds;
        let scope_of = |gvk: &Gvk| kinds.namespaced(gvk);
        let plan = match plan::draft(&self.rule, this, &observed, &scope_of) {
            Ok(draft) => {
                let namespaces = &self.shared.options.namespaces;
                if let Some(why) = unwatched::unseen(&self.rule, draft.rendered(), namespaces) {
                    let generation = obj.metadata.generation;
                    return (
                        Plan::refused(reasons::NAMESPACE_NOT_ALLOWED, why, generation),
                        Vec::new(),
                        Ok(Decorations::default()),
                    );
                }
                observed.occupants = self.occupants(&draft, &observed, obj);
                draft.decide(&self.rule, &observed, &known)
            }
            Err(plan) => *plan,
        };
        let drawn = plan.apply.iter().flat_map(|c| &c.generated);
        let secrets = crate::redact::with_drawn(observed.secrets(&self.rule), drawn);
        let decorations = decorate::of_plan(
            &plan,
            &self.rule,
            &self.shared.options.field_manager,
            || crate::render::context(&self.rule, this, &observed.inputs),
            &observed.inputs,
        );
        (plan, secrets, decorations)
    }

    /// Who holds, in the cache, each name the draft's children take that
    /// is not this primary's live child (part of the snapshot the
    /// decision reads).
    pub(super) fn occupants(
        &self,
        draft: &plan::Draft,
        observed: &Observed,
        obj: &DynamicObject,
    ) -> Occupants {
        let uid = obj.uid().unwrap_or_default();
        draft
            .names(&self.rule, observed)
            .filter_map(|(gvk, key)| {
                let found = self.wiring.children.get(gvk)?.get(&key)?;
                let who = stranger(&found, &self.rule.name, &uid)?;
                Some(((gvk.clone(), key), who))
            })
            .collect()
    }

    /// Reads what the plan needs from the caches: related objects (recording
    /// the references in the reverse index) and this rule's live children.
    pub(super) fn observe(
        &self,
        key: &ObjKey,
        obj: &DynamicObject,
        primary: Value,
        this: &JinjaValue,
    ) -> Result<Observed, Refusal> {
        let mut observed = Observed::default();
        observed.inputs.primary = primary;
        // One instant for all of this reconcile's templates (`now()`).
        observed.inputs.now = Some(crate::template::time::current());
        observed.blind = self.blind();
        if !observed.blind.is_empty() {
            return Ok(observed);
        }
        self.gather_related(key, this, &mut observed)?;
        let (children, mut by_id) = self.live_children(obj);
        observed.children = children;
        for child in &self.rule.children {
            let Some(mut live) = by_id.remove(child.id.as_str()) else {
                continue;
            };
            let value = if child.for_each.is_some() {
                live.sort_by(|a, b| {
                    a["metadata"]["name"]
                        .as_str()
                        .cmp(&b["metadata"]["name"].as_str())
                });
                Value::Array(live)
            } else {
                live.swap_remove(0)
            };
            observed.inputs.observed.insert(child.id.clone(), value);
        }
        Ok(observed)
    }

    /// The rule's live children of `obj`, and the objects of those whose id
    /// and kind the rule has now, by id.
    pub(super) fn live_children(
        &self,
        obj: &DynamicObject,
    ) -> (Vec<LiveChild>, BTreeMap<&str, Vec<Value>>) {
        let uid = obj.uid().unwrap_or_default();
        let mut children = Vec::new();
        let mut by_id: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
        for (gvk, informer) in &self.wiring.children {
            for child in informer.owned_by(&uid) {
                // The index finds every object naming the uid; the mark
                // says whether it is this rule's child of this primary.
                let Some(mark) = self.child_of(&child, obj) else {
                    continue;
                };
                let id = mark.child.clone();
                // Every child of the rule is live (a removed id is pruned);
                // templates see those of the ids and kinds the rule has now.
                if let Some(spec) = self
                    .rule
                    .children
                    .iter()
                    .find(|c| c.id == id && &c.gvk == gvk)
                {
                    by_id
                        .entry(spec.id.as_str())
                        .or_default()
                        .push(to_json(&child));
                }
                children.push(LiveChild {
                    id,
                    gvk: gvk.clone(),
                    key: ObjKey::of(&child),
                    uid: child.uid(),
                    deleting: child.metadata.deletion_timestamp.is_some(),
                    orphan: mark.orphaned(),
                });
            }
        }
        (children, by_id)
    }

    /// The mark of `child` when it is this rule's child of `primary`:
    /// marked so, and where kiln put it (`placed::believed`).
    pub(super) fn child_of(
        &self,
        child: &DynamicObject,
        primary: &DynamicObject,
    ) -> Option<crate::ownership::Mark> {
        let uid = primary.metadata.uid.as_deref().unwrap_or_default();
        let mark =
            crate::ownership::read(&child.metadata).filter(|m| m.of(&self.rule.name, uid))?;
        let identity = placed::identity(&primary.metadata);
        placed::believed(&self.rule, &mark, &ObjKey::of(child), &identity).then_some(mark)
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

    /// Renders each watch's reference, records it in the reverse index and
    /// reads the related objects from the cache, noting required ones missing.
    pub(super) fn gather_related(
        &self,
        key: &ObjKey,
        this: &JinjaValue,
        observed: &mut Observed,
    ) -> Result<(), Refusal> {
        let ctx = render::context(&self.rule, this, &observed.inputs);
        let set = &self.rule.templates;
        let mut budget = Budget::default();
        let mut refs = Vec::new();
        let mut selectors = Vec::new();
        for watch in &self.rule.watches {
            let Some(informer) = self.wiring.related.get(&watch.name) else {
                continue;
            };
            let mut text = |piece: &crate::template::Piece| {
                piece
                    .render_string(set, &ctx, &mut budget)
                    .map_err(|e| Refusal::Template(e.to_string()))
            };
            let target = related::target(watch, informer.kind().namespaced, key, &mut text)?;
            let found = match &target {
                Target::Named(key) => {
                    refs.push((watch.name.clone(), key.clone()));
                    Found::Named(informer.get(key).map(|o| to_json(&o)))
                }
                Target::Selected {
                    namespace,
                    all_namespaces,
                    selector,
                } => {
                    selectors.push(SelectorRef {
                        watch: watch.name.clone(),
                        namespace: namespace.clone(),
                        all_namespaces: *all_namespaces,
                        selector: selector.clone(),
                    });
                    Found::Selected(matching(
                        informer,
                        namespace.as_deref(),
                        *all_namespaces,
                        selector,
                    ))
                }
            };
            let (value, missing) = related::seen(watch, &target, found);
            observed.missing.extend(missing);
            if let Some(value) = value {
                observed.inputs.related.insert(watch.name.clone(), value);
            }
        }
        lock(&self.reverse).set(key, refs, selectors);
        Ok(())
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
/// child of this primary. The live children are read before the render,
/// the names' holders after it: a child whose create came back through the
/// watch in between is no stranger (a false "already exists" on kiln's own
/// RoleBinding, seen at the demo's start).
pub(super) fn stranger(found: &DynamicObject, rule: &str, primary_uid: &str) -> Option<String> {
    crate::ownership::holder(&found.metadata, rule, primary_uid)
}

/// The rule's status field names and condition types.
pub(super) fn status_names(rule: &Rule) -> (Vec<&str>, Vec<&str>) {
    (
        rule.status_fields.iter().map(|(n, _)| n.as_str()).collect(),
        rule.conditions.iter().map(|c| c.type_.as_str()).collect(),
    )
}
