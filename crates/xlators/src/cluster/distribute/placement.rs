//! Where a file lives: found by its name's hash (following a pointer)
//! or by its gfid, moved there when it moved, and the pointers left
//! where names hash elsewhere.

use super::*;

impl Distribute {
    /// Finds `name` in `parent`: on its hashed set, following a pointer,
    /// and on every set only if the directory is in flux.
    pub(super) async fn find(&self, cx: &Ctx, parent: Gfid, name: &Name) -> FsResult<Found> {
        let dl = self.layout_of(parent).await?;
        let h = self.hashed(&dl, name);
        let fop = Fop::Lookup {
            parent,
            name: name.clone(),
        };
        let first = self.children[h].call(cx, fop.clone()).await;
        match (&first, pointer_of(&first).map(|s| self.child_of(s))) {
            (Ok(_), Some(Some(at))) => {
                if let Some(entry) = file_entry(self.children[at].call(cx, fop.clone()).await) {
                    self.learn(&entry.attr, at);
                    return Ok(Found {
                        entry,
                        at,
                        pointer: Some(h),
                    });
                }
                // A pointer to nothing, or one a rebalance has just made
                // the file (it then unlinks the old copy): asked again.
                if let Some(entry) = file_entry(self.children[h].call(cx, fop.clone()).await) {
                    self.learn(&entry.attr, h);
                    return Ok(Found {
                        entry,
                        at: h,
                        pointer: None,
                    });
                }
                // Else left for a rebalance to clear.
            }
            (Ok(Reply::Entry(e)), None) => {
                self.learn(&e.attr, h);
                return Ok(Found {
                    entry: e.clone(),
                    at: h,
                    pointer: None,
                });
            }
            (Ok(other), None) => return Err(mortar_core::fop::unexpected(other.clone())),
            (Ok(_), Some(None)) => {
                tracing::warn!(xlator = %self.name, %parent, name = ?name, "pointer to an unknown set")
            }
            // In flux, its hashed set out of reach (a set just added, not
            // reached yet) or without the directory (added since it was
            // made): the name may be on another.
            (Err(e), _) if (e.is(libc::ENOTCONN) || e.is(libc::ESTALE)) && !dl.committed => {}
            (Err(e), _) if !e.is(libc::ENOENT) => return Err(e.clone()),
            (Err(_), _) => {}
        }
        if dl.committed {
            return Err(FsError::errno(libc::ENOENT));
        }
        let others: Vec<usize> = self.all().into_iter().filter(|&i| i != h).collect();
        for (i, r) in self.on(cx, others, &fop).await {
            if let Some(entry) = file_entry(r) {
                self.learn(&entry.attr, i);
                return Ok(Found {
                    entry,
                    at: i,
                    pointer: None,
                });
            }
        }
        // Found nowhere else: the hashed set's answer, if it was out of
        // reach (it may have the name).
        Err(first
            .err()
            .filter(|e| e.is(libc::ENOTCONN))
            .unwrap_or_else(|| FsError::errno(libc::ENOENT)))
    }

    /// The child holding a non-directory object, or None for a directory.
    pub(super) async fn locate(&self, cx: &Ctx, gfid: Gfid) -> FsResult<Option<usize>> {
        if gfid == Gfid::ROOT {
            return Ok(None);
        }
        if let Some(&at) = self.placed.lock().unwrap().get(&gfid) {
            return Ok(at);
        }
        let mut last = FsError::errno(libc::ESTALE);
        for (i, r) in self.on_all(cx, &Fop::Getattr { gfid }).await {
            match r.and_then(Reply::into_attr) {
                Ok(a) if a.kind == FileKind::Dir => {
                    self.learn(&a, i);
                    return Ok(None);
                }
                Ok(a) if a.linkto.is_some() => {}
                Ok(a) => {
                    self.learn(&a, i);
                    return Ok(Some(i));
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Sends an object-addressed operation to the child holding it, or to
    /// every child for a directory.
    pub(super) async fn on_object(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let located = self.locate(cx, fop.gfid()).await?;
        if located.is_none() && self.missed.lock().unwrap().contains(&fop.gfid()) {
            self.heal_dir(fop.gfid()).await;
        }
        match located {
            Some(i) => self.on_file(cx, fop, i).await.1,
            None if fop.is_modifying() => Ok(self.dir_op(cx, fop, self.order[0]).await?.0),
            None => self.children[self.order[0]].call(cx, fop).await,
        }
    }

    /// The pointers in child `i`'s copy of directory `dir` (open as
    /// `fh`), or ENOTEMPTY at its first other entry.
    pub(super) async fn pointers_only(
        &self,
        cx: &Ctx,
        i: usize,
        dir: Gfid,
        fh: u64,
    ) -> FsResult<Vec<Name>> {
        let mut pointers = Vec::new();
        let mut offset = 0;
        loop {
            let fop = Fop::Readdir {
                gfid: dir,
                fh,
                offset,
                plus: true,
            };
            let Reply::Entries(ents) = self.children[i].call(cx, fop).await? else {
                return Err(FsError::errno(libc::EIO));
            };
            let Some(last) = ents.last() else {
                return Ok(pointers);
            };
            offset = last.next;
            for e in ents {
                if e.name.as_slice() == b"." || e.name.as_slice() == b".." {
                    continue;
                }
                match (&e.attr, Name::new(e.name.to_vec())) {
                    (Some(a), Ok(n)) if a.linkto.is_some() => pointers.push(n),
                    _ => return Err(FsError::errno(libc::ENOTEMPTY)),
                }
            }
        }
    }

    /// Sends `fop` to child `i`, where file `fop.gfid()` was placed. If
    /// the child answers ESTALE, a rebalance may have moved the file, or
    /// hold it while it moves it (`brick::hold`): every set is asked where
    /// it is now, and the request sent there; while it is still where it
    /// was (held), again after a pause, for up to `HELD_WAIT`. ESTALE when
    /// no set has it. Answers the child that answered.
    pub(super) async fn on_file(
        &self,
        cx: &Ctx,
        fop: Fop,
        mut i: usize,
    ) -> (usize, FsResult<Reply>) {
        let gfid = fop.gfid();
        let deadline = tokio::time::Instant::now() + HELD_WAIT;
        let mut waiting = Waiting::new();
        loop {
            let e = match self.children[i].call(cx, fop.clone()).await {
                Err(e) if e.is(libc::ESTALE) => e,
                r => return (i, r),
            };
            if tokio::time::Instant::now() > deadline {
                return (i, Err(e));
            }
            match self.relocate(cx, gfid, i, &mut waiting).await {
                Some(j) => i = j,
                None => return (i, Err(e)),
            }
        }
    }

    /// File `gfid` was not where this client thought (child `i`
    /// answered ESTALE): where it is now, or after a pause, child `i` if
    /// the file is held there by a rebalance moving it; None if it is
    /// neither (gone, or only open here).
    pub(super) async fn relocate(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        i: usize,
        waiting: &mut Waiting,
    ) -> Option<usize> {
        self.placed.lock().unwrap().remove(&gfid);
        match self.locate(cx, gfid).await {
            Ok(Some(j)) if j != i => {
                tracing::debug!(xlator = %self.name, %gfid, from = i, to = j, "file moved: asked where it is now");
                Some(j)
            }
            Ok(Some(_)) => {
                let asked = Fop::Getxattr {
                    gfid,
                    name: mortar_core::fop::HOLD_XATTR.into(),
                };
                if self.children[i].call(&Ctx::root(), asked).await.is_err() {
                    // Not held (any more): moved meanwhile, gone, or the
                    // move was given up and the file is still here (tried
                    // there once more).
                    self.placed.lock().unwrap().remove(&gfid);
                    return match self.locate(cx, gfid).await {
                        Ok(Some(j)) if j != i => Some(j),
                        Ok(Some(_)) if !waiting.retried_unheld => {
                            waiting.retried_unheld = true;
                            Some(i)
                        }
                        _ => None,
                    };
                }
                waiting.pause().await;
                Some(i)
            }
            _ => None,
        }
    }

    /// Makes a pointer to child `to` under `name` on child `at`
    /// (`make_pointer`).
    pub(super) async fn point(
        &self,
        cx: &Ctx,
        at: usize,
        (parent, name): (Gfid, &Name),
        gfid: Gfid,
        to: usize,
    ) -> FsResult<()> {
        make_pointer(&self.children[at], cx, (parent, name), gfid, self.ids[to])
            .await
            .map(|_| ())
    }

    pub(super) async fn unlink_on(
        &self,
        cx: &Ctx,
        at: usize,
        parent: Gfid,
        name: &Name,
    ) -> FsResult<Reply> {
        let fop = Fop::Unlink {
            parent,
            name: name.clone(),
        };
        self.children[at].call(cx, fop).await
    }
}
