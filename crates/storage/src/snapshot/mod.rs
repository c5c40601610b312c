//! Snapshots of a brick directory: a copy of it as it is at one moment,
//! made with the cheapest mechanism its file system has, kept beside it
//! under `.mortar/snaps/NAME` (the same file system, which every
//! mechanism needs; never inside what a snapshot copies).
//!
//! - **btrfs subvolume** (`Mechanism::Subvolume`): a brick that is a btrfs
//!   subvolume (`make_brick_dir` makes it one when its volume is created
//!   on btrfs) is snapshotted read-only in one call, whatever it holds.
//! - **reflink copy** (`Mechanism::Reflink`): on XFS with reflink, or a
//!   btrfs brick that is a plain directory, the tree is copied with every
//!   file's data shared (`FICLONE`, atomic per file), keeping owners,
//!   modes, times, xattrs and hard links (the gfid index). Its cost grows
//!   with the number of objects, not bytes. A copy is made under a
//!   temporary name and renamed when complete: a snapshot that exists is
//!   whole.
//! - Anything else (ext4, a reflink-less XFS) has none: `mechanism` says
//!   why, and no snapshot is taken (never a full copy of the data).
//!
//! Nothing here stops changes while a copy is made: the brick's barrier
//! does (`brick::barrier`).

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, Timespec, Timestamps};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

mod btrfs;
mod precopy;
mod restore;
#[cfg(test)]
mod tests;

pub use precopy::{precopy, Changed, Precopy};
pub use restore::{restore, unfinished};

/// Where a brick's snapshots live, relative to the brick.
pub const SNAPS_REL: &str = ".mortar/snaps";
const BTRFS_MAGIC: i64 = 0x9123_683E;
/// The inode number of every btrfs subvolume's root.
const BTRFS_SUBVOL_INO: u64 = 256;

/// How a brick's snapshots are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    Subvolume,
    Reflink,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Subvolume => "btrfs-subvolume",
            Mechanism::Reflink => "reflink",
        }
    }
}

/// Whether `name` may name a snapshot: letters, digits, `-`, `_`, `.`, not
/// starting with `.` or `-`, 1 to 200 bytes (it becomes a directory's name).
pub fn valid_name(name: &str) -> bool {
    (1..=200).contains(&name.len())
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

fn bad_name(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{name:?} is not a snapshot name (letters, digits, - _ . only)"),
    )
}

fn open_dir(at: impl AsFd, name: impl rustix::path::Arg) -> io::Result<OwnedFd> {
    Ok(rfs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens (making it if needed) the brick's snapshot directory.
fn snaps_dir(root: &OwnedFd) -> io::Result<OwnedFd> {
    let meta = open_dir(root, crate::posix::META_DIR)?;
    match rfs::mkdirat(&meta, "snaps", Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    open_dir(&meta, "snaps")
}

fn is_btrfs(fd: impl AsFd) -> io::Result<bool> {
    Ok(rfs::fstatfs(fd)?.f_type as i64 == BTRFS_MAGIC)
}

fn is_subvolume(fd: impl AsFd) -> io::Result<bool> {
    Ok(is_btrfs(&fd)? && rfs::fstat(&fd)?.st_ino == BTRFS_SUBVOL_INO)
}

/// How snapshots of the brick at `brick` are made, or why they cannot be.
pub fn mechanism(brick: &Path) -> Result<Mechanism, String> {
    let fail = |e: io::Error| format!("{}: {e}", brick.display());
    let root = open_dir(rfs::CWD, brick).map_err(fail)?;
    if is_subvolume(&root).map_err(fail)? {
        return Ok(Mechanism::Subvolume);
    }
    let snaps = snaps_dir(&root).map_err(fail)?;
    match probe_reflink(&snaps) {
        Ok(()) => Ok(Mechanism::Reflink),
        Err(e) => Err(format!(
            "{} has no snapshot mechanism: it is neither a btrfs subvolume nor on a file system that shares file data (reflink: {e}); put it on btrfs, or on XFS made with reflink=1",
            brick.display()
        )),
    }
}

/// Whether files here can share data (`FICLONE`).
fn probe_reflink(snaps: &OwnedFd) -> io::Result<()> {
    let make = |name: &str| {
        rfs::openat(
            snaps,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
    };
    let src = make(".probe-src")?;
    rustix::io::write(&src, b"probe")?;
    let dst = make(".probe-dst")?;
    let r = rfs::ioctl_ficlone(&dst, &src);
    let _ = rfs::unlinkat(snaps, ".probe-src", AtFlags::empty());
    let _ = rfs::unlinkat(snaps, ".probe-dst", AtFlags::empty());
    Ok(r?)
}

/// Opens the brick at `brick` and its snapshot directory for a new
/// snapshot `name`: refused if the name is not one, or is taken.
fn open_for_new(brick: &Path, name: &str) -> io::Result<(OwnedFd, OwnedFd)> {
    if !valid_name(name) {
        return Err(bad_name(name));
    }
    let root = open_dir(rfs::CWD, brick)?;
    let snaps = snaps_dir(&root)?;
    if rfs::statat(&snaps, name, AtFlags::SYMLINK_NOFOLLOW).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("snapshot {name} exists on {}", brick.display()),
        ));
    }
    Ok((root, snaps))
}

/// Takes snapshot `name` of the brick at `brick`, with its mechanism:
/// answers which, and where the snapshot is. Nothing is left behind
/// when it fails.
pub fn take(brick: &Path, name: &str) -> io::Result<(Mechanism, PathBuf)> {
    let (root, snaps) = open_for_new(brick, name)?;
    let at = brick.join(SNAPS_REL).join(name);
    let mechanism = mechanism(brick).map_err(io::Error::other)?;
    match mechanism {
        Mechanism::Subvolume => btrfs::snapshot(&root, &snaps, name, true)?,
        Mechanism::Reflink => {
            let partial = format!(".{name}.partial");
            let _ = remove_tree(&snaps, &partial);
            let copied = reflink_tree(&root, &snaps, &partial);
            if let Err(e) = copied {
                let _ = remove_tree(&snaps, &partial);
                return Err(e);
            }
            rfs::renameat(&snaps, partial.as_str(), &snaps, name)?;
        }
    }
    Ok((mechanism, at))
}

/// Makes a writable copy of snapshot `name` of the brick at `brick` at
/// `to`, a new directory on the same file system, for a new volume (its
/// volume id taken away): a writable btrfs snapshot of a subvolume copy,
/// else a reflink copy made under a temporary name.
pub fn clone(brick: &Path, name: &str, to: &Path) -> io::Result<()> {
    if !valid_name(name) {
        return Err(bad_name(name));
    }
    let root = open_dir(rfs::CWD, brick)?;
    let source = open_dir(&snaps_dir(&root)?, name)?;
    let (Some(parent), Some(leaf)) = (to.parent(), to.file_name().and_then(|n| n.to_str())) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a new directory's path", to.display()),
        ));
    };
    if rfs::statat(rfs::CWD, to, AtFlags::SYMLINK_NOFOLLOW).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists", to.display()),
        ));
    }
    std::fs::create_dir_all(parent)?;
    let into = open_dir(rfs::CWD, parent)?;
    if is_subvolume(&source)? {
        btrfs::snapshot(&source, &into, leaf, false)?;
    } else {
        let partial = format!(".{leaf}.partial");
        let _ = remove_tree(&into, &partial);
        if let Err(e) = reflink_tree(&source, &into, &partial) {
            let _ = remove_tree(&into, &partial);
            return Err(e);
        }
        rfs::renameat(&into, partial.as_str(), &into, leaf)?;
    }
    let made = open_dir(&into, leaf)?;
    // (A btrfs snapshot shows the snapshots inside the one it was made of
    // as empty directories: the clone has none of its own yet.)
    if let Ok(snaps) = open_dir(&made, SNAPS_REL) {
        empty_dir(&snaps)?;
    }
    match rfs::fremovexattr(&made, crate::posix::VOLUME_ID_XATTR) {
        Ok(()) | Err(rustix::io::Errno::NODATA) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Writes out what the brick's file system holds in memory (`syncfs`):
/// done before changes are held back, so that a snapshot taken next has
/// little left to write while they are.
pub fn flush(brick: &Path) -> io::Result<()> {
    let root = open_dir(rfs::CWD, brick)?;
    Ok(rfs::syncfs(&root)?)
}

/// Removes snapshot `name` of the brick at `brick` (NotFound if there is none).
pub fn remove(brick: &Path, name: &str) -> io::Result<()> {
    if !valid_name(name) {
        return Err(bad_name(name));
    }
    let root = open_dir(rfs::CWD, brick)?;
    let snaps = snaps_dir(&root)?;
    let dir = open_dir(&snaps, name)?;
    match is_subvolume(&dir)? {
        true => btrfs::destroy(&snaps, name),
        false => remove_tree(&snaps, name),
    }
}

/// The names of the brick's snapshots.
pub fn list(brick: &Path) -> io::Result<Vec<String>> {
    let root = open_dir(rfs::CWD, brick)?;
    let snaps = snaps_dir(&root)?;
    let mut names = Vec::new();
    for e in rfs::Dir::read_from(&snaps)? {
        let n = e?.file_name().to_string_lossy().into_owned();
        if valid_name(&n) {
            names.push(n);
        }
    }
    names.sort();
    Ok(names)
}

/// Makes the directory of a new brick (and its parents): a btrfs
/// subvolume when its parent is on btrfs, so that its snapshots cost
/// one call, else a plain directory.
pub fn make_brick_dir(path: &Path) -> io::Result<()> {
    if path.exists() {
        return Ok(());
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return std::fs::create_dir_all(path);
    };
    std::fs::create_dir_all(parent)?;
    let dir = open_dir(rfs::CWD, parent)?;
    if is_btrfs(&dir)? && btrfs::subvolume(&dir, name).is_ok() {
        return Ok(());
    }
    std::fs::create_dir(path)
}

/// Removes directory `name` in `dir` and everything in it (never
/// following a symlink; a btrfs subvolume inside is destroyed).
fn remove_tree(dir: &OwnedFd, name: &str) -> io::Result<()> {
    let sub = open_dir(dir, name)?;
    empty_dir(&sub)?;
    Ok(rfs::unlinkat(dir, name, AtFlags::REMOVEDIR)?)
}

fn empty_dir(dir: &OwnedFd) -> io::Result<()> {
    for e in rfs::Dir::read_from(dir)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n == b"." || n == b".." {
            continue;
        }
        let name = OsStr::from_bytes(n);
        match e.file_type() {
            rfs::FileType::Directory => {
                let sub = open_dir(dir, name)?;
                if is_subvolume(&sub)? {
                    btrfs::destroy(dir, name.to_str().unwrap_or_default())?;
                    continue;
                }
                empty_dir(&sub)?;
                rfs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
            }
            _ => rfs::unlinkat(dir, name, AtFlags::empty())?,
        }
    }
    Ok(())
}

/// Copies the brick's tree (all but its snapshots) into a new directory
/// `name` of `snaps`, every file's data shared with the original.
fn reflink_tree(root: &OwnedFd, snaps: &OwnedFd, name: &str) -> io::Result<()> {
    rfs::mkdirat(snaps, name, Mode::from_raw_mode(0o700))?;
    let dst = open_dir(snaps, name)?;
    let mut copy = Copy::new(open_dir(snaps, name)?);
    copy.dir(root, &dst, &mut PathBuf::new())?;
    copy.meta(root, &dst)
}

/// The buffers xattrs are copied through, made once per copy (a copy of
/// 100,000 files reads some 400,000 xattr names and values).
struct XattrBuf {
    names: Vec<u8>,
    value: Vec<u8>,
}

impl Default for XattrBuf {
    fn default() -> XattrBuf {
        XattrBuf {
            names: vec![0; 64 << 10],
            value: vec![0; 64 << 10],
        }
    }
}

/// A tree being copied: where it goes, and the first copy of each file
/// with more than one name (by source inode), to link its other names to.
struct Copy {
    dst_root: OwnedFd,
    linked: HashMap<u64, PathBuf>,
    xattrs: XattrBuf,
    /// Entries that go or change under the walk are skipped (`precopy`).
    tolerant: bool,
    /// Xattrs the source lacks are removed from the copy (bringing a
    /// copy up to date, `precopy`).
    exact: bool,
}

impl Copy {
    /// Links `name` of `dst` to the copy made at `first` of the object
    /// `name` in `src` is another name of: false if that copy is gone or,
    /// while the brick changes, no longer that object.
    fn link_to_copy(
        &self,
        first: &Path,
        src: &OwnedFd,
        dst: &OwnedFd,
        name: &OsStr,
    ) -> io::Result<bool> {
        if self.tolerant || self.exact {
            let gfid = |p: PathBuf| {
                let mut v = [0u8; 16];
                rfs::lgetxattr(p, crate::posix::GFID_XATTR, &mut v)
                    .ok()
                    .map(|n| v[..n].to_vec())
            };
            let theirs = gfid(in_dir(src, name));
            let ours = gfid(in_dir(&self.dst_root, first.as_os_str()));
            if theirs != ours {
                return Ok(false);
            }
        }
        match rfs::linkat(&self.dst_root, first, dst, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn new(dst_root: OwnedFd) -> Copy {
        Copy {
            dst_root,
            linked: HashMap::new(),
            xattrs: XattrBuf::default(),
            tolerant: false,
            exact: false,
        }
    }

    /// Copies what directory `src` holds into `dst` (`rel` from the root).
    fn dir(&mut self, src: &OwnedFd, dst: &OwnedFd, rel: &mut PathBuf) -> io::Result<()> {
        for e in rfs::Dir::read_from(src)? {
            let e = e?;
            let n = e.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            let name = OsStr::from_bytes(n).to_os_string();
            rel.push(&name);
            // (The snapshots are not themselves copied.)
            if rel.as_os_str() != OsStr::new(SNAPS_REL) {
                match self.entry(src, dst, &name, rel) {
                    Err(e) if self.tolerant && precopy::gone(&e) => {}
                    other => other?,
                }
            }
            rel.pop();
        }
        Ok(())
    }

    fn entry(
        &mut self,
        src: &OwnedFd,
        dst: &OwnedFd,
        name: &OsStr,
        rel: &mut PathBuf,
    ) -> io::Result<()> {
        let st = rfs::statat(src, name, AtFlags::SYMLINK_NOFOLLOW)?;
        let kind = rfs::FileType::from_raw_mode(st.st_mode);
        if kind != rfs::FileType::Directory && st.st_nlink > 1 {
            if let Some(first) = self.linked.get(&st.st_ino).cloned() {
                if self.link_to_copy(&first, src, dst, name)? {
                    return Ok(());
                }
            }
            self.linked.insert(st.st_ino, rel.clone());
        }
        match kind {
            rfs::FileType::Directory => {
                rfs::mkdirat(dst, name, Mode::from_raw_mode(0o700))?;
                let (s, d) = (open_dir(src, name)?, open_dir(dst, name)?);
                self.dir(&s, &d, rel)?;
                self.meta(&s, &d)
            }
            rfs::FileType::RegularFile => {
                let s = rfs::openat(
                    src,
                    name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                let d = rfs::openat(
                    dst,
                    name,
                    OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )?;
                rfs::ioctl_ficlone(&d, &s)?;
                self.meta(&s, &d)
            }
            rfs::FileType::Symlink => {
                let target = rfs::readlinkat(src, name, Vec::new())?;
                rfs::symlinkat(target.as_c_str(), dst, name)?;
                self.link_meta(src, dst, name, &st)
            }
            _ => {
                let mode = Mode::from_raw_mode(st.st_mode & 0o7777);
                rfs::mknodat(dst, name, kind, mode, st.st_rdev)?;
                self.link_meta(src, dst, name, &st)
            }
        }
    }
}

impl Copy {
    /// Gives `dst` the owner, mode, xattrs and times of `src` (both open).
    fn meta(&mut self, src: &OwnedFd, dst: &OwnedFd) -> io::Result<()> {
        let st = rfs::fstat(src)?;
        rfs::fchown(
            dst,
            Some(rfs::Uid::from_raw(st.st_uid)),
            Some(rfs::Gid::from_raw(st.st_gid)),
        )?;
        rfs::fchmod(dst, Mode::from_raw_mode(st.st_mode & 0o7777))?;
        let XattrBuf { names, value } = &mut self.xattrs;
        let n = rfs::flistxattr(src, &mut names[..])?;
        for x in names[..n].split(|b| *b == 0).filter(|x| !x.is_empty()) {
            let x = OsStr::from_bytes(x);
            let len = rfs::fgetxattr(src, x, &mut value[..])?;
            rfs::fsetxattr(dst, x, &value[..len], rfs::XattrFlags::empty())?;
        }
        if self.exact {
            let theirs = names[..n].to_vec();
            let m = rfs::flistxattr(dst, &mut value[..])?;
            for x in value[..m].split(|b| *b == 0).filter(|x| !x.is_empty()) {
                if !theirs.split(|b| *b == 0).any(|t| t == x) {
                    rfs::fremovexattr(dst, OsStr::from_bytes(x))?;
                }
            }
        }
        Ok(rfs::futimens(dst, &times(&st))?)
    }

    /// Gives the object `name` of `dst` (a symlink or device: not opened)
    /// the owner, xattrs and times of its source, `st` of `name` in `src`.
    fn link_meta(
        &mut self,
        src: &OwnedFd,
        dst: &OwnedFd,
        name: &OsStr,
        st: &rfs::Stat,
    ) -> io::Result<()> {
        rfs::chownat(
            dst,
            name,
            Some(rfs::Uid::from_raw(st.st_uid)),
            Some(rfs::Gid::from_raw(st.st_gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )?;
        let (s, d) = (in_dir(src, name), in_dir(dst, name));
        let XattrBuf { names, value } = &mut self.xattrs;
        let n = rfs::llistxattr(&s, &mut names[..])?;
        for x in names[..n].split(|b| *b == 0).filter(|x| !x.is_empty()) {
            let x = OsStr::from_bytes(x);
            let len = rfs::lgetxattr(&s, x, &mut value[..])?;
            rfs::lsetxattr(&d, x, &value[..len], rfs::XattrFlags::empty())?;
        }
        rfs::utimensat(dst, name, &times(st), AtFlags::SYMLINK_NOFOLLOW).map_err(io::Error::from)
    }
}

/// The name `name` in the directory open at `dir`, as a path that
/// resolves exactly that directory (its `/proc` link), then the name.
fn in_dir(dir: impl AsFd, name: &OsStr) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd())).join(name)
}

fn times(st: &rfs::Stat) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: st.st_atime as _,
            tv_nsec: st.st_atime_nsec as _,
        },
        last_modification: Timespec {
            tv_sec: st.st_mtime as _,
            tv_nsec: st.st_mtime_nsec as _,
        },
    }
}
