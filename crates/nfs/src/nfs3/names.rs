//! LOOKUP, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME and LINK.

use super::attrs::stale;
use super::*;
use mortar_core::{Fop, Reply};

// createmode3.
const UNCHECKED: u32 = 0;
const GUARDED: u32 = 1;
const EXCLUSIVE: u32 = 2;

impl Op<'_> {
    /// The results of a procedure that made `made` in `dir`: the new
    /// object's handle and attributes, the directory's wcc.
    async fn made(&self, dir: Gfid, made: &Attr) -> Body {
        let mut b = Body::ok();
        b.w.bool(true).opaque(&self.handle(made.gfid));
        self.post_op(&mut b.w, Some(made));
        let d = self.attr_opt(dir).await;
        self.wcc(&mut b.w, d.as_ref());
        b
    }

    pub(super) async fn lookup(&self, dir: Gfid, args: &mut Reader) -> Answer {
        let raw = args.opaque(crate::MAX_NAME_ARG)?;
        let d = self.attr(dir).await.map_err(stale)?;
        if d.kind != FileKind::Dir {
            return Err(Fail::Status(stat::NOTDIR));
        }
        if !self.may_search(&d).await {
            return Err(Fail::Status(stat::ACCES));
        }
        let found = match &raw[..] {
            b"." => self.attr(dir).await.map_err(stale)?,
            // Above the export's root: the root itself.
            b".." if dir == Gfid::ROOT || dir == self.root => {
                self.attr(dir).await.map_err(stale)?
            }
            b".." => self
                .call(Fop::Parent { gfid: dir })
                .await
                .and_then(Reply::into_attr)
                .map_err(stale)?,
            _ => {
                let name = name_of(&raw)?;
                match self.call(Fop::Lookup { parent: dir, name }).await {
                    Ok(r) => r.into_attr()?,
                    Err(e) => {
                        let mut w = Writer::new();
                        w.u32(status_of(&e));
                        self.post_op(&mut w, Some(&d));
                        return Ok(Body { w, data: None });
                    }
                }
            }
        };
        let mut b = Body::ok();
        b.w.opaque(&self.handle(found.gfid));
        self.post_op(&mut b.w, Some(&found));
        // (A lookup leaves the directory as it found it.)
        self.post_op(&mut b.w, Some(&d));
        Ok(b)
    }

    pub(super) async fn create(&self, dir: Gfid, args: &mut Reader) -> Answer {
        let name = get_name(args)?;
        let how = args.u32()?;
        let (mut set, verf) = match how {
            UNCHECKED | GUARDED => (get_sattr(args)?, None),
            EXCLUSIVE => (SetAttr::default(), Some(args.fixed(8)?)),
            _ => return Err(Fail::Garbage),
        };
        let mode = set.mode.take().unwrap_or(0o644);
        let flags = libc::O_RDWR | libc::O_CREAT | if how == UNCHECKED { 0 } else { libc::O_EXCL };
        let fop = Fop::Create {
            parent: dir,
            name: name.clone(),
            gfid: Gfid::random(),
            mode: libc::S_IFREG | mode,
            umask: 0,
            flags,
        };
        let entry = match self.call(fop).await {
            Ok(Reply::Created { entry, fh }) => {
                // Kept open for its creator's writes (a file made read-only
                // is still written by whoever made it, as NFS allows).
                self.service
                    .files
                    .keep(&self.export, &self.cx, entry.attr.gfid, fh, true);
                entry
            }
            Ok(other) => other.into_entry()?,
            Err(e) if e.is(libc::EEXIST) && verf.is_some() => {
                // A resent exclusive create: the file whose times hold
                // the verifier is the one it made.
                let a = self
                    .call(Fop::Lookup { parent: dir, name })
                    .await
                    .and_then(Reply::into_attr)?;
                if Some(verifier_times(&a)) != verf.as_deref().map(times_of) {
                    return Err(e.into());
                }
                return Ok(self.made(dir, &a).await);
            }
            Err(e) => return Err(e.into()),
        };
        let mut a = entry.attr;
        // The exclusive create's verifier goes in the times (as Linux's
        // server keeps it), until the client sets them.
        if let Some(v) = verf.as_deref() {
            let (at, mt) = times_of(v);
            set.atime = Some(TimeSet::At(at.0, at.1));
            set.mtime = Some(TimeSet::At(mt.0, mt.1));
        }
        if set != SetAttr::default() {
            if let Ok(Reply::Attr(b)) = self.call(Fop::Setattr { gfid: a.gfid, set }).await {
                a = b;
            }
        }
        Ok(self.made(dir, &a).await)
    }

    pub(super) async fn mkdir(&self, dir: Gfid, args: &mut Reader) -> Answer {
        let name = get_name(args)?;
        let mut set = get_sattr(args)?;
        let mode = set.mode.take().unwrap_or(0o755);
        let fop = Fop::Mkdir {
            parent: dir,
            name,
            gfid: Gfid::random(),
            mode: libc::S_IFDIR | mode,
            umask: 0,
        };
        let a = self.call(fop).await?.into_attr()?;
        Ok(self.made(dir, &self.owned(a, set).await).await)
    }

    pub(super) async fn symlink(&self, dir: Gfid, args: &mut Reader) -> Answer {
        let name = get_name(args)?;
        let set = get_sattr(args)?;
        let target = args.opaque(libc::PATH_MAX as usize)?;
        let fop = Fop::Symlink {
            parent: dir,
            name,
            gfid: Gfid::random(),
            target: serde_bytes::ByteBuf::from(target.to_vec()),
        };
        let a = self.call(fop).await?.into_attr()?;
        let set = SetAttr { mode: None, ..set };
        Ok(self.made(dir, &self.owned(a, set).await).await)
    }

    pub(super) async fn mknod(&self, dir: Gfid, args: &mut Reader) -> Answer {
        let name = get_name(args)?;
        let (kind, bits) = match args.u32()? {
            3 => (FileKind::BlockDev, libc::S_IFBLK),
            4 => (FileKind::CharDev, libc::S_IFCHR),
            6 => (FileKind::Socket, libc::S_IFSOCK),
            7 => (FileKind::Fifo, libc::S_IFIFO),
            1..=7 => return Err(Fail::Status(stat::BADTYPE)),
            _ => return Err(Fail::Garbage),
        };
        let mut set = get_sattr(args)?;
        let rdev = match kind {
            FileKind::BlockDev | FileKind::CharDev => {
                let (major, minor) = (args.u32()?, args.u32()?);
                libc::makedev(major, minor)
            }
            _ => 0,
        };
        let mode = set.mode.take().unwrap_or(0o644);
        let fop = Fop::Mknod {
            parent: dir,
            name,
            gfid: Gfid::random(),
            mode: bits | mode,
            umask: 0,
            rdev: rdev as u64,
            linkto: None,
        };
        let a = self.call(fop).await?.into_attr()?;
        Ok(self.made(dir, &self.owned(a, set).await).await)
    }

    /// `a` with what else the client asked to set (owner, times) set.
    async fn owned(&self, a: Attr, set: SetAttr) -> Attr {
        if set == SetAttr::default() {
            return a;
        }
        match self.call(Fop::Setattr { gfid: a.gfid, set }).await {
            Ok(Reply::Attr(b)) => b,
            _ => a,
        }
    }

    pub(super) async fn remove(&self, dir: Gfid, args: &mut Reader, rmdir: bool) -> Answer {
        let name = get_name(args)?;
        let fop = match rmdir {
            true => Fop::Rmdir { parent: dir, name },
            false => Fop::Unlink { parent: dir, name },
        };
        self.call(fop).await?;
        let d = self.attr_opt(dir).await;
        let mut b = Body::ok();
        self.wcc(&mut b.w, d.as_ref());
        Ok(b)
    }

    pub(super) async fn rename(&self, from: Gfid, args: &mut Reader) -> Answer {
        let name = get_name(args)?;
        let to = self.same_export(&get_fh(args)?)?;
        let newname = get_name(args)?;
        let fop = Fop::Rename {
            parent: from,
            name,
            newparent: to,
            newname,
            flags: 0,
        };
        self.call(fop).await?;
        let (f, t) = (self.attr_opt(from).await, self.attr_opt(to).await);
        let mut b = Body::ok();
        self.wcc(&mut b.w, f.as_ref());
        self.wcc(&mut b.w, t.as_ref());
        Ok(b)
    }

    pub(super) async fn link(&self, gfid: Gfid, args: &mut Reader) -> Answer {
        let dir = self.same_export(&get_fh(args)?)?;
        let newname = get_name(args)?;
        let fop = Fop::Link {
            gfid,
            newparent: dir,
            newname,
        };
        let a = self.call(fop).await?.into_attr()?;
        let d = self.attr_opt(dir).await;
        let mut b = Body::ok();
        self.post_op(&mut b.w, Some(&a));
        self.wcc(&mut b.w, d.as_ref());
        Ok(b)
    }
}

/// The access and modification times an exclusive create's verifier is
/// kept in.
fn times_of(v: &[u8]) -> ((i64, u32), (i64, u32)) {
    let a = u32::from_be_bytes(v[..4].try_into().unwrap());
    let m = u32::from_be_bytes(v[4..8].try_into().unwrap());
    ((a as i64, 0), (m as i64 & 0x3fff_ffff, 0))
}

fn verifier_times(a: &Attr) -> ((i64, u32), (i64, u32)) {
    ((a.atime.0, 0), (a.mtime.0, 0))
}
