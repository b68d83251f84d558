//! The decision of one reconcile, as a pure function: a rule, one primary,
//! its related objects and its children as the cache holds them → which
//! children to apply, which to delete, what the status says and when to look
//! again. The controller performs the plan (`controller.rs`); nothing here
//! talks to the API server, so every decision is unit-tested below as a table
//! of scenarios.

use std::collections::HashMap;

use minijinja::Value as JinjaValue;

use super::adoption;
use super::diff::{Normalized, converged};
pub(crate) use super::live::{LiveChild, key_of};
pub(crate) use super::next::Next;
use super::reown::Reown;
use super::status::{Outcome, Part, reasons};
use crate::engine::key::ObjKey;
use crate::render::{self, DesiredChild, Inputs, ScopeOf};
use crate::rules::DeletionPolicy::Orphan;
use crate::rules::UpdatePolicy::CreateOnce;
use crate::rules::{Gvk, Rule};

/// A cache the reconcile reads from that cannot be trusted yet: an object
/// it lacks may exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blind {
    /// The API server refuses kiln the list and watch of this kind (RBAC).
    Forbidden(String),
    /// The first list of this kind has not completed.
    Unsynced(String),
}

/// Everything a reconcile of one primary reads.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The primary, related objects found and live children by id.
    pub inputs: Inputs,
    /// Required related objects not found, described for humans.
    pub missing: Vec<String>,
    /// The rule's live children of this primary.
    pub children: Vec<LiveChild>,
    /// Caches of related or child kinds that cannot be trusted.
    pub blind: Vec<Blind>,
    /// Who holds a name a rendered child would take, when an object kiln
    /// did not make for this primary is there (read for the names
    /// [`Draft::names`] gives, before [`Draft::decide`]).
    pub occupants: Occupants,
    /// Where each watch looked (watch name, target): what the primary's
    /// reconcile depends on besides its children.
    pub targets: Vec<(String, super::related::Target)>,
    /// What the rule's sync (or, while the primary goes, finalize) hook
    /// answered (`None`: not called).
    pub hook: Option<crate::hook::Called>,
    /// Each external source's answer, in the rule's order.
    pub external: Vec<crate::external::Answer>,
}

impl Observed {
    /// The primary's namespace (`None`: cluster-scoped).
    pub fn primary_namespace(&self) -> Option<&str> {
        self.inputs.primary["metadata"]["namespace"].as_str()
    }

    /// The Secret values this reconcile can see (related objects and live
    /// children of kind Secret), to keep out of every message; but for
    /// those equal to a string the reader of its messages sees anyway: the
    /// primary's own fields, and the names of the objects the reconcile
    /// reads in the primary's namespace (never of objects elsewhere, whose
    /// names that reader may not see).
    pub fn secrets(&self, rule: &Rule) -> Vec<String> {
        let inputs = &self.inputs;
        let mut public = crate::redact::strings(&inputs.primary);
        let here = self.primary_namespace();
        for given in inputs.related.values().chain(inputs.observed.values()) {
            let objects = match given {
                serde_json::Value::Array(items) => items.iter().collect(),
                one => vec![one],
            };
            let beside = |o: &&serde_json::Value| {
                here.is_some()
                    && o["metadata"]["namespace"]
                        .as_str()
                        .is_none_or(|n| Some(n) == here)
            };
            public.extend(
                objects
                    .into_iter()
                    .filter(beside)
                    .filter_map(|o| o["metadata"]["name"].as_str()),
            );
        }
        let values = crate::redact::secret_values(
            rule.watches
                .iter()
                .filter(|w| is_secret(&w.gvk))
                .filter_map(|w| inputs.related.get(&w.name))
                .chain(
                    rule.children
                        .iter()
                        .filter(|c| is_secret(&c.gvk))
                        .filter_map(|c| inputs.observed.get(&c.id)),
                ),
        );
        crate::redact::except_public(values, public)
    }
}

/// Whether a kind is the core Secret.
pub(crate) fn is_secret(gvk: &Gvk) -> bool {
    gvk.group.is_empty() && gvk.kind == "Secret"
}

/// What the server is known to store differently, per child.
pub type Known = HashMap<(Gvk, ObjKey), Normalized>;

/// Who holds each name a child would take, when an object kiln did not
/// create for this primary is there: "not created by kiln", "controlled
/// by …". A name not in it is free (or this primary's own child).
pub type Occupants = HashMap<(Gvk, ObjKey), String>;

/// A child to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prune {
    /// Its kind.
    pub gvk: Gvk,
    /// Its namespace and name.
    pub key: ObjKey,
    /// Its uid: the delete applies to this object only.
    pub uid: Option<String>,
}

/// What one reconcile does.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Children whose live object lacks something the rule renders, in rule order.
    pub apply: Vec<DesiredChild>,
    /// Created-once children whose ownership no longer matches their
    /// `deletionPolicy` (only that is patched).
    pub reown: Vec<Reown>,
    /// Children the rule no longer renders, deleted once every apply succeeded.
    pub prune: Vec<Prune>,
    /// Merge patches besides the applies (`touch.rs`): the primary's record
    /// of created-once children, keys removed under `replace` fields.
    pub touch: Vec<super::touch::Touch>,
    /// The rule's part of the primary's status, once every write succeeded.
    pub status: Part,
    /// When to look again, once every write succeeded.
    pub next: Next,
    /// What the plan makes of each child, rendered or live (empty when
    /// nothing was rendered): what `kiln explain` and `kiln render` print.
    pub children: Vec<ChildVerdict>,
    /// The primary is suspended (`kiln.dev/reconcile: suspended`): the
    /// engine writes nothing for it, not even status; `status` is never
    /// written.
    pub suspended: bool,
    /// The rule's hook failed or its answer is refused (why): nothing is
    /// applied or pruned, and the engine retries with backoff.
    pub hook_failed: Option<String>,
    /// The finalize hook answered `finalized: true`.
    pub finalized: bool,
}

/// What a plan does with one child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Rendered and not there: created.
    Create,
    /// Rendered, and the live child holds it all: nothing to write.
    Applied,
    /// Rendered, and the live child lacks or differs in a field the rule
    /// sets: applied again.
    Change,
    /// Created once and there: never written again but for its ownership
    /// (`true`: that changes now).
    CreatedOnce(bool),
    /// Created once, then deleted (`recreate: false`): not created again.
    Forgone,
    /// The live child holds all the rule renders, and keys another writer
    /// added under its `replace` fields: those are removed.
    Replace,
    /// Not rendered yet: it waits for other children (kept as it is).
    Waits(String),
    /// No longer rendered: deleted.
    Prune,
    /// No longer rendered, but orphaned (or being deleted): left alone.
    Left,
    /// No longer rendered, and among the newest its `history` keeps.
    Kept,
    /// The primary is suspended (`kiln.dev/reconcile: suspended`): left
    /// as it is, whatever the rule renders.
    Suspended,
}

/// One child's [`Verdict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildVerdict {
    /// Its id in the rule.
    pub id: String,
    /// Its kind.
    pub gvk: Gvk,
    /// Its name (empty for a child waiting, which has none yet).
    pub name: String,
    /// What the plan does with it.
    pub verdict: Verdict,
    /// Whether it exists and its `readyWhen` holds (rendered children only).
    pub ready: Option<bool>,
}

impl Plan {
    /// Writes nothing but status.
    fn only(status: Part, next: Next) -> Self {
        Self {
            apply: Vec::new(),
            reown: Vec::new(),
            prune: Vec::new(),
            touch: Vec::new(),
            status,
            next,
            children: Vec::new(),
            suspended: false,
            hook_failed: None,
            finalized: false,
        }
    }

    /// The plan when the hook's answer cannot be applied: nothing written
    /// but status.
    fn hook_refused(refused: super::hooked::Refused, rule: &Rule, generation: Option<i64>) -> Self {
        use super::hooked::Refused;
        match refused {
            Refused::Failed(message) => Self {
                hook_failed: Some(message.clone()),
                ..Self::only(
                    unrendered(
                        Outcome::Failed {
                            reason: reasons::HOOK_FAILED,
                            message,
                        },
                        generation,
                    ),
                    Next::Done,
                )
            },
            // Not asked (a command that calls no hook; or the engine's
            // snapshot was completed between its two reads): looked at
            // again shortly.
            Refused::NotCalled => {
                let missing = vec!["the sync hook's answer (not asked here)".into()];
                Self::waits(rule, Outcome::Waiting { missing }, generation)
            }
        }
    }

    /// Writes nothing but status, and looks again after the rule's
    /// `requeue.waiting`.
    fn waits(rule: &Rule, outcome: Outcome, generation: Option<i64>) -> Self {
        Self::only(
            unrendered(outcome, generation),
            Next::After(rule.requeue.waiting),
        )
    }

    /// The plan of a suspended primary: nothing written, every live child
    /// left as it is.
    fn suspended(observed: &Observed, generation: Option<i64>) -> Self {
        let children = observed
            .children
            .iter()
            .map(|live| ChildVerdict {
                id: live.id.clone(),
                gvk: live.gvk.clone(),
                name: live.key.name.clone(),
                verdict: Verdict::Suspended,
                ready: None,
            })
            .collect();
        let outcome = Outcome::Waiting {
            missing: Vec::new(),
        };
        Self {
            children,
            suspended: true,
            ..Self::only(unrendered(outcome, generation), Next::Done)
        }
    }

    /// The plan of a reconcile that cannot read what it needs (a watch
    /// reference that does not render, or points where it may not).
    pub fn refused(reason: &'static str, message: String, generation: Option<i64>) -> Self {
        Self::only(
            unrendered(Outcome::Failed { reason, message }, generation),
            Next::Done,
        )
    }

    /// Whether the plan writes anything besides status.
    pub fn writes_children(&self) -> bool {
        !self.apply.is_empty()
            || !self.reown.is_empty()
            || !self.prune.is_empty()
            || !self.touch.is_empty()
    }
}

/// Decides one reconcile from a complete snapshot (its occupants read
/// already): [`draft`], then [`Draft::decide`]. `this` is the primary
/// converted for templates.
#[cfg(test)]
pub(crate) fn plan(
    rule: &Rule,
    this: &JinjaValue,
    observed: &Observed,
    known: &Known,
    scope_of: ScopeOf<'_>,
) -> Plan {
    match draft(rule, this, observed, scope_of) {
        Ok(draft) => draft.decide(rule, observed, known),
        Err(plan) => *plan,
    }
}

/// A reconcile rendered, before its decision: what names its children
/// take is known, so the source can read who holds them.
#[derive(Debug)]
pub struct Draft {
    rendered: render::Rendered,
    generation: Option<i64>,
}

/// Renders one reconcile; the plan itself when there is nothing to decide
/// (a blind cache, a required object missing, a render that fails).
pub fn draft(
    rule: &Rule,
    this: &JinjaValue,
    observed: &Observed,
    scope_of: ScopeOf<'_>,
) -> Result<Draft, Box<Plan>> {
    let generation = observed.inputs.primary["metadata"]["generation"].as_i64();
    if super::suspend::suspended(&observed.inputs.primary) {
        return Err(Box::new(Plan::suspended(observed, generation)));
    }
    if let Some(plan) = unready(rule, observed, generation) {
        return Err(Box::new(plan));
    }
    // Never act on a failed fetch, nor while the outside is not ready.
    let (answers, inputs) = (&observed.external, &observed.inputs);
    if let Some((outcome, after)) = super::external::gate(rule, this, answers, inputs) {
        let next = after.map_or(Next::Done, Next::After);
        return Err(Box::new(Plan::only(unrendered(outcome, generation), next)));
    }
    match render::render_with(rule, this, &observed.inputs, scope_of) {
        Ok(mut rendered) => {
            let inputs = &observed.inputs;
            let hooked = rule.hook.as_ref().is_some_and(|h| h.sync.is_some());
            if (hooked || observed.hook.is_some())
                && let Err(refused) = super::hooked::merge(
                    rule,
                    observed.hook.as_ref(),
                    &inputs.primary,
                    &inputs.observed,
                    &mut rendered,
                    scope_of,
                )
            {
                return Err(Box::new(Plan::hook_refused(refused, rule, generation)));
            }
            Ok(Draft {
                rendered,
                generation,
            })
        }
        Err(e) => {
            let reason = match e {
                render::RenderFailure::Name { .. } | render::RenderFailure::Typed { .. } => {
                    reasons::INVALID
                }
                _ => reasons::TEMPLATE_ERROR,
            };
            let outcome = Outcome::Failed {
                reason,
                message: crate::redact::redact(&e.to_string(), &observed.secrets(rule)),
            };
            // Permanent for these inputs: retried when something changes.
            Err(Box::new(Plan::only(
                unrendered(outcome, generation),
                Next::Done,
            )))
        }
    }
}

impl Draft {
    /// The names whose holder the decision needs: those of rendered
    /// children that do not adopt and are not this primary's live children.
    pub fn names<'d>(
        &'d self,
        rule: &'d Rule,
        observed: &'d Observed,
    ) -> impl Iterator<Item = (&'d Gvk, ObjKey)> + 'd {
        self.rendered
            .children
            .iter()
            .filter(|c| {
                !adoption::adopts(
                    policy(rule, &c.id),
                    &key_of(c),
                    observed.primary_namespace(),
                ) && !observed.children.iter().any(|l| {
                    l.gvk == c.gvk && l.key.name == c.name && l.key.namespace == c.namespace
                })
            })
            .map(|c| (&c.gvk, key_of(c)))
    }

    /// What was rendered.
    pub fn rendered(&self) -> &render::Rendered {
        &self.rendered
    }

    /// Decides the reconcile: what to apply, re-own and prune, the status
    /// and when to look again.
    pub fn decide(self, rule: &Rule, observed: &Observed, known: &Known) -> Plan {
        let (rendered, generation) = (self.rendered, self.generation);
        if let Some(plan) = collisions(rule, observed, &rendered.children, generation) {
            return plan;
        }
        let kept = super::history::kept(&rendered.history, &observed.children);
        let prune = prunes(rule, observed, &rendered, &kept);
        let (not_ready, waiting, next) = progress(rule, &rendered);
        let next = next.no_later_than(super::external::due(&observed.external));
        let rest = verdicts_of_live(rule, observed, &rendered, &prune, &kept);
        let mut children = Vec::with_capacity(rendered.children.len() + rest.len());
        let mut reown = Vec::new();
        let mut apply = Vec::new();
        let mut touch = Vec::new();
        for (c, ready) in rendered.children.into_iter().zip(&rendered.readiness) {
            let live = render::observed_named(observed.inputs.observed.get(&c.id), &c.name);
            let key = (c.gvk.clone(), key_of(&c));
            // Created once: a child that exists is never applied again; only
            // its ownership follows the rule's `deletionPolicy`.
            let once = policy(rule, &c.id).is_some_and(|s| s.update_policy == CreateOnce);
            let verdict = match live {
                Some(l) if once => {
                    let r = super::reown::needed(&c, l);
                    let changes = r.is_some();
                    reown.extend(r);
                    Verdict::CreatedOnce(changes)
                }
                Some(l) if converged(l, &c.object, known.get(&key)) => {
                    match super::replace::needed(policy(rule, &c.id), &c, l) {
                        Some(strip) => {
                            touch.push(strip);
                            Verdict::Replace
                        }
                        None => Verdict::Applied,
                    }
                }
                Some(_) => Verdict::Change,
                None if once && super::remember::forgone(rule, &c, &observed.inputs.primary) => {
                    Verdict::Forgone
                }
                None => Verdict::Create,
            };
            children.push(ChildVerdict {
                id: c.id.clone(),
                gvk: c.gvk.clone(),
                name: c.name.clone(),
                verdict: verdict.clone(),
                ready: Some(ready.ready),
            });
            if matches!(verdict, Verdict::Create | Verdict::Change) {
                apply.push(c);
            }
        }
        children.extend(rest);
        let primary = &observed.inputs.primary;
        touch.extend(super::remember::update(rule, primary, &observed.children));
        let (finalized, waiting, next) = finalizing(rule, observed, waiting, next);
        let outcome = Outcome::Applied {
            not_ready,
            waiting,
            unserved: unserved(rule, observed, &rendered.waiting),
        };
        Plan {
            apply,
            reown,
            prune,
            touch,
            status: Part {
                outcome,
                fields: Some(rendered.status),
                conditions: rendered.conditions,
                generation,
            },
            next,
            children,
            suspended: false,
            hook_failed: None,
            finalized,
        }
    }
}

/// Whether the finalize hook answered `finalized: true`; until it does,
/// the primary waits for it (also in its status), asked again at the
/// rule's waiting interval (or its `resyncAfterSeconds`).
fn finalizing(
    rule: &Rule,
    observed: &Observed,
    mut waiting: Vec<String>,
    next: Next,
) -> (bool, Vec<String>, Next) {
    let finalized = matches!(&observed.hook, Some(crate::hook::Called::Answered(a)) if a.finalized);
    if !crate::hook::finalizing(rule, &observed.inputs.primary) || finalized {
        return (finalized, waiting, next);
    }
    waiting.push("the finalize hook to answer `finalized: true`".to_string());
    (
        false,
        waiting,
        next.no_later_than(Some(rule.requeue.waiting)),
    )
}

/// The live children to delete: no longer rendered, and neither orphaned,
/// being deleted, waiting for another child nor kept by their `history`.
fn prunes(
    rule: &Rule,
    observed: &Observed,
    rendered: &render::Rendered,
    kept: &[&render::history::Filed],
) -> Vec<Prune> {
    observed
        .children
        .iter()
        .filter(|live| {
            // A child waiting for another is kept as it is, not pruned.
            !live.deleting
                && !orphaned(rule, live)
                && !rendered.waiting.iter().any(|w| w.id == live.id)
                && !rendered.children.iter().any(|c| renders(c, live))
                && !super::history::keeps(kept, live)
        })
        .map(|live| Prune {
            gvk: live.gvk.clone(),
            key: live.key.clone(),
            uid: live.uid.clone(),
        })
        .collect()
}

/// The children not ready, those waiting, and when to look again.
fn progress(rule: &Rule, rendered: &render::Rendered) -> (Vec<String>, Vec<String>, Next) {
    let not_ready: Vec<String> = rendered
        .readiness
        .iter()
        .filter(|r| !r.ready)
        .map(|r| format!("{}/{}", r.id, r.name))
        .collect();
    let waiting: Vec<String> = rendered
        .waiting
        .iter()
        .map(|w| format!("`{}` waits for {}", w.id, w.waits_for.join(" and ")))
        .collect();
    let next = if not_ready.is_empty() && waiting.is_empty() {
        rule.requeue.resync.map_or(Next::Done, Next::After)
    } else {
        Next::After(rule.requeue.waiting)
    }
    .no_later_than(rendered.wake.map(|w| w.after));
    (not_ready, waiting, next)
}

/// The kinds the children waiting wait for the API server to serve.
fn unserved(rule: &Rule, observed: &Observed, waiting: &[render::ChildWait]) -> Vec<String> {
    let mut kinds: Vec<String> = Vec::new();
    for w in waiting {
        let Some(child) = policy(rule, &w.id) else {
            continue;
        };
        let kind = child.gvk.to_string();
        if observed.inputs.unserved.contains(&child.gvk) && !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    kinds
}

/// Whether the rendered child `c` is the live child `live`.
fn renders(c: &DesiredChild, live: &LiveChild) -> bool {
    c.gvk == live.gvk && c.name == live.key.name && c.namespace == live.key.namespace
}

/// The verdicts of children not rendered: those waiting, then the live
/// ones the rule no longer renders (pruned, or left alone).
fn verdicts_of_live(
    rule: &Rule,
    observed: &Observed,
    rendered: &render::Rendered,
    prune: &[Prune],
    kept: &[&render::history::Filed],
) -> Vec<ChildVerdict> {
    let waiting = rendered.waiting.iter().filter_map(|w| {
        Some(ChildVerdict {
            id: w.id.clone(),
            gvk: policy(rule, &w.id)?.gvk.clone(),
            name: String::new(),
            verdict: Verdict::Waits(w.waits_for.join(" and ")),
            ready: None,
        })
    });
    let gone = observed
        .children
        .iter()
        .filter(|live| {
            !rendered.waiting.iter().any(|w| w.id == live.id)
                && !rendered.children.iter().any(|c| renders(c, live))
        })
        .map(|live| ChildVerdict {
            id: live.id.clone(),
            gvk: live.gvk.clone(),
            name: live.key.name.clone(),
            verdict: if prune.iter().any(|p| p.gvk == live.gvk && p.key == live.key) {
                Verdict::Prune
            } else if super::history::keeps(kept, live) {
                Verdict::Kept
            } else {
                Verdict::Left
            },
            ready: None,
        });
    waiting.chain(gone).collect()
}

/// The rule's child `id`, if the rule still has it.
fn policy<'r>(rule: &'r Rule, id: &str) -> Option<&'r crate::rules::Child> {
    rule.children.iter().find(|c| c.id == id)
}

/// Whether a live child is left behind rather than pruned: it was created
/// without an owner reference, or the rule now says `deletionPolicy: Orphan`
/// for its id.
pub(crate) fn orphaned(rule: &Rule, live: &LiveChild) -> bool {
    live.orphan || policy(rule, &live.id).is_some_and(|c| c.deletion_policy == Orphan)
}

/// The plan when the reconcile cannot know enough to render: a blind cache
/// or a required related object missing.
fn unready(rule: &Rule, observed: &Observed, generation: Option<i64>) -> Option<Plan> {
    // Never act on missing information: an object a blind cache lacks is not
    // absent, so nothing is rendered (a `when` could turn false), applied or
    // pruned until the cache can be trusted.
    let forbidden: Vec<&str> = observed
        .blind
        .iter()
        .filter_map(|b| match b {
            Blind::Forbidden(kind) => Some(kind.as_str()),
            Blind::Unsynced(_) => None,
        })
        .collect();
    if !forbidden.is_empty() {
        let outcome = Outcome::Failed {
            reason: reasons::FORBIDDEN,
            message: format!(
                "kiln may not list and watch {} (RBAC): nothing is applied or deleted for this object until it may",
                forbidden.join(", ")
            ),
        };
        return Some(Plan::waits(rule, outcome, generation));
    }
    if !observed.blind.is_empty() {
        let missing = observed
            .blind
            .iter()
            .map(|b| match b {
                Blind::Forbidden(kind) | Blind::Unsynced(kind) => {
                    format!("the {kind} cache (not synced yet)")
                }
            })
            .collect();
        return Some(Plan::waits(rule, Outcome::Waiting { missing }, generation));
    }
    if !observed.missing.is_empty() {
        let outcome = Outcome::Waiting {
            missing: observed.missing.clone(),
        };
        return Some(Plan::waits(rule, outcome, generation));
    }
    None
}

/// The plan when a child's name is held by an object kiln did not create
/// for this primary (and the child does not adopt).
fn collisions(
    rule: &Rule,
    observed: &Observed,
    children: &[DesiredChild],
    generation: Option<i64>,
) -> Option<Plan> {
    // Own only what you created: a name held by an object kiln did not make
    // for this primary is neither taken over nor, later, deleted.
    let at = observed.primary_namespace();
    let taken: Vec<String> = children
        .iter()
        .filter_map(|c| {
            let (policy, key) = (policy(rule, &c.id), key_of(c));
            if adoption::adopts(policy, &key, at) || observed.children.iter().any(|l| renders(c, l))
            {
                return None;
            }
            let who = observed.occupants.get(&(c.gvk.clone(), key.clone()))?;
            let bound = policy
                .filter(|p| p.adopt)
                .and_then(|p| adoption::refused(p, &key, at))
                .map(|why| format!("; {why}"))
                .unwrap_or_default();
            Some(format!(
                "{} {key} already exists ({who}{bound})",
                c.gvk.kind
            ))
        })
        .collect();
    if taken.is_empty() {
        return None;
    }
    let outcome = Outcome::Failed {
        reason: reasons::ALREADY_EXISTS,
        message: format!(
            "{}: kiln does not take over objects it did not create",
            taken.join("; ")
        ),
    };
    Some(Plan::waits(rule, outcome, generation))
}

/// The status part of a reconcile that rendered nothing.
fn unrendered(outcome: Outcome, generation: Option<i64>) -> Part {
    Part {
        outcome,
        fields: None,
        conditions: Vec::new(),
        generation,
    }
}

/// An Event a plan raises about its primary (published once per distinct
/// reason and message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raise {
    /// A Warning (else Normal).
    pub warning: bool,
    /// Its reason.
    pub reason: &'static str,
    /// Its note.
    pub message: String,
}

impl Plan {
    /// The Event the plan's outcome raises once its writes went through:
    /// waiting is Normal, a failure a Warning, success none.
    pub fn event(&self) -> Option<Raise> {
        if self.suspended {
            return Some(Raise {
                warning: false,
                reason: super::suspend::REASON,
                message: super::suspend::message(),
            });
        }
        match &self.status.outcome {
            Outcome::Waiting { missing } => Some(Raise {
                warning: false,
                reason: reasons::DEPENDENCY_MISSING,
                message: format!("waiting for {}", missing.join(", ")),
            }),
            Outcome::Awaiting {
                reason, message, ..
            } => Some(Raise {
                warning: *reason == reasons::EXTERNAL_UNAVAILABLE,
                reason,
                message: message.clone(),
            }),
            Outcome::Failed { reason, message } => Some(Raise {
                warning: true,
                reason,
                message: message.clone(),
            }),
            Outcome::Applied { .. } => None,
        }
    }
}

/// The status part after a write of the plan failed.
pub(crate) fn failed(plan: &Plan, reason: &'static str, message: String) -> Part {
    unrendered(Outcome::Failed { reason, message }, plan.status.generation)
}

#[cfg(test)]
mod tests;
