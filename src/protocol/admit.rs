//! Who gets a connection, and for how long before it says who it is: the
//! accept loop every server runs (bricks and the management daemon).
//!
//! - Connections are capped in all and per client address; one over a cap
//!   is closed at once, with a log line.
//! - An accept error (`EMFILE`: out of file descriptors) slows the loop
//!   down for a moment instead of ending it, and so the process.
//! - A connection that has not finished its handshake within
//!   `HANDSHAKE_TIMEOUT` is closed by the server that reads it.
//!
//! Log lines about refused connections are throttled: a flood costs one
//! line per `LOG_EVERY`, with the count of what was not logged.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

/// How long a new connection may take to send its first message.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the accept loop rests after an accept error.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Reads a connection's first message (`what` names it in the error)
/// within `HANDSHAKE_TIMEOUT`; past it, a `TimedOut` error.
pub async fn first_message<T>(
    what: &str,
    read: impl Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, read)
        .await
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no {what} within {HANDSHAKE_TIMEOUT:?} of connecting"),
            )
        })?
}

/// Connection caps of one listening server.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    pub total: usize,
    pub per_address: usize,
}

/// A brick's or daemon's caps: far more than any honest pool needs (a
/// mount holds one connection per brick; a daemon a few per peer), far
/// fewer than the file descriptors the process may open.
pub const CAPS: Caps = Caps {
    total: 4096,
    per_address: 1024,
};

/// The connections open, per address.
pub struct Admission {
    caps: Caps,
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// One admitted connection; dropping it gives the place back.
pub struct Ticket {
    admission: Arc<Admission>,
    ip: IpAddr,
}

impl Admission {
    pub fn new(caps: Caps) -> Arc<Admission> {
        Arc::new(Admission {
            caps,
            open: Mutex::new((0, HashMap::new())),
        })
    }

    /// A place for a connection from `ip`, or why there is none.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Ticket, String> {
        let mut open = self.open.lock().unwrap();
        if open.0 >= self.caps.total {
            return Err(format!("{} connections open, the most allowed", open.0));
        }
        let mine = open.1.entry(ip).or_insert(0);
        if *mine >= self.caps.per_address {
            return Err(format!(
                "{mine} connections open from {ip}, the most allowed from one address"
            ));
        }
        *mine += 1;
        open.0 += 1;
        Ok(Ticket {
            admission: self.clone(),
            ip,
        })
    }

    /// Connections open in all.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap().0
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.admission.open.lock().unwrap();
        open.0 -= 1;
        if let Some(n) = open.1.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.ip);
            }
        }
    }
}

/// A log line at most every `LOG_EVERY`, saying how many were held back.
struct Throttle {
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    fn new() -> Throttle {
        Throttle {
            last: None,
            held: 0,
        }
    }

    /// Some(number held back since the last line) when a line is due.
    fn due(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.last.is_some_and(|l| now - l < LOG_EVERY) {
            self.held += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.held))
    }
}

/// Accepts connections for ever, serving each admitted one in a task of
/// its own (`serve`), the ticket held until it ends. `what` names the
/// server in log lines.
pub async fn accept_loop<F, Fut>(listener: TcpListener, what: &str, caps: Caps, serve: F)
where
    F: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let admission = Admission::new(caps);
    let (mut refused, mut failed) = (Throttle::new(), Throttle::new());
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => match admission.admit(peer.ip()) {
                Ok(ticket) => {
                    let task = serve(stream, peer);
                    tokio::spawn(async move {
                        task.await;
                        drop(ticket);
                    });
                }
                Err(why) => {
                    drop(stream);
                    if let Some(held) = refused.due() {
                        tracing::warn!(%peer, "{what}: connection refused: {why} ({held} more refused since the last such line)");
                    }
                }
            },
            Err(e) => {
                if let Some(held) = failed.due() {
                    tracing::warn!("{what}: accepting a connection failed: {e}; waiting {ACCEPT_BACKOFF:?} before the next ({held} more failures since the last such line)");
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_capped_in_all_and_per_address() {
        let a = Admission::new(Caps {
            total: 3,
            per_address: 2,
        });
        let (x, y): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t1 = a.admit(x).unwrap();
        let _t2 = a.admit(x).unwrap();
        assert!(a.admit(x).err().unwrap().contains("from 10.0.0.1"));
        let _t3 = a.admit(y).unwrap();
        assert!(a.admit(y).err().unwrap().contains("3 connections open"));
        drop(t1);
        assert_eq!(a.open(), 2);
        let _t4 = a.admit(x).unwrap();
        assert_eq!(a.open(), 3);
    }

    #[test]
    fn a_flood_of_refusals_is_one_line_per_period() {
        let mut t = Throttle::new();
        assert_eq!(t.due(), Some(0));
        assert_eq!(t.due(), None);
        assert_eq!(t.due(), None);
        t.last = Some(Instant::now() - LOG_EVERY);
        assert_eq!(t.due(), Some(2));
    }
}
