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
//! `/proc/self/fd/N`, which names exactly the object the descriptor holds,
//! or, for xattrs read where the name cannot change meanwhile, by the name
//! in its directory (`xattr_at`).

use mortar_core::fop::{TimeSet, ANON_FH};
use mortar_core::{
    Attr, Ctx, DirEntry, Entry, FileKind, Fop, FsError, FsResult, Gfid, Name, Reply, SetAttr,
    StatFs,
};
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, ResolveFlags};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use xattr_at::Via;

pub const GFID_XATTR: &str = "trusted.mortar.gfid";
pub const VOLUME_ID_XATTR: &str = "trusted.mortar.volume-id";
/// Internal xattrs live under this prefix; clients can neither see nor set them.
pub const INTERNAL_XATTR_PREFIX: &str = "trusted.mortar.";
pub const META_DIR: &str = ".mortar";
/// The heal index: a hard link per object with unsettled changes (`brick::index`).
pub const PENDING_REL: &str = ".mortar/pending";
/// The file the health check writes and reads back, in `META_DIR` (`health`).
pub const HEALTH_PROBE: &str = "health_check";
const INDEX_REL: &str = ".mortar/gfid";
/// Which layout the gfid index has (see `handles::migrate`).
const LAYOUT_REL: &str = ".mortar/layout";
/// Entries returned by one readdir call.
const READDIR_BATCH: usize = 512;
/// Largest single pwrite a brick issues.
const WRITE_PIECE: usize = 128 << 10;
/// Directory descriptors kept open for fast resolution.
const DIR_CACHE_MAX: usize = 8192;

mod attrs;
mod data;
mod fds;
mod handles;
pub mod health;
mod identity;
mod namespace;
pub mod reaper;
pub mod room;
pub mod sums;
#[cfg(test)]
mod tests;
mod xattr_at;

pub use attrs::{
    read_blame, read_changed, read_retention, write_changed, write_retention, BLAME_XATTR,
    RETENTION_XATTR,
};
use fds::{as_file, ANON_MAX};
pub use fds::{FdTable, Handle, Listing, OpenCounts};
pub use handles::files_of;
use identity::as_caller;

pub struct Posix {
    path: PathBuf,
    pub(super) root: OwnedFd,
    dirs: Mutex<HashMap<Gfid, Arc<OwnedFd>>>,
    /// The gfid index's 256 directories, each opened once (`handles.rs`).
    index_dirs: Vec<std::sync::OnceLock<OwnedFd>>,
    /// Told of every object whose last name went (the index forgets its
    /// blame).
    forget: std::sync::OnceLock<Box<dyn Fn(Gfid) + Send + Sync>>,
    /// Files clients hold open here.
    open: OpenCounts,
    /// `performance.strict-o-direct`: files opened with O_DIRECT are
    /// opened so here too.
    direct: std::sync::atomic::AtomicBool,
    /// `storage.reserve`.
    room: room::Room,
    /// Every connection's files read through the anonymous handle.
    anon_tables: Mutex<Vec<std::sync::Weak<fds::AnonFiles>>>,
    /// `storage.checksums`: the sums of files' blocks.
    sums: sums::Sums,
    /// Which unlinked files the reaper closes.
    free_behind: reaper::FreeBehind,
}

pub static STRICT_O_DIRECT: mortar_core::options::Spec = mortar_core::options::Spec {
    key: "performance.strict-o-direct",
    kind: mortar_core::options::Kind::Bool,
    default: "off",
    help: "Honours O_DIRECT end to end: a brick opens a file opened with O_DIRECT with O_DIRECT too, so that its reads and writes bypass the brick's page cache. Off: the client's page cache is bypassed, the bricks' is not.",
};

pub fn proc_path(fd: impl AsFd) -> String {
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

/// An xattr of an object, through its descriptor, or for an `O_PATH`
/// descriptor (the `f…xattr` calls refuse those with EBADF) through its
/// `/proc/self/fd` path, whose walk costs three times the call itself:
/// directories are held open for reading, so only files pay it.
pub(crate) fn get_xattr(fd: impl AsFd, name: &str) -> FsResult<Vec<u8>> {
    let fd = fd.as_fd();
    match get_open_xattr(fd, name) {
        Err(e) if e.is(libc::EBADF) => {
            let p = proc_path(fd);
            read_xattr(
                |buf| rfs::getxattr(&p, name, buf),
                || rfs::getxattr_query(&p, name),
            )
        }
        r => r,
    }
}

/// An xattr of a file open for reading or writing, through its descriptor:
/// the walk of a `/proc` path costs three times the call itself.
pub(crate) fn get_open_xattr(f: impl AsFd, name: &str) -> FsResult<Vec<u8>> {
    let f = f.as_fd();
    read_xattr(
        |buf| rfs::fgetxattr(f, name, buf),
        || rfs::fgetxattr_query(f, name),
    )
}

pub(crate) fn read_xattr(
    mut get: impl FnMut(&mut [u8]) -> rustix::io::Result<usize>,
    query: impl Fn() -> rustix::io::Result<usize>,
) -> FsResult<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    loop {
        match get(&mut buf[..]) {
            Ok(m) => {
                buf.truncate(m);
                return Ok(buf);
            }
            Err(rustix::io::Errno::RANGE) => {
                let n = query()?;
                buf.resize(n.max(buf.len() * 2), 0);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Sets an xattr of an object reached by an `O_PATH` descriptor, or of an
/// open file (tried first through its descriptor).
pub fn set_xattr(fd: impl AsFd, name: &str, value: &[u8], flags: rfs::XattrFlags) -> FsResult<()> {
    let fd = fd.as_fd();
    match rfs::fsetxattr(fd, name, value, flags) {
        Err(rustix::io::Errno::BADF) => Ok(rfs::setxattr(proc_path(fd), name, value, flags)?),
        r => Ok(r?),
    }
}

/// Removes an xattr of an object (as `set_xattr` reaches it); one that is
/// not there is no error.
pub fn remove_xattr(fd: impl AsFd, name: &str) -> FsResult<()> {
    let fd = fd.as_fd();
    let r = match rfs::fremovexattr(fd, name) {
        Err(rustix::io::Errno::BADF) => rfs::removexattr(proc_path(fd), name),
        r => r,
    };
    match r {
        Ok(()) | Err(rustix::io::Errno::NODATA) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn read_gfid(fd: impl AsFd) -> FsResult<Option<Gfid>> {
    read_gfid_via(fd.as_fd(), Via::Proc)
}

/// `read_gfid` of an object opened `O_PATH`, read `via`.
fn read_gfid_via(fd: BorrowedFd<'_>, via: Via<'_>) -> FsResult<Option<Gfid>> {
    match xattr_at::get_xattr_via(fd, via, GFID_XATTR) {
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
        linkto: None,
        watched: None,
    }
}

/// What a stat of the object open at `fd` answers: its attributes with
/// what its xattrs add, the blame its copy records, the set a pointer
/// names and which of the watched xattrs it has. One listing of its
/// xattr names tells all three; a value is read only where its name is
/// listed (a healthy file has no blame), so an object costs as many calls
/// as reading the blame alone did.
fn full_attr(fd: BorrowedFd<'_>, gfid: Gfid) -> FsResult<Attr> {
    full_attr_of(fd, gfid, &rfs::fstat(fd)?, Via::Proc)
}

/// `full_attr` of the object at `fd` as `st` shows it, its xattrs listed
/// `via`.
fn full_attr_of(fd: BorrowedFd<'_>, gfid: Gfid, st: &rfs::Stat, via: Via<'_>) -> FsResult<Attr> {
    let mut attr = attr_of(st, gfid);
    let names = xattr_at::list_xattrs_via(fd, via)?;
    let has = |n: &str| names.split(|&c| c == 0).any(|x| x == n.as_bytes());
    if has(BLAME_XATTR) {
        attr.blame = attrs::read_blame(fd)?;
    }
    if has(mortar_core::fop::LINKTO_XATTR) {
        attr.linkto = attrs::read_linkto(fd, &attr)?;
    }
    let watched = mortar_core::fop::WATCHED_XATTRS.iter().enumerate();
    attr.watched = Some(watched.fold(0, |bits, (i, n)| bits | (u8::from(has(n)) << i)));
    Ok(attr)
}

/// The names of an object's xattrs, each ended by a zero byte, through its
/// descriptor or (`O_PATH`) its `/proc/self/fd` path, as `get_xattr`.
pub(crate) fn list_xattrs(fd: BorrowedFd<'_>) -> FsResult<Vec<u8>> {
    let listed = read_xattr(|buf| rfs::flistxattr(fd, buf), || rfs::flistxattr_query(fd));
    match listed {
        Err(e) if e.is(libc::EBADF) => {
            let p = proc_path(fd);
            read_xattr(|buf| rfs::listxattr(&p, buf), || rfs::listxattr_query(&p))
        }
        r => r,
    }
}

/// An object's attributes as `st` shows it after a change of names, with
/// the xattrs its lookup read (`was`): a change of names changes none.
fn left(st: &rfs::Stat, was: &Attr) -> Attr {
    Attr {
        blame: was.blame,
        linkto: was.linkto,
        watched: was.watched,
        ..attr_of(st, was.gfid)
    }
}

/// The answer to a change of names: what the directories open at `dirs`
/// and the objects it removed or moved (open at each fd, as their lookup
/// found them) are left as, all of them, or nothing (the client then
/// asks).
fn unnamed(dirs: &[(BorrowedFd<'_>, Gfid)], objects: &[(BorrowedFd<'_>, &Attr)]) -> Reply {
    let dirs = dirs.iter().map(|&(fd, gfid)| full_attr(fd, gfid));
    let objects = objects
        .iter()
        .map(|&(fd, was)| Ok(left(&rfs::fstat(fd)?, was)));
    dirs.chain(objects)
        .collect::<FsResult<Vec<Attr>>>()
        .map_or(Reply::Ok, Reply::Unnamed)
}

/// EISDIR for a directory, EINVAL for anything else not a file: what
/// opening or truncating it as a file answers.
fn must_be_file(kind: FileKind) -> FsResult<()> {
    match kind {
        FileKind::File => Ok(()),
        FileKind::Dir => Err(FsError::errno(libc::EISDIR)),
        _ => Err(FsError::errno(libc::EINVAL)),
    }
}

/// Whether the thread's identity may write the object open at `fd` (its
/// mode and ACLs, as the kernel checks them).
fn may_write(fd: BorrowedFd<'_>) -> FsResult<()> {
    Ok(rfs::accessat(
        rfs::CWD,
        proc_path(fd),
        rfs::Access::WRITE_OK,
        AtFlags::EACCESS,
    )?)
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
    /// Follows `performance.strict-o-direct` (for files opened from now).
    pub fn set_strict_o_direct(&self, on: bool) {
        self.direct.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Follows `storage.reserve`.
    pub fn set_reserve(&self, r: mortar_core::options::ShareOrSize) {
        self.room.set_reserve(r);
    }

    /// The open flags a client's flags become here.
    fn brick_flags(&self, flags: i32, keep: i32) -> OFlags {
        let mut keep = keep;
        if self.direct.load(std::sync::atomic::Ordering::Relaxed) {
            keep |= libc::O_DIRECT;
        }
        OFlags::from_bits_retain((flags & keep) as u32)
    }

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
        for d in [META_DIR, INDEX_REL] {
            match rfs::mkdirat(&root, d, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let free_behind = reaper::FreeBehind::of(&root);
        let p = Posix {
            path: path.to_path_buf(),
            root,
            dirs: Mutex::new(HashMap::new()),
            index_dirs: (0..256).map(|_| std::sync::OnceLock::new()).collect(),
            forget: std::sync::OnceLock::new(),
            open: OpenCounts::default(),
            direct: Default::default(),
            room: Default::default(),
            anon_tables: Mutex::default(),
            sums: Default::default(),
            free_behind,
        };
        if p.free_behind.discards {
            tracing::info!(brick = %path.display(), "mounted with discard: unlinked files are freed off the brick's thread");
        }
        p.look_for_sums();
        let moved = p.migrate()?;
        if moved > 0 {
            tracing::info!(brick = %path.display(), moved, "gfid index moved to one level");
        }
        // The root's handle points back to the brick root.
        p.make_dir_handle_target(Gfid::ROOT, handles::ROOT_TARGET)?;
        Ok(p)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of directory `gfid` relative to the brick, from its
    /// handle's chain (an error for an object that is not a directory).
    pub fn dir_path(&self, gfid: Gfid) -> FsResult<PathBuf> {
        let mut names = Vec::new();
        let mut cur = gfid;
        while cur != Gfid::ROOT {
            if names.len() > 4096 {
                return Err(FsError::new(
                    libc::ELOOP,
                    format!("{gfid}: its handles loop"),
                ));
            }
            let (parent, name) = self.read_dir_handle(cur)?;
            names.push(name);
            cur = parent;
        }
        Ok(names
            .iter()
            .rev()
            .map(|n| std::ffi::OsStr::from_bytes(n.as_bytes()))
            .collect())
    }

    /// What the brick keeps of object `gfid` beside its names, relative
    /// to the brick: its handle, and its sums file (either may not exist).
    pub fn side_paths(gfid: Gfid) -> [PathBuf; 2] {
        let rel = gfid.handle_rel();
        [
            Path::new(INDEX_REL).join(&rel),
            Path::new(sums::SUMS_REL).join(&rel),
        ]
    }

    /// Makes what a brick keeps of its own (the root's gfid, `.mortar/`
    /// with the root's handle, the heal index and the health check's file)
    /// when its volume is created, so that the brick's first start finds
    /// it made, as every later start does: at 300 bricks on one file
    /// system, allocating inodes was a tenth of a brick's start.
    pub fn prepare(path: &Path) -> Result<(), health::Unfit> {
        let p = Posix::open(path).map_err(|e| format!("cannot prepare {}: {e}", path.display()))?;
        p.meta_dir(PENDING_REL)
            .map_err(|e| format!("cannot prepare {}: {e}", path.display()))?;
        p.health_check()
    }

    /// Takes back what `prepare` made, on a brick whose volume was not
    /// created after all or is deleted: its files, and its directories
    /// when empty (anything else in them stays).
    pub fn unprepare(path: &Path) {
        let Ok(root) = rfs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        ) else {
            return;
        };
        let (dir, file) = split_handle(Gfid::ROOT);
        let handle = format!("{INDEX_REL}/{dir}/{file}");
        let probe = format!("{META_DIR}/{}", HEALTH_PROBE);
        for f in [handle.as_str(), probe.as_str(), LAYOUT_REL] {
            let _ = rfs::unlinkat(&root, f, AtFlags::empty());
        }
        let index_dir = format!("{INDEX_REL}/{dir}");
        for d in [
            index_dir.as_str(),
            INDEX_REL,
            PENDING_REL,
            sums::SUMS_REL,
            META_DIR,
        ] {
            let _ = rfs::unlinkat(&root, d, AtFlags::REMOVEDIR);
        }
        if rfs::statat(&root, META_DIR, AtFlags::SYMLINK_NOFOLLOW).is_err() {
            let _ = rfs::lremovexattr(path, GFID_XATTR);
        }
    }

    /// Makes (once) and opens a directory of the brick's own under
    /// `.mortar/` (`rel` is brick-relative, such as `.mortar/pending`).
    pub fn meta_dir(&self, rel: &str) -> FsResult<OwnedFd> {
        match rfs::mkdirat(&self.root, rel, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(rfs::openat2(
            &self.root,
            rel,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            beneath() | ResolveFlags::NO_SYMLINKS,
        )?)
    }

    /// A fail point of this brick's: `posix-<what>:<brick directory name>`,
    /// so that a test can crash one brick of several that share the
    /// daemon's environment.
    #[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
    pub fn fail_point_name(&self, what: &str) -> String {
        let base = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        format!("posix-{what}:{base}")
    }

    /// How many handles clients hold open on `gfid` here.
    pub fn open_count(&self, gfid: Gfid) -> u32 {
        self.open.of(gfid)
    }

    /// How many files clients hold open here, and the handles on them.
    pub fn open_objects(&self) -> (u64, u64) {
        self.open.totals()
    }

    /// Who to tell when an object's last name goes (one listener).
    pub fn on_forget(&self, f: Box<dyn Fn(Gfid) + Send + Sync>) {
        let _ = self.forget.set(f);
    }

    /// Serves one operation. Blocking: the protocol server runs it on a
    /// blocking-pool thread.
    pub fn call(&self, cx: &Ctx, fds: &FdTable, fop: &Fop) -> FsResult<Reply> {
        match fop {
            Fop::Lookup { parent, name } => {
                let dir = self.resolve_dir(*parent)?;
                let (_, attr) = self.lookup_at(cx, &dir, *parent, name)?;
                Ok(Reply::Entry(Entry::found(attr)))
            }
            Fop::Getattr { gfid } => match self.stat_gfid(*gfid) {
                // Unlinked but still open here: POSIX keeps it alive.
                Err(e) if e.is(libc::ESTALE) => match fds.open_by_gfid(*gfid) {
                    Some(h) => Ok(Reply::Attr(attr_of(&h.fstat()?, *gfid))),
                    None => Err(e),
                },
                r => r.map(Reply::Attr),
            },
            Fop::Setattr { gfid, set } => self.setattr(cx, fds, *gfid, set),
            Fop::Mknod {
                parent,
                name,
                gfid,
                mode,
                umask,
                rdev,
                linkto,
            } => self.mknod(cx, *parent, name, *gfid, (*mode, *umask, *rdev), *linkto),
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
            Fop::Unlink { parent, name } => self.unlink(cx, *parent, name),
            Fop::Rmdir { parent, name } => self.rmdir(cx, *parent, name),
            Fop::Rename {
                parent,
                name,
                newparent,
                newname,
                flags,
            } => self.rename(cx, *parent, name, *newparent, newname, *flags),
            Fop::Link {
                gfid,
                newparent,
                newname,
            } => self.link(cx, *gfid, *newparent, newname),
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
            Fop::Open { gfid, flags } => self.open_file(cx, fds, *gfid, *flags),
            Fop::Read {
                gfid,
                fh,
                offset,
                size,
            } => self.read(cx, fds, *gfid, *fh, *offset, *size),
            Fop::Write {
                gfid,
                fh,
                offset,
                data,
                grow,
                reserve,
            } => self.write(cx, fds, *gfid, *fh, *offset, data, (*grow, *reserve)),
            Fop::Flush { gfid, fh } => self.file_for(cx, fds, *gfid, *fh).map(|_| Reply::Ok),
            Fop::Fsync { gfid, fh, datasync } => self.fsync(cx, fds, *gfid, *fh, *datasync),
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
            } => self.fallocate(cx, fds, *gfid, *fh, *mode, (*offset, *len)),
            Fop::Lseek {
                gfid,
                fh,
                offset,
                whence,
            } => self.lseek(cx, fds, *gfid, *fh, *offset, *whence),
            Fop::Opendir { gfid } => self.opendir(cx, fds, *gfid),
            Fop::Readdir {
                gfid,
                fh,
                offset,
                plus,
            } => self.readdir(cx, fds, *gfid, *fh, *offset, *plus),
            Fop::Statfs { .. } => self.statfs(),
            Fop::Setxattr {
                gfid,
                name,
                value,
                flags,
            } => self.setxattr(cx, *gfid, name, value, *flags),
            Fop::Getxattr { gfid, name } => self.getxattr(cx, *gfid, name),
            Fop::Listxattr { gfid } => self.listxattr(cx, *gfid),
            Fop::Removexattr { gfid, name } => self.removexattr(cx, *gfid, name),
            // Locks and the heal index are translators above (`brick`).
            Fop::Lock { .. }
            | Fop::Unlock { .. }
            | Fop::Clear { .. }
            | Fop::Pending { .. }
            | Fop::Blamed { .. } => Err(FsError::new(
                libc::EOPNOTSUPP,
                format!(
                    "{} is served by the brick's locks and index translators",
                    fop.name()
                ),
            )),
            Fop::Resolve { ino } => self.resolve_ino(*ino),
            Fop::Parent { gfid } => self.parent_of(*gfid),
            Fop::Checksum {
                gfid,
                offset,
                block,
                count,
            } => self
                .checksum(cx, *gfid, *offset, *block, *count)
                .map(Reply::Sums),
        }
    }
}

/// Reads until `buf` is full or the file ends; the bytes read.
pub(crate) fn read_full(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
