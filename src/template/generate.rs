//! `random_secret(n)`: the one template function that is not pure. It draws
//! `n` characters from the operating system's CSPRNG, and only while a
//! child's template is rendered for a child that does not exist yet
//! (`crate::render` checks that after the render and refuses a draw for a
//! live child). Everywhere else it is an error, so a value drawn is kept by
//! reading it back from the live child, never drawn again.

use std::cell::RefCell;

use minijinja::{Error, ErrorKind};
use sha2::{Digest, Sha256};

/// Fewest characters `random_secret` draws: a shorter value is not a secret.
pub const MIN_LENGTH: u32 = 16;
/// Most characters `random_secret` draws.
pub const MAX_LENGTH: u32 = 1024;

const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// How `random_secret` answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Draw {
    /// From the OS CSPRNG (the engine).
    #[default]
    Random,
    /// The fixed text [`placeholder`] (`kiln render`, which has no cluster
    /// to keep a value in and must print the same thing every time).
    Placeholder,
}

/// What `random_secret(n)` gives under [`Draw::Placeholder`].
pub fn placeholder(n: u32) -> String {
    format!("<random_secret({n})>")
}

struct Drawing {
    how: Draw,
    drawn: Vec<String>,
}

thread_local! {
    static DRAWING: RefCell<Option<Drawing>> = const { RefCell::new(None) };
}

/// Clears the drawing state even when the render unwinds.
struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        DRAWING.with(|d| d.borrow_mut().take());
    }
}

/// Runs `f` (a child's render) with `random_secret` enabled; returns its
/// result and every value it drew.
pub fn drawing<T>(how: Draw, f: impl FnOnce() -> T) -> (T, Vec<String>) {
    DRAWING.with(|d| {
        *d.borrow_mut() = Some(Drawing {
            how,
            drawn: Vec::new(),
        });
    });
    let reset = Reset;
    let out = f();
    let drawn = DRAWING.with(|d| d.borrow_mut().take().map(|d| d.drawn).unwrap_or_default());
    drop(reset);
    (out, drawn)
}

/// The `random_secret(n)` function: `n` letters and digits (about 5.95 bits
/// each: 32 give 190 bits).
pub fn random_secret(n: u32) -> Result<String, Error> {
    if !(MIN_LENGTH..=MAX_LENGTH).contains(&n) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("random_secret({n}): the length must be {MIN_LENGTH} to {MAX_LENGTH}"),
        ));
    }
    let how = DRAWING.with(|d| d.borrow().as_ref().map(|d| d.how));
    let Some(how) = how else {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "random_secret() draws a value only in a child's template",
        ));
    };
    let value = match how {
        Draw::Placeholder => placeholder(n),
        Draw::Random => draw(n as usize)?,
    };
    DRAWING.with(|d| {
        if let Some(d) = d.borrow_mut().as_mut() {
            d.drawn.push(value.clone());
        }
    });
    Ok(value)
}

/// `n` characters of [`ALPHABET`] from the OS CSPRNG.
fn draw(n: usize) -> Result<String, Error> {
    alphanumeric(n, || {
        let mut buf = [0u8; 64];
        getrandom::fill(&mut buf).map_err(|e| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("random_secret: the OS random source failed: {e}"),
            )
        })?;
        Ok(buf.to_vec())
    })
}

/// Most characters `seeded_string` makes.
pub const MAX_SEEDED: u32 = 1024;

/// What KRO's `random.seededString` draws from.
const KRO_ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// The `seeded_string(seed, n)` function: KRO's `random.seededString(n,
/// seed)`, character for character, so a ported rule names what KRO named
/// the same. `seed` is any value: a string as is, anything else as its
/// compact JSON. As KRO does: character `i` is the big-endian `u32` at byte
/// `4i mod 32` of SHA-256(seed), modulo 36, into `0-9a-z` (so past 8
/// characters the string repeats every 8). Not a secret: anyone who knows
/// the seed knows the string (use `random_secret` for that).
pub fn seeded_string(seed: &minijinja::Value, n: u32) -> Result<String, Error> {
    if !(1..=MAX_SEEDED).contains(&n) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("seeded_string(seed, {n}): the length must be 1 to {MAX_SEEDED}"),
        ));
    }
    let seed = match seed.as_str() {
        Some(s) => s.as_bytes().to_vec(),
        None if seed.is_undefined() => {
            return Err(Error::new(
                ErrorKind::UndefinedError,
                "seeded_string: the seed is undefined",
            ));
        }
        None => serde_json::to_vec(seed).map_err(|e| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("seeded_string: the seed is not representable as JSON: {e}"),
            )
        })?,
    };
    let hash = Sha256::digest(&seed);
    Ok((0..n as usize)
        .map(|i| {
            let at = (i * 4) % hash.len();
            let word = u32::from_be_bytes([hash[at], hash[at + 1], hash[at + 2], hash[at + 3]]);
            char::from(KRO_ALPHABET[word as usize % KRO_ALPHABET.len()])
        })
        .collect())
}

/// `n` characters of [`ALPHABET`], uniformly, from the bytes `next` gives:
/// bytes of 248 and above (62 × 4) are dropped, so `byte % 62` has no bias.
fn alphanumeric(
    n: usize,
    mut next: impl FnMut() -> Result<Vec<u8>, Error>,
) -> Result<String, Error> {
    let mut out = String::with_capacity(n);
    while out.len() < n {
        for b in next()?.into_iter().filter(|b| *b < 248) {
            if out.len() == n {
                break;
            }
            out.push(char::from(ALPHABET[usize::from(b) % ALPHABET.len()]));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_differ_and_use_the_alphabet() {
        let ((a, b), drawn) = drawing(Draw::Random, || {
            (random_secret(32).unwrap(), random_secret(32).unwrap())
        });
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric()), "{a}");
        assert_eq!(drawn, [a, b]);
    }

    #[test]
    fn only_while_drawing_and_within_bounds() {
        let err = random_secret(32).unwrap_err();
        assert!(
            err.to_string().contains("only in a child's template"),
            "{err}"
        );
        let (err, drawn) = drawing(Draw::Random, || random_secret(8).unwrap_err());
        assert!(err.to_string().contains("16 to 1024"), "{err}");
        assert!(drawn.is_empty());
        // The state does not leak out of `drawing`.
        assert!(random_secret(32).is_err());
    }

    #[test]
    fn seeded_strings_are_kros() {
        // kubernetes-sigs/kro at 0302e659: random.seededString(10,
        // 'test-seed') and (20, 'test-seed'), computed apart from this code.
        let seed = minijinja::Value::from("test-seed");
        assert_eq!(seeded_string(&seed, 10).unwrap(), "5czheg3o5c");
        assert_eq!(seeded_string(&seed, 20).unwrap(), "5czheg3o5czheg3o5czh");
    }

    #[test]
    fn seeded_strings_depend_on_the_seed_only() {
        let seed = minijinja::Value::from("web-a");
        let a = seeded_string(&seed, 100).unwrap();
        assert_eq!(
            a,
            seeded_string(&seed, 100).unwrap(),
            "same seed, same string"
        );
        assert_eq!(a.len(), 100);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()),
            "{a}"
        );
        // A shorter one is a prefix of a longer one from the same seed.
        assert_eq!(seeded_string(&seed, 7).unwrap(), a[..7]);
        // Pinned, so a change of the algorithm is a visible change.
        assert_eq!(seeded_string(&seed, 12).unwrap(), PINNED);
        let other = seeded_string(&minijinja::Value::from("web-b"), 100).unwrap();
        assert_ne!(a, other);
        let map = minijinja::Value::from(minijinja::value::Serde(serde_json::json!({"a": 1})));
        assert_eq!(seeded_string(&map, 8).unwrap().len(), 8);
        for bad in [0, MAX_SEEDED + 1] {
            let err = seeded_string(&seed, bad).unwrap_err();
            assert!(err.to_string().contains("1 to 1024"), "{err}");
        }
        let err = seeded_string(&minijinja::Value::UNDEFINED, 8).unwrap_err();
        assert!(err.to_string().contains("undefined"), "{err}");
    }

    /// KRO's `random.seededString(12, "web-a")` (computed apart from this
    /// code, from KRO's `pkg/cel/library/random.go`).
    const PINNED: &str = "lhi9q3rklhi9";

    #[test]
    fn placeholder_is_fixed() {
        let (v, drawn) = drawing(Draw::Placeholder, || random_secret(24).unwrap());
        assert_eq!(v, "<random_secret(24)>");
        assert_eq!(drawn, [v]);
    }
}
