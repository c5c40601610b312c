//! Names: lookup, creation (with the gfid the client chose), removal,
//! rename and hard links, each relative to a directory handle.

use super::*;

/// The umask a new object in `dir` gets: none under a default ACL, which
/// the brick's file system applies instead (POSIX.1e, as a local file
/// system does it; the client leaves the umask to the brick).
fn effective_umask(dir: &OwnedFd, umask: u32) -> u32 {
    if umask != 0 && get_xattr(dir, DEFAULT_ACL_XATTR).is_ok() {
        return 0;
    }
    umask
}

/// Where a directory's default ACL is kept (`system.posix_acl_default`).
const DEFAULT_ACL_XATTR: &str = "system.posix_acl_default";

impl Posix {
    /// Looks a name up, giving it a gfid (and a handle) if it was created
    /// on the brick directly and has none yet. Its xattrs are read by name
    /// (`xattr_at`): only on the brick host's thread, where no change of
    /// names runs meanwhile; elsewhere (a listing's attributes, on the
    /// blocking pool) `lookup_via` with `Via::Proc`.
    pub(crate) fn lookup_at(
        &self,
        cx: &Ctx,
        dir: &OwnedFd,
        parent: Gfid,
        name: &Name,
    ) -> FsResult<(OwnedFd, Attr)> {
        let via = Via::Name(dir.as_fd(), name.as_os_str());
        self.lookup_via(cx, dir, parent, name, via)
    }

    /// `lookup_at` with the object's xattrs read `via`.
    pub(crate) fn lookup_via(
        &self,
        cx: &Ctx,
        dir: &OwnedFd,
        parent: Gfid,
        name: &Name,
        via: Via<'_>,
    ) -> FsResult<(OwnedFd, Attr)> {
        if hidden(parent, name) {
            return Err(FsError::errno(libc::ENOENT));
        }
        // Searching the directory is the caller's right to check.
        let fd = as_caller(cx, || open_child(dir, name))?;
        let st = rfs::fstat(&fd)?;
        let had = read_gfid_via(fd.as_fd(), via)?;
        let gfid = match had {
            Some(g) => g,
            None => {
                let g = Gfid::random();
                set_xattr(&fd, GFID_XATTR, &g.0, rfs::XattrFlags::CREATE)?;
                if FileKind::from_mode(st.st_mode) == FileKind::Dir {
                    self.make_dir_handle(g, parent, name)?;
                } else {
                    self.make_file_handle(g, dir, name)?;
                }
                tracing::info!(brick = %self.path.display(), name = ?name, gfid = %g, "assigned gfid to an object created on the brick");
                g
            }
        };
        if FileKind::from_mode(st.st_mode) == FileKind::Dir && gfid != Gfid::ROOT {
            // A directory is where its lookup found it: a handle that says
            // otherwise (a crash between a rename and its handle update)
            // is brought in line, or the directory stays unreachable by gfid.
            let here = (parent, name.clone());
            if self.read_dir_handle(gfid).ok().as_ref() != Some(&here) {
                self.make_dir_handle(gfid, parent, name)?;
                tracing::info!(brick = %self.path.display(), %gfid, name = ?name, "directory handle repaired");
            }
        }
        let repair =
            had.is_some() && FileKind::from_mode(st.st_mode) != FileKind::Dir && st.st_nlink == 1;
        if repair {
            // A file with a gfid but one link only has no handle (the brick
            // was killed between setting the gfid and linking the handle):
            // made now, or the file stays unreachable by gfid and unhealed.
            self.make_file_handle(gfid, dir, name)?;
            tracing::info!(brick = %self.path.display(), %gfid, name = ?name, "file handle repaired");
        }
        // `st` still shows the object unless it was given a gfid or a
        // handle above (a link, a changed ctime): stat again then.
        let attr = if had.is_some() && !repair {
            full_attr_of(fd.as_fd(), gfid, &st, via)?
        } else {
            full_attr(fd.as_fd(), gfid)?
        };
        Ok((fd, attr))
    }

    /// Sets gfid, owner and group of a freshly created object (`pst`: its
    /// directory's attributes from before it was made, whose set-group-id
    /// bit and group it inherits); on failure the caller removes it again,
    /// so a half-made object never stays behind.
    pub(crate) fn finish_new(
        &self,
        cx: &Ctx,
        pst: &rfs::Stat,
        fd: &OwnedFd,
        gfid: Gfid,
        perm: u32,
    ) -> FsResult<()> {
        set_xattr(fd, GFID_XATTR, &gfid.0, rfs::XattrFlags::CREATE)?;
        let gid = if pst.st_mode & libc::S_ISGID != 0 {
            pst.st_gid
        } else {
            cx.gid
        };
        let st = rfs::fstat(fd)?;
        if (st.st_uid, st.st_gid) == (cx.uid, gid) {
            // Made as the caller already (or by root for root): the owner
            // is right, and the set-id bits are what the kernel left.
            return Ok(());
        }
        rfs::chownat(
            fd,
            "",
            Some(rfs::Uid::from_raw(cx.uid)),
            Some(rfs::Gid::from_raw(gid)),
            AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        )?;
        if FileKind::from_mode(st.st_mode) != FileKind::Symlink && perm & 0o6000 != 0 {
            // chown cleared set-id bits; put back what was asked for.
            rfs::chmodat(
                rfs::CWD,
                proc_path(fd),
                Mode::from_raw_mode(st.st_mode & 0o7777 | (perm & 0o6000)),
                AtFlags::empty(),
            )?;
        }
        Ok(())
    }

    /// Gives an object just made under `name` in `dir` (its descriptor and
    /// its attributes from before) its gfid, owner and handle, and answers
    /// with its entry; on failure removes it again.
    pub(crate) fn adopt_new(
        &self,
        cx: &Ctx,
        (dir, pst): (&OwnedFd, &rfs::Stat),
        parent: Gfid,
        name: &Name,
        gfid: Gfid,
        perm: u32,
        is_dir: bool,
    ) -> FsResult<Reply> {
        let res = open_child(dir, name).and_then(|fd| {
            self.finish_new(cx, pst, &fd, gfid, perm)?;
            if is_dir {
                self.make_dir_handle(gfid, parent, name)?;
            } else {
                self.make_new_file_handle(gfid, dir, name)?;
            }
            let mut attr = attr_of(&rfs::fstat(&fd)?, gfid);
            attr.linkto = attrs::read_linkto(&fd, &attr)?;
            let parent = full_attr(dir.as_fd(), parent).ok();
            Ok(Reply::Entry(Entry { attr, parent }))
        });
        if res.is_err() {
            Self::undo_new(dir, name, is_dir);
        }
        res
    }

    pub(crate) fn undo_new(dir: &OwnedFd, name: &Name, is_dir: bool) {
        let flags = if is_dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        let _ = rfs::unlinkat(dir, name.as_os_str(), flags);
    }

    pub(crate) fn create(
        &self,
        cx: &Ctx,
        fds: &FdTable,
        parent: Gfid,
        name: &Name,
        gfid: Gfid,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> FsResult<Reply> {
        if hidden(parent, name) {
            return Err(FsError::errno(libc::EPERM));
        }
        let (dir, pst) = self.resolve_dir_seen(parent)?;
        let perm = mode & 0o7777 & !effective_umask(&dir, umask);
        let oflags = self.brick_flags(
            flags,
            libc::O_ACCMODE | libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC,
        );
        let made = as_caller(cx, || {
            Ok(rfs::openat2(
                &*dir,
                name.as_os_str(),
                oflags
                    | OFlags::CREATE
                    | OFlags::EXCL
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC
                    | OFlags::NOATIME,
                Mode::from_raw_mode(perm),
                beneath() | ResolveFlags::NO_SYMLINKS,
            )?)
        });
        let file = match made {
            Ok(f) => f,
            Err(e) if e.is(libc::EEXIST) && flags & libc::O_EXCL == 0 => {
                // Someone else made it first: open theirs, as open(O_CREAT) would.
                let (_, attr) = self.lookup_at(cx, &dir, parent, name)?;
                let Reply::Opened { fh } = self.open_file(cx, fds, attr.gfid, flags)? else {
                    unreachable!()
                };
                return Ok(Reply::Created {
                    entry: Entry::found(attr),
                    fh,
                });
            }
            Err(e) => return Err(e),
        };
        let finish = self
            .finish_new(cx, &pst, &file, gfid, perm)
            .and_then(|_| self.make_new_file_handle(gfid, &*dir, name));
        if let Err(e) = finish {
            Self::undo_new(&dir, name, false);
            return Err(e);
        }
        let attr = attr_of(&rfs::fstat(&file)?, gfid);
        let fh = fds.insert(Handle::File(
            File::from(file),
            gfid,
            Some(self.open.mark(gfid)),
            cx.uid,
        ));
        Ok(Reply::Created {
            entry: Entry {
                attr,
                parent: full_attr(dir.as_fd(), parent).ok(),
            },
            fh,
        })
    }

    pub(crate) fn mknod(
        &self,
        cx: &Ctx,
        parent: Gfid,
        name: &Name,
        gfid: Gfid,
        (mode, umask, rdev): (u32, u32, u64),
        linkto: Option<u32>,
    ) -> FsResult<Reply> {
        if hidden(parent, name) {
            return Err(FsError::errno(libc::EPERM));
        }
        let (dir, pst) = self.resolve_dir_seen(parent)?;
        let perm = mode & 0o7777 & !effective_umask(&dir, umask);
        let ftype = rfs::FileType::from_raw_mode(mode);
        as_caller(cx, || {
            Ok(rfs::mknodat(
                &*dir,
                name.as_os_str(),
                ftype,
                Mode::from_raw_mode(perm),
                rdev,
            )?)
        })?;
        if let Some(set) = linkto {
            // Marked before it has a gfid, so that it never answers as an
            // ordinary file with one.
            let marked = open_child(&*dir, name).and_then(|fd| {
                set_xattr(
                    &fd,
                    mortar_core::fop::LINKTO_XATTR,
                    &set.to_le_bytes(),
                    rfs::XattrFlags::CREATE,
                )
            });
            if let Err(e) = marked {
                Self::undo_new(&dir, name, false);
                return Err(e);
            }
        }
        self.adopt_new(cx, (&dir, &pst), parent, name, gfid, perm, false)
    }

    pub(crate) fn mkdir(
        &self,
        cx: &Ctx,
        parent: Gfid,
        name: &Name,
        gfid: Gfid,
        mode: u32,
        umask: u32,
    ) -> FsResult<Reply> {
        if hidden(parent, name) {
            return Err(FsError::errno(libc::EPERM));
        }
        let (dir, pst) = self.resolve_dir_seen(parent)?;
        let perm = mode & 0o7777 & !effective_umask(&dir, umask);
        as_caller(cx, || {
            Ok(rfs::mkdirat(
                &*dir,
                name.as_os_str(),
                Mode::from_raw_mode(perm),
            )?)
        })?;
        self.adopt_new(cx, (&dir, &pst), parent, name, gfid, perm, true)
    }

    pub(crate) fn symlink(
        &self,
        cx: &Ctx,
        parent: Gfid,
        name: &Name,
        gfid: Gfid,
        target: &[u8],
    ) -> FsResult<Reply> {
        if hidden(parent, name) {
            return Err(FsError::errno(libc::EPERM));
        }
        if target.is_empty() || target.len() >= libc::PATH_MAX as usize || target.contains(&0) {
            return Err(FsError::inval("bad symlink target"));
        }
        let (dir, pst) = self.resolve_dir_seen(parent)?;
        as_caller(cx, || {
            Ok(rfs::symlinkat(
                std::ffi::OsStr::from_bytes(target),
                &*dir,
                name.as_os_str(),
            )?)
        })?;
        self.adopt_new(cx, (&dir, &pst), parent, name, gfid, 0o777, false)
    }

    /// Removes a non-directory name; drops the gfid handle with the last
    /// name. Answers what the directory and the object are left as.
    pub(crate) fn unlink(&self, cx: &Ctx, parent: Gfid, name: &Name) -> FsResult<Reply> {
        let dir = self.resolve_dir(parent)?;
        let (fd, attr) = self.lookup_at(cx, &dir, parent, name)?;
        if attr.kind == FileKind::Dir {
            return Err(FsError::errno(libc::EISDIR));
        }
        as_caller(cx, || {
            Ok(rfs::unlinkat(&*dir, name.as_os_str(), AtFlags::empty())?)
        })?;
        let st = rfs::fstat(&fd)?;
        let last = st.st_nlink <= 1;
        if last {
            self.drop_handle(attr.gfid);
        }
        let reply = match full_attr(dir.as_fd(), parent) {
            Ok(d) => Reply::Unnamed(vec![d, left(&st, &attr)]),
            Err(_) => Reply::Ok,
        };
        if last && self.free_behind.takes(st.st_blocks as u64) {
            // Its blocks are freed as `fd` closes: not on this thread.
            reaper::close_behind(fd);
        }
        Ok(reply)
    }

    pub(crate) fn rmdir(&self, cx: &Ctx, parent: Gfid, name: &Name) -> FsResult<Reply> {
        let dir = self.resolve_dir(parent)?;
        let (fd, attr) = self.lookup_at(cx, &dir, parent, name)?;
        if attr.kind != FileKind::Dir {
            return Err(FsError::errno(libc::ENOTDIR));
        }
        as_caller(cx, || {
            Ok(rfs::unlinkat(&*dir, name.as_os_str(), AtFlags::REMOVEDIR)?)
        })?;
        self.drop_handle(attr.gfid);
        Ok(unnamed(&[(dir.as_fd(), parent)], &[(fd.as_fd(), &attr)]))
    }

    pub(crate) fn rename(
        &self,
        cx: &Ctx,
        parent: Gfid,
        name: &Name,
        newparent: Gfid,
        newname: &Name,
        flags: u32,
    ) -> FsResult<Reply> {
        if hidden(newparent, newname) {
            return Err(FsError::errno(libc::EPERM));
        }
        // RENAME_WHITEOUT would leave an object without a gfid, made on
        // each brick on its own; the client makes whiteouts itself.
        if flags & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0 {
            return Err(FsError::new(
                libc::EINVAL,
                "rename flags other than NOREPLACE and EXCHANGE",
            ));
        }
        let dir = self.resolve_dir(parent)?;
        let newdir = self.resolve_dir(newparent)?;
        let (src_fd, src) = self.lookup_at(cx, &dir, parent, name)?;
        let dst = match self.lookup_at(cx, &newdir, newparent, newname) {
            Ok((fd, a)) => Some((fd, a)),
            Err(e) if e.is(libc::ENOENT) => None,
            Err(e) => return Err(e),
        };
        as_caller(cx, || {
            Ok(rfs::renameat_with(
                &*dir,
                name.as_os_str(),
                &*newdir,
                newname.as_os_str(),
                rfs::RenameFlags::from_bits_retain(flags),
            )?)
        })?;
        let exchanged = flags & libc::RENAME_EXCHANGE != 0;
        if src.kind == FileKind::Dir {
            // Crash window: renamed, its handle not updated yet.
            fail::fail_point!(self.fail_point_name("rename-before-handle").as_str());
            self.make_dir_handle(src.gfid, newparent, newname)?;
        }
        if let Some((fd, dst)) = &dst {
            if dst.gfid != src.gfid {
                if exchanged {
                    if dst.kind == FileKind::Dir {
                        self.make_dir_handle(dst.gfid, parent, name)?;
                    }
                } else if dst.kind == FileKind::Dir || rfs::fstat(fd)?.st_nlink <= 1 {
                    self.drop_handle(dst.gfid);
                }
            }
        }
        let mut dirs = vec![(dir.as_fd(), parent)];
        if newparent != parent {
            dirs.push((newdir.as_fd(), newparent));
        }
        let mut objects = vec![(src_fd.as_fd(), &src)];
        if let Some((fd, dst)) = &dst {
            if dst.gfid != src.gfid {
                objects.push((fd.as_fd(), dst));
            }
        }
        let reply = unnamed(&dirs, &objects);
        drop((dirs, objects));
        if let Some((fd, replaced)) = dst {
            if !exchanged && replaced.gfid != src.gfid && self.free_behind.takes(replaced.blocks) {
                // A file with blocks replaced: they are freed as `fd`
                // closes (if that was its last name), not on this thread.
                reaper::close_behind(fd);
            }
        }
        Ok(reply)
    }

    pub(crate) fn link(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        newparent: Gfid,
        newname: &Name,
    ) -> FsResult<Reply> {
        if hidden(newparent, newname) {
            return Err(FsError::errno(libc::EPERM));
        }
        let newdir = self.resolve_dir(newparent)?;
        let obj = self.resolve(gfid)?;
        if FileKind::from_mode(rfs::fstat(&*obj)?.st_mode) == FileKind::Dir {
            return Err(FsError::errno(libc::EPERM));
        }
        if identity::switches(cx) {
            // The caller cannot search `.mortar/`: linked through the
            // object itself, under the rules for hard links a local
            // caller gets (`fs.protected_hardlinks`).
            as_caller(cx, || {
                Ok(rfs::linkat(
                    rfs::CWD,
                    proc_path(&*obj),
                    &*newdir,
                    newname.as_os_str(),
                    AtFlags::SYMLINK_FOLLOW,
                )?)
            })?;
        } else {
            let (idx, file) = self.index_dir(gfid)?;
            rfs::linkat(
                idx,
                file.as_str(),
                &*newdir,
                newname.as_os_str(),
                AtFlags::empty(),
            )?;
        }
        Ok(Reply::Entry(Entry {
            attr: full_attr(obj.as_fd(), gfid)?,
            parent: full_attr(newdir.as_fd(), newparent).ok(),
        }))
    }
}
