//! One rule from start to stop: resolve its kinds (waiting while one is not
//! served), read its primary's status schema, acquire its informers and
//! run a [`RuleController`] over them until the rule stops, a kind goes
//! away or the CRD's schema changes, then start over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::controller::{RuleController, Wiring};
use super::crd::{Schema, SchemaRead, own_manager, schema_change, status_schema};
use super::shared::Shared;
use super::{since, unwatched};
use crate::engine::cache::informer;
use crate::engine::cache::kinds::{self, KindError};
use crate::engine::cache::projection::{self, Projection};
use crate::rules::{Gvk, Rule};

/// The state of one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleState {
    /// Resolving kinds and filling caches.
    Syncing,
    /// Waiting for kinds the API server does not serve yet.
    WaitingForKinds(Vec<String>),
    /// Running.
    Running,
    /// Refused: the rule cannot run against the kinds as served (a status
    /// field the primary's schema does not declare). Checked again every
    /// `kind_retry`, so fixing the CRD starts the rule.
    Refused(String),
}

/// Every GVK a rule touches, primary first.
pub(crate) fn kinds_of(rule: &Rule) -> Vec<Gvk> {
    let mut out = vec![rule.primary.gvk.clone()];
    for gvk in rule
        .children
        .iter()
        .map(|c| &c.gvk)
        .chain(rule.watches.iter().map(|w| &w.gvk))
        .chain(
            rule.primary
                .namespace_selector
                .as_ref()
                .map(|_| crate::rules::namespace_gvk())
                .as_ref(),
        )
    {
        if !out.contains(gvk) {
            out.push(gvk.clone());
        }
    }
    out
}

/// Whether the rule runs while `gvk` is not served: a kind only its
/// children are of (the children of that kind wait for it, the rest runs).
/// The primary, a watched kind and Namespaces are needed to render at all.
fn waits_within(rule: &Rule, gvk: &Gvk) -> bool {
    *gvk != rule.primary.gvk
        && !rule.watches.iter().any(|w| &w.gvk == gvk)
        && *gvk != crate::rules::namespace_gvk()
}

/// Every kind the rule touches, resolved through discovery; the child kinds
/// not served, which the rule runs without; and the kinds it cannot run
/// without that could not be resolved (not served, or discovery failed).
async fn resolve(rule: &Rule, shared: &Shared) -> (Vec<Arc<kinds::Kind>>, Vec<Gvk>, Vec<String>) {
    let mut resolved = Vec::new();
    let mut unserved = Vec::new();
    let mut missing = Vec::new();
    for gvk in kinds_of(rule) {
        match shared.kinds.resolve(&gvk).await {
            Ok(kind) => resolved.push(kind),
            Err(KindError::NotServed(gvk)) if waits_within(rule, &gvk) => unserved.push(gvk),
            Err(KindError::NotServed(gvk)) => missing.push(gvk.to_string()),
            Err(error) => {
                tracing::warn!(rule = %rule.name, %error, "discovery failed");
                missing.push(gvk.to_string());
            }
        }
    }
    (resolved, unserved, missing)
}

/// Whether one of the kinds the rule runs without is served now.
async fn arrived(shared: &Shared, unserved: &[Gvk]) -> Option<Gvk> {
    for gvk in unserved {
        if shared.kinds.resolve(gvk).await.is_ok() {
            return Some(gvk.clone());
        }
    }
    None
}

pub(crate) async fn run_rule(
    rule: Arc<Rule>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    state: Arc<Mutex<RuleState>>,
    slot: Arc<Mutex<Option<Arc<RuleController>>>>,
) {
    let waiting = shared
        .metrics
        .waiting_for_kinds
        .get_or_create(&crate::metrics::label("rule", &rule.name))
        .clone();
    let refused = shared
        .metrics
        .rule_refused
        .get_or_create(&crate::metrics::label("rule", &rule.name))
        .clone();
    let set_state = |s: RuleState| {
        waiting.set(i64::from(matches!(s, RuleState::WaitingForKinds(_))));
        refused.set(i64::from(matches!(s, RuleState::Refused(_))));
        *state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = s
    };
    loop {
        let Some((kinds, schema)) = resolved(&rule, &shared, &mut stop, &set_state).await else {
            return;
        };
        let known: Vec<Gvk> = kinds.kinds.iter().map(|k| k.gvk.clone()).collect();
        match run_resolved(&rule, &shared, kinds, schema, &mut stop, &set_state, &slot).await {
            Ended::Stopped => return,
            Ended::KindArrived(gvk) => {
                tracing::info!(rule = %rule.name, kind = %gvk, "a kind the rule's children wait for is served now; the rule starts over with it");
            }
            Ended::SchemaChanged => {
                tracing::info!(rule = %rule.name, "the primary's CustomResourceDefinition changed its status schema; the rule checks it again");
            }
            Ended::KindGone(gvk) => {
                tracing::warn!(rule = %rule.name, kind = %gvk, "a kind stopped being served; the rule waits for it again");
                for gvk in &known {
                    shared.kinds.forget(gvk);
                }
                set_state(RuleState::WaitingForKinds(vec![gvk.to_string()]));
            }
        }
    }
}

/// The kinds a rule runs with: those resolved, and the child kinds not
/// served that its children wait for.
struct Resolved {
    kinds: Vec<Arc<kinds::Kind>>,
    unserved: Vec<Gvk>,
}

/// Resolves every kind of the rule and reads its status schema, waiting
/// (and saying so) while a kind it cannot run without is not served or the
/// CRD cannot be read; `None` once told to stop.
async fn resolved(
    rule: &Rule,
    shared: &Shared,
    stop: &mut watch::Receiver<bool>,
    set_state: &(dyn Fn(RuleState) + Sync),
) -> Option<(Resolved, Schema)> {
    loop {
        let permit = shared.starting.acquire().await;
        let (resolved, unserved, missing) = resolve(rule, shared).await;
        if missing.is_empty() {
            if !unserved.is_empty() {
                let kinds: Vec<String> = unserved.iter().map(Gvk::to_string).collect();
                tracing::warn!(rule = %rule.name, ?kinds, "the API server does not serve these child kinds yet: their children wait, the rest of the rule runs");
            }
            let resolved = Resolved {
                kinds: resolved,
                unserved,
            };
            let own = own_manager(rule, shared);
            let read = status_schema(rule, &shared.client, &resolved.kinds[0], own).await;
            drop(permit);
            match read {
                Ok(schema) => {
                    if let Some(why) =
                        unwatched::refusal(rule, &shared.options.namespaces, &resolved.kinds)
                    {
                        tracing::error!(rule = %rule.name, error = %why, "rule refused: it writes where kiln does not watch");
                        set_state(RuleState::Refused(why.clone()));
                        return Some((resolved, Schema::refused(why)));
                    }
                    set_state(RuleState::Syncing);
                    return Some((resolved, schema));
                }
                Err(SchemaRead::Refused(why)) => {
                    tracing::error!(rule = %rule.name, error = %why, "rule refused: its status does not fit the primary's schema; it only tears down primaries being deleted");
                    set_state(RuleState::Refused(why.to_string()));
                    return Some((resolved, Schema::refused(why.to_string())));
                }
                Err(SchemaRead::Failed(error)) => {
                    tracing::warn!(rule = %rule.name, %error, "reading the primary's CustomResourceDefinition failed; the rule waits for it");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(shared.options.kind_retry) => {}
                _ = stop.changed() => return None,
            }
            continue;
        }
        drop(permit);
        tracing::warn!(rule = %rule.name, kinds = ?missing, "waiting for kinds the API server does not serve yet");
        set_state(RuleState::WaitingForKinds(missing));
        tokio::select! {
            () = tokio::time::sleep(shared.options.kind_retry) => {}
            _ = stop.changed() => return None,
        }
    }
}

/// Whether a rule refused for `why` is now refused for another reason or
/// not at all (a CRD that cannot be read now changes nothing).
async fn refusal_changed(
    rule: &Rule,
    shared: &Shared,
    kinds: &[Arc<kinds::Kind>],
    why: &str,
) -> bool {
    match status_schema(rule, &shared.client, &kinds[0], own_manager(rule, shared)).await {
        Err(SchemaRead::Refused(now)) => now.to_string() != why,
        Err(SchemaRead::Failed(_)) => false,
        Ok(_) => {
            unwatched::refusal(rule, &shared.options.namespaces, kinds).as_deref() != Some(why)
        }
    }
}

enum Ended {
    Stopped,
    KindGone(Gvk),
    /// A child kind the rule ran without is served now.
    KindArrived(Gvk),
    /// The primary's CRD was edited: its status schema is read and checked again.
    SchemaChanged,
}

/// The informers a rule reads, acquired from the shared registry (each
/// released again by [`release`]).
struct Acquired {
    all: Vec<Arc<informer::Informer>>,
    primary: Option<Arc<informer::Informer>>,
    children: HashMap<Gvk, Arc<informer::Informer>>,
    related: HashMap<String, Arc<informer::Informer>>,
    namespaces: Option<Arc<informer::Informer>>,
}

/// Acquires the informer of every kind the rule touches, each projected to
/// what the rule needs of it.
fn acquire(rule: &Rule, shared: &Shared, kinds: &[Arc<kinds::Kind>]) -> Acquired {
    let namespaces = &shared.options.namespaces;
    let mut all: Vec<Arc<informer::Informer>> = Vec::new();
    let wanted = projection::of_rule(rule);
    let everything = Projection::everything();
    let mut informer = |gvk: &Gvk| {
        let kind = kinds.iter().find(|k| &k.gvk == gvk)?.clone();
        let keep = wanted
            .iter()
            .find(|(g, _)| g == gvk)
            .map_or(&everything, |(_, p)| p);
        let i = shared
            .informers
            .acquire(&shared.client, &kind, namespaces, keep);
        all.push(i.clone());
        Some(i)
    };
    let primary = informer(&rule.primary.gvk);
    let mut children = HashMap::new();
    for child in &rule.children {
        if !children.contains_key(&child.gvk)
            && let Some(i) = informer(&child.gvk)
        {
            children.insert(child.gvk.clone(), i);
        }
    }
    let mut related = HashMap::new();
    for watch in &rule.watches {
        if let Some(i) = informer(&watch.gvk) {
            related.insert(watch.name.clone(), i);
        }
    }
    let namespaces_of_primaries = rule
        .primary
        .namespace_selector
        .as_ref()
        .and_then(|_| informer(&crate::rules::namespace_gvk()));
    Acquired {
        all,
        primary,
        children,
        related,
        namespaces: namespaces_of_primaries,
    }
}

/// Lets go of every informer acquired.
fn release(shared: &Shared, acquired: &[Arc<informer::Informer>]) {
    for i in acquired {
        shared.informers.release(&i.kind().gvk);
    }
}

/// A kind among those acquired that is no longer served.
fn gone(acquired: &[Arc<informer::Informer>]) -> Option<Gvk> {
    acquired
        .iter()
        .find(|i| i.is_gone())
        .map(|i| i.kind().gvk.clone())
}

/// Waits until every acquired cache is synced (a kind kiln may not list
/// counts as synced, empty); `Err` when the rule must stop first.
async fn synced(
    rule: &Rule,
    shared: &Shared,
    acquired: &[Arc<informer::Informer>],
    stop: &mut watch::Receiver<bool>,
) -> Result<(), Ended> {
    for i in acquired {
        loop {
            tokio::select! {
                () = i.synced() => break,
                () = tokio::time::sleep(shared.options.kind_retry) => {
                    if let Some(gvk) = gone(acquired) {
                        return Err(Ended::KindGone(gvk));
                    }
                    if i.is_forbidden() {
                        // Start anyway: writes of this kind will fail with a
                        // Forbidden condition on the primaries, which says
                        // more than a rule stuck starting.
                        tracing::error!(rule = %rule.name, kind = %i.kind().gvk, "kiln may not list and watch this kind (RBAC); its cache stays empty");
                        break;
                    }
                }
                _ = stop.changed() => return Err(Ended::Stopped),
            }
        }
    }
    Ok(())
}

/// Says the rule runs, or runs refused (tearing down only).
fn announce(rule: &Rule, refused: Option<&String>, set_state: &(dyn Fn(RuleState) + Sync)) {
    match refused {
        None => {
            set_state(RuleState::Running);
            tracing::info!(rule = %rule.name, primary = %rule.primary.gvk, "rule running");
        }
        Some(why) => set_state(RuleState::Refused(why.clone())),
    }
}

/// What a running rule checks every `kind_retry`.
struct Running<'a> {
    acquired: &'a [Arc<informer::Informer>],
    kinds: &'a [Arc<kinds::Kind>],
    unserved: &'a [Gvk],
}

impl Running<'_> {
    /// Why the rule must start over now, if it must: a kind gone, a kind
    /// its children waited for served, or its refusal changed.
    async fn ends(&self, rule: &Rule, shared: &Shared, refused: Option<&String>) -> Option<Ended> {
        if let Some(gvk) = gone(self.acquired) {
            return Some(Ended::KindGone(gvk));
        }
        if let Some(gvk) = arrived(shared, self.unserved).await {
            return Some(Ended::KindArrived(gvk));
        }
        match refused {
            Some(why) if refusal_changed(rule, shared, self.kinds, why).await => {
                Some(Ended::SchemaChanged)
            }
            _ => None,
        }
    }
}

async fn run_resolved(
    rule: &Arc<Rule>,
    shared: &Arc<Shared>,
    resolved: Resolved,
    schema: Schema,
    stop: &mut watch::Receiver<bool>,
    set_state: &(dyn Fn(RuleState) + Sync),
    slot: &Arc<Mutex<Option<Arc<RuleController>>>>,
) -> Ended {
    let Resolved { kinds, unserved } = resolved;
    let kinds = kinds.as_slice();
    let acquired = acquire(rule, shared, kinds);
    let Some(primary) = acquired.primary else {
        release(shared, &acquired.all);
        return Ended::Stopped;
    };
    let Some(since) = since::resolve(rule, shared, stop).await else {
        release(shared, &acquired.all);
        return Ended::Stopped;
    };
    let acquired_all = acquired.all;
    let wiring = Wiring {
        since,
        primary: primary.clone(),
        children: acquired.children,
        related: acquired.related,
        status: Arc::new(schema.status.clone()),
        writes_status: schema.writes,
        namespaces: acquired.namespaces,
        refused: schema.refused.is_some(),
        unserved: unserved.clone(),
    };
    let refused = schema.refused.clone();
    let changed = schema_change(shared, rule, &schema, primary.clone());
    tokio::pin!(changed);
    let controller = RuleController::new(rule.clone(), shared.clone(), wiring);
    if let Err(ended) = synced(rule, shared, &acquired_all, stop).await {
        controller.shutdown();
        release(shared, &acquired_all);
        return ended;
    }
    *slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(controller.clone());
    announce(rule, refused.as_ref(), set_state);
    controller.enqueue_all();

    let mut workers = AbortOnDrop(Some({
        let c = controller.clone();
        let n = shared.options.concurrency;
        tokio::spawn(async move { c.run_workers(n).await })
    }));
    let ended = loop {
        tokio::select! {
            _ = stop.changed() => break Ended::Stopped,
            () = &mut changed => break Ended::SchemaChanged,
            () = tokio::time::sleep(shared.options.kind_retry) => {
                let running = Running { acquired: &acquired_all, kinds, unserved: &unserved };
                if let Some(ended) = running.ends(rule, shared, refused.as_ref()).await {
                    break ended;
                }
            }
        }
    };
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    controller.shutdown();
    // Awaited through the guard: if this task is aborted meanwhile, the
    // guard still aborts the workers.
    if let Some(handle) = workers.0.as_mut() {
        let _ = tokio::time::timeout(shared.options.shutdown_grace, handle).await;
    }
    release(shared, &acquired_all);
    tracing::info!(rule = %rule.name, "rule stopped");
    ended
}

/// Aborts a task when dropped: a rule task aborted (lease lost) takes its
/// workers with it.
pub(crate) struct AbortOnDrop(pub(crate) Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}
