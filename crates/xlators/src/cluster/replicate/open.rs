//! Open files and listings: our handles and what they stand for on each
//! child (`handles.rs`), opened again on children that come back.
//!
//! **Open-behind.** An open costs the application no round trip: a file
//! opened read-only is read through the bricks' anonymous handles; one
//! opened for writing is answered at once while its open (with the file's
//! lock behind it) goes to the bricks, and the first use of the handle
//! waits for their answers (`Opening`). The kernel has checked
//! permissions; what only the bricks can refuse (the file was removed by
//! another client meanwhile) fails the first write, fsync or close
//! instead of the open, as GlusterFS's open-behind does.

use super::*;
use handles::Slot;

/// An open for writing answered before the bricks had it: the open is on
/// its way (`answers`), and the first use of the handle judges the
/// answers once (`Replicate::settle_open`).
pub(super) struct Opening {
    gfid: Gfid,
    flags: i32,
    /// The children's epochs when the open was sent.
    epochs: Vec<u64>,
    answers: tokio::sync::watch::Receiver<Option<Arc<Answers>>>,
    /// The judgement, once made: Err while the open failed.
    verdict: tokio::sync::Mutex<Option<FsResult<()>>>,
}

type Answers = Vec<(usize, FsResult<Reply>)>;

/// Whether an open with `flags` may be answered before the bricks have it:
/// one for writing that neither truncates (the size must be 0 at once)
/// nor bypasses caches (a brick may honour `O_DIRECT`).
fn opens_behind(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY && flags & (libc::O_TRUNC | libc::O_DIRECT) == 0
}

/// Sends `fop` to each of `targets` with a lock on `gfid` right behind
/// it (not waiting; marked with `blame`): the answers, and where both
/// the request and the lock succeeded.
async fn with_lock_behind(
    children: &[Child],
    cx: &Ctx,
    fop: &Fop,
    targets: &[usize],
    blame: u32,
) -> (Answers, Vec<usize>) {
    let calls = targets.iter().map(|&i| {
        let child = children[i].clone();
        let fop = fop.clone();
        async move {
            // One request to each brick: the fop and the lock behind it.
            let (o, l) = child.call_locked(cx, fop, blame).await;
            (i, o, l.is_ok())
        }
    });
    let out = join_all(calls).await;
    let locked = out
        .iter()
        .filter(|(_, o, l)| o.is_ok() && *l)
        .map(|(i, _, _)| *i)
        .collect();
    (out.into_iter().map(|(i, o, _)| (i, o)).collect(), locked)
}

/// What a name about to go may name that is open behind.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Behind {
    Files,
    Dirs,
    Both,
}

impl Replicate {
    /// Before a name goes (unlink, rmdir, rename over it): if it names a
    /// file this client reads through anonymous handles, or a directory it
    /// lists without having opened it, open it for real on the bricks, so
    /// that it stays readable after its last name is gone, as POSIX wants.
    /// Costs a lookup only while some such file (or directory) is open.
    pub(super) async fn open_for_real(
        &self,
        cx: &Ctx,
        parent: Gfid,
        name: &mortar_core::Name,
        what: Behind,
    ) {
        if what != Behind::Dirs {
            self.settle_opens_where(cx, |_| true).await;
        }
        let files = what != Behind::Dirs && !self.open_behind.lock().unwrap().is_empty();
        let dirs = what != Behind::Files && !self.dirs_behind.lock().unwrap().is_empty();
        if !files && !dirs {
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
        let dir = e.attr.kind == mortar_core::FileKind::Dir;
        let map = match dir {
            true => &self.dirs_behind,
            false => &self.open_behind,
        };
        let Some(fhs) = map.lock().unwrap().remove(&gfid) else {
            return;
        };
        for fh in fhs {
            let up = self.up();
            let epochs: Vec<u64> = self.children.iter().map(|c| c.epoch()).collect();
            let (open, how) = match dir {
                // (A directory whose name goes is empty: its listing needs
                // no handle, the handle keeps it reachable by gfid.)
                true => (Fop::Opendir { gfid }, How::Dir),
                false => (
                    Fop::Open {
                        gfid,
                        flags: libc::O_RDONLY,
                    },
                    How::File(libc::O_RDONLY),
                ),
            };
            let res = self.fan_out(cx, &up, |_| Some(open.clone())).await;
            let real = Open::from_answers(how, self.children.len(), &res, &epochs);
            if !self.fds.replace(fh, Arc::new(real.clone())) {
                // Released meanwhile.
                self.close(cx, &real, |f| match dir {
                    true => Fop::Releasedir { gfid, fh: f },
                    false => Fop::Release { gfid, fh: f },
                })
                .await;
            } else if dir {
                self.listing_ends(gfid, fh);
            }
        }
    }

    fn note_behind(&self, map: &Mutex<HashMap<Gfid, Vec<u64>>>, gfid: Gfid, fh: u64) {
        map.lock().unwrap().entry(gfid).or_default().push(fh);
    }

    /// Our handle `fh` of `gfid` is released: no longer open-behind.
    pub(super) fn behind_ends(&self, gfid: Gfid, fh: u64) {
        for map in [&self.open_behind, &self.dirs_behind] {
            let mut ob = map.lock().unwrap();
            if let Some(v) = ob.get_mut(&gfid) {
                v.retain(|&f| f != fh);
                if v.is_empty() {
                    ob.remove(&gfid);
                }
            }
        }
    }

    /// Opens on every replica up; our handle maps to theirs.
    pub(super) async fn open_all(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
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
        // (O_DIRECT is opened for real: a brick may honour it,
        // `performance.strict-o-direct`, which anonymous handles do not.)
        let direct = matches!(&fop, Fop::Open { flags, .. } if flags & libc::O_DIRECT != 0);
        if matches!(fop, Fop::Opendir { .. }) {
            // Listed without being opened: the first readdir lists it
            // (`Reply::Listed`), a listing of one batch keeps no handle on
            // a brick, and opendir and releasedir cost no round trip.
            let fh = self.fds.insert(Arc::new(Open {
                how: How::DirBehind,
                on: vec![handles::Slot::Closed; self.children.len()],
            }));
            self.note_behind(&self.dirs_behind, fop.gfid(), fh);
            return Ok(Reply::Opened { fh });
        }
        if read_only && !direct && matches!(fop, Fop::Open { .. }) {
            // Open-behind: a file opened read-only is read through each
            // brick's anonymous handle, so the open costs no round trip (the
            // kernel has checked permissions; a file removed by another
            // client meanwhile fails at its first read with ESTALE; one this
            // client removes is opened for real first, `open_for_real`).
            let fh = self
                .fds
                .insert(Arc::new(Open::anonymous(self.children.len())));
            self.note_behind(&self.open_behind, fop.gfid(), fh);
            return Ok(Reply::Opened { fh });
        }
        if read_only {
            // A listing is read from the attribute child.
            let i = self.attr_child(fop.gfid(), &up)?;
            res = self.fan_out(cx, &[i], |_| Some(fop.clone())).await;
        }
        let writing = matches!(fop, Fop::Open { .. }) && !read_only;
        if let Fop::Open { gfid, flags } = fop {
            if opens_behind(flags) {
                return Ok(self.open_writing_behind(cx, gfid, flags, &up, epochs));
            }
        }
        if writing && !self.txns.known(fop.gfid()) {
            // Opened for writing: the file is locked right behind the open,
            // on the same connections, so that its first write costs no
            // round trip more (as a create does). Where another client
            // holds the lock it is not taken (no waiting here).
            res = self.open_and_lock(cx, &fop, &up, &epochs).await;
        }
        if !res.iter().any(|(_, r)| r.is_ok()) {
            // Not read-only, or that replica failed: open everywhere.
            res = self.fan_out(cx, &up, |_| Some(fop.clone())).await;
        }
        let how = match fop {
            Fop::Open { flags, .. } => How::File(flags),
            _ => How::Dir,
        };
        let (fhs, verdict) = self.judge_open(how, fop.gfid(), res, &epochs);
        match verdict {
            Ok(()) => Ok(Reply::Opened {
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

    /// Opens `fop` on `up` with a lock on the file behind it on each; the
    /// locks granted are kept for the changes to come (`Txns::lock_behind`).
    async fn open_and_lock(
        &self,
        cx: &Ctx,
        fop: &Fop,
        up: &[usize],
        epochs: &[u64],
    ) -> Vec<(usize, FsResult<Reply>)> {
        let gfid = fop.gfid();
        let blame = txn::missed_by(self.children.len(), up);
        let send = self.with_lock_behind(cx, fop, gfid, up, blame);
        self.txns.lock_behind(gfid, blame, epochs, send).await
    }

    /// Sends `fop` (about `gfid`) to each of `targets` with a lock on the
    /// object right behind it (`with_lock_behind`).
    pub(super) async fn with_lock_behind(
        &self,
        cx: &Ctx,
        fop: &Fop,
        gfid: Gfid,
        targets: &[usize],
        blame: u32,
    ) -> (Answers, Vec<usize>) {
        debug_assert_eq!(fop.gfid(), gfid);
        with_lock_behind(&self.children, cx, fop, targets, blame).await
    }

    /// Answers an open of `gfid` for writing at once with a handle whose
    /// open is sent to `up` behind it (with the file's lock behind that,
    /// unless this client holds the lock already).
    fn open_writing_behind(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        flags: i32,
        up: &[usize],
        epochs: Vec<u64>,
    ) -> Reply {
        let n = self.children.len();
        let fh = self.fds.insert(Arc::new(Open {
            how: How::File(flags),
            on: vec![Slot::Closed; n],
        }));
        let (tx, answers) = tokio::sync::watch::channel(None);
        self.opening.lock().unwrap().insert(
            fh,
            Arc::new(Opening {
                gfid,
                flags,
                epochs: epochs.clone(),
                answers,
                verdict: Default::default(),
            }),
        );
        let (children, txns, cx, up) = (
            self.children.clone(),
            self.txns.clone(),
            cx.clone(),
            up.to_vec(),
        );
        tokio::spawn(async move {
            let fop = Fop::Open { gfid, flags };
            let res = if txns.known(gfid) {
                let calls = up.iter().map(|&i| {
                    let (child, fop) = (children[i].clone(), fop.clone());
                    let cx = &cx;
                    async move { (i, child.call(cx, fop).await) }
                });
                join_all(calls).await
            } else {
                let blame = txn::missed_by(n, &up);
                let send = with_lock_behind(&children, &cx, &fop, &up, blame);
                txns.lock_behind(gfid, blame, &epochs, send).await
            };
            let _ = tx.send(Some(Arc::new(res)));
        });
        Reply::Opened { fh }
    }

    /// If `fh` was opened behind: waits for the bricks' answers to its
    /// open and judges them (once; later calls get the same judgement).
    /// Afterwards the handle stands for what the bricks opened.
    pub(super) async fn settle_open(&self, cx: &Ctx, fh: u64) -> FsResult<()> {
        let Some(o) = self.opening.lock().unwrap().get(&fh).cloned() else {
            return Ok(());
        };
        let mut verdict = o.verdict.lock().await;
        if let Some(v) = &*verdict {
            return v.clone();
        }
        let mut answers = o.answers.clone();
        let res = match answers.wait_for(Option::is_some).await {
            Ok(a) => a.as_ref().map(|a| (**a).clone()).unwrap_or_default(),
            // (The runtime is going away.)
            Err(_) => Vec::new(),
        };
        let gfid = o.gfid;
        let (fhs, v) = match res.is_empty() {
            true => (
                Open::from_answers(How::File(o.flags), self.children.len(), &res, &o.epochs),
                Err(FsError::notconn(format!("{}: no replica is up", self.name))),
            ),
            false => self.judge_open(How::File(o.flags), gfid, res, &o.epochs),
        };
        match &v {
            Ok(()) if self.fds.replace(fh, Arc::new(fhs.clone())) => {
                self.opening.lock().unwrap().remove(&fh);
            }
            // Released meanwhile, or failed: nothing may stay open.
            _ => self.close(cx, &fhs, |f| Fop::Release { gfid, fh: f }).await,
        }
        if let Err(e) = &v {
            tracing::debug!(xlator = %self.name, %gfid, "an open for writing answered ahead failed on the bricks: {e}");
        }
        *verdict = Some(v.clone());
        v
    }

    /// Our handle `fh` is released: an open of it still on its way is
    /// waited for (and what it opened closed with the handle).
    pub(super) async fn opening_ends(&self, cx: &Ctx, fh: u64) {
        if self.opening.lock().unwrap().is_empty() {
            return;
        }
        let _ = self.settle_open(cx, fh).await;
        self.opening.lock().unwrap().remove(&fh);
    }

    /// Waits for the opens of `objs` answered ahead that are still on
    /// their way: a change of a file must not reach the bricks before its
    /// open, nor go to replicas its open found down.
    pub(super) async fn settle_opens_of(&self, cx: &Ctx, objs: &[Gfid]) {
        self.settle_opens_where(cx, |g| objs.contains(&g)).await
    }

    /// Waits for the opens answered ahead of the files `which` picks. A
    /// name about to go waits for all of them: it must not go before the
    /// file it names is open on the bricks (an open file stays usable
    /// after its last name goes).
    async fn settle_opens_where(&self, cx: &Ctx, which: impl Fn(Gfid) -> bool) {
        let fhs: Vec<u64> = {
            let opening = self.opening.lock().unwrap();
            if opening.is_empty() {
                return;
            }
            opening
                .iter()
                .filter(|(_, o)| which(o.gfid))
                .map(|(&fh, _)| fh)
                .collect()
        };
        for fh in fhs {
            let _ = self.settle_open(cx, fh).await;
        }
    }

    /// Judges the answers `res` to an open of `gfid`: the handle they make,
    /// and whether the open succeeded. A copy that lacks the object (it
    /// missed its creation and is not healed yet) does not fail the open
    /// when a good copy has it: the handle is absent there, and the next
    /// change blames that copy.
    fn judge_open(
        &self,
        how: How,
        gfid: Gfid,
        mut res: Answers,
        epochs: &[u64],
    ) -> (Open, FsResult<()>) {
        let fhs = Open::from_answers(how, self.children.len(), &res, epochs);
        let stale = self.stale_copies(gfid);
        let lacks =
            |r: &FsResult<Reply>| matches!(r, Err(e) if e.is(libc::ESTALE) || e.is(libc::ENOENT));
        if res.iter().any(|(i, r)| r.is_ok() && stale & (1 << i) == 0) {
            for (i, r) in &res {
                if lacks(r) {
                    tracing::info!(xlator = %self.name, %gfid, replica = i, "a copy lacks an object the others opened; opened without it");
                }
            }
            res.retain(|(_, r)| !lacks(r));
        }
        (fhs, merge(res).map(|_| ()))
    }

    /// Closes the child handles of `fhs` (an open that failed as a whole,
    /// a release), so that no handle leaks on a brick.
    pub(super) async fn close(&self, cx: &Ctx, fhs: &Open, release: impl Fn(u64) -> Fop) {
        let idx = fhs.to_close(&self.children);
        self.fan_out(cx, &idx, |i| Some(release(fhs.fh(i)))).await;
    }

    /// The handle `fh`, opened again first on every child that came back
    /// since it was opened (`handles.rs`).
    pub(super) async fn handles(&self, cx: &Ctx, gfid: Gfid, fh: u64) -> FsResult<Arc<Open>> {
        self.settle_open(cx, fh).await?;
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

    /// The handle `fh` (`handles`) and the children it can be used on now;
    /// ENOTCONN when there are none.
    pub(super) async fn live_handles(
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
    pub(super) async fn with_handles(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let (gfid, fh) = (fop.gfid(), fop.fh().unwrap_or(0));
        let (fhs, targets) = self.live_handles(cx, gfid, fh).await?;
        let res = self
            .fan_out(cx, &targets, |i| Some(fop.clone().with_fh(fhs.fh(i))))
            .await;
        let ok = merge(res)?;
        Ok(self.pick(gfid, ok))
    }

    /// Lets go of our handle `fh` and closes it on the bricks.
    pub(super) async fn release(&self, cx: &Ctx, fop: Fop) {
        if let Some(fhs) = self.fds.remove(fop.fh().unwrap_or(0)) {
            self.close(cx, &fhs, |f| fop.clone().with_fh(f)).await;
        }
    }
}
