//! `features/barrier`: holds back every change of the brick directory
//! while a snapshot of it is taken (`volume snapshot create`), and takes
//! it. It sits right above `storage/posix`, so that what it holds is the
//! changes themselves: a change waiting above it (for a lock, a lease
//! recall) is not in flight here and cannot keep the barrier from rising.
//!
//! The daemon drives it through virtual xattrs of the brick's root, its
//! own requests only (`Ctx::internal`, honoured from the pool's servers):
//!
//! - `BARRIER_XATTR` set: the barrier rises. Changes arriving from then
//!   on wait; the call answers once every change already in flight has
//!   finished (or fails with EBUSY, the barrier down again, if they have
//!   not within `features.barrier-timeout`).
//! - `SNAPSHOT_XATTR_PREFIX` + NAME set: takes snapshot NAME of the brick
//!   (`storage::snapshot`), behind the barrier; removed: deletes it.
//! - `BARRIER_XATTR` removed: the barrier falls; the changes held go on.
//! - `FLUSH_XATTR` set: the brick's file system writes out what it holds
//!   in memory, before the barrier rises, so that the snapshot has
//!   little to write while changes wait.
//! - `SNAPSHOTS_XATTR` read: the brick's mechanism (or why it has none)
//!   and its snapshots, as JSON (`SnapshotReport`).
//!
//! A barrier nobody lowers falls by itself after `features.barrier-timeout`
//! (a daemon that died mid-snapshot never leaves a brick stuck); a
//! snapshot that was still being taken then is removed and fails.

use super::{BrickEnv, BrickXlator, Conn};
use async_trait::async_trait;
use mortar_core::options::{Kind, Spec};
use mortar_core::{Ctx, Fop, FsError, FsResult, Gfid, Reply};
use mortar_storage::snapshot;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

pub const BARRIER_XATTR: &str = "trusted.mortar.brick.barrier";
pub const SNAPSHOT_XATTR_PREFIX: &str = "trusted.mortar.brick.snapshot.";
pub const SNAPSHOTS_XATTR: &str = "trusted.mortar.brick.snapshots";
pub const FLUSH_XATTR: &str = "trusted.mortar.brick.flush";

pub static BARRIER_TIMEOUT: Spec = Spec {
    key: "features.barrier-timeout",
    kind: Kind::Int(1, 3600),
    default: "120",
    help: "Seconds at most a brick holds changes back for a snapshot: a snapshot not taken by then fails, and the changes go on (GlusterFS's default: 120).",
};

/// What a brick answers about its snapshots.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotReport {
    /// How its snapshots are made ("btrfs-subvolume", "reflink"), or why
    /// none can be.
    pub mechanism: Result<String, String>,
    pub snapshots: Vec<String>,
}

pub struct Barrier {
    me: Weak<Barrier>,
    below: Arc<dyn BrickXlator>,
    brick: PathBuf,
    /// Changes between this layer and the one below.
    in_flight: AtomicU64,
    raised: AtomicBool,
    /// Which rise the barrier is at (each rise and fall adds one).
    epoch: AtomicU64,
    /// Told when the barrier falls, and when the last change in flight ends.
    fallen: Notify,
    drained: Notify,
    timeout_secs: AtomicU64,
    /// How long the last rise held changes back, for the statedump.
    last: Mutex<Option<(Instant, Option<Duration>)>>,
}

pub fn build(
    env: &BrickEnv,
    below: Option<Arc<dyn BrickXlator>>,
) -> anyhow::Result<Option<Arc<dyn BrickXlator>>> {
    let below = below.ok_or_else(|| anyhow::anyhow!("features/barrier needs a layer below"))?;
    let brick = env.posix.path().to_path_buf();
    Ok(Some(Arc::new_cyclic(|me| {
        Barrier::new(me.clone(), below, brick)
    })))
}

/// The part of a change's life it is in flight here.
struct InFlight<'a>(&'a Barrier);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let b = self.0;
        if b.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 && b.raised.load(Ordering::SeqCst) {
            b.drained.notify_waiters();
        }
    }
}

fn not_ours() -> FsError {
    FsError::new(
        libc::EPERM,
        "a brick's barrier and snapshots are the pool's",
    )
}

fn io_error(e: std::io::Error) -> FsError {
    FsError::new(e.raw_os_error().unwrap_or(libc::EIO), e.to_string())
}

impl Barrier {
    fn new(me: Weak<Barrier>, below: Arc<dyn BrickXlator>, brick: PathBuf) -> Barrier {
        Barrier {
            me,
            below,
            brick,
            in_flight: AtomicU64::new(0),
            raised: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            fallen: Notify::new(),
            drained: Notify::new(),
            timeout_secs: AtomicU64::new(120),
            last: Mutex::new(None),
        }
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs.load(Ordering::Relaxed))
    }

    /// Enters a change: at once, or once the barrier has fallen.
    async fn enter(&self) -> InFlight<'_> {
        loop {
            // (Counted first, then the barrier read: a rise either sees
            // this change in flight or this change sees the rise.)
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            let entered = InFlight(self);
            if !self.raised.load(Ordering::SeqCst) {
                return entered;
            }
            drop(entered);
            let fallen = self.fallen.notified();
            tokio::pin!(fallen);
            fallen.as_mut().enable();
            if self.raised.load(Ordering::SeqCst) {
                fallen.await;
            }
        }
    }

    /// Raises the barrier and waits for the changes in flight to end.
    async fn raise(&self) -> FsResult<()> {
        if self.raised.swap(true, Ordering::SeqCst) {
            return Err(FsError::new(libc::EBUSY, "the barrier is up already"));
        }
        let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        *self.last.lock().unwrap() = Some((Instant::now(), None));
        let timeout = self.timeout();
        // A barrier nobody lowers falls by itself.
        let me = self.me.clone();
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            if let Some(b) = me.upgrade() {
                if b.epoch.load(Ordering::SeqCst) == epoch {
                    tracing::warn!(brick = %b.brick.display(), "barrier up for {timeout:?}: lowered (features.barrier-timeout)");
                    b.lower();
                }
            }
        });
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                tracing::info!(brick = %self.brick.display(), "barrier up: changes held back");
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, drained).await.is_err() {
                self.lower();
                return Err(FsError::new(
                    libc::EBUSY,
                    format!(
                        "{}: changes in flight did not end within {timeout:?}",
                        self.brick.display()
                    ),
                ));
            }
        }
    }

    fn lower(&self) {
        if self.raised.swap(false, Ordering::SeqCst) {
            self.epoch.fetch_add(1, Ordering::SeqCst);
            if let Some((at, held)) = self.last.lock().unwrap().as_mut() {
                *held = Some(at.elapsed());
            }
            self.fallen.notify_waiters();
            tracing::info!(brick = %self.brick.display(), "barrier down: changes go on");
        }
    }

    /// Takes snapshot `name` behind the raised barrier; removes it again
    /// if the barrier fell meanwhile.
    async fn take(&self, name: String) -> FsResult<()> {
        let epoch = self.epoch.load(Ordering::SeqCst);
        if !self.raised.load(Ordering::SeqCst) {
            return Err(FsError::new(
                libc::EINVAL,
                "a snapshot is taken behind the barrier: raise it first",
            ));
        }
        let brick = self.brick.clone();
        let started = Instant::now();
        let (n, b) = (name.clone(), brick.clone());
        let taken = tokio::task::spawn_blocking(move || snapshot::take(&b, &n))
            .await
            .map_err(|e| FsError::new(libc::EIO, e.to_string()))?
            .map_err(io_error)?;
        if self.epoch.load(Ordering::SeqCst) != epoch {
            let b = brick.clone();
            let _ = tokio::task::spawn_blocking(move || snapshot::remove(&b, &name)).await;
            return Err(FsError::new(
                libc::ETIMEDOUT,
                format!(
                    "{}: the barrier fell while the snapshot was taken (features.barrier-timeout): it is removed",
                    brick.display()
                ),
            ));
        }
        tracing::info!(brick = %brick.display(), snapshot = %name, mechanism = taken.0.name(), "snapshot taken in {:?} at {}", started.elapsed(), taken.1.display());
        Ok(())
    }

    async fn flush(&self) -> FsResult<()> {
        let b = self.brick.clone();
        tokio::task::spawn_blocking(move || snapshot::flush(&b))
            .await
            .map_err(|e| FsError::new(libc::EIO, e.to_string()))?
            .map_err(io_error)
    }

    async fn remove(&self, name: String) -> FsResult<()> {
        let b = self.brick.clone();
        let n = name.clone();
        tokio::task::spawn_blocking(move || snapshot::remove(&b, &n))
            .await
            .map_err(|e| FsError::new(libc::EIO, e.to_string()))?
            .map_err(io_error)?;
        tracing::info!(brick = %self.brick.display(), snapshot = %name, "snapshot removed");
        Ok(())
    }

    async fn report(&self) -> FsResult<Reply> {
        let b = self.brick.clone();
        let report = tokio::task::spawn_blocking(move || SnapshotReport {
            mechanism: snapshot::mechanism(&b).map(|m| m.name().to_string()),
            snapshots: snapshot::list(&b).unwrap_or_default(),
        })
        .await
        .map_err(|e| FsError::new(libc::EIO, e.to_string()))?;
        let json = serde_json::to_vec(&report)
            .map_err(|e| FsError::new(libc::EIO, format!("cannot encode: {e}")))?;
        Ok(Reply::Xattr(json.into()))
    }

    /// Answers the daemon's requests of this layer; None for any other.
    async fn control(&self, cx: &Ctx, fop: &Fop) -> Option<FsResult<Reply>> {
        let (gfid, name, set) = match fop {
            Fop::Setxattr { gfid, name, .. } => (gfid, name, Some(true)),
            Fop::Removexattr { gfid, name } => (gfid, name, Some(false)),
            Fop::Getxattr { gfid, name } => (gfid, name, None),
            _ => return None,
        };
        let snap = name.strip_prefix(SNAPSHOT_XATTR_PREFIX);
        let ours = [BARRIER_XATTR, SNAPSHOTS_XATTR, FLUSH_XATTR].contains(&name.as_str())
            || snap.is_some();
        if *gfid != Gfid::ROOT || !ours {
            return None;
        }
        if !cx.internal {
            return Some(Err(not_ours()));
        }
        Some(match (name.as_str(), snap, set) {
            (BARRIER_XATTR, _, Some(true)) => self.raise().await.map(|()| Reply::Ok),
            (BARRIER_XATTR, _, Some(false)) => {
                self.lower();
                Ok(Reply::Ok)
            }
            (SNAPSHOTS_XATTR, _, None) => self.report().await,
            (FLUSH_XATTR, _, Some(true)) => self.flush().await.map(|()| Reply::Ok),
            (_, Some(s), Some(true)) => self.take(s.to_string()).await.map(|()| Reply::Ok),
            (_, Some(s), Some(false)) => self.remove(s.to_string()).await.map(|()| Reply::Ok),
            _ => Err(FsError::new(libc::EINVAL, format!("{name}: not this way"))),
        })
    }
}

/// Whether `fop` changes the brick directory (what the barrier holds).
fn changes(fop: &Fop) -> bool {
    fop.is_modifying()
        || matches!(
            fop,
            Fop::Open { flags, .. } if flags & libc::O_TRUNC != 0
        )
}

#[async_trait]
impl BrickXlator for Barrier {
    async fn call(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        if let Some(answer) = self.control(cx, &fop).await {
            return answer;
        }
        if !changes(&fop) {
            return self.below.call(conn, cx, fop).await;
        }
        let _in_flight = self.enter().await;
        self.below.call(conn, cx, fop).await
    }

    fn reconfigure(&self, options: &mortar_core::Options) {
        self.timeout_secs
            .store(BARRIER_TIMEOUT.int(options) as u64, Ordering::Relaxed);
    }

    fn dump(&self) -> Vec<String> {
        let last = match *self.last.lock().unwrap() {
            None => "never raised".to_string(),
            Some((at, None)) => format!("up for {:?}", at.elapsed()),
            Some((at, Some(held))) => format!("last up {:?} ago, for {held:?}", at.elapsed()),
        };
        vec![
            format!("raised={}", self.raised.load(Ordering::SeqCst)),
            format!(
                "changes_in_flight={}",
                self.in_flight.load(Ordering::SeqCst)
            ),
            last,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_storage::posix::Posix;

    /// Answers every call once `open` lets it (at once while it is open).
    struct Gate {
        open: tokio::sync::watch::Sender<bool>,
        calls: AtomicU64,
    }

    #[async_trait]
    impl BrickXlator for Gate {
        async fn call(&self, _: &Arc<Conn>, _: &Ctx, _: Fop) -> FsResult<Reply> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let mut rx = self.open.subscribe();
            let _ = rx.wait_for(|open| *open).await;
            Ok(Reply::Ok)
        }
    }

    struct Setup {
        _dir: tempfile::TempDir,
        gate: Arc<Gate>,
        x: Arc<dyn BrickXlator>,
    }

    fn setup(timeout: &str) -> Setup {
        let d = tempfile::tempdir().unwrap();
        let env = BrickEnv {
            posix: Arc::new(Posix::open(d.path()).unwrap()),
            arbiter: false,
        };
        let gate = Arc::new(Gate {
            open: tokio::sync::watch::channel(true).0,
            calls: AtomicU64::new(0),
        });
        let x = build(&env, Some(gate.clone())).unwrap().unwrap();
        let mut o = mortar_core::Options::default();
        o.insert(BARRIER_TIMEOUT.key.into(), timeout.into());
        x.reconfigure(&o);
        Setup { _dir: d, gate, x }
    }

    fn conn() -> Arc<Conn> {
        Conn::quiet(1)
    }

    fn user() -> Ctx {
        Ctx {
            uid: 0,
            internal: false,
            ..Ctx::default()
        }
    }

    fn raise() -> Fop {
        Fop::Setxattr {
            gfid: Gfid::ROOT,
            name: BARRIER_XATTR.into(),
            value: Default::default(),
            flags: 0,
        }
    }

    fn lower() -> Fop {
        Fop::Removexattr {
            gfid: Gfid::ROOT,
            name: BARRIER_XATTR.into(),
        }
    }

    fn write() -> Fop {
        Fop::Write {
            gfid: Gfid::random(),
            fh: 1,
            offset: 0,
            data: bytes::Bytes::from_static(b"x"),
            grow: 0,
            reserve: false,
        }
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn changes_wait_behind_the_barrier_and_reads_do_not() {
        let s = setup("120");
        let c = conn();
        s.x.call(&c, &Ctx::root(), raise()).await.unwrap();
        let x = s.x.clone();
        let c2 = c.clone();
        let held = tokio::spawn(async move { x.call(&c2, &user(), write()).await });
        settle().await;
        assert_eq!(s.gate.calls.load(Ordering::SeqCst), 0, "the write is held");
        let read = Fop::Getattr { gfid: Gfid::ROOT };
        s.x.call(&c, &user(), read).await.unwrap();
        assert_eq!(s.gate.calls.load(Ordering::SeqCst), 1, "a read passes");
        s.x.call(&c, &Ctx::root(), lower()).await.unwrap();
        held.await.unwrap().unwrap();
        assert_eq!(s.gate.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_barrier_rises_once_changes_in_flight_end() {
        let s = setup("120");
        let c = conn();
        s.gate.open.send_replace(false);
        let (x, c2) = (s.x.clone(), c.clone());
        let flying = tokio::spawn(async move { x.call(&c2, &user(), write()).await });
        settle().await;
        let (x, c2) = (s.x.clone(), c.clone());
        let rising = tokio::spawn(async move { x.call(&c2, &Ctx::root(), raise()).await });
        settle().await;
        assert!(!rising.is_finished(), "a change is in flight");
        s.gate.open.send_replace(true);
        flying.await.unwrap().unwrap();
        rising.await.unwrap().unwrap();
        assert!(
            s.x.call(&c, &Ctx::root(), raise()).await.is_err(),
            "up already"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_that_does_not_end_fails_the_rise_and_a_barrier_left_up_falls() {
        let s = setup("5");
        let c = conn();
        s.gate.open.send_replace(false);
        let (x, c2) = (s.x.clone(), c.clone());
        let stuck = tokio::spawn(async move { x.call(&c2, &user(), write()).await });
        settle().await;
        let e = s.x.call(&c, &Ctx::root(), raise()).await.unwrap_err();
        assert!(e.is(libc::EBUSY), "{e}");
        s.gate.open.send_replace(true);
        stuck.await.unwrap().unwrap();
        // Up, and never lowered: it falls after the timeout.
        s.x.call(&c, &Ctx::root(), raise()).await.unwrap();
        let (x, c2) = (s.x.clone(), c.clone());
        let held = tokio::spawn(async move { x.call(&c2, &user(), write()).await });
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(!held.is_finished());
        tokio::time::sleep(Duration::from_secs(2)).await;
        held.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn only_the_pool_drives_it() {
        let s = setup("120");
        let c = conn();
        for fop in [
            raise(),
            lower(),
            Fop::Getxattr {
                gfid: Gfid::ROOT,
                name: SNAPSHOTS_XATTR.into(),
            },
        ] {
            let e = s.x.call(&c, &user(), fop).await.unwrap_err();
            assert!(e.is(libc::EPERM), "{e}");
        }
        let take = Fop::Setxattr {
            gfid: Gfid::ROOT,
            name: format!("{SNAPSHOT_XATTR_PREFIX}s1"),
            value: Default::default(),
            flags: 0,
        };
        let e = s.x.call(&c, &Ctx::root(), take).await.unwrap_err();
        assert!(e.is(libc::EINVAL), "not behind a barrier: {e}");
        assert_eq!(s.gate.calls.load(Ordering::SeqCst), 0);
    }
}
