//! Reads: which copies may be read (`readable`: none another copy
//! blames), which one answers (`attr_child` for names and attributes,
//! `read_child` for data), and what this client learns of the copies'
//! blame from every lookup and getattr.

use super::*;
use mortar_core::fop::ANON_FH;
use mortar_core::DirEntry;

impl Replicate {
    /// The child every answer about attributes and names comes from: the
    /// first one up. One copy for all metadata keeps attributes stable and
    /// lets directory listings hand cacheable attributes to the kernel;
    /// file data is spread over the replicas by `read_child`.
    pub(super) fn attr_child(&self, gfid: Gfid, allowed: &[usize]) -> FsResult<usize> {
        let good = self.readable(gfid, allowed)?;
        // The lowest good replica, an arbiter (whose files have no size)
        // only if nothing else is left.
        Ok(good
            .iter()
            .copied()
            .filter(|&i| Some(i) != self.arbiter)
            .min()
            .unwrap_or(good[0]))
    }

    /// The copies of `gfid` this client knows to be stale (a bit mask).
    pub(super) fn stale_copies(&self, gfid: Gfid) -> u32 {
        self.bad.lock().unwrap().get(&gfid).copied().unwrap_or(0)
    }

    /// Of `allowed`, the copies of `gfid` no other copy blames. Never
    /// empty: with no good copy up, the object cannot be read (EIO if some
    /// copy is up but blamed: reading it could return stale data).
    pub(super) fn readable(&self, gfid: Gfid, allowed: &[usize]) -> FsResult<Vec<usize>> {
        if allowed.is_empty() {
            return Err(FsError::notconn(format!("{}: no replica is up", self.name)));
        }
        let bad = self.stale_copies(gfid);
        let good: Vec<usize> = allowed
            .iter()
            .copied()
            .filter(|&i| bad & (1 << i) == 0)
            .collect();
        if good.is_empty() {
            return Err(FsError::new(
                libc::EIO,
                format!(
                    "{}: {gfid}: no good copy is up (copies {bad:#b} missed changes and are not healed yet)",
                    self.name
                ),
            ));
        }
        Ok(good)
    }

    /// Asks every copy of `gfid` up for its blame again (what this client
    /// knows may predate a heal).
    pub(super) async fn refresh(&self, cx: &Ctx, gfid: Gfid) {
        let up = self.up();
        let res = self.fan_out(cx, &up, |_| Some(Fop::Getattr { gfid })).await;
        let mut blame = 0;
        let mut answers = 0;
        for (_, r) in res {
            if let Ok(Reply::Attr(a)) = r {
                blame |= a.blame;
                answers += 1;
            }
        }
        // What fewer copies than `answers_needed` say replaces nothing: the
        // only record of a copy's staleness may be on a copy away (the one
        // good copy, down), and forgetting it would let a change reach
        // stale copies only and have them blame the good one. (Without a
        // quorum the user chose availability: the copies up are believed.)
        if answers > 0 {
            self.learn(
                gfid,
                blame,
                answers >= self.txns.answers_needed() || self.txns.quorum() == Quorum::None,
            );
        }
    }

    /// What the copies of `gfid` said about each other: `blame` is the union
    /// of their blames (a fresh lookup replaces what was known, a change
    /// that some replica missed adds to it).
    pub(super) fn learn(&self, gfid: Gfid, blame: u32, replace: bool) {
        // A copy's mark of a change of unknown outcome blames nobody.
        let blame = blame & !mortar_core::fop::UNSETTLED;
        let mut bad = self.bad.lock().unwrap();
        let b = if replace {
            blame
        } else {
            bad.get(&gfid).copied().unwrap_or(0) | blame
        };
        if b == 0 {
            bad.remove(&gfid);
        } else {
            if bad.len() >= BAD_MAX {
                bad.clear();
            }
            bad.insert(gfid, b);
        }
    }

    /// The child to read `gfid` from: spread by gfid over the children up.
    pub(super) fn read_child(&self, gfid: Gfid, allowed: &[usize]) -> FsResult<usize> {
        let mut allowed = self.readable(gfid, allowed)?;
        allowed.retain(|&i| Some(i) != self.arbiter);
        if allowed.is_empty() {
            return Err(FsError::new(
                libc::EIO,
                format!(
                    "{}: {gfid}: no brick with good data is up (an arbiter holds none)",
                    self.name
                ),
            ));
        }
        let allowed = &allowed[..];
        if self
            .read_hash_mode
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0
        {
            return Ok(allowed[0]);
        }
        let h = xxhash_rust::xxh64::xxh64(&gfid.0, 0) as usize;
        Ok(allowed[h % allowed.len()])
    }

    /// A read through handle `fh`: from one good copy, and if that copy
    /// cannot answer for any reason but a genuine one (`copy_fault`), from
    /// another good copy, so that the application sees no error while a
    /// good copy is reachable.
    pub(super) async fn read_handle(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let (gfid, fh) = (fop.gfid(), fop.fh().unwrap_or(0));
        let fhs = self.handles(cx, gfid, fh).await?;
        let mut allowed = fhs.live(&self.children);
        if self.read_child(gfid, &allowed).is_err() {
            self.refresh(cx, gfid).await;
        }
        let mut last: Option<FsError> = None;
        let mut faults = Faults::default();
        loop {
            let i = match self.read_child(gfid, &allowed) {
                Ok(i) => i,
                Err(e) => {
                    self.nowhere(gfid, &faults);
                    return Err(last.unwrap_or(e));
                }
            };
            match self.children[i]
                .call(cx, fop.clone().with_fh(fhs.fh(i)))
                .await
            {
                Err(e) if copy_fault(&e) => {
                    self.distrust(gfid, i, &e);
                    faults.note(i, &e);
                    allowed.retain(|&c| c != i);
                    last = Some(e);
                }
                r => return r,
            }
        }
    }

    /// Every copy asked lacked the object (ESTALE): it is not on this set
    /// (a directory a rebalance has not made here yet, a file elsewhere),
    /// which says nothing bad of the copies: the distrust it earned them
    /// is taken back.
    fn nowhere(&self, gfid: Gfid, f: &Faults) {
        if f.absent != 0 && !f.other {
            let mut bad = self.bad.lock().unwrap();
            if let Some(b) = bad.get_mut(&gfid) {
                *b &= !f.absent;
                if *b == 0 {
                    bad.remove(&gfid);
                }
            }
        }
    }

    /// A copy failed in a way that says it is not a good copy of `gfid`
    /// (it lacks it, or cannot read it): reads avoid it until a lookup
    /// says otherwise.
    pub(super) fn distrust(&self, gfid: Gfid, i: usize, e: &FsError) {
        if e.is(libc::ENOTCONN) {
            return;
        }
        if e.is(libc::ESTALE) {
            // Often not a fault at all: the object is not on this set.
            tracing::debug!(xlator = %self.name, %gfid, replica = i, "a copy lacks the object; asking another");
        } else {
            tracing::info!(xlator = %self.name, %gfid, replica = i, "a copy failed a read ({e}); reading another copy");
        }
        self.learn(gfid, 1 << i, false);
        if e.is(libc::EIO) {
            self.blame_damaged(gfid, i);
        }
    }

    /// Copy `i` of `gfid` failed a read with EIO: its brick found a block
    /// that does not match its checksum (`storage.checksums`), or cannot
    /// read it. Recorded on the other copies up, as a change it missed
    /// would be, with the whole file as the ranges to compare (nothing was
    /// written where the damage is), so that the heal rebuilds it; in the
    /// background.
    fn blame_damaged(&self, gfid: Gfid, i: usize) {
        use mortar_core::changed::{Changed, CHANGED_XATTR};
        let others: Vec<usize> = self.up().into_iter().filter(|&x| x != i).collect();
        let (txns, name) = (self.txns.clone(), self.name.clone());
        let children: Vec<_> = others
            .iter()
            .map(|&x| self.children[x].xl.clone())
            .collect();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            match txns.begin(gfid, &others).await {
                Ok(t) => {
                    let whole = Fop::Setxattr {
                        gfid,
                        name: CHANGED_XATTR.into(),
                        value: Changed::Whole.encode().into(),
                        flags: 0,
                    };
                    let cx = Ctx::root();
                    let marks = t.targets.iter().map(|&x| {
                        let child = &children[others.iter().position(|&o| o == x).unwrap()];
                        child.call(&cx, whole.clone())
                    });
                    futures_util::future::join_all(marks).await;
                    let ok: Vec<_> = t.targets.iter().map(|&x| (x, Ok(Reply::Ok))).collect();
                    txns.finish(t, &ok, false).await;
                    tracing::warn!(xlator = %name, %gfid, replica = i, "a copy failed a read with EIO; recorded for heal");
                }
                Err(e) => {
                    tracing::warn!(xlator = %name, %gfid, replica = i, "a copy failed a read with EIO, and cannot be recorded for heal: {e}")
                }
            }
        });
    }
}

/// A listing of a directory not opened (`How::DirBehind`): the child it
/// came from, in which epoch, its last batch, and the child's handle for
/// the rest (None: the batch was the end).
pub(super) struct Listed {
    child: usize,
    epoch: u64,
    /// Batches by the offset each was read from: one answers that offset
    /// and later ones up to its end (the kernel takes a batch in several
    /// readdirs; `seekdir` comes back to one). The latest `KEPT_BATCHES`.
    batches: std::collections::BTreeMap<u64, Vec<DirEntry>>,
    more: Option<u64>,
}

/// How many batches of a listing a handle keeps (512 entries each).
const KEPT_BATCHES: usize = 8;

impl Listed {
    /// The entries after `offset` of the batch that holds it.
    fn after(&self, offset: u64) -> Vec<DirEntry> {
        match self.batches.range(..=offset).next_back() {
            Some((_, batch)) => batch.iter().filter(|e| e.next > offset).cloned().collect(),
            None => Vec::new(),
        }
    }

    fn keep(&mut self, from: u64, batch: Vec<DirEntry>) {
        // Batches read again from another offset overlap: the newest wins.
        let end = batch.last().map_or(from, |e| e.next);
        self.batches.retain(|&f, _| f < from || f >= end);
        self.batches.insert(from, batch);
        while self.batches.len() > KEPT_BATCHES {
            // The one farthest from where the reader is now.
            let first = *self.batches.keys().next().unwrap();
            let last = *self.batches.keys().next_back().unwrap();
            let drop = if from.abs_diff(first) >= from.abs_diff(last) {
                first
            } else {
                last
            };
            self.batches.remove(&drop);
        }
    }
}

impl Replicate {
    /// A listing, read from the attribute child (its offsets are that
    /// replica's, so it stays there while it is up). With attributes
    /// (readdirplus), the other copies are asked at the same time which
    /// objects they blame: a copy that missed changes does not know it, so
    /// the listing's own word is not enough. An entry whose listed copy is
    /// not known good goes to the kernel without attributes (it looks the
    /// name up, which asks a majority); one from a copy other than its
    /// attribute child goes uncached, so that attributes never flip.
    pub(super) async fn readdir(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        fh: u64,
        offset: u64,
        plus: bool,
    ) -> FsResult<Reply> {
        if self.fds.get(fh)?.how == How::DirBehind {
            return self.readdir_behind(cx, gfid, fh, offset, plus).await;
        }
        let fhs = self.handles(cx, gfid, fh).await?;
        let live = fhs.live(&self.children);
        let i = self.attr_child(gfid, &live)?;
        let fop = Fop::Readdir {
            gfid,
            fh: fhs.fh(i),
            offset,
            plus,
        };
        self.listed(cx, i, fop, plus).await
    }

    /// Sends readdir `fop` to child `i` (with the blame probes of a
    /// readdirplus, where the other children's answers are not kept) and
    /// judges the entries' attributes.
    async fn listed(&self, cx: &Ctx, i: usize, fop: Fop, plus: bool) -> FsResult<Reply> {
        let others: Vec<usize> = match plus {
            true => self.up().into_iter().filter(|&c| c != i).collect(),
            false => Vec::new(),
        };
        let mut probes: Vec<(usize, FsResult<Reply>)> = Vec::new();
        let ask: Vec<usize> = others
            .into_iter()
            .filter(|&c| match self.blames.get(c) {
                Some(v) => {
                    probes.push((c, Ok(Reply::Blames(v))));
                    false
                }
                None => true,
            })
            .collect();
        let probe = Fop::Blamed {
            max: BLAMED_MAX as u32,
        };
        let marks: Vec<u64> = ask.iter().map(|&c| self.blames.mark(c)).collect();
        let (rep, asked) = futures_util::future::join(
            self.children[i].call(cx, fop),
            self.fan_out(cx, &ask, |_| Some(probe.clone())),
        )
        .await;
        for (c, r) in asked {
            if let (Ok(Reply::Blames(v)), Some(p)) = (&r, ask.iter().position(|&a| a == c)) {
                if v.len() <= BLAMED_MAX {
                    self.blames.keep(c, marks[p], v);
                }
            }
            probes.push((c, r));
        }
        let mut rep = rep?;
        let (Reply::Entries(ents) | Reply::Listed(ents, _)) = &mut rep else {
            return Ok(rep);
        };
        if !plus {
            return Ok(rep);
        }
        let mut blames: HashMap<Gfid, u32> = HashMap::new();
        let mut unsure = false;
        for (_, r) in probes {
            match r {
                Ok(Reply::Blames(v)) if v.len() <= BLAMED_MAX => {
                    for (g, b) in v {
                        *blames.entry(g).or_default() |= b;
                    }
                }
                _ => unsure = true,
            }
        }
        let up = self.up();
        for e in ents.iter_mut() {
            let Some(a) = &e.attr else { continue };
            let g = a.gfid;
            let blame = a.blame | blames.get(&g).copied().unwrap_or(0);
            if blame != 0 {
                self.learn(g, blame, false);
            }
            let bad = self.stale_copies(g);
            if unsure || bad & (1 << i) != 0 {
                e.attr = None;
            } else if self.attr_child(g, &up).ok() != Some(i) {
                e.cacheable = false;
            }
        }
        Ok(rep)
    }

    /// Readdir of a directory not opened (`How::DirBehind`): offset 0 lists
    /// it on the attribute child without a handle (`Reply::Listed`); later
    /// offsets are served from the batches kept (`Listed`), else through
    /// the child's handle, whose listing holds every offset, or are the
    /// end. An offset names the same entry for as long as the handle
    /// lives (`seekdir`, NFS cookies).
    async fn readdir_behind(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        fh: u64,
        offset: u64,
        plus: bool,
    ) -> FsResult<Reply> {
        let known = self.listings.lock().unwrap().get(&fh).map(|l| {
            let rest = l.after(offset);
            let live = self.children[l.child].is_up() && self.children[l.child].epoch() == l.epoch;
            (rest, l.more, l.child, live)
        });
        let (i, fop) = match known {
            Some((rest, _, _, _)) if offset > 0 && !rest.is_empty() => {
                return Ok(Reply::Entries(rest));
            }
            Some((_, None, _, _)) if offset > 0 => return Ok(Reply::Entries(Vec::new())),
            Some((_, Some(more), child, true)) if offset > 0 => (
                child,
                Fop::Readdir {
                    gfid,
                    fh: more,
                    offset,
                    plus,
                },
            ),
            _ => {
                // From the start (a rewind lists it anew), or again after
                // the child that held the rest went away.
                let up = self.up();
                let i = self.attr_child(gfid, &up)?;
                let fop = Fop::Readdir {
                    gfid,
                    fh: ANON_FH,
                    offset: 0,
                    plus,
                };
                (i, fop)
            }
        };
        let anew = offset == 0 || !matches!(fop, Fop::Readdir { fh: f, .. } if f != ANON_FH);
        let epoch = self.children[i].epoch();
        let rep = self.listed(cx, i, fop, plus).await?;
        let (ents, more) = match rep {
            Reply::Listed(ents, more) => (ents, more),
            Reply::Entries(ents) => {
                let mut ls = self.listings.lock().unwrap();
                if let Some(l) = ls.get_mut(&fh) {
                    l.keep(offset, ents.clone());
                }
                return Ok(Reply::Entries(ents));
            }
            other => return Err(mortar_core::fop::unexpected(other)),
        };
        let new = Listed {
            child: i,
            epoch,
            batches: [(0, ents.clone())].into(),
            more,
        };
        let old = self.listings.lock().unwrap().insert(fh, new);
        if let Some(old) = old {
            self.release_listing(gfid, old);
        }
        if self.fds.get(fh).is_err() {
            // Released meanwhile.
            self.listing_ends(gfid, fh);
        }
        Ok(Reply::Entries(match anew && offset > 0 {
            true => ents.into_iter().filter(|e| e.next > offset).collect(),
            false => ents,
        }))
    }

    /// Our listing handle `fh` is done with: the rest of its listing, if a
    /// brick holds one, is let go.
    pub(super) fn listing_ends(&self, gfid: Gfid, fh: u64) {
        if let Some(old) = self.listings.lock().unwrap().remove(&fh) {
            self.release_listing(gfid, old);
        }
    }

    fn release_listing(&self, gfid: Gfid, l: Listed) {
        let Some(more) = l.more else { return };
        let child = self.children[l.child].clone();
        if child.epoch() != l.epoch {
            return;
        }
        tokio::spawn(async move {
            let _ = child
                .call(&Ctx::root(), Fop::Releasedir { gfid, fh: more })
                .await;
        });
    }

    /// Asks the attribute child about metadata, falling back to the other
    /// good copies if it cannot answer (`copy_fault`).
    pub(super) async fn meta_one(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let gfid = fop.gfid();
        let mut up = self.up();
        let mut last: Option<FsError> = None;
        let mut faults = Faults::default();
        loop {
            let i = match self.attr_child(gfid, &up) {
                Ok(i) => i,
                Err(e) => {
                    self.nowhere(gfid, &faults);
                    return Err(last.unwrap_or(e));
                }
            };
            match self.children[i].call(cx, fop.clone()).await {
                Err(e) if copy_fault(&e) => {
                    self.distrust(gfid, i, &e);
                    faults.note(i, &e);
                    up.retain(|&c| c != i);
                    last = Some(e);
                }
                Ok(Reply::Attr(a)) => {
                    self.learn(gfid, a.blame, false);
                    return Ok(Reply::Attr(a));
                }
                r => return r,
            }
        }
    }

    /// Lookups ask every replica, so that a name missing on one copy is
    /// still found on the others. Copies of the directory that missed
    /// changes to its names are not believed; the answers say what the
    /// object's copies blame, which decides where it is read from.
    pub(super) async fn lookup(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let parent = fop.gfid();
        let up = self.up();
        let trusted = self.readable(parent, &up)?;
        // The first answers that are enough to tell stale copies (see
        // `Txns::answers_needed`): the slowest replica is not waited for.
        let needed = self.txns.answers_needed();
        let mut pending: FuturesUnordered<_> = trusted
            .iter()
            .map(|&i| {
                let (child, fop) = (self.children[i].clone(), fop.clone());
                async move { (i, child.call(cx, fop).await) }
            })
            .collect();
        let mut err: Option<FsError> = None;
        let mut found: Vec<(usize, mortar_core::Entry)> = Vec::new();
        let mut answered = 0;
        // Copies that answered without the name.
        let mut lacking: u32 = 0;
        while let Some((i, r)) = pending.next().await {
            match r {
                Ok(Reply::Entry(e)) => found.push((i, e)),
                Ok(other) => return Ok(other),
                Err(e) => {
                    // A copy lacking the directory itself (ESTALE: a new
                    // brick not healed yet) says less than one that lacks
                    // the name (ENOENT), whichever answered first.
                    let weaker = |x: &FsError| {
                        x.is(libc::ENOTCONN) || (x.is(libc::ESTALE) && !e.is(libc::ENOTCONN))
                    };
                    if err.as_ref().is_none_or(weaker) {
                        err = Some(e.clone());
                    }
                    if e.is(libc::ENOTCONN) {
                        continue;
                    }
                    lacking |= 1 << i;
                }
            }
            answered += 1;
            if answered >= needed {
                break;
            }
        }
        // Answers came in any order; the attribute child is the first good
        // replica in replica order.
        found.sort_by_key(|(i, _)| *i);
        if found.is_empty() {
            return Err(
                err.unwrap_or_else(|| FsError::notconn(format!("{}: no replica is up", self.name)))
            );
        }
        let gfid = found[0].1.attr.gfid;
        if found.iter().any(|(_, e)| e.attr.gfid != gfid) {
            tracing::debug!(xlator = %self.name, ?fop, "copies of one name carry different gfids (a change in flight, or heal will settle it)");
        }
        // Not good copies of the object: those its copies blame, those that
        // lack it (or hold another object under the name), and those up
        // whose directory missed changes to its names (not asked).
        let untrusted = txn::bits(&up) & !txn::bits(&trusted);
        let blame = found.iter().fold(lacking | untrusted, |b, (i, e)| {
            if e.attr.gfid == gfid {
                b | e.attr.blame
            } else {
                b | 1 << i
            }
        });
        // Fewer answers than that may lack the only record of a stale copy
        // (on a copy away): they add to what is known. (Without a quorum
        // the user chose availability: the copies up are believed.)
        self.learn(
            gfid,
            blame,
            answered >= needed || self.txns.quorum() == Quorum::None,
        );
        let idx: Vec<usize> = found.iter().map(|(i, _)| *i).collect();
        let want = self.attr_child(gfid, &idx).unwrap_or(idx[0]);
        let pos = found.iter().position(|(i, _)| *i == want).unwrap_or(0);
        Ok(Reply::Entry(found.swap_remove(pos).1))
    }
}

/// How the copies asked in turn failed.
#[derive(Default)]
struct Faults {
    /// Those that lacked the object (ESTALE).
    absent: u32,
    /// Whether any failed otherwise.
    other: bool,
}

impl Faults {
    fn note(&mut self, i: usize, e: &FsError) {
        if e.is(libc::ESTALE) {
            self.absent |= 1 << i;
        } else if !e.is(libc::ENOTCONN) {
            self.other = true;
        }
    }
}

/// What each child last said it blames (`Fop::Blamed`), kept while the
/// bricks grant leases: a brick recalls its list (`Gfid::BLAMES`) before
/// any change that adds blame, so a readdirplus asks the other copies only
/// when their list may have changed, not at every listing.
pub struct BlamesKept {
    leased: std::sync::atomic::AtomicBool,
    /// The lease's time, in milliseconds.
    lease_ms: std::sync::atomic::AtomicU64,
    /// Per child: the list until its lease ends, and a count moved on
    /// whenever it is dropped (an answer to a probe sent before is not
    /// kept).
    kept: Vec<Mutex<(Option<Blames>, u64)>>,
}

/// A child's blamed objects, and when the lease on that list ends.
type Blames = (Vec<(Gfid, u32)>, std::time::Instant);

impl BlamesKept {
    pub fn new(children: usize) -> BlamesKept {
        BlamesKept {
            leased: std::sync::atomic::AtomicBool::new(false),
            lease_ms: std::sync::atomic::AtomicU64::new(0),
            kept: (0..children).map(|_| Mutex::default()).collect(),
        }
    }

    /// Whether the bricks grant leases (`features.cache-invalidation`),
    /// and for how long.
    pub fn set_leased(&self, on: bool, lease: std::time::Duration) {
        self.lease_ms.store(
            lease.as_millis() as u64,
            std::sync::atomic::Ordering::Release,
        );
        let was = self.leased.swap(on, std::sync::atomic::Ordering::AcqRel);
        if was && !on {
            for c in 0..self.kept.len() {
                self.drop_child(c);
            }
        }
    }

    pub fn get(&self, child: usize) -> Option<Vec<(Gfid, u32)>> {
        if !self.leased.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let k = self.kept.get(child)?.lock().unwrap();
        let (v, until) = k.0.as_ref()?;
        (*until > std::time::Instant::now()).then(|| v.clone())
    }

    /// To take before asking `child`.
    pub fn mark(&self, child: usize) -> u64 {
        self.kept.get(child).map_or(0, |k| k.lock().unwrap().1)
    }

    /// Keeps `child`'s answer to a probe sent at `mark`, unless its list
    /// was recalled (or the child went away) since.
    pub fn keep(&self, child: usize, mark: u64, v: &[(Gfid, u32)]) {
        if !self.leased.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        if let Some(k) = self.kept.get(child) {
            let mut k = k.lock().unwrap();
            if k.1 == mark {
                let lease = self.lease_ms.load(std::sync::atomic::Ordering::Acquire);
                let until = std::time::Instant::now() + std::time::Duration::from_millis(lease);
                k.0 = Some((v.to_vec(), until));
            }
        }
    }

    pub fn drop_child(&self, child: usize) {
        if let Some(k) = self.kept.get(child) {
            let mut k = k.lock().unwrap();
            k.0 = None;
            k.1 += 1;
        }
    }
}

#[cfg(test)]
mod blames_tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn kept_lists_end_with_a_recall_a_loss_or_the_lease() {
        let k = BlamesKept::new(2);
        let g = Gfid::random();
        // Without leases nothing is kept.
        k.keep(0, k.mark(0), &[(g, 1)]);
        assert!(k.get(0).is_none());
        k.set_leased(true, Duration::from_secs(60));
        k.keep(0, k.mark(0), &[(g, 1)]);
        assert_eq!(k.get(0), Some(vec![(g, 1)]));
        assert!(k.get(1).is_none());
        // A recall (or the child going down) drops it; an answer to a
        // probe sent before that is not kept.
        let before = k.mark(0);
        k.drop_child(0);
        assert!(k.get(0).is_none());
        k.keep(0, before, &[]);
        assert!(k.get(0).is_none());
        k.keep(0, k.mark(0), &[]);
        assert_eq!(k.get(0), Some(vec![]));
        // Leases turned off: dropped, and not kept again.
        k.set_leased(false, Duration::from_secs(60));
        assert!(k.get(0).is_none());
        // A list outlives no lease.
        k.set_leased(true, Duration::ZERO);
        k.keep(1, k.mark(1), &[]);
        assert!(k.get(1).is_none());
    }
}
