//! `volume rebalance`: the server asked (the leader) runs the rebalance
//! (`crate::rebalance`) over a client graph of the whole volume, records
//! its progress in the volume's task every few seconds, and commits the
//! layout generation when every file is where it belongs. A server that
//! restarts goes on with the rebalance it was running (`resume_tasks`):
//! directories laid out already keep their layout, files moved stay moved.

use super::*;
use crate::mgmt::rpc::{RebalanceOp, RemoveOp};
use crate::mgmt::state::Brick;
use crate::mgmt::state::{Task, TaskKind, TaskStatus};
use crate::rebalance::Rebalancer;

/// How often a running rebalance records its progress.
const RECORD_EVERY: Duration = Duration::from_secs(2);
/// How long a rebalance waits for mounted clients to take the graph that
/// puts every directory in flux.
const CLIENTS_SWITCH: Duration = Duration::from_secs(10);
/// How long a rebalance waits for every brick to be reached.
const REACH: Duration = Duration::from_secs(10);

impl Daemon {
    /// `volume rebalance NAME [fix-layout] start | stop`, on the leader.
    pub(super) async fn rebalance(
        self: &Arc<Self>,
        name: String,
        op: RebalanceOp,
    ) -> Result<String, String> {
        let v = self.volume(&name)?;
        let running = v.running_rebalance().cloned();
        let migrate = match op {
            RebalanceOp::Stop => {
                let t = running.ok_or_else(|| format!("no rebalance of {name} is in progress"))?;
                return match self
                    .on_host(&t.host, Request::RebalanceStop { volume: name })
                    .await
                {
                    Response::Ok(m) => Ok(m),
                    Response::Err(e) => Err(e),
                    o => Err(format!("unexpected answer {o:?}")),
                };
            }
            RebalanceOp::Start { migrate } => migrate,
        };
        if v.status != VolStatus::Started {
            return Err(format!(
                "Volume {name} needs to be started to perform rebalance"
            ));
        }
        if v.bricks.len() / v.replica.max(1) < 2 {
            return Err(format!(
                "Volume {name} is not a distribute volume or contains only 1 brick (replica set)"
            ));
        }
        v.no_rebalance_running()?;
        let kind = if migrate {
            TaskKind::Rebalance
        } else {
            TaskKind::FixLayout
        };
        // Clients stop trusting the layouts they keep before any moves.
        self.execute(Command::RaiseLayoutCommit {
            volume: name.clone(),
        })
        .await?;
        let task = self.start_task(&name, kind, Vec::new()).await?;
        Ok(format!(
            "{} on {name} has been started successfully. Use rebalance status command to check status of the rebalance process.\nID: {}",
            task.kind.as_str(),
            task.id
        ))
    }

    /// Records a rebalance task of `kind` and runs it here.
    async fn start_task(
        self: &Arc<Self>,
        name: &str,
        kind: TaskKind,
        sets: Vec<u32>,
    ) -> Result<Task, String> {
        let task = Task {
            id: uuid::Uuid::new_v4().to_string(),
            kind,
            host: self.me.host.clone(),
            status: TaskStatus::InProgress,
            started: crate::heal::now(),
            detail: String::new(),
            progress: Some(Default::default()),
            sets,
        };
        self.execute(Command::SetTask {
            volume: name.to_string(),
            task: task.clone(),
        })
        .await?;
        tokio::spawn(self.clone().run_rebalance(name.to_string(), task.clone()));
        Ok(task)
    }

    /// `volume remove-brick NAME BRICK... start|stop|commit|force`, on
    /// the leader. The bricks must make whole replica sets.
    pub(super) async fn remove_brick(
        self: &Arc<Self>,
        name: String,
        bricks: Vec<String>,
        op: RemoveOp,
    ) -> Result<String, String> {
        let v = self.volume(&name)?;
        let sets = whole_sets(&v, &bricks)?;
        let last = v
            .tasks
            .iter()
            .find(|t| t.kind == TaskKind::RemoveBrick)
            .cloned();
        match op {
            RemoveOp::Start => {
                if v.status != VolStatus::Started {
                    return Err(format!(
                        "Volume {name} needs to be started to remove bricks (or use force)"
                    ));
                }
                v.no_rebalance_running()?;
                if sets.len() >= v.set_ids().len() {
                    return Err("a volume keeps one replica set at least".into());
                }
                self.execute(Command::SetDraining {
                    volume: name.clone(),
                    sets: sets.clone(),
                })
                .await?;
                let task = self.start_task(&name, TaskKind::RemoveBrick, sets).await?;
                Ok(format!(
                    "Started remove-brick on {name}: the files of these bricks move to the others. Use 'volume remove-brick {name} ... status' to see how far it is.\nID: {}",
                    task.id
                ))
            }
            RemoveOp::Stop => {
                let Some(t) = last.filter(|t| t.sets == sets && v.draining == sets) else {
                    return Err(
                        "no remove-brick of these bricks is in progress or waiting for its commit"
                            .into(),
                    );
                };
                if t.status == TaskStatus::InProgress {
                    if let Response::Err(e) = self
                        .on_host(
                            &t.host,
                            Request::RebalanceStop {
                                volume: name.clone(),
                            },
                        )
                        .await
                    {
                        return Err(e);
                    }
                }
                self.execute(Command::SetDraining {
                    volume: name,
                    sets: Vec::new(),
                })
                .await?;
                Ok("the bricks stay in the volume; files moved off them stay moved".into())
            }
            RemoveOp::Commit => {
                let done = last.as_ref().is_some_and(|t| {
                    t.sets == sets && t.status == TaskStatus::Completed && v.draining == sets
                });
                if !done {
                    let why = match &last {
                        Some(t) if t.sets == sets && t.status == TaskStatus::InProgress => {
                            "their files are still moving (see status)".to_string()
                        }
                        Some(t) if t.sets == sets && v.draining == sets => {
                            format!("the remove-brick {}: {}", t.status.as_str(), t.detail)
                        }
                        _ => "run 'remove-brick ... start' first".to_string(),
                    };
                    return Err(format!(
                        "commit refused: the bricks still hold files of the volume: {why}"
                    ));
                }
                let gone = self.take_out(&name, sets).await?;
                Ok(format!("{} brick(s) removed; their data stays on the servers (check it, then reuse or delete the directories)", gone.len()))
            }
            RemoveOp::Force => {
                v.no_rebalance_running()?;
                let gone = self.take_out(&name, sets).await?;
                Ok(format!("{} brick(s) removed with the files on them: those files are no longer in the volume (they stay on the bricks)", gone.len()))
            }
        }
    }

    /// Takes the sets out of the volume, and the volume's mark off their
    /// bricks so that they can be used again.
    async fn take_out(self: &Arc<Self>, name: &str, sets: Vec<u32>) -> Result<Vec<Brick>, String> {
        let mut v = self.volume(name)?;
        let gone = v.remove_sets(&sets)?;
        self.execute(Command::RemoveSets {
            volume: name.to_string(),
            sets,
        })
        .await?;
        self.release(&gone).await;
        Ok(gone)
    }

    /// Waits (at most `CLIENTS_SWITCH`) until every client following
    /// `volume` at any server runs its description `version` or later:
    /// one still on an older graph would trust layouts the rebalance is
    /// changing, and miss the files it moves.
    async fn wait_clients_at(self: &Arc<Self>, volume: &str, version: u64) {
        // A daemon that just started knows no client yet: those that
        // followed its predecessor come back first.
        let known = self.born + 2 * rpc::FOLLOW_RETRY + Duration::from_secs(1);
        tokio::time::sleep_until(known.into()).await;
        let deadline = tokio::time::Instant::now() + CLIENTS_SWITCH;
        loop {
            let behind: Vec<String> = self
                .clients_anywhere(volume)
                .await
                .into_iter()
                .filter(|c| c.version.is_none_or(|v| v < version))
                .map(|c| format!("{}:{}", c.client.host, c.client.mount))
                .collect();
            if behind.is_empty() {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                tracing::warn!(%volume, ?behind, "clients still on an older graph: the rebalance goes on (they may miss files it moves until they switch)");
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the rebalance of `volume` running here.
    pub(super) fn stop_rebalance(&self, volume: &str) -> Response {
        match self.rebalancers.lock().unwrap().get(volume) {
            Some(r) => {
                r.stop();
                Response::Ok("rebalance process may be in the middle of a file migration; it stops after that file".into())
            }
            None => err(format!("no rebalance of {volume} runs on {}", self.me.host)),
        }
    }

    /// Runs task `task` (a rebalance of `volume` this server started or
    /// was running when it stopped) to its end, and records how it ended.
    pub(super) async fn run_rebalance(self: Arc<Self>, volume: String, mut task: Task) {
        let Ok(v) = self.volume(&volume) else { return };
        let from = v.layout_commit;
        let migrate = task.kind != TaskKind::FixLayout;
        let built = self
            .desc(&volume)
            .ok_or_else(|| anyhow::anyhow!("no description"))
            .and_then(|d| Rebalancer::new(&d, &rpc::graph_env(), from + 1, migrate));
        let r = match built {
            Ok(r) => r,
            Err(e) => {
                task.status = TaskStatus::Failed;
                task.detail = format!("{e:#}");
                let _ = self.record_task(&volume, task.clone()).await;
                return;
            }
        };
        self.rebalancers
            .lock()
            .unwrap()
            .insert(volume.clone(), r.clone());
        tracing::info!(%volume, task = %task.id, migrate, generation = from + 1, "rebalance started");
        self.wait_clients_at(&volume, v.version).await;
        let ok = if r.wait_up(REACH).await {
            let run = r.run();
            tokio::pin!(run);
            loop {
                tokio::select! {
                    ok = &mut run => break ok,
                    _ = tokio::time::sleep(RECORD_EVERY) => {
                        task.progress = Some(r.progress());
                        let _ = self.record_task(&volume, task.clone()).await;
                    }
                }
            }
        } else {
            task.detail = "not every brick of the volume could be reached".into();
            false
        };
        let p = r.progress();
        task.progress = Some(p.clone());
        let ok = if ok && task.kind == TaskKind::RemoveBrick && r.left_on_draining() {
            task.detail = format!(
                "{} files could not leave the bricks (open or hard-linked): close them and start again",
                p.skipped_draining
            );
            false
        } else {
            ok
        };
        task.status = if r.stopped() {
            TaskStatus::Stopped
        } else if ok {
            TaskStatus::Completed
        } else {
            TaskStatus::Failed
        };
        if task.detail.is_empty() {
            task.detail = format!(
                "{} files moved ({} bytes), {} left in place with a pointer, {} failed",
                p.moved, p.bytes, p.skipped, p.failed
            );
        }
        if ok && migrate {
            let commit = Request::LayoutCommit {
                volume: volume.clone(),
                from,
                commit: from + 1,
            };
            if let Err(e) = self.change_boxed(commit).await {
                task.status = TaskStatus::Failed;
                task.detail = format!("{}; layouts not committed: {e}", task.detail);
            }
        }
        tracing::info!(%volume, task = %task.id, status = task.status.as_str(), "rebalance ended: {}", task.detail);
        self.rebalancers.lock().unwrap().remove(&volume);
        r.fini().await;
        if let Err(e) = self.record_task(&volume, task.clone()).await {
            tracing::warn!(%volume, "the end of the rebalance was not recorded: {e}");
        }
    }
}

/// The replica sets (by id) `bricks` make up: each a whole set of the
/// volume, or an error saying what is missing.
fn whole_sets(v: &crate::mgmt::state::Volume, bricks: &[String]) -> Result<Vec<u32>, String> {
    if bricks.is_empty() {
        return Err("no bricks given: use HOST:/PATH".into());
    }
    let width = v.replica.max(1);
    let ids = v.set_ids();
    let mut pos = Vec::new();
    for b in bricks {
        let want = Brick::parse(b)?;
        let i = v
            .bricks
            .iter()
            .position(|x| x.host == want.host && x.path == want.path)
            .ok_or_else(|| format!("Incorrect brick {b} for volume {}", v.name))?;
        if pos.contains(&i) {
            return Err(format!("Found duplicate exports {b}"));
        }
        pos.push(i);
    }
    let mut sets = Vec::new();
    for &i in &pos {
        let s = i / width;
        if (s * width..(s + 1) * width).any(|j| !pos.contains(&j)) {
            return Err(format!(
                "{} is one of a replica set of {width}: give all of its bricks, or lower the replica count with remove-brick NAME replica N BRICK... force",
                bricks[pos.iter().position(|&p| p == i).unwrap()]
            ));
        }
        if !sets.contains(&ids[s]) {
            sets.push(ids[s]);
        }
    }
    sets.sort_unstable();
    Ok(sets)
}
