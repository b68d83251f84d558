//! The rule's hooks, called: the sync hook before each plan, the finalize
//! hook before the finalizer goes. What an answer becomes is the decision's
//! (`decision::hooked`); this only asks, within the hook's timeout and the
//! body limit, through kiln's guarded egress client.

use std::convert::Infallible;

use super::observe::Caches;
use super::*;
use crate::engine::decision::observe;
use crate::hook::Called;
use crate::rules::hook::{self as spec, Endpoint};

/// The Event reason of a finalize hook kiln stopped calling.
const GAVE_UP: &str = "FinalizeHookGaveUp";

/// The least time between two calls of one primary's hook: a hook whose
/// every answer differs (a timestamp in a child) makes each apply's echo
/// ask it again; this bounds that loop to one call a second.
const SPACING: std::time::Duration = std::time::Duration::from_secs(1);

impl RuleController {
    /// How long until the primary's hook may be asked again, when it was
    /// asked less than [`SPACING`] ago.
    pub(super) fn too_soon(&self, key: &ObjKey) -> Option<std::time::Duration> {
        self.rule.hook.as_ref()?;
        let last = *lock(&self.asked).get(key)?;
        SPACING.checked_sub(last.elapsed()).filter(|d| !d.is_zero())
    }

    /// What the rule's hook answers for `obj`, when this reconcile asks it
    /// (the snapshot read from the caches is complete); `None` otherwise.
    pub(super) async fn call_hook(
        &self,
        obj: &DynamicObject,
        primary: &Value,
        this: &JinjaValue,
    ) -> Option<Called> {
        self.rule.hook.as_ref()?;
        let asked = crate::template::limits::render_stack(|| self.hook_request(obj, primary, this));
        let (endpoint, request) = asked?;
        lock(&self.asked).insert(ObjKey::of(obj), std::time::Instant::now());
        Some(self.ask(&endpoint, &request).await)
    }

    /// The hook to ask and what, from the caches.
    fn hook_request(
        &self,
        obj: &DynamicObject,
        primary: &Value,
        this: &JinjaValue,
    ) -> Option<(Endpoint, Value)> {
        let source = Caches {
            controller: self,
            primary: obj,
            hook: None,
        };
        let inputs = render::Inputs {
            primary: primary.clone(),
            now: Some(crate::template::time::current()),
            ..render::Inputs::default()
        };
        let read = observe::snapshot(&source, &self.rule, this, inputs);
        let snapshot: Result<_, Infallible> = futures::FutureExt::now_or_never(read)?;
        let observed = snapshot.ok()?.ok()?;
        let (endpoint, request) = observe::hook_request(&self.rule, &observed)?;
        Some((endpoint.clone(), request))
    }

    /// Asks the hook at `endpoint`: its answer, or why there is none.
    async fn ask(&self, endpoint: &Endpoint, request: &Value) -> Called {
        let body = match self.post(endpoint, request).await {
            Ok(body) => body,
            Err(why) => return Called::Failed(format!("calling {}: {why}", endpoint.url)),
        };
        match crate::hook::answer(&body, spec::MAX_BODY, spec::MAX_CHILDREN) {
            Ok(answer) => Called::Answered(answer),
            Err(e) => Called::Failed(format!("the hook at {} answered: {e}", endpoint.url)),
        }
    }

    /// POSTs `request` to the hook through kiln's guarded egress client:
    /// the answer's body (2xx only, within the limit and the timeout).
    async fn post(&self, endpoint: &Endpoint, request: &Value) -> Result<Vec<u8>, String> {
        use crate::egress::{Destination, Limits, Method, Request};
        let destination = Destination::parse(&endpoint.url).map_err(|e| e.to_string())?;
        let mut sent = Request::new(Method::Post, std::sync::Arc::new(destination));
        sent.body = Some(request.clone());
        sent.limits = Limits::bounded(endpoint.timeout, spec::MAX_BODY as u64);
        let started = std::time::Instant::now();
        let answer = self.shared.options.egress.send(&sent).await;
        let result = answer.as_ref().map_or_else(|e| e.class(), |_| "ok");
        let m = &self.shared.metrics;
        m.hook_called(&self.rule.name, result, started.elapsed());
        answer.map(|r| r.body.to_vec()).map_err(|e| e.to_string())
    }

    /// A primary holding the rule's finalizer is going: its finalize hook
    /// first (until it answers `finalized: true`, or the rule's
    /// `giveUpAfter` has passed since the deletion), then the teardown.
    pub(super) async fn finalize(
        &self,
        key: &ObjKey,
        obj: &DynamicObject,
    ) -> Result<Next, Failure> {
        let Some(finalize) = self.rule.hook.as_ref().and_then(|h| h.finalize.as_ref()) else {
            return self.tear_down(obj).await;
        };
        let since = obj.metadata.deletion_timestamp.as_ref().map(|t| t.0);
        let waited = since.map(|t| jiff::Timestamp::now().duration_since(t));
        let bound = jiff::SignedDuration::try_from(finalize.give_up_after).unwrap_or_default();
        if waited.is_some_and(|w| w > bound) {
            let message = format!(
                "the finalize hook at {} did not answer `finalized: true` within {:?} of the deletion (spec.hooks.finalize.giveUpAfter): kiln lets the primary go without it",
                finalize.endpoint.url, finalize.give_up_after
            );
            self.report(obj, EventType::Warning, GAVE_UP, &message)
                .await;
        } else {
            let (next, finalized) = self.sync(key, obj).await?;
            if !finalized {
                return Ok(next);
            }
        }
        self.tear_down(obj).await
    }
}
