//! Raft's messages between daemons, over the management RPC: each is a
//! `Request::Raft` line on a connection kept open per peer (`rpc::Channel`),
//! answered by a `Response::Raft` line.

use super::{LogId, NodeId, Raft, Roles, Snapshot, SnapshotMeta, TypeConfig, Vote};
use crate::error::Error;
use crate::rpc::{Channel, ChannelError, Request, Response};
use crate::state::{ClusterState, Peer};
use openraft::error::{
    Fatal, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// A Raft message and the server it is for: a daemon whose state was
/// wiped since (it has another id now) must not take part in a pool it
/// no longer belongs to.
#[derive(Serialize, Deserialize)]
pub struct Envelope {
    pub to: NodeId,
    pub msg: Message,
}

/// A Raft message from one daemon to another.
#[derive(Serialize, Deserialize)]
pub enum Message {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot {
        vote: Vote,
        meta: SnapshotMeta,
        state: ClusterState,
    },
}

/// The answer to a `Message`.
#[derive(Serialize, Deserialize)]
pub enum Reply {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<SnapshotResponse<NodeId>, Fatal<NodeId>>),
}

/// Hands a message received from a peer to the local Raft (`me`), or
/// says why not.
pub async fn serve(raft: &Raft, me: NodeId, e: Envelope) -> Result<Reply, Error> {
    if e.to != me {
        return Err(format!(
            "this server is no longer member {} of the pool (it is {me} now: its state was reset); probe it again",
            e.to
        ).into());
    }
    Ok(match e.msg {
        Message::Append(r) => Reply::Append(raft.append_entries(r).await),
        Message::Vote(r) => Reply::Vote(raft.vote(r).await),
        Message::Snapshot { vote, meta, state } => {
            let snap = Snapshot {
                meta,
                snapshot: Box::new(state),
            };
            Reply::Snapshot(raft.install_full_snapshot(vote, snap).await)
        }
    })
}

pub struct Network {
    pub roles: Arc<Roles>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Link;

    async fn new_client(&mut self, target: NodeId, node: &Peer) -> Link {
        Link {
            target,
            channel: Channel::new(&node.mgmt),
            roles: self.roles.clone(),
        }
    }
}

/// How long new entries wait before they go to a learner. A learner's
/// copy counts for no commit: the voters' copies, sent first, let a change
/// commit, and the leader answer it and do its own part (start its
/// bricks), without waiting behind hundreds of learners taking it at once
/// (on one small machine running 300 servers that took 300 ms).
const LEARNER_LAG: Duration = Duration::from_millis(50);

/// How much longer, at most, they wait for this server (the leader) to
/// apply them, so that they go with the news that they are committed and
/// the learner applies them at once: a learner told only by Raft's next
/// message waited for it behind all the others (at 300 servers on this
/// machine, up to a second).
const LEARNER_WAIT: Duration = Duration::from_millis(500);

/// The connection to one peer.
pub struct Link {
    target: NodeId,
    channel: Channel,
    roles: Arc<Roles>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Failed(String);

enum SendError {
    /// Not connected: the peer is down or cut off.
    Unreachable(Failed),
    /// Connected, but the exchange failed.
    Network(Failed),
}

impl Link {
    async fn send(&mut self, m: Message, ttl: Duration) -> Result<Reply, SendError> {
        let m = Envelope {
            to: self.target,
            msg: m,
        };
        let net = |e: String| SendError::Network(Failed(e));
        let msg = serde_json::value::to_raw_value(&m).map_err(|e| net(e.to_string()))?;
        match self.channel.ask(&Request::Raft(msg), ttl).await {
            Ok(Response::Raft(v)) => serde_json::from_str(v.get()).map_err(|e| net(e.to_string())),
            Ok(Response::Err(e)) => Err(net(e.to_string())),
            Ok(other) => Err(net(format!("unexpected answer {other:?}"))),
            Err(ChannelError::Unreachable(e)) => Err(SendError::Unreachable(Failed(e))),
            Err(ChannelError::Failed(e)) => Err(net(e)),
        }
    }

    fn rpc_error<E: std::error::Error>(e: SendError) -> RPCError<NodeId, Peer, E> {
        match e {
            SendError::Unreachable(f) => RPCError::Unreachable(Unreachable::new(&f)),
            SendError::Network(f) => RPCError::Network(NetworkError::new(&f)),
        }
    }

    /// Sends `m` and takes from the reply what `pick` finds in it: the
    /// peer's answer, or its error as a remote one.
    async fn rpc<T>(
        &mut self,
        m: Message,
        option: RPCOption,
        pick: impl FnOnce(Reply) -> Option<Result<T, RaftError<NodeId>>>,
    ) -> Rpc<T> {
        let reply = self
            .send(m, option.hard_ttl())
            .await
            .map_err(Self::rpc_error)?;
        match pick(reply) {
            Some(r) => r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e))),
            None => Err(Self::rpc_error(SendError::Network(mismatched()))),
        }
    }
}

/// What a leader may tell a learner is committed, with entries up to
/// `last`, after `LEARNER_LAG`: what it has applied itself (only
/// committed entries are), once that reaches `last` or `LEARNER_WAIT` has
/// passed; never beyond `last` (the learner takes no more than it holds
/// anyway) nor below what Raft said (`said`).
async fn committed_with(roles: &Roles, said: Option<LogId>, last: Option<LogId>) -> Option<LogId> {
    tokio::time::sleep(LEARNER_LAG).await;
    let mut applied = roles.applied.subscribe();
    let _ = tokio::time::timeout(LEARNER_WAIT, applied.wait_for(|a| *a >= last)).await;
    let applied = *applied.borrow();
    said.max(applied.min(last))
}

fn mismatched() -> Failed {
    Failed("mismatched reply".into())
}

type Rpc<T, E = openraft::error::Infallible> =
    Result<T, RPCError<NodeId, Peer, RaftError<NodeId, E>>>;

impl RaftNetwork<TypeConfig> for Link {
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<NodeId>> {
        let last = rpc.entries.last().map(|e| e.log_id);
        let t0 = std::time::Instant::now();
        // Entries that make this learner a voter go at once: their commit
        // needs its answer, and holding them until this server applied
        // them waited for itself (`LEARNER_WAIT`: a pool's first probe
        // took 560 ms).
        let made_voter = rpc.entries.iter().any(|e| match &e.payload {
            openraft::EntryPayload::Membership(m) => m.voter_ids().any(|v| v == self.target),
            _ => false,
        });
        if last.is_some()
            && !made_voter
            && !self.roles.voters.read().unwrap().contains(&self.target)
        {
            rpc.leader_commit = committed_with(&self.roles, rpc.leader_commit, last).await;
        }
        let (n, commit, waited) = (rpc.entries.len(), rpc.leader_commit, t0.elapsed());
        let answer = self
            .rpc(Message::Append(rpc), option, |r| match r {
                Reply::Append(r) => Some(r),
                _ => None,
            })
            .await;
        tracing::debug!(target = self.target, entries = n, last = ?last.map(|l| l.index), commit = ?commit.map(|l| l.index),
            waited_ms = waited.as_millis() as u64, answered_ms = t0.elapsed().as_millis() as u64, ok = answer.is_ok(), "append");
        answer
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Rpc<VoteResponse<NodeId>> {
        self.rpc(Message::Vote(rpc), option, |r| match r {
            Reply::Vote(r) => Some(r),
            _ => None,
        })
        .await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>> {
        let m = Message::Snapshot {
            vote,
            meta: snapshot.meta,
            state: *snapshot.snapshot,
        };
        let sent = tokio::select! {
            r = self.send(m, option.hard_ttl()) => r,
            closed = cancel => return Err(StreamingError::Closed(closed)),
        };
        match sent {
            Ok(Reply::Snapshot(r)) => {
                r.map_err(|e| StreamingError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(_) => Err(StreamingError::Network(NetworkError::new(&mismatched()))),
            Err(SendError::Unreachable(f)) => {
                Err(StreamingError::Unreachable(Unreachable::new(&f)))
            }
            Err(SendError::Network(f)) => Err(StreamingError::Network(NetworkError::new(&f))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn at(i: u64) -> Option<LogId> {
        Some(LogId::new(CommittedLeaderId::new(1, 1), i))
    }

    #[tokio::test]
    async fn a_learner_is_told_its_entries_are_committed_once_the_leader_applied_them() {
        let roles = Arc::new(Roles::default());
        roles.applied.send_replace(at(7));
        // Entries up to 5, all applied here: all committed, not beyond.
        assert_eq!(committed_with(&roles, at(3), at(5)).await, at(5));
        // Entries up to 9, applied while the learner's copy waits.
        let r = roles.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            r.applied.send_replace(at(9));
        });
        let t0 = std::time::Instant::now();
        assert_eq!(committed_with(&roles, at(3), at(9)).await, at(9));
        assert!(
            t0.elapsed() < LEARNER_LAG + LEARNER_WAIT,
            "it waited past the apply"
        );
        // Entries not applied within LEARNER_WAIT go with what is.
        assert_eq!(committed_with(&roles, at(3), at(12)).await, at(9));
        // Never less than what Raft said.
        roles.applied.send_replace(None);
        assert_eq!(committed_with(&roles, at(3), at(4)).await, at(3));
    }
}
