//! What a change of a file's bytes asks of its fragments: a write and a
//! truncation, planned here without I/O and carried out by the disperse
//! translator.
//!
//! Each fragment of a file of `size` bytes is, as a file on its brick,
//! `size` bytes long: its content (`Geometry::content_len`, `parity_len`)
//! and a hole after it. So every fragment's length is the file's size, and
//! one brick's answer to a stat is the file's (docs/disperse.md).
//!
//! A stripe a write covers whole, or from its start past every old byte
//! it held (a small file written over), has its parity coded from the new
//! bytes alone. A stripe it covers in part has its parity brought up to date
//! from a delta: the old bytes of the range the write changes, and the old
//! parity of that range, are read first (`Need`), and nothing else. Bytes
//! past the old end of the file are zeros, and are not read.
//!
//! Every fragment takes at most one write per change, of one contiguous
//! range, so that a brick is asked once.

use crate::{Codec, CodecError, Geometry};
use std::ops::Range;

/// Old bytes a change must read before it can code its parity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    /// 0..K are the data fragments, K..K+R the parity.
    pub fragment: usize,
    pub range: Range<u64>,
}

/// What one fragment is to write: `bytes` at `offset`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FragmentWrite {
    pub offset: u64,
    pub bytes: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChangeError {
    /// The old bytes of a data fragment are needed for the parity and
    /// were not given: rebuild them from the other fragments first.
    #[error("the old bytes of data fragment {0} are needed and missing")]
    Missing(usize),
    #[error("{0}")]
    Codec(#[from] CodecError),
}

/// One stripe a change touches.
struct Stripe {
    /// The stripe's first byte in each fragment.
    base: u64,
    /// Whether the change gives every byte of the stripe.
    whole: bool,
    /// Where the old content its parity still depends on ends: the file's
    /// old size, or the stripe's start when the change covers every old
    /// byte the stripe held (the rest of it is zeros before and after).
    old_end: u64,
    /// The data units it changes: (unit, in-unit start, in-unit end).
    units: Vec<(usize, u64, u64)>,
    /// The in-unit range of the parity it changes.
    parity: Range<u64>,
}

impl Stripe {
    fn new(base: u64, units: Vec<(usize, u64, u64)>, whole: bool, old_end: u64) -> Stripe {
        let lo = units.iter().map(|u| u.1).min().unwrap_or(0);
        let hi = units.iter().map(|u| u.2).max().unwrap_or(0);
        Stripe {
            base,
            whole,
            old_end,
            units,
            parity: lo..hi,
        }
    }
}

/// The old bytes a stripe's parity delta needs, appended to `needs`:
/// those of each unit it changes and the parity of their range, as far as
/// the file's old content (`old_size`) goes (past it they are zeros).
fn stripe_needs(g: Geometry, r: usize, s: &Stripe, old_size: u64, needs: &mut Vec<Need>) {
    for &(i, a, b) in &s.units {
        if let Some(range) = clip(s.base + a..s.base + b, g.content_len(old_size, i)) {
            needs.push(Need { fragment: i, range });
        }
    }
    let p = s.base + s.parity.start..s.base + s.parity.end;
    if let Some(range) = clip(p, g.parity_len(old_size)) {
        needs.extend((0..r).map(|j| Need {
            fragment: g.k() + j,
            range: range.clone(),
        }));
    }
}

/// The new parity of the range `s.parity` of a stripe whose units change
/// from their old bytes (taken from `old`, in `stripe_needs` order) to
/// `new(unit, start, end)` (None: to zeros); None for a parity fragment
/// whose old bytes are missing.
fn stripe_parity<'n, B: AsRef<[u8]>>(
    codec: &Codec,
    g: Geometry,
    s: &Stripe,
    old_size: u64,
    old: &mut OldBytes<'_, B>,
    new: impl Fn(usize, u64, u64) -> Option<&'n [u8]>,
) -> Result<Vec<Option<Vec<u8>>>, ChangeError> {
    let mut deltas = Vec::with_capacity(s.units.len());
    for &(i, a, b) in &s.units {
        let mut d = old
            .take(i, s.base + a..s.base + b, g.content_len(old_size, i))
            .ok_or(ChangeError::Missing(i))?;
        if let Some(n) = new(i, a, b) {
            xor_into(&mut d, n);
        }
        deltas.push((i, a, d));
    }
    let range = s.base + s.parity.start..s.base + s.parity.end;
    let plen_old = g.parity_len(old_size);
    let p: Vec<Option<Vec<u8>>> = (0..codec.r())
        .map(|j| old.take(g.k() + j, range.clone(), plen_old))
        .collect();
    Ok(delta_parity(codec, p, &deltas, s.parity.start)?)
}

fn clip(r: Range<u64>, end: u64) -> Option<Range<u64>> {
    let r = r.start..r.end.min(end);
    (r.start < r.end).then_some(r)
}

/// Takes the old bytes of each need in turn (shorter answers read as
/// zeros after their end; None: the fragment could not give them).
struct OldBytes<'a, B> {
    needs: std::slice::Iter<'a, Need>,
    old: std::slice::Iter<'a, Option<B>>,
}

impl<B: AsRef<[u8]>> OldBytes<'_, B> {
    /// The old bytes of `range` of `fragment`, which must be the next need
    /// when it is one (`range` within the old content); zeros when it is
    /// past the old content.
    fn take(&mut self, fragment: usize, range: Range<u64>, content: u64) -> Option<Vec<u8>> {
        let mut out = vec![0u8; (range.end - range.start) as usize];
        let Some(r) = clip(range.clone(), content) else {
            return Some(out);
        };
        let need = self.needs.next().expect("needs follow the plan");
        debug_assert_eq!((need.fragment, &need.range), (fragment, &r));
        let got = self.old.next().expect("one answer per need");
        let got = got.as_ref()?.as_ref();
        let n = got.len().min(out.len());
        out[..n].copy_from_slice(&got[..n]);
        Some(out)
    }
}

/// The parity of a range of one stripe after its data units changed by
/// `deltas` (unit, in-unit start, old XOR new), from its old parity `old`
/// (which starts at in-unit offset `start`); a parity fragment whose old
/// bytes are missing stays None.
fn delta_parity(
    codec: &Codec,
    old: Vec<Option<Vec<u8>>>,
    deltas: &[(usize, u64, Vec<u8>)],
    start: u64,
) -> Result<Vec<Option<Vec<u8>>>, CodecError> {
    if old.iter().all(Option::is_none) {
        return Ok(old);
    }
    let len = old.iter().flatten().map(Vec::len).next().unwrap_or(0);
    let have: Vec<bool> = old.iter().map(Option::is_some).collect();
    let mut bufs: Vec<Vec<u8>> = old
        .into_iter()
        .map(|x| x.unwrap_or_else(|| vec![0; len]))
        .collect();
    for (i, a, d) in deltas {
        let at = (a - start) as usize;
        let mut rows: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[at..at + d.len()]).collect();
        codec.update(*i, d, &mut rows)?;
    }
    Ok(bufs
        .into_iter()
        .zip(have)
        .map(|(b, h)| h.then_some(b))
        .collect())
}

fn xor_into(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= s;
    }
}

/// A write of `len` bytes at `offset` to a file of `old_size` bytes.
pub struct Write {
    g: Geometry,
    r: usize,
    offset: u64,
    len: u64,
    old_size: u64,
    needs: Vec<Need>,
}

impl Write {
    pub fn new(g: Geometry, r: usize, offset: u64, len: u64, old_size: u64) -> Write {
        let mut w = Write {
            g,
            r,
            offset,
            len,
            old_size,
            needs: Vec::new(),
        };
        w.needs = w.plan_needs();
        w
    }

    /// The file's size once written.
    pub fn new_size(&self) -> u64 {
        if self.len == 0 {
            return self.old_size;
        }
        self.old_size.max(self.offset + self.len)
    }

    /// The old bytes to read first, in order (none for a write of whole
    /// stripes, or past the old end of the file).
    pub fn needs(&self) -> &[Need] {
        &self.needs
    }

    fn stripes(&self) -> impl Iterator<Item = Stripe> + '_ {
        let (g, sb, u) = (self.g, self.g.stripe_bytes(), self.g.unit());
        let end = self.offset + self.len;
        g.stripes(self.offset, self.len).map(move |s| {
            let (lo, hi) = (self.offset.max(s * sb), end.min((s + 1) * sb));
            let units = g
                .pieces(lo, hi - lo)
                .map(|p| {
                    let a = p.fragment_offset - s * u;
                    (p.fragment, a, a + p.len)
                })
                .collect();
            // A write from the stripe's start past every old byte in it
            // (a small file written over whole) leaves none of them: its
            // parity is coded from the new bytes, nothing is read.
            let start = s * sb;
            let fresh = lo == start && hi >= self.old_size.min(start + sb);
            let old_end = match fresh {
                true => start.min(self.old_size),
                false => self.old_size,
            };
            Stripe::new(s * u, units, hi - lo == sb, old_end)
        })
    }

    fn plan_needs(&self) -> Vec<Need> {
        let mut needs = Vec::new();
        for s in self.stripes().filter(|s| !s.whole) {
            stripe_needs(self.g, self.r, &s, s.old_end, &mut needs);
        }
        needs
    }

    /// What each fragment (K data, then R parity) is to write, given the
    /// new bytes and the old bytes of each need (`old[n]` answers
    /// `needs()[n]`; None where that fragment could not give them). A
    /// parity fragment whose old bytes are missing is left out (None): the
    /// translator blames it. A data fragment's are needed for the parity:
    /// without them, `ChangeError::Missing` (rebuild them first).
    pub fn writes<B: AsRef<[u8]>>(
        &self,
        codec: &Codec,
        data: &[u8],
        old: &[Option<B>],
    ) -> Result<Vec<Option<FragmentWrite>>, ChangeError> {
        assert_eq!(
            data.len() as u64,
            self.len,
            "the data the write was planned for"
        );
        assert_eq!(old.len(), self.needs.len(), "one answer per need");
        let (k, g) = (self.g.k(), self.g);
        let mut out: Vec<Option<FragmentWrite>> = vec![None; k + self.r];
        // Data: the new bytes, one run per fragment.
        for (i, r) in g
            .fragment_ranges(self.offset, self.len)
            .into_iter()
            .enumerate()
        {
            if r.is_empty() {
                continue;
            }
            let mut bytes = vec![0u8; (r.end - r.start) as usize];
            for p in g.pieces(self.offset, self.len).filter(|p| p.fragment == i) {
                let at = (p.fragment_offset - r.start) as usize;
                let from = (p.file_offset - self.offset) as usize;
                bytes[at..at + p.len as usize].copy_from_slice(&data[from..from + p.len as usize]);
            }
            out[i] = Some(FragmentWrite {
                offset: r.start,
                bytes,
            });
        }
        // Parity, stripe by stripe.
        let mut old = OldBytes {
            needs: self.needs.iter(),
            old: old.iter(),
        };
        let new_unit = |i: usize, base: u64, a: u64, b: u64| -> &[u8] {
            // Unit i of the stripe whose fragments start at `base`, bytes
            // a..b of it, in the file.
            let file = base / g.unit() * g.stripe_bytes() + i as u64 * g.unit() + a;
            let from = (file - self.offset) as usize;
            &data[from..from + (b - a) as usize]
        };
        let mut parity: Vec<Option<Vec<u8>>> = vec![Some(Vec::new()); self.r];
        let mut first: Option<u64> = None;
        for s in self.stripes() {
            first.get_or_insert(s.base + s.parity.start);
            let plen = (s.parity.end - s.parity.start) as usize;
            let mut p: Vec<Option<Vec<u8>>> = if s.whole {
                let units: Vec<&[u8]> = (0..k).map(|i| new_unit(i, s.base, 0, g.unit())).collect();
                let mut p = vec![vec![0u8; plen]; self.r];
                codec.encode(&units, &mut p)?;
                p.into_iter().map(Some).collect()
            } else {
                let new = |i, a, b| Some(new_unit(i, s.base, a, b));
                stripe_parity(codec, g, &s, s.old_end, &mut old, new)?
            };
            for (acc, got) in parity.iter_mut().zip(p.iter_mut()) {
                match (acc.as_mut(), got.take()) {
                    (Some(a), Some(g)) => a.extend_from_slice(&g),
                    _ => *acc = None,
                }
            }
        }
        if let Some(offset) = first {
            for (j, p) in parity.into_iter().enumerate() {
                out[k + j] = p.map(|bytes| FragmentWrite { offset, bytes });
            }
        }
        Ok(out)
    }
}

/// A truncation of a file of `old_size` bytes to `new_size`.
///
/// Growing it only lengthens every fragment (the new bytes are zeros,
/// whose parity is zeros). Shrinking it cuts each fragment's content
/// where the new size ends it (`cut`), then lengthens the fragment to the
/// new size again; the stripe the new end falls in loses bytes, whose
/// parity is updated from them as a delta (their new value is zero).
pub struct Truncate {
    g: Geometry,
    r: usize,
    old_size: u64,
    new_size: u64,
    needs: Vec<Need>,
}

impl Truncate {
    pub fn new(g: Geometry, r: usize, old_size: u64, new_size: u64) -> Truncate {
        let mut t = Truncate {
            g,
            r,
            old_size,
            new_size,
            needs: Vec::new(),
        };
        if let Some(s) = t.stripe() {
            stripe_needs(g, r, &s, old_size, &mut t.needs);
        }
        t
    }

    /// The stripe the new end falls in, when it loses bytes: the old bytes
    /// of each unit from the new end to the old one (within the stripe).
    fn stripe(&self) -> Option<Stripe> {
        let (g, sb, u) = (self.g, self.g.stripe_bytes(), self.g.unit());
        if self.new_size >= self.old_size || self.new_size.is_multiple_of(sb) {
            return None;
        }
        let base = self.new_size / sb * u;
        let units: Vec<(usize, u64, u64)> = (0..g.k())
            .filter_map(|i| {
                let from = g.content_len(self.new_size, i).max(base);
                let to = g.content_len(self.old_size, i).min(base + u);
                (from < to).then_some((i, from - base, to - base))
            })
            .collect();
        (!units.is_empty()).then(|| Stripe::new(base, units, false, self.old_size))
    }

    pub fn needs(&self) -> &[Need] {
        &self.needs
    }

    /// Where fragment `fragment`'s content is cut before it is lengthened
    /// to the new size again (None: nothing to cut, the file grows or
    /// keeps its size).
    pub fn cut(&self, fragment: usize) -> Option<u64> {
        if self.new_size >= self.old_size {
            return None;
        }
        Some(if fragment < self.g.k() {
            self.g.content_len(self.new_size, fragment)
        } else {
            self.g.parity_len(self.new_size)
        })
    }

    /// The parity fragments' writes (index `j` is parity fragment j),
    /// given the old bytes of each need as for `Write::writes`; None for
    /// a parity fragment with nothing to write or whose old bytes are
    /// missing.
    pub fn parity_writes<B: AsRef<[u8]>>(
        &self,
        codec: &Codec,
        old: &[Option<B>],
    ) -> Result<Vec<Option<FragmentWrite>>, ChangeError> {
        assert_eq!(old.len(), self.needs.len(), "one answer per need");
        let Some(s) = self.stripe() else {
            return Ok(vec![None; self.r]);
        };
        let g = self.g;
        let mut old = OldBytes {
            needs: self.needs.iter(),
            old: old.iter(),
        };
        // The bytes cut off become zeros: their old value is the delta.
        let parity = stripe_parity(codec, g, &s, self.old_size, &mut old, |_, _, _| None)?;
        // What lies past the new parity content is zeros: not written, the
        // cut drops it.
        let start = s.base + s.parity.start;
        let keep = g.parity_len(self.new_size).saturating_sub(start) as usize;
        let out = parity
            .into_iter()
            .map(|p| {
                let mut bytes = p?;
                bytes.truncate(keep);
                (!bytes.is_empty()).then_some(FragmentWrite {
                    offset: start,
                    bytes,
                })
            })
            .collect();
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
