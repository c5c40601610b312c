//! Open files and directories: opens on the set that holds the file, fops
//! on handles (moved along when a rebalance moved the file), and listings
//! over the sets in id order.

use super::*;

impl Distribute {
    /// Sends an operation on open file `f` to the child holding it open.
    /// On ESTALE (a rebalance holds or moved the file), waits and asks
    /// where the file is, opens it there with the flags it was opened
    /// with, and sends the operation again, for up to `HELD_WAIT`.
    pub(super) async fn on_open_file(&self, cx: &Ctx, f: &OpenFile, fop: Fop) -> FsResult<Reply> {
        let deadline = tokio::time::Instant::now() + HELD_WAIT;
        let mut waiting = Waiting::new();
        loop {
            let (i, fh) = *f.at.lock().unwrap();
            let moved_meanwhile = || *f.at.lock().unwrap() != (i, fh);
            let e = match self.call_counted(i, cx, fop.clone().with_fh(fh)).await {
                Err(e) if e.is(libc::ESTALE) => e,
                // Another request on this handle (writes go several at a
                // time) found the file's new place meanwhile, and closed
                // the old one.
                Err(e) if e.is(libc::EBADF) && moved_meanwhile() => continue,
                r => return r,
            };
            if moved_meanwhile() {
                continue;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(e);
            }
            let Some(j) = self.relocate(cx, f.gfid, i, &mut waiting).await else {
                tracing::info!(xlator = %self.name, gfid = %f.gfid, at = i, "an open file answered ESTALE and is neither held nor elsewhere: ESTALE");
                return Err(e);
            };
            if j == i || moved_meanwhile() {
                continue;
            }
            let open = Fop::Open {
                gfid: f.gfid,
                flags: f.flags,
            };
            let (j, r) = self.on_file(cx, open, j).await;
            let nfh = r?.into_fh()?;
            let stale = {
                let mut at = f.at.lock().unwrap();
                if *at == (i, fh) {
                    *at = (j, nfh);
                    (i, fh)
                } else {
                    // Another request on this handle opened it first.
                    (j, nfh)
                }
            };
            tracing::info!(xlator = %self.name, gfid = %f.gfid, from = i, to = j, "an open file moved by a rebalance is open where it is now");
            let release = Fop::Release {
                gfid: f.gfid,
                fh: stale.1,
            };
            let _ = self.children[stale.0].call(cx, release).await;
        }
    }

    pub(super) async fn open(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let gfid = fop.gfid();
        let located = self.locate(cx, gfid).await?;
        if let (Fop::Open { flags, .. }, Some(i)) = (&fop, located) {
            let flags = *flags;
            let (i, r) = self.on_file(cx, fop, i).await;
            let fh = r?.into_fh()?;
            return Ok(Reply::Opened {
                fh: self.fds.insert(Handles::file(gfid, flags, i, fh)),
            });
        }
        let targets: Vec<usize> = match (&fop, located) {
            (Fop::Opendir { .. }, _) | (_, None) => self.all(),
            (_, Some(i)) => vec![i],
        };
        let mut fhs = vec![None; self.children.len()];
        let mut err = None;
        let dir = matches!(fop, Fop::Opendir { .. });
        for (i, r) in self.on(cx, targets, &fop).await {
            match r.and_then(Reply::into_fh) {
                Ok(fh) => fhs[i] = Some(fh),
                // A set the directory is not on yet has nothing to list.
                Err(e) if dir && e.is(libc::ESTALE) => {}
                Err(e) => err = Some(e),
            }
        }
        if fhs.iter().all(Option::is_none) {
            err = err.or(Some(FsError::errno(libc::ESTALE)));
        }
        if let Some(e) = err {
            for (i, fh) in fhs.iter().enumerate() {
                if let Some(fh) = fh {
                    let rel = if matches!(fop, Fop::Opendir { .. }) {
                        Fop::Releasedir { gfid, fh: *fh }
                    } else {
                        Fop::Release { gfid, fh: *fh }
                    };
                    let _ = self.children[i].call(cx, rel).await;
                }
            }
            return Err(e);
        }
        let handles = if dir {
            self.check_dir(gfid);
            Arc::new(Handles {
                ahead: Some(crate::cluster::listing::Ahead::new(fhs.len())),
                fhs,
                file: None,
            })
        } else {
            // A directory's open (Open, not Opendir) is on every set.
            Arc::new(Handles {
                fhs,
                ahead: None,
                file: None,
            })
        };
        Ok(Reply::Opened {
            fh: self.fds.insert(handles),
        })
    }

    /// Passes an operation on our handle to the children holding theirs.
    pub(super) async fn with_handle(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let fh = fop.fh().unwrap_or(0);
        let release = matches!(fop, Fop::Release { .. } | Fop::Releasedir { .. });
        let h = if release {
            let h = self
                .fds
                .remove(fh)
                .ok_or_else(|| FsError::errno(libc::EBADF))?;
            // Readers stop before the handles they read go.
            if let Some(a) = &h.ahead {
                a.stop();
            }
            h
        } else {
            self.fds.get(fh)?
        };
        if let Some(f) = &h.file {
            if release {
                let (i, fh) = *f.at.lock().unwrap();
                return self.children[i].call(cx, fop.with_fh(fh)).await;
            }
            return self.on_open_file(cx, f, fop).await;
        }
        let mut out = Err(FsError::errno(libc::EBADF));
        for (i, f) in h.fhs.iter().enumerate() {
            if let Some(f) = f {
                out = self.call_counted(i, cx, fop.clone().with_fh(*f)).await;
                if out.is_err() && !release {
                    return out;
                }
            }
        }
        out
    }

    /// Lists the sets in id order from the one `offset` names (or the
    /// next one, if that set is gone), directories from the first set only,
    /// pointers from none. Entries come with attributes from every set (how
    /// pointers are told from files), whether asked for or not. The sets
    /// after the one being listed are read ahead at the same time
    /// (`listing`).
    pub(super) async fn readdir(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        fh: u64,
        offset: u64,
    ) -> FsResult<Reply> {
        let h = self.fds.get(fh)?;
        let ahead = h
            .ahead
            .as_ref()
            .ok_or_else(|| FsError::errno(libc::EBADF))?;
        if offset == 0 {
            ahead.rewind();
        }
        let set = (offset >> SET_SHIFT) as u32;
        let mut off = offset & OFFSET_MASK;
        let mut pos = self.order.partition_point(|&i| self.ids[i] < set);
        if pos < self.order.len() && self.ids[self.order[pos]] != set {
            off = 0;
        }
        while pos < self.order.len() {
            let child = self.order[pos];
            // The sets after this one are read ahead meanwhile.
            for &later in &self.order[pos + 1..] {
                if let Some(lfh) = h.fhs[later] {
                    ahead.prefetch(later, &self.children[later], cx, gfid, lfh);
                }
            }
            if let Some(cfh) = h.fhs[child] {
                let mut ents = ahead
                    .batch(child, &self.children[child], cx, gfid, cfh, off)
                    .await?;
                // The child's listing goes on after this batch even when
                // nothing of it is handed up (directories listed from the
                // first set only, pointers).
                let had_any = !ents.is_empty();
                if let Some(last) = ents.last() {
                    off = last.next;
                }
                ents.retain(|e| {
                    !(pos > 0 && e.kind == FileKind::Dir
                        || e.attr.as_ref().is_some_and(|a| a.linkto.is_some()))
                });
                let tag = (self.ids[child] as u64) << SET_SHIFT;
                for e in &mut ents {
                    e.next |= tag;
                    if let Some(a) = &e.attr {
                        self.learn(a, child);
                    }
                }
                if !ents.is_empty() {
                    return Ok(Reply::Entries(ents));
                }
                if had_any {
                    continue;
                }
            }
            pos += 1;
            off = 0;
        }
        Ok(Reply::Entries(Vec::new()))
    }
}
