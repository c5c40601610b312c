//! The translator trait, and how translators are joined into a graph.
//!
//! A volume's client is a graph of translators, each holding its children;
//! a request is a `Fop` passed down with a `Ctx`, and a translator that
//! does not handle a fop hands it to its child unchanged.
//!
//! Everything that is not a request is an `Event`, and no translator has to
//! forward one by hand:
//! - **Upward** (a brick came up or went down, a brick's notice): the
//!   translator that saw it emits it on its `Link`; the graph hands it to
//!   the parent's `notify`, whose default passes it on unchanged, and so on
//!   to the top, where any number of subscribers receive it. Each link
//!   keeps what passed over it (up or down, and an epoch bumped on every
//!   down), so a parent asks `Child::is_up`/`Child::epoch` of its own link,
//!   never of a translator that might forget to answer.
//! - **Downward** (start, changed options, a forgotten object, shutdown):
//!   the graph calls each translator's `start`, `reconfigure`, `forget` and
//!   `fini` itself; a translator implements the ones it needs and never
//!   calls its children's.

use super::{Fop, FsResult, Gfid, Reply};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

/// Volume options in force, by key (declared in `core::options` specs
/// beside the translators that read them).
pub type Options = std::collections::BTreeMap<String, String>;

/// Per-request context: who asks, for what, on whose behalf.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Ctx {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// The FUSE request id, for logs.
    pub unique: u64,
    /// The caller's supplementary groups (none for root).
    pub groups: Vec<u32>,
    /// Asked by mortar itself (a translator's own bookkeeping, self-heal,
    /// rebalance), not on a user's behalf: a brick honours it from the
    /// pool's servers only (docs/security.md).
    pub internal: bool,
    /// Bytes the mount holds written and not yet sent below
    /// (`performance/write-behind` sets it on the creates it passes on):
    /// placing a new file on a set near full leaves room for them
    /// (`cluster/distribute`). Never sent to a brick.
    #[serde(skip)]
    pub behind: u64,
}

/// The `pid` of the pool's background work (GlusterFS gives its daemons
/// negative pids: self-heal -6).
pub const BACKGROUND_PID: u32 = -6i32 as u32;

impl Ctx {
    /// mortar's own requests, as root.
    pub fn root() -> Ctx {
        Ctx {
            internal: true,
            ..Ctx::default()
        }
    }

    /// mortar's own requests, as root, for background work (self-heal,
    /// rebalance): the bricks serve their clients first
    /// (`brick::priority`).
    pub fn background() -> Ctx {
        Ctx {
            pid: BACKGROUND_PID,
            ..Ctx::root()
        }
    }

    pub fn is_background(&self) -> bool {
        self.internal && self.pid == BACKGROUND_PID
    }
}

/// Something that happened below a translator, travelling up the graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The child can serve requests (again).
    Up,
    /// The child cannot serve requests; handles it issued before are no
    /// longer valid (its link's epoch moves on).
    Down,
    /// Another client waits for a lock on this object that we hold.
    Contention(Gfid),
    /// A brick recalls what this client caches (docs/caching.md): of the
    /// object `gfid` (its attributes, xattrs and data) when `name` is None,
    /// else of that name in directory `gfid` (and the directory's
    /// attributes and listing). The brick applies another client's change
    /// once every copy of `ack` is dropped, or its recall times out: drop
    /// the cache, then the event. `claim`: the recall (also) ends this
    /// client's claim on the object (`brick::leases`): another client
    /// looks at it, and waits until the writes closed behind have landed.
    Recall {
        gfid: Gfid,
        name: Option<super::Name>,
        claim: bool,
        ack: Ack,
    },
    /// A connection to a brick ended: what it promised to recall is no
    /// longer promised, so nothing cached under its leases can be trusted.
    LeasesLost,
}

/// Answers a brick's recall when its last copy is dropped.
#[derive(Clone)]
pub struct Ack(Arc<AckOnDrop>);

struct AckOnDrop(Option<Box<dyn FnOnce() + Send + Sync>>);

impl Drop for AckOnDrop {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

impl Ack {
    /// An acknowledgement that runs `f` once every copy is dropped.
    pub fn new(f: impl FnOnce() + Send + Sync + 'static) -> Ack {
        Ack(Arc::new(AckOnDrop(Some(Box::new(f)))))
    }
    /// One that answers nobody (tests, in-memory bricks).
    pub fn none() -> Ack {
        Ack(Arc::new(AckOnDrop(None)))
    }
}

impl std::fmt::Debug for Ack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ack")
    }
}

impl PartialEq for Ack {
    fn eq(&self, other: &Ack) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Ack {}

#[async_trait]
pub trait Xlator: Send + Sync {
    /// A short name for logs: the translator type and its instance.
    fn name(&self) -> String;
    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply>;
    /// `fop` (a create or an open), then a lock on its object without
    /// waiting, marked `mark` (`Fop::Lock`), where `fop` succeeded: the two
    /// answers. A translator that reaches a brick sends both in one request
    /// (`wire::Msg::CallLocked`); the default asks for both at once.
    async fn call_locked(
        &self,
        cx: &Ctx,
        fop: Fop,
        mark: u32,
    ) -> (FsResult<Reply>, FsResult<Reply>) {
        let lock = Fop::Lock {
            gfid: fop.gfid(),
            wait: false,
            mark: Some(mark),
        };
        futures_util::future::join(self.call(cx, fop), self.call(&Ctx::root(), lock)).await
    }
    /// The answer to `fop` if this translator has it at hand, without
    /// waiting for anything: the FUSE adapter asks first and answers on
    /// its own thread, with no hop to the runtime (md-cache's attributes
    /// and xattrs). None: ask `call`. A translator that changes answers
    /// on their way up must not pass this on from its child.
    fn cached(&self, _cx: &Ctx, _fop: &Fop) -> Option<FsResult<Reply>> {
        None
    }
    /// An event from child `from`; what is returned goes on to the parent
    /// (the default: the same event). Runs on the task that saw the event:
    /// it must not block (spawn what takes time).
    fn notify(&self, _from: usize, ev: Event) -> Option<Event> {
        Some(ev)
    }
    /// Called by the graph once every translator of it is joined: begin
    /// work that may emit events (connecting, timers).
    fn start(&self) {}
    /// Called by the graph with the volume's options whenever they change
    /// (and once after `start`): take what this translator reads.
    fn reconfigure(&self, _options: &Options) {}
    /// Called by the graph, top down, before it is dropped: let go of what
    /// this translator holds on the bricks (locks, change sessions).
    async fn fini(&self) {}
    /// Called by the graph when another graph is about to take its place:
    /// return once what this translator answered without the bricks
    /// (writes sent behind) is on the bricks.
    async fn settle(&self) {}
    /// Called by the graph when the kernel forgot an object: drop what
    /// this translator remembers about it.
    fn forget(&self, _gfid: Gfid) {}
    /// Network requests this translator has sent (the graph sums them for
    /// the benchmark's requests-per-create figure).
    fn requests(&self) -> u64 {
        0
    }
    /// The children this translator reads around because they answer
    /// late (a disperse set's slow bricks), by position.
    fn slow(&self) -> Vec<usize> {
        Vec::new()
    }
    /// What this translator would tell a person debugging it (counters,
    /// state), one line each; shown with the graph.
    fn dump(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What passed over the edge between a translator and its parent, and the
/// way up from it.
pub struct Link {
    up: AtomicBool,
    epoch: AtomicU64,
    parent: OnceLock<Parent>,
    top: OnceLock<Top>,
}

/// Where events leave the top of a graph.
pub struct Top {
    pub events: tokio::sync::broadcast::Sender<Event>,
    /// Recalls are written down here as they arrive, before anyone acts
    /// on them (`core::recalls`).
    pub recalls: Arc<super::recalls::RecallLog>,
}

struct Parent {
    xl: Weak<dyn Xlator>,
    index: usize,
    link: Arc<Link>,
}

impl Default for Link {
    fn default() -> Self {
        Link {
            up: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            parent: OnceLock::new(),
            top: OnceLock::new(),
        }
    }
}

impl Link {
    pub fn new() -> Arc<Link> {
        Arc::new(Link::default())
    }

    /// A link that is up and joined to nothing (a translator used alone).
    pub fn up() -> Arc<Link> {
        let l = Link::new();
        l.up.store(true, Ordering::Release);
        l
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Joins this link to the parent translator that holds it as child `index`.
    pub fn attach(&self, parent: Weak<dyn Xlator>, index: usize, parent_link: Arc<Link>) {
        let _ = self.parent.set(Parent {
            xl: parent,
            index,
            link: parent_link,
        });
    }

    /// Makes this link the top of a graph: what reaches it is broadcast.
    pub fn attach_top(&self, top: Top) {
        let _ = self.top.set(top);
    }

    /// Records the event on this link and carries it up the graph.
    pub fn emit(&self, ev: Event) {
        match ev {
            Event::Up => self.up.store(true, Ordering::Release),
            Event::Down => {
                self.epoch.fetch_add(1, Ordering::AcqRel);
                self.up.store(false, Ordering::Release);
            }
            Event::Contention(_) | Event::Recall { .. } | Event::LeasesLost => {}
        }
        if let Some(p) = self.parent.get() {
            let Some(xl) = p.xl.upgrade() else { return };
            if let Some(next) = xl.notify(p.index, ev) {
                p.link.emit(next);
            }
        } else if let Some(top) = self.top.get() {
            match &ev {
                Event::Recall { gfid, .. } => top.recalls.note(*gfid),
                Event::LeasesLost => top.recalls.note_all(),
                _ => {}
            }
            let _ = top.events.send(ev);
        }
    }
}

/// A translator as its parent holds it: the translator and the link to it.
#[derive(Clone)]
pub struct Child {
    pub xl: Arc<dyn Xlator>,
    pub link: Arc<Link>,
}

impl Child {
    pub fn new(xl: Arc<dyn Xlator>, link: Arc<Link>) -> Child {
        Child { xl, link }
    }
    /// A translator used without a graph, always up (tests, tools).
    pub fn standalone(xl: Arc<dyn Xlator>) -> Child {
        Child::new(xl, Link::up())
    }
    pub async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        self.xl.call(cx, fop).await
    }
    /// `Xlator::call_locked` of this child.
    pub async fn call_locked(
        &self,
        cx: &Ctx,
        fop: Fop,
        mark: u32,
    ) -> (FsResult<Reply>, FsResult<Reply>) {
        self.xl.call_locked(cx, fop, mark).await
    }
    /// Every entry of directory `dir`, opened here as `fh`, read from
    /// its start with attributes (readdirplus); then `fh` is let go.
    pub async fn read_whole_dir(
        &self,
        cx: &Ctx,
        dir: Gfid,
        fh: u64,
    ) -> FsResult<Vec<super::DirEntry>> {
        let mut all = Vec::new();
        let mut offset = 0;
        let res = loop {
            let fop = Fop::Readdir {
                gfid: dir,
                fh,
                offset,
                plus: true,
            };
            match self.call(cx, fop).await {
                Ok(Reply::Entries(es)) if es.is_empty() => break Ok(()),
                Ok(Reply::Entries(es)) => {
                    offset = es.last().map_or(offset, |e| e.next);
                    all.extend(es);
                }
                Ok(other) => break Err(super::fop::unexpected(other)),
                Err(e) => break Err(e),
            }
        };
        let _ = self.call(cx, Fop::Releasedir { gfid: dir, fh }).await;
        res.map(|()| all)
    }
    pub fn is_up(&self) -> bool {
        self.link.is_up()
    }
    /// Moves on every time the child goes down: a handle it issued in an
    /// older epoch is dead.
    pub fn epoch(&self) -> u64 {
        self.link.epoch()
    }
    pub fn name(&self) -> String {
        self.xl.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FsError;
    use std::sync::Mutex;

    /// Records what it is notified of; passes on, or swallows, by choice.
    struct Recorder {
        seen: Mutex<Vec<(usize, Event)>>,
        pass: bool,
    }

    #[async_trait]
    impl Xlator for Recorder {
        fn name(&self) -> String {
            "recorder".into()
        }
        async fn call(&self, _: &Ctx, _: Fop) -> FsResult<Reply> {
            Err(FsError::errno(libc::ENOSYS))
        }
        fn notify(&self, from: usize, ev: Event) -> Option<Event> {
            self.seen.lock().unwrap().push((from, ev.clone()));
            self.pass.then_some(ev)
        }
    }

    /// A translator that overrides nothing but `call`.
    struct Plain;

    #[async_trait]
    impl Xlator for Plain {
        fn name(&self) -> String {
            "plain".into()
        }
        async fn call(&self, _: &Ctx, _: Fop) -> FsResult<Reply> {
            Ok(Reply::Ok)
        }
    }

    #[tokio::test]
    async fn events_pass_through_translators_that_ignore_them() {
        // top (recorder) <- middle (plain) <- leaf link
        let top = Arc::new(Recorder {
            seen: Mutex::new(vec![]),
            pass: true,
        });
        let top_link = Link::new();
        let (tx, mut rx) = tokio::sync::broadcast::channel(8);
        top_link.attach_top(Top {
            events: tx,
            recalls: Default::default(),
        });
        let mid: Arc<dyn Xlator> = Arc::new(Plain);
        let mid_link = Link::new();
        let top_dyn: Arc<dyn Xlator> = top.clone();
        mid_link.attach(Arc::downgrade(&top_dyn), 1, top_link.clone());
        let leaf_link = Link::new();
        leaf_link.attach(Arc::downgrade(&mid), 0, mid_link.clone());

        leaf_link.emit(Event::Up);
        assert!(leaf_link.is_up() && mid_link.is_up() && top_link.is_up());
        leaf_link.emit(Event::Down);
        assert_eq!((leaf_link.epoch(), mid_link.epoch()), (1, 1));
        assert!(!mid_link.is_up());
        assert_eq!(
            *top.seen.lock().unwrap(),
            vec![(1, Event::Up), (1, Event::Down)]
        );
        assert_eq!(rx.recv().await.unwrap(), Event::Up);
        assert_eq!(rx.recv().await.unwrap(), Event::Down);
    }

    #[test]
    fn a_translator_may_keep_an_event_to_itself() {
        let top = Arc::new(Recorder {
            seen: Mutex::new(vec![]),
            pass: false,
        });
        let top_dyn: Arc<dyn Xlator> = top.clone();
        let top_link = Link::new();
        let leaf = Link::new();
        leaf.attach(Arc::downgrade(&top_dyn), 0, top_link.clone());
        leaf.emit(Event::Contention(Gfid::ROOT));
        assert_eq!(top.seen.lock().unwrap().len(), 1);
        assert!(!top_link.is_up());
    }
}
