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
//!
//! Layout: `mod.rs` the translator and its dispatch; `layouts` the
//! directories' layouts; `placement` where a file lives and its pointers;
//! `space` free space; `entries` changes of the namespace; `handles` open
//! files and listings; `options` the volume options it reads.

mod entries;
mod handles;
mod layouts;
pub mod options;
mod placement;
mod space;

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
    /// Bytes written to each child since its space was asked (and those
    /// still on their way when it answered).
    written: Vec<std::sync::atomic::AtomicU64>,
    /// Bytes of writes sent to each child and not answered yet.
    sending: Vec<std::sync::atomic::AtomicU64>,
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
            sending: (0..ids.len()).map(|_| Default::default()).collect(),
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

    /// The children in set-id order (the order `dir_meta` takes them in).
    fn sets_in_order(&self) -> Vec<Child> {
        self.order
            .iter()
            .map(|&i| self.children[i].clone())
            .collect()
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
