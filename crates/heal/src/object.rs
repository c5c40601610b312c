//! Healing one object of one replica set (docs/replication.md).
//!
//! Under the object's lock on every replica up: read each copy's attributes
//! and blame; the copies nobody blames are the sources, the blamed ones the
//! sinks. With no blame at all (a change session that never settled: a
//! client or brick died mid-change) any copy is a valid outcome, and the
//! biggest, newest one is taken. Copies blaming each other are split-brain:
//! resolved by `cluster.favorite-child-policy` or left alone and reported.
//! Then: names (directories), data (files, only the blocks whose checksums
//! differ, one chunk per lock hold so the application is not stalled),
//! metadata (owner, mode, times, xattrs), and the blame is cleared. The
//! copying itself is `copy`.

pub use super::source::Policy;
use super::source::{self, Choice, Plan};
use futures_util::future::BoxFuture;
use mortar_core::changed::{Changed, CHANGED_XATTR};
use mortar_core::fop::{FileKind, UNSETTLED};
use mortar_core::{Attr, Child, Ctx, Fop, FsResult, Gfid, Reply};
use mortar_ec::{Codec, Geometry};
use mortar_xlators::cluster::replicate::bits;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Objects healed at once.
pub const PARALLEL: usize = 8;

pub struct Brick {
    /// `host:/path`, as the CLI shows it.
    pub label: String,
    pub host: String,
    pub x: Child,
}

pub struct Set {
    pub name: String,
    pub bricks: Vec<Brick>,
    /// The brick that keeps names and metadata but no file data.
    pub arbiter: Option<usize>,
    /// A disperse set's code: its files' data heals by `coded`.
    pub coding: Option<Coded>,
    /// Objects being healed now, each by one task: the bricks grant a lock
    /// again to the connection that holds it, so the healer's own tasks
    /// (an index pass, a full crawl, a directory's new children) must be
    /// kept from healing one object twice at once.
    pub busy: Busy,
    /// Objects a directory's heal made on a sink since the index pass of
    /// this set began, and heals next as its children: the pass does not
    /// heal them a second time.
    pub fresh: Mutex<HashSet<Gfid>>,
    /// Objects left for later while a brick of the set was away, with the
    /// bricks that were up then (`up_mask`): index passes skip them until
    /// that changes, instead of locking and reading every copy of every
    /// one of them every few seconds.
    pub parked: Mutex<HashMap<Gfid, u32>>,
    /// Data written to sinks, counted as each chunk lands (the daemon's
    /// `mortar_heal_written_bytes_total` for the volume).
    pub written: mortar_metrics::Counter,
}

/// The code of a disperse set, as its translator has it (its files heal
/// by `coded`).
pub struct Coded {
    pub g: Geometry,
    pub codec: Codec,
}

impl Coded {
    pub fn new(k: usize, r: usize) -> Result<Coded, String> {
        Ok(Coded {
            g: Geometry::new(k, mortar_xlators::cluster::replicate::disperse::UNIT),
            codec: Codec::new(k, r).map_err(|e| e.to_string())?,
        })
    }
}

/// Per-object exclusion among the tasks of one healer.
#[derive(Default)]
pub struct Busy(Mutex<HashMap<Gfid, Arc<tokio::sync::Mutex<()>>>>);

impl Busy {
    /// Waits until no other task heals `gfid`; the object is this task's
    /// while the guard lives.
    pub async fn claim(&self, gfid: Gfid) -> BusyGuard<'_> {
        let m = self.0.lock().unwrap().entry(gfid).or_default().clone();
        BusyGuard {
            busy: self,
            gfid,
            guard: Some(m.lock_owned().await),
        }
    }
}

pub struct BusyGuard<'a> {
    busy: &'a Busy,
    gfid: Gfid,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        // Let go first, so that the count below is of the waiters alone.
        self.guard.take();
        let mut map = self.busy.0.lock().unwrap();
        // Forget the object once no other task waits for it.
        if map
            .get(&self.gfid)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            map.remove(&self.gfid);
        }
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Sinks brought up to date.
    pub healed: u32,
    pub bytes: u64,
    pub entries: u64,
    pub split_brain: bool,
    /// Left for later (a sink or every source is down, or gone mid-way).
    pub deferred: bool,
}

pub(super) async fn call(b: &Brick, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
    b.x.call(cx, fop).await
}

/// The healer's requests: the pool's own, in the background (the bricks
/// serve their clients first, `brick::priority`).
pub(super) fn root() -> Ctx {
    Ctx::background()
}

/// The handle of `gfid` open for writing on sink `b`: `fh`, or opened now
/// (and kept in `fh`) the first time a heal writes there.
pub(super) async fn sink_handle(b: &Brick, gfid: Gfid, fh: &mut Option<u64>) -> FsResult<u64> {
    if let Some(h) = *fh {
        return Ok(h);
    }
    let open = Fop::Open {
        gfid,
        flags: libc::O_WRONLY,
    };
    Ok(*fh.insert(call(b, &root(), open).await?.into_fh()?))
}

/// The pieces of an object `end` bytes long to look at for `changed`: its
/// ranges widened to whole `block`s, joined, cut into pieces of `chunk`
/// bytes at most (offset, length).
pub(super) fn pieces(changed: &Changed, end: u64, block: u64, chunk: u64) -> Vec<(u64, u64)> {
    let mut wide = Changed::default();
    for (s, e) in changed.within(end) {
        wide.add(
            s / block * block,
            e.div_ceil(block).saturating_mul(block).min(end),
        );
    }
    let mut out = Vec::new();
    for (s, e) in wide.within(end) {
        let mut at = s;
        while at < e {
            let len = (e - at).min(chunk);
            out.push((at, len));
            at += len;
        }
    }
    out
}

impl Set {
    /// The bricks connected now, one bit each.
    pub fn up_mask(&self) -> u32 {
        bits(&self.up())
    }

    fn up(&self) -> Vec<usize> {
        (0..self.bricks.len())
            .filter(|&i| self.bricks[i].x.is_up())
            .collect()
    }

    pub(super) async fn lock(&self, gfid: Gfid, idx: &[usize]) -> Vec<usize> {
        let mut got = Vec::new();
        for &i in idx {
            let lock = Fop::Lock {
                gfid,
                wait: true,
                mark: None,
            };
            if call(&self.bricks[i], &root(), lock).await.is_ok() {
                got.push(i);
            }
        }
        got
    }

    /// Sends `fop` to each brick of `idx` at once; answers in `idx` order.
    pub(super) async fn each(&self, idx: &[usize], fop: Fop) -> Vec<(usize, FsResult<Reply>)> {
        let calls = idx.iter().map(|&i| {
            let fop = fop.clone();
            async move { (i, call(&self.bricks[i], &root(), fop).await) }
        });
        futures_util::future::join_all(calls).await
    }

    pub(super) async fn unlock(&self, gfid: Gfid, idx: &[usize]) {
        self.each(idx, Fop::Unlock { gfids: vec![gfid] }).await;
    }

    pub(super) async fn stat(&self, gfid: Gfid, idx: &[usize]) -> FsResult<Vec<(usize, Attr)>> {
        let mut out = Vec::new();
        for (i, r) in self.each(idx, Fop::Getattr { gfid }).await {
            match r {
                Ok(Reply::Attr(a)) => out.push((i, a)),
                Ok(_) => {}
                Err(e) if e.is(libc::ESTALE) || e.is(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// What `heal info` says of `gfid`, from one look at its copies up:
    /// whether they are in split-brain, and the bytes of each copy (each
    /// fragment) its heal would compare now.
    pub async fn judge(&self, gfid: Gfid) -> (bool, u64) {
        let Ok(copies) = self.stat(gfid, &self.up()).await else {
            return (false, 0);
        };
        (
            self.is_split_brain(&copies),
            self.to_compare(gfid, &copies).await,
        )
    }

    /// The bytes of each copy (each fragment) of `gfid`, its `copies` up,
    /// a heal would compare now: the ranges its bricks recorded as
    /// changed, within the file (0 for what is no file).
    async fn to_compare(&self, gfid: Gfid, copies: &[(usize, Attr)]) -> u64 {
        let files: Vec<(usize, u64)> = copies
            .iter()
            .filter(|(i, a)| a.kind == FileKind::File && Some(*i) != self.arbiter)
            .map(|(i, a)| (*i, a.size))
            .collect();
        let Some(size) = files.iter().map(|f| f.1).max() else {
            return 0;
        };
        let idx: Vec<usize> = files.iter().map(|f| f.0).collect();
        let mut changed = self.changed(gfid, &idx).await;
        let shortest = files.iter().map(|f| f.1).min().unwrap_or(0);
        if shortest != size {
            self.past_end(&mut changed, shortest);
        }
        changed.bytes_within(self.copy_len(size))
    }

    /// Adds to `changed` what copies (fragments) of different lengths may
    /// differ in: everything from where the shorter ends, at `shortest`
    /// bytes of the file (for a disperse set, from the stripe that end is
    /// in).
    pub(super) fn past_end(&self, changed: &mut Changed, shortest: u64) {
        let from = match &self.coding {
            Some(c) => shortest / c.g.stripe_bytes() * c.g.unit(),
            None => shortest,
        };
        changed.add(from, u64::MAX);
    }

    /// The bytes each copy (each fragment) of a file of `size` bytes holds.
    pub(super) fn copy_len(&self, size: u64) -> u64 {
        match &self.coding {
            Some(c) => c.g.parity_len(size),
            None => size,
        }
    }

    /// Whether `copies` (a non-directory's, every one up) all blame each
    /// other, so that no copy can be trusted without a decision.
    fn is_split_brain(&self, copies: &[(usize, Attr)]) -> bool {
        let blamed = copies.iter().fold(0, |b, (_, a)| b | a.blame);
        // With a copy away, that copy may be the good one.
        copies.len() == self.bricks.len()
            && copies[0].1.kind != FileKind::Dir
            && copies.iter().all(|(i, _)| blamed & (1 << i) != 0)
    }

    /// Heals `gfid`: see the module documentation.
    pub async fn heal(&self, gfid: Gfid, policy: Policy) -> FsResult<Outcome> {
        self.heal_with(gfid, policy, None).await
    }

    /// Heals each of `gfids`, `PARALLEL` at a time, in the order they end;
    /// one healed meanwhile as a directory's new child (`fresh`) is
    /// skipped (None) and forgotten there.
    pub async fn heal_each(
        &self,
        gfids: Vec<Gfid>,
        policy: Policy,
    ) -> Vec<(Gfid, Option<FsResult<Outcome>>)> {
        let heals = gfids
            .into_iter()
            .map(|g| -> BoxFuture<'_, (Gfid, Option<FsResult<Outcome>>)> {
                Box::pin(async move {
                    if self.fresh.lock().unwrap().remove(&g) {
                        return (g, None);
                    }
                    (g, Some(self.heal(g, policy).await))
                })
            })
            .collect();
        at_once(heals, PARALLEL).await
    }

    /// Heals `gfid` from the copy on brick `source`, whatever the blame
    /// says (split-brain resolved by hand).
    pub async fn heal_from(&self, gfid: Gfid, source: usize) -> FsResult<Outcome> {
        self.heal_with(gfid, Policy::None, Some(source)).await
    }

    async fn heal_with(
        &self,
        gfid: Gfid,
        policy: Policy,
        forced: Option<usize>,
    ) -> FsResult<Outcome> {
        let claim = self.busy.claim(gfid).await;
        let up = self.up();
        let locked = self.lock(gfid, &up).await;
        let res = self.heal_locked(gfid, &locked, policy, forced).await;
        self.unlock(gfid, &locked).await;
        drop(claim);
        let (mut out, children) = res?;
        // New subdirectories and files are healed after the directory's
        // lock is let go: a client renaming between them takes them in
        // gfid order, which a heal holding the parent must not reverse.
        // Several at a time: each is mostly waiting on round trips.
        use futures_util::stream::{self, StreamExt};
        // A child not healed is taken out of `fresh`, so that a crawl
        // passing by heals it again; the first failure is answered once
        // the others were tried.
        let mut done = stream::iter(children)
            .map(|child| Box::pin(async move { (child, self.heal(child, policy).await) }))
            .buffer_unordered(PARALLEL);
        let mut failed = None;
        while let Some((child, o)) = done.next().await {
            match o {
                Ok(o) => {
                    if o.deferred {
                        self.fresh.lock().unwrap().remove(&child);
                    }
                    out.entries += o.entries;
                    out.bytes += o.bytes;
                    out.deferred |= o.deferred;
                }
                Err(e) => {
                    self.fresh.lock().unwrap().remove(&child);
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    async fn heal_locked(
        &self,
        gfid: Gfid,
        locked: &[usize],
        policy: Policy,
        forced: Option<usize>,
    ) -> FsResult<(Outcome, Vec<Gfid>)> {
        let mut out = Outcome::default();
        let copies = self.stat(gfid, locked).await?;
        if copies.is_empty() {
            // Gone everywhere: nothing to heal, drop it from the index.
            self.clear(gfid, locked, 0).await;
            return Ok((out, vec![]));
        }
        let kind = copies[0].1.kind;
        let all_locked = locked.len() == self.bricks.len();
        if kind == FileKind::File && self.coding.is_some() {
            let out = self.heal_coded(gfid, &copies, locked, all_locked).await?;
            return Ok((out, vec![]));
        }
        let plan = match source::choose(&copies, self.arbiter, all_locked, policy, forced)? {
            Choice::Defer => {
                out.deferred = true;
                return Ok((out, vec![]));
            }
            Choice::SplitBrain => {
                out.split_brain = true;
                return Ok((out, vec![]));
            }
            Choice::Heal(plan) => plan,
        };
        if plan.by_policy {
            tracing::warn!(set = %self.name, %gfid, source = %self.bricks[plan.src].label, ?policy, "split-brain resolved by policy");
        }
        let Plan {
            src,
            sinks,
            everyone,
            blamed,
            marks,
            ..
        } = &plan;
        let src_attr = copies.iter().find(|(i, _)| i == src).unwrap().1.clone();
        let (healed, children) = self
            .heal_sinks(gfid, &plan, &copies, &src_attr, locked, &mut out)
            .await;
        out.healed = healed.len() as u32;
        // A file's source changed while the heal ran (the lock was let go
        // between data chunks, or a client wrote without it, as a rolling
        // restart suggests: docs/replication.md, Limits): its changes
        // may have missed the sink again, so nothing is cleared and the
        // next pass looks again. (A directory's lock is held throughout,
        // and a name merge changes the source itself.)
        if kind == FileKind::File {
            let now = self.stat(gfid, &[*src]).await?;
            if now.first().map(|(_, a)| a.ctime) != Some(src_attr.ctime) {
                out.deferred = true;
                out.healed = 0;
                return Ok((out, children));
            }
        }
        // The blame of a sink that was not reached (down, or without the
        // object yet: its directory's heal makes it) stays.
        let reached = bits(&healed) | (bits(everyone) & !bits(sinks));
        // A change of unknown outcome is settled once every copy was
        // compared: a copy away may hold what the others lack.
        let mut settled = 0;
        if marks & UNSETTLED != 0 {
            if all_locked && reached & bits(sinks) == bits(sinks) {
                settled = UNSETTLED;
            } else {
                out.deferred = true;
            }
        }
        // Crash window: the sinks are healed, the blame is not cleared yet.
        fail::fail_point!("heal-before-clear");
        self.clear(gfid, locked, (blamed & reached) | settled).await;
        if blamed & !reached != 0 {
            out.deferred = true;
        }
        Ok((out, children))
    }

    /// Heals each sink of `plan` from its source: names, data, metadata.
    /// Returns the sinks healed, and the objects a directory's heal made
    /// (its new children, to heal next).
    async fn heal_sinks(
        &self,
        gfid: Gfid,
        plan: &Plan,
        copies: &[(usize, Attr)],
        src_attr: &Attr,
        locked: &[usize],
        out: &mut Outcome,
    ) -> (Vec<usize>, Vec<Gfid>) {
        let kind = src_attr.kind;
        let src = plan.src;
        let changed = match kind {
            FileKind::File => self.changed(gfid, &plan.everyone).await,
            _ => Changed::default(),
        };
        let mut children = Vec::new();
        let mut healed = Vec::new();
        // The source as the last data heal left it (the lock is let go
        // between chunks: an application may have changed it meanwhile).
        let mut src_now = src_attr.clone();
        for &sink in &plan.sinks {
            let sink_attr = copies.iter().find(|(i, _)| *i == sink).unwrap().1.clone();
            if sink_attr.kind != kind {
                tracing::warn!(set = %self.name, %gfid, "copies of one gfid differ in type; left alone");
                continue;
            }
            let r = async {
                match kind {
                    FileKind::Dir => {
                        let from = match plan.conservative {
                            true => &plan.everyone,
                            false => &plan.sources,
                        };
                        let (n, new) = self
                            .heal_entries(gfid, from, sink, plan.conservative)
                            .await?;
                        out.entries += n;
                        children.extend(new);
                    }
                    // An arbiter gets no data.
                    FileKind::File if Some(sink) != self.arbiter => {
                        let (n, now) = self.heal_data(gfid, (src, sink), &changed, locked).await?;
                        out.bytes += n;
                        src_now = now;
                    }
                    _ => {}
                }
                if sink == src {
                    return Ok(());
                }
                self.heal_meta(gfid, (src, sink), &src_now).await
            }
            .await;
            match r {
                Ok(()) => healed.push(sink),
                Err(e) => {
                    tracing::warn!(set = %self.name, %gfid, sink = %self.bricks[sink].label, "heal failed: {e}");
                    out.deferred = true;
                }
            }
        }
        (healed, children)
    }

    /// The union of the ranges of `gfid` the bricks `idx` say changed: the
    /// whole file if one cannot say.
    pub(super) async fn changed(&self, gfid: Gfid, idx: &[usize]) -> Changed {
        let mut all = Changed::default();
        let ask = Fop::Getxattr {
            gfid,
            name: CHANGED_XATTR.into(),
        };
        for (i, r) in self.each(idx, ask).await {
            match r {
                Ok(Reply::Xattr(v)) => all.merge(&Changed::decode(&v)),
                other => {
                    let e = other.err().map(|e| e.to_string()).unwrap_or_default();
                    tracing::info!(set = %self.name, %gfid, brick = %self.bricks[i].label, "cannot tell the ranges changed ({e}): healing the whole file");
                    return Changed::Whole;
                }
            }
        }
        all
    }

    pub(super) async fn clear(&self, gfid: Gfid, idx: &[usize], unblame: u32) {
        self.each(idx, Fop::Clear { gfid, unblame }).await;
    }
}

/// Runs `futs`, `n` at a time; answers their outputs in the order they end.
pub(crate) async fn at_once<T>(futs: Vec<BoxFuture<'_, T>>, n: usize) -> Vec<T> {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let mut todo = futs.into_iter();
    let mut running: FuturesUnordered<_> = todo.by_ref().take(n.max(1)).collect();
    let mut out = Vec::new();
    while let Some(t) = running.next().await {
        out.push(t);
        running.extend(todo.next());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_object_is_healed_by_one_task_at_a_time() {
        let busy = Arc::new(Busy::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let g = Gfid::random();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (busy, inside, most) = (busy.clone(), inside.clone(), most.clone());
                tokio::spawn(async move {
                    let _claim = busy.claim(g).await;
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        // Another object is not held up by the first.
        drop(busy.claim(Gfid::random()).await);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 1);
        assert!(busy.0.lock().unwrap().is_empty(), "claims are forgotten");
    }
}
