//! What the rebalance asks of one replica set: lookups, listings, holds,
//! and copies of data (extent by extent, holes kept) and xattrs.

use super::*;

pub(super) fn lookup(parent: Gfid, name: &Name) -> Fop {
    Fop::Lookup {
        parent,
        name: name.clone(),
    }
}

pub(super) fn unlink(parent: Gfid, name: &Name) -> Fop {
    Fop::Unlink {
        parent,
        name: name.clone(),
    }
}

/// What `name` in `dir` is on `set`, if anything.
pub(super) async fn lookup_on(set: &Child, dir: Gfid, name: &Name) -> FsResult<Option<Attr>> {
    match set.call(&root(), lookup(dir, name)).await {
        Ok(r) => Ok(Some(r.into_attr()?)),
        Err(e) if absent(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Another file holds the name a file moves to.
pub(super) fn name_taken() -> FsError {
    FsError::new(
        libc::EEXIST,
        "another file has this name on the set it hashes to",
    )
}

pub(super) async fn getattr(set: &Child, gfid: Gfid) -> FsResult<Attr> {
    set.call(&root(), Fop::Getattr { gfid }).await?.into_attr()
}

/// Empties the file on `set` (a partial or stale copy).
pub(super) async fn truncate(set: &Child, gfid: Gfid) -> FsResult<()> {
    let empty = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    set.call(&root(), Fop::Setattr { gfid, set: empty })
        .await
        .map(|_| ())
}

/// Whether a file's data is as it was (same size and times).
pub(super) fn same_data(a: &Attr, b: &Attr) -> bool {
    (a.size, a.mtime, a.ctime) == (b.size, b.mtime, b.ctime)
}

/// Ends this rebalancer's hold of a file on `set`, if it has one.
pub(super) async fn unhold(set: &Child, gfid: Gfid) {
    let fop = Fop::Removexattr {
        gfid,
        name: HOLD_XATTR.into(),
    };
    let _ = set.call(&root(), fop).await;
}

/// Holds the file on every brick of `set` for this rebalancer
/// (`brick::hold`): `value` seconds, or `moved`.
pub(super) async fn hold(set: &Child, gfid: Gfid, value: &str) -> FsResult<()> {
    let fop = Fop::Setxattr {
        gfid,
        name: HOLD_XATTR.into(),
        value: serde_bytes::ByteBuf::from(value.as_bytes().to_vec()),
        flags: 0,
    };
    set.call(&root(), fop).await.map(|_| ())
}

/// Every entry of a directory on one set, with attributes.
pub(super) async fn list(set: &Child, dir: Gfid) -> FsResult<Vec<DirEntry>> {
    let fh = match set.call(&root(), Fop::Opendir { gfid: dir }).await {
        Ok(r) => r.into_fh()?,
        Err(e) if e.is(libc::ESTALE) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    set.read_whole_dir(&root(), dir, fh).await
}

/// Copies a file's data extents (holes stay holes) and its size.
pub(super) async fn copy_data(src: &Child, dst: &Child, gfid: Gfid, size: u64) -> FsResult<()> {
    let rfh = src
        .call(
            &root(),
            Fop::Open {
                gfid,
                flags: libc::O_RDONLY,
            },
        )
        .await?
        .into_fh()?;
    let wfh = match dst
        .call(
            &root(),
            Fop::Open {
                gfid,
                flags: libc::O_WRONLY,
            },
        )
        .await
        .and_then(Reply::into_fh)
    {
        Ok(f) => f,
        Err(e) => {
            let _ = src.call(&root(), Fop::Release { gfid, fh: rfh }).await;
            return Err(e);
        }
    };
    let res = copy_extents(src, dst, gfid, (rfh, wfh), size).await;
    let _ = src.call(&root(), Fop::Release { gfid, fh: rfh }).await;
    let _ = dst.call(&root(), Fop::Release { gfid, fh: wfh }).await;
    res?;
    let set = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    dst.call(&root(), Fop::Setattr { gfid, set }).await?;
    Ok(())
}

pub(super) async fn copy_extents(
    src: &Child,
    dst: &Child,
    gfid: Gfid,
    (rfh, wfh): (u64, u64),
    size: u64,
) -> FsResult<()> {
    let seek = |offset, whence| Fop::Lseek {
        gfid,
        fh: rfh,
        offset,
        whence,
    };
    let mut at = 0;
    while at < size {
        let data = match src.call(&root(), seek(at, libc::SEEK_DATA)).await {
            Ok(Reply::Offset(o)) => o,
            // No data after `at`: the rest is a hole.
            Err(e) if e.is(libc::ENXIO) => break,
            Ok(other) => return Err(mortar_core::fop::unexpected(other)),
            // No SEEK_DATA below: copy everything.
            Err(_) => at,
        };
        let hole = match src.call(&root(), seek(data, libc::SEEK_HOLE)).await {
            Ok(Reply::Offset(o)) if o > data => o.min(size),
            _ => size,
        };
        let mut off = data;
        while off < hole {
            let n = (hole - off).min(COPY_PIECE) as u32;
            let read = Fop::Read {
                gfid,
                fh: rfh,
                offset: off,
                size: n,
            };
            let Reply::Data(buf) = src.call(&root(), read).await? else {
                return Err(FsError::new(libc::EIO, "read answered without data"));
            };
            if buf.is_empty() {
                break;
            }
            let len = buf.len() as u64;
            let write = Fop::Write {
                gfid,
                fh: wfh,
                offset: off,
                data: buf,
                grow: 0,
                reserve: false,
            };
            dst.call(&root(), write).await?;
            off += len;
        }
        at = hole.max(off);
    }
    Ok(())
}

/// Copies the file's own xattrs (distribute's are not the file's).
pub(super) async fn copy_xattrs(src: &Child, dst: &Child, gfid: Gfid) -> FsResult<()> {
    for (name, value) in mortar_xlators::cluster::dir_meta::xattrs(src, gfid).await? {
        let set = Fop::Setxattr {
            gfid,
            name,
            value: serde_bytes::ByteBuf::from(value),
            flags: 0,
        };
        dst.call(&root(), set).await?;
    }
    Ok(())
}
