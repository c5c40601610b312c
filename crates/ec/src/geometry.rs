//! Where a file's bytes sit in its fragments. A stripe is K units of
//! `unit` bytes; stripe `s` of the file (bytes `s·K·unit ..`) puts its
//! unit `i` at offset `s·unit` of data fragment `i`, and its parity at
//! offset `s·unit` of each parity fragment. So fragment `i` is the file's
//! units `i, i + K, i + 2K, …` one after another, and a range of the file
//! is, in each data fragment, one contiguous range: a read asks each brick
//! for one piece. A fragment holds only as many bytes as the file gives it
//! (`content_len`; the parity as many as fragment 0): the last stripe is
//! not padded.

use std::ops::Range;

/// The layout of a `K + R` set's files with a given stripe unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    k: u64,
    unit: u64,
}

/// A run of file bytes held by one data fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub fragment: usize,
    /// Where the run starts in the fragment.
    pub fragment_offset: u64,
    /// Where it starts in the file.
    pub file_offset: u64,
    pub len: u64,
}

impl Geometry {
    /// `k` data fragments of `unit` bytes per stripe; both at least 1.
    pub fn new(k: usize, unit: u64) -> Geometry {
        assert!(
            k >= 1 && unit >= 1,
            "a stripe needs data fragments and a unit"
        );
        Geometry { k: k as u64, unit }
    }

    pub fn k(&self) -> usize {
        self.k as usize
    }

    pub fn unit(&self) -> u64 {
        self.unit
    }

    /// File bytes per stripe.
    pub fn stripe_bytes(&self) -> u64 {
        self.k * self.unit
    }

    /// The stripes that bytes `offset .. offset + len` touch.
    pub fn stripes(&self, offset: u64, len: u64) -> Range<u64> {
        if len == 0 {
            return 0..0;
        }
        let sb = self.stripe_bytes();
        offset / sb..(offset + len).div_ceil(sb)
    }

    /// The range widened to whole stripes: what a write that is not
    /// stripe-aligned must read first to code the parity anew.
    pub fn whole_stripes(&self, offset: u64, len: u64) -> Range<u64> {
        let s = self.stripes(offset, len);
        s.start * self.stripe_bytes()..s.end * self.stripe_bytes()
    }

    /// The bytes of a file of `size` bytes in whole stripes' worth of
    /// units per fragment: how far its stripes reach in every fragment
    /// (the last stripe's missing bytes are zeros, as a hole reads).
    pub fn fragment_len(&self, size: u64) -> u64 {
        size.div_ceil(self.stripe_bytes()) * self.unit
    }

    /// How many bytes of data fragment `fragment` a file of `size` bytes
    /// fills: its units, the last one cut where the file ends. Fragments
    /// are not padded to whole stripes: a file smaller than a unit is all
    /// in fragment 0 (and the parity), and the other data fragments hold
    /// nothing (docs/disperse.md, "Small files").
    pub fn content_len(&self, size: u64, fragment: usize) -> u64 {
        let sb = self.stripe_bytes();
        let (full, rem) = (size / sb, size % sb);
        full * self.unit
            + rem
                .saturating_sub(fragment as u64 * self.unit)
                .min(self.unit)
    }

    /// How many bytes of each parity fragment a file of `size` bytes
    /// fills: as many as its longest data fragment, fragment 0.
    pub fn parity_len(&self, size: u64) -> u64 {
        self.content_len(size, 0)
    }

    /// The range of every fragment that the stripes bytes `offset ..
    /// offset + len` touch occupy: what a degraded read or change takes
    /// from each surviving fragment to rebuild a lost one.
    pub fn stripe_range(&self, offset: u64, len: u64) -> Range<u64> {
        let s = self.stripes(offset, len);
        s.start * self.unit..s.end * self.unit
    }

    /// The runs of file bytes `offset .. offset + len`, in file order.
    pub fn pieces(&self, offset: u64, len: u64) -> impl Iterator<Item = Piece> + '_ {
        let end = offset + len;
        let mut at = offset;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let sb = self.stripe_bytes();
            let (stripe, within) = (at / sb, at % sb);
            let (fragment, u) = (within / self.unit, within % self.unit);
            let n = (self.unit - u).min(end - at);
            let p = Piece {
                fragment: fragment as usize,
                fragment_offset: stripe * self.unit + u,
                file_offset: at,
                len: n,
            };
            at += n;
            Some(p)
        })
    }

    /// For each data fragment, the one range of it that holds bytes of
    /// `offset .. offset + len` (empty where none).
    pub fn fragment_ranges(&self, offset: u64, len: u64) -> Vec<Range<u64>> {
        let mut r: Vec<Option<Range<u64>>> = vec![None; self.k()];
        for p in self.pieces(offset, len) {
            let e = &mut r[p.fragment];
            let run = p.fragment_offset..p.fragment_offset + p.len;
            *e = Some(match e.take() {
                None => run,
                Some(x) => {
                    debug_assert_eq!(x.end, run.start, "a fragment's runs follow each other");
                    x.start..run.end
                }
            });
        }
        r.into_iter().map(|x| x.unwrap_or(0..0)).collect()
    }

    /// Puts together file bytes `offset .. offset + len` from what each
    /// data fragment gave for its `fragment_ranges` (shorter where the
    /// fragment ends early: the rest reads as zeros).
    pub fn gather(&self, offset: u64, len: u64, fragments: &[&[u8]]) -> Vec<u8> {
        let ranges = self.fragment_ranges(offset, len);
        // The pieces come in file order: each is appended (no zeroing of
        // the whole first, which cost as much as a copy on large reads).
        let mut out = Vec::with_capacity(len as usize);
        for p in self.pieces(offset, len) {
            let base = ranges[p.fragment].start;
            let src = fragments[p.fragment];
            let from = (p.fragment_offset - base) as usize;
            let to = (from + p.len as usize).min(src.len());
            let had = from.min(to)..to;
            out.extend_from_slice(&src[had.clone()]);
            out.resize(out.len() + p.len as usize - had.len(), 0);
        }
        out
    }

    /// Cuts file bytes starting at a stripe boundary (`offset`), whole
    /// stripes of them, into the K data fragments' bytes: the inverse of
    /// `gather`, and what `Codec::encode` takes.
    pub fn scatter(&self, offset: u64, data: &[u8]) -> Vec<Vec<u8>> {
        let sb = self.stripe_bytes();
        assert!(
            offset.is_multiple_of(sb) && (data.len() as u64).is_multiple_of(sb),
            "scatter takes whole stripes"
        );
        let per = (data.len() as u64 / sb * self.unit) as usize;
        let mut out = vec![Vec::with_capacity(per); self.k()];
        for (i, unit) in data.chunks(self.unit as usize).enumerate() {
            out[i % self.k()].extend_from_slice(unit);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_range_within_one_unit_is_one_piece() {
        let g = Geometry::new(4, 100);
        let p: Vec<_> = g.pieces(1_234, 50).collect();
        // Stripe 3 (1200..1600), unit 0, 34 bytes in.
        assert_eq!(
            p,
            vec![Piece {
                fragment: 0,
                fragment_offset: 334,
                file_offset: 1_234,
                len: 50
            }]
        );
        assert_eq!(g.stripes(1_234, 50), 3..4);
        assert_eq!(g.whole_stripes(1_234, 50), 1_200..1_600);
    }

    #[test]
    fn fragments_have_whole_stripes_of_units() {
        let g = Geometry::new(4, 16_384);
        assert_eq!(g.fragment_len(0), 0);
        assert_eq!(g.fragment_len(1), 16_384);
        assert_eq!(g.fragment_len(65_536), 16_384);
        assert_eq!(g.fragment_len(65_537), 32_768);
        assert_eq!(g.stripes(0, 0), 0..0);
    }

    #[test]
    fn fragments_are_filled_only_as_far_as_the_file_goes() {
        let g = Geometry::new(4, 100);
        // A small file: fragment 0 only.
        assert_eq!(
            (0..4).map(|i| g.content_len(40, i)).collect::<Vec<_>>(),
            [40, 0, 0, 0]
        );
        // One stripe and 150 bytes: a whole unit in fragment 0, half in 1.
        let c: Vec<u64> = (0..4).map(|i| g.content_len(550, i)).collect();
        assert_eq!(c, [200, 150, 100, 100]);
        assert_eq!(g.parity_len(550), 200);
        assert_eq!(g.stripe_range(450, 10), 100..200);
        assert_eq!(g.stripe_range(0, 0), 0..0);
    }

    #[test]
    fn a_short_fragment_reads_as_zeros() {
        let g = Geometry::new(2, 4);
        // File bytes 0..8 are units 0 (fragment 0) and 1 (fragment 1).
        let out = g.gather(0, 8, &[&[1, 2, 3, 4], &[5, 6]]);
        assert_eq!(out, vec![1, 2, 3, 4, 5, 6, 0, 0]);
    }

    proptest! {
        /// The pieces cover the range once, in order, each within one
        /// unit of one fragment, where the layout says.
        #[test]
        fn pieces_tile_the_range(k in 1usize..9, unit in 1u64..300, offset in 0u64..5_000, len in 0u64..3_000) {
            let g = Geometry::new(k, unit);
            let mut at = offset;
            for p in g.pieces(offset, len) {
                prop_assert_eq!(p.file_offset, at);
                prop_assert!(p.len >= 1 && p.len <= unit);
                let sb = g.stripe_bytes();
                prop_assert_eq!(p.fragment as u64, at % sb / unit);
                prop_assert_eq!(p.fragment_offset, at / sb * unit + at % unit);
                prop_assert_eq!(p.fragment_offset / unit, (p.fragment_offset + p.len - 1) / unit);
                at += p.len;
            }
            prop_assert_eq!(at, offset + len);
        }

        /// The data fragments hold the file's bytes, no more: their
        /// contents add up to its size, and each ends where the layout
        /// puts the file's last byte of it.
        #[test]
        fn contents_add_up_to_the_file(k in 1usize..9, unit in 1u64..300, size in 0u64..20_000) {
            let g = Geometry::new(k, unit);
            let total: u64 = (0..k).map(|i| g.content_len(size, i)).sum();
            prop_assert_eq!(total, size);
            for p in g.pieces(0, size) {
                prop_assert!(p.fragment_offset + p.len <= g.content_len(size, p.fragment));
            }
            prop_assert!(g.parity_len(size) <= g.fragment_len(size));
        }

        /// Scattering whole stripes and gathering any range of them gives
        /// the file's bytes back.
        #[test]
        fn gather_inverts_scatter(k in 1usize..7, unit in 1u64..64, stripes in 1u64..6, a in 0u64..10_000, b in 0u64..10_000) {
            let g = Geometry::new(k, unit);
            let size = stripes * g.stripe_bytes();
            let file: Vec<u8> = (0..size).map(|i| (i * 7 + i / 251) as u8).collect();
            let frags = g.scatter(0, &file);
            for f in &frags {
                prop_assert_eq!(f.len() as u64, g.fragment_len(size));
            }
            let (x, y) = (a % size, b % size);
            let (lo, hi) = (x.min(y), x.max(y));
            let ranges = g.fragment_ranges(lo, hi - lo);
            let parts: Vec<&[u8]> = frags
                .iter()
                .zip(&ranges)
                .map(|(f, r)| &f[r.start as usize..r.end as usize])
                .collect();
            prop_assert_eq!(g.gather(lo, hi - lo, &parts), file[lo as usize..hi as usize].to_vec());
        }
    }
}
