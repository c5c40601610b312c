//! Following a volume's description at its daemons (clients, bricks and
//! the healer), and how they reach bricks (`graph::Env`).

use super::*;
use mortar_core::desc::XlDesc;
use mortar_graph::{active::Active, Env, Graph};
use mortar_protocol::client::{ProtocolClient, Resolver};
use std::sync::Arc;

/// How long clients and bricks wait before asking their daemon again when
/// it could not answer (down, or the volume stopped).
pub const FOLLOW_RETRY: Duration = Duration::from_secs(2);
/// How long a daemon may take to answer `WatchVolDesc` (it answers
/// within 25 s even when nothing changed) before it is given up on.
const WATCH_ANSWERED: Duration = Duration::from_secs(60);

/// Follows volume `name`'s description at the daemon at `mgmt`: hands
/// `changed` each version other than `known` (the one already in use, if
/// any) as soon as the daemon has it (`WatchVolDesc` waits on the daemon
/// for a change), on a connection kept open to each daemon. Each question
/// carries `slow()`, the bricks the client reads around now. `mgmts` are
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
    slow: impl Fn() -> Vec<String>,
    mut changed: impl FnMut(VolDesc),
) {
    // One connection to each daemon, kept open from one question to the
    // next (a brick's start used to open two).
    // Any daemon of the pool's CA: what it hands includes the record that
    // the connections to the bricks are checked against, which a client
    // that missed a rotation must be able to learn again.
    let mut channels: Vec<Channel> = mgmts.iter().map(|m| Channel::any_of_ca(m)).collect();
    let mut at = 0;
    let mut failed = 0;
    loop {
        let req = Request::WatchVolDesc {
            name: name.to_string(),
            known,
            client: client.clone(),
            options_only,
            slow: slow(),
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

/// Keeps a client's graph (`active`) in step with its volume's
/// description (from whichever of `mgmts` answers), `me` telling the
/// daemons who follows it:
/// changed options are applied to the running graph, a changed shape
/// switches to a new graph (`graph::active`); `taken` is told of each
/// description taken. `pin`: the options this client holds whatever the
/// volume says, given the volume's (in `current` already).
pub async fn follow_graph(
    mgmts: Vec<String>,
    mut current: VolDesc,
    active: Arc<Active>,
    me: ClientInfo,
    pin: fn(&mortar_core::Options) -> mortar_core::Options,
    taken: impl Fn(&VolDesc) + Send + 'static,
) {
    let (name, known) = (current.volume.clone(), Some(current.version));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The daemons are told which bricks this mount reads around.
    let graph = Arc::downgrade(&active);
    let slow = move || {
        graph
            .upgrade()
            .map_or_else(Vec::new, |a| a.graph().slow_bricks())
    };
    tokio::spawn(async move {
        follow_volume(&mgmts, &name, known, Some(me), false, slow, |desc| {
            let _ = tx.send(desc);
        })
        .await
    });
    while let Some(mut desc) = rx.recv().await {
        // Only the newest description matters.
        while let Ok(newer) = rx.try_recv() {
            desc = newer;
        }
        let pinned = pin(&desc.options);
        desc.options.extend(pinned);
        let changed: Vec<String> = desc
            .options
            .iter()
            .filter(|(k, v)| current.options.get(*k) != Some(v))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        tracing::info!(volume = %desc.volume, version = desc.version, "volume description changed: {}", changed.join(", "));
        mortar_protocol::tls::set_record(Some(&desc.pool));
        if desc.top == current.top {
            active.graph().reconfigure(&desc.options);
        } else {
            match Graph::build(&desc, &graph_env()) {
                Ok(g) => {
                    active.switch(g).await;
                }
                Err(e) => {
                    tracing::error!(volume = %desc.volume, "cannot build the new graph, keeping the old one: {e:#}");
                    continue;
                }
            }
        }
        taken(&desc);
        current = desc;
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
