//! Membership that tells the truth: every daemon sends each voter a
//! heartbeat every `BEAT` (so a voter hears from every server), and each
//! voter answers with when it last heard from every server, so that every
//! daemon knows of every other at the cost of a few messages per server
//! (not one per pair: 300 servers send 1,500 heartbeats a second, not
//! 90,000), each on a connection kept open. A peer not heard from,
//! directly or through a voter, for `GONE` is shown Disconnected, with
//! how long ago it was last seen.
//!
//! Who votes: the leader keeps `voters_wanted` voters (all servers up to
//! three, five from five servers on), promoting connected learners and
//! replacing a voter silent for `REPLACE_AFTER` (`balance`).

use super::*;
use crate::error::Error;
use mortar_graph::roles::{SERVER_QUORUM_RATIO, SERVER_QUORUM_TYPE};
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

/// What this daemon knows of the other servers' liveness: when it came
/// to know each and last heard from it itself, and what each voter last
/// said it heard. Who is silent is worked out when asked (`silent`), so
/// that a heartbeat's answer costs no work per server: at 300 servers,
/// folding every answer into a per-server table cost 450,000 updates a
/// second in all.
#[derive(Default)]
pub(super) struct Heard {
    /// By uuid: when this daemon came to know the server, and last heard
    /// from it directly.
    direct: HashMap<String, (Instant, Option<Instant>)>,
    /// By voter uuid: its last answer.
    relays: HashMap<String, Relay>,
    /// This daemon's own answer (as a voter), kept for a moment: every
    /// server asks it once a second.
    table: Option<Table>,
}

/// A voter's answer as it made it: when, and `Response::Liveness`'s fields.
type Table = (Instant, u64, Vec<(String, Option<u64>)>);

/// A voter's answer to a heartbeat: when it came, and what it said.
struct Relay {
    at: Instant,
    /// Every server not in `later` was heard from within this.
    within_ms: u64,
    /// The others: how long ago they were heard from (None: never).
    later: HashMap<String, Option<u64>>,
}

/// How long a voter reuses its answer to heartbeats.
const TABLE_FOR: Duration = Duration::from_millis(250);

impl Heard {
    /// When server `uuid` was last heard from, directly or through a voter.
    fn heard(&self, uuid: &str) -> Option<Instant> {
        let direct = self.direct.get(uuid).and_then(|d| d.1);
        let relayed = self
            .relays
            .iter()
            .filter(|(v, _)| v.as_str() != uuid)
            .filter_map(|(_, r)| {
                let ms = match r.later.get(uuid) {
                    Some(later) => (*later)?,
                    None => r.within_ms,
                };
                Some(r.at.checked_sub(Duration::from_millis(ms)).unwrap_or(r.at))
            })
            .max();
        direct.max(relayed)
    }

    /// How long server `uuid` has been silent: since it was last heard
    /// from, or since this daemon came to know it.
    fn silent(&mut self, uuid: &str) -> Duration {
        let heard = self.heard(uuid);
        let known = self
            .direct
            .entry(uuid.to_string())
            .or_insert_with(|| (Instant::now(), None))
            .0;
        heard.unwrap_or(known).elapsed()
    }
}

impl Daemon {
    /// Notes that peer `uuid` was heard from now.
    pub(super) fn seen(&self, uuid: &str) {
        let mut heard = self.liveness.lock().unwrap();
        let d = heard
            .direct
            .entry(uuid.to_string())
            .or_insert_with(|| (Instant::now(), None));
        d.1 = Some(Instant::now());
    }

    /// When this daemon last heard from the servers it knows: what it
    /// answers a heartbeat with. Those heard from within two beats are
    /// summed up as one figure; the others are named.
    pub(super) fn heard_table(&self) -> Response {
        let mut heard = self.liveness.lock().unwrap();
        if let Some((at, within_ms, later)) = &heard.table {
            if at.elapsed() < TABLE_FOR {
                return Response::Liveness {
                    within_ms: within_ms + at.elapsed().as_millis() as u64,
                    later: later.clone(),
                };
            }
        }
        let fresh = (2 * BEAT).as_millis() as u64;
        let mut within_ms = 0;
        let mut later = Vec::new();
        for p in self.state.lock().unwrap().peers.iter() {
            let ago = heard
                .direct
                .get(&p.uuid)
                .and_then(|d| d.1)
                .map(|h| h.elapsed().as_millis() as u64);
            match ago {
                Some(ms) if ms <= fresh => within_ms = within_ms.max(ms),
                ago => later.push((p.uuid.clone(), ago)),
            }
        }
        heard.table = Some((Instant::now(), within_ms, later.clone()));
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
        let mut heard = self.liveness.lock().unwrap();
        peers
            .iter()
            .map(|p| {
                let id = consensus::node_id(&p.uuid);
                let role = if leader == Some(id) {
                    "leader"
                } else if voters.contains(&id) {
                    "voter"
                } else {
                    "learner"
                };
                let silent = heard.silent(&p.uuid);
                rpc::PeerState {
                    connected: silent < GONE,
                    last_seen_secs: heard.heard(&p.uuid).map(|t| t.elapsed().as_secs()),
                    role: role.into(),
                    peer: p.clone(),
                }
            })
            .collect()
    }

    /// Sends every voter a heartbeat every `BEAT`, for as long as the
    /// daemon runs, on a connection kept open to each, and keeps what
    /// they answer.
    pub(super) async fn heartbeats(self: Arc<Self>) {
        // The voters, worked out again only when the state changed.
        let mut version = u64::MAX;
        let mut voters: Vec<(String, rpc::Channel)> = Vec::new();
        let req = Request::Heartbeat {
            from: self.me.uuid.clone(),
        };
        loop {
            if *self.changed.borrow() != version {
                version = *self.changed.borrow();
                let me = self.consensus.id();
                // Voters and their addresses from one version of the state.
                let applied = self.consensus.applied();
                let members = applied.membership.membership();
                let mut old: HashMap<String, rpc::Channel> = voters.drain(..).collect();
                voters = members
                    .voter_ids()
                    .filter(|id| *id != me)
                    .filter_map(|id| members.get_node(&id))
                    .map(|p| {
                        let ch = old
                            .remove(&p.uuid)
                            .filter(|c| c.addr() == p.mgmt)
                            .unwrap_or_else(|| rpc::Channel::new(&p.mgmt));
                        (p.uuid.clone(), ch)
                    })
                    .collect();
            }
            let beats = voters.iter_mut().map(|(uuid, ch)| {
                let (me, req) = (&self, &req);
                async move {
                    if let Ok(Response::Liveness { within_ms, later }) = ch.ask(req, GONE / 2).await
                    {
                        me.seen(uuid);
                        let relay = Relay {
                            at: Instant::now(),
                            within_ms,
                            later: later.into_iter().collect(),
                        };
                        me.liveness
                            .lock()
                            .unwrap()
                            .relays
                            .insert(uuid.clone(), relay);
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
    pub(super) fn silent_for(&self, uuid: &str) -> Duration {
        self.liveness.lock().unwrap().silent(uuid)
    }

    /// The voters' hosts, and those of them this server has not heard
    /// from for `GONE` (never itself).
    fn voters_heard(&self) -> (Vec<String>, Vec<String>) {
        let (voters, _) = self.consensus.roles();
        let me = self.consensus.id();
        let (mut all, mut gone) = (Vec::new(), Vec::new());
        for (id, p) in self.consensus.members() {
            if !voters.contains(&id) {
                continue;
            }
            if id != me && self.silent_for(&p.uuid) >= GONE {
                gone.push(p.host.clone());
            }
            all.push(p.host);
        }
        (all, gone)
    }

    /// Whether this server hears from no majority of the voters (itself
    /// counted): cut off by a partition, or most voters are down. No
    /// leader can commit a change it passes on then, and none will be
    /// elected on its side: it refuses at once instead of waiting out
    /// `ELECTION_WAIT`.
    pub(super) fn cut_off(&self) -> bool {
        let (all, gone) = self.voters_heard();
        !all.is_empty() && (all.len() - gone.len()) * 2 <= all.len()
    }

    /// The voters this server cannot reach, named for a refusal.
    pub(super) fn unreachable_voters(&self) -> String {
        let (all, gone) = self.voters_heard();
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
        let _one = self.balance_lock.lock().await;
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
    pub(super) fn may_join(&self, joiner: &Peer) -> Result<(), Error> {
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
            )
            .into());
        }
        if !st.volumes.is_empty() {
            let names: Vec<&str> = st.volumes.keys().map(String::as_str).collect();
            return Err(format!(
                "{} has volumes of its own ({}); a server joins a pool without volumes",
                self.me.host,
                names.join(", ")
            )
            .into());
        }
        Ok(())
    }
}

impl Daemon {
    /// Stops or starts this server's bricks of volumes under server quorum
    /// as the pool it reaches shrinks below the ratio or grows back.
    pub(super) async fn check_server_quorum(&self) {
        // Most pools set no server quorum: nothing to work out then.
        let under: Vec<(String, usize)> = self
            .state
            .lock()
            .unwrap()
            .volumes
            .values()
            .filter(|v| v.status == VolStatus::Started)
            .filter(|v| SERVER_QUORUM_TYPE.str(&v.options) == "server")
            .map(|v| {
                let ratio = SERVER_QUORUM_RATIO.int(&v.options).clamp(1, 100) as usize;
                (v.name.clone(), ratio)
            })
            .collect();
        if under.is_empty() && self.quorum_lost.lock().unwrap().is_empty() {
            return;
        }
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
            let quorum = under.iter().find(|(name, _)| *name == v.name);
            let ratio = quorum.map_or(0, |q| q.1);
            let met = quorum.is_none() || active * 100 >= ratio * total;
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
