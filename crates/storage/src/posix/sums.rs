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
//! - The sums of up to 4 blocks (files, or dispersed fragments, of up to
//!   16 KiB) are kept in an xattr of the file itself (`SUMS_XATTR`), which
//!   ext4 keeps in the inode: a sums file would cost a 4 KiB block for
//!   16 bytes. A file that grows past that moves them to a sums file.
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
/// The xattr that holds the sums of a small file.
pub(crate) const SUMS_XATTR: &str = "trusted.mortar.sums";
/// The most bytes of sums kept in `SUMS_XATTR` (4 blocks): with the gfid's,
/// what fits in a 256-byte ext4 inode (measured: 20 spill to a block).
const INLINE_MAX: u64 = 16;
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
    store: Store,
    data: OnceLock<File>,
}

/// Where a file's sums are.
enum Store {
    /// A sums file of its own, under `.mortar/sums`.
    File(File),
    /// `SUMS_XATTR` of the data file (none yet: no sums).
    Inline,
}

impl SumFile {
    fn new(store: Store) -> Arc<SumFile> {
        Arc::new(SumFile {
            store,
            data: OnceLock::new(),
        })
    }

    /// The sums of a small file, from `data` (its descriptor).
    fn inline(data: &File) -> FsResult<Vec<u8>> {
        match get_open_xattr(data, SUMS_XATTR) {
            Err(e) if e.is(libc::ENODATA) => Ok(Vec::new()),
            r => r,
        }
    }

    /// Reads sums at byte `at` into `buf` (zeros where there are none).
    fn read(&self, data: &File, buf: &mut [u8], at: u64) -> FsResult<()> {
        buf.fill(0);
        match &self.store {
            Store::File(f) => {
                read_full(f, buf, at)?;
            }
            Store::Inline => {
                let v = Self::inline(data)?;
                let at = (at as usize).min(v.len());
                let n = (v.len() - at).min(buf.len());
                buf[..n].copy_from_slice(&v[at..at + n]);
            }
        }
        Ok(())
    }

    /// Writes sums at byte `at` (inline: within `INLINE_MAX`).
    fn write(&self, data: &File, sums: &[u8], at: u64) -> FsResult<()> {
        match &self.store {
            Store::File(f) => Ok(f.write_all_at(sums, at)?),
            Store::Inline => {
                let mut v = Self::inline(data)?;
                let end = at as usize + sums.len();
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[at as usize..end].copy_from_slice(sums);
                set_xattr(data, SUMS_XATTR, &v, rfs::XattrFlags::empty())
            }
        }
    }

    fn len(&self, data: &File) -> FsResult<u64> {
        Ok(match &self.store {
            Store::File(f) => f.metadata()?.len(),
            Store::Inline => Self::inline(data)?.len() as u64,
        })
    }

    /// Keeps the first `len` bytes of sums.
    fn cut(&self, data: &File, len: u64) -> FsResult<()> {
        match &self.store {
            Store::File(f) => Ok(f.set_len(len)?),
            Store::Inline => {
                let mut v = Self::inline(data)?;
                if v.len() as u64 > len {
                    v.truncate(len as usize);
                    set_xattr(data, SUMS_XATTR, &v, rfs::XattrFlags::REPLACE)?;
                }
                Ok(())
            }
        }
    }

    /// Forgets the sums of bytes `at..at + len` (none from then on).
    fn clear(&self, data: &File, at: u64, len: u64) -> FsResult<()> {
        match &self.store {
            Store::File(f) => Ok(rfs::fallocate(
                f,
                rfs::FallocateFlags::PUNCH_HOLE | rfs::FallocateFlags::KEEP_SIZE,
                at,
                len,
            )?),
            Store::Inline => {
                let v = Self::inline(data)?;
                let end = (at.saturating_add(len)).min(v.len() as u64);
                if at < end {
                    self.write(data, &vec![0u8; (end - at) as usize], at)?;
                }
                Ok(())
            }
        }
    }

    /// Makes the sums durable (an inline one with its file's inode).
    fn sync(&self, data: &File) -> FsResult<()> {
        match &self.store {
            Store::File(f) => rfs::fdatasync(f)?,
            Store::Inline => rfs::fsync(data)?,
        }
        Ok(())
    }
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
fn damaged(s: &SumFile, file: &File, first: u64, data: &[u8]) -> FsResult<Option<u64>> {
    let b = SUM_BLOCK as usize;
    let mut raw = vec![0u8; data.len().div_ceil(b) * 4];
    s.read(file, &mut raw, first * 4)?;
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

    /// The sums of `gfid` (open as `file`); None if it has none. With
    /// `make` and checksums on, a file without sums is given (empty) ones.
    pub(crate) fn sum_file(
        &self,
        gfid: Gfid,
        make: bool,
        file: &File,
    ) -> FsResult<Option<Arc<SumFile>>> {
        let make = make && self.sums.on.load(Ordering::Relaxed);
        if !make && !self.sums.seen.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if let Some(s) = self.sums.open.lock().unwrap().get(&gfid) {
            if s.is_some() || !make {
                return Ok(s.clone());
            }
        }
        let s = match self.open_sums(gfid, false)? {
            Some(f) => Some(SumFile::new(Store::File(f))),
            None => match get_open_xattr(file, SUMS_XATTR) {
                Ok(_) => Some(SumFile::new(Store::Inline)),
                Err(e) if e.is(libc::ENODATA) && make => {
                    self.saw_sums()?;
                    Some(SumFile::new(Store::Inline))
                }
                Err(e) if e.is(libc::ENODATA) => None,
                Err(e) => return Err(e),
            },
        };
        Ok(self.keep_sums(gfid, s))
    }

    /// Notes `s` as `gfid`'s sums (sums found win over "none" learnt
    /// meanwhile by another thread); what is now noted.
    fn keep_sums(&self, gfid: Gfid, s: Option<Arc<SumFile>>) -> Option<Arc<SumFile>> {
        let mut open = self.sums.open.lock().unwrap();
        if open.len() >= KEPT {
            open.clear();
        }
        let kept = open.entry(gfid).or_insert(None);
        if s.is_some() {
            *kept = s;
        }
        kept.clone()
    }

    /// This brick has sums from now on: `.mortar/sums` says so at its
    /// next start (`look_for_sums`).
    fn saw_sums(&self) -> FsResult<()> {
        if !self.sums.seen.swap(true, Ordering::Relaxed) {
            match rfs::mkdirat(&self.root, SUMS_REL, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// `gfid`'s sums file (made first if `make`), if it has one.
    fn open_sums(&self, gfid: Gfid, make: bool) -> FsResult<Option<File>> {
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
        match open(OFlags::empty()) {
            Ok(f) => Ok(Some(File::from(f))),
            Err(rustix::io::Errno::NOENT) if make => {
                // Only for a file with a name: the sums of one that has
                // none left would never be removed.
                self.exists(gfid)?;
                self.saw_sums()?;
                Ok(Some(File::from(open(OFlags::CREATE)?)))
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The inline sums of `gfid` (open as `file`) have outgrown its xattr:
    /// they move to a sums file of its own (under `sums_lock`).
    fn outgrow(&self, gfid: Gfid, file: &File) -> FsResult<Arc<SumFile>> {
        let v = SumFile::inline(file)?;
        let f = self.open_sums(gfid, true)?.expect("made");
        f.set_len(0)?;
        f.write_all_at(&v, 0)?;
        let s = SumFile::new(Store::File(f));
        self.sums.open.lock().unwrap().insert(gfid, Some(s.clone()));
        match rfs::fremovexattr(file, SUMS_XATTR) {
            Ok(()) | Err(rustix::io::Errno::NODATA) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(s)
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

    /// Records the sums of the blocks `data`, just written at `offset` of
    /// `gfid` (open as `file`), touches (under `sums_lock`). A sum that
    /// cannot be worked out is recorded as none.
    pub(crate) fn record_sums(
        &self,
        s: &SumFile,
        gfid: Gfid,
        file: &File,
        offset: u64,
        data: &[u8],
    ) {
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
        let recorded = match &s.store {
            Store::Inline if first * 4 + out.len() as u64 > INLINE_MAX => self
                .outgrow(gfid, file)
                .and_then(|s| s.write(file, &out, first * 4)),
            _ => s.write(file, &out, first * 4),
        };
        if let Err(e) = recorded {
            tracing::warn!(brick = %self.path.display(), %gfid, "cannot record checksums: {e}");
        }
    }

    /// `gfid` (open as `file`) was cut (or made longer) to `size` bytes
    /// (under `sums_lock`): the sums after its end go, and the block the
    /// end cuts is summed anew.
    pub(crate) fn cut_sums(&self, gfid: Gfid, file: &File, size: u64) {
        let Ok(Some(s)) = self.sum_file(gfid, false, file) else {
            return;
        };
        let kept = size.div_ceil(SUM_BLOCK) * 4;
        if s.len(file).map(|n| n > kept).unwrap_or(true) {
            let _ = s.cut(file, kept);
        }
        if !size.is_multiple_of(SUM_BLOCK) {
            let b = size / SUM_BLOCK;
            let sum = self.block_now(&s, gfid, b).map(|v| sum_of(&v)).unwrap_or(0);
            if b * 4 < s.len(file).unwrap_or(0) {
                let _ = s.write(file, &sum.to_le_bytes(), b * 4);
            }
        }
    }

    /// Bytes `offset..offset + len` of `gfid` (open as `file`) changed
    /// other than by a write (an allocation that zeroes or moves them),
    /// under `sums_lock`: their blocks are no longer checked (`all_after`:
    /// nor any after).
    pub(crate) fn forget_sums(
        &self,
        gfid: Gfid,
        file: &File,
        (offset, len): (u64, u64),
        all_after: bool,
    ) {
        let Ok(Some(s)) = self.sum_file(gfid, false, file) else {
            return;
        };
        let first = offset / SUM_BLOCK;
        let end = (offset.saturating_add(len)).div_ceil(SUM_BLOCK);
        let cleared = !all_after && s.clear(file, first * 4, (end - first) * 4).is_ok();
        if !cleared {
            let _ = s.cut(file, (first * 4).min(s.len(file).unwrap_or(0)));
        }
    }

    /// Makes `gfid`'s sums durable (at an fsync of `file`, or a
    /// synchronous write).
    pub(crate) fn sync_sums(&self, gfid: Gfid, file: &File) -> FsResult<()> {
        if let Some(s) = self.sum_file(gfid, false, file)? {
            s.sync(file)?;
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
        file: &File,
        first: u64,
        data: &mut Vec<u8>,
        reread: impl Fn(&mut Vec<u8>) -> FsResult<()>,
    ) -> FsResult<()> {
        if damaged(s, file, first, data)?.is_none() {
            return Ok(());
        }
        let _held = self.sums_lock(gfid);
        reread(data)?;
        let Some(b) = damaged(s, file, first, data)? else {
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
