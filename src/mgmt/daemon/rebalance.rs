//! `volume rebalance`: the server asked (the leader) runs the rebalance
//! (`crate::rebalance`) over a client graph of the whole volume, records
//! its progress in the volume's task every few seconds, and commits the
//! layout generation when every file is where it belongs. A server that
//! restarts goes on with the rebalance it was running (`resume_tasks`):
//! directories laid out already keep their layout, files moved stay moved.

use super::*;
use crate::mgmt::rpc::RebalanceOp;
use crate::mgmt::state::{Task, TaskKind, TaskStatus};
use crate::rebalance::Rebalancer;

/// How often a running rebalance records its progress.
const RECORD_EVERY: Duration = Duration::from_secs(2);
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
        if let Some(t) = running {
            return Err(format!(
                "a {} of {name} is in progress already (on {})",
                t.kind.as_str().to_lowercase(),
                t.host
            ));
        }
        let task = Task {
            id: uuid::Uuid::new_v4().to_string(),
            kind: if migrate {
                TaskKind::Rebalance
            } else {
                TaskKind::FixLayout
            },
            host: self.me.host.clone(),
            status: TaskStatus::InProgress,
            started: crate::heal::now(),
            detail: String::new(),
            progress: Some(Default::default()),
        };
        self.execute(Command::SetTask {
            volume: name.clone(),
            task: task.clone(),
        })
        .await?;
        tokio::spawn(self.clone().run_rebalance(name.clone(), task.clone()));
        Ok(format!(
            "{} on {name} has been started successfully. Use rebalance status command to check status of the rebalance process.\nID: {}",
            task.kind.as_str(),
            task.id
        ))
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
        let migrate = task.kind == TaskKind::Rebalance;
        let built = self
            .desc(&volume)
            .ok_or_else(|| anyhow::anyhow!("no description"))
            .and_then(|d| Rebalancer::new(&d, &rpc::graph_env(), from + 1, migrate));
        let r = match built {
            Ok(r) => r,
            Err(e) => {
                task.status = TaskStatus::Failed;
                task.detail = format!("{e:#}");
                let _ = self.record_rebalance(&volume, &task).await;
                return;
            }
        };
        self.rebalancers
            .lock()
            .unwrap()
            .insert(volume.clone(), r.clone());
        tracing::info!(%volume, task = %task.id, migrate, generation = from + 1, "rebalance started");
        let ok = if r.wait_up(REACH).await {
            let run = r.run();
            tokio::pin!(run);
            loop {
                tokio::select! {
                    ok = &mut run => break ok,
                    _ = tokio::time::sleep(RECORD_EVERY) => {
                        task.progress = Some(r.progress());
                        let _ = self.record_rebalance(&volume, &task).await;
                    }
                }
            }
        } else {
            task.detail = "not every brick of the volume could be reached".into();
            false
        };
        let p = r.progress();
        task.progress = Some(p.clone());
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
        if let Err(e) = self.record_rebalance(&volume, &task).await {
            tracing::warn!(%volume, "the end of the rebalance was not recorded: {e}");
        }
    }

    async fn record_rebalance(self: &Arc<Self>, volume: &str, task: &Task) -> Result<(), String> {
        let req = Request::Task {
            volume: volume.to_string(),
            task: task.clone(),
        };
        self.change_boxed(req).await.map(|_| ())
    }

    /// A change made from a task. Boxed: a change may lead back here (the
    /// compiler cannot see through the cycle).
    fn change_boxed(
        self: &Arc<Self>,
        req: Request,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send>> {
        Box::pin(self.clone().change_anywhere(req))
    }
}
