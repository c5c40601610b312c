//! Long work on a volume kept in the replicated state: rebalances,
//! remove-bricks and full heals, with one row per server that runs a share.

use super::*;

/// Long work on a volume (a full heal; later a rebalance), kept in the
/// replicated state: every server shows it, and the server that runs it
/// goes on with it after a restart.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Task {
    pub id: String,
    pub kind: TaskKind,
    /// The server that runs it, as the pool names it.
    pub host: String,
    pub status: TaskStatus,
    /// Unix seconds.
    pub started: u64,
    /// How it ended, in a few words.
    #[serde(default)]
    pub detail: String,
    /// A rebalance's counts, recorded as it goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<mortar_rebalance::Progress>,
    /// The replica sets (by id) a remove-brick empties.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sets: Vec<u32>,
    /// A rebalance's share of each server: the files of the sets it owns
    /// (`Volume::rebalance_rows`). The task is in progress while a row
    /// is; its `status`, `detail` and `progress` sum up the rows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<TaskRow>,
    /// The layout generation a rebalance writes, and commits when every
    /// row completed (the volume's commit when it started, plus one).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One server's share of a rebalance.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TaskRow {
    /// The server, as the volume's bricks name it.
    pub host: String,
    /// The replica sets (by id) whose files it moves.
    pub owns: Vec<u32>,
    pub status: TaskStatus,
    #[serde(default)]
    pub detail: String,
    #[serde(default)]
    pub progress: mortar_rebalance::Progress,
}

impl Task {
    /// A row changed: the task's status, detail and progress follow its
    /// rows. Answers whether the task has just completed.
    pub fn settle(&mut self) -> bool {
        if self.rows.is_empty() {
            return false;
        }
        let mut sum = mortar_rebalance::Progress::default();
        let running: Vec<&TaskRow> = self
            .rows
            .iter()
            .filter(|r| r.status == TaskStatus::InProgress)
            .collect();
        for r in &self.rows {
            let p = &r.progress;
            sum.dirs += p.dirs;
            sum.scanned += p.scanned;
            sum.moved += p.moved;
            sum.bytes += p.bytes;
            sum.skipped += p.skipped;
            sum.skipped_draining += p.skipped_draining;
            sum.failed += p.failed;
            sum.secs = sum.secs.max(p.secs);
        }
        sum.pass = running.iter().map(|r| r.progress.pass).min().unwrap_or(0);
        sum.eta_secs = running.iter().filter_map(|r| r.progress.eta_secs).max();
        self.progress = Some(sum);
        let was = self.status;
        self.status = if !running.is_empty() {
            TaskStatus::InProgress
        } else if self.rows.iter().all(|r| r.status == TaskStatus::Completed) {
            TaskStatus::Completed
        } else if self.rows.iter().any(|r| r.status == TaskStatus::Failed) {
            TaskStatus::Failed
        } else {
            TaskStatus::Stopped
        };
        if self.status != TaskStatus::InProgress {
            let p = self.progress.clone().unwrap_or_default();
            let mut detail = format!(
                "{} files moved ({} bytes), {} left in place with a pointer, {} failed",
                p.moved, p.bytes, p.skipped, p.failed
            );
            for r in self.rows.iter().filter(|r| {
                !matches!(r.status, TaskStatus::Completed | TaskStatus::Stopped)
                    && !r.detail.is_empty()
            }) {
                detail.push_str(&format!("; {}: {}", r.host, r.detail));
            }
            self.detail = detail;
        }
        was == TaskStatus::InProgress && self.status == TaskStatus::Completed
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum TaskKind {
    HealFull,
    /// Layouts over all sets and files moved to them.
    Rebalance,
    /// Layouts over all sets only.
    FixLayout,
    /// A rebalance that empties the sets a remove-brick takes out.
    RemoveBrick,
}

impl TaskKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            TaskKind::HealFull => "Heal full",
            TaskKind::Rebalance => "Rebalance",
            TaskKind::FixLayout => "Fix layout",
            TaskKind::RemoveBrick => "Remove brick",
        }
    }

    /// Whether it is a rebalance of some kind (one at a time per volume).
    pub fn moves_files(&self) -> bool {
        !matches!(self, TaskKind::HealFull)
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum TaskStatus {
    InProgress,
    Completed,
    Failed,
    Stopped,
}

impl TaskStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            TaskStatus::InProgress => "in progress",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Stopped => "stopped",
        }
    }
}
