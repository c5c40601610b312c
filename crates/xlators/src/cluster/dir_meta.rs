//! A directory's metadata across replica sets. Every set holds a copy of
//! each directory; their mode, owner and xattrs must agree, or a create
//! allowed on one set would be refused on another. The **source** is the
//! copy on the first set (in set-id order) that has the directory:
//! distribute changes that copy first and gives the change up if it fails
//! there, so another copy that differs is one that missed a change.
//! Times are not compared: each copy's mtime moves with the entries of
//! its own set.
//!
//! Used by distribute (a directory whose change missed a set, or one
//! listed for the first time) and by the rebalance (every directory).

use futures_util::future::join_all;
use mortar_core::fop::is_distribute_xattr;
use mortar_core::{Attr, Child, Ctx, Fop, FsError, FsResult, Gfid, Reply, SetAttr};
use std::collections::BTreeMap;

fn absent(e: &FsError) -> bool {
    e.is(libc::ESTALE) || e.is(libc::ENOENT)
}

/// An object's own xattrs on one child (distribute's left out): name →
/// value.
pub async fn xattrs(child: &Child, gfid: Gfid) -> FsResult<BTreeMap<String, Vec<u8>>> {
    let cx = Ctx::root();
    let Reply::Xattr(names) = child.call(&cx, Fop::Listxattr { gfid }).await? else {
        return Err(FsError::errno(libc::EIO));
    };
    let mut out = BTreeMap::new();
    for n in names.split(|&c| c == 0).filter(|n| !n.is_empty()) {
        let Ok(n) = std::str::from_utf8(n) else {
            continue;
        };
        if is_distribute_xattr(n) {
            continue;
        }
        let get = Fop::Getxattr {
            gfid,
            name: n.into(),
        };
        match child.call(&cx, get).await {
            Ok(Reply::Xattr(v)) => {
                out.insert(n.to_string(), v.into_vec());
            }
            // Removed meanwhile.
            Err(e) if e.is(libc::ENODATA) => {}
            Err(e) => return Err(e),
            Ok(_) => return Err(FsError::errno(libc::EIO)),
        }
    }
    Ok(out)
}

/// Makes `dst`'s xattrs of `gfid` those of `want`; answers whether
/// anything changed.
pub async fn set_xattrs(
    dst: &Child,
    gfid: Gfid,
    want: &BTreeMap<String, Vec<u8>>,
) -> FsResult<bool> {
    let cx = Ctx::root();
    let have = xattrs(dst, gfid).await?;
    let mut changed = false;
    for (name, value) in want {
        if have.get(name) != Some(value) {
            let set = Fop::Setxattr {
                gfid,
                name: name.clone(),
                value: serde_bytes::ByteBuf::from(value.clone()),
                flags: 0,
            };
            dst.call(&cx, set).await?;
            changed = true;
        }
    }
    for name in have.keys().filter(|n| !want.contains_key(*n)) {
        let rm = Fop::Removexattr {
            gfid,
            name: name.clone(),
        };
        match dst.call(&cx, rm).await {
            Ok(_) => changed = true,
            Err(e) if e.is(libc::ENODATA) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(changed)
}

/// Whether two copies of a directory disagree on what this module keeps
/// equal (without their xattrs).
pub fn differ(a: &Attr, b: &Attr) -> bool {
    (a.perm, a.uid, a.gid) != (b.perm, b.uid, b.gid)
}

/// One set's copy of a directory.
#[derive(Clone, Debug)]
pub enum Copy {
    Here(Attr),
    /// Not on this set (yet: a rebalance makes it).
    Absent,
    /// The set could not be asked.
    Unreached,
}

/// The copies of directory `gfid` on each of `sets` (in set-id order).
pub async fn copies(sets: &[Child], gfid: Gfid) -> Vec<Copy> {
    let cx = Ctx::root();
    join_all(sets.iter().map(|s| s.call(&cx, Fop::Getattr { gfid })))
        .await
        .into_iter()
        .map(|r| match r {
            Ok(Reply::Attr(a)) => Copy::Here(a),
            Ok(_) => Copy::Unreached,
            Err(e) if absent(&e) => Copy::Absent,
            Err(e) => {
                tracing::debug!(%gfid, "directory copy not reached: {e}");
                Copy::Unreached
            }
        })
        .collect()
}

/// Whether the copies found disagree with the first one (xattrs not
/// compared).
pub fn disagree(copies: &[Copy]) -> bool {
    let mut here = copies.iter().filter_map(|c| match c {
        Copy::Here(a) => Some(a),
        _ => None,
    });
    let Some(first) = here.next() else {
        return false;
    };
    here.any(|a| differ(a, first))
}

/// Makes every copy of directory `gfid` on `sets` (in set-id order) agree
/// with the source. Answers how many copies were changed, or None if a
/// set could not be reached (its copy is left for later).
pub async fn heal(sets: &[Child], gfid: Gfid) -> FsResult<Option<usize>> {
    heal_copies(sets, gfid, copies(sets, gfid).await).await
}

/// `heal`, with the `copies` of the directory found already.
pub async fn heal_copies(sets: &[Child], gfid: Gfid, copies: Vec<Copy>) -> FsResult<Option<usize>> {
    let unreached = copies.iter().any(|c| matches!(c, Copy::Unreached));
    let Some((src, want)) = copies.iter().enumerate().find_map(|(i, c)| match c {
        Copy::Here(a) => Some((i, a.clone())),
        _ => None,
    }) else {
        return Ok(None);
    };
    let want_x = xattrs(&sets[src], gfid).await?;
    let mut healed = 0;
    for (i, c) in copies.iter().enumerate().skip(src + 1) {
        let Copy::Here(a) = c else { continue };
        let mut changed = false;
        if differ(a, &want) {
            let fix = SetAttr {
                mode: Some(want.perm),
                uid: Some(want.uid),
                gid: Some(want.gid),
                ..Default::default()
            };
            sets[i]
                .call(&Ctx::root(), Fop::Setattr { gfid, set: fix })
                .await?;
            changed = true;
        }
        changed |= set_xattrs(&sets[i], gfid, &want_x).await?;
        if changed {
            tracing::info!(%gfid, copy = i, "directory metadata healed from the first set's copy");
            healed += 1;
        }
    }
    Ok((!unreached).then_some(healed))
}
