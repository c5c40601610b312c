//! The TCP side: connections accepted, records read, calls answered
//! concurrently (many in flight per connection, replies sent as each is
//! ready, matched by their xid), with bounded memory.

use crate::rpc::{self, Budget, NotCall};
use crate::service::Service;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};

/// The largest record taken: a WRITE of `MAX_IO` and its header.
const MAX_RECORD: usize = crate::MAX_IO + 4096;
/// Calls of one connection answered at once.
const IN_FLIGHT: usize = 64;
/// The memory all connections' records may hold at once (KiB).
const BUDGET_KIB: usize = 256 << 10;

/// Serves `service` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, service: Arc<Service>) {
    let budget: Budget = Arc::new(Semaphore::new(BUDGET_KIB));
    {
        let s = Arc::downgrade(&service);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                match s.upgrade() {
                    Some(s) => s.close_idle(),
                    None => return,
                }
            }
        });
    }
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors: wait for some to close.
                tracing::warn!("nfs: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(
            stream,
            peer.ip().to_canonical(),
            service.clone(),
            budget.clone(),
        ));
    }
}

async fn connection(
    stream: TcpStream,
    peer: std::net::IpAddr,
    service: Arc<Service>,
    budget: Budget,
) {
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Vec<Bytes>>(IN_FLIGHT);
    let writer = tokio::spawn(async move {
        while let Some(pieces) = rx.recv().await {
            let len: usize = pieces.iter().map(Bytes::len).sum();
            let mut head = Vec::with_capacity(4 + len.min(16 << 10));
            head.extend_from_slice(&rpc::record_mark(len));
            let mut rest = pieces.into_iter().peekable();
            // Small pieces go out with the mark in one write.
            while let Some(p) = rest.next_if(|p| head.len() + p.len() <= 16 << 10) {
                head.extend_from_slice(&p);
            }
            if wr.write_all(&head).await.is_err() {
                return;
            }
            for p in rest {
                if wr.write_all(&p).await.is_err() {
                    return;
                }
            }
        }
    });
    let calls = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        let permit = match calls.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => break,
        };
        let (record, held) = match rpc::read_record(&mut rd, MAX_RECORD, &budget).await {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(%peer, "nfs: connection ended: {e}");
                break;
            }
        };
        let call = match rpc::parse_call(record) {
            Ok(c) => c,
            Err(NotCall::Ignore) => continue,
            Err(NotCall::Answer(reply)) => {
                if tx.send(vec![reply]).await.is_err() {
                    break;
                }
                continue;
            }
        };
        let (service, tx) = (service.clone(), tx.clone());
        tokio::spawn(async move {
            let reply = service.answer(call, peer).await;
            drop(held);
            let _ = tx.send(reply).await;
            drop(permit);
        });
    }
    drop(tx);
    let _ = writer.await;
}
