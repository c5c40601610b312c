//! Fops that change things: what each changes is dropped before it goes
//! down and kept after as the bricks tell it; names made, moved or
//! removed here are followed.

use super::*;

impl MdCache {
    /// Follows a change of names made here in the directories whose
    /// names are all known (`Object::names`): a name made or removed is
    /// added or taken out; a change that failed leaves them unknown. A
    /// recall drops them (the object goes), and only a new directory
    /// starts them, so a set still here was never dropped meanwhile.
    pub(super) fn follow_names(&self, fop: &Fop, ok: bool) {
        let edit = |dir: Gfid, name: &Name, add: bool| {
            let mut s = self.shard(&dir).lock().unwrap();
            let Some(o) = s.get_mut(&dir) else { return };
            // What a name led to is asked again after any change of it.
            o.found.remove(name.as_bytes());
            let Some(n) = o.names.as_mut() else { return };
            if !ok || (add && n.set.len() >= MAX_NAMES) {
                o.names = None;
            } else if add {
                n.set.insert(name.as_bytes().to_vec());
            } else {
                n.set.remove(name.as_bytes());
            }
        };
        match fop {
            Fop::Create { parent, name, .. }
            | Fop::Mknod { parent, name, .. }
            | Fop::Mkdir { parent, name, .. }
            | Fop::Symlink { parent, name, .. } => edit(*parent, name, true),
            Fop::Link {
                newparent, newname, ..
            } => edit(*newparent, newname, true),
            Fop::Unlink { parent, name } | Fop::Rmdir { parent, name } => {
                edit(*parent, name, false)
            }
            Fop::Rename {
                parent,
                name,
                newparent,
                newname,
                flags,
            } => {
                // (An exchange leaves both names; each leads elsewhere.)
                edit(*parent, name, flags & libc::RENAME_EXCHANGE != 0);
                edit(*newparent, newname, true);
            }
            _ => {}
        }
    }

    /// A directory this mount just made is empty: every lookup in it is
    /// answered here until the leases its making got on every brick end
    /// (`start` + the lease time), or another client adds a name (the
    /// bricks recall the directory first). Not when it was recalled or
    /// changed here while it was made (`watch`), or everything was dropped
    /// since `(start, tick)`.
    pub(super) fn made_empty(
        &self,
        dir: Gfid,
        (start, tick): (Instant, u64),
        watch: &store::Making,
    ) {
        let until = start + Duration::from_millis(self.keep_ms.load(Ordering::Relaxed));
        let mut s = self.shard(&dir).lock().unwrap();
        if watch.changed() || self.all_changed.load(Ordering::Acquire) > tick {
            return;
        }
        let o = s.entry(dir).or_insert_with(|| Object::new(until));
        o.names = Some(Names {
            set: HashSet::new(),
            until,
        });
    }

    /// Objects whose attributes and xattrs a change of names or metadata
    /// made here alters (a data change leaves the xattrs as they were: a
    /// write that must drop set-id bits or capabilities is followed by the
    /// kernel's own setattr or removexattr).
    pub(super) fn changed(&self, fop: &Fop) -> Vec<Gfid> {
        match fop {
            Fop::Setattr { gfid, .. }
            | Fop::Setxattr { gfid, .. }
            | Fop::Removexattr { gfid, .. } => vec![*gfid],
            Fop::Create { parent, .. }
            | Fop::Mknod { parent, .. }
            | Fop::Mkdir { parent, .. }
            | Fop::Symlink { parent, .. } => vec![*parent],
            Fop::Link {
                gfid, newparent, ..
            } => vec![*gfid, *newparent],
            Fop::Unlink { parent, .. } | Fop::Rmdir { parent, .. } => vec![*parent],
            Fop::Rename {
                parent, newparent, ..
            } => vec![*parent, *newparent],
            _ => Vec::new(),
        }
    }

    /// Keeps what a new object made here is known to lack, so that the
    /// questions `ls -l` and every write ask of it cost no request: file
    /// capabilities (never inherited), and what its directory lacks of
    /// `INHERITED` (the directory is asked once per lease).
    pub(super) async fn born(
        &self,
        cx: &Ctx,
        parent: Gfid,
        gfid: Gfid,
        dir: bool,
        mark: (Instant, u64),
    ) {
        let none = Kept::missing;
        if !dir {
            self.keep(gfid, none("security.capability"), mark);
        }
        for &(from, name, dirs_only) in INHERITED {
            if dirs_only && !dir {
                continue;
            }
            let lacks = match self.cached_xattr(parent, Some(from)) {
                Some(a) => a.is_err(),
                None => {
                    let ask = Fop::Getxattr {
                        gfid: parent,
                        name: from.to_string(),
                    };
                    self.call(cx, ask).await.is_err_and(|e| e.is(libc::ENODATA))
                }
            };
            if lacks {
                self.keep(gfid, none(name), mark);
            }
        }
    }

    /// A write: the size and times change here, not the xattrs; the
    /// bricks tell what they are after it (kept when no other write of
    /// the file ran meanwhile).
    pub(super) async fn write(&self, cx: &Ctx, fop: Fop, gfid: Gfid) -> FsResult<Reply> {
        let started = {
            let mut w = self.writing.lock().unwrap();
            let e = w.entry(gfid).or_default();
            e.0 += 1;
            e.1 += 1;
            (e.0 == 1).then_some(e.1)
        };
        self.drop_attr(gfid);
        // Past what it waits for (a create ahead) before the mark:
        // the create's landing is not a change since.
        let fop = self.ready(fop).await?;
        let mark = self.mark();
        let res = self.down(cx, fop).await;
        let alone = {
            let mut w = self.writing.lock().unwrap();
            let e = w.get_mut(&gfid).expect("counted at its start");
            let alone = started == Some(e.1);
            e.0 -= 1;
            if e.0 == 0 {
                w.remove(&gfid);
            }
            alone
        };
        let kept = match &res {
            Ok(Reply::Written(_, Some(a))) if alone && a.gfid == gfid => {
                self.keep_after_change(gfid, a.clone(), mark)
            }
            _ => false,
        };
        if !kept {
            self.drop_attr(gfid);
        }
        res
    }

    /// Any other fop: what it changes is dropped before and kept after,
    /// as the bricks tell it.
    pub(super) async fn change(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let changed = self.changed(&fop);
        if changed.is_empty() {
            return self.down(cx, fop).await;
        }
        // A change of names alters its directories' attributes
        // (times, link count), not their xattrs.
        let names_only = !matches!(
            fop,
            Fop::Setattr { .. } | Fop::Setxattr { .. } | Fop::Removexattr { .. }
        );
        let drop = |g: Gfid| match names_only {
            true => self.drop_attr(g),
            false => self.drop_meta(g),
        };
        let new = match &fop {
            Fop::Create { parent, gfid, .. } | Fop::Mknod { parent, gfid, .. } => {
                Some((*parent, *gfid, false))
            }
            Fop::Mkdir { parent, gfid, .. } => Some((*parent, *gfid, true)),
            _ => None,
        };
        let unnames = matches!(
            fop,
            Fop::Unlink { .. } | Fop::Rmdir { .. } | Fop::Rename { .. }
        );
        for g in &changed {
            drop(*g);
        }
        let names = names_only.then(|| fop.clone());
        let watch = match &fop {
            Fop::Mkdir { gfid, .. } => Some(self.making(*gfid)),
            _ => None,
        };
        let before = self.mark();
        let res = self.down(cx, fop).await;
        if let Some(f) = &names {
            if let (Fop::Mkdir { gfid, .. }, Ok(_), Some(w)) = (f, &res, &watch) {
                self.made_empty(*gfid, before, w);
            }
            self.follow_names(f, res.is_ok());
        }
        // What the change left its directories (and the objects
        // it removed or moved) with, as the bricks told it.
        let after = match &res {
            Ok(Reply::Entry(e)) | Ok(Reply::Created { entry: e, .. }) => {
                e.parent.iter().cloned().collect()
            }
            Ok(Reply::Unnamed(attrs)) => attrs.clone(),
            _ => Vec::new(),
        };
        let kept = self.keep_all_after_change(&after, before);
        for g in changed.iter().filter(|g| !kept.contains(g)) {
            drop(*g);
        }
        if unnames && kept.is_empty() {
            match &res {
                // Every object the change touched is in the answer (a
                // change of names made here meanwhile kept them from being
                // kept): they go.
                Ok(Reply::Unnamed(attrs)) => attrs.iter().for_each(|a| self.drop_attr(a.gfid)),
                // The object the name pointed to is not known here,
                // and its link count changed.
                _ => {
                    self.names_moved.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
        let mark = self.mark();
        self.keep_attrs(&res, mark);
        // A name made here leads to its object (the bricks granted
        // the directory's lease with the answer).
        let made = match &names {
            Some(
                Fop::Create { parent, name, .. }
                | Fop::Mknod { parent, name, .. }
                | Fop::Mkdir { parent, name, .. }
                | Fop::Symlink { parent, name, .. },
            ) => Some((*parent, name)),
            Some(Fop::Link {
                newparent, newname, ..
            }) => Some((*newparent, newname)),
            _ => None,
        };
        if let (Some((dir, name)), Ok(Reply::Entry(e) | Reply::Created { entry: e, .. })) =
            (made, &res)
        {
            self.keep_found(dir, name, (e.attr.gfid, e.attr.kind), mark);
        }
        if let (Some((parent, g, dir)), true) = (new, res.is_ok()) {
            self.born(cx, parent, g, dir, mark).await;
        }
        res
    }
}
