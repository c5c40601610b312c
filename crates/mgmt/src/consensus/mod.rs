//! The replicated cluster state: a Raft log (openraft) over the pool's
//! daemons. Every change of the volumes is a `Command` appended on the
//! leader, committed once a majority of the voters has it on disk, and
//! applied in log order on every server (`machine`). Membership is Raft's
//! own: the voters (at most five, chosen by the leader: `Daemon::balance`)
//! and the learners (every other server, which receive the log but do not
//! vote). See docs/cluster.md.
//!
//! Layout: `log` the log and vote on disk, `machine` the applied state and
//! snapshots, `network` the messages between daemons.

use crate::error::Error;
mod log;
mod machine;
pub mod network;

pub use machine::Applied;

use crate::command::Command;
use crate::state::{ClusterState, Peer};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{ChangeMembers, Config, ServerState, SnapshotPolicy};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// What applying a command gave: done, or why not (e.g. the volume was
/// deleted by a change committed just before).
pub type Outcome = Result<(), Error>;

openraft::declare_raft_types!(
    pub TypeConfig:
        D = Command,
        R = Outcome,
        NodeId = u64,
        Node = Peer,
        SnapshotData = ClusterState,
);

pub type NodeId = u64;

/// Who votes, as this server last applied it: shared by the log store (a
/// voter fsyncs its log), the state machine (which notes it) and the
/// network (a learner is sent new entries after the voters).
#[derive(Default)]
pub struct Roles {
    pub me_votes: std::sync::atomic::AtomicBool,
    pub voters: std::sync::RwLock<BTreeSet<NodeId>>,
    /// The log and state machine were shut down for good (`reset`).
    pub retired: std::sync::atomic::AtomicBool,
    /// The last entry applied here: committed, so a leader may tell a
    /// learner so along with the entries it sends (`network`).
    pub applied: watch::Sender<Option<LogId>>,
}

impl Roles {
    /// Fails once the log and state machine are retired: a write still in
    /// flight then must not land in the state directory that replaces
    /// theirs.
    pub fn live(&self) -> std::io::Result<()> {
        if self.retired.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(std::io::Error::other("this log was retired (state reset)"));
        }
        Ok(())
    }
}
pub type Raft = openraft::Raft<TypeConfig>;
type LogId = openraft::LogId<NodeId>;
type Vote = openraft::Vote<NodeId>;
type Entry = openraft::Entry<TypeConfig>;
type Membership = openraft::StoredMembership<NodeId, Peer>;
type SnapshotMeta = openraft::SnapshotMeta<NodeId, Peer>;
type Snapshot = openraft::Snapshot<TypeConfig>;

fn io_err(e: std::io::Error) -> openraft::StorageError<NodeId> {
    openraft::StorageError::from_io_error(
        openraft::ErrorSubject::Store,
        openraft::ErrorVerb::Write,
        e,
    )
}

/// Reads a JSON file; None if there is none.
fn read_json<T: serde::de::DeserializeOwned>(p: &Path) -> std::io::Result<Option<T>> {
    match std::fs::read(p) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", p.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A server's Raft id, from its uuid.
pub fn node_id(uuid: &str) -> NodeId {
    let hex: String = uuid
        .chars()
        .filter(|c| c.is_ascii_hexdigit())
        .take(16)
        .collect();
    u64::from_str_radix(&hex, 16).unwrap_or(0)
}

/// Raft's timing. A leader heartbeats every member once a second (a pool
/// of 300 on one small machine keeps up); a follower that hears nothing
/// for 3 to 6 s calls an election. The log is snapshotted every 20 to 39
/// entries and purged but for the last 5: a membership entry names every
/// server (30 KB at 300 servers), and a server that joins receives the
/// snapshot and what follows it, not a long log. Each server (`id`) has
/// its own interval in that range, so that one change does not make
/// every server of a large pool write and flush its snapshot at once (at
/// 300 servers on this machine, such a change took 0.7 s longer).
fn config(id: NodeId) -> Arc<Config> {
    let c = Config {
        cluster_name: "mortar".into(),
        heartbeat_interval: 1000,
        election_timeout_min: 3000,
        election_timeout_max: 6000,
        install_snapshot_timeout: 10_000,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(20 + id % 20),
        max_in_snapshot_log_to_keep: 5,
        ..Default::default()
    };
    Arc::new(c.validate().expect("a valid raft config"))
}

/// A voter that has heard nothing from the leader for this long (plus up
/// to `LEADER_LATE_SPREAD`, by id) looks whether the leader's daemon is
/// gone: a heartbeat comes every second.
const LEADER_LATE: Duration = Duration::from_millis(1100);
const LEADER_LATE_SPREAD: u64 = 300;

/// Calls an election at once when the leader's daemon is gone: a voter
/// whose leader is late and whose management port refuses connections
/// (its host is up, its daemon is not) does not wait out Raft's election
/// timeout (3 to 6 s), during which no change commits. A leader that is
/// only slow, or a host that does not answer at all, is left to the
/// timeout. A voter refuses its vote while it heard from the leader
/// within the election timeout, unless it is a candidate itself: so each
/// voter that finds the leader gone asks for votes, and asks again (at a
/// higher term) every `ELECT_AGAIN` while nobody leads; the first to ask
/// again is granted the votes of the others, which became candidates.
/// Voters are late by different amounts (`LEADER_LATE_SPREAD`).
async fn watch_leader(c: std::sync::Weak<Consensus>) {
    const ELECT_AGAIN: Duration = Duration::from_millis(300);
    const TRIES: u32 = 6;
    // The leader found gone, the elections called since and the next.
    let mut gone: Option<(Peer, u32, std::time::Instant)> = None;
    // A learner (most servers of a large pool) looks seldom: it may
    // become a voter.
    let mut wait = Duration::from_millis(200);
    loop {
        tokio::time::sleep(wait).await;
        let Some(c) = c.upgrade() else { return };
        let raft = c.raft();
        let (leader, votes) = {
            let m = raft.metrics();
            let m = m.borrow();
            let leader = m
                .current_leader
                .filter(|l| *l != c.id)
                .and_then(|l| m.membership_config.membership().get_node(&l).cloned());
            let votes = m
                .membership_config
                .membership()
                .voter_ids()
                .any(|v| v == c.id)
                && m.state != ServerState::Leader;
            (leader, votes)
        };
        let late = LEADER_LATE + Duration::from_millis(c.id % LEADER_LATE_SPREAD);
        let quiet = c.appended.lock().unwrap().elapsed();
        wait = Duration::from_millis(if votes { 200 } else { 1000 });
        if !votes || quiet < late {
            gone = None;
            continue;
        }
        let (peer, tries) = match (&gone, leader) {
            (Some((p, n, next)), _) => {
                if *n >= TRIES || std::time::Instant::now() < *next {
                    continue;
                }
                (p.clone(), *n)
            }
            (None, Some(l)) => (l, 0),
            (None, None) => continue,
        };
        let probe = tokio::net::TcpStream::connect(&peer.mgmt);
        match tokio::time::timeout(Duration::from_millis(300), probe).await {
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                if tries == 0 {
                    tracing::info!(leader = %peer.host, quiet_ms = quiet.as_millis(), "the leader's daemon is gone (its management port refuses connections): calling an election now");
                }
                let _ = raft.trigger().elect().await;
                let next = std::time::Instant::now() + ELECT_AGAIN;
                gone = Some((peer, tries + 1, next));
            }
            // Up but late, or its host does not answer: Raft's timeout.
            _ => {
                gone = None;
                *c.appended.lock().unwrap() = std::time::Instant::now();
            }
        }
    }
}

/// How long a change may take to commit before the CLI is told it was not.
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);
/// A leader that has not heard from a majority of voters for this long,
/// and does not within as long again, refuses changes (it is cut off).
const QUORUM_ACK_MAX_MS: u64 = 3000;

/// Why a change was not made.
#[derive(Debug)]
pub enum WriteError {
    /// This server is not the leader; the leader, if one is known.
    NotLeader(Option<Peer>),
    /// The leader has not heard from a majority of voters lately.
    NoQuorum,
    /// Anything else (timeout, raft stopped), said plainly.
    Failed(String),
}

/// The local member of the replicated state.
pub struct Consensus {
    dir: PathBuf,
    me: Peer,
    id: NodeId,
    raft: Mutex<(Raft, machine::Machine)>,
    changed: watch::Sender<u64>,
    /// When this server last took entries or a heartbeat from a leader.
    appended: Mutex<std::time::Instant>,
}

async fn open(
    dir: &Path,
    id: NodeId,
    changed: &watch::Sender<u64>,
) -> anyhow::Result<(Raft, machine::Machine)> {
    std::fs::create_dir_all(dir)?;
    // Until the membership says otherwise, this server votes (fsyncs).
    let roles = Arc::new(Roles {
        me_votes: true.into(),
        ..Default::default()
    });
    let log = log::LogStore::open(dir, id, roles.clone())?;
    let sm = machine::Machine::open(dir, changed.clone(), id, roles.clone())?;
    let net = network::Network { roles };
    let raft = Raft::new(id, config(id), net, log, sm.clone()).await?;
    Ok((raft, sm))
}

impl Consensus {
    /// Opens the log in `dir` and starts Raft; a server that belongs to
    /// no pool yet forms one of its own.
    pub async fn start(dir: &Path, me: Peer) -> anyhow::Result<Arc<Consensus>> {
        let id = node_id(&me.uuid);
        let changed = watch::channel(0).0;
        let pair = open(dir, id, &changed).await?;
        let c = Arc::new(Consensus {
            dir: dir.to_path_buf(),
            me,
            id,
            raft: Mutex::new(pair),
            changed,
            appended: Mutex::new(std::time::Instant::now()),
        });
        c.alone_if_new().await?;
        tokio::spawn(watch_leader(Arc::downgrade(&c)));
        Ok(c)
    }

    /// Hands a Raft message from a peer to the local Raft (`network::serve`),
    /// noting when a leader's entries or heartbeat were taken.
    pub async fn receive(&self, e: network::Envelope) -> Result<network::Reply, Error> {
        let reply = network::serve(&self.raft(), self.id, e).await?;
        if let network::Reply::Append(Ok(_)) = &reply {
            *self.appended.lock().unwrap() = std::time::Instant::now();
        }
        Ok(reply)
    }

    async fn alone_if_new(&self) -> anyhow::Result<()> {
        let raft = self.raft();
        if !raft.is_initialized().await? {
            let members = BTreeMap::from([(self.id, self.me.clone())]);
            raft.initialize(members).await?;
            tracing::info!(id = self.id, "a pool of one: this server");
        }
        Ok(())
    }

    pub fn raft(&self) -> Raft {
        self.raft.lock().unwrap().0.clone()
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The applied state.
    pub fn applied(&self) -> Arc<Applied> {
        self.raft.lock().unwrap().1.applied()
    }

    /// Wakes on every change of the applied state.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Forgets the whole replicated state and starts over empty, waiting to
    /// be added to a pool (`join`) or, with `alone`, as a pool of one.
    pub async fn reset(&self, alone: bool) -> anyhow::Result<()> {
        let old = self.raft();
        let _ = old.shutdown().await;
        self.raft.lock().unwrap().1.retire();
        // A write of the old state machine may still be finishing (a
        // daemon probed a moment after it started, while forming its pool
        // of one); later ones fail (`retire`): try again until the
        // directory is gone.
        let mut tries = 0;
        while let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tries += 1;
            if e.kind() == std::io::ErrorKind::NotFound {
                break;
            }
            if tries >= 40 {
                return Err(e.into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let pair = open(&self.dir, self.id, &self.changed).await?;
        *self.raft.lock().unwrap() = pair;
        self.changed.send_modify(|n| *n += 1);
        if alone {
            self.alone_if_new().await?;
        }
        Ok(())
    }

    /// The leader as this server knows it.
    pub fn leader(&self) -> Option<(NodeId, Peer)> {
        let raft = self.raft();
        let m = raft.metrics();
        let m = m.borrow();
        let id = m.current_leader?;
        let node = m.membership_config.membership().get_node(&id)?.clone();
        Some((id, node))
    }

    pub fn is_leader(&self) -> bool {
        let raft = self.raft();
        let m = raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader
    }

    /// The index of the last entry applied here (0: none yet).
    pub fn applied_index(&self) -> u64 {
        self.raft.lock().unwrap().1.applied_index()
    }

    /// The voters and the learners, by id.
    pub fn roles(&self) -> (BTreeSet<NodeId>, BTreeSet<NodeId>) {
        let a = self.applied();
        let m = a.membership.membership();
        (m.voter_ids().collect(), m.learner_ids().collect())
    }

    /// Every member, with its id.
    pub fn members(&self) -> Vec<(NodeId, Peer)> {
        self.applied()
            .membership
            .membership()
            .nodes()
            .map(|(i, p)| (*i, p.clone()))
            .collect()
    }

    /// Whether this server may commit a change now: it is the leader and
    /// has heard from a majority of the voters within `QUORUM_ACK_MAX_MS`.
    /// A leader just elected, or a busy one, is given as long again to
    /// hear from them before it refuses.
    pub async fn may_write(&self) -> Result<(), WriteError> {
        let raft = self.raft();
        let mut rx = raft.metrics();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(QUORUM_ACK_MAX_MS);
        loop {
            {
                let m = rx.borrow_and_update();
                if m.state != ServerState::Leader {
                    drop(m);
                    return Err(WriteError::NotLeader(self.leader().map(|l| l.1)));
                }
                let alone = m.membership_config.membership().voter_ids().eq([self.id]);
                if alone
                    || m.millis_since_quorum_ack
                        .is_some_and(|ms| ms <= QUORUM_ACK_MAX_MS)
                {
                    return Ok(());
                }
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return Err(WriteError::NoQuorum);
            }
        }
    }

    /// Commits `cmd` (on the leader only) and says at which log index, or
    /// why not. Applying it may still have refused it: the outcome.
    pub async fn write(&self, cmd: Command) -> Result<(u64, Outcome), WriteError> {
        self.may_write().await?;
        let raft = self.raft();
        match tokio::time::timeout(COMMIT_TIMEOUT, raft.client_write(cmd)).await {
            Ok(Ok(r)) => Ok((r.log_id.index, r.data)),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                Err(WriteError::NotLeader(f.leader_node))
            }
            Ok(Err(e)) => Err(WriteError::Failed(e.to_string())),
            Err(_) => Err(WriteError::Failed(format!(
                "the change was not committed within {} s: a majority of the voters did not confirm it (it is applied only if they do once they are reachable again)",
                COMMIT_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Adds a server as a learner and waits until it has the log.
    pub async fn add_learner(&self, peer: Peer) -> Result<(), Error> {
        let id = node_id(&peer.uuid);
        let raft = self.raft();
        match tokio::time::timeout(COMMIT_TIMEOUT, raft.add_learner(id, peer, true)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string().into()),
            Err(_) => Err("the new server did not catch up in time".into()),
        }
    }

    /// Changes the membership (voters, or removing servers).
    pub async fn change(
        &self,
        change: ChangeMembers<NodeId, Peer>,
        retain: bool,
    ) -> Result<(), Error> {
        let raft = self.raft();
        match tokio::time::timeout(COMMIT_TIMEOUT, raft.change_membership(change, retain)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string().into()),
            Err(_) => Err("the membership change was not committed in time".into()),
        }
    }

    /// Waits (a while) until this server has applied log index `index`.
    pub async fn applied_at_least(&self, index: u64) -> bool {
        let mut rx = self.subscribe();
        let done = |c: &Consensus| c.applied_index() >= index;
        let wait = async {
            while !done(self) {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), wait).await;
        done(self)
    }

    /// The last index committed on the leader (asked of the leader when
    /// this server is not it): what an up-to-date read must have applied.
    pub async fn read_index(&self) -> Result<u64, Error> {
        let raft = self.raft();
        match tokio::time::timeout(COMMIT_TIMEOUT, raft.ensure_linearizable()).await {
            Ok(Ok(l)) => Ok(l.map_or(0, |l| l.index)),
            Ok(Err(e)) => Err(e.to_string().into()),
            Err(_) => Err("a majority of the voters did not confirm the leader in time".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Volume;
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
    use openraft::{CommittedLeaderId, EntryPayload, RaftLogReader, RaftSnapshotBuilder};

    fn vol(name: &str) -> Volume {
        Volume::sample(name)
    }

    fn entry(term: u64, index: u64, cmd: Command) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(cmd),
        }
    }

    #[tokio::test]
    async fn the_log_survives_a_reopen_and_is_truncated_and_purged_on_disk() {
        let d = tempfile::tempdir().unwrap();
        let mut log = log::LogStore::open(d.path(), 2, Default::default()).unwrap();
        let entries: Vec<Entry> = (1..=5)
            .map(|i| entry(1, i, Command::AddVolume(vol(&format!("v{i}")))))
            .collect();
        log.blocking_append(entries).await.unwrap();
        log.save_vote(&Vote::new(3, 7)).await.unwrap();
        log.truncate(LogId::new(CommittedLeaderId::new(1, 1), 4))
            .await
            .unwrap();
        log.purge(LogId::new(CommittedLeaderId::new(1, 1), 1))
            .await
            .unwrap();
        let mut back = log::LogStore::open(d.path(), 2, Default::default()).unwrap();
        let st = back.get_log_state().await.unwrap();
        assert_eq!(st.last_purged_log_id.unwrap().index, 1);
        assert_eq!(st.last_log_id.unwrap().index, 3);
        let got = back.try_get_log_entries(0..10).await.unwrap();
        assert_eq!(
            got.iter().map(|e| e.log_id.index).collect::<Vec<_>>(),
            [2, 3]
        );
        assert_eq!(back.read_vote().await.unwrap(), Some(Vote::new(3, 7)));
    }

    #[tokio::test]
    async fn purged_segments_go_whole_and_a_log_of_one_file_per_entry_is_moved_into_one() {
        let d = tempfile::tempdir().unwrap();
        let id = |i| LogId::new(CommittedLeaderId::new(1, 1), i);
        let segments = || {
            let mut v: Vec<String> = std::fs::read_dir(d.path().join("log"))
                .unwrap()
                .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let mut log = log::LogStore::open(d.path(), 2, Default::default()).unwrap();
        let batch = |r: std::ops::RangeInclusive<u64>| -> Vec<Entry> {
            r.map(|i| entry(1, i, Command::AddVolume(vol(&format!("v{i}")))))
                .collect()
        };
        log.blocking_append(batch(1..=4)).await.unwrap();
        log.blocking_append(batch(5..=6)).await.unwrap();
        assert_eq!(segments(), [format!("{:020}.jsonl", 1)]);
        // Entries 7 on go to a new segment; the first stays (5, 6 kept).
        log.purge(id(4)).await.unwrap();
        log.blocking_append(batch(7..=9)).await.unwrap();
        assert_eq!(
            segments(),
            [format!("{:020}.jsonl", 1), format!("{:020}.jsonl", 7)]
        );
        log.purge(id(7)).await.unwrap();
        assert_eq!(segments(), [format!("{:020}.jsonl", 7)]);
        log.blocking_append(batch(10..=10)).await.unwrap();
        log.truncate(id(9)).await.unwrap();
        log.blocking_append(batch(9..=9)).await.unwrap();
        let mut back = log::LogStore::open(d.path(), 2, Default::default()).unwrap();
        let got = back.try_get_log_entries(0..20).await.unwrap();
        assert_eq!(
            got.iter().map(|e| e.log_id.index).collect::<Vec<_>>(),
            [8, 9]
        );
        // An earlier version's log: one file per entry (3 is lost).
        let e = tempfile::tempdir().unwrap();
        std::fs::create_dir(e.path().join("log")).unwrap();
        std::fs::write(
            e.path().join("purged.json"),
            serde_json::to_vec(&id(1)).unwrap(),
        )
        .unwrap();
        for x in batch(1..=5).into_iter().filter(|x| x.log_id.index != 3) {
            let p = e
                .path()
                .join("log")
                .join(format!("{:020}.json", x.log_id.index));
            std::fs::write(p, serde_json::to_vec(&x).unwrap()).unwrap();
        }
        let mut old = log::LogStore::open(e.path(), 2, Default::default()).unwrap();
        let got = old.try_get_log_entries(0..20).await.unwrap();
        assert_eq!(got.iter().map(|e| e.log_id.index).collect::<Vec<_>>(), [2]);
        let files: Vec<_> = std::fs::read_dir(e.path().join("log")).unwrap().collect();
        assert_eq!(files.len(), 1);
        let mut again = log::LogStore::open(e.path(), 2, Default::default()).unwrap();
        assert_eq!(
            again.get_log_state().await.unwrap().last_log_id,
            Some(id(2))
        );
    }

    #[tokio::test]
    async fn the_committed_index_is_kept_but_never_past_a_hole_in_the_log() {
        let d = tempfile::tempdir().unwrap();
        let mut log = log::LogStore::open(d.path(), 2, Default::default()).unwrap();
        assert_eq!(log.read_committed().await.unwrap(), None);
        let entries: Vec<Entry> = (0..=5)
            .map(|i| entry(1, i, Command::AddVolume(vol(&format!("v{i}")))))
            .collect();
        log.blocking_append(entries).await.unwrap();
        let at = |i| Some(LogId::new(CommittedLeaderId::new(1, 1), i));
        log.save_committed(at(5)).await.unwrap();
        // Written again in place: nothing of the one before is left.
        log.save_committed(at(4)).await.unwrap();
        let mut back = log::LogStore::open(d.path(), 2, Default::default()).unwrap();
        assert_eq!(back.read_committed().await.unwrap(), at(4));
        // A learner's log is not fsynced: a crash tore it in entry 3.
        let seg = d.path().join("log").join(format!("{:020}.jsonl", 0));
        let b = std::fs::read(&seg).unwrap();
        let third_ends = b.iter().enumerate().filter(|(_, c)| **c == b'\n').nth(2);
        let f = std::fs::File::options().write(true).open(&seg).unwrap();
        f.set_len(third_ends.unwrap().0 as u64 + 10).unwrap();
        let mut back = log::LogStore::open(d.path(), 2, Default::default()).unwrap();
        assert_eq!(back.read_committed().await.unwrap(), at(2));
        // A torn file is as good as none.
        std::fs::write(d.path().join("committed.json"), b"{\"lea").unwrap();
        assert_eq!(back.read_committed().await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_restarted_server_applies_its_log_again() {
        let d = tempfile::tempdir().unwrap();
        let me = Peer {
            uuid: "00000000-0000-0000-0000-000000000001".into(),
            host: "h".into(),
            mgmt: "127.0.0.1:1".into(),
        };
        let c = Consensus::start(d.path(), me.clone()).await.unwrap();
        for _ in 0..100 {
            if c.is_leader() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (_, added) = c.write(Command::AddVolume(vol("v"))).await.unwrap();
        added.unwrap();
        let set = Command::SetOption {
            volume: "v".into(),
            key: "k".into(),
            value: "1".into(),
        };
        let (index, _) = c.write(set).await.unwrap();
        c.raft().shutdown().await.unwrap();
        drop(c);
        let back = Consensus::start(d.path(), me).await.unwrap();
        // Applied again at start, before any leader is heard from.
        let a = back.applied();
        assert!(a.last.unwrap().index >= index, "{:?}", a.last);
        assert_eq!(a.state.volumes["v"].options["k"], "1");
        back.raft().shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn a_state_written_by_an_earlier_version_is_used_until_a_newer_snapshot() {
        let d = tempfile::tempdir().unwrap();
        let mut m =
            machine::Machine::open(d.path(), watch::channel(0).0, 1, Default::default()).unwrap();
        m.apply(vec![entry(1, 1, Command::AddVolume(vol("old")))])
            .await
            .unwrap();
        m.build_snapshot().await.unwrap();
        m.apply(vec![entry(1, 2, Command::AddVolume(vol("new")))])
            .await
            .unwrap();
        let legacy = d.path().join("machine.json");
        let at_2 = serde_json::to_vec(&*m.applied()).unwrap();
        std::fs::write(&legacy, &at_2).unwrap();
        let mut back =
            machine::Machine::open(d.path(), watch::channel(0).0, 1, Default::default()).unwrap();
        assert_eq!(back.applied().last.unwrap().index, 2);
        assert!(back.applied().state.volumes.contains_key("new"));
        back.apply(vec![entry(
            1,
            3,
            Command::RemoveVolume {
                volume: "old".into(),
            },
        )])
        .await
        .unwrap();
        back.build_snapshot().await.unwrap();
        assert!(!legacy.exists());
        // One older than the snapshot is not used.
        std::fs::write(&legacy, &at_2).unwrap();
        let again =
            machine::Machine::open(d.path(), watch::channel(0).0, 1, Default::default()).unwrap();
        assert_eq!(again.applied().last.unwrap().index, 3);
        assert!(!again.applied().state.volumes.contains_key("old"));
    }

    #[tokio::test]
    async fn a_retired_log_writes_nothing_more() {
        let d = tempfile::tempdir().unwrap();
        let roles: Arc<Roles> = Default::default();
        let mut log = log::LogStore::open(d.path(), 2, roles.clone()).unwrap();
        log.save_vote(&Vote::new(3, 7)).await.unwrap();
        let m = machine::Machine::open(d.path(), watch::channel(0).0, 2, roles).unwrap();
        m.retire();
        let late = vec![entry(3, 1, Command::AddVolume(vol("late")))];
        assert!(log.blocking_append(late).await.is_err());
        assert!(log.save_vote(&Vote::new(4, 7)).await.is_err());
        let mut back = log::LogStore::open(d.path(), 2, Default::default()).unwrap();
        assert!(back.get_log_state().await.unwrap().last_log_id.is_none());
        assert_eq!(back.read_vote().await.unwrap(), Some(Vote::new(3, 7)));
    }

    #[tokio::test]
    async fn the_machine_applies_in_order_and_a_snapshot_brings_another_to_the_same_state() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut a =
            machine::Machine::open(d1.path(), watch::channel(0).0, 1, Default::default()).unwrap();
        let set = Command::SetOption {
            volume: "v".into(),
            key: "k".into(),
            value: "1".into(),
        };
        let out = a
            .apply(vec![
                entry(1, 1, set.clone()),
                entry(1, 2, Command::AddVolume(vol("v"))),
                entry(1, 3, set),
            ])
            .await
            .unwrap();
        // Refused where the volume did not exist yet, applied after.
        assert!(out[0].is_err() && out[1].is_ok() && out[2].is_ok());
        assert_eq!(a.applied().state.volumes["v"].options["k"], "1");
        // Nothing is written per batch: a reopened machine starts from its
        // snapshot (none yet), and Raft applies the log again.
        let reopened =
            machine::Machine::open(d1.path(), watch::channel(0).0, 1, Default::default()).unwrap();
        assert!(reopened.applied().last.is_none());

        let snap = a.build_snapshot().await.unwrap();
        let reopened =
            machine::Machine::open(d1.path(), watch::channel(0).0, 1, Default::default()).unwrap();
        assert_eq!(reopened.applied().state.volumes["v"].options["k"], "1");
        assert_eq!(reopened.applied().last.unwrap().index, 3);
        let mut b =
            machine::Machine::open(d2.path(), watch::channel(0).0, 1, Default::default()).unwrap();
        b.install_snapshot(&snap.meta, snap.snapshot).await.unwrap();
        let got =
            machine::Machine::open(d2.path(), watch::channel(0).0, 1, Default::default()).unwrap();
        assert_eq!(got.applied().state.volumes, a.applied().state.volumes);
        assert_eq!(got.applied().last, a.applied().last);
        let mut got = got;
        assert!(got.get_current_snapshot().await.unwrap().is_some());
    }
}
