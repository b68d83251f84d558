//! The names a sharded replica's cache received but left out: objects of
//! other replicas' shares (sharding).
//!
//! A sharded cache shows only this replica's share of kiln's children, so
//! "not in the cache" alone does not say a name is free: the object may be
//! one kiln's labels were copied onto, kept by another replica. Every
//! object the ingest filter drops still goes through it, so the filter can
//! note its name; a name the cache neither holds nor noted is free as far
//! as the watch knows, exactly as an unsharded cache would say, and needs
//! no lookup on the API server before a child is created under it.
//!
//! A name is noted as a 64-bit fingerprint keyed at random per process (8
//! bytes, and no name a tenant picks can be made to collide on purpose).
//! Two names sharing a fingerprint read as taken (a needless lookup), and
//! while one of them is held the other's delete clears the note: a chance
//! of about n²/2⁶⁵ for n names left out.
//!
//! Notes are kept per watch stream, and a stream's list replaces its notes
//! only once it is complete, as the cache replaces its objects.

use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

/// A fingerprint is already a hash: the table uses it as it is.
#[derive(Debug, Default)]
struct Passthrough(u64);

impl Hasher for Passthrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Prints = hashbrown::HashSet<u64, BuildHasherDefault<Passthrough>>;

/// The names left out of one cache, per watch stream.
#[derive(Debug)]
pub(super) struct Elsewhere {
    keys: RandomState,
    /// Per stream: the names noted.
    noted: Vec<Prints>,
    /// Per stream: the names noted by a list under way.
    listing: Vec<Option<Prints>>,
}

impl Elsewhere {
    /// Nothing noted, for `streams` watch streams.
    pub(super) fn new(streams: usize) -> Self {
        Self {
            keys: RandomState::new(),
            noted: (0..streams).map(|_| Prints::default()).collect(),
            listing: (0..streams).map(|_| None).collect(),
        }
    }

    /// The fingerprint of a name.
    pub(super) fn print(&self, namespace: Option<&str>, name: &str) -> u64 {
        let mut h = self.keys.build_hasher();
        h.write(namespace.unwrap_or_default().as_bytes());
        h.write_u8(0xff);
        h.write(name.as_bytes());
        h.finish()
    }

    /// Room for stream `stream`: a name left out is never lost.
    fn ensure(&mut self, stream: usize) {
        if self.noted.len() <= stream {
            self.noted.resize_with(stream + 1, Prints::default);
            self.listing.resize_with(stream + 1, || None);
        }
    }

    /// Stream `stream` starts a list: what it notes replaces its notes
    /// when the list is complete.
    pub(super) fn listing(&mut self, stream: usize) {
        self.ensure(stream);
        self.listing[stream] = Some(Prints::default());
    }

    /// Stream `stream`'s list is complete.
    pub(super) fn listed(&mut self, stream: usize) {
        if let Some(done) = self.listing.get_mut(stream).and_then(Option::take)
            && let Some(noted) = self.noted.get_mut(stream)
        {
            *noted = done;
            noted.shrink_to_fit();
        }
    }

    /// The filter left this object out.
    pub(super) fn left_out(&mut self, stream: usize, namespace: Option<&str>, name: &str) {
        let print = self.print(namespace, name);
        self.ensure(stream);
        match &mut self.listing[stream] {
            Some(listing) => listing.insert(print),
            None => self.noted[stream].insert(print),
        };
    }

    /// The object was kept, or deleted: its name is no longer noted.
    pub(super) fn not_left_out(&mut self, stream: usize, namespace: Option<&str>, name: &str) {
        let print = self.print(namespace, name);
        self.forget(stream, print);
    }

    /// [`not_left_out`](Self::not_left_out) by the name's fingerprint.
    pub(super) fn forget(&mut self, stream: usize, print: u64) {
        if let Some(Some(listing)) = self.listing.get_mut(stream) {
            listing.remove(&print);
        }
        if let Some(noted) = self.noted.get_mut(stream) {
            noted.remove(&print);
        }
    }

    /// Whether an object of this name was left out (or one sharing its
    /// fingerprint): it may exist though the cache does not show it.
    pub(super) fn may_hold(&self, namespace: Option<&str>, name: &str) -> bool {
        let print = self.print(namespace, name);
        self.noted
            .iter()
            .chain(self.listing.iter().flatten())
            .any(|set| set.contains(&print))
    }

    /// How many names are noted.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.noted.iter().map(Prints::len).sum()
    }

    /// Whether no name is noted.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_left_out_is_held_until_kept_or_deleted() {
        let mut e = Elsewhere::new(1);
        assert!(!e.may_hold(Some("a"), "x"));
        e.left_out(0, Some("a"), "x");
        assert!(e.may_hold(Some("a"), "x"));
        assert!(!e.may_hold(Some("b"), "x"), "another namespace");
        assert!(!e.may_hold(Some("a"), "y"), "another name");
        assert!(!e.may_hold(None, "x"), "cluster-scoped");
        e.left_out(0, Some("a"), "x");
        e.not_left_out(0, Some("a"), "x");
        assert!(!e.may_hold(Some("a"), "x"), "noted once however often seen");
        assert!(e.is_empty());
    }

    #[test]
    fn namespace_and_name_do_not_run_together() {
        let mut e = Elsewhere::new(1);
        e.left_out(0, Some("ab"), "c");
        assert!(!e.may_hold(Some("a"), "bc"));
    }

    #[test]
    fn a_list_replaces_a_stream_s_notes_when_it_is_complete() {
        let mut e = Elsewhere::new(2);
        e.left_out(0, Some("a"), "gone");
        e.left_out(0, Some("a"), "stays");
        e.left_out(1, Some("b"), "other stream");
        e.listing(0);
        // Until the list is complete, the old notes still count.
        assert!(e.may_hold(Some("a"), "gone"));
        e.left_out(0, Some("a"), "stays");
        e.left_out(0, Some("a"), "new");
        assert!(e.may_hold(Some("a"), "new"), "noted during the list");
        e.listed(0);
        assert!(!e.may_hold(Some("a"), "gone"), "deleted while unwatched");
        assert!(e.may_hold(Some("a"), "stays"));
        assert!(e.may_hold(Some("a"), "new"));
        assert!(
            e.may_hold(Some("b"), "other stream"),
            "another stream's list"
        );
        assert_eq!(e.len(), 3);
    }

    #[test]
    fn a_name_kept_during_a_list_is_not_held() {
        let mut e = Elsewhere::new(1);
        e.left_out(0, None, "x");
        e.listing(0);
        e.left_out(0, None, "x");
        e.not_left_out(0, None, "x");
        e.listed(0);
        assert!(!e.may_hold(None, "x"));
    }

    #[test]
    fn a_stream_beyond_those_announced_loses_no_note() {
        let mut e = Elsewhere::new(1);
        e.left_out(3, None, "x");
        assert!(e.may_hold(None, "x"));
        e.listing(2);
        e.left_out(2, None, "y");
        e.listed(2);
        assert!(e.may_hold(None, "y"));
        e.not_left_out(3, None, "x");
        assert!(!e.may_hold(None, "x"));
    }
}
