//! Raft's messages between daemons, over the management RPC: each is a
//! `Request::Raft` line on a connection kept open per peer (`rpc::Channel`),
//! answered by a `Response::Raft` line.

use super::{NodeId, Raft, Roles, Snapshot, SnapshotMeta, TypeConfig, Vote};
use crate::mgmt::rpc::{Channel, ChannelError, Request, Response};
use crate::mgmt::state::{ClusterState, Peer};
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
pub async fn serve(raft: &Raft, me: NodeId, e: Envelope) -> Result<Reply, String> {
    if e.to != me {
        return Err(format!(
            "this server is no longer member {} of the pool (it is {me} now: its state was reset); probe it again",
            e.to
        ));
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
/// copy counts for no commit: the voters', sent first, let a change commit
/// without waiting behind hundreds of learners taking it at once (which
/// on one small machine running many servers took a second).
const LEARNER_LAG: Duration = Duration::from_millis(50);

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
            Ok(Response::Err(e)) => Err(net(e)),
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

fn mismatched() -> Failed {
    Failed("mismatched reply".into())
}

type Rpc<T, E = openraft::error::Infallible> =
    Result<T, RPCError<NodeId, Peer, RaftError<NodeId, E>>>;

impl RaftNetwork<TypeConfig> for Link {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<NodeId>> {
        if !rpc.entries.is_empty() && !self.roles.voters.read().unwrap().contains(&self.target) {
            tokio::time::sleep(LEARNER_LAG).await;
        }
        self.rpc(Message::Append(rpc), option, |r| match r {
            Reply::Append(r) => Some(r),
            _ => None,
        })
        .await
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
