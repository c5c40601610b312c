//! The management daemon (`mortar daemon`), one per server. It holds its
//! part of the replicated cluster state (`consensus`: a Raft log over the
//! pool's daemons), answers the CLI and mounting clients, and runs one
//! brick process per local brick of every started volume (`supervise`:
//! restarted when it dies, adopted after a daemon crash, left offline with
//! its reason when its health check fails). A daemon stopped by SIGTERM
//! stops its bricks first.
//!
//! Changes are made on the Raft leader only: a server the CLI asks passes
//! a change to the leader (`Request::Leader`), which validates it, commits
//! its commands and answers with the log index, which the first server
//! applies before it answers. Changes on the leader are serialised by one
//! async lock; the applied state is copied into a plain mutex (the view
//! every read uses) that is never held across a network call.
//!
//! Layout: `mod.rs` the daemon, its connections and the view of the
//! state; `requests` the answers to every request; `leader` where changes
//! are made; `ops` the dispatch of changes to the operations of each
//! family, which validate and produce commands: `peers`, `volumes`,
//! `credentials`, `replace` (bricks replaced and reset), `rebalance` (and
//! remove-brick);
//! `members` liveness, voters and server quorum; `certs` this server's
//! certificates on record and their rotation; `bricks` supervision;
//! `heal` the self-heal daemons; `trash` the trash sweepers; `bitrot` the scrubbers; `follow` volume descriptions for clients;
//! `observe` and `reports` metrics, statedumps, profile and top.

use crate::error::Error;
mod bitrot;
mod bricks;
mod certs;
mod credentials;
mod follow;
mod heal;
mod leader;
mod members;
mod nfs;
mod observe;
mod ops;
mod peers;
mod rebalance;
mod replace;
mod reports;
mod requests;
mod snapshots;
mod trash;
mod volumes;

use super::command::Command;
use super::consensus::{self, Consensus, WriteError};
use super::options;
use super::rpc::{self, BrickStatus, HealOp, HealReport, Request, Response};
use super::state::{Brick, ClusterState, Peer, Store, VolStatus, Volume};
use super::supervise::{supervise, BrickInfo, BrickSpec, OptionsFeed};
use super::volgen;
use crate::authority;
use bricks::BrickProc;
use follow::Seen;
use heal::HealerProc;
use mortar_heal::Healer;
use mortar_protocol::tls;
use mortar_storage::posix::VOLUME_ID_XATTR;
use mortar_xlators::cluster::replicate::options::SELF_HEAL_DAEMON;

use leader::NOT_LEADER;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub struct Config {
    pub listen: SocketAddr,
    pub host: String,
    pub state_dir: PathBuf,
    /// Where to serve Prometheus metrics (None: not at all); the bricks
    /// this daemon starts serve theirs on its IP.
    pub metrics: Option<SocketAddr>,
}

pub struct Daemon {
    cfg: Config,
    me: Peer,
    /// The replicated state, this server's part of it.
    consensus: Arc<Consensus>,
    /// The applied state as this server sees it: its peers (the other
    /// members) and the volumes. Made again after every change applied,
    /// and shared: readers take the `Arc`, not a copy.
    state: Arc<Mutex<Arc<ClusterState>>>,
    /// Connections to the other hosts' daemons, kept from one command to
    /// the next (`on_host`).
    hosts: rpc::Pool,
    /// The applied state `state` was last made from. Holding it makes the
    /// machine copy rather than change it in place, so that `Arc::ptr_eq`
    /// tells whether anything was applied since.
    seen: Mutex<Option<Arc<consensus::Applied>>>,
    /// The client graph descriptions of the started volumes, generated
    /// from `state` when first asked and dropped when it changes: one
    /// generation per change, however many clients, bricks and healers
    /// ask (locked after `state`).
    descs: Mutex<HashMap<String, Arc<mortar_core::desc::VolDesc>>>,
    bricks: Mutex<HashMap<String, (BrickProc, BrickInfo)>>,
    /// Bricks taken out of a volume that still serve it for a moment
    /// (`bricks::LEAVING_GRACE`), by path: whether their release
    /// (`BrickRelease`) waits for them to stop.
    leaving: Mutex<HashMap<String, bool>>,
    /// Told whenever a brick here comes up, goes down or goes offline.
    bricks_changed: Arc<tokio::sync::Notify>,
    op_lock: tokio::sync::Mutex<()>,
    /// One rotation of this server's certificates at a time.
    rotate_lock: tokio::sync::Mutex<()>,
    /// One `reconcile` at a time, each from the view as it is then.
    reconcile_lock: tokio::sync::Mutex<()>,
    /// One change of voters at a time (`balance`: a probe's and the
    /// heartbeat loop's would collide, and openraft refuses the second).
    balance_lock: tokio::sync::Mutex<()>,
    /// Self-heal per replicated volume with bricks here: the graph it
    /// was built for, the healer and its task (`heal::HealerProc`).
    healers: Mutex<HashMap<String, HealerProc>>,
    /// The bitrot scrubbers this server runs, by volume (`bitrot`).
    scrubbers: Mutex<HashMap<String, bitrot::ScrubberProc>>,
    /// The trash sweepers this server runs, by volume (`trash`).
    sweepers: Mutex<HashMap<String, trash::SweeperProc>>,
    /// The NFS server this server runs, if any volume wants one.
    nfs: Mutex<Option<nfs::NfsProc>>,
    /// The rebalances this server runs, by volume.
    /// The rebalance rows running here, by task id and row host.
    rebalancers: Mutex<HashMap<(String, String), Arc<mortar_rebalance::Rebalancer>>>,
    /// Host names resolved by `is_local`: whether each is this server,
    /// and when that was found.
    local_names: Mutex<HashMap<String, (bool, std::time::Instant)>>,
    /// Healers not started yet, waiting for the bricks here: since when.
    healer_waits: Mutex<HashMap<String, std::time::Instant>>,
    /// Counts the changes of the view: what `WatchVolDesc` waits on.
    changed: watch::Sender<u64>,
    /// Mounted clients that follow a volume here: (volume, client) → the
    /// graph version they run and when they last asked.
    clients: Mutex<HashMap<(String, rpc::ClientInfo), Seen>>,
    /// When this daemon started (clients that followed its predecessor
    /// come back within `rpc::FOLLOW_RETRY`).
    born: std::time::Instant,
    /// What this daemon knows of each peer's liveness, by uuid (`members`).
    liveness: Mutex<members::Heard>,
    /// Volumes whose bricks here are stopped for want of server quorum,
    /// with why (`members`).
    quorum_lost: Mutex<HashMap<String, String>>,
}

fn err(e: impl Into<Error>) -> Response {
    Response::Err(e.into())
}

impl Daemon {
    pub async fn run(cfg: Config) -> anyhow::Result<()> {
        let store = Store::new(&cfg.state_dir)?;
        let mut identity = store.load()?;
        // A new server's uuid is kept before anything is made with it: a
        // daemon stopped a moment after it started must come back as the
        // same member of its pool (of one), not as a stranger to its own
        // log.
        store.save(&identity)?;
        // Volumes kept by a daemon from before the replicated state: put
        // into the log once this server leads its pool of one.
        let legacy = std::mem::take(&mut identity.volumes);
        identity.peers = Default::default();
        // Its certificates, made at the first start (a pool of its own).
        authority::ensure(&cfg.state_dir, &cfg.host).map_err(anyhow::Error::msg)?;
        tls::install_file(&authority::server_credential(&cfg.state_dir))
            .map_err(anyhow::Error::msg)?;
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen))?;
        let me = Peer {
            uuid: identity.uuid.clone(),
            host: cfg.host.clone(),
            mgmt: mgmt_self(&cfg),
        };
        let consensus = Consensus::start(&cfg.state_dir.join("raft"), me.clone()).await?;
        let d = Arc::new(Daemon {
            cfg,
            me,
            consensus,
            state: Arc::new(Mutex::new(Arc::new(identity.clone()))),
            hosts: rpc::Pool::default(),
            seen: Mutex::new(None),
            descs: Mutex::new(HashMap::new()),
            healer_waits: Mutex::new(HashMap::new()),
            local_names: Mutex::new(HashMap::new()),
            bricks: Mutex::new(HashMap::new()),
            leaving: Mutex::new(HashMap::new()),
            bricks_changed: Default::default(),
            op_lock: tokio::sync::Mutex::new(()),
            rotate_lock: tokio::sync::Mutex::new(()),
            reconcile_lock: tokio::sync::Mutex::new(()),
            balance_lock: tokio::sync::Mutex::new(()),
            healers: Mutex::new(HashMap::new()),
            sweepers: Mutex::new(HashMap::new()),
            scrubbers: Mutex::new(HashMap::new()),
            nfs: Mutex::new(None),
            rebalancers: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
            clients: Mutex::new(HashMap::new()),
            born: std::time::Instant::now(),
            liveness: Mutex::new(Default::default()),
            quorum_lost: Mutex::new(HashMap::new()),
        });
        d.refresh();
        // Which program runs bricks is asked now, not at the first start
        // (an exec per server: at 300 servers, a start's whole budget),
        // and one is started ahead of need.
        tokio::spawn(crate::supervise::keep_standby());
        let accept = tokio::spawn(d.clone().accept(listener));
        if !legacy.is_empty() {
            d.migrate(
                legacy
                    .into_iter()
                    .map(|(n, v)| (n, Volume::clone(&v)))
                    .collect(),
            )
            .await;
        }
        store.save(&identity)?;
        tokio::spawn(d.clone().heartbeats());
        tokio::spawn(d.clone().follow_state());
        tokio::spawn(d.clone().report_ports());
        tokio::spawn(d.clone().register_certs());
        tokio::spawn(d.clone().resume_tasks());
        d.serve_metrics().await;
        d.statedump_sections();
        tracing::info!(listen = %d.cfg.listen, host = %d.cfg.host, state = %d.cfg.state_dir.display(), id = d.consensus.id(), "management daemon started");
        let d2 = d.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
            let mut int =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).unwrap();
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            tracing::info!("stopping: bricks first");
            d2.stop_all_bricks().await;
            d2.stop_nfs().await;
            std::process::exit(0);
        });
        accept.await?
    }

    async fn accept(self: Arc<Self>, listener: TcpListener) -> anyhow::Result<()> {
        use mortar_protocol::admit;
        admit::accept_loop(
            listener,
            "management",
            admit::CAPS,
            |stream, peer, ticket| {
                let d = self.clone();
                // Taken per connection: a server that joins a pool changes it.
                let acceptor = tls::acceptor(tls::Clients::Anyone);
                async move {
                    let served = async {
                        let (stream, who) = ticket
                            .handshake("TLS handshake", acceptor?.accept(stream))
                            .await?;
                        d.serve(stream, who).await
                    };
                    match served.await {
                        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                            tracing::warn!(%peer, "management connection refused: {e}")
                        }
                        // A peer that broke the rules (too long, too slow).
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::InvalidData | std::io::ErrorKind::TimedOut
                            ) =>
                        {
                            tracing::warn!(%peer, "management connection closed: {e}")
                        }
                        Err(e) => tracing::debug!(%peer, "rpc connection: {e}"),
                        Ok(()) => {}
                    }
                }
            },
        )
        .await;
        Ok(())
    }

    /// Puts volumes kept from before the replicated state into the log.
    async fn migrate(&self, legacy: std::collections::BTreeMap<String, Volume>) {
        for _ in 0..100 {
            if self.consensus.is_leader() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for (name, v) in legacy {
            match self.execute(Command::AddVolume(v)).await {
                Ok(_) => tracing::info!(volume = %name, "volume moved into the replicated state"),
                Err(e) => {
                    tracing::error!(volume = %name, "volume not moved into the replicated state: {e}")
                }
            }
        }
    }

    /// Copies the applied state into the view.
    pub(super) fn refresh(&self) {
        let a = self.consensus.applied();
        let (same_members, same_certs) = {
            let mut seen = self.seen.lock().unwrap();
            if seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, &a)) {
                return;
            }
            let same = seen
                .as_ref()
                .is_some_and(|s| Arc::ptr_eq(&s.membership, &a.membership));
            // Most changes are to volumes: the record of certificates
            // (300 servers' at 300) is made again only when what it is
            // made of changed.
            let same_certs = same
                && seen.as_ref().is_some_and(|s| {
                    s.state.certs == a.state.certs && s.state.operators == a.state.operators
                });
            *seen = Some(a.clone());
            (same, same_certs)
        };
        let me = self.consensus.id();
        {
            let mut st = self.state.lock().unwrap();
            // The servers, taken again only when the membership changed.
            let peers: Arc<Vec<Peer>> = if same_members {
                st.peers.clone()
            } else {
                Arc::new(
                    a.membership
                        .membership()
                        .nodes()
                        .filter(|(id, _)| **id != me)
                        .map(|(_, p)| p.clone())
                        .collect(),
                )
            };
            let mut descs = self.descs.lock().unwrap();
            if peers != st.peers {
                descs.clear();
            } else {
                // A description is made from its volume and the peers'
                // addresses: kept while neither changed.
                descs.retain(|name, _| st.volumes.get(name) == a.state.volumes.get(name));
            }
            *st = Arc::new(ClusterState {
                uuid: st.uuid.clone(),
                peers,
                volumes: a.state.volumes.clone(),
                certs: a.state.certs.clone(),
                operators: a.state.operators.clone(),
                options: a.state.options.clone(),
                retired: a.state.retired.clone(),
                snapshots: a.state.snapshots.clone(),
            });
            // The servers this daemon connects to must be on the record.
            if !same_certs {
                let record: Option<Vec<String>> = st.pool_certs().map(|c| c.into_iter().collect());
                tls::set_record(record.as_deref());
            }
        }
        self.changed.send_modify(|n| *n += 1);
    }

    /// Refreshes the view and brings the local bricks in line after every
    /// change applied here, for as long as the daemon runs.
    async fn follow_state(self: Arc<Self>) {
        let mut rx = self.consensus.subscribe();
        loop {
            self.refresh();
            tracing::debug!(
                applied = self.consensus.applied_index(),
                "following the state"
            );
            self.reconcile().await;
            self.reconcile_rebalances().await;
            // Healers waiting for the bricks here start as those come up
            // (`bricks_changed`), or once they waited long enough.
            loop {
                let bricks = self.bricks_changed.notified();
                tokio::pin!(bricks);
                bricks.as_mut().enable();
                if self.healers_due() {
                    let _one = self.reconcile_lock.lock().await;
                    let st = self.state.lock().unwrap().clone();
                    self.reconcile_healers(&st).await;
                }
                let until = self.healers_wait_until();
                let give_up = until.unwrap_or_else(tokio::time::Instant::now);
                tokio::select! {
                    r = rx.changed() => match r {
                        Ok(()) => break,
                        Err(_) => return,
                    },
                    _ = bricks.as_mut(), if until.is_some() => {}
                    _ = tokio::time::sleep_until(give_up), if until.is_some() => {}
                }
            }
        }
    }

    /// Answers the requests of one connection; `who`: what its
    /// certificate says of the client (None: it showed none, and may only
    /// join the pool).
    pub(super) async fn serve(
        self: Arc<Self>,
        stream: tls::Stream,
        who: Option<tls::Peer>,
    ) -> std::io::Result<()> {
        use crate::rpc::{read_line_within, send_json, LINE_TIMEOUT, MAX_LINE};
        let (rd, mut wr) = tokio::io::split(stream);
        let mut rd = BufReader::new(rd);
        // A client without a certificate may only ask to join: a line of
        // a few KiB.
        let limit = if who.is_some() { MAX_LINE } else { 64 << 10 };
        // A request that does not arrive whole (too slow, too long, not
        // text) is answered with why, and the connection closed: the
        // caller says what went wrong, not that the connection ended.
        async fn give_up<W: tokio::io::AsyncWrite + Unpin>(
            wr: &mut W,
            e: std::io::Error,
        ) -> std::io::Result<()> {
            let _ = send_json(wr, &err(format!("request not read: {e}"))).await;
            let _ = wr.shutdown().await;
            Err(e)
        }
        let first = mortar_protocol::admit::first_message(
            "request",
            read_line_within(&mut rd, limit, LINE_TIMEOUT),
        )
        .await;
        let mut next = match first {
            Ok(n) => n,
            Err(e) => return give_up(&mut wr, e).await,
        };
        while let Some(line) = next {
            let resp = match serde_json::from_str::<Request>(&line) {
                Ok(req) => match self.permits(who, &req) {
                    Ok(()) => self.clone().handle(req).await,
                    Err(why) => {
                        tracing::warn!(role = ?who.map(|w| w.role), request = ?std::mem::discriminant(&req), "request refused: {why}");
                        // Answered, and the connection closed: a client
                        // that keeps one open (a mount following its
                        // volume, Raft) opens another, with the
                        // credential its file holds now.
                        send_json(
                            &mut wr,
                            &err(Error::not_permitted(format!("{}{why}", rpc::REFUSED))),
                        )
                        .await?;
                        return wr.shutdown().await;
                    }
                },
                Err(e) => err(format!("malformed request: {e}")),
            };
            send_json(&mut wr, &resp).await?;
            next = match read_line_within(&mut rd, limit, LINE_TIMEOUT).await {
                Ok(n) => n,
                Err(e) => return give_up(&mut wr, e).await,
            };
        }
        Ok(())
    }

    /// Who may ask what (docs/security.md): a server anything; an
    /// administrator anything but the messages between servers; a
    /// volume's client credential that volume's description and its
    /// bricks' ports; a client without a certificate only to join.
    fn permits(&self, who: Option<tls::Peer>, req: &Request) -> Result<(), Error> {
        let Some(who) = who else {
            return match req {
                Request::PeerJoin { .. } => Ok(()),
                _ => {
                    Err("this request needs a credential of the pool (see docs/security.md)".into())
                }
            };
        };
        if matches!(who.role, tls::Role::Server | tls::Role::Admin)
            // (A certificate on the record this daemon keeps from the
            // pool's state, a set, is taken at once: this check is made of
            // every request, heartbeats too; the rest look at the state.)
            && tls::on_record(&who.fingerprint) != Some(true)
        {
            let fp = tls::hex(&who.fingerprint);
            let st = self.state.lock().unwrap();
            if st.pool_certs().is_some_and(|p| !p.contains(&fp)) {
                return Err(if st.retired_certs().contains(&fp) {
                    "this certificate is not one the pool takes: a rotation replaced it (use the new credential)"
                } else {
                    "this certificate is not one the pool takes (its server left the pool, or it was made after)"
                }
                .into());
            }
        }
        match who.role {
            tls::Role::Reader => {
                let fp = tls::hex(&who.fingerprint);
                if !self.state.lock().unwrap().is_reader(&fp) {
                    return Err(
                        "this read-only credential is not one of the pool's (revoked?)".into(),
                    );
                }
                match req.is_read_only() {
                    true => Ok(()),
                    false => {
                        Err("a read-only administrator credential may not change anything".into())
                    }
                }
            }
            tls::Role::Server => Ok(()),
            tls::Role::Admin => match req {
                Request::Raft(_)
                | Request::Heartbeat { .. }
                | Request::Leave
                | Request::Leader(_)
                | Request::RegisterCerts { .. }
                | Request::RotateOwnCerts
                | Request::ReadIndex => Err("only the pool's servers send this".into()),
                _ => Ok(()),
            },
            tls::Role::Client => {
                let volume = match req {
                    Request::GetVolDesc { name } | Request::WatchVolDesc { name, .. } => name,
                    Request::Fresh(inner) => return self.permits(Some(who), inner),
                    Request::Portmap { .. } => return Ok(()),
                    _ => return Err("a volume's client credential may only mount it".into()),
                };
                let fp = tls::hex(&who.fingerprint);
                let st = self.state.lock().unwrap();
                match st.volumes.get(volume) {
                    Some(v) if v.credentials.iter().any(|c| c.fingerprint == fp) => Ok(()),
                    Some(v) if v.credentials.iter().any(|c| c.retired.contains(&fp)) => Err(format!(
                        "this credential is not one of volume {volume}'s: a rotation replaced it (its holder needs the new file)"
                    ).into()),
                    _ => Err(format!(
                        "this credential is not one of volume {volume}'s (revoked, or another volume's)"
                    ).into()),
                }
            }
        }
    }

    /// Whether `host` names this server. Asked for every brick of every
    /// volume after every change: an address is compared as it is, a
    /// name is resolved once a minute at most.
    pub(super) async fn is_local(&self, host: &str) -> bool {
        let mine = self.cfg.listen.ip();
        let is_mine =
            |ip: std::net::IpAddr| ip == mine || (mine.is_unspecified() && ip.is_loopback());
        if host == self.cfg.host || host == "localhost" {
            return true;
        }
        if let Ok(ip) = host.parse::<std::net::IpAddr>() {
            return is_mine(ip);
        }
        if let Some((local, at)) = self.local_names.lock().unwrap().get(host) {
            if at.elapsed() < Duration::from_secs(60) {
                return *local;
            }
        }
        let local = match tokio::net::lookup_host((host, 0)).await {
            Ok(addrs) => addrs.into_iter().any(|a| is_mine(a.ip())),
            Err(_) => false,
        };
        self.local_names
            .lock()
            .unwrap()
            .insert(host.to_string(), (local, std::time::Instant::now()));
        local
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

    /// Runs one request per host, many at a time (a volume of 300 bricks
    /// is 300 hosts), answers in the order given.
    async fn on_hosts(self: &Arc<Self>, reqs: Vec<(String, Request)>) -> Vec<Response> {
        use futures_util::stream::{self, StreamExt};
        // Requests that wait on their host (for its bricks to start) are
        // sent to more hosts at once.
        let at_once = match reqs.first() {
            Some((_, Request::BricksRun { .. })) => WAITING_HOSTS_AT_ONCE,
            _ => HOSTS_AT_ONCE,
        };
        stream::iter(reqs)
            .map(|(h, r)| async move { self.on_host(&h, r).await })
            .buffered(at_once)
            .collect()
            .await
    }

    /// Runs `req` for each brick on the brick's host, as `on_hosts` does;
    /// answers in the order of `bricks`.
    pub(super) async fn on_bricks(
        self: &Arc<Self>,
        bricks: &[Brick],
        req: impl Fn(&Brick) -> Request,
    ) -> Vec<Response> {
        let reqs = bricks.iter().map(|b| (b.host.clone(), req(b))).collect();
        self.on_hosts(reqs).await
    }

    /// Runs `req` once on each host with a brick of `vol`, as `on_hosts`
    /// does.
    pub(super) async fn on_volume_hosts(
        self: &Arc<Self>,
        vol: &Volume,
        req: impl Fn() -> Request,
    ) -> Vec<Response> {
        let hosts: std::collections::BTreeSet<&String> =
            vol.bricks.iter().map(|b| &b.host).collect();
        let reqs = hosts.into_iter().map(|h| (h.clone(), req())).collect();
        self.on_hosts(reqs).await
    }

    /// Runs a brick-host request on the host owning the brick.
    pub(super) async fn on_host(self: &Arc<Self>, host: &str, req: Request) -> Response {
        if self.is_local(host).await {
            return Box::pin(self.clone().handle(req)).await;
        }
        let Some(addr) = self.peer_mgmt(host) else {
            return err(Error::not_found(format!(
                "Host {host} is not in 'Peer in Cluster' state"
            )));
        };
        answered_within(host, self.hosts.ask(&addr, &req, HOST_ANSWER))
            .await
            .unwrap_or_else(Response::Err)
    }

    /// Commits a command (on the leader), then brings the view and, when
    /// it starts or stops bricks, the local bricks in line before it
    /// answers (a change of options reaches bricks and healers in the
    /// background, as on every other server). Answers the log index it
    /// was committed at.
    pub(super) async fn execute(&self, cmd: Command) -> Result<u64, Error> {
        let bricks = matches!(
            cmd,
            Command::SetStatus { .. } | Command::RemoveVolume { .. } | Command::AddVolume(_)
        );
        let t0 = std::time::Instant::now();
        let kind = cmd.kind();
        let written = self.consensus.write(cmd).await;
        if let Ok((index, _)) = &written {
            tracing::info!(index, ms = t0.elapsed().as_millis(), "committed {kind}");
        }
        match written {
            Ok((index, Ok(()))) => {
                self.refresh();
                if bricks {
                    self.reconcile().await;
                }
                Ok(index)
            }
            Ok((_, Err(why))) => Err(why),
            Err(e) => Err(self.refusal(e)),
        }
    }

    /// What the CLI is told when a change cannot be committed.
    pub(super) fn refusal(&self, e: WriteError) -> Error {
        Error::unavailable(match e {
            WriteError::NotLeader(l) => format!(
                "the leader of the pool changed during the change (now {}); nothing was changed, try again",
                l.map_or("unknown".into(), |l| l.host)
            ),
            WriteError::NoQuorum => self.minority(),
            WriteError::Failed(e) => format!("{e}; {}", self.unreachable_voters()),
        })
    }

    /// Says that this server is cut off from the majority of the voters,
    /// naming the servers it cannot reach.
    pub(super) fn minority(&self) -> String {
        format!(
            "{} is not in the majority of the pool: no change was made. {}",
            self.me.host,
            self.unreachable_voters()
        )
    }

    /// Every volume, as the view has them now.
    pub(super) fn volumes(&self) -> Vec<Arc<Volume>> {
        self.state
            .lock()
            .unwrap()
            .volumes
            .values()
            .cloned()
            .collect()
    }

    pub(super) fn volume(&self, name: &str) -> Result<Arc<Volume>, Error> {
        self.state
            .lock()
            .unwrap()
            .volumes
            .get(name)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("Volume {name} does not exist")))
    }
}

/// How long a host may take to answer a request of `on_host` or a probe (each
/// answers within `BRICKS_SETTLE` when all is well): a change waiting on
/// a host that does not answer holds the change lock no longer.
const HOST_ANSWER: Duration = Duration::from_secs(30);

/// `call` to `host`, given up after `HOST_ANSWER` with a message naming it.
async fn answered_within<T>(
    host: &str,
    call: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    tokio::time::timeout(HOST_ANSWER, call)
        .await
        .unwrap_or_else(|_| {
            Err(Error::unreachable(
                host,
                format!("{host} did not answer within {} s", HOST_ANSWER.as_secs()),
            ))
        })
}
/// How many hosts `on_hosts` asks at once.
const HOSTS_AT_ONCE: usize = 64;
/// How many hosts `on_hosts` asks at once to start bricks: each answers
/// once its bricks are up, which takes longer than other requests.
const WAITING_HOSTS_AT_ONCE: usize = 512;

fn mgmt_self(cfg: &Config) -> String {
    if cfg.listen.ip().is_unspecified() {
        format!("{}:{}", cfg.host, cfg.listen.port())
    } else {
        cfg.listen.to_string()
    }
}
