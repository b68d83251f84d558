//! `spec.hooks`: literal URLs, bounded durations, and the kinds a hook may
//! return, each a child of the rule marked with its own id.

use super::*;
use crate::rules::hook::{self, Endpoint, Finalize, Hook};

impl Checker<'_> {
    /// The rule's hooks and the children they may return (appended to the
    /// rule's children, outside its render order).
    pub(super) fn hooks(&mut self, template_ids: &[String]) -> (Option<Hook>, Vec<Child>) {
        let Some(raw) = self.raw.spec.hooks.clone() else {
            return (None, Vec::new());
        };
        let at = [key("spec"), key("hooks")];
        let with = |k: &str| [at.as_slice(), &[key(k)]].concat();
        if raw.sync.is_none() && raw.finalize.is_none() {
            self.error(&at, "hooks names neither a `sync` nor a `finalize` hook");
        }
        let sync = raw
            .sync
            .as_ref()
            .and_then(|e| self.endpoint(&with("sync"), &e.url, e.timeout.as_ref()));
        let finalize = raw.finalize.as_ref().and_then(|f| {
            let at = with("finalize");
            let endpoint = self.endpoint(&at, &f.url, f.timeout.as_ref())?;
            let give_up_after = self.bounded(
                &[at.as_slice(), &[key("giveUpAfter")]].concat(),
                f.give_up_after.as_ref(),
                hook::DEFAULT_GIVE_UP_AFTER,
                hook::MAX_GIVE_UP_AFTER,
            )?;
            Some(Finalize {
                endpoint,
                give_up_after,
            })
        });
        if raw.sync.is_some() && raw.children.is_empty() {
            self.error(
                &with("children"),
                "a sync hook needs the kinds it may return: list them under hooks.children",
            );
        }
        let mut seen: BTreeSet<String> = template_ids.iter().cloned().collect();
        let mut children: Vec<Child> = Vec::new();
        for (i, c) in raw.children.iter().enumerate() {
            let at = [with("children").as_slice(), &[Step::Index(i)]].concat();
            let id_at = [at.as_slice(), &[key("id")]].concat();
            self.unique_identifier(&id_at, &mut seen, "child id", &c.id, "children.<id>");
            let Some(gvk) = self.gvk(&at, &c.api_version, &c.kind) else {
                continue;
            };
            if children.iter().any(|other| other.gvk == gvk) {
                self.error(
                    &at,
                    format!("{gvk} is listed twice: the kind of an object the hook returns decides its id"),
                );
            }
            children.push(Child::from_hook(c.id.clone(), gvk, c.deletion_policy));
        }
        (Some(Hook { sync, finalize }), children)
    }

    fn endpoint(
        &mut self,
        at: &[Step],
        url: &str,
        timeout: Option<&DurationText>,
    ) -> Option<Endpoint> {
        if let Some(why) = hook::url_refusal(url) {
            self.error(&[at, &[key("url")]].concat(), why);
        }
        let timeout = self.bounded(
            &[at, &[key("timeout")]].concat(),
            timeout,
            hook::DEFAULT_TIMEOUT,
            hook::MAX_TIMEOUT,
        )?;
        Some(Endpoint {
            url: url.to_string(),
            timeout,
        })
    }

    fn bounded(
        &mut self,
        at: &[Step],
        text: Option<&DurationText>,
        default: std::time::Duration,
        max: std::time::Duration,
    ) -> Option<std::time::Duration> {
        let Some(text) = text else {
            return Some(default);
        };
        let value = self.duration(at, text)?;
        let field = path_string(at);
        hook::bounded(value, max, &field)
            .map_err(|why| self.error(at, why))
            .ok()
    }
}
