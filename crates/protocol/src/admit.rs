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

use crate::refusal::Refusal;
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
/// fewer than the file descriptors the process may open. Where a cap is
/// full, the oldest connection still in its handshake makes room for the
/// new one: a flood of idle connections cannot lock out the CLI, local
/// mounts or clients reconnecting (a handshake takes milliseconds).
pub const CAPS: Caps = Caps {
    total: 4096,
    per_address: 1024,
};

/// A connection still in its handshake.
struct Pending {
    id: u64,
    ip: IpAddr,
    evict: Arc<tokio::sync::Notify>,
}

#[derive(Default)]
struct Open {
    total: usize,
    per_address: HashMap<IpAddr, usize>,
    /// Oldest first.
    pending: std::collections::VecDeque<Pending>,
    next_id: u64,
}

impl Open {
    /// Ends the handshake wait of the oldest pending connection `which`
    /// picks; whether there was one.
    fn evict_oldest(&mut self, which: impl Fn(&Pending) -> bool) -> bool {
        match self.pending.iter().position(which) {
            Some(i) => {
                let p = self.pending.remove(i).unwrap();
                p.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// The connections open, per address.
pub struct Admission {
    caps: Caps,
    open: Mutex<Open>,
}

/// One admitted connection; dropping it gives the place back.
pub struct Ticket {
    admission: Arc<Admission>,
    ip: IpAddr,
    id: u64,
    evict: Arc<tokio::sync::Notify>,
}

impl Admission {
    pub fn new(caps: Caps) -> Arc<Admission> {
        Arc::new(Admission {
            caps,
            open: Mutex::new(Open::default()),
        })
    }

    /// A place for a connection from `ip`, or why there is none. Where a
    /// cap is full, the oldest connection still in its handshake that
    /// counts against it gives its place up (it is closed) and the new one
    /// is admitted; only handshakes done fill a cap for good.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Ticket, Refusal> {
        let mut open = self.open.lock().unwrap();
        let mine = open.per_address.get(&ip).copied().unwrap_or(0);
        if mine >= self.caps.per_address && !open.evict_oldest(|p| p.ip == ip) {
            return Err(format!(
                "{mine} connections open from {ip}, the most allowed from one address"
            )
            .into());
        }
        if open.total >= self.caps.total && !open.evict_oldest(|_| true) {
            return Err(format!("{} connections open, the most allowed", open.total).into());
        }
        *open.per_address.entry(ip).or_insert(0) += 1;
        open.total += 1;
        open.next_id += 1;
        let (id, evict) = (open.next_id, Arc::new(tokio::sync::Notify::new()));
        open.pending.push_back(Pending {
            id,
            ip,
            evict: evict.clone(),
        });
        Ok(Ticket {
            admission: self.clone(),
            ip,
            id,
            evict,
        })
    }

    /// Connections open in all.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap().total
    }

    fn handshake_done(&self, id: u64) {
        self.open.lock().unwrap().pending.retain(|p| p.id != id);
    }
}

impl Ticket {
    /// Reads the connection's first message (`what` names it) within
    /// `HANDSHAKE_TIMEOUT`, unless newer connections need its place first
    /// (`Admission::admit`); once read, the connection holds its place.
    pub async fn handshake<T>(
        &self,
        what: &str,
        read: impl Future<Output = std::io::Result<T>>,
    ) -> std::io::Result<T> {
        let r = tokio::select! {
            r = first_message(what, read) => r,
            _ = self.evict.notified() => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no {what} yet, and a newer connection needed the place"),
            )),
        };
        if r.is_ok() {
            self.admission.handshake_done(self.id);
        }
        r
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.admission.open.lock().unwrap();
        open.total -= 1;
        if let Some(n) = open.per_address.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.per_address.remove(&self.ip);
            }
        }
        let id = self.id;
        open.pending.retain(|p| p.id != id);
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
/// its own (`serve`, which reads the handshake through the ticket and
/// holds it until it ends). `what` names the server in log lines.
pub async fn accept_loop<F, Fut>(listener: TcpListener, what: &str, caps: Caps, serve: F)
where
    F: Fn(TcpStream, SocketAddr, Ticket) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let admission = Admission::new(caps);
    let (mut refused, mut failed) = (Throttle::new(), Throttle::new());
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => match admission.admit(peer.ip()) {
                Ok(ticket) => {
                    tokio::spawn(serve(stream, peer, ticket));
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

    async fn done(t: &Ticket) {
        t.handshake("hello", async { Ok(()) }).await.unwrap();
    }

    fn evicted(t: &Ticket) -> bool {
        use futures_util::FutureExt;
        t.evict.notified().now_or_never().is_some()
    }

    #[tokio::test]
    async fn connections_are_capped_in_all_and_per_address() {
        let a = Admission::new(Caps {
            total: 3,
            per_address: 2,
        });
        let (x, y): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t1 = a.admit(x).unwrap();
        let t2 = a.admit(x).unwrap();
        done(&t1).await;
        done(&t2).await;
        assert!(a.admit(x).err().unwrap().0.contains("from 10.0.0.1"));
        let t3 = a.admit(y).unwrap();
        done(&t3).await;
        assert!(a.admit(y).err().unwrap().0.contains("3 connections open"));
        drop(t1);
        assert_eq!(a.open(), 2);
        let _t4 = a.admit(x).unwrap();
        assert_eq!(a.open(), 3);
    }

    /// The faults issue: 1,024 connections pending their handshake from
    /// 127.0.0.1 refused every new one from there (the CLI, local mounts)
    /// for up to 10 s at a time.
    #[tokio::test]
    async fn connections_in_their_handshake_give_their_place_to_newer_ones() {
        let a = Admission::new(Caps {
            total: 100,
            per_address: 5,
        });
        let x: IpAddr = "127.0.0.1".parse().unwrap();
        let served = a.admit(x).unwrap();
        done(&served).await;
        // Four places left: a flood of twenty takes them in turn, the
        // oldest pending one closed for each newcomer; the one served is
        // never touched.
        let flood: Vec<Ticket> = (0..20).map(|_| a.admit(x).unwrap()).collect();
        assert!(flood[..16].iter().all(evicted));
        assert!(!flood[16..].iter().any(evicted));
        assert!(!evicted(&served));
        // An evicted connection's handshake ends at once.
        let t = a.admit(x).unwrap();
        let _more: Vec<Ticket> = (0..4).map(|_| a.admit(x).unwrap()).collect();
        let e = t
            .handshake("hello", std::future::pending::<std::io::Result<()>>())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("newer connection"), "{e}");
        // Full in all: the oldest pending connection makes room.
        let a = Admission::new(Caps {
            total: 2,
            per_address: 2,
        });
        let old = a.admit("10.0.0.1".parse().unwrap()).unwrap();
        let _newer = a.admit("10.0.0.2".parse().unwrap()).unwrap();
        assert!(a.admit("10.0.0.3".parse().unwrap()).is_ok());
        assert!(evicted(&old));
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
