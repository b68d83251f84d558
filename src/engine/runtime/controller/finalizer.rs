//! The finalizer and the teardown: holding a primary while kiln has
//! children to let go of, and deleting a removed rule's children.

use super::*;
use crate::gate::{self, Warrant};

impl RuleController {
    /// Deletes every child this rule made, for every primary (used when a
    /// rule is removed with pruning on). A child is what kiln created: the
    /// rule's label *and* a controller owner reference to a primary of the
    /// rule — a label alone anyone can write.
    pub async fn delete_all_children(&self) {
        let primaries: HashMap<String, Value> = self
            .wiring
            .primary
            .list()
            .iter()
            .filter_map(|p| Some((p.uid()?, placed::identity(&p.metadata))))
            .collect();
        let gvk = &self.rule.primary.gvk;
        // An orphaned child outlives its rule as it outlives its primary.
        let made_by_kiln = |child: &DynamicObject| {
            crate::ownership::read(&child.metadata).filter(|m| {
                m.rule == self.rule.name
                    && !m.orphaned()
                    && m.kind_is(&gvk.api_version(), &gvk.kind)
                    && primaries
                        .get(&m.uid)
                        .is_some_and(|p| placed::believed(&self.rule, m, &ObjKey::of(child), p))
            })
        };
        for (gvk, informer) in &self.wiring.children {
            for child in informer.list() {
                let Some(mark) = made_by_kiln(&child) else {
                    continue;
                };
                // Sharded: only the children of this replica's share.
                let primary_uid = mark.uid;
                // Only while this replica may write: its Lease held (a
                // standby, or a leader past its renew deadline, deletes
                // nothing) and, sharded, the primary's bucket (another
                // replica deletes the rest).
                if !self.shared.may_write() {
                    tracing::warn!(rule = %self.rule.name, "the lease is not held: not deleting the children of the removed rule");
                    return;
                }
                let Ok(permit) = self.fence_uid(&primary_uid) else {
                    continue;
                };
                let key = ObjKey::of(&child);
                let api = self.api(informer.kind(), key.namespace.as_deref());
                let dp = DeleteParams::background();
                let deleting = gate::delete(&api, &key.name, &dp, Warrant::Child);
                let Ok(deleted) = fenced(permit.as_ref(), deleting).await else {
                    continue;
                };
                match deleted {
                    Ok(_) => {
                        tracing::info!(rule = %self.rule.name, child = %key, kind = %gvk, "deleted: its rule was removed")
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(error) => {
                        tracing::warn!(rule = %self.rule.name, child = %key, %error, "could not delete the child of a removed rule")
                    }
                }
            }
        }
    }

    /// Keeps (`hold`) or lets go of this rule's ordered-deletion finalizer on
    /// the primary, with a field manager of the rule's own: other rules'
    /// and other controllers' finalizers are never touched.
    pub(super) async fn hold(&self, obj: &DynamicObject, hold: bool) -> Result<(), Failure> {
        let permit = self.fence(obj)?;
        let gvk = &self.rule.primary.gvk;
        let key = ObjKey::of(obj);
        let finalizers: Vec<String> = if hold {
            vec![deletion::finalizer(&self.rule)]
        } else {
            Vec::new()
        };
        let mut fields = serde_json::Map::new();
        fields.insert("metadata".into(), json!({ "finalizers": finalizers }));
        // With the primary's uid: a primary deleted meanwhile is never
        // created again by this apply (a Conflict, taken as gone).
        let uid = obj.metadata.uid.as_deref();
        let patch = decorate::apply_body(gvk, key.namespace.as_deref(), &key.name, uid, &fields);
        let manager = deletion::manager(&self.rule.name);
        let api = self.api(self.wiring.primary.kind(), key.namespace.as_deref());
        let pp = PatchParams::apply(&manager).force();
        match fenced(
            permit.as_ref(),
            gate::patch(
                &api,
                &key.name,
                &pp,
                &Patch::Apply(&patch),
                Warrant::Primary,
            ),
        )
        .await?
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.message.contains("uid mismatch") => {
                Ok(())
            }
            Err(e) => Err(Failure::of(&e, "updating the primary's finalizer", true)),
        }
    }

    /// Whether the primary carries this rule's finalizer.
    pub(super) fn holds(&self, obj: &DynamicObject) -> bool {
        deletion::holds(&self.rule, obj.finalizers())
    }

    /// Carries out one step of deleting a primary's children in reverse
    /// dependency order (deletion.rs decides it): the children nothing live
    /// waits for are deleted; once none is left, the finalizer goes and the
    /// primary with it.
    pub(super) async fn tear_down(&self, obj: &DynamicObject) -> Result<Next, Failure> {
        // A blind cache's children are not read: they cannot be trusted.
        let blind = !self.blind().is_empty();
        let live = if blind {
            Vec::new()
        } else {
            self.live_children(obj)
                .into_iter()
                .map(|l| l.child)
                .collect()
        };
        let step = deletion::step(&self.rule, blind, &live);
        match &step {
            deletion::Step::Wait(why) => {
                tracing::debug!(rule = %self.rule.name, object = %ObjKey::of(obj), why, "tearing down: waiting");
            }
            deletion::Step::Release => self.hold(obj, false).await?,
            deletion::Step::Prune(prunes) => {
                for prune in prunes {
                    self.prune(obj, prune).await?;
                }
            }
        }
        Ok(step.next(&self.rule))
    }

    /// Lets go of the finalizer on every primary holding it (the rule is
    /// removed: nobody would remove it otherwise).
    pub async fn release(&self) {
        for obj in self.wiring.primary.list() {
            if self.holds(&obj)
                && let Err(failure) = self.hold(&obj, false).await
            {
                tracing::warn!(rule = %self.rule.name, object = %ObjKey::of(&obj), error = %failure, "could not remove the finalizer of a removed rule");
            }
        }
    }
}
