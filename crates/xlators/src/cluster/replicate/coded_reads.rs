//! Reads of a dispersed file (docs/disperse.md, "The translator"): a
//! healthy read asks each data fragment that holds wanted bytes for one
//! piece and puts the answers together as they came (a read within one
//! stripe unit is one fragment's bytes); with a data fragment away,
//! blamed, failing or late, the stripes are read from the first K good
//! fragments that answer and rebuilt.

use super::disperse::eio;
use super::*;
use futures_util::future::join_all;
use mortar_core::fop::ANON_FH;
use std::ops::Range;

impl Replicate {
    /// Reads `range` of fragment `i` (zeros after its end) through `fh`.
    pub(super) async fn fragment_read(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        i: usize,
        fh: u64,
        range: Range<u64>,
    ) -> FsResult<Vec<u8>> {
        let len = (range.end - range.start) as usize;
        let mut v = self.fragment_bytes(cx, gfid, i, fh, range).await?.to_vec();
        v.resize(len, 0);
        Ok(v)
    }

    /// Bytes `range` of fragment `i` as the brick answered them (shorter
    /// where the fragment ends early), not copied.
    async fn fragment_bytes(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        i: usize,
        fh: u64,
        range: Range<u64>,
    ) -> FsResult<bytes::Bytes> {
        if range.is_empty() {
            return Ok(bytes::Bytes::new());
        }
        let fop = Fop::Read {
            gfid,
            fh,
            offset: range.start,
            size: (range.end - range.start) as u32,
        };
        let t = std::time::Instant::now();
        let r = self.children[i].call(cx, fop).await;
        if r.is_ok() {
            self.coding().pace.record(i, t.elapsed());
        }
        match r? {
            Reply::Data(b) => Ok(b),
            other => Err(mortar_core::fop::unexpected(other)),
        }
    }

    /// Every fragment's bytes of `range`, rebuilt from the good fragments
    /// `good` (K at least): K + R buffers, data first. All of them are
    /// asked and the first K answers serve: a brick that answers late is
    /// not waited for (and is charged for it, `pace`).
    pub(super) async fn rebuilt(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        good: &[usize],
        fh: impl Fn(usize) -> u64,
        range: Range<u64>,
    ) -> FsResult<Vec<Vec<u8>>> {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let c = self.coding();
        let n = self.children.len();
        let t = std::time::Instant::now();
        let mut reads: FuturesUnordered<_> = good
            .iter()
            .map(|&i| {
                let (fh, range) = (fh(i), range.clone());
                async move { (i, self.fragment_read(cx, gfid, i, fh, range).await) }
            })
            .collect();
        let len = (range.end - range.start) as usize;
        let mut frags = vec![vec![0u8; len]; n];
        let mut present = vec![false; n];
        let mut got = 0;
        let mut last = None;
        while let Some((i, r)) = reads.next().await {
            match r {
                Ok(b) => {
                    frags[i] = b;
                    present[i] = true;
                    got += 1;
                    if got == c.k() {
                        break;
                    }
                }
                Err(e) => {
                    if copy_fault(&e) {
                        self.distrust(gfid, i, &e);
                    }
                    last = Some(e);
                }
            }
        }
        drop(reads);
        if got < c.k() {
            return Err(
                last.unwrap_or_else(|| eio(format!("{}: {gfid}: too few fragments", self.name)))
            );
        }
        // Those not heard from are charged (the slow ones already are:
        // probes tell when they are quick again).
        for &i in good.iter().filter(|&&i| !present[i] && !c.pace.is_slow(i)) {
            c.pace.record(i, t.elapsed() * 2);
        }
        // Only the K answers are used: the others' buffers are rebuilt.
        c.codec
            .rebuild(&mut frags, &present)
            .map_err(|e| eio(format!("{}: {gfid}: {e}", self.name)))?;
        Ok(frags)
    }

    /// A read (or a seek for data or a hole) of a dispersed file.
    pub(super) async fn coded_read(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let (gfid, fh) = (fop.gfid(), fop.fh().unwrap_or(0));
        let fhs = self.handles(cx, gfid, fh).await?;
        let live = fhs.live(&self.children);
        let handle = |i: usize| {
            if live.contains(&i) {
                fhs.fh(i)
            } else {
                ANON_FH
            }
        };
        let good = self.good_fragments(cx, gfid, &self.up()).await?;
        let (offset, len) = match fop {
            Fop::Read { offset, size, .. } => (offset, size as u64),
            _ => unreachable!("reads only"),
        };
        let g = self.coding().g;
        let ranges = g.fragment_ranges(offset, len);
        let wanted: Vec<usize> = (0..g.k()).filter(|&i| !ranges[i].is_empty()).collect();
        // The size, asked along with the bytes: a read past the end is cut.
        let size = self.coded_size(cx, gfid, &good);
        let pace = &self.coding().pace;
        let probe = pace.probe();
        let healthy = async {
            if !wanted
                .iter()
                .all(|&i| good.contains(&i) && (probe || !pace.is_slow(i)))
            {
                return None;
            }
            let answered: Vec<std::sync::atomic::AtomicBool> =
                (0..g.k()).map(|_| Default::default()).collect();
            let reads = wanted.iter().map(|&i| {
                let (range, answered) = (ranges[i].clone(), &answered);
                async move {
                    let r = self.fragment_bytes(cx, gfid, i, handle(i), range).await;
                    answered[i].store(true, std::sync::atomic::Ordering::Relaxed);
                    (i, r)
                }
            });
            // A fragment that answers late is read around.
            let patience = pace.patience();
            let Ok(results) = tokio::time::timeout(patience, join_all(reads)).await else {
                for &i in &wanted {
                    if !answered[i].load(std::sync::atomic::Ordering::Relaxed) {
                        pace.record(i, patience * 2);
                    }
                }
                return None;
            };
            let mut parts = vec![bytes::Bytes::new(); g.k()];
            for (i, r) in results {
                match r {
                    Ok(b) => parts[i] = b,
                    Err(e) => {
                        if copy_fault(&e) {
                            self.distrust(gfid, i, &e);
                        }
                        return Some(Err(e));
                    }
                }
            }
            Some(Ok(parts))
        };
        let (size, parts) = tokio::join!(size, healthy);
        let size = size?;
        let end = size.min(offset.saturating_add(len));
        if end <= offset {
            return Ok(Reply::Data(bytes::Bytes::new()));
        }
        let parts = match parts {
            Some(Ok(p)) => p,
            Some(Err(e)) if !copy_fault(&e) => return Err(e),
            _ => {
                // A data fragment is away, blamed or failed: the stripes
                // from the good ones, none of them halfway through a
                // write (they would not rebuild): this client's are kept
                // off by the claim, other clients' by the file's lock.
                let _claim = self.txns.claim(gfid, 0, u64::MAX).await;
                // The lock of K fragments keeps off any change (it needs
                // K), so the slow ones are left out of it when they can be.
                let mut up = self.up();
                let quick: Vec<usize> = up.iter().copied().filter(|&i| !pace.is_slow(i)).collect();
                if quick.len() >= g.k() {
                    up = quick;
                }
                let sr = g.stripe_range(offset, end - offset);
                let rebuild = async {
                    let good = self.good_fragments(cx, gfid, &up).await?;
                    self.rebuilt(cx, gfid, &good, handle, sr.clone()).await
                };
                let mut frags = self.txns.read_locked(gfid, &up, rebuild).await?;
                (0..g.k())
                    .map(|i| {
                        let r = &ranges[i];
                        // (A fragment the read does not touch has 0..0.)
                        if r.is_empty() {
                            return bytes::Bytes::new();
                        }
                        let (a, b) = ((r.start - sr.start) as usize, (r.end - sr.start) as usize);
                        let frag = bytes::Bytes::from(std::mem::take(&mut frags[i]));
                        frag.slice(a.min(frag.len())..b.min(frag.len()))
                    })
                    .collect()
            }
        };
        // A read within one stripe unit: that fragment's bytes as they came.
        let n = (end - offset) as usize;
        if let [only] = wanted[..] {
            if parts[only].len() >= n {
                return Ok(Reply::Data(parts[only].slice(..n)));
            }
        }
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        let mut out = g.gather(offset, len, &refs);
        out.truncate((end - offset) as usize);
        Ok(Reply::Data(bytes::Bytes::from(out)))
    }
}
