//! The replicate translator: N children holding the same data.
//!
//! Every modifying operation goes to every child that is up, concurrently,
//! and is acknowledged only when all of them have answered. File data is
//! read from one child chosen by the object's gfid (`read_child`), so that
//! different files spread over the replicas; names and attributes come from
//! one child for every object (`attr_child`), so that they are stable.
//!
//! Changes run as transactions (`txn.rs`): quorum, a lock kept across a
//! client's consecutive changes, a durable record on the bricks of which
//! replicas missed a change (the blame), before the change is acknowledged.
//! Reads never go to a copy another copy blames (`readable`); the blame
//! each copy records comes back with every lookup and getattr.
//! `merge` is the single place where answers of the replicas are judged,
//! and `readable` the single place where copies are chosen for reading.

mod handles;
pub mod options;
mod txn;

use super::HandleMap;
use crate::core::{
    Child, Ctx, Event, Fop, FsError, FsResult, Gfid, Reply, SetAttr, StatFs, Xlator,
};
use async_trait::async_trait;
use handles::{How, Open};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use txn::Txns;
pub use txn::{bits, Quorum};

/// Blamed objects a copy lists at most for a readdirplus (beyond, its
/// listing's attributes are not trusted: the kernel looks entries up).
const BLAMED_MAX: usize = 1024;

/// Objects whose blame is remembered at most (beyond, the oldest knowledge
/// is dropped and learnt again from the next lookup).
const BAD_MAX: usize = 1 << 16;

pub struct Replicate {
    name: String,
    children: Vec<Child>,
    /// Whether any child is up (what this translator tells its parent).
    up: std::sync::atomic::AtomicBool,
    /// Our handle → what it stands for on each child (`handles.rs`).
    fds: HandleMap<Arc<Open>>,
    /// Held while handles are opened again on children that came back, so
    /// that two operations on one handle do not both re-open it.
    reopening: tokio::sync::Mutex<()>,
    /// `cluster.read-hash-mode`: 0 reads from the first replica up, 1 (and
    /// above, for now) spreads reads by gfid.
    read_hash_mode: std::sync::atomic::AtomicU8,
    /// Our handles that read through anonymous brick handles, by gfid.
    open_behind: std::sync::Mutex<std::collections::HashMap<Gfid, Vec<u64>>>,
    txns: Arc<Txns>,
    /// Objects whose copies are blamed: gfid → those copies.
    bad: Mutex<HashMap<Gfid, u32>>,
    /// The child that keeps names and metadata but no data.
    arbiter: Option<usize>,
}

/// The answers of several replicas, judged as one.
///
/// All children that answered agree on success: every success, from which
/// the caller takes the attribute child's answer (`Replicate::pick`), so that
/// attributes always come from the same copy of an object. All
/// failed: the first error other than ENOTCONN (so that ENOENT, EEXIST,
/// ENOSPC reach the application as themselves). Some succeeded and some
/// failed other than by being down: the failure is returned, because an
/// application must never be told a change is safe when a live replica
/// refused it.
pub fn merge(results: Vec<(usize, FsResult<Reply>)>) -> FsResult<Vec<(usize, Reply)>> {
    let mut ok = Vec::new();
    let mut hard_err: Option<FsError> = None;
    let mut down_err: Option<FsError> = None;
    for (i, r) in results {
        match r {
            Ok(rep) => ok.push((i, rep)),
            Err(e) if e.is(libc::ENOTCONN) => {
                down_err.get_or_insert(e);
            }
            Err(e) => {
                hard_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = hard_err {
        return Err(e);
    }
    if ok.is_empty() {
        return Err(down_err.unwrap_or_else(|| FsError::notconn("no replica is up")));
    }
    Ok(ok)
}

/// Whether `merge` judges these answers a success.
fn merged_ok(res: &[(usize, FsResult<Reply>)]) -> bool {
    res.iter().any(|(_, r)| r.is_ok())
        && !res
            .iter()
            .any(|(_, r)| matches!(r, Err(e) if !e.is(libc::ENOTCONN)))
}

impl Replicate {
    pub fn new(name: String, children: Vec<Child>) -> Self {
        Replicate {
            fds: HandleMap::new(),
            reopening: tokio::sync::Mutex::new(()),
            read_hash_mode: std::sync::atomic::AtomicU8::new(1),
            open_behind: Default::default(),
            txns: Txns::new(name.clone(), children.clone()),
            bad: Mutex::new(HashMap::new()),
            arbiter: None,
            up: Default::default(),
            name,
            children,
        }
    }

    pub fn with_arbiter(mut self, arbiter: Option<usize>) -> Self {
        self.arbiter = arbiter.filter(|&a| a < self.children.len());
        self
    }

    /// A change must reach a good copy of the object (one no copy blames),
    /// or it would leave no copy with everything the application was told
    /// is safe: each copy would lack a different change. A data change must
    /// reach a good copy that holds data (not the arbiter). What this
    /// client knows of the copies may predate a heal: it asks again before
    /// refusing (EIO; ENOTCONN when only the arbiter is good). With quorum
    /// off the user has chosen availability over consistency: only the
    /// arbiter rule holds.
    async fn good_target(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        targets: &[usize],
        data: bool,
    ) -> FsResult<()> {
        if self.txns.quorum() == Quorum::None && !(data && self.arbiter.is_some()) {
            return Ok(());
        }
        let good = |arbiter_counts: bool| {
            let bad = self.stale_copies(gfid);
            targets
                .iter()
                .any(|&t| (arbiter_counts || Some(t) != self.arbiter) && bad & (1 << t) == 0)
        };
        if good(!data) {
            return Ok(());
        }
        self.refresh(cx, gfid).await;
        if good(!data) {
            return Ok(());
        }
        if data && good(true) {
            return Err(FsError::notconn(format!(
                "{}: {gfid}: no brick with good data is up (only the arbiter)",
                self.name
            )));
        }
        Err(FsError::new(
            libc::EIO,
            format!(
                "{}: {gfid}: no good copy is up (the copies up missed changes and are not healed yet); change refused",
                self.name
            ),
        ))
    }

    fn up(&self) -> Vec<usize> {
        (0..self.children.len())
            .filter(|&i| self.children[i].is_up())
            .collect()
    }

    /// The answer to hand up from several successful replicas: the
    /// attribute child's, so that the attributes of an object (times differ
    /// by a few nanoseconds between copies) do not flip from call to call,
    /// which tools like tar take for a change.
    fn pick(&self, gfid: Gfid, mut ok: Vec<(usize, Reply)>) -> Reply {
        let idx: Vec<usize> = ok.iter().map(|(i, _)| *i).collect();
        let want = self.attr_child(gfid, &idx).unwrap_or(idx[0]);
        let pos = ok.iter().position(|(i, _)| *i == want).unwrap_or(0);
        ok.swap_remove(pos).1
    }

    /// The child every answer about attributes and names comes from: the
    /// first one up. One copy for all metadata keeps attributes stable and
    /// lets directory listings hand cacheable attributes to the kernel;
    /// file data is spread over the replicas by `read_child`.
    fn attr_child(&self, gfid: Gfid, allowed: &[usize]) -> FsResult<usize> {
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
    fn stale_copies(&self, gfid: Gfid) -> u32 {
        self.bad.lock().unwrap().get(&gfid).copied().unwrap_or(0)
    }

    /// Of `allowed`, the copies of `gfid` no other copy blames. Never
    /// empty: with no good copy up, the object cannot be read (EIO if some
    /// copy is up but blamed: reading it could return stale data).
    fn readable(&self, gfid: Gfid, allowed: &[usize]) -> FsResult<Vec<usize>> {
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
    async fn refresh(&self, cx: &Ctx, gfid: Gfid) {
        let up = self.up();
        let res = self.fan_out(cx, &up, |_| Some(Fop::Getattr { gfid })).await;
        let mut blame = 0;
        let mut any = false;
        for (_, r) in res {
            if let Ok(Reply::Attr(a)) = r {
                blame |= a.blame;
                any = true;
            }
        }
        if any {
            self.learn(gfid, blame, true);
        }
    }

    /// What the copies of `gfid` said about each other: `blame` is the union
    /// of their blames (a fresh lookup replaces what was known, a change
    /// that some replica missed adds to it).
    fn learn(&self, gfid: Gfid, blame: u32, replace: bool) {
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
    fn read_child(&self, gfid: Gfid, allowed: &[usize]) -> FsResult<usize> {
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

    async fn fan_out(
        &self,
        cx: &Ctx,
        targets: &[usize],
        make: impl Fn(usize) -> Option<Fop>,
    ) -> Vec<(usize, FsResult<Reply>)> {
        let calls = targets.iter().filter_map(|&i| {
            let fop = make(i)?;
            let child = self.children[i].clone();
            let cx = cx.clone();
            Some(async move { (i, child.call(&cx, fop).await) })
        });
        join_all(calls).await
    }

    /// Starts transactions on `objs` (in gfid order, so that two clients
    /// never wait for each other crosswise) for a change meant for `want`.
    async fn begin(
        &self,
        objs: &[Gfid],
        want: &[usize],
    ) -> FsResult<(Vec<txn::Ticket>, Vec<usize>)> {
        let mut objs = objs.to_vec();
        objs.sort();
        objs.dedup();
        let mut targets = want.to_vec();
        let mut tickets = Vec::new();
        for g in objs {
            match self.txns.begin(g, &targets).await {
                Ok(t) => {
                    targets = t.targets.clone();
                    tickets.push(t);
                }
                Err(e) => {
                    self.finish(tickets, &[], false).await;
                    return Err(e);
                }
            }
        }
        // The locks recorded on the bricks that the replicas out of reach
        // miss this change; this client knows it too.
        let n = self.children.len();
        for t in &tickets {
            let missed = txn::missed_by(n, &t.targets);
            if missed != 0 {
                self.learn(t.gfid(), missed, false);
            }
        }
        Ok((tickets, targets))
    }

    /// Ends the transactions of a change whose answers are `res`; `told_ok`:
    /// whether the application is told the change succeeded (which copies
    /// are wrong depends on it).
    async fn finish(
        &self,
        tickets: Vec<txn::Ticket>,
        res: &[(usize, FsResult<Reply>)],
        told_ok: bool,
    ) {
        if !res.is_empty() {
            // Crash window: the change reached the bricks, what the copies
            // missed is not recorded yet and the application has no answer.
            fail::fail_point!("replicate-before-blame");
        }
        for t in tickets {
            let gfid = t.gfid();
            let failed = self.txns.finish(t, res, told_ok).await;
            if failed != 0 {
                self.learn(gfid, failed, false);
            }
        }
    }

    /// A change of names or metadata, to every replica up, as a transaction
    /// on the objects it changes (`txn_objects`).
    async fn change(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let up = self.up();
        if up.is_empty() {
            return Err(FsError::notconn(format!("{}: no replica is up", self.name)));
        }
        let objs = txn_objects(&fop);
        let (tickets, targets) = self.begin(&objs, &up).await?;
        let data = matches!(
            fop,
            Fop::Setattr {
                set: SetAttr { size: Some(_), .. },
                ..
            }
        );
        for &g in &objs {
            if let Err(e) = self.good_target(cx, g, &targets, data).await {
                self.finish(tickets, &[], false).await;
                return Err(e);
            }
        }
        let res = self.fan_out(cx, &targets, |_| Some(fop.clone())).await;
        self.finish(tickets, &res, merged_ok(&res)).await;
        if let Fop::Mknod { gfid, .. } | Fop::Mkdir { gfid, .. } | Fop::Symlink { gfid, .. } = &fop
        {
            self.learn_new(*gfid, &res);
        }
        Ok(self.pick(fop.gfid(), merge(res)?))
    }

    /// A change through an open file (write, fallocate), to every replica
    /// holding the file open.
    async fn change_handles(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let (gfid, fh) = (fop.gfid(), fop.fh().unwrap_or(0));
        let (fhs, live) = self.live_handles(cx, gfid, fh).await?;
        let (tickets, targets) = self.begin(&[gfid], &live).await?;
        if let Err(e) = self.good_target(cx, gfid, &targets, true).await {
            self.finish(tickets, &[], false).await;
            return Err(e);
        }
        let res = self
            .fan_out(cx, &targets, |i| Some(fop.clone().with_fh(fhs.fh(i))))
            .await;
        let judged = self.merge_data(gfid, res.clone());
        self.finish(tickets, &res, judged.is_ok()).await;
        Ok(self.pick(gfid, judged?))
    }

    /// Judges the answers to a data change (write, fallocate) like `merge`,
    /// except that copies refusing it for want of room (ENOSPC, EDQUOT) do
    /// not fail it when the copies that took it meet the quorum and hold
    /// good data: the full copies are blamed (`finish`) and healed once
    /// there is room, and the application is told what the good copies
    /// store (docs/replication.md).
    fn merge_data(
        &self,
        gfid: Gfid,
        res: Vec<(usize, FsResult<Reply>)>,
    ) -> FsResult<Vec<(usize, Reply)>> {
        let ok = txn::succeeded(&res);
        let full: Vec<usize> = res
            .iter()
            .filter(|(_, r)| {
                r.as_ref()
                    .is_err_and(|e| e.is(libc::ENOSPC) || e.is(libc::EDQUOT))
            })
            .map(|(i, _)| *i)
            .collect();
        let only_room = res.iter().all(|(i, r)| {
            r.is_ok() || full.contains(i) || r.as_ref().is_err_and(|e| e.is(libc::ENOTCONN))
        });
        let bad = self.stale_copies(gfid);
        let good_took_it = ok
            .iter()
            .any(|&i| Some(i) != self.arbiter && (bad & (1 << i)) == 0);
        if full.is_empty()
            || !only_room
            || !good_took_it
            || !self.txns.quorum().met(&ok, self.children.len())
        {
            return merge(res);
        }
        let names: Vec<String> = full.iter().map(|&i| self.children[i].name()).collect();
        tracing::warn!(xlator = %self.name, %gfid, full = ?names, "no room on some bricks: the write is kept on the others and healed to these once they have room");
        Ok(res
            .into_iter()
            .filter_map(|(i, r)| r.ok().map(|r| (i, r)))
            .collect())
    }

    /// Before a name goes (unlink, rename over it): if it names a file this
    /// client reads through anonymous handles, open that file for real on
    /// the bricks, so that it stays readable after its last name is gone, as
    /// POSIX wants. Costs a lookup only while some file is open-behind.
    async fn open_for_real(&self, cx: &Ctx, parent: Gfid, name: &crate::core::Name) {
        if self.open_behind.lock().unwrap().is_empty() {
            return;
        }
        let lookup = Fop::Lookup {
            parent,
            name: name.clone(),
        };
        let Ok(Reply::Entry(e)) = self.lookup(cx, lookup).await else {
            return;
        };
        let gfid = e.attr.gfid;
        let Some(fhs) = self.open_behind.lock().unwrap().remove(&gfid) else {
            return;
        };
        for fh in fhs {
            let up = self.up();
            let epochs: Vec<u64> = self.children.iter().map(|c| c.epoch()).collect();
            let open = Fop::Open {
                gfid,
                flags: libc::O_RDONLY,
            };
            let res = self.fan_out(cx, &up, |_| Some(open.clone())).await;
            let real = Open::from_answers(
                How::File(libc::O_RDONLY),
                self.children.len(),
                &res,
                &epochs,
            );
            if !self.fds.replace(fh, Arc::new(real.clone())) {
                // Released meanwhile.
                self.close(cx, &real, |f| Fop::Release { gfid, fh: f })
                    .await;
            }
        }
    }

    /// Asks the attribute child about metadata, falling back to the other
    /// good copies if it cannot answer (`copy_fault`).
    async fn meta_one(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let gfid = fop.gfid();
        let mut up = self.up();
        let mut last: Option<FsError> = None;
        loop {
            let i = match self.attr_child(gfid, &up) {
                Ok(i) => i,
                Err(e) => return Err(last.unwrap_or(e)),
            };
            match self.children[i].call(cx, fop.clone()).await {
                Err(e) if copy_fault(&e) => {
                    self.distrust(gfid, i, &e);
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
    async fn lookup(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
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
        let mut found: Vec<(usize, crate::core::Entry)> = Vec::new();
        let mut answered = 0;
        // Copies that answered without the name.
        let mut lacking: u32 = 0;
        while let Some((i, r)) = pending.next().await {
            match r {
                Ok(Reply::Entry(e)) => found.push((i, e)),
                Ok(other) => return Ok(other),
                Err(e) => {
                    if err.as_ref().is_none_or(|x| x.is(libc::ENOTCONN)) {
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
        self.learn(gfid, blame, true);
        let idx: Vec<usize> = found.iter().map(|(i, _)| *i).collect();
        let want = self.attr_child(gfid, &idx).unwrap_or(idx[0]);
        let pos = found.iter().position(|(i, _)| *i == want).unwrap_or(0);
        Ok(Reply::Entry(found.swap_remove(pos).1))
    }

    /// Creates a file as a transaction on its directory; right behind the
    /// create, on the same connections, the new file is locked, so that its
    /// first writes cost no round trip.
    async fn create(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let Fop::Create {
            parent,
            gfid,
            flags,
            ..
        } = fop
        else {
            unreachable!()
        };
        let up = self.up();
        if up.is_empty() {
            return Err(FsError::notconn(format!("{}: no replica is up", self.name)));
        }
        let (tickets, targets) = self.begin(&[parent], &up).await?;
        if let Err(e) = self.good_target(cx, parent, &targets, false).await {
            self.finish(tickets, &[], false).await;
            return Err(e);
        }
        let epochs: Vec<u64> = self.children.iter().map(|c| c.epoch()).collect();
        let blame = txn::missed_by(self.children.len(), &targets);
        let calls = targets.iter().map(|&i| {
            let child = self.children[i].clone();
            let fop = fop.clone();
            async move {
                let lock = Fop::Lock {
                    gfid,
                    wait: false,
                    mark: Some(blame),
                };
                let root = Ctx::root();
                let (c, l) =
                    futures_util::future::join(child.call(cx, fop), child.call(&root, lock)).await;
                (i, c, l.is_ok())
            }
        });
        let out = join_all(calls).await;
        let locked: Vec<usize> = out
            .iter()
            .filter(|(_, c, l)| c.is_ok() && *l)
            .map(|(i, _, _)| *i)
            .collect();
        let res: Vec<(usize, FsResult<Reply>)> = out.into_iter().map(|(i, c, _)| (i, c)).collect();
        self.finish(tickets, &res, merged_ok(&res)).await;
        self.txns.adopt(gfid, &locked, blame, &epochs).await;
        // The new file's copies blame those it was not made on: what the
        // bricks recorded, this client knows too, so that it never reads a
        // copy that is missing.
        self.learn_new(gfid, &res);
        let fhs = Open::from_answers(How::File(flags), self.children.len(), &res, &epochs);
        match merge(res) {
            Ok(ok) => {
                let Reply::Created { entry, .. } = self.pick(gfid, ok) else {
                    return Err(FsError::new(libc::EIO, "create answered without an entry"));
                };
                let fh = self.fds.insert(Arc::new(fhs));
                Ok(Reply::Created { entry, fh })
            }
            Err(e) => {
                self.close(cx, &fhs, |f| Fop::Release { gfid, fh: f }).await;
                Err(e)
            }
        }
    }

    /// Opens on every replica up; our handle maps to theirs.
    async fn open_all(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let up = self.up();
        if up.is_empty() {
            return Err(FsError::notconn(format!("{}: no replica is up", self.name)));
        }
        // What is only read (a directory listing, a file opened read-only) is
        // opened on one replica alone: every read goes there anyway.
        let read_only = match &fop {
            Fop::Opendir { .. } => true,
            Fop::Open { flags, .. } => {
                flags & libc::O_ACCMODE == libc::O_RDONLY && flags & libc::O_TRUNC == 0
            }
            _ => false,
        };
        let epochs: Vec<u64> = self.children.iter().map(|c| c.epoch()).collect();
        let mut res = Vec::new();
        if read_only && matches!(fop, Fop::Open { .. }) {
            // Open-behind: a file opened read-only is read through each
            // brick's anonymous handle, so the open costs no round trip (the
            // kernel has checked permissions; a file removed by another
            // client meanwhile fails at its first read with ESTALE; one this
            // client removes is opened for real first, `open_for_real`).
            let fh = self
                .fds
                .insert(Arc::new(Open::anonymous(self.children.len())));
            let gfid = fop.gfid();
            self.open_behind
                .lock()
                .unwrap()
                .entry(gfid)
                .or_default()
                .push(fh);
            return Ok(Reply::Opened { fh });
        }
        if read_only {
            // A listing is read from the attribute child.
            let i = self.attr_child(fop.gfid(), &up)?;
            res = self.fan_out(cx, &[i], |_| Some(fop.clone())).await;
        }
        if !res.iter().any(|(_, r)| r.is_ok()) {
            // Not read-only, or that replica failed: open everywhere.
            res = self.fan_out(cx, &up, |_| Some(fop.clone())).await;
        }
        let how = match fop {
            Fop::Open { flags, .. } => How::File(flags),
            _ => How::Dir,
        };
        let fhs = Open::from_answers(how, self.children.len(), &res, &epochs);
        // A copy that lacks the object (it missed its creation and is not
        // healed yet) does not fail the open when a good copy has it: the
        // handle is absent there, and the next change blames that copy.
        let stale = self.stale_copies(fop.gfid());
        let lacks =
            |r: &FsResult<Reply>| matches!(r, Err(e) if e.is(libc::ESTALE) || e.is(libc::ENOENT));
        if res.iter().any(|(i, r)| r.is_ok() && stale & (1 << i) == 0) {
            for (i, r) in &res {
                if lacks(r) {
                    tracing::info!(xlator = %self.name, gfid = %fop.gfid(), replica = i, "a copy lacks an object the others opened; opened without it");
                }
            }
            res.retain(|(_, r)| !lacks(r));
        }
        match merge(res) {
            Ok(_) => Ok(Reply::Opened {
                fh: self.fds.insert(Arc::new(fhs)),
            }),
            Err(e) => {
                let gfid = fop.gfid();
                let dir = matches!(fop, Fop::Opendir { .. });
                self.close(cx, &fhs, |fh| match dir {
                    true => Fop::Releasedir { gfid, fh },
                    false => Fop::Release { gfid, fh },
                })
                .await;
                Err(e)
            }
        }
    }

    /// Closes the child handles of `fhs` (an open that failed as a whole,
    /// a release), so that no handle leaks on a brick.
    async fn close(&self, cx: &Ctx, fhs: &Open, release: impl Fn(u64) -> Fop) {
        let idx = fhs.to_close(&self.children);
        self.fan_out(cx, &idx, |i| Some(release(fhs.fh(i)))).await;
    }

    /// The handle `fh`, opened again first on every child that came back
    /// since it was opened (`handles.rs`).
    async fn handles(&self, cx: &Ctx, gfid: Gfid, fh: u64) -> FsResult<Arc<Open>> {
        let fhs = self.fds.get(fh)?;
        let fallback = || {
            let up = self.up();
            self.attr_child(gfid, &up).ok()
        };
        if fhs.to_reopen(&self.children, fallback).is_empty() {
            return Ok(fhs);
        }
        let _one_at_a_time = self.reopening.lock().await;
        let fhs = self.fds.get(fh)?;
        let again = fhs.to_reopen(&self.children, fallback);
        if again.is_empty() {
            return Ok(fhs);
        }
        let epochs: Vec<u64> = self.children.iter().map(|c| c.epoch()).collect();
        let fop = match fhs.how {
            How::Dir => Fop::Opendir { gfid },
            _ => Fop::Open {
                gfid,
                flags: fhs.reopen_flags(),
            },
        };
        let res = self.fan_out(cx, &again, |_| Some(fop.clone())).await;
        let mut new = (*fhs).clone();
        let got = Open::from_answers(fhs.how, self.children.len(), &res, &epochs);
        for &i in &again {
            new.on[i] = got.on[i];
        }
        tracing::info!(xlator = %self.name, %gfid, children = ?again, how = ?fhs.how, "re-opened a handle on replicas that came back");
        let new = Arc::new(new);
        if !self.fds.replace(fh, new.clone()) {
            // Released meanwhile: close what was just opened.
            let dir = fhs.how == How::Dir;
            self.close(cx, &got, |f| match dir {
                true => Fop::Releasedir { gfid, fh: f },
                false => Fop::Release { gfid, fh: f },
            })
            .await;
            return Err(FsError::errno(libc::EBADF));
        }
        Ok(new)
    }

    /// A listing, read from the attribute child (its offsets are that
    /// replica's, so it stays there while it is up). With attributes
    /// (readdirplus), the other copies are asked at the same time which
    /// objects they blame: a copy that missed changes does not know it, so
    /// the listing's own word is not enough. An entry whose listed copy is
    /// not known good goes to the kernel without attributes (it looks the
    /// name up, which asks a majority); one from a copy other than its
    /// attribute child goes uncached, so that attributes never flip.
    async fn readdir(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        fh: u64,
        offset: u64,
        plus: bool,
    ) -> FsResult<Reply> {
        let fhs = self.handles(cx, gfid, fh).await?;
        let live = fhs.live(&self.children);
        let i = self.attr_child(gfid, &live)?;
        let fop = Fop::Readdir {
            gfid,
            fh: fhs.fh(i),
            offset,
            plus,
        };
        let others: Vec<usize> = match plus {
            true => self.up().into_iter().filter(|&c| c != i).collect(),
            false => Vec::new(),
        };
        let probe = Fop::Blamed {
            max: BLAMED_MAX as u32,
        };
        let (rep, probes) = futures_util::future::join(
            self.children[i].call(cx, fop),
            self.fan_out(cx, &others, |_| Some(probe.clone())),
        )
        .await;
        let mut rep = rep?;
        let Reply::Entries(ents) = &mut rep else {
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

    /// The handle `fh` (`handles`) and the children it can be used on now;
    /// ENOTCONN when there are none.
    async fn live_handles(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        fh: u64,
    ) -> FsResult<(Arc<Open>, Vec<usize>)> {
        let fhs = self.handles(cx, gfid, fh).await?;
        let live = fhs.live(&self.children);
        if live.is_empty() {
            return Err(FsError::notconn(format!(
                "{}: no replica holding this file is up",
                self.name
            )));
        }
        Ok((fhs, live))
    }

    /// Sends a handle-based operation to every replica holding the handle.
    async fn with_handles(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let (gfid, fh) = (fop.gfid(), fop.fh().unwrap_or(0));
        let (fhs, targets) = self.live_handles(cx, gfid, fh).await?;
        let res = self
            .fan_out(cx, &targets, |i| Some(fop.clone().with_fh(fhs.fh(i))))
            .await;
        let ok = merge(res)?;
        Ok(self.pick(gfid, ok))
    }

    /// Lets go of our handle `fh` and closes it on the bricks.
    async fn release(&self, cx: &Ctx, fop: Fop) {
        if let Some(fhs) = self.fds.remove(fop.fh().unwrap_or(0)) {
            self.close(cx, &fhs, |f| fop.clone().with_fh(f)).await;
        }
    }

    /// A read through handle `fh`: from one good copy, and if that copy
    /// cannot answer for any reason but a genuine one (`copy_fault`), from
    /// another good copy, so that the application sees no error while a
    /// good copy is reachable.
    async fn read_handle(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let (gfid, fh) = (fop.gfid(), fop.fh().unwrap_or(0));
        let fhs = self.handles(cx, gfid, fh).await?;
        let mut allowed = fhs.live(&self.children);
        if self.read_child(gfid, &allowed).is_err() {
            self.refresh(cx, gfid).await;
        }
        let mut last: Option<FsError> = None;
        loop {
            let i = match self.read_child(gfid, &allowed) {
                Ok(i) => i,
                Err(e) => return Err(last.unwrap_or(e)),
            };
            match self.children[i]
                .call(cx, fop.clone().with_fh(fhs.fh(i)))
                .await
            {
                Err(e) if copy_fault(&e) => {
                    self.distrust(gfid, i, &e);
                    allowed.retain(|&c| c != i);
                    last = Some(e);
                }
                r => return r,
            }
        }
    }

    /// A copy failed in a way that says it is not a good copy of `gfid`
    /// (it lacks it, or cannot read it): reads avoid it until a lookup
    /// says otherwise.
    fn distrust(&self, gfid: Gfid, i: usize, e: &FsError) {
        if e.is(libc::ENOTCONN) {
            return;
        }
        tracing::info!(xlator = %self.name, %gfid, replica = i, "a copy failed a read ({e}); reading another copy");
        self.learn(gfid, 1 << i, false);
    }

    /// What a new object's copies are known to lack: the replicas its
    /// making did not reach or failed on (when it was made somewhere).
    fn learn_new(&self, gfid: Gfid, res: &[(usize, FsResult<Reply>)]) {
        let made = txn::succeeded(res);
        if !made.is_empty() {
            self.learn(gfid, txn::missed_by(self.children.len(), &made), false);
        }
    }
}

/// Errors that say one copy cannot serve a read, where another copy may:
/// it is down, lacks the object (ESTALE, ENOENT), lost the handle (EBADF),
/// or failed to read (EIO). Any other error is the answer itself.
fn copy_fault(e: &FsError) -> bool {
    matches!(
        e.errno,
        libc::ENOTCONN | libc::ESTALE | libc::ENOENT | libc::EBADF | libc::EIO
    )
}

/// The objects a change is a transaction on: the object itself for data
/// and metadata, the directories whose names change for the rest.
fn txn_objects(fop: &Fop) -> Vec<Gfid> {
    match fop {
        Fop::Mknod { parent, .. }
        | Fop::Create { parent, .. }
        | Fop::Mkdir { parent, .. }
        | Fop::Symlink { parent, .. }
        | Fop::Unlink { parent, .. }
        | Fop::Rmdir { parent, .. } => vec![*parent],
        Fop::Link { newparent, .. } => vec![*newparent],
        Fop::Rename {
            parent, newparent, ..
        } => vec![*parent, *newparent],
        other => vec![other.gfid()],
    }
}

pub(crate) use futures_util::future::join_all;

fn min_statfs(rs: Vec<StatFs>) -> StatFs {
    rs.into_iter()
        .reduce(|a, b| if b.bavail < a.bavail { b } else { a })
        .unwrap_or_default()
}

#[async_trait]
impl Xlator for Replicate {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn notify(&self, _from: usize, ev: Event) -> Option<Event> {
        match ev {
            Event::Contention(gfid) => {
                // Ours alone: we hold the lock.
                self.txns.contention(gfid);
                None
            }
            Event::Up | Event::Down => {
                let any = self.children.iter().any(|c| c.is_up());
                let was = self.up.swap(any, std::sync::atomic::Ordering::AcqRel);
                (any != was).then_some(if any { Event::Up } else { Event::Down })
            }
        }
    }

    async fn fini(&self) {
        self.txns.release_all().await;
    }

    fn reconfigure(&self, set: &crate::core::Options) {
        self.read_hash_mode.store(
            options::READ_HASH_MODE.int(set) as u8,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.txns.set_quorum(Quorum::from_options(
            options::QUORUM_TYPE.str(set),
            Some(options::QUORUM_COUNT.int(set) as usize),
        ));
    }

    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        match fop {
            // Lookups ask every replica, so that a name missing on one copy
            // is still found on the others.
            Fop::Lookup { .. } => self.lookup(cx, fop).await,
            Fop::Getattr { .. }
            | Fop::Parent { .. }
            | Fop::Readlink { .. }
            | Fop::Listxattr { .. }
            | Fop::Getxattr { .. } => self.meta_one(cx, fop).await,
            Fop::Statfs { .. } => {
                let mut up = self.up();
                if up.iter().any(|&i| Some(i) != self.arbiter) {
                    // The arbiter's disk says nothing about room for data.
                    up.retain(|&i| Some(i) != self.arbiter);
                }
                let res = self.fan_out(cx, &up, |_| Some(fop.clone())).await;
                let stats: Vec<StatFs> = res
                    .into_iter()
                    .filter_map(|(_, r)| match r {
                        Ok(Reply::StatFs(s)) => Some(s),
                        _ => None,
                    })
                    .collect();
                if stats.is_empty() {
                    return Err(FsError::notconn(format!("{}: no replica is up", self.name)));
                }
                Ok(Reply::StatFs(min_statfs(stats)))
            }
            Fop::Create { .. } => self.create(cx, fop).await,
            Fop::Open { .. } | Fop::Opendir { .. } => self.open_all(cx, fop).await,
            Fop::Read { .. } | Fop::Lseek { .. } => self.read_handle(cx, fop).await,
            Fop::Readdir {
                gfid,
                fh,
                offset,
                plus,
            } => self.readdir(cx, gfid, fh, offset, plus).await,
            Fop::Write { .. } | Fop::Fallocate { .. } => self.change_handles(cx, fop).await,
            Fop::Flush { .. } | Fop::Fsync { .. } => self.with_handles(cx, fop).await,
            Fop::Release { gfid, fh } => {
                {
                    let mut ob = self.open_behind.lock().unwrap();
                    if let Some(v) = ob.get_mut(&gfid) {
                        v.retain(|&f| f != fh);
                        if v.is_empty() {
                            ob.remove(&gfid);
                        }
                    }
                }
                self.release(cx, fop).await;
                Ok(Reply::Ok)
            }
            Fop::Releasedir { .. } => {
                self.release(cx, fop).await;
                Ok(Reply::Ok)
            }
            Fop::Unlink { parent, ref name } => {
                self.open_for_real(cx, parent, name).await;
                self.change(cx, fop).await
            }
            Fop::Rename {
                newparent,
                ref newname,
                ..
            } => {
                self.open_for_real(cx, newparent, newname).await;
                self.change(cx, fop).await
            }
            Fop::Setattr { .. }
            | Fop::Mknod { .. }
            | Fop::Mkdir { .. }
            | Fop::Rmdir { .. }
            | Fop::Link { .. }
            | Fop::Symlink { .. }
            | Fop::Setxattr { .. }
            | Fop::Removexattr { .. } => self.change(cx, fop).await,
            // Any copy that has it will do: the answer is only its gfid
            // (attributes are asked for again by gfid).
            Fop::Resolve { .. } => {
                let up = self.up();
                let res = self.fan_out(cx, &up, |_| Some(fop.clone())).await;
                super::first_ok(res.into_iter().map(|(_, r)| r))
            }
            Fop::Lock { .. }
            | Fop::Unlock { .. }
            | Fop::Clear { .. }
            | Fop::Pending { .. }
            | Fop::Blamed { .. }
            | Fop::Checksum { .. } => Err(super::bookkeeping_refused()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(errno: i32) -> FsResult<Reply> {
        Err(FsError::errno(errno))
    }

    #[test]
    fn merge_judges_replica_answers() {
        // All good.
        let ok = merge(vec![(0, Ok(Reply::Ok)), (1, Ok(Reply::Ok))]).unwrap();
        assert_eq!(ok.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
        // One down: still acknowledged by the live ones.
        let ok = merge(vec![(0, e(libc::ENOTCONN)), (1, Ok(Reply::Ok))]).unwrap();
        assert_eq!(ok.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1]);
        // A live replica refusing the change is never hidden.
        assert_eq!(
            merge(vec![(0, Ok(Reply::Ok)), (1, e(libc::ENOSPC))])
                .unwrap_err()
                .errno,
            libc::ENOSPC
        );
        // Everyone down.
        assert_eq!(
            merge(vec![(0, e(libc::ENOTCONN))]).unwrap_err().errno,
            libc::ENOTCONN
        );
        // Real errors win over "down".
        assert_eq!(
            merge(vec![(0, e(libc::ENOTCONN)), (1, e(libc::EEXIST))])
                .unwrap_err()
                .errno,
            libc::EEXIST
        );
    }
}
