//! The replicate translator: N children holding the same data.
//!
//! Every modifying operation goes to every child that is up, concurrently,
//! and is acknowledged only when all of them have answered. File data is
//! read from one child chosen by the object's gfid (`read_child`), so that
//! different files spread over the replicas; names and attributes come from
//! one child for every object (`attr_child`), so that they are stable.
//!
//! What this translator does not do yet (issue "Replicate"): record which
//! copy missed a change while its brick was down, heal it, enforce quorum,
//! or order concurrent writers on different clients. The seams are here:
//! `merge` is the single place where answers of the replicas are judged,
//! and `read_child` is the single place where a copy is chosen for reading.

use super::HandleMap;
use crate::core::fop::ANON_FH;
use crate::core::{Ctx, Fop, FsError, FsResult, Gfid, Reply, StatFs, Xlator};
use async_trait::async_trait;
use std::sync::Arc;

/// Per child: its handle and its epoch when the handle was issued.
type ChildHandles = Vec<Option<(u64, u64)>>;

pub struct Replicate {
    name: String,
    children: Vec<Arc<dyn Xlator>>,
    /// Our handle → each child's handle and the child's epoch when it was
    /// issued (None where that child was down).
    fds: HandleMap<Arc<ChildHandles>>,
    /// `cluster.read-hash-mode`: 0 reads from the first replica up, 1 (and
    /// above, for now) spreads reads by gfid.
    read_hash_mode: std::sync::atomic::AtomicU8,
    /// Our handles that read through anonymous brick handles, by gfid.
    open_behind: std::sync::Mutex<std::collections::HashMap<Gfid, Vec<u64>>>,
    /// Whether the "only possibly stale copies left" warning was logged.
    warned_stale: std::sync::atomic::AtomicBool,
}

/// The answers of several replicas, judged as one.
///
/// All children that answered agree on success: every success, from which
/// the caller takes the attribute child's answer (`Replicate::pick`), so that
/// attributes always come from the same copy of an object. All
/// failed: the first error other than ENOTCONN (so that ENOENT, EEXIST,
/// ENOSPC reach the application as themselves). Some succeeded and some
/// failed other than by being down: the failure is returned, because an
/// application must never be told a change is safe when a live replica
/// refused it.
pub fn merge(results: Vec<(usize, FsResult<Reply>)>) -> FsResult<Vec<(usize, Reply)>> {
    let mut ok = Vec::new();
    let mut hard_err: Option<FsError> = None;
    let mut down_err: Option<FsError> = None;
    for (i, r) in results {
        match r {
            Ok(rep) => ok.push((i, rep)),
            Err(e) if e.is(libc::ENOTCONN) => {
                down_err.get_or_insert(e);
            }
            Err(e) => {
                hard_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = hard_err {
        return Err(e);
    }
    if ok.is_empty() {
        return Err(down_err.unwrap_or_else(|| FsError::notconn("no replica is up")));
    }
    Ok(ok)
}

impl Replicate {
    pub fn new(name: String, children: Vec<Arc<dyn Xlator>>) -> Self {
        Replicate {
            name,
            children,
            fds: HandleMap::new(),
            read_hash_mode: std::sync::atomic::AtomicU8::new(1),
            warned_stale: std::sync::atomic::AtomicBool::new(false),
            open_behind: Default::default(),
        }
    }

    fn up(&self) -> Vec<usize> {
        (0..self.children.len())
            .filter(|&i| self.children[i].is_up())
            .collect()
    }

    /// The answer to hand up from several successful replicas: the
    /// attribute child's, so that the attributes of an object (times differ
    /// by a few nanoseconds between copies) do not flip from call to call,
    /// which tools like tar take for a change.
    fn pick(&self, mut ok: Vec<(usize, Reply)>) -> Reply {
        let idx: Vec<usize> = ok.iter().map(|(i, _)| *i).collect();
        let want = self.attr_child(&idx).unwrap_or(idx[0]);
        let pos = ok.iter().position(|(i, _)| *i == want).unwrap_or(0);
        ok.swap_remove(pos).1
    }

    /// The child every answer about attributes and names comes from: the
    /// first one up. One copy for all metadata keeps attributes stable and
    /// lets directory listings hand cacheable attributes to the kernel;
    /// file data is spread over the replicas by `read_child`.
    fn attr_child(&self, allowed: &[usize]) -> FsResult<usize> {
        self.readable(allowed)
            .first()
            .copied()
            .ok_or_else(|| FsError::notconn(format!("{}: no replica is up", self.name)))
    }

    /// Of `allowed`, the children that have not lost their connection
    /// since this client started: a brick that was down may have missed
    /// changes, and until self-heal exists (the replicate issue) nothing says
    /// which, so it is not read from while another copy is up. Changes still
    /// go to it. If only such copies are left they are read, with a warning.
    fn readable(&self, allowed: &[usize]) -> Vec<usize> {
        let fresh: Vec<usize> = allowed
            .iter()
            .copied()
            .filter(|&i| self.children[i].epoch() == 0)
            .collect();
        if fresh.is_empty() && !allowed.is_empty() {
            if !self
                .warned_stale
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(xlator = %self.name, "every replica up has been down since mount; reading from one that may be stale");
            }
            return allowed.to_vec();
        }
        fresh
    }

    /// The child to read `gfid` from: spread by gfid over the children up.
    fn read_child(&self, gfid: Gfid, allowed: &[usize]) -> FsResult<usize> {
        let allowed = &self.readable(allowed)[..];
        if allowed.is_empty() {
            return Err(FsError::notconn(format!("{}: no replica is up", self.name)));
        }
        if self
            .read_hash_mode
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0
        {
            return Ok(allowed[0]);
        }
        let h = xxhash_rust::xxh64::xxh64(&gfid.0, 0) as usize;
        Ok(allowed[h % allowed.len()])
    }

    async fn fan_out(
        &self,
        cx: &Ctx,
        targets: &[usize],
        make: impl Fn(usize) -> Option<Fop>,
    ) -> Vec<(usize, FsResult<Reply>)> {
        let calls = targets.iter().filter_map(|&i| {
            let fop = make(i)?;
            let child = self.children[i].clone();
            let cx = cx.clone();
            Some(async move { (i, child.call(&cx, fop).await) })
        });
        join_all(calls).await
    }

    async fn to_all(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let up = self.up();
        if up.is_empty() {
            return Err(FsError::notconn(format!("{}: no replica is up", self.name)));
        }
        let res = self.fan_out(cx, &up, |_| Some(fop.clone())).await;
        Ok(self.pick(merge(res)?))
    }

    /// Before a name goes (unlink, rename over it): if it names a file this
    /// client reads through anonymous handles, open that file for real on
    /// the bricks, so that it stays readable after its last name is gone, as
    /// POSIX wants. Costs a lookup only while some file is open-behind.
    async fn open_for_real(&self, cx: &Ctx, parent: Gfid, name: &crate::core::Name) {
        if self.open_behind.lock().unwrap().is_empty() {
            return;
        }
        let lookup = Fop::Lookup {
            parent,
            name: name.clone(),
        };
        let Ok(Reply::Entry(e)) = self.lookup(cx, lookup).await else {
            return;
        };
        let gfid = e.attr.gfid;
        let Some(fhs) = self.open_behind.lock().unwrap().remove(&gfid) else {
            return;
        };
        for fh in fhs {
            let up = self.up();
            let epochs: Vec<u64> = self.children.iter().map(|c| c.epoch()).collect();
            let open = Fop::Open {
                gfid,
                flags: libc::O_RDONLY,
            };
            let res = self.fan_out(cx, &up, |_| Some(open.clone())).await;
            let mut real = vec![None; self.children.len()];
            for (i, r) in res {
                if let Ok(Reply::Opened { fh: f }) = r {
                    real[i] = Some((f, epochs[i]));
                }
            }
            self.fds.replace(fh, Arc::new(real));
        }
    }

    /// Asks the attribute child about metadata, falling back to the others
    /// if it is down.
    async fn meta_one(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let mut up = self.up();
        loop {
            let i = self.attr_child(&up)?;
            match self.children[i].call(cx, fop.clone()).await {
                Err(e) if e.is(libc::ENOTCONN) => up.retain(|&c| c != i),
                r => return r,
            }
        }
    }

    /// Lookups ask every replica, so that a name missing on one copy is
    /// still found on the others; the attribute child's copy answers when it has
    /// the name.
    async fn lookup(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let up = self.up();
        let mut pending: FuturesUnordered<_> = up
            .iter()
            .map(|&i| {
                let (child, fop) = (self.children[i].clone(), fop.clone());
                async move { (i, child.call(cx, fop).await) }
            })
            .collect();
        let mut err: Option<FsError> = None;
        // The first copy found is kept; the attribute child's answer, when
        // it comes, is preferred (see `pick`).
        let mut found: Option<(usize, Reply)> = None;
        while let Some((i, r)) = pending.next().await {
            match r {
                Ok(rep) => {
                    if self.attr_child(&up).ok() == Some(i) {
                        return Ok(rep);
                    }
                    found.get_or_insert((i, rep));
                }
                Err(e) => {
                    if err.as_ref().is_none_or(|x| x.is(libc::ENOTCONN)) {
                        err = Some(e);
                    }
                }
            }
        }
        if let Some((_, rep)) = found {
            return Ok(rep);
        }
        Err(err.unwrap_or_else(|| FsError::notconn(format!("{}: no replica is up", self.name))))
    }

    /// Opens on every replica up; our handle maps to theirs.
    async fn open_all(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let up = self.up();
        if up.is_empty() {
            return Err(FsError::notconn(format!("{}: no replica is up", self.name)));
        }
        // What is only read (a directory listing, a file opened read-only) is
        // opened on one replica alone: every read goes there anyway.
        let read_only = match &fop {
            Fop::Opendir { .. } => true,
            Fop::Open { flags, .. } => {
                flags & libc::O_ACCMODE == libc::O_RDONLY && flags & libc::O_TRUNC == 0
            }
            _ => false,
        };
        let epochs: Vec<u64> = self.children.iter().map(|c| c.epoch()).collect();
        let mut res = Vec::new();
        if read_only && matches!(fop, Fop::Open { .. }) {
            // Open-behind: a file opened read-only is read through each
            // brick's anonymous handle, so the open costs no round trip (the
            // kernel has checked permissions; a file removed by another
            // client meanwhile fails at its first read with ESTALE; one this
            // client removes is opened for real first, `open_for_real`).
            let fhs: Vec<_> = (0..self.children.len())
                .map(|i| up.contains(&i).then_some((ANON_FH, epochs[i])))
                .collect();
            let fh = self.fds.insert(Arc::new(fhs));
            let gfid = fop_gfid(&fop);
            self.open_behind
                .lock()
                .unwrap()
                .entry(gfid)
                .or_default()
                .push(fh);
            return Ok(Reply::Opened { fh });
        }
        if read_only {
            // A listing is read from the attribute child.
            let i = self.attr_child(&up)?;
            res = self.fan_out(cx, &[i], |_| Some(fop.clone())).await;
        }
        if !res.iter().any(|(_, r)| r.is_ok()) {
            // Not read-only, or that replica failed: open everywhere.
            res = self.fan_out(cx, &up, |_| Some(fop.clone())).await;
        }
        let mut fhs = vec![None; self.children.len()];
        for (i, r) in &res {
            if let Ok(rep) = r {
                fhs[*i] = rep.clone().into_fh().ok().map(|fh| (fh, epochs[*i]));
            }
        }
        match merge(res) {
            Ok(ok) => {
                let rep = self.pick(ok);
                let fh = self.fds.insert(Arc::new(fhs));
                Ok(match rep {
                    Reply::Created { entry, .. } => Reply::Created { entry, fh },
                    _ => Reply::Opened { fh },
                })
            }
            Err(e) => {
                // Close what did open, so no handle leaks on a brick.
                let release = |g, f| match &fop {
                    Fop::Opendir { .. } => Fop::Releasedir { gfid: g, fh: f },
                    _ => Fop::Release { gfid: g, fh: f },
                };
                let gfid = fop_gfid(&fop);
                let idx: Vec<usize> = (0..fhs.len()).filter(|&i| fhs[i].is_some()).collect();
                self.fan_out(cx, &idx, |i| fhs[i].map(|(f, _)| release(gfid, f)))
                    .await;
                Err(e)
            }
        }
    }

    /// The child handles of `fhs` that are still valid: the child is up and
    /// has not lost its connection since the handle was issued.
    fn live(&self, fhs: &[Option<(u64, u64)>]) -> Vec<usize> {
        (0..fhs.len())
            .filter(|&i| {
                matches!(fhs[i], Some((_, e)) if self.children[i].is_up() && self.children[i].epoch() == e)
            })
            .collect()
    }

    /// Sends a handle-based operation to every replica holding the handle.
    async fn with_handles(
        &self,
        cx: &Ctx,
        fh: u64,
        release: bool,
        make: impl Fn(u64) -> Fop,
    ) -> FsResult<Reply> {
        let fhs = if release {
            self.fds
                .remove(fh)
                .ok_or_else(|| FsError::errno(libc::EBADF))?
        } else {
            self.fds.get(fh)?
        };
        let mut targets = self.live(&fhs);
        if release {
            // Anonymous handles are the brick's to keep; nothing to close.
            targets.retain(|&i| fhs[i].is_some_and(|(f, _)| f != ANON_FH));
            if targets.is_empty() {
                return Ok(Reply::Ok);
            }
        }
        if targets.is_empty() {
            return Err(FsError::notconn(format!(
                "{}: no replica holding this file is up",
                self.name
            )));
        }
        let res = self
            .fan_out(cx, &targets, |i| fhs[i].map(|(f, _)| make(f)))
            .await;
        let ok = merge(res)?;
        Ok(self.pick(ok))
    }

    async fn read_handle(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        fh: u64,
        make: impl Fn(u64) -> Fop,
    ) -> FsResult<Reply> {
        let fhs = self.fds.get(fh)?;
        let mut allowed = self.live(&fhs);
        loop {
            let i = self.read_child(gfid, &allowed)?;
            match self.children[i].call(cx, make(fhs[i].unwrap().0)).await {
                Err(e) if e.is(libc::ENOTCONN) => allowed.retain(|&c| c != i),
                r => return r,
            }
        }
    }
}

pub(crate) fn fop_gfid(fop: &Fop) -> Gfid {
    match fop {
        Fop::Getattr { gfid }
        | Fop::Setattr { gfid, .. }
        | Fop::Link { gfid, .. }
        | Fop::Readlink { gfid }
        | Fop::Open { gfid, .. }
        | Fop::Read { gfid, .. }
        | Fop::Write { gfid, .. }
        | Fop::Flush { gfid, .. }
        | Fop::Fsync { gfid, .. }
        | Fop::Release { gfid, .. }
        | Fop::Fallocate { gfid, .. }
        | Fop::Lseek { gfid, .. }
        | Fop::Opendir { gfid }
        | Fop::Readdir { gfid, .. }
        | Fop::Releasedir { gfid, .. }
        | Fop::Statfs { gfid }
        | Fop::Setxattr { gfid, .. }
        | Fop::Getxattr { gfid, .. }
        | Fop::Listxattr { gfid }
        | Fop::Removexattr { gfid, .. } => *gfid,
        Fop::Mknod { gfid, .. }
        | Fop::Create { gfid, .. }
        | Fop::Mkdir { gfid, .. }
        | Fop::Symlink { gfid, .. } => *gfid,
        Fop::Lookup { parent, .. }
        | Fop::Unlink { parent, .. }
        | Fop::Rmdir { parent, .. }
        | Fop::Rename { parent, .. } => *parent,
    }
}

pub(crate) use futures_util::future::join_all;

fn min_statfs(rs: Vec<StatFs>) -> StatFs {
    rs.into_iter()
        .reduce(|a, b| if b.bavail < a.bavail { b } else { a })
        .unwrap_or_default()
}

#[async_trait]
impl Xlator for Replicate {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn is_up(&self) -> bool {
        self.children.iter().any(|c| c.is_up())
    }

    fn requests(&self) -> u64 {
        self.children.iter().map(|c| c.requests()).sum()
    }

    fn reconfigure(&self, options: &crate::core::Options) {
        if let Some(m) = options
            .get("cluster.read-hash-mode")
            .and_then(|v| v.parse::<u8>().ok())
        {
            self.read_hash_mode
                .store(m, std::sync::atomic::Ordering::Relaxed);
        }
        for c in &self.children {
            c.reconfigure(options);
        }
    }

    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        match fop {
            // Lookups ask every replica, so that a name missing on one copy
            // is still found on the others.
            Fop::Lookup { .. } => self.lookup(cx, fop).await,
            Fop::Getattr { .. }
            | Fop::Readlink { .. }
            | Fop::Listxattr { .. }
            | Fop::Getxattr { .. } => self.meta_one(cx, fop).await,
            Fop::Statfs { .. } => {
                let up = self.up();
                let res = self.fan_out(cx, &up, |_| Some(fop.clone())).await;
                let stats: Vec<StatFs> = res
                    .into_iter()
                    .filter_map(|(_, r)| match r {
                        Ok(Reply::StatFs(s)) => Some(s),
                        _ => None,
                    })
                    .collect();
                if stats.is_empty() {
                    return Err(FsError::notconn(format!("{}: no replica is up", self.name)));
                }
                Ok(Reply::StatFs(min_statfs(stats)))
            }
            Fop::Open { .. } | Fop::Opendir { .. } | Fop::Create { .. } => {
                self.open_all(cx, fop).await
            }
            Fop::Read {
                gfid,
                fh,
                offset,
                size,
            } => {
                self.read_handle(cx, gfid, fh, |f| Fop::Read {
                    gfid,
                    fh: f,
                    offset,
                    size,
                })
                .await
            }
            Fop::Lseek {
                gfid,
                fh,
                offset,
                whence,
            } => {
                self.read_handle(cx, gfid, fh, |f| Fop::Lseek {
                    gfid,
                    fh: f,
                    offset,
                    whence,
                })
                .await
            }
            Fop::Readdir {
                gfid,
                fh,
                offset,
                plus,
            } => {
                // Listings are read from the attribute child; offsets
                // are that replica's, so stay on it while it is up.
                let fhs = self.fds.get(fh)?;
                let live = self.live(&fhs);
                let i = self.attr_child(&live)?;
                let fop = Fop::Readdir {
                    gfid,
                    fh: fhs[i].unwrap().0,
                    offset,
                    plus,
                };
                let mut rep = self.children[i].call(cx, fop).await?;
                // Entries' attributes may be cached only if they come from
                // the attribute child, as every other answer about them does
                // (see `pick`); if the listing's replica is no longer it,
                // they are fetched again when used.
                if let Reply::Entries(ents) = &mut rep {
                    let up = self.up();
                    for e in ents.iter_mut() {
                        if e.attr
                            .as_ref()
                            .is_some_and(|_| self.attr_child(&up).ok() != Some(i))
                        {
                            e.cacheable = false;
                        }
                    }
                }
                Ok(rep)
            }
            Fop::Write {
                gfid,
                fh,
                offset,
                data,
            } => {
                self.with_handles(cx, fh, false, |f| Fop::Write {
                    gfid,
                    fh: f,
                    offset,
                    data: data.clone(),
                })
                .await
            }
            Fop::Flush { gfid, fh } => {
                self.with_handles(cx, fh, false, |f| Fop::Flush { gfid, fh: f })
                    .await
            }
            Fop::Fsync { gfid, fh, datasync } => {
                self.with_handles(cx, fh, false, |f| Fop::Fsync {
                    gfid,
                    fh: f,
                    datasync,
                })
                .await
            }
            Fop::Fallocate {
                gfid,
                fh,
                mode,
                offset,
                len,
            } => {
                self.with_handles(cx, fh, false, |f| Fop::Fallocate {
                    gfid,
                    fh: f,
                    mode,
                    offset,
                    len,
                })
                .await
            }
            Fop::Release { gfid, fh } => {
                {
                    let mut ob = self.open_behind.lock().unwrap();
                    if let Some(v) = ob.get_mut(&gfid) {
                        v.retain(|&f| f != fh);
                        if v.is_empty() {
                            ob.remove(&gfid);
                        }
                    }
                }
                let _ = self
                    .with_handles(cx, fh, true, |f| Fop::Release { gfid, fh: f })
                    .await;
                Ok(Reply::Ok)
            }
            Fop::Releasedir { gfid, fh } => {
                let _ = self
                    .with_handles(cx, fh, true, |f| Fop::Releasedir { gfid, fh: f })
                    .await;
                Ok(Reply::Ok)
            }
            Fop::Unlink { parent, ref name } => {
                self.open_for_real(cx, parent, name).await;
                self.to_all(cx, fop).await
            }
            Fop::Rename {
                newparent,
                ref newname,
                ..
            } => {
                self.open_for_real(cx, newparent, newname).await;
                self.to_all(cx, fop).await
            }
            Fop::Setattr { .. }
            | Fop::Mknod { .. }
            | Fop::Mkdir { .. }
            | Fop::Rmdir { .. }
            | Fop::Link { .. }
            | Fop::Symlink { .. }
            | Fop::Setxattr { .. }
            | Fop::Removexattr { .. } => self.to_all(cx, fop).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(errno: i32) -> FsResult<Reply> {
        Err(FsError::errno(errno))
    }

    #[test]
    fn merge_judges_replica_answers() {
        // All good.
        let ok = merge(vec![(0, Ok(Reply::Ok)), (1, Ok(Reply::Ok))]).unwrap();
        assert_eq!(ok.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
        // One down: still acknowledged by the live ones.
        let ok = merge(vec![(0, e(libc::ENOTCONN)), (1, Ok(Reply::Ok))]).unwrap();
        assert_eq!(ok.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1]);
        // A live replica refusing the change is never hidden.
        assert_eq!(
            merge(vec![(0, Ok(Reply::Ok)), (1, e(libc::ENOSPC))])
                .unwrap_err()
                .errno,
            libc::ENOSPC
        );
        // Everyone down.
        assert_eq!(
            merge(vec![(0, e(libc::ENOTCONN))]).unwrap_err().errno,
            libc::ENOTCONN
        );
        // Real errors win over "down".
        assert_eq!(
            merge(vec![(0, e(libc::ENOTCONN)), (1, e(libc::EEXIST))])
                .unwrap_err()
                .errno,
            libc::EEXIST
        );
    }
}
