//! Healing a dispersed file (docs/disperse.md, "Heal"): its fragments
//! that missed changes, or are shorter than the file (a brick replaced
//! empty), are rebuilt from K good ones.
//!
//! Names, attributes and xattrs of a disperse set are the same on every
//! brick and heal as a replica set's do (`object`); only a file's data
//! differs per brick. Under the file's lock on every fragment up, the
//! fragments nobody blames are the sources (K at least, else the heal
//! waits), the blamed ones the sinks. Chunk by chunk, K sources are read
//! (data fragments first: rebuilding from them is encoding), every
//! fragment is computed, and each sink is written only where its bytes
//! differ, so a heal writes the ranges that changed, and holes stay holes.
//! The next chunk is read while one is written; the lock is let go every
//! few chunks, as for a replica.
//!
//! Only the ranges that may differ are looked at (granular heal): the
//! union of the ranges each fragment's brick recorded as changed since the
//! fragments last agreed (`mortar_core::changed`, kept by the brick's
//! index), and, when fragments are of different lengths, everything from
//! the stripe the shortest ends in. A brick that lost its record (stopped
//! in the middle of a change) answers the whole file.
//!
//! A change of unknown outcome (a client or brick died mid-write, so
//! nobody is blamed but `UNSETTLED` is marked, or nothing is and only the
//! index entry its ended session left says so) may have reached some
//! fragments and not others: the data fragments are taken as they are
//! (each holds the old or the new bytes of the write, as a local disk may
//! after a crash) and the parity is computed from them anew.

use super::object::*;
use mortar_core::fop::{ANON_FH, UNSETTLED};
use mortar_core::{Attr, Fop, FsError, FsResult, Gfid, Reply, SetAttr};
use mortar_xlators::cluster::replicate::bits;
use std::collections::HashMap;

/// Bytes of each fragment rebuilt at once (2 N buffers of it in memory per
/// object healed: one chunk written while the next is read).
pub(super) const CHUNK: u64 = 2 << 20;
/// Chunks rebuilt per hold of the file's lock.
const WINDOW: usize = 4;
/// Bytes compared at once between a sink and what it should hold.
pub(super) const BLOCK: usize = 64 << 10;

/// Reads `len` bytes at `offset` of fragment `b`, zeros after its end.
async fn read_padded(b: &Brick, gfid: Gfid, offset: u64, len: u64) -> FsResult<Vec<u8>> {
    let fop = Fop::Read {
        gfid,
        fh: ANON_FH,
        offset,
        size: len as u32,
    };
    match call(b, &root(), fop).await? {
        Reply::Data(d) => {
            let mut v = d.to_vec();
            v.resize(len as usize, 0);
            Ok(v)
        }
        _ => Err(FsError::new(libc::EIO, "read answered without data")),
    }
}

/// The runs of `want` that differ from `have` (same length), compared
/// `BLOCK` bytes at a time, neighbours joined: (offset, length).
fn differing(want: &[u8], have: &[u8]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (n, (w, h)) in want.chunks(BLOCK).zip(have.chunks(BLOCK)).enumerate() {
        if w == h {
            continue;
        }
        let at = n * BLOCK;
        match runs.last_mut() {
            Some((o, l)) if *o + *l == at => *l += w.len(),
            _ => runs.push((at, w.len())),
        }
    }
    runs
}

impl Set {
    fn coded(&self) -> &Coded {
        self.coding.as_ref().expect("a disperse set")
    }

    /// Heals file `gfid` of a disperse set, its `copies` read under the
    /// lock of `locked` (every brick of the set, if `all_locked`).
    pub(super) async fn heal_coded(
        &self,
        gfid: Gfid,
        copies: &[(usize, Attr)],
        locked: &[usize],
        all_locked: bool,
    ) -> FsResult<Outcome> {
        let k = self.coded().g.k();
        let mut out = Outcome::default();
        let marks = copies.iter().fold(0, |b, (_, a)| b | a.blame);
        let blamed = marks & !UNSETTLED;
        let everyone: Vec<usize> = copies.iter().map(|(i, _)| *i).collect();
        let good: Vec<usize> = everyone
            .iter()
            .copied()
            .filter(|i| blamed & (1 << i) == 0)
            .collect();
        let attr = |i: usize| &copies.iter().find(|(j, _)| *j == i).unwrap().1;
        // An entry that blames nobody at all is a change whose client went
        // away in the middle (its session ended unsettled, `index`): it may
        // have reached some fragments and not others, as an `UNSETTLED`
        // one, and is judged as one.
        let unsettled = marks & UNSETTLED != 0 || marks == 0;
        let data_good = (0..k).all(|i| good.contains(&i));
        let sources: Vec<usize> = if good.len() < k || (unsettled && !data_good && !all_locked) {
            // A fragment away may be good (or the one a change of unknown
            // outcome needs to be judged by): wait for it.
            if all_locked {
                tracing::error!(set = %self.name, %gfid, good = good.len(), k, "fewer good fragments than the code needs: the file cannot be rebuilt");
            }
            out.deferred = true;
            return Ok(out);
        } else if unsettled && data_good {
            (0..k).collect()
        } else {
            // Every fragment is as long as the file: one shorter than
            // others nobody blames is stale too (a fragment a name heal
            // just made on a brick replaced empty).
            let longest = good.iter().map(|&i| attr(i).size).max().unwrap_or(0);
            let full: Vec<usize> = good
                .iter()
                .copied()
                .filter(|&i| attr(i).size == longest)
                .collect();
            if full.len() >= k {
                full
            } else {
                good
            }
        };
        let sinks: Vec<usize> = everyone
            .iter()
            .copied()
            .filter(|i| !sources.contains(i))
            .collect();
        let size = sources.iter().map(|&i| attr(i).size).max().unwrap_or(0);
        let src = *sources.iter().find(|&&i| attr(i).size == size).unwrap();
        let src_attr = attr(src).clone();
        // Sources of another length (a change of unknown outcome that
        // lengthened some) are given the one chosen.
        for &i in sources.iter().filter(|&&i| attr(i).size != size) {
            let set = SetAttr {
                size: Some(size),
                ..Default::default()
            };
            call(&self.bricks[i], &root(), Fop::Setattr { gfid, set }).await?;
        }
        let sizes: HashMap<usize, u64> = sinks.iter().map(|&i| (i, attr(i).size)).collect();
        let mut changed = self.changed(gfid, &everyone).await;
        if copies.iter().any(|(_, a)| a.size != size) {
            // Fragments of different lengths (a fragment made empty on a
            // brick replaced, a change of unknown outcome that lengthened
            // some).
            let shortest = copies.iter().map(|(_, a)| a.size).min().unwrap_or(0);
            self.past_end(&mut changed, shortest.min(size));
        }
        let pieces = pieces(&changed, self.copy_len(size), BLOCK as u64, CHUNK);
        tracing::debug!(set = %self.name, %gfid, ?changed, pieces = pieces.len(), "healing the ranges changed");
        let (healed, bytes) = self
            .rebuild_sinks(gfid, &sources, sinks.clone(), &sizes, size, &pieces, locked)
            .await;
        out.bytes = bytes;
        // The source's metadata as it is now (the lock was let go between
        // chunks), not as it was at the start.
        let src_now = match self.stat(gfid, &[src]).await?.first() {
            Some((_, a)) => a.clone(),
            None => {
                return Err(FsError::new(
                    libc::ESTALE,
                    "the source went away during heal",
                ))
            }
        };
        let mut done = Vec::new();
        for sink in healed {
            match self.heal_meta(gfid, (src, sink), &src_now).await {
                Ok(()) => done.push(sink),
                Err(e) => {
                    tracing::warn!(set = %self.name, %gfid, sink = %self.bricks[sink].label, "heal failed: {e}");
                }
            }
        }
        out.healed = done.len() as u32;
        // Changed while the lock was let go between chunks: look again.
        if src_now.ctime != src_attr.ctime {
            out.deferred = true;
            out.healed = 0;
            return Ok(out);
        }
        let reached = bits(&done) | (bits(&everyone) & !bits(&sinks));
        let mut settled = 0;
        if unsettled {
            if all_locked && reached & bits(&sinks) == bits(&sinks) {
                settled = UNSETTLED;
            } else {
                out.deferred = true;
            }
        }
        if marks == 0 && out.deferred {
            // Nothing marks it but its index entry: kept for the next try.
            return Ok(out);
        }
        self.clear(gfid, locked, (blamed & reached) | settled).await;
        if blamed & !reached != 0 {
            out.deferred = true;
        }
        Ok(out)
    }

    /// Makes each of `sinks` the fragment `sources` say it is, for a file
    /// of `size` bytes, in the `pieces` (fragment offset, length) that may
    /// differ; `sizes` are the sinks' lengths now. Answers the
    /// sinks healed and the bytes written. A sink that fails is left out
    /// (its blame stays). A source that fails (a block damaged behind its
    /// brick's back, which nobody had read yet) is replaced by a spare
    /// source if there is one, and becomes a sink from that chunk on: its
    /// blocks that fail are written anew. Without a spare the heal of all
    /// ends, to be tried again.
    pub(super) async fn rebuild_sinks(
        &self,
        gfid: Gfid,
        sources: &[usize],
        mut sinks: Vec<usize>,
        sizes: &HashMap<usize, u64>,
        size: u64,
        pieces: &[(u64, u64)],
        locked: &[usize],
    ) -> (Vec<usize>, u64) {
        let c = self.coded();
        let content = c.g.parity_len(size);
        // Rebuilding from the data fragments alone is encoding.
        let mut from = sources.to_vec();
        from.sort_unstable();
        let mut spares = from.split_off(c.g.k());
        let mut sizes = sizes.clone();
        let mut written = 0u64;
        let mut fhs: HashMap<usize, u64> = HashMap::new();
        let fail = |sinks: &mut Vec<usize>, s: usize, e: &FsError| {
            tracing::warn!(set = %self.name, %gfid, sink = %self.bricks[s].label, "heal failed: {e}");
            sinks.retain(|&x| x != s);
        };
        // What a longer file left past the content goes first.
        for s in sinks.clone() {
            if sizes[&s] > content {
                let set = SetAttr {
                    size: Some(content),
                    ..Default::default()
                };
                if let Err(e) = call(&self.bricks[s], &root(), Fop::Setattr { gfid, set }).await {
                    fail(&mut sinks, s, &e);
                }
            }
        }
        // Piece by piece, the next one read while the last is written; the
        // lock is let go every `WINDOW` pieces.
        let mut at = 0;
        let mut held = 0;
        let mut next = match pieces.first() {
            Some(&p) => Some(self.chunk(gfid, &from, p).await),
            None => None,
        };
        while let Some(frags) = next.take() {
            let off = pieces[at].0;
            let mut frags = match frags {
                Ok(f) => f,
                Err(Some(bad)) if !spares.is_empty() => {
                    let spare = spares.remove(0);
                    tracing::warn!(set = %self.name, %gfid, source = %self.bricks[bad].label, instead = %self.bricks[spare].label, offset = off, "heal: a source failed; rebuilding from another, and healing it too from here");
                    from.retain(|&i| i != bad);
                    from.push(spare);
                    from.sort_unstable();
                    sinks.push(bad);
                    sizes.insert(bad, content);
                    next = Some(self.chunk(gfid, &from, pieces[at]).await);
                    continue;
                }
                Err(_) => return (Vec::new(), written),
            };
            held += 1;
            let ahead = at + 1 < pieces.len() && held < WINDOW;
            let fixes = sinks.iter().map(|&s| {
                // Handed over whole: written without a copy.
                let want = bytes::Bytes::from(std::mem::take(&mut frags[s]));
                let had = sizes[&s].min(content);
                let fh = fhs.get(&s).copied();
                async move { (s, self.fix_range(gfid, s, fh, off, want, had).await) }
            });
            let read_ahead = async {
                match ahead {
                    true => Some(self.chunk(gfid, &from, pieces[at + 1]).await),
                    false => None,
                }
            };
            let (fixed, read) = tokio::join!(futures_util::future::join_all(fixes), read_ahead);
            for (s, r) in fixed {
                match r {
                    Ok((fh, n)) => {
                        if let Some(fh) = fh {
                            fhs.insert(s, fh);
                        }
                        written += n;
                        self.written.inc_by(n);
                    }
                    Err(e) => fail(&mut sinks, s, &e),
                }
            }
            at += 1;
            if at >= pieces.len() || sinks.is_empty() {
                break;
            }
            next = match read {
                Some(r) => Some(r),
                None => {
                    // Let an application waiting for the file have a turn.
                    self.unlock(gfid, locked).await;
                    held = 0;
                    if self.lock(gfid, locked).await.len() != locked.len() {
                        tracing::warn!(set = %self.name, %gfid, "a fragment went away during heal");
                        sinks.clear();
                        break;
                    }
                    Some(self.chunk(gfid, &from, pieces[at]).await)
                }
            };
        }
        for (&s, &fh) in &fhs {
            let _ = call(&self.bricks[s], &root(), Fop::Release { gfid, fh }).await;
        }
        // Every fragment is as long as the file, as long as it is now: the
        // lock is held since the last chunk, but was let go before it, and
        // an application may have changed the length meanwhile (on the
        // sinks too: the length read at the start would cut that off).
        let size = match self.stat(gfid, &from).await {
            Ok(now) => now.iter().map(|(_, a)| a.size).max().unwrap_or(size),
            Err(e) => {
                tracing::warn!(set = %self.name, %gfid, "heal: cannot read the file's length at the end ({e})");
                return (Vec::new(), written);
            }
        };
        for s in sinks.clone() {
            let set = SetAttr {
                size: Some(size),
                ..Default::default()
            };
            if let Err(e) = call(&self.bricks[s], &root(), Fop::Setattr { gfid, set }).await {
                fail(&mut sinks, s, &e);
            }
        }
        (sinks, written)
    }

    /// Every fragment's bytes of the piece `len` bytes at `off`, read from
    /// the sources `from` (K of them) and rebuilt; else (said in the log)
    /// the source that failed, or None if the code did.
    async fn chunk(
        &self,
        gfid: Gfid,
        from: &[usize],
        (off, len): (u64, u64),
    ) -> Result<Vec<Vec<u8>>, Option<usize>> {
        let c = self.coded();
        let n = self.bricks.len();
        let reads = from
            .iter()
            .map(|&i| async move { (i, read_padded(&self.bricks[i], gfid, off, len).await) });
        let mut frags = vec![Vec::new(); n];
        let mut present = vec![false; n];
        for (i, r) in futures_util::future::join_all(reads).await {
            match r {
                Ok(b) => {
                    frags[i] = b;
                    present[i] = true;
                }
                Err(e) => {
                    tracing::warn!(set = %self.name, %gfid, source = %self.bricks[i].label, "heal: a source failed: {e}");
                    return Err(Some(i));
                }
            }
        }
        for f in frags.iter_mut().filter(|f| f.is_empty()) {
            *f = vec![0u8; len as usize];
        }
        if let Err(e) = c.codec.rebuild(&mut frags, &present) {
            tracing::warn!(set = %self.name, %gfid, "heal: {e}");
            return Err(None);
        }
        Ok(frags)
    }

    /// Writes to sink `s` the runs of `want` (its bytes at `off`) that
    /// differ from what it holds (`had`: its length, zeros after), opening
    /// it first unless `fh`. Answers the handle opened and bytes written.
    async fn fix_range(
        &self,
        gfid: Gfid,
        s: usize,
        fh: Option<u64>,
        off: u64,
        want: bytes::Bytes,
        had: u64,
    ) -> FsResult<(Option<u64>, u64)> {
        let b = &self.bricks[s];
        let have = if off < had {
            match read_padded(b, gfid, off, want.len() as u64).await {
                Ok(have) => have,
                // A block of it is damaged (its brick's checksums say so):
                // looked at `BLOCK` by `BLOCK`, those that fail written anew.
                Err(e) if e.is(libc::EIO) => {
                    let mut have = Vec::with_capacity(want.len());
                    for (n, w) in want.chunks(BLOCK).enumerate() {
                        let at = off + (n * BLOCK) as u64;
                        match read_padded(b, gfid, at, w.len() as u64).await {
                            Ok(h) => have.extend(h),
                            Err(e) if e.is(libc::EIO) => have.extend(w.iter().map(|x| !x)),
                            Err(e) => return Err(e),
                        }
                    }
                    have
                }
                Err(e) => return Err(e),
            }
        } else {
            vec![0u8; want.len()]
        };
        let mut fh = fh;
        let mut n = 0u64;
        for (at, len) in differing(&want, &have) {
            let h = sink_handle(b, gfid, &mut fh).await?;
            let write = Fop::Write {
                gfid,
                fh: h,
                offset: off + at as u64,
                data: want.slice(at..at + len),
                grow: 0,
                reserve: false,
            };
            call(b, &root(), write).await?;
            n += len as u64;
        }
        Ok((fh, n))
    }
}

#[cfg(test)]
mod tests {
    use super::differing;

    #[test]
    fn only_the_blocks_that_differ_are_written_neighbours_joined() {
        let b = super::BLOCK;
        let have = vec![0u8; 4 * b + 10];
        let mut want = have.clone();
        assert!(differing(&want, &have).is_empty());
        want[1] = 1;
        want[b + 5] = 1;
        want[4 * b + 3] = 1;
        assert_eq!(differing(&want, &have), vec![(0, 2 * b), (4 * b, 10)]);
    }
}
