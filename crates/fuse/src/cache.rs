//! What the kernel caches for this mount, and dropping it when a brick
//! recalls it (docs/caching.md).
//!
//! The kernel caches names, missing names, attributes and file pages. While
//! the bricks recall (`features.cache-invalidation`, on by default), each
//! answer may be cached for the lease's time (`Graph::cache_time`); else for
//! one second. A recall becomes a kernel invalidation on a thread of its
//! own (never inside a request: the kernel may hold the very inode lock a
//! request of ours waits behind), and its acknowledgement goes back to the
//! brick once the kernel has dropped the attributes (which takes no lock),
//! or after `ACK_WAIT`; pages and names are dropped right after, since that
//! may wait behind a request of this mount on the same object. When a
//! connection to a brick ends or comes back, or the graph is switched,
//! every cached name and inode is dropped.

use super::inodes::InodeTable;
use fuser::{INodeNo, Notifier};
use mortar_core::{Event, Gfid, Name};
use mortar_graph::active::Active;
use mortar_graph::Graph;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::oneshot;

/// How long a recall's answer waits for the kernel.
const ACK_WAIT: Duration = Duration::from_millis(100);

/// `FUSE_NOTIFY_INC_EPOCH` (kernel 6.16): every cached name is stale.
const NOTIFY_INC_EPOCH: i32 = 8;

enum Job {
    /// An object's attributes and pages.
    Inode(u64),
    /// A name in a directory, and the directory's attributes and listing.
    Entry(u64, Name),
    /// Everything.
    All,
}

/// A job, and who to tell once the kernel has done it.
type Queue = mpsc::Sender<(Job, Option<oneshot::Sender<()>>)>;

/// Hands kernel invalidations to a thread of their own.
pub struct Invalidator {
    inodes: Arc<InodeTable>,
    tx: Mutex<Option<Queue>>,
    /// Whether the kernel takes `NOTIFY_INC_EPOCH`: without it, names
    /// cannot all be dropped at once, so they are cached only briefly.
    epochs: AtomicBool,
    /// Whether a `Job::All` waits in the queue: another is not queued
    /// behind it. (A volume of 300 bricks stopped and started queued one
    /// per brick connection, each dropping every inode: 0.5 s of CPU.)
    all_queued: Arc<AtomicBool>,
    /// For what is done at once (`attributes`).
    now: std::sync::OnceLock<Notifier>,
}

impl Invalidator {
    pub fn new(inodes: Arc<InodeTable>) -> Arc<Invalidator> {
        Arc::new(Invalidator {
            inodes,
            tx: Mutex::new(None),
            epochs: AtomicBool::new(false),
            all_queued: Arc::new(AtomicBool::new(false)),
            now: std::sync::OnceLock::new(),
        })
    }

    /// Starts invalidating through the mount's session; `device` is a copy
    /// of its FUSE device, for the notification fuser does not know.
    pub fn start(&self, notifier: Notifier, device: OwnedFd) {
        // Asked once: a kernel that takes it has nothing cached yet.
        let ok = inc_epoch(&device);
        self.epochs.store(ok, Ordering::Release);
        if !ok {
            tracing::info!(
                "the kernel cannot drop every cached name at once (FUSE_NOTIFY_INC_EPOCH, Linux 6.16); names are cached for {:?}",
                mortar_core::terms::UNLEASED
            );
        }
        let _ = self.now.set(notifier.clone());
        let (tx, rx) = mpsc::channel::<(Job, Option<oneshot::Sender<()>>)>();
        *self.tx.lock().unwrap() = Some(tx);
        let inodes = self.inodes.clone();
        // Two threads: what a recall waits for never queues behind what
        // may block (`Slow`).
        let (slow_tx, slow_rx) = mpsc::channel::<Slow>();
        let n2 = notifier.clone();
        std::thread::Builder::new()
            .name("mortar-inval-slow".into())
            .spawn(move || {
                for work in slow_rx {
                    work.run(&n2);
                }
            })
            .expect("cannot start the kernel invalidation thread");
        let all_queued = self.all_queued.clone();
        std::thread::Builder::new()
            .name("mortar-inval".into())
            .spawn(move || {
                for (job, done) in rx {
                    if let Job::All = job {
                        // What comes after this point is dropped by it.
                        all_queued.store(false, Ordering::Release);
                    }
                    let slow = run(&notifier, &device, &inodes, job);
                    if let Some(d) = done {
                        let _ = d.send(());
                    }
                    let _ = slow_tx.send(slow);
                }
            })
            .expect("cannot start the kernel invalidation thread");
    }

    /// Whether names may be cached as long as attributes.
    pub fn names_follow_leases(&self) -> bool {
        self.epochs.load(Ordering::Acquire)
    }

    fn send(&self, job: Job) -> Option<oneshot::Receiver<()>> {
        let all = matches!(job, Job::All);
        if all && self.all_queued.swap(true, Ordering::AcqRel) {
            // One waits in the queue: it drops this too.
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let g = self.tx.lock().unwrap();
        let sent = g.as_ref().is_some_and(|q| q.send((job, Some(tx))).is_ok());
        if !sent {
            if all {
                self.all_queued.store(false, Ordering::Release);
            }
            return None;
        }
        Some(rx)
    }

    /// Drops what the kernel caches of `ino` (attributes and pages).
    pub fn inode(&self, ino: u64) {
        let _ = self.send(Job::Inode(ino));
    }

    /// Drops the kernel's attributes of `ino`, at once: the kernel takes
    /// no lock for it that a request of ours could hold.
    pub fn attributes(&self, ino: u64) {
        if let Some(n) = self.now.get() {
            let _ = n.inval_inode(INodeNo(ino), -1, 0);
        }
    }
}

fn inc_epoch(device: &OwnedFd) -> bool {
    // struct fuse_out_header { u32 len; i32 error (the code); u64 unique (0) }
    let mut h = [0u8; 16];
    h[..4].copy_from_slice(&16u32.to_ne_bytes());
    h[4..8].copy_from_slice(&NOTIFY_INC_EPOCH.to_ne_bytes());
    rustix::io::write(device, &h).is_ok()
}

/// What is left of a job once the recall has been answered: dropping
/// pages and names, which may wait behind a request of this mount on the
/// same object (a page locked by a write in flight, a directory locked by
/// a create).
enum Slow {
    Pages(u64),
    Entry(u64, Name),
    AllPages(Vec<u64>),
}

impl Slow {
    fn run(self, n: &Notifier) {
        // An object the kernel no longer has answers ENOENT: nothing to drop.
        match self {
            Slow::Pages(ino) => {
                let _ = n.inval_inode(INodeNo(ino), 0, 0);
            }
            Slow::Entry(parent, name) => {
                let _ = n.inval_entry(INodeNo(parent), name.as_os_str());
            }
            Slow::AllPages(inos) => {
                for ino in inos {
                    let _ = n.inval_inode(INodeNo(ino), 0, 0);
                }
            }
        }
    }
}

/// Does what a recall waits for (nothing there takes a lock a request of
/// ours could hold) and returns the rest.
fn run(n: &Notifier, device: &OwnedFd, inodes: &InodeTable, job: Job) -> Slow {
    match job {
        Job::Inode(ino) => {
            // Attributes only: the next read asks for them and sees the new
            // size and mtime, which drops the pages (FUSE_AUTO_INVAL_DATA).
            let _ = n.inval_inode(INodeNo(ino), -1, 0);
            Slow::Pages(ino)
        }
        Job::Entry(parent, name) => {
            // The directory's attributes and the listing the kernel keeps
            // (FOPEN_CACHE_DIR): its pages are never locked while a request
            // of ours is out. The name itself may be (the directory is
            // locked during a create), so it goes after the answer.
            let _ = n.inval_inode(INodeNo(parent), 0, 0);
            Slow::Entry(parent, name)
        }
        Job::All => {
            inc_epoch(device);
            let all = inodes.all();
            for &ino in &all {
                let _ = n.inval_inode(INodeNo(ino), -1, 0);
            }
            Slow::AllPages(all)
        }
    }
}

/// Turns the recalls of the graph in use into kernel invalidations, for as
/// long as the mount lives.
pub async fn follow_recalls(active: Arc<Active>, inval: Arc<Invalidator>) {
    let mut switched = active.watch();
    loop {
        switched.borrow_and_update();
        let mut events = active.graph().subscribe();
        let was_switched = loop {
            tokio::select! {
                ev = events.recv() => match ev {
                    Ok(Event::Recall {
                        gfid, name, ack, ..
                    }) => recall(&inval, gfid, name, ack),
                    Ok(Event::LeasesLost) | Err(RecvError::Lagged(_)) => {
                        let _ = inval.send(Job::All);
                    }
                    Ok(_) => {}
                    Err(RecvError::Closed) => break false,
                },
                r = switched.changed() => break r.is_ok(),
            }
        };
        // What the old graph's bricks promised to recall ends with it.
        let _ = inval.send(Job::All);
        if !was_switched && switched.changed().await.is_err() {
            return;
        }
    }
}

fn recall(inval: &Invalidator, gfid: Gfid, name: Option<Name>, ack: mortar_core::xlator::Ack) {
    let Some(ino) = inval.inodes.ino(gfid) else {
        // The kernel has nothing of it: answered now (`ack` dropped).
        return;
    };
    let job = match name {
        None => Job::Inode(ino),
        Some(n) => Job::Entry(ino, n),
    };
    if let Some(done) = inval.send(job) {
        tokio::spawn(async move {
            let _ = tokio::time::timeout(ACK_WAIT, done).await;
            drop(ack);
        });
    }
}

/// Taken when a request arrives: how long its answer may be cached.
pub struct Lease {
    graph: Arc<Graph>,
    active: Arc<Active>,
    mark: u64,
    names: bool,
}

impl Lease {
    pub fn new(active: &Arc<Active>, inval: &Invalidator) -> Lease {
        let graph = active.graph();
        let mark = graph.recalls().mark();
        Lease {
            graph,
            active: active.clone(),
            mark,
            names: inval.names_follow_leases(),
        }
    }

    /// Whether the answer about `gfids` may carry state a recall since
    /// has announced changed (or the graph changed meanwhile).
    pub fn stale(&self, gfids: &[Gfid]) -> bool {
        !Arc::ptr_eq(&self.graph, &self.active.graph())
            || self.graph.recalls().since(self.mark, gfids)
    }

    /// How long the kernel may cache attributes the answer carries.
    pub fn attr_ttl(&self, gfids: &[Gfid]) -> Duration {
        if self.stale(gfids) {
            Duration::ZERO
        } else {
            self.graph.cache_time()
        }
    }

    /// How long the kernel may cache a name (or a missing name).
    pub fn entry_ttl(&self, gfids: &[Gfid]) -> Duration {
        let t = self.attr_ttl(gfids);
        if self.names {
            t
        } else {
            t.min(mortar_core::terms::UNLEASED)
        }
    }
}
