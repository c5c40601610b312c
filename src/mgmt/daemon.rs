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

use super::options;
use super::rpc::{self, BrickStatus, HealOp, HealReport, Request, Response};
use super::state::{Brick, ClusterState, Peer, Store, VolStatus, Volume};
use super::volgen;
use crate::cluster::replicate::options::SELF_HEAL_DAEMON;
use crate::heal::Healer;
use crate::storage::posix::VOLUME_ID_XATTR;
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

struct BrickProc {
    volume: String,
    stop: watch::Sender<bool>,
    done: Option<tokio::task::JoinHandle<()>>,
}

use super::supervise::{supervise, BrickInfo, BrickSpec};

/// A running self-heal: the volume version it was built for, the healer,
/// its task.
type HealerProc = (u64, Arc<Healer>, tokio::task::JoinHandle<()>);

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
}

/// The graph version a client runs and when it last asked.
type Seen = (Option<u64>, std::time::Instant);

/// A client not heard from for this long is no longer listed (it asks at
/// least every `WATCH_MAX`).
const CLIENT_GONE: Duration = Duration::from_secs(60);

/// How long a `WatchVolDesc` waits for a change before it answers anyway.
const WATCH_MAX: Duration = Duration::from_secs(25);

fn err(s: impl Into<String>) -> Response {
    Response::Err(s.into())
}

fn valid_volname(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !n.starts_with('-')
}

fn nested(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"))
}

/// Checks a local brick path before a volume is created on it.
fn check_local_brick(path: &Path, force: bool) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if !md.is_dir() {
            return Err(format!("{} is not a directory", path.display()));
        }
        if rustix::fs::getxattr(path, VOLUME_ID_XATTR, &mut [0u8; 64][..]).is_ok() {
            return Err(format!("{} is already part of a volume", path.display()));
        }
    }
    let mut existing = path;
    while !existing.exists() {
        existing = existing.parent().unwrap_or(Path::new("/"));
    }
    let dev = std::fs::metadata(existing)
        .map_err(|e| e.to_string())?
        .dev();
    let root = std::fs::metadata("/").map_err(|e| e.to_string())?.dev();
    if dev == root && !force {
        return Err(format!(
            "The brick {} is being created in the root partition. It is recommended that you don't use the \
             system's root partition for storage backend. Or use 'force' at the end of the command if you want \
             to override this behavior.",
            path.display()
        ));
    }
    Ok(())
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
        });
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

    async fn serve(self: Arc<Self>, stream: TcpStream) -> std::io::Result<()> {
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

    async fn is_local(&self, host: &str) -> bool {
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

    fn peer_mgmt(&self, host: &str) -> Option<String> {
        self.state
            .lock()
            .unwrap()
            .peers
            .iter()
            .find(|p| p.host == host)
            .map(|p| p.mgmt.clone())
    }

    /// Runs a brick-host request on the host owning the brick.
    async fn on_host(self: &Arc<Self>, host: &str, req: Request) -> Response {
        if self.is_local(host).await {
            return Box::pin(self.clone().handle(req)).await;
        }
        match self.peer_mgmt(host) {
            Some(addr) => rpc::call(&addr, &req).await.unwrap_or_else(Response::Err),
            None => err(format!("Host {host} is not in 'Peer in Cluster' state")),
        }
    }

    fn save(&self) -> Result<ClusterState, String> {
        let st = self.state.lock().unwrap().clone();
        self.store
            .save(&st)
            .map_err(|e| format!("cannot save the cluster state: {e}"))?;
        self.changed.send_modify(|n| *n += 1);
        Ok(st)
    }

    /// Pushes the whole state to every peer (best effort: a peer that is
    /// down catches up when it is probed or synced again).
    async fn sync_peers(&self, st: &ClusterState) {
        for p in &st.peers {
            let mut view = st.clone();
            view.peers.retain(|q| q.uuid != p.uuid);
            view.peers.push(self.me.clone());
            if let Err(e) = rpc::call(&p.mgmt, &Request::Sync { state: view }).await {
                tracing::warn!(peer = %p.host, "could not sync: {e}");
            }
        }
    }

    async fn commit(&self) -> Result<(), String> {
        let st = self.save()?;
        self.sync_peers(&st).await;
        self.reconcile().await;
        Ok(())
    }

    /// Starts the local bricks of started volumes and stops the others.
    async fn reconcile(&self) {
        let st = self.state.lock().unwrap().clone();
        let mut want: HashMap<String, (String, String, bool)> = HashMap::new();
        for v in st
            .volumes
            .values()
            .filter(|v| v.status == VolStatus::Started)
        {
            for (i, b) in v.bricks.iter().enumerate() {
                if self.is_local(&b.host).await {
                    want.insert(
                        b.path.clone(),
                        (v.name.clone(), v.id.clone(), v.is_arbiter(i)),
                    );
                }
            }
        }
        let mut to_stop = Vec::new();
        {
            let mut bricks = self.bricks.lock().unwrap();
            let running: Vec<String> = bricks.keys().cloned().collect();
            for path in running {
                if want.get(&path).map(|w| &w.0) != bricks.get(&path).map(|b| &b.0.volume) {
                    if let Some((mut p, _)) = bricks.remove(&path) {
                        let _ = p.stop.send(true);
                        to_stop.extend(p.done.take());
                    }
                }
            }
            for (path, (vol, id, arbiter)) in want {
                if bricks.contains_key(&path) {
                    continue;
                }
                let (stop, stop_rx) = watch::channel(false);
                let info: BrickInfo = Default::default();
                let spec = BrickSpec {
                    path: PathBuf::from(&path),
                    volume: vol.clone(),
                    volume_id: id,
                    arbiter,
                    ip: self.cfg.listen.ip(),
                    mgmt: self.me.mgmt.clone(),
                    logs: self.cfg.state_dir.join("logs"),
                    run: self.cfg.state_dir.join("run"),
                };
                let done = tokio::spawn(supervise(spec, info.clone(), stop_rx));
                bricks.insert(
                    path,
                    (
                        BrickProc {
                            volume: vol,
                            stop,
                            done: Some(done),
                        },
                        info,
                    ),
                );
            }
        }
        for h in to_stop {
            let _ = h.await;
        }
        self.reconcile_healers(&st).await;
    }

    /// Runs a healer for every started replicated volume with a brick here.
    async fn reconcile_healers(&self, st: &ClusterState) {
        let mut want: HashMap<String, (Volume, Vec<String>)> = HashMap::new();
        for v in st
            .volumes
            .values()
            .filter(|v| v.status == VolStatus::Started && v.replica > 1)
            .filter(|v| SELF_HEAL_DAEMON.bool(&v.options))
        {
            let mut local = Vec::new();
            for b in &v.bricks {
                if self.is_local(&b.host).await {
                    local.push(b.host.clone());
                }
            }
            if !local.is_empty() {
                want.insert(v.name.clone(), (v.clone(), local));
            }
        }
        let mut healers = self.healers.lock().unwrap();
        healers.retain(|name, (version, _, task)| {
            let keep = want.get(name).is_some_and(|(v, _)| v.version == *version);
            if !keep {
                task.abort();
            }
            keep
        });
        for (name, (v, local)) in want {
            if healers.contains_key(&name) {
                continue;
            }
            let desc =
                volgen::generate(st, &v, &self.me.host, &self.me.mgmt, self.cfg.listen.port());
            match Healer::new(&desc, |h| local.iter().any(|l| l == h), &rpc::graph_env()) {
                Ok(h) => {
                    tracing::info!(volume = %name, "self-heal daemon started");
                    let task = tokio::spawn(h.clone().run());
                    healers.insert(name, (v.version, h, task));
                }
                Err(e) => tracing::warn!(volume = %name, "cannot start self-heal: {e:#}"),
            }
        }
    }

    /// The clients that followed volume `name` here lately.
    fn clients_of(&self, name: &str) -> Vec<rpc::ClientSeen> {
        let mut clients = self.clients.lock().unwrap();
        clients.retain(|_, (_, seen)| seen.elapsed() < CLIENT_GONE);
        let mut out: Vec<rpc::ClientSeen> = clients
            .iter()
            .filter(|((v, _), _)| v == name)
            .map(|((_, c), (version, seen))| rpc::ClientSeen {
                client: c.clone(),
                server: self.me.host.clone(),
                version: *version,
                seen_secs_ago: seen.elapsed().as_secs(),
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.client.host, &a.client.mount).cmp(&(&b.client.host, &b.client.mount))
        });
        out
    }

    /// A started volume's client graph description.
    fn vol_desc(&self, name: &str) -> Response {
        match self.volume(name) {
            Ok(v) if v.status == VolStatus::Started => {
                let st = self.state.lock().unwrap().clone();
                Response::VolDesc(volgen::generate(
                    &st,
                    &v,
                    &self.me.host,
                    &self.me.mgmt,
                    self.cfg.listen.port(),
                ))
            }
            Ok(_) => err(format!("Volume {name} is not started")),
            Err(e) => err(e),
        }
    }

    /// `volume heal NAME …`.
    async fn heal(self: &Arc<Self>, name: String, op: HealOp) -> Response {
        let v = match self.volume(&name) {
            Ok(v) => v,
            Err(e) => return err(e),
        };
        if v.status != VolStatus::Started {
            return err(format!("Volume {name} is not started."));
        }
        if v.replica < 2 {
            return err(format!("Volume {name} is not of type replicate"));
        }
        let running = self
            .healers
            .lock()
            .unwrap()
            .get(&name)
            .map(|(_, h, _)| h.clone());
        let healer = match running {
            Some(h) => h,
            None => {
                // No brick here: a healer of our own just to look.
                let st = self.state.lock().unwrap().clone();
                let desc = volgen::generate(
                    &st,
                    &v,
                    &self.me.host,
                    &self.me.mgmt,
                    self.cfg.listen.port(),
                );
                match Healer::new(&desc, |_| false, &rpc::graph_env()) {
                    Ok(h) => {
                        h.wait_up(Duration::from_secs(3)).await;
                        h
                    }
                    Err(e) => return err(format!("{e:#}")),
                }
            }
        };
        if matches!(op, HealOp::Index | HealOp::Full) && !SELF_HEAL_DAEMON.bool(&v.options) {
            return err(format!(
                "Self-heal-daemon is disabled. Heal will not be triggered on volume {name}"
            ));
        }
        let mut rep = HealReport::default();
        match op {
            HealOp::Index => {
                healer.trigger();
                rep.message = format!("Launching heal operation to perform index self heal on volume {name} has been successful \nUse heal info commands to check status.");
            }
            HealOp::Full => {
                let h = healer.clone();
                tokio::spawn(async move { h.full().await });
                rep.message = format!("Launching heal operation to perform full self heal on volume {name} has been successful \nUse heal info commands to check status.");
            }
            HealOp::Info | HealOp::InfoSummary => rep.bricks = healer.info(false).await,
            HealOp::InfoSplitBrain => rep.bricks = healer.info(true).await,
            HealOp::Statistics => rep.crawls = healer.statistics(),
            HealOp::SplitBrain { how, file, source } => {
                let gfid = match &file {
                    Some(f) => match healer.gfid_of(f).await {
                        Ok(g) => Some(g),
                        Err(e) => return err(e),
                    },
                    None => None,
                };
                match healer.resolve(gfid, &how, source.as_deref()).await {
                    Ok(0) => {
                        return err(match file {
                            Some(f) => format!(
                                "{f}: not in split-brain (or its copies could not be reached)"
                            ),
                            None => format!("no file of volume {name} is in split-brain"),
                        })
                    }
                    Ok(n) => {
                        rep.message = format!("Healed {n} file(s) in split-brain of volume {name}.")
                    }
                    Err(e) => return err(e),
                }
            }
        }
        Response::Heal(rep)
    }

    /// Stops watching (and so stops) the local bricks `which` picks, and
    /// waits until their watchers are done.
    async fn stop_bricks(&self, which: impl Fn(&BrickProc, &BrickInfo) -> bool) {
        let done: Vec<_> = {
            let mut bricks = self.bricks.lock().unwrap();
            let picked: Vec<String> = bricks
                .iter()
                .filter(|(_, (p, i))| which(p, i))
                .map(|(path, _)| path.clone())
                .collect();
            picked
                .iter()
                .filter_map(|path| {
                    let (mut p, _) = bricks.remove(path)?;
                    let _ = p.stop.send(true);
                    p.done.take()
                })
                .collect()
        };
        for h in done {
            let _ = h.await;
        }
    }

    /// Drops the watch over local bricks of `volume` that went offline, so
    /// that the next reconcile starts them again.
    async fn forget_offline(&self, volume: &str) {
        self.stop_bricks(|p, i| p.volume == volume && i.lock().unwrap().offline.is_some())
            .await;
    }

    async fn stop_all_bricks(&self) {
        self.stop_bricks(|_, _| true).await;
    }

    fn local_status(&self, vol: &Volume) -> Vec<BrickStatus> {
        let bricks = self.bricks.lock().unwrap();
        vol.bricks
            .iter()
            .filter_map(|b| {
                let (_, info) = bricks.get(&b.path)?;
                let st = info.lock().unwrap().clone();
                Some(BrickStatus {
                    brick: b.to_string(),
                    port: st.port,
                    pid: st.pid,
                    online: st.port.is_some(),
                    reason: st.offline,
                })
            })
            .collect()
    }

    async fn status_of(self: &Arc<Self>, vol: &Volume) -> Vec<BrickStatus> {
        let mut out = Vec::new();
        let mut hosts: Vec<&str> = vol.bricks.iter().map(|b| b.host.as_str()).collect();
        hosts.dedup();
        let mut seen = std::collections::HashSet::new();
        for h in hosts {
            if !seen.insert(h) {
                continue;
            }
            if let Response::Bricks(bs) = self
                .on_host(
                    h,
                    Request::LocalStatus {
                        volume: vol.name.clone(),
                    },
                )
                .await
            {
                out.extend(bs);
            }
        }
        vol.bricks
            .iter()
            .map(|b| {
                let key = b.to_string();
                out.iter()
                    .find(|s| s.brick == key)
                    .cloned()
                    .unwrap_or(BrickStatus {
                        brick: key,
                        port: None,
                        pid: None,
                        online: false,
                        reason: None,
                    })
            })
            .collect()
    }

    /// Changes a volume known to exist (checked by `volume` first).
    fn edit_volume(&self, name: &str, f: impl FnOnce(&mut Volume)) {
        if let Some(v) = self.state.lock().unwrap().volumes.get_mut(name) {
            f(v);
        }
    }

    fn volume(&self, name: &str) -> Result<Volume, String> {
        self.state
            .lock()
            .unwrap()
            .volumes
            .get(name)
            .cloned()
            .ok_or_else(|| format!("Volume {name} does not exist"))
    }

    async fn handle(self: Arc<Self>, req: Request) -> Response {
        match req {
            Request::PeerList => {
                let peers = self.state.lock().unwrap().peers.clone();
                Response::Peers {
                    me: self.me.clone(),
                    peers,
                }
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
            } => {
                if let Some(c) = client {
                    self.clients
                        .lock()
                        .unwrap()
                        .insert((name.clone(), c), (known, std::time::Instant::now()));
                }
                let mut rx = self.changed.subscribe();
                let deadline = tokio::time::Instant::now() + WATCH_MAX;
                loop {
                    let now = self.vol_desc(&name);
                    let news = match &now {
                        Response::VolDesc(d) => known != Some(d.version),
                        _ => true,
                    };
                    if news {
                        return now;
                    }
                    match tokio::time::timeout_at(deadline, rx.changed()).await {
                        Ok(Ok(())) => continue,
                        _ => return now,
                    }
                }
            }
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

    /// Requests that change the cluster state; called under `op_lock`.
    async fn change(self: &Arc<Self>, req: Request) -> Result<String, String> {
        match req {
            Request::PeerProbe { host } => {
                if self.is_local(&host).await {
                    return Ok("Probe on localhost not needed".into());
                }
                if self.peer_mgmt(&host).is_some() {
                    return Ok(format!(
                        "Host {host} port {} already in peer list",
                        self.cfg.listen.port()
                    ));
                }
                let addr = rpc::mgmt_addr(&host, self.cfg.listen.port());
                let st = self.state.lock().unwrap().clone();
                let resp = rpc::call(
                    &addr,
                    &Request::PeerJoin {
                        me: self.me.clone(),
                        state: st,
                    },
                )
                .await
                .map_err(|e| format!("Probe returned with {e}"))?;
                let Response::Joined { me } = resp else {
                    return Err(format!("Probe returned with unexpected answer {resp:?}"));
                };
                let peer = Peer {
                    uuid: me.uuid,
                    host: host.clone(),
                    mgmt: addr,
                };
                self.state.lock().unwrap().peers.push(peer);
                self.commit().await?;
                Ok(String::new())
            }
            Request::PeerDetach { host } => {
                let uses = {
                    let st = self.state.lock().unwrap();
                    if !st.peers.iter().any(|p| p.host == host) {
                        return Err(format!("{host} is not part of cluster"));
                    }
                    st.volumes
                        .values()
                        .any(|v| v.bricks.iter().any(|b| b.host == host))
                };
                if uses {
                    return Err(format!(
                        "Peer {host} hosts one or more bricks. Remove them before detaching."
                    ));
                }
                let addr = self.peer_mgmt(&host).unwrap();
                self.state.lock().unwrap().peers.retain(|p| p.host != host);
                self.commit().await?;
                let alone = ClusterState::default();
                let _ = rpc::call(&addr, &Request::Sync { state: alone }).await;
                Ok(String::new())
            }
            Request::VolumeCreate {
                name,
                replica,
                arbiter,
                transport,
                bricks,
                force,
            } => {
                if arbiter > 0 && (replica != 3 || arbiter != 1) {
                    return Err("For arbiter configuration, replica count must be 3 and arbiter count must be 1".into());
                }
                self.create_volume(name, replica, arbiter, transport, bricks, force)
                    .await
            }
            Request::VolumeStart { name, force } => {
                let v = self.volume(&name)?;
                if v.status == VolStatus::Started && !force {
                    return Err(format!("Volume {name} already started"));
                }
                self.edit_volume(&name, |v| v.status = VolStatus::Started);
                self.commit().await?;
                for h in v
                    .bricks
                    .iter()
                    .map(|b| b.host.clone())
                    .collect::<std::collections::BTreeSet<_>>()
                {
                    let _ = self
                        .on_host(
                            &h,
                            Request::BricksRun {
                                volume: name.clone(),
                                force,
                            },
                        )
                        .await;
                }
                // Report bricks that do not come up, but keep trying them.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
                loop {
                    let st = self.status_of(&v).await;
                    let down: Vec<String> = st
                        .iter()
                        .filter(|s| !s.online)
                        .map(|s| s.brick.clone())
                        .collect();
                    if down.is_empty() {
                        return Ok(String::new());
                    }
                    let offline: Vec<String> = st
                        .iter()
                        .filter_map(|s| Some(format!("{}: {}", s.brick, s.reason.as_ref()?)))
                        .collect();
                    if !offline.is_empty() {
                        return Err(format!("bricks offline: {}", offline.join("; ")));
                    }
                    if tokio::time::Instant::now() > deadline {
                        return Err(format!(
                            "bricks did not come online: {} (see the brick logs under the daemon's state directory)",
                            down.join(", ")
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Request::VolumeStop { name } => {
                let v = self.volume(&name)?;
                if v.status != VolStatus::Started {
                    return Err(format!("Volume {name} is not in the started state"));
                }
                self.edit_volume(&name, |v| v.status = VolStatus::Stopped);
                self.commit().await?;
                Ok(String::new())
            }
            Request::VolumeDelete { name } => {
                let v = self.volume(&name)?;
                if v.status == VolStatus::Started {
                    return Err(format!("Volume {name} has been started.Volume needs to be stopped before deletion."));
                }
                for b in &v.bricks {
                    let _ = self
                        .on_host(&b.host, Request::BrickRelease { brick: b.clone() })
                        .await;
                }
                self.state.lock().unwrap().volumes.remove(&name);
                self.commit().await?;
                Ok(String::new())
            }
            Request::VolumeSet { name, key, value } => {
                self.volume(&name)?;
                let value = options::validate(&key, &value)?;
                self.edit_volume(&name, |v| {
                    v.options.insert(key, value);
                    v.version += 1;
                });
                self.commit().await?;
                Ok(String::new())
            }
            Request::VolumeReset { name, key } => {
                self.volume(&name)?;
                if let Some(k) = &key {
                    if options::spec(k).is_none() {
                        return Err(format!("option : {k} does not exist"));
                    }
                }
                self.edit_volume(&name, |v| {
                    match key {
                        Some(k) => {
                            v.options.remove(&k);
                        }
                        None => v.options.clear(),
                    }
                    v.version += 1;
                });
                self.commit().await?;
                Ok(String::new())
            }
            other => Err(format!("unexpected request {other:?}")),
        }
    }

    async fn create_volume(
        self: &Arc<Self>,
        name: String,
        replica: usize,
        arbiter: usize,
        transport: String,
        bricks: Vec<String>,
        force: bool,
    ) -> Result<String, String> {
        if !valid_volname(&name) {
            return Err(format!(
                "Volume name {name} is not valid: use letters, digits, '-' and '_'"
            ));
        }
        if self.state.lock().unwrap().volumes.contains_key(&name) {
            return Err(format!("Volume {name} already exists"));
        }
        if transport != "tcp" {
            return Err(format!("transport {transport} is not supported (use tcp)"));
        }
        if replica == 0 {
            return Err("replica count should be greater than 1".into());
        }
        if bricks.is_empty() {
            return Err("at least one brick is needed".into());
        }
        if !bricks.len().is_multiple_of(replica) {
            return Err(format!(
                "Incorrect number of bricks supplied {} with count {replica}",
                bricks.len()
            ));
        }
        let parsed: Vec<Brick> = bricks
            .iter()
            .map(|b| Brick::parse(b))
            .collect::<Result<_, _>>()?;
        for (i, a) in parsed.iter().enumerate() {
            for b in &parsed[i + 1..] {
                if a.host == b.host && a.path == b.path {
                    return Err(format!("Found duplicate exports {a}"));
                }
                if a.host == b.host && nested(&a.path, &b.path) {
                    return Err(format!(
                        "Brick: {a}, {b} one of the bricks contain the other"
                    ));
                }
            }
        }
        for b in &parsed {
            if !self.is_local(&b.host).await && self.peer_mgmt(&b.host).is_none() {
                return Err(format!("Host {} is not in 'Peer in Cluster' state", b.host));
            }
        }
        {
            let st = self.state.lock().unwrap();
            for v in st.volumes.values() {
                for old in &v.bricks {
                    for b in &parsed {
                        if old.host == b.host && nested(&old.path, &b.path) {
                            return Err(format!(
                                "{} is already part of a volume ({}: {old})",
                                b, v.name
                            ));
                        }
                    }
                }
            }
        }
        for b in &parsed {
            match self
                .on_host(
                    &b.host,
                    Request::BrickCheck {
                        brick: b.clone(),
                        volume: name.clone(),
                        force,
                    },
                )
                .await
            {
                Response::Ok(_) => {}
                Response::Err(e) => return Err(e),
                other => return Err(format!("unexpected answer {other:?}")),
            }
        }
        let id = uuid::Uuid::new_v4().to_string();
        let mut done = Vec::new();
        for b in &parsed {
            match self
                .on_host(
                    &b.host,
                    Request::BrickInit {
                        brick: b.clone(),
                        volume_id: id.clone(),
                    },
                )
                .await
            {
                Response::Ok(_) => done.push(b.clone()),
                other => {
                    for d in done {
                        let _ = self
                            .on_host(&d.host, Request::BrickRelease { brick: d.clone() })
                            .await;
                    }
                    return Err(match other {
                        Response::Err(e) => e,
                        o => format!("unexpected answer {o:?}"),
                    });
                }
            }
        }
        let vol = Volume {
            name: name.clone(),
            id,
            replica,
            transport,
            bricks: parsed,
            status: VolStatus::Created,
            options: Default::default(),
            version: 1,
            arbiter,
        };
        self.state.lock().unwrap().volumes.insert(name, vol);
        self.commit().await?;
        Ok("please start the volume to access data".into())
    }
}

fn mgmt_self(cfg: &Config) -> String {
    if cfg.listen.ip().is_unspecified() {
        format!("{}:{}", cfg.host, cfg.listen.port())
    } else {
        cfg.listen.to_string()
    }
}
