//! The brick server: accepts client connections, checks the handshake,
//! decodes each `Call` and hands it with its connection to the top of the
//! brick stack (`crate`), and encodes the answer. Many requests of
//! one connection are in flight at once and are answered as they finish:
//! a request the stack answers at once is answered right here, one that
//! has to wait (a lock, a slow fop on the blocking pool) goes on in a task
//! of its own. When a connection ends, the requests it had started finish
//! before its locks and sessions go (`Running`).

use crate::{Conn, Notice, Stack};
use mortar_protocol::admit;
use mortar_protocol::auth::{Grant, Rules, Squash};
use mortar_protocol::refusal::Refusal;
use mortar_protocol::tls;
use mortar_protocol::wire::{self, Msg};
use mortar_storage::posix::FdTable;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Notify};
use tracing::Instrument;

/// The bricks one process serves, by the name a client's handshake asks
/// for (the brick's path): one brick, or all of a server's when they share
/// a process (`cluster.brick-multiplex`). A brick is added once it can
/// serve and taken out when it stops; its connections end with it.
#[derive(Default)]
pub struct Exports(Mutex<HashMap<String, Arc<Export>>>);

/// A brick as its connections see it.
pub struct Export {
    pub stack: Arc<Stack>,
    /// The volume's `auth.*` rules, as they change.
    pub auth: watch::Receiver<Rules>,
    /// The volume's key (`Volume::key`), which the pool's own clients give.
    pub key: Option<Arc<str>>,
    /// True once the brick is no longer served: its connections end.
    gone: watch::Sender<bool>,
}

impl Export {
    pub fn new(stack: Arc<Stack>, auth: watch::Receiver<Rules>, key: Option<String>) -> Export {
        Export {
            stack,
            auth,
            key: key.map(Into::into),
            gone: watch::Sender::new(false),
        }
    }
}

impl Exports {
    /// Serves `export` as `name` (in place of one served so before, whose
    /// connections end).
    pub fn add(&self, name: &str, export: Arc<Export>) {
        if let Some(old) = self.0.lock().unwrap().insert(name.to_string(), export) {
            old.gone.send_replace(true);
        }
    }

    /// Stops serving `export` as `name`, if it is the one served so (not
    /// one that replaced it since): its connections end.
    pub fn remove(&self, name: &str, export: &Arc<Export>) {
        let mut all = self.0.lock().unwrap();
        if all.get(name).is_some_and(|e| Arc::ptr_eq(e, export)) {
            all.remove(name);
            export.gone.send_replace(true);
        }
    }

    /// The process is about to exit (told to stop): every brick served
    /// writes down what it keeps in memory (`Stack::stopping`).
    pub fn stopping(&self) {
        for e in self.0.lock().unwrap().values() {
            e.stack.stopping();
        }
    }

    pub fn get(&self, name: &str) -> Option<Arc<Export>> {
        self.0.lock().unwrap().get(name).cloned()
    }

    /// The names served, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.0.lock().unwrap().keys().cloned().collect();
        n.sort();
        n
    }
}

/// Serves the bricks of `exports` on `listener`, each connection to the
/// brick its handshake names. `what` names the process in logs.
pub async fn serve(
    listener: TcpListener,
    exports: Arc<Exports>,
    what: String,
) -> std::io::Result<()> {
    let acceptor = tls::acceptor(tls::Clients::Pool)?;
    let next_conn = Arc::new(AtomicU64::new(1));
    admit::accept_loop(listener, &what, admit::CAPS, |stream, peer, ticket| {
        let _ = stream.set_nodelay(true);
        let (exports, id, acceptor) = (
            exports.clone(),
            next_conn.fetch_add(1, Ordering::Relaxed),
            acceptor.clone(),
        );
        async move {
            let served = async {
                let (conn, who) = ticket
                    .handshake("TLS handshake", async {
                        // TLS, or the clear: whether the brick takes a
                        // client in the clear (`server.ssl` off) is known
                        // once its handshake names the brick.
                        let mut first = [0u8; 1];
                        if stream.peek(&mut first).await? == 0 {
                            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
                        }
                        if first[0] == tls::TLS_HANDSHAKE {
                            let (s, who) = acceptor.accept(stream).await?;
                            Ok((tls::Conn::Tls(Box::new(s)), who))
                        } else {
                            Ok((tls::Conn::Plain(stream), None))
                        }
                    })
                    .await?;
                // Every line logged for this connection names it, and the
                // client at `peer` (which logs its own address on connect).
                let span =
                    tracing::info_span!("conn", conn = id, %peer, brick = tracing::field::Empty);
                serve_conn(conn, who, peer, &exports, id)
                    .instrument(span)
                    .await
            };
            match served.await {
                Ok(()) => tracing::debug!(%peer, "client disconnected"),
                Err(e) => tracing::warn!(%peer, "connection ended: {e}"),
            }
            drop(ticket);
        }
    })
    .await;
    Ok(())
}

async fn serve_conn(
    stream: tls::Conn,
    who: Option<tls::Peer>,
    peer: SocketAddr,
    exports: &Exports,
    id: u64,
) -> std::io::Result<()> {
    let plain = stream.is_plain();
    let (mut rd, mut wr) = tokio::io::split(stream);
    let admitted = match handshake(&mut rd, &mut wr, who, plain, peer, exports).await? {
        Ok(admitted) => admitted,
        Err(reason) => return Err(refuse(&mut wr, reason).await),
    };
    let Admitted {
        brick,
        export,
        mut auth,
        internal,
        mut grant,
        mut squash,
    } = admitted;
    let stack = export.stack.clone();
    let mut gone = export.gone.subscribe();
    drop(export);
    if *gone.borrow() {
        return Err(std::io::Error::other("the brick stopped serving"));
    }
    tracing::Span::current().record("brick", brick.as_str());

    // Many requests come in with one read system call; `next` may lose its
    // race with a change of the auth rules and go on later (`wire::Frames`).
    // Large frames are read within the process's budget (`budget`).
    let rd = mortar_protocol::budget::Metered::new(rd, mortar_protocol::budget::process_budget());
    let mut rd = wire::Frames::new(rd);
    let (tx, rx) = mpsc::channel::<wire::Frame>(4096);
    let writer = tokio::spawn(wire::pump(wr, rx));
    let closing = Arc::new(Notify::new());
    let running = Running::default();
    let conn = Arc::new(Conn {
        id,
        peer: peer.to_string(),
        fds: FdTable::default(),
        notice: {
            let tx = tx.clone();
            Box::new(move |n| {
                let msg = match n {
                    Notice::Contention(g) => Msg::Notice {
                        kind: wire::NOTICE_CONTENTION.into(),
                        gfid: Some(g),
                    },
                    Notice::Recall {
                        id,
                        gfid,
                        name,
                        claim,
                    } => Msg::Recall {
                        id,
                        gfid,
                        name,
                        claim,
                    },
                };
                let _ = tx.try_send(wire::encode(&msg));
            })
        },
        close: {
            let c = closing.clone();
            Box::new(move || c.notify_one())
        },
    });
    stack.connect(&conn);
    let top = stack.top();
    let result = loop {
        let read = tokio::select! {
            r = rd.next() => r,
            _ = closing.notified() => break Err(std::io::Error::other(
                "closed by the brick: a lock revoked or a recall not answered",
            )),
            Ok(()) = gone.changed() => break Err(std::io::Error::other(
                "the brick stopped serving",
            )),
            // The volume's auth rules changed: is this client still allowed?
            Ok(()) = auth.changed() => {
                let rules = auth.borrow_and_update().clone();
                match admits(&rules, who, plain, internal, peer.ip(), true).await {
                    Err(reason) => {
                        tracing::warn!(%peer, "client disconnected: {reason}");
                        break Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, reason));
                    }
                    Ok(g) => {
                        // What the client caches was answered to the
                        // identity and rights it had: with others, it may
                        // not be what the brick would answer now.
                        if rules.squash != squash || g.identity != grant.identity || g.read_only != grant.read_only {
                            tracing::info!(%peer, "the client's identity or rights changed: its caches dropped");
                            let _ = tx.try_send(wire::encode(&Msg::Notice { kind: wire::NOTICE_RULES.into(), gfid: None }));
                        }
                        (squash, grant) = (rules.squash, g);
                        continue;
                    }
                }
            }
        };
        let msg = match read {
            Ok(Some(m)) => m,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        let access = Access {
            grant: &grant,
            internal,
            squash: &squash,
            running: &running,
        };
        match msg {
            Msg::Call { id, cx, fop } => {
                serve_call(&tx, &top, &conn, access, id, cx, fop, None).await;
            }
            Msg::CallLocked { id, cx, fop, mark } => {
                serve_call(&tx, &top, &conn, access, id, cx, fop, Some(mark)).await;
            }
            Msg::Ping { id } => {
                let _ = tx.send(wire::encode(&Msg::Pong { id })).await;
            }
            Msg::Recalled { id } => stack.recalled(&conn, id),
            other => {
                break Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("unexpected message from client: {other:?}"),
                ))
            }
        }
    };
    running.finish(&conn.peer).await;
    stack.disconnect(&conn);
    // The connection ends now, answers still owed or not (a waiting lock
    // may hold a sender for a while): the client must see it close.
    writer.abort();
    result
}

/// What a connection's requests may do, and as whom they run.
struct Access<'a> {
    grant: &'a Grant,
    internal: bool,
    squash: &'a Squash,
    running: &'a Running,
}

/// A connection's requests still running on the stack. When the
/// connection ends (a client killed, a lock holder's connection closed),
/// they finish before its locks are let go and its change sessions end:
/// a write that landed after its lock went to another client (a heal
/// reading the fragments to compare them) would change what that one had
/// read, and parity and data would disagree for good. A request waiting
/// for a lock is not waited for: the connection's end cancels it.
#[derive(Default)]
struct Running(Arc<tokio::sync::RwLock<()>>);

/// Held by a request while it runs (`Running`).
type Runs = Option<tokio::sync::OwnedRwLockReadGuard<()>>;

impl Running {
    fn start(&self, fop: &mortar_core::Fop) -> Runs {
        if matches!(fop, mortar_core::Fop::Lock { wait: true, .. }) {
            return None;
        }
        // Only `finish` takes it for writing, after the last request.
        self.0.clone().try_read_owned().ok()
    }

    /// Waits for the requests still running, saying so when that takes a
    /// while (a disk that stopped answering).
    async fn finish(&self, peer: &str) {
        let mut waited = 0;
        let done = self.0.write();
        tokio::pin!(done);
        while tokio::time::timeout(std::time::Duration::from_secs(10), &mut done)
            .await
            .is_err()
        {
            waited += 10;
            tracing::warn!(
                client = %peer,
                "a connection ended {waited} s ago and its requests still run on the brick: its locks are kept until they end"
            );
        }
    }
}

impl Access<'_> {
    /// The identity a request asked for becomes (`server.root-squash`).
    fn identity(&self, mut cx: mortar_core::Ctx) -> mortar_core::Ctx {
        if !self.internal {
            self.squash.apply(&mut cx, self.grant.identity);
        }
        cx
    }
}

/// Runs one request on the stack and answers it; with `mark`
/// (`Msg::CallLocked`), then a lock on its object, answered as call
/// `id + 1`. Most requests are answered at once, here; one that has to wait
/// goes on in a task of its own.
#[allow(clippy::too_many_arguments)]
async fn serve_call(
    tx: &mpsc::Sender<wire::Frame>,
    top: &Arc<dyn crate::BrickXlator>,
    conn: &Arc<Conn>,
    access: Access<'_>,
    id: u64,
    cx: mortar_core::Ctx,
    fop: mortar_core::Fop,
    mark: Option<u32>,
) {
    use mortar_core::{Fop, FsError};
    let name = fop.name();
    let gfid = fop.gfid();
    // A request's lines name it as the client does (its call number on
    // this connection).
    let span = tracing::debug_span!("call", call = id, fop = name, %gfid);
    let refused = if access.grant.read_only && changes(&fop) {
        Some(FsError::new(
            libc::EROFS,
            "this client's credential is read-only",
        ))
    } else if mark.is_some() && !matches!(fop, Fop::Create { .. } | Fop::Open { .. }) {
        Some(FsError::new(
            libc::EINVAL,
            format!("a lock behind a {name}"),
        ))
    } else {
        None
    };
    if let Some(e) = refused {
        if mark.is_some() {
            answer(tx, id + 1, &span, Err(FsError::errno(libc::ECANCELED))).await;
        }
        answer(tx, id, &span, Err(e)).await;
        return;
    }
    let cx = access.identity(cx);
    let runs = access.running.start(&fop);
    // The lock runs as a client's own locks do: as root, squashed.
    let lock_cx = access.identity(mortar_core::Ctx::root());
    let (top, conn) = (top.clone(), conn.clone());
    let mut call = Box::pin(
        async move {
            let result = top.call(&conn, &cx, fop).await;
            let lock = match (mark, &result) {
                (None, _) => None,
                (Some(mark), Ok(_)) => {
                    let lock = Fop::Lock {
                        gfid,
                        wait: false,
                        mark: Some(mark),
                    };
                    Some(top.call(&conn, &lock_cx, lock).await)
                }
                (Some(_), Err(_)) => Some(Err(FsError::errno(libc::ECANCELED))),
            };
            // Done on the brick; the answer may wait for a slow client.
            drop(runs);
            (result, lock)
        }
        .instrument(span.clone()),
    );
    // Polled once here: most requests are answered at once.
    match std::future::poll_fn(|w| Poll::Ready(call.as_mut().poll(w))).await {
        Poll::Ready(done) => answer_call(tx, id, &span, done).await,
        Poll::Pending => {
            let tx = tx.clone();
            tokio::spawn(async move { answer_call(&tx, id, &span, call.await).await });
        }
    }
}

/// Answers call `id`, and the lock behind it (`id + 1`) if there was one.
async fn answer_call(
    tx: &mpsc::Sender<wire::Frame>,
    id: u64,
    span: &tracing::Span,
    (result, lock): (
        mortar_core::FsResult<mortar_core::Reply>,
        Option<mortar_core::FsResult<mortar_core::Reply>>,
    ),
) {
    answer(tx, id, span, result).await;
    if let Some(lock) = lock {
        answer(tx, id + 1, span, lock).await;
    }
}

/// A connection let in: to which brick, and what it may do there.
struct Admitted {
    brick: String,
    export: Arc<Export>,
    /// The brick's auth rules, the ones in force now seen.
    auth: watch::Receiver<Rules>,
    /// One of the pool's own clients.
    internal: bool,
    grant: Grant,
    squash: Squash,
}

/// The handshake: small, and soon, or the connection ends. A client waits
/// for the answer before it sends more, so nothing is read ahead. Answers
/// whether the client is one of the pool's own, what its credential is
/// granted (read-only, an identity) and who the requests of a client that
/// is not the pool's run as; or why it is refused.
async fn handshake<R, W>(
    rd: &mut R,
    wr: &mut W,
    who: Option<tls::Peer>,
    plain: bool,
    peer: SocketAddr,
    exports: &Exports,
) -> std::io::Result<Result<Admitted, Refusal>>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let hello = admit::first_message("handshake", wire::read_frame_within(rd, wire::MAX_HELLO));
    let hello = hello.await?;
    // The brick it asks for, if this process serves it.
    let export = match &hello {
        Some(Msg::Hello { brick: want, .. }) => exports.get(want),
        _ => None,
    };
    // A client in the clear is answered only by a brick that takes the
    // clear (`server.ssl off`): others end the connection unanswered,
    // without a word of what they serve.
    if plain && export.as_ref().is_none_or(|e| e.auth.borrow().tls) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "a client in the clear, and server.ssl is on",
        ));
    }
    match (hello, export) {
        (
            Some(Msg::Hello {
                magic,
                version,
                brick: want,
                key: given,
            }),
            Some(export),
        ) if magic == wire::MAGIC && version == wire::VERSION => {
            // The pool's own clients (a server's certificate, or the
            // volume's key) pass the auth rules.
            let key = &export.key;
            let internal = who.is_some_and(|w| w.role == tls::Role::Server)
                || (key.is_some() && given.as_deref() == key.as_deref());
            let mut auth = export.auth.clone();
            let rules = auth.borrow_and_update().clone();
            let grant = match admits(&rules, who, plain, internal, peer.ip(), false).await {
                Ok(g) => g,
                Err(reason) => {
                    tracing::warn!(%peer, "client refused: {reason}");
                    return Ok(Err(reason));
                }
            };
            wire::write_frame(
                wr,
                &Msg::Welcome {
                    version: wire::VERSION,
                },
            )
            .await?;
            Ok(Ok(Admitted {
                brick: want,
                export,
                auth,
                internal,
                grant,
                squash: rules.squash,
            }))
        }
        (
            Some(Msg::Hello {
                magic,
                version,
                brick: want,
                ..
            }),
            _,
        ) => {
            let reason = if magic != wire::MAGIC {
                "not a mortar client".to_string()
            } else if version <= wire::legacy::LAST {
                // An older mortar: told in the encoding it reads.
                let reason = format!(
                    "this client speaks protocol version {version}, this brick {}: upgrade the client (mortar) to mount this volume",
                    wire::VERSION
                );
                tracing::warn!(%peer, "client refused: {reason}");
                wire::write_encoded(wr, &wire::legacy::refusal(&reason)).await?;
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    reason,
                ));
            } else if version != wire::VERSION {
                format!(
                    "protocol version {version} not supported (this brick speaks {})",
                    wire::VERSION
                )
            } else {
                match exports.names().as_slice() {
                    [one] => format!("this brick exports {one}, not {want}"),
                    _ => format!("this server exports no brick {want}"),
                }
            };
            Ok(Err(Refusal(reason)))
        }
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "first message was not a handshake",
        )),
    }
}

/// Whether the volume's rules let a connection in: Ok(what its credential
/// is granted), or why not. `who`: its certificate (None: in the clear);
/// `internal`: one of the pool's own clients; `open`: a connection that
/// was let in before (the rules changed), which a certificate replaced by
/// a rotation may keep.
async fn admits(
    rules: &Rules,
    who: Option<tls::Peer>,
    plain: bool,
    internal: bool,
    ip: std::net::IpAddr,
    open: bool,
) -> Result<Grant, Refusal> {
    if plain && rules.tls {
        return Err("server.ssl is on, and this client is in the clear".into());
    }
    if let Some(w) = &who {
        if w.role == tls::Role::Reader {
            return Err("a read-only administrator credential does not mount".into());
        }
        let pooled = matches!(w.role, tls::Role::Server | tls::Role::Admin);
        let fp = tls::hex(&w.fingerprint);
        let retired = rules.retired.contains(&fp);
        let taken = rules.pool.is_empty() || rules.pool.contains(&fp) || (open && retired);
        if pooled && !taken {
            return Err(if retired {
                "its certificate was replaced by a rotation (its holder takes the new one for its next connection)"
            } else {
                "its certificate is not one the pool takes (its server left the pool, or it was made after)"
            }
            .into());
        }
    }
    if internal {
        return Ok(Grant::default());
    }
    let grant = match who {
        Some(w) if w.role == tls::Role::Client => rules.credential(&w.fingerprint, open)?,
        _ => Grant::default(),
    };
    match rules.refuses(ip).await {
        Some(reason) => Err(Refusal(reason)),
        None => Ok(grant),
    }
}

/// What a read-only client may not ask: a change, or an open for writing.
fn changes(fop: &mortar_core::Fop) -> bool {
    use mortar_core::Fop;
    fop.is_modifying()
        || matches!(fop, Fop::Clear { .. })
        || matches!(fop, Fop::Open { flags, .. }
            if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0)
}

/// Refuses a handshake: tells the client why, and returns the error that
/// ends the connection.
async fn refuse(
    wr: &mut (impl tokio::io::AsyncWrite + Unpin),
    Refusal(reason): Refusal,
) -> std::io::Error {
    let told = wire::write_frame(
        wr,
        &Msg::Refused {
            reason: reason.clone(),
        },
    )
    .await;
    match told {
        Ok(()) => std::io::Error::new(std::io::ErrorKind::PermissionDenied, reason),
        Err(e) => e,
    }
}

async fn answer(
    tx: &mpsc::Sender<wire::Frame>,
    id: u64,
    span: &tracing::Span,
    result: mortar_core::FsResult<mortar_core::Reply>,
) {
    // The call's span names it: the call number, the fop, the gfid.
    span.in_scope(|| match &result {
        Ok(_) => tracing::debug!("answered"),
        Err(e) => tracing::debug!("failed: {e}"),
    });
    let _ = tx.send(wire::encode(&Msg::Answer { id, result })).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_core::{Fop, Gfid, Name};

    #[test]
    fn a_read_only_client_may_read_and_open_for_reading_only() {
        let g = Gfid::ROOT;
        let open = |flags| Fop::Open { gfid: g, flags };
        assert!(!changes(&open(libc::O_RDONLY)));
        assert!(!changes(&Fop::Getattr { gfid: g }));
        assert!(!changes(&Fop::Lookup {
            parent: g,
            name: Name::new("f").unwrap()
        }));
        for flags in [libc::O_WRONLY, libc::O_RDWR, libc::O_RDONLY | libc::O_TRUNC] {
            assert!(changes(&open(flags)), "{flags:o}");
        }
        assert!(changes(&Fop::Unlink {
            parent: g,
            name: Name::new("f").unwrap()
        }));
        assert!(changes(&Fop::Clear {
            gfid: g,
            unblame: 1
        }));
    }
}
