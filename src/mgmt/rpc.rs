//! The management RPC: one JSON request per line, one JSON response per
//! line, over TCP. Used by the CLI, by mounting clients (volume descriptions
//! and brick ports) and between peers' daemons.

use super::state::{Brick, Peer, Volume};
use crate::core::desc::{VolDesc, XlDesc};
use crate::graph::Env;
use crate::protocol::client::{ProtocolClient, Resolver};
use crate::protocol::tls;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Request {
    PeerProbe {
        host: String,
        /// The join token of a server not yet in this pool (`peer token`
        /// on it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// This server's join token (`peer token`).
    PeerToken,
    PeerDetach {
        host: String,
        /// Detach it even though it holds bricks (they stay in their
        /// volumes, offline).
        #[serde(default)]
        force: bool,
    },
    PeerList,
    VolumeCreate {
        name: String,
        replica: usize,
        /// Arbiter bricks per replica set (0 or 1).
        #[serde(default)]
        arbiter: usize,
        transport: String,
        bricks: Vec<String>,
        force: bool,
    },
    /// volume add-brick NAME [replica N] BRICK... [force]
    VolumeAddBrick {
        name: String,
        /// The replica count after (None: the volume's).
        replica: Option<usize>,
        bricks: Vec<String>,
        force: bool,
    },
    VolumeStart {
        name: String,
        force: bool,
    },
    VolumeStop {
        name: String,
    },
    VolumeDelete {
        name: String,
    },
    VolumeInfo {
        name: Option<String>,
    },
    VolumeStatus {
        name: Option<String>,
    },
    VolumeSet {
        name: String,
        key: String,
        value: String,
    },
    VolumeReset {
        name: String,
        key: Option<String>,
    },
    /// `volume credentials NAME create|list|revoke`.
    VolumeCredentials {
        name: String,
        op: CredentialOp,
    },
    /// The client stack's description, fetched at mount time.
    GetVolDesc {
        name: String,
    },
    /// The description once its version is not `known` (at once if it is
    /// not already), or after a while anyway: how clients and bricks hear
    /// of a change at once.
    WatchVolDesc {
        name: String,
        known: Option<u64>,
        /// The mounted client asking (bricks follow their volume too, and
        /// say nothing): what `volume status NAME clients` lists.
        #[serde(default)]
        client: Option<ClientInfo>,
        /// Only the options and version, the graph left empty: all a
        /// brick needs (at 300 bricks the graph is 60 KB to parse).
        #[serde(default)]
        options_only: bool,
    },
    /// The clients mounting a volume that asked this daemon (`all`: and
    /// its peers) for its description lately.
    VolumeClients {
        name: String,
        all: bool,
    },
    /// Port of a local brick of a started volume.
    Portmap {
        path: String,
    },
    // Between daemons.
    /// A Raft message (`consensus::network::Message`).
    Raft(Box<serde_json::value::RawValue>),
    /// A change forwarded to the leader by the server the CLI asked;
    /// answered `Committed`.
    Leader(Box<Request>),
    /// Asked of the leader: the index an up-to-date read must have applied.
    ReadIndex,
    /// An up-to-date answer to a read: the server asked first applies
    /// what the leader has committed.
    Fresh(Box<Request>),
    /// This server was detached from the pool: it forgets the pool's state
    /// and becomes a pool of one.
    Leave,
    /// Asked of a server being probed by the pool's leader `me`: it
    /// forgets its own state and waits to receive the pool's. Sent by a
    /// prober without a credential of the joining server's pool, over a
    /// connection pinned by its join token: `secret` is the token's
    /// secret, `ca` and `ca_key` the pool's authority (docs/security.md).
    PeerJoin {
        me: Peer,
        #[serde(default)]
        secret: String,
        #[serde(default)]
        ca: String,
        #[serde(default)]
        ca_key: String,
    },
    /// A peer's daemon is alive; answered `Liveness`.
    Heartbeat {
        from: String,
    },
    /// Checks a local brick path (`force`: even on the root file system)
    /// and marks it as the volume's.
    BrickInit {
        brick: Brick,
        volume_id: String,
        force: bool,
        /// The brick comes back to its volume (`reset-brick ... commit`):
        /// that volume's id on it is no reason to refuse.
        #[serde(default)]
        rejoin: bool,
    },
    BrickRelease {
        brick: Brick,
    },
    BricksRun {
        volume: String,
        /// Try again bricks that went offline.
        #[serde(default)]
        force: bool,
        /// The log index of the change to act on: applied here first.
        #[serde(default)]
        after: Option<u64>,
    },
    LocalStatus {
        volume: String,
    },
    /// `pool credentials create|list|revoke`: administrator credentials
    /// (read-only ones too) issued for use away from the servers.
    PoolCredentials {
        op: CredentialOp,
    },
    /// Every server of the pool, or the one on `host`, issues itself new
    /// certificates (`pool rotate-certs`); the answer says which did.
    RotateCerts {
        host: Option<String>,
    },
    /// This server issues itself new certificates: sent by the server
    /// that was asked `RotateCerts`.
    RotateOwnCerts,
    /// The certificates (SHA-256, hex) server `uuid` presents now: a
    /// change, passed to the leader; sent by the server itself.
    RegisterCerts {
        uuid: String,
        certs: Vec<String>,
        /// The end of a rotation: those on record no longer named are
        /// retired (`Command::SetCerts`).
        #[serde(default)]
        retire: bool,
    },
    /// A brick's host found it listening on another port than the state
    /// says: a change, passed to the leader.
    BrickPort {
        volume: String,
        host: String,
        path: String,
        port: u16,
    },
    /// A task started or ended: a change, passed to the leader.
    Task {
        volume: String,
        task: super::state::Task,
    },
    /// `volume heal NAME …`.
    Heal {
        name: String,
        op: HealOp,
    },
    /// `volume profile NAME start|stop|info [incremental]`.
    VolumeProfile {
        name: String,
        op: ProfileOp,
    },
    /// `volume status NAME detail|clients|mem|inode|fd`: every brick's
    /// process, file system and connections.
    VolumeBrickDetails {
        name: String,
    },
    /// `volume statedump NAME`: every brick's dump, written on the daemon
    /// asked.
    VolumeStatedump {
        name: String,
    },
    /// `volume top NAME …`: every brick's (or one brick's) top lists.
    VolumeTop {
        name: String,
        brick: Option<String>,
    },
    /// `volume rebalance NAME [fix-layout] start | stop`: a change, on the
    /// leader (which runs the rebalance).
    VolumeRebalance {
        name: String,
        op: RebalanceOp,
    },
    /// `volume remove-brick NAME BRICK... start|stop|commit|force`: a
    /// change, on the leader.
    VolumeRemoveBrick {
        name: String,
        bricks: Vec<String>,
        op: RemoveOp,
        /// `replica N` given: with a count below the volume's, the bricks
        /// leave their sets (`force` only: no data moves).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replica: Option<usize>,
    },
    /// `volume replace-brick NAME FROM TO commit force`: a change, on the
    /// leader.
    VolumeReplaceBrick {
        name: String,
        from: String,
        to: String,
    },
    /// `volume reset-brick NAME BRICK start` (`down`), or `... BRICK
    /// BRICK commit [force]`: a change, on the leader.
    VolumeResetBrick {
        name: String,
        brick: String,
        down: bool,
    },
    /// How a server's share of a rebalance goes: a change
    /// (`Command::SetTaskRow`), passed to the leader.
    TaskRow {
        volume: String,
        task: String,
        row: super::state::TaskRow,
    },
}

/// What `volume remove-brick NAME BRICK...` asks for (its status is read
/// from the volume's task).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum RemoveOp {
    /// Empty the bricks' replica sets (a rebalance).
    Start,
    /// Cancel: the bricks stay in the volume.
    Stop,
    /// Take the emptied sets out.
    Commit,
    /// Take the sets out now, their files with them.
    Force,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum RebalanceOp {
    /// Layouts only (`fix-layout start`), or layouts and files (`start`).
    Start {
        migrate: bool,
    },
    Stop,
}

/// What `volume profile` asks for.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum ProfileOp {
    Start,
    Stop,
    /// Each brick's figures since the start and since the last `info`
    /// (`incremental`: only the latter).
    Info,
}

/// One brick's answer to `volume profile info` or `volume top`: its
/// report, or why there is none.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BrickReport<T> {
    pub brick: String,
    pub report: Option<T>,
    pub error: Option<String>,
}

/// What `volume heal` asks for.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum HealOp {
    /// Heal what the index names, now.
    Index,
    /// Heal every object of the volume.
    Full,
    Info,
    InfoSummary,
    InfoSplitBrain,
    /// What is pending, with split-brain as the healers last found it
    /// instead of judged again (`volume heal VOL --wait`'s progress: every
    /// judgment reads every copy of every entry).
    Progress,
    Statistics,
    /// Resolve split-brain: `how` is bigger-file, latest-mtime or
    /// source-brick (with `source`); `file` a path in the volume.
    SplitBrain {
        how: String,
        file: Option<String>,
        source: Option<String>,
    },
}

/// The answer to `volume heal`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HealReport {
    pub message: String,
    pub bricks: Vec<crate::heal::BrickHeal>,
    pub crawls: Vec<crate::heal::Crawl>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BrickStatus {
    pub brick: String,
    pub port: Option<u16>,
    pub pid: Option<u32>,
    pub online: bool,
    /// Why a brick that went offline stays so (its health check failed…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A peer as this daemon sees it now.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PeerState {
    pub peer: Peer,
    pub connected: bool,
    /// Seconds since it was last heard from (None: not since this daemon
    /// started).
    pub last_seen_secs: Option<u64>,
    /// Its part in the replicated state: `leader`, `voter` or `learner`.
    #[serde(default)]
    pub role: String,
}

/// A mounted client, as it introduces itself to the daemon it follows.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub struct ClientInfo {
    pub host: String,
    pub pid: u32,
    pub mount: String,
}

/// A client a daemon heard from: who, the graph version it runs, and how
/// many seconds ago it last asked.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClientSeen {
    pub client: ClientInfo,
    /// The daemon it follows.
    pub server: String,
    pub version: Option<u64>,
    pub seen_secs_ago: u64,
}

/// What `volume credentials` does.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum CredentialOp {
    /// Issue a client credential named `name`; the answer is its PEM.
    Create {
        name: String,
        read_only: bool,
        /// Bound to this uid and gid (None: its requests run as claimed).
        #[serde(default)]
        identity: Option<(u32, u32)>,
    },
    List,
    Revoke {
        name: String,
    },
    /// Issue credential `name` again: a new certificate for the same
    /// grant; the answer is its PEM. The old one is retired.
    Rotate {
        name: String,
    },
}

impl Request {
    /// Whether it only asks (what a read-only administrator may send).
    pub fn is_read_only(&self) -> bool {
        match self {
            Request::PeerList
            | Request::VolumeInfo { .. }
            | Request::VolumeStatus { .. }
            | Request::VolumeClients { .. }
            | Request::GetVolDesc { .. }
            | Request::Portmap { .. } => true,
            Request::VolumeCredentials { op, .. } | Request::PoolCredentials { op } => {
                matches!(op, CredentialOp::List)
            }
            Request::VolumeTop { .. }
            | Request::VolumeBrickDetails { .. }
            | Request::VolumeProfile {
                op: ProfileOp::Info,
                ..
            } => true,
            Request::Heal { op, .. } => matches!(
                op,
                HealOp::Info
                    | HealOp::InfoSummary
                    | HealOp::InfoSplitBrain
                    | HealOp::Progress
                    | HealOp::Statistics
            ),
            Request::Fresh(inner) => inner.is_read_only(),
            _ => false,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Response {
    Credentials(Vec<super::state::IssuedCredential>),
    Ok(String),
    Err(String),
    Peers {
        me: Peer,
        peers: Vec<Peer>,
        /// Each peer's liveness, in the order of `peers`.
        #[serde(default)]
        states: Vec<PeerState>,
    },
    Volumes(Vec<Volume>),
    Status(Vec<(Volume, Vec<BrickStatus>)>),
    VolDesc(VolDesc),
    Port(u16),
    Joined {
        me: Peer,
        /// The certificates it presents from now on (SHA-256, hex).
        #[serde(default)]
        certs: Vec<String>,
    },
    Bricks(Vec<BrickStatus>),
    Heal(HealReport),
    Profile(Vec<BrickReport<crate::brick::profile::ProfileReport>>),
    Top(Vec<BrickReport<crate::brick::profile::TopReport>>),
    BrickDetails(Vec<BrickReport<crate::process::status::BrickDetail>>),
    Clients(Vec<ClientSeen>),
    /// A Raft answer (`consensus::network::Reply`).
    Raft(Box<serde_json::value::RawValue>),
    /// A change made on the leader, committed at log index `index`.
    Committed {
        msg: String,
        index: u64,
    },
    /// The leader's committed index (`ReadIndex`).
    Index(u64),
    /// The answer to a heartbeat: the answering daemon heard from every
    /// server it knows within `within_ms`, except the `later` ones (uuid,
    /// milliseconds ago; None: never). Small when all is well.
    Liveness {
        within_ms: u64,
        later: Vec<(String, Option<u64>)>,
    },
}

/// How long clients and bricks wait before asking their daemon again when
/// it could not answer (down, or the volume stopped).
pub const FOLLOW_RETRY: Duration = Duration::from_secs(2);
/// How long a daemon may take to answer `WatchVolDesc` (it answers
/// within 25 s even when nothing changed) before it is given up on.
const WATCH_ANSWERED: Duration = Duration::from_secs(60);

/// Follows volume `name`'s description at the daemon at `mgmt`: hands
/// `changed` each version other than `known` (the one already in use, if
/// any) as soon as the daemon has it (`WatchVolDesc` waits on the daemon
/// for a change), on a connection kept open to each daemon. `mgmts` are
/// the daemons to ask, in order: one that does not answer is left for the
/// next at once (a mount's `backup-volfile-servers`); after a round of
/// failures all are asked again after `FOLLOW_RETRY`. With `options_only`, the descriptions handed
/// have an empty graph (`WatchVolDesc`). Runs until the task is dropped.
pub async fn follow_volume(
    mgmts: &[String],
    name: &str,
    mut known: Option<u64>,
    client: Option<ClientInfo>,
    options_only: bool,
    mut changed: impl FnMut(VolDesc),
) {
    // One connection to each daemon, kept open from one question to the
    // next (a brick's start used to open two).
    // Any daemon of the pool's CA: what it hands includes the record that
    // the connections to the bricks are checked against, which a client
    // that missed a rotation must be able to learn again.
    let mut channels: Vec<Channel> = mgmts
        .iter()
        .map(|m| Channel {
            trust: Trust::Ca,
            ..Channel::new(m)
        })
        .collect();
    let mut at = 0;
    let mut failed = 0;
    loop {
        let req = Request::WatchVolDesc {
            name: name.to_string(),
            known,
            client: client.clone(),
            options_only,
        };
        match channels[at].ask(&req, WATCH_ANSWERED).await {
            Ok(Response::VolDesc(d)) => {
                failed = 0;
                if known != Some(d.version) {
                    known = Some(d.version);
                    changed(d);
                }
            }
            _ => {
                at = (at + 1) % mgmts.len();
                failed += 1;
                if failed >= mgmts.len() {
                    failed = 0;
                    tokio::time::sleep(FOLLOW_RETRY).await;
                }
            }
        }
    }
}

/// How clients and the healer connect to bricks (`graph::Env`): over TCP,
/// to the brick's port in the volume's description (the replicated
/// state), or to the one the brick host's daemon gives.
pub fn graph_env() -> Env {
    env_with_key(None)
}

/// The environment of the pool's own graphs of a volume (self-heal,
/// rebalance): their handshakes carry the volume's key (`Volume::key`),
/// so that `auth.allow` and `auth.reject` do not apply to them.
pub fn internal_env(key: &str) -> Env {
    env_with_key((!key.is_empty()).then(|| key.to_string()))
}

fn env_with_key(key: Option<String>) -> Env {
    Env {
        connect: Arc::new(move |d: &XlDesc, link| {
            let param = |k: &str| {
                d.param(k)
                    .map(str::to_string)
                    .ok_or_else(|| anyhow::anyhow!("{}: protocol/client needs {k}", d.name))
            };
            let port = d.param("port").and_then(|p| p.parse().ok());
            let resolve = port_resolver(param("mgmt")?, param("brick")?, param("host")?, port);
            Ok(Arc::new(ProtocolClient::new(
                d.name.clone(),
                param("brick")?,
                key.clone(),
                resolve,
                link,
            )))
        }),
    }
}

/// Finds a brick's address: the port the description gives, and on every
/// fourth try, the port its host's daemon knows now (a brick that had to
/// move to another port before the change reached this client), or the
/// description's when the daemon does not answer. The state keeps the
/// ports: asking more often only loads daemons with questions about
/// bricks still starting (300 healers at a `volume start`).
fn port_resolver(mgmt: String, brick: String, host: String, known: Option<u16>) -> Resolver {
    Arc::new(move |failed| {
        let (mgmt, brick, host) = (mgmt.clone(), brick.clone(), host.clone());
        Box::pin(async move {
            let port = match known {
                Some(p) if failed % 4 != 3 => p,
                _ => match portmap(&mgmt, brick).await {
                    Ok(p) => p,
                    Err(e) => known.ok_or(e)?,
                },
            };
            let mut addrs = tokio::net::lookup_host((host.as_str(), port)).await?;
            addrs
                .next()
                .ok_or_else(|| std::io::Error::other(format!("{host} has no address")))
        })
    })
}

/// Asks a brick host's daemon which port the brick listens on.
async fn portmap(mgmt: &str, brick: String) -> std::io::Result<u16> {
    match call(mgmt, &Request::Portmap { path: brick }).await {
        Ok(Response::Port(p)) => Ok(p),
        Ok(Response::Err(e)) => Err(std::io::Error::other(e)),
        Ok(other) => Err(std::io::Error::other(format!(
            "unexpected answer {other:?}"
        ))),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

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
async fn open(addr: &str, trust: Trust) -> Result<tls::Stream, String> {
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
        Ok(Err(e)) => Err(format!("cannot reach the management daemon at {addr}: {e}")),
        Err(_) => Err(format!(
            "cannot reach the management daemon at {addr}: no answer within {CONNECT_TIMEOUT:?}"
        )),
    }
}

/// Sends one request to a daemon and waits for its answer.
pub async fn call(addr: &str, req: &Request) -> Result<Response, String> {
    call_via(addr, req, Trust::Record).await
}

/// `call` to any server of the pool's CA, on record or not: to tell a
/// server that it left the pool (which took it off the record).
pub async fn call_any_of_ca(addr: &str, req: &Request) -> Result<Response, String> {
    call_via(addr, req, Trust::Ca).await
}

/// Sends one request to a server not in the pool yet, reached through
/// the pin of its join token.
pub async fn call_pinned(addr: &str, req: &Request, pin: Vec<u8>) -> Result<Response, String> {
    call_via(addr, req, Trust::Pin(pin)).await
}

async fn call_via(addr: &str, req: &Request, trust: Trust) -> Result<Response, String> {
    let go = async {
        let stream = open(addr, trust).await?;
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
    tokio::time::timeout(Duration::from_secs(120), go)
        .await
        .map_err(|_| format!("the management daemon at {addr} did not answer"))?
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
                .map_err(ChannelError::Unreachable)?;
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
    pub async fn ask(&self, addr: &str, req: &Request, ttl: Duration) -> Result<Response, String> {
        let text = |e| match e {
            ChannelError::Unreachable(e) | ChannelError::Failed(e) => e,
        };
        if let Some(mut ch) = self.take(addr) {
            match ch.ask(req, ttl).await.map_err(text)? {
                // Refused, and closed, as a connection opened with a
                // certificate since replaced is (`pool rotate-certs`):
                // asked again on a new one, with the credential in force.
                Response::Err(e) if e.starts_with(REFUSED) => {}
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
                let answer = Response::Err(format!("{} {n}", line.len()));
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
        assert!(matches!(r, Ok(Response::Err(e)) if e.ends_with(" a")));
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
            matches!(&r, Ok(Response::Err(e)) if e.ends_with(" b")),
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
            assert_eq!(e.split(' ').next().unwrap(), want.to_string());
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
