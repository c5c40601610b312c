//! The replicate translator: N children holding the same data.
//!
//! Every modifying operation goes to every child that is up, concurrently,
//! and is acknowledged only when all of them have answered. File data is
//! read from one child chosen by the object's gfid (`read_child`), so that
//! different files spread over the replicas; names and attributes come from
//! one child for every object (`attr_child`), so that they are stable.
//!
//! Changes run as transactions (`txn.rs`): quorum, a lock kept across a
//! client's consecutive changes, a durable record on the bricks of which
//! replicas missed a change (the blame), before the change is acknowledged.
//! Reads never go to a copy another copy blames (`readable`); the blame
//! each copy records comes back with every lookup and getattr.
//! `merge` is the single place where answers of the replicas are judged,
//! and `readable` the single place where copies are chosen for reading.

mod changes;
mod coded_reads;
pub mod disperse;
mod handles;
mod holes;
mod open;
pub mod options;
pub mod pace;
mod reads;
mod room;
mod txn;

use super::HandleMap;
use async_trait::async_trait;
use handles::{How, Open};
use mortar_core::{
    Attr, Child, Ctx, Event, Fop, FsError, FsResult, Gfid, Reply, SetAttr, StatFs, Xlator,
};
use open::Behind;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use txn::Txns;
pub use txn::{bits, Quorum};

/// Blamed objects a copy lists at most for a readdirplus (beyond, its
/// listing's attributes are not trusted: the kernel looks entries up).
const BLAMED_MAX: usize = 1024;

/// Objects whose blame is remembered at most (beyond, the oldest knowledge
/// is dropped and learnt again from the next lookup).
const BAD_MAX: usize = 1 << 16;

pub struct Replicate {
    name: String,
    children: Vec<Child>,
    /// Whether any child is up (what this translator tells its parent).
    up: std::sync::atomic::AtomicBool,
    /// Our handle → what it stands for on each child (`handles.rs`).
    fds: HandleMap<Arc<Open>>,
    /// Held while handles are opened again on children that came back, so
    /// that two operations on one handle do not both re-open it.
    reopening: tokio::sync::Mutex<()>,
    /// `cluster.read-hash-mode`: 0 reads from the first replica up, 1 (and
    /// above, for now) spreads reads by gfid.
    read_hash_mode: std::sync::atomic::AtomicU8,
    /// Our handles that read through anonymous brick handles, by gfid:
    /// files, and directories listed without being opened.
    open_behind: std::sync::Mutex<std::collections::HashMap<Gfid, Vec<u64>>>,
    dirs_behind: std::sync::Mutex<std::collections::HashMap<Gfid, Vec<u64>>>,
    /// Our handles of files opened for writing whose opens are still on
    /// their way to the bricks, or failed there (`open.rs`).
    opening: Mutex<HashMap<u64, Arc<open::Opening>>>,
    /// Listings of directories not opened (`How::DirBehind`), by our handle.
    listings: Mutex<HashMap<u64, reads::Listed>>,
    txns: Arc<Txns>,
    /// Objects whose copies are blamed: gfid → those copies.
    bad: Mutex<HashMap<Gfid, u32>>,
    /// Objects another client changed (a brick recalled them): what this
    /// client knows of their copies' blame is asked again before use.
    recheck: Mutex<std::collections::HashSet<Gfid>>,
    /// The size of `recheck`, read on every call without taking its lock.
    rechecks: std::sync::atomic::AtomicUsize,
    /// The child that keeps names and metadata but no data.
    arbiter: Option<usize>,
    /// What each child last said it blames (`Fop::Blamed`), kept under
    /// its lease (`Gfid::BLAMES`) while the bricks grant leases.
    blames: reads::BlamesKept,
    /// A disperse set's code: each child holds a fragment of each file's
    /// data instead of a copy (`disperse.rs`).
    coding: Option<disperse::Coding>,
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

/// Whether `merge` judges these answers a success.
fn merged_ok(res: &[(usize, FsResult<Reply>)]) -> bool {
    res.iter().any(|(_, r)| r.is_ok()) && txn::refused(res).is_empty()
}

impl Replicate {
    pub fn new(name: String, children: Vec<Child>) -> Self {
        Replicate {
            fds: HandleMap::new(),
            reopening: tokio::sync::Mutex::new(()),
            read_hash_mode: std::sync::atomic::AtomicU8::new(1),
            open_behind: Default::default(),
            dirs_behind: Default::default(),
            opening: Mutex::default(),
            listings: Mutex::default(),
            txns: Txns::new(name.clone(), children.clone()),
            bad: Mutex::new(HashMap::new()),
            recheck: Mutex::default(),
            rechecks: std::sync::atomic::AtomicUsize::new(0),
            arbiter: None,
            up: Default::default(),
            blames: reads::BlamesKept::new(children.len()),
            coding: None,
            name,
            children,
        }
    }

    pub fn with_arbiter(mut self, arbiter: Option<usize>) -> Self {
        self.arbiter = arbiter.filter(|&a| a < self.children.len());
        self
    }

    pub(super) fn up(&self) -> Vec<usize> {
        (0..self.children.len())
            .filter(|&i| self.children[i].is_up())
            .collect()
    }

    /// The answer to hand up from several successful replicas: the
    /// attribute child's, so that the attributes of an object (times differ
    /// by a few nanoseconds between copies) do not flip from call to call,
    /// which tools like tar take for a change.
    /// The attributes of other objects it carries (a made name's
    /// directory, what a change of names left) are each taken from their
    /// own attribute child's answer, or left out.
    pub(super) fn pick(&self, gfid: Gfid, mut ok: Vec<(usize, Reply)>) -> Reply {
        let idx: Vec<usize> = ok.iter().map(|(i, _)| *i).collect();
        let want = self.attr_child(gfid, &idx).unwrap_or(idx[0]);
        let pos = ok.iter().position(|(i, _)| *i == want).unwrap_or(0);
        let from_its_copy = |g: Gfid, get: &dyn Fn(&Reply) -> Option<Attr>| {
            let want = self.attr_child(g, &idx).ok()?;
            ok.iter()
                .find(|(i, _)| *i == want)
                .and_then(|(_, r)| get(r))
        };
        match ok[pos].1.clone() {
            Reply::Entry(mut e) => {
                e.parent = e
                    .parent
                    .and_then(|p| from_its_copy(p.gfid, &|r| parent_in(r)));
                Reply::Entry(e)
            }
            Reply::Created { mut entry, fh } => {
                entry.parent = entry
                    .parent
                    .and_then(|p| from_its_copy(p.gfid, &|r| parent_in(r)));
                Reply::Created { entry, fh }
            }
            // All of them or none: md-cache takes the list as complete.
            Reply::Unnamed(attrs) => attrs
                .iter()
                .map(|a| {
                    from_its_copy(a.gfid, &|r| match r {
                        Reply::Unnamed(v) => v.iter().find(|b| b.gfid == a.gfid).cloned(),
                        _ => None,
                    })
                })
                .collect::<Option<Vec<Attr>>>()
                .map_or(Reply::Ok, Reply::Unnamed),
            _ => ok.swap_remove(pos).1,
        }
    }

    pub(super) async fn fan_out(
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
}

/// The directory attributes a made name's answer carries.
fn parent_in(r: &Reply) -> Option<Attr> {
    match r {
        Reply::Entry(e) | Reply::Created { entry: e, .. } => e.parent.clone(),
        _ => None,
    }
}

/// Errors that say a copy refused a change for want of room.
fn no_room(e: &FsError) -> bool {
    e.is(libc::ENOSPC) || e.is(libc::EDQUOT)
}

/// Errors that say one copy cannot serve a read, where another copy may:
/// it is down, lacks the object (ESTALE, ENOENT), lost the handle (EBADF),
/// or failed to read (EIO). Any other error is the answer itself.
fn copy_fault(e: &FsError) -> bool {
    matches!(
        e.errno,
        libc::ENOTCONN | libc::ESTALE | libc::ENOENT | libc::EBADF | libc::EIO
    )
}

/// The objects a change is a transaction on: the object itself for data
/// and metadata, the directories whose names change for the rest.
fn txn_objects(fop: &Fop) -> Vec<Gfid> {
    match fop {
        Fop::Mknod { parent, .. }
        | Fop::Create { parent, .. }
        | Fop::Mkdir { parent, .. }
        | Fop::Symlink { parent, .. }
        | Fop::Unlink { parent, .. }
        | Fop::Rmdir { parent, .. } => vec![*parent],
        Fop::Link { newparent, .. } => vec![*newparent],
        Fop::Rename {
            parent, newparent, ..
        } => vec![*parent, *newparent],
        Fop::Setattr { gfid, .. }
        | Fop::Write { gfid, .. }
        | Fop::Fallocate { gfid, .. }
        | Fop::Setxattr { gfid, .. }
        | Fop::Removexattr { gfid, .. } => vec![*gfid],
        // Not changes: no transaction (asked of one object all the same,
        // so that a new fop is placed here on purpose).
        Fop::Lookup { .. }
        | Fop::Getattr { .. }
        | Fop::Readlink { .. }
        | Fop::Open { .. }
        | Fop::Read { .. }
        | Fop::Flush { .. }
        | Fop::Fsync { .. }
        | Fop::Release { .. }
        | Fop::Lseek { .. }
        | Fop::Opendir { .. }
        | Fop::Readdir { .. }
        | Fop::Releasedir { .. }
        | Fop::Statfs { .. }
        | Fop::Getxattr { .. }
        | Fop::Listxattr { .. }
        | Fop::Lock { .. }
        | Fop::Unlock { .. }
        | Fop::Clear { .. }
        | Fop::Pending { .. }
        | Fop::Blamed { .. }
        | Fop::Checksum { .. }
        | Fop::Resolve { .. }
        | Fop::Parent { .. } => vec![fop.gfid()],
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

    fn slow(&self) -> Vec<usize> {
        self.coding.as_ref().map_or_else(Vec::new, |c| {
            let mut slow = c.pace.slow();
            slow.extend(c.write_pace.slow());
            slow.sort_unstable();
            slow.dedup();
            slow
        })
    }

    fn notify(&self, from: usize, ev: Event) -> Option<Event> {
        match ev {
            // The child's list of blamed objects is about to grow.
            Event::Recall { gfid, .. } if gfid == Gfid::BLAMES => {
                self.blames.drop_child(from);
                None
            }
            Event::Contention(gfid) => {
                // Ours alone: we hold the lock.
                self.txns.contention(gfid);
                None
            }
            Event::Up | Event::Down => {
                self.blames.drop_child(from);
                let any = self.children.iter().any(|c| c.is_up());
                let was = self.up.swap(any, std::sync::atomic::Ordering::AcqRel);
                (any != was).then_some(if any { Event::Up } else { Event::Down })
            }
            Event::Recall {
                gfid,
                ack,
                name,
                claim,
            } => {
                // A heal or another client's change may have made a copy
                // good or bad since this client last asked.
                if self.recheck.lock().unwrap().insert(gfid) {
                    self.rechecks
                        .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                }
                Some(Event::Recall {
                    gfid,
                    ack,
                    name,
                    claim,
                })
            }
            ev @ Event::LeasesLost => {
                self.blames.drop_child(from);
                Some(ev)
            }
        }
    }

    async fn fini(&self) {
        self.txns.release_all().await;
    }

    fn reconfigure(&self, set: &mortar_core::Options) {
        self.blames.set_leased(
            mortar_core::terms::CACHE_INVALIDATION.bool(set),
            mortar_core::terms::cache_time(set),
        );
        self.read_hash_mode.store(
            options::READ_HASH_MODE.int(set) as u8,
            std::sync::atomic::Ordering::Relaxed,
        );
        if self.coding.is_none() {
            // (A disperse set's quorum is its K.)
            self.txns.set_quorum(Quorum::from_options(
                options::QUORUM_TYPE.str(set),
                Some(options::QUORUM_COUNT.int(set) as usize),
            ));
        }
    }

    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        if self.rechecks.load(std::sync::atomic::Ordering::Acquire) > 0 {
            let gfid = fop.gfid();
            if self.recheck.lock().unwrap().remove(&gfid) {
                self.rechecks
                    .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                self.refresh(cx, gfid).await;
            }
        }
        match fop {
            // Lookups ask every replica, so that a name missing on one copy
            // is still found on the others.
            Fop::Lookup { .. } => self.lookup(cx, fop).await,
            Fop::Getattr { .. }
            | Fop::Parent { .. }
            | Fop::Readlink { .. }
            | Fop::Listxattr { .. }
            | Fop::Getxattr { .. } => self.meta_one(cx, fop).await,
            Fop::Statfs { .. } => {
                let mut up = self.up();
                if up.iter().any(|&i| Some(i) != self.arbiter) {
                    // The arbiter's disk says nothing about room for data.
                    up.retain(|&i| Some(i) != self.arbiter);
                }
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
                let mut s = min_statfs(stats);
                if let Some(c) = &self.coding {
                    // Each brick holds 1/K of the data.
                    let k = c.g.k() as u64;
                    (s.blocks, s.bfree, s.bavail) = (s.blocks * k, s.bfree * k, s.bavail * k);
                }
                Ok(Reply::StatFs(s))
            }
            Fop::Create { .. } | Fop::Open { .. } if self.coding.is_some() => {
                self.coded_open(cx, fop).await
            }
            Fop::Create { .. } => self.create(cx, fop).await,
            Fop::Open { .. } | Fop::Opendir { .. } => self.open_all(cx, fop).await,
            Fop::Read { .. } if self.coding.is_some() => self.coded_read(cx, fop).await,
            Fop::Lseek { .. } if self.coding.is_some() => self.coded_seek(cx, fop).await,
            Fop::Read { .. } | Fop::Lseek { .. } => self.read_handle(cx, fop).await,
            Fop::Readdir {
                gfid,
                fh,
                offset,
                plus,
            } => self.readdir(cx, gfid, fh, offset, plus).await,
            Fop::Write { .. } if self.coding.is_some() => self.coded_write(cx, fop).await,
            Fop::Fallocate { .. } if self.coding.is_some() => self.coded_fallocate(cx, fop).await,
            Fop::Write { .. } | Fop::Fallocate { .. } => self.change_handles(cx, fop).await,
            Fop::Flush { .. } | Fop::Fsync { .. } => self.with_handles(cx, fop).await,
            Fop::Release { gfid, fh } => {
                self.appending_ends(fh);
                self.behind_ends(gfid, fh);
                self.opening_ends(cx, fh).await;
                self.release(cx, fop).await;
                Ok(Reply::Ok)
            }
            Fop::Releasedir { gfid, fh } => {
                self.behind_ends(gfid, fh);
                self.listing_ends(gfid, fh);
                self.release(cx, fop).await;
                Ok(Reply::Ok)
            }
            Fop::Unlink { parent, ref name } => {
                self.open_for_real(cx, parent, name, Behind::Files).await;
                self.change(cx, fop).await
            }
            Fop::Rename {
                newparent,
                ref newname,
                ..
            } => {
                self.open_for_real(cx, newparent, newname, Behind::Both)
                    .await;
                self.change(cx, fop).await
            }
            Fop::Rmdir { parent, ref name } => {
                self.open_for_real(cx, parent, name, Behind::Dirs).await;
                self.change(cx, fop).await
            }
            Fop::Setattr {
                set: SetAttr { size: Some(_), .. },
                ..
            } if self.coding.is_some() => self.coded_truncate(cx, fop).await,
            Fop::Setattr { .. }
            | Fop::Mknod { .. }
            | Fop::Mkdir { .. }
            | Fop::Link { .. }
            | Fop::Symlink { .. }
            | Fop::Setxattr { .. }
            | Fop::Removexattr { .. } => self.change(cx, fop).await,
            // Any copy that has it will do: the answer is only its gfid
            // (attributes are asked for again by gfid).
            Fop::Resolve { .. } => {
                let up = self.up();
                let res = self.fan_out(cx, &up, |_| Some(fop.clone())).await;
                super::first_ok(res.into_iter().map(|(_, r)| r))
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
