//! Membership that tells the truth: every daemon sends each peer a
//! heartbeat every `BEAT`, and a peer not heard from (a heartbeat it sent,
//! or an answer to ours) for `GONE` is shown Disconnected, with how long
//! ago it was last seen.

use super::*;
use std::time::Instant;

/// How often each peer is sent a heartbeat.
const BEAT: Duration = Duration::from_secs(1);
/// Silence after which a peer is Disconnected.
pub(super) const GONE: Duration = Duration::from_secs(4);

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
}

impl Daemon {
    /// Notes that peer `uuid` was heard from now.
    pub(super) fn seen(&self, uuid: &str) {
        self.liveness
            .lock()
            .unwrap()
            .entry(uuid.to_string())
            .or_insert_with(Liveness::new)
            .heard = Some(Instant::now());
    }

    /// Each peer with whether it is connected and when it was last heard
    /// from (seconds ago; None: never since this daemon started).
    ///
    /// A peer this daemon has not heard from yet counts as connected for
    /// `GONE` after it came to know it (it started, or the peer joined):
    /// a heartbeat round has not reached it yet.
    pub(super) fn peer_states(&self) -> Vec<rpc::PeerState> {
        let peers = self.state.lock().unwrap().peers.clone();
        let mut liveness = self.liveness.lock().unwrap();
        peers
            .into_iter()
            .map(|p| {
                let l = liveness.entry(p.uuid.clone()).or_insert_with(Liveness::new);
                let ago = l.heard.map(|t| t.elapsed());
                let new = l.known.elapsed() < GONE;
                rpc::PeerState {
                    connected: ago.map_or(new, |a| a < GONE),
                    last_seen_secs: ago.map(|a| a.as_secs()),
                    peer: p,
                }
            })
            .collect()
    }

    /// Sends every peer a heartbeat every `BEAT`, for as long as the
    /// daemon runs.
    pub(super) async fn heartbeats(self: Arc<Self>) {
        loop {
            let peers = self.state.lock().unwrap().peers.clone();
            let beats = peers.into_iter().map(|p| {
                let me = self.clone();
                async move {
                    let req = Request::Heartbeat {
                        from: me.me.uuid.clone(),
                    };
                    let answer = tokio::time::timeout(GONE / 2, rpc::call(&p.mgmt, &req)).await;
                    if let Ok(Ok(Response::Ok(_))) = answer {
                        me.seen(&p.uuid);
                    }
                }
            });
            futures_util::future::join_all(beats).await;
            self.check_server_quorum().await;
            tokio::time::sleep(BEAT).await;
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
