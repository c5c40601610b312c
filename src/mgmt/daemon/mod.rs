//! The management daemon (`mortar daemon`), one per server. It keeps the
//! cluster state on disk, answers the CLI and mounting clients, keeps its
//! peers in step (every change is pushed to every peer as a whole `Sync`),
//! and runs one brick process per local brick of every started volume
//! (`supervise`: restarted when it dies, adopted after a daemon crash,
//! left offline with its reason when its health check fails). A daemon
//! stopped by SIGTERM stops its bricks first.
//!
//! Changes are serialised by one async lock; the state itself sits behind a
//! plain mutex that is never held across a network call.
//!
//! Layout: `mod.rs` the API (requests in, answers out) and the state store
//! (`execute` applies a `Command`, saves, tells peers); `ops` the
//! operations that validate and produce commands; `bricks` supervision;
//! `heal` the self-heal daemons; `follow` volume descriptions for clients.

mod bricks;
mod follow;
mod heal;
mod members;
mod ops;

use super::command::Command;
use super::options;
use super::rpc::{self, BrickStatus, HealOp, HealReport, Request, Response};
use super::state::{Brick, ClusterState, Peer, Store, VolStatus, Volume};
use super::supervise::{supervise, BrickInfo, BrickSpec};
use super::volgen;
use crate::cluster::replicate::options::SELF_HEAL_DAEMON;
use crate::heal::Healer;
use crate::storage::posix::VOLUME_ID_XATTR;
use bricks::BrickProc;
use follow::Seen;
use heal::HealerProc;
pub use members::{SERVER_QUORUM_RATIO, SERVER_QUORUM_TYPE};
use ops::check_local_brick;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Config {
    pub listen: SocketAddr,
    pub host: String,
    pub state_dir: PathBuf,
}

pub struct Daemon {
    cfg: Config,
    me: Peer,
    store: Store,
    state: Mutex<ClusterState>,
    bricks: Mutex<HashMap<String, (BrickProc, BrickInfo)>>,
    op_lock: tokio::sync::Mutex<()>,
    /// Self-heal per replicated volume with bricks here: the volume
    /// version it was built for, the healer and its task.
    healers: Mutex<HashMap<String, HealerProc>>,
    /// Counts the saved changes of the state: what `WatchVolDesc` waits on.
    changed: watch::Sender<u64>,
    /// Mounted clients that follow a volume here: (volume, client) → the
    /// graph version they run and when they last asked.
    clients: Mutex<HashMap<(String, rpc::ClientInfo), Seen>>,
    /// What this daemon knows of each peer's liveness, by uuid (`members`).
    liveness: Mutex<HashMap<String, members::Liveness>>,
    /// Volumes whose bricks here are stopped for want of server quorum,
    /// with why (`members`).
    quorum_lost: Mutex<HashMap<String, String>>,
}

fn err(s: impl Into<String>) -> Response {
    Response::Err(s.into())
}

impl Daemon {
    pub async fn run(cfg: Config) -> anyhow::Result<()> {
        let store = Store::new(&cfg.state_dir)?;
        let state = store.load()?;
        store.save(&state)?;
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen))?;
        let me = Peer {
            uuid: state.uuid.clone(),
            host: cfg.host.clone(),
            mgmt: mgmt_self(&cfg),
        };
        let d = Arc::new(Daemon {
            cfg,
            me,
            store,
            state: Mutex::new(state),
            bricks: Mutex::new(HashMap::new()),
            op_lock: tokio::sync::Mutex::new(()),
            healers: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
            clients: Mutex::new(HashMap::new()),
            liveness: Mutex::new(HashMap::new()),
            quorum_lost: Mutex::new(HashMap::new()),
        });
        tokio::spawn(d.clone().heartbeats());
        tracing::info!(listen = %d.cfg.listen, host = %d.cfg.host, state = %d.cfg.state_dir.display(), "management daemon started");
        d.reconcile().await;
        let d2 = d.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
            let mut int =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).unwrap();
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            tracing::info!("stopping: bricks first");
            d2.stop_all_bricks().await;
            std::process::exit(0);
        });
        loop {
            let (stream, _) = listener.accept().await?;
            let d = d.clone();
            tokio::spawn(async move {
                if let Err(e) = d.serve(stream).await {
                    tracing::debug!("rpc connection: {e}");
                }
            });
        }
    }

    pub(super) async fn serve(self: Arc<Self>, stream: TcpStream) -> std::io::Result<()> {
        let (rd, mut wr) = stream.into_split();
        let mut lines = BufReader::new(rd).lines();
        while let Some(line) = lines.next_line().await? {
            let resp = match serde_json::from_str::<Request>(&line) {
                Ok(req) => self.clone().handle(req).await,
                Err(e) => err(format!("malformed request: {e}")),
            };
            let mut out = serde_json::to_vec(&resp)?;
            out.push(b'\n');
            wr.write_all(&out).await?;
        }
        Ok(())
    }

    pub(super) async fn is_local(&self, host: &str) -> bool {
        if host == self.cfg.host || host == "localhost" || host == self.cfg.listen.ip().to_string()
        {
            return true;
        }
        let Ok(addrs) = tokio::net::lookup_host((host, 0)).await else {
            return false;
        };
        let mine = self.cfg.listen.ip();
        addrs
            .into_iter()
            .any(|a| a.ip() == mine || (mine.is_unspecified() && a.ip().is_loopback()))
    }

    pub(super) fn peer_mgmt(&self, host: &str) -> Option<String> {
        self.state
            .lock()
            .unwrap()
            .peers
            .iter()
            .find(|p| p.host == host)
            .map(|p| p.mgmt.clone())
    }

    /// Runs a brick-host request on the host owning the brick.
    pub(super) async fn on_host(self: &Arc<Self>, host: &str, req: Request) -> Response {
        if self.is_local(host).await {
            return Box::pin(self.clone().handle(req)).await;
        }
        match self.peer_mgmt(host) {
            Some(addr) => rpc::call(&addr, &req).await.unwrap_or_else(Response::Err),
            None => err(format!("Host {host} is not in 'Peer in Cluster' state")),
        }
    }

    pub(super) fn save(&self) -> Result<ClusterState, String> {
        let st = self.state.lock().unwrap().clone();
        self.store
            .save(&st)
            .map_err(|e| format!("cannot save the cluster state: {e}"))?;
        self.changed.send_modify(|n| *n += 1);
        Ok(st)
    }

    /// Pushes the whole state to every peer (best effort: a peer that is
    /// down catches up when it is probed or synced again).
    pub(super) async fn sync_peers(&self, st: &ClusterState) {
        for p in &st.peers {
            let mut view = st.clone();
            view.peers.retain(|q| q.uuid != p.uuid);
            view.peers.push(self.me.clone());
            if let Err(e) = rpc::call(&p.mgmt, &Request::Sync { state: view }).await {
                tracing::warn!(peer = %p.host, "could not sync: {e}");
            }
        }
    }

    /// Applies a command to the state, saves it, tells the peers and
    /// brings the local bricks in line.
    pub(super) async fn execute(&self, cmd: Command) -> Result<(), String> {
        cmd.apply(&mut self.state.lock().unwrap())?;
        self.commit().await
    }

    pub(super) async fn commit(&self) -> Result<(), String> {
        let st = self.save()?;
        self.sync_peers(&st).await;
        self.reconcile().await;
        Ok(())
    }

    pub(super) fn volume(&self, name: &str) -> Result<Volume, String> {
        self.state
            .lock()
            .unwrap()
            .volumes
            .get(name)
            .cloned()
            .ok_or_else(|| format!("Volume {name} does not exist"))
    }

    pub(super) async fn handle(self: Arc<Self>, req: Request) -> Response {
        match req {
            Request::PeerList => {
                let states = self.peer_states();
                Response::Peers {
                    me: self.me.clone(),
                    peers: states.iter().map(|s| s.peer.clone()).collect(),
                    states,
                }
            }
            Request::Heartbeat { from } => {
                self.seen(&from);
                Response::Ok(String::new())
            }
            Request::VolumeInfo { name } => {
                let st = self.state.lock().unwrap();
                match name {
                    Some(n) => match st.volumes.get(&n) {
                        Some(v) => Response::Volumes(vec![v.clone()]),
                        None => err(format!("Volume {n} does not exist")),
                    },
                    None => Response::Volumes(st.volumes.values().cloned().collect()),
                }
            }
            Request::VolumeStatus { name } => {
                let vols: Vec<Volume> = match name {
                    Some(n) => match self.volume(&n) {
                        Ok(v) if v.status == VolStatus::Started => vec![v],
                        Ok(_) => return err(format!("Volume {n} is not started")),
                        Err(e) => return err(e),
                    },
                    None => {
                        let st = self.state.lock().unwrap();
                        st.volumes
                            .values()
                            .filter(|v| v.status == VolStatus::Started)
                            .cloned()
                            .collect()
                    }
                };
                let mut out = Vec::new();
                for v in vols {
                    let s = self.status_of(&v).await;
                    out.push((v, s));
                }
                Response::Status(out)
            }
            Request::GetVolDesc { name } => self.vol_desc(&name),
            Request::VolumeClients { name, all } => {
                if let Err(e) = self.volume(&name) {
                    return err(e);
                }
                let mut out = self.clients_of(&name);
                if all {
                    let peers = self.state.lock().unwrap().peers.clone();
                    for p in peers {
                        let req = Request::VolumeClients {
                            name: name.clone(),
                            all: false,
                        };
                        if let Ok(Response::Clients(c)) = rpc::call(&p.mgmt, &req).await {
                            out.extend(c);
                        }
                    }
                }
                Response::Clients(out)
            }
            Request::WatchVolDesc {
                name,
                known,
                client,
            } => self.watch(name, known, client).await,
            Request::Portmap { path } => {
                let bricks = self.bricks.lock().unwrap();
                match bricks.get(&path).and_then(|(_, i)| i.lock().unwrap().port) {
                    Some(port) => Response::Port(port),
                    None => err(format!("brick {path} is not running on {}", self.me.host)),
                }
            }
            Request::LocalStatus { volume } => match self.volume(&volume) {
                Ok(v) => Response::Bricks(self.local_status(&v)),
                Err(e) => err(e),
            },
            Request::BrickCheck {
                brick,
                volume: _,
                force,
            } => match check_local_brick(Path::new(&brick.path), force) {
                Ok(()) => Response::Ok(String::new()),
                Err(e) => err(e),
            },
            Request::BrickInit { brick, volume_id } => {
                let p = Path::new(&brick.path);
                let res = std::fs::create_dir_all(p)
                    .map_err(|e| format!("cannot create {}: {e}", p.display()))
                    .and_then(|_| {
                        rustix::fs::setxattr(
                            p,
                            VOLUME_ID_XATTR,
                            volume_id.as_bytes(),
                            rustix::fs::XattrFlags::empty(),
                        )
                        .map_err(|e| format!("cannot set the volume id on {}: {e}", p.display()))
                    });
                match res {
                    Ok(()) => Response::Ok(String::new()),
                    Err(e) => err(e),
                }
            }
            Request::BrickRelease { brick } => {
                let _ = rustix::fs::removexattr(brick.path.as_str(), VOLUME_ID_XATTR);
                Response::Ok(String::new())
            }
            Request::Heal { name, op } => self.heal(name, op).await,
            Request::BricksRun { volume, force } => {
                if force {
                    self.forget_offline(&volume).await;
                }
                self.reconcile().await;
                Response::Ok(String::new())
            }
            Request::PeerJoin { me, state } => {
                let _g = self.op_lock.lock().await;
                if let Err(e) = self.may_join(&me) {
                    return err(e);
                }
                {
                    let mut st = self.state.lock().unwrap();
                    for p in state.peers.into_iter().chain(std::iter::once(me)) {
                        if p.uuid != self.me.uuid && !st.peers.iter().any(|q| q.uuid == p.uuid) {
                            st.peers.push(p);
                        }
                    }
                    for (k, v) in state.volumes {
                        st.volumes.entry(k).or_insert(v);
                    }
                }
                match self.save() {
                    Ok(_) => {
                        self.reconcile().await;
                        Response::Joined {
                            me: self.me.clone(),
                        }
                    }
                    Err(e) => err(e),
                }
            }
            Request::Sync { state } => {
                let _g = self.op_lock.lock().await;
                {
                    let mut st = self.state.lock().unwrap();
                    st.peers = state
                        .peers
                        .into_iter()
                        .filter(|p| p.uuid != self.me.uuid)
                        .collect();
                    st.volumes = state.volumes;
                }
                match self.save() {
                    Ok(_) => {
                        self.reconcile().await;
                        Response::Ok(String::new())
                    }
                    Err(e) => err(e),
                }
            }
            other => {
                let _g = self.op_lock.lock().await;
                let what = format!("{other:?}");
                match self.change(other).await {
                    Ok(msg) => {
                        tracing::info!("done: {what}");
                        Response::Ok(msg)
                    }
                    Err(e) => {
                        tracing::warn!("refused: {what}: {e}");
                        Response::Err(e)
                    }
                }
            }
        }
    }
}

fn mgmt_self(cfg: &Config) -> String {
    if cfg.listen.ip().is_unspecified() {
        format!("{}:{}", cfg.host, cfg.listen.port())
    } else {
        cfg.listen.to_string()
    }
}
