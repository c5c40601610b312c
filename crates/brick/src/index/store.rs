//! Pending markers and the heal index of a brick (docs/replication.md):
//! the records the `features/index` brick translator keeps.
//!
//! Two records say that the copies of an object may differ:
//! - **blame**: the `trusted.mortar.blame` xattr of a copy, a bit mask of the
//!   replica positions (in the replica set) known to have missed a change
//!   this copy has. Set before a client acknowledges a change some replica
//!   failed; cleared by heal. (Posix reports it with the attributes.)
//! - **the index**: a name `.mortar/pending/<gfid>` for every object
//!   with a blame or an open change session (a client is changing it, or
//!   crashed while it was). Self-heal works through the index instead of
//!   crawling the brick.
//!
//! A change session is opened by `Fop::Lock` with a mark and ended by
//! `Fop::Unlock`; if the client's connection ends first, the index entry
//! stays and heal compares the copies. Every update runs under the
//! `sessions` mutex, so the xattr and the index stay in step.
//!
//! **Changed ranges** (`mortar_core::changed`): while sessions are open on
//! an object, the byte ranges its writes, truncations and fallocates touch
//! are kept in memory; when the last session ends and the object stays in
//! the index (blamed, or its client went away), they are written to its
//! `trusted.mortar.changed` xattr, so that heal rebuilds those ranges
//! alone. The record is kept true by three rules:
//! - it exists only while the object is in the index (removed before the
//!   entry is);
//! - a session opened on an object already in the index takes the record
//!   into memory and removes it, so that a brick stopped in the middle
//!   leaves none;
//! - an object in the index without a record (and no session open) is
//!   `Changed::Whole`: its ranges were lost with a brick process.
//!
//! A brick process told to stop (SIGTERM) writes down the ranges of every
//! session open, and from then on each change as it comes (`stopping`):
//! only a process killed leaves objects `Whole`.

use mortar_core::changed::Changed;
use mortar_core::{FsResult, Gfid};
use mortar_storage::posix::{
    read_blame, read_changed, remove_xattr, set_xattr, write_changed, Posix, BLAME_XATTR,
    PENDING_REL,
};
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

/// Every index entry is a hard link to this empty file: adding one to the
/// index makes a directory entry, not an inode (as GlusterFS's xattrop
/// index does), which measured several times cheaper.
pub const PENDING_BASE: &str = "pending-base";

/// A client connection, as the index tells them apart.
pub type ConnId = u64;

fn write_blame(fd: impl AsFd, blame: u32) -> FsResult<()> {
    if blame == 0 {
        remove_xattr(fd, BLAME_XATTR)
    } else {
        set_xattr(
            fd,
            BLAME_XATTR,
            &blame.to_le_bytes(),
            rfs::XattrFlags::empty(),
        )
    }
}

/// The change sessions open on one object, over all connections.
struct Open {
    n: u32,
    /// The ranges changed since the object entered the index.
    changed: Changed,
    /// It was in the index before these sessions opened (left by a client
    /// or a brick process that went away, or blamed), or a client went
    /// away while they were open: it stays there for heal when they end,
    /// whatever they did.
    was_pending: bool,
}

/// Counts one session of `gfid` out; when it was the last, answers what
/// the sessions leave.
fn end_session(sessions: &mut HashMap<Gfid, Open>, gfid: Gfid) -> Option<Open> {
    match sessions.get_mut(&gfid) {
        Some(o) if o.n > 1 => {
            o.n -= 1;
            None
        }
        _ => Some(sessions.remove(&gfid).unwrap_or(Open {
            n: 0,
            changed: Changed::default(),
            was_pending: false,
        })),
    }
}

pub struct Index {
    posix: Arc<Posix>,
    /// `.mortar/pending`.
    pending: OwnedFd,
    /// Open change sessions per object, over all connections.
    sessions: Mutex<HashMap<Gfid, Open>>,
    /// The objects each connection has a session on.
    by_conn: Mutex<HashMap<ConnId, HashSet<Gfid>>>,
    /// Objects whose copy here blames others, with the blame: the blame
    /// xattrs' contents, kept in memory for `Fop::Blamed`.
    blamed: Arc<Mutex<HashMap<Gfid, u32>>>,
    /// The process is stopping (`stopping`): ranges are written down as
    /// they change.
    stopping: std::sync::atomic::AtomicBool,
}

impl Index {
    /// Opens the brick's index, and fills the in-memory record of blamed
    /// objects from it (every blamed object is in it).
    pub fn open(posix: Arc<Posix>) -> FsResult<Index> {
        let pending = posix.meta_dir(PENDING_REL)?;
        let blamed: Arc<Mutex<HashMap<Gfid, u32>>> = Default::default();
        // An object whose last name goes is no longer blamed.
        let weak = Arc::downgrade(&blamed);
        posix.on_forget(Box::new(move |gfid| {
            if let Some(b) = weak.upgrade() {
                b.lock().unwrap().remove(&gfid);
            }
        }));
        let idx = Index {
            posix,
            pending,
            sessions: Mutex::new(HashMap::new()),
            by_conn: Mutex::new(HashMap::new()),
            blamed,
            stopping: Default::default(),
        };
        let mut blamed = HashMap::new();
        for gfid in idx.entries(usize::MAX, |_| true)? {
            if let Ok(b) = idx.posix.resolve(gfid).and_then(|fd| read_blame(&*fd)) {
                if b != 0 {
                    blamed.insert(gfid, b);
                }
            }
        }
        *idx.blamed.lock().unwrap() = blamed;
        Ok(idx)
    }

    fn note_blame(&self, gfid: Gfid, blame: u32) {
        let mut blamed = self.blamed.lock().unwrap();
        if blame == 0 {
            blamed.remove(&gfid);
        } else {
            blamed.insert(gfid, blame);
        }
    }

    /// Up to `max + 1` objects this copy blames others of (`Fop::Blamed`).
    pub fn blamed(&self, max: usize) -> Vec<(Gfid, u32)> {
        let blamed = self.blamed.lock().unwrap();
        blamed
            .iter()
            .take(max.saturating_add(1))
            .map(|(g, b)| (*g, *b))
            .collect()
    }

    /// Adds `gfid` to the index; answers whether it was in it already.
    fn add(&self, gfid: Gfid) -> FsResult<bool> {
        let dir = &self.pending;
        let name = gfid.to_string();
        match rfs::linkat(dir, PENDING_BASE, dir, name.as_str(), AtFlags::empty()) {
            Ok(()) => Ok(false),
            Err(rustix::io::Errno::EXIST) => Ok(true),
            Err(rustix::io::Errno::NOENT) => {
                // The base is made once per brick (and again if removed).
                rfs::openat(
                    dir,
                    PENDING_BASE,
                    OFlags::CREATE | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )?;
                match rfs::linkat(dir, PENDING_BASE, dir, name.as_str(), AtFlags::empty()) {
                    Ok(()) => Ok(false),
                    Err(rustix::io::Errno::EXIST) => Ok(true),
                    Err(e) => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    fn is_pending(&self, gfid: Gfid) -> bool {
        rfs::statat(
            &self.pending,
            gfid.to_string().as_str(),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .is_ok()
    }

    /// The record of an object already in the index, taken into memory by
    /// a session that opens: removed from the object, so that a brick
    /// stopped before the session ends leaves none (`Whole`).
    fn take_changed(&self, gfid: Gfid) -> Changed {
        let Ok(fd) = self.posix.resolve(gfid) else {
            return Changed::Whole;
        };
        match read_changed(&*fd) {
            Ok(Some(c)) => match write_changed(&*fd, None) {
                Ok(()) => c,
                Err(_) => Changed::Whole,
            },
            _ => Changed::Whole,
        }
    }

    /// Writes down the ranges of `gfid`'s sessions, which all ended with
    /// the object staying in the index.
    fn keep_changed(&self, gfid: Gfid, changed: &Changed) {
        if let Ok(fd) = self.posix.resolve(gfid) {
            if let Err(e) = write_changed(&*fd, Some(changed)) {
                // Without it the object is `Whole`: a slower heal, no harm.
                tracing::warn!(brick = %self.posix.path().display(), %gfid, "cannot record the ranges changed ({e}); a heal will compare the whole file");
            }
        }
    }

    /// Adds `start..end` to the ranges changed of `gfid`, if a change
    /// session is open on it (changes outside sessions are a heal's or a
    /// rebalance's own, which need no record).
    pub fn changed(&self, gfid: Gfid, start: u64, end: u64) {
        if let Some(o) = self.sessions.lock().unwrap().get_mut(&gfid) {
            // Compared only while stopping: no copy on every write.
            let before = self.is_stopping().then(|| o.changed.clone());
            o.changed.add(start, end);
            if before.is_some_and(|b| b != o.changed) {
                self.keep_changed(gfid, &o.changed);
            }
        }
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The brick process is about to exit: the ranges of every session
    /// open are written down, and from now on as they change, so that its
    /// objects heal by their ranges, not whole. (A process killed writes
    /// nothing: `Whole`.)
    pub fn stopping(&self) {
        let sessions = self.sessions.lock().unwrap();
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for (gfid, o) in sessions.iter() {
            self.keep_changed(*gfid, &o.changed);
        }
        tracing::info!(brick = %self.posix.path().display(), sessions = sessions.len(), "stopping: the ranges changed in open sessions are written down");
    }

    /// Adds `more` to the ranges changed of `gfid` (a client found a copy
    /// damaged): only within a change session.
    pub fn add_changed(&self, gfid: Gfid, more: &Changed) -> FsResult<()> {
        match self.sessions.lock().unwrap().get_mut(&gfid) {
            Some(o) => {
                o.changed.merge(more);
                if self.is_stopping() {
                    self.keep_changed(gfid, &o.changed);
                }
                Ok(())
            }
            None => Err(mortar_core::FsError::new(
                libc::EINVAL,
                "changed ranges are added within a change session",
            )),
        }
    }

    /// The ranges of `gfid` that may differ between its copies, as this
    /// brick knows them: none if it is not in the index.
    pub fn known_changed(&self, gfid: Gfid) -> FsResult<Changed> {
        self.known_changed_of(gfid, &*self.posix.resolve(gfid)?)
    }

    fn known_changed_of(&self, gfid: Gfid, fd: impl AsFd) -> FsResult<Changed> {
        let sessions = self.sessions.lock().unwrap();
        if let Some(o) = sessions.get(&gfid) {
            return Ok(o.changed.clone());
        }
        match read_changed(fd)? {
            Some(c) => Ok(c),
            None if self.is_pending(gfid) => Ok(Changed::Whole),
            None => Ok(Changed::default()),
        }
    }

    /// The bytes of the copies here of `gfids` a heal would compare: the
    /// ranges known as changed within each file (`known_changed`), none
    /// for what is no file or is gone.
    pub fn backlog(&self, gfids: &[Gfid]) -> u64 {
        let bytes = |gfid: Gfid| -> FsResult<u64> {
            let fd = self.posix.resolve(gfid)?;
            let st = rfs::fstat(&*fd)?;
            if rfs::FileType::from_raw_mode(st.st_mode) != rfs::FileType::RegularFile {
                return Ok(0);
            }
            Ok(self
                .known_changed_of(gfid, &*fd)?
                .bytes_within(st.st_size as u64))
        };
        gfids.iter().map(|&g| bytes(g).unwrap_or(0)).sum()
    }

    fn remove(&self, gfid: Gfid) -> FsResult<()> {
        match rfs::unlinkat(&self.pending, gfid.to_string().as_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens connection `conn`'s change session on `gfid` (once) and adds
    /// `blame` to the object's blame.
    pub fn mark(&self, conn: ConnId, gfid: Gfid, blame: u32) -> FsResult<()> {
        // Only objects that exist enter the index (a look at the handle
        // says so; the object is opened only to record a blame).
        let fd = match blame {
            0 => {
                self.posix.exists(gfid)?;
                None
            }
            _ => Some(self.posix.resolve(gfid)?),
        };
        let mut sessions = self.sessions.lock().unwrap();
        if self
            .by_conn
            .lock()
            .unwrap()
            .entry(conn)
            .or_default()
            .insert(gfid)
        {
            match sessions.get_mut(&gfid) {
                Some(o) => o.n += 1,
                None => match self.add(gfid) {
                    Ok(was) => {
                        let changed = match was {
                            true => self.take_changed(gfid),
                            false => Changed::default(),
                        };
                        if self.is_stopping() {
                            self.keep_changed(gfid, &changed);
                        }
                        let open = Open {
                            n: 1,
                            changed,
                            was_pending: was,
                        };
                        sessions.insert(gfid, open);
                    }
                    Err(e) => {
                        if let Some(s) = self.by_conn.lock().unwrap().get_mut(&conn) {
                            s.remove(&gfid);
                        }
                        return Err(e);
                    }
                },
            }
        }
        if let Some(fd) = fd {
            let old = read_blame(&*fd)?;
            if old | blame != old {
                write_blame(&*fd, old | blame)?;
                self.note_blame(gfid, old | blame);
                tracing::info!(brick = %self.posix.path().display(), %gfid, blame = old | blame, "recorded replicas that missed a change");
            }
        }
        Ok(())
    }

    /// Ends `conn`'s sessions on `gfids`: an object whose last session
    /// ended and that blames nobody leaves the index.
    pub fn settle(&self, conn: ConnId, gfids: &[Gfid]) {
        let mut sessions = self.sessions.lock().unwrap();
        for &gfid in gfids {
            let had = self
                .by_conn
                .lock()
                .unwrap()
                .get_mut(&conn)
                .is_some_and(|s| s.remove(&gfid));
            if !had {
                continue;
            }
            let Some(open) = end_session(&mut sessions, gfid) else {
                continue;
            };
            let (blamed, exists) = match self.posix.resolve(gfid) {
                Ok(fd) => (read_blame(&*fd).unwrap_or(1) != 0, true),
                // Gone: nothing left to heal.
                Err(_) => (false, false),
            };
            if blamed || (open.was_pending && exists) {
                if !blamed {
                    tracing::debug!(brick = %self.posix.path().display(), %gfid, "a session ended on an object pending before it: it stays in the index for heal");
                }
                self.keep_changed(gfid, &open.changed);
            } else {
                // No record exists while sessions are open (unless the
                // process is stopping): the entry goes alone.
                if self.is_stopping() {
                    if let Ok(fd) = self.posix.resolve(gfid) {
                        let _ = write_changed(&*fd, None);
                    }
                }
                let _ = self.remove(gfid);
            }
        }
    }

    /// A connection ended: its sessions end without settling, so that their
    /// objects stay in the index for heal to compare.
    pub fn disconnect(&self, conn: ConnId) {
        let mut sessions = self.sessions.lock().unwrap();
        for gfid in self
            .by_conn
            .lock()
            .unwrap()
            .remove(&conn)
            .unwrap_or_default()
        {
            match end_session(&mut sessions, gfid) {
                Some(open) => self.keep_changed(gfid, &open.changed),
                // Others' sessions go on: when they end, the object stays
                // for heal whatever they did (this client's change may
                // have reached some copies only).
                None => {
                    if let Some(o) = sessions.get_mut(&gfid) {
                        o.was_pending = true;
                    }
                }
            }
        }
    }

    /// Heal is done with some replicas of `gfid`: drops their blame, and the
    /// index entry once nothing is pending and no session is open.
    pub fn clear(&self, gfid: Gfid, unblame: u32) -> FsResult<u32> {
        let sessions = self.sessions.lock().unwrap();
        let open = sessions.contains_key(&gfid);
        let left = match self.posix.resolve(gfid) {
            Ok(fd) => {
                let old = read_blame(&*fd)?;
                if old & unblame != 0 {
                    write_blame(&*fd, old & !unblame)?;
                }
                self.note_blame(gfid, old & !unblame);
                if old & !unblame == 0 && !open {
                    // The record goes before the entry (it never outlives it).
                    write_changed(&*fd, None)?;
                }
                old & !unblame
            }
            Err(e) if e.is(libc::ESTALE) => {
                self.note_blame(gfid, 0);
                0
            }
            Err(e) => return Err(e),
        };
        if left == 0 && !open {
            self.remove(gfid)?;
        }
        Ok(left)
    }

    /// Up to `max` objects of the heal index that need heal: blamed, or
    /// left by a client that went away. An object a connected client is
    /// changing right now is its business (it settles it), not heal's.
    pub fn pending(&self, max: usize) -> FsResult<Vec<Gfid>> {
        self.entries(max, |g| {
            let live = self.sessions.lock().unwrap().contains_key(&g);
            !live
                || self
                    .posix
                    .resolve(g)
                    .and_then(|fd| read_blame(&*fd))
                    .unwrap_or(0)
                    != 0
        })
    }

    /// Up to `max` objects of the heal index that `keep` accepts.
    fn entries(&self, max: usize, mut keep: impl FnMut(Gfid) -> bool) -> FsResult<Vec<Gfid>> {
        let fd = rfs::openat(
            &self.pending,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut out = Vec::new();
        let mut d = rfs::Dir::new(fd)?;
        while let Some(ent) = d.read() {
            let ent = ent?;
            let name = ent.file_name().to_string_lossy();
            let Ok(u) = uuid::Uuid::parse_str(&name) else {
                continue;
            };
            if let Some(g) = Gfid::from_slice(u.as_bytes()) {
                if keep(g) {
                    out.push(g);
                    if out.len() >= max {
                        break;
                    }
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
