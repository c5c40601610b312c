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

use crate::cluster::distribute::make_pointer;
use crate::cluster::distribute::options::{MIN_FREE_DISK, REBAL_THROTTLE, WEIGHTED_REBALANCE};
use crate::cluster::layout::{name_hash, Layout};
use crate::core::desc::VolDesc;
use crate::core::fop::{HOLD_LEASE, HOLD_XATTR, LAYOUT_XATTR, LINKTO_XATTR};
use crate::core::{
    Attr, Child, Ctx, DirEntry, FileKind, Fop, FsError, FsResult, Gfid, Name, Reply, SetAttr,
};
use crate::graph::{Env, Graph};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

fn root() -> Ctx {
    Ctx::root()
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
        let dht = graph.of_kind("cluster/distribute").next().ok_or_else(|| {
            anyhow::anyhow!("volume {} has no distribute translator", desc.volume)
        })?;
        let mut sets = Vec::new();
        let mut ids = Vec::new();
        let mut draining = Vec::new();
        for (i, &c) in dht.children.iter().enumerate() {
            let n = &graph.nodes()[c];
            sets.push(n.child.clone());
            draining.push(n.params.get("draining").map(String::as_str) == Some("on"));
            ids.push(
                n.params
                    .get("set-id")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(i as u32),
            );
        }
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
        crate::cluster::dir_meta::heal(&self.by_id, d.gfid).await?;
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

    /// Keeps in mind a name of a file with several, on a set being
    /// emptied: it moves with its other names after the pass.
    fn note_linked(&self, dir: Gfid, name: Name, a: Attr, from: usize, home: usize) {
        let mut linked = self.linked.lock().unwrap();
        if linked.len() >= LINKED_MAX && !linked.contains_key(&a.gfid) {
            drop(linked);
            self.left(from);
            return;
        }
        linked
            .entry(a.gfid)
            .or_insert_with(|| Linked {
                attr: a,
                from,
                names: Vec::new(),
            })
            .names
            .push((dir, name, home));
    }

    /// Moves the files with several names this pass met: each whose
    /// names were all met goes, with all of them, to the set its first
    /// name hashes to; the others stay (made meanwhile: the next pass).
    async fn move_linked(&self) {
        let groups: Vec<Linked> = std::mem::take(&mut *self.linked.lock().unwrap())
            .into_values()
            .collect();
        for g in groups {
            if self.stopped() {
                return;
            }
            if (g.names.len() as u64) < u64::from(g.attr.nlink) {
                self.left(g.from);
                continue;
            }
            if let Err(e) = self.move_group(&g).await {
                tracing::warn!(volume = %self.volume, gfid = %g.attr.gfid, names = g.names.len(), "not moved: {e}");
                self.count(|p| p.failed += 1);
            }
        }
    }

    /// Moves a file with several names (`move_linked`).
    async fn move_group(&self, g: &Linked) -> FsResult<()> {
        let (dir, name, to) = &g.names[0];
        let dst = &self.sets[*to];
        match lookup_on(dst, *dir, name).await? {
            Some(t) if t.gfid == g.attr.gfid => {}
            Some(_) => return Err(name_taken()),
            None => {
                let from = self.ids[g.from];
                make_pointer(dst, &root(), (*dir, name), g.attr.gfid, from).await?;
            }
        }
        if !self.has_room(dst, g.attr.size).await {
            self.left(g.from);
            return Ok(());
        }
        self.carry(&g.attr, (g.from, *to), &g.names).await
    }

    /// Whether file `a`, listed as `name` in `dir` on set `from`, is no
    /// longer there under that name.
    async fn gone(&self, dir: Gfid, name: &Name, a: &Attr, from: usize) -> bool {
        match lookup_on(&self.sets[from], dir, name).await {
            Ok(t) => t.is_none_or(|t| t.gfid != a.gfid),
            Err(_) => false,
        }
    }

    /// Gives each set not being emptied a weight of its size in MiB (its
    /// smallest brick's, as its statfs answers). A set whose size cannot
    /// be learnt leaves every weight equal: a guess would move files for
    /// nothing.
    async fn weigh(&self) {
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

    /// Whether `set` takes `size` more bytes and stays above
    /// `cluster.min-free-disk`.
    async fn has_room(&self, set: &Child, size: u64) -> bool {
        match set.call(&root(), Fop::Statfs { gfid: Gfid::ROOT }).await {
            Ok(Reply::StatFs(s)) if s.blocks > 0 => {
                let unit = s.frsize.max(1) as u64;
                let free = s.bavail.saturating_mul(unit).saturating_sub(size);
                free.saturating_mul(100) / s.blocks.saturating_mul(unit) >= self.min_free
            }
            _ => false,
        }
    }

    /// A file that could not move now was left on set `from`.
    fn left(&self, from: usize) {
        let draining = self.draining[from];
        self.count(|p| {
            p.skipped += 1;
            p.skipped_draining += draining as u64;
        });
    }

    fn position(&self, set: u32) -> Option<usize> {
        self.ids.iter().position(|&i| i == set)
    }

    /// Makes the directory on every set that lacks it.
    async fn make_everywhere(&self, d: &Dir) -> FsResult<()> {
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
    async fn lay_out(&self, dir: Gfid) -> FsResult<Layout> {
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
    fn as_positions(&self, l: &Layout) -> Option<Layout> {
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

    /// Moves a file from set `from` to set `to`, or leaves it with a
    /// pointer on `to`.
    async fn move_file(
        &self,
        dir: Gfid,
        name: &Name,
        a: &Attr,
        from: usize,
        to: usize,
    ) -> FsResult<()> {
        let (src, dst) = (&self.sets[from], &self.sets[to]);
        let there = lookup_on(dst, dir, name).await?;
        if a.kind != FileKind::File && a.kind != FileKind::Dir {
            return self.move_special(dir, name, a, (from, to), there).await;
        }
        match &there {
            // Copied already by a rebalance that stopped before the end.
            Some(t)
                if t.gfid == a.gfid
                    && t.linkto.is_none()
                    && (t.size, t.mtime) == (a.size, a.mtime) =>
            {
                src.call(&root(), unlink(dir, name)).await?;
                self.count(|p| p.moved += 1);
                return Ok(());
            }
            // ... but the file changed since on `from`: copied again.
            Some(t) if t.gfid == a.gfid && t.linkto.is_none() => {
                truncate(dst, a.gfid).await?;
            }
            Some(t) if t.gfid == a.gfid => {}
            Some(_) => return Err(name_taken()),
            None => {
                make_pointer(dst, &root(), (dir, name), a.gfid, self.ids[from]).await?;
            }
        }
        // From here `to` has a pointer to `from`: the file is found
        // whatever happens next.
        if a.nlink > 1 || !self.has_room(dst, a.size).await {
            self.left(from);
            return Ok(());
        }
        self.carry(a, (from, to), &[(dir, name.clone(), to)]).await
    }

    /// Moves file `a` from set `from` into its pointer on set `to`, named
    /// `names` (the first is the pointer's; each with the set it now
    /// hashes to): copied, held, completed, every other name made a link
    /// of the copy on `to` or a pointer to it elsewhere, then gone from
    /// `from`. A target that fills up meanwhile leaves the file where it
    /// is, its pointer emptied.
    async fn carry(
        &self,
        a: &Attr,
        (from, to): (usize, usize),
        names: &[(Gfid, Name, usize)],
    ) -> FsResult<()> {
        let (src, dst) = (&self.sets[from], &self.sets[to]);
        let mut now = a.clone();
        let moved: FsResult<()> = async {
            self.copy_and_finish((src, dst), a, &mut now).await?;
            for (dir, name, home) in &names[1..] {
                self.name_there(*dir, name, a.gfid, *home, to).await?;
            }
            hold(src, a.gfid, "moved").await?;
            for (dir, name, _) in names {
                src.call(&root(), unlink(*dir, name)).await?;
            }
            // The mark stays only while handles are open on the old copy.
            unhold(src, a.gfid).await;
            Ok(())
        }
        .await;
        if let Err(e) = moved {
            unhold(src, a.gfid).await;
            if !(e.is(libc::ENOSPC) || e.is(libc::EDQUOT)) {
                return Err(e);
            }
            // The target filled up meanwhile: the file stays, and its
            // pointer gives back the room the partial copy took.
            tracing::info!(volume = %self.volume, gfid = %a.gfid, "no room left on the target: the file stays where it is");
            if getattr(dst, a.gfid).await?.linkto.is_some() {
                truncate(dst, a.gfid).await?;
            }
            self.left(from);
            return Ok(());
        }
        self.count(|p| {
            p.moved += 1;
            p.bytes += now.size;
        });
        // Tests kill the server here, between two files.
        fail::fail_point!("rebalance-moved");
        Ok(())
    }

    /// Makes name `name` in `dir` on set `home` stand for file `gfid`,
    /// which now lives on set `to`: a link of it there, or a pointer to
    /// it (made, or turned towards `to`).
    async fn name_there(
        &self,
        dir: Gfid,
        name: &Name,
        gfid: Gfid,
        home: usize,
        to: usize,
    ) -> FsResult<()> {
        let set = &self.sets[home];
        let point = Fop::Setxattr {
            gfid,
            name: LINKTO_XATTR.into(),
            value: serde_bytes::ByteBuf::from(self.ids[to].to_le_bytes().to_vec()),
            flags: 0,
        };
        match lookup_on(set, dir, name).await? {
            Some(t) if t.gfid != gfid => Err(name_taken()),
            Some(t) if home != to && t.linkto != Some(self.ids[to]) => {
                set.call(&root(), point).await.map(|_| ())
            }
            Some(_) => Ok(()),
            None if home == to => {
                let link = Fop::Link {
                    gfid,
                    newparent: dir,
                    newname: name.clone(),
                };
                set.call(&root(), link).await.map(|_| ())
            }
            None => {
                // Linked to another name's pointer there: turned towards
                // `to` too.
                if make_pointer(set, &root(), (dir, name), gfid, self.ids[to]).await? {
                    set.call(&root(), point).await?;
                }
                Ok(())
            }
        }
    }

    /// Copies file `a` from `src` into its pointer on `dst` while clients
    /// may still write it, until it holds still (a few tries); then holds
    /// it, so that nothing changes it any more, and ends the move.
    async fn copy_and_finish(
        &self,
        (src, dst): (&Child, &Child),
        a: &Attr,
        now: &mut Attr,
    ) -> FsResult<()> {
        // What `dst` holds: the file as it was when last copied. (After
        // the last try the file may have changed again: `finish_move`
        // compares it with what was copied, not with what was seen last.)
        let mut copied = now.clone();
        for _ in 0..COPY_TRIES {
            copied = now.clone();
            copy_data(src, dst, a.gfid, copied.size).await?;
            let after = getattr(src, a.gfid).await?;
            if same_data(&after, &copied) {
                break;
            }
            *now = after;
        }
        *now = copied;
        hold(src, a.gfid, &HOLD_LEASE.as_secs().to_string()).await?;
        self.finish_move((src, dst), a.gfid, now).await
    }

    /// Completes the copy on `dst` of a file held on `src` and copied as
    /// it was (`now`): copied again if it changed before the hold, then
    /// the copy takes the file's xattrs, owner, mode and times and stops
    /// being a pointer. The caller then marks the file moved on `src` (so
    /// that handles still open on it ask where it went) and unlinks it.
    async fn finish_move(
        &self,
        (src, dst): (&Child, &Child),
        gfid: Gfid,
        now: &mut Attr,
    ) -> FsResult<()> {
        let last = getattr(src, gfid).await?;
        if !same_data(&last, now) {
            // Exactly as it is: what was copied before may have holes
            // punched since.
            truncate(dst, gfid).await?;
            copy_data(src, dst, gfid, last.size).await?;
        }
        *now = last;
        copy_xattrs(src, dst, gfid).await?;
        // The pointer becomes the file: its mode, owner and times.
        let set = SetAttr {
            mode: Some(now.perm),
            uid: Some(now.uid),
            gid: Some(now.gid),
            atime: Some(crate::core::fop::TimeSet::At(now.atime.0, now.atime.1)),
            mtime: Some(crate::core::fop::TimeSet::At(now.mtime.0, now.mtime.1)),
            ..Default::default()
        };
        dst.call(&root(), Fop::Setattr { gfid, set }).await?;
        let _ = dst
            .call(
                &root(),
                Fop::Removexattr {
                    gfid,
                    name: LINKTO_XATTR.into(),
                },
            )
            .await;
        Ok(())
    }

    /// Moves a symlink, device, fifo or socket: made again on `to` (same
    /// gfid, owner, mode, times), then unlinked from `from`. A name
    /// looked up in between finds one or the other.
    async fn move_special(
        &self,
        dir: Gfid,
        name: &Name,
        a: &Attr,
        (from, to): (usize, usize),
        there: Option<Attr>,
    ) -> FsResult<()> {
        let (src, dst) = (&self.sets[from], &self.sets[to]);
        if a.nlink > 1 {
            self.left(from);
            return Ok(());
        }
        match there {
            Some(t) if t.gfid == a.gfid && t.linkto.is_none() => {}
            Some(t) if t.gfid == a.gfid => {
                dst.call(&root(), unlink(dir, name)).await?;
                self.make_like(dir, name, a, src, dst).await?;
            }
            Some(_) => return Err(name_taken()),
            None => self.make_like(dir, name, a, src, dst).await?,
        }
        src.call(&root(), unlink(dir, name)).await?;
        self.count(|p| p.moved += 1);
        Ok(())
    }

    async fn make_like(
        &self,
        dir: Gfid,
        name: &Name,
        a: &Attr,
        src: &Child,
        dst: &Child,
    ) -> FsResult<()> {
        let owner = Ctx {
            uid: a.uid,
            gid: a.gid,
            ..root()
        };
        let fop = match a.kind {
            FileKind::Symlink => {
                let Reply::Data(t) = src.call(&root(), Fop::Readlink { gfid: a.gfid }).await?
                else {
                    return Err(FsError::new(libc::EIO, "readlink answered without data"));
                };
                Fop::Symlink {
                    parent: dir,
                    name: name.clone(),
                    gfid: a.gfid,
                    target: serde_bytes::ByteBuf::from(t.to_vec()),
                }
            }
            kind => Fop::Mknod {
                parent: dir,
                name: name.clone(),
                gfid: a.gfid,
                mode: a.perm | kind.type_bits(),
                umask: 0,
                rdev: a.rdev,
                linkto: None,
            },
        };
        dst.call(&owner, fop).await?;
        // A symlink's own times are not set through a handle to it.
        let symlink = a.kind == FileKind::Symlink;
        let time = |(s, n): (i64, u32)| (!symlink).then_some(crate::core::fop::TimeSet::At(s, n));
        let set = SetAttr {
            uid: Some(a.uid),
            gid: Some(a.gid),
            atime: time(a.atime),
            mtime: time(a.mtime),
            ..Default::default()
        };
        dst.call(&root(), Fop::Setattr { gfid: a.gfid, set })
            .await?;
        Ok(())
    }

    pub async fn fini(&self) {
        self.graph.fini().await;
    }
}

/// The layout of a directory that has none: as a client makes it.
fn fresh(dir: Gfid, weights: &[u64]) -> Layout {
    Layout::fresh(weights, crate::cluster::layout::start_of(dir)).expect("sets have weights")
}

fn lookup(parent: Gfid, name: &Name) -> Fop {
    Fop::Lookup {
        parent,
        name: name.clone(),
    }
}

fn unlink(parent: Gfid, name: &Name) -> Fop {
    Fop::Unlink {
        parent,
        name: name.clone(),
    }
}

/// What `name` in `dir` is on `set`, if anything.
async fn lookup_on(set: &Child, dir: Gfid, name: &Name) -> FsResult<Option<Attr>> {
    match set.call(&root(), lookup(dir, name)).await {
        Ok(r) => Ok(Some(r.into_attr()?)),
        Err(e) if absent(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Another file holds the name a file moves to.
fn name_taken() -> FsError {
    FsError::new(
        libc::EEXIST,
        "another file has this name on the set it hashes to",
    )
}

async fn getattr(set: &Child, gfid: Gfid) -> FsResult<Attr> {
    set.call(&root(), Fop::Getattr { gfid }).await?.into_attr()
}

/// Empties the file on `set` (a partial or stale copy).
async fn truncate(set: &Child, gfid: Gfid) -> FsResult<()> {
    let empty = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    set.call(&root(), Fop::Setattr { gfid, set: empty })
        .await
        .map(|_| ())
}

/// Whether a file's data is as it was (same size and times).
fn same_data(a: &Attr, b: &Attr) -> bool {
    (a.size, a.mtime, a.ctime) == (b.size, b.mtime, b.ctime)
}

/// Ends this rebalancer's hold of a file on `set`, if it has one.
async fn unhold(set: &Child, gfid: Gfid) {
    let fop = Fop::Removexattr {
        gfid,
        name: HOLD_XATTR.into(),
    };
    let _ = set.call(&root(), fop).await;
}

/// Holds the file on every brick of `set` for this rebalancer
/// (`brick::hold`): `value` seconds, or `moved`.
async fn hold(set: &Child, gfid: Gfid, value: &str) -> FsResult<()> {
    let fop = Fop::Setxattr {
        gfid,
        name: HOLD_XATTR.into(),
        value: serde_bytes::ByteBuf::from(value.as_bytes().to_vec()),
        flags: 0,
    };
    set.call(&root(), fop).await.map(|_| ())
}

/// Every entry of a directory on one set, with attributes.
async fn list(set: &Child, dir: Gfid) -> FsResult<Vec<DirEntry>> {
    let fh = match set.call(&root(), Fop::Opendir { gfid: dir }).await {
        Ok(r) => r.into_fh()?,
        Err(e) if e.is(libc::ESTALE) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    let mut offset = 0;
    let res = loop {
        let fop = Fop::Readdir {
            gfid: dir,
            fh,
            offset,
            plus: true,
        };
        match set.call(&root(), fop).await {
            Ok(Reply::Entries(ents)) if ents.is_empty() => break Ok(()),
            Ok(Reply::Entries(ents)) => {
                offset = ents.last().map_or(offset, |e| e.next);
                out.extend(ents);
            }
            Ok(other) => break Err(crate::core::fop::unexpected(other)),
            Err(e) => break Err(e),
        }
    };
    let _ = set.call(&root(), Fop::Releasedir { gfid: dir, fh }).await;
    res.map(|_| out)
}

/// Copies a file's data extents (holes stay holes) and its size.
async fn copy_data(src: &Child, dst: &Child, gfid: Gfid, size: u64) -> FsResult<()> {
    let rfh = src
        .call(
            &root(),
            Fop::Open {
                gfid,
                flags: libc::O_RDONLY,
            },
        )
        .await?
        .into_fh()?;
    let wfh = match dst
        .call(
            &root(),
            Fop::Open {
                gfid,
                flags: libc::O_WRONLY,
            },
        )
        .await
        .and_then(Reply::into_fh)
    {
        Ok(f) => f,
        Err(e) => {
            let _ = src.call(&root(), Fop::Release { gfid, fh: rfh }).await;
            return Err(e);
        }
    };
    let res = copy_extents(src, dst, gfid, (rfh, wfh), size).await;
    let _ = src.call(&root(), Fop::Release { gfid, fh: rfh }).await;
    let _ = dst.call(&root(), Fop::Release { gfid, fh: wfh }).await;
    res?;
    let set = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    dst.call(&root(), Fop::Setattr { gfid, set }).await?;
    Ok(())
}

async fn copy_extents(
    src: &Child,
    dst: &Child,
    gfid: Gfid,
    (rfh, wfh): (u64, u64),
    size: u64,
) -> FsResult<()> {
    let seek = |offset, whence| Fop::Lseek {
        gfid,
        fh: rfh,
        offset,
        whence,
    };
    let mut at = 0;
    while at < size {
        let data = match src.call(&root(), seek(at, libc::SEEK_DATA)).await {
            Ok(Reply::Offset(o)) => o,
            // No data after `at`: the rest is a hole.
            Err(e) if e.is(libc::ENXIO) => break,
            Ok(other) => return Err(crate::core::fop::unexpected(other)),
            // No SEEK_DATA below: copy everything.
            Err(_) => at,
        };
        let hole = match src.call(&root(), seek(data, libc::SEEK_HOLE)).await {
            Ok(Reply::Offset(o)) if o > data => o.min(size),
            _ => size,
        };
        let mut off = data;
        while off < hole {
            let n = (hole - off).min(COPY_PIECE) as u32;
            let read = Fop::Read {
                gfid,
                fh: rfh,
                offset: off,
                size: n,
            };
            let Reply::Data(buf) = src.call(&root(), read).await? else {
                return Err(FsError::new(libc::EIO, "read answered without data"));
            };
            if buf.is_empty() {
                break;
            }
            let len = buf.len() as u64;
            let write = Fop::Write {
                gfid,
                fh: wfh,
                offset: off,
                data: buf,
            };
            dst.call(&root(), write).await?;
            off += len;
        }
        at = hole.max(off);
    }
    Ok(())
}

/// Copies the file's own xattrs (distribute's are not the file's).
async fn copy_xattrs(src: &Child, dst: &Child, gfid: Gfid) -> FsResult<()> {
    for (name, value) in crate::cluster::dir_meta::xattrs(src, gfid).await? {
        let set = Fop::Setxattr {
            gfid,
            name,
            value: serde_bytes::ByteBuf::from(value),
            flags: 0,
        };
        dst.call(&root(), set).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::testkit::{desc_grown, env_over, mem_bricks, n, Rig};

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
        let bricks = mem_bricks(3);
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
        let bricks = mem_bricks(4);
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
