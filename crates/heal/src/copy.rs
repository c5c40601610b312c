//! Making one copy of a file like another (docs/replication.md, "Self-heal"):
//! its data, block by block where the checksums differ, chunk by chunk
//! with the lock let go between chunks, and then its metadata.

use super::object::{call, pieces, root, sink_handle, Brick, Set};
use mortar_core::changed::Changed;
use mortar_core::fop::{FileKind, TimeSet, ANON_FH};
use mortar_core::{Attr, Fop, FsError, FsResult, Gfid, Reply, SetAttr};

/// Bytes compared per checksum and copied per write.
const BLOCK: u32 = 128 << 10;
/// Blocks per chunk: the lock is let go between chunks.
const CHUNK_BLOCKS: u32 = 64;

async fn sums(b: &Brick, gfid: Gfid, (offset, len): (u64, u64)) -> FsResult<Reply> {
    let fop = Fop::Checksum {
        gfid,
        offset,
        block: BLOCK,
        count: len.div_ceil(BLOCK as u64) as u32,
    };
    call(b, &root(), fop).await
}

async fn xattr_names(b: &Brick, gfid: Gfid) -> FsResult<Vec<String>> {
    Ok(match call(b, &root(), Fop::Listxattr { gfid }).await? {
        Reply::Xattr(v) => v
            .split(|&c| c == 0)
            .filter(|n| !n.is_empty())
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect(),
        _ => vec![],
    })
}

async fn get_xattr(b: &Brick, gfid: Gfid, name: &str) -> FsResult<Reply> {
    let fop = Fop::Getxattr {
        gfid,
        name: name.to_string(),
    };
    call(b, &root(), fop).await
}

impl Set {
    /// Copies the blocks of `src` whose checksums differ on `sink`, chunk
    /// by chunk, among those the ranges `changed` touch (an empty sink is
    /// not asked for its sums, and gets no blocks of zeros: they are holes
    /// once its size is set, as on the source), and sets the sink's size to
    /// the source's. Answers the bytes copied and the source's attributes
    /// at the end.
    ///
    /// The lock is let go between chunks, and an application's changes
    /// meanwhile reach both copies: so the two are looked at when the heal
    /// of this sink starts and the source again at its end, under the
    /// lock, and nothing is taken from a look before a turn given away
    /// (a size read at the start of a heal and set at its end cut off
    /// what an application wrote meanwhile, on the sinks alone).
    pub(super) async fn heal_data(
        &self,
        gfid: Gfid,
        (src, sink): (usize, usize),
        changed: &Changed,
        locked: &[usize],
    ) -> FsResult<(u64, Attr)> {
        let (s, k) = (&self.bricks[src], &self.bricks[sink]);
        let both = self.stat(gfid, &[src, sink]).await?;
        let of = |i: usize| both.iter().find(|(j, _)| *j == i).map(|(_, a)| a);
        let (Some(a), Some(b)) = (of(src), of(sink)) else {
            return Err(FsError::new(libc::ESTALE, "a copy went away during heal"));
        };
        let (a, sink_size) = (a.clone(), b.size);
        let a = &a;
        let mut copied = 0u64;
        let mut fh = None;
        let block = BLOCK as u64;
        let mut changed = changed.clone();
        if sink_size != a.size {
            // What one copy has past the other's end (`pieces` widens it
            // to whole blocks).
            self.past_end(&mut changed, sink_size.min(a.size));
        }
        let pieces = pieces(&changed, a.size, block, block * CHUNK_BLOCKS as u64);
        let res: FsResult<()> = async {
            for (i, &(off, len)) in pieces.iter().enumerate() {
                let blocks = len.div_ceil(block);
                // Which blocks differ: all of them on an empty sink.
                let differ: Vec<bool> = if sink_size == 0 {
                    vec![true; blocks as usize]
                } else {
                    let (want, have) = futures_util::future::join(
                        sums(s, gfid, (off, len)),
                        sums(k, gfid, (off, len)),
                    )
                    .await;
                    let (Reply::Sums(want), Reply::Sums(have)) = (want?, have?) else {
                        return Err(FsError::new(libc::EIO, "checksum answered without sums"));
                    };
                    want.iter()
                        .enumerate()
                        .map(|(n, w)| have.get(n) != Some(w))
                        .collect()
                };
                for (n, _) in differ.iter().enumerate().filter(|(_, d)| **d) {
                    let at = off + n as u64 * BLOCK as u64;
                    let Reply::Data(data) = call(
                        s,
                        &root(),
                        Fop::Read {
                            gfid,
                            fh: ANON_FH,
                            offset: at,
                            size: BLOCK,
                        },
                    )
                    .await?
                    else {
                        return Err(FsError::new(libc::EIO, "read answered without data"));
                    };
                    if at >= sink_size && data.iter().all(|&b| b == 0) {
                        continue;
                    }
                    let h = sink_handle(k, gfid, &mut fh).await?;
                    let n = data.len() as u64;
                    copied += n;
                    call(
                        k,
                        &root(),
                        Fop::Write {
                            gfid,
                            fh: h,
                            offset: at,
                            data,
                            grow: 0,
                            reserve: false,
                        },
                    )
                    .await?;
                    self.written.inc_by(n);
                }
                if i + 1 == pieces.len() {
                    break;
                }
                // Let an application waiting for the file have a turn.
                self.unlock(gfid, locked).await;
                if self.lock(gfid, locked).await.len() != locked.len() {
                    return Err(FsError::notconn("a replica went away during heal"));
                }
            }
            Ok(())
        }
        .await;
        if let Some(fh) = fh {
            let _ = call(k, &root(), Fop::Release { gfid, fh }).await;
        }
        res?;
        // The lock is held since the last chunk: the size now is the one.
        let now = match &self.stat(gfid, &[src]).await?[..] {
            [(_, a)] => a.clone(),
            _ => {
                return Err(FsError::new(
                    libc::ESTALE,
                    "the source went away during heal",
                ))
            }
        };
        let set = SetAttr {
            size: Some(now.size),
            ..Default::default()
        };
        call(k, &root(), Fop::Setattr { gfid, set }).await?;
        Ok((copied, now))
    }

    /// Owner, mode, times and xattrs of `sink` made those of `src`.
    pub(super) async fn heal_meta(
        &self,
        gfid: Gfid,
        (src, sink): (usize, usize),
        a: &Attr,
    ) -> FsResult<()> {
        let (s, k) = (&self.bricks[src], &self.bricks[sink]);
        let symlink = a.kind == FileKind::Symlink;
        let set = SetAttr {
            mode: (!symlink).then_some(a.perm),
            uid: Some(a.uid),
            gid: Some(a.gid),
            size: None,
            atime: (!symlink).then_some(TimeSet::At(a.atime.0, a.atime.1)),
            mtime: (!symlink).then_some(TimeSet::At(a.mtime.0, a.mtime.1)),
        };
        if symlink {
            return Ok(());
        }
        let (want, have) =
            futures_util::future::join(xattr_names(s, gfid), xattr_names(k, gfid)).await;
        let (want, have) = (want?, have?);
        for n in &want {
            let Reply::Xattr(v) = get_xattr(s, gfid, n).await? else {
                continue;
            };
            if matches!(get_xattr(k, gfid, n).await, Ok(Reply::Xattr(w)) if w == v) {
                continue;
            }
            call(
                k,
                &root(),
                Fop::Setxattr {
                    gfid,
                    name: n.clone(),
                    value: v,
                    flags: 0,
                },
            )
            .await?;
        }
        for n in have.iter().filter(|n| !want.contains(n)) {
            call(
                k,
                &root(),
                Fop::Removexattr {
                    gfid,
                    name: n.clone(),
                },
            )
            .await?;
        }
        // Times last: healing data and names changes them.
        call(k, &root(), Fop::Setattr { gfid, set }).await?;
        Ok(())
    }
}
