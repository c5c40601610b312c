//! The distribute translator: files are placed on one of its children
//! (replica sets) by a hash of their name; directories exist on all of them.
//!
//! Placement is a pure function (`hashed_child`): the 64-bit xxh64 of the
//! name, split into equal ranges, one per child. Per-directory layouts kept
//! in xattrs (so that rebalance can move ranges) are the distribute issue's
//! work; `hashed_child` is the seam where they plug in.
//!
//! A name not found on its hashed child (a file renamed to a name that
//! hashes elsewhere, or a hard link) is looked up on every child. The gfid →
//! child map learned from lookups and creates routes later calls on the
//! object; it is a cache, refilled by asking every child when it misses.
//!
//! Directory listings read child 0 completely, then child 1, and so on; the
//! offset handed to the kernel carries the child index in its top 16 bits.

use super::replicate::join_all;
use super::HandleMap;
use crate::core::{
    Attr, Child, Ctx, Event, FileKind, Fop, FsError, FsResult, Gfid, Name, Reply, StatFs, Xlator,
};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const CHILD_SHIFT: u32 = 48;
/// Objects whose replica set is remembered.
const PLACED_MAX: usize = 1 << 18;
const OFFSET_MASK: u64 = (1 << CHILD_SHIFT) - 1;

pub struct Distribute {
    name: String,
    children: Vec<Child>,
    /// Whether any child is up (what this translator tells its parent).
    up: std::sync::atomic::AtomicBool,
    /// Where each known non-directory object lives.
    placed: Mutex<HashMap<Gfid, usize>>,
    /// Our handle → (child, child's handle) for files; every child's for dirs.
    fds: HandleMap<Arc<Vec<Option<u64>>>>,
}

/// The child a name hashes to.
pub fn hashed_child(name: &Name, n: usize) -> usize {
    let h = xxhash_rust::xxh64::xxh64(name.as_bytes(), 0);
    ((h as u128 * n as u128) >> 64) as usize
}

impl Distribute {
    pub fn new(name: String, children: Vec<Child>) -> Self {
        assert!(!children.is_empty() && children.len() < (1 << 16));
        Distribute {
            name,
            children,
            placed: Mutex::new(HashMap::new()),
            up: Default::default(),
            fds: HandleMap::new(),
        }
    }

    fn learn(&self, attr: &Attr, child: usize) {
        if attr.kind != FileKind::Dir {
            let mut placed = self.placed.lock().unwrap();
            // A cache, refilled on a miss by asking every child: bounded so
            // that a long-lived mount over many files does not grow forever.
            if placed.len() >= PLACED_MAX {
                placed.clear();
            }
            placed.insert(attr.gfid, child);
        }
    }

    fn all(&self) -> Vec<usize> {
        (0..self.children.len()).collect()
    }

    async fn on_all(&self, cx: &Ctx, fop: &Fop) -> Vec<(usize, FsResult<Reply>)> {
        join_all(self.all().into_iter().map(|i| {
            let (child, cx, fop) = (self.children[i].clone(), cx.clone(), fop.clone());
            async move { (i, child.call(&cx, fop).await) }
        }))
        .await
    }

    /// The child holding a non-directory object, or None for a directory.
    async fn locate(&self, cx: &Ctx, gfid: Gfid) -> FsResult<Option<usize>> {
        if gfid == Gfid::ROOT || self.children.len() == 1 {
            return Ok(if self.children.len() == 1 {
                Some(0)
            } else {
                None
            });
        }
        if let Some(&i) = self.placed.lock().unwrap().get(&gfid) {
            return Ok(Some(i));
        }
        let mut last = FsError::errno(libc::ESTALE);
        for (i, r) in self.on_all(cx, &Fop::Getattr { gfid }).await {
            match r.and_then(Reply::into_attr) {
                Ok(a) if a.kind == FileKind::Dir => return Ok(None),
                Ok(a) => {
                    self.learn(&a, i);
                    return Ok(Some(i));
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    async fn lookup(&self, cx: &Ctx, fop: Fop, name: &Name) -> FsResult<Reply> {
        let h = hashed_child(name, self.children.len());
        let first = self.children[h].call(cx, fop.clone()).await;
        match first {
            Ok(rep) => {
                if let Reply::Entry(e) = &rep {
                    self.learn(&e.attr, h);
                }
                return Ok(rep);
            }
            Err(e) if !e.is(libc::ENOENT) || self.children.len() == 1 => return Err(e),
            Err(_) => {}
        }
        for (i, r) in self.on_all(cx, &fop).await {
            if i == h {
                continue;
            }
            if let Ok(Reply::Entry(e)) = &r {
                self.learn(&e.attr, i);
                return r;
            }
        }
        Err(FsError::errno(libc::ENOENT))
    }

    /// Directories: the hashed child first (it decides EEXIST and the like),
    /// then all others.
    async fn dir_op(&self, cx: &Ctx, fop: Fop, first: usize) -> FsResult<Reply> {
        let rep = self.children[first].call(cx, fop.clone()).await?;
        let others: Vec<usize> = self.all().into_iter().filter(|&i| i != first).collect();
        let res = join_all(others.into_iter().map(|i| {
            let (child, cx, fop) = (self.children[i].clone(), cx.clone(), fop.clone());
            async move { (i, child.call(&cx, fop).await) }
        }))
        .await;
        for (i, r) in res {
            if let Err(e) = r {
                tracing::warn!(xlator = %self.name, child = i, "{} failed on one subvolume: {e}", fop.name());
                return Err(e);
            }
        }
        Ok(rep)
    }

    /// Sends an object-addressed operation to the child holding it, or to
    /// every child for a directory.
    async fn on_object(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        match self.locate(cx, fop.gfid()).await? {
            Some(i) => self.children[i].call(cx, fop).await,
            None if fop.is_modifying() => self.dir_op(cx, fop, 0).await,
            None => self.children[0].call(cx, fop).await,
        }
    }

    async fn open(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let gfid = fop.gfid();
        let targets: Vec<usize> = match (&fop, self.locate(cx, gfid).await?) {
            (Fop::Opendir { .. }, _) | (_, None) => self.all(),
            (_, Some(i)) => vec![i],
        };
        let mut fhs = vec![None; self.children.len()];
        let mut err = None;
        for i in targets {
            match self.children[i]
                .call(cx, fop.clone())
                .await
                .and_then(Reply::into_fh)
            {
                Ok(fh) => fhs[i] = Some(fh),
                Err(e) => err = Some(e),
            }
        }
        if let Some(e) = err {
            for (i, fh) in fhs.iter().enumerate() {
                if let Some(fh) = fh {
                    let rel = if matches!(fop, Fop::Opendir { .. }) {
                        Fop::Releasedir { gfid, fh: *fh }
                    } else {
                        Fop::Release { gfid, fh: *fh }
                    };
                    let _ = self.children[i].call(cx, rel).await;
                }
            }
            return Err(e);
        }
        Ok(Reply::Opened {
            fh: self.fds.insert(Arc::new(fhs)),
        })
    }

    /// Passes an operation on our handle to the children holding theirs.
    async fn with_handle(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let fh = fop.fh().unwrap_or(0);
        let release = matches!(fop, Fop::Release { .. } | Fop::Releasedir { .. });
        let fhs = if release {
            self.fds
                .remove(fh)
                .ok_or_else(|| FsError::errno(libc::EBADF))?
        } else {
            self.fds.get(fh)?
        };
        let mut out = Err(FsError::errno(libc::EBADF));
        for (i, f) in fhs.iter().enumerate() {
            if let Some(f) = f {
                out = self.children[i].call(cx, fop.clone().with_fh(*f)).await;
                if out.is_err() && !release {
                    return out;
                }
            }
        }
        out
    }

    async fn readdir(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        fh: u64,
        offset: u64,
        plus: bool,
    ) -> FsResult<Reply> {
        let fhs = self.fds.get(fh)?;
        let mut child = (offset >> CHILD_SHIFT) as usize;
        let mut off = offset & OFFSET_MASK;
        while child < fhs.len() {
            if let Some(cfh) = fhs[child] {
                let rep = self.children[child]
                    .call(
                        cx,
                        Fop::Readdir {
                            gfid,
                            fh: cfh,
                            offset: off,
                            plus,
                        },
                    )
                    .await?;
                let Reply::Entries(mut ents) = rep else {
                    return Err(FsError::errno(libc::EIO));
                };
                // The child's listing goes on after this batch even when
                // nothing of it is handed up (only directories, which are
                // listed from child 0 only).
                let had_any = !ents.is_empty();
                if let Some(last) = ents.last() {
                    off = last.next;
                }
                if child > 0 {
                    ents.retain(|e| e.kind != FileKind::Dir);
                }
                for e in &mut ents {
                    e.next |= (child as u64) << CHILD_SHIFT;
                    if let Some(a) = &e.attr {
                        self.learn(a, child);
                    }
                }
                if !ents.is_empty() {
                    return Ok(Reply::Entries(ents));
                }
                if had_any {
                    continue;
                }
            }
            child += 1;
            off = 0;
        }
        Ok(Reply::Entries(Vec::new()))
    }
}

#[async_trait]
impl Xlator for Distribute {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn forget(&self, gfid: Gfid) {
        self.placed.lock().unwrap().remove(&gfid);
    }

    fn notify(&self, _from: usize, ev: Event) -> Option<Event> {
        match ev {
            Event::Up | Event::Down => {
                let any = self.children.iter().any(|c| c.is_up());
                let was = self.up.swap(any, std::sync::atomic::Ordering::AcqRel);
                (any != was).then_some(if any { Event::Up } else { Event::Down })
            }
            other => Some(other),
        }
    }

    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        if self.children.len() == 1 {
            return self.children[0].call(cx, fop).await;
        }
        let n = self.children.len();
        match fop {
            Fop::Lookup { ref name, .. } => {
                let name = name.clone();
                self.lookup(cx, fop, &name).await
            }
            Fop::Mkdir { ref name, .. } => {
                let h = hashed_child(name, n);
                self.dir_op(cx, fop, h).await
            }
            Fop::Rmdir { ref name, .. } => {
                let h = hashed_child(name, n);
                self.dir_op(cx, fop, h).await
            }
            Fop::Create { ref name, .. }
            | Fop::Mknod { ref name, .. }
            | Fop::Symlink { ref name, .. } => {
                let h = hashed_child(name, n);
                let is_create = matches!(fop, Fop::Create { .. });
                let rep = self.children[h].call(cx, fop).await?;
                match rep {
                    Reply::Created { entry, fh } if is_create => {
                        self.learn(&entry.attr, h);
                        let mut fhs = vec![None; n];
                        fhs[h] = Some(fh);
                        Ok(Reply::Created {
                            entry,
                            fh: self.fds.insert(Arc::new(fhs)),
                        })
                    }
                    Reply::Entry(e) => {
                        self.learn(&e.attr, h);
                        Ok(Reply::Entry(e))
                    }
                    other => Err(crate::core::fop::unexpected(other)),
                }
            }
            Fop::Unlink { parent, ref name } => {
                let e = self
                    .lookup(
                        cx,
                        Fop::Lookup {
                            parent,
                            name: name.clone(),
                        },
                        name,
                    )
                    .await?
                    .into_entry()?;
                let i = self.locate(cx, e.attr.gfid).await?.unwrap_or(0);
                self.children[i].call(cx, fop).await
            }
            Fop::Rename {
                parent,
                ref name,
                newparent,
                ref newname,
                ..
            } => {
                let src = self
                    .lookup(
                        cx,
                        Fop::Lookup {
                            parent,
                            name: name.clone(),
                        },
                        name,
                    )
                    .await?
                    .into_entry()?;
                if src.attr.kind == FileKind::Dir {
                    return self.dir_op(cx, fop, 0).await;
                }
                let i = self.locate(cx, src.attr.gfid).await?.unwrap_or(0);
                // A target name held by another child is removed there, so
                // that the new name is not shadowed.
                if let Ok(Reply::Entry(dst)) = self
                    .lookup(
                        cx,
                        Fop::Lookup {
                            parent: newparent,
                            name: newname.clone(),
                        },
                        newname,
                    )
                    .await
                {
                    if let Some(j) = self.locate(cx, dst.attr.gfid).await?.filter(|&j| j != i) {
                        self.children[j]
                            .call(
                                cx,
                                Fop::Unlink {
                                    parent: newparent,
                                    name: newname.clone(),
                                },
                            )
                            .await?;
                    }
                }
                self.children[i].call(cx, fop).await
            }
            Fop::Link { gfid, .. } => {
                let i = self.locate(cx, gfid).await?.unwrap_or(0);
                self.children[i].call(cx, fop).await
            }
            Fop::Open { .. } | Fop::Opendir { .. } => self.open(cx, fop).await,
            Fop::Read { .. }
            | Fop::Write { .. }
            | Fop::Flush { .. }
            | Fop::Fsync { .. }
            | Fop::Fallocate { .. }
            | Fop::Lseek { .. } => self.with_handle(cx, fop).await,
            Fop::Release { .. } | Fop::Releasedir { .. } => {
                let _ = self.with_handle(cx, fop).await;
                Ok(Reply::Ok)
            }
            Fop::Readdir {
                gfid,
                fh,
                offset,
                plus,
            } => self.readdir(cx, gfid, fh, offset, plus).await,
            Fop::Statfs { .. } => {
                let mut sum = StatFs::default();
                for (_, r) in self.on_all(cx, &fop).await {
                    let Reply::StatFs(s) = r? else {
                        return Err(FsError::errno(libc::EIO));
                    };
                    sum.bsize = s.bsize;
                    sum.frsize = s.frsize;
                    sum.namelen = s.namelen;
                    sum.blocks += s.blocks;
                    sum.bfree += s.bfree;
                    sum.bavail += s.bavail;
                    sum.files += s.files;
                    sum.ffree += s.ffree;
                }
                Ok(Reply::StatFs(sum))
            }
            Fop::Getattr { .. }
            | Fop::Parent { .. }
            | Fop::Setattr { .. }
            | Fop::Readlink { .. }
            | Fop::Setxattr { .. }
            | Fop::Getxattr { .. }
            | Fop::Listxattr { .. }
            | Fop::Removexattr { .. } => self.on_object(cx, fop).await,
            Fop::Resolve { .. } => {
                super::first_ok(self.on_all(cx, &fop).await.into_iter().map(|(_, r)| r))
            }
            Fop::Lock { .. }
            | Fop::Unlock { .. }
            | Fop::Clear { .. }
            | Fop::Pending { .. }
            | Fop::Blamed { .. }
            | Fop::Checksum { .. } => Err(super::bookkeeping_refused()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_spread_over_children() {
        let n = 4;
        let mut counts = vec![0; n];
        for i in 0..4000 {
            let name = Name::new(format!("file_{i}").into_bytes()).unwrap();
            let c = hashed_child(&name, n);
            assert_eq!(c, hashed_child(&name, n), "placement is stable");
            counts[c] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "uneven spread: {c}");
        }
    }
}
