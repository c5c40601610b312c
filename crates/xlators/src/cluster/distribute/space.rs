//! Free space: new files go to a set with room (`cluster.min-free-disk`),
//! leaving a pointer where their name hashes.
//!
//! A set's room is its statfs less what was written there since, and
//! less what the mount still holds written above this translator
//! (`Ctx::behind`, write-behind's): near the limit a set is asked on every
//! new file, and without those a stream of files closed behind could all
//! be placed on a set that has room for only some of them (their writes
//! then fail with ENOSPC once the application has closed them).

use super::*;

impl Distribute {
    /// The share of set `i`'s space that is free: as its statfs said at
    /// most `SPACE_FRESH` ago, less what this client wrote there since and
    /// the `behind` bytes it has yet to send anywhere (asked again every
    /// time while it is near the limit); None if it cannot say.
    pub(super) async fn free_share(&self, i: usize, min: u64, behind: u64) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        let share = |free: u64, whole: u64| {
            let free = free
                .saturating_sub(self.written[i].load(Relaxed))
                .saturating_sub(behind);
            free.saturating_mul(100) / whole
        };
        if let Some((at, free, whole)) = self.space.lock().unwrap()[i] {
            let p = share(free, whole);
            if at.elapsed() < SPACE_FRESH && p >= 2 * min {
                return Some(p);
            }
        }
        let fop = Fop::Statfs { gfid: Gfid::ROOT };
        match self.children[i].call(&Ctx::root(), fop).await {
            Ok(Reply::StatFs(s)) if s.blocks > 0 => {
                let unit = s.frsize.max(1) as u64;
                let (free, whole) = (s.bavail.saturating_mul(unit), s.blocks.saturating_mul(unit));
                // (Writes still on their way may not be in it yet.)
                self.written[i].store(self.sending[i].load(Relaxed), Relaxed);
                self.space.lock().unwrap()[i] = Some((std::time::Instant::now(), free, whole));
                Some(share(free, whole))
            }
            _ => None,
        }
    }

    /// Sends `fop` to child `i`; a write's bytes count against the set's
    /// room until its statfs is asked again.
    pub(super) async fn call_counted(&self, i: usize, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        use std::sync::atomic::Ordering::Relaxed;
        let len = match &fop {
            Fop::Write { data, .. } => data.len() as u64,
            _ => return self.children[i].call(cx, fop).await,
        };
        self.written[i].fetch_add(len, Relaxed);
        self.sending[i].fetch_add(len, Relaxed);
        let res = self.children[i].call(cx, fop).await;
        self.sending[i].fetch_sub(len, Relaxed);
        res
    }

    /// Where a new name hashed to set `h` goes (`cluster.min-free-disk`):
    /// `h`, unless its free share is below the limit (or `full`: it just
    /// answered ENOSPC) and another set of the directory's layout, not
    /// being emptied, is above it: then the one with the most room.
    pub(super) async fn room_for(&self, cx: &Ctx, dl: &DirLayout, h: usize, full: bool) -> usize {
        let min = self.min_free.load(std::sync::atomic::Ordering::Relaxed);
        if min == 0 && !full {
            return h;
        }
        if !full
            && self
                .free_share(h, min, cx.behind)
                .await
                .is_none_or(|p| p >= min)
        {
            return h;
        }
        let mut best: Option<(u64, usize)> = None;
        // Each set of the layout once (a set may own several ranges).
        let mut sets: Vec<usize> = dl
            .layout
            .ranges()
            .iter()
            .filter_map(|r| self.child_of(r.set))
            .filter(|&i| i != h && !self.draining[i])
            .collect();
        sets.sort_unstable();
        sets.dedup();
        for i in sets {
            if let Some(p) = self.free_share(i, min, cx.behind).await {
                if p >= min.max(1) && best.is_none_or(|b| p > b.0) {
                    best = Some((p, i));
                }
            }
        }
        best.map_or(h, |b| b.1)
    }
}
