//! The new layouts: every directory made on every set that lacks it, and
//! given a layout over the sets (weighted by their size when
//! `cluster.weighted-rebalance` says so), by set id.

use super::*;

impl Rebalancer {
    /// Gives each set not being emptied a weight of its size in MiB (its
    /// smallest brick's, as its statfs answers). A set whose size cannot
    /// be learnt leaves every weight equal: a guess would move files for
    /// nothing.
    pub(super) async fn weigh(&self) {
        let mut sizes = Vec::new();
        for (set, &draining) in self.sets.iter().zip(&self.draining) {
            if draining {
                sizes.push(0);
                continue;
            }
            match set.call(&root(), Fop::Statfs { gfid: Gfid::ROOT }).await {
                Ok(Reply::StatFs(s)) if s.blocks > 0 => {
                    sizes.push((s.blocks.saturating_mul(s.frsize.max(1) as u64) >> 20).max(1))
                }
                other => {
                    tracing::warn!(volume = %self.volume, "a set's size is unknown ({:?}): equal weights", other.err());
                    return;
                }
            }
        }
        tracing::info!(volume = %self.volume, ?sizes, "sets weighted by size (MiB)");
        *self.weights.lock().unwrap() = sizes;
    }

    pub(super) fn position(&self, set: u32) -> Option<usize> {
        self.ids.iter().position(|&i| i == set)
    }

    /// Makes the directory on every set that lacks it.
    pub(super) async fn make_everywhere(&self, d: &Dir) -> FsResult<()> {
        let (Some((parent, name)), Some(a)) = (&d.at, &d.attr) else {
            return Ok(());
        };
        for set in &self.sets {
            match set.call(&root(), Fop::Getattr { gfid: d.gfid }).await {
                Ok(_) => continue,
                Err(e) if e.is(libc::ESTALE) => {}
                Err(e) => return Err(e),
            }
            let owner = Ctx {
                uid: a.uid,
                gid: a.gid,
                ..root()
            };
            let mk = Fop::Mkdir {
                parent: *parent,
                name: name.clone(),
                gfid: d.gfid,
                mode: a.perm,
                umask: 0,
            };
            match set.call(&owner, mk).await {
                Ok(_) => {}
                Err(e) if e.is(libc::EEXIST) => {}
                Err(e) => return Err(e),
            }
            let fix = SetAttr {
                mode: Some(a.perm),
                uid: Some(a.uid),
                gid: Some(a.gid),
                ..Default::default()
            };
            set.call(
                &root(),
                Fop::Setattr {
                    gfid: d.gfid,
                    set: fix,
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Writes the directory's layout over all sets with `generation`
    /// (kept if it has it already) and answers it.
    pub(super) async fn lay_out(&self, dir: Gfid) -> FsResult<Layout> {
        let mut stored = None;
        for set in &self.sets {
            let fop = Fop::Getxattr {
                gfid: dir,
                name: LAYOUT_XATTR.into(),
            };
            if let Ok(Reply::Xattr(v)) = set.call(&root(), fop).await {
                stored = Layout::decode(&v).ok();
                if stored.is_some() {
                    break;
                }
            }
        }
        let weights = &self.weights.lock().unwrap().clone();
        let layout = match stored {
            Some((g, l)) if g == self.generation => return Ok(l),
            Some((_, l)) => match self.as_positions(&l) {
                Some(p) => p
                    .rebalanced(weights)
                    .map_err(|e| FsError::new(libc::EIO, e.to_string()))?,
                None => fresh(dir, weights),
            },
            None => fresh(dir, weights),
        }
        .with_ids(&self.ids);
        let fop = Fop::Setxattr {
            gfid: dir,
            name: LAYOUT_XATTR.into(),
            value: serde_bytes::ByteBuf::from(layout.encode(self.generation)),
            flags: 0,
        };
        for set in &self.sets {
            set.call(&root(), fop.clone()).await?;
        }
        Ok(layout)
    }

    /// `l` with its sets named by position, if it names only sets of this
    /// volume.
    pub(super) fn as_positions(&self, l: &Layout) -> Option<Layout> {
        let max = *self.ids.iter().max()? as usize;
        let mut to_pos = vec![u32::MAX; max + 1];
        for (p, &id) in self.ids.iter().enumerate() {
            to_pos[id as usize] = p as u32;
        }
        l.ranges()
            .iter()
            .all(|r| to_pos.get(r.set as usize).is_some_and(|&p| p != u32::MAX))
            .then(|| l.with_ids(&to_pos))
    }
}

/// The layout of a directory that has none: as a client makes it.
pub(super) fn fresh(dir: Gfid, weights: &[u64]) -> Layout {
    Layout::fresh(weights, mortar_xlators::cluster::layout::start_of(dir))
        .expect("sets have weights")
}
