//! Rebalance: after replica sets are added, gives every directory a
//! layout over all the sets (fix-layout) and moves each file to the set
//! its name hashes to in it (docs/distribute.md).
//!
//! It runs a client graph of the whole volume and talks to the sets below
//! its distribute translator directly, as root. Directories are walked
//! from the root, breadth first; each one is
//!
//! 1. made on every set that lacks it (same gfid, mode and owner),
//! 2. given its new layout, written with the generation the rebalance
//!    commits (`generation`, one above the volume's commit): the
//!    directory is in flux from then on, so clients look a missing name up
//!    on every set and read the layout at every use,
//! 3. with `migrate`, listed on every set: a file whose name now hashes to
//!    another set is moved there (`move_file`): copied, then held on its
//!    set (`brick::hold`) while the last changes are copied and it leaves,
//!    so that files open on clients move too; one with several names
//!    stays, with a pointer on the set each name hashes to, unless its set
//!    is being emptied: then it moves with all its names after the pass
//!    (`move_linked`); one the target has no room for stays too; pointers
//!    no longer needed are removed.
//!
//! A second pass catches files created meanwhile under an older layout.
//! Then, if nothing failed, the volume's layout commit becomes
//! `generation` (the caller commits it): every directory is authoritative
//! again. Directories already carrying `generation` keep their layout, so a
//! rebalance that stopped (a crash, `stop`) starts again where it was.
//!
//! Layout: `mod.rs` the walk; `layouts` directories made and laid out;
//! `moves` files moved; `set` what is asked of one set.

mod layouts;
mod moves;
mod set;

use mortar_core::desc::VolDesc;
use mortar_core::fop::{HOLD_LEASE, HOLD_XATTR, LAYOUT_XATTR, LINKTO_XATTR};
use mortar_core::{
    Attr, Child, Ctx, DirEntry, FileKind, Fop, FsError, FsResult, Gfid, Name, Reply, SetAttr,
};
use mortar_graph::{Env, Graph};
use mortar_xlators::cluster::distribute::make_pointer;
use mortar_xlators::cluster::distribute::options::{
    MIN_FREE_DISK, REBAL_THROTTLE, WEIGHTED_REBALANCE,
};
use mortar_xlators::cluster::layout::{name_hash, Layout};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use set::*;

/// Bytes copied per read and write while moving a file.
const COPY_PIECE: u64 = 1 << 20;
/// Times a file written during its move is copied again before it is left.
const COPY_TRIES: usize = 3;

/// What a rebalance has done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Directories laid out (each pass counts them again).
    pub dirs: u64,
    /// Files looked at.
    pub scanned: u64,
    pub moved: u64,
    pub bytes: u64,
    /// Files left where they are, with a pointer (several names, no room), in
    /// the last pass.
    pub skipped: u64,
    /// Of those, left on a set being emptied.
    #[serde(default)]
    pub skipped_draining: u64,
    pub failed: u64,
    /// Seconds since it started.
    pub secs: u64,
    /// The pass it is in (0 the first; a second catches files created
    /// meanwhile).
    #[serde(default)]
    pub pass: u32,
    /// Seconds the pass is expected to take still, once enough is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_secs: Option<u64>,
}

/// Where the pass in progress is: what its estimate comes from.
struct Pass {
    started: Instant,
    /// Directories visited, and known (visited or queued).
    dirs: u64,
    known: u64,
    /// Entries other than directories listed.
    scanned: u64,
}

impl Pass {
    fn new() -> Pass {
        Pass {
            started: Instant::now(),
            dirs: 0,
            known: 1,
            scanned: 0,
        }
    }

    /// Seconds left: the work seen so far took the time it took, and the
    /// directories known but not visited hold as many files each as those
    /// visited (a breadth-first walk learns most directories early). None
    /// until a few seconds and directories have passed.
    fn eta(&self) -> Option<u64> {
        let secs = self.started.elapsed().as_secs_f64();
        if secs < 2.0 || self.dirs < 2 {
            return None;
        }
        let per_dir = self.scanned as f64 / self.dirs as f64;
        let done = (self.dirs + self.scanned) as f64;
        let total = self.known as f64 * (1.0 + per_dir);
        Some((secs * (total - done).max(0.0) / done).round() as u64)
    }
}

/// One directory to visit: where it is and what it is.
struct Dir {
    gfid: Gfid,
    /// Its parent and name (none for the root).
    at: Option<(Gfid, Name)>,
    attr: Option<Attr>,
}

pub struct Rebalancer {
    volume: String,
    graph: Graph,
    sets: Vec<Child>,
    /// The sets in set-id order (as `dir_meta` takes them).
    by_id: Vec<Child>,
    ids: Vec<u32>,
    /// Each set's weight: 0 for a set being emptied, else 1, or its size
    /// in MiB with `weighted` (measured when the run starts).
    weights: Mutex<Vec<u64>>,
    /// The sets a remove-brick empties.
    draining: Vec<bool>,
    /// The sets whose files this rebalancer moves (and whose stale
    /// pointers it removes): the others are another server's share.
    own: Vec<bool>,
    /// `cluster.weighted-rebalance`.
    weighted: bool,
    generation: u64,
    migrate: bool,
    /// `cluster.min-free-disk`: no file moves to a set with less room.
    min_free: u64,
    parallel: usize,
    lazy: bool,
    stop: AtomicBool,
    started: Instant,
    progress: Mutex<Progress>,
    pass: Mutex<Pass>,
    /// Files with several names on sets being emptied, met in this pass:
    /// their attributes, set, and names (with the set each hashes to),
    /// moved together once the pass has met them all.
    linked: Mutex<HashMap<Gfid, Linked>>,
}

/// A file with several names, as a pass met it.
struct Linked {
    attr: Attr,
    from: usize,
    names: Vec<(Gfid, Name, usize)>,
}

/// Files with several names kept in mind for a pass at most.
const LINKED_MAX: usize = 100_000;

/// The rebalance's requests: the pool's own, in the background (the
/// bricks serve their clients first, `brick::priority`).
fn root() -> Ctx {
    Ctx::background()
}

fn absent(e: &FsError) -> bool {
    e.is(libc::ESTALE) || e.is(libc::ENOENT)
}

impl Rebalancer {
    /// A rebalancer over the volume `desc` describes, writing layouts
    /// with `generation`; with `migrate`, the files of the sets `owns`
    /// (by id) are moved too.
    pub fn new(
        desc: &VolDesc,
        env: &Env,
        generation: u64,
        migrate: bool,
        owns: &[u32],
    ) -> anyhow::Result<Arc<Rebalancer>> {
        let graph = Graph::build(desc, env)?;
        let below = graph.distribute_sets()?.ok_or_else(|| {
            anyhow::anyhow!("volume {} has no distribute translator", desc.volume)
        })?;
        let sets: Vec<Child> = below.iter().map(|s| s.child.clone()).collect();
        let ids: Vec<u32> = below.iter().map(|s| s.id).collect();
        let draining: Vec<bool> = below.iter().map(|s| s.draining).collect();
        let (parallel, lazy) = match REBAL_THROTTLE.str(&desc.options) {
            "lazy" => (1, true),
            "aggressive" => (4, false),
            _ => (2, false),
        };
        let own = ids.iter().map(|id| owns.contains(id)).collect();
        let mut by_id: Vec<(u32, Child)> = ids.iter().copied().zip(sets.iter().cloned()).collect();
        by_id.sort_by_key(|(id, _)| *id);
        Ok(Arc::new(Rebalancer {
            volume: desc.volume.clone(),
            graph,
            by_id: by_id.into_iter().map(|(_, c)| c).collect(),
            sets,
            ids,
            weights: Mutex::new(draining.iter().map(|&d| u64::from(!d)).collect()),
            own,
            draining,
            weighted: WEIGHTED_REBALANCE.bool(&desc.options),
            generation,
            migrate,
            min_free: MIN_FREE_DISK.percent(&desc.options),
            parallel,
            lazy,
            stop: AtomicBool::new(false),
            started: Instant::now(),
            progress: Mutex::new(Progress::default()),
            pass: Mutex::new(Pass::new()),
            linked: Mutex::new(HashMap::new()),
        }))
    }

    /// Waits until every brick is reached, at most `t`; true if all are.
    pub async fn wait_up(&self, t: Duration) -> bool {
        self.graph.wait_up(t).await == self.graph.leaves().count()
    }

    /// Whether files that cannot move (no room, names made meanwhile) were left
    /// on a set being emptied.
    pub fn left_on_draining(&self) -> bool {
        self.progress.lock().unwrap().skipped_draining > 0
    }

    pub fn volume(&self) -> &str {
        &self.volume
    }

    pub fn progress(&self) -> Progress {
        let mut p = self.progress.lock().unwrap().clone();
        p.secs = self.started.elapsed().as_secs();
        p.eta_secs = self.pass.lock().unwrap().eta();
        p
    }

    /// Asks the walk to end after the directory it is in.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn count(&self, f: impl FnOnce(&mut Progress)) {
        f(&mut self.progress.lock().unwrap());
    }

    /// Runs the whole rebalance: true when every directory was laid out
    /// (and, migrating, every file is where its name hashes or has a
    /// pointer there), so that the caller may commit `generation`.
    pub async fn run(&self) -> bool {
        if self.weighted {
            self.weigh().await;
        }
        let passes = if self.migrate { 2 } else { 1 };
        for pass in 0..passes {
            let failed_before = self.progress.lock().unwrap().failed;
            // What the last pass left behind is what stays behind.
            self.count(|p| {
                p.skipped = 0;
                p.skipped_draining = 0;
                p.pass = pass;
            });
            *self.pass.lock().unwrap() = Pass::new();
            if !self.walk().await {
                return false;
            }
            self.move_linked().await;
            let p = self.progress();
            tracing::info!(volume = %self.volume, pass, dirs = p.dirs, moved = p.moved, skipped = p.skipped, failed = p.failed, "rebalance pass done");
            if p.failed > failed_before || self.stopped() {
                return false;
            }
        }
        true
    }

    /// One pass over every directory; false if one could not be done or
    /// the rebalance was stopped.
    async fn walk(&self) -> bool {
        let mut queue = std::collections::VecDeque::from([Dir {
            gfid: Gfid::ROOT,
            at: None,
            attr: None,
        }]);
        while let Some(d) = queue.pop_front() {
            if self.stopped() {
                return false;
            }
            match self.visit(&d).await {
                Ok((subdirs, scanned)) => {
                    queue.extend(subdirs);
                    let mut pass = self.pass.lock().unwrap();
                    pass.dirs += 1;
                    pass.scanned += scanned;
                    pass.known = pass.dirs + queue.len() as u64;
                }
                Err(e) => {
                    tracing::warn!(volume = %self.volume, dir = %d.gfid, "rebalance stops: {e}");
                    self.count(|p| p.failed += 1);
                    return false;
                }
            }
        }
        true
    }

    /// Lays out one directory and moves its files; answers its
    /// subdirectories and how many other entries it had.
    async fn visit(&self, d: &Dir) -> FsResult<(Vec<Dir>, u64)> {
        self.make_everywhere(d).await?;
        // Its copies (new ones too) made to agree with the first set's.
        mortar_xlators::cluster::dir_meta::heal(&self.by_id, d.gfid).await?;
        let layout = self.lay_out(d.gfid).await?;
        self.count(|p| p.dirs += 1);
        let mut subdirs: Vec<Dir> = Vec::new();
        let mut moves = Vec::new();
        let mut others = 0;
        for (i, set) in self.sets.iter().enumerate() {
            for e in list(set, d.gfid).await? {
                let Some(a) = e.attr else { continue };
                let Ok(name) = Name::new(e.name.to_vec()) else {
                    continue;
                };
                if a.kind == FileKind::Dir {
                    if !subdirs.iter().any(|s| s.gfid == a.gfid) {
                        subdirs.push(Dir {
                            gfid: a.gfid,
                            at: Some((d.gfid, name)),
                            attr: Some(a),
                        });
                    }
                    continue;
                }
                others += 1;
                if !self.migrate || !self.own[i] {
                    continue;
                }
                self.count(|p| p.scanned += 1);
                let home = self.position(layout.owner(name_hash(&name)));
                if let Some(to) = a.linkto {
                    // A pointer away from the set its name hashes to now
                    // is no longer asked: removed.
                    if home != Some(i) {
                        tracing::debug!(dir = %d.gfid, ?name, to, "pointer no longer needed");
                        let _ = set.call(&root(), unlink(d.gfid, &name)).await;
                    }
                    continue;
                }
                if let Some(home) = home.filter(|&h| h != i) {
                    if a.nlink > 1 && a.kind == FileKind::File && self.draining[i] {
                        self.note_linked(d.gfid, name, a, i, home);
                        continue;
                    }
                    moves.push((name, a, i, home));
                }
            }
        }
        use futures_util::StreamExt;
        let mut moving = futures_util::stream::iter(moves)
            .map(|(name, a, from, to)| async move {
                let started = Instant::now();
                match self.move_file(d.gfid, &name, &a, from, to).await {
                    Ok(()) => {}
                    // Removed meanwhile: nothing to move.
                    Err(e) if absent(&e) && self.gone(d.gfid, &name, &a, from).await => {
                        tracing::debug!(volume = %self.volume, dir = %d.gfid, ?name, "gone before it moved: {e}");
                    }
                    Err(e) => {
                        tracing::warn!(volume = %self.volume, dir = %d.gfid, ?name, "not moved: {e}");
                        self.count(|p| p.failed += 1);
                    }
                }
                if self.lazy {
                    tokio::time::sleep(started.elapsed()).await;
                }
            })
            .buffer_unordered(self.parallel);
        while moving.next().await.is_some() {
            if self.stopped() {
                return Err(FsError::new(libc::EINTR, "rebalance stopped"));
            }
        }
        Ok((subdirs, others))
    }

    pub async fn fini(&self) {
        self.graph.fini().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_graph::testkit::{desc_grown, env_over, n, test_bricks, Rig};

    #[test]
    fn the_time_left_assumes_unvisited_directories_hold_what_visited_ones_did() {
        let mut pass = Pass::new();
        pass.started -= Duration::from_secs(10);
        assert_eq!(pass.eta(), None, "nothing known yet");
        // 10 of 20 directories seen, 9 files each: half of the work done.
        (pass.dirs, pass.known, pass.scanned) = (10, 20, 90);
        assert_eq!(pass.eta(), Some(10));
        pass.known = 10;
        assert_eq!(pass.eta(), Some(0));
    }

    #[tokio::test]
    async fn a_rebalance_moves_files_home_and_leaves_every_name_findable_by_one_lookup() {
        let bricks = test_bricks(3);
        let before = Rig::over(&bricks[..2], 2, 1);
        let d = before.mkdir(Gfid::ROOT, "d").await.unwrap();
        let mut files = Vec::new();
        for i in 0..60 {
            let dir = if i % 2 == 0 { Gfid::ROOT } else { d };
            let name = format!("f{i}");
            let g = before.create(dir, &name, name.as_bytes()).await.unwrap();
            files.push((dir, name, g));
        }
        // One renamed (a pointer), one hard-linked, one held open (it
        // moves: this brick does not enforce holds, real ones do).
        before
            .call(Fop::Rename {
                parent: Gfid::ROOT,
                name: n("f0"),
                newparent: Gfid::ROOT,
                newname: n("renamed"),
                flags: 0,
            })
            .await
            .unwrap();
        files[0].1 = "renamed".into();
        before
            .call(Fop::Link {
                gfid: files[2].2,
                newparent: d,
                newname: n("link"),
            })
            .await
            .unwrap();
        let held = before
            .call(Fop::Open {
                gfid: files[4].2,
                flags: libc::O_RDWR,
            })
            .await
            .unwrap()
            .into_fh()
            .unwrap();

        let r =
            Rebalancer::new(&desc_grown(3, 2), &env_over(&bricks), 3, true, &[0, 1, 2]).unwrap();
        assert!(r.wait_up(Duration::from_secs(1)).await);
        assert!(r.run().await, "{:?}", r.progress());
        let p = r.progress();
        assert!(p.moved > 10, "{p:?}");
        // The linked file stays where it is (if its names hash
        // elsewhere now), in each pass.
        assert!(p.skipped <= 3, "{p:?}");
        assert_eq!(p.failed, 0);
        r.fini().await;

        // The directory is on the new set, with its mode; the new set got
        // files; no name is on two sets (pointers aside).
        let after = Rig::grown(&bricks, 3);
        assert!(bricks[2].tree().contains_key("/d"));
        assert!(bricks[2].tree().len() > 10, "{:?}", bricks[2].tree());
        let mut seen = std::collections::BTreeMap::new();
        for (i, b) in bricks.iter().enumerate() {
            let pointers = b.pointers();
            for p in b
                .tree()
                .into_keys()
                .filter(|k| k != "/d" && !pointers.contains_key(k))
            {
                assert!(seen.insert(p.clone(), i).is_none(), "{p} on two sets");
            }
        }
        // Committed: each name found by one lookup (two via a pointer),
        // with its data.
        for (dir, name, g) in &files {
            let before = after.calls();
            let e = after
                .call(Fop::Lookup {
                    parent: *dir,
                    name: n(name),
                })
                .await
                .unwrap()
                .into_entry()
                .unwrap();
            let asked = after.calls() - before;
            assert!(asked <= 3, "{name}: {asked} requests");
            assert_eq!(e.attr.gfid, *g);
        }
        for (_, name, g) in &files[1..] {
            assert_eq!(after.read(*g).await.unwrap(), name.as_bytes());
        }
        let mut listed = after.list(d).await.unwrap();
        listed.sort();
        assert_eq!(listed.len(), 31, "{listed:?}");
        before
            .call(Fop::Release {
                gfid: files[4].2,
                fh: held,
            })
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn rebalancers_sharing_the_sets_among_them_move_each_file_once() {
        let bricks = test_bricks(4);
        let before = Rig::over(&bricks[..2], 2, 1);
        let mut dirs = vec![Gfid::ROOT];
        for i in 0..4 {
            dirs.push(before.mkdir(Gfid::ROOT, &format!("d{i}")).await.unwrap());
        }
        let mut files = Vec::new();
        for i in 0..200 {
            let dir = dirs[i % dirs.len()];
            let name = format!("f{i}");
            let g = before.create(dir, &name, name.as_bytes()).await.unwrap();
            files.push((dir, name, g));
        }
        // Two servers: one owns sets 0 and 2, the other 1 and 3; both
        // walk every directory at once.
        let desc = desc_grown(4, 2);
        let env = env_over(&bricks);
        let a = Rebalancer::new(&desc, &env, 3, true, &[0, 2]).unwrap();
        let b = Rebalancer::new(&desc, &env, 3, true, &[1, 3]).unwrap();
        assert!(a.wait_up(Duration::from_secs(1)).await);
        assert!(b.wait_up(Duration::from_secs(1)).await);
        let (ra, rb) = tokio::join!(a.run(), b.run());
        assert!(ra && rb, "{:?} {:?}", a.progress(), b.progress());
        let (pa, pb) = (a.progress(), b.progress());
        assert!(pa.moved > 0 && pb.moved > 0, "{pa:?} {pb:?}");
        assert_eq!(pa.failed + pb.failed, 0);
        // The first pass scans what each owns: between them every file
        // once (the second pass scans again).
        assert!(pa.scanned + pb.scanned >= 200, "{pa:?} {pb:?}");
        a.fini().await;
        b.fini().await;

        let after = Rig::grown(&bricks, 3);
        for b in &bricks[2..] {
            assert!(b.tree().len() > 20, "{:?}", b.tree());
        }
        let mut seen = std::collections::BTreeMap::new();
        for (i, b) in bricks.iter().enumerate() {
            let pointers = b.pointers();
            for p in b
                .tree()
                .into_keys()
                .filter(|k| k.rsplit('/').next().is_some_and(|f| f.starts_with('f')))
                .filter(|k| !pointers.contains_key(k))
            {
                assert!(seen.insert(p.clone(), i).is_none(), "{p} on two sets");
            }
        }
        for (dir, name, g) in &files {
            let e = after
                .call(Fop::Lookup {
                    parent: *dir,
                    name: n(name),
                })
                .await
                .unwrap()
                .into_entry()
                .unwrap();
            assert_eq!(e.attr.gfid, *g);
            assert_eq!(after.read(*g).await.unwrap(), name.as_bytes());
        }
    }
}
