//! `volume rebalance`: the server asked (the leader) records a task with
//! one row per server that owns a replica set (`Volume::rebalance_rows`).
//! Every server runs its own row as it sees the task in the state
//! (`reconcile_rebalances`): a rebalance (`mortar_rebalance`) over a
//! client graph of the whole volume that lays out every directory and
//! moves the files of the sets it owns. It records its row's progress
//! every few seconds; the last row to complete commits the layout
//! generation (`Command::SetTaskRow`). A server that restarts goes on
//! with its row: directories laid out already keep their layout, files
//! moved stay moved. `stop` stops every row in the state, and each server
//! its own share as it sees that.

use super::*;
use crate::error::Error;
use crate::rpc::{RebalanceOp, RemoveOp};
use crate::state::Brick;
use crate::state::{Task, TaskKind, TaskRow, TaskStatus};
use mortar_rebalance::Rebalancer;

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
    ) -> Result<String, Error> {
        let v = self.volume(&name)?;
        let running = v.running_rebalance().cloned();
        let migrate = match op {
            RebalanceOp::Stop => {
                let t = running.ok_or_else(|| format!("no rebalance of {name} is in progress"))?;
                self.execute(Command::StopTask {
                    volume: name,
                    task: t.id,
                })
                .await?;
                return Ok("rebalance process may be in the middle of a file migration; it stops after that file".into());
            }
            RebalanceOp::Start { migrate } => migrate,
        };
        if v.status != VolStatus::Started {
            return Err(format!("Volume {name} needs to be started to perform rebalance").into());
        }
        if v.bricks.len() / v.replica.max(1) < 2 {
            return Err(format!(
                "Volume {name} is not a distribute volume or contains only 1 brick (replica set)"
            )
            .into());
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

    /// Records a rebalance task of `kind`, with a row for every server
    /// that owns a replica set: each runs its row as it sees it.
    async fn start_task(
        self: &Arc<Self>,
        name: &str,
        kind: TaskKind,
        sets: Vec<u32>,
    ) -> Result<Task, Error> {
        let v = self.volume(name)?;
        let mut task = Task {
            id: uuid::Uuid::new_v4().to_string(),
            kind,
            host: self.me.host.clone(),
            status: TaskStatus::InProgress,
            started: mortar_core::clock::unix_secs(),
            detail: String::new(),
            progress: Some(Default::default()),
            sets,
            rows: v.rebalance_rows(),
            generation: v.layout_commit + 1,
        };
        task.settle();
        self.execute(Command::SetTask {
            volume: name.to_string(),
            task: task.clone(),
        })
        .await?;
        Ok(task)
    }

    /// `volume remove-brick NAME BRICK... start|stop|commit|force`, on
    /// the leader. The bricks must make whole replica (or disperse) sets.
    pub(super) async fn remove_brick(
        self: &Arc<Self>,
        name: String,
        bricks: Vec<String>,
        op: RemoveOp,
    ) -> Result<String, Error> {
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
                    )
                    .into());
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
                    self.execute(Command::StopTask {
                        volume: name.clone(),
                        task: t.id,
                    })
                    .await?;
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
                    )
                    .into());
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
    async fn take_out(self: &Arc<Self>, name: &str, sets: Vec<u32>) -> Result<Vec<Brick>, Error> {
        let mut v = Volume::clone(&*self.volume(name)?);
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
        let deadline = tokio::time::Instant::now() + CLIENTS_SWITCH;
        loop {
            // A server that just started (or cannot be asked) does not
            // know its clients yet: they may still be on an older graph.
            let (clients, complete) = self.clients_everywhere(volume).await;
            let behind: Vec<String> = clients
                .into_iter()
                .filter(|c| c.version.is_none_or(|v| v < version))
                .map(|c| format!("{}:{}", c.client.host, c.client.mount))
                .collect();
            if complete && behind.is_empty() {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                tracing::warn!(%volume, ?behind, complete, "clients may still be on an older graph (listed, or following a server that is down or just started): the rebalance goes on (they may miss files it moves until they switch)");
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs the rows of rebalances in progress that are this server's
    /// and not running yet (a task just started, or this server just
    /// restarted), and stops those whose row the state says ended.
    pub(super) async fn reconcile_rebalances(self: &Arc<Self>) {
        let vols = self.volumes();
        let mut wanted = Vec::new();
        for v in &vols {
            let Some(t) = v.running_rebalance() else {
                continue;
            };
            for r in t.rows.iter().filter(|r| r.status == TaskStatus::InProgress) {
                if self.is_local(&r.host).await {
                    wanted.push((v.name.clone(), t.clone(), r.clone()));
                }
            }
        }
        let mut running = self.rebalancers.lock().unwrap();
        running.retain(|key, r| {
            let keep = wanted
                .iter()
                .any(|(_, t, row)| (&t.id, &row.host) == (&key.0, &key.1));
            if !keep {
                r.stop();
            }
            keep
        });
        for (volume, task, row) in wanted {
            let key = (task.id.clone(), row.host.clone());
            if running.contains_key(&key) {
                continue;
            }
            match self.rebalancer_for(&volume, &task, &row) {
                Ok(r) => {
                    running.insert(key, r.clone());
                    tokio::spawn(self.clone().run_row(volume, task, row, r));
                }
                Err(e) => {
                    let mut row = row;
                    row.status = TaskStatus::Failed;
                    row.detail = e.to_string();
                    let me = self.clone();
                    tokio::spawn(async move {
                        let _ = me.record_row(&volume, &task.id, row).await;
                    });
                }
            }
        }
    }

    fn rebalancer_for(
        &self,
        volume: &str,
        task: &Task,
        row: &TaskRow,
    ) -> Result<Arc<Rebalancer>, Error> {
        let desc = self
            .desc(volume)
            .ok_or_else(|| format!("no description of {volume}"))?;
        let migrate = task.kind != TaskKind::FixLayout;
        let key = (self.state.lock().unwrap().volumes.get(volume))
            .map(|v| v.key.clone())
            .unwrap_or_default();
        Rebalancer::new(
            &desc,
            &rpc::internal_env(&key),
            task.generation,
            migrate,
            &row.owns,
        )
        .map_err(|e| Error::refused(format!("{e:#}")))
    }

    /// Commits how this server's share of a rebalance goes.
    async fn record_row(
        self: &Arc<Self>,
        volume: &str,
        task: &str,
        row: TaskRow,
    ) -> Result<(), Error> {
        let req = Request::TaskRow {
            volume: volume.to_string(),
            task: task.to_string(),
            row,
        };
        self.change_boxed(req).await.map(|_| ())
    }

    /// Runs this server's row of task `task` to its end with rebalancer
    /// `r`, and records how it ended.
    async fn run_row(
        self: Arc<Self>,
        volume: String,
        task: Task,
        mut row: TaskRow,
        r: Arc<Rebalancer>,
    ) {
        let version = self.volume(&volume).map(|v| v.version).unwrap_or(0);
        tracing::info!(%volume, task = %task.id, host = %row.host, sets = ?row.owns, generation = task.generation, "rebalance started here");
        self.wait_clients_at(&volume, version).await;
        let ok = if r.wait_up(REACH).await {
            let run = r.run();
            tokio::pin!(run);
            loop {
                tokio::select! {
                    ok = &mut run => break ok,
                    _ = tokio::time::sleep(RECORD_EVERY) => {
                        row.progress = r.progress();
                        let _ = self.record_row(&volume, &task.id, row.clone()).await;
                    }
                }
            }
        } else {
            row.detail = "not every brick of the volume could be reached".into();
            false
        };
        let p = r.progress();
        row.progress = p.clone();
        let ok = if ok && task.kind == TaskKind::RemoveBrick && r.left_on_draining() {
            row.detail = format!(
                "{} files could not leave the bricks (no room on the others, or names made while it ran): make room, and start again",
                p.skipped_draining
            );
            false
        } else {
            ok
        };
        row.status = if r.stopped() {
            TaskStatus::Stopped
        } else if ok {
            TaskStatus::Completed
        } else {
            TaskStatus::Failed
        };
        tracing::info!(%volume, task = %task.id, status = row.status.as_str(), moved = p.moved, bytes = p.bytes, skipped = p.skipped, failed = p.failed, "rebalance ended here {}", row.detail);
        let key = (task.id.clone(), row.host.clone());
        let recorded = self.record_row(&volume, &task.id, row).await;
        r.fini().await;
        // Recorded, it stays known here until the state says the row
        // ended (`reconcile_rebalances` forgets it then); not recorded,
        // it is forgotten now and runs again as the state still asks.
        if let Err(e) = recorded {
            tracing::warn!(%volume, "the end of this server's rebalance was not recorded: {e}");
            let mut running = self.rebalancers.lock().unwrap();
            if running.get(&key).is_some_and(|x| Arc::ptr_eq(x, &r)) {
                running.remove(&key);
            }
        }
    }
}

/// The replica sets (by id) `bricks` make up: each a whole set of the
/// volume, or an error saying what is missing.
fn whole_sets(v: &crate::state::Volume, bricks: &[String]) -> Result<Vec<u32>, Error> {
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
            return Err(format!("Found duplicate exports {b}").into());
        }
        pos.push(i);
    }
    let mut sets = Vec::new();
    for &i in &pos {
        let s = i / width;
        if (s * width..(s + 1) * width).any(|j| !pos.contains(&j)) {
            let brick = &bricks[pos.iter().position(|&p| p == i).unwrap()];
            return Err(match v.dispersed() {
                true => format!("{brick} is one of a disperse set of {width}: give all of its bricks"),
                false => format!("{brick} is one of a replica set of {width}: give all of its bricks, or lower the replica count with remove-brick NAME replica N BRICK... force"),
            }
            .into());
        }
        if !sets.contains(&ids[s]) {
            sets.push(ids[s]);
        }
    }
    sets.sort_unstable();
    Ok(sets)
}
