//! The byte ranges of an object's data that changed on a brick since its
//! copies (or fragments) last agreed: what a heal compares and rebuilds
//! instead of the whole file (granular heal, docs/disperse.md "Heal").
//!
//! A brick keeps them for every object in its heal index
//! (`brick::index`): in memory while change sessions are open, in the
//! object's `CHANGED_XATTR` once they end and the object stays pending.
//! An object in the index whose ranges are not known (its brick stopped
//! without writing them down) is `Changed::Whole`.

/// Where a brick keeps an object's changed ranges between sessions, and the
/// name a client asks for them by (`Fop::Getxattr`, answered by the brick
/// from what it knows, written or not) or adds to them with
/// (`Fop::Setxattr` of an encoded `Changed`, within its change session: a
/// copy found damaged where nothing was written).
pub const CHANGED_XATTR: &str = "trusted.mortar.changed";

/// Ranges kept at most: past this the two closest are joined (the set
/// grows coarser, never smaller), so the record stays a few hundred bytes.
pub const MAX_RANGES: usize = 32;

/// The byte ranges of an object changed on one brick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Changed {
    /// Sorted, disjoint, not touching, none empty: `start..end`.
    Ranges(Vec<(u64, u64)>),
    /// Anything may have changed.
    Whole,
}

impl Default for Changed {
    fn default() -> Self {
        Changed::Ranges(Vec::new())
    }
}

impl Changed {
    pub fn is_empty(&self) -> bool {
        matches!(self, Changed::Ranges(r) if r.is_empty())
    }

    /// Adds `start..end` (nothing if empty).
    pub fn add(&mut self, start: u64, end: u64) {
        let Changed::Ranges(r) = self else { return };
        if start >= end {
            return;
        }
        if start == 0 && end == u64::MAX {
            *self = Changed::Whole;
            return;
        }
        // The first range that ends at or after `start`: ranges before it
        // are untouched, it and those after it that begin by `end` merge.
        let i = r.partition_point(|&(_, e)| e < start);
        let mut j = i;
        let (mut s, mut e) = (start, end);
        while j < r.len() && r[j].0 <= e {
            s = s.min(r[j].0);
            e = e.max(r[j].1);
            j += 1;
        }
        r.splice(i..j, [(s, e)]);
        if r.len() > MAX_RANGES {
            let k = (1..r.len())
                .min_by_key(|&k| r[k].0 - r[k - 1].1)
                .expect("more than one range");
            r[k - 1].1 = r[k].1;
            r.remove(k);
        }
    }

    /// Adds every range of `other`.
    pub fn merge(&mut self, other: &Changed) {
        match other {
            Changed::Whole => *self = Changed::Whole,
            Changed::Ranges(o) => o.iter().for_each(|&(s, e)| self.add(s, e)),
        }
    }

    /// The ranges within `0..end`, in order (`Whole`: all of it).
    pub fn within(&self, end: u64) -> Vec<(u64, u64)> {
        match self {
            Changed::Whole if end > 0 => vec![(0, end)],
            Changed::Whole => Vec::new(),
            Changed::Ranges(r) => r
                .iter()
                .filter(|&&(s, _)| s < end)
                .map(|&(s, e)| (s, e.min(end)))
                .collect(),
        }
    }

    /// The bytes within `0..end` the ranges cover.
    pub fn bytes_within(&self, end: u64) -> u64 {
        self.within(end).iter().map(|(s, e)| e - s).sum()
    }

    /// As stored: empty for no range, one byte 0xff for `Whole`, else 16
    /// little-endian bytes (start, end) per range.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Changed::Whole => vec![0xff],
            Changed::Ranges(r) => r
                .iter()
                .flat_map(|&(s, e)| s.to_le_bytes().into_iter().chain(e.to_le_bytes()))
                .collect(),
        }
    }

    /// What `encode` made; anything else (a record this code cannot read)
    /// is `Whole`, never fewer ranges than were meant.
    pub fn decode(b: &[u8]) -> Changed {
        if !b.len().is_multiple_of(16) {
            return Changed::Whole;
        }
        let mut c = Changed::default();
        for p in b.chunks_exact(16) {
            let s = u64::from_le_bytes(p[..8].try_into().unwrap());
            let e = u64::from_le_bytes(p[8..].try_into().unwrap());
            if s >= e {
                return Changed::Whole;
            }
            c.add(s, e);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(r: &[(u64, u64)]) -> Changed {
        Changed::Ranges(r.to_vec())
    }

    #[test]
    fn ranges_that_meet_or_overlap_are_joined_and_others_kept_in_order() {
        let mut c = Changed::default();
        c.add(100, 200);
        c.add(0, 10);
        c.add(300, 400);
        assert_eq!(c, of(&[(0, 10), (100, 200), (300, 400)]));
        c.add(200, 250);
        assert_eq!(c, of(&[(0, 10), (100, 250), (300, 400)]));
        c.add(5, 320);
        assert_eq!(c, of(&[(0, 400)]));
        c.add(7, 7);
        assert_eq!(c, of(&[(0, 400)]));
        let mut seq = Changed::default();
        for n in 0..1000u64 {
            seq.add(n * 4096, (n + 1) * 4096);
        }
        assert_eq!(
            seq,
            of(&[(0, 1000 * 4096)]),
            "a stream of writes is one range"
        );
    }

    #[test]
    fn past_the_cap_the_closest_ranges_join_and_nothing_is_lost() {
        let mut c = Changed::default();
        for n in 0..(MAX_RANGES as u64 + 10) {
            // Gaps of 1000 except after range 5, whose gap is 10.
            let at = n * 1100 + if n > 5 { 0 } else { 990 };
            c.add(at, at + 100);
        }
        let Changed::Ranges(r) = &c else { panic!() };
        assert_eq!(r.len(), MAX_RANGES);
        for n in 0..(MAX_RANGES as u64 + 10) {
            let at = n * 1100 + if n > 5 { 0 } else { 990 };
            assert!(r.iter().any(|&(s, e)| s <= at && at + 100 <= e), "{n}");
        }
    }

    #[test]
    fn whole_absorbs_everything_and_clips_to_the_file() {
        let mut c = of(&[(10, 20)]);
        c.merge(&Changed::Whole);
        assert_eq!(c, Changed::Whole);
        c.add(1, 2);
        assert_eq!(c.within(50), vec![(0, 50)]);
        assert!(Changed::Whole.within(0).is_empty());
        let r = of(&[(0, 10), (40, u64::MAX)]);
        assert_eq!(r.within(30), vec![(0, 10)]);
        assert_eq!(r.within(100), vec![(0, 10), (40, 100)]);
        assert_eq!(r.bytes_within(100), 70);
    }

    #[test]
    fn encoding_round_trips_and_what_cannot_be_read_is_whole() {
        for c in [
            Changed::default(),
            Changed::Whole,
            of(&[(0, 1), (5, u64::MAX)]),
        ] {
            assert_eq!(Changed::decode(&c.encode()), c);
        }
        assert_eq!(Changed::decode(&[1, 2, 3]), Changed::Whole);
        let mut bad = of(&[(9, 3)]).encode();
        assert_eq!(Changed::decode(&bad), Changed::Whole);
        bad.clear();
        assert!(Changed::decode(&bad).is_empty());
    }
}
