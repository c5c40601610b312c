//! The gfid index (`.mortar/gfid/xx/yy/<gfid>`): how any object is reached
//! by id beneath the brick root, and kept in step with the names.

use super::*;

impl Posix {
    pub(crate) fn index_dir(&self, gfid: Gfid) -> FsResult<(OwnedFd, String)> {
        let (dir, file) = split_handle(gfid);
        let rel = format!("{INDEX_REL}/{dir}");
        let open = |_: ()| {
            rfs::openat2(
                &self.root,
                rel.as_str(),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
                beneath() | ResolveFlags::NO_SYMLINKS,
            )
        };
        match open(()) {
            Ok(fd) => Ok((fd, file)),
            Err(rustix::io::Errno::NOENT) => {
                let top = format!("{INDEX_REL}/{}", &dir[0..2]);
                for d in [top.as_str(), rel.as_str()] {
                    match rfs::mkdirat(&self.root, d, Mode::from_raw_mode(0o700)) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Ok((open(())?, file))
            }
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) fn make_dir_handle_target(&self, gfid: Gfid, target: &[u8]) -> FsResult<()> {
        let target = std::ffi::OsStr::from_bytes(target);
        let (dir, file) = self.index_dir(gfid)?;
        match rfs::symlinkat(target, &dir, file.as_str()) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::EXIST) => {
                let old = rfs::readlinkat(&dir, file.as_str(), Vec::new())?;
                if old.as_bytes() != target.as_bytes() {
                    rfs::unlinkat(&dir, file.as_str(), AtFlags::empty())?;
                    rfs::symlinkat(target, &dir, file.as_str())?;
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) fn make_dir_handle(&self, gfid: Gfid, parent: Gfid, name: &Name) -> FsResult<()> {
        self.dirs.lock().unwrap().remove(&gfid);
        // Symlink targets are bytes: any name the volume allows fits.
        let mut target = format!("../../{}/", parent.handle_rel()).into_bytes();
        target.extend_from_slice(name.as_bytes());
        self.make_dir_handle_target(gfid, &target)
    }

    pub(crate) fn make_file_handle(&self, gfid: Gfid, dir: impl AsFd, name: &Name) -> FsResult<()> {
        match self.make_new_file_handle(gfid, dir, name) {
            Err(e) if e.is(libc::EEXIST) => Ok(()),
            r => r,
        }
    }

    /// As `make_file_handle` for an object just made, whose gfid must not
    /// name another object of the brick already: EEXIST if it does.
    pub(crate) fn make_new_file_handle(
        &self,
        gfid: Gfid,
        dir: impl AsFd,
        name: &Name,
    ) -> FsResult<()> {
        let (idx, file) = self.index_dir(gfid)?;
        match rfs::linkat(
            &dir,
            name.as_os_str(),
            &idx,
            file.as_str(),
            AtFlags::empty(),
        ) {
            Ok(()) => Ok(()),
            // A lookup of the new name (a rebalance's crawl, another
            // client) between the object's making and this link found its
            // gfid without a handle and repaired it: the handle is ours.
            Err(rustix::io::Errno::EXIST)
                if same_inode(
                    rfs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW),
                    rfs::statat(&idx, file.as_str(), AtFlags::SYMLINK_NOFOLLOW),
                ) =>
            {
                Ok(())
            }
            Err(rustix::io::Errno::EXIST) => Err(FsError::new(
                libc::EEXIST,
                format!("gfid {gfid} names another object of this brick"),
            )),
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) fn drop_handle(&self, gfid: Gfid) {
        self.dirs.lock().unwrap().remove(&gfid);
        if let Some(f) = self.forget.get() {
            f(gfid);
        }
        if let Ok((idx, file)) = self.index_dir(gfid) {
            let _ = rfs::unlinkat(&idx, file.as_str(), AtFlags::empty());
        }
    }

    /// Resolves a gfid to an `O_PATH` descriptor of the object.
    pub fn resolve(&self, gfid: Gfid) -> FsResult<Arc<OwnedFd>> {
        let cached = self.dirs.lock().unwrap().get(&gfid).cloned();
        if let Some(fd) = cached {
            // A directory removed behind the brick's back stays open here
            // with no links; it must not be used.
            if rfs::fstat(&*fd).is_ok_and(|st| st.st_nlink > 0) {
                return Ok(fd);
            }
            self.dirs.lock().unwrap().remove(&gfid);
        }
        let rel = format!("{INDEX_REL}/{}", gfid.handle_rel());
        let fd = rfs::openat2(
            &self.root,
            rel.as_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            beneath(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::NOENT => FsError::new(libc::ESTALE, format!("no object {gfid}")),
            e => e.into(),
        })?;
        let st = rfs::fstat(&fd)?;
        // A directory handle is a symlink with a single link; a user symlink
        // has its handle plus at least one name.
        if FileKind::from_mode(st.st_mode) == FileKind::Symlink && st.st_nlink == 1 {
            return self.walk_dir(gfid);
        }
        Ok(Arc::new(fd))
    }

    /// Reads a directory handle: the parent's gfid and the directory's name.
    pub(crate) fn read_dir_handle(&self, gfid: Gfid) -> FsResult<(Gfid, Name)> {
        let (idx, file) = self.index_dir(gfid)?;
        let target = rfs::readlinkat(&idx, file.as_str(), Vec::new())?.into_bytes();
        let stale = || FsError::new(libc::ESTALE, format!("bad directory handle for {gfid}"));
        // "../../ab/cd/<36-char uuid>/<name>"
        let rest = target.strip_prefix(b"../../").ok_or_else(stale)?;
        if rest.len() < 6 + 36 + 2 || rest[6 + 36] != b'/' {
            return Err(stale());
        }
        let uuid = std::str::from_utf8(&rest[6..6 + 36]).map_err(|_| stale())?;
        let parent = uuid::Uuid::parse_str(uuid).map_err(|_| stale())?;
        let name = Name::new(rest[6 + 36 + 1..].to_vec()).map_err(|_| stale())?;
        Ok((Gfid(*parent.as_bytes()), name))
    }

    /// Opens a directory by walking its handle chain up to a directory
    /// already open (or the root), then opening each name downwards with
    /// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`: no depth limit (the kernel
    /// follows at most 40 nested symlinks), and no symlink is ever followed.
    pub(crate) fn walk_dir(&self, gfid: Gfid) -> FsResult<Arc<OwnedFd>> {
        let mut chain: Vec<(Gfid, Name)> = Vec::new();
        let mut cur = gfid;
        let mut base = loop {
            if cur == Gfid::ROOT {
                let fd = rfs::openat(
                    &self.root,
                    ".",
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                break Arc::new(fd);
            }
            if let Some(fd) = self.dirs.lock().unwrap().get(&cur) {
                break fd.clone();
            }
            let (parent, name) = self.read_dir_handle(cur)?;
            chain.push((cur, name));
            cur = parent;
            if chain.len() > 1 << 16 {
                return Err(FsError::new(
                    libc::ELOOP,
                    format!("directory handle loop at {gfid}"),
                ));
            }
        };
        for (g, name) in chain.into_iter().rev() {
            let fd = rfs::openat2(
                &*base,
                name.as_os_str(),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                beneath() | ResolveFlags::NO_SYMLINKS,
            )
            .map_err(|e| FsError::new(e.raw_os_error(), format!("stale handle {g}")))?;
            if read_gfid(&fd)? != Some(g) {
                return Err(FsError::new(
                    libc::ESTALE,
                    format!("directory {g} was replaced"),
                ));
            }
            base = Arc::new(fd);
            let mut dirs = self.dirs.lock().unwrap();
            if dirs.len() >= DIR_CACHE_MAX {
                dirs.clear();
            }
            dirs.insert(g, base.clone());
        }
        Ok(base)
    }

    pub(crate) fn resolve_dir(&self, gfid: Gfid) -> FsResult<Arc<OwnedFd>> {
        let fd = self.resolve(gfid)?;
        let st = rfs::fstat(&*fd)?;
        if FileKind::from_mode(st.st_mode) != FileKind::Dir {
            return Err(FsError::errno(libc::ENOTDIR));
        }
        Ok(fd)
    }

    /// The object whose gfid starts with the eight bytes of `ino`: its
    /// handle is in the index directory those bytes name.
    pub(crate) fn resolve_ino(&self, ino: u64) -> FsResult<Reply> {
        let hex = format!("{ino:016x}");
        let prefix = format!("{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16]);
        let rel = format!("{INDEX_REL}/{}/{}", &hex[0..2], &hex[2..4]);
        let stale = || FsError::new(libc::ESTALE, format!("no object with inode {ino}"));
        let dir = match rfs::openat2(
            &self.root,
            rel.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            beneath() | ResolveFlags::NO_SYMLINKS,
        ) {
            Ok(d) => d,
            Err(rustix::io::Errno::NOENT) => return Err(stale()),
            Err(e) => return Err(e.into()),
        };
        let mut d = rfs::Dir::new(dir)?;
        while let Some(ent) = d.read() {
            let ent = ent?;
            let n = ent.file_name().to_bytes();
            if !n.starts_with(prefix.as_bytes()) {
                continue;
            }
            let Some(gfid) = std::str::from_utf8(n)
                .ok()
                .and_then(|s| uuid::Uuid::parse_str(s).ok())
                .map(|u| Gfid(*u.as_bytes()))
            else {
                continue;
            };
            return self
                .stat_gfid(gfid)
                .map(|attr| Reply::Entry(Entry::found(attr)));
        }
        Err(stale())
    }

    /// The directory holding directory `gfid`, found through its `..`
    /// (inside the brick for any directory but the root, whose parent is
    /// itself).
    pub(crate) fn parent_of(&self, gfid: Gfid) -> FsResult<Reply> {
        let parent = if gfid == Gfid::ROOT {
            Gfid::ROOT
        } else {
            let dir = self.resolve_dir(gfid)?;
            let up = rfs::openat(
                &*dir,
                "..",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let (st, root) = (rfs::fstat(&up)?, rfs::fstat(&self.root)?);
            if (st.st_dev, st.st_ino) == (root.st_dev, root.st_ino) {
                Gfid::ROOT
            } else {
                read_gfid(&up)?.ok_or_else(|| FsError::errno(libc::ESTALE))?
            }
        };
        self.stat_gfid(parent)
            .map(|attr| Reply::Entry(Entry::found(attr)))
    }

    pub(crate) fn stat_gfid(&self, gfid: Gfid) -> FsResult<Attr> {
        full_attr(self.resolve(gfid)?.as_fd(), gfid)
    }
}

/// Whether two stats succeeded and name one inode.
fn same_inode(a: rustix::io::Result<rfs::Stat>, b: rustix::io::Result<rfs::Stat>) -> bool {
    matches!((a, b), (Ok(a), Ok(b)) if a.st_dev == b.st_dev && a.st_ino == b.st_ino)
}
