//! The self-heal daemons this server runs, and `volume heal`.

use super::*;
use crate::error::Error;
use crate::state::{Task, TaskKind, TaskStatus};
use std::time::Instant;

/// How long a full heal waits for its healer to reach the bricks.
const FULL_HEAL_REACH: Duration = Duration::from_secs(10);

/// How long a new healer waits for the bricks here to start.
const HEALER_WAITS_FOR_BRICKS: Duration = Duration::from_secs(5);
/// How long a new healer waits at least, its bricks up or not: out of the
/// way of the `volume start` that made it (at 300 servers on one machine,
/// 300 healers starting among the bricks made the start a fifth longer),
/// and its first pass would not come sooner than `heal::INTERVAL` anyway.
const HEALER_STARTS_AFTER: Duration = Duration::from_secs(2);

/// A running self-heal.
pub(super) struct HealerProc {
    /// The description it runs: the volume's sets with a brick here. A
    /// change of options alone reconfigures it; a change of shape builds
    /// it again.
    desc: mortar_core::desc::VolDesc,
    healer: Arc<Healer>,
    task: tokio::task::JoinHandle<()>,
}

impl Daemon {
    /// Runs a healer for every started replicated volume with a brick here.
    pub(super) async fn reconcile_healers(&self, st: &ClusterState) {
        let mut want: HashMap<String, Vec<String>> = HashMap::new();
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
                want.insert(v.name.clone(), local);
            }
        }
        let mut healers = self.healers.lock().unwrap();
        healers.retain(|name, p| {
            let Some(d) = want
                .get(name)
                .and_then(|local| self.local_desc(st, name, local))
            else {
                p.task.abort();
                return false;
            };
            if d.top != p.desc.top {
                p.task.abort();
                return false;
            }
            if d.options != p.desc.options {
                p.healer.reconfigure(&d.options);
            }
            p.desc = d;
            true
        });
        let mut waits = self.healer_waits.lock().unwrap();
        waits.retain(|name, _| want.contains_key(name) && !healers.contains_key(name));
        for (name, local) in want {
            if healers.contains_key(&name) {
                continue;
            }
            // A healer starts a moment after this server's bricks of the
            // volume have (or a while has passed): 300 healers knocking at
            // bricks not yet listening were a third of the work of a
            // `volume start` at 300 servers. `follow_state` comes back
            // meanwhile.
            let since = *waits.entry(name.clone()).or_insert_with(Instant::now);
            if !self.healer_may_start(&name, since) {
                continue;
            }
            waits.remove(&name);
            let Some(desc) = self.local_desc(st, &name, &local) else {
                continue;
            };
            let key = st.volumes.get(&name).map_or("", |v| v.key.as_str());
            match Healer::new(
                &desc,
                |h| local.iter().any(|l| l == h),
                &rpc::internal_env(key),
            ) {
                Ok(h) => {
                    tracing::info!(volume = %name, "self-heal daemon started");
                    let task = tokio::spawn(h.clone().run());
                    healers.insert(
                        name,
                        HealerProc {
                            desc,
                            healer: h,
                            task,
                        },
                    );
                }
                Err(e) => tracing::warn!(volume = %name, "cannot start self-heal: {e:#}"),
            }
        }
    }

    /// Volume `name`'s description with only the replica sets with a
    /// brick on one of `local`: a healer connects to those only (at 300
    /// servers, one set of a hundred), and only they are generated.
    pub(super) fn local_desc(
        &self,
        st: &ClusterState,
        name: &str,
        local: &[String],
    ) -> Option<mortar_core::desc::VolDesc> {
        let v = st.volumes.get(name)?;
        let port = self.cfg.listen.port();
        volgen::generate_sets(st, v, &self.me.host, &self.me.mgmt, port, &|bricks| {
            bricks.iter().any(|b| local.contains(&b.host))
        })
    }

    /// Whether the healer of `volume`, waiting since `since`, may start:
    /// it waited `HEALER_STARTS_AFTER` and every brick of it here listens
    /// or has gone offline, or it waited long enough.
    fn healer_may_start(&self, volume: &str, since: Instant) -> bool {
        let waited = since.elapsed();
        if waited >= HEALER_WAITS_FOR_BRICKS {
            return true;
        }
        waited >= HEALER_STARTS_AFTER
            && self
                .bricks
                .lock()
                .unwrap()
                .values()
                .filter(|(p, _)| p.volume == volume)
                .all(|(_, i)| {
                    let i = i.get();
                    i.port.is_some() || i.offline.is_some()
                })
    }

    /// When a healer waiting here is next to be looked at (its bricks
    /// coming up wake `follow_state` too): once it waited
    /// `HEALER_STARTS_AFTER`, else when it starts anyway.
    pub(super) fn healers_wait_until(&self) -> Option<tokio::time::Instant> {
        let waits = self.healer_waits.lock().unwrap();
        waits
            .values()
            .map(|since| {
                let soon = *since + HEALER_STARTS_AFTER;
                let at = if soon > Instant::now() {
                    soon
                } else {
                    *since + HEALER_WAITS_FOR_BRICKS
                };
                tokio::time::Instant::from(at)
            })
            .min()
    }

    /// Whether a healer waiting for the bricks here may start now.
    pub(super) fn healers_due(&self) -> bool {
        let waits = self.healer_waits.lock().unwrap();
        waits
            .iter()
            .any(|(name, since)| self.healer_may_start(name, *since))
    }

    /// The healer of `v` this server runs (its sets with a brick here), or
    /// with `whole`, one of every set: the running one if it covers them,
    /// else a new one just for this.
    pub(super) async fn healer_for(&self, v: &Volume, whole: bool) -> Result<Arc<Healer>, Error> {
        let desc = self
            .desc(&v.name)
            .ok_or_else(|| Error::not_found(format!("Volume {} does not exist", v.name)))?;
        let running = self
            .healers
            .lock()
            .unwrap()
            .get(&v.name)
            .filter(|p| !whole || p.desc.top == desc.top)
            .map(|p| p.healer.clone());
        if let Some(h) = running {
            if whole {
                // It connects to the other servers' bricks once asked.
                h.wait_up(Duration::from_secs(3)).await;
            }
            return Ok(h);
        }
        let h = Healer::new(&desc, |_| false, &rpc::internal_env(&v.key))
            .map_err(|e| format!("{e:#}"))?;
        h.wait_up(Duration::from_secs(3)).await;
        Ok(h)
    }

    /// Commits a task's state (passed to the leader).
    pub(super) async fn record_task(
        self: &Arc<Self>,
        volume: &str,
        task: Task,
    ) -> Result<(), Error> {
        let req = Request::Task {
            volume: volume.to_string(),
            task,
        };
        self.change_boxed(req).await.map(|_| ())
    }

    /// Runs task `task`, a full heal of `volume`, and records how it ended.
    async fn full_heal(self: Arc<Self>, volume: String, healer: Arc<Healer>, mut task: Task) {
        tracing::info!(%volume, task = %task.id, "full heal started");
        // The healer may have just been made (a server that restarted):
        // a crawl before its bricks are reached would find nothing.
        healer.wait_up(FULL_HEAL_REACH).await;
        let unreached = healer.full().await;
        task.status = TaskStatus::Completed;
        if let Some(c) = healer.statistics().iter().rev().find(|c| c.kind == "FULL") {
            task.detail = format!(
                "{} healed, {} in split-brain, {} failed",
                c.healed, c.split_brain, c.failed
            );
        }
        if unreached > 0 {
            task.status = TaskStatus::Failed;
            task.detail = format!(
                "no brick reachable in {unreached} replica set(s); {}",
                task.detail
            );
        }
        tracing::info!(%volume, task = %task.id, "full heal ended: {}", task.detail);
        if let Err(e) = self.record_task(&volume, task).await {
            tracing::warn!(%volume, "the end of the full heal was not recorded: {e}");
        }
    }

    /// A new full heal task, run here.
    fn full_heal_task(&self) -> Task {
        Task {
            id: uuid::Uuid::new_v4().to_string(),
            kind: TaskKind::HealFull,
            host: self.me.host.clone(),
            status: TaskStatus::InProgress,
            started: mortar_core::clock::unix_secs(),
            detail: String::new(),
            progress: None,
            sets: Vec::new(),
            rows: Vec::new(),
            generation: 0,
        }
    }

    /// Starts a full heal of volume `name` to fill bricks that joined it
    /// empty (add-brick raising the replica count, replace-brick,
    /// reset-brick); answers what the user is told about it. Called under
    /// the change lock (the task is committed directly).
    pub(super) async fn heal_new_bricks(self: &Arc<Self>, name: &str) -> String {
        let v = match self.volume(name) {
            Ok(v) => v,
            Err(e) => return e.to_string(),
        };
        if v.status != VolStatus::Started {
            return format!("start the volume, then run 'volume heal {name} full' to fill the new brick(s) from their replicas");
        }
        if !SELF_HEAL_DAEMON.bool(&v.options) {
            return format!("the self-heal daemon is off: turn it on and run 'volume heal {name} full' to fill the new brick(s)");
        }
        let task = self.full_heal_task();
        let started = match self.healer_for(&v, true).await {
            Ok(h) => {
                let set = Command::SetTask {
                    volume: name.to_string(),
                    task: task.clone(),
                };
                self.execute(set).await.map(|_| {
                    tokio::spawn(self.clone().full_heal(name.to_string(), h, task.clone()));
                })
            }
            Err(e) => Err(e),
        };
        match started {
            Ok(()) => format!("the new brick(s) are being healed from their replicas (full heal, task {}; see 'volume heal {name} info')", task.id),
            Err(e) => format!("the full heal that fills the new brick(s) did not start ({e}): run 'volume heal {name} full'"),
        }
    }

    /// Goes on with the tasks this server was running when it stopped.
    pub(super) async fn resume_tasks(self: Arc<Self>) {
        let vols = self.volumes();
        for v in vols {
            for t in &v.tasks {
                // Rebalances resume as the state is followed
                // (`reconcile_rebalances`).
                if t.status != TaskStatus::InProgress
                    || t.kind != TaskKind::HealFull
                    || !self.is_local(&t.host).await
                {
                    continue;
                }
                tracing::info!(volume = %v.name, task = %t.id, kind = t.kind.as_str(), "resuming a task");
                match self.healer_for(&v, true).await {
                    Ok(h) => {
                        tokio::spawn(self.clone().full_heal(v.name.clone(), h, t.clone()));
                    }
                    Err(e) => tracing::warn!(volume = %v.name, "cannot resume the full heal: {e}"),
                }
            }
        }
    }

    /// `volume heal NAME …`.
    pub(super) async fn heal(self: &Arc<Self>, name: String, op: HealOp) -> Response {
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
        // The resident healer covers the sets with a brick here; what is
        // about every brick (info, split-brain) needs the whole volume.
        let whole = matches!(
            op,
            HealOp::Info
                | HealOp::InfoSummary
                | HealOp::InfoSplitBrain
                | HealOp::Progress
                | HealOp::SplitBrain { .. }
                | HealOp::Full
        );
        let healer = match self.healer_for(&v, whole).await {
            Ok(h) => h,
            Err(e) => return err(e),
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
                let task = self.full_heal_task();
                if let Err(e) = self.record_task(&name, task.clone()).await {
                    return err(e);
                }
                tokio::spawn(self.clone().full_heal(name.clone(), healer.clone(), task));
                rep.message = format!("Launching heal operation to perform full self heal on volume {name} has been successful \nUse heal info commands to check status.");
            }
            HealOp::Info | HealOp::InfoSummary => rep.bricks = healer.info(false).await,
            HealOp::InfoSplitBrain => rep.bricks = healer.info(true).await,
            HealOp::Progress => rep.bricks = healer.progress().await,
            HealOp::Statistics => rep.crawls = healer.statistics(),
            HealOp::SplitBrain { how, file, source } => {
                let gfid = match &file {
                    Some(f) => match healer.gfid_of(f).await {
                        Ok(g) => Some(g),
                        Err(e) if e.errno == libc::ENOENT => return err(Error::not_found(e.msg)),
                        Err(e) => return err(e.msg),
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
                    Err(e) => return err(e.msg),
                }
            }
        }
        Response::Heal(rep)
    }
}
