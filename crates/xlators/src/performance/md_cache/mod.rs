//! `performance/md-cache`: each object's attributes and extended
//! attributes, kept at the mount. The kernel caches attributes itself but
//! asks again after every read of a file (its atime is out of date) and
//! after every change it made; it does not cache xattrs at all, missing
//! ones included, such as `security.capability`, which it asks about before
//! every write, and the POSIX ACL names `ls -l` asks about. Kept for the
//! bricks' lease time (`features.cache-invalidation-timeout`; one second
//! without leases), dropped when a brick recalls the object, when this
//! mount changes it, and when a connection to a brick ends (not when the
//! kernel forgets the inode: the lease goes on). A change of names made
//! here keeps what the bricks say it left its directories and objects
//! with; when they cannot tell, a name removed or moved drops every
//! object's attributes (the object it named is not known here, and its
//! link count changed).

mod ahead;
mod behind;

pub use ahead::ASYNC_DIROPS;

use async_trait::async_trait;
use behind::Behind;
use mortar_core::fop::ANON_FH;
use mortar_core::options::{Kind, Spec};
use mortar_core::{Attr, Child, Ctx, Event, Fop, FsError, FsResult, Gfid, Name, Reply, Xlator};
use serde_bytes::ByteBuf;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

pub static STAT_PREFETCH: Spec = Spec {
    key: "performance.stat-prefetch",
    kind: Kind::Bool,
    default: "on",
    help: "Caches each object's attributes and extended attributes at the mount, missing ones included (security.capability is asked before every write, ACLs by ls -l), and every name of a directory this mount made (so a missing name costs no request), for the bricks' lease time, until another client changes them (GlusterFS's md-cache and nl-cache).",
};

/// Objects kept at most; past that the cache starts again empty.
const MAX_OBJECTS: usize = 100_000;
/// Kept in this many maps (by gfid).
const SHARDS: usize = 16;
/// Changes are clocked in this many buckets (by gfid, each within one
/// shard): an answer is kept unless its object's bucket changed since
/// the request, so concurrent work on other objects rarely stops it.
const BUCKETS: usize = 256;

/// An xattr's value, or the errno that said it is missing.
type Answer = Result<ByteBuf, i32>;

struct Object {
    /// With `names_moved` as it was when they were kept.
    attr: Option<(Attr, u64)>,
    /// For a directory this mount made: every name in it, until the
    /// leases its making was granted on every brick end.
    names: Option<Names>,
    /// For a directory: names a lookup found in it, each with the object
    /// it led to, until the lease that answer was granted ends.
    found: HashMap<Vec<u8>, (Gfid, Instant)>,
    xattrs: HashMap<String, Answer>,
    list: Option<ByteBuf>,
    until: Instant,
}

/// The object kept for `gfid` in shard `s`, made (nothing known of it,
/// kept until `until`) if there is none; a shard at its bound is emptied
/// first.
fn object(s: &mut HashMap<Gfid, Object>, gfid: Gfid, until: Instant) -> &mut Object {
    if s.len() >= MAX_OBJECTS / SHARDS {
        s.clear();
    }
    s.entry(gfid).or_insert_with(|| Object::new(until))
}

impl Object {
    fn new(until: Instant) -> Object {
        Object {
            attr: None,
            names: None,
            found: HashMap::new(),
            xattrs: HashMap::new(),
            list: None,
            until,
        }
    }
}

/// All the names of a directory; any name not here is missing.
struct Names {
    set: HashSet<Vec<u8>>,
    until: Instant,
}

/// Names kept per directory at most; past that the directory's are dropped.
const MAX_NAMES: usize = 100_000;

/// What an answer tells about an object.
enum Kept {
    Attr(Attr),
    Xattr(String, Answer),
    List(ByteBuf),
}

impl Kept {
    /// The object has no xattr `name`.
    fn missing(name: &str) -> Kept {
        Kept::Xattr(name.into(), Err(libc::ENODATA))
    }
}

pub struct MdCache {
    name: String,
    child: Child,
    /// How long an answer may be kept (milliseconds).
    keep_ms: AtomicU64,
    /// Ticks at every recall, loss and change made here.
    clock: AtomicU64,
    /// The tick of the last such event, per bucket of objects: an answer
    /// to a request marked before it is passed on, not kept.
    changed: Vec<AtomicU64>,
    /// The tick at which everything was last dropped.
    all_changed: AtomicU64,
    /// Attributes kept before a name was removed or moved here are stale.
    names_moved: AtomicU64,
    shards: Vec<Mutex<HashMap<Gfid, Object>>>,
    /// Writes out, by file: (how many, how many ever started). A write's
    /// attributes are kept only if it was the file's only one all along.
    writing: Mutex<HashMap<Gfid, (u32, u64)>>,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Changes of names answered ahead of the bricks, on their way
    /// (`ahead.rs`, `behind.rs`).
    behind: Arc<Behind>,
    /// `performance.async-dirops`, under leases.
    ahead_on: AtomicBool,
    /// Held while a change is answered ahead and noted, and while a recall
    /// takes note of the changes it must wait for.
    noting: Mutex<()>,
    /// This translator, for the tasks that send changes behind.
    me: Weak<MdCache>,
}

impl MdCache {
    /// Counts an answer from the cache (hit) or not (miss), here and in
    /// the process's metrics.
    fn counted(&self, hit: bool) {
        match hit {
            true => self.hits.fetch_add(1, Ordering::Relaxed),
            false => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        mortar_metrics::cache("md-cache", hit);
    }

    pub fn new(name: String, child: Child) -> Arc<MdCache> {
        Arc::new_cyclic(|me| MdCache {
            behind: Arc::default(),
            ahead_on: AtomicBool::new(false),
            noting: Mutex::new(()),
            me: me.clone(),
            name,
            child,
            keep_ms: AtomicU64::new(mortar_core::terms::UNLEASED.as_millis() as u64),
            clock: AtomicU64::new(0),
            changed: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            all_changed: AtomicU64::new(0),
            names_moved: AtomicU64::new(0),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            writing: Mutex::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    /// `fop` on the bricks' handle once a create answered ahead landed,
    /// and once every change answered ahead it depends on has
    /// (`behind.rs`).
    async fn ready(&self, fop: Fop) -> FsResult<Fop> {
        let fop = match fop.fh().filter(|fh| behind::is_ahead(*fh)) {
            Some(fh) => {
                let real = self.behind.handle(fh).await?;
                fop.with_fh(real)
            }
            None => fop,
        };
        if !self.behind.idle() {
            let f = &fop;
            self.behind.wait(u64::MAX, |k| depends(f, k)).await;
        }
        Ok(fop)
    }

    /// Sends `fop` to the bricks once it is `ready`. A close or release of
    /// a handle given ahead, and a directory's fsync, are answered here.
    async fn down(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let fop = match &fop {
            // Nothing was written (write-behind waits for the writes
            // first, and they for the create): nothing to report yet.
            Fop::Flush { fh, .. } if behind::is_ahead(*fh) && self.behind.making(*fh) => {
                return Ok(Reply::Ok)
            }
            Fop::Release { fh, .. } if behind::is_ahead(*fh) => {
                match self.behind.release(*fh).await {
                    Some(real) => fop.with_fh(real),
                    None => return Ok(Reply::Ok),
                }
            }
            // A directory's fsync: its changes ahead have landed, or
            // failed. (The bricks write names through: nothing to send.)
            Fop::Fsync {
                gfid, fh: ANON_FH, ..
            } => {
                let dir = *gfid;
                self.behind.wait(u64::MAX, |k| k.touches(&dir)).await;
                return match self.behind.take_error(dir) {
                    Some(e) => Err(e),
                    None => Ok(Reply::Ok),
                };
            }
            _ => fop,
        };
        let fop = self.ready(fop).await?;
        self.child.call(cx, fop).await
    }

    fn shard(&self, g: &Gfid) -> &Mutex<HashMap<Gfid, Object>> {
        &self.shards[g.0[15] as usize % SHARDS]
    }

    /// The clock of `g`'s bucket. (A bucket lies within one shard, so a
    /// shard's lock orders every keep and drop of its buckets' objects.)
    fn bucket(&self, g: &Gfid) -> &AtomicU64 {
        &self.changed[g.0[15] as usize % BUCKETS]
    }

    /// Something about `g` changes: answers to requests marked before are
    /// not kept. Called before the change is made to the kept state.
    fn bump(&self, g: &Gfid) {
        self.bucket(g).fetch_max(self.tick(), Ordering::AcqRel);
    }

    /// The clock's next tick.
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Whether nothing about `g` (nor everything) changed since `tick`.
    fn unchanged(&self, g: &Gfid, tick: u64) -> bool {
        self.all_changed.load(Ordering::Acquire) <= tick
            && self.bucket(g).load(Ordering::Acquire) <= tick
    }

    fn drop_object(&self, gfid: Gfid) {
        self.bump(&gfid);
        self.shard(&gfid).lock().unwrap().remove(&gfid);
    }

    /// Drops an object's attributes only (its data changed here).
    fn drop_attr(&self, gfid: Gfid) {
        self.bump(&gfid);
        if let Some(o) = self.shard(&gfid).lock().unwrap().get_mut(&gfid) {
            o.attr = None;
        }
    }

    /// Drops what another client's change of `name` in `dir` alters.
    fn drop_name(&self, dir: Gfid, name: &Name) {
        self.bump(&dir);
        let led_to = self
            .shard(&dir)
            .lock()
            .unwrap()
            .get(&dir)
            .and_then(|o| o.found.get(name.as_bytes()).map(|(g, _)| *g));
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

    fn drop_all(&self) {
        self.all_changed.fetch_max(self.tick(), Ordering::AcqRel);
        for s in &self.shards {
            s.lock().unwrap().clear();
        }
    }

    fn cached_xattr(&self, gfid: Gfid, name: Option<&str>) -> Option<Answer> {
        let now = Instant::now();
        let s = self.shard(&gfid).lock().unwrap();
        let o = s.get(&gfid).filter(|o| o.until > now)?;
        match name {
            Some(n) => o.xattrs.get(n).cloned(),
            None => o.list.clone().map(Ok),
        }
    }

    /// Whether `name` is known missing from directory `dir`: this mount
    /// made the directory and knows every name in it.
    fn missing(&self, dir: Gfid, name: &[u8]) -> bool {
        let now = Instant::now();
        let s = self.shard(&dir).lock().unwrap();
        s.get(&dir)
            .and_then(|o| o.names.as_ref())
            .is_some_and(|n| n.until > now && !n.set.contains(name))
    }

    /// Follows a change of names made here in the directories whose
    /// names are all known (`Object::names`): a name made or removed is
    /// added or taken out; a change that failed leaves them unknown. A
    /// recall drops them (the object goes), and only a new directory
    /// starts them, so a set still here was never dropped meanwhile.
    fn follow_names(&self, fop: &Fop, ok: bool) {
        let edit = |dir: Gfid, name: &Name, add: bool| {
            let mut s = self.shard(&dir).lock().unwrap();
            let Some(o) = s.get_mut(&dir) else { return };
            // What a name led to is asked again after any change of it.
            o.found.remove(name.as_bytes());
            let Some(n) = o.names.as_mut() else { return };
            if !ok || (add && n.set.len() >= MAX_NAMES) {
                o.names = None;
            } else if add {
                n.set.insert(name.as_bytes().to_vec());
            } else {
                n.set.remove(name.as_bytes());
            }
        };
        match fop {
            Fop::Create { parent, name, .. }
            | Fop::Mknod { parent, name, .. }
            | Fop::Mkdir { parent, name, .. }
            | Fop::Symlink { parent, name, .. } => edit(*parent, name, true),
            Fop::Link {
                newparent, newname, ..
            } => edit(*newparent, newname, true),
            Fop::Unlink { parent, name } | Fop::Rmdir { parent, name } => {
                edit(*parent, name, false)
            }
            Fop::Rename {
                parent,
                name,
                newparent,
                newname,
                flags,
            } => {
                // (An exchange leaves both names; each leads elsewhere.)
                edit(*parent, name, flags & libc::RENAME_EXCHANGE != 0);
                edit(*newparent, newname, true);
            }
            _ => {}
        }
    }

    /// A directory this mount just made is empty: every lookup in it is
    /// answered here until the leases its making got on every brick end
    /// (`start` + the lease time), or another client adds a name (the
    /// bricks recall the directory first). Not when anything was recalled
    /// or changed here since `(start, gen)`: the recall may have been of it.
    fn made_empty(&self, dir: Gfid, (start, tick): (Instant, u64)) {
        let until = start + Duration::from_millis(self.keep_ms.load(Ordering::Relaxed));
        let mut s = self.shard(&dir).lock().unwrap();
        if !self.unchanged(&dir, tick) {
            return;
        }
        let o = s.entry(dir).or_insert_with(|| Object::new(until));
        o.names = Some(Names {
            set: HashSet::new(),
            until,
        });
    }

    /// What a lookup of `name` in `dir` found before, if that answer's
    /// lease and the object's attributes are both still kept.
    fn found(&self, dir: Gfid, name: &[u8]) -> Option<Attr> {
        let now = Instant::now();
        let gfid = {
            let s = self.shard(&dir).lock().unwrap();
            let (g, until) = s.get(&dir)?.found.get(name)?;
            (*until > now).then_some(*g)?
        };
        self.cached_attr(gfid)
    }

    /// Keeps that `name` in `dir` leads to `gfid` (a lookup's answer, or
    /// a name made here), unless anything was recalled or changed since
    /// the request was sent: the recall may have been of that name.
    fn keep_found(&self, dir: Gfid, name: &Name, gfid: Gfid, (start, tick): (Instant, u64)) {
        let until = start + Duration::from_millis(self.keep_ms.load(Ordering::Relaxed));
        let mut s = self.shard(&dir).lock().unwrap();
        if !self.unchanged(&dir, tick) || !self.unchanged(&gfid, tick) {
            return;
        }
        let o = object(&mut s, dir, start);
        if o.found.len() >= MAX_NAMES {
            o.found.clear();
        }
        o.found.insert(name.as_bytes().to_vec(), (gfid, until));
    }

    fn cached_attr(&self, gfid: Gfid) -> Option<Attr> {
        let now = Instant::now();
        let s = self.shard(&gfid).lock().unwrap();
        let (a, moved) = s.get(&gfid).filter(|o| o.until > now)?.attr.clone()?;
        (moved == self.names_moved.load(Ordering::Acquire)).then_some(a)
    }

    /// A mark to take before sending a request whose answer may be kept.
    fn mark(&self) -> (Instant, u64) {
        (Instant::now(), self.clock.load(Ordering::Acquire))
    }

    /// Keeps what an answer to a request marked `(start, gen)` tells about
    /// `gfid`, unless something was recalled or changed since.
    fn keep(&self, gfid: Gfid, what: Kept, (start, tick): (Instant, u64)) {
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
    fn keep_after_change(&self, gfid: Gfid, a: Attr, (start, tick): (Instant, u64)) -> bool {
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
    fn keep_all_after_change(&self, attrs: &[Attr], (start, tick): (Instant, u64)) -> Vec<Gfid> {
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

    fn store(&self, s: &mut HashMap<Gfid, Object>, gfid: Gfid, what: Kept, start: Instant) {
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
            Kept::Attr(a) => o.attr = Some((a, self.names_moved.load(Ordering::Acquire))),
            Kept::Xattr(n, a) => {
                o.xattrs.insert(n, a);
            }
            Kept::List(l) => o.list = Some(l),
        }
    }

    /// Keeps the attributes an answer carries.
    fn keep_attrs(&self, res: &FsResult<Reply>, mark: (Instant, u64)) {
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

    /// Objects whose attributes and xattrs a change of names or metadata
    /// made here alters (a data change leaves the xattrs as they were: a
    /// write that must drop set-id bits or capabilities is followed by the
    /// kernel's own setattr or removexattr).
    fn changed(&self, fop: &Fop) -> Vec<Gfid> {
        match fop {
            Fop::Setattr { gfid, .. }
            | Fop::Setxattr { gfid, .. }
            | Fop::Removexattr { gfid, .. } => vec![*gfid],
            Fop::Create { parent, .. }
            | Fop::Mknod { parent, .. }
            | Fop::Mkdir { parent, .. }
            | Fop::Symlink { parent, .. } => vec![*parent],
            Fop::Link {
                gfid, newparent, ..
            } => vec![*gfid, *newparent],
            Fop::Unlink { parent, .. } | Fop::Rmdir { parent, .. } => vec![*parent],
            Fop::Rename {
                parent, newparent, ..
            } => vec![*parent, *newparent],
            _ => Vec::new(),
        }
    }
}

/// What a new object inherits from its directory: the xattr of the
/// directory that says whether the object has the named one, and whether
/// only a new directory inherits it. A file gets an access ACL only from a
/// default ACL of its directory (a directory gets both), and a security
/// label where its directory has one.
const INHERITED: &[(&str, &str, bool)] = &[
    ("system.posix_acl_default", "system.posix_acl_access", false),
    ("system.posix_acl_default", "system.posix_acl_default", true),
    ("security.selinux", "security.selinux", false),
];

impl MdCache {
    /// Keeps what a new object made here is known to lack, so that the
    /// questions `ls -l` and every write ask of it cost no request: file
    /// capabilities (never inherited), and what its directory lacks of
    /// `INHERITED` (the directory is asked once per lease).
    async fn born(&self, cx: &Ctx, parent: Gfid, gfid: Gfid, dir: bool, mark: (Instant, u64)) {
        let none = Kept::missing;
        if !dir {
            self.keep(gfid, none("security.capability"), mark);
        }
        for &(from, name, dirs_only) in INHERITED {
            if dirs_only && !dir {
                continue;
            }
            let lacks = match self.cached_xattr(parent, Some(from)) {
                Some(a) => a.is_err(),
                None => {
                    let ask = Fop::Getxattr {
                        gfid: parent,
                        name: from.to_string(),
                    };
                    self.call(cx, ask).await.is_err_and(|e| e.is(libc::ENODATA))
                }
            };
            if lacks {
                self.keep(gfid, none(name), mark);
            }
        }
    }
}

impl MdCache {
    /// Holds a copy of a recall's `ack` until the changes ahead noted so
    /// far that touch `gfid` have landed.
    fn hold_recall(&self, gfid: Gfid, ack: &mortar_core::xlator::Ack) {
        let (before, idle) = {
            let _noting = self.noting.lock().unwrap();
            (self.behind.now(), self.behind.idle())
        };
        if idle {
            return;
        }
        let (behind, ack) = (self.behind.clone(), ack.clone());
        tokio::spawn(async move {
            behind.wait(before, |k| k.touches(&gfid)).await;
            drop(ack);
        });
    }
}

/// Whether `fop` would see on the bricks what change ahead `k` has not
/// done there yet.
fn depends(fop: &Fop, k: &behind::Keys) -> bool {
    let named = |dir: &Gfid, n: &Name| {
        k.names
            .iter()
            .any(|(d, m)| d == dir && m.as_slice() == n.as_bytes())
    };
    match fop {
        Fop::Lookup { parent, name }
        | Fop::Create { parent, name, .. }
        | Fop::Mknod { parent, name, .. }
        | Fop::Mkdir { parent, name, .. }
        | Fop::Symlink { parent, name, .. }
        | Fop::Unlink { parent, name } => named(parent, name),
        Fop::Link {
            gfid,
            newparent,
            newname,
        } => k.objects.contains(gfid) || named(newparent, newname),
        // Which objects these reach is not known here.
        Fop::Rmdir { .. } | Fop::Rename { .. } => true,
        Fop::Statfs { .. }
        | Fop::Unlock { .. }
        | Fop::Pending { .. }
        | Fop::Blamed { .. }
        | Fop::Resolve { .. } => false,
        other => k.touches(&other.gfid()),
    }
}

/// Names answered by the client or the bricks themselves, never kept.
fn virtual_name(name: &str) -> bool {
    name.starts_with("trusted.mortar.") || mortar_core::fop::is_distribute_xattr(name)
}

#[async_trait]
impl Xlator for MdCache {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn notify(&self, _from: usize, ev: Event) -> Option<Event> {
        match &ev {
            // Another client changes a name in a directory: that name,
            // the directory's attributes and whether all its names are
            // known go; the other names stay (still under the lease).
            Event::Recall {
                gfid,
                name: Some(n),
                ..
            } => self.drop_name(*gfid, n),
            Event::Recall { gfid, .. } => self.drop_object(*gfid),
            Event::LeasesLost => self.drop_all(),
            _ => {}
        }
        // The claim on a directory ended (its names are no longer all
        // known here): the recall is answered once the changes answered
        // ahead in it have landed.
        if let Event::Recall { gfid, ack, .. } = &ev {
            self.hold_recall(*gfid, ack);
        }
        Some(ev)
    }

    fn reconfigure(&self, options: &mortar_core::Options) {
        let t = mortar_core::terms::cache_time(options);
        self.keep_ms.store(t.as_millis() as u64, Ordering::Relaxed);
        // The bricks claim a directory for its maker only under leases.
        let ahead = ASYNC_DIROPS.bool(options) && t > mortar_core::terms::UNLEASED;
        self.ahead_on.store(ahead, Ordering::Relaxed);
    }

    async fn settle(&self) {
        self.behind.wait(u64::MAX, |_| true).await;
    }

    // No `forget`: what is kept here outlives the kernel's inode. The
    // bricks' lease on the object goes on, so a change is still recalled;
    // a kernel that dropped its caches (memory pressure, `drop_caches`)
    // and asks again for an ACL or a label finds it here. Bounded by the
    // lease's time and `MAX_OBJECTS`.

    fn dump(&self) -> Vec<String> {
        vec![format!(
            "answered from memory {} asked of the bricks {}",
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed)
        )]
    }

    fn cached(&self, _cx: &Ctx, fop: &Fop) -> Option<FsResult<Reply>> {
        let hit = match fop {
            Fop::Getattr { gfid } => Ok(Reply::Attr(self.cached_attr(*gfid)?)),
            Fop::Getxattr { gfid, name } if !virtual_name(name) => self
                .cached_xattr(*gfid, Some(name))?
                .map(Reply::Xattr)
                .map_err(FsError::errno),
            Fop::Listxattr { gfid } => Ok(Reply::Xattr(self.cached_xattr(*gfid, None)?.ok()?)),
            Fop::Lookup { parent, name } if self.missing(*parent, name.as_bytes()) => {
                Err(FsError::errno(libc::ENOENT))
            }
            _ => return None,
        };
        self.counted(true);
        Some(hit)
    }

    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        if let Some(answer) = self.ahead(cx, &fop) {
            return answer;
        }
        match fop {
            Fop::Getattr { gfid } => {
                if let Some(a) = self.cached_attr(gfid) {
                    self.counted(true);
                    return Ok(Reply::Attr(a));
                }
                self.counted(false);
                let mark = self.mark();
                let res = self.down(cx, fop).await;
                self.keep_attrs(&res, mark);
                res
            }
            Fop::Lookup { parent, ref name } if self.missing(parent, name.as_bytes()) => {
                self.counted(true);
                Err(FsError::errno(libc::ENOENT))
            }
            Fop::Lookup { parent, ref name } => {
                // A name found before, while its lease lasts: the kernel
                // asks again after it dropped its own names (memory
                // pressure, `drop_caches`, a forgotten inode).
                if let Some(a) = self.found(parent, name.as_bytes()) {
                    self.counted(true);
                    return Ok(Reply::Entry(mortar_core::Entry::found(a)));
                }
                self.counted(false);
                let name = name.clone();
                let mark = self.mark();
                let res = self.down(cx, fop).await;
                self.keep_attrs(&res, mark);
                if let Ok(Reply::Entry(e)) = &res {
                    self.keep_found(parent, &name, e.attr.gfid, mark);
                }
                res
            }
            Fop::Readdir { .. } => {
                let mark = self.mark();
                let res = self.down(cx, fop).await;
                self.keep_attrs(&res, mark);
                res
            }
            Fop::Getxattr { gfid, ref name } if !virtual_name(name) => {
                if let Some(a) = self.cached_xattr(gfid, Some(name)) {
                    self.counted(true);
                    return a.map(Reply::Xattr).map_err(FsError::errno);
                }
                self.counted(false);
                let name = name.clone();
                let mark = self.mark();
                let res = self.down(cx, fop).await;
                match &res {
                    Ok(Reply::Xattr(v)) => self.keep(gfid, Kept::Xattr(name, Ok(v.clone())), mark),
                    Err(e) if e.is(libc::ENODATA) => {
                        self.keep(gfid, Kept::Xattr(name, Err(libc::ENODATA)), mark)
                    }
                    _ => {}
                }
                res
            }
            Fop::Listxattr { gfid } => {
                if let Some(Ok(v)) = self.cached_xattr(gfid, None) {
                    self.counted(true);
                    return Ok(Reply::Xattr(v));
                }
                self.counted(false);
                let mark = self.mark();
                let res = self.down(cx, fop).await;
                if let Ok(Reply::Xattr(v)) = &res {
                    self.keep(gfid, Kept::List(v.clone()), mark);
                }
                res
            }
            // Data changed here: the size and times, not the xattrs. The
            // bricks tell what they are after a write.
            Fop::Write { gfid, .. } => {
                let started = {
                    let mut w = self.writing.lock().unwrap();
                    let e = w.entry(gfid).or_default();
                    e.0 += 1;
                    e.1 += 1;
                    (e.0 == 1).then_some(e.1)
                };
                self.drop_attr(gfid);
                // Past what it waits for (a create ahead) before the mark:
                // the create's landing is not a change since.
                let fop = self.ready(fop).await?;
                let mark = self.mark();
                let res = self.down(cx, fop).await;
                let alone = {
                    let mut w = self.writing.lock().unwrap();
                    let e = w.get_mut(&gfid).expect("counted at its start");
                    let alone = started == Some(e.1);
                    e.0 -= 1;
                    if e.0 == 0 {
                        w.remove(&gfid);
                    }
                    alone
                };
                let kept = match &res {
                    Ok(Reply::Written(_, Some(a))) if alone && a.gfid == gfid => {
                        self.keep_after_change(gfid, a.clone(), mark)
                    }
                    _ => false,
                };
                if !kept {
                    self.drop_attr(gfid);
                }
                res
            }
            Fop::Fallocate { gfid, .. } => {
                self.drop_attr(gfid);
                let res = self.down(cx, fop).await;
                self.drop_attr(gfid);
                res
            }
            Fop::Open { gfid, flags } if flags & libc::O_TRUNC != 0 => {
                self.drop_attr(gfid);
                let res = self.down(cx, fop).await;
                self.drop_attr(gfid);
                res
            }
            fop => {
                let changed = self.changed(&fop);
                if changed.is_empty() {
                    return self.down(cx, fop).await;
                }
                // A change of names alters its directories' attributes
                // (times, link count), not their xattrs.
                let names_only = !matches!(
                    fop,
                    Fop::Setattr { .. } | Fop::Setxattr { .. } | Fop::Removexattr { .. }
                );
                let drop = |g: Gfid| match names_only {
                    true => self.drop_attr(g),
                    false => self.drop_object(g),
                };
                let new = match &fop {
                    Fop::Create { parent, gfid, .. } | Fop::Mknod { parent, gfid, .. } => {
                        Some((*parent, *gfid, false))
                    }
                    Fop::Mkdir { parent, gfid, .. } => Some((*parent, *gfid, true)),
                    _ => None,
                };
                let unnames = matches!(
                    fop,
                    Fop::Unlink { .. } | Fop::Rmdir { .. } | Fop::Rename { .. }
                );
                for g in &changed {
                    drop(*g);
                }
                let names = names_only.then(|| fop.clone());
                let before = self.mark();
                let res = self.down(cx, fop).await;
                if let Some(f) = &names {
                    if let (Fop::Mkdir { gfid, .. }, Ok(_)) = (f, &res) {
                        self.made_empty(*gfid, before);
                    }
                    self.follow_names(f, res.is_ok());
                }
                // What the change left its directories (and the objects
                // it removed or moved) with, as the bricks told it.
                let after = match &res {
                    Ok(Reply::Entry(e)) | Ok(Reply::Created { entry: e, .. }) => {
                        e.parent.iter().cloned().collect()
                    }
                    Ok(Reply::Unnamed(attrs)) => attrs.clone(),
                    _ => Vec::new(),
                };
                let kept = self.keep_all_after_change(&after, before);
                for g in changed.iter().filter(|g| !kept.contains(g)) {
                    drop(*g);
                }
                if unnames && !matches!(res, Ok(Reply::Unnamed(_)) if !kept.is_empty()) {
                    // The object the name pointed to is not known here,
                    // and its link count changed.
                    self.names_moved.fetch_add(1, Ordering::AcqRel);
                }
                let mark = self.mark();
                self.keep_attrs(&res, mark);
                // A name made here leads to its object (the bricks granted
                // the directory's lease with the answer).
                let made = match &names {
                    Some(
                        Fop::Create { parent, name, .. }
                        | Fop::Mknod { parent, name, .. }
                        | Fop::Mkdir { parent, name, .. }
                        | Fop::Symlink { parent, name, .. },
                    ) => Some((*parent, name)),
                    Some(Fop::Link {
                        newparent, newname, ..
                    }) => Some((*newparent, newname)),
                    _ => None,
                };
                if let (Some((dir, name)), Ok(Reply::Entry(e) | Reply::Created { entry: e, .. })) =
                    (made, &res)
                {
                    self.keep_found(dir, name, e.attr.gfid, mark);
                }
                if let (Some((parent, g, dir)), true) = (new, res.is_ok()) {
                    self.born(cx, parent, g, dir, mark).await;
                }
                res
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_core::xlator::Ack;
    use std::sync::Arc;

    /// Answers getxattr from a map, and counts what it is asked.
    #[derive(Default)]
    struct Xattrs {
        map: Mutex<HashMap<String, Vec<u8>>>,
        asked: AtomicU64,
    }

    impl Xattrs {
        /// Attributes whose size counts the requests asked so far.
        fn attr(&self, gfid: Gfid) -> Attr {
            Attr::plain_file(gfid, self.asked.load(Ordering::Relaxed))
        }
    }

    #[async_trait]
    impl Xlator for Xattrs {
        fn name(&self) -> String {
            "xattrs".into()
        }
        async fn call(&self, _: &Ctx, fop: Fop) -> FsResult<Reply> {
            self.asked.fetch_add(1, Ordering::Relaxed);
            match fop {
                Fop::Getxattr { name, .. } => match self.map.lock().unwrap().get(&name) {
                    Some(v) => Ok(Reply::Xattr(ByteBuf::from(v.clone()))),
                    None => Err(FsError::errno(libc::ENODATA)),
                },
                Fop::Setxattr { name, value, .. } => {
                    self.map.lock().unwrap().insert(name, value.into_vec());
                    Ok(Reply::Ok)
                }
                Fop::Getattr { gfid } => Ok(Reply::Attr(self.attr(gfid))),
                // What a brick tells after a write.
                Fop::Write { gfid, data, .. } => {
                    tokio::task::yield_now().await;
                    Ok(Reply::Written(data.len() as u32, Some(self.attr(gfid))))
                }
                _ => Ok(Reply::Ok),
            }
        }
    }

    /// A brick's recall of `gfid` (or of `name` in it), as the graph
    /// hands it to md-cache.
    fn recall(md: &MdCache, gfid: Gfid, name: Option<Name>) {
        md.notify(
            0,
            Event::Recall {
                gfid,
                name,
                ack: Ack::none(),
            },
        );
    }

    /// md-cache over `below`, under one-minute leases.
    fn leased(below: Arc<impl Xlator + 'static>) -> Arc<MdCache> {
        let md = MdCache::new("md".into(), Child::standalone(below));
        let mut o = mortar_core::Options::new();
        o.insert("features.cache-invalidation-timeout".into(), "60".into());
        md.reconfigure(&o);
        md
    }

    fn get(gfid: Gfid, name: &str) -> Fop {
        Fop::Getxattr {
            gfid,
            name: name.into(),
        }
    }

    #[tokio::test]
    async fn an_answer_is_kept_while_other_objects_change_not_its_own() {
        let md = leased(Arc::new(Xattrs::default()));
        let (f, other) = (Gfid::random(), Gfid::random());
        let same_bucket = |g: &Gfid| g.0[15] as usize % BUCKETS == f.0[15] as usize % BUCKETS;
        let other = if same_bucket(&other) {
            Gfid::ROOT
        } else {
            other
        };
        assert!(!same_bucket(&other));
        // Another object's change, a recall of it, between the request
        // and its answer: kept.
        let mark = md.mark();
        md.drop_attr(other);
        md.drop_object(other);
        md.keep(f, Kept::Attr(Attr::plain_file(f, 1)), mark);
        assert_eq!(md.cached_attr(f).map(|a| a.size), Some(1));
        // Its own: not kept.
        let mark = md.mark();
        md.drop_attr(f);
        md.keep(f, Kept::Attr(Attr::plain_file(f, 2)), mark);
        assert_eq!(md.cached_attr(f), None);
        // A write's answer after another file's write: kept; one marked
        // before a later change of the same file: not kept over it.
        let (first, second) = (md.mark(), md.mark());
        md.bump(&other);
        assert!(md.keep_after_change(f, Attr::plain_file(f, 3), second));
        assert!(!md.keep_after_change(f, Attr::plain_file(f, 4), first));
        assert_eq!(md.cached_attr(f).map(|a| a.size), Some(3));
        // Everything dropped (leases lost): nothing marked before is kept.
        let mark = md.mark();
        md.drop_all();
        md.keep(other, Kept::Attr(Attr::plain_file(other, 5)), mark);
        assert_eq!(md.cached_attr(other), None);
    }

    #[tokio::test]
    async fn answers_are_kept_until_recalled_or_changed() {
        let below = Arc::new(Xattrs::default());
        let md = leased(below.clone());
        let (f, cx) = (Gfid::random(), Ctx::root());
        let asked = || below.asked.load(Ordering::Relaxed);
        // A missing name, asked twice: once of the bricks.
        for _ in 0..2 {
            let e = md
                .call(&cx, get(f, "security.capability"))
                .await
                .unwrap_err();
            assert!(e.is(libc::ENODATA));
        }
        assert_eq!(asked(), 1);
        // This mount's own change drops it.
        let set = Fop::Setxattr {
            gfid: f,
            name: "security.capability".into(),
            value: ByteBuf::from(b"c".to_vec()),
            flags: 0,
        };
        md.call(&cx, set).await.unwrap();
        let v = md.call(&cx, get(f, "security.capability")).await.unwrap();
        assert!(matches!(v, Reply::Xattr(b) if b.as_ref() == b"c"));
        md.call(&cx, get(f, "security.capability")).await.unwrap();
        assert_eq!(asked(), 3);
        // Another client's change: the brick recalls the object first.
        below.map.lock().unwrap().clear();
        recall(&md, f, None);
        assert!(md.call(&cx, get(f, "security.capability")).await.is_err());
        assert_eq!(asked(), 4);
        // Virtual names always go down.
        md.call(&cx, get(f, "trusted.mortar.client.graph"))
            .await
            .ok();
        md.call(&cx, get(f, "trusted.mortar.client.graph"))
            .await
            .ok();
        assert_eq!(asked(), 6);
        // A lost connection drops everything.
        md.notify(0, Event::LeasesLost);
        assert!(md.call(&cx, get(f, "security.capability")).await.is_err());
        assert_eq!(asked(), 7);
    }

    #[tokio::test]
    async fn attributes_are_kept_until_this_mount_or_another_changes_them() {
        let below = Arc::new(Xattrs::default());
        let md = MdCache::new("md".into(), Child::standalone(below.clone()));
        // Without leases (the bricks do not recall): kept one second.
        let mut o = mortar_core::Options::new();
        o.insert("features.cache-invalidation".into(), "off".into());
        md.reconfigure(&o);
        let (f, cx) = (Gfid::random(), Ctx::root());
        let asked = || below.asked.load(Ordering::Relaxed);
        let size = |r: Reply| r.into_attr().unwrap().size;
        let stat = || md.call(&cx, Fop::Getattr { gfid: f });
        assert_eq!(size(stat().await.unwrap()), 1);
        assert_eq!(size(stat().await.unwrap()), 1, "from memory");
        assert_eq!(asked(), 1);
        // At hand for the FUSE thread too, with no wait.
        let at_hand = md.cached(&cx, &Fop::Getattr { gfid: f });
        assert_eq!(size(at_hand.unwrap().unwrap()), 1);
        assert!(md
            .cached(
                &cx,
                &Fop::Getattr {
                    gfid: Gfid::random()
                }
            )
            .is_none());
        // A write here changes the size and mtime.
        let write = Fop::Write {
            gfid: f,
            fh: 1,
            offset: 0,
            data: bytes::Bytes::from_static(b"x"),
        };
        // A write here: the bricks tell the attributes after it, and a
        // stat asks nothing.
        md.call(&cx, write.clone()).await.unwrap();
        assert_eq!(size(stat().await.unwrap()), 2);
        assert_eq!(asked(), 2);
        // Two writes out at once: neither's attributes are kept (the first
        // to end may not have seen the other).
        let (a, b) = tokio::join!(md.call(&cx, write.clone()), md.call(&cx, write));
        a.unwrap();
        b.unwrap();
        assert_eq!(size(stat().await.unwrap()), 5);
        assert_eq!(size(stat().await.unwrap()), 5);
        // A name removed here: the object it named is not known, so every
        // object's attributes are asked again.
        let unlink = Fop::Unlink {
            parent: Gfid::random(),
            name: mortar_core::Name::new("x").unwrap(),
        };
        md.call(&cx, unlink).await.unwrap();
        assert_eq!(size(stat().await.unwrap()), 7);
        // Another client's change, recalled.
        recall(&md, f, None);
        assert_eq!(size(stat().await.unwrap()), 8);
        tokio::time::sleep(mortar_core::terms::UNLEASED).await;
        assert_eq!(size(stat().await.unwrap()), 9);
    }

    #[tokio::test]
    async fn a_new_object_lacks_what_its_directory_lacks_without_asking() {
        let below = Arc::new(Xattrs::default());
        let md = leased(below.clone());
        let (dir, cx) = (Gfid::random(), Ctx::root());
        let asked = || below.asked.load(Ordering::Relaxed);
        let create = |gfid| Fop::Create {
            parent: dir,
            name: mortar_core::Name::new("f").unwrap(),
            gfid,
            mode: 0o644,
            umask: 0o022,
            flags: libc::O_WRONLY,
        };
        let (f1, f2) = (Gfid::random(), Gfid::random());
        md.call(&cx, create(f1)).await.unwrap();
        // The create, and the directory asked once for what it lacks.
        assert_eq!(asked(), 3);
        md.call(&cx, create(f2)).await.unwrap();
        assert_eq!(asked(), 4, "the directory is not asked again");
        for f in [f1, f2] {
            for n in [
                "system.posix_acl_access",
                "security.selinux",
                "security.capability",
            ] {
                let e = md.call(&cx, get(f, n)).await.unwrap_err();
                assert!(e.is(libc::ENODATA), "{n}");
            }
        }
        assert_eq!(asked(), 4, "answered from memory");
        // A directory with a default ACL: its new files are asked.
        below
            .map
            .lock()
            .unwrap()
            .insert("system.posix_acl_default".into(), b"acl".to_vec());
        recall(&md, dir, None);
        let f3 = Gfid::random();
        md.call(&cx, create(f3)).await.unwrap();
        let n = asked();
        md.call(&cx, get(f3, "system.posix_acl_access")).await.ok();
        assert_eq!(asked(), n + 1);
    }

    /// Answers names changes with what they left (as a brick of wire
    /// version 7), or with `Ok` only (`tell` false); getattr with a size
    /// that counts the getattrs asked.
    struct Names {
        tell: bool,
        getattrs: AtomicU64,
        lookups: AtomicU64,
    }

    #[async_trait]
    impl Xlator for Names {
        fn name(&self) -> String {
            "names".into()
        }
        async fn call(&self, _: &Ctx, fop: Fop) -> FsResult<Reply> {
            let dir = |g| Attr {
                kind: mortar_core::FileKind::Dir,
                ..Attr::plain_file(g, 4096)
            };
            match fop {
                Fop::Getattr { gfid } => {
                    let n = self.getattrs.fetch_add(1, Ordering::Relaxed);
                    Ok(Reply::Attr(Attr::plain_file(gfid, n)))
                }
                Fop::Create { parent, gfid, .. } => Ok(Reply::Created {
                    entry: mortar_core::Entry {
                        attr: Attr::plain_file(gfid, 0),
                        parent: self.tell.then(|| dir(parent)),
                    },
                    fh: 1,
                }),
                Fop::Lookup { .. } => {
                    self.lookups.fetch_add(1, Ordering::Relaxed);
                    Err(FsError::errno(libc::ENOENT))
                }
                Fop::Mkdir { gfid, .. } => Ok(Reply::Entry(mortar_core::Entry::found(dir(gfid)))),
                Fop::Unlink { parent, .. } if self.tell => {
                    let gone = Attr {
                        nlink: 0,
                        ..Attr::plain_file(Gfid::random(), 0)
                    };
                    Ok(Reply::Unnamed(vec![dir(parent), gone]))
                }
                _ => Ok(Reply::Ok),
            }
        }
    }

    #[tokio::test]
    async fn what_a_change_of_names_left_is_kept_and_the_rest_stays() {
        for tell in [true, false] {
            let below = Arc::new(Names {
                tell,
                getattrs: AtomicU64::new(0),
                lookups: AtomicU64::new(0),
            });
            let md = leased(below.clone());
            let (d, other, cx) = (Gfid::random(), Gfid::random(), Ctx::root());
            let asked = || below.getattrs.load(Ordering::Relaxed);
            let stat = |g| {
                let md = &md;
                let cx = cx.clone();
                async move { md.call(&cx, Fop::Getattr { gfid: g }).await.unwrap() }
            };
            stat(d).await;
            stat(other).await;
            assert_eq!(asked(), 2);
            let create = Fop::Create {
                parent: d,
                name: mortar_core::Name::new("f").unwrap(),
                gfid: Gfid::random(),
                mode: 0o644,
                umask: 0,
                flags: libc::O_RDWR,
            };
            md.call(&cx, create).await.unwrap();
            // The directory as the create left it: no request when told.
            let Reply::Attr(a) = stat(d).await else {
                panic!()
            };
            assert_eq!(asked(), if tell { 2 } else { 3 });
            assert_eq!(a.kind == mortar_core::FileKind::Dir, tell);
            let unlink = Fop::Unlink {
                parent: d,
                name: mortar_core::Name::new("f").unwrap(),
            };
            md.call(&cx, unlink).await.unwrap();
            let n = asked();
            stat(d).await;
            stat(other).await;
            // Told: the directory and every other object are still known.
            // Not told: the directory and every object are asked again
            // (the name's object is not known here).
            assert_eq!(asked(), if tell { n } else { n + 2 });
        }
    }

    #[tokio::test]
    async fn names_missing_from_a_directory_made_here_are_answered_here() {
        let below = Arc::new(Names {
            tell: true,
            getattrs: AtomicU64::new(0),
            lookups: AtomicU64::new(0),
        });
        let md = leased(below.clone());
        let (d, cx) = (Gfid::random(), Ctx::root());
        let n = |s: &str| mortar_core::Name::new(s).unwrap();
        let asked = || below.lookups.load(Ordering::Relaxed);
        let lookup = |name: &str| Fop::Lookup {
            parent: d,
            name: n(name),
        };
        let mkdir = Fop::Mkdir {
            parent: Gfid::ROOT,
            name: n("d"),
            gfid: d,
            mode: 0o755,
            umask: 0,
        };
        md.call(&cx, mkdir).await.unwrap();
        // Empty: any name is missing, on the FUSE thread too.
        let e = md.call(&cx, lookup("x")).await.unwrap_err();
        assert!(e.is(libc::ENOENT));
        assert!(matches!(md.cached(&cx, &lookup("y")), Some(Err(e)) if e.is(libc::ENOENT)));
        assert_eq!(asked(), 0);
        // A name made here leads to what was made, with no request.
        let x = Gfid::random();
        let create = Fop::Create {
            parent: d,
            name: n("x"),
            gfid: x,
            mode: 0o644,
            umask: 0,
            flags: libc::O_RDWR,
        };
        md.call(&cx, create).await.unwrap();
        let found = md
            .call(&cx, lookup("x"))
            .await
            .unwrap()
            .into_entry()
            .unwrap();
        assert_eq!(found.attr.gfid, x);
        assert_eq!(asked(), 0);
        // Renamed (answered ahead): missing again, and the new name
        // leads to the file moved.
        let rename = Fop::Rename {
            parent: d,
            name: n("x"),
            newparent: d,
            newname: n("z"),
            flags: 0,
        };
        md.call(&cx, rename).await.unwrap();
        md.call(&cx, lookup("x")).await.unwrap_err();
        let moved = md.call(&cx, lookup("z")).await.unwrap();
        assert_eq!(moved.into_entry().unwrap().attr.gfid, x);
        assert_eq!(asked(), 0);
        // Another client's change: the brick recalls the directory first.
        recall(&md, d, Some(n("w")));
        md.call(&cx, lookup("w")).await.unwrap_err();
        assert!(md.cached(&cx, &lookup("w")).is_none());
        assert_eq!(asked(), 1);
    }

    /// Finds every name as an object of its own (the gfid its name
    /// spells), and counts the lookups it is asked.
    #[derive(Default)]
    struct Found {
        lookups: AtomicU64,
    }

    fn spelled(name: &[u8]) -> Gfid {
        let mut g = [0u8; 16];
        g[..name.len().min(16)].copy_from_slice(&name[..name.len().min(16)]);
        Gfid(g)
    }

    #[async_trait]
    impl Xlator for Found {
        fn name(&self) -> String {
            "found".into()
        }
        async fn call(&self, _: &Ctx, fop: Fop) -> FsResult<Reply> {
            match fop {
                Fop::Lookup { name, .. } => {
                    self.lookups.fetch_add(1, Ordering::Relaxed);
                    let a = Attr::plain_file(spelled(name.as_bytes()), 1);
                    Ok(Reply::Entry(mortar_core::Entry::found(a)))
                }
                _ => Ok(Reply::Ok),
            }
        }
    }

    #[tokio::test]
    async fn names_found_are_answered_here_until_recalled_or_changed_here() {
        let below = Arc::new(Found::default());
        let md = leased(below.clone());
        let (d, cx) = (Gfid::random(), Ctx::root());
        let n = |s: &str| mortar_core::Name::new(s).unwrap();
        let asked = || below.lookups.load(Ordering::Relaxed);
        let lookup = |name: &str| Fop::Lookup {
            parent: d,
            name: n(name),
        };
        let find = |name: &'static str| {
            let (md, cx) = (&md, cx.clone());
            async move {
                let e = md.call(&cx, lookup(name)).await.unwrap();
                e.into_entry().unwrap().attr.gfid
            }
        };
        // Found once, then answered here (the kernel asks again after it
        // dropped its own names).
        assert_eq!(find("a").await, spelled(b"a"));
        assert_eq!(find("a").await, spelled(b"a"));
        assert_eq!(find("b").await, spelled(b"b"));
        assert_eq!(asked(), 2);
        // Another client's change of a name in the directory: recalled
        // first; that name is asked again, the others are still known.
        recall(&md, d, Some(n("b")));
        find("a").await;
        assert_eq!(asked(), 2);
        find("b").await;
        assert_eq!(asked(), 3);
        // A change of the directory itself: all its names are asked again.
        recall(&md, d, None);
        find("a").await;
        assert_eq!(asked(), 4);
        // Another client's change of the object: its attributes go, and
        // the name is asked again.
        recall(&md, spelled(b"a"), None);
        find("a").await;
        assert_eq!(asked(), 5);
        // This mount's own unlink: asked again.
        md.call(
            &cx,
            Fop::Unlink {
                parent: d,
                name: n("a"),
            },
        )
        .await
        .unwrap();
        find("a").await;
        assert_eq!(asked(), 6);
        // A lookup answered while a recall came in is not kept.
        let mark = md.mark();
        md.notify(0, Event::LeasesLost);
        md.keep_found(d, &n("q"), spelled(b"q"), mark);
        find("q").await;
        assert_eq!(asked(), 7);
    }
}
