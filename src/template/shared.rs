//! Compiled templates shared by every rule that writes the same text.
//!
//! minijinja sizes each compiled template for 256 instructions and their
//! positions, about 12 KiB however short its text is. Rules repeat their
//! texts (`{{ self.metadata.name }}`, a name with a suffix, the same data
//! in every child), within a rule and across rules, so each text is
//! compiled once per process: its code is held, in an environment of its
//! own, by the templates that use it, and goes with the last of them (a
//! reload replacing every rule compiles each text again only if no running
//! rule holds it). The table of texts keeps only weak handles and sweeps
//! the dead ones out whenever it has doubled since its last sweep, so it
//! holds at most twice the texts alive then (at least [`SWEEP_FLOOR`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use minijinja::Environment;

/// A compiled text: kiln's environment holding that one template, under
/// [`NAME`].
pub(super) type Code = Arc<Environment<'static>>;

/// The name each text is compiled under in its environment.
pub(super) const NAME: &str = "template";

/// Texts below which the table is not swept.
const SWEEP_FLOOR: usize = 64;

#[derive(Default)]
struct Table {
    by_text: HashMap<String, Weak<Environment<'static>>>,
    /// The size at which dead handles are swept next.
    sweep_at: usize,
}

fn table() -> std::sync::MutexGuard<'static, Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    TABLE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// The code of `text`: the one already compiled while something holds it,
/// else `compile`'s, kept for the next rule that writes it.
pub(super) fn code<E>(
    text: &str,
    compile: impl FnOnce() -> Result<Environment<'static>, E>,
) -> Result<Code, E> {
    if let Some(code) = table().by_text.get(text).and_then(Weak::upgrade) {
        return Ok(code);
    }
    // Compiled outside the lock: another thread compiling the same text at
    // once keeps its own copy, which is correct, only not shared.
    let code = Arc::new(compile()?);
    let mut table = table();
    table
        .by_text
        .insert(text.to_string(), Arc::downgrade(&code));
    if table.by_text.len() >= table.sweep_at {
        table.by_text.retain(|_, code| code.strong_count() > 0);
        table.sweep_at = (table.by_text.len() * 2).max(SWEEP_FLOOR);
    }
    Ok(code)
}
