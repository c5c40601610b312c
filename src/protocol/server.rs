//! The brick server: accepts client connections, checks the handshake, and
//! serves each `Call`: quick ones at once on the connection's task, slow
//! ones (`is_slow`) on a blocking-pool thread, so that many requests from
//! one connection are in flight at once and are answered as they finish.
//! Each connection has its own handle table; closing the connection closes
//! every file it had open.
//!
//! A client that keeps a lock someone else waits for longer than
//! `features.locks-revocation-secs` (a frozen or stuck client) loses its
//! connection: its locks go to the waiters, its unfinished change stays in
//! the heal index, and the client reconnects when it runs again.

use super::wire::{self, Msg};
use crate::core::{Ctx, Fop, FsError, FsResult, Gfid, Reply};
use crate::storage::locks::{Acquire, ConnId, LockTable};
use crate::storage::posix::{FdTable, Posix};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};

/// The lock revocation time in force (`features.locks-revocation-secs`),
/// read whenever a waiter starts waiting, so that a changed option applies.
pub type RevokeAfter = Box<dyn Fn() -> Option<Duration> + Send + Sync>;

/// Operations that may take long (syncing, large transfers, listing or
/// freeing much) run on the blocking pool, so that they never hold up the
/// quick ones queued behind them on the same connection.
fn is_slow(fop: &Fop) -> bool {
    const BIG: usize = 64 << 10;
    match fop {
        Fop::Fsync { .. }
        | Fop::Fallocate { .. }
        | Fop::Opendir { .. }
        | Fop::Readdir { .. }
        | Fop::Unlink { .. }
        | Fop::Checksum { .. }
        | Fop::Pending { .. }
        | Fop::Resolve { .. } => true,
        Fop::Read { size, .. } => *size as usize > BIG,
        Fop::Write { data, .. } => data.len() > BIG,
        Fop::Setattr { set, .. } => set.size.is_some(),
        _ => false,
    }
}

/// What all connections to one brick share.
struct Brick {
    posix: Arc<Posix>,
    locks: LockTable,
    conns: Mutex<HashMap<ConnId, Conn>>,
    next_conn: AtomicU64,
    /// How long a lock may be kept from a waiter now (None: forever).
    revoke_after: RevokeAfter,
}

/// What the brick keeps of each connection.
struct Conn {
    /// Where to send unasked notices.
    tx: mpsc::Sender<wire::Frame>,
    peer: SocketAddr,
    /// Closes the connection (lock revocation).
    close: Arc<Notify>,
}

impl Brick {
    /// Tells a lock's owner that someone waits for it.
    fn contention(&self, owner: ConnId, gfid: Gfid) {
        if let Some(c) = self.conns.lock().unwrap().get(&owner) {
            let _ = c.tx.try_send(wire::encode(&Msg::Notice {
                kind: "contention".into(),
                gfid: Some(gfid),
            }));
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
            let limit = (self.revoke_after)();
            let Some(limit) = limit else {
                return (&mut granted).await.is_ok();
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
        let conns = self.conns.lock().unwrap();
        let Some(c) = conns.get(&holder) else { return };
        let by = conns.get(&waiter).map(|w| w.peer.to_string());
        tracing::warn!(
            client = %c.peer,
            %gfid,
            waiter = by.as_deref().unwrap_or("?"),
            "revoking the locks of a client that kept {gfid} from a waiter for {} s (features.locks-revocation-secs): closing its connection",
            held.as_secs()
        );
        c.close.notify_one();
    }

    /// Serves `Fop::Lock`: answers at once, or from a task once granted.
    fn lock(
        self: &Arc<Self>,
        conn: ConnId,
        fds: &Arc<FdTable>,
        tx: &mpsc::Sender<wire::Frame>,
        id: u64,
        cx: Ctx,
        fop: Fop,
    ) -> Option<FsResult<Reply>> {
        let Fop::Lock { gfid, wait, .. } = fop else {
            unreachable!()
        };
        match self.locks.acquire(conn, gfid, wait) {
            Acquire::Granted => {
                let r = self.posix.call(&cx, fds, &fop);
                if r.is_err() {
                    // Marking failed (the object is gone): the client does
                    // not count this lock as held, so it is not kept.
                    self.locks.release(conn, gfid);
                }
                Some(r)
            }
            Acquire::Busy { owner } => {
                self.contention(owner, gfid);
                Some(Err(FsError::errno(libc::EAGAIN)))
            }
            Acquire::Wait { owner, granted } => {
                self.contention(owner, gfid);
                let (me, fds, tx) = (self.clone(), fds.clone(), tx.clone());
                tokio::spawn(async move {
                    if !me.wait_granted(conn, gfid, granted).await {
                        return;
                    }
                    if me.locks.contended(gfid) {
                        me.contention(conn, gfid);
                    }
                    let result = me.posix.call(&cx, &fds, &fop);
                    if result.is_err() {
                        me.locks.release(conn, gfid);
                    }
                    let _ = tx.send(wire::encode(&Msg::Answer { id, result })).await;
                });
                None
            }
        }
    }
}

pub async fn serve(
    listener: TcpListener,
    posix: Arc<Posix>,
    revoke_after: RevokeAfter,
) -> std::io::Result<()> {
    let brick = Arc::new(Brick {
        posix,
        locks: LockTable::default(),
        conns: Mutex::new(HashMap::new()),
        next_conn: AtomicU64::new(1),
        revoke_after,
    });
    loop {
        let (stream, peer) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let brick = brick.clone();
        tokio::spawn(async move {
            match serve_conn(stream, peer, brick).await {
                Ok(()) => tracing::debug!(%peer, "client disconnected"),
                Err(e) => tracing::warn!(%peer, "connection ended: {e}"),
            }
        });
    }
}

async fn serve_conn(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Brick>,
) -> std::io::Result<()> {
    let posix = shared.posix.clone();
    let (rd, mut wr) = stream.into_split();
    // Buffered, so that one read system call takes in many requests.
    let mut rd = tokio::io::BufReader::with_capacity(256 << 10, rd);
    let brick = posix.path().display().to_string();
    match wire::read_frame(&mut rd).await? {
        Some(Msg::Hello {
            magic,
            version,
            brick: want,
        }) if magic == wire::MAGIC && version == wire::VERSION && want == brick => {
            wire::write_frame(
                &mut wr,
                &Msg::Welcome {
                    version: wire::VERSION,
                },
            )
            .await?;
        }
        Some(Msg::Hello {
            magic,
            version,
            brick: want,
        }) => {
            let reason = if magic != wire::MAGIC {
                "not a mortar client".to_string()
            } else if version != wire::VERSION {
                format!(
                    "protocol version {version} not supported (this brick speaks {})",
                    wire::VERSION
                )
            } else {
                format!("this brick exports {brick}, not {want}")
            };
            wire::write_frame(
                &mut wr,
                &Msg::Refused {
                    reason: reason.clone(),
                },
            )
            .await?;
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                reason,
            ));
        }
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "first message was not a handshake",
            ))
        }
    }

    let (tx, rx) = mpsc::channel::<wire::Frame>(4096);
    let writer = tokio::spawn(wire::pump(wr, rx));

    let fds = Arc::new(FdTable::default());
    let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    let close = Arc::new(Notify::new());
    shared.conns.lock().unwrap().insert(
        conn,
        Conn {
            tx: tx.clone(),
            peer,
            close: close.clone(),
        },
    );
    let result = loop {
        let read = tokio::select! {
            r = wire::read_frame(&mut rd) => r,
            _ = close.notified() => break Err(std::io::Error::other("locks revoked")),
        };
        let msg = match read {
            Ok(Some(m)) => m,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        match msg {
            Msg::Call {
                id,
                cx,
                fop: fop @ Fop::Lock { .. },
            } => {
                if let Some(result) = shared.lock(conn, &fds, &tx, id, cx, fop) {
                    let _ = tx.send(wire::encode(&Msg::Answer { id, result })).await;
                }
            }
            Msg::Call {
                id,
                cx,
                fop: fop @ Fop::Unlock { .. },
            } => {
                // Sessions settle first, then the locks go.
                let result = posix.call(&cx, &fds, &fop);
                if let Fop::Unlock { gfids } = &fop {
                    for g in gfids {
                        shared.locks.release(conn, *g);
                    }
                }
                let _ = tx.send(wire::encode(&Msg::Answer { id, result })).await;
            }
            Msg::Call { id, cx, fop } if !is_slow(&fop) => {
                // Quick operations run right here: no thread hand-off, which
                // is most of the cost of a small request.
                let result = posix.call(&cx, &fds, &fop);
                if let Err(e) = &result {
                    tracing::debug!(fop = fop.name(), "failed: {e}");
                }
                let _ = tx.send(wire::encode(&Msg::Answer { id, result })).await;
            }
            Msg::Call { id, cx, fop } => {
                let (posix, fds, tx) = (posix.clone(), fds.clone(), tx.clone());
                tokio::spawn(async move {
                    let name = fop.name();
                    let result = tokio::task::spawn_blocking(move || posix.call(&cx, &fds, &fop))
                        .await
                        .unwrap_or_else(|e| {
                            Err(FsError::new(libc::EIO, format!("brick task failed: {e}")))
                        });
                    if let Err(e) = &result {
                        tracing::debug!(fop = name, "failed: {e}");
                    }
                    let _ = tx.send(wire::encode(&Msg::Answer { id, result })).await;
                });
            }
            Msg::Ping { id } => {
                let _ = tx.send(wire::encode(&Msg::Pong { id })).await;
            }
            other => {
                break Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("unexpected message from client: {other:?}"),
                ))
            }
        }
    };
    shared.conns.lock().unwrap().remove(&conn);
    shared.locks.release_all(conn);
    posix.disconnect(&fds);
    drop(tx);
    let _ = writer.await;
    result
}
