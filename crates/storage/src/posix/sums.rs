//! Block checksums of files' data (`storage.checksums`).
//!
//! With checksums on, a brick keeps a 32-bit checksum (xxh3) of every
//! 4 KiB block written to a file, in `.mortar/sums/ab/<gfid>` (4 bytes per
//! block, at 4 times the block's number), and checks every block a read
//! returns against it. A block changed behind the brick's back (bit rot, a
//! stray write to the brick's file) fails the read with EIO, so its bytes
//! never reach the application: a dispersed or replica set reads around
//! the copy and has it healed (docs/storage.md).
//!
//! - A block's checksum is of its 4 KiB with zeros after the file's end,
//!   so a file made longer keeps its sums. 0 means none: blocks never
//!   written (holes), files written before checksums were on, and blocks
//!   whose sum could not be kept are not checked.
//! - The data and its sums change together under a lock of the file (one
//!   of `LOCKS`, by gfid); a read checks without it, and a block that does
//!   not match is read again under it before it is called damaged (a write
//!   may have come between the two reads).
//! - Files that have sums keep them up to date while checksums are off;
//!   files first written while off get none.
//! - An fsync of a file makes its sums durable too, and so does each
//!   synchronous write (`O_SYNC`, `O_DSYNC`). A power loss between a write
//!   that was not synced and its sums reaching the disk may leave blocks
//!   that do not match: they read as damaged, and heal as any damaged
//!   block does.

use super::*;
use mortar_core::options::{Kind, Spec};
use std::sync::atomic::AtomicBool;
use std::sync::{MutexGuard, OnceLock};

pub static CHECKSUMS: Spec = Spec {
    key: "storage.checksums",
    kind: Kind::Bool,
    default: "off",
    help: "Keeps a checksum of every 4 KiB block written to the bricks' files (under .mortar/sums) and checks each block a read returns against it: a block changed behind the brick's back fails the read with EIO instead of being returned, and the client reads the other copies or fragments and has it healed. Set on for every dispersed volume when it is created. Turned off, files that have sums keep them up to date and new files get none.",
};

/// The bytes one checksum covers.
pub const SUM_BLOCK: u64 = 4096;
pub(crate) const SUMS_REL: &str = ".mortar/sums";
/// Sum files kept open (and files known to have none).
const KEPT: usize = 1024;
/// Locks a file's data and sums change under, chosen by gfid.
const LOCKS: usize = 256;

pub(crate) struct Sums {
    on: AtomicBool,
    /// Whether this brick has any sums (`.mortar/sums` exists): while it
    /// has none and checksums are off, nothing is looked for.
    seen: AtomicBool,
    /// `.mortar/sums/ab`, each opened once.
    dirs: Vec<OnceLock<OwnedFd>>,
    /// By gfid: the file's sums, or None if it has none.
    open: Mutex<HashMap<Gfid, Option<Arc<SumFile>>>>,
    locks: Vec<Mutex<()>>,
}

impl Default for Sums {
    fn default() -> Sums {
        Sums {
            on: AtomicBool::new(false),
            seen: AtomicBool::new(false),
            dirs: (0..256).map(|_| OnceLock::new()).collect(),
            open: Mutex::default(),
            locks: (0..LOCKS).map(|_| Mutex::new(())).collect(),
        }
    }
}

/// One file's sums, and the file opened by the brick for reading the
/// rest of a block a write covers in part.
pub(crate) struct SumFile {
    sums: File,
    data: OnceLock<File>,
}

/// The checksum of one block (up to `SUM_BLOCK` bytes: zeros after); never 0.
fn sum_of(block: &[u8]) -> u32 {
    let full = if block.len() == SUM_BLOCK as usize {
        xxhash_rust::xxh3::xxh3_64(block)
    } else {
        let mut b = [0u8; SUM_BLOCK as usize];
        b[..block.len()].copy_from_slice(block);
        xxhash_rust::xxh3::xxh3_64(&b)
    };
    (full as u32).max(1)
}

/// The first block of `data` (read at block `first`) whose recorded sum
/// it does not match.
fn damaged(s: &SumFile, first: u64, data: &[u8]) -> FsResult<Option<u64>> {
    let b = SUM_BLOCK as usize;
    let mut raw = vec![0u8; data.len().div_ceil(b) * 4];
    read_full(&s.sums, &mut raw, first * 4)?;
    for (i, block) in data.chunks(b).enumerate() {
        let want = u32::from_le_bytes(raw[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        if want != 0 && sum_of(block) != want {
            return Ok(Some(first + i as u64));
        }
    }
    Ok(None)
}

impl Posix {
    /// Follows `storage.checksums`.
    pub fn set_checksums(&self, on: bool) {
        self.sums.on.store(on, Ordering::Relaxed);
    }

    /// Learns whether the brick has sums already (at its start).
    pub(crate) fn look_for_sums(&self) {
        let there = rfs::statat(&self.root, SUMS_REL, AtFlags::SYMLINK_NOFOLLOW).is_ok();
        self.sums.seen.store(there, Ordering::Relaxed);
    }

    /// The lock `gfid`'s data and sums change under.
    pub(crate) fn sums_lock(&self, gfid: Gfid) -> MutexGuard<'_, ()> {
        self.sums.locks[gfid.0[15] as usize % LOCKS].lock().unwrap()
    }

    /// The sums of `gfid`, made first if checksums are on and `make`; None
    /// if it has none.
    pub(crate) fn sum_file(&self, gfid: Gfid, make: bool) -> FsResult<Option<Arc<SumFile>>> {
        let make = make && self.sums.on.load(Ordering::Relaxed);
        if !make && !self.sums.seen.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if let Some(s) = self.sums.open.lock().unwrap().get(&gfid) {
            if s.is_some() || !make {
                return Ok(s.clone());
            }
        }
        let (dir, name) = handles::hashed_dir(&self.root, &self.sums.dirs, SUMS_REL, gfid)?;
        let open = |more: OFlags| {
            rfs::openat2(
                dir,
                name.as_str(),
                OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOFOLLOW | more,
                // (openat2 takes a mode only to create)
                match more.contains(OFlags::CREATE) {
                    true => Mode::from_raw_mode(0o600),
                    false => Mode::empty(),
                },
                beneath() | ResolveFlags::NO_SYMLINKS,
            )
        };
        let opened = match open(OFlags::empty()) {
            Ok(f) => Some(f),
            Err(rustix::io::Errno::NOENT) if make => {
                // Only for a file with a name: the sums of one that has
                // none left would never be removed.
                self.exists(gfid)?;
                self.sums.seen.store(true, Ordering::Relaxed);
                Some(open(OFlags::CREATE)?)
            }
            Err(rustix::io::Errno::NOENT) => None,
            Err(e) => return Err(e.into()),
        };
        let s = opened.map(|f| {
            Arc::new(SumFile {
                sums: File::from(f),
                data: OnceLock::new(),
            })
        });
        let mut open = self.sums.open.lock().unwrap();
        if open.len() >= KEPT {
            open.clear();
        }
        // Sums found win over "none" learnt meanwhile by another thread.
        let kept = open.entry(gfid).or_insert(None);
        if s.is_some() {
            *kept = s.clone();
        }
        Ok(kept.clone())
    }

    /// Block `b` of `gfid` as it is now (short at the file's end).
    fn block_now(&self, s: &SumFile, gfid: Gfid, b: u64) -> FsResult<Vec<u8>> {
        let f = match s.data.get() {
            Some(f) => f,
            None => {
                let _ = s.data.set(self.open_gfid_as_brick(gfid, libc::O_RDONLY)?);
                s.data.get().expect("set just now")
            }
        };
        let mut buf = vec![0u8; SUM_BLOCK as usize];
        let n = read_full(f, &mut buf, b * SUM_BLOCK)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Records the sums of the blocks `data`, just written at `offset`,
    /// touches (under `sums_lock`). A sum that cannot be worked out is
    /// recorded as none.
    pub(crate) fn record_sums(&self, s: &SumFile, gfid: Gfid, offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = offset + data.len() as u64;
        let first = offset / SUM_BLOCK;
        let mut out = Vec::with_capacity(((end - 1) / SUM_BLOCK - first + 1) as usize * 4);
        for b in first..=(end - 1) / SUM_BLOCK {
            let (start, stop) = (b * SUM_BLOCK, (b + 1) * SUM_BLOCK);
            let sum = if start >= offset && stop <= end {
                sum_of(&data[(start - offset) as usize..(stop - offset) as usize])
            } else {
                self.block_now(s, gfid, b).map(|v| sum_of(&v)).unwrap_or(0)
            };
            out.extend_from_slice(&sum.to_le_bytes());
        }
        if let Err(e) = s.sums.write_all_at(&out, first * 4) {
            tracing::warn!(brick = %self.path.display(), %gfid, "cannot record checksums: {e}");
        }
    }

    /// `gfid` was cut (or made longer) to `size` bytes (under `sums_lock`):
    /// the sums after its end go, and the block the end cuts is summed anew.
    pub(crate) fn cut_sums(&self, gfid: Gfid, size: u64) {
        let Ok(Some(s)) = self.sum_file(gfid, false) else {
            return;
        };
        let kept = size.div_ceil(SUM_BLOCK) * 4;
        if s.sums.metadata().map(|m| m.len() > kept).unwrap_or(true) {
            let _ = s.sums.set_len(kept);
        }
        if !size.is_multiple_of(SUM_BLOCK) {
            let b = size / SUM_BLOCK;
            let sum = self.block_now(&s, gfid, b).map(|v| sum_of(&v)).unwrap_or(0);
            let _ = s.sums.write_all_at(&sum.to_le_bytes(), b * 4);
        }
    }

    /// Bytes `offset..offset + len` of `gfid` changed other than by a
    /// write (an allocation that zeroes or moves them), under `sums_lock`:
    /// their blocks are no longer checked (`all_after`: nor any after).
    pub(crate) fn forget_sums(&self, gfid: Gfid, offset: u64, len: u64, all_after: bool) {
        let Ok(Some(s)) = self.sum_file(gfid, false) else {
            return;
        };
        let first = offset / SUM_BLOCK;
        let end = (offset.saturating_add(len)).div_ceil(SUM_BLOCK);
        let punched = !all_after
            && rfs::fallocate(
                &s.sums,
                rfs::FallocateFlags::PUNCH_HOLE | rfs::FallocateFlags::KEEP_SIZE,
                first * 4,
                (end - first) * 4,
            )
            .is_ok();
        if !punched {
            let _ = s
                .sums
                .set_len((first * 4).min(s.sums.metadata().map(|m| m.len()).unwrap_or(0)));
        }
    }

    /// Makes `gfid`'s sums durable (at an fsync of the file, or a
    /// synchronous write).
    pub(crate) fn sync_sums(&self, gfid: Gfid) -> FsResult<()> {
        if let Some(s) = self.sum_file(gfid, false)? {
            rfs::fdatasync(&s.sums)?;
        }
        Ok(())
    }

    /// `gfid` has no name left: its sums go.
    pub(crate) fn drop_sums(&self, gfid: Gfid) {
        if !self.sums.seen.load(Ordering::Relaxed) {
            return;
        }
        self.sums.open.lock().unwrap().remove(&gfid);
        if let Ok((dir, name)) = handles::hashed_dir(&self.root, &self.sums.dirs, SUMS_REL, gfid) {
            let _ = rfs::unlinkat(dir, name.as_str(), AtFlags::empty());
        }
    }

    /// Checks the blocks of `data`, read from `gfid` at block `first`
    /// through `reread` (which reads them again), against their sums: EIO,
    /// saying which block, if one does not match when read again under the
    /// file's lock.
    pub(crate) fn check_sums(
        &self,
        s: &SumFile,
        gfid: Gfid,
        first: u64,
        data: &mut Vec<u8>,
        reread: impl Fn(&mut Vec<u8>) -> FsResult<()>,
    ) -> FsResult<()> {
        if damaged(s, first, data)?.is_none() {
            return Ok(());
        }
        let _held = self.sums_lock(gfid);
        reread(data)?;
        let Some(b) = damaged(s, first, data)? else {
            return Ok(());
        };
        tracing::error!(brick = %self.path.display(), %gfid, block = b, "bytes {}..{} do not match their checksum: changed behind the brick's back; read refused", b * SUM_BLOCK, (b + 1) * SUM_BLOCK);
        Err(FsError::new(
            libc::EIO,
            format!(
                "{gfid}: bytes {}..{} on brick {} do not match their checksum (damaged)",
                b * SUM_BLOCK,
                (b + 1) * SUM_BLOCK,
                self.path.display()
            ),
        ))
    }
}
