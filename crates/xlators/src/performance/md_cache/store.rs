//! What is kept, by object, in shards: attributes, xattrs (missing ones
//! too) and the names looked up, each until its lease ends; the marks that
//! tell whether anything changed while a fop was out; the drops.

use super::*;

impl MdCache {
    /// Whether `name` is known missing from directory `dir`: this mount
    /// made the directory and knows every name in it.
    pub(super) fn missing(&self, dir: Gfid, name: &[u8]) -> bool {
        let now = Instant::now();
        let s = self.shard(&dir).lock().unwrap();
        s.get(&dir)
            .and_then(|o| o.names.as_ref())
            .is_some_and(|n| n.until > now && !n.set.contains(name))
    }

    pub(super) fn shard(&self, g: &Gfid) -> &Mutex<HashMap<Gfid, Object>> {
        &self.shards[g.0[15] as usize % SHARDS]
    }

    /// The clock of `g`'s bucket. (A bucket lies within one shard, so a
    /// shard's lock orders every keep and drop of its buckets' objects.)
    pub(super) fn bucket(&self, g: &Gfid) -> &AtomicU64 {
        // (Byte 15 picks the shard; byte 14 spreads its objects further.)
        let i = u16::from_le_bytes([g.0[15], g.0[14]]) as usize;
        &self.changed[i % BUCKETS]
    }

    /// Something about `g` changes: answers to requests marked before are
    /// not kept. Called before the change is made to the kept state.
    pub(super) fn bump(&self, g: &Gfid) {
        self.bucket(g).fetch_max(self.tick(), Ordering::AcqRel);
        if self.makes.load(Ordering::SeqCst) > 0 {
            if let Some(changed) = self.making.lock().unwrap().get_mut(g) {
                *changed = true;
            }
        }
    }

    /// Watches directory `g`, about to be made here, for changes until the
    /// answer (`Making::changed`). Its bucket alone would not do: while a
    /// thousand writes land (each bumps its file), a new directory's bucket
    /// is bumped in one mkdir of six, and the directory is not known empty.
    pub(super) fn making(&self, g: Gfid) -> Making<'_> {
        self.making.lock().unwrap().insert(g, false);
        self.makes.fetch_add(1, Ordering::SeqCst);
        Making { cache: self, g }
    }

    /// The clock's next tick.
    pub(super) fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Whether nothing about `g` (nor everything) changed since `tick`.
    pub(super) fn unchanged(&self, g: &Gfid, tick: u64) -> bool {
        self.all_changed.load(Ordering::Acquire) <= tick
            && self.bucket(g).load(Ordering::Acquire) <= tick
    }

    pub(super) fn drop_object(&self, gfid: Gfid) {
        self.bump(&gfid);
        self.shard(&gfid).lock().unwrap().remove(&gfid);
    }

    /// Drops an object's attributes and xattrs (its metadata changed
    /// here), not what is known of a directory's names: a change of its
    /// mode, owner or xattrs leaves them as they were.
    pub(super) fn drop_meta(&self, gfid: Gfid) {
        self.bump(&gfid);
        if let Some(o) = self.shard(&gfid).lock().unwrap().get_mut(&gfid) {
            o.attr = None;
            o.xattrs.clear();
            o.list = None;
        }
    }

    /// Drops an object's attributes only (its data changed here).
    pub(super) fn drop_attr(&self, gfid: Gfid) {
        self.bump(&gfid);
        if let Some(o) = self.shard(&gfid).lock().unwrap().get_mut(&gfid) {
            o.attr = None;
        }
    }

    /// Drops what another client's change of `name` in `dir` alters.
    pub(super) fn drop_name(&self, dir: Gfid, name: &Name) {
        self.bump(&dir);
        let led_to = self
            .shard(&dir)
            .lock()
            .unwrap()
            .get(&dir)
            .and_then(|o| o.found.get(name.as_bytes()).map(|(g, ..)| *g));
        // (The bricks recall that object too; this covers its answers in
        // flight until then.)
        if let Some(g) = led_to {
            self.bump(&g);
        }
        if let Some(o) = self.shard(&dir).lock().unwrap().get_mut(&dir) {
            o.attr = None;
            o.names = None;
            o.found.remove(name.as_bytes());
        }
    }

    pub(super) fn drop_all(&self) {
        self.all_changed.fetch_max(self.tick(), Ordering::AcqRel);
        for s in &self.shards {
            s.lock().unwrap().clear();
        }
    }

    pub(super) fn cached_xattr(&self, gfid: Gfid, name: Option<&str>) -> Option<Answer> {
        let now = Instant::now();
        let s = self.shard(&gfid).lock().unwrap();
        let o = s.get(&gfid).filter(|o| o.until > now)?;
        match name {
            Some(n) => o.xattrs.get(n).cloned(),
            None => o.list.clone().map(Ok),
        }
    }

    /// What a lookup of `name` in `dir` found before, if that answer's
    /// lease and the object's attributes are both still kept.
    pub(super) fn found(&self, dir: Gfid, name: &[u8]) -> Option<Attr> {
        self.cached_attr(self.found_object(dir, name)?.0)
    }

    /// The object `name` in `dir` led to and its kind, while the lease of
    /// that answer lasts (its attributes may be gone: a write drops them).
    pub(super) fn found_object(&self, dir: Gfid, name: &[u8]) -> Option<(Gfid, FileKind)> {
        let s = self.shard(&dir).lock().unwrap();
        let &(g, kind, until) = s.get(&dir)?.found.get(name)?;
        (until > Instant::now()).then_some((g, kind))
    }

    /// Keeps that `name` in `dir` leads to `gfid` (a lookup's answer, or
    /// a name made here), unless anything was recalled or changed since
    /// the request was sent: the recall may have been of that name.
    pub(super) fn keep_found(
        &self,
        dir: Gfid,
        name: &Name,
        (gfid, kind): (Gfid, FileKind),
        (start, tick): (Instant, u64),
    ) {
        let until = start + Duration::from_millis(self.keep_ms.load(Ordering::Relaxed));
        let mut s = self.shard(&dir).lock().unwrap();
        if !self.unchanged(&dir, tick) || !self.unchanged(&gfid, tick) {
            return;
        }
        let o = object(&mut s, dir, start);
        if o.found.len() >= MAX_NAMES {
            o.found.clear();
        }
        o.found
            .insert(name.as_bytes().to_vec(), (gfid, kind, until));
    }

    pub(super) fn cached_attr(&self, gfid: Gfid) -> Option<Attr> {
        let now = Instant::now();
        let s = self.shard(&gfid).lock().unwrap();
        let (a, moved) = s.get(&gfid).filter(|o| o.until > now)?.attr.clone()?;
        (moved == self.names_moved.load(Ordering::Acquire)).then_some(a)
    }

    /// A mark to take before sending a request whose answer may be kept.
    pub(super) fn mark(&self) -> (Instant, u64) {
        (Instant::now(), self.clock.load(Ordering::Acquire))
    }

    /// Keeps what an answer to a request marked `(start, gen)` tells about
    /// `gfid`, unless something was recalled or changed since.
    pub(super) fn keep(&self, gfid: Gfid, what: Kept, (start, tick): (Instant, u64)) {
        let mut s = self.shard(&gfid).lock().unwrap();
        if !self.unchanged(&gfid, tick) {
            return;
        }
        self.store(&mut s, gfid, what, start);
    }

    /// Keeps the attributes a change made here left the object with,
    /// unless anything was recalled or changed since `(start, gen)`; every
    /// answer to a request sent before is older, and is not kept after
    /// them. False if they were not kept.
    pub(super) fn keep_after_change(
        &self,
        gfid: Gfid,
        a: Attr,
        (start, tick): (Instant, u64),
    ) -> bool {
        let mut s = self.shard(&gfid).lock().unwrap();
        if !self.unchanged(&gfid, tick) {
            return false;
        }
        self.bump(&gfid);
        self.store(&mut s, gfid, Kept::Attr(a), start);
        true
    }

    /// `keep_after_change` for several objects at once (a change of names
    /// and its directories): all kept, or none. Answers those kept.
    pub(super) fn keep_all_after_change(
        &self,
        attrs: &[Attr],
        (start, tick): (Instant, u64),
    ) -> Vec<Gfid> {
        if attrs.is_empty() {
            return Vec::new();
        }
        let mut shards: Vec<_> = self.shards.iter().map(|s| s.lock().unwrap()).collect();
        if !attrs.iter().all(|a| self.unchanged(&a.gfid, tick)) {
            return Vec::new();
        }
        for a in attrs {
            self.bump(&a.gfid);
        }
        for a in attrs {
            let s = &mut shards[a.gfid.0[15] as usize % SHARDS];
            self.store(s, a.gfid, Kept::Attr(a.clone()), start);
        }
        attrs.iter().map(|a| a.gfid).collect()
    }

    pub(super) fn store(
        &self,
        s: &mut HashMap<Gfid, Object>,
        gfid: Gfid,
        what: Kept,
        start: Instant,
    ) {
        let until = start + Duration::from_millis(self.keep_ms.load(Ordering::Relaxed));
        let o = object(s, gfid, until);
        if o.until <= start {
            // What was kept lapsed: the new lease covers only this answer.
            o.attr = None;
            o.xattrs.clear();
            o.list = None;
        }
        // The lease the bricks granted with this answer covers the object.
        o.until = until;
        match what {
            Kept::Attr(a) => {
                // The brick listed the object's xattrs with its
                // attributes: those it lacks are missing, one it has is
                // asked for (its value was not sent).
                if a.watched.is_some() {
                    for n in mortar_core::fop::WATCHED_XATTRS {
                        if a.lacks(n) {
                            o.xattrs.insert(n.to_string(), Err(libc::ENODATA));
                        } else if o.xattrs.get(n).is_some_and(|v| v.is_err()) {
                            o.xattrs.remove(n);
                        }
                    }
                }
                o.attr = Some((a, self.names_moved.load(Ordering::Acquire)))
            }
            Kept::Xattr(n, a) => {
                o.xattrs.insert(n, a);
            }
            Kept::List(l) => o.list = Some(l),
        }
    }

    /// Keeps the attributes an answer carries.
    pub(super) fn keep_attrs(&self, res: &FsResult<Reply>, mark: (Instant, u64)) {
        match res {
            Ok(Reply::Attr(a)) => self.keep(a.gfid, Kept::Attr(a.clone()), mark),
            Ok(Reply::Entry(e)) | Ok(Reply::Created { entry: e, .. }) => {
                self.keep(e.attr.gfid, Kept::Attr(e.attr.clone()), mark)
            }
            Ok(Reply::Entries(ents)) => {
                for e in ents.iter().filter(|e| e.cacheable) {
                    if let Some(a) = &e.attr {
                        self.keep(a.gfid, Kept::Attr(a.clone()), mark);
                    }
                }
            }
            _ => {}
        }
    }
}

/// A directory being made here, watched for changes (`MdCache::making`).
pub(super) struct Making<'a> {
    cache: &'a MdCache,
    g: Gfid,
}

impl Making<'_> {
    /// Whether anything about the directory changed since it was watched.
    pub(super) fn changed(&self) -> bool {
        self.cache.making.lock().unwrap().get(&self.g) != Some(&false)
    }
}

impl Drop for Making<'_> {
    fn drop(&mut self) {
        self.cache.making.lock().unwrap().remove(&self.g);
        self.cache.makes.fetch_sub(1, Ordering::SeqCst);
    }
}
