//! Conversions between the kernel's view (fuser's types) and mortar's:
//! attributes, times, names, the caller, open flags.

use super::*;
use std::time::Instant;

pub(super) fn errno(e: &FsError) -> Errno {
    if e.errno == libc::EIO {
        // Never an answer a file system should give lightly: say why.
        tracing::warn!("answering EIO: {e}");
    } else {
        tracing::debug!("answering {e}");
    }
    Errno::from_i32(e.errno)
}

pub(super) fn to_time((s, n): (i64, u32)) -> SystemTime {
    if s >= 0 {
        UNIX_EPOCH + Duration::new(s as u64, n)
    } else {
        UNIX_EPOCH - Duration::from_secs((-s) as u64) + Duration::from_nanos(n as u64)
    }
}

pub(super) fn file_type(k: FileKind) -> FileType {
    match k {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDev => FileType::CharDevice,
        FileKind::BlockDev => FileType::BlockDevice,
    }
}

pub(super) fn fuse_attr(ino: u64, a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: a.size,
        blocks: a.blocks,
        atime: to_time(a.atime),
        mtime: to_time(a.mtime),
        ctime: to_time(a.ctime),
        crtime: to_time(a.ctime),
        kind: file_type(a.kind),
        perm: a.perm as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev as u32,
        blksize: a.blksize.max(4096),
        flags: 0,
    }
}

pub(super) fn time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => TimeSet::At(d.as_secs() as i64, d.subsec_nanos()),
            Err(e) => {
                let d = e.duration();
                let (s, n) = (d.as_secs() as i64, d.subsec_nanos());
                if n == 0 {
                    TimeSet::At(-s, 0)
                } else {
                    TimeSet::At(-s - 1, 1_000_000_000 - n)
                }
            }
        },
    }
}

pub(super) fn ctx(req: &Request) -> Ctx {
    let (uid, gid, pid) = (req.uid(), req.gid(), req.pid());
    Ctx {
        uid,
        gid,
        pid,
        unique: req.unique().0,
        // Root passes every permission check: its groups are not needed.
        groups: if uid == 0 {
            Vec::new()
        } else {
            GROUPS.of(pid, uid, gid)
        },
        ..Ctx::default()
    }
}

/// How long a process's supplementary groups are taken as read: a
/// process that changes its groups is seen with its new ones within this
/// (GlusterFS's `gid-timeout`, 300 s by default, is much longer).
const GROUPS_FRESH: Duration = Duration::from_secs(1);

/// Supplementary groups by process (and its uid and gid, so that a
/// process that changes its identity is read anew), read from /proc at
/// most once per `GROUPS_FRESH`.
struct GroupCache(std::sync::Mutex<std::collections::HashMap<Caller, (Instant, Vec<u32>)>>);

/// A process, with its uid and gid.
type Caller = (u32, u32, u32);

static GROUPS: std::sync::LazyLock<GroupCache> =
    std::sync::LazyLock::new(|| GroupCache(Default::default()));

impl GroupCache {
    fn of(&self, pid: u32, uid: u32, gid: u32) -> Vec<u32> {
        let key = (pid, uid, gid);
        if let Some((at, g)) = self.0.lock().unwrap().get(&key) {
            if at.elapsed() < GROUPS_FRESH {
                return g.clone();
            }
        }
        let groups = caller_groups(pid);
        let mut map = self.0.lock().unwrap();
        if map.len() >= 4096 {
            map.retain(|_, (at, _)| at.elapsed() < GROUPS_FRESH);
        }
        map.insert(key, (Instant::now(), groups.clone()));
        groups
    }
}

/// The supplementary groups of process `pid` (from /proc; none if it is
/// gone).
fn caller_groups(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn name(n: &OsStr) -> Result<Name, Errno> {
    Name::new(n.as_bytes().to_vec()).map_err(|e| errno(&e))
}

/// Cached pages are kept across opens, and dropped by the kernel when the
/// file's size or mtime changes (FUSE_AUTO_INVAL_DATA), within the
/// attribute timeout, as GlusterFS does. O_DIRECT is left to the kernel's
/// own direct I/O path (not FOPEN_DIRECT_IO): it bypasses the page cache
/// all the same, and, unlike FOPEN_DIRECT_IO, still clears set-id bits on a
/// write and lets the file be mapped.
///
/// A handle opened read-only is closed without a FLUSH (FOPEN_NOFLUSH):
/// it has no writes to wait for, and POSIX locks are the kernel's own
/// (mortar answers no GETLK/SETLK), released by the kernel at close.
pub(super) fn open_flags(flags: i32) -> FopenFlags {
    let mut f = FopenFlags::empty();
    if flags & libc::O_DIRECT == 0 {
        f |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    if flags & libc::O_ACCMODE == libc::O_RDONLY {
        f |= FopenFlags::FOPEN_NOFLUSH;
    }
    f
}

/// The flags of a handle `create` made: as `open_flags`, except that a
/// file created ahead of the bricks is always closed with a FLUSH, even
/// read-only (`open(O_CREAT | O_RDONLY)`): that FLUSH drops the times the
/// kernel keeps from the create, which are the mount's guess
/// (docs/caching.md, "Changes of names ahead").
pub(super) fn created_flags(flags: i32, fh: u64) -> FopenFlags {
    let mut f = open_flags(flags);
    if mortar_core::fop::is_ahead(fh) {
        f.remove(FopenFlags::FOPEN_NOFLUSH);
    }
    f
}

pub(super) fn placeholder_attr() -> Attr {
    Attr {
        kind: FileKind::Dir,
        perm: 0,
        ..Attr::plain_file(Gfid::NULL, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_core::fop::AHEAD_FH;

    #[test]
    fn read_only_handles_skip_the_flush_unless_created_ahead() {
        let ro = libc::O_RDONLY | libc::O_CREAT;
        assert!(open_flags(ro).contains(FopenFlags::FOPEN_NOFLUSH));
        assert!(created_flags(ro, 5).contains(FopenFlags::FOPEN_NOFLUSH));
        assert!(!created_flags(ro, AHEAD_FH | 5).contains(FopenFlags::FOPEN_NOFLUSH));
        assert!(!created_flags(libc::O_WRONLY, 5).contains(FopenFlags::FOPEN_NOFLUSH));
    }
}
