//! The NFS version 3 program (RFC 1813): each procedure's arguments
//! decoded, answered through the volume's client graph, its results
//! encoded. The procedures live by concern: `attrs` (attributes and the
//! file system's figures), `names` (lookups and changes of names), `data`
//! (reads, writes, commits, and the files kept open for them), `dirs`
//! (listings).

mod attrs;
pub(crate) mod data;
pub(crate) mod dirs;
mod names;

use crate::exports::{Export, Exports};
use crate::handle::{BadHandle, Handle};
use crate::xdr::{Garbage, Reader, Writer};
use bytes::Bytes;
use mortar_core::fop::{Attr, FileKind, SetAttr, TimeSet};
use mortar_core::{Ctx, FsError, Gfid, Name};
use std::sync::Arc;

pub const PROGRAM: u32 = 100003;
pub const VERSION: u32 = 3;

pub use crate::status::{stat, status_of};

/// Why a procedure gives no results.
pub enum Fail {
    /// Its arguments could not be decoded.
    Garbage,
    /// It failed with this nfsstat3 (the results say nothing more).
    Status(u32),
}

impl From<Garbage> for Fail {
    fn from(_: Garbage) -> Fail {
        Fail::Garbage
    }
}

impl From<FsError> for Fail {
    fn from(e: FsError) -> Fail {
        Fail::Status(status_of(&e))
    }
}

impl From<BadHandle> for Fail {
    fn from(_: BadHandle) -> Fail {
        Fail::Status(stat::BADHANDLE)
    }
}

/// A procedure's results: `w`, and for READ the data after it.
pub struct Body {
    pub w: Writer,
    pub data: Option<Bytes>,
}

impl Body {
    fn ok() -> Body {
        let mut w = Writer::new();
        w.u32(stat::OK);
        Body { w, data: None }
    }
}

pub type Answer = Result<Body, Fail>;

/// The results of `proc_` failed with `status`: the status, and each
/// optional attribute its failure results carry, absent.
pub fn failed(proc_: u32, status: u32) -> Writer {
    let absent = match proc_ {
        1 => 0,       // GETATTR
        3..=6 => 1,   // LOOKUP, ACCESS, READLINK, READ
        16..=20 => 1, // READDIR(PLUS), FSSTAT, FSINFO, PATHCONF
        15 => 3,      // LINK: the file's attributes, the directory's wcc
        14 => 4,      // RENAME: two directories' wcc
        _ => 2,       // one wcc_data
    };
    let mut w = Writer::new();
    w.u32(status);
    for _ in 0..absent {
        w.bool(false);
    }
    w
}

/// The context of a procedure: the export its handle names (the volume,
/// and the directory the client mounted) and the caller as the volume
/// sees it.
pub struct Op<'a> {
    pub service: &'a Nfs3,
    pub export: Arc<Export>,
    /// The directory the client mounted: it goes no higher.
    pub root: Gfid,
    pub cx: Ctx,
}

impl Op<'_> {
    pub async fn call(&self, fop: mortar_core::Fop) -> mortar_core::FsResult<mortar_core::Reply> {
        self.export.xl.call(&self.cx, fop).await
    }

    /// The attributes of `gfid` (from the client's caches when they hold
    /// them).
    pub async fn attr(&self, gfid: Gfid) -> mortar_core::FsResult<Attr> {
        let fop = mortar_core::Fop::Getattr { gfid };
        if let Some(r) = self.export.xl.cached(&self.cx, &fop) {
            return r.and_then(mortar_core::Reply::into_attr);
        }
        self.call(fop).await.and_then(mortar_core::Reply::into_attr)
    }

    /// The attributes of `gfid` if the client's caches hold them now:
    /// what an answer gives without waiting (writes held behind, for one,
    /// would have to land first).
    pub fn attr_at_hand(&self, gfid: Gfid) -> Option<Attr> {
        let fop = mortar_core::Fop::Getattr { gfid };
        let r = self.export.xl.cached(&self.cx, &fop)?;
        r.and_then(mortar_core::Reply::into_attr).ok()
    }

    /// The attributes of `gfid` if they can be had (post-operation
    /// attributes are optional).
    pub async fn attr_opt(&self, gfid: Gfid) -> Option<Attr> {
        self.attr(gfid).await.ok()
    }

    pub fn handle(&self, gfid: Gfid) -> [u8; crate::handle::LEN] {
        Handle {
            volume: self.export.id,
            root: self.root,
            gfid,
        }
        .encode()
    }

    /// The handle argument `fh` as one of the same export's (RENAME's and
    /// LINK's second): NFS3ERR_XDEV if of another.
    pub fn same_export(&self, fh: &[u8]) -> Result<Gfid, Fail> {
        let h = Handle::decode(fh)?;
        if h.volume != self.export.id || h.root != self.root {
            return Err(Fail::Status(stat::XDEV));
        }
        Ok(h.gfid)
    }

    pub fn fattr(&self, w: &mut Writer, a: &Attr) {
        put_fattr(w, a, self.export.fsid);
    }

    pub fn post_op(&self, w: &mut Writer, a: Option<&Attr>) {
        w.bool(a.is_some());
        if let Some(a) = a {
            self.fattr(w, a);
        }
    }

    /// wcc_data: no attributes from before (mortar cannot take them
    /// atomically with the change), the attributes after.
    pub fn wcc(&self, w: &mut Writer, after: Option<&Attr>) {
        w.bool(false);
        self.post_op(w, after);
    }
}

/// A file handle argument (nfs_fh3: at most 64 bytes).
pub fn get_fh(r: &mut Reader) -> crate::xdr::Result<Bytes> {
    r.opaque(64)
}

/// A name argument (filename3). Names longer than a brick allows get
/// NAMETOOLONG; a name with '/' or NUL, or "" INVAL (the native mount
/// can make neither either). "." and ".." are refused here: a procedure
/// that takes them (LOOKUP) looks first.
pub fn get_name(r: &mut Reader) -> Result<Name, Fail> {
    name_of(&r.opaque(crate::MAX_NAME_ARG)?)
}

/// A name argument's bytes as a name (`get_name`).
pub fn name_of(b: &[u8]) -> Result<Name, Fail> {
    if b.len() > mortar_core::fop::NAME_MAX {
        return Err(Fail::Status(stat::NAMETOOLONG));
    }
    if b == b"." || b == b".." {
        return Err(Fail::Status(stat::EXIST));
    }
    Name::new(b.to_vec()).map_err(|_| Fail::Status(stat::INVAL))
}

pub fn put_time(w: &mut Writer, t: (i64, u32)) {
    w.u32(t.0 as u32).u32(t.1);
}

/// fattr3 of `a`.
pub fn put_fattr(w: &mut Writer, a: &Attr, fsid: u64) {
    let ftype = match a.kind {
        FileKind::File => 1,
        FileKind::Dir => 2,
        FileKind::BlockDev => 3,
        FileKind::CharDev => 4,
        FileKind::Symlink => 5,
        FileKind::Socket => 6,
        FileKind::Fifo => 7,
    };
    w.u32(ftype)
        .u32(a.perm & 0o7777)
        .u32(a.nlink)
        .u32(a.uid)
        .u32(a.gid)
        .u64(a.size)
        .u64(a.blocks.saturating_mul(512))
        .u32(libc::major(a.rdev as libc::dev_t))
        .u32(libc::minor(a.rdev as libc::dev_t))
        .u64(fsid)
        .u64(a.gfid.ino());
    put_time(w, a.atime);
    put_time(w, a.mtime);
    put_time(w, a.ctime);
}

fn get_time(r: &mut Reader) -> crate::xdr::Result<(i64, u32)> {
    let (s, ns) = (r.u32()?, r.u32()?);
    if ns >= 1_000_000_000 {
        return Err(Garbage);
    }
    Ok((s as i64, ns))
}

/// sattr3: what to set.
pub fn get_sattr(r: &mut Reader) -> crate::xdr::Result<SetAttr> {
    let mode = r.optional(Reader::u32)?;
    let uid = r.optional(Reader::u32)?;
    let gid = r.optional(Reader::u32)?;
    let size = r.optional(Reader::u64)?;
    let time = |r: &mut Reader| -> crate::xdr::Result<Option<TimeSet>> {
        Ok(match r.u32()? {
            0 => None,
            1 => Some(TimeSet::Now),
            2 => {
                let (s, ns) = get_time(r)?;
                Some(TimeSet::At(s, ns))
            }
            _ => return Err(Garbage),
        })
    };
    let atime = time(r)?;
    let mtime = time(r)?;
    Ok(SetAttr {
        mode: mode.map(|m| m & 0o7777),
        uid,
        gid,
        size,
        atime,
        mtime,
    })
}

/// The NFSv3 program of a server: its exports, and what it keeps for
/// its clients between calls.
pub struct Nfs3 {
    exports: Arc<Exports>,
    /// The files open for calls, and the write verifier.
    pub files: data::Files,
    pub listings: dirs::Listings,
}

impl Nfs3 {
    pub fn new(exports: Arc<Exports>) -> Nfs3 {
        Nfs3 {
            exports,
            files: data::Files::default(),
            listings: dirs::Listings::default(),
        }
    }

    /// Closes the files and listings nobody used for a while.
    pub fn close_idle(&self) {
        self.files.close_idle();
        self.listings.close_idle();
    }

    /// Answers procedure `proc_` of NFSv3 for `cx`: None for a procedure
    /// that does not exist.
    pub async fn call(
        &self,
        proc_: u32,
        mut cx: Ctx,
        peer: std::net::IpAddr,
        args: &mut Reader,
    ) -> Option<Answer> {
        if proc_ == 0 {
            return Some(Ok(Body {
                w: Writer::new(),
                data: None,
            }));
        }
        if proc_ > 21 {
            return None;
        }
        // Every procedure starts with a handle.
        let handle = get_fh(args)
            .map_err(Fail::from)
            .and_then(|fh| Ok(Handle::decode(&fh)?));
        let (h, export) = match handle.and_then(|h| {
            let export = self.exports.get(&h.volume);
            Ok((h, export.ok_or(Fail::Status(stat::STALE))?))
        }) {
            Ok(found) => found,
            Err(e) => return Some(Err(e)),
        };
        // The volume's rules for this client: refused, or squashed; and
        // what it mounted: may it still, and is the object beneath it
        // (the volume's root, whose gfid anyone knows, is not).
        if export.refuses(peer).await.is_some() {
            return Some(Err(Fail::Status(stat::ACCES)));
        }
        if let Err(status) = export.admits(h.root, peer).await {
            return Some(Err(Fail::Status(status)));
        }
        if h.gfid == Gfid::ROOT && h.root != Gfid::ROOT {
            return Some(Err(Fail::Status(stat::STALE)));
        }
        let gfid = h.gfid;
        export.squash(&mut cx);
        let op = Op {
            service: self,
            export,
            root: h.root,
            cx,
        };
        // Changes, on a volume NFS clients may only read.
        if matches!(proc_, 2 | 7..=15) && op.export.read_only() {
            return Some(Err(Fail::Status(stat::ROFS)));
        }
        Some(match proc_ {
            1 => op.getattr(gfid).await,
            2 => op.setattr(gfid, args).await,
            3 => op.lookup(gfid, args).await,
            4 => op.access(gfid, args).await,
            5 => op.readlink(gfid).await,
            6 => op.read(gfid, args).await,
            7 => op.write(gfid, args).await,
            8 => op.create(gfid, args).await,
            9 => op.mkdir(gfid, args).await,
            10 => op.symlink(gfid, args).await,
            11 => op.mknod(gfid, args).await,
            12 => op.remove(gfid, args, false).await,
            13 => op.remove(gfid, args, true).await,
            14 => op.rename(gfid, args).await,
            15 => op.link(gfid, args).await,
            16 => op.readdir(gfid, args, false).await,
            17 => op.readdir(gfid, args, true).await,
            18 => op.fsstat(gfid).await,
            19 => op.fsinfo(gfid).await,
            20 => op.pathconf(gfid).await,
            _ => op.commit(gfid, args).await,
        })
    }
}
