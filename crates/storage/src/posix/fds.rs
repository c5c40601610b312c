//! What one client connection holds open on the brick: files, listings,
//! anonymous files and change sessions.

use super::*;

/// Files clients hold open on this brick, by gfid (reads through the
/// anonymous handle not counted): a rebalance leaves such a file where it
/// is (`OPEN_COUNT_XATTR`).
#[derive(Default, Clone)]
pub struct OpenCounts(Arc<Mutex<HashMap<Gfid, u32>>>);

impl OpenCounts {
    pub(crate) fn mark(&self, gfid: Gfid) -> OpenMark {
        *self.0.lock().unwrap().entry(gfid).or_default() += 1;
        OpenMark {
            gfid,
            counts: self.clone(),
        }
    }
    /// Files open, and the handles on them.
    pub(crate) fn totals(&self) -> (u64, u64) {
        let m = self.0.lock().unwrap();
        (m.len() as u64, m.values().map(|&n| n as u64).sum())
    }
    pub(crate) fn of(&self, gfid: Gfid) -> u32 {
        self.0.lock().unwrap().get(&gfid).copied().unwrap_or(0)
    }
}

/// One client's open of a file, counted until the handle goes (released,
/// or its connection ended).
pub struct OpenMark {
    gfid: Gfid,
    counts: OpenCounts,
}

impl Drop for OpenMark {
    fn drop(&mut self) {
        let mut m = self.counts.0.lock().unwrap();
        if let Some(n) = m.get_mut(&self.gfid) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.gfid);
            }
        }
    }
}

/// An open file or a directory listing, held for one client connection.
pub enum Handle {
    /// An open file, its gfid, its place among the brick's open files
    /// (None for the anonymous handle), and the uid of the caller that
    /// opened it.
    File(File, Gfid, Option<OpenMark>, u32),
    /// An open directory's listing, the directory itself (so that it can
    /// be stat'ed after its last name is gone, as `fstat` on a local
    /// file system can) and its gfid.
    Dir(Mutex<Listing>, Arc<OwnedFd>, Gfid),
}

impl Handle {
    pub(crate) fn gfid(&self) -> Gfid {
        match self {
            Handle::File(_, g, ..) | Handle::Dir(_, _, g) => *g,
        }
    }
    pub(crate) fn fstat(&self) -> FsResult<rfs::Stat> {
        Ok(match self {
            Handle::File(f, ..) => rfs::fstat(f)?,
            Handle::Dir(_, d, _) => rfs::fstat(&**d)?,
        })
    }
}

/// An open directory's entries, taken at opendir and again at every
/// rewind (a read from offset 0 after the first), so that offsets stay
/// valid however the directory changes, and a rewound reader sees it anew,
/// as POSIX wants of `rewinddir`.
pub struct Listing {
    pub(crate) names: Arc<Vec<(Vec<u8>, FileKind)>>,
    /// Not read from offset 0 yet: the listing is as fresh as it gets.
    pub(crate) fresh: bool,
}

/// Handles issued to one client connection; dropped (closing every file)
/// when the connection ends.
#[derive(Default)]
pub struct FdTable {
    pub(crate) next: AtomicU64,
    pub(crate) map: Mutex<HashMap<u64, Arc<Handle>>>,
    /// Files read through the anonymous handle (`ANON_FH`), by gfid.
    pub(crate) anon: Arc<AnonFiles>,
    /// Whether the brick knows of `anon` (`Posix::anon_tables`).
    pub(crate) anon_known: std::sync::atomic::AtomicBool,
}

/// A connection's files read through the anonymous handle, by gfid: let go
/// when their last name goes (`Posix::drop_handle`), so that an idle
/// connection does not keep a deleted file's blocks.
pub(crate) type AnonFiles = Mutex<HashMap<Gfid, Arc<Handle>>>;

/// Anonymous files kept open per connection.
pub(crate) const ANON_MAX: usize = 1024;

impl FdTable {
    pub(crate) fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.map.lock().unwrap().insert(fh, Arc::new(h));
        fh
    }
    /// A file or directory of this connection's, open under `gfid`: it
    /// stays reachable after its last name (and so its gfid handle) is gone.
    pub(crate) fn open_by_gfid(&self, gfid: Gfid) -> Option<Arc<Handle>> {
        let open = self.map.lock().unwrap();
        let found = open.values().find(|h| h.gfid() == gfid).cloned();
        drop(open);
        found.or_else(|| self.anon.lock().unwrap().get(&gfid).cloned())
    }

    /// A file of this connection's open for writing under `gfid` by `uid`.
    pub(crate) fn writable(&self, gfid: Gfid, uid: u32) -> Option<Arc<Handle>> {
        let open = self.map.lock().unwrap();
        open.values()
            .find(|h| match &***h {
                Handle::File(f, g, _, opener) => {
                    *g == gfid
                        && *opener == uid
                        && rfs::fcntl_getfl(f)
                            .is_ok_and(|fl| (fl & OFlags::ACCMODE) != OFlags::RDONLY)
                }
                Handle::Dir(..) => false,
            })
            .cloned()
    }

    /// Whether this connection has `gfid` open.
    pub fn has_open(&self, gfid: Gfid) -> bool {
        self.open_by_gfid(gfid).is_some()
    }

    pub(crate) fn get(&self, fh: u64) -> FsResult<Arc<Handle>> {
        self.map
            .lock()
            .unwrap()
            .get(&fh)
            .cloned()
            .ok_or_else(|| FsError::new(libc::EBADF, format!("unknown handle {fh}")))
    }
    pub(crate) fn file(&self, fh: u64) -> FsResult<Arc<Handle>> {
        let h = self.get(fh)?;
        match &*h {
            Handle::File(..) => Ok(h),
            Handle::Dir(..) => Err(FsError::errno(libc::EISDIR)),
        }
    }
    pub(crate) fn remove(&self, fh: u64) {
        self.map.lock().unwrap().remove(&fh);
    }
    pub fn len(&self) -> usize {
        self.map.lock().unwrap().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub(crate) fn as_file(h: &Handle) -> &File {
    match h {
        Handle::File(f, ..) => f,
        Handle::Dir(..) => unreachable!("checked by FdTable::file"),
    }
}
