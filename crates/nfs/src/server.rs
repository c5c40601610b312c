//! The TCP side: connections accepted, records read, calls answered
//! concurrently (many in flight per connection, replies sent as each is
//! ready, matched by their xid), with bounded memory.

use crate::portmap::Portmap;
use crate::rpc::{self, Budget, NotCall};
use crate::service::Service;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{Mutex, Semaphore};

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
    accept_forever(listener, "nfs", move |stream, peer| {
        let _ = stream.set_nodelay(true);
        connection(
            stream,
            peer.ip().to_canonical(),
            service.clone(),
            budget.clone(),
        )
    })
    .await
}

/// Accepts connections on `listener` until the task is dropped, each
/// served by the future `serve` makes for it on a task of its own.
async fn accept_forever<F>(
    listener: TcpListener,
    what: &'static str,
    mut serve: impl FnMut(TcpStream, std::net::SocketAddr) -> F,
) where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                tokio::spawn(serve(stream, peer));
            }
            Err(e) => {
                // Out of descriptors: wait for some to close.
                tracing::warn!("{what}: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(
    stream: TcpStream,
    peer: std::net::IpAddr,
    service: Arc<Service>,
    budget: Budget,
) {
    let (rd, wr) = stream.into_split();
    // Most records arrive whole in one read.
    let mut rd = tokio::io::BufReader::with_capacity(64 << 10, rd);
    // Each call's task writes its reply itself, as soon as it is ready.
    let wr = Arc::new(Mutex::new(wr));
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
                if send(&wr, vec![reply]).await.is_err() {
                    break;
                }
                continue;
            }
        };
        let (service, wr) = (service.clone(), wr.clone());
        tokio::spawn(async move {
            let reply = service.answer(call, peer).await;
            drop(held);
            let _ = send(&wr, reply).await;
            drop(permit);
        });
    }
}

/// Writes a reply of `pieces` as one record: small pieces with the
/// record mark in one write, large ones (a READ's data) as they are.
async fn send(wr: &Mutex<OwnedWriteHalf>, pieces: Vec<Bytes>) -> std::io::Result<()> {
    let len: usize = pieces.iter().map(Bytes::len).sum();
    let mut head = Vec::with_capacity(4 + len.min(16 << 10));
    head.extend_from_slice(&rpc::record_mark(len));
    let mut rest = pieces.into_iter().peekable();
    while let Some(p) = rest.next_if(|p| head.len() + p.len() <= 16 << 10) {
        head.extend_from_slice(&p);
    }
    let mut wr = wr.lock().await;
    wr.write_all(&head).await?;
    for p in rest {
        wr.write_all(&p).await?;
    }
    Ok(())
}

/// The largest portmapper call taken (its arguments are a few words and
/// three short strings).
const MAX_PORTMAP_CALL: usize = 1024;

/// Answers portmapper calls over `tcp` and `udp` until the task is
/// dropped.
pub async fn serve_portmap(tcp: TcpListener, udp: UdpSocket, pm: Arc<Portmap>) {
    tokio::join!(portmap_datagrams(udp, pm.clone()), portmap_streams(tcp, pm));
}

/// Portmapper calls over TCP: answered in turn on each connection.
async fn portmap_streams(tcp: TcpListener, pm: Arc<Portmap>) {
    let budget: Budget = Arc::new(Semaphore::new(1024));
    accept_forever(tcp, "portmapper", move |stream, peer| {
        portmap_stream(stream, peer, pm.clone(), budget.clone())
    })
    .await
}

/// One portmapper connection: its calls answered in turn.
async fn portmap_stream(
    mut stream: TcpStream,
    peer: std::net::SocketAddr,
    pm: Arc<Portmap>,
    budget: Budget,
) {
    let Ok(at) = stream.local_addr() else {
        return;
    };
    loop {
        let read = rpc::read_record(&mut stream, MAX_PORTMAP_CALL, &budget);
        let record = match read.await {
            Ok(Some((r, _held))) => r,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(%peer, "portmapper: connection ended: {e}");
                return;
            }
        };
        let reply = match rpc::parse_call(record) {
            Ok(call) => pm.answer(call, at.ip().to_canonical()),
            Err(NotCall::Ignore) => continue,
            Err(NotCall::Answer(reply)) => reply,
        };
        let mut out = rpc::record_mark(reply.len()).to_vec();
        out.extend_from_slice(&reply);
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// Portmapper calls over UDP: one call a datagram.
async fn portmap_datagrams(udp: UdpSocket, pm: Arc<Portmap>) {
    let mut buf = vec![0u8; MAX_PORTMAP_CALL];
    let bound = udp.local_addr().map(|a| a.ip());
    loop {
        let (n, peer) = match udp.recv_from(&mut buf).await {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!("portmapper: {e}");
                continue;
            }
        };
        let record = Bytes::copy_from_slice(&buf[..n]);
        let reply = match rpc::parse_call(record) {
            Ok(call) => {
                let at = match bound {
                    Ok(ip) if !ip.is_unspecified() => ip,
                    _ => local_address_towards(peer).unwrap_or(peer.ip()),
                };
                pm.answer(call, at.to_canonical())
            }
            Err(NotCall::Ignore) => continue,
            Err(NotCall::Answer(reply)) => reply,
        };
        let _ = udp.send_to(&reply, peer).await;
    }
}

/// This machine's address on the route to `peer` (a socket bound to every
/// address does not say which one a datagram came to).
fn local_address_towards(peer: std::net::SocketAddr) -> Option<std::net::IpAddr> {
    let any: std::net::SocketAddr = if peer.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = std::net::UdpSocket::bind(any).ok()?;
    s.connect(peer).ok()?;
    Some(s.local_addr().ok()?.ip())
}
