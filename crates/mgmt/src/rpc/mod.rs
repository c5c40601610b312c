//! The management RPC: one JSON request per line, one JSON response per
//! line, over TCP. Used by the CLI, by mounting clients (volume descriptions
//! and brick ports) and between peers' daemons.
//!
//! Layout: `mod.rs` the messages; `wire` how they travel; `follow` volume
//! descriptions followed.

use super::state::{Brick, Peer, Volume};
use crate::error::Error;
use mortar_core::desc::VolDesc;
use mortar_protocol::tls;
use serde::{Deserialize, Serialize};
use std::time::Duration;

mod follow;
mod wire;

pub use follow::{follow_graph, follow_volume, graph_env, internal_env, FOLLOW_RETRY};
pub use wire::{
    call, call_any_of_ca, call_pinned, mgmt_addr, read_line_within, send_json, Channel,
    ChannelError, Pool, LINE_TIMEOUT, MAX_LINE, POOL_IDLE, REFUSED,
};

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
        /// Parity bricks per disperse set (0: `replica` is a replica count;
        /// else it is the disperse count).
        #[serde(default)]
        redundancy: usize,
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
        /// The bricks the client reads around because they answer late
        /// (`host:/path`): what `volume status` shows as slow.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        slow: Vec<String>,
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
    /// This server's NFS server, for `volume status`.
    LocalNfs,
    /// `snapshot create|delete|list|info|status`.
    Snapshot {
        op: SnapshotOp,
    },
    /// Snapshot `name`'s copy beside this server's brick `brick` (a
    /// path): sent by the daemon that shows, deletes or restores a
    /// snapshot.
    SnapshotCopy {
        brick: String,
        name: String,
        op: CopyOp,
    },
    /// `volume get all KEY|all`: the pool's options in force.
    PoolOptions,
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
    /// `volume bitrot NAME scrub status|ondemand`: from the CLI, every
    /// server with a brick of the volume is asked (`here`: this server's
    /// scrubber only).
    Scrub {
        name: String,
        op: ScrubOp,
        #[serde(default)]
        here: bool,
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

/// What `volume bitrot NAME scrub` asks of the scrubbers.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum ScrubOp {
    Status,
    /// Scrub now.
    Ondemand,
}

/// The answer to `volume heal`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HealReport {
    pub message: String,
    pub bricks: Vec<mortar_heal::BrickHeal>,
    pub crawls: Vec<mortar_heal::Crawl>,
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
    /// The mounts (`host:/mount`) that read around it because it answers
    /// late, as they told their daemons lately.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slow_for: Vec<String>,
}

/// A started volume's processes, as `volume status` shows them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VolumeStatus {
    pub volume: Volume,
    pub bricks: Vec<BrickStatus>,
    /// The NFS server of every server of the pool, when the volume is
    /// served over NFS (`nfs.disable off`).
    #[serde(default)]
    pub nfs: Vec<NfsStatus>,
}

/// A server's NFS server (docs/nfs.md).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NfsStatus {
    pub host: String,
    /// Where it listens (MOUNT and NFS on the same port).
    pub port: Option<u16>,
    pub pid: Option<u32>,
    /// It runs and accepts connections at `port`.
    pub online: bool,
    /// The volumes it serves.
    pub volumes: Vec<String>,
    /// Why it is not online (it exited, or did not answer).
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

impl ClientInfo {
    /// This process, serving `mount` (a mount point, or what else it
    /// serves the volume as).
    pub fn this_process(mount: String) -> ClientInfo {
        ClientInfo {
            host: rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned(),
            pid: std::process::id(),
            mount,
        }
    }
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
    /// The bricks it reads around because they answer late.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slow: Vec<String>,
}

/// What `snapshot` does (GlusterFS's grammar: docs/snapshots.md).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum SnapshotOp {
    /// `snapshot create NAME VOLUME [no-timestamp] [description TEXT]`:
    /// `name` gets the time appended (`_GMT-YYYY.MM.DD-hh.mm.ss`) unless
    /// `no_timestamp`.
    Create {
        name: String,
        volume: String,
        description: String,
        no_timestamp: bool,
    },
    Delete {
        which: SnapshotSel,
    },
    /// `snapshot restore NAME`: every brick of its volume (stopped)
    /// brought back to its copy.
    Restore {
        name: String,
    },
    /// `snapshot clone CLONE NAME`: a new volume CLONE made of writable
    /// copies of snapshot NAME's.
    Clone {
        clone: String,
        name: String,
    },
    /// `snapshot list [VOLUME]`, `snapshot info …`: answered `Snapshots`.
    List {
        which: SnapshotSel,
    },
    /// `snapshot status …`: answered `SnapshotStatus`.
    Status {
        which: SnapshotSel,
    },
}

/// What is done with a brick's copy of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CopyOp {
    /// A writable copy made at `to` (`Snapshot::clone_path`), for a new
    /// volume.
    Clone {
        to: String,
    },
    /// Answered "present" or "absent".
    Check,
    Remove,
    /// The brick (its volume stopped) is brought back to the copy.
    Restore,
}

/// Which snapshots a `snapshot` command is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotSel {
    All,
    Name(String),
    Volume(String),
}

/// A snapshot, and where each brick's copy stands.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SnapshotStatus {
    pub snapshot: super::state::Snapshot,
    pub bricks: Vec<SnapshotCopy>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SnapshotCopy {
    /// HOST:/PATH of the copy.
    pub path: String,
    pub mechanism: String,
    /// Whether it is there (None: its server did not say, `error` why).
    pub present: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
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
            | Request::PoolOptions
            | Request::LocalNfs
            | Request::Portmap { .. } => true,
            Request::Snapshot { op } => {
                matches!(op, SnapshotOp::List { .. } | SnapshotOp::Status { .. })
            }
            Request::VolumeCredentials { op, .. } | Request::PoolCredentials { op } => {
                matches!(op, CredentialOp::List)
            }
            Request::VolumeTop { .. }
            | Request::VolumeBrickDetails { .. }
            | Request::VolumeProfile {
                op: ProfileOp::Info,
                ..
            } => true,
            Request::Scrub { op, .. } => *op == ScrubOp::Status,
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
    Snapshots(Vec<super::state::Snapshot>),
    SnapshotStatus(Vec<SnapshotStatus>),
    Ok(String),
    Err(Error),
    Peers {
        me: Peer,
        peers: Vec<Peer>,
        /// Each peer's liveness, in the order of `peers`.
        #[serde(default)]
        states: Vec<PeerState>,
    },
    Volumes(Vec<Volume>),
    /// Options and their values in force.
    Options(std::collections::BTreeMap<String, String>),
    Status(Vec<VolumeStatus>),
    VolDesc(VolDesc),
    Port(u16),
    Joined {
        me: Peer,
        /// The certificates it presents from now on (SHA-256, hex).
        #[serde(default)]
        certs: Vec<String>,
    },
    Bricks(Vec<BrickStatus>),
    Nfs(NfsStatus),
    Heal(HealReport),
    Scrub(Vec<mortar_heal::scrub::BrickScrub>),
    Profile(Vec<BrickReport<mortar_brick::profile::ProfileReport>>),
    Top(Vec<BrickReport<mortar_brick::profile::TopReport>>),
    BrickDetails(Vec<BrickReport<mortar_process::status::BrickDetail>>),
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
