//! The wire: one JSON message per line, bounded in size and time, over
//! TLS; calls, channels kept open, and a pool of them by address.

use super::*;
use crate::error::Error;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// How long a daemon may take to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest request line a daemon reads (a Raft snapshot of the whole pool
/// is the largest honest one); the buffer grows only as bytes arrive.
pub const MAX_LINE: usize = 16 << 20;

/// How long the rest of a line may take once its first byte arrived.
pub const LINE_TIMEOUT: Duration = Duration::from_secs(60);

/// Reads one line (without its newline) of at most `limit` bytes; None at
/// a clean end of stream. Waiting for a line's first byte has no limit;
/// once it came, the rest must come within `rest_within`.
pub async fn read_line_within<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    limit: usize,
    rest_within: Duration,
) -> std::io::Result<Option<String>> {
    let invalid = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
    if r.fill_buf().await?.is_empty() {
        return Ok(None);
    }
    let rest = async {
        let mut line = Vec::new();
        loop {
            let buf = r.fill_buf().await?;
            if buf.is_empty() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the connection ended inside a line",
                ));
            }
            let (take, end) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            if line.len() + take > limit + 1 {
                return Err(invalid(format!("a line longer than {limit} bytes")));
            }
            line.extend_from_slice(&buf[..take]);
            r.consume(take);
            if end {
                line.pop();
                return String::from_utf8(line)
                    .map_err(|_| invalid("a line that is not UTF-8".into()));
            }
        }
    };
    match tokio::time::timeout(rest_within, rest).await {
        Ok(line) => line.map(Some),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("a line not finished within {rest_within:?}"),
        )),
    }
}

/// Writes `msg` as one JSON line and flushes it: TLS keeps what the
/// socket did not take at once (a large message) until the next write or
/// flush, and the other side would wait for the line's end.
pub async fn send_json<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    msg: &impl Serialize,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(msg)?;
    line.push(b'\n');
    w.write_all(&line).await?;
    w.flush().await
}

/// Which daemon a connection takes.
#[derive(Clone, Debug)]
enum Trust {
    /// A server of the pool on its record, if this process knows it
    /// (`tls::connect`).
    Record,
    /// Any server of the pool's CA (`tls::connect_any_of_ca`).
    Ca,
    /// The server of a join token's pin, not in the pool yet.
    Pin(Vec<u8>),
}

/// Opens a connection to a daemon: TCP, then TLS with this process's
/// credential, or pinned by a join token to a server that is not in the
/// pool yet.
async fn open(addr: &str, trust: Trust) -> Result<tls::Stream, Error> {
    let go = async {
        let tcp = TcpStream::connect(addr).await?;
        let _ = tcp.set_nodelay(true);
        match trust {
            Trust::Record => tls::connect(tcp).await,
            Trust::Ca => tls::connect_any_of_ca(tcp).await,
            Trust::Pin(pin) => tls::connect_pinned(tcp, pin).await,
        }
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, go).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(Error::unreachable(
            addr,
            format!("cannot reach the management daemon at {addr}: {e}"),
        )),
        Err(_) => Err(Error::unreachable(
            addr,
            format!(
                "cannot reach the management daemon at {addr}: no answer within {CONNECT_TIMEOUT:?}"
            ),
        )),
    }
}

/// Sends one request to a daemon and waits for its answer.
pub async fn call(addr: &str, req: &Request) -> Result<Response, Error> {
    call_via(addr, req, Trust::Record).await
}

/// `call` to any server of the pool's CA, on record or not: to tell a
/// server that it left the pool (which took it off the record).
pub async fn call_any_of_ca(addr: &str, req: &Request) -> Result<Response, Error> {
    call_via(addr, req, Trust::Ca).await
}

/// Sends one request to a server not in the pool yet, reached through
/// the pin of its join token.
pub async fn call_pinned(addr: &str, req: &Request, pin: Vec<u8>) -> Result<Response, Error> {
    call_via(addr, req, Trust::Pin(pin)).await
}

async fn call_via(addr: &str, req: &Request, trust: Trust) -> Result<Response, Error> {
    let go = async {
        let stream = open(addr, trust).await.map_err(|e| e.message)?;
        let (rd, mut wr) = tokio::io::split(stream);
        send_json(&mut wr, req)
            .await
            .map_err(|e| format!("cannot send to the management daemon at {addr}: {e}"))?;
        let mut rd = BufReader::new(rd);
        let answer = read_line_within(&mut rd, MAX_LINE, LINE_TIMEOUT)
            .await
            .map_err(|e| format!("no answer from the management daemon at {addr}: {e}"))?
            .ok_or_else(|| format!("the management daemon at {addr} closed the connection"))?;
        serde_json::from_str(&answer).map_err(|e| format!("bad answer from {addr}: {e}"))
    };
    match tokio::time::timeout(Duration::from_secs(120), go).await {
        Ok(answer) => answer.map_err(|e: String| Error::unreachable(addr, e)),
        Err(_) => Err(Error::unreachable(
            addr,
            format!("the management daemon at {addr} did not answer"),
        )),
    }
}

/// One connection to a daemon kept open for request after request (the
/// Raft messages and heartbeats between daemons, a few a second each),
/// opened again after an error.
pub struct Channel {
    addr: String,
    trust: Trust,
    conn: Option<(
        BufReader<tokio::io::ReadHalf<tls::Stream>>,
        tokio::io::WriteHalf<tls::Stream>,
    )>,
}

/// Why a request on a `Channel` got no answer.
#[derive(Debug)]
pub enum ChannelError {
    /// No connection: the daemon is down or cut off.
    Unreachable(String),
    /// Connected, but the exchange failed (the connection is dropped).
    Failed(String),
}

impl Channel {
    pub fn new(addr: &str) -> Channel {
        Channel {
            addr: addr.to_string(),
            trust: Trust::Record,
            conn: None,
        }
    }

    /// A channel to a daemon of the pool's CA, whether on record or not.
    pub(super) fn any_of_ca(addr: &str) -> Channel {
        Channel {
            trust: Trust::Ca,
            ..Channel::new(addr)
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `req` and waits up to `ttl` for the answer.
    pub async fn ask(&mut self, req: &Request, ttl: Duration) -> Result<Response, ChannelError> {
        let res = match tokio::time::timeout(ttl, self.exchange(req)).await {
            Ok(r) => r,
            Err(_) => Err(ChannelError::Failed(format!(
                "{} did not answer within {ttl:?}",
                self.addr
            ))),
        };
        if res.is_err() {
            self.conn = None;
        }
        res
    }

    /// Whether the connection is open and holds nothing unread: the
    /// daemon did not close it, nor send what was not asked for.
    fn is_quiet(&mut self) -> bool {
        self.conn.as_mut().is_some_and(|(rd, _)| quiet(rd))
    }

    async fn exchange(&mut self, req: &Request) -> Result<Response, ChannelError> {
        let (addr, trust) = (self.addr.clone(), self.trust.clone());
        let connect = async move {
            let s = open(&addr, trust)
                .await
                .map_err(|e| ChannelError::Unreachable(e.message))?;
            let (rd, wr) = tokio::io::split(s);
            Ok((BufReader::new(rd), wr))
        };
        exchange_on(&mut self.conn, connect, req, &self.addr).await
    }
}

/// Connections to daemons kept open from one request to the next for a
/// while (`POOL_IDLE`), so that a command that asks every host (a
/// `volume create`, then its `start`) does not pay a TLS handshake per
/// host each time: at 300 servers those handshakes were a fifth of a
/// `volume start`'s work. One request at a time per connection, as on a
/// `Channel`; a connection whose daemon closed it, or that holds bytes
/// nobody asked for, is not used again.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<HashMap<String, Vec<(Channel, Instant)>>>,
}

/// How a daemon's answer to a request it refused begins (the connection
/// is closed after it).
pub const REFUSED: &str = "refused: ";

/// How long a connection of a `Pool` is kept unused.
pub const POOL_IDLE: Duration = Duration::from_secs(30);
/// How many unused connections a `Pool` keeps to one daemon.
const POOL_PER_DAEMON: usize = 4;

impl Pool {
    /// Sends `req` to the daemon at `addr` and waits up to `ttl` for the
    /// answer, on a connection kept from before if one is fit.
    pub async fn ask(&self, addr: &str, req: &Request, ttl: Duration) -> Result<Response, Error> {
        let text = |e| match e {
            ChannelError::Unreachable(e) | ChannelError::Failed(e) => Error::unreachable(addr, e),
        };
        if let Some(mut ch) = self.take(addr) {
            match ch.ask(req, ttl).await.map_err(text)? {
                // Refused, and closed, as a connection opened with a
                // certificate since replaced is (`pool rotate-certs`):
                // asked again on a new one, with the credential in force.
                Response::Err(e) if e.message.starts_with(REFUSED) => {}
                answer => {
                    self.keep(ch);
                    return Ok(answer);
                }
            }
        }
        let mut ch = Channel::new(addr);
        let answer = ch.ask(req, ttl).await.map_err(text)?;
        self.keep(ch);
        Ok(answer)
    }

    fn take(&self, addr: &str) -> Option<Channel> {
        let mut idle = self.idle.lock().unwrap();
        let kept = idle.get_mut(addr)?;
        while let Some((mut ch, since)) = kept.pop() {
            if since.elapsed() < POOL_IDLE && ch.is_quiet() {
                return Some(ch);
            }
        }
        None
    }

    fn keep(&self, ch: Channel) {
        if ch.conn.is_none() {
            return;
        }
        let mut idle = self.idle.lock().unwrap();
        // Those unused too long are closed as others come back.
        idle.retain(|_, kept| {
            kept.retain(|(_, since)| since.elapsed() < POOL_IDLE);
            !kept.is_empty()
        });
        let kept = idle.entry(ch.addr.clone()).or_default();
        if kept.len() < POOL_PER_DAEMON {
            kept.push((ch, Instant::now()));
        }
    }
}

/// Whether nothing can be read from `rd` now, and it did not end.
fn quiet<R: tokio::io::AsyncBufRead + Unpin>(rd: &mut R) -> bool {
    use futures_util::FutureExt;
    // Pending: nothing to read, the connection still open.
    rd.fill_buf().now_or_never().is_none()
}

/// One request and its answer on the connection in `slot` (opened by
/// `connect` if there is none). The connection is taken out of the slot
/// for the exchange and put back only once the answer is read whole: an
/// exchange given up half way (a timeout here or in Raft, which drops
/// the future anywhere) closes it, so that no later request follows half
/// a line, and no later answer is an earlier request's.
async fn exchange_on<R, W>(
    slot: &mut Option<(R, W)>,
    connect: impl std::future::Future<Output = Result<(R, W), ChannelError>>,
    req: &Request,
    addr: &str,
) -> Result<Response, ChannelError>
where
    R: tokio::io::AsyncBufRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let failed = |e: String| ChannelError::Failed(e);
    let (mut rd, mut wr) = match slot.take() {
        Some(c) => c,
        None => connect.await?,
    };
    send_json(&mut wr, req)
        .await
        .map_err(|e| failed(format!("cannot send to {addr}: {e}")))?;
    let answer = read_line_within(&mut rd, MAX_LINE, LINE_TIMEOUT)
        .await
        .map_err(|e| failed(format!("no answer from {addr}: {e}")))?
        .ok_or_else(|| failed(format!("{addr} closed the connection")))?;
    let answer = serde_json::from_str(&answer)
        .map_err(|e| failed(format!("bad answer from {addr}: {e}")))?;
    *slot = Some((rd, wr));
    Ok(answer)
}

/// The management address for a host name: `host` with the default port
/// unless it already names one.
pub fn mgmt_addr(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') && host.matches(':').count() == 1 {
        host.to_string()
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod line_tests {
    use super::*;

    #[test]
    fn a_read_only_administrator_may_ask_and_not_change() {
        let name = || "v".to_string();
        let looks = [
            Request::PeerList,
            Request::VolumeInfo { name: None },
            Request::VolumeStatus { name: Some(name()) },
            Request::PoolCredentials {
                op: CredentialOp::List,
            },
            Request::Heal {
                name: name(),
                op: HealOp::InfoSummary,
            },
            Request::Fresh(Box::new(Request::VolumeInfo { name: None })),
        ];
        let changes = [
            Request::PeerToken,
            Request::VolumeStop { name: name() },
            Request::Heal {
                name: name(),
                op: HealOp::Full,
            },
            Request::PoolCredentials {
                op: CredentialOp::Revoke { name: name() },
            },
            Request::Fresh(Box::new(Request::VolumeDelete { name: name() })),
            Request::Leave,
        ];
        assert!(looks.iter().all(Request::is_read_only));
        assert!(!changes.iter().any(Request::is_read_only));
    }

    #[tokio::test]
    async fn lines_are_read_within_their_limit_and_time() {
        async fn line(r: &mut BufReader<&[u8]>) -> std::io::Result<Option<String>> {
            read_line_within(r, 8, LINE_TIMEOUT).await
        }
        let mut r = BufReader::new(&b"one\ntwo\nlast"[..]);
        assert_eq!(line(&mut r).await.unwrap().unwrap(), "one");
        assert_eq!(line(&mut r).await.unwrap().unwrap(), "two");
        // The end inside a line is an error; a clean end is None.
        assert!(line(&mut r).await.is_err());
        let mut empty = BufReader::new(&b""[..]);
        assert!(line(&mut empty).await.unwrap().is_none());
        // Exactly the limit passes, one byte more does not.
        let mut r = BufReader::new(&b"12345678\n123456789\n"[..]);
        assert_eq!(line(&mut r).await.unwrap().unwrap(), "12345678");
        let e = line(&mut r).await.unwrap_err();
        assert!(e.to_string().contains("longer than 8"), "{e}");
    }

    /// A daemon on one end of an in-memory pipe: answers each request
    /// line with an error naming the volume it asked about, after a pause
    /// if the volume is `slow`.
    fn daemon() -> (
        BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>,
        tokio::io::WriteHalf<tokio::io::DuplexStream>,
    ) {
        let (ours, theirs) = tokio::io::duplex(1 << 10);
        tokio::spawn(async move {
            let (rd, mut wr) = tokio::io::split(theirs);
            let mut rd = BufReader::new(rd);
            while let Ok(Some(line)) = read_line_within(&mut rd, MAX_LINE, LINE_TIMEOUT).await {
                let Ok(Request::VolumeInfo { name: Some(n) }) = serde_json::from_str(&line) else {
                    return;
                };
                if n == "slow" {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                let answer = Response::Err(format!("{} {n}", line.len()).into());
                if send_json(&mut wr, &answer).await.is_err() {
                    return;
                }
            }
        });
        let (rd, wr) = tokio::io::split(ours);
        (BufReader::new(rd), wr)
    }

    fn info(name: &str) -> Request {
        Request::VolumeInfo {
            name: Some(name.into()),
        }
    }

    #[tokio::test]
    async fn a_connection_is_used_again_only_while_it_is_open_and_quiet() {
        let (ours, mut theirs) = tokio::io::duplex(1 << 10);
        let mut rd = BufReader::new(ours);
        assert!(quiet(&mut rd), "open, nothing sent");
        theirs.write_all(b"{\"Err\":\"unasked\"}\n").await.unwrap();
        assert!(!quiet(&mut rd), "holds what nobody asked for");
        let (ours, theirs) = tokio::io::duplex(1 << 10);
        let mut rd = BufReader::new(ours);
        drop(theirs);
        assert!(!quiet(&mut rd), "closed by the daemon");
    }

    #[tokio::test]
    async fn an_answer_given_up_on_is_never_taken_for_the_next_one() {
        let mut slot = None;
        let connect = || async { Ok(daemon()) };
        let r = exchange_on(&mut slot, connect(), &info("a"), "d").await;
        assert!(matches!(r, Ok(Response::Err(e)) if e.message.ends_with(" a")));
        assert!(slot.is_some(), "kept for the next request");
        // Given up before its answer came: that connection is closed.
        let gave_up = tokio::time::timeout(
            Duration::from_millis(50),
            exchange_on(&mut slot, connect(), &info("slow"), "d"),
        )
        .await;
        assert!(gave_up.is_err());
        assert!(slot.is_none(), "a connection left mid-exchange is closed");
        // The next request gets its own answer, not the slow one's.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let r = exchange_on(&mut slot, connect(), &info("b"), "d").await;
        assert!(
            matches!(&r, Ok(Response::Err(e)) if e.message.ends_with(" b")),
            "{r:?}"
        );
    }

    #[tokio::test]
    async fn lines_far_larger_than_the_pipe_arrive_whole() {
        let mut slot = None;
        let big = "x".repeat(4 << 20);
        let want = serde_json::to_vec(&info(&big)).unwrap().len();
        for _ in 0..3 {
            let r = exchange_on(&mut slot, async { Ok(daemon()) }, &info(&big), "d").await;
            let Ok(Response::Err(e)) = r else {
                panic!("{r:?}")
            };
            assert_eq!(e.message.split(' ').next().unwrap(), want.to_string());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_line_begun_must_end_in_time() {
        let (mut w, r) = tokio::io::duplex(64);
        w.write_all(b"half").await.unwrap();
        let mut r = BufReader::new(r);
        let e = read_line_within(&mut r, 100, Duration::from_secs(60))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        drop(w);
    }
}
