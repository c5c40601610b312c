//! The distribute translator: files are placed on one of its children
//! (replica sets) by the hash of their name within their directory's
//! layout (`cluster::layout`); directories exist on every child.
//!
//! A directory's layout is kept on each of its copies in the
//! `trusted.mortar.layout` xattr, whole, with the generation it was
//! written under; the client reads it from one copy and keeps it. A
//! layout whose generation is the volume's `layout-commit` is
//! authoritative: a name missing from the set its hash falls to does not
//! exist, so a lookup or create asks that one set, at any number of sets.
//! Only a directory whose layout is older (the set list changed and a
//! rebalance has not passed it yet), or has none, has a missing name
//! looked for on every set.
//!
//! A file that lives elsewhere than its name's hash says (renamed to a
//! name that hashes elsewhere, or hard-linked) has a **pointer** there: an
//! empty file of mode `---------T` whose `trusted.mortar.linkto` names the
//! set that holds it, by the set's stable id. Lookups follow pointers;
//! listings and searches by gfid skip them.
//!
//! Sets are named by stable ids (desc param `set-id`), not positions:
//! layouts, pointers and the readdir offsets handed to the kernel (the set
//! id in the top 16 bits) stay valid when the set list changes. Listings
//! read the sets in id order, directories from the first set only.

pub mod options;

use crate::cluster::layout::{name_hash, Layout};
use crate::cluster::replicate::join_all;
use crate::cluster::HandleMap;
use async_trait::async_trait;
use mortar_core::fop::{LAYOUT_XATTR, POINTER_PERM};
use mortar_core::{
    Attr, Child, Ctx, Entry, Event, FileKind, Fop, FsError, FsResult, Gfid, Name, Reply, StatFs,
    Xlator,
};
use options::MIN_FREE_DISK;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

const SET_SHIFT: u32 = 48;
const OFFSET_MASK: u64 = (1 << SET_SHIFT) - 1;
/// Objects whose replica set is remembered.
const PLACED_MAX: usize = 1 << 18;
/// Directories whose layout is remembered.
const LAYOUTS_MAX: usize = 1 << 16;
/// How often a client moves a directory's times on its first set at most.
const TOUCH_EVERY: std::time::Duration = std::time::Duration::from_millis(500);
/// How long a set's free space is believed while it is far from the limit.
const SPACE_FRESH: std::time::Duration = std::time::Duration::from_secs(5);

/// A directory's layout as this client uses it.
#[derive(Debug)]
struct DirLayout {
    /// Ranges naming sets by id.
    layout: Layout,
    /// Whether a miss on the hashed set is final (module comment).
    committed: bool,
}

/// Where a name was found.
struct Found {
    entry: Entry,
    /// The child holding the object (for a directory, the one asked).
    at: usize,
    /// The child holding a pointer to it under this name, if any.
    pointer: Option<usize>,
}

pub struct Distribute {
    name: String,
    children: Vec<Child>,
    /// Each child's stable set id.
    ids: Vec<u32>,
    /// Children in the order listings read them (by set id).
    order: Vec<usize>,
    /// Children being emptied by a remove-brick: new directories are not
    /// laid out over them.
    draining: Vec<bool>,
    /// `cluster.min-free-disk`, in percent.
    min_free: std::sync::atomic::AtomicU64,
    /// Each child's free and whole space in bytes, and when it was asked.
    space: Mutex<Vec<Option<(std::time::Instant, u64, u64)>>>,
    /// Bytes written to each child since its space was asked.
    written: Vec<std::sync::atomic::AtomicU64>,
    /// The volume's layout generation (module comment).
    commit: u64,
    /// Whether any child is up (what this translator tells its parent).
    up: std::sync::atomic::AtomicBool,
    /// Where each known object lives: the child holding a file, None for
    /// a directory (on every child).
    placed: Mutex<HashMap<Gfid, Option<usize>>>,
    layouts: Mutex<HashMap<Gfid, Arc<DirLayout>>>,
    /// Directories a metadata change (chmod, chown, xattrs) did not reach
    /// on every set: their copies are healed (`dir_meta`) at their next use.
    missed: Arc<Mutex<HashSet<Gfid>>>,
    /// When this client last moved a directory's times on its first set
    /// (`touch_dir`).
    touched: Mutex<HashMap<Gfid, tokio::time::Instant>>,
    /// Directories whose copies this client compared already (once each,
    /// when first listed).
    checked: Mutex<HashMap<Gfid, ()>>,
    /// Our handle → (child, child's handle) for files; every child's for dirs.
    fds: HandleMap<Arc<Handles>>,
}

/// What one of our handles stands for.
struct Handles {
    /// A directory's handle on each child (None where it has none).
    fhs: Vec<Option<u64>>,
    /// A directory's readers ahead of its listing.
    ahead: Option<super::listing::Ahead>,
    /// A file's handle.
    file: Option<OpenFile>,
}

/// An open file: where it is open, and how, to open it again where a
/// rebalance moved it.
struct OpenFile {
    gfid: Gfid,
    flags: i32,
    /// The child and its handle.
    at: Mutex<(usize, u64)>,
}

impl Handles {
    fn file(gfid: Gfid, flags: i32, at: usize, fh: u64) -> Arc<Handles> {
        Arc::new(Handles {
            fhs: Vec::new(),
            ahead: None,
            file: Some(OpenFile {
                gfid,
                flags: flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC),
                at: Mutex::new((at, fh)),
            }),
        })
    }
}

/// How long a client waits for a file a rebalance holds, asking again.
const HELD_WAIT: std::time::Duration =
    mortar_core::fop::HOLD_LEASE.saturating_add(std::time::Duration::from_secs(10));
/// The first pause before asking again about a held file (doubling to
/// `HELD_PAUSE_MAX`).
const HELD_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);
const HELD_PAUSE_MAX: std::time::Duration = std::time::Duration::from_millis(500);

/// Where a client waiting for a file a rebalance moves stands.
struct Waiting {
    /// The pause before asking again while the file is held.
    pause: std::time::Duration,
    /// Whether the file was found where it was, and not held: sent there
    /// once more (a move given up leaves it there), not again.
    retried_unheld: bool,
}

impl Waiting {
    fn new() -> Self {
        Waiting {
            pause: HELD_PAUSE,
            retried_unheld: false,
        }
    }

    async fn pause(&mut self) {
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(HELD_PAUSE_MAX);
    }
}

/// Bounded caches: cleared when full, refilled by asking again.
fn remember<V>(map: &Mutex<HashMap<Gfid, V>>, max: usize, k: Gfid, v: V) {
    let mut m = map.lock().unwrap();
    if m.len() >= max {
        m.clear();
    }
    m.insert(k, v);
}

/// Makes a pointer on `set` under `name` in `parent` to file `gfid` on
/// the set of id `to`. A file with several names hashing to one set has
/// one pointer there with as many names (a pointer has the file's gfid,
/// and a gfid names one object per brick): the name is linked to it, and
/// the answer is true.
pub async fn make_pointer(
    set: &Child,
    cx: &Ctx,
    (parent, name): (Gfid, &Name),
    gfid: Gfid,
    to: u32,
) -> FsResult<bool> {
    let fop = Fop::Mknod {
        parent,
        name: name.clone(),
        gfid,
        mode: libc::S_IFREG | POINTER_PERM,
        umask: 0,
        rdev: 0,
        linkto: Some(to),
    };
    match set.call(cx, fop).await {
        Err(e) if e.is(libc::EEXIST) => {
            let link = Fop::Link {
                gfid,
                newparent: parent,
                newname: name.clone(),
            };
            set.call(cx, link).await.map(|_| true)
        }
        r => r.map(|_| false),
    }
}

/// Heals the copies of directory `gfid` on `sets` (set-id order) if
/// `always`, or if they disagree; forgets it in `missed` once every set
/// was reached.
async fn heal_dir_copies(
    sets: Vec<Child>,
    gfid: Gfid,
    missed: Arc<Mutex<HashSet<Gfid>>>,
    always: bool,
) {
    let copies = super::dir_meta::copies(&sets, gfid).await;
    if !always && !super::dir_meta::disagree(&copies) {
        return;
    }
    match super::dir_meta::heal_copies(&sets, gfid, copies).await {
        Ok(Some(_)) => {
            missed.lock().unwrap().remove(&gfid);
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(dir = %gfid, "directory metadata not healed: {e}"),
    }
}

/// The entry a lookup answered, if it is not a pointer.
fn file_entry(r: FsResult<Reply>) -> Option<Entry> {
    match r {
        Ok(Reply::Entry(e)) if e.attr.linkto.is_none() => Some(e),
        _ => None,
    }
}

fn pointer_of(r: &FsResult<Reply>) -> Option<u32> {
    match r {
        Ok(Reply::Entry(e)) => e.attr.linkto,
        Ok(Reply::Attr(a)) => a.linkto,
        _ => None,
    }
}

impl Distribute {
    /// Over children with set ids 0, 1, 2, ... and layout generation 1.
    pub fn new(name: String, children: Vec<Child>) -> Self {
        let ids = (0..children.len() as u32).collect();
        Self::with_sets(name, children, ids, 1)
    }

    /// Over children with the given stable set ids, under the volume's
    /// layout generation `commit`.
    pub fn with_sets(name: String, children: Vec<Child>, ids: Vec<u32>, commit: u64) -> Self {
        assert!(!children.is_empty() && ids.len() == children.len());
        assert!(ids.iter().all(|&i| i < 1 << 16), "set ids fit 16 bits");
        let mut order: Vec<usize> = (0..children.len()).collect();
        order.sort_by_key(|&i| ids[i]);
        Distribute {
            name,
            children,
            draining: vec![false; ids.len()],
            min_free: std::sync::atomic::AtomicU64::new(10),
            space: Mutex::new(vec![None; ids.len()]),
            written: (0..ids.len()).map(|_| Default::default()).collect(),
            ids,
            order,
            commit,
            placed: Mutex::new(HashMap::new()),
            layouts: Mutex::new(HashMap::new()),
            missed: Default::default(),
            checked: Mutex::new(HashMap::new()),
            touched: Mutex::new(HashMap::new()),
            up: Default::default(),
            fds: HandleMap::new(),
        }
    }

    /// Marks the children being emptied by a remove-brick.
    pub fn with_draining(mut self, draining: Vec<bool>) -> Self {
        assert_eq!(draining.len(), self.children.len());
        self.draining = draining;
        self
    }

    fn learn(&self, attr: &Attr, child: usize) {
        if attr.kind == FileKind::Dir {
            remember(&self.placed, PLACED_MAX, attr.gfid, None);
        } else if attr.linkto.is_none() {
            remember(&self.placed, PLACED_MAX, attr.gfid, Some(child));
        }
    }

    fn child_of(&self, set: u32) -> Option<usize> {
        self.ids.iter().position(|&i| i == set)
    }

    fn all(&self) -> Vec<usize> {
        (0..self.children.len()).collect()
    }

    async fn on(&self, cx: &Ctx, which: Vec<usize>, fop: &Fop) -> Vec<(usize, FsResult<Reply>)> {
        join_all(which.into_iter().map(|i| {
            let (child, cx, fop) = (self.children[i].clone(), cx.clone(), fop.clone());
            async move { (i, child.call(&cx, fop).await) }
        }))
        .await
    }

    async fn on_all(&self, cx: &Ctx, fop: &Fop) -> Vec<(usize, FsResult<Reply>)> {
        self.on(cx, self.all(), fop).await
    }

    /// The layout a directory gets when it is made: one equal range per
    /// set, turned by a point taken from its gfid.
    fn fresh(&self, dir: Gfid) -> Layout {
        self.fresh_over(dir, &self.all(), None)
    }

    /// As `fresh`, over the children `on` only, each with the share it
    /// has in `parent`'s layout if that gives one to every child it is
    /// laid out over (a weighted rebalance's shares pass on to new
    /// directories), else equal ones.
    fn fresh_over(&self, dir: Gfid, on: &[usize], parent: Option<&Layout>) -> Layout {
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
    async fn store_layout(&self, dir: Gfid, layout: &Layout, generation: u64, on: &[usize]) {
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
    async fn layout_of(&self, dir: Gfid) -> FsResult<Arc<DirLayout>> {
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
    fn hashed(&self, dl: &DirLayout, name: &Name) -> usize {
        self.child_of(dl.layout.owner(name_hash(name)))
            .expect("layouts in use name known sets")
    }

    /// Finds `name` in `parent`: on its hashed set, following a pointer,
    /// and on every set only if the directory is in flux.
    async fn find(&self, cx: &Ctx, parent: Gfid, name: &Name) -> FsResult<Found> {
        let dl = self.layout_of(parent).await?;
        let h = self.hashed(&dl, name);
        let fop = Fop::Lookup {
            parent,
            name: name.clone(),
        };
        let first = self.children[h].call(cx, fop.clone()).await;
        match (&first, pointer_of(&first).map(|s| self.child_of(s))) {
            (Ok(_), Some(Some(at))) => {
                if let Some(entry) = file_entry(self.children[at].call(cx, fop.clone()).await) {
                    self.learn(&entry.attr, at);
                    return Ok(Found {
                        entry,
                        at,
                        pointer: Some(h),
                    });
                }
                // A pointer to nothing, or one a rebalance has just made
                // the file (it then unlinks the old copy): asked again.
                if let Some(entry) = file_entry(self.children[h].call(cx, fop.clone()).await) {
                    self.learn(&entry.attr, h);
                    return Ok(Found {
                        entry,
                        at: h,
                        pointer: None,
                    });
                }
                // Else left for a rebalance to clear.
            }
            (Ok(Reply::Entry(e)), None) => {
                self.learn(&e.attr, h);
                return Ok(Found {
                    entry: e.clone(),
                    at: h,
                    pointer: None,
                });
            }
            (Ok(other), None) => return Err(mortar_core::fop::unexpected(other.clone())),
            (Ok(_), Some(None)) => {
                tracing::warn!(xlator = %self.name, %parent, name = ?name, "pointer to an unknown set")
            }
            // In flux, its hashed set out of reach (a set just added, not
            // reached yet) or without the directory (added since it was
            // made): the name may be on another.
            (Err(e), _) if (e.is(libc::ENOTCONN) || e.is(libc::ESTALE)) && !dl.committed => {}
            (Err(e), _) if !e.is(libc::ENOENT) => return Err(e.clone()),
            (Err(_), _) => {}
        }
        if dl.committed {
            return Err(FsError::errno(libc::ENOENT));
        }
        let others: Vec<usize> = self.all().into_iter().filter(|&i| i != h).collect();
        for (i, r) in self.on(cx, others, &fop).await {
            if let Some(entry) = file_entry(r) {
                self.learn(&entry.attr, i);
                return Ok(Found {
                    entry,
                    at: i,
                    pointer: None,
                });
            }
        }
        // Found nowhere else: the hashed set's answer, if it was out of
        // reach (it may have the name).
        Err(first
            .err()
            .filter(|e| e.is(libc::ENOTCONN))
            .unwrap_or_else(|| FsError::errno(libc::ENOENT)))
    }

    /// The child holding a non-directory object, or None for a directory.
    async fn locate(&self, cx: &Ctx, gfid: Gfid) -> FsResult<Option<usize>> {
        if gfid == Gfid::ROOT {
            return Ok(None);
        }
        if let Some(&at) = self.placed.lock().unwrap().get(&gfid) {
            return Ok(at);
        }
        let mut last = FsError::errno(libc::ESTALE);
        for (i, r) in self.on_all(cx, &Fop::Getattr { gfid }).await {
            match r.and_then(Reply::into_attr) {
                Ok(a) if a.kind == FileKind::Dir => {
                    self.learn(&a, i);
                    return Ok(None);
                }
                Ok(a) if a.linkto.is_some() => {}
                Ok(a) => {
                    self.learn(&a, i);
                    return Ok(Some(i));
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Directories: on every set that has the directory (or its parent),
    /// `first` first (the hashed set: it decides EEXIST and the like), or
    /// if it has not, the first in id order that has; then all others at
    /// once. A set without the directory (added since, and not passed by a
    /// rebalance yet) is left out. Answers the first set's reply and the
    /// sets it was done on.
    ///
    /// A change of metadata (mode, owner, xattrs) that the first set made
    /// is not given up when another set fails: that copy is healed from
    /// the first at the directory's next use (`dir_meta`).
    async fn dir_op(&self, cx: &Ctx, fop: Fop, first: usize) -> FsResult<(Reply, Vec<usize>)> {
        let absent = |e: &FsError| e.is(libc::ESTALE) || e.is(libc::ENOENT);
        let metadata = matches!(
            fop,
            Fop::Setattr { .. } | Fop::Setxattr { .. } | Fop::Removexattr { .. }
        );
        let mut skipped = Vec::new();
        let mut answer = None;
        let mut last = FsError::errno(libc::ESTALE);
        for i in std::iter::once(first).chain(self.order.iter().copied().filter(|&i| i != first)) {
            match self.children[i].call(cx, fop.clone()).await {
                Ok(rep) => {
                    answer = Some((i, rep));
                    break;
                }
                Err(e) if absent(&e) => {
                    skipped.push(i);
                    last = e;
                }
                Err(e) => return Err(e),
            }
        }
        let Some((f, rep)) = answer else {
            return Err(last);
        };
        let others: Vec<usize> = self
            .all()
            .into_iter()
            .filter(|i| *i != f && !skipped.contains(i))
            .collect();
        let mut done = vec![f];
        for (i, r) in self.on(cx, others, &fop).await {
            match r {
                Ok(_) => done.push(i),
                Err(e) if absent(&e) => {
                    tracing::debug!(xlator = %self.name, child = i, "{}: not on this set yet", fop.name())
                }
                Err(e) if metadata => {
                    tracing::warn!(xlator = %self.name, child = i, dir = %fop.gfid(), "{} missed one set ({e}): that copy is healed at the directory's next use", fop.name());
                    self.missed.lock().unwrap().insert(fop.gfid());
                }
                Err(e) => {
                    tracing::warn!(xlator = %self.name, child = i, "{} failed on one subvolume: {e}", fop.name());
                    return Err(e);
                }
            }
        }
        Ok((rep, done))
    }

    /// Sends an object-addressed operation to the child holding it, or to
    /// every child for a directory.
    async fn on_object(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let located = self.locate(cx, fop.gfid()).await?;
        if located.is_none() && self.missed.lock().unwrap().contains(&fop.gfid()) {
            self.heal_dir(fop.gfid()).await;
        }
        match located {
            Some(i) => self.on_file(cx, fop, i).await.1,
            None if fop.is_modifying() => Ok(self.dir_op(cx, fop, self.order[0]).await?.0),
            None => self.children[self.order[0]].call(cx, fop).await,
        }
    }

    /// ENOTEMPTY unless directory `dir` holds nothing on any set but
    /// pointers; those (to nothing: a name they point for would be listed
    /// on its own set) are removed, so that the directory can go. Each
    /// set's copy decides only for itself, so a set where it looks empty
    /// would remove its copy and leave the others.
    async fn empty_everywhere(&self, dir: Gfid) -> FsResult<()> {
        let cx = Ctx::root();
        let mut pointers = Vec::new();
        for (i, r) in self.on_all(&cx, &Fop::Opendir { gfid: dir }).await {
            let fh = match r.and_then(Reply::into_fh) {
                Ok(fh) => fh,
                Err(e) if e.is(libc::ESTALE) || e.is(libc::ENOENT) => continue,
                Err(e) => return Err(e),
            };
            let listed = self.pointers_only(&cx, i, dir, fh).await;
            let _ = self.children[i]
                .call(&cx, Fop::Releasedir { gfid: dir, fh })
                .await;
            pointers.extend(listed?.into_iter().map(|n| (i, n)));
        }
        for (i, name) in pointers {
            match self.unlink_on(&cx, i, dir, &name).await {
                Ok(_) => {}
                Err(e) if e.is(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The pointers in child `i`'s copy of directory `dir` (open as
    /// `fh`), or ENOTEMPTY at its first other entry.
    async fn pointers_only(&self, cx: &Ctx, i: usize, dir: Gfid, fh: u64) -> FsResult<Vec<Name>> {
        let mut pointers = Vec::new();
        let mut offset = 0;
        loop {
            let fop = Fop::Readdir {
                gfid: dir,
                fh,
                offset,
                plus: true,
            };
            let Reply::Entries(ents) = self.children[i].call(cx, fop).await? else {
                return Err(FsError::errno(libc::EIO));
            };
            let Some(last) = ents.last() else {
                return Ok(pointers);
            };
            offset = last.next;
            for e in ents {
                if e.name.as_slice() == b"." || e.name.as_slice() == b".." {
                    continue;
                }
                match (&e.attr, Name::new(e.name.to_vec())) {
                    (Some(a), Ok(n)) if a.linkto.is_some() => pointers.push(n),
                    _ => return Err(FsError::errno(libc::ENOTEMPTY)),
                }
            }
        }
    }

    /// Sends `fop` to child `i`, where file `fop.gfid()` was placed. If
    /// the child answers ESTALE, a rebalance may have moved the file, or
    /// hold it while it moves it (`brick::hold`): every set is asked where
    /// it is now, and the request sent there; while it is still where it
    /// was (held), again after a pause, for up to `HELD_WAIT`. ESTALE when
    /// no set has it. Answers the child that answered.
    async fn on_file(&self, cx: &Ctx, fop: Fop, mut i: usize) -> (usize, FsResult<Reply>) {
        let gfid = fop.gfid();
        let deadline = tokio::time::Instant::now() + HELD_WAIT;
        let mut waiting = Waiting::new();
        loop {
            let e = match self.children[i].call(cx, fop.clone()).await {
                Err(e) if e.is(libc::ESTALE) => e,
                r => return (i, r),
            };
            if tokio::time::Instant::now() > deadline {
                return (i, Err(e));
            }
            match self.relocate(cx, gfid, i, &mut waiting).await {
                Some(j) => i = j,
                None => return (i, Err(e)),
            }
        }
    }

    /// File `gfid` was not where this client thought (child `i`
    /// answered ESTALE): where it is now, or after a pause, child `i` if
    /// the file is held there by a rebalance moving it; None if it is
    /// neither (gone, or only open here).
    async fn relocate(
        &self,
        cx: &Ctx,
        gfid: Gfid,
        i: usize,
        waiting: &mut Waiting,
    ) -> Option<usize> {
        self.placed.lock().unwrap().remove(&gfid);
        match self.locate(cx, gfid).await {
            Ok(Some(j)) if j != i => {
                tracing::debug!(xlator = %self.name, %gfid, from = i, to = j, "file moved: asked where it is now");
                Some(j)
            }
            Ok(Some(_)) => {
                let asked = Fop::Getxattr {
                    gfid,
                    name: mortar_core::fop::HOLD_XATTR.into(),
                };
                if self.children[i].call(&Ctx::root(), asked).await.is_err() {
                    // Not held (any more): moved meanwhile, gone, or the
                    // move was given up and the file is still here (tried
                    // there once more).
                    self.placed.lock().unwrap().remove(&gfid);
                    return match self.locate(cx, gfid).await {
                        Ok(Some(j)) if j != i => Some(j),
                        Ok(Some(_)) if !waiting.retried_unheld => {
                            waiting.retried_unheld = true;
                            Some(i)
                        }
                        _ => None,
                    };
                }
                waiting.pause().await;
                Some(i)
            }
            _ => None,
        }
    }

    /// Sends an operation on open file `f` to the child holding it open.
    /// On ESTALE (a rebalance holds or moved the file), waits and asks
    /// where the file is, opens it there with the flags it was opened
    /// with, and sends the operation again, for up to `HELD_WAIT`.
    async fn on_open_file(&self, cx: &Ctx, f: &OpenFile, fop: Fop) -> FsResult<Reply> {
        let deadline = tokio::time::Instant::now() + HELD_WAIT;
        let mut waiting = Waiting::new();
        loop {
            let (i, fh) = *f.at.lock().unwrap();
            if let Fop::Write { data, .. } = &fop {
                self.written[i].fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            let moved_meanwhile = || *f.at.lock().unwrap() != (i, fh);
            let e = match self.children[i].call(cx, fop.clone().with_fh(fh)).await {
                Err(e) if e.is(libc::ESTALE) => e,
                // Another request on this handle (writes go several at a
                // time) found the file's new place meanwhile, and closed
                // the old one.
                Err(e) if e.is(libc::EBADF) && moved_meanwhile() => continue,
                r => return r,
            };
            if moved_meanwhile() {
                continue;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(e);
            }
            let Some(j) = self.relocate(cx, f.gfid, i, &mut waiting).await else {
                tracing::info!(xlator = %self.name, gfid = %f.gfid, at = i, "an open file answered ESTALE and is neither held nor elsewhere: ESTALE");
                return Err(e);
            };
            if j == i || moved_meanwhile() {
                continue;
            }
            let open = Fop::Open {
                gfid: f.gfid,
                flags: f.flags,
            };
            let (j, r) = self.on_file(cx, open, j).await;
            let nfh = r?.into_fh()?;
            let stale = {
                let mut at = f.at.lock().unwrap();
                if *at == (i, fh) {
                    *at = (j, nfh);
                    (i, fh)
                } else {
                    // Another request on this handle opened it first.
                    (j, nfh)
                }
            };
            tracing::info!(xlator = %self.name, gfid = %f.gfid, from = i, to = j, "an open file moved by a rebalance is open where it is now");
            let release = Fop::Release {
                gfid: f.gfid,
                fh: stale.1,
            };
            let _ = self.children[stale.0].call(cx, release).await;
        }
    }

    /// After an entry changed in directory `dir` on children `changed`
    /// only: the copy whose attributes clients are shown (the first set's)
    /// gets its mtime and ctime moved too, as POSIX wants of a parent. At
    /// most once per `TOUCH_EVERY` per directory: a burst of creates costs
    /// one request more, not one per file (a directory's times may lag
    /// that much behind its entries).
    async fn touch_dir(&self, dir: Gfid, changed: &[usize]) {
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

    /// The children in set-id order (the order `dir_meta` takes them in).
    fn sets_in_order(&self) -> Vec<Child> {
        self.order
            .iter()
            .map(|&i| self.children[i].clone())
            .collect()
    }

    /// Heals the copies of directory `gfid` that missed a change.
    async fn heal_dir(&self, gfid: Gfid) {
        heal_dir_copies(self.sets_in_order(), gfid, self.missed.clone(), true).await;
    }

    /// Compares the copies of directory `gfid` (once per directory, in
    /// the background) and heals them if they disagree.
    fn check_dir(&self, gfid: Gfid) {
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

    /// Makes a pointer to child `to` under `name` on child `at`
    /// (`make_pointer`).
    async fn point(
        &self,
        cx: &Ctx,
        at: usize,
        (parent, name): (Gfid, &Name),
        gfid: Gfid,
        to: usize,
    ) -> FsResult<()> {
        make_pointer(&self.children[at], cx, (parent, name), gfid, self.ids[to])
            .await
            .map(|_| ())
    }

    async fn unlink_on(&self, cx: &Ctx, at: usize, parent: Gfid, name: &Name) -> FsResult<Reply> {
        let fop = Fop::Unlink {
            parent,
            name: name.clone(),
        };
        self.children[at].call(cx, fop).await
    }

    /// The share of set `i`'s space that is free: as its statfs said at
    /// most `SPACE_FRESH` ago, less what this client wrote there since (asked
    /// again every time while it is near the limit); None if it cannot say.
    async fn free_share(&self, i: usize, min: u64) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some((at, free, whole)) = self.space.lock().unwrap()[i] {
            let free = free.saturating_sub(self.written[i].load(Relaxed));
            let p = free.saturating_mul(100) / whole;
            if at.elapsed() < SPACE_FRESH && p >= 2 * min {
                return Some(p);
            }
        }
        let fop = Fop::Statfs { gfid: Gfid::ROOT };
        match self.children[i].call(&Ctx::root(), fop).await {
            Ok(Reply::StatFs(s)) if s.blocks > 0 => {
                let unit = s.frsize.max(1) as u64;
                let (free, whole) = (s.bavail.saturating_mul(unit), s.blocks.saturating_mul(unit));
                self.written[i].store(0, Relaxed);
                self.space.lock().unwrap()[i] = Some((std::time::Instant::now(), free, whole));
                Some(free.saturating_mul(100) / whole)
            }
            _ => None,
        }
    }

    /// Where a new name hashed to set `h` goes (`cluster.min-free-disk`):
    /// `h`, unless its free share is below the limit (or `full`: it just
    /// answered ENOSPC) and another set of the directory's layout, not
    /// being emptied, is above it: then the one with the most room.
    async fn room_for(&self, dl: &DirLayout, h: usize, full: bool) -> usize {
        let min = self.min_free.load(std::sync::atomic::Ordering::Relaxed);
        if min == 0 && !full {
            return h;
        }
        if !full && self.free_share(h, min).await.is_none_or(|p| p >= min) {
            return h;
        }
        let mut best: Option<(u64, usize)> = None;
        // Each set of the layout once (a set may own several ranges).
        let mut sets: Vec<usize> = dl
            .layout
            .ranges()
            .iter()
            .filter_map(|r| self.child_of(r.set))
            .filter(|&i| i != h && !self.draining[i])
            .collect();
        sets.sort_unstable();
        sets.dedup();
        for i in sets {
            if let Some(p) = self.free_share(i, min).await {
                if p >= min.max(1) && best.is_none_or(|b| p > b.0) {
                    best = Some((p, i));
                }
            }
        }
        best.map_or(h, |b| b.1)
    }

    async fn create_like(&self, cx: &Ctx, fop: Fop, parent: Gfid, name: &Name) -> FsResult<Reply> {
        let dl = self.layout_of(parent).await?;
        let h = self.hashed(&dl, name);
        let is_create = matches!(fop, Fop::Create { .. });
        let flags = match fop {
            Fop::Create { flags, .. } => flags,
            _ => 0,
        };
        let mut at = self.room_for(&dl, h, false).await;
        let rep = match self.children[at].call(cx, fop.clone()).await {
            Err(e) if e.is(libc::ENOSPC) && at == h => {
                at = self.room_for(&dl, h, true).await;
                if at == h {
                    return Err(e);
                }
                self.children[at].call(cx, fop).await?
            }
            r => r?,
        };
        let (entry, fh) = match rep {
            Reply::Created { entry, fh } if is_create => (entry, Some(fh)),
            Reply::Entry(e) => (e, None),
            other => return Err(mortar_core::fop::unexpected(other)),
        };
        if at != h {
            // The name's own set is full: the file lives elsewhere, and a
            // pointer on its set says where.
            tracing::debug!(xlator = %self.name, %parent, name = ?name, to = at, "placed off its full set");
            if let Err(e) = self.point(cx, h, (parent, name), entry.attr.gfid, at).await {
                if let Some(fh) = fh {
                    let rel = Fop::Release {
                        gfid: entry.attr.gfid,
                        fh,
                    };
                    let _ = self.children[at].call(cx, rel).await;
                }
                let _ = self.unlink_on(cx, at, parent, name).await;
                return Err(e);
            }
        }
        self.learn(&entry.attr, at);
        self.touch_dir(parent, &[at, h]).await;
        Ok(match fh {
            Some(fh) => Reply::Created {
                fh: self
                    .fds
                    .insert(Handles::file(entry.attr.gfid, flags, at, fh)),
                entry,
            },
            None => Reply::Entry(entry),
        })
    }

    async fn mkdir(&self, cx: &Ctx, fop: Fop, parent: Gfid, name: &Name) -> FsResult<Reply> {
        let dl = self.layout_of(parent).await?;
        let gfid = fop.gfid();
        let (rep, on) = self.dir_op(cx, fop, self.hashed(&dl, name)).await?;
        if let Reply::Entry(e) = &rep {
            self.learn(&e.attr, 0);
        }
        // Over the sets it was made on: a set that lacks the parent (added
        // since) gets no files here until a rebalance makes it there.
        let layout = self.fresh_over(gfid, &on, Some(&dl.layout));
        self.store_layout(gfid, &layout, self.commit, &on).await;
        let dl = DirLayout {
            layout,
            committed: true,
        };
        remember(&self.layouts, LAYOUTS_MAX, gfid, Arc::new(dl));
        Ok(rep)
    }

    async fn unlink(&self, cx: &Ctx, parent: Gfid, name: &Name) -> FsResult<Reply> {
        let f = self.find(cx, parent, name).await?;
        let rep = self.unlink_on(cx, f.at, parent, name).await?;
        if let Some(p) = f.pointer {
            if let Err(e) = self.unlink_on(cx, p, parent, name).await {
                tracing::warn!(xlator = %self.name, %parent, name = ?name, "pointer left behind: {e}");
            }
        }
        self.touch_dir(parent, &[f.at, f.pointer.unwrap_or(f.at)])
            .await;
        Ok(rep)
    }

    /// Renames a file: on the set holding it, with a pointer on the set
    /// the new name hashes to when that is another one. What the new name
    /// held on other sets (a file, a pointer) is removed first, and the old
    /// name's pointer last.
    async fn rename(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let Fop::Rename {
            parent,
            ref name,
            newparent,
            ref newname,
            flags,
        } = fop
        else {
            unreachable!("rename is called with a rename");
        };
        let src = self.find(cx, parent, name).await?;
        if src.entry.attr.kind == FileKind::Dir {
            // A directory it replaces must be empty on every set, not only
            // on the one that decides.
            match self.find(cx, newparent, newname).await {
                Ok(d)
                    if d.entry.attr.kind == FileKind::Dir
                        && d.entry.attr.gfid != src.entry.attr.gfid =>
                {
                    self.empty_everywhere(d.entry.attr.gfid).await?
                }
                Ok(_) => {}
                Err(e) if e.is(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
            let dl = self.layout_of(newparent).await?;
            let first = self.hashed(&dl, newname);
            return Ok(self.dir_op(cx, fop.clone(), first).await?.0);
        }
        if (parent, name) == (newparent, newname) {
            return self.children[src.at].call(cx, fop.clone()).await;
        }
        let dst = match self.find(cx, newparent, newname).await {
            Ok(d) => Some(d),
            Err(e) if e.is(libc::ENOENT) => None,
            Err(e) => return Err(e),
        };
        let h = self.hashed(&*self.layout_of(newparent).await?, newname);
        if let Some(d) = &dst {
            if flags & libc::RENAME_NOREPLACE != 0 {
                return Err(FsError::errno(libc::EEXIST));
            }
            if d.entry.attr.gfid == src.entry.attr.gfid {
                // Two names of one file: rename(2) does nothing.
                return Ok(Reply::Ok);
            }
            if d.entry.attr.kind == FileKind::Dir {
                return Err(FsError::errno(libc::EISDIR));
            }
            if d.at != src.at {
                self.unlink_on(cx, d.at, newparent, newname).await?;
            }
            if let Some(p) = d.pointer {
                self.unlink_on(cx, p, newparent, newname).await?;
            }
        }
        if h != src.at {
            self.point(cx, h, (newparent, newname), src.entry.attr.gfid, src.at)
                .await?;
        }
        let rep = self.children[src.at].call(cx, fop.clone()).await?;
        if let Some(p) = src
            .pointer
            .filter(|&p| (p, parent, name) != (h, newparent, newname))
        {
            if let Err(e) = self.unlink_on(cx, p, parent, name).await {
                tracing::warn!(xlator = %self.name, %parent, name = ?name, "pointer left behind: {e}");
            }
        }
        self.touch_dir(parent, &[src.at]).await;
        if newparent != parent {
            self.touch_dir(newparent, &[src.at, h]).await;
        }
        Ok(rep)
    }

    /// A hard link: made on the set holding the file, with a pointer on
    /// the set the new name hashes to when that is another one.
    async fn link(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let Fop::Link {
            gfid,
            newparent,
            ref newname,
        } = fop
        else {
            unreachable!("link is called with a link");
        };
        let Some(at) = self.locate(cx, gfid).await? else {
            return Err(FsError::errno(libc::EPERM));
        };
        let h = self.hashed(&*self.layout_of(newparent).await?, newname);
        if h != at {
            self.point(cx, h, (newparent, newname), gfid, at).await?;
        }
        match self.children[at].call(cx, fop.clone()).await {
            Ok(rep) => {
                self.touch_dir(newparent, &[at, h]).await;
                Ok(rep)
            }
            Err(e) => {
                if h != at {
                    let _ = self.unlink_on(cx, h, newparent, newname).await;
                }
                Err(e)
            }
        }
    }

    async fn open(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let gfid = fop.gfid();
        let located = self.locate(cx, gfid).await?;
        if let (Fop::Open { flags, .. }, Some(i)) = (&fop, located) {
            let flags = *flags;
            let (i, r) = self.on_file(cx, fop, i).await;
            let fh = r?.into_fh()?;
            return Ok(Reply::Opened {
                fh: self.fds.insert(Handles::file(gfid, flags, i, fh)),
            });
        }
        let targets: Vec<usize> = match (&fop, located) {
            (Fop::Opendir { .. }, _) | (_, None) => self.all(),
            (_, Some(i)) => vec![i],
        };
        let mut fhs = vec![None; self.children.len()];
        let mut err = None;
        let dir = matches!(fop, Fop::Opendir { .. });
        for (i, r) in self.on(cx, targets, &fop).await {
            match r.and_then(Reply::into_fh) {
                Ok(fh) => fhs[i] = Some(fh),
                // A set the directory is not on yet has nothing to list.
                Err(e) if dir && e.is(libc::ESTALE) => {}
                Err(e) => err = Some(e),
            }
        }
        if fhs.iter().all(Option::is_none) {
            err = err.or(Some(FsError::errno(libc::ESTALE)));
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
        let handles = if dir {
            self.check_dir(gfid);
            Arc::new(Handles {
                ahead: Some(super::listing::Ahead::new(fhs.len())),
                fhs,
                file: None,
            })
        } else {
            // A directory's open (Open, not Opendir) is on every set.
            Arc::new(Handles {
                fhs,
                ahead: None,
                file: None,
            })
        };
        Ok(Reply::Opened {
            fh: self.fds.insert(handles),
        })
    }

    /// Passes an operation on our handle to the children holding theirs.
    async fn with_handle(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let fh = fop.fh().unwrap_or(0);
        let release = matches!(fop, Fop::Release { .. } | Fop::Releasedir { .. });
        let h = if release {
            let h = self
                .fds
                .remove(fh)
                .ok_or_else(|| FsError::errno(libc::EBADF))?;
            // Readers stop before the handles they read go.
            if let Some(a) = &h.ahead {
                a.stop();
            }
            h
        } else {
            self.fds.get(fh)?
        };
        if let Some(f) = &h.file {
            if release {
                let (i, fh) = *f.at.lock().unwrap();
                return self.children[i].call(cx, fop.with_fh(fh)).await;
            }
            return self.on_open_file(cx, f, fop).await;
        }
        let mut out = Err(FsError::errno(libc::EBADF));
        for (i, f) in h.fhs.iter().enumerate() {
            if let Some(f) = f {
                if let Fop::Write { data, .. } = &fop {
                    self.written[i]
                        .fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
                out = self.children[i].call(cx, fop.clone().with_fh(*f)).await;
                if out.is_err() && !release {
                    return out;
                }
            }
        }
        out
    }

    /// Lists the sets in id order from the one `offset` names (or the
    /// next one, if that set is gone), directories from the first set only,
    /// pointers from none. Entries come with attributes from every set (how
    /// pointers are told from files), whether asked for or not. The sets
    /// after the one being listed are read ahead at the same time
    /// (`listing`).
    async fn readdir(&self, cx: &Ctx, gfid: Gfid, fh: u64, offset: u64) -> FsResult<Reply> {
        let h = self.fds.get(fh)?;
        let ahead = h
            .ahead
            .as_ref()
            .ok_or_else(|| FsError::errno(libc::EBADF))?;
        if offset == 0 {
            ahead.rewind();
        }
        let set = (offset >> SET_SHIFT) as u32;
        let mut off = offset & OFFSET_MASK;
        let mut pos = self.order.partition_point(|&i| self.ids[i] < set);
        if pos < self.order.len() && self.ids[self.order[pos]] != set {
            off = 0;
        }
        while pos < self.order.len() {
            let child = self.order[pos];
            // The sets after this one are read ahead meanwhile.
            for &later in &self.order[pos + 1..] {
                if let Some(lfh) = h.fhs[later] {
                    ahead.prefetch(later, &self.children[later], cx, gfid, lfh);
                }
            }
            if let Some(cfh) = h.fhs[child] {
                let mut ents = ahead
                    .batch(child, &self.children[child], cx, gfid, cfh, off)
                    .await?;
                // The child's listing goes on after this batch even when
                // nothing of it is handed up (directories listed from the
                // first set only, pointers).
                let had_any = !ents.is_empty();
                if let Some(last) = ents.last() {
                    off = last.next;
                }
                ents.retain(|e| {
                    !(pos > 0 && e.kind == FileKind::Dir
                        || e.attr.as_ref().is_some_and(|a| a.linkto.is_some()))
                });
                let tag = (self.ids[child] as u64) << SET_SHIFT;
                for e in &mut ents {
                    e.next |= tag;
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
            pos += 1;
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

    fn reconfigure(&self, set: &mortar_core::Options) {
        self.min_free.store(
            MIN_FREE_DISK.percent(set),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    fn forget(&self, gfid: Gfid) {
        self.placed.lock().unwrap().remove(&gfid);
        self.layouts.lock().unwrap().remove(&gfid);
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
        let res = match fop {
            Fop::Lookup { parent, ref name } => {
                let name = name.clone();
                self.find(cx, parent, &name)
                    .await
                    .map(|f| Reply::Entry(f.entry))
            }
            Fop::Mkdir {
                parent, ref name, ..
            } => {
                let name = name.clone();
                self.mkdir(cx, fop, parent, &name).await
            }
            Fop::Rmdir { parent, ref name } => {
                let dl = self.layout_of(parent).await?;
                let h = self.hashed(&dl, name);
                let d = self.find(cx, parent, name).await?;
                if d.entry.attr.kind == FileKind::Dir {
                    self.empty_everywhere(d.entry.attr.gfid).await?;
                }
                Ok(self.dir_op(cx, fop, h).await?.0)
            }
            Fop::Create {
                parent, ref name, ..
            }
            | Fop::Mknod {
                parent, ref name, ..
            }
            | Fop::Symlink {
                parent, ref name, ..
            } => {
                let name = name.clone();
                self.create_like(cx, fop, parent, &name).await
            }
            Fop::Unlink { parent, ref name } => self.unlink(cx, parent, name).await,
            Fop::Rename { .. } => self.rename(cx, fop).await,
            Fop::Link { .. } => self.link(cx, fop).await,
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
            // Always with attributes (how pointers are told from files).
            Fop::Readdir {
                gfid, fh, offset, ..
            } => self.readdir(cx, gfid, fh, offset).await,
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
            Fop::Resolve { .. } => super::first_ok(
                self.on_all(cx, &fop)
                    .await
                    .into_iter()
                    .map(|(_, r)| r)
                    .filter(|r| pointer_of(r).is_none()),
            ),
            Fop::Lock { .. }
            | Fop::Unlock { .. }
            | Fop::Clear { .. }
            | Fop::Pending { .. }
            | Fop::Blamed { .. }
            | Fop::Checksum { .. } => Err(super::bookkeeping_refused()),
        };
        // A directory's attributes come from one set; a change of names on
        // another set moves only that set's copy: what the sets answered
        // of directories and moved objects is not handed up (md-cache asks).
        res.map(|r| match r {
            Reply::Entry(e) => Reply::Entry(Entry::found(e.attr)),
            Reply::Created { entry, fh } => Reply::Created {
                entry: Entry::found(entry.attr),
                fh,
            },
            Reply::Unnamed(_) => Reply::Ok,
            r => r,
        })
    }
}
