//! Attributes: modes, owners, sizes and times; xattr name rules; statfs.

use super::*;
use mortar_core::changed::{Changed, CHANGED_XATTR};
use mortar_core::fop::{is_distribute_xattr, LINKTO_XATTR, POINTER_PERM};

/// Replica positions a copy knows to have missed changes it has
/// (docs/replication.md); reported with the attributes, kept by the index.
pub const BLAME_XATTR: &str = "trusted.mortar.blame";

/// The set a distribute pointer names: None unless `attr` is a regular
/// file of the pointer mode carrying the linkto xattr (read only where the
/// object's xattr names list it: `full_attr`).
pub(super) fn read_linkto(fd: impl AsFd, attr: &Attr) -> FsResult<Option<u32>> {
    if attr.kind != FileKind::File || attr.perm != POINTER_PERM {
        return Ok(None);
    }
    match get_xattr(fd, LINKTO_XATTR) {
        Ok(v) => Ok(v.try_into().ok().map(u32::from_le_bytes)),
        Err(e) if e.is(libc::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The blame recorded on a copy (0 when none), reached by an `O_PATH`
/// descriptor.
pub fn read_blame(fd: impl AsFd) -> FsResult<u32> {
    blame_of(get_xattr(fd, BLAME_XATTR))
}

/// When a file's retention began and ends (Unix seconds), as
/// `features/worm` records it on each copy.
pub const RETENTION_XATTR: &str = "trusted.mortar.retention";

/// A file's retention record: `(since, until)`, None when it has none.
pub fn read_retention(fd: impl AsFd) -> FsResult<Option<(i64, i64)>> {
    match get_xattr(fd, RETENTION_XATTR) {
        Ok(v) => {
            let text = String::from_utf8_lossy(&v);
            let mut it = text.split_whitespace().map(str::parse::<i64>);
            match (it.next(), it.next()) {
                (Some(Ok(since)), Some(Ok(until))) => Ok(Some((since, until))),
                _ => Err(FsError::new(
                    libc::EIO,
                    "a retention record that does not read",
                )),
            }
        }
        Err(e) if e.is(libc::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Records a file's retention, from `since` to `until` (Unix seconds).
pub fn write_retention(fd: impl AsFd, since: i64, until: i64) -> FsResult<()> {
    let v = format!("{since} {until}");
    set_xattr(fd, RETENTION_XATTR, v.as_bytes(), rfs::XattrFlags::empty())
}

/// The changed ranges recorded on an object (`changed::CHANGED_XATTR`),
/// None when it has no record.
pub fn read_changed(fd: impl AsFd) -> FsResult<Option<Changed>> {
    match get_xattr(fd, CHANGED_XATTR) {
        Ok(v) => Ok(Some(Changed::decode(&v))),
        Err(e) if e.is(libc::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Records `changed` on an object, or with None removes its record.
pub fn write_changed(fd: impl AsFd, changed: Option<&Changed>) -> FsResult<()> {
    match changed {
        Some(c) => set_xattr(fd, CHANGED_XATTR, &c.encode(), rfs::XattrFlags::empty()),
        None => remove_xattr(fd, CHANGED_XATTR),
    }
}

/// `read_blame` of a file open for reading or writing.
pub(crate) fn read_open_blame(f: impl AsFd) -> FsResult<u32> {
    blame_of(get_open_xattr(f, BLAME_XATTR))
}

fn blame_of(got: FsResult<Vec<u8>>) -> FsResult<u32> {
    match got {
        Ok(v) if v.len() == 4 => Ok(u32::from_le_bytes(v.try_into().unwrap())),
        Ok(_) => Err(FsError::new(libc::EIO, "malformed blame xattr")),
        Err(e) if e.is(libc::ENODATA) => Ok(0),
        Err(e) => Err(e),
    }
}

/// Whether mode `new` is `old` with some of its set-id bits cleared and
/// nothing else changed.
fn only_clears_set_id(old: u32, new: u32) -> bool {
    let (old, new) = (old & 0o7777, new & 0o7777);
    new != old && new & !old == 0 && (old & !new) & !0o6000 == 0
}

impl Posix {
    /// Changes attributes as the caller `cx` may (the kernel's ownership
    /// and permission rules).
    pub(crate) fn setattr(
        &self,
        cx: &Ctx,
        fds: &FdTable,
        gfid: Gfid,
        set: &SetAttr,
    ) -> FsResult<Reply> {
        let fd = self.resolve(gfid)?;
        let st = rfs::fstat(&*fd)?;
        let kind = FileKind::from_mode(st.st_mode);
        if set.uid.is_some() || set.gid.is_some() {
            as_caller(cx, || {
                Ok(rfs::chownat(
                    &*fd,
                    "",
                    set.uid.map(rfs::Uid::from_raw),
                    set.gid.map(rfs::Gid::from_raw),
                    AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
                )?)
            })?;
        }
        if let Some(mode) = set.mode {
            if kind != FileKind::Symlink {
                let chmod = || {
                    Ok(rfs::chmodat(
                        rfs::CWD,
                        proc_path(&*fd),
                        Mode::from_raw_mode(mode & 0o7777),
                        AtFlags::empty(),
                    )?)
                };
                match as_caller(cx, chmod) {
                    // A write by someone other than the owner clears the
                    // file's set-id bits: the kernel asks it of a FUSE file
                    // system as a change of mode, by the writer. Whoever may
                    // write the file may have that done.
                    Err(e)
                        if e.is(libc::EPERM)
                            && kind == FileKind::File
                            && only_clears_set_id(st.st_mode, mode)
                            && as_caller(cx, || may_write(fd.as_fd())).is_ok() =>
                    {
                        chmod()?
                    }
                    r => r?,
                }
            }
        }
        if let Some(size) = set.size {
            must_be_file(kind)?;
            let opened = as_caller(cx, || {
                Ok(std::fs::OpenOptions::new()
                    .write(true)
                    .open(proc_path(&*fd))?)
            });
            let _held = self.sums_lock(gfid);
            match opened {
                Ok(f) => {
                    f.set_len(size)?;
                    self.cut_sums(gfid, &f, size);
                }
                // ftruncate of a descriptor open for writing, whatever the
                // mode says now, as a local process may: one the caller
                // opened (a connection serves many users: a mount's, an
                // NFS server's).
                Err(e) if e.is(libc::EACCES) => match fds.writable(gfid, cx.uid) {
                    Some(h) => {
                        as_file(&h).set_len(size)?;
                        self.cut_sums(gfid, as_file(&h), size);
                    }
                    None => return Err(e),
                },
                Err(e) => return Err(e),
            }
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
            as_caller(cx, || {
                Ok(rfs::utimensat(&*fd, "", &times, AtFlags::EMPTY_PATH)?)
            })?;
        }
        Ok(Reply::Attr(self.stat_gfid(gfid)?))
    }

    /// As `check_xattr_name`, for a change: what a brick answers itself is
    /// not stored.
    pub(crate) fn check_xattr_change(cx: &Ctx, name: &str) -> FsResult<()> {
        if name == mortar_core::fop::OPEN_COUNT_XATTR {
            return Err(FsError::new(
                libc::EPERM,
                "answered by the brick, not stored",
            ));
        }
        Self::check_xattr_name(cx, name)
    }

    pub(crate) fn check_xattr_name(cx: &Ctx, name: &str) -> FsResult<()> {
        if name.starts_with(INTERNAL_XATTR_PREFIX) && !is_distribute_xattr(name) {
            return Err(FsError::new(libc::EPERM, "reserved xattr name"));
        }
        // Distribute's are a mount's own bookkeeping, asked as root, and
        // also by a mount whose root is squashed (`server.root-squash`).
        if name.starts_with("trusted.") && cx.uid != 0 && !is_distribute_xattr(name) {
            return Err(FsError::errno(libc::EPERM));
        }
        Ok(())
    }

    /// Changes an xattr of the object open at `fd` as the caller `cx` may.
    /// Distribute's (`trusted.`, which the kernel lets anyone with the
    /// brick's capabilities change) only where the caller may write.
    pub(crate) fn change_xattr_as(
        cx: &Ctx,
        fd: BorrowedFd<'_>,
        name: &str,
        change: impl FnOnce() -> FsResult<()>,
    ) -> FsResult<()> {
        as_caller(cx, || {
            if identity::switches(cx) && is_distribute_xattr(name) {
                may_write(fd)?;
            }
            change()
        })
    }

    pub(crate) fn statfs(&self) -> FsResult<Reply> {
        let s = rfs::fstatvfs(&self.root)?;
        Ok(Reply::StatFs(StatFs {
            bsize: s.f_bsize as u32,
            frsize: s.f_frsize as u32,
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: self.room.available(s.f_bavail, s.f_blocks, s.f_frsize),
            files: s.f_files,
            ffree: s.f_ffree,
            namelen: s.f_namemax as u32,
        }))
    }
}

impl Posix {
    pub(crate) fn setxattr(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        name: &str,
        value: &[u8],
        flags: i32,
    ) -> FsResult<Reply> {
        Self::check_xattr_change(cx, name)?;
        let fd = self.resolve(gfid)?;
        Self::change_xattr_as(cx, fd.as_fd(), name, || {
            set_xattr(
                &*fd,
                name,
                value,
                rfs::XattrFlags::from_bits_retain(flags as u32),
            )
        })?;
        Ok(Reply::Ok)
    }

    /// An xattr's value; `OPEN_COUNT_XATTR`, the handles open on the
    /// object here.
    pub(crate) fn getxattr(&self, cx: &Ctx, gfid: Gfid, name: &str) -> FsResult<Reply> {
        Self::check_xattr_name(cx, name)?;
        if name == mortar_core::fop::OPEN_COUNT_XATTR {
            self.resolve(gfid)?;
            let n = self.open.of(gfid).to_string();
            return Ok(Reply::Xattr(serde_bytes::ByteBuf::from(n.into_bytes())));
        }
        let fd = self.resolve(gfid)?;
        let value = as_caller(cx, || get_xattr(&*fd, name))?;
        Ok(Reply::Xattr(serde_bytes::ByteBuf::from(value)))
    }

    /// The xattr names, as a local file system lists them to the caller,
    /// without the brick's internal ones.
    pub(crate) fn listxattr(&self, cx: &Ctx, gfid: Gfid) -> FsResult<Reply> {
        let fd = self.resolve(gfid)?;
        let buf = list_xattrs(fd.as_fd())?;
        let mut out = Vec::new();
        for name in buf.split(|&c| c == 0).filter(|n| !n.is_empty()) {
            let internal = name.starts_with(INTERNAL_XATTR_PREFIX.as_bytes())
                && !std::str::from_utf8(name).is_ok_and(is_distribute_xattr);
            // As a local file system lists them: `trusted.` names
            // to root only.
            let hidden = identity::switches(cx) && name.starts_with(b"trusted.");
            if !internal && !hidden {
                out.extend_from_slice(name);
                out.push(0);
            }
        }
        Ok(Reply::Xattr(serde_bytes::ByteBuf::from(out)))
    }

    pub(crate) fn removexattr(&self, cx: &Ctx, gfid: Gfid, name: &str) -> FsResult<Reply> {
        Self::check_xattr_change(cx, name)?;
        let fd = self.resolve(gfid)?;
        Self::change_xattr_as(cx, fd.as_fd(), name, || {
            Ok(rfs::removexattr(proc_path(&*fd), name)?)
        })?;
        Ok(Reply::Ok)
    }
}
