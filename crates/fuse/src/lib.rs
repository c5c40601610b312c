//! The FUSE adapter: a thin layer that turns each kernel request into a
//! `Fop` on the top translator and the answer into a reply or an errno.
//!
//! fuser calls us on its session threads; every request runs there until it
//! would wait (`ops::spawn`), and what waits for a brick goes on on the
//! tokio runtime, so that many requests are served concurrently and the
//! session threads never wait on the network. The only state kept here
//! is the inode table: kernel inode numbers ↔ gfids, with lookup counts so
//! that `forget` frees entries.

pub mod cache;
mod convert;
mod dirs;
pub mod inodes;
pub mod kmount;
mod ops;

use convert::*;
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use inodes::InodeTable;
use mortar_core::fop::{is_distribute_xattr, TimeSet};
use mortar_core::{Attr, Ctx, FileKind, Fop, FsError, Gfid, Name, Reply, SetAttr, Xlator};
use mortar_graph::active::Active;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Virtual xattr (root only, like every `trusted.` name) holding the number
/// of requests this client has sent to bricks.
pub const REQUESTS_XATTR: &str = "trusted.mortar.client.requests";

/// Virtual xattr (root only) holding the client's translator graph: the
/// volume description's version and each translator with its state.
pub const GRAPH_XATTR: &str = "trusted.mortar.client.graph";

/// The kernel's read-ahead window, and so the size of its sequential
/// reads (one request, as the largest write). The mount sets its window
/// to this (`kmount::set_read_ahead`): FUSE leaves it at 128 KiB.
pub const READ_AHEAD: u32 = 1 << 20;

pub struct MortarFs {
    graph: Arc<Active>,
    rt: tokio::runtime::Handle,
    inodes: Arc<InodeTable>,
    inval: Arc<cache::Invalidator>,
}

impl MortarFs {
    pub fn new(graph: Arc<Active>, rt: tokio::runtime::Handle) -> Self {
        let inodes = Arc::new(InodeTable::new());
        MortarFs {
            graph,
            rt,
            inval: cache::Invalidator::new(inodes.clone()),
            inodes,
        }
    }

    /// Turns the bricks' recalls into kernel invalidations (started once
    /// the session exists).
    pub fn invalidator(&self) -> Arc<cache::Invalidator> {
        self.inval.clone()
    }

    /// How long answers to a request arriving now may be cached.
    fn lease(&self) -> cache::Lease {
        cache::Lease::new(&self.graph, &self.inval)
    }

    fn gfid(&self, ino: INodeNo) -> Result<Gfid, Errno> {
        self.inodes.gfid(ino.0).ok_or(Errno::ESTALE)
    }
}

impl Filesystem for MortarFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(READ_AHEAD);
        let _ = config.set_max_background(64);
        // One at a time: a kernel that lacks one still gets the others.
        // FUSE_HANDLE_KILLPRIV is not asked for: the kernel itself then
        // clears set-id bits and capabilities on a write, truncate or
        // fallocate by a process without CAP_FSETID, through SETATTR and
        // REMOVEXATTR, exactly as a local file system does.
        for flag in [
            fuser::InitFlags::FUSE_DO_READDIRPLUS,
            fuser::InitFlags::FUSE_READDIRPLUS_AUTO,
            fuser::InitFlags::FUSE_PARALLEL_DIROPS,
            fuser::InitFlags::FUSE_DONT_MASK,
            // Cached pages are dropped when a refreshed size or mtime shows
            // that the file changed (see FOPEN_KEEP_CACHE in `open_flags`).
            fuser::InitFlags::FUSE_AUTO_INVAL_DATA,
            // POSIX ACLs: the kernel checks them and keeps them in the
            // `system.posix_acl_*` xattrs, which the bricks store as their
            // own file system's ACLs (it inherits default ACLs on create).
            fuser::InitFlags::FUSE_POSIX_ACL,
            // File handles (`name_to_handle_at`, NFS re-export) that stay
            // valid after the kernel forgets the inode (`lookup_self`).
            fuser::InitFlags::FUSE_EXPORT_SUPPORT,
        ] {
            if config.add_capabilities(flag).is_err() {
                tracing::debug!("kernel lacks FUSE capability {flag:?}");
            }
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        if n.as_bytes() == b"." {
            return self.lookup_self(req, parent.0, reply);
        }
        if n.as_bytes() == b".." {
            // The kernel reconnecting a directory found by file handle.
            let fop = self.gfid(parent).map(|gfid| Fop::Parent { gfid });
            return self.entry_op(req, fop, reply);
        }
        let fop = self.gfid(parent).and_then(|p| {
            Ok(Fop::Lookup {
                parent: p,
                name: name(n)?,
            })
        });
        self.entry_op(req, fop, reply)
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if let Some(gfid) = self.inodes.forget(ino.0, nlookup) {
            // Every translator drops what it keeps about the object.
            self.graph.graph().forget(gfid);
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let gfid = match self.gfid(ino) {
            Ok(g) => g,
            Err(e) => return reply.error(e),
        };
        let cx = ctx(req);
        let lease = self.lease();
        let fop = Fop::Getattr { gfid };
        if let Some(r) = self.graph.cached(&cx, &fop) {
            return match r.and_then(Reply::into_attr) {
                Ok(a) => reply.attr(&lease.attr_ttl(&[gfid]), &fuse_attr(ino.0, &a)),
                Err(e) => reply.error(errno(&e)),
            };
        }
        self.spawn(move |g, _| async move {
            match g.call(&cx, fop).await.and_then(Reply::into_attr) {
                Ok(a) => reply.attr(&lease.attr_ttl(&[gfid]), &fuse_attr(ino.0, &a)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let gfid = match self.gfid(ino) {
            Ok(g) => g,
            Err(e) => return reply.error(e),
        };
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time_set),
            mtime: mtime.map(time_set),
        };
        let cx = ctx(req);
        let lease = self.lease();
        self.spawn(move |g, _| async move {
            match g
                .call(&cx, Fop::Setattr { gfid, set })
                .await
                .and_then(Reply::into_attr)
            {
                Ok(a) => reply.attr(&lease.attr_ttl(&[gfid]), &fuse_attr(ino.0, &a)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let gfid = match self.gfid(ino) {
            Ok(g) => g,
            Err(e) => return reply.error(e),
        };
        let cx = ctx(req);
        self.spawn(move |g, _| async move {
            match g.call(&cx, Fop::Readlink { gfid }).await {
                Ok(Reply::Data(d)) => reply.data(&d),
                Ok(_) => reply.error(Errno::EIO),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let fop = self.gfid(parent).and_then(|p| {
            Ok(Fop::Mknod {
                parent: p,
                name: name(n)?,
                gfid: Gfid::random(),
                mode,
                umask,
                rdev: rdev as u64,
                linkto: None,
            })
        });
        self.entry_op(req, fop, reply)
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let fop = self.gfid(parent).and_then(|p| {
            Ok(Fop::Mkdir {
                parent: p,
                name: name(n)?,
                gfid: Gfid::random(),
                mode,
                umask,
            })
        });
        self.entry_op(req, fop, reply)
    }

    fn unlink(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let fop = self.gfid(parent).and_then(|p| {
            Ok(Fop::Unlink {
                parent: p,
                name: name(n)?,
            })
        });
        self.empty_op(req, fop, reply)
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let fop = self.gfid(parent).and_then(|p| {
            Ok(Fop::Rmdir {
                parent: p,
                name: name(n)?,
            })
        });
        self.empty_op(req, fop, reply)
    }

    fn symlink(&self, req: &Request, parent: INodeNo, n: &OsStr, target: &Path, reply: ReplyEntry) {
        let fop = self.gfid(parent).and_then(|p| {
            Ok(Fop::Symlink {
                parent: p,
                name: name(n)?,
                gfid: Gfid::random(),
                target: serde_bytes::ByteBuf::from(target.as_os_str().as_bytes().to_vec()),
            })
        });
        self.entry_op(req, fop, reply)
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let args = (|| {
            Ok((
                self.gfid(parent)?,
                name(n)?,
                self.gfid(newparent)?,
                name(newname)?,
            ))
        })();
        let (parent, name, newparent, newname) = match args {
            Ok(a) => a,
            Err(e) => return reply.error(e),
        };
        // RENAME_WHITEOUT (overlayfs): the whiteout left at the old name
        // is made here as an ordinary replicated mknod (a 0/0 character
        // device) with a gfid of its own. Bricks refuse the flag: each would
        // make a whiteout without a gfid, and give it a different one.
        let whiteout = (flags.bits() & libc::RENAME_WHITEOUT != 0).then(|| Fop::Mknod {
            parent,
            name: name.clone(),
            gfid: Gfid::random(),
            mode: libc::S_IFCHR,
            umask: 0,
            rdev: 0,
            linkto: None,
        });
        let fop = Fop::Rename {
            parent,
            name,
            newparent,
            newname,
            flags: flags.bits() & !libc::RENAME_WHITEOUT,
        };
        let cx = ctx(req);
        self.spawn(move |g, _| async move {
            let mut res = g.call(&cx, fop).await;
            if let (Ok(_), Some(w)) = (&res, whiteout) {
                res = g.call(&cx, w).await;
            }
            match res {
                Ok(_) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let fop = (|| {
            Ok(Fop::Link {
                gfid: self.gfid(ino)?,
                newparent: self.gfid(newparent)?,
                newname: name(newname)?,
            })
        })();
        self.entry_op(req, fop, reply)
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let gfid = match self.gfid(ino) {
            Ok(g) => g,
            Err(e) => return reply.error(e),
        };
        let cx = ctx(req);
        let flags = flags.0;
        self.spawn(move |g, _| async move {
            match g
                .call(&cx, Fop::Open { gfid, flags })
                .await
                .and_then(Reply::into_fh)
            {
                Ok(fh) => reply.opened(FileHandle(fh), open_flags(flags)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let gfid = match self.gfid(ino) {
            Ok(g) => g,
            Err(e) => return reply.error(e),
        };
        let cx = ctx(req);
        let lease = self.lease();
        let inval = self.inval.clone();
        self.spawn(move |g, _| async move {
            match g
                .call(
                    &cx,
                    Fop::Read {
                        gfid,
                        fh: fh.0,
                        offset,
                        size,
                    },
                )
                .await
            {
                Ok(Reply::Data(d)) => {
                    reply.data(&d);
                    if lease.stale(&[gfid]) {
                        // Read before a recall reached us: the pages it
                        // filled may be older than the change.
                        inval.inode(ino.0);
                    }
                }
                Ok(_) => reply.error(Errno::EIO),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let gfid = match self.gfid(ino) {
            Ok(g) => g,
            Err(e) => return reply.error(e),
        };
        let cx = ctx(req);
        let data = bytes::Bytes::copy_from_slice(data);
        self.spawn(move |g, _| async move {
            match g
                .call(
                    &cx,
                    Fop::Write {
                        gfid,
                        fh: fh.0,
                        offset,
                        data,
                        grow: 0,
                        reserve: false,
                    },
                )
                .await
            {
                Ok(Reply::Written(n, _)) => reply.written(n),
                Ok(_) => reply.error(Errno::EIO),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let fop = self.gfid(ino).map(|gfid| Fop::Flush { gfid, fh: fh.0 });
        if !mortar_core::fop::is_ahead(fh.0) {
            return self.empty_op(req, fop, reply);
        }
        // A file created ahead of the bricks: the kernel's attributes,
        // guessed with the create, go before the close returns, so that
        // every stat from then on asks md-cache, which answers with the
        // bricks' times once the create landed.
        let inval = self.inval.clone();
        self.empty_op_then(req, fop, reply, move || inval.attributes(ino.0));
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Nothing can fail for the application here: answer at once and let
        // the bricks close their files in the background.
        reply.ok();
        if let Ok(gfid) = self.gfid(ino) {
            let cx = ctx(req);
            self.spawn(move |g, _| async move {
                let _ = g.call(&cx, Fop::Release { gfid, fh: fh.0 }).await;
            });
        }
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let fop = self.gfid(ino).map(|gfid| Fop::Fsync {
            gfid,
            fh: fh.0,
            datasync,
        });
        self.empty_op(req, fop, reply)
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.open_dir(req, ino, reply)
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.list(req, ino, fh, offset, reply)
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.list_plus(req, ino, fh, offset, reply)
    }

    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let fop = self
            .gfid(ino)
            .map(|gfid| Fop::Releasedir { gfid, fh: fh.0 });
        self.empty_op(req, fop, reply)
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync_dir(req, ino, datasync, reply)
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let cx = ctx(req);
        self.spawn(move |g, _| async move {
            match g.call(&cx, Fop::Statfs { gfid: Gfid::ROOT }).await {
                Ok(Reply::StatFs(s)) => reply.statfs(
                    s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
                ),
                Ok(_) => reply.error(Errno::EIO),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        n: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if is_distribute_xattr(&n.to_string_lossy()) {
            return reply.error(Errno::EPERM);
        }
        let fop = self.gfid(ino).map(|gfid| Fop::Setxattr {
            gfid,
            name: n.to_string_lossy().into_owned(),
            value: serde_bytes::ByteBuf::from(value.to_vec()),
            flags,
        });
        if n.as_bytes() != b"system.posix_acl_access" {
            return self.empty_op(req, fop, reply);
        }
        // Setting an access ACL clears set-gid when the caller is neither
        // in the file's group nor root, as chmod does. The kernel asks that
        // of a FUSE file system only through FUSE_SETXATTR_EXT, which the
        // FUSE crate does not speak; the brick, as root, would keep it.
        self.then_drop_sgid(req, ino, fop, reply)
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, n: &OsStr, size: u32, reply: ReplyXattr) {
        let local = match n.as_bytes() {
            b if b == REQUESTS_XATTR.as_bytes() => Some(self.graph.requests().to_string()),
            b if b == GRAPH_XATTR.as_bytes() => Some(self.graph.describe()),
            _ if is_distribute_xattr(&n.to_string_lossy()) => return reply.error(Errno::ENODATA),
            _ => None,
        };
        if let Some(v) = local {
            // A virtual xattr answered by the client itself.
            let v = v.into_bytes();
            // These values change from one call to the next (counters): the
            // size asked for first leaves room for them to grow, so that
            // the read that follows fits.
            return if size == 0 {
                reply.size(v.len() as u32 + 4096)
            } else if v.len() > size as usize {
                reply.error(Errno::ERANGE)
            } else {
                reply.data(&v)
            };
        }
        let fop = self.gfid(ino).map(|gfid| Fop::Getxattr {
            gfid,
            name: n.to_string_lossy().into_owned(),
        });
        self.xattr_op(req, fop, size, reply)
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let fop = self.gfid(ino).map(|gfid| Fop::Listxattr { gfid });
        self.xattr_op(req, fop, size, reply)
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        if is_distribute_xattr(&n.to_string_lossy()) {
            return reply.error(Errno::EPERM);
        }
        let fop = self.gfid(ino).map(|gfid| Fop::Removexattr {
            gfid,
            name: n.to_string_lossy().into_owned(),
        });
        self.empty_op(req, fop, reply)
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Permission checks are the kernel's (default_permissions).
        reply.ok()
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let fop = match self.gfid(parent).and_then(|p| {
            Ok(Fop::Create {
                parent: p,
                name: name(n)?,
                gfid: Gfid::random(),
                mode,
                umask,
                flags,
            })
        }) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let cx = ctx(req);
        let lease = self.lease();
        let dir = fop.gfid();
        self.spawn(move |g, inodes| async move {
            match g.call(&cx, fop).await {
                Ok(Reply::Created { entry, fh }) => {
                    let ino = inodes.remember(entry.attr.gfid);
                    reply.created(
                        &lease.entry_ttl(&[dir, entry.attr.gfid]),
                        &fuse_attr(ino, &entry.attr),
                        fuser::Generation(0),
                        FileHandle(fh),
                        created_flags(flags, fh),
                    );
                }
                Ok(_) => reply.error(Errno::EIO),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let fop = self.gfid(ino).map(|gfid| Fop::Fallocate {
            gfid,
            fh: fh.0,
            mode,
            offset,
            len: length,
        });
        self.empty_op(req, fop, reply)
    }

    fn lseek(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let gfid = match self.gfid(ino) {
            Ok(g) => g,
            Err(e) => return reply.error(e),
        };
        let cx = ctx(req);
        self.spawn(move |g, _| async move {
            match g
                .call(
                    &cx,
                    Fop::Lseek {
                        gfid,
                        fh: fh.0,
                        offset: offset.max(0) as u64,
                        whence,
                    },
                )
                .await
            {
                Ok(Reply::Offset(o)) => reply.offset(o as i64),
                Ok(_) => reply.error(Errno::EIO),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }
}
