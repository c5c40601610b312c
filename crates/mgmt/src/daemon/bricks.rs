//! Supervision: one brick process per local brick of every started volume
//! (`mgmt::supervise` runs each), and their status.

use super::*;

/// How long a host waits for its bricks to come up before it answers
/// `BricksRun` (the start goes on asking for the others).
const BRICKS_SETTLE: Duration = Duration::from_secs(5);
/// How long a brick taken out of a volume that goes on (`remove-brick …
/// commit`, `replace-brick`) keeps serving: its clients switch to the
/// volume's new graph within this, and the one they use until then keeps
/// every set it had (a removed set stopped at once fails their requests
/// with ENOTCONN for a moment).
const LEAVING_GRACE: Duration = Duration::from_secs(2);

pub(super) struct BrickProc {
    pub(super) volume: String,
    /// The brick's host, as the volume names it.
    pub(super) host: String,
    stop: watch::Sender<bool>,
    done: Option<tokio::task::JoinHandle<()>>,
}

impl Daemon {
    /// Starts the local bricks of started volumes and stops the others.
    pub(super) async fn reconcile(&self) {
        let _one = self.reconcile_lock.lock().await;
        let st = self.state.lock().unwrap().clone();
        let lost: Vec<String> = self.quorum_lost.lock().unwrap().keys().cloned().collect();
        let mut want: HashMap<String, (String, String, bool, &Brick, String)> = HashMap::new();
        for v in st
            .volumes
            .values()
            .filter(|v| v.status == VolStatus::Started && !lost.contains(&v.name))
        {
            for (i, b) in v.bricks.iter().enumerate() {
                if self.is_local(&b.host).await && !v.is_resetting(b) {
                    want.insert(
                        b.path.clone(),
                        (
                            v.name.clone(),
                            v.id.clone(),
                            v.is_arbiter(i),
                            b,
                            v.key.clone(),
                        ),
                    );
                }
            }
        }
        let multiplex = options::BRICK_MULTIPLEX.bool(&st.options);
        // Taken out of a volume that goes on (not stopped, not reset).
        let taken_out = |vol: &str, path: &str| {
            st.volumes.get(vol).is_some_and(|v| {
                v.status == VolStatus::Started
                    && !lost.contains(&v.name)
                    && !v.bricks.iter().any(|b| b.path == path)
            })
        };
        let mut to_stop = Vec::new();
        let mut leaving = Vec::new();
        {
            let mut bricks = self.bricks.lock().unwrap();
            let running: Vec<String> = bricks.keys().cloned().collect();
            for path in running {
                if want.get(&path).map(|w| &w.0) != bricks.get(&path).map(|b| &b.0.volume) {
                    if let Some((mut p, _)) = bricks.remove(&path) {
                        if !want.contains_key(&path) && taken_out(&p.volume, &path) {
                            tracing::info!(brick = %path, volume = %p.volume, "brick taken out of the volume: stopped in {LEAVING_GRACE:?}, once its clients switched");
                            self.leaving
                                .lock()
                                .unwrap()
                                .entry(path.clone())
                                .or_insert(false);
                            leaving.push((path, p));
                            continue;
                        }
                        let _ = p.stop.send(true);
                        to_stop.extend(p.done.take());
                    }
                }
            }
            for (path, (vol, id, arbiter, brick, key)) in want {
                if bricks.contains_key(&path) {
                    continue;
                }
                let (stop, stop_rx) = watch::channel(false);
                let info = BrickInfo::new(self.bricks_changed.clone());
                let spec = BrickSpec {
                    path: PathBuf::from(&path),
                    volume: vol.clone(),
                    volume_id: id,
                    arbiter,
                    ip: self.cfg.listen.ip(),
                    mgmt: self.me.mgmt.clone(),
                    logs: self.cfg.state_dir.join("logs"),
                    run: self.cfg.state_dir.join("run"),
                    port: brick.port,
                    key: key.clone(),
                    credential: crate::authority::server_credential(&self.cfg.state_dir),
                    metrics: self.cfg.metrics.map(|a| a.ip()),
                    options: Some(self.options_feed(&vol)),
                    multiplex,
                };
                tracing::debug!(brick = %path, "starting brick");
                let done = tokio::spawn(supervise(spec, info.clone(), stop_rx));
                bricks.insert(
                    path,
                    (
                        BrickProc {
                            volume: vol,
                            host: brick.host.clone(),
                            stop,
                            done: Some(done),
                        },
                        info,
                    ),
                );
            }
        }
        if !leaving.is_empty() {
            tokio::time::sleep(LEAVING_GRACE).await;
            for (_, p) in &mut leaving {
                let _ = p.stop.send(true);
                to_stop.extend(p.done.take());
            }
        }
        for h in to_stop {
            let _ = h.await;
        }
        drop(leaving);
        // Bricks stopped now whose release waited for it.
        let released: Vec<String> = {
            let bricks = self.bricks.lock().unwrap();
            let mut waiting = self.leaving.lock().unwrap();
            let stopped: Vec<String> = waiting
                .keys()
                .filter(|p| !bricks.contains_key(*p))
                .cloned()
                .collect();
            stopped
                .into_iter()
                .filter(|p| waiting.remove(p) == Some(true))
                .collect()
        };
        for path in released {
            release(&path);
        }
        self.reconcile_healers(&st).await;
        self.reconcile_sweepers(&st).await;
        self.reconcile_scrubbers(&st).await;
        self.reconcile_nfs(&st).await;
    }

    /// Gives back brick directory `path` (taken out of its volume): its
    /// volume id and mortar's metadata go, once the brick stopped. One
    /// still serving here (running, or leaving) is given back when it
    /// stops: until then its clients' old graph still uses it.
    pub(super) fn release_brick(&self, path: &str) {
        let running = self.bricks.lock().unwrap().contains_key(path);
        let mut leaving = self.leaving.lock().unwrap();
        match leaving.get_mut(path) {
            Some(later) => *later = true,
            None if running => {
                leaving.insert(path.to_string(), true);
            }
            None => release(path),
        }
    }

    /// The options of volume `name` as its bricks here take them: from
    /// this view, each time it changes.
    fn options_feed(&self, name: &str) -> OptionsFeed {
        let (state, name) = (self.state.clone(), name.to_string());
        OptionsFeed {
            next: Box::new(move |sent| {
                let st = state.lock().unwrap().clone();
                let v = st
                    .volumes
                    .get(&name)
                    .filter(|v| v.status == VolStatus::Started)?;
                // (Made only when it moved on: 300 servers' certificates
                // in the pool's record.)
                let now = Some((v.id.clone(), v.version));
                if *sent == now {
                    return None;
                }
                *sent = now;
                serde_json::to_string(&volgen::options_only(&st, v)).ok()
            }),
            changed: self.changed.subscribe(),
        }
    }

    /// Keeps the bricks' ports in the cluster state true: a local brick
    /// that listens on another port than the state gives it (the one
    /// chosen was taken, or it was started before ports were kept there)
    /// has its port committed, so that clients find it without asking.
    pub(super) async fn report_ports(self: Arc<Self>) {
        let mut state = self.changed.subscribe();
        loop {
            // Looked at again when a brick here or the state changes (no
            // timer while nothing does).
            let bricks = self.bricks_changed.notified();
            tokio::pin!(bricks);
            bricks.as_mut().enable();
            let moved: Vec<Request> = {
                let st = self.state.lock().unwrap();
                let bricks = self.bricks.lock().unwrap();
                bricks
                    .iter()
                    .filter_map(|(path, (p, info))| {
                        let port = info.get().port?;
                        let b = st
                            .volumes
                            .get(&p.volume)?
                            .bricks
                            .iter()
                            .find(|b| &b.path == path && b.host == p.host)?;
                        (b.port != Some(port)).then(|| Request::BrickPort {
                            volume: p.volume.clone(),
                            host: b.host.clone(),
                            path: path.clone(),
                            port,
                        })
                    })
                    .collect()
            };
            let mut failed = false;
            for req in moved {
                let what = format!("{req:?}");
                match self.clone().change_anywhere(req).await {
                    Ok(_) => tracing::info!("brick port recorded: {what}"),
                    Err(e) => {
                        tracing::warn!("brick port not recorded: {what}: {e}");
                        failed = true;
                    }
                }
            }
            if failed {
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
            tokio::select! {
                _ = bricks => {}
                r = state.changed() => if r.is_err() { return },
            }
        }
    }

    /// Stops watching (and so stops) the local bricks `which` picks, and
    /// waits until their watchers are done.
    pub(super) async fn stop_bricks(&self, which: impl Fn(&BrickProc, &BrickInfo) -> bool) {
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
    pub(super) async fn forget_offline(&self, volume: &str) {
        self.stop_bricks(|p, i| p.volume == volume && i.get().offline.is_some())
            .await;
    }

    pub(super) async fn stop_all_bricks(&self) {
        self.stop_bricks(|_, _| true).await;
    }

    pub(super) fn local_status(&self, vol: &Volume) -> Vec<BrickStatus> {
        let bricks = self.bricks.lock().unwrap();
        let lost = self.quorum_lost.lock().unwrap().get(&vol.name).cloned();
        vol.bricks
            .iter()
            .filter_map(|b| {
                // Another host's brick may have the same path as one here.
                match (bricks.get(&b.path).filter(|(p, _)| p.host == b.host), &lost) {
                    (Some((_, info)), _) => {
                        let st = info.get();
                        Some(BrickStatus {
                            brick: b.to_string(),
                            port: st.port,
                            pid: st.pid,
                            online: st.port.is_some(),
                            reason: st.offline,
                            slow_for: Vec::new(),
                        })
                    }
                    // Stopped here for want of server quorum.
                    (None, Some(why)) if b.host == self.me.host => Some(BrickStatus {
                        brick: b.to_string(),
                        port: None,
                        pid: None,
                        online: false,
                        reason: Some(why.clone()),
                        slow_for: Vec::new(),
                    }),
                    _ => None,
                }
            })
            .collect()
    }

    /// The status of the local bricks of `vol`, once each is up or has
    /// gone offline, or `BRICKS_SETTLE` has passed.
    pub(super) async fn local_bricks_settled(&self, vol: &Volume) -> Vec<BrickStatus> {
        let deadline = tokio::time::Instant::now() + BRICKS_SETTLE;
        loop {
            // Asked to be told before looking, so that no change between
            // the look and the wait is missed.
            let changed = self.bricks_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let st = self.local_status(vol);
            let settled = st.iter().all(|b| b.online || b.reason.is_some());
            if settled || tokio::time::timeout_at(deadline, changed).await.is_err() {
                return st;
            }
        }
    }

    pub(super) async fn status_of(self: &Arc<Self>, vol: &Volume) -> Vec<BrickStatus> {
        let answers = self
            .on_volume_hosts(vol, || Request::LocalStatus {
                volume: vol.name.clone(),
            })
            .await;
        let mut out = Vec::new();
        for r in answers {
            if let Response::Bricks(bs) = r {
                out.extend(bs);
            }
        }
        self.statuses(vol, out)
    }

    /// Notes, on the bricks of dispersed volume `vol`, the mounts that read
    /// around them because they answer late, as the mounts told the
    /// pool's daemons lately (each asks at least every 25 s).
    pub(super) async fn mark_slow(&self, vol: &Volume, bricks: &mut [BrickStatus]) {
        if !vol.dispersed() {
            return;
        }
        for c in self.clients_anywhere(&vol.name).await {
            for b in bricks.iter_mut().filter(|b| c.slow.contains(&b.brick)) {
                b.slow_for
                    .push(format!("{}:{}", c.client.host, c.client.mount));
            }
        }
    }

    /// The status of every brick of `vol` in order, from what the hosts
    /// answered: a brick no host spoke of is down.
    pub(super) fn statuses(&self, vol: &Volume, answers: Vec<BrickStatus>) -> Vec<BrickStatus> {
        let mut by_name: HashMap<String, BrickStatus> =
            answers.into_iter().map(|s| (s.brick.clone(), s)).collect();
        vol.bricks
            .iter()
            .map(|b| {
                let key = b.to_string();
                by_name.remove(&key).unwrap_or(BrickStatus {
                    brick: key,
                    port: None,
                    pid: None,
                    online: false,
                    reason: None,
                    slow_for: Vec::new(),
                })
            })
            .collect()
    }

    /// `BricksRun`: once the change `after` is applied here, starts (or
    /// stops) this server's bricks as the state says, and answers with
    /// those of `volume` once they have settled.
    pub(super) async fn run_bricks(
        self: &Arc<Self>,
        volume: String,
        force: bool,
        after: Option<u64>,
    ) -> Response {
        if let Some(i) = after {
            self.consensus.applied_at_least(i).await;
            self.refresh();
        }
        if force {
            self.forget_offline(&volume).await;
        }
        self.reconcile().await;
        match self.volume(&volume) {
            Ok(v) => Response::Bricks(self.local_bricks_settled(&v).await),
            Err(e) => err(e),
        }
    }
}

/// Takes mortar's marks off brick directory `path`.
fn release(path: &str) {
    tracing::info!(brick = %path, "brick directory given back: its volume id and mortar's metadata go, the files stay");
    let _ = rustix::fs::removexattr(path, VOLUME_ID_XATTR);
    mortar_storage::posix::Posix::unprepare(Path::new(path));
}
