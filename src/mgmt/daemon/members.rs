//! Membership that tells the truth: every daemon sends each voter a
//! heartbeat every `BEAT` (so a voter hears from every server), and each
//! voter answers with when it last heard from every server, so that every
//! daemon knows of every other at the cost of a few messages per server
//! (not one per pair: 300 servers send 1,500 heartbeats a second, not
//! 90,000). A peer not heard from, directly or through a voter, for `GONE`
//! is shown Disconnected, with how long ago it was last seen.
//!
//! Who votes: the leader keeps `voters_wanted` voters (all servers up to
//! three, five from five servers on), promoting connected learners and
//! replacing a voter silent for `REPLACE_AFTER` (`balance`).

use super::*;
use std::time::Instant;

/// How often each peer is sent a heartbeat.
const BEAT: Duration = Duration::from_secs(1);
/// Silence after which a peer is Disconnected.
pub(super) const GONE: Duration = Duration::from_secs(4);
/// Silence after which a voter is replaced by a connected learner.
const REPLACE_AFTER: Duration = Duration::from_secs(15);

/// How many voters a pool of `n` servers has.
fn voters_wanted(n: usize) -> usize {
    if n >= 5 {
        5
    } else {
        n.min(3)
    }
}

/// When this daemon came to know a peer, and last heard from it.
pub(super) struct Liveness {
    known: Instant,
    heard: Option<Instant>,
}

impl Liveness {
    fn new() -> Liveness {
        Liveness {
            known: Instant::now(),
            heard: None,
        }
    }

    /// How long it has been silent: since it was last heard from, or
    /// since this daemon came to know it.
    fn silent(&self) -> Duration {
        self.heard.unwrap_or(self.known).elapsed()
    }
}

impl Daemon {
    /// Notes that peer `uuid` was heard from now.
    pub(super) fn seen(&self, uuid: &str) {
        self.seen_at(uuid, Instant::now());
    }

    /// Notes that peer `uuid` was heard from at `t` (if that is later
    /// than what this daemon knew).
    fn seen_at(&self, uuid: &str, t: Instant) {
        let mut liveness = self.liveness.lock().unwrap();
        let l = liveness
            .entry(uuid.to_string())
            .or_insert_with(Liveness::new);
        if l.heard.is_none_or(|h| h < t) {
            l.heard = Some(t);
        }
    }

    /// When this daemon last heard from the servers it knows: what it
    /// answers a heartbeat with. Those heard from within two beats are
    /// summed up as one figure; the others are named.
    pub(super) fn heard_table(&self) -> Response {
        let fresh = (2 * BEAT).as_millis() as u64;
        let peers = self.state.lock().unwrap().peers.clone();
        let liveness = self.liveness.lock().unwrap();
        let mut within_ms = 0;
        let mut later = Vec::new();
        for p in peers {
            let ago = liveness
                .get(&p.uuid)
                .and_then(|l| l.heard)
                .map(|h| h.elapsed().as_millis() as u64);
            match ago {
                Some(ms) if ms <= fresh => within_ms = within_ms.max(ms),
                ago => later.push((p.uuid, ago)),
            }
        }
        Response::Liveness { within_ms, later }
    }

    /// Each peer with whether it is connected and when it was last heard
    /// from (seconds ago; None: never since this daemon started).
    ///
    /// A peer this daemon has not heard from yet counts as connected for
    /// `GONE` after it came to know it (it started, or the peer joined):
    /// a heartbeat round has not reached it yet.
    pub(super) fn peer_states(&self) -> Vec<rpc::PeerState> {
        let peers = self.state.lock().unwrap().peers.clone();
        let (voters, _) = self.consensus.roles();
        let leader = self.consensus.leader().map(|l| l.0);
        let mut liveness = self.liveness.lock().unwrap();
        peers
            .into_iter()
            .map(|p| {
                let id = consensus::node_id(&p.uuid);
                let role = if leader == Some(id) {
                    "leader"
                } else if voters.contains(&id) {
                    "voter"
                } else {
                    "learner"
                };
                let l = liveness.entry(p.uuid.clone()).or_insert_with(Liveness::new);
                rpc::PeerState {
                    connected: l.silent() < GONE,
                    last_seen_secs: l.heard.map(|t| t.elapsed().as_secs()),
                    role: role.into(),
                    peer: p,
                }
            })
            .collect()
    }

    /// Sends every voter a heartbeat every `BEAT`, for as long as the
    /// daemon runs, and learns from their answers of the other servers.
    pub(super) async fn heartbeats(self: Arc<Self>) {
        loop {
            let (voters, _) = self.consensus.roles();
            let peers: Vec<Peer> = self
                .state
                .lock()
                .unwrap()
                .peers
                .iter()
                .filter(|p| voters.contains(&consensus::node_id(&p.uuid)))
                .cloned()
                .collect();
            let beats = peers.into_iter().map(|p| {
                let me = self.clone();
                async move {
                    let req = Request::Heartbeat {
                        from: me.me.uuid.clone(),
                    };
                    let answer = tokio::time::timeout(GONE / 2, rpc::call(&p.mgmt, &req)).await;
                    if let Ok(Ok(Response::Liveness { within_ms, later })) = answer {
                        let now = Instant::now();
                        me.seen_at(&p.uuid, now);
                        let ago =
                            |ms: u64| now.checked_sub(Duration::from_millis(ms)).unwrap_or(now);
                        let peers = me.state.lock().unwrap().peers.clone();
                        for q in peers.iter().filter(|q| q.uuid != p.uuid) {
                            match later.iter().find(|(u, _)| *u == q.uuid) {
                                Some((_, Some(ms))) => me.seen_at(&q.uuid, ago(*ms)),
                                Some((_, None)) => {}
                                None => me.seen_at(&q.uuid, ago(within_ms)),
                            }
                        }
                    }
                }
            });
            futures_util::future::join_all(beats).await;
            self.check_server_quorum().await;
            self.balance().await;
            tokio::time::sleep(BEAT).await;
        }
    }

    /// How long peer `uuid` has been silent (since this daemon came to
    /// know it, if it never heard from it).
    fn silent_for(&self, uuid: &str) -> Duration {
        let mut liveness = self.liveness.lock().unwrap();
        liveness
            .entry(uuid.to_string())
            .or_insert_with(Liveness::new)
            .silent()
    }

    /// The voters this server cannot reach, named for a refusal.
    pub(super) fn unreachable_voters(&self) -> String {
        let (voters, _) = self.consensus.roles();
        let me = self.consensus.id();
        let members = self.consensus.members();
        let gone: Vec<String> = members
            .iter()
            .filter(|(id, p)| *id != me && voters.contains(id) && self.silent_for(&p.uuid) >= GONE)
            .map(|(_, p)| p.host.clone())
            .collect();
        let all: Vec<String> = members
            .iter()
            .filter(|(id, _)| voters.contains(id))
            .map(|(_, p)| p.host.clone())
            .collect();
        if gone.is_empty() {
            format!("Voters: {}.", all.join(", "))
        } else {
            format!(
                "Cannot reach {} of the {} voters ({}): {}.",
                gone.len(),
                all.len(),
                all.join(", "),
                gone.join(", ")
            )
        }
    }

    /// On the leader: keeps the wanted number of voters, promoting
    /// connected learners and replacing voters silent for `REPLACE_AFTER`.
    pub(super) async fn balance(&self) {
        self.balance_without(None).await
    }

    /// `balance`, counting `leaving` (about to be detached) out.
    pub(super) async fn balance_without(&self, leaving: Option<consensus::NodeId>) {
        if !self.consensus.is_leader() {
            return;
        }
        let me = self.consensus.id();
        let (voters, learners) = self.consensus.roles();
        let members: HashMap<consensus::NodeId, Peer> =
            self.consensus.members().into_iter().collect();
        let staying = |id: &consensus::NodeId| Some(*id) != leaving;
        let n = members.keys().filter(|i| staying(i)).count();
        let want = voters_wanted(n);
        let alive = |id: &consensus::NodeId| {
            *id == me
                || members
                    .get(id)
                    .is_some_and(|p| self.silent_for(&p.uuid) < GONE)
        };
        let lost = |id: &consensus::NodeId| {
            *id != me
                && members
                    .get(id)
                    .is_some_and(|p| self.silent_for(&p.uuid) >= REPLACE_AFTER)
        };
        // Voters that stay, the leader first, then the others by id.
        let mut keep: Vec<consensus::NodeId> = std::iter::once(me)
            .chain(
                voters
                    .iter()
                    .copied()
                    .filter(|i| *i != me && staying(i) && !lost(i)),
            )
            .collect();
        keep.truncate(want);
        let mut wanted: std::collections::BTreeSet<consensus::NodeId> = keep.into_iter().collect();
        for l in learners.iter().filter(|i| staying(i) && alive(i)) {
            if wanted.len() >= want {
                break;
            }
            wanted.insert(*l);
        }
        // No connected learner to take a lost voter's place: it stays.
        for v in voters.iter().filter(|i| staying(i)) {
            if wanted.len() >= want {
                break;
            }
            wanted.insert(*v);
        }
        if wanted == voters || wanted.is_empty() {
            return;
        }
        let names = |ids: &std::collections::BTreeSet<consensus::NodeId>| {
            ids.iter()
                .filter_map(|i| members.get(i).map(|p| p.host.clone()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self
            .consensus
            .change(
                openraft::ChangeMembers::ReplaceAllVoters(wanted.clone()),
                true,
            )
            .await
        {
            Ok(()) => {
                tracing::info!("voters now: {} (were {})", names(&wanted), names(&voters));
                self.refresh();
            }
            Err(e) => tracing::warn!("voters not changed to {}: {e}", names(&wanted)),
        }
    }

    /// Refuses to join a pool while this server belongs to another one or
    /// has volumes of its own (as GlusterFS does).
    pub(super) fn may_join(&self, joiner: &Peer) -> Result<(), String> {
        let st = self.state.lock().unwrap();
        let others: Vec<&str> = st
            .peers
            .iter()
            .filter(|p| p.uuid != joiner.uuid)
            .map(|p| p.host.as_str())
            .collect();
        if !others.is_empty() {
            return Err(format!(
                "{} is already part of another pool (with {}); detach it there first",
                self.me.host,
                others.join(", ")
            ));
        }
        if !st.volumes.is_empty() {
            let names: Vec<&str> = st.volumes.keys().map(String::as_str).collect();
            return Err(format!(
                "{} has volumes of its own ({}); a server joins a pool without volumes",
                self.me.host,
                names.join(", ")
            ));
        }
        Ok(())
    }
}

pub static SERVER_QUORUM_TYPE: crate::core::options::Spec = crate::core::options::Spec {
    key: "cluster.server-quorum-type",
    kind: crate::core::options::Kind::Enum(&["none", "server"]),
    default: "none",
    help: "server: the bricks of this volume on a server that reaches fewer than cluster.server-quorum-ratio percent of the pool (itself included) stop serving, and start again once it does, so that a cut-off server takes no writes that diverge.",
};

pub static SERVER_QUORUM_RATIO: crate::core::options::Spec = crate::core::options::Spec {
    key: "cluster.server-quorum-ratio",
    kind: crate::core::options::Kind::Int(1, 100),
    default: "51",
    help: "Percentage of the pool's servers a server must reach for its bricks to serve, under cluster.server-quorum-type server.",
};

impl Daemon {
    /// Stops or starts this server's bricks of volumes under server quorum
    /// as the pool it reaches shrinks below the ratio or grows back.
    pub(super) async fn check_server_quorum(&self) {
        let st = self.state.lock().unwrap().clone();
        let states = self.peer_states();
        let total = st.peers.len() + 1;
        let active = 1 + states.iter().filter(|s| s.connected).count();
        let unreachable: Vec<String> = states
            .iter()
            .filter(|s| !s.connected)
            .map(|s| s.peer.host.clone())
            .collect();
        let mut changed = false;
        for v in st
            .volumes
            .values()
            .filter(|v| v.status == VolStatus::Started)
        {
            let under = SERVER_QUORUM_TYPE.str(&v.options) == "server";
            let ratio = SERVER_QUORUM_RATIO.int(&v.options).clamp(1, 100) as usize;
            let met = !under || active * 100 >= ratio * total;
            let mut lost = self.quorum_lost.lock().unwrap();
            if !met && !lost.contains_key(&v.name) {
                let why = format!(
                    "server quorum not met: {active} of {total} servers reachable, {ratio}% needed (cannot reach {})",
                    unreachable.join(", ")
                );
                tracing::warn!(volume = %v.name, "stopping this server's bricks: {why}");
                lost.insert(v.name.clone(), why);
                changed = true;
            } else if met && lost.remove(&v.name).is_some() {
                tracing::info!(volume = %v.name, "server quorum regained: starting this server's bricks");
                changed = true;
            }
        }
        if changed {
            self.reconcile().await;
        }
    }
}
