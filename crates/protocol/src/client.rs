//! The protocol client translator: the bottom of the client stack, one per
//! brick. Requests are written to one TCP connection with fresh ids and
//! answered in any order; no lock is held while waiting on the network.
//!
//! A background task keeps the connection: it finds the brick's port (from
//! the volume's description, or the daemon of the brick's host when that
//! fails: `mgmt::rpc::graph_env`), connects with exponential
//! backoff, performs the handshake, and declares the brick down when the
//! connection drops or when requests are outstanding and nothing has been
//! heard for the ping timeout. While the brick is down every call fails at
//! once with ENOTCONN, which the replicate translator above expects.

use super::tls;
use super::wire::{self, Msg};

use async_trait::async_trait;
use mortar_core::{Ctx, Event, Fop, FsError, FsResult, Link, Reply, Xlator};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Notify};

/// Finds the address a brick listens on, given how many tries failed
/// since the last connection (so that it can try another source).
pub type Resolver = Arc<
    dyn Fn(u32) -> Pin<Box<dyn Future<Output = std::io::Result<SocketAddr>> + Send>> + Send + Sync,
>;

const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

use mortar_core::terms::PING_TIMEOUT;

type Pending = Mutex<HashMap<u64, oneshot::Sender<FsResult<Reply>>>>;

/// A ping answered slower than this is logged (each new slowest one): how
/// long a live brick can take tells how short `network.ping-timeout` can be.
const SLOW_PONG: Duration = Duration::from_millis(500);

/// How long a release waits for another request to the brick to leave
/// with (`Later`).
const LATER: Duration = Duration::from_millis(1);

/// Releases not sent yet: each leaves with the next request to the brick,
/// in one write and one read on the brick, or after `LATER` (the handle's
/// close is nothing the application waits for; a small file's release was
/// a request of its own to each brick, a third of its requests).
#[derive(Default)]
struct Later {
    frames: Vec<wire::Frame>,
    /// The connection they are for (`Shared::generation`).
    generation: u64,
    /// A timer will send them.
    armed: bool,
}

struct Shared {
    name: String,
    brick: String,
    key: Option<String>,
    resolve: Resolver,
    /// Milliseconds; changed by `reconfigure`.
    ping_timeout_ms: AtomicU64,
    /// `server.ssl`: whether the next connection is TLS.
    tls: AtomicBool,
    up: AtomicBool,
    /// Bumped every time the brick goes down; a call that raced with the
    /// drop sees the change and fails instead of waiting forever.
    generation: AtomicU64,
    next_id: AtomicU64,
    /// Calls sent to the brick.
    sent: AtomicU64,
    pending: Pending,
    later: Mutex<Later>,
    tx: Mutex<Option<mpsc::Sender<wire::Frame>>>,
    /// Milliseconds since `epoch` when the brick last sent anything.
    last_heard: AtomicU64,
    epoch: Instant,
    changed: Notify,
    /// Where up, down and the brick's notices go (to the parent translator).
    link: Arc<Link>,
}

pub struct ProtocolClient {
    shared: Arc<Shared>,
    /// Dropped with the client: its connection task sees that and ends
    /// (closing the connection, so the brick lets go of its handles and
    /// locks), whatever it was doing.
    alive: tokio::sync::watch::Sender<()>,
}

impl ProtocolClient {
    /// Creates the client; it connects once started (`Xlator::start`).
    /// `key`: the volume's key, for the pool's own clients (None for a
    /// mount).
    pub fn new(
        name: String,
        brick: String,
        key: Option<String>,
        resolve: Resolver,
        link: Arc<Link>,
    ) -> Self {
        let ping_timeout =
            Duration::from_secs(PING_TIMEOUT.default.parse().expect("a number of seconds"));
        let shared = Arc::new(Shared {
            name,
            brick,
            key,
            resolve,
            ping_timeout_ms: AtomicU64::new(ping_timeout.as_millis() as u64),
            tls: AtomicBool::new(true),
            up: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            sent: AtomicU64::new(0),
            pending: Mutex::new(HashMap::new()),
            later: Mutex::default(),
            tx: Mutex::new(None),
            last_heard: AtomicU64::new(0),
            epoch: Instant::now(),
            changed: Notify::new(),
            link,
        });
        ProtocolClient {
            shared,
            alive: tokio::sync::watch::channel(()).0,
        }
    }

    /// Waits until the brick is up, or the timeout passes.
    pub async fn wait_up(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.shared.up.load(Ordering::Acquire) {
            let notified = self.shared.changed.notified();
            if self.shared.up.load(Ordering::Acquire) {
                break;
            }
            if tokio::time::timeout_at(deadline.into(), notified)
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }

    /// Whether the brick is connected now.
    pub fn is_up(&self) -> bool {
        self.shared.up.load(Ordering::Acquire)
    }
}

impl Shared {
    fn ping_timeout(&self) -> Duration {
        Duration::from_millis(self.ping_timeout_ms.load(Ordering::Relaxed))
    }
    fn heard(&self) {
        self.last_heard
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn silent_for(&self) -> Duration {
        self.epoch.elapsed().saturating_sub(Duration::from_millis(
            self.last_heard.load(Ordering::Relaxed),
        ))
    }
    /// The brick is gone for this client; `closing`: because the client
    /// let go of it (a graph switched away), which is no news for the logs.
    fn set_down(&self, why: &str, closing: bool) {
        let was_up = self.up.swap(false, Ordering::AcqRel);
        self.generation.fetch_add(1, Ordering::AcqRel);
        *self.tx.lock().unwrap() = None;
        if was_up {
            // What the brick promised to recall is no longer promised.
            self.link.emit(Event::LeasesLost);
            // Before the calls in flight fail, so that whoever sees their
            // ENOTCONN also sees the new epoch.
            self.link.emit(Event::Down);
        }
        let pending: Vec<_> = self.pending.lock().unwrap().drain().collect();
        for (_, tx) in pending {
            let _ = tx.send(Err(FsError::notconn(format!("{}: {why}", self.name))));
        }
        if was_up && closing {
            tracing::debug!(client = %self.name, brick = %self.brick, "disconnected: {why}");
        } else if was_up {
            tracing::warn!(client = %self.name, brick = %self.brick, "brick is down: {why}");
        }
        self.changed.notify_waiters();
    }
}

impl Shared {
    /// Sends one request that `N` calls answer (ids `id..id + N`, the
    /// frame made by `encode` from `id`), held back if `later` (a release,
    /// `Later`), and waits for the answers, in id order.
    async fn request<const N: usize>(
        self: &Arc<Self>,
        op: &'static str,
        later: bool,
        encode: impl FnOnce(u64) -> wire::Frame,
    ) -> [FsResult<Reply>; N] {
        let down = || Err(FsError::notconn(format!("{} is down", self.name)));
        let generation = self.generation.load(Ordering::Acquire);
        let Some(tx) = self.tx.lock().unwrap().clone() else {
            return std::array::from_fn(|_| down());
        };
        let id = self.next_id.fetch_add(N as u64, Ordering::Relaxed);
        let mut senders: [Option<oneshot::Sender<FsResult<Reply>>>; N] =
            std::array::from_fn(|_| None);
        let answers: [oneshot::Receiver<FsResult<Reply>>; N] = std::array::from_fn(|k| {
            let (otx, orx) = oneshot::channel();
            senders[k] = Some(otx);
            orx
        });
        let ids = id..id + N as u64;
        {
            let mut pending = self.pending.lock().unwrap();
            if pending.is_empty() {
                // Silence while nothing was asked does not count towards
                // the ping timeout.
                self.heard();
            }
            pending.extend(ids.clone().zip(senders.into_iter().flatten()));
        }
        let forget = || {
            let mut pending = self.pending.lock().unwrap();
            for i in ids.clone() {
                pending.remove(&i);
            }
        };
        self.sent.fetch_add(1, Ordering::Relaxed);
        // With MORTAR_LOG=debug, each request is followed from the mount's
        // fop (its span, `graph::active`) to the brick, which logs the
        // same call number under the connection from this end's address.
        tracing::debug!(client = %self.name, call = id, fop = op, "sent");
        let frame = encode(id);
        let sent = if later {
            self.send_later(frame, generation, &tx);
            Ok(())
        } else {
            self.send_held(generation, &tx).await;
            tx.send(frame).await
        };
        if sent.is_err() {
            forget();
            return std::array::from_fn(|_| down());
        }
        if self.generation.load(Ordering::Acquire) != generation {
            forget();
        }
        let mut got: [Option<FsResult<Reply>>; N] = std::array::from_fn(|_| None);
        for (k, answer) in answers.into_iter().enumerate() {
            got[k] = Some(
                answer
                    .await
                    .unwrap_or_else(|_| Err(FsError::notconn(format!("{} went down", self.name)))),
            );
        }
        let got = got.map(|a| a.expect("every answer awaited"));
        match &got[0] {
            Ok(_) => tracing::debug!(client = %self.name, call = id, fop = op, "answered"),
            Err(e) => tracing::debug!(client = %self.name, call = id, fop = op, "failed: {e}"),
        }
        got
    }

    /// Holds `frame` (a release) back until the next request or `LATER`.
    fn send_later(
        self: &Arc<Self>,
        frame: wire::Frame,
        generation: u64,
        tx: &mpsc::Sender<wire::Frame>,
    ) {
        let arm = {
            let mut later = self.later.lock().unwrap();
            if later.generation != generation {
                // Left from a connection that is gone: its handles went with it.
                later.frames.clear();
                later.generation = generation;
            }
            later.frames.push(frame);
            !std::mem::replace(&mut later.armed, true)
        };
        if arm {
            let (sh, tx) = (self.clone(), tx.clone());
            tokio::spawn(async move {
                tokio::time::sleep(LATER).await;
                sh.send_held(generation, &tx).await;
            });
        }
    }

    /// Sends the releases held back for connection `generation`, first.
    async fn send_held(&self, generation: u64, tx: &mpsc::Sender<wire::Frame>) {
        let frames = {
            let mut later = self.later.lock().unwrap();
            later.armed = false;
            if later.frames.is_empty() || later.generation != generation {
                return;
            }
            std::mem::take(&mut later.frames)
        };
        for f in frames {
            // A connection that ended fails their calls (`set_down`).
            let _ = tx.send(f).await;
        }
    }
}

async fn connect_once(sh: &Shared, failed: u32) -> std::io::Result<tls::Conn> {
    let addr = (sh.resolve)(failed).await?;
    let open = async {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        if sh.tls.load(Ordering::Relaxed) {
            Ok(tls::Conn::Tls(Box::new(tls::connect(tcp).await?)))
        } else {
            Ok::<_, std::io::Error>(tls::Conn::Plain(tcp))
        }
    };
    let mut stream = tokio::time::timeout(Duration::from_secs(5), open)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    wire::write_frame(
        &mut stream,
        &Msg::Hello {
            magic: wire::MAGIC,
            version: wire::VERSION,
            brick: sh.brick.clone(),
            key: sh.key.clone(),
        },
    )
    .await?;
    match tokio::time::timeout(Duration::from_secs(5), wire::read_frame(&mut stream)).await {
        Ok(Ok(Some(Msg::Welcome { .. }))) => Ok(stream),
        Ok(Ok(Some(Msg::Refused { reason }))) => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            match reason.as_str() {
                // What a brick of protocol version 8 or before says.
                "not a mortar client" => format!(
                    "brick refused the handshake: {reason} (this client speaks protocol version {}: the brick runs an older mortar)",
                    wire::VERSION
                ),
                _ => format!("brick refused the handshake: {reason}"),
            },
        )),
        Ok(Err(e)) => Err(e),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "no handshake answer",
        )),
    }
}

/// Keeps the brick connected until the client is dropped (`alive` closes).
async fn keep_connected(
    weak: std::sync::Weak<Shared>,
    mut alive: tokio::sync::watch::Receiver<()>,
) {
    let mut backoff = BACKOFF_MIN;
    // The last failure logged: each attempt that fails otherwise is logged
    // too (a brick that was gone, then a server that is not the pool's).
    let mut logged: Option<String> = None;
    let mut failed = 0;
    loop {
        let Some(sh) = weak.upgrade() else { return };
        let connected = tokio::select! {
            c = connect_once(&sh, failed) => c,
            _ = alive.changed() => return,
        };
        match connected {
            Ok(stream) => {
                backoff = BACKOFF_MIN;
                logged = None;
                failed = 0;
                let local = stream
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                tracing::info!(client = %sh.name, brick = %sh.brick, %local, "connected to brick");
                let (why, writer) = run_connection(&sh, stream, &mut alive).await;
                writer.abort();
                let closing = alive.has_changed().is_err();
                sh.set_down(&why, closing);
                if closing {
                    return;
                }
            }
            Err(e) => {
                failed = failed.saturating_add(1);
                let why = e.to_string();
                if logged.as_ref() != Some(&why) {
                    tracing::warn!(client = %sh.name, brick = %sh.brick, "cannot reach brick: {why}");
                    logged = Some(why);
                }
            }
        }
        drop(sh);
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = alive.changed() => return,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Runs one connection until it ends; returns why it ended, and the writer
/// task for the caller to stop.
async fn run_connection(
    sh: &Arc<Shared>,
    stream: tls::Conn,
    alive: &mut tokio::sync::watch::Receiver<()>,
) -> (String, tokio::task::JoinHandle<std::io::Result<()>>) {
    let (rd, wr) = tokio::io::split(stream);
    // Many answers come in with one read system call; `next` may lose
    // its race with the ping timer and go on later (`wire::Frames`).
    let mut rd = wire::Frames::new(rd);
    let (tx, rx) = mpsc::channel::<wire::Frame>(4096);
    let mut writer = tokio::spawn(wire::pump(wr, rx));
    sh.heard();
    *sh.tx.lock().unwrap() = Some(tx.clone());
    sh.up.store(true, Ordering::Release);
    if sh.generation.load(Ordering::Acquire) > 0 {
        // Back after a loss: what was cached meanwhile (this client's own
        // writes while this copy was away, say) may not be what the brick
        // now holds.
        sh.link.emit(Event::LeasesLost);
    }
    sh.link.emit(Event::Up);
    sh.changed.notify_waiters();

    // Ping four times per timeout (the timeout can change while we run).
    let ping_every = |sh: &Shared| {
        (sh.ping_timeout() / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
    };
    let mut next_tick = tokio::time::Instant::now() + ping_every(sh);
    // The ping whose answer is being timed, and the slowest answer yet.
    let mut timed: Option<(u64, tokio::time::Instant)> = None;
    let mut slowest = SLOW_PONG;
    let why = loop {
        tokio::select! {
            frame = rd.next() => match frame {
                Ok(Some(Msg::Answer { id, result })) => {
                    sh.heard();
                    if let Some(waiter) = sh.pending.lock().unwrap().remove(&id) {
                        let _ = waiter.send(result);
                    }
                }
                Ok(Some(Msg::Pong { id })) => {
                    sh.heard();
                    if let Some((_, sent)) = timed.filter(|(t, _)| *t == id) {
                        timed = None;
                        let took = sent.elapsed();
                        if took > slowest {
                            slowest = took;
                            tracing::warn!(client = %sh.name, brick = %sh.brick, "the brick took {took:?} to answer a ping, the slowest yet (network.ping-timeout is {:?})", sh.ping_timeout());
                        }
                    }
                }
                Ok(Some(Msg::Recall {
                    id,
                    gfid,
                    name,
                    claim,
                })) => {
                    sh.heard();
                    tracing::debug!(client = %sh.name, %gfid, ?name, id, claim, "recall");
                    // Answered once every translator and subscriber that
                    // got the recall has dropped it (and its cache).
                    let tx = tx.clone();
                    let ack = mortar_core::xlator::Ack::new(move || {
                        if let Err(e) = tx.try_send(wire::encode(&Msg::Recalled { id })) {
                            tracing::debug!(id, "recall not answered: {e}");
                        }
                    });
                    sh.link.emit(Event::Recall {
                        gfid,
                        name,
                        claim,
                        ack,
                    });
                }
                Ok(Some(Msg::Notice { kind, gfid })) => {
                    sh.heard();
                    match (kind.as_str(), gfid) {
                        (wire::NOTICE_CONTENTION, Some(g)) => sh.link.emit(Event::Contention(g)),
                        (wire::NOTICE_RULES, _) => {
                            tracing::info!(client = %sh.name, "the brick changed this client's identity or rights: caches dropped");
                            sh.link.emit(Event::LeasesLost);
                        }
                        _ => tracing::debug!(client = %sh.name, "ignoring notice {kind}"),
                    }
                }
                Ok(Some(other)) => break format!("unexpected message {other:?}"),
                Ok(None) => break "connection closed by the brick".into(),
                Err(e) => break format!("read failed: {e}"),
            },
            _ = tokio::time::sleep_until(next_tick) => {
                next_tick = tokio::time::Instant::now() + ping_every(sh);
                let busy = !sh.pending.lock().unwrap().is_empty();
                if busy && sh.silent_for() > sh.ping_timeout() {
                    break format!("no answer for {:?} (ping timeout)", sh.ping_timeout());
                }
                let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
                let _ = tx.try_send(wire::encode(&Msg::Ping { id }));
                timed.get_or_insert((id, tokio::time::Instant::now()));
            }
            _ = alive.changed() => break "the client let go of the brick".into(),
            res = &mut writer => {
                break match res {
                    Ok(Err(e)) => format!("write failed: {e}"),
                    _ => "writer ended".into(),
                };
            }
        }
    };
    (why, writer)
}

#[async_trait]
impl Xlator for ProtocolClient {
    fn name(&self) -> String {
        self.shared.name.clone()
    }

    fn start(&self) {
        tokio::spawn(keep_connected(
            Arc::downgrade(&self.shared),
            self.alive.subscribe(),
        ));
    }

    fn requests(&self) -> u64 {
        self.shared.sent.load(Ordering::Relaxed)
    }

    fn reconfigure(&self, options: &mortar_core::Options) {
        let secs = PING_TIMEOUT.int(options).max(1) as u64;
        let old = self
            .shared
            .ping_timeout_ms
            .swap(secs * 1000, Ordering::Relaxed);
        if old != secs * 1000 {
            tracing::info!(client = %self.shared.name, "network.ping-timeout is now {secs}s");
        }
        let tls = crate::auth::SERVER_SSL.bool(options);
        if self.shared.tls.swap(tls, Ordering::Relaxed) != tls {
            tracing::info!(client = %self.shared.name, "server.ssl is now {}", if tls { "on" } else { "off" });
        }
    }

    async fn call_locked(
        &self,
        cx: &Ctx,
        fop: Fop,
        mark: u32,
    ) -> (FsResult<Reply>, FsResult<Reply>) {
        let op = fop.name();
        let [answer, lock] = self
            .shared
            .request(op, false, |id| {
                wire::encode(&Msg::CallLocked {
                    id,
                    cx: cx.clone(),
                    fop,
                    mark,
                })
            })
            .await;
        (answer, lock)
    }

    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let sh = &self.shared;
        if let Fop::Flush { .. } = fop {
            // A brick has nothing to do on flush (no locks or write-behind
            // below this point), so it costs no round trip.
            return if self.is_up() {
                Ok(Reply::Ok)
            } else {
                Err(FsError::notconn(format!("{} is down", sh.name)))
            };
        }
        let op = fop.name();
        let later = matches!(fop, Fop::Release { .. } | Fop::Releasedir { .. });
        let [answer] = sh
            .request(op, later, |id| {
                wire::encode(&Msg::Call {
                    id,
                    cx: cx.clone(),
                    fop,
                })
            })
            .await;
        answer
    }
}
