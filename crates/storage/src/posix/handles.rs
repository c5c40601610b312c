//! The gfid index (`.mortar/gfid/xx/<gfid>`): how any object is reached
//! by id beneath the brick root, and kept in step with the names.
//!
//! One level of 256 directories, each made when its first handle is: a
//! create makes no directory once a few hundred objects exist. (The first
//! layout had two levels, `xx/yy/`, 65,536 directories made one by one: on
//! a young brick most creates made one or two, and a directory's inode
//! costs the file system more than the file's; see `migrate`.)

use super::*;

/// How directories reached by gfid are held open: for reading (never
/// read through: a listing opens its own), not `O_PATH`, so that their
/// xattrs are read through the descriptor (`get_xattr`). Opening a
/// directory has no effect on it, unlike a device's or a FIFO's open.
const DIR_HELD: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

impl Posix {
    /// The index directory `gfid`'s handle is in (made if missing, and
    /// kept open), and the handle's name there.
    pub(crate) fn index_dir(&self, gfid: Gfid) -> FsResult<(BorrowedFd<'_>, String)> {
        hashed_dir(&self.root, &self.index_dirs, INDEX_REL, gfid)
    }

    pub(crate) fn make_dir_handle_target(&self, gfid: Gfid, target: &[u8]) -> FsResult<()> {
        let target = std::ffi::OsStr::from_bytes(target);
        let (dir, file) = self.index_dir(gfid)?;
        match rfs::symlinkat(target, dir, file.as_str()) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::EXIST) => {
                let old = rfs::readlinkat(dir, file.as_str(), Vec::new())?;
                if old.as_bytes() != target.as_bytes() {
                    rfs::unlinkat(dir, file.as_str(), AtFlags::empty())?;
                    rfs::symlinkat(target, dir, file.as_str())?;
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) fn make_dir_handle(&self, gfid: Gfid, parent: Gfid, name: &Name) -> FsResult<()> {
        self.dirs.lock().unwrap().remove(&gfid);
        self.make_dir_handle_target(gfid, &dir_target(parent, name.as_bytes()))
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
        match rfs::linkat(&dir, name.as_os_str(), idx, file.as_str(), AtFlags::empty()) {
            Ok(()) => Ok(()),
            // A lookup of the new name (a rebalance's crawl, another
            // client) between the object's making and this link found its
            // gfid without a handle and repaired it: the handle is ours.
            Err(rustix::io::Errno::EXIST)
                if same_inode(
                    rfs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW),
                    rfs::statat(idx, file.as_str(), AtFlags::SYMLINK_NOFOLLOW),
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
        for t in self.anon_tables.lock().unwrap().iter() {
            if let Some(t) = t.upgrade() {
                t.lock().unwrap().remove(&gfid);
            }
        }
        if let Some(f) = self.forget.get() {
            f(gfid);
        }
        if let Ok((idx, file)) = self.index_dir(gfid) {
            let _ = rfs::unlinkat(idx, file.as_str(), AtFlags::empty());
        }
        self.drop_sums(gfid);
    }

    /// Whether object `gfid` exists on this brick (ESTALE if not): one
    /// look at its handle, where `resolve` opens it.
    pub fn exists(&self, gfid: Gfid) -> FsResult<()> {
        let (idx, file) = self.index_dir(gfid)?;
        match rfs::statat(idx, file.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(()),
            Err(rustix::io::Errno::NOENT) => {
                Err(FsError::new(libc::ESTALE, format!("no object {gfid}")))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Resolves a gfid to an `O_PATH` descriptor of the object.
    pub fn resolve(&self, gfid: Gfid) -> FsResult<Arc<OwnedFd>> {
        self.resolve_seen(gfid).map(|(fd, _)| fd)
    }

    /// `resolve`, with the object's attributes if it took them on the way.
    fn resolve_seen(&self, gfid: Gfid) -> FsResult<(Arc<OwnedFd>, Option<rfs::Stat>)> {
        let cached = self.dirs.lock().unwrap().get(&gfid).cloned();
        if let Some(fd) = cached {
            // A directory removed behind the brick's back stays open here
            // with no links; it must not be used.
            match rfs::fstat(&*fd) {
                Ok(st) if st.st_nlink > 0 => return Ok((fd, Some(st))),
                _ => {
                    self.dirs.lock().unwrap().remove(&gfid);
                }
            }
        }
        let (idx, file) = self.index_dir(gfid)?;
        let fd = rfs::openat2(
            idx,
            file.as_str(),
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
            return Ok((self.walk_dir(gfid)?, None));
        }
        Ok((Arc::new(fd), Some(st)))
    }

    /// Reads a directory handle: the parent's gfid and the directory's name.
    pub(crate) fn read_dir_handle(&self, gfid: Gfid) -> FsResult<(Gfid, Name)> {
        let (idx, file) = self.index_dir(gfid)?;
        let target = rfs::readlinkat(idx, file.as_str(), Vec::new())?.into_bytes();
        let stale = || FsError::new(libc::ESTALE, format!("bad directory handle for {gfid}"));
        let (parent, name) = parse_dir_target(&target, b"../", 3).ok_or_else(stale)?;
        let name = Name::new(name.to_vec()).map_err(|_| stale())?;
        Ok((parent, name))
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
                let fd = rfs::openat(&self.root, ".", DIR_HELD, Mode::empty())?;
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
                DIR_HELD | OFlags::NOFOLLOW,
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
        self.resolve_dir_seen(gfid).map(|(fd, _)| fd)
    }

    /// `resolve_dir`, with the directory's attributes as they are now.
    pub(crate) fn resolve_dir_seen(&self, gfid: Gfid) -> FsResult<(Arc<OwnedFd>, rfs::Stat)> {
        let (fd, st) = self.resolve_seen(gfid)?;
        let st = match st {
            Some(st) => st,
            None => rfs::fstat(&*fd)?,
        };
        if FileKind::from_mode(st.st_mode) != FileKind::Dir {
            return Err(FsError::errno(libc::ENOTDIR));
        }
        Ok((fd, st))
    }

    /// The object whose gfid starts with the eight bytes of `ino`: its
    /// handle is in the index directory those bytes name.
    pub(crate) fn resolve_ino(&self, ino: u64) -> FsResult<Reply> {
        let hex = format!("{ino:016x}");
        let prefix = format!("{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16]);
        // The inode number is the gfid's first half: the object is the one
        // handle of its index directory whose name starts with it (a scan
        // of one directory in 256, for a handle the kernel forgot).
        let rel = format!("{INDEX_REL}/{}", &hex[0..2]);
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
        let (fd, st) = self.resolve_seen(gfid)?;
        let Some(st) = st else {
            return full_attr(fd.as_fd(), gfid);
        };
        if FileKind::from_mode(st.st_mode) == FileKind::Dir {
            // Held open for reading: its xattrs are read through it.
            return full_attr_of(fd.as_fd(), gfid, &st, Via::Proc);
        }
        // Reached by its handle, a name never renamed: read by it.
        let (idx, file) = self.index_dir(gfid)?;
        let via = Via::Name(idx, std::ffi::OsStr::new(&file));
        full_attr_of(fd.as_fd(), gfid, &st, via)
    }
}

/// Whether two stats succeeded and name one inode.
fn same_inode(a: rustix::io::Result<rfs::Stat>, b: rustix::io::Result<rfs::Stat>) -> bool {
    matches!((a, b), (Ok(a), Ok(b)) if a.st_dev == b.st_dev && a.st_ino == b.st_ino)
}

/// A directory handle's target: its parent's handle, then its name (a
/// symlink's target is bytes: any name the volume allows fits).
fn dir_target(parent: Gfid, name: &[u8]) -> Vec<u8> {
    let mut target = format!("../{}/", parent.handle_rel()).into_bytes();
    target.extend_from_slice(name);
    target
}

/// A directory handle's target, `<up><xx/ for each level><parent uuid>/<name>`,
/// split into the parent's gfid and the name's bytes.
fn parse_dir_target<'a>(target: &'a [u8], up: &[u8], levels: usize) -> Option<(Gfid, &'a [u8])> {
    let rest = target.strip_prefix(up)?;
    let (dirs, rest) = rest.split_at_checked(levels)?;
    if rest.len() < 36 + 2 || rest[36] != b'/' {
        return None;
    }
    let uuid = uuid::Uuid::parse_str(std::str::from_utf8(&rest[..36]).ok()?).ok()?;
    let hex = uuid.hyphenated().to_string();
    // The directories are the uuid's first hex digits, two per level.
    if dirs
        .chunks(3)
        .enumerate()
        .any(|(i, d)| d.len() != 3 || d[2] != b'/' || d[..2] != hex.as_bytes()[2 * i..2 * i + 2])
    {
        return None;
    }
    Some((Gfid(*uuid.as_bytes()), &rest[37..]))
}

/// The root's handle: from `.mortar/gfid/00/`, the brick root.
pub(super) const ROOT_TARGET: &[u8] = b"../../..";

/// What `.mortar/layout` says once the index has one level.
const LAYOUT: &str = "gfid-index 1-level\n";

impl Posix {
    /// Moves a brick's gfid index from the first layout (`xx/yy/<gfid>`) to
    /// one level (`xx/<gfid>`), once, before the brick serves: each file
    /// handle is renamed (the hard link moves; the object keeps its inode),
    /// each directory handle made again with the new target, each emptied
    /// `xx/yy` removed, and `.mortar/layout` written last. A crash midway
    /// leaves handles in both layouts; the next start goes on from there.
    /// Returns how many handles moved.
    pub(super) fn migrate(&self) -> FsResult<usize> {
        match rfs::statat(&self.root, LAYOUT_REL, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => return Ok(0),
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
        let beneath_dir = |at: &OwnedFd, rel: &str| {
            rfs::openat2(
                at,
                rel,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
                beneath() | ResolveFlags::NO_SYMLINKS,
            )
        };
        let mut moved = 0;
        let index = beneath_dir(&self.root, INDEX_REL)?;
        for top in names_in(&index)? {
            if !is_hex2(&top) {
                continue;
            }
            let top_fd = beneath_dir(&index, &top)?;
            for leaf in names_in(&top_fd)? {
                if !is_hex2(&leaf) {
                    continue;
                }
                let leaf_fd = match beneath_dir(&top_fd, &leaf) {
                    Ok(fd) => fd,
                    Err(rustix::io::Errno::NOTDIR) => continue,
                    Err(e) => return Err(e.into()),
                };
                for handle in names_in(&leaf_fd)? {
                    let st = rfs::statat(&leaf_fd, handle.as_str(), AtFlags::SYMLINK_NOFOLLOW)?;
                    let is_dir_handle =
                        FileKind::from_mode(st.st_mode) == FileKind::Symlink && st.st_nlink == 1;
                    let gfid = uuid::Uuid::parse_str(&handle).map(|u| Gfid(*u.as_bytes()));
                    match gfid {
                        Ok(gfid) if is_dir_handle => {
                            let old = rfs::readlinkat(&leaf_fd, handle.as_str(), Vec::new())?;
                            let new = match old.as_bytes() {
                                b"../../../.." => ROOT_TARGET.to_vec(),
                                t => match parse_dir_target(t, b"../../", 6) {
                                    Some((parent, name)) => dir_target(parent, name),
                                    // Not a handle this code made: moved as it is.
                                    None => old.as_bytes().to_vec(),
                                },
                            };
                            self.make_dir_handle_target(gfid, &new)?;
                            rfs::unlinkat(&leaf_fd, handle.as_str(), AtFlags::empty())?;
                        }
                        // A file's handle (the hard link moves), or a name
                        // that is no handle: moved as it is.
                        _ => rfs::renameat(&leaf_fd, handle.as_str(), &top_fd, handle.as_str())?,
                    }
                    moved += 1;
                }
                rfs::unlinkat(&top_fd, leaf.as_str(), AtFlags::REMOVEDIR)?;
            }
        }
        let f = rfs::openat2(
            &self.root,
            LAYOUT_REL,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
            beneath() | ResolveFlags::NO_SYMLINKS,
        )?;
        rustix::io::write(&f, LAYOUT.as_bytes())?;
        rfs::fsync(&f)?;
        Ok(moved)
    }
}

/// The names in a directory (not `.` and `..`).
fn names_in(dir: &OwnedFd) -> FsResult<Vec<String>> {
    let mut names = Vec::new();
    for e in rfs::Dir::read_from(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name != "." && name != ".." {
            names.push(name);
        }
    }
    Ok(names)
}

fn is_hex2(name: &str) -> bool {
    name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `base/ab` for `gfid` (`ab` its first byte), made and opened once into
/// `slots` (256 of them); with the gfid's name in it.
pub(crate) fn hashed_dir<'a>(
    root: &OwnedFd,
    slots: &'a [std::sync::OnceLock<OwnedFd>],
    base: &str,
    gfid: Gfid,
) -> FsResult<(BorrowedFd<'a>, String)> {
    let file = gfid.to_string();
    let slot = &slots[gfid.0[0] as usize];
    if let Some(fd) = slot.get() {
        return Ok((fd.as_fd(), file));
    }
    let rel = format!("{base}/{}", &file[..2]);
    let open = || {
        rfs::openat2(
            root,
            rel.as_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            beneath() | ResolveFlags::NO_SYMLINKS,
        )
    };
    let fd = match open() {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => {
            match rfs::mkdirat(root, base, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            match rfs::mkdirat(root, rel.as_str(), Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            open()?
        }
        Err(e) => return Err(e.into()),
    };
    // Two threads may open it at once: one descriptor is kept.
    let _ = slot.set(fd);
    Ok((slot.get().expect("set just now").as_fd(), file))
}

/// The regular files of the brick at `root`, by gfid, as its gfid index
/// has them (directories and symlinks left out), one index directory at
/// a time: what the bitrot scrubber walks. Blocking.
pub fn files_of(root: &std::path::Path, each: &mut dyn FnMut(Vec<Gfid>)) -> std::io::Result<()> {
    let index = root.join(INDEX_REL);
    let mut dirs: Vec<_> = std::fs::read_dir(&index)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    dirs.sort();
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut found = Vec::new();
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let name = e.file_name();
            if let Some(g) = name.to_str().and_then(|s| uuid::Uuid::parse_str(s).ok()) {
                found.push(Gfid(*g.as_bytes()));
            }
        }
        found.sort();
        each(found);
    }
    Ok(())
}
