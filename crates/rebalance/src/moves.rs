//! Files moved to the set their name hashes to: copied, held while the
//! last changes are copied, then their names moved; hard-linked files
//! moved with all their names; special files made again.

use super::*;

impl Rebalancer {
    /// Keeps in mind a name of a file with several, on a set being
    /// emptied: it moves with its other names after the pass.
    pub(super) fn note_linked(&self, dir: Gfid, name: Name, a: Attr, from: usize, home: usize) {
        let mut linked = self.linked.lock().unwrap();
        if linked.len() >= LINKED_MAX && !linked.contains_key(&a.gfid) {
            drop(linked);
            self.left(from);
            return;
        }
        linked
            .entry(a.gfid)
            .or_insert_with(|| Linked {
                attr: a,
                from,
                names: Vec::new(),
            })
            .names
            .push((dir, name, home));
    }

    /// Moves the files with several names this pass met: each whose
    /// names were all met goes, with all of them, to the set its first
    /// name hashes to; the others stay (made meanwhile: the next pass).
    pub(super) async fn move_linked(&self) {
        let groups: Vec<Linked> = std::mem::take(&mut *self.linked.lock().unwrap())
            .into_values()
            .collect();
        for g in groups {
            if self.stopped() {
                return;
            }
            if (g.names.len() as u64) < u64::from(g.attr.nlink) {
                self.left(g.from);
                continue;
            }
            if let Err(e) = self.move_group(&g).await {
                tracing::warn!(volume = %self.volume, gfid = %g.attr.gfid, names = g.names.len(), "not moved: {e}");
                self.count(|p| p.failed += 1);
            }
        }
    }

    /// Moves a file with several names (`move_linked`).
    pub(super) async fn move_group(&self, g: &Linked) -> FsResult<()> {
        let (dir, name, to) = &g.names[0];
        let dst = &self.sets[*to];
        match lookup_on(dst, *dir, name).await? {
            Some(t) if t.gfid == g.attr.gfid => {}
            Some(_) => return Err(name_taken()),
            None => {
                let from = self.ids[g.from];
                make_pointer(dst, &root(), (*dir, name), g.attr.gfid, from).await?;
            }
        }
        if !self.has_room(dst, g.attr.size).await {
            self.left(g.from);
            return Ok(());
        }
        self.carry(&g.attr, (g.from, *to), &g.names).await
    }

    /// Whether file `a`, listed as `name` in `dir` on set `from`, is no
    /// longer there under that name.
    pub(super) async fn gone(&self, dir: Gfid, name: &Name, a: &Attr, from: usize) -> bool {
        match lookup_on(&self.sets[from], dir, name).await {
            Ok(t) => t.is_none_or(|t| t.gfid != a.gfid),
            Err(_) => false,
        }
    }

    /// Whether `set` takes `size` more bytes and stays above
    /// `cluster.min-free-disk`.
    pub(super) async fn has_room(&self, set: &Child, size: u64) -> bool {
        match set.call(&root(), Fop::Statfs { gfid: Gfid::ROOT }).await {
            Ok(Reply::StatFs(s)) if s.blocks > 0 => {
                let unit = s.frsize.max(1) as u64;
                let free = s.bavail.saturating_mul(unit).saturating_sub(size);
                free.saturating_mul(100) / s.blocks.saturating_mul(unit) >= self.min_free
            }
            _ => false,
        }
    }

    /// A file that could not move now was left on set `from`.
    pub(super) fn left(&self, from: usize) {
        let draining = self.draining[from];
        self.count(|p| {
            p.skipped += 1;
            p.skipped_draining += draining as u64;
        });
    }

    /// Moves a file from set `from` to set `to`, or leaves it with a
    /// pointer on `to`.
    pub(super) async fn move_file(
        &self,
        dir: Gfid,
        name: &Name,
        a: &Attr,
        from: usize,
        to: usize,
    ) -> FsResult<()> {
        let (src, dst) = (&self.sets[from], &self.sets[to]);
        let there = lookup_on(dst, dir, name).await?;
        if a.kind != FileKind::File && a.kind != FileKind::Dir {
            return self.move_special(dir, name, a, (from, to), there).await;
        }
        match &there {
            // Copied already by a rebalance that stopped before the end.
            Some(t)
                if t.gfid == a.gfid
                    && t.linkto.is_none()
                    && (t.size, t.mtime) == (a.size, a.mtime) =>
            {
                src.call(&root(), unlink(dir, name)).await?;
                self.count(|p| p.moved += 1);
                return Ok(());
            }
            // ... but the file changed since on `from`: copied again.
            Some(t) if t.gfid == a.gfid && t.linkto.is_none() => {
                truncate(dst, a.gfid).await?;
            }
            Some(t) if t.gfid == a.gfid => {}
            Some(_) => return Err(name_taken()),
            None => {
                make_pointer(dst, &root(), (dir, name), a.gfid, self.ids[from]).await?;
            }
        }
        // From here `to` has a pointer to `from`: the file is found
        // whatever happens next.
        if a.nlink > 1 || !self.has_room(dst, a.size).await {
            self.left(from);
            return Ok(());
        }
        self.carry(a, (from, to), &[(dir, name.clone(), to)]).await
    }

    /// Moves file `a` from set `from` into its pointer on set `to`, named
    /// `names` (the first is the pointer's; each with the set it now
    /// hashes to): copied, held, completed, every other name made a link
    /// of the copy on `to` or a pointer to it elsewhere, then gone from
    /// `from`. A target that fills up meanwhile leaves the file where it
    /// is, its pointer emptied.
    pub(super) async fn carry(
        &self,
        a: &Attr,
        (from, to): (usize, usize),
        names: &[(Gfid, Name, usize)],
    ) -> FsResult<()> {
        let (src, dst) = (&self.sets[from], &self.sets[to]);
        let mut now = a.clone();
        let moved: FsResult<()> = async {
            self.copy_and_finish((src, dst), a, &mut now).await?;
            for (dir, name, home) in &names[1..] {
                self.name_there(*dir, name, a.gfid, *home, to).await?;
            }
            hold(src, a.gfid, "moved").await?;
            for (dir, name, _) in names {
                src.call(&root(), unlink(*dir, name)).await?;
            }
            // The mark stays only while handles are open on the old copy.
            unhold(src, a.gfid).await;
            Ok(())
        }
        .await;
        if let Err(e) = moved {
            unhold(src, a.gfid).await;
            if !(e.is(libc::ENOSPC) || e.is(libc::EDQUOT)) {
                return Err(e);
            }
            // The target filled up meanwhile: the file stays, and its
            // pointer gives back the room the partial copy took.
            tracing::info!(volume = %self.volume, gfid = %a.gfid, "no room left on the target: the file stays where it is");
            if getattr(dst, a.gfid).await?.linkto.is_some() {
                truncate(dst, a.gfid).await?;
            }
            self.left(from);
            return Ok(());
        }
        self.count(|p| {
            p.moved += 1;
            p.bytes += now.size;
        });
        // Tests kill the server here, between two files.
        fail::fail_point!("rebalance-moved");
        Ok(())
    }

    /// Makes name `name` in `dir` on set `home` stand for file `gfid`,
    /// which now lives on set `to`: a link of it there, and unless `home`
    /// is `to`, a pointer to it on `home` (made, or turned towards `to`).
    /// (Lookups follow a pointer by its name: the set it points to must
    /// know the file by that name too.)
    pub(super) async fn name_there(
        &self,
        dir: Gfid,
        name: &Name,
        gfid: Gfid,
        home: usize,
        to: usize,
    ) -> FsResult<()> {
        if home != to {
            let link = Fop::Link {
                gfid,
                newparent: dir,
                newname: name.clone(),
            };
            match lookup_on(&self.sets[to], dir, name).await? {
                Some(t) if t.gfid == gfid && t.linkto.is_none() => {}
                Some(_) => return Err(name_taken()),
                None => {
                    self.sets[to].call(&root(), link).await?;
                }
            }
        }
        let set = &self.sets[home];
        let point = Fop::Setxattr {
            gfid,
            name: LINKTO_XATTR.into(),
            value: serde_bytes::ByteBuf::from(self.ids[to].to_le_bytes().to_vec()),
            flags: 0,
        };
        match lookup_on(set, dir, name).await? {
            Some(t) if t.gfid != gfid => Err(name_taken()),
            Some(t) if home != to && t.linkto != Some(self.ids[to]) => {
                set.call(&root(), point).await.map(|_| ())
            }
            Some(_) => Ok(()),
            None if home == to => {
                let link = Fop::Link {
                    gfid,
                    newparent: dir,
                    newname: name.clone(),
                };
                set.call(&root(), link).await.map(|_| ())
            }
            None => {
                // Linked to another name's pointer there: turned towards
                // `to` too.
                if make_pointer(set, &root(), (dir, name), gfid, self.ids[to]).await? {
                    set.call(&root(), point).await?;
                }
                Ok(())
            }
        }
    }

    /// Copies file `a` from `src` into its pointer on `dst` while clients
    /// may still write it, until it holds still (a few tries); then holds
    /// it, so that nothing changes it any more, and ends the move.
    pub(super) async fn copy_and_finish(
        &self,
        (src, dst): (&Child, &Child),
        a: &Attr,
        now: &mut Attr,
    ) -> FsResult<()> {
        // What `dst` holds: the file as it was when last copied. (After
        // the last try the file may have changed again: `finish_move`
        // compares it with what was copied, not with what was seen last.)
        let mut copied = now.clone();
        for _ in 0..COPY_TRIES {
            copied = now.clone();
            copy_data(src, dst, a.gfid, copied.size).await?;
            let after = getattr(src, a.gfid).await?;
            if same_data(&after, &copied) {
                break;
            }
            *now = after;
        }
        *now = copied;
        hold(src, a.gfid, &HOLD_LEASE.as_secs().to_string()).await?;
        self.finish_move((src, dst), a.gfid, now).await
    }

    /// Completes the copy on `dst` of a file held on `src` and copied as
    /// it was (`now`): copied again if it changed before the hold, then
    /// the copy takes the file's xattrs, owner, mode and times and stops
    /// being a pointer. The caller then marks the file moved on `src` (so
    /// that handles still open on it ask where it went) and unlinks it.
    pub(super) async fn finish_move(
        &self,
        (src, dst): (&Child, &Child),
        gfid: Gfid,
        now: &mut Attr,
    ) -> FsResult<()> {
        let last = getattr(src, gfid).await?;
        if !same_data(&last, now) {
            // Exactly as it is: what was copied before may have holes
            // punched since.
            truncate(dst, gfid).await?;
            copy_data(src, dst, gfid, last.size).await?;
        }
        *now = last;
        copy_xattrs(src, dst, gfid).await?;
        // The pointer becomes the file: its mode, owner and times.
        let set = SetAttr {
            mode: Some(now.perm),
            uid: Some(now.uid),
            gid: Some(now.gid),
            atime: Some(mortar_core::fop::TimeSet::At(now.atime.0, now.atime.1)),
            mtime: Some(mortar_core::fop::TimeSet::At(now.mtime.0, now.mtime.1)),
            ..Default::default()
        };
        dst.call(&root(), Fop::Setattr { gfid, set }).await?;
        let _ = dst
            .call(
                &root(),
                Fop::Removexattr {
                    gfid,
                    name: LINKTO_XATTR.into(),
                },
            )
            .await;
        Ok(())
    }

    /// Moves a symlink, device, fifo or socket: made again on `to` (same
    /// gfid, owner, mode, times), then unlinked from `from`. A name
    /// looked up in between finds one or the other.
    pub(super) async fn move_special(
        &self,
        dir: Gfid,
        name: &Name,
        a: &Attr,
        (from, to): (usize, usize),
        there: Option<Attr>,
    ) -> FsResult<()> {
        let (src, dst) = (&self.sets[from], &self.sets[to]);
        if a.nlink > 1 {
            self.left(from);
            return Ok(());
        }
        match there {
            Some(t) if t.gfid == a.gfid && t.linkto.is_none() => {}
            Some(t) if t.gfid == a.gfid => {
                dst.call(&root(), unlink(dir, name)).await?;
                self.make_like(dir, name, a, src, dst).await?;
            }
            Some(_) => return Err(name_taken()),
            None => self.make_like(dir, name, a, src, dst).await?,
        }
        src.call(&root(), unlink(dir, name)).await?;
        self.count(|p| p.moved += 1);
        Ok(())
    }

    pub(super) async fn make_like(
        &self,
        dir: Gfid,
        name: &Name,
        a: &Attr,
        src: &Child,
        dst: &Child,
    ) -> FsResult<()> {
        let owner = Ctx {
            uid: a.uid,
            gid: a.gid,
            ..root()
        };
        let fop = match a.kind {
            FileKind::Symlink => {
                let Reply::Data(t) = src.call(&root(), Fop::Readlink { gfid: a.gfid }).await?
                else {
                    return Err(FsError::new(libc::EIO, "readlink answered without data"));
                };
                Fop::Symlink {
                    parent: dir,
                    name: name.clone(),
                    gfid: a.gfid,
                    target: serde_bytes::ByteBuf::from(t.to_vec()),
                }
            }
            kind => Fop::Mknod {
                parent: dir,
                name: name.clone(),
                gfid: a.gfid,
                mode: a.perm | kind.type_bits(),
                umask: 0,
                rdev: a.rdev,
                linkto: None,
            },
        };
        dst.call(&owner, fop).await?;
        // A symlink's own times are not set through a handle to it.
        let symlink = a.kind == FileKind::Symlink;
        let time = |(s, n): (i64, u32)| (!symlink).then_some(mortar_core::fop::TimeSet::At(s, n));
        let set = SetAttr {
            uid: Some(a.uid),
            gid: Some(a.gid),
            atime: time(a.atime),
            mtime: time(a.mtime),
            ..Default::default()
        };
        dst.call(&root(), Fop::Setattr { gfid: a.gfid, set })
            .await?;
        Ok(())
    }
}
