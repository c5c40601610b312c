//! The cluster state a daemon keeps: who it is, its peers, and the volumes.
//! Saved as one JSON file, replaced atomically (write, fsync, rename), so a
//! crash leaves either the old state or the new one.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Peer {
    pub uuid: String,
    /// The name the peer was probed by (what bricks name it by).
    pub host: String,
    /// Its management address, host:port.
    pub mgmt: String,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum VolStatus {
    Created,
    Started,
    Stopped,
}

impl VolStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            VolStatus::Created => "Created",
            VolStatus::Started => "Started",
            VolStatus::Stopped => "Stopped",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Brick {
    pub host: String,
    pub path: String,
    /// The port it listens on: chosen when the brick joins a volume, and
    /// changed when its host finds it listening on another one. Clients
    /// connect to it without asking the host's daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

impl Brick {
    pub fn parse(s: &str) -> Result<Brick, String> {
        let (host, path) = s.split_once(':').ok_or_else(|| {
            format!("wrong brick type: {s}, use <HOSTNAME>:<export-dir-abs-path>")
        })?;
        if host.is_empty() || !path.starts_with('/') {
            return Err(format!(
                "wrong brick type: {s}, use <HOSTNAME>:<export-dir-abs-path>"
            ));
        }
        let mut norm = String::new();
        for c in path.split('/').filter(|c| !c.is_empty()) {
            if c == "." || c == ".." {
                return Err(format!("brick path {path} must not contain '.' or '..'"));
            }
            norm.push('/');
            norm.push_str(c);
        }
        if norm.is_empty() {
            return Err("a brick cannot be the root directory".into());
        }
        Ok(Brick {
            host: host.to_string(),
            path: norm,
            port: None,
        })
    }
}

impl std::fmt::Display for Brick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.path)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Volume {
    pub name: String,
    pub id: String,
    pub replica: usize,
    pub transport: String,
    pub bricks: Vec<Brick>,
    pub status: VolStatus,
    pub options: BTreeMap<String, String>,
    /// Bumped on every change the clients should see (options).
    pub version: u64,
    /// 1 when the last brick of every replica set is an arbiter (names and
    /// metadata, no file data).
    #[serde(default)]
    pub arbiter: usize,
    /// The last task of each kind run on the volume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<Task>,
    /// Each replica set's stable id, in brick order (empty: 0, 1, 2, ...):
    /// what directory layouts and pointers name a set by, so that they
    /// stay true when sets are added or removed (docs/distribute.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set_ids: Vec<u32>,
    /// The layout generation every directory is placed by: a directory
    /// whose stored layout carries it holds each of its files on the set
    /// the layout names (or a pointer there). 1 until the set list first
    /// changes; raised by every change of it and by a finished rebalance.
    #[serde(default = "first_commit")]
    pub layout_commit: u64,
    /// Replica sets (by id) a remove-brick is emptying: no new directory
    /// is laid out over them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub draining: Vec<u32>,
    /// Bricks (`host:path`) a `reset-brick start` took down: not run
    /// until `reset-brick ... commit`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resetting: Vec<String>,
    /// The key the pool's own clients of this volume (self-heal, rebalance)
    /// give its bricks in their handshake, so that `auth.allow` does not
    /// apply to them. Made at `volume create`; kept out of `volume info`
    /// and `volume status`, out of the descriptions clients get, and off
    /// command lines (bricks read it from a file only root reads). Empty
    /// for volumes made before it: their bricks apply the rules to all.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// The client credentials issued for this volume (`volume credentials
    /// VOL create NAME`): a client holding one may mount this volume, and
    /// only this one. Revoked by removal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<IssuedCredential>,
}

/// A client credential of a volume as the pool keeps it: its name and the
/// SHA-256 of its certificate (the key stays with whoever was given it).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct IssuedCredential {
    pub name: String,
    pub fingerprint: String,
    /// The bricks refuse its changes (EROFS).
    pub read_only: bool,
    /// Every request of its holder runs as this uid and gid, whatever it
    /// claims (None: as claimed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<(u32, u32)>,
    /// When it was issued (seconds since 1970).
    pub issued: u64,
    /// The certificate its last rotation replaced (`credentials rotate`):
    /// connections opened with it go on, no new one is taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<String>,
}

impl Volume {
    /// The volume as anyone may see it: without its key.
    pub fn public(&self) -> Volume {
        Volume {
            key: String::new(),
            ..self.clone()
        }
    }
}

fn first_commit() -> u64 {
    1
}

impl Volume {
    /// Adds bricks as `Command::AddBricks` says, or says why not (and
    /// changes nothing).
    pub fn add_bricks(&mut self, replica: usize, bricks: &[Brick]) -> Result<(), String> {
        let sets = self.bricks.len() / self.replica.max(1);
        if replica == self.replica {
            if bricks.is_empty() || !bricks.len().is_multiple_of(replica) {
                return Err(format!(
                    "Incorrect number of bricks supplied {} with count {replica}",
                    bricks.len()
                ));
            }
            let mut ids = self.set_ids();
            let next = ids.iter().max().map_or(0, |m| m + 1);
            let added = bricks.len() / replica;
            if next as usize + added > 1 << 16 {
                return Err("a volume has at most 65536 replica sets".into());
            }
            ids.extend(next..next + added as u32);
            self.set_ids = ids;
            self.bricks.extend(bricks.iter().cloned());
            self.raise_layout_commit();
        } else if replica > self.replica {
            if self.arbiter > 0 {
                return Err("the replica count of an arbiter volume cannot be raised".into());
            }
            let more = replica - self.replica;
            if bricks.len() != more * sets {
                return Err(format!(
                    "Incorrect number of bricks supplied {} for replica {replica}: {sets} replica sets need {} more",
                    bricks.len(),
                    more * sets
                ));
            }
            let old = self.bricks.chunks(self.replica.max(1));
            let new = bricks.chunks(more);
            self.bricks = old
                .zip(new)
                .flat_map(|(o, n)| o.iter().chain(n).cloned())
                .collect();
            self.replica = replica;
        } else {
            return Err(format!(
                "replica count {replica} is below the volume's ({}): use remove-brick",
                self.replica
            ));
        }
        self.version += 1;
        Ok(())
    }

    /// Puts every directory in flux: no stored layout carries the new
    /// commit. It skips a number: a rebalance that stopped may have
    /// written `layout_commit + 1` on some directories, whose files it
    /// had not all moved.
    pub fn raise_layout_commit(&mut self) {
        self.layout_commit += 2;
        self.version += 1;
    }

    /// The rebalance (fix-layout, remove-brick) in progress, if any.
    pub fn running_rebalance(&self) -> Option<&Task> {
        self.tasks
            .iter()
            .find(|t| t.kind.moves_files() && t.status == TaskStatus::InProgress)
    }

    /// Refuses what must wait for a rebalance in progress to end.
    pub fn no_rebalance_running(&self) -> Result<(), String> {
        match self.running_rebalance() {
            Some(t) => Err(format!(
                "a {} of {} is in progress (on {}): stop it or let it end first",
                t.kind.as_str().to_lowercase(),
                self.name,
                t.host
            )),
            None => Ok(()),
        }
    }

    /// Takes the replica sets `sets` (by id) and their bricks out.
    pub fn remove_sets(&mut self, sets: &[u32]) -> Result<Vec<Brick>, String> {
        let ids = self.set_ids();
        let width = self.replica.max(1);
        if sets.iter().any(|s| !ids.contains(s)) {
            return Err(format!("volume {} has no such replica set", self.name));
        }
        if sets.len() >= ids.len() {
            return Err("a volume keeps one replica set at least".into());
        }
        let mut kept = Vec::new();
        let mut gone = Vec::new();
        let mut kept_ids = Vec::new();
        for (chunk, id) in self.bricks.chunks(width).zip(&ids) {
            if sets.contains(id) {
                gone.extend(chunk.iter().cloned());
            } else {
                kept.extend(chunk.iter().cloned());
                kept_ids.push(*id);
            }
        }
        self.bricks = kept;
        self.set_ids = kept_ids;
        self.draining.retain(|d| !sets.contains(d));
        self.version += 1;
        Ok(gone)
    }

    /// The position of brick `b` (by host and path) in the volume.
    pub fn brick_index(&self, b: &Brick) -> Option<usize> {
        self.bricks
            .iter()
            .position(|o| o.host == b.host && o.path == b.path)
    }

    /// Puts brick `to` where `from` was (same replica set, same role),
    /// or says why not. Only a replicated volume's brick can be replaced:
    /// the new one is healed from its replicas.
    pub fn replace_brick(&mut self, from: &Brick, to: &Brick) -> Result<(), String> {
        let i = self
            .brick_index(from)
            .ok_or_else(|| format!("brick: {from} does not exist in volume: {}", self.name))?;
        if self.replica < 2 {
            return Err(format!(
                "volume {} has no replicas to heal a new brick from: use add-brick, then remove-brick {from} start and commit",
                self.name
            ));
        }
        if from.host == to.host && from.path == to.path {
            return Err(format!(
                "{to} is the brick being replaced: use reset-brick to bring a brick back"
            ));
        }
        self.bricks[i] = to.clone();
        self.resetting.retain(|r| *r != from.to_string());
        self.version += 1;
        Ok(())
    }

    /// Lowers the replica count to `replica` by taking `bricks` out: the
    /// same number from every set. Answers them as the volume had them.
    pub fn lower_replica(
        &mut self,
        replica: usize,
        bricks: &[Brick],
    ) -> Result<Vec<Brick>, String> {
        let width = self.replica.max(1);
        if replica == 0 || replica >= width {
            return Err(format!(
                "replica count {replica} is not below the volume's ({width})"
            ));
        }
        if self.arbiter > 0 {
            return Err("the replica count of an arbiter volume cannot be lowered".into());
        }
        let mut pos = Vec::new();
        for b in bricks {
            let i = self
                .brick_index(b)
                .ok_or_else(|| format!("Incorrect brick {b} for volume {}", self.name))?;
            if pos.contains(&i) {
                return Err(format!("Found duplicate exports {b}"));
            }
            pos.push(i);
        }
        let less = width - replica;
        for (s, set) in self.bricks.chunks(width).enumerate() {
            let taken = pos.iter().filter(|&&i| i / width == s).count();
            if taken != less {
                return Err(format!(
                    "to go from replica {width} to {replica}, give {less} brick(s) of every replica set: {} of the set of {} were given",
                    taken, set[0]
                ));
            }
        }
        let gone = pos.iter().map(|&i| self.bricks[i].clone()).collect();
        let mut i = 0;
        self.bricks.retain(|_| {
            i += 1;
            !pos.contains(&(i - 1))
        });
        self.resetting
            .retain(|r| self.bricks.iter().any(|b| b.to_string() == *r));
        self.replica = replica;
        self.version += 1;
        Ok(gone)
    }

    /// Marks brick `b` taken down by `reset-brick start` (`down`), or
    /// brought back by its commit.
    pub fn reset_brick(&mut self, b: &Brick, down: bool) -> Result<(), String> {
        if self.brick_index(b).is_none() {
            return Err(format!(
                "brick: {b} does not exist in volume: {}",
                self.name
            ));
        }
        if self.replica < 2 {
            return Err(format!(
                "volume {} has no replicas to heal the brick from",
                self.name
            ));
        }
        let name = b.to_string();
        self.resetting.retain(|r| *r != name);
        if down {
            self.resetting.push(name);
        }
        self.version += 1;
        Ok(())
    }

    /// Whether `reset-brick start` took brick `b` down.
    pub fn is_resetting(&self, b: &Brick) -> bool {
        self.resetting.iter().any(|r| *r == b.to_string())
    }

    /// A rebalance's rows: each replica set is owned by the server of one
    /// of its data bricks, taken in turn (set k by its brick k mod the
    /// data bricks), so that the sets of servers holding replicas of each
    /// other are spread over them; a server owning none has no row.
    pub fn rebalance_rows(&self) -> Vec<TaskRow> {
        let width = self.replica.max(1);
        let data = (width - self.arbiter.min(width - 1)).max(1);
        let mut rows: Vec<TaskRow> = Vec::new();
        for (k, (set, id)) in self.bricks.chunks(width).zip(self.set_ids()).enumerate() {
            let host = &set[k % data].host;
            match rows.iter_mut().find(|r| r.host == *host) {
                Some(r) => r.owns.push(id),
                None => rows.push(TaskRow {
                    host: host.clone(),
                    owns: vec![id],
                    status: TaskStatus::InProgress,
                    detail: String::new(),
                    progress: Default::default(),
                }),
            }
        }
        rows
    }

    /// The stable id of each replica set, in order.
    pub fn set_ids(&self) -> Vec<u32> {
        if self.set_ids.is_empty() {
            let sets = self.bricks.len() / self.replica.max(1);
            (0..sets as u32).collect()
        } else {
            self.set_ids.clone()
        }
    }
}

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
    pub progress: Option<crate::rebalance::Progress>,
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
    pub progress: crate::rebalance::Progress,
}

impl Task {
    /// A row changed: the task's status, detail and progress follow its
    /// rows. Answers whether the task has just completed.
    pub fn settle(&mut self) -> bool {
        if self.rows.is_empty() {
            return false;
        }
        let mut sum = crate::rebalance::Progress::default();
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

impl Volume {
    /// A one-brick volume for unit tests.
    #[cfg(test)]
    pub fn sample(name: &str) -> Volume {
        Volume {
            name: name.into(),
            id: "id".into(),
            replica: 1,
            transport: "tcp".into(),
            bricks: vec![Brick {
                host: "h".into(),
                path: "/b".into(),
                port: None,
            }],
            status: VolStatus::Created,
            options: Default::default(),
            version: 1,
            arbiter: 0,
            tasks: Vec::new(),
            set_ids: Vec::new(),
            layout_commit: 1,
            draining: Vec::new(),
            resetting: Vec::new(),
            key: String::new(),
            credentials: Vec::new(),
        }
    }

    pub fn type_name(&self) -> &'static str {
        let sets = self.bricks.len() / self.replica.max(1);
        match (self.replica > 1, sets > 1) {
            (false, _) => "Distribute",
            (true, false) => "Replicate",
            (true, true) => "Distributed-Replicate",
        }
    }
    /// Whether brick `i` is an arbiter.
    pub fn is_arbiter(&self, i: usize) -> bool {
        self.arbiter > 0 && self.replica > 1 && i % self.replica == self.replica - 1
    }
    pub fn brick_count_line(&self) -> String {
        if self.arbiter > 0 && self.replica > 1 {
            format!(
                "{} x ({} + {}) = {}",
                self.bricks.len() / self.replica,
                self.replica - self.arbiter,
                self.arbiter,
                self.bricks.len()
            )
        } else if self.replica > 1 {
            format!(
                "{} x {} = {}",
                self.bricks.len() / self.replica,
                self.replica,
                self.bricks.len()
            )
        } else {
            self.bricks.len().to_string()
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ClusterState {
    pub uuid: String,
    /// Shared between versions of the view while the servers are the same.
    pub peers: std::sync::Arc<Vec<Peer>>,
    /// Shared between versions of the state: a change copies only the
    /// volume it changes (a volume of 300 bricks was copied on every
    /// change, twice, on every server).
    pub volumes: BTreeMap<String, std::sync::Arc<Volume>>,
    /// The certificates each server presents (SHA-256, hex: its own and
    /// its administrator's), by uuid (docs/security.md).
    /// (Shared between versions of the state while it does not change.)
    #[serde(default, skip_serializing_if = "none")]
    pub certs: std::sync::Arc<BTreeMap<String, Vec<String>>>,
    /// Administrator credentials issued for use away from the servers
    /// (`pool credentials`; read-only ones too). Revoked by removal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operators: Vec<IssuedCredential>,
    /// The certificates each server's last rotation replaced (`pool
    /// rotate-certs`), by uuid: connections opened with them go on, no new
    /// one is taken.
    #[serde(default, skip_serializing_if = "none")]
    pub retired: std::sync::Arc<BTreeMap<String, Vec<String>>>,
}

fn none(m: &std::sync::Arc<BTreeMap<String, Vec<String>>>) -> bool {
    m.is_empty()
}

impl ClusterState {
    /// The server and administrator certificates the pool takes: its
    /// members' own, so that one a detached server keeps, or makes with the
    /// CA's key it still has, is refused. None (any certificate of the
    /// pool's CA is taken) while a member has none on record: a pool from
    /// before they were recorded, until each has started once.
    pub fn pool_certs(&self) -> Option<std::collections::BTreeSet<String>> {
        // (`peers` are the others; `uuid` is this server.)
        if self.uuid.is_empty() {
            return None;
        }
        let mut out = std::collections::BTreeSet::new();
        for uuid in self.peers.iter().map(|p| &p.uuid).chain([&self.uuid]) {
            out.extend(self.certs.get(uuid)?.iter().cloned());
        }
        out.extend(
            self.operators
                .iter()
                .filter(|o| !o.read_only)
                .map(|o| o.fingerprint.clone()),
        );
        Some(out)
    }

    /// The server and administrator certificates rotations replaced: the
    /// members' and the administrator credentials'.
    pub fn retired_certs(&self) -> std::collections::BTreeSet<String> {
        let members = self.peers.iter().map(|p| &p.uuid).chain([&self.uuid]);
        members
            .filter_map(|uuid| self.retired.get(uuid))
            .flatten()
            .chain(
                self.operators
                    .iter()
                    .filter(|o| !o.read_only)
                    .flat_map(|o| &o.retired),
            )
            .cloned()
            .collect()
    }

    /// The pool's certificates or administrator credentials changed: every
    /// volume's version moves on, so that its bricks (which follow their
    /// volume) learn the new list.
    pub fn pool_changed(&mut self) {
        for v in self.volumes.values_mut() {
            std::sync::Arc::make_mut(v).version += 1;
        }
    }

    /// Volume `name`, to change (copied first if another version of the
    /// state shares it).
    pub fn volume_mut(&mut self, name: &str) -> Option<&mut Volume> {
        self.volumes.get_mut(name).map(std::sync::Arc::make_mut)
    }

    /// Whether a read-only administrator's certificate is one the pool
    /// issued and did not revoke.
    pub fn is_reader(&self, fingerprint: &str) -> bool {
        self.operators
            .iter()
            .any(|o| o.read_only && o.fingerprint == fingerprint)
    }

    /// Gives each of `bricks` that has none the lowest port from
    /// `BRICK_PORT_BASE` that no other brick of its host has: a brick keeps
    /// its port across restarts, and clients need not ask for it.
    pub fn assign_ports(&self, bricks: &mut [Brick]) {
        for i in 0..bricks.len() {
            if bricks[i].port.is_some() {
                continue;
            }
            let host = bricks[i].host.clone();
            let taken: std::collections::BTreeSet<u16> = self
                .volumes
                .values()
                .flat_map(|v| &v.bricks)
                .chain(bricks.iter())
                .filter(|b| b.host == host)
                .filter_map(|b| b.port)
                .collect();
            bricks[i].port = (super::BRICK_PORT_BASE..=u16::MAX).find(|p| !taken.contains(p));
        }
    }

    /// The brick `host:path` of `volume`.
    pub fn brick_mut(&mut self, volume: &str, host: &str, path: &str) -> Option<&mut Brick> {
        self.volume_mut(volume)?
            .bricks
            .iter_mut()
            .find(|b| b.host == host && b.path == path)
    }
}

pub struct Store {
    file: PathBuf,
}

impl Store {
    pub fn new(dir: &Path) -> std::io::Result<Store> {
        std::fs::create_dir_all(dir)?;
        Ok(Store {
            file: dir.join("state.json"),
        })
    }

    pub fn load(&self) -> std::io::Result<ClusterState> {
        match std::fs::read(&self.file) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", self.file.display()),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ClusterState {
                uuid: uuid::Uuid::new_v4().to_string(),
                ..Default::default()
            }),
            Err(e) => Err(e),
        }
    }

    pub fn save(&self, st: &ClusterState) -> std::io::Result<()> {
        write_atomic(&self.file, &serde_json::to_vec_pretty(st)?)
    }
}

/// Replaces `file` with `bytes` atomically (write a temporary file, fsync,
/// rename, fsync the directory): a crash leaves the old or the new.
pub fn write_atomic(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace(file, bytes, true)
}

/// Replaces `file` with `bytes` (write a temporary file, rename), fsynced
/// only with `sync`: without it a crash of the machine may leave the old
/// file, never a torn one.
pub fn replace(file: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    if sync {
        f.sync_all()?;
    }
    std::fs::rename(&tmp, file)?;
    if let (true, Some(dir)) = (sync, file.parent()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brick_names_are_checked() {
        let b = Brick::parse("h:/data//brick1/gv0/").unwrap();
        assert_eq!(b.to_string(), "h:/data/brick1/gv0");
        assert!(Brick::parse("/data/b").is_err());
        assert!(Brick::parse("h:data").is_err());
        assert!(Brick::parse("h:/").is_err());
        assert!(Brick::parse("h:/a/../b").is_err());
    }

    #[test]
    fn bricks_are_replaced_reset_and_taken_out_of_their_sets() {
        let b = |s: &str| Brick::parse(s).unwrap();
        let mut v = Volume::sample("a");
        v.replica = 3;
        v.bricks = ["h:/1", "h:/2", "h:/3", "h:/4", "h:/5", "h:/6"]
            .iter()
            .map(|s| b(s))
            .collect();
        let before = v.clone();
        // Replaced in place: same set, same position.
        v.replace_brick(&b("h:/2"), &b("g:/2")).unwrap();
        assert_eq!(v.bricks[1], b("g:/2"));
        assert!(v.replace_brick(&b("h:/9"), &b("g:/9")).is_err());
        assert!(v.replace_brick(&b("h:/3"), &b("h:/3")).is_err());
        // Reset: down, then back.
        v.reset_brick(&b("h:/4"), true).unwrap();
        assert!(v.is_resetting(&b("h:/4")));
        v.reset_brick(&b("h:/4"), false).unwrap();
        assert!(!v.is_resetting(&b("h:/4")));
        // Lowered: one brick of each set, no fewer, no more.
        let mut w = before.clone();
        assert!(w.lower_replica(2, &[b("h:/1")]).is_err());
        assert!(w.lower_replica(2, &[b("h:/1"), b("h:/2")]).is_err());
        assert!(w.lower_replica(3, &[b("h:/1"), b("h:/4")]).is_err());
        assert_eq!(w, before, "refusals change nothing");
        let gone = w.lower_replica(2, &[b("h:/2"), b("h:/6")]).unwrap();
        assert_eq!(gone, [b("h:/2"), b("h:/6")]);
        let left: Vec<String> = w.bricks.iter().map(|x| x.to_string()).collect();
        assert_eq!(left, ["h:/1", "h:/3", "h:/4", "h:/5"]);
        assert_eq!(w.replica, 2);
        // A volume without replicas has nothing to heal a new brick from.
        let mut one = Volume::sample("b");
        assert!(one.replace_brick(&b("h:/b"), &b("h:/c")).is_err());
        assert!(one.reset_brick(&b("h:/b"), true).is_err());
    }

    #[test]
    fn each_brick_of_a_host_gets_a_port_of_its_own() {
        let mut st = ClusterState::default();
        let mut v = Volume::sample("a");
        v.bricks[0].port = Some(crate::mgmt::BRICK_PORT_BASE);
        st.volumes.insert("a".into(), std::sync::Arc::new(v));
        let mut new: Vec<Brick> = ["h:/c", "g:/c", "h:/d"]
            .iter()
            .map(|b| Brick::parse(b).unwrap())
            .collect();
        new[2].port = Some(30000);
        st.assign_ports(&mut new);
        let base = crate::mgmt::BRICK_PORT_BASE;
        let ports: Vec<_> = new.iter().map(|b| b.port.unwrap()).collect();
        assert_eq!(ports, [base + 1, base, 30000]);
    }

    #[test]
    fn state_survives_a_reload() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(d.path()).unwrap();
        let mut st = s.load().unwrap();
        std::sync::Arc::make_mut(&mut st.peers).push(Peer {
            uuid: "u".into(),
            host: "h".into(),
            mgmt: "h:1".into(),
        });
        s.save(&st).unwrap();
        let back = s.load().unwrap();
        assert_eq!(back.uuid, st.uuid);
        assert_eq!(back.peers, st.peers);
    }
}
