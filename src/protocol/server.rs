//! The brick server: accepts client connections, checks the handshake, and
//! serves each `Call` on a blocking-pool thread, so that many requests from
//! one connection are in flight at once and are answered as they finish.
//! Each connection has its own handle table; closing the connection closes
//! every file it had open.

use super::wire::{self, Msg};
use crate::core::FsError;
use crate::storage::posix::{FdTable, Posix};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

pub async fn serve(listener: TcpListener, posix: Arc<Posix>) -> std::io::Result<()> {
    loop {
        let (stream, peer) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let posix = posix.clone();
        tokio::spawn(async move {
            match serve_conn(stream, posix).await {
                Ok(()) => tracing::debug!(%peer, "client disconnected"),
                Err(e) => tracing::warn!(%peer, "connection ended: {e}"),
            }
        });
    }
}

async fn serve_conn(stream: TcpStream, posix: Arc<Posix>) -> std::io::Result<()> {
    let (mut rd, mut wr) = stream.into_split();
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
    let result = loop {
        let msg = match wire::read_frame(&mut rd).await {
            Ok(Some(m)) => m,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        match msg {
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
    drop(tx);
    let _ = writer.await;
    result
}
