//! Healing a directory's names: each sink gets the names its source has
//! (made with the same gfid, kind, owner and mode) and loses those the
//! source lacks, unless names are merged (no blame to go by): then none is
//! removed.

use super::object::*;
use futures_util::future::BoxFuture;
use mortar_core::fop::FileKind;
use mortar_core::{Attr, Ctx, Fop, FsError, FsResult, Gfid, Name, Reply};
use std::collections::HashMap;

/// The names of one object a sink lacks: each with the brick it is copied
/// from and the object's attributes there.
type NamesToMake<'a> = Vec<(&'a [u8], usize, &'a Attr)>;

impl Set {
    /// The names in directory `dir` on brick `b`, with their attributes.
    pub(super) async fn list(&self, b: usize, dir: Gfid) -> FsResult<HashMap<Vec<u8>, Attr>> {
        let k = &self.bricks[b];
        let Reply::Opened { fh } = call(k, &root(), Fop::Opendir { gfid: dir }).await? else {
            return Err(FsError::new(libc::EIO, "opendir answered without a handle"));
        };
        let mut out = HashMap::new();
        let mut offset = 0;
        let res: FsResult<()> = async {
            loop {
                let fop = Fop::Readdir {
                    gfid: dir,
                    fh,
                    offset,
                    plus: true,
                };
                let Reply::Entries(ents) = call(k, &root(), fop).await? else {
                    return Err(FsError::new(libc::EIO, "readdir answered without entries"));
                };
                if ents.is_empty() {
                    return Ok(());
                }
                for e in ents {
                    offset = e.next;
                    if let Some(a) = e.attr {
                        out.insert(e.name.into_vec(), a);
                    }
                }
            }
        }
        .await;
        let _ = call(k, &root(), Fop::Releasedir { gfid: dir, fh }).await;
        res.map(|_| out)
    }

    /// Makes the names of `dir` on `sink` those of the sources: names
    /// missing there are made (with their gfid, as links when the object is
    /// there under another name), names the sources lack are removed
    /// (unless `conservative`: then nothing is removed). Answers how many
    /// names changed and the objects made, to be healed next.
    pub(super) async fn heal_entries(
        &self,
        dir: Gfid,
        sources: &[usize],
        sink: usize,
        conservative: bool,
    ) -> FsResult<(u64, Vec<Gfid>)> {
        let mut want: HashMap<Vec<u8>, (usize, Attr)> = HashMap::new();
        for &s in sources {
            for (n, a) in self.list(s, dir).await? {
                want.entry(n).or_insert((s, a));
            }
            if !conservative {
                break;
            }
        }
        let have = self.list(sink, dir).await?;
        let mut changed = 0;
        let mut made = Vec::new();
        // Names the sink has wrongly: removed first (unless conservative).
        if !conservative {
            for (n, a) in &have {
                if want.get(n).is_some_and(|(_, w)| w.gfid == a.gfid) {
                    continue;
                }
                self.remove_tree(sink, dir, n, a).await?;
                changed += 1;
            }
        }
        // The names to make, by object: the names of one object (hard
        // links) are made one after the other, the objects several at once.
        let mut missing: HashMap<Gfid, NamesToMake> = HashMap::new();
        for (n, (src, a)) in &want {
            match have.get(n) {
                Some(h) if h.gfid == a.gfid => continue,
                Some(_) if conservative => {
                    tracing::warn!(set = %self.name, %dir, name = %String::from_utf8_lossy(n), "copies of a name carry different gfids; left alone");
                    continue;
                }
                _ => {}
            }
            missing.entry(a.gfid).or_default().push((n, *src, a));
        }
        // Healed as this directory's children right after: the index pass
        // under way leaves them alone.
        self.fresh.lock().unwrap().extend(missing.keys());
        let makes = missing
            .into_iter()
            .map(|(gfid, names)| -> BoxFuture<'_, _> {
                Box::pin(async move {
                    for &(n, src, a) in &names {
                        self.make(src, sink, dir, n, a).await?;
                    }
                    Ok::<_, FsError>((gfid, names.len() as u64))
                })
            });
        for r in at_once(makes.collect(), PARALLEL).await {
            let (gfid, names) = r?;
            made.push(gfid);
            changed += names;
        }
        Ok((changed, made))
    }

    pub(super) async fn make(
        &self,
        src: usize,
        sink: usize,
        dir: Gfid,
        n: &[u8],
        a: &Attr,
    ) -> FsResult<()> {
        let k = &self.bricks[sink];
        let name = Name::new(n.to_vec())?;
        let cx = Ctx {
            uid: a.uid,
            gid: a.gid,
            ..Ctx::background()
        };
        let (gfid, perm) = (a.gfid, a.perm);
        // The object may be on the sink already under another name (a hard
        // link, or a file renamed while the sink was down).
        if a.kind != FileKind::Dir
            && call(k, &root(), Fop::Getattr { gfid })
                .await
                .is_ok_and(|r| matches!(r, Reply::Attr(_)))
        {
            call(
                k,
                &root(),
                Fop::Link {
                    gfid,
                    newparent: dir,
                    newname: name,
                },
            )
            .await?;
            return Ok(());
        }
        let fop = match a.kind {
            FileKind::Dir => Fop::Mkdir {
                parent: dir,
                name,
                gfid,
                mode: perm,
                umask: 0,
            },
            FileKind::Symlink => {
                let Reply::Data(t) =
                    call(&self.bricks[src], &root(), Fop::Readlink { gfid }).await?
                else {
                    return Err(FsError::new(libc::EIO, "readlink answered without data"));
                };
                Fop::Symlink {
                    parent: dir,
                    name,
                    gfid,
                    target: serde_bytes::ByteBuf::from(t.to_vec()),
                }
            }
            kind => Fop::Mknod {
                parent: dir,
                name,
                gfid,
                mode: perm | kind.type_bits(),
                umask: 0,
                rdev: a.rdev,
                linkto: None,
            },
        };
        // (A file too is made by mknod: no handle to let go after.)
        call(k, &cx, fop).await?;
        // The new copy is as stale as can be until healed: say so on the
        // source, so that it is healed even if this heal stops here.
        let src_b = &self.bricks[src];
        let mark = Fop::Lock {
            gfid,
            wait: true,
            mark: Some(1 << sink),
        };
        if call(src_b, &root(), mark).await.is_ok() {
            let _ = call(src_b, &root(), Fop::Unlock { gfids: vec![gfid] }).await;
        }
        Ok(())
    }

    /// Removes `n` (and, for a directory, all below it) from `dir` on `b`.
    pub(super) async fn remove_tree(
        &self,
        b: usize,
        dir: Gfid,
        n: &[u8],
        a: &Attr,
    ) -> FsResult<()> {
        let k = &self.bricks[b];
        let name = Name::new(n.to_vec())?;
        if a.kind == FileKind::Dir {
            for (cn, ca) in self.list(b, a.gfid).await? {
                Box::pin(self.remove_tree(b, a.gfid, &cn, &ca)).await?;
            }
            call(k, &root(), Fop::Rmdir { parent: dir, name }).await?;
        } else {
            call(k, &root(), Fop::Unlink { parent: dir, name }).await?;
        }
        Ok(())
    }
}
