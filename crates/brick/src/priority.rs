//! `performance/priority`: the pool's background work (self-heal and
//! rebalance, whose requests carry `Ctx::background`) gives way to the
//! volume's clients on each brick, as GlusterFS's io-threads runs its
//! daemons' requests at the least priority
//! (`performance.enable-least-priority`).
//!
//! A background request that moves data (`moves_data`) goes down once no
//! client request has been in flight on the brick for `QUIET`, or once it
//! has waited `MAX_WAIT` whatever the clients do, so that a heal never
//! starves: on a brick its clients keep busy, each of a healer's requests
//! (a chunk of up to 2 MiB) waits at most that long. Its other requests (a
//! lock, a lookup, the blame) go down at once: a heal holding a file's
//! lock lets go of it no later for them.

use super::{BrickEnv, BrickXlator, Conn};
use async_trait::async_trait;
use mortar_core::options::{Kind, Spec};
use mortar_core::{Ctx, Fop, FsResult, Reply};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub static LEAST_PRIORITY: Spec = Spec {
    key: "performance.enable-least-priority",
    kind: Kind::Bool,
    default: "on",
    help: "Self-heal and rebalance requests that read or write data wait on each brick while it serves the volume's clients (each at most 100 ms), so that the clients' I/O goes first. off: they compete with the clients' as equals.",
};

/// How long the brick has had no client request in flight before a
/// background request goes down.
const QUIET: Duration = Duration::from_millis(5);
/// The longest a background request waits for the clients.
const MAX_WAIT: Duration = Duration::from_millis(100);

pub struct PriorityXl {
    below: Arc<dyn BrickXlator>,
    on: AtomicBool,
    /// Client requests in flight.
    busy: AtomicUsize,
    /// When the last client request ended: microseconds since `epoch` (0:
    /// none yet).
    last: AtomicU64,
    epoch: Instant,
    /// Background requests that waited for clients, and how long in all
    /// (microseconds), for the statedump.
    yielded: AtomicU64,
    yielded_us: AtomicU64,
}

pub fn build(
    _env: &BrickEnv,
    below: Option<Arc<dyn BrickXlator>>,
) -> anyhow::Result<Option<Arc<dyn BrickXlator>>> {
    let below = below.ok_or_else(|| anyhow::anyhow!("performance/priority needs a layer below"))?;
    Ok(Some(Arc::new(PriorityXl::new(below))))
}

/// Background requests that wait for the clients: the ones that keep a
/// disk busy.
fn moves_data(fop: &Fop) -> bool {
    match fop {
        Fop::Read { .. }
        | Fop::Write { .. }
        | Fop::Checksum { .. }
        | Fop::Fsync { .. }
        | Fop::Fallocate { .. }
        | Fop::Readdir { .. } => true,
        Fop::Setattr { set, .. } => set.size.is_some(),
        _ => false,
    }
}

/// Marks a client request ended when dropped (answered or given up).
struct Serving<'a>(&'a PriorityXl);

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        let x = self.0;
        x.last.store(x.now_us().max(1), Ordering::Relaxed);
        x.busy.fetch_sub(1, Ordering::Release);
    }
}

impl PriorityXl {
    fn new(below: Arc<dyn BrickXlator>) -> PriorityXl {
        PriorityXl {
            below,
            on: AtomicBool::new(true),
            busy: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            epoch: Instant::now(),
            yielded: AtomicU64::new(0),
            yielded_us: AtomicU64::new(0),
        }
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    fn clients_quiet(&self) -> bool {
        let last = self.last.load(Ordering::Relaxed);
        self.busy.load(Ordering::Acquire) == 0
            && (last == 0 || self.now_us().saturating_sub(last) >= QUIET.as_micros() as u64)
    }

    /// Waits until the clients leave the brick quiet, at most `MAX_WAIT`.
    async fn give_way(&self) {
        if self.clients_quiet() {
            return;
        }
        let start = Instant::now();
        while !self.clients_quiet() && start.elapsed() < MAX_WAIT {
            tokio::time::sleep(QUIET).await;
        }
        self.yielded.fetch_add(1, Ordering::Relaxed);
        self.yielded_us
            .fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}

#[async_trait]
impl BrickXlator for PriorityXl {
    async fn call(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        if cx.is_background() {
            if self.on.load(Ordering::Relaxed) && moves_data(&fop) {
                self.give_way().await;
            }
            return self.below.call(conn, cx, fop).await;
        }
        // A client waiting for a lock keeps no disk busy, however long.
        if let Fop::Lock { wait: true, .. } = fop {
            return self.below.call(conn, cx, fop).await;
        }
        self.busy.fetch_add(1, Ordering::Acquire);
        let _serving = Serving(self);
        self.below.call(conn, cx, fop).await
    }

    fn connect(&self, conn: &Arc<Conn>) {
        self.below.connect(conn);
    }

    fn disconnect(&self, conn: &Conn) {
        self.below.disconnect(conn);
    }

    fn recalled(&self, conn: &Conn, id: u64) {
        self.below.recalled(conn, id);
    }

    fn reconfigure(&self, options: &mortar_core::Options) {
        self.on
            .store(LEAST_PRIORITY.bool(options), Ordering::Relaxed);
    }

    fn dump(&self) -> Vec<String> {
        vec![format!(
            "least priority {} client requests in flight {} background requests that gave way {} for {} ms in all",
            if self.on.load(Ordering::Relaxed) { "on" } else { "off" },
            self.busy.load(Ordering::Relaxed),
            self.yielded.load(Ordering::Relaxed),
            self.yielded_us.load(Ordering::Relaxed) / 1000,
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_core::Gfid;

    /// Holds clients' reads until let go; answers the rest at once.
    struct Disk {
        gate: tokio::sync::Semaphore,
    }

    #[async_trait]
    impl BrickXlator for Disk {
        async fn call(&self, _: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
            if let (Fop::Read { .. }, false) = (&fop, cx.is_background()) {
                self.gate.acquire().await.unwrap().forget();
            }
            Ok(Reply::Ok)
        }
    }

    fn conn() -> Arc<Conn> {
        Conn::quiet(1)
    }

    fn read() -> Fop {
        Fop::Read {
            gfid: Gfid::random(),
            fh: 0,
            offset: 0,
            size: 1 << 20,
        }
    }

    fn rig() -> (Arc<Disk>, Arc<PriorityXl>) {
        let disk = Arc::new(Disk {
            gate: tokio::sync::Semaphore::new(0),
        });
        (disk.clone(), Arc::new(PriorityXl::new(disk)))
    }

    /// How long a background read takes while a client's read is out
    /// (let go after 30 ms).
    async fn background_read_beside_a_client(x: &Arc<PriorityXl>, disk: &Arc<Disk>) -> Duration {
        let c = conn();
        let client = {
            let (x, c) = (x.clone(), c.clone());
            tokio::spawn(async move { x.call(&c, &Ctx::root(), read()).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        let bg = async {
            let start = Instant::now();
            x.call(&c, &Ctx::background(), read()).await.unwrap();
            start.elapsed()
        };
        let letgo = async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            disk.gate.add_permits(1);
        };
        let (took, ()) = tokio::join!(bg, letgo);
        client.await.unwrap().unwrap();
        took
    }

    #[tokio::test]
    async fn background_reads_wait_for_the_clients_at_most_max_wait() {
        let (disk, x) = rig();
        // Idle brick: no wait.
        let start = Instant::now();
        x.call(&conn(), &Ctx::background(), read()).await.unwrap();
        assert!(start.elapsed() < QUIET, "{:?}", start.elapsed());
        // A client's read out: the background one waits for it to end.
        let took = background_read_beside_a_client(&x, &disk).await;
        assert!(took >= Duration::from_millis(30), "{took:?}");
        assert_eq!(x.yielded.load(Ordering::Relaxed), 1);
        // A client that never lets go: MAX_WAIT, then it goes anyway.
        let c = conn();
        let stuck = {
            let (x, c) = (x.clone(), c.clone());
            tokio::spawn(async move { x.call(&c, &Ctx::root(), read()).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        let start = Instant::now();
        x.call(&c, &Ctx::background(), read()).await.unwrap();
        let took = start.elapsed();
        assert!(took >= MAX_WAIT && took < MAX_WAIT * 3, "{took:?}");
        disk.gate.add_permits(1);
        stuck.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn off_or_without_data_background_requests_go_at_once() {
        let (disk, x) = rig();
        let mut o = mortar_core::Options::new();
        o.insert(LEAST_PRIORITY.key.into(), "off".into());
        x.reconfigure(&o);
        let took = background_read_beside_a_client(&x, &disk).await;
        assert!(took < Duration::from_millis(30), "{took:?}");
        x.reconfigure(&Default::default());
        let c = conn();
        let client = {
            let (x, c) = (x.clone(), c.clone());
            tokio::spawn(async move { x.call(&c, &Ctx::root(), read()).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        let start = Instant::now();
        let lookup = Fop::Getattr {
            gfid: Gfid::random(),
        };
        x.call(&c, &Ctx::background(), lookup).await.unwrap();
        assert!(start.elapsed() < QUIET, "{:?}", start.elapsed());
        disk.gate.add_permits(1);
        client.await.unwrap().unwrap();
    }
}
