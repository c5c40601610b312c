//! `features/hold`: a rebalance moving a file holds it here, so that no
//! change reaches the copy it is leaving (docs/distribute.md, "Moving open
//! files"). The rebalancer sets `HOLD_XATTR` (never stored):
//!
//! - to a number of seconds (at most `MAX_LEASE`): the file is held for the
//!   connection that set it; every other one gets ESTALE for any change
//!   or open of the file (reads go on: nothing changes the data). A
//!   hold that is not renewed lapses, so a rebalancer that dies holding a
//!   file frees it after its lease;
//! - to `moved`, once the file's copy elsewhere is complete: every
//!   request about the file (but closing it) gets ESTALE for good, on
//!   every handle, so that a client still holding it open here finds it
//!   where it is now;
//!
//! and removes it to end the hold: a move given up, or done (the file
//! unlinked here; the moved mark then stays only while handles are open
//! on it, or lapses after `HOLD_LEASE` if never removed). Reading it answers
//! `held` or `moved` (ENODATA: not held). A client that gets ESTALE asks
//! where the file is, and waits while it is held (`cluster::distribute`).

use super::{BrickEnv, BrickXlator, Conn, ConnId};
use async_trait::async_trait;
use mortar_core::fop::{HOLD_LEASE, HOLD_XATTR};
use mortar_core::{Ctx, Fop, FsError, FsResult, Gfid, Reply};
use mortar_storage::posix::Posix;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest hold a rebalancer may ask for.
pub const MAX_LEASE: Duration = Duration::from_secs(300);
/// How long a new hold waits for the changes already let through to end.
const DRAIN: Duration = Duration::from_secs(30);
/// Holds and changes in flight are kept in this many maps (by gfid), so
/// that changes of different files rarely meet on one lock.
const SHARDS: usize = 64;
/// How often ended holds are looked for.
const SWEEP: Duration = Duration::from_secs(1);

struct Hold {
    holder: ConnId,
    until: Instant,
    moved: bool,
}

#[derive(Default)]
struct Shard {
    holds: HashMap<Gfid, Hold>,
    /// Changes let through and not answered yet, by file.
    inflight: HashMap<Gfid, u32>,
    /// When ended holds were last swept away.
    swept: Option<Instant>,
}

pub struct HoldXl {
    below: Arc<dyn BrickXlator>,
    posix: Arc<Posix>,
    shards: Vec<Mutex<Shard>>,
    /// Told when a file's last change in flight ends.
    drained: tokio::sync::Notify,
}

pub fn build(
    env: &BrickEnv,
    below: Option<Arc<dyn BrickXlator>>,
) -> anyhow::Result<Option<Arc<dyn BrickXlator>>> {
    let below = below.ok_or_else(|| anyhow::anyhow!("holds need a translator below"))?;
    Ok(Some(Arc::new(HoldXl {
        below,
        posix: env.posix.clone(),
        shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        drained: tokio::sync::Notify::new(),
    })))
}

fn held() -> FsError {
    FsError::new(
        libc::ESTALE,
        "the file is being moved to another replica set: ask where it is",
    )
}

/// A change let through, counted until it is answered.
struct InFlight<'a> {
    xl: &'a HoldXl,
    gfid: Gfid,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut shard = self.xl.shard(self.gfid);
        if let Some(n) = shard.inflight.get_mut(&self.gfid) {
            *n -= 1;
            if *n == 0 {
                shard.inflight.remove(&self.gfid);
                drop(shard);
                self.xl.drained.notify_waiters();
            }
        }
    }
}

impl HoldXl {
    fn shard(&self, gfid: Gfid) -> std::sync::MutexGuard<'_, Shard> {
        self.shards[gfid.0[15] as usize % SHARDS].lock().unwrap()
    }

    /// Whether hold `h` on `gfid` has ended: lapsed, or for a moved file,
    /// lapsed and no longer open here.
    fn ended(&self, gfid: Gfid, h: &Hold, now: Instant) -> bool {
        now > h.until && (!h.moved || self.posix.open_count(gfid) == 0)
    }

    /// Lets `fop` from connection `conn` through, counting it while it
    /// runs if it is a change (a new hold waits for those), or refuses
    /// it (held).
    fn admit(&self, conn: ConnId, fop: &Fop) -> FsResult<Option<InFlight<'_>>> {
        let gfid = fop.gfid();
        let mut shard = self.shard(gfid);
        if let Some(h) = shard.holds.get(&gfid) {
            if self.ended(gfid, h, Instant::now()) {
                shard.holds.remove(&gfid);
            } else if refuses(h, conn, fop) {
                return Err(held());
            }
        }
        if !fop.is_modifying() {
            return Ok(None);
        }
        *shard.inflight.entry(gfid).or_default() += 1;
        Ok(Some(InFlight { xl: self, gfid }))
    }

    /// Whether `gfid` is held here: Some(moved) if it is.
    fn holding(&self, gfid: Gfid) -> Option<bool> {
        let shard = self.shard(gfid);
        let h = shard.holds.get(&gfid)?;
        (!self.ended(gfid, h, Instant::now())).then_some(h.moved)
    }

    /// Sets or renews a hold of `gfid` for `conn`, or marks it moved;
    /// answers once the changes let through before it have ended.
    async fn hold(&self, conn: ConnId, gfid: Gfid, value: &[u8]) -> FsResult<()> {
        {
            let now = Instant::now();
            let mut shard = self.shard(gfid);
            if shard.swept.is_none_or(|t| now > t + SWEEP) {
                let holds = std::mem::take(&mut shard.holds);
                shard.holds = holds
                    .into_iter()
                    .filter(|(g, h)| !self.ended(*g, h, now))
                    .collect();
                shard.swept = Some(now);
            }
            if let Some(h) = shard.holds.get(&gfid) {
                if h.holder != conn || h.moved {
                    return Err(FsError::new(libc::EBUSY, "the file is held already"));
                }
            }
            let moved = value == b"moved";
            let lease = if moved {
                if !shard.holds.contains_key(&gfid) {
                    return Err(FsError::new(
                        libc::EPERM,
                        "only the holder of a file marks it moved",
                    ));
                }
                HOLD_LEASE
            } else {
                let secs: u64 = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .filter(|&s| s > 0)
                    .ok_or_else(|| FsError::inval("a hold is a number of seconds, or `moved`"))?;
                Duration::from_secs(secs).min(MAX_LEASE)
            };
            shard.holds.insert(
                gfid,
                Hold {
                    holder: conn,
                    until: now + lease,
                    moved,
                },
            );
        }
        // A change that passed before the hold may not have reached the
        // disk yet: the holder copies only once it has.
        let deadline = tokio::time::Instant::now() + DRAIN;
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if !self.shard(gfid).inflight.contains_key(&gfid) {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, drained).await.is_err() {
                self.unhold(conn, gfid);
                return Err(FsError::new(
                    libc::EBUSY,
                    "changes to the file did not end: not held",
                ));
            }
        }
    }

    /// Ends `conn`'s hold of `gfid`. A moved file stays marked while
    /// handles are open on it here (the rebalancer ends its hold once it
    /// unlinked the file: the mark must not outlive it, or the file could
    /// not come back here in a later move).
    fn unhold(&self, conn: ConnId, gfid: Gfid) {
        let mut shard = self.shard(gfid);
        let Some(h) = shard.holds.get_mut(&gfid).filter(|h| h.holder == conn) else {
            return;
        };
        if h.moved && self.posix.open_count(gfid) > 0 {
            h.until = Instant::now();
        } else {
            shard.holds.remove(&gfid);
        }
    }
}

/// Whether hold `h` refuses `fop` from connection `conn`. Closing goes
/// on; so do locks: the change a lock is for is refused itself (and a
/// lock refused would look like a replica out of reach to replicate, not
/// like a file being moved).
fn refuses(h: &Hold, conn: ConnId, fop: &Fop) -> bool {
    if matches!(
        fop,
        Fop::Release { .. } | Fop::Releasedir { .. } | Fop::Flush { .. } | Fop::Lock { .. }
    ) {
        return false;
    }
    h.moved || (h.holder != conn && (fop.is_modifying() || matches!(fop, Fop::Open { .. })))
}

#[async_trait]
impl BrickXlator for HoldXl {
    async fn call(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        match fop {
            Fop::Setxattr {
                gfid,
                ref name,
                ref value,
                ..
            } if name == HOLD_XATTR => {
                if cx.uid != 0 {
                    return Err(FsError::errno(libc::EPERM));
                }
                // The file is here (or ESTALE).
                self.below.call(conn, cx, Fop::Getattr { gfid }).await?;
                self.hold(conn.id, gfid, value).await?;
                Ok(Reply::Ok)
            }
            Fop::Removexattr { gfid, ref name } if name == HOLD_XATTR => {
                if cx.uid != 0 {
                    return Err(FsError::errno(libc::EPERM));
                }
                self.unhold(conn.id, gfid);
                Ok(Reply::Ok)
            }
            // Whether the file is held (how a client that got ESTALE
            // tells a file being moved from one gone).
            Fop::Getxattr { gfid, ref name } if name == HOLD_XATTR => match self.holding(gfid) {
                Some(moved) => Ok(Reply::Xattr(serde_bytes::ByteBuf::from(
                    if moved { &b"moved"[..] } else { &b"held"[..] }.to_vec(),
                ))),
                None => Err(FsError::errno(libc::ENODATA)),
            },
            fop => {
                let _counted = self.admit(conn.id, &fop)?;
                self.below.call(conn, cx, fop).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers everything: what is refused is refused above it.
    struct Anything;

    #[async_trait]
    impl BrickXlator for Anything {
        async fn call(&self, _: &Arc<Conn>, _: &Ctx, _: Fop) -> FsResult<Reply> {
            Ok(Reply::Ok)
        }
    }

    /// Holds over `below`, on a brick in a temporary directory.
    fn over(below: Arc<dyn BrickXlator>) -> (tempfile::TempDir, Arc<dyn BrickXlator>) {
        let d = tempfile::tempdir().unwrap();
        let env = BrickEnv {
            posix: Arc::new(Posix::open(d.path()).unwrap()),
            arbiter: false,
        };
        let x = build(&env, Some(below)).unwrap().unwrap();
        (d, x)
    }

    fn conn(id: ConnId) -> Arc<Conn> {
        Conn::quiet(id)
    }

    fn set(gfid: Gfid, value: &str) -> Fop {
        Fop::Setxattr {
            gfid,
            name: HOLD_XATTR.into(),
            value: serde_bytes::ByteBuf::from(value.as_bytes().to_vec()),
            flags: 0,
        }
    }

    fn write(gfid: Gfid) -> Fop {
        Fop::Write {
            gfid,
            fh: 1,
            offset: 0,
            data: bytes::Bytes::from_static(b"x"),
            grow: 0,
            reserve: false,
        }
    }

    fn is_estale(r: FsResult<Reply>) -> bool {
        matches!(r, Err(e) if e.is(libc::ESTALE))
    }

    #[tokio::test]
    async fn a_held_file_refuses_others_changes_until_it_is_released_or_the_lease_lapses() {
        let (_d, x) = over(Arc::new(Anything));
        let (rebal, client) = (conn(1), conn(2));
        let root = Ctx::root();
        let g = Gfid::random();
        let asked = |g| Fop::Getxattr {
            gfid: g,
            name: HOLD_XATTR.into(),
        };

        x.call(&rebal, &root, set(g, "60")).await.unwrap();
        assert!(is_estale(x.call(&client, &root, write(g)).await));
        assert!(is_estale(
            x.call(&client, &root, Fop::Open { gfid: g, flags: 0 })
                .await
        ));
        let lock = Fop::Lock {
            gfid: g,
            wait: false,
            mark: Some(0),
        };
        x.call(&client, &root, lock).await.unwrap();
        x.call(&client, &root, Fop::Getattr { gfid: g })
            .await
            .unwrap();
        x.call(&rebal, &root, write(g)).await.unwrap();
        let Reply::Xattr(v) = x.call(&client, &root, asked(g)).await.unwrap() else {
            panic!("not an xattr")
        };
        assert_eq!(&v[..], b"held");
        assert!(
            x.call(&client, &root, set(g, "60")).await.is_err(),
            "held already"
        );
        let bad = x.call(&rebal, &root, set(Gfid::random(), "soon")).await;
        assert!(matches!(bad, Err(e) if e.is(libc::EINVAL)));
        let user = Ctx {
            uid: 1000,
            ..Ctx::root()
        };
        assert!(x
            .call(&client, &user, set(Gfid::random(), "60"))
            .await
            .is_err());

        // Moved: nothing but closing, for anyone.
        x.call(&rebal, &root, set(g, "moved")).await.unwrap();
        assert!(is_estale(x.call(&rebal, &root, write(g)).await));
        assert!(is_estale(
            x.call(&client, &root, Fop::Getattr { gfid: g }).await
        ));
        x.call(&client, &root, Fop::Release { gfid: g, fh: 1 })
            .await
            .unwrap();
        let removed = Fop::Removexattr {
            gfid: g,
            name: HOLD_XATTR.into(),
        };
        assert!(is_estale(x.call(&client, &root, write(g)).await));
        // Unlinked, and the hold ended: nothing is open here, the mark goes
        // (the file may come back in a later move).
        x.call(&rebal, &root, removed).await.unwrap();
        x.call(&client, &root, write(g)).await.unwrap();

        // A hold given up, and one that lapses.
        let h = Gfid::random();
        x.call(&rebal, &root, set(h, "60")).await.unwrap();
        let removed = Fop::Removexattr {
            gfid: h,
            name: HOLD_XATTR.into(),
        };
        x.call(&rebal, &root, removed).await.unwrap();
        x.call(&client, &root, write(h)).await.unwrap();
        assert!(x.call(&client, &root, asked(h)).await.is_err(), "not held");
        x.call(&rebal, &root, set(h, "1")).await.unwrap();
        assert!(is_estale(x.call(&client, &root, write(h)).await));
        tokio::time::sleep(Duration::from_millis(1100)).await;
        x.call(&client, &root, write(h)).await.unwrap();
    }

    /// Takes its time over writes.
    struct Slow(Arc<std::sync::atomic::AtomicBool>);

    #[async_trait]
    impl BrickXlator for Slow {
        async fn call(&self, _: &Arc<Conn>, _: &Ctx, fop: Fop) -> FsResult<Reply> {
            if let Fop::Write { .. } = fop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            Ok(Reply::Ok)
        }
    }

    #[tokio::test]
    async fn a_hold_is_granted_once_the_changes_let_through_before_it_ended() {
        let written = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (_d, x) = over(Arc::new(Slow(written.clone())));
        let g = Gfid::random();
        let writing = {
            let x = x.clone();
            tokio::spawn(async move { x.call(&conn(2), &Ctx::root(), write(g)).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        x.call(&conn(1), &Ctx::root(), set(g, "60")).await.unwrap();
        assert!(
            written.load(std::sync::atomic::Ordering::SeqCst),
            "held before the write in flight reached the disk"
        );
        writing.await.unwrap().unwrap();
        assert!(is_estale(x.call(&conn(2), &Ctx::root(), write(g)).await));
    }
}
