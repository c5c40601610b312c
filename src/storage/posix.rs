//! The posix storage translator: one brick directory on a local file system.
//!
//! Files and directories live at the same relative path as in the volume, so
//! the data can be read from the brick directly. Every object carries its
//! gfid in the `trusted.mortar.gfid` xattr, and the brick keeps an index
//! under `.mortar/gfid/ab/cd/<gfid>` so that any object can be reached by id:
//! a hard link for every non-directory, a relative symlink
//! `../../xy/zw/<parent-gfid>/<name>` for every directory (as GlusterFS's
//! `.glusterfs`). The index is never visible through the mount.
//!
//! Safety: names arrive as validated single components (`Name`), every
//! operation is relative to a directory handle (`*at` calls), and handles
//! are resolved with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`
//! from the brick root, so that nothing outside the brick is ever reached,
//! even through a symlink planted inside it. Objects are operated on through
//! `O_PATH` descriptors; xattrs, modes and times go through
//! `/proc/self/fd/N`, which names exactly the object the descriptor holds.

use crate::core::fop::{TimeSet, ANON_FH};
use crate::core::{
    Attr, Ctx, DirEntry, Entry, FileKind, Fop, FsError, FsResult, Gfid, Name, Reply, SetAttr,
    StatFs,
};
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, ResolveFlags};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub const GFID_XATTR: &str = "trusted.mortar.gfid";
pub const VOLUME_ID_XATTR: &str = "trusted.mortar.volume-id";
/// Internal xattrs live under this prefix; clients can neither see nor set them.
pub const INTERNAL_XATTR_PREFIX: &str = "trusted.mortar.";
pub const META_DIR: &str = ".mortar";
const INDEX_REL: &str = ".mortar/gfid";
/// Entries returned by one readdir call.
const READDIR_BATCH: usize = 512;
/// Largest single pwrite a brick issues.
const WRITE_PIECE: usize = 128 << 10;
/// Directory descriptors kept open for fast resolution.
const DIR_CACHE_MAX: usize = 8192;

/// An open file or a directory listing, held for one client connection.
pub enum Handle {
    /// An open file and its gfid.
    File(File, Gfid),
    /// An open directory's listing, the directory itself (so that it can
    /// be stat'ed after its last name is gone, as `fstat` on a local
    /// file system can) and its gfid.
    Dir(Mutex<Listing>, Arc<OwnedFd>, Gfid),
}

impl Handle {
    fn gfid(&self) -> Gfid {
        match self {
            Handle::File(_, g) | Handle::Dir(_, _, g) => *g,
        }
    }
    fn fstat(&self) -> FsResult<rfs::Stat> {
        Ok(match self {
            Handle::File(f, _) => rfs::fstat(f)?,
            Handle::Dir(_, d, _) => rfs::fstat(&**d)?,
        })
    }
}

/// An open directory's entries, taken at opendir and again at every
/// rewind (a read from offset 0 after the first), so that offsets stay
/// valid however the directory changes, and a rewound reader sees it anew,
/// as POSIX wants of `rewinddir`.
pub struct Listing {
    names: Arc<Vec<(Vec<u8>, FileKind)>>,
    /// Not read from offset 0 yet: the listing is as fresh as it gets.
    fresh: bool,
}

/// Handles issued to one client connection; dropped (closing every file)
/// when the connection ends.
#[derive(Default)]
pub struct FdTable {
    next: AtomicU64,
    map: Mutex<HashMap<u64, Arc<Handle>>>,
    /// Files read through the anonymous handle (`ANON_FH`), by gfid.
    anon: Mutex<HashMap<Gfid, Arc<Handle>>>,
    /// Objects this connection has an open change session on (`index.rs`).
    pub(super) sessions: Mutex<std::collections::HashSet<Gfid>>,
}

/// Anonymous files kept open per connection.
const ANON_MAX: usize = 1024;

impl FdTable {
    fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.map.lock().unwrap().insert(fh, Arc::new(h));
        fh
    }
    /// A file or directory of this connection's, open under `gfid`: it
    /// stays reachable after its last name (and so its gfid handle) is gone.
    fn open_by_gfid(&self, gfid: Gfid) -> Option<Arc<Handle>> {
        let open = self.map.lock().unwrap();
        let found = open.values().find(|h| h.gfid() == gfid).cloned();
        drop(open);
        found.or_else(|| self.anon.lock().unwrap().get(&gfid).cloned())
    }

    fn get(&self, fh: u64) -> FsResult<Arc<Handle>> {
        self.map
            .lock()
            .unwrap()
            .get(&fh)
            .cloned()
            .ok_or_else(|| FsError::new(libc::EBADF, format!("unknown handle {fh}")))
    }
    fn file(&self, fh: u64) -> FsResult<Arc<Handle>> {
        let h = self.get(fh)?;
        match &*h {
            Handle::File(..) => Ok(h),
            Handle::Dir(..) => Err(FsError::errno(libc::EISDIR)),
        }
    }
    fn remove(&self, fh: u64) {
        self.map.lock().unwrap().remove(&fh);
    }
    pub fn len(&self) -> usize {
        self.map.lock().unwrap().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The umask a new object in `dir` gets: none under a default ACL, which
/// the brick's file system applies instead (POSIX.1e, as a local file
/// system does it; the client leaves the umask to the brick).
fn effective_umask(dir: &OwnedFd, umask: u32) -> u32 {
    if umask != 0 && rfs::getxattr_query(proc_path(dir), DEFAULT_ACL_XATTR).is_ok() {
        return 0;
    }
    umask
}

/// Where a directory's default ACL is kept (`system.posix_acl_default`).
const DEFAULT_ACL_XATTR: &str = "system.posix_acl_default";

fn as_file(h: &Handle) -> &File {
    match h {
        Handle::File(f, _) => f,
        Handle::Dir(..) => unreachable!("checked by FdTable::file"),
    }
}

pub struct Posix {
    path: PathBuf,
    pub(super) root: OwnedFd,
    dirs: Mutex<HashMap<Gfid, Arc<OwnedFd>>>,
    /// Open change sessions per object, over all connections (`index.rs`).
    pub(super) sessions: Mutex<HashMap<Gfid, u32>>,
    /// Objects whose copy here blames other copies, with the blame: the
    /// xattrs' contents, kept in memory for `Fop::Blamed` (`index.rs`).
    pub(super) blamed: Mutex<HashMap<Gfid, u32>>,
    /// An arbiter keeps names and metadata, but no file data: writes are
    /// acknowledged without being stored, sizes stay 0.
    arbiter: bool,
    /// `.mortar/pending`, the heal index (`index.rs`).
    pub(super) pending: OwnedFd,
}

pub(super) fn proc_path(fd: impl AsFd) -> String {
    format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())
}

fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
}

/// Opens one name inside a directory without following a final symlink.
fn open_child(dir: impl AsFd, name: &Name) -> FsResult<OwnedFd> {
    Ok(rfs::openat2(
        dir,
        name.as_os_str(),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        beneath() | ResolveFlags::NO_SYMLINKS,
    )?)
}

pub(super) fn get_xattr(fd: impl AsFd, name: &str) -> FsResult<Vec<u8>> {
    let p = proc_path(fd);
    let mut buf = vec![0u8; 256];
    loop {
        match rfs::getxattr(&p, name, &mut buf[..]) {
            Ok(m) => {
                buf.truncate(m);
                return Ok(buf);
            }
            Err(rustix::io::Errno::RANGE) => {
                let n = rfs::getxattr_query(&p, name)?;
                buf.resize(n.max(buf.len() * 2), 0);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

pub(super) fn set_xattr(
    fd: impl AsFd,
    name: &str,
    value: &[u8],
    flags: rfs::XattrFlags,
) -> FsResult<()> {
    Ok(rfs::setxattr(proc_path(fd), name, value, flags)?)
}

fn read_gfid(fd: impl AsFd) -> FsResult<Option<Gfid>> {
    match get_xattr(fd, GFID_XATTR) {
        Ok(v) => Ok(Gfid::from_slice(&v)),
        Err(e) if e.is(libc::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

fn attr_of(st: &rfs::Stat, gfid: Gfid) -> Attr {
    let kind = FileKind::from_mode(st.st_mode);
    // A non-directory's gfid handle is one of its links; it is not a name
    // in the volume.
    let nlink = if kind == FileKind::Dir {
        st.st_nlink
    } else {
        st.st_nlink.saturating_sub(1)
    };
    Attr {
        gfid,
        kind,
        perm: st.st_mode & 0o7777,
        nlink: nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev,
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        blksize: st.st_blksize as u32,
        atime: (st.st_atime, st.st_atime_nsec as u32),
        mtime: (st.st_mtime, st.st_mtime_nsec as u32),
        ctime: (st.st_ctime, st.st_ctime_nsec as u32),
        blame: 0,
    }
}

fn hidden(parent: Gfid, name: &Name) -> bool {
    parent == Gfid::ROOT && name.as_bytes() == META_DIR.as_bytes()
}

fn split_handle(gfid: Gfid) -> (String, String) {
    let rel = gfid.handle_rel();
    let (dir, file) = rel.rsplit_once('/').expect("handle has a directory");
    (dir.to_string(), file.to_string())
}

impl Posix {
    /// Opens (and on first use prepares) a brick directory.
    pub fn open(path: &Path) -> FsResult<Posix> {
        let root = rfs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FsError::new(e.raw_os_error(), format!("brick {}", path.display())))?;
        match read_gfid(&root)? {
            Some(g) if g == Gfid::ROOT => {}
            Some(g) => {
                return Err(FsError::inval(format!(
                    "brick root {} carries gfid {g}, not the root gfid",
                    path.display()
                )))
            }
            None => set_xattr(&root, GFID_XATTR, &Gfid::ROOT.0, rfs::XattrFlags::empty())?,
        }
        for d in [META_DIR, INDEX_REL, super::index::PENDING_REL] {
            match rfs::mkdirat(&root, d, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let pending = rfs::openat2(
            &root,
            super::index::PENDING_REL,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            beneath() | ResolveFlags::NO_SYMLINKS,
        )?;
        let p = Posix {
            path: path.to_path_buf(),
            root,
            dirs: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            blamed: Mutex::new(HashMap::new()),
            arbiter: false,
            pending,
        };
        // The root's handle points back to the brick root.
        p.make_dir_handle_target(Gfid::ROOT, b"../../../..")?;
        p.load_blamed()?;
        Ok(p)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn with_arbiter(mut self, arbiter: bool) -> Posix {
        self.arbiter = arbiter;
        self
    }

    fn index_dir(&self, gfid: Gfid) -> FsResult<(OwnedFd, String)> {
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

    fn make_dir_handle_target(&self, gfid: Gfid, target: &[u8]) -> FsResult<()> {
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

    fn make_dir_handle(&self, gfid: Gfid, parent: Gfid, name: &Name) -> FsResult<()> {
        self.dirs.lock().unwrap().remove(&gfid);
        // Symlink targets are bytes: any name the volume allows fits.
        let mut target = format!("../../{}/", parent.handle_rel()).into_bytes();
        target.extend_from_slice(name.as_bytes());
        self.make_dir_handle_target(gfid, &target)
    }

    fn make_file_handle(&self, gfid: Gfid, dir: impl AsFd, name: &Name) -> FsResult<()> {
        let (idx, file) = self.index_dir(gfid)?;
        match rfs::linkat(dir, name.as_os_str(), &idx, file.as_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn drop_handle(&self, gfid: Gfid) {
        self.dirs.lock().unwrap().remove(&gfid);
        self.blamed.lock().unwrap().remove(&gfid);
        if let Ok((idx, file)) = self.index_dir(gfid) {
            let _ = rfs::unlinkat(&idx, file.as_str(), AtFlags::empty());
        }
    }

    /// Resolves a gfid to an `O_PATH` descriptor of the object.
    pub(super) fn resolve(&self, gfid: Gfid) -> FsResult<Arc<OwnedFd>> {
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
    fn read_dir_handle(&self, gfid: Gfid) -> FsResult<(Gfid, Name)> {
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
    fn walk_dir(&self, gfid: Gfid) -> FsResult<Arc<OwnedFd>> {
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

    fn resolve_dir(&self, gfid: Gfid) -> FsResult<Arc<OwnedFd>> {
        let fd = self.resolve(gfid)?;
        let st = rfs::fstat(&*fd)?;
        if FileKind::from_mode(st.st_mode) != FileKind::Dir {
            return Err(FsError::errno(libc::ENOTDIR));
        }
        Ok(fd)
    }

    /// Looks a name up, giving it a gfid (and a handle) if it was created
    /// on the brick directly and has none yet.
    fn lookup_at(&self, dir: &OwnedFd, parent: Gfid, name: &Name) -> FsResult<(OwnedFd, Attr)> {
        if hidden(parent, name) {
            return Err(FsError::errno(libc::ENOENT));
        }
        let fd = open_child(dir, name)?;
        let st = rfs::fstat(&fd)?;
        let gfid = match read_gfid(&fd)? {
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
        let st = rfs::fstat(&fd)?;
        let mut attr = attr_of(&st, gfid);
        attr.blame = super::index::read_blame(&fd)?;
        Ok((fd, attr))
    }

    /// The object whose gfid starts with the eight bytes of `ino`: its
    /// handle is in the index directory those bytes name.
    fn resolve_ino(&self, ino: u64) -> FsResult<Reply> {
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
                .map(|attr| Reply::Entry(Entry { attr }));
        }
        Err(stale())
    }

    /// The directory holding directory `gfid`, found through its `..`
    /// (inside the brick for any directory but the root, whose parent is
    /// itself).
    fn parent_of(&self, gfid: Gfid) -> FsResult<Reply> {
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
            .map(|attr| Reply::Entry(Entry { attr }))
    }

    fn stat_gfid(&self, gfid: Gfid) -> FsResult<Attr> {
        let fd = self.resolve(gfid)?;
        let mut attr = attr_of(&rfs::fstat(&*fd)?, gfid);
        attr.blame = super::index::read_blame(&*fd)?;
        Ok(attr)
    }

    /// Sets gfid, owner and group of a freshly created object; on failure the
    /// caller removes it again, so a half-made object never stays behind.
    fn finish_new(
        &self,
        cx: &Ctx,
        dir: &OwnedFd,
        fd: &OwnedFd,
        gfid: Gfid,
        perm: u32,
    ) -> FsResult<()> {
        set_xattr(fd, GFID_XATTR, &gfid.0, rfs::XattrFlags::CREATE)?;
        let pst = rfs::fstat(dir)?;
        let gid = if pst.st_mode & libc::S_ISGID != 0 {
            pst.st_gid
        } else {
            cx.gid
        };
        rfs::chownat(
            fd,
            "",
            Some(rfs::Uid::from_raw(cx.uid)),
            Some(rfs::Gid::from_raw(gid)),
            AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        )?;
        let st = rfs::fstat(fd)?;
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

    /// Gives an object just made under `name` its gfid, owner and handle,
    /// and answers with its entry; on failure removes it again.
    fn adopt_new(
        &self,
        cx: &Ctx,
        dir: &OwnedFd,
        parent: Gfid,
        name: &Name,
        gfid: Gfid,
        perm: u32,
        is_dir: bool,
    ) -> FsResult<Reply> {
        let res = open_child(dir, name).and_then(|fd| {
            self.finish_new(cx, dir, &fd, gfid, perm)?;
            if is_dir {
                self.make_dir_handle(gfid, parent, name)?;
            } else {
                self.make_file_handle(gfid, dir, name)?;
            }
            Ok(Reply::Entry(Entry {
                attr: attr_of(&rfs::fstat(&fd)?, gfid),
            }))
        });
        if res.is_err() {
            Self::undo_new(dir, name, is_dir);
        }
        res
    }

    fn undo_new(dir: &OwnedFd, name: &Name, is_dir: bool) {
        let flags = if is_dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        let _ = rfs::unlinkat(dir, name.as_os_str(), flags);
    }

    fn create(
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
        let dir = self.resolve_dir(parent)?;
        let perm = mode & 0o7777 & !effective_umask(&dir, umask);
        let oflags = OFlags::from_bits_retain(
            (flags & (libc::O_ACCMODE | libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC)) as u32,
        );
        let made = rfs::openat2(
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
        );
        let file = match made {
            Ok(f) => f,
            Err(rustix::io::Errno::EXIST) if flags & libc::O_EXCL == 0 => {
                // Someone else made it first: open theirs, as open(O_CREAT) would.
                let (_, attr) = self.lookup_at(&dir, parent, name)?;
                let Reply::Opened { fh } = self.open_file(fds, attr.gfid, flags)? else {
                    unreachable!()
                };
                return Ok(Reply::Created {
                    entry: Entry { attr },
                    fh,
                });
            }
            Err(e) => return Err(e.into()),
        };
        let finish = self
            .finish_new(cx, &dir, &file, gfid, perm)
            .and_then(|_| self.make_file_handle(gfid, &*dir, name));
        if let Err(e) = finish {
            Self::undo_new(&dir, name, false);
            return Err(e);
        }
        let attr = attr_of(&rfs::fstat(&file)?, gfid);
        let fh = fds.insert(Handle::File(File::from(file), gfid));
        Ok(Reply::Created {
            entry: Entry { attr },
            fh,
        })
    }

    fn mknod(
        &self,
        cx: &Ctx,
        parent: Gfid,
        name: &Name,
        gfid: Gfid,
        mode: u32,
        umask: u32,
        rdev: u64,
    ) -> FsResult<Reply> {
        if hidden(parent, name) {
            return Err(FsError::errno(libc::EPERM));
        }
        let dir = self.resolve_dir(parent)?;
        let perm = mode & 0o7777 & !effective_umask(&dir, umask);
        let ftype = rfs::FileType::from_raw_mode(mode);
        rfs::mknodat(
            &*dir,
            name.as_os_str(),
            ftype,
            Mode::from_raw_mode(perm),
            rdev,
        )?;
        self.adopt_new(cx, &dir, parent, name, gfid, perm, false)
    }

    fn mkdir(
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
        let dir = self.resolve_dir(parent)?;
        let perm = mode & 0o7777 & !effective_umask(&dir, umask);
        rfs::mkdirat(&*dir, name.as_os_str(), Mode::from_raw_mode(perm))?;
        self.adopt_new(cx, &dir, parent, name, gfid, perm, true)
    }

    fn symlink(
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
        let dir = self.resolve_dir(parent)?;
        rfs::symlinkat(std::ffi::OsStr::from_bytes(target), &*dir, name.as_os_str())?;
        self.adopt_new(cx, &dir, parent, name, gfid, 0o777, false)
    }

    /// Removes a non-directory name; drops the gfid handle with the last name.
    fn unlink(&self, parent: Gfid, name: &Name) -> FsResult<Reply> {
        let dir = self.resolve_dir(parent)?;
        let (fd, attr) = self.lookup_at(&dir, parent, name)?;
        if attr.kind == FileKind::Dir {
            return Err(FsError::errno(libc::EISDIR));
        }
        rfs::unlinkat(&*dir, name.as_os_str(), AtFlags::empty())?;
        if rfs::fstat(&fd)?.st_nlink <= 1 {
            self.drop_handle(attr.gfid);
        }
        Ok(Reply::Ok)
    }

    fn rmdir(&self, parent: Gfid, name: &Name) -> FsResult<Reply> {
        let dir = self.resolve_dir(parent)?;
        let (_, attr) = self.lookup_at(&dir, parent, name)?;
        if attr.kind != FileKind::Dir {
            return Err(FsError::errno(libc::ENOTDIR));
        }
        rfs::unlinkat(&*dir, name.as_os_str(), AtFlags::REMOVEDIR)?;
        self.drop_handle(attr.gfid);
        Ok(Reply::Ok)
    }

    fn rename(
        &self,
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
        let (_, src) = self.lookup_at(&dir, parent, name)?;
        let dst = match self.lookup_at(&newdir, newparent, newname) {
            Ok((fd, a)) => Some((fd, a)),
            Err(e) if e.is(libc::ENOENT) => None,
            Err(e) => return Err(e),
        };
        rfs::renameat_with(
            &*dir,
            name.as_os_str(),
            &*newdir,
            newname.as_os_str(),
            rfs::RenameFlags::from_bits_retain(flags),
        )?;
        let exchanged = flags & libc::RENAME_EXCHANGE != 0;
        if src.kind == FileKind::Dir {
            self.make_dir_handle(src.gfid, newparent, newname)?;
        }
        if let Some((fd, dst)) = dst {
            if dst.gfid != src.gfid {
                if exchanged {
                    if dst.kind == FileKind::Dir {
                        self.make_dir_handle(dst.gfid, parent, name)?;
                    }
                } else if dst.kind == FileKind::Dir || rfs::fstat(&fd)?.st_nlink <= 1 {
                    self.drop_handle(dst.gfid);
                }
            }
        }
        Ok(Reply::Ok)
    }

    fn link(&self, gfid: Gfid, newparent: Gfid, newname: &Name) -> FsResult<Reply> {
        if hidden(newparent, newname) {
            return Err(FsError::errno(libc::EPERM));
        }
        let newdir = self.resolve_dir(newparent)?;
        let obj = self.resolve(gfid)?;
        if FileKind::from_mode(rfs::fstat(&*obj)?.st_mode) == FileKind::Dir {
            return Err(FsError::errno(libc::EPERM));
        }
        let (idx, file) = self.index_dir(gfid)?;
        rfs::linkat(
            &idx,
            file.as_str(),
            &*newdir,
            newname.as_os_str(),
            AtFlags::empty(),
        )?;
        Ok(Reply::Entry(Entry {
            attr: self.stat_gfid(gfid)?,
        }))
    }

    fn setattr(&self, gfid: Gfid, set: &SetAttr) -> FsResult<Reply> {
        let fd = self.resolve(gfid)?;
        let st = rfs::fstat(&*fd)?;
        let kind = FileKind::from_mode(st.st_mode);
        if set.uid.is_some() || set.gid.is_some() {
            rfs::chownat(
                &*fd,
                "",
                set.uid.map(rfs::Uid::from_raw),
                set.gid.map(rfs::Gid::from_raw),
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )?;
        }
        if let Some(mode) = set.mode {
            if kind != FileKind::Symlink {
                rfs::chmodat(
                    rfs::CWD,
                    proc_path(&*fd),
                    Mode::from_raw_mode(mode & 0o7777),
                    AtFlags::empty(),
                )?;
            }
        }
        if let Some(size) = set.size.filter(|_| !self.arbiter) {
            if kind != FileKind::File {
                return Err(FsError::errno(if kind == FileKind::Dir {
                    libc::EISDIR
                } else {
                    libc::EINVAL
                }));
            }
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(proc_path(&*fd))?;
            f.set_len(size)?;
        }
        if set.atime.is_some() || set.mtime.is_some() {
            let ts = |t: Option<TimeSet>| match t {
                None => rfs::Timespec {
                    tv_sec: 0,
                    tv_nsec: rfs::UTIME_OMIT,
                },
                Some(TimeSet::Now) => rfs::Timespec {
                    tv_sec: 0,
                    tv_nsec: rfs::UTIME_NOW,
                },
                Some(TimeSet::At(s, n)) => rfs::Timespec {
                    tv_sec: s,
                    tv_nsec: n as _,
                },
            };
            let times = rfs::Timestamps {
                last_access: ts(set.atime),
                last_modification: ts(set.mtime),
            };
            rfs::utimensat(&*fd, "", &times, AtFlags::EMPTY_PATH)?;
        }
        Ok(Reply::Attr(self.stat_gfid(gfid)?))
    }

    fn open_file(&self, fds: &FdTable, gfid: Gfid, flags: i32) -> FsResult<Reply> {
        let f = self.open_gfid(gfid, flags)?;
        Ok(Reply::Opened {
            fh: fds.insert(Handle::File(f, gfid)),
        })
    }

    /// The open file behind `fh`, or for `ANON_FH` the file `gfid` opened
    /// read-only on the connection's behalf.
    fn file_for(&self, fds: &FdTable, gfid: Gfid, fh: u64) -> FsResult<Arc<Handle>> {
        if fh != ANON_FH {
            return fds.file(fh);
        }
        if let Some(h) = fds.anon.lock().unwrap().get(&gfid) {
            return Ok(h.clone());
        }
        let f = match self.open_gfid(gfid, libc::O_RDONLY) {
            Ok(f) => f,
            // No name left, but open on this connection: read through that.
            Err(e) if e.is(libc::ESTALE) => {
                return match fds.open_by_gfid(gfid) {
                    Some(h) if matches!(&*h, Handle::File(..)) => Ok(h),
                    _ => Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let h = Arc::new(Handle::File(f, gfid));
        let mut anon = fds.anon.lock().unwrap();
        if anon.len() >= ANON_MAX {
            anon.clear();
        }
        anon.insert(gfid, h.clone());
        Ok(h)
    }

    pub(super) fn open_gfid(&self, gfid: Gfid, flags: i32) -> FsResult<File> {
        let rel = format!("{INDEX_REL}/{}", gfid.handle_rel());
        // O_DIRECT is not passed on: the brick writes through its page cache
        // (see docs/semantics.md); O_TRUNC arrives as a setattr. Reads never
        // touch atime (O_NOATIME): copies would differ, depending on which
        // one served the read (docs/semantics.md).
        let keep = libc::O_ACCMODE | libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC | libc::O_TRUNC;
        let oflags = OFlags::from_bits_retain((flags & keep) as u32);
        let f = rfs::openat2(
            &self.root,
            rel.as_str(),
            oflags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOATIME,
            Mode::empty(),
            beneath() | ResolveFlags::NO_SYMLINKS,
        )
        .map_err(|e| match e {
            rustix::io::Errno::NOENT => FsError::errno(libc::ESTALE),
            // A directory's handle is a symlink: opening it as a file is EISDIR.
            rustix::io::Errno::LOOP => FsError::errno(libc::EISDIR),
            e => e.into(),
        })?;
        if FileKind::from_mode(rfs::fstat(&f)?.st_mode) != FileKind::File {
            return Err(FsError::errno(libc::EINVAL));
        }
        Ok(File::from(f))
    }

    fn read(&self, fds: &FdTable, gfid: Gfid, fh: u64, offset: u64, size: u32) -> FsResult<Reply> {
        if self.arbiter {
            return Err(FsError::new(
                libc::EIO,
                "an arbiter brick holds no file data",
            ));
        }
        let h = self.file_for(fds, gfid, fh)?;
        let f = as_file(&h);
        let mut buf = vec![0u8; size as usize];
        let mut got = 0;
        while got < buf.len() {
            match f.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(got);
        Ok(Reply::Data(bytes::Bytes::from(buf)))
    }

    fn write(
        &self,
        fds: &FdTable,
        gfid: Gfid,
        fh: u64,
        offset: u64,
        data: &[u8],
    ) -> FsResult<Reply> {
        let h = self.file_for(fds, gfid, fh)?;
        if self.arbiter {
            return Ok(Reply::Written(data.len() as u32));
        }
        let f = as_file(&h);
        // Written in pieces: measured on this project's machines, extending a
        // file by one 1 MiB pwrite costs several times more than by eight of
        // 128 KiB (docs/benchmarks.md).
        for (i, piece) in data.chunks(WRITE_PIECE).enumerate() {
            f.write_all_at(piece, offset + (i * WRITE_PIECE) as u64)?;
        }
        Ok(Reply::Written(data.len() as u32))
    }

    fn opendir(&self, fds: &FdTable, gfid: Gfid) -> FsResult<Reply> {
        let dir = self.resolve_dir(gfid)?;
        let names = Arc::new(Self::list_dir(&dir, gfid)?);
        let listing = Mutex::new(Listing { names, fresh: true });
        Ok(Reply::Opened {
            fh: fds.insert(Handle::Dir(listing, dir, gfid)),
        })
    }

    /// The names in a directory, with their types (the brick's own
    /// directory left out of the root).
    fn list_dir(dir: &OwnedFd, gfid: Gfid) -> FsResult<Vec<(Vec<u8>, FileKind)>> {
        let fd = rfs::openat(
            dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOATIME,
            Mode::empty(),
        )?;
        let mut d = rfs::Dir::new(fd)?;
        let mut names = Vec::new();
        while let Some(ent) = d.read() {
            let ent = ent?;
            let n = ent.file_name().to_bytes();
            if n == b"." || n == b".." || (gfid == Gfid::ROOT && n == META_DIR.as_bytes()) {
                continue;
            }
            let kind = match ent.file_type() {
                rfs::FileType::Directory => FileKind::Dir,
                rfs::FileType::Symlink => FileKind::Symlink,
                rfs::FileType::Fifo => FileKind::Fifo,
                rfs::FileType::Socket => FileKind::Socket,
                rfs::FileType::CharacterDevice => FileKind::CharDev,
                rfs::FileType::BlockDevice => FileKind::BlockDev,
                _ => FileKind::File,
            };
            names.push((n.to_vec(), kind));
        }
        Ok(names)
    }

    fn readdir(
        &self,
        fds: &FdTable,
        gfid: Gfid,
        fh: u64,
        offset: u64,
        plus: bool,
    ) -> FsResult<Reply> {
        let h = fds.get(fh)?;
        let Handle::Dir(listing, dir, _) = &*h else {
            return Err(FsError::errno(libc::ENOTDIR));
        };
        let rewound = offset == 0 && !std::mem::replace(&mut listing.lock().unwrap().fresh, false);
        if rewound {
            let names = Arc::new(Self::list_dir(dir, gfid)?);
            listing.lock().unwrap().names = names;
        }
        let names = listing.lock().unwrap().names.clone();
        let dir = if plus {
            Some(self.resolve_dir(gfid)?)
        } else {
            None
        };
        let start = (offset as usize).min(names.len());
        let mut out = Vec::new();
        for (i, (n, kind)) in names.iter().enumerate().skip(start).take(READDIR_BATCH) {
            let attr = match (&dir, Name::new(n.clone())) {
                (Some(d), Ok(name)) => match self.lookup_at(d, gfid, &name) {
                    Ok((_, a)) => Some(a),
                    // Removed since the listing was taken.
                    Err(e) if e.is(libc::ENOENT) => continue,
                    Err(_) => None,
                },
                _ => None,
            };
            out.push(DirEntry {
                name: serde_bytes::ByteBuf::from(n.clone()),
                kind: attr.as_ref().map(|a| a.kind).unwrap_or(*kind),
                next: i as u64 + 1,
                attr,
                cacheable: true,
            });
        }
        Ok(Reply::Entries(out))
    }

    fn check_xattr_name(cx: &Ctx, name: &str) -> FsResult<()> {
        if name.starts_with(INTERNAL_XATTR_PREFIX) {
            return Err(FsError::new(libc::EPERM, "reserved xattr name"));
        }
        if name.starts_with("trusted.") && cx.uid != 0 {
            return Err(FsError::errno(libc::EPERM));
        }
        Ok(())
    }

    fn statfs(&self) -> FsResult<Reply> {
        let s = rfs::fstatvfs(&self.root)?;
        Ok(Reply::StatFs(StatFs {
            bsize: s.f_bsize as u32,
            frsize: s.f_frsize as u32,
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            namelen: s.f_namemax as u32,
        }))
    }

    /// Serves one operation. Blocking: the protocol server runs it on a
    /// blocking-pool thread.
    pub fn call(&self, cx: &Ctx, fds: &FdTable, fop: &Fop) -> FsResult<Reply> {
        match fop {
            Fop::Lookup { parent, name } => {
                let dir = self.resolve_dir(*parent)?;
                let (_, attr) = self.lookup_at(&dir, *parent, name)?;
                Ok(Reply::Entry(Entry { attr }))
            }
            Fop::Getattr { gfid } => match self.stat_gfid(*gfid) {
                // Unlinked but still open here: POSIX keeps it alive.
                Err(e) if e.is(libc::ESTALE) => match fds.open_by_gfid(*gfid) {
                    Some(h) => Ok(Reply::Attr(attr_of(&h.fstat()?, *gfid))),
                    None => Err(e),
                },
                r => r.map(Reply::Attr),
            },
            Fop::Setattr { gfid, set } => self.setattr(*gfid, set),
            Fop::Mknod {
                parent,
                name,
                gfid,
                mode,
                umask,
                rdev,
            } => self.mknod(cx, *parent, name, *gfid, *mode, *umask, *rdev),
            Fop::Create {
                parent,
                name,
                gfid,
                mode,
                umask,
                flags,
            } => self.create(cx, fds, *parent, name, *gfid, *mode, *umask, *flags),
            Fop::Mkdir {
                parent,
                name,
                gfid,
                mode,
                umask,
            } => self.mkdir(cx, *parent, name, *gfid, *mode, *umask),
            Fop::Unlink { parent, name } => self.unlink(*parent, name),
            Fop::Rmdir { parent, name } => self.rmdir(*parent, name),
            Fop::Rename {
                parent,
                name,
                newparent,
                newname,
                flags,
            } => self.rename(*parent, name, *newparent, newname, *flags),
            Fop::Link {
                gfid,
                newparent,
                newname,
            } => self.link(*gfid, *newparent, newname),
            Fop::Symlink {
                parent,
                name,
                gfid,
                target,
            } => self.symlink(cx, *parent, name, *gfid, target),
            Fop::Readlink { gfid } => {
                let fd = self.resolve(*gfid)?;
                let t = rfs::readlinkat(&*fd, "", Vec::new())?;
                Ok(Reply::Data(bytes::Bytes::from(t.into_bytes())))
            }
            Fop::Open { gfid, flags } => self.open_file(fds, *gfid, *flags),
            Fop::Read {
                gfid,
                fh,
                offset,
                size,
            } => self.read(fds, *gfid, *fh, *offset, *size),
            Fop::Write {
                gfid,
                fh,
                offset,
                data,
            } => self.write(fds, *gfid, *fh, *offset, data),
            Fop::Flush { gfid, fh } => self.file_for(fds, *gfid, *fh).map(|_| Reply::Ok),
            Fop::Fsync { gfid, fh, datasync } => {
                let h = self.file_for(fds, *gfid, *fh)?;
                if *datasync {
                    rfs::fdatasync(as_file(&h))?;
                } else {
                    rfs::fsync(as_file(&h))?;
                }
                Ok(Reply::Ok)
            }
            Fop::Release { fh, .. } | Fop::Releasedir { fh, .. } => {
                fds.remove(*fh);
                Ok(Reply::Ok)
            }
            Fop::Fallocate {
                gfid,
                fh,
                mode,
                offset,
                len,
            } => {
                let h = self.file_for(fds, *gfid, *fh)?;
                if self.arbiter {
                    return Ok(Reply::Ok);
                }
                rfs::fallocate(
                    as_file(&h),
                    rfs::FallocateFlags::from_bits_retain(*mode as u32),
                    *offset,
                    *len,
                )?;
                Ok(Reply::Ok)
            }
            Fop::Lseek {
                gfid,
                fh,
                offset,
                whence,
            } => {
                let h = self.file_for(fds, *gfid, *fh)?;
                let pos = match *whence {
                    libc::SEEK_DATA => rfs::SeekFrom::Data(*offset),
                    libc::SEEK_HOLE => rfs::SeekFrom::Hole(*offset),
                    _ => return Err(FsError::errno(libc::EINVAL)),
                };
                Ok(Reply::Offset(rfs::seek(as_file(&h), pos)?))
            }
            Fop::Opendir { gfid } => self.opendir(fds, *gfid),
            Fop::Readdir {
                gfid,
                fh,
                offset,
                plus,
            } => self.readdir(fds, *gfid, *fh, *offset, *plus),
            Fop::Statfs { .. } => self.statfs(),
            Fop::Setxattr {
                gfid,
                name,
                value,
                flags,
            } => {
                Self::check_xattr_name(cx, name)?;
                let fd = self.resolve(*gfid)?;
                set_xattr(
                    &*fd,
                    name,
                    value,
                    rfs::XattrFlags::from_bits_retain(*flags as u32),
                )?;
                Ok(Reply::Ok)
            }
            Fop::Getxattr { gfid, name } => {
                Self::check_xattr_name(cx, name)?;
                let fd = self.resolve(*gfid)?;
                Ok(Reply::Xattr(serde_bytes::ByteBuf::from(get_xattr(
                    &*fd, name,
                )?)))
            }
            Fop::Listxattr { gfid } => {
                let fd = self.resolve(*gfid)?;
                let p = proc_path(&*fd);
                let n = rfs::listxattr_query(&p)?;
                let mut buf = vec![0u8; n + 256];
                let m = rfs::listxattr(&p, &mut buf[..])?;
                buf.truncate(m);
                let mut out = Vec::new();
                for name in buf.split(|&c| c == 0).filter(|n| !n.is_empty()) {
                    if !name.starts_with(INTERNAL_XATTR_PREFIX.as_bytes()) {
                        out.extend_from_slice(name);
                        out.push(0);
                    }
                }
                Ok(Reply::Xattr(serde_bytes::ByteBuf::from(out)))
            }
            Fop::Removexattr { gfid, name } => {
                Self::check_xattr_name(cx, name)?;
                let fd = self.resolve(*gfid)?;
                rfs::removexattr(proc_path(&*fd), name.as_str())?;
                Ok(Reply::Ok)
            }
            Fop::Lock { gfid, mark, .. } => {
                // The lock itself is the server's (it may wait); here only
                // the change session it opens.
                if let Some(blame) = mark {
                    self.mark(fds, *gfid, *blame)?;
                }
                Ok(Reply::Ok)
            }
            Fop::Unlock { gfids } => {
                self.settle(fds, gfids);
                Ok(Reply::Ok)
            }
            Fop::Clear { gfid, unblame } => self.clear(*gfid, *unblame).map(Reply::Blame),
            Fop::Pending { max } => self.pending(*max as usize).map(Reply::Gfids),
            Fop::Blamed { max } => Ok(Reply::Blames(self.blamed(*max as usize))),
            Fop::Resolve { ino } => self.resolve_ino(*ino),
            Fop::Parent { gfid } => self.parent_of(*gfid),
            Fop::Checksum {
                gfid,
                offset,
                block,
                count,
            } => self
                .checksum(*gfid, *offset, *block, *count)
                .map(Reply::Sums),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fop::{TimeSet, ANON_FH};

    fn n(s: &str) -> Name {
        Name::new(s.as_bytes().to_vec()).unwrap()
    }

    struct Brick {
        _dir: tempfile::TempDir,
        outside: PathBuf,
        root: PathBuf,
        p: Posix,
        fds: FdTable,
    }

    fn brick() -> Brick {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("brick");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s3cret").unwrap();
        let p = Posix::open(&root).unwrap();
        Brick {
            _dir: dir,
            outside,
            root,
            p,
            fds: FdTable::default(),
        }
    }

    impl Brick {
        fn call(&self, fop: Fop) -> FsResult<Reply> {
            self.p.call(&Ctx::root(), &self.fds, &fop)
        }
        fn lookup(&self, parent: Gfid, name: &str) -> FsResult<Attr> {
            self.call(Fop::Lookup {
                parent,
                name: n(name),
            })?
            .into_attr()
        }
        fn mkdir(&self, parent: Gfid, name: &str) -> Gfid {
            let gfid = Gfid::random();
            self.call(Fop::Mkdir {
                parent,
                name: n(name),
                gfid,
                mode: 0o755,
                umask: 0,
            })
            .unwrap();
            gfid
        }
        fn outside_untouched(&self) {
            let names: Vec<_> = std::fs::read_dir(&self.outside)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, vec![std::ffi::OsString::from("secret")]);
            assert_eq!(
                std::fs::read_to_string(self.outside.join("secret")).unwrap(),
                "s3cret"
            );
        }
    }

    #[test]
    fn files_round_trip_and_keep_their_gfid_across_renames() {
        let b = brick();
        let d = b.mkdir(Gfid::ROOT, "d");
        let e = b.mkdir(d, "e");
        let gfid = Gfid::random();
        let rep = b
            .call(Fop::Create {
                parent: e,
                name: n("f"),
                gfid,
                mode: 0o644,
                umask: 0o022,
                flags: libc::O_RDWR,
            })
            .unwrap();
        let Reply::Created { fh, .. } = rep else {
            panic!()
        };
        b.call(Fop::Write {
            gfid,
            fh,
            offset: 0,
            data: bytes::Bytes::from_static(b"hello"),
        })
        .unwrap();
        assert_eq!(b.fds.len(), 1);
        b.call(Fop::Release { gfid, fh }).unwrap();
        assert!(b.fds.is_empty(), "release closes the handle");
        assert_eq!(
            std::fs::read_to_string(b.root.join("d/e/f")).unwrap(),
            "hello"
        );
        // Rename the directory above; the file and its directory stay reachable by gfid.
        b.call(Fop::Rename {
            parent: Gfid::ROOT,
            name: n("d"),
            newparent: Gfid::ROOT,
            newname: n("d2"),
            flags: 0,
        })
        .unwrap();
        let fresh = Posix::open(&b.root).unwrap();
        let a = fresh
            .call(&Ctx::root(), &b.fds, &Fop::Getattr { gfid })
            .unwrap()
            .into_attr()
            .unwrap();
        assert_eq!((a.size, a.nlink), (5, 1));
        let x = fresh
            .call(
                &Ctx::root(),
                &b.fds,
                &Fop::Lookup {
                    parent: e,
                    name: n("f"),
                },
            )
            .unwrap();
        assert_eq!(x.into_attr().unwrap().gfid, gfid);
        // Times and modes.
        let set = SetAttr {
            mode: Some(0o600),
            mtime: Some(TimeSet::At(1_000_000_000, 5)),
            ..Default::default()
        };
        let a = b
            .call(Fop::Setattr { gfid, set })
            .unwrap()
            .into_attr()
            .unwrap();
        assert_eq!((a.perm, a.mtime), (0o600, (1_000_000_000, 5)));
        // Unlinking the last name drops the handle.
        b.call(Fop::Unlink {
            parent: e,
            name: n("f"),
        })
        .unwrap();
        assert_eq!(
            b.call(Fop::Getattr { gfid }).unwrap_err().errno,
            libc::ESTALE
        );
    }

    #[test]
    fn anonymous_reads_and_open_files_outlive_their_names() {
        let b = brick();
        let gfid = Gfid::random();
        let c = Fop::Create {
            parent: Gfid::ROOT,
            name: n("f"),
            gfid,
            mode: 0o644,
            umask: 0,
            flags: libc::O_RDWR,
        };
        let Reply::Created { fh, .. } = b.call(c).unwrap() else {
            panic!()
        };
        b.call(Fop::Write {
            gfid,
            fh,
            offset: 0,
            data: bytes::Bytes::from_static(b"data"),
        })
        .unwrap();
        // Read without ever opening: the brick opens it by gfid.
        let read = |b: &Brick| {
            b.call(Fop::Read {
                gfid,
                fh: ANON_FH,
                offset: 0,
                size: 10,
            })
        };
        let Reply::Data(d) = read(&b).unwrap() else {
            panic!()
        };
        assert_eq!(&d[..], b"data");
        // Anonymous handles are read-only.
        let w = Fop::Write {
            gfid,
            fh: ANON_FH,
            offset: 0,
            data: bytes::Bytes::from_static(b"x"),
        };
        assert_eq!(b.call(w).unwrap_err().errno, libc::EBADF);
        // A connection that holds it open for real, not anonymously.
        let held = FdTable::default();
        b.p.call(
            &Ctx::root(),
            &held,
            &Fop::Open {
                gfid,
                flags: libc::O_RDONLY,
            },
        )
        .unwrap();
        // Unlinked while open here: still readable and stat-able, as POSIX wants.
        b.call(Fop::Unlink {
            parent: Gfid::ROOT,
            name: n("f"),
        })
        .unwrap();
        assert!(matches!(read(&b).unwrap(), Reply::Data(d) if &d[..] == b"data"));
        // Read anonymously there (a second open of it, by file handle or
        // /proc/PID/fd), it is read through the open one.
        let anon = Fop::Read {
            gfid,
            fh: ANON_FH,
            offset: 0,
            size: 10,
        };
        let r = b.p.call(&Ctx::root(), &held, &anon).unwrap();
        assert!(matches!(r, Reply::Data(d) if &d[..] == b"data"));
        assert_eq!(
            b.call(Fop::Getattr { gfid })
                .unwrap()
                .into_attr()
                .unwrap()
                .nlink,
            0
        );
        // Another connection, which never had it open, sees it gone.
        let other = FdTable::default();
        assert_eq!(
            b.p.call(&Ctx::root(), &other, &Fop::Getattr { gfid })
                .unwrap_err()
                .errno,
            libc::ESTALE
        );
    }

    #[test]
    fn a_planted_symlink_never_leads_outside_the_brick() {
        let b = brick();
        std::os::unix::fs::symlink(&b.outside, b.root.join("evil")).unwrap();
        let evil = b.lookup(Gfid::ROOT, "evil").unwrap();
        assert_eq!(evil.kind, FileKind::Symlink);
        // Using it as a directory or opening it as a file is refused.
        assert!(b.lookup(evil.gfid, "secret").is_err());
        let c = Fop::Create {
            parent: evil.gfid,
            name: n("x"),
            gfid: Gfid::random(),
            mode: 0o644,
            umask: 0,
            flags: 2,
        };
        assert!(b.call(c).is_err());
        assert!(b
            .call(Fop::Mkdir {
                parent: evil.gfid,
                name: n("x"),
                gfid: Gfid::random(),
                mode: 0o755,
                umask: 0
            })
            .is_err());
        assert!(b
            .call(Fop::Open {
                gfid: evil.gfid,
                flags: libc::O_RDWR
            })
            .is_err());
        assert!(b.call(Fop::Opendir { gfid: evil.gfid }).is_err());
        assert!(b
            .call(Fop::Setattr {
                gfid: evil.gfid,
                set: SetAttr {
                    size: Some(0),
                    ..Default::default()
                }
            })
            .is_err());
        // Its target is readable as a link, as POSIX wants.
        let Reply::Data(t) = b.call(Fop::Readlink { gfid: evil.gfid }).unwrap() else {
            panic!()
        };
        assert_eq!(&t[..], b.outside.as_os_str().as_encoded_bytes());
        b.outside_untouched();
    }

    #[test]
    fn a_tampered_handle_never_leads_outside_the_brick() {
        let b = brick();
        let d = b.mkdir(Gfid::ROOT, "d");
        let handle = b.root.join(INDEX_REL).join(d.handle_rel());
        for target in [
            b.outside.display().to_string(),
            "../../../../../outside".into(),
            "../../../../..".into(),
        ] {
            std::fs::remove_file(&handle).unwrap();
            std::os::unix::fs::symlink(&target, &handle).unwrap();
            let fresh = Posix::open(&b.root).unwrap();
            let fds = FdTable::default();
            let lk = Fop::Lookup {
                parent: d,
                name: n("secret"),
            };
            assert!(fresh.call(&Ctx::root(), &fds, &lk).is_err(), "{target}");
            let mk = Fop::Mknod {
                parent: d,
                name: n("x"),
                gfid: Gfid::random(),
                mode: libc::S_IFREG | 0o644,
                umask: 0,
                rdev: 0,
            };
            assert!(fresh.call(&Ctx::root(), &fds, &mk).is_err(), "{target}");
        }
        b.outside_untouched();
    }

    #[test]
    fn the_index_is_hidden_and_reserved() {
        let b = brick();
        assert_eq!(
            b.lookup(Gfid::ROOT, META_DIR).unwrap_err().errno,
            libc::ENOENT
        );
        let mk = Fop::Mkdir {
            parent: Gfid::ROOT,
            name: n(META_DIR),
            gfid: Gfid::random(),
            mode: 0o755,
            umask: 0,
        };
        assert_eq!(b.call(mk).unwrap_err().errno, libc::EPERM);
        let Reply::Opened { fh } = b.call(Fop::Opendir { gfid: Gfid::ROOT }).unwrap() else {
            panic!()
        };
        let Reply::Entries(e) = b
            .call(Fop::Readdir {
                gfid: Gfid::ROOT,
                fh,
                offset: 0,
                plus: true,
            })
            .unwrap()
        else {
            panic!()
        };
        assert!(e.is_empty(), "{e:?}");
        let set = Fop::Setxattr {
            gfid: Gfid::ROOT,
            name: GFID_XATTR.into(),
            value: Default::default(),
            flags: 0,
        };
        assert_eq!(b.call(set).unwrap_err().errno, libc::EPERM);
    }

    #[test]
    fn a_rewound_listing_shows_the_directory_as_it_is_now() {
        let b = brick();
        b.mkdir(Gfid::ROOT, "a");
        let Reply::Opened { fh } = b.call(Fop::Opendir { gfid: Gfid::ROOT }).unwrap() else {
            panic!()
        };
        let names = |offset| {
            let Reply::Entries(e) = b
                .call(Fop::Readdir {
                    gfid: Gfid::ROOT,
                    fh,
                    offset,
                    plus: false,
                })
                .unwrap()
            else {
                panic!()
            };
            e.iter()
                .map(|e| String::from_utf8_lossy(&e.name).into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(0), ["a"]);
        b.mkdir(Gfid::ROOT, "b");
        // Offsets into the listing stay as they were...
        assert!(names(1).is_empty());
        // ...until the reader rewinds.
        let mut now = names(0);
        now.sort();
        assert_eq!(now, ["a", "b"]);
    }

    #[test]
    fn directories_with_any_bytes_in_their_names_are_reachable_by_gfid() {
        let b = brick();
        let name = Name::new(vec![0xff, b'd', 0xfe]).unwrap();
        let gfid = Gfid::random();
        b.call(Fop::Mkdir {
            parent: Gfid::ROOT,
            name: name.clone(),
            gfid,
            mode: 0o755,
            umask: 0,
        })
        .unwrap();
        let child = b.mkdir(gfid, "inner");
        let fresh = Posix::open(&b.root).unwrap();
        let a = fresh
            .call(&Ctx::root(), &b.fds, &Fop::Getattr { gfid: child })
            .unwrap()
            .into_attr()
            .unwrap();
        assert_eq!(a.kind, FileKind::Dir);
    }

    #[test]
    fn objects_made_on_the_brick_directly_get_a_gfid() {
        let b = brick();
        std::fs::create_dir(b.root.join("made")).unwrap();
        std::fs::write(b.root.join("made/by-hand"), "x").unwrap();
        let d = b.lookup(Gfid::ROOT, "made").unwrap();
        let f = b.lookup(d.gfid, "by-hand").unwrap();
        assert_eq!(b.lookup(d.gfid, "by-hand").unwrap().gfid, f.gfid, "stable");
        assert_eq!(
            b.call(Fop::Getattr { gfid: f.gfid })
                .unwrap()
                .into_attr()
                .unwrap()
                .size,
            1
        );
    }
}
