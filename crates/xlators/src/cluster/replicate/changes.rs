//! Changes: every modifying operation as a transaction (`txn.rs`) on the
//! objects it changes, to every replica up, blamed before it is answered.

use super::*;

impl Replicate {
    /// Starts transactions on `objs` (in gfid order, so that two clients
    /// never wait for each other crosswise) for a change meant for `want`.
    pub(super) async fn begin(
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
                    self.finish(tickets, &[], false, false).await;
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
    /// are wrong depends on it); `lost`: the change may not be acknowledged
    /// (`lost`), the copies that took it are the wrong ones.
    pub(super) async fn finish(
        &self,
        tickets: Vec<txn::Ticket>,
        res: &[(usize, FsResult<Reply>)],
        told_ok: bool,
        lost: bool,
    ) {
        if !res.is_empty() {
            // Crash window: the change reached the bricks, what the copies
            // missed is not recorded yet and the application has no answer.
            fail::fail_point!("replicate-before-blame");
        }
        let applied = txn::bits(&txn::succeeded(res));
        let refused = txn::bits(&txn::refused(res));
        for t in tickets {
            let gfid = t.gfid();
            // The application is told the change failed, the good copies
            // refused it, and only copies known stale applied it: those
            // are the ones that now differ (a stale copy that still had a
            // name the good ones had renamed away). Otherwise the copies
            // that took the change are the good ones, as ever.
            let stale = self.stale_copies(gfid);
            let stale_applied =
                !told_ok && applied != 0 && applied & !stale == 0 && refused & !stale != 0;
            let failed = self.txns.finish(t, res, lost || stale_applied).await;
            if failed != 0 {
                self.learn(gfid, failed, false);
            }
        }
    }

    /// Whether a change the copies answered `res` must not be acknowledged
    /// (the error to answer): with a quorum, the copies that took it must
    /// make one (else a later quorum could miss it), and must include a
    /// good copy of each object it changed, one with data for a data
    /// change (else no copy would hold everything the application was told
    /// is safe: the good copy that went away with the change in flight
    /// lacks this one, the copies that took it lack earlier ones). What
    /// this client knows of the copies may predate a heal: it asks the
    /// copies up again before it judges a change lost.
    pub(super) async fn lost(
        &self,
        cx: &Ctx,
        objs: &[Gfid],
        res: &[(usize, FsResult<Reply>)],
        data: bool,
    ) -> Option<FsError> {
        let quorum = self.txns.quorum();
        let took = txn::succeeded(res);
        if quorum == Quorum::None || took.is_empty() {
            return None;
        }
        if !quorum.met(&took, self.children.len()) {
            return Some(FsError::new(
                libc::EROFS,
                format!(
                    "{}: quorum lost while the change was in flight (it reached {} of {} replicas); change refused",
                    self.name,
                    took.len(),
                    self.children.len()
                ),
            ));
        }
        let good = |g: Gfid| {
            let bad = self.stale_copies(g);
            took.iter()
                .any(|&i| bad & (1 << i) == 0 && !(data && Some(i) == self.arbiter))
        };
        for &g in objs {
            if good(g) {
                continue;
            }
            self.refresh(cx, g).await;
            if !good(g) {
                return Some(FsError::new(
                    libc::EIO,
                    format!(
                        "{}: {g}: the change reached only copies that missed earlier changes (the good copy went away with it in flight); change refused",
                        self.name
                    ),
                ));
            }
        }
        None
    }

    /// A change of names or metadata, to every replica up, as a transaction
    /// on the objects it changes (`txn_objects`).
    pub(super) async fn change(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let objs = txn_objects(&fop);
        // After the opens of these objects this client answered ahead (a
        // truncation follows the open of `O_TRUNC`): in the order the
        // application made them, and to the replicas those found up.
        self.settle_opens_of(cx, &objs).await;
        let up = self.up();
        if up.is_empty() {
            return Err(FsError::notconn(format!("{}: no replica is up", self.name)));
        }
        // A truncation changes the bytes from the new size on.
        let _claim = match fop {
            Fop::Setattr {
                gfid,
                set: SetAttr { size: Some(s), .. },
                ..
            } => Some(self.txns.claim(gfid, s, u64::MAX).await),
            _ => None,
        };
        let data = matches!(
            fop,
            Fop::Setattr {
                set: SetAttr { size: Some(_), .. },
                ..
            }
        );
        // Before the locks, which record the blame of the copies away.
        for &g in &objs {
            self.good_target(cx, g, &up, data).await?;
        }
        let (tickets, targets) = self.begin(&objs, &up).await?;
        for &g in &objs {
            if let Err(e) = self.good_target(cx, g, &targets, data).await {
                self.finish(tickets, &[], false, false).await;
                return Err(e);
            }
        }
        let res = self.fan_out(cx, &targets, |_| Some(fop.clone())).await;
        let res = self.excuse_stale(cx, &objs, res).await;
        let res = self.take_back(cx, &fop, res).await;
        let res = self.stale_took(cx, &objs, res).await;
        let lost = self.lost(cx, &objs, &res, data).await;
        self.finish(tickets, &res, merged_ok(&res), lost.is_some())
            .await;
        if let Fop::Mknod { gfid, .. } | Fop::Mkdir { gfid, .. } | Fop::Symlink { gfid, .. } = &fop
        {
            self.learn_new(*gfid, &res);
        }
        let ok = merge(res)?;
        match lost {
            Some(e) => Err(e),
            None => Ok(self.pick(fop.gfid(), ok)),
        }
    }

    /// A copy that missed changes of the objects a change is about (its
    /// brick was away; no heal has reached it yet) may lack the name or
    /// object the change names, or still have one the others removed.
    /// When a copy no one blames took the change, such a copy's refusal is
    /// not the volume's answer: it counts as a copy that missed this
    /// change too (`finish` blames it again; heal brings it up to date).
    /// Only copies the others blame are excused, never a good copy.
    async fn excuse_stale(
        &self,
        cx: &Ctx,
        objs: &[Gfid],
        mut res: Vec<(usize, FsResult<Reply>)>,
    ) -> Vec<(usize, FsResult<Reply>)> {
        let missed = |e: &FsError| [libc::ENOENT, libc::ESTALE, libc::EEXIST].contains(&e.errno);
        if !res.iter().any(|(_, r)| matches!(r, Err(e) if missed(e))) {
            return res;
        }
        // Whether a copy no one blames answered (took the change, or
        // refused it for a reason of its own: the volume's answer).
        let good_answered = |stale: u32, res: &[(usize, FsResult<Reply>)]| {
            res.iter()
                .any(|(i, r)| stale & (1 << i) == 0 && !matches!(r, Err(e) if e.is(libc::ENOTCONN)))
        };
        // The copies disagree: which are stale is asked again (what this
        // client knew may predate a heal, or another client's change).
        let answers: std::collections::BTreeSet<i32> = res
            .iter()
            .filter(|(_, r)| !matches!(r, Err(e) if e.is(libc::ENOTCONN)))
            .map(|(_, r)| r.as_ref().err().map_or(0, |e| e.errno))
            .collect();
        if answers.len() > 1 {
            for &g in objs {
                self.refresh(cx, g).await;
            }
        }
        let mut stale = objs.iter().fold(0, |m, g| m | self.stale_copies(*g));
        // A copy that does not know the object at all (ESTALE: it missed
        // its creation, in a directory it is blamed for) while a quorum
        // of copies know it is as far behind.
        let knowing = res
            .iter()
            .filter(|(_, r)| !matches!(r, Err(e) if e.is(libc::ESTALE) || e.is(libc::ENOTCONN)))
            .count();
        if knowing >= self.txns.answers_needed() {
            for (i, r) in &res {
                if matches!(r, Err(e) if e.is(libc::ESTALE)) {
                    stale |= 1 << i;
                }
            }
        }
        // A copy that lacks a name or directory (ENOENT: its brick's
        // directory was deleted, or it missed the name's creation) while a
        // quorum of copies took the change is as far behind.
        let took = res.iter().filter(|(_, r)| r.is_ok()).count();
        if took >= self.txns.answers_needed() {
            for (i, r) in &res {
                if matches!(r, Err(e) if e.is(libc::ENOENT)) {
                    stale |= 1 << i;
                }
            }
        }
        if !good_answered(stale, &res) {
            return res;
        }
        for (i, r) in res.iter_mut() {
            if stale & (1 << *i) != 0 && matches!(r, Err(e) if missed(e)) {
                let e = r.as_ref().unwrap_err();
                tracing::debug!(xlator = %self.name, replica = *i, "a stale copy refused a change a good one answered ({e}); it missed it");
                *r = Err(FsError::notconn(format!(
                    "replica {i} missed the change: {e}"
                )));
            }
        }
        res
    }

    /// A rename between two directories taken by a copy known stale for
    /// one of them: the name it moved may be another object than the good
    /// copies moved (one they replaced while it was away), so what it holds
    /// in the other directory now is not known to match theirs. It counts
    /// as a copy that missed the change: both directories are blamed for
    /// it, and heal compares them whole. Only when a good copy took it.
    async fn stale_took(
        &self,
        cx: &Ctx,
        objs: &[Gfid],
        mut res: Vec<(usize, FsResult<Reply>)>,
    ) -> Vec<(usize, FsResult<Reply>)> {
        let [a, b] = objs else { return res };
        if a == b || self.stale_copies(*a) | self.stale_copies(*b) == 0 {
            return res;
        }
        // What this client knew may predate a heal: asked again.
        for &g in objs {
            self.refresh(cx, g).await;
        }
        let stale = self.stale_copies(*a) | self.stale_copies(*b);
        let good_took = res.iter().any(|(i, r)| r.is_ok() && stale & (1 << i) == 0);
        if stale == 0 || !good_took {
            return res;
        }
        for (i, r) in res.iter_mut() {
            if stale & (1 << *i) != 0 && r.is_ok() {
                tracing::debug!(xlator = %self.name, replica = *i, "a stale copy took a rename between directories; both blamed for it");
                *r = Err(FsError::notconn(format!(
                    "replica {i} is stale for the directories of the rename"
                )));
            }
        }
        res
    }

    /// A name made only on copies known stale for its directory, while
    /// the good copies refused it because they have it already (EEXIST,
    /// with another object): taken back on those copies at once, before
    /// the directory's lock is let go. Left there, the name would carry
    /// another object than the good copies' under the same name, and a
    /// later rename would move it where no heal looks.
    async fn take_back(
        &self,
        cx: &Ctx,
        fop: &Fop,
        mut res: Vec<(usize, FsResult<Reply>)>,
    ) -> Vec<(usize, FsResult<Reply>)> {
        let (parent, name, dir) = match fop {
            Fop::Create { parent, name, .. }
            | Fop::Mknod { parent, name, .. }
            | Fop::Symlink { parent, name, .. } => (*parent, name, false),
            Fop::Mkdir { parent, name, .. } => (*parent, name, true),
            Fop::Link {
                newparent, newname, ..
            } => (*newparent, newname, false),
            _ => return res,
        };
        let refused = txn::refused(&res);
        let applied = txn::succeeded(&res);
        let stale = self.stale_copies(parent);
        let exists = |i: &usize| {
            res.iter()
                .any(|(j, r)| j == i && matches!(r, Err(e) if e.is(libc::EEXIST)))
        };
        if refused.is_empty()
            || applied.is_empty()
            || !refused.iter().all(exists)
            || txn::bits(&applied) & !stale != 0
        {
            return res;
        }
        for (i, r) in res.iter_mut() {
            let Ok(reply) = r else { continue };
            let gfid = fop.gfid();
            if let Reply::Created { fh, .. } = reply {
                let _ = self.children[*i]
                    .call(cx, Fop::Release { gfid, fh: *fh })
                    .await;
            }
            let undo = match dir {
                true => Fop::Rmdir {
                    parent,
                    name: name.clone(),
                },
                false => Fop::Unlink {
                    parent,
                    name: name.clone(),
                },
            };
            let undone = self.children[*i].call(cx, undo).await;
            tracing::warn!(xlator = %self.name, replica = *i, %parent, name = %String::from_utf8_lossy(name.as_bytes()), ok = undone.is_ok(), "a name the good copies have was made on a stale copy only; taken back");
            if undone.is_ok() {
                *r = Err(FsError::new(libc::EEXIST, "the name exists"));
            }
        }
        res
    }

    /// A change through an open file (write, fallocate), to every replica
    /// holding the file open.
    pub(super) async fn change_handles(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let (gfid, fh) = (fop.gfid(), fop.fh().unwrap_or(0));
        let (fhs, live) = self.live_handles(cx, gfid, fh).await?;
        let appending = matches!(fhs.how, How::File(f) if f & libc::O_APPEND != 0);
        let (start, end) = match fop {
            // An append lands at whatever end each copy has.
            _ if appending => (0, u64::MAX),
            Fop::Write {
                offset, ref data, ..
            } => (offset, offset.saturating_add(data.len() as u64)),
            Fop::Fallocate { offset, len, .. } => (offset, offset.saturating_add(len)),
            _ => (0, u64::MAX),
        };
        let _claim = self.txns.claim(gfid, start, end).await;
        self.good_target(cx, gfid, &live, true).await?;
        let (tickets, targets) = self.begin(&[gfid], &live).await?;
        if let Err(e) = self.good_target(cx, gfid, &targets, true).await {
            self.finish(tickets, &[], false, false).await;
            return Err(e);
        }
        let res = self
            .fan_out(cx, &targets, |i| Some(fop.clone().with_fh(fhs.fh(i))))
            .await;
        let judged = self.merge_data(gfid, res.clone());
        let lost = self.lost(cx, &[gfid], &res, true).await;
        self.finish(tickets, &res, judged.is_ok(), lost.is_some())
            .await;
        let ok = judged?;
        match lost {
            Some(e) => Err(e),
            None => Ok(self.pick(gfid, ok)),
        }
    }

    /// Judges the answers to a data change (write, fallocate) like `merge`,
    /// except that copies refusing it for want of room (ENOSPC, EDQUOT) do
    /// not fail it when the copies that took it meet the quorum and hold
    /// good data: the full copies are blamed (`finish`) and healed once
    /// there is room, and the application is told what the good copies
    /// store (docs/replication.md).
    pub(super) fn merge_data(
        &self,
        gfid: Gfid,
        res: Vec<(usize, FsResult<Reply>)>,
    ) -> FsResult<Vec<(usize, Reply)>> {
        let ok = txn::succeeded(&res);
        let full: Vec<usize> = res
            .iter()
            .filter(|(_, r)| r.as_ref().is_err_and(no_room))
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

    /// Creates a file as a transaction on its directory; right behind the
    /// create, on the same connections, the new file is locked, so that its
    /// first writes cost no round trip.
    pub(super) async fn create(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
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
        self.good_target(cx, parent, &up, false).await?;
        let (tickets, targets) = self.begin(&[parent], &up).await?;
        if let Err(e) = self.good_target(cx, parent, &targets, false).await {
            self.finish(tickets, &[], false, false).await;
            return Err(e);
        }
        let epochs: Vec<u64> = self.children.iter().map(|c| c.epoch()).collect();
        let blame = txn::missed_by(self.children.len(), &targets);
        let send = self.with_lock_behind(cx, &fop, gfid, &targets, blame);
        let res = self.txns.lock_behind(gfid, blame, &epochs, send).await;
        // A copy without the directory (its brick's directory deleted, or
        // a heal not there yet) missed the create, when a quorum made it.
        let res = self.excuse_stale(cx, &[parent], res).await;
        let lost = self.lost(cx, &[parent], &res, false).await;
        self.finish(tickets, &res, merged_ok(&res), lost.is_some())
            .await;
        // The new file's copies blame those it was not made on: what the
        // bricks recorded, this client knows too, so that it never reads a
        // copy that is missing.
        self.learn_new(gfid, &res);
        let fhs = Open::from_answers(How::File(flags), self.children.len(), &res, &epochs);
        let merged = match lost {
            Some(e) => Err(e),
            None => merge(res),
        };
        match merged {
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

    /// What a new object's copies are known to lack: the replicas its
    /// making did not reach or failed on (when it was made somewhere).
    pub(super) fn learn_new(&self, gfid: Gfid, res: &[(usize, FsResult<Reply>)]) {
        let made = txn::succeeded(res);
        if !made.is_empty() {
            self.learn(gfid, txn::missed_by(self.children.len(), &made), false);
        }
    }

    /// A change must reach a good copy of the object (one no copy blames),
    /// or it would leave no copy with everything the application was told
    /// is safe: each copy would lack a different change. A data change must
    /// reach a good copy that holds data (not the arbiter). What this
    /// client knows of the copies may predate a heal: it asks again before
    /// refusing (EIO; ENOTCONN when only the arbiter is good). With quorum
    /// off the user has chosen availability over consistency: only the
    /// arbiter rule holds.
    pub(super) async fn good_target(
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
}
