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

impl Daemon {
    /// Notes that peer `uuid` was heard from now.
    pub(super) fn seen(&self, uuid: &str) {
        self.last_seen
            .lock()
            .unwrap()
            .insert(uuid.to_string(), Instant::now());
    }

    /// Each peer with whether it is connected and when it was last heard
    /// from (seconds ago; None: never since this daemon started).
    pub(super) fn peer_states(&self) -> Vec<rpc::PeerState> {
        let peers = self.state.lock().unwrap().peers.clone();
        let seen = self.last_seen.lock().unwrap();
        peers
            .into_iter()
            .map(|p| {
                let ago = seen.get(&p.uuid).map(|t| t.elapsed());
                rpc::PeerState {
                    connected: ago.is_some_and(|a| a < GONE),
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
