//! The state machine: committed `Command`s applied in log order to the
//! volumes, and Raft's membership (who the servers of the pool are). It
//! lives in memory; on disk is only its snapshot (`snapshot.json`, taken
//! every 20 to 39 entries, and sent whole to a server too far behind). A server
//! that restarts loads the snapshot and applies again the entries after
//! it up to the last commit it knew of (the log store keeps that index).
//! Writing the whole state after every change instead cost each of 300
//! servers a 60 KB file per change.

use super::{
    io_err, read_json, Entry, LogId, Membership, NodeId, Roles, Snapshot, SnapshotMeta, TypeConfig,
};
use crate::state::{write_atomic, ClusterState};
use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// What has been applied: up to which entry, the membership, the volumes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Applied {
    pub last: Option<LogId>,
    /// Shared between versions of the applied state until it changes:
    /// it names every server.
    pub membership: Arc<Membership>,
    /// The volumes (`uuid` and `peers` are not replicated: empty here).
    pub state: ClusterState,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Stored {
    meta: SnapshotMeta,
    state: ClusterState,
}

/// The state machine; clones share it (the snapshot builder).
#[derive(Clone)]
pub struct Machine {
    dir: PathBuf,
    /// Shared with readers; a batch applied while one holds it copies it.
    applied: Arc<Mutex<Arc<Applied>>>,
    /// Bumped after every batch applied or snapshot installed.
    changed: watch::Sender<u64>,
    snapshot: Arc<Mutex<Option<Stored>>>,
    /// Held while the snapshot's file is written.
    writing: Arc<Mutex<()>>,
    /// This server's id, and who votes (for the log store and the network).
    me: NodeId,
    roles: Arc<Roles>,
}

type Result<T> = std::result::Result<T, StorageError<NodeId>>;

/// The applied state as earlier versions kept it, replaced by the
/// snapshot at its next one.
const LEGACY: &str = "machine.json";

impl Machine {
    /// Opens the state machine in `dir`; `changed` is bumped after every
    /// batch applied or snapshot installed.
    pub fn open(
        dir: &Path,
        changed: watch::Sender<u64>,
        me: NodeId,
        roles: Arc<Roles>,
    ) -> std::io::Result<Machine> {
        let snapshot: Option<Stored> = read_json(&dir.join("snapshot.json"))?;
        let from_snapshot = snapshot
            .as_ref()
            .map(|s| Applied {
                last: s.meta.last_log_id,
                membership: Arc::new(s.meta.last_membership.clone()),
                state: s.state.clone(),
            })
            .unwrap_or_default();
        // Earlier versions wrote the applied state after every batch: it
        // is where such a server had got to, until a newer snapshot.
        let applied = match read_json::<Applied>(&dir.join(LEGACY)).ok().flatten() {
            Some(old) if old.last > from_snapshot.last => old,
            _ => from_snapshot,
        };
        roles.applied.send_replace(applied.last);
        let m = Machine {
            dir: dir.to_path_buf(),
            applied: Arc::new(Mutex::new(Arc::new(applied))),
            changed,
            snapshot: Arc::new(Mutex::new(snapshot)),
            writing: Default::default(),
            me,
            roles,
        };
        let membership = m.applied().membership.clone();
        // No membership yet (a server before its first one): it votes.
        if membership.log_id().is_some() {
            m.note_role(&membership);
        }
        Ok(m)
    }

    /// Notes who votes in `membership`: whether this server does (its log
    /// is then fsynced), and the voters (sent new entries first).
    fn note_role(&self, membership: &Membership) {
        let voters: std::collections::BTreeSet<NodeId> =
            membership.membership().voter_ids().collect();
        self.roles
            .me_votes
            .store(voters.contains(&self.me), Ordering::Relaxed);
        *self.roles.voters.write().unwrap() = voters;
    }

    /// Makes every later write of this state machine and its log fail
    /// (the state directory is being replaced).
    pub fn retire(&self) {
        self.roles.retired.store(true, Ordering::Relaxed);
    }

    /// The applied state now.
    pub fn applied(&self) -> Arc<Applied> {
        self.applied.lock().unwrap().clone()
    }

    /// The index of the last entry applied (0: none yet).
    pub fn applied_index(&self) -> u64 {
        self.applied.lock().unwrap().last.map_or(0, |l| l.index)
    }

    /// Makes `stored` the snapshot, on disk (it replaces the state an
    /// earlier version kept) and in memory, unless a later one was kept
    /// meanwhile. The file is written and fsynced on the blocking pool: at
    /// 300 servers on one machine, every server writes its snapshot at
    /// the same moment, and the daemon's one thread must not stand still
    /// behind those disk flushes.
    async fn keep(&self, stored: Stored) -> std::io::Result<()> {
        let m = self.clone();
        tokio::task::spawn_blocking(move || {
            let b = serde_json::to_vec(&stored)?;
            let _one = m.writing.lock().unwrap();
            let newer = |s: &Stored| s.meta.last_log_id > stored.meta.last_log_id;
            if m.snapshot.lock().unwrap().as_ref().is_some_and(newer) {
                return Ok(());
            }
            m.roles.live()?;
            write_atomic(&m.dir.join("snapshot.json"), &b)?;
            let _ = std::fs::remove_file(m.dir.join(LEGACY));
            *m.snapshot.lock().unwrap() = Some(stored);
            Ok(())
        })
        .await
        .map_err(std::io::Error::other)?
    }

    /// Tells the watchers that the applied state changed.
    fn changed(&self) {
        let last = self.applied.lock().unwrap().last;
        self.roles.applied.send_replace(last);
        self.changed.send_modify(|n| *n += 1);
    }
}

impl RaftSnapshotBuilder<TypeConfig> for Machine {
    async fn build_snapshot(&mut self) -> Result<Snapshot> {
        let a = self.applied();
        let a = a.as_ref();
        let meta = SnapshotMeta {
            last_log_id: a.last,
            last_membership: (*a.membership).clone(),
            snapshot_id: format!(
                "{}-{}",
                a.last.map_or(0, |l| l.leader_id.term),
                a.last.map_or(0, |l| l.index)
            ),
        };
        self.keep(Stored {
            meta: meta.clone(),
            state: a.state.clone(),
        })
        .await
        .map_err(io_err)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(a.state.clone()),
        })
    }
}

impl RaftStateMachine<TypeConfig> for Machine {
    type SnapshotBuilder = Machine;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, Membership)> {
        let a = self.applied.lock().unwrap();
        Ok((a.last, (*a.membership).clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<super::Outcome>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        self.roles.live().map_err(io_err)?;
        let mut out = Vec::new();
        let mut guard = self.applied.lock().unwrap();
        let a = Arc::make_mut(&mut guard);
        for e in entries {
            a.last = Some(e.log_id);
            out.push(match e.payload {
                EntryPayload::Blank => Ok(()),
                EntryPayload::Normal(cmd) => {
                    let r = cmd.apply(&mut a.state);
                    if let Err(why) = &r {
                        tracing::info!(index = e.log_id.index, "not applied: {cmd:?}: {why}");
                    }
                    r
                }
                EntryPayload::Membership(m) => {
                    a.membership = Arc::new(Membership::new(Some(e.log_id), m));
                    Ok(())
                }
            });
        }
        self.note_role(&a.membership);
        drop(guard);
        self.changed();
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<ClusterState>> {
        Ok(Box::default())
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        data: Box<ClusterState>,
    ) -> Result<()> {
        let a = Applied {
            last: meta.last_log_id,
            membership: Arc::new(meta.last_membership.clone()),
            state: *data,
        };
        self.keep(Stored {
            meta: meta.clone(),
            state: a.state.clone(),
        })
        .await
        .map_err(io_err)?;
        self.note_role(&a.membership);
        *self.applied.lock().unwrap() = Arc::new(a);
        self.changed();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>> {
        Ok(self.snapshot.lock().unwrap().clone().map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(s.state),
        }))
    }
}
