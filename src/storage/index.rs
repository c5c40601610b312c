//! Pending markers and the heal index of a brick (docs/replication.md).
//!
//! Two records say that the copies of an object may differ:
//! - **blame**: the `trusted.mortar.blame` xattr of a copy, a bit mask of the
//!   replica positions (in the replica set) known to have missed a change
//!   this copy has. Set before a client acknowledges a change some replica
//!   failed; cleared by heal.
//! - **the index**: a name `.mortar/pending/<gfid>` for every object
//!   with a blame or an open change session (a client is changing it, or
//!   crashed while it was). Self-heal works through the index instead of
//!   crawling the brick.
//!
//! A change session is opened by `Fop::Lock` with a mark and ended by
//! `Fop::Unlock`; if the client's connection ends first, the index entry
//! stays and heal compares the copies. Every update runs under the
//! `sessions` mutex, so the xattr and the index stay in step.

use super::posix::{get_xattr, proc_path, set_xattr, FdTable, Posix};
use crate::core::{FsError, FsResult, Gfid};
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

pub const BLAME_XATTR: &str = "trusted.mortar.blame";
pub const PENDING_REL: &str = ".mortar/pending";
/// Every index entry is a hard link to this empty file: adding one to the
/// index makes a directory entry, not an inode (as GlusterFS's xattrop
/// index does), which measured several times cheaper.
pub const PENDING_BASE: &str = "pending-base";

/// The blame recorded on a copy (0 when none).
pub fn read_blame(fd: impl AsFd) -> FsResult<u32> {
    match get_xattr(fd, BLAME_XATTR) {
        Ok(v) if v.len() == 4 => Ok(u32::from_le_bytes(v.try_into().unwrap())),
        Ok(_) => Err(FsError::new(libc::EIO, "malformed blame xattr")),
        Err(e) if e.is(libc::ENODATA) => Ok(0),
        Err(e) => Err(e),
    }
}

fn write_blame(fd: impl AsFd, blame: u32) -> FsResult<()> {
    if blame == 0 {
        match rfs::removexattr(proc_path(fd), BLAME_XATTR) {
            Ok(()) | Err(rustix::io::Errno::NODATA) => Ok(()),
            Err(e) => Err(e.into()),
        }
    } else {
        set_xattr(
            fd,
            BLAME_XATTR,
            &blame.to_le_bytes(),
            rfs::XattrFlags::empty(),
        )
    }
}

/// Counts one session of `gfid` out; true if it was the last.
fn end_session(sessions: &mut HashMap<Gfid, u32>, gfid: Gfid) -> bool {
    match sessions.get_mut(&gfid) {
        Some(n) if *n > 1 => {
            *n -= 1;
            false
        }
        _ => {
            sessions.remove(&gfid);
            true
        }
    }
}

impl Posix {
    /// Fills the in-memory record of blamed objects from the index (every
    /// blamed object is in it) when the brick starts.
    pub(super) fn load_blamed(&self) -> FsResult<()> {
        let mut blamed = HashMap::new();
        for gfid in self.index_entries(usize::MAX, |_| true)? {
            if let Ok(b) = self.resolve(gfid).and_then(|fd| read_blame(&*fd)) {
                if b != 0 {
                    blamed.insert(gfid, b);
                }
            }
        }
        *self.blamed.lock().unwrap() = blamed;
        Ok(())
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
    pub(super) fn blamed(&self, max: usize) -> Vec<(Gfid, u32)> {
        let blamed = self.blamed.lock().unwrap();
        blamed
            .iter()
            .take(max.saturating_add(1))
            .map(|(g, b)| (*g, *b))
            .collect()
    }

    fn pending_dir(&self) -> FsResult<&std::os::fd::OwnedFd> {
        Ok(&self.pending)
    }

    fn index_add(&self, gfid: Gfid) -> FsResult<()> {
        let dir = self.pending_dir()?;
        let name = gfid.to_string();
        match rfs::linkat(dir, PENDING_BASE, dir, name.as_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
            Err(rustix::io::Errno::NOENT) => {
                // The base is made once per brick (and again if removed).
                rfs::openat(
                    dir,
                    PENDING_BASE,
                    OFlags::CREATE | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )?;
                match rfs::linkat(dir, PENDING_BASE, dir, name.as_str(), AtFlags::empty()) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    fn index_remove(&self, gfid: Gfid) -> FsResult<()> {
        let dir = self.pending_dir()?;
        match rfs::unlinkat(dir, gfid.to_string().as_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens this connection's change session on `gfid` (once) and adds
    /// `blame` to the object's blame.
    pub(super) fn mark(&self, fds: &FdTable, gfid: Gfid, blame: u32) -> FsResult<()> {
        // Only objects that exist enter the index.
        let fd = self.resolve(gfid)?;
        let mut sessions = self.sessions.lock().unwrap();
        if fds.sessions.lock().unwrap().insert(gfid) {
            let n = sessions.entry(gfid).or_insert(0);
            *n += 1;
            if *n == 1 {
                if let Err(e) = self.index_add(gfid) {
                    fds.sessions.lock().unwrap().remove(&gfid);
                    end_session(&mut sessions, gfid);
                    return Err(e);
                }
            }
        }
        if blame != 0 {
            let old = read_blame(&*fd)?;
            if old | blame != old {
                write_blame(&*fd, old | blame)?;
                self.note_blame(gfid, old | blame);
                tracing::info!(brick = %self.path().display(), %gfid, blame = old | blame, "recorded replicas that missed a change");
            }
        }
        Ok(())
    }

    /// Ends this connection's sessions on `gfids`: an object whose last
    /// session ended and that blames nobody leaves the index.
    pub(super) fn settle(&self, fds: &FdTable, gfids: &[Gfid]) {
        let mut sessions = self.sessions.lock().unwrap();
        for &gfid in gfids {
            if !fds.sessions.lock().unwrap().remove(&gfid) {
                continue;
            }
            if !end_session(&mut sessions, gfid) {
                continue;
            }
            let blamed = match self.resolve(gfid) {
                Ok(fd) => read_blame(&*fd).unwrap_or(1) != 0,
                // Gone: nothing left to heal.
                Err(_) => false,
            };
            if !blamed {
                let _ = self.index_remove(gfid);
            }
        }
    }

    /// A connection ended: its sessions end without settling, so that their
    /// objects stay in the index for heal to compare.
    pub fn disconnect(&self, fds: &FdTable) {
        let mut sessions = self.sessions.lock().unwrap();
        for gfid in fds.sessions.lock().unwrap().drain() {
            end_session(&mut sessions, gfid);
        }
    }

    /// Heal is done with some replicas of `gfid`: drops their blame, and the
    /// index entry once nothing is pending and no session is open.
    pub(super) fn clear(&self, gfid: Gfid, unblame: u32) -> FsResult<u32> {
        let sessions = self.sessions.lock().unwrap();
        let left = match self.resolve(gfid) {
            Ok(fd) => {
                let old = read_blame(&*fd)?;
                if old & unblame != 0 {
                    write_blame(&*fd, old & !unblame)?;
                }
                self.note_blame(gfid, old & !unblame);
                old & !unblame
            }
            Err(e) if e.is(libc::ESTALE) => {
                self.note_blame(gfid, 0);
                0
            }
            Err(e) => return Err(e),
        };
        if left == 0 && !sessions.contains_key(&gfid) {
            self.index_remove(gfid)?;
        }
        Ok(left)
    }

    /// Up to `max` objects of the heal index that need heal: blamed, or
    /// left by a client that went away. An object a connected client is
    /// changing right now is its business (it settles it), not heal's.
    pub(super) fn pending(&self, max: usize) -> FsResult<Vec<crate::core::Gfid>> {
        self.index_entries(max, |g| {
            let live = self.sessions.lock().unwrap().contains_key(&g);
            !live || self.resolve(g).and_then(|fd| read_blame(&*fd)).unwrap_or(0) != 0
        })
    }

    /// Up to `max` objects of the heal index that `keep` accepts.
    fn index_entries(&self, max: usize, mut keep: impl FnMut(Gfid) -> bool) -> FsResult<Vec<Gfid>> {
        let fd = rfs::openat(
            self.pending_dir()?,
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

    /// xxh3 of each `block` bytes of the file from `offset`.
    pub(super) fn checksum(
        &self,
        gfid: Gfid,
        offset: u64,
        block: u32,
        count: u32,
    ) -> FsResult<Vec<u64>> {
        if block == 0 || block > 4 << 20 || count > 1024 {
            return Err(FsError::inval("checksum block or count out of range"));
        }
        let f = self.open_gfid(gfid, libc::O_RDONLY)?;
        let mut buf = vec![0u8; block as usize];
        let mut out = Vec::new();
        for i in 0..count as u64 {
            let at = offset + i * block as u64;
            let mut got = 0;
            while got < buf.len() {
                match f.read_at(&mut buf[got..], at + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if got == 0 {
                break;
            }
            out.push(xxhash_rust::xxh3::xxh3_64(&buf[..got]));
            if got < buf.len() {
                break;
            }
        }
        Ok(out)
    }
}
