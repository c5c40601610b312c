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
//! - `PREPARE_XATTR` set to NAME, before the barrier rises: the brick's
//!   file system writes out what it holds in memory, and a brick copied
//!   by reflink makes snapshot NAME's copy ahead, noting what changes
//!   meanwhile (`ahead.rs`), so that behind the barrier only that is
//!   copied again. A copy made ahead and not taken goes after
//!   `features.barrier-timeout`.
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
use mortar_storage::posix::Posix;
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
pub const PREPARE_XATTR: &str = "trusted.mortar.brick.snapshot-prepare";

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
    posix: Arc<Posix>,
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
    /// A snapshot's copy made ahead, and what changes touch meanwhile.
    ahead: ahead::Ahead,
}

pub fn build(
    env: &BrickEnv,
    below: Option<Arc<dyn BrickXlator>>,
) -> anyhow::Result<Option<Arc<dyn BrickXlator>>> {
    let below = below.ok_or_else(|| anyhow::anyhow!("features/barrier needs a layer below"))?;
    let posix = env.posix.clone();
    Ok(Some(Arc::new_cyclic(|me| {
        Barrier::new(me.clone(), below, posix)
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
    fn new(me: Weak<Barrier>, below: Arc<dyn BrickXlator>, posix: Arc<Posix>) -> Barrier {
        Barrier {
            me,
            below,
            brick: posix.path().to_path_buf(),
            posix,
            in_flight: AtomicU64::new(0),
            raised: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            fallen: Notify::new(),
            drained: Notify::new(),
            timeout_secs: AtomicU64::new(120),
            last: Mutex::new(None),
            ahead: Default::default(),
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
        let taken = match self.ahead.take(&name, self.posix.clone()) {
            // Made ahead: brought up to date.
            Some(finish) => tokio::task::spawn_blocking(finish),
            None => {
                let (n, b) = (name.clone(), brick.clone());
                tokio::task::spawn_blocking(move || snapshot::take(&b, &n))
            }
        }
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

    /// Flushes the brick's file system and, on a brick copied by reflink,
    /// makes snapshot `name`'s copy ahead; one not taken within
    /// `features.barrier-timeout` is removed.
    async fn prepare(&self, name: String) -> FsResult<()> {
        if !snapshot::valid_name(&name) {
            return Err(FsError::inval(format!("{name:?} is not a snapshot name")));
        }
        let me = self
            .me
            .upgrade()
            .ok_or_else(|| FsError::errno(libc::ESHUTDOWN))?;
        let started = Instant::now();
        let n = name.clone();
        let made = tokio::task::spawn_blocking(move || -> std::io::Result<Option<u64>> {
            snapshot::flush(&me.brick)?;
            match snapshot::mechanism(&me.brick) {
                Ok(snapshot::Mechanism::Reflink) => me.ahead.make(&me.posix, &n).map(Some),
                _ => Ok(None),
            }
        })
        .await
        .map_err(|e| FsError::new(libc::EIO, e.to_string()))?
        .map_err(io_error)?;
        let Some(id) = made else {
            return Ok(());
        };
        tracing::info!(brick = %self.brick.display(), snapshot = %name, "copy made ahead in {:?}", started.elapsed());
        let (me, timeout) = (self.me.clone(), self.timeout());
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            let Some(b) = me.upgrade() else {
                return;
            };
            let expired = tokio::task::spawn_blocking(move || {
                let name = b.ahead.expire(id);
                (b, name)
            });
            if let Ok((b, Some(name))) = expired.await {
                tracing::warn!(brick = %b.brick.display(), snapshot = %name, "copy made ahead not taken within {timeout:?}: removed");
            }
        });
        Ok(())
    }

    async fn remove(&self, name: String) -> FsResult<()> {
        // A copy made ahead and not taken is all there is to remove.
        if let Some(pre) = self.ahead.abandon(&name) {
            let _ = tokio::task::spawn_blocking(move || pre.abandon()).await;
            return Ok(());
        }
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
            Fop::Setxattr {
                gfid, name, value, ..
            } if name == PREPARE_XATTR && *gfid == Gfid::ROOT => {
                if !cx.internal {
                    return Some(Err(not_ours()));
                }
                let snap = String::from_utf8_lossy(value).into_owned();
                return Some(self.prepare(snap).await.map(|()| Reply::Ok));
            }
            Fop::Setxattr { gfid, name, .. } => (gfid, name, Some(true)),
            Fop::Removexattr { gfid, name } => (gfid, name, Some(false)),
            Fop::Getxattr { gfid, name } => (gfid, name, None),
            _ => return None,
        };
        let snap = name.strip_prefix(SNAPSHOT_XATTR_PREFIX);
        let ours = [BARRIER_XATTR, SNAPSHOTS_XATTR].contains(&name.as_str()) || snap.is_some();
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
        let touch = changes::Touch::of(&fop, self.ahead.noting());
        let answer = self.below.call(conn, cx, fop).await;
        // (Noted as it ends: one in flight when a copy ahead begins is.)
        self.ahead.note(touch, &answer);
        answer
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

mod ahead;
mod changes;
#[cfg(test)]
mod tests;
