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
//! metadata (owner, mode, times, xattrs), and the blame is cleared.

use crate::cluster::replicate::bits;
use crate::core::fop::{FileKind, TimeSet, ANON_FH, UNSETTLED};
use crate::core::{Attr, Child, Ctx, Fop, FsError, FsResult, Gfid, Name, Reply, SetAttr};
use futures_util::future::BoxFuture;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Bytes compared per checksum and copied per write.
const BLOCK: u32 = 128 << 10;
/// Blocks per chunk: the lock is let go between chunks.
const CHUNK_BLOCKS: u32 = 64;
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    None,
    Size,
    Mtime,
    Ctime,
    Majority,
}

impl Policy {
    pub fn parse(s: &str) -> Policy {
        match s {
            "size" | "bigger-file" => Policy::Size,
            "mtime" | "latest-mtime" => Policy::Mtime,
            "ctime" => Policy::Ctime,
            "majority" => Policy::Majority,
            _ => Policy::None,
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

async fn call(b: &Brick, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
    b.x.call(cx, fop).await
}

fn root() -> Ctx {
    Ctx::root()
}

async fn sums(b: &Brick, gfid: Gfid, offset: u64) -> FsResult<Reply> {
    let fop = Fop::Checksum {
        gfid,
        offset,
        block: BLOCK,
        count: CHUNK_BLOCKS,
    };
    call(b, &root(), fop).await
}

async fn xattr_names(b: &Brick, gfid: Gfid) -> FsResult<Vec<String>> {
    Ok(match call(b, &root(), Fop::Listxattr { gfid }).await? {
        Reply::Xattr(v) => v
            .split(|&c| c == 0)
            .filter(|n| !n.is_empty())
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect(),
        _ => vec![],
    })
}

async fn get_xattr(b: &Brick, gfid: Gfid, name: &str) -> FsResult<Reply> {
    let fop = Fop::Getxattr {
        gfid,
        name: name.to_string(),
    };
    call(b, &root(), fop).await
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

    async fn lock(&self, gfid: Gfid, idx: &[usize]) -> Vec<usize> {
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
    async fn each(&self, idx: &[usize], fop: Fop) -> Vec<(usize, FsResult<Reply>)> {
        let calls = idx.iter().map(|&i| {
            let fop = fop.clone();
            async move { (i, call(&self.bricks[i], &root(), fop).await) }
        });
        futures_util::future::join_all(calls).await
    }

    async fn unlock(&self, gfid: Gfid, idx: &[usize]) {
        self.each(idx, Fop::Unlock { gfids: vec![gfid] }).await;
    }

    async fn stat(&self, gfid: Gfid, idx: &[usize]) -> FsResult<Vec<(usize, Attr)>> {
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

    /// The copies that hold file data (all but the arbiter's).
    fn data_copies(&self, copies: &[(usize, Attr)]) -> Vec<(usize, Attr)> {
        copies
            .iter()
            .filter(|(i, _)| Some(*i) != self.arbiter)
            .cloned()
            .collect()
    }

    /// Whether the copies of `gfid` (a non-directory) all blame each other,
    /// so that no copy can be trusted without a decision.
    pub async fn is_split_brain(&self, gfid: Gfid) -> bool {
        let Ok(copies) = self.stat(gfid, &self.up()).await else {
            return false;
        };
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
        let mut done = stream::iter(children)
            .map(|child| Box::pin(self.heal(child, policy)))
            .buffer_unordered(PARALLEL);
        while let Some(o) = done.next().await {
            let o = o?;
            out.entries += o.entries;
            out.bytes += o.bytes;
            out.deferred |= o.deferred;
        }
        Ok(out)
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
        let marks = copies.iter().fold(0, |b, (_, a)| b | a.blame);
        // A change of unknown outcome blames nobody (`UNSETTLED`).
        let blamed = marks & !UNSETTLED;
        let unblamed: Vec<usize> = copies
            .iter()
            .filter(|(i, _)| blamed & (1 << i) == 0)
            .map(|(i, _)| *i)
            .collect();
        // A copy that took such a change is a source only when no copy
        // without one is: else it is made equal to one, which drops the
        // change (the application was told it failed). Taking it as a
        // source beside a clean copy left the two different, and clearing
        // its mark then hid that.
        let clean: Vec<usize> = copies
            .iter()
            .filter(|(i, a)| blamed & (1 << i) == 0 && a.blame & UNSETTLED == 0)
            .map(|(i, _)| *i)
            .collect();
        // (File data comes from a copy holding data, never the arbiter.)
        let holds_data = |i: &usize| kind != FileKind::File || Some(*i) != self.arbiter;
        let unsure = !clean.iter().any(holds_data);
        let mut sources = if unsure { unblamed } else { clean };
        let conservative = forced.is_none() && (blamed == 0 || sources.is_empty());
        if let Some(f) = forced {
            if !copies.iter().any(|(i, _)| *i == f) {
                return Err(FsError::new(libc::ENOENT, "the chosen source has no copy"));
            }
            sources = vec![f];
        } else if sources.is_empty() && locked.len() < self.bricks.len() {
            // Every copy up is blamed, and a copy away may be the good one
            // (it went away with a change in flight): wait for it.
            out.deferred = true;
            return Ok((out, vec![]));
        } else if sources.is_empty() && kind != FileKind::Dir {
            match pick_by_policy(&self.data_copies(&copies), policy) {
                Some(s) => {
                    tracing::warn!(set = %self.name, %gfid, source = %self.bricks[s].label, ?policy, "split-brain resolved by policy");
                    sources = vec![s];
                }
                None => {
                    out.split_brain = true;
                    return Ok((out, vec![]));
                }
            }
        } else if blamed == 0
            || sources.is_empty()
            || (unsure && sources.len() > 1 && kind == FileKind::File)
        {
            // Only unsettled changes (or a directory whose copies blame each
            // other): every source is a valid outcome; take the fullest, and
            // make the others equal to it (sources that each took a change
            // of unknown outcome may differ).
            let pool: Vec<(usize, Attr)> = copies
                .iter()
                .filter(|(i, _)| sources.is_empty() || sources.contains(i))
                .cloned()
                .collect();
            let candidates = if kind == FileKind::File {
                self.data_copies(&pool)
            } else {
                pool
            };
            let Some(first) = candidates.first() else {
                out.deferred = true;
                return Ok((out, vec![]));
            };
            sources = vec![pick_by_policy(&candidates, Policy::Size).unwrap_or(first.0)];
        }
        // File data comes from a copy that holds data.
        let Some(src) = sources
            .iter()
            .copied()
            .find(|&s| kind != FileKind::File || Some(s) != self.arbiter)
        else {
            out.deferred = true;
            return Ok((out, vec![]));
        };
        let src_attr = copies.iter().find(|(i, _)| *i == src).unwrap().1.clone();
        // A merge of names (no blame, or copies blaming each other) goes to
        // every copy, the source of metadata included: it may lack names
        // the others have.
        let merge_names = conservative && kind == FileKind::Dir;
        let everyone: Vec<usize> = copies.iter().map(|(i, _)| *i).collect();
        let sinks: Vec<usize> = if merge_names {
            everyone.clone()
        } else {
            // `src` is always among the sources.
            everyone
                .iter()
                .copied()
                .filter(|i| !sources.contains(i))
                .collect()
        };
        let mut children = Vec::new();
        let mut healed = Vec::new();
        for &sink in &sinks {
            let sink_attr = copies.iter().find(|(i, _)| *i == sink).unwrap().1.clone();
            if sink_attr.kind != kind {
                tracing::warn!(set = %self.name, %gfid, "copies of one gfid differ in type; left alone");
                continue;
            }
            let r = async {
                match kind {
                    FileKind::Dir => {
                        let from = if conservative { &everyone } else { &sources };
                        let (n, new) = self.heal_entries(gfid, from, sink, conservative).await?;
                        out.entries += n;
                        children.extend(new);
                    }
                    // An arbiter gets no data.
                    FileKind::File if Some(sink) != self.arbiter => {
                        let pair = (src, sink);
                        out.bytes += self
                            .heal_data(gfid, pair, &src_attr, sink_attr.size, locked)
                            .await?;
                    }
                    _ => {}
                }
                if sink == src {
                    return Ok(());
                }
                self.heal_meta(gfid, (src, sink), &src_attr).await
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
        out.healed = healed.len() as u32;
        // A file's source changed while the heal ran (the lock was let go
        // between data chunks, or a client wrote without it, as a rolling
        // restart suggests: docs/replication.md, Limits): its changes
        // may have missed the sink again, so nothing is cleared and the
        // next pass looks again. (A directory's lock is held throughout,
        // and a name merge changes the source itself.)
        if kind == FileKind::File {
            let now = self.stat(gfid, &[src]).await?;
            if now.first().map(|(_, a)| a.ctime) != Some(src_attr.ctime) {
                out.deferred = true;
                out.healed = 0;
                return Ok((out, children));
            }
        }
        // The blame of a sink that was not reached (down, or without the
        // object yet: its directory's heal makes it) stays.
        let reached = bits(&healed) | (bits(&everyone) & !bits(&sinks));
        // A change of unknown outcome is settled once every copy was
        // compared: a copy away may hold what the others lack.
        let mut settled = 0;
        if marks & UNSETTLED != 0 {
            if locked.len() == self.bricks.len() && reached & bits(&sinks) == bits(&sinks) {
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

    async fn clear(&self, gfid: Gfid, idx: &[usize], unblame: u32) {
        self.each(idx, Fop::Clear { gfid, unblame }).await;
    }

    /// Copies the blocks of `src` whose checksums differ on `sink`, chunk
    /// by chunk (an empty sink is not asked for its sums, and gets no
    /// blocks of zeros: they are holes once its size is set, as on the
    /// source), and sets the sink's size to the source's. Answers the bytes
    /// copied.
    async fn heal_data(
        &self,
        gfid: Gfid,
        (src, sink): (usize, usize),
        a: &Attr,
        sink_size: u64,
        locked: &[usize],
    ) -> FsResult<u64> {
        let (s, k) = (&self.bricks[src], &self.bricks[sink]);
        let mut copied = 0u64;
        let mut fh = None;
        let mut off = 0u64;
        let res: FsResult<()> = async {
            while off < a.size {
                let blocks = (a.size - off)
                    .div_ceil(BLOCK as u64)
                    .min(CHUNK_BLOCKS as u64);
                // Which blocks differ: all of them on an empty sink.
                let differ: Vec<bool> = if sink_size == 0 {
                    vec![true; blocks as usize]
                } else {
                    let (want, have) =
                        futures_util::future::join(sums(s, gfid, off), sums(k, gfid, off)).await;
                    let (Reply::Sums(want), Reply::Sums(have)) = (want?, have?) else {
                        return Err(FsError::new(libc::EIO, "checksum answered without sums"));
                    };
                    want.iter()
                        .enumerate()
                        .map(|(n, w)| have.get(n) != Some(w))
                        .collect()
                };
                for (n, _) in differ.iter().enumerate().filter(|(_, d)| **d) {
                    let at = off + n as u64 * BLOCK as u64;
                    let Reply::Data(data) = call(
                        s,
                        &root(),
                        Fop::Read {
                            gfid,
                            fh: ANON_FH,
                            offset: at,
                            size: BLOCK,
                        },
                    )
                    .await?
                    else {
                        return Err(FsError::new(libc::EIO, "read answered without data"));
                    };
                    if at >= sink_size && data.iter().all(|&b| b == 0) {
                        continue;
                    }
                    let h = match fh {
                        Some(h) => h,
                        None => {
                            let open = Fop::Open {
                                gfid,
                                flags: libc::O_WRONLY,
                            };
                            let Reply::Opened { fh: h } = call(k, &root(), open).await? else {
                                return Err(FsError::new(
                                    libc::EIO,
                                    "open answered without a handle",
                                ));
                            };
                            *fh.insert(h)
                        }
                    };
                    copied += data.len() as u64;
                    call(
                        k,
                        &root(),
                        Fop::Write {
                            gfid,
                            fh: h,
                            offset: at,
                            data,
                        },
                    )
                    .await?;
                }
                off += BLOCK as u64 * CHUNK_BLOCKS as u64;
                if off >= a.size {
                    break;
                }
                // Let an application waiting for the file have a turn.
                self.unlock(gfid, locked).await;
                if self.lock(gfid, locked).await.len() != locked.len() {
                    return Err(FsError::notconn("a replica went away during heal"));
                }
            }
            Ok(())
        }
        .await;
        if let Some(fh) = fh {
            let _ = call(k, &root(), Fop::Release { gfid, fh }).await;
        }
        res?;
        let set = SetAttr {
            size: Some(a.size),
            ..Default::default()
        };
        call(k, &root(), Fop::Setattr { gfid, set }).await?;
        Ok(copied)
    }

    /// Owner, mode, times and xattrs of `sink` made those of `src`.
    async fn heal_meta(&self, gfid: Gfid, (src, sink): (usize, usize), a: &Attr) -> FsResult<()> {
        let (s, k) = (&self.bricks[src], &self.bricks[sink]);
        let symlink = a.kind == FileKind::Symlink;
        let set = SetAttr {
            mode: (!symlink).then_some(a.perm),
            uid: Some(a.uid),
            gid: Some(a.gid),
            size: None,
            atime: (!symlink).then_some(TimeSet::At(a.atime.0, a.atime.1)),
            mtime: (!symlink).then_some(TimeSet::At(a.mtime.0, a.mtime.1)),
        };
        if symlink {
            return Ok(());
        }
        let (want, have) =
            futures_util::future::join(xattr_names(s, gfid), xattr_names(k, gfid)).await;
        let (want, have) = (want?, have?);
        for n in &want {
            let Reply::Xattr(v) = get_xattr(s, gfid, n).await? else {
                continue;
            };
            if matches!(get_xattr(k, gfid, n).await, Ok(Reply::Xattr(w)) if w == v) {
                continue;
            }
            call(
                k,
                &root(),
                Fop::Setxattr {
                    gfid,
                    name: n.clone(),
                    value: v,
                    flags: 0,
                },
            )
            .await?;
        }
        for n in have.iter().filter(|n| !want.contains(n)) {
            call(
                k,
                &root(),
                Fop::Removexattr {
                    gfid,
                    name: n.clone(),
                },
            )
            .await?;
        }
        // Times last: healing data and names changes them.
        call(k, &root(), Fop::Setattr { gfid, set }).await?;
        Ok(())
    }

    /// The names in directory `dir` on brick `b`, with their attributes.
    async fn list(&self, b: usize, dir: Gfid) -> FsResult<HashMap<Vec<u8>, Attr>> {
        let k = &self.bricks[b];
        let Reply::Opened { fh } = call(k, &root(), Fop::Opendir { gfid: dir }).await? else {
            return Err(FsError::new(libc::EIO, "opendir answered without a handle"));
        };
        let mut out = HashMap::new();
        let mut offset = 0;
        let res: FsResult<()> = async {
            loop {
                let fop = Fop::Readdir {
                    gfid: dir,
                    fh,
                    offset,
                    plus: true,
                };
                let Reply::Entries(ents) = call(k, &root(), fop).await? else {
                    return Err(FsError::new(libc::EIO, "readdir answered without entries"));
                };
                if ents.is_empty() {
                    return Ok(());
                }
                for e in ents {
                    offset = e.next;
                    if let Some(a) = e.attr {
                        out.insert(e.name.into_vec(), a);
                    }
                }
            }
        }
        .await;
        let _ = call(k, &root(), Fop::Releasedir { gfid: dir, fh }).await;
        res.map(|_| out)
    }

    /// Makes the names of `dir` on `sink` those of the sources: names
    /// missing there are made (with their gfid, as links when the object is
    /// there under another name), names the sources lack are removed
    /// (unless `conservative`: then nothing is removed). Answers how many
    /// names changed and the objects made, to be healed next.
    async fn heal_entries(
        &self,
        dir: Gfid,
        sources: &[usize],
        sink: usize,
        conservative: bool,
    ) -> FsResult<(u64, Vec<Gfid>)> {
        let mut want: HashMap<Vec<u8>, (usize, Attr)> = HashMap::new();
        for &s in sources {
            for (n, a) in self.list(s, dir).await? {
                want.entry(n).or_insert((s, a));
            }
            if !conservative {
                break;
            }
        }
        let have = self.list(sink, dir).await?;
        let mut changed = 0;
        let mut made = Vec::new();
        // Names the sink has wrongly: removed first (unless conservative).
        if !conservative {
            for (n, a) in &have {
                if want.get(n).is_some_and(|(_, w)| w.gfid == a.gfid) {
                    continue;
                }
                self.remove_tree(sink, dir, n, a).await?;
                changed += 1;
            }
        }
        // The names to make, by object: the names of one object (hard
        // links) are made one after the other, the objects several at once.
        let mut missing: HashMap<Gfid, NamesToMake> = HashMap::new();
        for (n, (src, a)) in &want {
            match have.get(n) {
                Some(h) if h.gfid == a.gfid => continue,
                Some(_) if conservative => {
                    tracing::warn!(set = %self.name, %dir, name = %String::from_utf8_lossy(n), "copies of a name carry different gfids; left alone");
                    continue;
                }
                _ => {}
            }
            missing.entry(a.gfid).or_default().push((n, *src, a));
        }
        // Healed as this directory's children right after: the index pass
        // under way leaves them alone.
        self.fresh.lock().unwrap().extend(missing.keys());
        let makes = missing
            .into_iter()
            .map(|(gfid, names)| -> BoxFuture<'_, _> {
                Box::pin(async move {
                    for &(n, src, a) in &names {
                        self.make(src, sink, dir, n, a).await?;
                    }
                    Ok::<_, FsError>((gfid, names.len() as u64))
                })
            });
        for r in at_once(makes.collect(), PARALLEL).await {
            let (gfid, names) = r?;
            made.push(gfid);
            changed += names;
        }
        Ok((changed, made))
    }

    async fn make(&self, src: usize, sink: usize, dir: Gfid, n: &[u8], a: &Attr) -> FsResult<()> {
        let k = &self.bricks[sink];
        let name = Name::new(n.to_vec())?;
        let cx = Ctx {
            uid: a.uid,
            gid: a.gid,
            ..Ctx::root()
        };
        let (gfid, perm) = (a.gfid, a.perm);
        // The object may be on the sink already under another name (a hard
        // link, or a file renamed while the sink was down).
        if a.kind != FileKind::Dir
            && call(k, &root(), Fop::Getattr { gfid })
                .await
                .is_ok_and(|r| matches!(r, Reply::Attr(_)))
        {
            call(
                k,
                &root(),
                Fop::Link {
                    gfid,
                    newparent: dir,
                    newname: name,
                },
            )
            .await?;
            return Ok(());
        }
        let fop = match a.kind {
            FileKind::Dir => Fop::Mkdir {
                parent: dir,
                name,
                gfid,
                mode: perm,
                umask: 0,
            },
            FileKind::Symlink => {
                let Reply::Data(t) =
                    call(&self.bricks[src], &root(), Fop::Readlink { gfid }).await?
                else {
                    return Err(FsError::new(libc::EIO, "readlink answered without data"));
                };
                Fop::Symlink {
                    parent: dir,
                    name,
                    gfid,
                    target: serde_bytes::ByteBuf::from(t.to_vec()),
                }
            }
            kind => Fop::Mknod {
                parent: dir,
                name,
                gfid,
                mode: perm | kind.type_bits(),
                umask: 0,
                rdev: a.rdev,
                linkto: None,
            },
        };
        // (A file too is made by mknod: no handle to let go after.)
        call(k, &cx, fop).await?;
        // The new copy is as stale as can be until healed: say so on the
        // source, so that it is healed even if this heal stops here.
        let src_b = &self.bricks[src];
        let mark = Fop::Lock {
            gfid,
            wait: true,
            mark: Some(1 << sink),
        };
        if call(src_b, &root(), mark).await.is_ok() {
            let _ = call(src_b, &root(), Fop::Unlock { gfids: vec![gfid] }).await;
        }
        Ok(())
    }

    /// Removes `n` (and, for a directory, all below it) from `dir` on `b`.
    async fn remove_tree(&self, b: usize, dir: Gfid, n: &[u8], a: &Attr) -> FsResult<()> {
        let k = &self.bricks[b];
        let name = Name::new(n.to_vec())?;
        if a.kind == FileKind::Dir {
            for (cn, ca) in self.list(b, a.gfid).await? {
                Box::pin(self.remove_tree(b, a.gfid, &cn, &ca)).await?;
            }
            call(k, &root(), Fop::Rmdir { parent: dir, name }).await?;
        } else {
            call(k, &root(), Fop::Unlink { parent: dir, name }).await?;
        }
        Ok(())
    }
}

/// The names of one object a sink lacks: each with the brick it is copied
/// from and the object's attributes there.
type NamesToMake<'a> = Vec<(&'a [u8], usize, &'a Attr)>;

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

/// The copy a split-brain policy chooses, if it decides.
fn pick_by_policy(copies: &[(usize, Attr)], policy: Policy) -> Option<usize> {
    let best = |key: &dyn Fn(&Attr) -> (i64, u64)| {
        let max = copies.iter().map(|(_, a)| key(a)).max()?;
        let top: Vec<usize> = copies
            .iter()
            .filter(|(_, a)| key(a) == max)
            .map(|(i, _)| *i)
            .collect();
        // A tie decides nothing, except for the "fullest copy" rule used
        // when every copy is valid.
        (top.len() == 1 || policy == Policy::Size).then(|| top[0])
    };
    match policy {
        Policy::None => None,
        Policy::Size => best(&|a| {
            (
                a.size as i64,
                a.mtime.0 as u64 * 1_000_000_000 + a.mtime.1 as u64,
            )
        }),
        Policy::Mtime => best(&|a| (a.mtime.0, a.mtime.1 as u64)),
        Policy::Ctime => best(&|a| (a.ctime.0, a.ctime.1 as u64)),
        Policy::Majority => {
            // The copy whose (size, mtime) more than half the copies share.
            let key = |a: &Attr| (a.size, a.mtime);
            copies
                .iter()
                .find(|(_, a)| {
                    copies.iter().filter(|(_, b)| key(b) == key(a)).count() * 2 > copies.len()
                })
                .map(|(i, _)| *i)
        }
    }
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
