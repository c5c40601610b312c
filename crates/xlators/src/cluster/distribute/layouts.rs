//! Directory layouts: made fresh over the sets, stored on a directory's
//! copies, read and kept, and healed or checked when a directory changes.

use super::*;

impl Distribute {
    /// The layout a directory gets when it is made: one equal range per
    /// set, turned by a point taken from its gfid.
    pub(super) fn fresh(&self, dir: Gfid) -> Layout {
        self.fresh_over(dir, &self.all(), None)
    }

    /// As `fresh`, over the children `on` only, each with the share it
    /// has in `parent`'s layout if that gives one to every child it is
    /// laid out over (a weighted rebalance's shares pass on to new
    /// directories), else equal ones.
    pub(super) fn fresh_over(&self, dir: Gfid, on: &[usize], parent: Option<&Layout>) -> Layout {
        let start = crate::cluster::layout::start_of(dir);
        let over = |i: usize| on.contains(&i) && !self.draining[i];
        let mut weights: Vec<u64> = (0..self.children.len()).map(|i| over(i) as u64).collect();
        if let Some(p) = parent {
            let shares: Vec<u64> = (0..self.children.len())
                .map(|i| if over(i) { p.share_of(self.ids[i]) } else { 0 })
                .collect();
            if (0..shares.len()).all(|i| !over(i) || shares[i] > 0) {
                weights = shares;
            }
        }
        if weights.iter().all(|&w| w == 0) {
            // Only sets being emptied have it: they take it for now.
            weights = (0..self.children.len())
                .map(|i| on.contains(&i) as u64)
                .collect();
        }
        Layout::fresh(&weights, start)
            .expect("a directory is on one set at least")
            .with_ids(&self.ids)
    }

    /// Writes `layout` on the copies of `dir` on children `on`, on each
    /// unless it has one already.
    pub(super) async fn store_layout(
        &self,
        dir: Gfid,
        layout: &Layout,
        generation: u64,
        on: &[usize],
    ) {
        let fop = Fop::Setxattr {
            gfid: dir,
            name: LAYOUT_XATTR.into(),
            value: serde_bytes::ByteBuf::from(layout.encode(generation)),
            flags: libc::XATTR_CREATE,
        };
        for (i, r) in self.on(&Ctx::root(), on.to_vec(), &fop).await {
            match r {
                Ok(_) => {}
                Err(e) if e.is(libc::EEXIST) => {}
                Err(e) => {
                    tracing::warn!(xlator = %self.name, child = i, %dir, "layout not stored: {e}")
                }
            }
        }
    }

    /// The layout of directory `dir`: remembered, else read from one of
    /// its copies. A directory without one (the root of a new volume, one
    /// made on a brick directly, or a mkdir cut short) gets the layout of a
    /// new directory: stored and authoritative while the set list never
    /// changed (generation 1: every client placed its files so), else used
    /// as in flux until a rebalance writes one.
    pub(super) async fn layout_of(&self, dir: Gfid) -> FsResult<Arc<DirLayout>> {
        if let Some(l) = self.layouts.lock().unwrap().get(&dir) {
            return Ok(l.clone());
        }
        let fop = Fop::Getxattr {
            gfid: dir,
            name: LAYOUT_XATTR.into(),
        };
        let first = (xxhash_rust::xxh64::xxh64(&dir.0, 2) % self.children.len() as u64) as usize;
        let mut last = FsError::errno(libc::ESTALE);
        let mut stored = None;
        for k in 0..self.children.len() {
            let i = (first + k) % self.children.len();
            match self.children[i].call(&Ctx::root(), fop.clone()).await {
                Ok(Reply::Xattr(v)) => {
                    stored = Some(v);
                    break;
                }
                Ok(other) => return Err(mortar_core::fop::unexpected(other)),
                Err(e) if e.is(libc::ENODATA) => {
                    stored = Some(Default::default());
                    break;
                }
                Err(e) => last = e,
            }
        }
        let Some(stored) = stored else {
            return Err(last);
        };
        let known = |l: &Layout| l.ranges().iter().all(|r| self.child_of(r.set).is_some());
        let dl = match Layout::decode(&stored) {
            Ok((generation, layout)) if known(&layout) => DirLayout {
                layout,
                committed: generation == self.commit,
            },
            Ok(_) => {
                tracing::warn!(xlator = %self.name, %dir, "layout names a set this graph lacks; looking names up everywhere");
                DirLayout {
                    layout: self.fresh(dir),
                    committed: false,
                }
            }
            Err(e) => {
                if !stored.is_empty() {
                    tracing::warn!(xlator = %self.name, %dir, "unreadable layout: {e}");
                }
                let layout = self.fresh(dir);
                let committed = stored.is_empty() && self.commit == 1;
                if committed {
                    self.store_layout(dir, &layout, 1, &self.all()).await;
                }
                DirLayout { layout, committed }
            }
        };
        let dl = Arc::new(dl);
        // A layout in flux is read again at every use: a rebalance may
        // rewrite it at any moment, and files must follow the new one
        // from then on.
        if dl.committed {
            remember(&self.layouts, LAYOUTS_MAX, dir, dl.clone());
        }
        Ok(dl)
    }

    /// The child a name in `dir` hashes to.
    pub(super) fn hashed(&self, dl: &DirLayout, name: &Name) -> usize {
        self.child_of(dl.layout.owner(name_hash(name)))
            .expect("layouts in use name known sets")
    }

    /// After an entry changed in directory `dir` on children `changed`
    /// only: the copy whose attributes clients are shown (the first set's)
    /// gets its mtime and ctime moved too, as POSIX wants of a parent. At
    /// most once per `TOUCH_EVERY` per directory: a burst of creates costs
    /// one request more, not one per file (a directory's times may lag
    /// that much behind its entries).
    pub(super) async fn touch_dir(&self, dir: Gfid, changed: &[usize]) {
        let first = self.order[0];
        if changed.contains(&first) {
            return;
        }
        let now = tokio::time::Instant::now();
        {
            let mut touched = self.touched.lock().unwrap();
            if touched
                .get(&dir)
                .is_some_and(|t| now.duration_since(*t) < TOUCH_EVERY)
            {
                return;
            }
            if touched.len() >= LAYOUTS_MAX {
                touched.clear();
            }
            touched.insert(dir, now);
        }
        let fop = Fop::Setattr {
            gfid: dir,
            set: mortar_core::SetAttr {
                mtime: Some(mortar_core::fop::TimeSet::Now),
                ..Default::default()
            },
        };
        if let Err(e) = self.children[first].call(&Ctx::root(), fop).await {
            tracing::debug!(xlator = %self.name, %dir, "directory times not moved on the first set: {e}");
        }
    }

    /// Heals the copies of directory `gfid` that missed a change.
    pub(super) async fn heal_dir(&self, gfid: Gfid) {
        heal_dir_copies(self.sets_in_order(), gfid, self.missed.clone(), true).await;
    }

    /// Compares the copies of directory `gfid` (once per directory, in
    /// the background) and heals them if they disagree.
    pub(super) fn check_dir(&self, gfid: Gfid) {
        if self.checked.lock().unwrap().contains_key(&gfid) {
            return;
        }
        remember(&self.checked, PLACED_MAX, gfid, ());
        let missed = self.missed.lock().unwrap().contains(&gfid);
        tokio::spawn(heal_dir_copies(
            self.sets_in_order(),
            gfid,
            self.missed.clone(),
            missed,
        ));
    }
}
