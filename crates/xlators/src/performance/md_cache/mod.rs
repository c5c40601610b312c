//! `performance/md-cache`: each object's attributes and extended
//! attributes, kept at the mount. The kernel caches attributes itself but
//! asks again after every read of a file (its atime is out of date) and
//! after every change it made; it does not cache xattrs at all, missing
//! ones included, such as `security.capability`, which it asks about before
//! every write, and the POSIX ACL names `ls -l` asks about; the bricks'
//! attributes say which of those an object has (`Attr::watched`), so after
//! a lookup or a readdirplus the missing ones cost no request. Kept for the
//! bricks' lease time (`features.cache-invalidation-timeout`; one second
//! without leases), dropped when a brick recalls the object, when this
//! mount changes it, and when a connection to a brick ends (not when the
//! kernel forgets the inode: the lease goes on). A change of names made
//! here keeps what the bricks say it left its directories and objects
//! with; when they cannot tell, a name removed or moved drops every
//! object's attributes (the object it named is not known here, and its
//! link count changed).
//!
//! Layout: `mod.rs` the translator and its reads; `store` what is kept
//! and its marks; `changes` the fops that change things; `ahead` creates
//! answered before the bricks have them, `behind` what waits on them.

mod ahead;
mod behind;
mod changes;
mod store;

pub use ahead::ASYNC_DIROPS;

use async_trait::async_trait;
use behind::Behind;
use mortar_core::fop::{is_ahead, ANON_FH};
use mortar_core::options::{Kind, Spec};
use mortar_core::{
    Attr, Child, Ctx, Event, FileKind, Fop, FsError, FsResult, Gfid, Name, Reply, Xlator,
};
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
/// the request, so concurrent work on other objects rarely stops it (a
/// write answered behind a close runs while the application makes the
/// next files). A multiple of `SHARDS` that divides 65536.
const BUCKETS: usize = 4096;

/// An xattr's value, or the errno that said it is missing.
type Answer = Result<ByteBuf, i32>;

struct Object {
    /// With `names_moved` as it was when they were kept.
    attr: Option<(Attr, u64)>,
    /// For a directory this mount made: every name in it, until the
    /// leases its making was granted on every brick end.
    names: Option<Names>,
    /// For a directory: names a lookup found in it, each with the object
    /// it led to and its kind, until the lease that answer was granted
    /// ends.
    found: HashMap<Vec<u8>, (Gfid, FileKind, Instant)>,
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
    /// Directories being made here, each with whether anything about it
    /// changed since (`store::Making`): exact where a bucket is not.
    making: Mutex<HashMap<Gfid, bool>>,
    /// How many: 0 spares every change the look into `making`.
    makes: std::sync::atomic::AtomicUsize,
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
            making: Mutex::default(),
            makes: Default::default(),
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
        let fop = match fop.fh().filter(|fh| is_ahead(*fh)) {
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

    /// Returns once no change ahead touches object `gfid`: what is kept
    /// of it until then was made up here, with times that are not the
    /// ones the bricks give it. (A directory's are answered as made: the
    /// kernel asks for them before every create in it.)
    async fn landed(&self, gfid: Gfid) {
        if self.behind.changes_object(&gfid) {
            self.behind
                .wait(u64::MAX, |k| k.objects.contains(&gfid))
                .await;
        }
    }

    /// Sends `fop` to the bricks once it is `ready`. A close or release of
    /// a handle given ahead, and a directory's fsync, are answered here.
    async fn down(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let fop = match &fop {
            // Nothing was written (write-behind waits for the writes
            // first, and they for the create): nothing to report yet.
            Fop::Flush { fh, .. } if is_ahead(*fh) && self.behind.making(*fh) => {
                return Ok(Reply::Ok)
            }
            Fop::Release { fh, .. } if is_ahead(*fh) => match self.behind.release(*fh).await {
                Some(real) => fop.with_fh(real),
                None => return Ok(Reply::Ok),
            },
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

impl MdCache {}

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
        // The bricks claim a directory for its maker only under leases;
        // with retention on, a brick may refuse an unlink or a rename the
        // application must hear of.
        let ahead = ASYNC_DIROPS.bool(options)
            && t > mortar_core::terms::UNLEASED
            && !mortar_core::terms::WORM_FILE_LEVEL.bool(options);
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
            Fop::Getattr { gfid } if !self.behind.changes_object(gfid) => {
                Ok(Reply::Attr(self.cached_attr(*gfid)?))
            }
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
                self.landed(gfid).await;
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
                    self.landed(a.gfid).await;
                    if let Some(a) = self.found(parent, name.as_bytes()) {
                        self.counted(true);
                        return Ok(Reply::Entry(mortar_core::Entry::found(a)));
                    }
                }
                self.counted(false);
                let name = name.clone();
                let mark = self.mark();
                let res = self.down(cx, fop).await;
                self.keep_attrs(&res, mark);
                if let Ok(Reply::Entry(e)) = &res {
                    self.keep_found(parent, &name, (e.attr.gfid, e.attr.kind), mark);
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
            // Data changed here: the size and times, not the xattrs.
            Fop::Write { gfid, .. } => self.write(cx, fop, gfid).await,
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
            fop => self.change(cx, fop).await,
        }
    }
}

#[cfg(test)]
mod tests;
