//! The writes themselves: each request kiln sends for a primary (apply,
//! re-own, prune, status, Events), fenced by the lease and the shard.

use super::*;
use crate::gate::{self, Warrant};

impl RuleController {
    /// Refuses every write once this replica may no longer make one (its
    /// lease is not known to be held right now; sharded: or the primary is
    /// not in its share any more). Hold the permit until the write returns:
    /// the share is not handed over while a write is in flight.
    pub(super) fn fence(
        &self,
        primary: &DynamicObject,
    ) -> Result<Option<crate::shard::Permit>, Failure> {
        self.fence_uid(primary.metadata.uid.as_deref().unwrap_or_default())
    }

    /// [`fence`](Self::fence) for the primary with this uid.
    pub(super) fn fence_uid(
        &self,
        primary_uid: &str,
    ) -> Result<Option<crate::shard::Permit>, Failure> {
        if !self.shared.may_write() {
            return Err(Failure::new(Category::LeaseLost, "the lease is not held"));
        }
        let Some(scope) = &self.shared.shard else {
            return Ok(None);
        };
        scope.shard().permit(primary_uid).map(Some).ok_or_else(|| {
            Failure::new(
                Category::LeaseLost,
                "this replica's shard Lease or this primary's bucket is not held",
            )
        })
    }

    /// Gives a created-once child the ownership its `deletionPolicy` says
    /// (`reown.rs`): read again, then a merge patch of its owner
    /// references and kiln's annotations only, conditioned on the
    /// `resourceVersion` read (a concurrent change is a conflict, retried).
    pub(super) async fn reown(&self, obj: &DynamicObject, reown: &Reown) -> Result<(), Failure> {
        let Some(informer) = self.wiring.children.get(&reown.gvk) else {
            return Ok(());
        };
        let permit = self.fence(obj)?;
        let api = self.api(informer.kind(), reown.key.namespace.as_deref());
        let what = format!("{} {} {}", reown.to.describe(), reown.gvk.kind, reown.key);
        let live = match fenced(permit.as_ref(), api.get(&reown.key.name)).await? {
            Ok(live) => to_json(&live),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(Failure::of(&e, &what, false)),
        };
        // Another object by that name now: it is not this child.
        if live["metadata"]["uid"].as_str() != reown.uid.as_deref() {
            return Ok(());
        }
        let Some(patch) = reown::patch(&live, &reown.to) else {
            return Ok(());
        };
        let pp = PatchParams {
            field_manager: Some(self.shared.options.field_manager.clone()),
            ..PatchParams::default()
        };
        self.shared.metrics.wrote(&self.rule.name, "patch");
        let patch = Patch::Merge(&patch);
        let patching = gate::patch(&api, &reown.key.name, &pp, &patch, Warrant::Child);
        match fenced(permit.as_ref(), patching).await? {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(Failure::of(&e, &what, false)),
        }
    }

    /// Sends one of the plan's merge patches (touch.rs) to the object as
    /// read now, if it still needs it.
    pub(super) async fn touch(&self, obj: &DynamicObject, touch: &Touch) -> Result<(), Failure> {
        let (informer, namespace, name, uid) = match touch {
            Touch::Remember { .. } => (
                Some(&self.wiring.primary),
                obj.namespace(),
                obj.name_any(),
                obj.uid(),
            ),
            Touch::Strip { gvk, key, uid, .. } => (
                self.wiring.children.get(gvk),
                key.namespace.clone(),
                key.name.clone(),
                uid.clone(),
            ),
        };
        let Some(informer) = informer else {
            return Ok(());
        };
        let permit = self.fence(obj)?;
        let api = self.api(informer.kind(), namespace.as_deref());
        let what = touch.describe();
        let live = match fenced(permit.as_ref(), api.get(&name)).await? {
            Ok(live) => to_json(&live),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(Failure::of(&e, &what, false)),
        };
        let Some(patch) = touch
            .patch(&live)
            .filter(|_| live["metadata"]["uid"].as_str() == uid.as_deref())
        else {
            return Ok(());
        };
        let pp = PatchParams {
            field_manager: Some(self.shared.options.field_manager.clone()),
            ..PatchParams::default()
        };
        self.shared.metrics.wrote(&self.rule.name, "patch");
        // Remembering is written on the primary, stripping on a child kiln
        // made (the touch checks the uid read just before).
        let warrant = match touch {
            Touch::Remember { .. } => Warrant::Primary,
            Touch::Strip { .. } => Warrant::Child,
        };
        match fenced(
            permit.as_ref(),
            gate::patch(&api, &name, &pp, &Patch::Merge(&patch), warrant),
        )
        .await?
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(Failure::of(&e, &what, false)),
        }
    }

    /// Server-side applies one child, and remembers how the server stored it.
    pub(super) async fn apply(
        &self,
        obj: &DynamicObject,
        child: &DesiredChild,
    ) -> Result<(), Failure> {
        let Some(informer) = self.wiring.children.get(&child.gvk) else {
            return Ok(());
        };
        let permit = self.fence(obj)?;
        let pp = PatchParams::apply(&self.shared.options.field_manager);
        let pp = if self.rule.force_conflicts {
            pp.force()
        } else {
            pp
        };
        let ckey = plan::key_of(child);
        let api = self.api(informer.kind(), ckey.namespace.as_deref());
        // A sharded cache holds only kiln's children of this replica's
        // share: an object it left out under this name (another replica's,
        // or one kiln's labels were copied onto) is looked up before
        // anything is written over it.
        let unseen = self.shared.shard.is_some()
            && informer.entry(&ckey).is_none()
            && informer.may_hold_unseen(&ckey);
        if unseen {
            self.shared.looking_up();
        }
        if !child.generated.is_empty() || unseen {
            fenced(permit.as_ref(), self.absent(&api, child, &ckey)).await??;
        }
        self.shared.metrics.wrote(&self.rule.name, "apply");
        let patch = Patch::Apply(&child.object);
        let warrant = warrant(&self.rule, child);
        let applying = gate::patch(&api, &ckey.name, &pp, &patch, warrant);
        let applied = fenced(permit.as_ref(), applying).await?.map_err(|e| {
            let what = format!("applying {} {ckey}", child.gvk.kind);
            Failure::of(&e, &what, self.rule.force_conflicts)
        });
        let result = applied
            .as_ref()
            .map_or_else(|f| f.category.label(), |_| "success");
        let labels = metrics::labels2(("rule", &self.rule.name), ("result", result));
        self.shared.metrics.apply_total.get_or_create(&labels).inc();
        let mut stored = to_json(&applied?);
        // Compared later with the cached child: cut as the cache cuts it, so
        // a leaf stored whole (a list the server lengthened) is compared
        // with what the cache holds of it.
        if let Some(informer) = self.wiring.children.get(&child.gvk) {
            informer.project(&mut stored);
        }
        let normalized = diff::normalized(&child.object, &stored);
        let mut states = lock(&self.states);
        let state = states.entry(ObjKey::of(obj)).or_default();
        let key = (child.gvk.clone(), ckey);
        match normalized {
            Some(n) => {
                state.rare().rarer().known.insert(key, n);
            }
            None => {
                if let Some(rarer) = state.rare.as_mut().and_then(|r| r.rarer.as_mut()) {
                    rarer.known.remove(&key);
                }
            }
        }
        Ok(())
    }

    /// Checks with the API server, not the cache, that a child holding
    /// freshly drawn values does not exist: a cache that has not seen the
    /// child yet (its create is still on its way back through the watch),
    /// or an object an `adopt` child would take over, must not make kiln
    /// overwrite the value it keeps.
    pub(super) async fn absent(
        &self,
        api: &Api<DynamicObject>,
        child: &DesiredChild,
        ckey: &ObjKey,
    ) -> Result<(), Failure> {
        let what = format!("reading {} {ckey}", child.gvk.kind);
        let found = api
            .get_metadata_opt(&ckey.name)
            .await
            .map_err(|e| Failure::of(&e, &what, self.rule.force_conflicts))?;
        match found {
            None => Ok(()),
            Some(_) => Err(Failure::new(
                Category::Transient,
                format!(
                    "{} {ckey} exists, but not as this primary's child in kiln's cache (not seen yet, or not kiln's): a value drawn now would replace the one it keeps, so nothing is written; retrying",
                    child.gvk.kind
                ),
            )),
        }
    }

    /// Deletes a child the rule no longer renders (that very object: its uid).
    pub(super) async fn prune(&self, obj: &DynamicObject, prune: &Prune) -> Result<(), Failure> {
        let Some(informer) = self.wiring.children.get(&prune.gvk) else {
            return Ok(());
        };
        let permit = self.fence(obj)?;
        let api = self.api(informer.kind(), prune.key.namespace.as_deref());
        let dp = DeleteParams {
            preconditions: prune.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        self.shared.metrics.wrote(&self.rule.name, "delete");
        let (kind, ckey) = (&prune.gvk.kind, &prune.key);
        let deleting = gate::delete(&api, &ckey.name, &dp, Warrant::Child);
        let deleted = fenced(permit.as_ref(), deleting).await?;
        // The Event is no write for the primary's bucket: its release does
        // not wait for it.
        drop(permit);
        match deleted {
            Ok(_) => {
                tracing::info!(rule = %self.rule.name, child = %ckey, kind = %prune.gvk, "pruned");
                let message = format!("deleted {kind} {ckey}: no longer rendered");
                self.publish(obj, EventType::Normal, "Pruned", &message)
                    .await;
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(Failure::of(&e, &format!("pruning {kind} {ckey}"), true)),
        }
    }

    /// Writes the primary's status, composed from every rule selecting it,
    /// when it differs from the live one (and the kind has one kiln writes).
    pub(super) async fn write_status(
        &self,
        obj: &DynamicObject,
        part: &Part,
    ) -> Result<(), Failure> {
        let kind = self.wiring.primary.kind();
        if self.rule.read_only {
            return Ok(());
        }
        if self.wiring.writes_status != StatusWrites::Yes {
            let uid = obj.metadata.uid.as_deref().unwrap_or_default();
            if self.wiring.writes_status == StatusWrites::NoSubresource
                && self.shared.no_status.first(&self.rule.name, uid)
            {
                let message = crate::engine::runtime::no_status::message(&kind.gvk.kind);
                let reason = crate::engine::runtime::no_status::REASON;
                self.publish(obj, EventType::Warning, reason, &message)
                    .await;
            }
            return Ok(());
        }
        let gvk = &self.rule.primary.gvk;
        let namespaces = self
            .shared
            .informers
            .running(&crate::rules::namespace_gvk());
        let rules: Vec<Arc<Rule>> = self
            .shared
            .board
            .selecting(gvk, obj)
            .into_iter()
            .filter(|r| !r.read_only)
            .filter(|r| {
                namespace_takes(
                    &r.primary,
                    obj.namespace().as_deref(),
                    namespaces.as_deref(),
                )
            })
            .collect();
        let owned = owned_status::owned(&obj.metadata, &self.shared.options.field_manager);
        if rules.len() <= 1 {
            let (fields, conditions) = status_names(&self.rule, &owned, &[]);
            let me = Contributor {
                rule: &self.rule.name,
                fields: &fields,
                conditions: &conditions,
                part: Some(part),
            };
            return self.patch_status(obj, &[me]).await;
        }
        // Rules sharing an object write its status one at a time, each
        // composing every rule's latest part.
        let key = ObjKey::of(obj);
        let writer = self.shared.board.writer(gvk, &key);
        let _turn = writer.lock().await;
        let parts = self.shared.board.put(gvk, &key, &self.rule.name, part);
        let declared: Vec<&str> = rules
            .iter()
            .flat_map(|r| r.status_fields.iter().map(|(n, _)| n.as_str()))
            .collect();
        let names: Vec<_> = rules
            .iter()
            .map(|r| status_names(r, &owned, &declared))
            .collect();
        let contributors: Vec<Contributor<'_>> = rules
            .iter()
            .zip(&names)
            .map(|(r, (fields, conditions))| Contributor {
                rule: &r.name,
                fields,
                conditions,
                part: parts.get(&r.name),
            })
            .collect();
        self.patch_status(obj, &contributors).await
    }

    /// Applies the status composed from `contributors` unless the object shows it already.
    pub(super) async fn patch_status(
        &self,
        obj: &DynamicObject,
        contributors: &[Contributor<'_>],
    ) -> Result<(), Failure> {
        let live = obj.data.get("status").cloned().unwrap_or(Value::Null);
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let owned = owned_status::owned(&obj.metadata, &self.shared.options.field_manager);
        let list = placing::stored(self.wiring.status.conditions_list(), &owned);
        let composed = self.wiring.status.writable(status::compose(
            contributors,
            &live,
            &now,
            obj.metadata.generation,
        ));
        let theirs = placing::theirs(&live, &owned, list);
        let desired = placing::place(composed, &live, list, &theirs);
        self.shared
            .ready
            .record(&self.rule.name, &ObjKey::of(obj), &desired);
        if status::converged(&live, &desired, &owned) {
            return Ok(());
        }
        let permit = self.fence(obj)?;
        let key = ObjKey::of(obj);
        let patch = serde_json::json!({
            "apiVersion": self.rule.primary.gvk.api_version(),
            "kind": self.rule.primary.gvk.kind,
            "metadata": { "name": key.name },
            "status": desired,
        });
        let api = self.api(self.wiring.primary.kind(), key.namespace.as_deref());
        self.shared.metrics.wrote(&self.rule.name, "status");
        let pp = PatchParams::apply(&self.shared.options.field_manager).force();
        let patch = Patch::Apply(&patch);
        let writing = gate::patch_status(&api, &key.name, &pp, &patch, Warrant::Primary);
        match fenced(permit.as_ref(), writing).await? {
            Ok(written) => {
                self.wrote_status(&key, written.metadata.resource_version.as_deref());
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()), // deleted meanwhile
            Err(e) => Err(Failure::of(&e, "writing status", true).in_status()),
        }
    }

    /// kiln wrote `key`'s status, now at `version`. A reconcile that runs
    /// before the cache shows that write compares with the status before it,
    /// and can take a status it must write (`Ready` back to True once a
    /// recreated child shows up) for one already there; and the write's echo
    /// changes only the status, which is no news to `on_primary`. So the
    /// primary is reconciled once more against what it shows: now, when the
    /// cache holds the write already (its echo was, or will be, no news);
    /// else on the echo, by forgetting the fingerprint. Under the states
    /// lock, which `on_primary` takes after the cache stored the change, so
    /// the echo cannot slip between the two.
    fn wrote_status(&self, key: &ObjKey, version: Option<&str>) {
        let mut states = lock(&self.states);
        let shown = self.wiring.primary.entry(key);
        if let Some(version) = version
            && shown.is_some_and(|o| o.is_version(version))
        {
            drop(states);
            self.enqueue(key.clone());
        } else if let Some(state) = states.get_mut(key) {
            state.fingerprint = None;
        }
    }

    pub(super) fn api(&self, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) if kind.namespaced => {
                Api::namespaced_with(self.shared.client.clone(), ns, &kind.ar)
            }
            _ => Api::all_with(self.shared.client.clone(), &kind.ar),
        }
    }

    /// Publishes an Event once per distinct reason and message.
    pub(super) async fn report(
        &self,
        obj: &DynamicObject,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        let said = Some(format!("{reason}: {message}").into_boxed_str());
        {
            let mut states = lock(&self.states);
            let state = states.entry(ObjKey::of(obj)).or_default();
            if state.reported == said {
                return;
            }
            state.reported = said;
        }
        self.publish(obj, kind, reason, message).await;
    }

    pub(super) async fn publish(
        &self,
        obj: &DynamicObject,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        if !self
            .shared
            .owns(obj.metadata.uid.as_deref().unwrap_or_default())
        {
            return;
        }
        let reference = obj.object_ref(&self.wiring.primary.kind().ar);
        let event = KubeEvent {
            type_: kind,
            reason: reason.to_string(),
            note: Some(event_note(message)),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        let (recorder, client) = (&self.shared.recorder, &self.shared.client);
        if let Err(error) =
            crate::engine::runtime::events::publish(recorder, client, &event, &reference).await
        {
            tracing::warn!(rule = %self.rule.name, %error, "could not publish an Event");
        }
    }
}

fn to_json(obj: &DynamicObject) -> Value {
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

/// An Event's note: the API takes at most 1024 bytes, so longer messages
/// are cut at a character boundary.
pub(super) fn event_note(message: &str) -> String {
    const MAX: usize = 1024;
    if message.len() <= MAX {
        return message.to_string();
    }
    let mut end = MAX - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// A hash of everything but status and bookkeeping metadata.
pub(super) fn fingerprint(obj: &DynamicObject) -> u64 {
    let mut value = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.remove("status");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
            meta.remove("managedFields");
        }
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

/// Why kiln may apply `child`: the rule author lets it adopt what holds
/// the name (bounded by `adoptNames` or the literal name, checked by the
/// plan), or kiln made it, or makes it now under a name no one holds.
fn warrant(rule: &Rule, child: &DesiredChild) -> Warrant {
    let adopts = rule.children.iter().any(|c| c.id == child.id && c.adopt);
    if adopts {
        Warrant::Named
    } else {
        Warrant::Child
    }
}
