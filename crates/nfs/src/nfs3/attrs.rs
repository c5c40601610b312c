//! GETATTR, SETATTR, ACCESS, READLINK, FSSTAT, FSINFO and PATHCONF.

use super::*;
use mortar_core::{Fop, Reply};

/// An object named by a handle that the volume no longer has: the handle
/// is stale (not "no such name": the client looked it up before).
pub(super) fn stale(e: FsError) -> Fail {
    if e.is(libc::ENOENT) {
        Fail::Status(stat::STALE)
    } else {
        e.into()
    }
}

// ACCESS3 bits.
const READ: u32 = 0x1;
pub(super) const LOOKUP: u32 = 0x2;
const MODIFY: u32 = 0x4;
const EXTEND: u32 = 0x8;
const DELETE: u32 = 0x10;
const EXECUTE: u32 = 0x20;

impl Op<'_> {
    /// Whether the caller may search directory `d` (its attributes): a
    /// lookup answered from the client graph's caches never reaches the
    /// bricks that would check. The permission bits decide, unless they
    /// refuse someone other than the owner and the directory has an ACL,
    /// which may grant more: then the bricks judge what the caller does
    /// with what it finds.
    pub(super) async fn may_search(&self, d: &Attr) -> bool {
        let bits = allowed(d, &self.cx, LOOKUP) & LOOKUP != 0;
        if bits || self.cx.uid == d.uid {
            return bits;
        }
        let acl = Fop::Getxattr {
            gfid: d.gfid,
            name: "system.posix_acl_access".into(),
        };
        self.export.xl.call(&Ctx::root(), acl).await.is_ok()
    }
}

/// What of `asked` the permission bits of `a` grant `cx` (the bricks
/// check again on each call; this answers the client's question).
pub(super) fn allowed(a: &Attr, cx: &Ctx, asked: u32) -> u32 {
    let (r, w, x) = if cx.uid == 0 {
        // Root may do anything but run what nobody may run.
        let x = a.kind == FileKind::Dir || a.perm & 0o111 != 0;
        (true, true, x)
    } else {
        let bits = if cx.uid == a.uid {
            a.perm >> 6
        } else if cx.gid == a.gid || cx.groups.contains(&a.gid) {
            a.perm >> 3
        } else {
            a.perm
        };
        (bits & 4 != 0, bits & 2 != 0, bits & 1 != 0)
    };
    let mut ok = 0;
    if r {
        ok |= READ;
    }
    if w {
        ok |= MODIFY | EXTEND;
        if a.kind == FileKind::Dir {
            ok |= DELETE;
        }
    }
    if x {
        ok |= if a.kind == FileKind::Dir {
            LOOKUP
        } else {
            EXECUTE
        };
    }
    ok & asked
}

impl Op<'_> {
    pub(super) async fn getattr(&self, gfid: Gfid) -> Answer {
        let a = self.attr(gfid).await.map_err(stale)?;
        let mut b = Body::ok();
        self.fattr(&mut b.w, &a);
        Ok(b)
    }

    pub(super) async fn setattr(&self, gfid: Gfid, args: &mut Reader) -> Answer {
        let set = get_sattr(args)?;
        let guard = args.optional(super::get_time)?;
        if let Some(ctime) = guard {
            let now = self.attr(gfid).await.map_err(stale)?;
            if now.ctime != ctime {
                let mut w = Writer::new();
                w.u32(stat::NOT_SYNC);
                self.wcc(&mut w, Some(&now));
                return Ok(Body { w, data: None });
            }
        }
        // A size change goes after the writes held behind.
        if set.size.is_some() {
            self.service.files.flush(self.export.id, gfid).await;
        }
        let after = match self.call(Fop::Setattr { gfid, set }).await {
            Ok(Reply::Attr(a)) => Some(a),
            Ok(_) => self.attr_opt(gfid).await,
            Err(e) => return Err(stale(e)),
        };
        let mut b = Body::ok();
        self.wcc(&mut b.w, after.as_ref());
        Ok(b)
    }

    pub(super) async fn access(&self, gfid: Gfid, args: &mut Reader) -> Answer {
        let asked = args.u32()?;
        let a = self.attr(gfid).await.map_err(stale)?;
        let mut b = Body::ok();
        self.post_op(&mut b.w, Some(&a));
        let mut ok = allowed(&a, &self.cx, asked);
        if self.export.read_only() {
            ok &= READ | LOOKUP | EXECUTE;
        }
        b.w.u32(ok);
        Ok(b)
    }

    pub(super) async fn readlink(&self, gfid: Gfid) -> Answer {
        let target = match self.call(Fop::Readlink { gfid }).await.map_err(stale)? {
            Reply::Data(d) => d,
            _ => return Err(Fail::Status(stat::INVAL)),
        };
        let a = self.attr_opt(gfid).await;
        let mut b = Body::ok();
        self.post_op(&mut b.w, a.as_ref());
        b.w.opaque(&target);
        Ok(b)
    }

    pub(super) async fn fsstat(&self, gfid: Gfid) -> Answer {
        let s = match self.call(Fop::Statfs { gfid }).await.map_err(stale)? {
            Reply::StatFs(s) => s,
            _ => return Err(Fail::Status(stat::SERVERFAULT)),
        };
        let a = self.attr_opt(gfid).await;
        let mut b = Body::ok();
        self.post_op(&mut b.w, a.as_ref());
        let unit = s.frsize as u64;
        b.w.u64(s.blocks * unit)
            .u64(s.bfree * unit)
            .u64(s.bavail * unit)
            .u64(s.files)
            .u64(s.ffree)
            .u64(s.ffree)
            .u32(0); // invarsec: the figures change at any time
        Ok(b)
    }

    pub(super) async fn fsinfo(&self, gfid: Gfid) -> Answer {
        let a = self.attr(gfid).await.map_err(stale)?;
        let mut b = Body::ok();
        self.post_op(&mut b.w, Some(&a));
        let max = crate::MAX_IO as u32;
        b.w.u32(max) // rtmax
            .u32(max) // rtpref
            .u32(4096) // rtmult
            .u32(max) // wtmax
            .u32(max) // wtpref
            .u32(4096) // wtmult
            .u32(64 << 10) // dtpref
            .u64(i64::MAX as u64) // maxfilesize
            .u32(0)
            .u32(1) // time_delta: 1 ns
            .u32(0x1 | 0x2 | 0x8 | 0x10); // LINK, SYMLINK, HOMOGENEOUS, CANSETTIME
        Ok(b)
    }

    pub(super) async fn pathconf(&self, gfid: Gfid) -> Answer {
        let a = self.attr(gfid).await.map_err(stale)?;
        let mut b = Body::ok();
        self.post_op(&mut b.w, Some(&a));
        b.w.u32(u16::MAX as u32) // linkmax
            .u32(mortar_core::fop::NAME_MAX as u32)
            .bool(true) // no_trunc
            .bool(true) // chown_restricted
            .bool(false) // case_insensitive
            .bool(true); // case_preserving
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx(uid: u32, gid: u32, groups: Vec<u32>) -> Ctx {
        Ctx {
            uid,
            gid,
            groups,
            ..Ctx::default()
        }
    }

    #[test]
    fn access_follows_the_permission_bits() {
        let mut a = Attr::plain_file(Gfid::random(), 0);
        (a.uid, a.gid, a.perm) = (10, 20, 0o640);
        let all = 0x3f;
        assert_eq!(allowed(&a, &cx(10, 1, vec![]), all), READ | MODIFY | EXTEND);
        assert_eq!(allowed(&a, &cx(11, 1, vec![20]), all), READ);
        assert_eq!(allowed(&a, &cx(11, 1, vec![]), all), 0);
        assert_eq!(allowed(&a, &cx(0, 0, vec![]), all), READ | MODIFY | EXTEND);
        a.perm = 0o755;
        assert_eq!(allowed(&a, &cx(0, 0, vec![]), EXECUTE), EXECUTE);
        a.kind = FileKind::Dir;
        assert_eq!(
            allowed(&a, &cx(10, 1, vec![]), all),
            READ | MODIFY | EXTEND | DELETE | LOOKUP
        );
        assert_eq!(allowed(&a, &cx(11, 1, vec![]), all), READ | LOOKUP);
    }
}
