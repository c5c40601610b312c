//! The graph a client runs now, and the switch to a new one while the
//! mount is in use (an option that adds or removes a translator, later a
//! changed brick list).
//!
//! `Active` is the translator the FUSE adapter calls. It issues its own
//! file handles, each naming the graph it was opened on and that graph's
//! handle, so a switch is: build the new graph beside the old one, wait
//! until it reaches the bricks the old one reaches, make it current (new
//! requests go there), open every open file and directory again on it and
//! repoint their handles, then let the old graph finish what is in flight,
//! `fini` it (its locks and change sessions are settled on the bricks) and
//! drop it (its connections close). Requests in flight never fail: each
//! holds the graph it started on until it ends.

use super::Graph;
use async_trait::async_trait;
use mortar_core::fop::AHEAD_FH;
use mortar_core::{Ctx, Fop, FsResult, Gfid, Reply, Xlator};
use mortar_xlators::cluster::HandleMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tracing::Instrument;

/// How long a switch waits for the new graph to reach the bricks the old
/// one reaches.
const CONNECT_WAIT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    File(i32),
    Dir,
}

#[derive(Clone)]
struct Handle {
    graph: Arc<Graph>,
    fh: u64,
    gfid: Gfid,
    how: How,
}

pub struct Active {
    current: RwLock<Arc<Graph>>,
    handles: HandleMap<Handle>,
    /// One switch at a time.
    switching: tokio::sync::Mutex<()>,
    switches: AtomicU64,
    /// Moves on whenever another graph becomes current.
    current_changed: tokio::sync::watch::Sender<u64>,
    /// Held (shared) by every request while it picks its graph, and by a
    /// write until it is answered; held alone by a switch while the old
    /// graph settles and the handles move, so that no write reaches the
    /// new graph while one accepted by the old graph is not yet on the
    /// bricks.
    gate: tokio::sync::RwLock<()>,
}

/// The key of handle `fh` given out here (without the mark `insert` keeps).
fn key(fh: u64) -> u64 {
    fh & !AHEAD_FH
}

impl Active {
    pub fn new(graph: Graph) -> Arc<Active> {
        Arc::new(Active {
            current: RwLock::new(Arc::new(graph)),
            handles: HandleMap::new(),
            switching: tokio::sync::Mutex::new(()),
            switches: AtomicU64::new(0),
            current_changed: tokio::sync::watch::channel(0).0,
            gate: tokio::sync::RwLock::new(()),
        })
    }

    /// Changes whenever another graph becomes current (what a graph
    /// promised, such as recalls, ends with it).
    pub fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.current_changed.subscribe()
    }

    /// The graph new requests go to.
    pub fn graph(&self) -> Arc<Graph> {
        self.current.read().unwrap().clone()
    }

    /// Switches done since the mount.
    pub fn switches(&self) -> u64 {
        self.switches.load(Ordering::Relaxed)
    }

    /// Open files and directories.
    pub fn open_handles(&self) -> usize {
        self.handles.len()
    }

    /// The current graph as a person reads it (`Graph::describe`).
    pub fn describe(&self) -> String {
        format!(
            "{}switches {} open handles {}\n",
            self.graph().describe(),
            self.switches(),
            self.open_handles()
        )
    }

    /// Gives out a handle for `fh` of `graph`. A create's handle answered
    /// ahead of the bricks keeps its mark (`AHEAD_FH`) for the mount,
    /// which does not let the kernel keep its guessed attributes; the mark
    /// is no part of the key (`key`).
    fn insert(&self, graph: Arc<Graph>, fh: u64, gfid: Gfid, how: How) -> u64 {
        let key = self.handles.insert(Handle {
            graph,
            fh,
            gfid,
            how,
        });
        key | (fh & AHEAD_FH)
    }

    /// Makes `new` the graph requests go to, moves every open file and
    /// directory to it, and drops the old graph once it is idle. Returns
    /// how many handles moved.
    pub async fn switch(&self, new: Graph) -> usize {
        let _one = self.switching.lock().await;
        let new = Arc::new(new);
        let old = self.graph();
        // Reach what the old graph reaches before taking over.
        let want: Vec<String> = old
            .leaves()
            .filter(|n| n.child.is_up())
            .map(|n| n.name.clone())
            .collect();
        if !new
            .wait_leaves(|n| want.contains(&n.name), CONNECT_WAIT)
            .await
        {
            tracing::warn!(volume = %new.volume, "the new graph does not reach every brick the old one did; switching anyway");
        }
        let _alone = self.gate.write().await;
        old.settle().await;
        *self.current.write().unwrap() = new.clone();
        self.current_changed.send_modify(|n| *n += 1);
        let mut moved = 0;
        // Opens that were in flight during the switch land on the old
        // graph: go round again for those.
        for _ in 0..3 {
            let stale = self.handles.select(|h| !Arc::ptr_eq(&h.graph, &new));
            if stale.is_empty() {
                break;
            }
            for (ours, h) in stale {
                moved += self.move_handle(ours, h, &new).await as usize;
            }
        }
        self.switches.fetch_add(1, Ordering::Relaxed);
        tracing::info!(volume = %new.volume, version = new.version, moved, "switched to a new graph");
        tokio::spawn(retire(old));
        moved
    }

    /// Opens `h`'s object on `new` and repoints our handle there; closes
    /// the old graph's handle. False if it could not be moved (it stays on
    /// the old graph, which lives until it is released).
    async fn move_handle(&self, ours: u64, h: Handle, new: &Arc<Graph>) -> bool {
        let cx = Ctx::root();
        let open = match h.how {
            How::File(flags) => Fop::Open {
                gfid: h.gfid,
                flags: flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC),
            },
            How::Dir => Fop::Opendir { gfid: h.gfid },
        };
        let close = |gfid, fh| match h.how {
            How::File(_) => Fop::Release { gfid, fh },
            How::Dir => Fop::Releasedir { gfid, fh },
        };
        let fh = match new.top().call(&cx, open).await.and_then(Reply::into_fh) {
            Ok(fh) => fh,
            Err(e) => {
                tracing::warn!(gfid = %h.gfid, "an open file stays on the old graph: {e}");
                return false;
            }
        };
        let moved = Handle {
            graph: new.clone(),
            fh,
            ..h.clone()
        };
        let repointed =
            self.handles
                .replace_if(ours, |cur| Arc::ptr_eq(&cur.graph, &h.graph), moved);
        if !repointed {
            // Released meanwhile.
            let _ = new.top().call(&cx, close(h.gfid, fh)).await;
        }
        // The old graph's handle is not closed here: a request that took
        // it just before the repointing may still be on its way. It closes
        // with the old graph's connections once that graph is idle.
        repointed
    }
}

/// Waits until nothing uses a graph any more, settles it and drops it.
async fn retire(old: Arc<Graph>) {
    while Arc::strong_count(&old) > 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    old.fini().await;
    tracing::debug!(volume = %old.volume, version = old.version, "old graph dropped");
}

#[async_trait]
impl Xlator for Active {
    fn name(&self) -> String {
        "active-graph".into()
    }

    fn cached(&self, cx: &Ctx, fop: &Fop) -> Option<FsResult<Reply>> {
        // Not while a switch is under way (the old graph settling).
        let _gate = self.gate.try_read().ok()?;
        let started = std::time::Instant::now();
        let answer = match fop.fh() {
            Some(_) => None,
            None => self.graph().top().xl.cached(cx, fop),
        };
        if let Some(a) = &answer {
            mortar_metrics::fop_done(fop.name(), started, a);
        }
        answer
    }

    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        // Every fop of the mount passes here once: the client's metrics.
        let (name, started) = (fop.name(), std::time::Instant::now());
        let gate = self.gate.read().await;
        // A write keeps the gate until it is answered (accepted by the
        // graph's write-behind); anything else lets go once it picked its
        // graph, which `route` does before its first wait.
        let _held = matches!(fop, Fop::Write { .. }).then_some(gate);
        // With MORTAR_LOG=debug, every line logged for this fop, down to
        // the calls sent to each brick, names it (docs/operations.md).
        let span = tracing::debug_span!(
            "fop",
            op = name,
            gfid = %fop.gfid(),
            name = fop.entry_name().map(|n| String::from_utf8_lossy(n.as_bytes()).into_owned()),
        );
        let result = self.route(cx, fop).instrument(span).await;
        mortar_metrics::fop_done(name, started, &result);
        result
    }

    fn requests(&self) -> u64 {
        self.graph().requests()
    }
}

impl Active {
    /// Sends a request to the graph it belongs to: the current one, or
    /// the one its handle was opened on.
    async fn route(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        match fop {
            Fop::Open { gfid, flags } => {
                let g = self.graph();
                let fh = g.top().call(cx, fop).await?.into_fh()?;
                Ok(Reply::Opened {
                    fh: self.insert(g, fh, gfid, How::File(flags)),
                })
            }
            Fop::Opendir { gfid } => {
                let g = self.graph();
                let fh = g.top().call(cx, fop).await?.into_fh()?;
                Ok(Reply::Opened {
                    fh: self.insert(g, fh, gfid, How::Dir),
                })
            }
            Fop::Create { gfid, flags, .. } => {
                let g = self.graph();
                match g.top().call(cx, fop).await? {
                    Reply::Created { entry, fh } => Ok(Reply::Created {
                        entry,
                        fh: self.insert(g, fh, gfid, How::File(flags)),
                    }),
                    other => Err(mortar_core::fop::unexpected(other)),
                }
            }
            Fop::Release { fh, .. } | Fop::Releasedir { fh, .. } => {
                match self.handles.remove(key(fh)) {
                    Some(h) => h.graph.top().call(cx, fop.with_fh(h.fh)).await,
                    None => Ok(Reply::Ok),
                }
            }
            _ => match fop.fh() {
                // Through no handle (a directory's fsync): the current graph.
                Some(mortar_core::fop::ANON_FH) | None => self.graph().top().call(cx, fop).await,
                Some(fh) => {
                    let h = self.handles.get(key(fh))?;
                    h.graph.top().call(cx, fop.with_fh(h.fh)).await
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{n, rig};

    #[tokio::test]
    async fn open_files_and_listings_move_to_the_new_graph() {
        let r = rig(1, 3);
        let f = r.create(Gfid::ROOT, "f", b"0123456789").await.unwrap();
        let bricks = r.bricks.clone();
        let active = Active::new(r.graph);
        let cx = Ctx::root();
        let fh = active
            .call(
                &cx,
                Fop::Open {
                    gfid: f,
                    flags: libc::O_RDWR,
                },
            )
            .await
            .unwrap()
            .into_fh()
            .unwrap();
        let dh = active
            .call(&cx, Fop::Opendir { gfid: Gfid::ROOT })
            .await
            .unwrap()
            .into_fh()
            .unwrap();
        let old = Arc::downgrade(&active.graph());
        for _ in 0..3 {
            let next = crate::testkit::graph_over(&bricks, 1, 3);
            assert_eq!(active.switch(next).await, 2);
        }
        // The open file and the listing work on the new graph.
        active
            .call(
                &cx,
                Fop::Write {
                    gfid: f,
                    fh,
                    offset: 0,
                    data: bytes::Bytes::from_static(b"ab"),
                    grow: 0,
                    reserve: false,
                },
            )
            .await
            .unwrap();
        let Reply::Data(d) = active
            .call(
                &cx,
                Fop::Read {
                    gfid: f,
                    fh,
                    offset: 0,
                    size: 100,
                },
            )
            .await
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(&d[..], b"ab23456789");
        let Reply::Entries(e) = active
            .call(
                &cx,
                Fop::Readdir {
                    gfid: Gfid::ROOT,
                    fh: dh,
                    offset: 0,
                    plus: false,
                },
            )
            .await
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(e.len(), 1);
        assert_eq!(&e[0].name[..], n("f").as_bytes());
        // The first graph was let go of once idle.
        for _ in 0..100 {
            if old.upgrade().is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(old.upgrade().is_none(), "the old graph is still alive");
        active
            .call(&cx, Fop::Release { gfid: f, fh })
            .await
            .unwrap();
        active
            .call(
                &cx,
                Fop::Releasedir {
                    gfid: Gfid::ROOT,
                    fh: dh,
                },
            )
            .await
            .unwrap();
        assert_eq!(active.open_handles(), 0);
        active.graph().fini().await;
        // Every graph's handles and locks were let go of on the bricks.
        for b in &bricks {
            assert!(b.pending().is_empty());
            assert_eq!(b.open_handles(), 0);
        }
    }
}
