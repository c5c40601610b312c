//! `features/locks`: object locks that order the changes of different
//! clients (`table::LockTable`). A lock is granted at once, or
//! refused with EAGAIN (`wait: false`), or granted once its holder lets
//! go; whoever holds a lock someone waits for is told so (a contention
//! notice) and lets go when its changes in flight are done. A holder that
//! keeps it past `features.locks-revocation-secs` (a frozen or stuck
//! client) loses its connection: its locks go to the waiters, its
//! unfinished change stays in the heal index, and it reconnects when it
//! runs again. Locks die with their connection.

use crate::{BrickEnv, BrickXlator, Conn, ConnId, ConnTable, Notice};
use mortar_core::{Ctx, Fop, FsError, FsResult, Gfid, Reply};
mod table;
use async_trait::async_trait;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
pub use table::REVOCATION_SECS;
use table::{Acquire, LockTable};

pub struct Locks {
    locks: LockTable,
    conns: ConnTable,
    /// How long a lock may be kept from a waiter, in seconds
    /// (`features.locks-revocation-secs`; 0: forever).
    revoke_after: AtomicU64,
    below: Arc<dyn BrickXlator>,
}

pub fn build(
    _env: &BrickEnv,
    below: Option<Arc<dyn BrickXlator>>,
) -> anyhow::Result<Option<Arc<dyn BrickXlator>>> {
    let below = below.ok_or_else(|| anyhow::anyhow!("locks need a translator below"))?;
    Ok(Some(Arc::new(Locks {
        locks: LockTable::default(),
        conns: ConnTable::default(),
        revoke_after: AtomicU64::new(0),
        below,
    })))
}

impl Locks {
    fn conn(&self, id: ConnId) -> Option<Arc<Conn>> {
        self.conns.get(id)
    }

    /// Tells a lock's holder that someone waits for it.
    fn contention(&self, holder: ConnId, gfid: Gfid) {
        if let Some(c) = self.conn(holder) {
            (c.notice)(Notice::Contention(gfid));
        }
    }

    /// Waits for a lock `conn` asked for; a holder that keeps it past the
    /// revocation time loses its connection, and with it its locks.
    async fn wait_granted(
        &self,
        conn: ConnId,
        gfid: Gfid,
        mut granted: tokio::sync::oneshot::Receiver<()>,
    ) -> bool {
        loop {
            let limit = match self.revoke_after.load(Ordering::Relaxed) {
                0 => return (&mut granted).await.is_ok(),
                secs => Duration::from_secs(secs),
            };
            let holder = self.locks.owner(gfid);
            match tokio::time::timeout(limit, &mut granted).await {
                Ok(r) => return r.is_ok(),
                Err(_) => {
                    if let Some(h) = holder.filter(|h| self.locks.owner(gfid) == Some(*h)) {
                        self.revoke(h, gfid, conn, limit);
                    }
                }
            }
        }
    }

    fn revoke(&self, holder: ConnId, gfid: Gfid, waiter: ConnId, held: Duration) {
        let Some(h) = self.conn(holder) else { return };
        let by = self.conn(waiter).map(|w| w.peer.clone());
        tracing::warn!(
            client = %h.peer,
            %gfid,
            waiter = by.as_deref().unwrap_or("?"),
            "revoking the locks of a client that kept {gfid} from a waiter for {} s (features.locks-revocation-secs): closing its connection",
            held.as_secs()
        );
        (h.close)();
    }

    /// Passes a granted lock down (it opens the change session there); a
    /// lock whose marking failed (the object is gone) is not kept.
    async fn granted(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop, gfid: Gfid) -> FsResult<Reply> {
        let r = self.below.call(conn, cx, fop).await;
        if r.is_err() {
            self.locks.release(conn.id, gfid);
        }
        r
    }
}

#[async_trait]
impl BrickXlator for Locks {
    fn reconfigure(&self, options: &mortar_core::Options) {
        let secs = REVOCATION_SECS.int(options).max(0) as u64;
        self.revoke_after.store(secs, Ordering::Relaxed);
    }

    fn dump(&self) -> Vec<String> {
        self.locks.dump()
    }

    async fn call(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        match fop {
            Fop::Lock { gfid, wait, .. } => match self.locks.acquire(conn.id, gfid, wait) {
                Acquire::Granted => self.granted(conn, cx, fop, gfid).await,
                Acquire::Busy { owner } => {
                    self.contention(owner, gfid);
                    Err(FsError::errno(libc::EAGAIN))
                }
                Acquire::Wait { owner, granted } => {
                    self.contention(owner, gfid);
                    if !self.wait_granted(conn.id, gfid, granted).await {
                        return Err(FsError::notconn("the lock was not granted"));
                    }
                    if self.locks.contended(gfid) {
                        self.contention(conn.id, gfid);
                    }
                    self.granted(conn, cx, fop, gfid).await
                }
            },
            Fop::Unlock { ref gfids } => {
                // Sessions settle first, then the locks go.
                let gfids = gfids.clone();
                let r = self.below.call(conn, cx, fop).await;
                for g in gfids {
                    self.locks.release(conn.id, g);
                }
                r
            }
            other => self.below.call(conn, cx, other).await,
        }
    }

    fn connect(&self, conn: &Arc<Conn>) {
        self.conns.add(conn);
    }

    fn disconnect(&self, conn: &Conn) {
        self.conns.remove(conn.id);
        self.locks.release_all(conn.id);
    }
}
