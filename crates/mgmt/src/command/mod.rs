//! Changes of the cluster state as data. A management operation first
//! validates (`daemon::ops`: arguments, bricks, peers), then states what
//! it changes as `Command`s: the entries of the replicated log
//! (`mgmt::consensus`). `apply` makes one to the state: a pure function,
//! the same on every server, applied in log order everywhere. (Who the
//! servers are is Raft's own membership, not a command.)

use super::state::{
    Brick, ClusterState, IssuedCredential, Task, TaskKind, TaskRow, TaskStatus, VolStatus, Volume,
};
use crate::error::Error;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

mod snapshot;
pub use snapshot::{SnapshotChange, MAX_PER_VOLUME};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    AddVolume(Volume),
    RemoveVolume {
        volume: String,
    },
    SetStatus {
        volume: String,
        status: VolStatus,
    },
    /// Sets an option (validated already); clients see a new version.
    SetOption {
        volume: String,
        key: String,
        value: String,
    },
    /// Sets several options at once (a `volume set VOL group NAME`,
    /// validated already); clients see one new version.
    SetOptions {
        volume: String,
        options: Vec<(String, String)>,
    },
    /// Resets one option, or all of them; clients see a new version.
    ResetOptions {
        volume: String,
        key: Option<String>,
    },
    /// The port a brick listens on, as its host found it (the one chosen
    /// was taken); clients see a new version.
    SetBrickPort {
        volume: String,
        host: String,
        path: String,
        port: u16,
    },
    /// A task started, or how it ended: it replaces the task of the same
    /// id, or else the last one of its kind.
    SetTask {
        volume: String,
        task: Task,
    },
    /// How one server's share of rebalance task `task` goes (a row of
    /// the same host replaced; refused once that row ended). When the
    /// last row completes, the layout generation the task wrote becomes
    /// the volume's commit (a fix-layout moves nothing, and commits
    /// nothing), unless the set list changed meanwhile: then it failed.
    SetTaskRow {
        volume: String,
        task: String,
        row: TaskRow,
    },
    /// `rebalance stop`: every row of task `task` still in progress is
    /// stopped (each server stops its share as it sees this).
    StopTask {
        volume: String,
        task: String,
    },
    /// Bricks added (validated and prepared already): with the volume's
    /// replica count, new replica sets at the end, each with a new set id,
    /// and the layout commit raised (every directory is in flux until a
    /// rebalance); with a higher one, that many more bricks in every set,
    /// in set order.
    AddBricks {
        volume: String,
        replica: usize,
        bricks: Vec<Brick>,
    },
    /// The replica sets (by id) a remove-brick empties (none: it was
    /// stopped). Starting one raises the layout commit: directories are
    /// in flux until their files have left.
    SetDraining {
        volume: String,
        sets: Vec<u32>,
    },
    /// A rebalance starts: every directory is in flux until it commits
    /// (clients stop trusting the layouts they keep).
    RaiseLayoutCommit {
        volume: String,
    },
    /// Takes replica sets (by id) and their bricks out of the volume.
    RemoveSets {
        volume: String,
        sets: Vec<u32>,
    },
    /// The replica count lowered to `replica`: `bricks` (as many of each
    /// set) leave the volume.
    LowerReplica {
        volume: String,
        replica: usize,
        bricks: Vec<Brick>,
    },
    /// Brick `to` (prepared already) takes the place of `from`.
    ReplaceBrick {
        volume: String,
        from: Brick,
        to: Brick,
    },
    /// `reset-brick start` took brick `brick` down (`down`), or its
    /// commit brought it back.
    ResetBrick {
        volume: String,
        brick: Brick,
        down: bool,
    },
    /// Sets an option of the pool (`volume set all`, validated already).
    SetPoolOption {
        key: String,
        value: String,
    },
    /// A client credential issued for the volume (its name is new).
    AddCredential {
        volume: String,
        credential: IssuedCredential,
    },
    /// A client credential revoked: the bricks close its connections.
    RevokeCredential {
        volume: String,
        name: String,
    },
    /// An administrator credential issued (its name is new).
    AddOperator(IssuedCredential),
    /// An administrator credential revoked.
    RevokeOperator {
        name: String,
    },
    /// The certificates server `uuid` presents (none: it left the pool).
    /// Every volume's bricks learn the pool's new list.
    SetCerts {
        uuid: String,
        certs: Vec<String>,
        /// A rotation's end: those it had on record and now lacks are
        /// retired (its connections opened with them go on).
        #[serde(default)]
        retire: bool,
    },
    /// A credential issued again (`credentials rotate`): a new certificate
    /// for the same name and grant; the one it replaces is retired. On
    /// `volume`'s client credentials, or the pool's administrators' if None.
    RotateCredential {
        volume: Option<String>,
        name: String,
        fingerprint: String,
        issued: u64,
    },
    Snapshot(SnapshotChange),
}

impl Command {
    /// What kind of change it is, for the logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::AddVolume(_) => "AddVolume",
            Command::RemoveVolume { .. } => "RemoveVolume",
            Command::SetStatus { .. } => "SetStatus",
            Command::SetOption { .. } => "SetOption",
            Command::SetOptions { .. } => "SetOptions",
            Command::ResetOptions { .. } => "ResetOptions",
            Command::SetBrickPort { .. } => "SetBrickPort",
            Command::SetTask { .. } => "SetTask",
            Command::SetTaskRow { .. } => "SetTaskRow",
            Command::StopTask { .. } => "StopTask",
            Command::AddBricks { .. } => "AddBricks",
            Command::SetDraining { .. } => "SetDraining",
            Command::RaiseLayoutCommit { .. } => "RaiseLayoutCommit",
            Command::RemoveSets { .. } => "RemoveSets",
            Command::LowerReplica { .. } => "LowerReplica",
            Command::ReplaceBrick { .. } => "ReplaceBrick",
            Command::ResetBrick { .. } => "ResetBrick",
            Command::AddCredential { .. } => "AddCredential",
            Command::SetPoolOption { .. } => "SetPoolOption",
            Command::RevokeCredential { .. } => "RevokeCredential",
            Command::SetCerts { .. } => "SetCerts",
            Command::RotateCredential { .. } => "RotateCredential",
            Command::AddOperator(_) => "AddOperator",
            Command::RevokeOperator { .. } => "RevokeOperator",
            Command::Snapshot(_) => "Snapshot",
        }
    }

    /// The volume a command changes (None: the pool's own records, or a
    /// volume added).
    fn volume(&self) -> Option<&str> {
        match self {
            Command::AddVolume(_)
            | Command::Snapshot(_)
            | Command::AddOperator(_)
            | Command::RevokeOperator { .. }
            | Command::SetCerts { .. }
            | Command::SetPoolOption { .. }
            | Command::RotateCredential { volume: None, .. } => None,
            Command::RotateCredential {
                volume: Some(volume),
                ..
            }
            | Command::RemoveVolume { volume }
            | Command::SetStatus { volume, .. }
            | Command::SetOption { volume, .. }
            | Command::SetOptions { volume, .. }
            | Command::ResetOptions { volume, .. }
            | Command::SetBrickPort { volume, .. }
            | Command::SetTask { volume, .. }
            | Command::SetTaskRow { volume, .. }
            | Command::StopTask { volume, .. }
            | Command::AddBricks { volume, .. }
            | Command::SetDraining { volume, .. }
            | Command::RaiseLayoutCommit { volume }
            | Command::RemoveSets { volume, .. }
            | Command::LowerReplica { volume, .. }
            | Command::ReplaceBrick { volume, .. }
            | Command::ResetBrick { volume, .. }
            | Command::AddCredential { volume, .. }
            | Command::RevokeCredential { volume, .. } => Some(volume),
        }
    }

    /// Makes the change to `st`, or says why it cannot be made there (and
    /// leaves `st` as it was).
    pub fn apply(&self, st: &mut ClusterState) -> Result<(), Error> {
        match (self, self.volume()) {
            (Command::AddVolume(v), _) => {
                if st.volumes.contains_key(&v.name) {
                    return Err(format!("Volume {} already exists", v.name).into());
                }
                st.volumes.insert(v.name.clone(), Arc::new(v.clone()));
                Ok(())
            }
            (Command::RemoveVolume { .. }, Some(name)) => match st.volumes.remove(name) {
                Some(_) => Ok(()),
                None => Err(Error::not_found(format!("Volume {name} does not exist"))),
            },
            (_, Some(name)) => {
                let v = st
                    .volume_mut(name)
                    .ok_or_else(|| Error::not_found(format!("Volume {name} does not exist")))?;
                self.apply_to_volume(v)
            }
            (_, None) => self.apply_to_pool(st),
        }
    }

    /// The pool's own records: administrators and certificates.
    fn apply_to_pool(&self, st: &mut ClusterState) -> Result<(), Error> {
        match self {
            // (The servers read it; no client sees a new version.)
            Command::SetPoolOption { key, value } => {
                st.options.insert(key.clone(), value.clone());
                return Ok(());
            }
            Command::Snapshot(change) => return change.apply(st),
            Command::AddOperator(credential) => {
                if st.operators.iter().any(|c| c.name == credential.name) {
                    return Err(format!(
                        "The pool already has a credential named {}",
                        credential.name
                    )
                    .into());
                }
                st.operators.push(credential.clone());
            }
            Command::RevokeOperator { name } => {
                let before = st.operators.len();
                st.operators.retain(|c| &c.name != name);
                if st.operators.len() == before {
                    return Err(format!("The pool has no credential named {name}").into());
                }
            }
            Command::SetCerts {
                uuid,
                certs,
                retire,
            } => {
                let before = if certs.is_empty() {
                    Arc::make_mut(&mut st.retired).remove(uuid);
                    Arc::make_mut(&mut st.certs).remove(uuid)
                } else {
                    Arc::make_mut(&mut st.certs).insert(uuid.clone(), certs.clone())
                };
                if *retire {
                    let gone: Vec<String> = before
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|c| !certs.contains(c))
                        .collect();
                    if !gone.is_empty() {
                        Arc::make_mut(&mut st.retired).insert(uuid.clone(), gone);
                    }
                }
            }
            Command::RotateCredential {
                name,
                fingerprint,
                issued,
                ..
            } => rotate(&mut st.operators, name, fingerprint, *issued, || {
                format!("The pool has no credential named {name}")
            })?,
            other => unreachable!("{} is a change of a volume", other.kind()),
        }
        st.pool_changed();
        Ok(())
    }

    /// A change of volume `v`.
    fn apply_to_volume(&self, v: &mut Volume) -> Result<(), Error> {
        let name = v.name.clone();
        match self {
            Command::SetStatus { status, .. } => {
                v.status = *status;
                return Ok(());
            }
            Command::SetOption { key, value, .. } => {
                v.options.insert(key.clone(), value.clone());
            }
            Command::SetOptions { options, .. } => v.options.extend(options.iter().cloned()),
            Command::ResetOptions { key, .. } => match key {
                Some(k) => {
                    v.options.remove(k);
                }
                None => v.options.clear(),
            },
            Command::SetBrickPort {
                host, path, port, ..
            } => {
                let b = v
                    .bricks
                    .iter_mut()
                    .find(|b| &b.host == host && &b.path == path)
                    .ok_or_else(|| format!("Volume {name} has no brick {host}:{path}"))?;
                b.port = Some(*port);
            }
            Command::AddCredential { credential, .. } => {
                if v.credentials.iter().any(|c| c.name == credential.name) {
                    return Err(format!(
                        "Volume {name} already has a credential named {}",
                        credential.name
                    )
                    .into());
                }
                v.credentials.push(credential.clone());
            }
            Command::RevokeCredential { name: cred, .. } => {
                let before = v.credentials.len();
                v.credentials.retain(|c| &c.name != cred);
                if v.credentials.len() == before {
                    return Err(format!("Volume {name} has no credential named {cred}").into());
                }
            }
            Command::RotateCredential {
                name: cred,
                fingerprint,
                issued,
                ..
            } => rotate(&mut v.credentials, cred, fingerprint, *issued, || {
                format!("Volume {name} has no credential named {cred}")
            })?,
            Command::SetTask { task, .. } => {
                set_task(&mut v.tasks, task);
                return Ok(());
            }
            Command::SetTaskRow { task, row, .. } => return set_task_row(v, task, row),
            Command::StopTask { task, .. } => return stop_task(v, task),
            _ => return self.apply_to_bricks(v),
        }
        v.version += 1;
        Ok(())
    }

    /// A change of the bricks of volume `v` (each bumps its version, or
    /// refuses, as the volume's own method says).
    fn apply_to_bricks(&self, v: &mut Volume) -> Result<(), Error> {
        match self {
            Command::AddBricks {
                replica, bricks, ..
            } => v.add_bricks(*replica, bricks),
            Command::SetDraining { sets, .. } => {
                if sets.iter().any(|s| !v.set_ids().contains(s)) {
                    return Err(format!("volume {} has no such replica set", v.name).into());
                }
                if !sets.is_empty() {
                    v.raise_layout_commit();
                }
                v.draining = sets.clone();
                v.version += 1;
                Ok(())
            }
            Command::RaiseLayoutCommit { .. } => {
                v.raise_layout_commit();
                Ok(())
            }
            Command::RemoveSets { sets, .. } => v.remove_sets(sets).map(|_| ()),
            Command::LowerReplica {
                replica, bricks, ..
            } => v.lower_replica(*replica, bricks).map(|_| ()),
            Command::ReplaceBrick { from, to, .. } => v.replace_brick(from, to),
            Command::ResetBrick { brick, down, .. } => v.reset_brick(brick, *down),
            other => unreachable!("{} is not a change of bricks", other.kind()),
        }
    }
}

/// Credential `name` of `list` gets a new certificate; the one it
/// replaces is retired.
fn rotate(
    list: &mut [IssuedCredential],
    name: &str,
    fingerprint: &str,
    issued: u64,
    missing: impl FnOnce() -> String,
) -> Result<(), Error> {
    let c = list
        .iter_mut()
        .find(|c| c.name == name)
        .ok_or_else(missing)?;
    c.retired = vec![std::mem::replace(
        &mut c.fingerprint,
        fingerprint.to_string(),
    )];
    c.issued = issued;
    Ok(())
}

/// `task` replaces the task of its id, or else the last one of its kind.
fn set_task(tasks: &mut Vec<Task>, task: &Task) {
    match tasks
        .iter()
        .position(|t| t.id == task.id)
        .or_else(|| tasks.iter().position(|t| t.kind == task.kind))
    {
        Some(i) => tasks[i] = task.clone(),
        None => tasks.push(task.clone()),
    }
}

/// One server's share of task `task` (see `Command::SetTaskRow`).
fn set_task_row(v: &mut Volume, task: &str, row: &TaskRow) -> Result<(), Error> {
    let name = &v.name;
    let t = v
        .tasks
        .iter_mut()
        .find(|t| t.id == *task)
        .ok_or_else(|| format!("volume {name} has no task {task}"))?;
    let r = t
        .rows
        .iter_mut()
        .find(|r| r.host == row.host)
        .ok_or_else(|| format!("task {task} has no row for {}", row.host))?;
    if r.status != TaskStatus::InProgress {
        return Err(format!(
            "the share of {} in task {task} ended already ({})",
            row.host,
            r.status.as_str()
        )
        .into());
    }
    *r = row.clone();
    if t.settle() && t.kind != TaskKind::FixLayout {
        if v.layout_commit + 1 == t.generation {
            v.layout_commit = t.generation;
            v.version += 1;
        } else {
            t.status = TaskStatus::Failed;
            t.detail.push_str(&format!(
                "; layouts not committed: the bricks of {name} changed during the rebalance: run it again"
            ));
        }
    }
    Ok(())
}

/// `rebalance stop`: the rows of `task` still in progress stop.
fn stop_task(v: &mut Volume, task: &str) -> Result<(), Error> {
    let t = v
        .tasks
        .iter_mut()
        .find(|t| t.id == *task && t.status == TaskStatus::InProgress)
        .ok_or_else(|| format!("task {task} of {} is not in progress", v.name))?;
    for r in t.rows.iter_mut() {
        if r.status == TaskStatus::InProgress {
            r.status = TaskStatus::Stopped;
        }
    }
    t.settle();
    if t.rows.is_empty() {
        t.status = TaskStatus::Stopped;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
