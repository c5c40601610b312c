//! File data and listings: opening by gfid, reads and writes through a
//! connection's handles (or an anonymous one), directory listings.

use super::sums::SUM_BLOCK;
use super::*;

/// The open flags a brick passes on from a client's open. O_DIRECT is
/// passed on only under `performance.strict-o-direct`: else the brick goes
/// through its page cache (see docs/semantics.md). Reads never touch atime
/// (O_NOATIME): copies would differ, depending on which one served the
/// read (docs/semantics.md).
const OPEN_KEEP: i32 =
    libc::O_ACCMODE | libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC | libc::O_TRUNC;

/// Opens with O_NOATIME where the opener may ask it (the object's owner,
/// or root), else without.
fn no_atime(
    flags: OFlags,
    open: impl Fn(OFlags) -> rustix::io::Result<OwnedFd>,
) -> rustix::io::Result<OwnedFd> {
    match open(flags | OFlags::NOATIME) {
        Err(rustix::io::Errno::PERM) => open(flags),
        r => r,
    }
}

impl Posix {
    pub(crate) fn open_file(
        &self,
        cx: &Ctx,
        fds: &FdTable,
        gfid: Gfid,
        flags: i32,
    ) -> FsResult<Reply> {
        let f = self.open_gfid(cx, gfid, flags)?;
        if flags & libc::O_TRUNC != 0 {
            let _held = self.sums_lock(gfid);
            self.cut_sums(gfid, &f, 0);
        }
        Ok(Reply::Opened {
            fh: fds.insert(Handle::File(f, gfid, Some(self.open.mark(gfid)), cx.uid)),
        })
    }

    /// The open file behind `fh`, or for `ANON_FH` the file `gfid` opened
    /// read-only on the connection's behalf (by the caller `cx`, or through
    /// a handle the caller holds open on it on this connection).
    pub(crate) fn file_for(
        &self,
        cx: &Ctx,
        fds: &FdTable,
        gfid: Gfid,
        fh: u64,
    ) -> FsResult<Arc<Handle>> {
        if fh != ANON_FH {
            return fds.file(fh);
        }
        // The connection's anonymous handle, if this caller opened it (a
        // connection serves many users).
        let mine = |h: &Arc<Handle>| matches!(&**h, Handle::File(.., opener) if *opener == cx.uid);
        if let Some(h) = fds.anon.lock().unwrap().get(&gfid).filter(|h| mine(h)) {
            return Ok(h.clone());
        }
        let f = match self.open_gfid(cx, gfid, libc::O_RDONLY) {
            Ok(f) => f,
            // No name left, or no right to open it now (a file opened, then
            // its mode changed), but open on this connection: read through
            // that, as through the descriptor a local process would hold.
            Err(e) if e.is(libc::ESTALE) || e.is(libc::EACCES) => {
                return match fds.open_by_gfid(gfid) {
                    Some(h) if mine(&h) => Ok(h),
                    _ => Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let h = Arc::new(Handle::File(f, gfid, None, cx.uid));
        if !fds
            .anon_known
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            let mut tables = self.anon_tables.lock().unwrap();
            tables.retain(|t| t.strong_count() > 0);
            tables.push(Arc::downgrade(&fds.anon));
        }
        let mut anon = fds.anon.lock().unwrap();
        if anon.len() >= ANON_MAX {
            anon.clear();
        }
        anon.insert(gfid, h.clone());
        Ok(h)
    }

    /// Opens file `gfid` for `cx`: its right to, as the kernel checks it.
    pub(crate) fn open_gfid(&self, cx: &Ctx, gfid: Gfid, flags: i32) -> FsResult<File> {
        if !identity::switches(cx) {
            return self.open_gfid_as_brick(gfid, flags);
        }
        // The caller cannot search `.mortar/`: the object is reached by the
        // brick, and opened again through its descriptor by the caller.
        let fd = self.resolve(gfid)?;
        must_be_file(FileKind::from_mode(rfs::fstat(&*fd)?.st_mode))?;
        let oflags = self.brick_flags(flags, OPEN_KEEP);
        let f = as_caller(cx, || {
            Ok(no_atime(oflags | OFlags::CLOEXEC, |o| {
                rfs::openat(rfs::CWD, proc_path(&*fd), o, Mode::empty())
            })?)
        })?;
        Ok(File::from(f))
    }

    pub(super) fn open_gfid_as_brick(&self, gfid: Gfid, flags: i32) -> FsResult<File> {
        let (idx, file) = self.index_dir(gfid)?;
        // The type first, through the handle (an object's never changes):
        // a FIFO, socket or device named by a hostile request is never
        // opened (a FIFO's open would hold the brick's thread).
        match rfs::statat(idx, file.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            // A directory's handle is a symlink.
            Ok(st) if FileKind::from_mode(st.st_mode) == FileKind::Symlink => {
                return Err(FsError::errno(libc::EISDIR))
            }
            Ok(st) => must_be_file(FileKind::from_mode(st.st_mode))?,
            Err(rustix::io::Errno::NOENT) => return Err(FsError::errno(libc::ESTALE)),
            Err(e) => return Err(e.into()),
        }
        let oflags = self.brick_flags(flags, OPEN_KEEP);
        let f = rfs::openat2(
            idx,
            file.as_str(),
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
        Ok(File::from(f))
    }

    pub(crate) fn read(
        &self,
        cx: &Ctx,
        fds: &FdTable,
        gfid: Gfid,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> FsResult<Reply> {
        // A slow disk, for tests: `posix-read:<brick dir>=sleep(ms)`.
        fail::fail_point!(self.fail_point_name("read").as_str());
        let h = self.file_for(cx, fds, gfid, fh)?;
        let f = as_file(&h);
        let Some(sums) = self.sum_file(gfid, false, f).unwrap_or_else(|e| {
            tracing::warn!(brick = %self.path.display(), %gfid, "cannot open checksums: {e}");
            None
        }) else {
            let mut buf = vec![0u8; size as usize];
            let got = self.read_into(f, gfid, &mut buf, offset)?;
            buf.truncate(got);
            return Ok(Reply::Data(bytes::Bytes::from(buf)));
        };
        if offset.saturating_add(size as u64) > i64::MAX as u64 {
            return Err(FsError::inval("a read past the largest file offset"));
        }
        // Whole blocks, to check them against their sums.
        let start = offset / SUM_BLOCK * SUM_BLOCK;
        let end = (offset + size as u64).div_ceil(SUM_BLOCK) * SUM_BLOCK;
        let read = |buf: &mut Vec<u8>| -> FsResult<()> {
            buf.resize((end - start) as usize, 0);
            let got = self.read_into(f, gfid, buf, start)?;
            buf.truncate(got);
            Ok(())
        };
        let mut buf = Vec::new();
        read(&mut buf)?;
        self.check_sums(&sums, gfid, f, start / SUM_BLOCK, &mut buf, read)?;
        let from = ((offset - start) as usize).min(buf.len());
        let to = (from + size as usize).min(buf.len());
        Ok(Reply::Data(bytes::Bytes::from(buf).slice(from..to)))
    }

    /// Reads into `buf` at `offset` of `f` (file `gfid`) until it is full
    /// or the file ends; the bytes read.
    fn read_into(&self, f: &File, gfid: Gfid, buf: &mut [u8], offset: u64) -> FsResult<usize> {
        Ok(match read_full(f, buf, offset) {
            // An O_DIRECT file (`performance.strict-o-direct`) wants an
            // aligned buffer, and an aligned offset and size: read into one,
            // or else through the page cache after all.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let mut aligned = Aligned::new(buf.len());
                match read_full(f, aligned.as_mut(), offset) {
                    Ok(n) => {
                        buf.copy_from_slice(aligned.as_mut());
                        n
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        read_full(&self.open_gfid_as_brick(gfid, libc::O_RDONLY)?, buf, offset)?
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            r => r?,
        })
    }

    pub(crate) fn write(
        &self,
        cx: &Ctx,
        fds: &FdTable,
        gfid: Gfid,
        fh: u64,
        offset: u64,
        data: &[u8],
        (grow, reserve): (u64, bool),
    ) -> FsResult<Reply> {
        // A disk slow on large writes, for tests:
        // `posix-large-write:<brick dir>=sleep(ms)` (or `return`: EIO).
        // Only writes of more than 64 KiB: smaller ones run on the
        // brick's event loop, which a sleep there would stop whole.
        fail::fail_point!(
            self.fail_point_name("large-write").as_str(),
            data.len() > 64 << 10,
            |_| Err(FsError::errno(libc::EIO))
        );
        // Any write (`posix-write:<brick dir>`): a small one stops the
        // brick's event loop while it sleeps (with a process per brick,
        // only that brick).
        fail::fail_point!(self.fail_point_name("write").as_str(), |_| Err(
            FsError::errno(libc::EIO)
        ));
        let h = self.file_for(cx, fds, gfid, fh)?;
        let f = as_file(&h);
        if !reserve {
            self.room.take(&self.root, data.len() as u64)?;
        }
        // (An empty write, which only sets the size, makes no sums.)
        let sums = self
            .sum_file(gfid, !data.is_empty(), f)
            .unwrap_or_else(|e| {
                tracing::warn!(brick = %self.path.display(), %gfid, "cannot keep checksums: {e}");
                None
            });
        let _held = sums.as_ref().map(|_| self.sums_lock(gfid));
        let flags = match &sums {
            Some(_) => rfs::fcntl_getfl(f)?,
            None => OFlags::empty(),
        };
        // Where the bytes land: at the end, for a file opened to append.
        let at = match flags.contains(OFlags::APPEND) {
            true => f.metadata()?.len(),
            false => offset,
        };
        // Written in pieces: measured on this project's machines, extending a
        // file by one 1 MiB pwrite costs several times more than by eight of
        // 128 KiB (docs/benchmarks.md).
        let write_all = |f: &File, data: &[u8]| -> std::io::Result<()> {
            for (i, piece) in data.chunks(WRITE_PIECE).enumerate() {
                f.write_all_at(piece, offset + (i * WRITE_PIECE) as u64)?;
            }
            Ok(())
        };
        let written = (|| -> FsResult<()> {
            match write_all(f, data) {
                // An O_DIRECT file (`performance.strict-o-direct`): from an
                // aligned buffer, or if the offset or size is not aligned,
                // through the page cache after all.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    let mut aligned = Aligned::new(data.len());
                    aligned.as_mut().copy_from_slice(data);
                    match write_all(f, aligned.as_mut()) {
                        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                            write_all(&self.open_gfid_as_brick(gfid, libc::O_WRONLY)?, data)?
                        }
                        r => r?,
                    }
                }
                // Files unlinked just before may still hold their blocks.
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && reaper::drain() => {
                    write_all(f, data)?
                }
                r => r?,
            }
            Ok(())
        })();
        if let Some(s) = &sums {
            match &written {
                Ok(()) => {
                    self.record_sums(s, gfid, f, at, data);
                    // A file opened for synchronous writes: its sums too.
                    if flags.intersects(OFlags::SYNC | OFlags::DSYNC) {
                        self.sync_sums(gfid, f)?;
                    }
                }
                // Some of it may have been written: those blocks are no
                // longer checked.
                Err(_) => self.forget_sums(gfid, f, (at, data.len() as u64), false),
            }
        }
        written?;
        if grow > 0 {
            lengthen(f, gfid, grow)?;
        }
        // The attributes after it, as a getattr would answer them.
        let after = || -> FsResult<Attr> {
            let mut a = attr_of(&rfs::fstat(f)?, gfid);
            a.blame = attrs::read_open_blame(f)?;
            a.linkto = attrs::read_linkto(f, &a)?;
            Ok(a)
        };
        Ok(Reply::Written(data.len() as u32, after().ok()))
    }

    pub(crate) fn opendir(&self, cx: &Ctx, fds: &FdTable, gfid: Gfid) -> FsResult<Reply> {
        let dir = self.resolve_dir(gfid)?;
        let names = Arc::new(as_caller(cx, || Self::list_dir(&dir, gfid))?);
        let listing = Mutex::new(Listing { names, fresh: true });
        Ok(Reply::Opened {
            fh: fds.insert(Handle::Dir(listing, dir, gfid)),
        })
    }

    /// The names in a directory, with their types (the brick's own
    /// directory left out of the root).
    pub(crate) fn list_dir(dir: &OwnedFd, gfid: Gfid) -> FsResult<Vec<(Vec<u8>, FileKind)>> {
        // Through the descriptor, not as "." inside it: listing takes the
        // right to read a directory, not to search it.
        let fd = no_atime(OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, |o| {
            rfs::openat(rfs::CWD, proc_path(dir), o, Mode::empty())
        })?;
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

    /// Entries from `offset` of a directory listing; `ANON_FH` at offset 0
    /// lists the directory without a handle kept, unless more than one
    /// batch is left (`Reply::Listed`).
    pub(crate) fn readdir(
        &self,
        cx: &Ctx,
        fds: &FdTable,
        gfid: Gfid,
        fh: u64,
        offset: u64,
        plus: bool,
    ) -> FsResult<Reply> {
        if fh == ANON_FH {
            if offset != 0 {
                return Err(FsError::new(
                    libc::EBADF,
                    "a listing without a handle starts at offset 0",
                ));
            }
            let dir = self.resolve_dir(gfid)?;
            let names = Arc::new(as_caller(cx, || Self::list_dir(&dir, gfid))?);
            let (out, end) = self.entries(&names, gfid, 0, plus)?;
            let more = (end < names.len()).then(|| {
                let listing = Mutex::new(Listing {
                    names,
                    fresh: false,
                });
                fds.insert(Handle::Dir(listing, dir, gfid))
            });
            return Ok(Reply::Listed(out, more));
        }
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
        Ok(Reply::Entries(self.entries(&names, gfid, offset, plus)?.0))
    }

    /// A batch of `names` from `offset` as entries (with attributes for
    /// readdirplus); names gone since the listing was taken are left out,
    /// but a batch is empty only at the end. Also the offset after it.
    fn entries(
        &self,
        names: &[(Vec<u8>, FileKind)],
        gfid: Gfid,
        offset: u64,
        plus: bool,
    ) -> FsResult<(Vec<DirEntry>, usize)> {
        let dir = if plus {
            Some(self.resolve_dir(gfid)?)
        } else {
            None
        };
        let mut at = (offset as usize).min(names.len());
        let mut out = Vec::new();
        while out.is_empty() && at < names.len() {
            let end = (at + READDIR_BATCH).min(names.len());
            for (i, (n, kind)) in names.iter().enumerate().take(end).skip(at) {
                let attr = match (&dir, Name::new(n.clone())) {
                    // The listing was the caller's to read; the entries'
                    // attributes come with it, read through their
                    // descriptors (this runs on the blocking pool).
                    (Some(d), Ok(name)) => {
                        match self.lookup_via(&Ctx::root(), d, gfid, &name, Via::Proc) {
                            Ok((_, a)) => Some(a),
                            // Removed since the listing was taken.
                            Err(e) if e.is(libc::ENOENT) => continue,
                            Err(_) => None,
                        }
                    }
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
            at = end;
        }
        Ok((out, at))
    }

    /// xxh3 of each `block` bytes of the file from `offset`.
    pub(crate) fn checksum(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        offset: u64,
        block: u32,
        count: u32,
    ) -> FsResult<Vec<u64>> {
        if block == 0 || block > 4 << 20 || count > 1024 {
            return Err(FsError::inval("checksum block or count out of range"));
        }
        // Sums tell of the data: the caller must be able to read it.
        let f = self.open_gfid(cx, gfid, libc::O_RDONLY)?;
        let mut buf = vec![0u8; block as usize];
        let mut out = Vec::new();
        for i in 0..count as u64 {
            let got = read_full(&f, &mut buf, offset + i * block as u64)?;
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

/// The alignment O_DIRECT wants of a buffer (a page covers every block
/// size a brick's file system uses).
const DIRECT_ALIGN: usize = 4096;

/// A buffer whose start is `DIRECT_ALIGN`-aligned, for O_DIRECT I/O: a
/// slice of a larger vector, so that no unsafe allocation is needed.
struct Aligned {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let raw = vec![0u8; len + DIRECT_ALIGN];
        let start = raw.as_ptr().align_offset(DIRECT_ALIGN);
        Aligned { raw, start, len }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

impl Posix {
    pub(crate) fn fsync(
        &self,
        cx: &Ctx,
        fds: &FdTable,
        gfid: Gfid,
        fh: u64,
        datasync: bool,
    ) -> FsResult<Reply> {
        let h = self.file_for(cx, fds, gfid, fh)?;
        if datasync {
            rfs::fdatasync(as_file(&h))?;
        } else {
            rfs::fsync(as_file(&h))?;
        }
        // Durable data whose sums were lost would read as damaged.
        self.sync_sums(gfid, as_file(&h))?;
        Ok(Reply::Ok)
    }

    pub(crate) fn fallocate(
        &self,
        cx: &Ctx,
        fds: &FdTable,
        gfid: Gfid,
        fh: u64,
        mode: i32,
        (offset, len): (u64, u64),
    ) -> FsResult<Reply> {
        let h = self.file_for(cx, fds, gfid, fh)?;
        if mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_COLLAPSE_RANGE) == 0 {
            self.room.take(&self.root, len)?;
        }
        let moves = libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE;
        let zeroes = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE | moves;
        let _held = (mode & zeroes != 0).then(|| self.sums_lock(gfid));
        let done = rfs::fallocate(
            as_file(&h),
            rfs::FallocateFlags::from_bits_retain(mode as u32),
            offset,
            len,
        );
        if mode & zeroes != 0 {
            self.forget_sums(gfid, as_file(&h), (offset, len), mode & moves != 0);
        }
        done?;
        Ok(Reply::Ok)
    }

    /// The next data or hole at or after `offset` (`SEEK_DATA`, `SEEK_HOLE`).
    pub(crate) fn lseek(
        &self,
        cx: &Ctx,
        fds: &FdTable,
        gfid: Gfid,
        fh: u64,
        offset: u64,
        whence: i32,
    ) -> FsResult<Reply> {
        let h = self.file_for(cx, fds, gfid, fh)?;
        let pos = match whence {
            libc::SEEK_DATA => rfs::SeekFrom::Data(offset),
            libc::SEEK_HOLE => rfs::SeekFrom::Hole(offset),
            _ => return Err(FsError::errno(libc::EINVAL)),
        };
        Ok(Reply::Offset(rfs::seek(as_file(&h), pos)?))
    }
}

/// Lengthens `f` to at least `size` bytes, never shortening it: two writes
/// that each lengthen the file, carried out together, leave it as long as
/// the longer asks whatever their order (the length is looked at and set
/// under a lock of the file).
fn lengthen(f: &File, gfid: Gfid, size: u64) -> FsResult<()> {
    static LOCKS: [Mutex<()>; 64] = [const { Mutex::new(()) }; 64];
    let _held = LOCKS[gfid.0[15] as usize % LOCKS.len()].lock().unwrap();
    if f.metadata()?.len() < size {
        f.set_len(size)?;
    }
    Ok(())
}
