//! Directory layouts: which replica set owns which part of the name-hash
//! space, for one directory (docs/distribute.md).
//!
//! A name's place is `name_hash(name)`, a 32-bit number; a layout divides
//! the whole 32-bit space into ranges, each owned by one set, and every
//! hash is owned by exactly one. A set's share is proportional to its
//! weight (its bricks' size with `cluster.weighted-rebalance`, else 1).
//!
//! A new directory gets one range per set, in set order, the first one
//! starting at a point taken from the directory itself (`fresh`), so that
//! the first set is not the first one of every directory. When sets are
//! added, removed or reweighted, `rebalanced` moves as little of the space
//! as the new weights allow: each set with more than its new share gives
//! the end of its ranges to the sets with less, and no hash changes owner
//! otherwise. A set may then own several ranges.
//!
//! This module is arithmetic only: no I/O, so that it is tested as such.

use mortar_core::Name;

/// The size of the hash space, 2^32.
const SPACE: u64 = 1 << 32;

/// Where a name falls in the hash space: the top 32 bits of its xxh64.
pub fn name_hash(name: &Name) -> u32 {
    (xxhash_rust::xxh64::xxh64(name.as_bytes(), 0) >> 32) as u32
}

/// Where the ranges of a new directory's layout start: a point taken
/// from its gfid, the same for every client.
pub fn start_of(dir: mortar_core::Gfid) -> u32 {
    (xxhash_rust::xxh64::xxh64(&dir.0, 1) >> 32) as u32
}

/// Hashes `start..=end`, owned by `set`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Range {
    pub start: u32,
    pub end: u32,
    pub set: u32,
}

impl Range {
    fn len(&self) -> u64 {
        self.end as u64 - self.start as u64 + 1
    }
}

/// Why ranges do not make a layout.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("no set owns hashes from {0:#010x}")]
    Hole(u32),
    #[error("two sets own hash {0:#010x}")]
    Overlap(u32),
    #[error("no set has a weight")]
    NoWeight,
    #[error("malformed layout ({0} bytes)")]
    Malformed(usize),
}

/// The version byte of the stored form.
const STORED_VERSION: u8 = 1;

/// A whole layout: ranges sorted by start, covering the space once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    ranges: Vec<Range>,
}

/// Each set's share of the space for `weights`: proportional, summing to
/// exactly 2^32 (the rounding's remainder goes to the largest fractions,
/// the earlier set first on a tie).
fn shares(weights: &[u64]) -> Result<Vec<u64>, LayoutError> {
    let total: u128 = weights.iter().map(|&w| w as u128).sum();
    if total == 0 {
        return Err(LayoutError::NoWeight);
    }
    let exact: Vec<(u64, u128)> = weights
        .iter()
        .map(|&w| {
            let x = w as u128 * SPACE as u128;
            ((x / total) as u64, x % total)
        })
        .collect();
    let mut out: Vec<u64> = exact.iter().map(|e| e.0).collect();
    let short = SPACE - out.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..weights.len()).filter(|&i| weights[i] > 0).collect();
    order.sort_by(|&a, &b| exact[b].1.cmp(&exact[a].1).then(a.cmp(&b)));
    for &i in order.iter().take(short as usize) {
        out[i] += 1;
    }
    Ok(out)
}

impl Layout {
    /// The layout of a new directory over sets of `weights`: one range
    /// per set with a weight, in set order, starting at `start`.
    pub fn fresh(weights: &[u64], start: u32) -> Result<Layout, LayoutError> {
        let shares = shares(weights)?;
        let mut ranges = Vec::new();
        let mut push = |start: u64, end: u64, set: usize| {
            ranges.push(Range {
                start: start as u32,
                end: end as u32,
                set: set as u32,
            })
        };
        // Laid out from 0 in set order, then turned by `start`: a range
        // that passes the top of the space goes on from 0.
        let mut at = 0u64;
        for (set, &n) in shares.iter().enumerate().filter(|s| *s.1 > 0) {
            let a = (at + start as u64) % SPACE;
            let b = a + n - 1;
            if b < SPACE {
                push(a, b, set);
            } else {
                push(a, SPACE - 1, set);
                push(0, b - SPACE, set);
            }
            at += n;
        }
        Ok(Layout::normalised(ranges))
    }

    /// A layout from ranges known to cover the space once.
    fn normalised(mut ranges: Vec<Range>) -> Layout {
        ranges.sort_by_key(|r| r.start);
        let mut out: Vec<Range> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match out.last_mut() {
                Some(last) if last.set == r.set && last.end as u64 + 1 == r.start as u64 => {
                    last.end = r.end
                }
                _ => out.push(r),
            }
        }
        Layout { ranges: out }
    }

    /// A layout from the ranges each set holds (what the copies of a
    /// directory on the sets say), if they cover the space exactly once.
    pub fn assemble(ranges: impl IntoIterator<Item = Range>) -> Result<Layout, LayoutError> {
        let mut all: Vec<Range> = ranges.into_iter().collect();
        all.sort_by_key(|r| (r.start, r.end));
        let mut next: u64 = 0;
        for r in &all {
            if r.end < r.start {
                return Err(LayoutError::Overlap(r.start));
            }
            match (r.start as u64).cmp(&next) {
                std::cmp::Ordering::Greater => return Err(LayoutError::Hole(next as u32)),
                std::cmp::Ordering::Less => return Err(LayoutError::Overlap(r.start)),
                std::cmp::Ordering::Equal => next = r.end as u64 + 1,
            }
        }
        if next != SPACE {
            return Err(LayoutError::Hole(next as u32));
        }
        Ok(Layout::normalised(all))
    }

    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    /// This layout with each set named by `ids[set]` instead (positions
    /// among the sets to the sets' stable ids).
    pub fn with_ids(&self, ids: &[u32]) -> Layout {
        Layout::normalised(
            self.ranges
                .iter()
                .map(|r| Range {
                    set: ids[r.set as usize],
                    ..*r
                })
                .collect(),
        )
    }

    /// The stored form (`trusted.mortar.layout`): a version byte, the
    /// generation, then start, end and set of each range, little-endian.
    pub fn encode(&self, generation: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + 12 * self.ranges.len());
        out.push(STORED_VERSION);
        out.extend_from_slice(&generation.to_le_bytes());
        for r in &self.ranges {
            for v in [r.start, r.end, r.set] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// The generation and layout `encode` stored, checked to cover the
    /// space once.
    pub fn decode(b: &[u8]) -> Result<(u64, Layout), LayoutError> {
        let bad = || LayoutError::Malformed(b.len());
        let (&version, rest) = b.split_first().ok_or_else(bad)?;
        if version != STORED_VERSION || rest.len() < 8 || (rest.len() - 8) % 12 != 0 {
            return Err(bad());
        }
        let generation = u64::from_le_bytes(rest[..8].try_into().unwrap());
        let word = |c: &[u8]| u32::from_le_bytes(c.try_into().unwrap());
        let ranges = rest[8..].chunks_exact(12).map(|c| Range {
            start: word(&c[..4]),
            end: word(&c[4..8]),
            set: word(&c[8..]),
        });
        Ok((generation, Layout::assemble(ranges)?))
    }

    /// The set owning `hash`.
    pub fn owner(&self, hash: u32) -> u32 {
        let i = self.ranges.partition_point(|r| r.start <= hash);
        // The first range starts at 0, so i >= 1.
        self.ranges[i - 1].set
    }

    /// The ranges set `set` owns.
    pub fn of_set(&self, set: u32) -> Vec<Range> {
        self.ranges
            .iter()
            .filter(|r| r.set == set)
            .copied()
            .collect()
    }

    /// How much of the space set `set` owns.
    pub fn share_of(&self, set: u32) -> u64 {
        self.ranges
            .iter()
            .filter(|r| r.set == set)
            .map(Range::len)
            .sum()
    }

    /// How much of the space each of `n` sets owns.
    pub fn owned(&self, n: usize) -> Vec<u64> {
        let mut out = vec![0; n];
        for r in &self.ranges {
            if let Some(o) = out.get_mut(r.set as usize) {
                *o += r.len();
            }
        }
        out
    }

    /// This layout moved to sets of `weights` (sets past the end of the
    /// old layout are new; a set of weight 0 leaves), moving as little of
    /// the space as possible: each set above its new share gives the ends
    /// of its ranges, last range first, to the sets below theirs, in set
    /// order.
    pub fn rebalanced(&self, weights: &[u64]) -> Result<Layout, LayoutError> {
        let n = weights.len().max(
            self.ranges
                .iter()
                .map(|r| r.set as usize + 1)
                .max()
                .unwrap_or(0),
        );
        let mut want = shares(weights)?;
        want.resize(n, 0);
        let have = self.owned(n);
        // What each set above its share gives up, cut from its ranges' ends.
        let mut kept: Vec<Range> = Vec::new();
        let mut freed: Vec<(u64, u64)> = Vec::new();
        let mut surplus: Vec<u64> = (0..n).map(|i| have[i].saturating_sub(want[i])).collect();
        for r in self.ranges.iter().rev() {
            let s = &mut surplus[r.set as usize];
            let cut = (*s).min(r.len());
            *s -= cut;
            if cut < r.len() {
                kept.push(Range {
                    end: (r.end as u64 - cut) as u32,
                    ..*r
                });
            }
            if cut > 0 {
                freed.push((r.end as u64 + 1 - cut, r.end as u64));
            }
        }
        freed.sort();
        // Handed out, in order, to the sets below their share.
        let mut deficit: Vec<(usize, u64)> = (0..n)
            .filter(|&i| want[i] > have[i])
            .map(|i| (i, want[i] - have[i]))
            .collect();
        let mut d = 0;
        for (mut start, end) in freed {
            while start <= end {
                let (set, need) = &mut deficit[d];
                let take = (*need).min(end - start + 1);
                kept.push(Range {
                    start: start as u32,
                    end: (start + take - 1) as u32,
                    set: *set as u32,
                });
                *need -= take;
                start += take;
                if *need == 0 {
                    d += 1;
                }
            }
        }
        Ok(Layout::normalised(kept))
    }

    /// How much of the space has another owner in `other`.
    pub fn moved_to(&self, other: &Layout) -> u64 {
        let (mut i, mut j, mut at, mut moved) = (0, 0, 0u64, 0u64);
        while at < SPACE {
            let (a, b) = (&self.ranges[i], &other.ranges[j]);
            let end = (a.end as u64).min(b.end as u64);
            if a.set != b.set {
                moved += end - at + 1;
            }
            at = end + 1;
            if a.end as u64 == end {
                i += 1;
            }
            if b.end as u64 == end {
                j += 1;
            }
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that `l` covers the space once (every hash has exactly one
    /// owner) and that `owner` agrees with the ranges.
    fn assert_whole(l: &Layout) {
        assert_eq!(Layout::assemble(l.ranges().iter().copied()).as_ref(), Ok(l));
        for r in l.ranges() {
            assert_eq!(l.owner(r.start), r.set);
            assert_eq!(l.owner(r.end), r.set);
            assert_eq!(l.owner(r.start + (r.end - r.start) / 2), r.set);
        }
    }

    fn weights(rng: &mut fastrand::Rng, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| match rng.u8(0..4) {
                0 => 1,
                1 => rng.u64(1..1 << 40),
                _ => rng.u64(1..1000),
            })
            .collect()
    }

    #[test]
    fn a_fresh_layout_covers_every_hash_once_with_each_set_its_weighted_share() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..2000 {
            let n = rng.usize(1..40);
            let w = weights(&mut rng, n);
            let l = Layout::fresh(&w, rng.u32(..)).unwrap();
            assert_whole(&l);
            let want = shares(&w).unwrap();
            assert_eq!(l.owned(n), want);
            assert_eq!(want.iter().sum::<u64>(), SPACE);
            // Proportional to the weights, to within one hash.
            let total: u128 = w.iter().map(|&x| x as u128).sum();
            for (i, &s) in want.iter().enumerate() {
                let exact = w[i] as u128 * SPACE as u128 / total;
                assert!(s as u128 == exact || s as u128 == exact + 1);
            }
        }
    }

    #[test]
    fn equal_weights_give_equal_ranges_in_set_order() {
        let l = Layout::fresh(&[1, 1, 1, 1], 0).unwrap();
        let q = 1u64 << 30;
        for (i, r) in l.ranges().iter().enumerate() {
            assert_eq!(
                (r.start as u64, r.end as u64, r.set),
                (i as u64 * q, (i as u64 + 1) * q - 1, i as u32)
            );
        }
        // Started elsewhere, the first set's range wraps around.
        let l = Layout::fresh(&[1, 1], 1 << 31 | 5).unwrap();
        assert_eq!(l.owner((1 << 31) + 4), 1);
        assert_eq!(l.owner((1 << 31) + 5), 0);
        assert_eq!(l.owner(u32::MAX), 0);
        assert_eq!(l.owner(4), 0);
        assert_eq!(l.owner(5), 1);
        assert_whole(&l);
    }

    #[test]
    fn a_reweighted_layout_moves_no_more_than_the_shares_changed() {
        let mut rng = fastrand::Rng::with_seed(11);
        for _ in 0..2000 {
            let n = rng.usize(1..20);
            let mut l = Layout::fresh(&weights(&mut rng, n), rng.u32(..)).unwrap();
            // Several changes in a row: sets added, removed, reweighted.
            for _ in 0..4 {
                let m = (n as isize + rng.isize(-2..6)).max(1) as usize;
                let mut w = weights(&mut rng, m);
                if m > 1 && rng.bool() {
                    w[rng.usize(..m)] = 0;
                }
                let old = l.owned(m.max(n + 8));
                let next = l.rebalanced(&w).unwrap();
                assert_whole(&next);
                let want = shares(&w).unwrap();
                let got = next.owned(want.len().max(n + 8));
                assert_eq!(&got[..want.len()], &want[..]);
                assert!(
                    got[want.len()..].iter().all(|&x| x == 0),
                    "a set without weight kept hashes"
                );
                // The least any layout with these shares could move.
                let least: u64 = (0..old.len())
                    .map(|i| old[i].saturating_sub(want.get(i).copied().unwrap_or(0)))
                    .sum();
                assert_eq!(l.moved_to(&next), least);
                l = next;
            }
        }
    }

    #[test]
    fn adding_a_set_to_n_equal_ones_moves_one_share_of_n_plus_one() {
        for n in 1..30u64 {
            let l = Layout::fresh(&vec![1; n as usize], 12345).unwrap();
            let more = l.rebalanced(&vec![1; n as usize + 1]).unwrap();
            let moved = l.moved_to(&more);
            assert!(moved.abs_diff(SPACE / (n + 1)) <= 1, "n={n} moved {moved}");
            // Every set gives a piece: n pieces at most for the new one.
            assert!(more.of_set(n as u32).len() as u64 <= n);
        }
    }

    #[test]
    fn ranges_that_miss_or_overlap_are_not_a_layout() {
        let r = |start, end, set| Range { start, end, set };
        assert_eq!(
            Layout::assemble([r(0, 10, 0), r(12, u32::MAX, 1)]),
            Err(LayoutError::Hole(11))
        );
        assert_eq!(
            Layout::assemble([r(0, 10, 0), r(10, u32::MAX, 1)]),
            Err(LayoutError::Overlap(10))
        );
        assert_eq!(Layout::assemble([r(0, 10, 0)]), Err(LayoutError::Hole(11)));
        assert_eq!(Layout::assemble([]), Err(LayoutError::Hole(0)));
        assert!(Layout::assemble([r(0, u32::MAX, 3)]).is_ok());
        assert_eq!(Layout::fresh(&[0, 0], 0), Err(LayoutError::NoWeight));
    }

    #[test]
    fn names_spread_over_the_space() {
        let l = Layout::fresh(&[1; 8], 0).unwrap();
        let mut per = [0u32; 8];
        for i in 0..80_000 {
            per[l.owner(name_hash(&Name::new(format!("file-{i}")).unwrap())) as usize] += 1;
        }
        assert!(per.iter().all(|&c| (9_000..11_000).contains(&c)), "{per:?}");
    }

    #[test]
    fn the_stored_form_reads_back_and_refuses_what_is_not_a_layout() {
        let mut rng = fastrand::Rng::with_seed(3);
        for _ in 0..500 {
            let n = rng.usize(1..30);
            let ids: Vec<u32> = (0..n as u32).map(|i| i * 7 + 100).collect();
            let l = Layout::fresh(&weights(&mut rng, n), rng.u32(..))
                .unwrap()
                .with_ids(&ids);
            assert!(l.ranges().iter().all(|r| ids.contains(&r.set)));
            let generation = rng.u64(..);
            let b = l.encode(generation);
            assert_eq!(Layout::decode(&b), Ok((generation, l.clone())));
            // Cut short, or one range dropped: refused.
            assert!(Layout::decode(&b[..b.len() - 1]).is_err());
            if l.ranges().len() > 1 {
                assert!(Layout::decode(&b[..b.len() - 12]).is_err());
            }
        }
        assert_eq!(Layout::decode(&[]), Err(LayoutError::Malformed(0)));
        let mut other = Layout::fresh(&[1], 0).unwrap().encode(1);
        other[0] = 9;
        assert_eq!(Layout::decode(&other), Err(LayoutError::Malformed(21)));
    }
}
