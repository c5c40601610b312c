//! Changes of the namespace: directories made and removed on every set,
//! files created where their name hashes (or where there is room),
//! unlinked, renamed and linked with their pointers kept right.

use super::*;

impl Distribute {
    /// Directories: on every set that has the directory (or its parent),
    /// `first` first (the hashed set: it decides EEXIST and the like), or
    /// if it has not, the first in id order that has; then all others at
    /// once. A set without the directory (added since, and not passed by a
    /// rebalance yet) is left out. Answers the first set's reply and the
    /// sets it was done on.
    ///
    /// A change of metadata (mode, owner, xattrs) that the first set made
    /// is not given up when another set fails: that copy is healed from
    /// the first at the directory's next use (`dir_meta`).
    pub(super) async fn dir_op(
        &self,
        cx: &Ctx,
        fop: Fop,
        first: usize,
    ) -> FsResult<(Reply, Vec<usize>)> {
        let absent = |e: &FsError| e.is(libc::ESTALE) || e.is(libc::ENOENT);
        let metadata = matches!(
            fop,
            Fop::Setattr { .. } | Fop::Setxattr { .. } | Fop::Removexattr { .. }
        );
        let mut skipped = Vec::new();
        let mut answer = None;
        let mut last = FsError::errno(libc::ESTALE);
        for i in std::iter::once(first).chain(self.order.iter().copied().filter(|&i| i != first)) {
            match self.children[i].call(cx, fop.clone()).await {
                Ok(rep) => {
                    answer = Some((i, rep));
                    break;
                }
                Err(e) if absent(&e) => {
                    skipped.push(i);
                    last = e;
                }
                Err(e) => return Err(e),
            }
        }
        let Some((f, rep)) = answer else {
            return Err(last);
        };
        let others: Vec<usize> = self
            .all()
            .into_iter()
            .filter(|i| *i != f && !skipped.contains(i))
            .collect();
        let mut done = vec![f];
        for (i, r) in self.on(cx, others, &fop).await {
            match r {
                Ok(_) => done.push(i),
                Err(e) if absent(&e) => {
                    tracing::debug!(xlator = %self.name, child = i, "{}: not on this set yet", fop.name())
                }
                Err(e) if metadata => {
                    tracing::warn!(xlator = %self.name, child = i, dir = %fop.gfid(), "{} missed one set ({e}): that copy is healed at the directory's next use", fop.name());
                    self.missed.lock().unwrap().insert(fop.gfid());
                }
                Err(e) => {
                    tracing::warn!(xlator = %self.name, child = i, "{} failed on one subvolume: {e}", fop.name());
                    return Err(e);
                }
            }
        }
        Ok((rep, done))
    }

    /// ENOTEMPTY unless directory `dir` holds nothing on any set but
    /// pointers; those (to nothing: a name they point for would be listed
    /// on its own set) are removed, so that the directory can go. Each
    /// set's copy decides only for itself, so a set where it looks empty
    /// would remove its copy and leave the others.
    pub(super) async fn empty_everywhere(&self, dir: Gfid) -> FsResult<()> {
        let cx = Ctx::root();
        let mut pointers = Vec::new();
        for (i, r) in self.on_all(&cx, &Fop::Opendir { gfid: dir }).await {
            let fh = match r.and_then(Reply::into_fh) {
                Ok(fh) => fh,
                Err(e) if e.is(libc::ESTALE) || e.is(libc::ENOENT) => continue,
                Err(e) => return Err(e),
            };
            let listed = self.pointers_only(&cx, i, dir, fh).await;
            let _ = self.children[i]
                .call(&cx, Fop::Releasedir { gfid: dir, fh })
                .await;
            pointers.extend(listed?.into_iter().map(|n| (i, n)));
        }
        for (i, name) in pointers {
            match self.unlink_on(&cx, i, dir, &name).await {
                Ok(_) => {}
                Err(e) if e.is(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub(super) async fn create_like(
        &self,
        cx: &Ctx,
        fop: Fop,
        parent: Gfid,
        name: &Name,
    ) -> FsResult<Reply> {
        let dl = self.layout_of(parent).await?;
        let h = self.hashed(&dl, name);
        let is_create = matches!(fop, Fop::Create { .. });
        let flags = match fop {
            Fop::Create { flags, .. } => flags,
            _ => 0,
        };
        let mut at = self.room_for(cx, &dl, h, false).await;
        let rep = match self.children[at].call(cx, fop.clone()).await {
            Err(e) if e.is(libc::ENOSPC) && at == h => {
                at = self.room_for(cx, &dl, h, true).await;
                if at == h {
                    return Err(e);
                }
                self.children[at].call(cx, fop).await?
            }
            r => r?,
        };
        let (entry, fh) = match rep {
            Reply::Created { entry, fh } if is_create => (entry, Some(fh)),
            Reply::Entry(e) => (e, None),
            other => return Err(mortar_core::fop::unexpected(other)),
        };
        if at != h {
            // The name's own set is full: the file lives elsewhere, and a
            // pointer on its set says where.
            tracing::debug!(xlator = %self.name, %parent, name = ?name, to = at, "placed off its full set");
            if let Err(e) = self.point(cx, h, (parent, name), entry.attr.gfid, at).await {
                if let Some(fh) = fh {
                    let rel = Fop::Release {
                        gfid: entry.attr.gfid,
                        fh,
                    };
                    let _ = self.children[at].call(cx, rel).await;
                }
                let _ = self.unlink_on(cx, at, parent, name).await;
                return Err(e);
            }
        }
        self.learn(&entry.attr, at);
        self.touch_dir(parent, &[at, h]).await;
        Ok(match fh {
            Some(fh) => Reply::Created {
                fh: self
                    .fds
                    .insert(Handles::file(entry.attr.gfid, flags, at, fh)),
                entry,
            },
            None => Reply::Entry(entry),
        })
    }

    pub(super) async fn mkdir(
        &self,
        cx: &Ctx,
        fop: Fop,
        parent: Gfid,
        name: &Name,
    ) -> FsResult<Reply> {
        let dl = self.layout_of(parent).await?;
        let gfid = fop.gfid();
        let (rep, on) = self.dir_op(cx, fop, self.hashed(&dl, name)).await?;
        if let Reply::Entry(e) = &rep {
            self.learn(&e.attr, 0);
        }
        // Over the sets it was made on: a set that lacks the parent (added
        // since) gets no files here until a rebalance makes it there.
        let layout = self.fresh_over(gfid, &on, Some(&dl.layout));
        self.store_layout(gfid, &layout, self.commit, &on).await;
        let dl = DirLayout {
            layout,
            committed: true,
        };
        remember(&self.layouts, LAYOUTS_MAX, gfid, Arc::new(dl));
        Ok(rep)
    }

    pub(super) async fn unlink(&self, cx: &Ctx, parent: Gfid, name: &Name) -> FsResult<Reply> {
        let f = self.find(cx, parent, name).await?;
        let rep = self.unlink_on(cx, f.at, parent, name).await?;
        if let Some(p) = f.pointer {
            if let Err(e) = self.unlink_on(cx, p, parent, name).await {
                tracing::warn!(xlator = %self.name, %parent, name = ?name, "pointer left behind: {e}");
            }
        }
        self.touch_dir(parent, &[f.at, f.pointer.unwrap_or(f.at)])
            .await;
        Ok(rep)
    }

    /// Renames a file: on the set holding it, with a pointer on the set
    /// the new name hashes to when that is another one. What the new name
    /// held on other sets (a file, a pointer) is removed first, and the old
    /// name's pointer last.
    pub(super) async fn rename(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let Fop::Rename {
            parent,
            ref name,
            newparent,
            ref newname,
            flags,
        } = fop
        else {
            unreachable!("rename is called with a rename");
        };
        let src = self.find(cx, parent, name).await?;
        if src.entry.attr.kind == FileKind::Dir {
            // A directory it replaces must be empty on every set, not only
            // on the one that decides.
            match self.find(cx, newparent, newname).await {
                Ok(d)
                    if d.entry.attr.kind == FileKind::Dir
                        && d.entry.attr.gfid != src.entry.attr.gfid =>
                {
                    self.empty_everywhere(d.entry.attr.gfid).await?
                }
                Ok(_) => {}
                Err(e) if e.is(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
            let dl = self.layout_of(newparent).await?;
            let first = self.hashed(&dl, newname);
            return Ok(self.dir_op(cx, fop.clone(), first).await?.0);
        }
        if (parent, name) == (newparent, newname) {
            return self.children[src.at].call(cx, fop.clone()).await;
        }
        let dst = match self.find(cx, newparent, newname).await {
            Ok(d) => Some(d),
            Err(e) if e.is(libc::ENOENT) => None,
            Err(e) => return Err(e),
        };
        let h = self.hashed(&*self.layout_of(newparent).await?, newname);
        if let Some(d) = &dst {
            if flags & libc::RENAME_NOREPLACE != 0 {
                return Err(FsError::errno(libc::EEXIST));
            }
            if d.entry.attr.gfid == src.entry.attr.gfid {
                // Two names of one file: rename(2) does nothing.
                return Ok(Reply::Ok);
            }
            if d.entry.attr.kind == FileKind::Dir {
                return Err(FsError::errno(libc::EISDIR));
            }
            if d.at != src.at {
                self.unlink_on(cx, d.at, newparent, newname).await?;
            }
            if let Some(p) = d.pointer {
                self.unlink_on(cx, p, newparent, newname).await?;
            }
        }
        if h != src.at {
            self.point(cx, h, (newparent, newname), src.entry.attr.gfid, src.at)
                .await?;
        }
        let rep = self.children[src.at].call(cx, fop.clone()).await?;
        if let Some(p) = src
            .pointer
            .filter(|&p| (p, parent, name) != (h, newparent, newname))
        {
            if let Err(e) = self.unlink_on(cx, p, parent, name).await {
                tracing::warn!(xlator = %self.name, %parent, name = ?name, "pointer left behind: {e}");
            }
        }
        self.touch_dir(parent, &[src.at]).await;
        if newparent != parent {
            self.touch_dir(newparent, &[src.at, h]).await;
        }
        Ok(rep)
    }

    /// A hard link: made on the set holding the file, with a pointer on
    /// the set the new name hashes to when that is another one.
    pub(super) async fn link(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let Fop::Link {
            gfid,
            newparent,
            ref newname,
        } = fop
        else {
            unreachable!("link is called with a link");
        };
        let Some(at) = self.locate(cx, gfid).await? else {
            return Err(FsError::errno(libc::EPERM));
        };
        let h = self.hashed(&*self.layout_of(newparent).await?, newname);
        if h != at {
            self.point(cx, h, (newparent, newname), gfid, at).await?;
        }
        match self.children[at].call(cx, fop.clone()).await {
            Ok(rep) => {
                self.touch_dir(newparent, &[at, h]).await;
                Ok(rep)
            }
            Err(e) => {
                if h != at {
                    let _ = self.unlink_on(cx, h, newparent, newname).await;
                }
                Err(e)
            }
        }
    }
}
