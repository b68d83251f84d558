//! Bounds on what one template evaluation may build, so that a runaway
//! template fails for its object instead of aborting the process.
//!
//! Fuel bounds the instructions a template executes, but one instruction can
//! do a lot: a filter walks a whole list, `[1] * 100000000` makes a list of a
//! hundred million items, and a loop can nest a list a hundred thousand levels
//! deep, which the Rust stack then recurses through (to drop it, compare it,
//! serialize it). So:
//!
//! - every filter call and every value written out or returned is checked:
//!   at most [`VALUE_LIMIT`] bytes and [`DEPTH_LIMIT`] levels of nesting;
//! - the bytes all filter calls and writes of one evaluation handle add up
//!   to at most [`WORK_LIMIT`], which bounds its time together with fuel;
//! - each evaluation runs on a [`RENDER_STACK`] stack of its own, which
//!   holds the deepest value fuel lets a template build.

use std::cell::Cell;

use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{Error, ErrorKind, State, Value};

use super::RenderError;

/// Bytes one template value may hold (strings count their bytes, every other
/// scalar and every list or map entry counts 8).
pub const VALUE_LIMIT: usize = 2 * 1024 * 1024;
/// Levels of lists and maps one template value may nest.
pub const DEPTH_LIMIT: usize = 64;
/// Bytes all filter calls and writes of one evaluation may handle together.
pub const WORK_LIMIT: usize = 32 * VALUE_LIMIT;
/// Stack each evaluation runs on. Fuel lets a loop nest a list
/// about 140,000 levels deep; dropping that needs between 32 and 64 MiB in a
/// debug build (measured), so this leaves room.
pub const RENDER_STACK: usize = 256 * 1024 * 1024;

/// Size of an entry that is not a string.
const ENTRY: usize = 8;

thread_local! {
    /// Bytes handled so far by the evaluation running on this thread.
    static WORK: Cell<usize> = const { Cell::new(0) };
    /// Whether this thread runs on a render stack already.
    static ON_RENDER_STACK: Cell<bool> = const { Cell::new(false) };
}

/// Runs one evaluation on a stack of its own, [`RENDER_STACK`] bytes
/// (reserved, and touched only as far as used), with a fresh work count.
/// Already on such a stack (a whole render runs on one, see [`render_stack`]),
/// it stays there: switching stacks costs a mapping each time.
///
/// Everything the evaluation builds must be dropped inside `f`, so its
/// result must be plain data (JSON, text), never a template value.
pub fn on_render_stack<T>(f: impl FnOnce() -> Result<T, RenderError>) -> Result<T, RenderError> {
    render_stack(|| {
        WORK.with(|w| w.set(0));
        f()
    })
}

/// Runs `f` on a [`RENDER_STACK`] stack, switching once: evaluations inside
/// it (each with its own work count) use the same stack. Between two
/// evaluations only plain data stays alive, so one stack serves them all.
pub fn render_stack<T>(f: impl FnOnce() -> T) -> T {
    if ON_RENDER_STACK.with(Cell::get) {
        return f();
    }
    stacker::grow(RENDER_STACK, || {
        ON_RENDER_STACK.with(|on| on.set(true));
        let out = f();
        ON_RENDER_STACK.with(|on| on.set(false));
        out
    })
}

/// Checks that `value` is within [`VALUE_LIMIT`] and [`DEPTH_LIMIT`], and
/// charges its size to the evaluation's [`WORK_LIMIT`]. `what` names the
/// value in the error, e.g. "the input of `join`".
pub fn check(value: &Value, what: &str) -> Result<(), Error> {
    let size = measure(value).map_err(|e| e.into_error(what))?;
    charge(size)
}

/// Charges `n` bytes of work to the running evaluation.
fn charge(n: usize) -> Result<(), Error> {
    let total = WORK.with(|w| {
        let total = w.get().saturating_add(n);
        w.set(total);
        total
    });
    if total > WORK_LIMIT {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "work limit exceeded: filters and output of one template handled more than {WORK_LIMIT} bytes"
            ),
        ));
    }
    Ok(())
}

/// Why a value is out of bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exceeded {
    Size,
    Depth,
}

impl Exceeded {
    fn into_error(self, what: &str) -> Error {
        let message = match self {
            Self::Size => format!(
                "value too large: {what} holds more than {VALUE_LIMIT} bytes (the limit on one template value)"
            ),
            Self::Depth => format!(
                "value nested too deeply: {what} nests lists or maps more than {DEPTH_LIMIT} levels deep"
            ),
        };
        Error::new(ErrorKind::InvalidOperation, message)
    }
}

/// The size of a value, walked without recursion and given up on as soon as
/// it exceeds a limit.
fn measure(value: &Value) -> Result<usize, Exceeded> {
    let mut size = 0usize;
    let mut todo = vec![(value.clone(), 0usize)];
    let add = |size: &mut usize, n: usize| {
        *size = size.saturating_add(n);
        if *size > VALUE_LIMIT {
            Err(Exceeded::Size)
        } else {
            Ok(())
        }
    };
    while let Some((v, depth)) = todo.pop() {
        match v.kind() {
            ValueKind::String => add(&mut size, v.as_str().map_or(0, str::len))?,
            ValueKind::Bytes => add(&mut size, v.as_bytes().map_or(0, <[u8]>::len))?,
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
                if depth >= DEPTH_LIMIT {
                    return Err(Exceeded::Depth);
                }
                // A lazy sequence knows its length before it is walked.
                let known = v.len();
                if let Some(n) = known {
                    add(&mut size, n.saturating_mul(ENTRY))?;
                }
                let is_map = v.kind() == ValueKind::Map;
                let Ok(items) = v.try_iter() else {
                    continue;
                };
                for item in items {
                    if known.is_none() {
                        add(&mut size, ENTRY)?;
                    }
                    if is_map && let Ok(entry) = v.get_item(&item) {
                        todo.push((entry, depth + 1));
                    }
                    todo.push((item, depth + 1));
                }
            }
            _ => add(&mut size, ENTRY)?,
        }
    }
    Ok(size)
}

/// Wraps a filter so that its inputs and its result are [`check`]ed.
pub fn guarded(
    name: &'static str,
    filter: Value,
) -> impl Fn(&mut State, Rest<Value>, Kwargs) -> Result<Value, Error> + Send + Sync + 'static {
    move |state: &mut State, args: Rest<Value>, kwargs: Kwargs| {
        let mut args = args.0;
        // Pass keyword arguments on: the wrapped filter checks them.
        let passed: Kwargs = kwargs
            .args()
            .map(|k| (k.to_string(), kwargs.get::<Value>(k).unwrap_or_default()))
            .collect();
        if passed.args().next().is_some() {
            args.push(Value::from(passed));
        }
        for arg in &args {
            check(arg, &format!("the input of `{name}`"))?;
        }
        // A result checked only once built may be too large to build: the
        // filters whose output can outgrow their inputs many times over are
        // sized from their inputs first.
        if estimate(name, &args).is_some_and(|n| n > VALUE_LIMIT) {
            return Err(Exceeded::Size.into_error(&format!("the result of `{name}`")));
        }
        let out = filter
            .call(state, &args)
            .map_err(|e| undefined_operand(e, name, &args))?;
        check(&out, &format!("the result of `{name}`"))?;
        Ok(out)
    }
}

/// An undefined-value error of filter `name` said of the operand that was
/// undefined (its input, or argument `i`), so the message can name the
/// expression the template wrote for it.
fn undefined_operand(e: Error, name: &str, args: &[Value]) -> Error {
    if e.kind() != ErrorKind::UndefinedError {
        return e;
    }
    let detail = match args.iter().position(Value::is_undefined) {
        Some(0) => super::undefined::input_detail(name),
        Some(i) => super::undefined::argument_detail(name, i),
        None => return e,
    };
    Error::new(ErrorKind::UndefinedError, detail)
}

/// The size of what filter `name` would return for `args`, for the filters
/// whose output can be many times their inputs' (`replace`, `join`,
/// `indent`); `None` for the others.
pub(super) fn estimate(name: &str, args: &[Value]) -> Option<usize> {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().len();
    match name {
        "replace" => {
            let s = args.first()?.as_str()?;
            let old = args.get(1).and_then(Value::as_str).unwrap_or_default();
            let hits = if old.is_empty() {
                s.chars().count() + 1
            } else {
                s.matches(old).count()
            };
            let hits = match args.get(3).and_then(|c| usize::try_from(c.clone()).ok()) {
                Some(count) => hits.min(count),
                None => hits,
            };
            Some(
                s.len()
                    .saturating_add(hits.saturating_mul(text(args.get(2)))),
            )
        }
        "join" => {
            let items = args.first()?.len()?;
            let parts = measure(args.first()?).unwrap_or(VALUE_LIMIT);
            Some(parts.saturating_add(items.saturating_mul(text(args.get(1)))))
        }
        "indent" => {
            let s = args.first()?.as_str()?;
            let width = match args.get(1) {
                Some(w) if w.as_str().is_some() => text(Some(w)),
                Some(w) => usize::try_from(w.clone()).unwrap_or(0),
                None => 4,
            };
            let lines = s.lines().count() + 1;
            Some(s.len().saturating_add(lines.saturating_mul(width)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_that_multiply_their_input_are_sized_before_they_run() {
        let big = Value::from("x".repeat(1_000_000));
        let half = Value::from("y".repeat(1_000_000));
        assert!(
            estimate("replace", &[big.clone(), Value::from("x"), half.clone()]).unwrap()
                > VALUE_LIMIT
        );
        assert_eq!(
            estimate(
                "replace",
                &[Value::from("a-b"), Value::from("-"), Value::from("+")]
            ),
            Some(4)
        );
        let many = Value::from(vec![Value::from("a"); 100_000]);
        assert!(estimate("join", &[many, half.clone()]).unwrap() > VALUE_LIMIT);
        let lines = Value::from("l\n".repeat(100_000));
        assert!(estimate("indent", &[lines, Value::from(1000)]).unwrap() > VALUE_LIMIT);
        assert_eq!(estimate("upper", &[big]), None);
    }

    #[test]
    fn measures_strings_lists_and_maps() {
        assert_eq!(measure(&Value::from("abc")), Ok(3));
        assert_eq!(measure(&Value::from(vec![1, 2])), Ok(2 * 8 + 2 * 8));
        let map = Value::from(std::collections::BTreeMap::from([("k", "vv")]));
        assert_eq!(measure(&map), Ok(8 + 1 + 2));
    }

    #[test]
    fn refuses_a_huge_lazy_sequence_without_walking_it() {
        let big = Value::make_iterable(|| 0..1_000_000_000u64);
        // An iterable of unknown length is walked, but only up to the limit.
        assert_eq!(measure(&big), Err(Exceeded::Size));
    }

    #[test]
    fn refuses_deep_nesting() {
        let mut v = Value::from(1);
        for _ in 0..=DEPTH_LIMIT {
            v = Value::from(vec![v]);
        }
        assert_eq!(measure(&v), Err(Exceeded::Depth));
    }

    #[test]
    fn work_adds_up_per_evaluation() {
        let r = on_render_stack(|| {
            let s = Value::from("x".repeat(VALUE_LIMIT));
            let mut last = Ok(());
            for _ in 0..=WORK_LIMIT / VALUE_LIMIT {
                last = check(&s, "s");
            }
            last.map_err(|e| RenderError::new("t", e.to_string()))
        });
        let err = r.unwrap_err();
        assert!(err.message.contains("work limit exceeded"), "{err}");
    }
}
