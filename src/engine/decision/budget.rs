//! The write budget of one primary: what tells a fight from work.
//!
//! A fight is another writer undoing what kiln set, over and over: kiln
//! writes an object again with exactly what it wrote last time. Creating
//! children (any number of them) and following the owner's edits (each a
//! new body) are work, never a fight. So only writes that repeat the body
//! kiln last wrote to the same object within [`WINDOW`] are counted, and
//! more than [`BUDGET`] of those pause the primary's writes.
//!
//! Pure: the caller lists a plan's writes ([`planned`]), asks
//! [`Window::judge`] before writing and, over budget, pauses the primary's
//! writes as [`pause`] says; it only reads who the other writer is.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::decorate::{Decoration, Decorations};
use super::live::key_of;
use super::plan::Plan;
use super::touch::Touch;
use crate::engine::key::ObjKey;
use crate::render::DesiredChild;
use crate::rules::{Gvk, Requeue};

/// At most this many repeated writes per primary within [`WINDOW`]: more
/// means another controller keeps undoing what kiln sets (a fight), and
/// kiln pauses that primary's writes instead of answering every change
/// (crossplane#6751 needed the same breaker).
pub(crate) const BUDGET: usize = 20;
/// The window of [`BUDGET`].
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// One write kiln is about to make: where, and what (fingerprints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Write {
    target: u64,
    body: u64,
}

impl Write {
    /// The write of `body` to the object `target` names (kind, namespace,
    /// name and, for a decoration, the field manager).
    pub(crate) fn of(target: impl Hash, body: &Value) -> Self {
        Self {
            target: hash(target),
            body: hash(body.to_string()),
        }
    }
}

fn hash(value: impl Hash) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// The writes of one primary within the last [`WINDOW`].
#[derive(Debug, Default)]
pub(crate) struct Window {
    writes: VecDeque<Made>,
}

#[derive(Debug, Clone, Copy)]
struct Made {
    at: Instant,
    write: Write,
    /// The same body as the last write to the same object: a fight's answer.
    again: bool,
}

impl Window {
    /// Forgets writes older than [`WINDOW`].
    pub(crate) fn expire(&mut self, now: Instant) {
        while self
            .writes
            .front()
            .is_some_and(|m| now.duration_since(m.at) > WINDOW)
        {
            self.writes.pop_front();
        }
        if self.writes.is_empty() {
            // What the window's writes grew is not kept past it.
            self.writes = VecDeque::new();
        }
    }

    /// Whether no write is remembered.
    pub(crate) fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// A pause starts: the repeated writes are forgiven (after it, kiln
    /// has the whole budget again), but what kiln last wrote where is
    /// kept, so the first answer after the pause counts as a repeat.
    pub(crate) fn forgive(&mut self) {
        for made in &mut self.writes {
            made.again = false;
        }
    }

    /// Spends the budget on `writes` made `now`, recording them; or, when
    /// they would repeat more than [`BUDGET`] writes within the window,
    /// records nothing and returns the index of the first repeated one.
    pub(crate) fn spend(&mut self, now: Instant, writes: &[Write]) -> Result<(), usize> {
        let again: Vec<bool> = writes.iter().map(|w| self.repeats(w)).collect();
        let before = self.writes.iter().filter(|m| m.again).count();
        let more = again.iter().filter(|a| **a).count();
        if more > 0 && before + more > BUDGET {
            return Err(again.iter().position(|a| *a).unwrap_or_default());
        }
        self.writes
            .extend(writes.iter().zip(again).map(|(write, again)| Made {
                at: now,
                write: *write,
                again,
            }));
        Ok(())
    }

    /// What the budget says of `writes` made `now` while `paused` (the
    /// explanation of a pause in force): they are recorded when within it.
    pub(crate) fn judge(
        &mut self,
        now: Instant,
        paused: Option<&str>,
        writes: &[Write],
    ) -> Verdict {
        if writes.is_empty() {
            return Verdict::Within;
        }
        if let Some(why) = paused {
            return Verdict::Paused(why.to_string());
        }
        match self.spend(now, writes) {
            Ok(()) => Verdict::Within,
            Err(first) => Verdict::Over { first },
        }
    }

    /// Takes back `writes` recorded by [`spend`](Self::spend) that were
    /// never made, or that the API server refused as invalid: a refusal
    /// changed nothing, so it answers no other writer and is no fight. The
    /// last record of each is forgotten.
    pub(crate) fn refund(&mut self, writes: &[Write]) {
        for write in writes {
            if let Some(i) = self.writes.iter().rposition(|m| m.write == *write) {
                self.writes.remove(i);
            }
        }
    }

    /// Whether the last write to the same object within the window had the
    /// same body.
    fn repeats(&self, write: &Write) -> bool {
        self.writes
            .iter()
            .rev()
            .find(|m| m.write.target == write.target)
            .is_some_and(|m| m.write.body == write.body)
    }
}

/// What the budget says of a reconcile's writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Within the budget: write.
    Within,
    /// The primary's writes are paused, for this reason: write nothing.
    Paused(String),
    /// Over the budget: write nothing and [`pause`]; `first` is the index
    /// of the first write that repeats what kiln last wrote.
    Over {
        /// Of the writes judged.
        first: usize,
    },
}

/// A pause of a primary's writes: until when, and why (its failure's message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pause {
    /// The end of the pause.
    pub until: Instant,
    /// Why, for the status and the Event.
    pub why: String,
}

/// The pause that starts `now` when the write to `what` went over budget:
/// as long as the slowest retry (`requeue.onError.max`), naming the `other`
/// field manager that last changed the object, when known.
pub(crate) fn pause(now: Instant, what: &str, other: Option<&str>, requeue: &Requeue) -> Pause {
    let cool_down = requeue.on_error.max;
    let why = format!(
        "{what} was rewritten more than {BUDGET} times in {}s with what kiln last wrote: another controller ({}) keeps changing what the rule sets; kiln pauses its writes to this object for {}s",
        WINDOW.as_secs(),
        other.unwrap_or("unknown field manager"),
        cool_down.as_secs()
    );
    Pause {
        until: now + cool_down,
        why,
    }
}

/// A write a reconcile is about to make.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Written<'a> {
    /// Applying a child.
    Child(&'a DesiredChild),
    /// Applying a decoration (or taking one back).
    Decoration(&'a Decoration),
    /// Removing keys under a child's `replace` fields (replace.rs).
    Strip(&'a Gvk, &'a ObjKey),
}

impl Written<'_> {
    /// The object written, for people.
    pub(crate) fn what(&self) -> String {
        match self {
            Self::Child(child) => format!("{} {}", child.gvk.kind, key_of(child)),
            Self::Strip(gvk, key) => format!("{} {key} (replace)", gvk.kind),
            Self::Decoration(d) => {
                let at = d
                    .namespace
                    .as_ref()
                    .map_or(String::new(), |n| format!("{n}/"));
                format!("{} {at}{} (decorated as {})", d.gvk.kind, d.name, d.manager)
            }
        }
    }
}

/// Every write of a plan and its decorations, fingerprinted for the budget.
pub(crate) fn planned<'a>(
    plan: &'a Plan,
    decorations: Option<&'a Decorations>,
) -> Vec<(Write, Written<'a>)> {
    let children = plan.apply.iter().map(|c| {
        let target = (c.gvk.to_string(), &c.namespace, &c.name);
        (Write::of(target, &c.object), Written::Child(c))
    });
    let decorated = decorations
        .into_iter()
        .flat_map(|d| d.apply.iter().chain(&d.take_back))
        .map(|d| {
            let target = (d.gvk.to_string(), &d.namespace, &d.name, &d.manager);
            (Write::of(target, &d.body), Written::Decoration(d))
        });
    // Removing keys another writer adds again and again is a fight too.
    let stripped = plan.touch.iter().filter_map(|t| match t {
        Touch::Strip {
            gvk, key, desired, ..
        } => {
            let target = (gvk.to_string(), &key.namespace, &key.name, "replace");
            Some((Write::of(target, desired), Written::Strip(gvk, key)))
        }
        Touch::Remember { .. } => None,
    });
    children.chain(decorated).chain(stripped).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(name: &str, value: &str) -> Write {
        Write::of(("ConfigMap", name), &json!({"data": {"value": value}}))
    }

    #[test]
    fn creating_any_number_of_objects_spends_nothing() {
        let mut window = Window::default();
        let now = Instant::now();
        let children: Vec<Write> = (0..1000).map(|i| write(&i.to_string(), "v")).collect();
        assert_eq!(window.spend(now, &children), Ok(()));
        assert_eq!(window.writes.iter().filter(|m| m.again).count(), 0);
    }

    #[test]
    fn the_owners_edits_spend_nothing_even_back_and_forth() {
        let mut window = Window::default();
        let now = Instant::now();
        for edit in 0..30 {
            let value = if edit % 2 == 0 { "a" } else { "b" };
            let children: Vec<Write> = (0..8).map(|i| write(&i.to_string(), value)).collect();
            assert_eq!(window.spend(now, &children), Ok(()), "edit {edit}");
        }
    }

    #[test]
    fn writing_the_same_body_again_and_again_is_a_fight() {
        let mut window = Window::default();
        let now = Instant::now();
        let other = write("other", "x");
        assert_eq!(window.spend(now, &[write("w", "ours")]), Ok(()));
        for _ in 0..BUDGET {
            assert_eq!(window.spend(now, &[write("w", "ours")]), Ok(()));
        }
        assert_eq!(window.spend(now, &[other, write("w", "ours")]), Err(1));
        // A pause forgives the repeats; the next answer is still one.
        window.forgive();
        assert!(window.repeats(&write("w", "ours")));
        for _ in 0..BUDGET {
            assert_eq!(window.spend(now, &[write("w", "ours")]), Ok(()));
        }
        assert_eq!(window.spend(now, &[write("w", "ours")]), Err(0));
        // Once the window is over, the budget is whole again.
        window.expire(now + WINDOW + Duration::from_secs(1));
        assert!(window.is_empty());
        assert_eq!(window.spend(now, &[write("w", "ours")]), Ok(()));
    }

    #[test]
    fn writes_refused_as_invalid_are_taken_back_and_never_add_up() {
        let mut window = Window::default();
        let now = Instant::now();
        let refused = write("w", "invalid");
        for _ in 0..=BUDGET * 2 {
            assert_eq!(window.spend(now, &[refused]), Ok(()));
            window.refund(&[refused]);
        }
        assert!(window.is_empty());
        // Only the refused write is taken back, not one made before it.
        let made = write("other", "v");
        assert_eq!(window.spend(now, &[made, refused]), Ok(()));
        window.refund(&[refused]);
        assert!(!window.repeats(&refused));
        assert!(window.repeats(&made));
    }

    #[test]
    fn the_same_body_on_another_object_is_no_repeat() {
        let mut window = Window::default();
        let now = Instant::now();
        assert_eq!(window.spend(now, &[write("a", "v")]), Ok(()));
        assert!(!window.repeats(&write("b", "v")));
        assert!(window.repeats(&write("a", "v")));
    }
    #[test]
    fn writes_are_judged_within_paused_or_over_the_budget() {
        let now = Instant::now();
        let fight = write("w", "ours");
        let mut window = Window::default();
        for _ in 0..=BUDGET {
            assert_eq!(window.judge(now, None, &[fight]), Verdict::Within);
        }
        // (paused, writes) → verdict
        let table = [
            (None, vec![], Verdict::Within),
            (Some("fight"), vec![], Verdict::Within),
            (
                Some("fight"),
                vec![write("new", "v")],
                Verdict::Paused("fight".into()),
            ),
            (None, vec![write("new", "v")], Verdict::Within),
            (
                None,
                vec![write("other", "v"), fight],
                Verdict::Over { first: 1 },
            ),
        ];
        for (paused, writes, verdict) in table {
            assert_eq!(
                window.judge(now, paused, &writes),
                verdict,
                "{paused:?} {writes:?}"
            );
        }
    }

    #[test]
    fn a_pause_lasts_the_slowest_retry_and_names_the_other_writer() {
        let now = Instant::now();
        let requeue = Requeue::default();
        let pause = pause(now, "ConfigMap team/shop", Some("kubectl-edit"), &requeue);
        assert_eq!(pause.until, now + requeue.on_error.max);
        assert_eq!(
            pause.why,
            "ConfigMap team/shop was rewritten more than 20 times in 60s with what kiln last wrote: another controller (kubectl-edit) keeps changing what the rule sets; kiln pauses its writes to this object for 300s"
        );
        let unknown = super::pause(now, "ConfigMap team/shop", None, &requeue);
        assert!(
            unknown
                .why
                .contains("another controller (unknown field manager)")
        );
    }
}
