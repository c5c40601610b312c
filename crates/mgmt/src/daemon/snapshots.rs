//! `snapshot create|delete|list|info|status` (docs/snapshots.md).
//!
//! A snapshot is taken on the leader, under the lock of changes, over a
//! client graph of the whole volume as the pool's own client: every brick
//! must be up and have a mechanism (`storage::snapshot`); then every
//! brick's barrier rises (`brick::barrier`: each answers once the changes
//! in flight on it have ended), every brick takes its copy, and every
//! barrier falls. No brick takes its copy before every barrier is up, so
//! a change one brick's copy holds that another's lacks was never
//! answered to its client: the copies hold the same completed writes.
//! A failure anywhere removes the copies made and lowers the barriers:
//! a snapshot on record is whole.

use super::{err, Daemon};
use crate::command::{Command, SnapshotChange, MAX_PER_VOLUME};
use crate::error::Error;
use crate::options::{SNAP_AUTO_DELETE, SNAP_MAX_HARD_LIMIT, SNAP_MAX_SOFT_LIMIT};
use crate::rpc::{self, CopyOp, Response, SnapshotCopy, SnapshotOp, SnapshotSel, SnapshotStatus};
use crate::state::{Snapshot, VolStatus};
use futures_util::future::join_all;
use mortar_brick::barrier::{
    SnapshotReport, BARRIER_XATTR, PREPARE_XATTR, SNAPSHOTS_XATTR, SNAPSHOT_XATTR_PREFIX,
};
use mortar_core::{Ctx, Fop, Gfid, Reply};
use mortar_graph::{Graph, Node};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long the bricks are given to connect.
const REACH: Duration = Duration::from_secs(5);

/// `name` with the time appended as GlusterFS does (`_GMT-2026.12.07-21.10.00`).
fn stamped(name: &str, at: SystemTime) -> String {
    let t = humantime::format_rfc3339_seconds(at).to_string();
    // 2026-12-07T21:10:00Z
    let (date, time) = t.trim_end_matches('Z').split_once('T').unwrap_or((&t, ""));
    format!(
        "{name}_GMT-{}-{}",
        date.replace('-', "."),
        time.replace(':', ".")
    )
}

fn setxattr(name: String) -> Fop {
    Fop::Setxattr {
        gfid: Gfid::ROOT,
        name,
        value: Default::default(),
        flags: 0,
    }
}

fn removexattr(name: String) -> Fop {
    Fop::Removexattr {
        gfid: Gfid::ROOT,
        name,
    }
}

/// Sends `fop` to every brick of `nodes` at once: (brick, why it failed)
/// for those that did.
async fn on_all(nodes: &[(String, &Node)], fop: impl Fn() -> Fop) -> Vec<(String, String)> {
    let calls = nodes.iter().map(|(label, n)| {
        let fop = fop();
        async move {
            let r = n.child.call(&Ctx::root(), fop).await;
            r.err().map(|e| (label.clone(), e.to_string()))
        }
    });
    join_all(calls).await.into_iter().flatten().collect()
}

/// The bricks of `graph`, by label (HOST:/PATH).
fn brick_nodes(graph: &Graph) -> Vec<(String, &Node)> {
    let label = mortar_graph::sets::brick_label;
    graph.leaves().map(|n| (label(n), n)).collect()
}

/// The bricks whose servers did not answer Ok, and why.
fn failures(bricks: &[crate::state::Brick], answers: Vec<Response>) -> Vec<(String, String)> {
    bricks
        .iter()
        .zip(answers)
        .filter_map(|(b, a)| match a {
            Response::Ok(_) => None,
            Response::Err(e) => Some((b.to_string(), e.message)),
            other => Some((b.to_string(), format!("unexpected answer {other:?}"))),
        })
        .collect()
}

/// The bricks of `nodes` not among `failed`.
fn all_but<'a>(
    nodes: &[(String, &'a Node)],
    failed: &[(String, String)],
) -> Vec<(String, &'a Node)> {
    nodes
        .iter()
        .filter(|(b, _)| !failed.iter().any(|(f, _)| f == b))
        .cloned()
        .collect()
}

fn listed(failed: &[(String, String)]) -> String {
    failed
        .iter()
        .map(|(b, e)| format!("\n  {b}: {e}"))
        .collect()
}

impl Daemon {
    /// Asks the server of each brick of `s` to do `op` with its copy: the
    /// answers, in the order of `s.bricks`.
    async fn on_copies(
        self: &Arc<Self>,
        s: &Snapshot,
        op: impl Fn(&crate::state::Brick) -> CopyOp,
    ) -> Vec<Response> {
        self.on_bricks(&s.bricks, |b| rpc::Request::SnapshotCopy {
            brick: b.path.clone(),
            name: s.name.clone(),
            op: op(b),
        })
        .await
    }

    /// The snapshots `which` names, oldest first.
    fn snapshots(&self, which: &SnapshotSel) -> Result<Vec<Snapshot>, Error> {
        let st = self.state.lock().unwrap();
        let mut out: Vec<Snapshot> = match which {
            SnapshotSel::All => st.snapshots.values().cloned().collect(),
            SnapshotSel::Name(n) => vec![st
                .snapshots
                .get(n)
                .cloned()
                .ok_or_else(|| Error::not_found(format!("Snapshot ({n}) does not exist")))?],
            SnapshotSel::Volume(v) => {
                if !st.volumes.contains_key(v) {
                    return Err(Error::not_found(format!("Volume ({v}) does not exist")));
                }
                st.snapshots
                    .values()
                    .filter(|s| &s.volume == v)
                    .cloned()
                    .collect()
            }
        };
        out.sort_by_key(|s| (s.created, s.name.clone()));
        Ok(out)
    }

    /// The reads: `snapshot list|info|status`.
    pub(super) async fn snapshot_read(self: &Arc<Self>, op: SnapshotOp) -> Response {
        match op {
            SnapshotOp::List { which } => match self.snapshots(&which) {
                Ok(s) => Response::Snapshots(s),
                Err(e) => err(e),
            },
            SnapshotOp::Status { which } => match self.snapshots(&which) {
                Ok(snaps) => {
                    let mut out = Vec::new();
                    for s in snaps {
                        out.push(self.snapshot_status(s).await);
                    }
                    Response::SnapshotStatus(out)
                }
                Err(e) => err(e),
            },
            other => err(format!("{other:?} is a change")),
        }
    }

    /// Where each copy of snapshot `s` stands, asked of its servers.
    async fn snapshot_status(self: &Arc<Self>, s: Snapshot) -> SnapshotStatus {
        let answers = self.on_copies(&s, |_| CopyOp::Check).await;
        let bricks = s
            .bricks
            .iter()
            .zip(answers)
            .enumerate()
            .map(|(i, (b, answer))| {
                let (present, error) = match answer {
                    Response::Ok(said) => (Some(said == "present"), None),
                    Response::Err(e) => (None, Some(e.message)),
                    other => (None, Some(format!("unexpected answer {other:?}"))),
                };
                SnapshotCopy {
                    path: format!("{}:{}", b.host, s.path_on(b)),
                    mechanism: s.mechanisms.get(i).cloned().unwrap_or_default(),
                    present,
                    error,
                }
            })
            .collect();
        SnapshotStatus {
            snapshot: s,
            bricks,
        }
    }

    /// `SnapshotCopy`: snapshot `name`'s copy beside local brick `brick`.
    pub(super) async fn snapshot_copy(&self, brick: String, name: String, op: CopyOp) -> Response {
        let known = self
            .state
            .lock()
            .unwrap()
            .snapshots
            .get(&name)
            .is_some_and(|s| s.bricks.iter().any(|b| b.path == brick));
        if !known {
            return err(Error::not_found(format!(
                "{brick} has no copy of a snapshot {name} on record"
            )));
        }
        if let CopyOp::Clone { to } = &op {
            let clone = to.strip_prefix(&format!("{}-", brick.trim_end_matches('/')));
            if !clone.is_some_and(mortar_core::options::valid_name) {
                return err(format!("{to} is not where a clone of {brick} goes"));
            }
        }
        let path = std::path::PathBuf::from(&brick);
        use mortar_storage::snapshot as copies;
        let restore = op == CopyOp::Restore;
        let done = tokio::task::spawn_blocking(move || match op {
            CopyOp::Clone { to } => copies::clone(&path, &name, to.as_ref()).map(|()| "cloned"),
            CopyOp::Remove => copies::remove(&path, &name).map(|()| "removed"),
            CopyOp::Restore => copies::restore(&path, &name).map(|()| "restored"),
            CopyOp::Check => copies::list(&path).map(|names| match names.contains(&name) {
                true => "present",
                false => "absent",
            }),
        })
        .await;
        let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
        match done {
            Ok(Ok(said)) => Response::Ok(said.to_string()),
            Ok(Err(e)) if gone(&e) && !restore => Response::Ok("absent".into()),
            Ok(Err(e)) => err(format!("{brick}: {e}")),
            Err(e) => err(e.to_string()),
        }
    }

    /// The changes: `snapshot create|delete`, on the leader.
    pub(super) async fn snapshot_change(self: &Arc<Self>, op: SnapshotOp) -> Result<String, Error> {
        match op {
            SnapshotOp::Create {
                name,
                volume,
                description,
                no_timestamp,
            } => {
                let name = match no_timestamp {
                    true => name,
                    false => stamped(&name, SystemTime::now()),
                };
                self.snapshot_create(name, volume, description).await
            }
            SnapshotOp::Restore { name } => self.snapshot_restore(&name).await,
            SnapshotOp::Clone { clone, name } => self.snapshot_clone(clone, &name).await,
            SnapshotOp::Delete { which } => {
                let snaps = self.snapshots(&which)?;
                if snaps.is_empty() {
                    return Err(Error::not_found("No snapshots present"));
                }
                let mut lines = Vec::new();
                for s in snaps {
                    self.snapshot_delete(&s).await?;
                    lines.push(format!(
                        "snapshot delete: {}: snap removed successfully",
                        s.name
                    ));
                }
                Ok(lines.join("\n"))
            }
            other => Err(format!("{other:?} is not a change").into()),
        }
    }

    /// `snapshot restore NAME`: every brick of its volume, stopped and
    /// with the same bricks as when it was taken, brought back to its
    /// copy (the snapshot is kept).
    async fn snapshot_restore(self: &Arc<Self>, name: &str) -> Result<String, Error> {
        let s = self
            .snapshots(&SnapshotSel::Name(name.to_string()))?
            .remove(0);
        let v = self.volume(&s.volume)?;
        if v.id != s.volume_id {
            return Err(format!("Volume {} is not the volume snapshot {name} was taken of (it was deleted and made again)", s.volume).into());
        }
        if v.status == VolStatus::Started {
            return Err(format!("Volume ({}) has been started. Volume needs to be stopped before restoring a snapshot.", s.volume).into());
        }
        let same = v.bricks.len() == s.bricks.len()
            && v.bricks
                .iter()
                .zip(&s.bricks)
                .all(|(a, b)| a.host == b.host && a.path == b.path);
        if !same {
            return Err(format!("Volume {}'s bricks changed since snapshot {name} was taken: it cannot be restored in place", s.volume).into());
        }
        let answers = self.on_copies(&s, |_| CopyOp::Restore).await;
        let failed = failures(&s.bricks, answers);
        if !failed.is_empty() {
            return Err(format!(
                "Snapshot {name} was not restored on every brick (the others are; those listed are not served until it is: run snapshot restore {name} again):{}",
                listed(&failed)
            )
            .into());
        }
        tracing::info!(snapshot = %name, volume = %s.volume, "volume restored to the snapshot");
        Ok(format!("Snap {name} restored successfully"))
    }

    /// `snapshot clone CLONE NAME`: each brick's server makes a writable
    /// copy of its copy beside the brick (`Snapshot::clone_path`), and a
    /// volume CLONE of the snapshot's shape and options is made of them
    /// (created, not started).
    async fn snapshot_clone(self: &Arc<Self>, clone: String, name: &str) -> Result<String, Error> {
        let s = self
            .snapshots(&SnapshotSel::Name(name.to_string()))?
            .remove(0);
        if !mortar_core::options::valid_name(&clone) || clone == "all" {
            return Err(format!(
                "Volume name {clone} is not valid: use letters, digits, '-' and '_'"
            )
            .into());
        }
        if self.state.lock().unwrap().volumes.contains_key(&clone) {
            return Err(format!("Volume {clone} already exists").into());
        }
        let bricks: Vec<String> = s
            .bricks
            .iter()
            .map(|b| format!("{}:{}", b.host, Snapshot::clone_path(b, &clone)))
            .collect();
        let answers = self
            .on_copies(&s, |b| CopyOp::Clone {
                to: Snapshot::clone_path(b, &clone),
            })
            .await;
        let failed = failures(&s.bricks, answers);
        let left = || format!("\n(remove what was made of: {})", bricks.join(" "));
        if !failed.is_empty() {
            return Err(format!(
                "Clone {clone} not made: it failed on:{}{}",
                listed(&failed),
                left()
            )
            .into());
        }
        let shape = (s.replica.max(1), s.arbiter, s.redundancy);
        if let Err(e) = self
            .create_volume(clone.clone(), shape, "tcp".into(), bricks.clone(), true)
            .await
        {
            return Err(format!("Clone {clone} not made: {}{}", e.message, left()).into());
        }
        if !s.options.is_empty() {
            self.execute(Command::SetOptions {
                volume: clone.clone(),
                options: s.options.clone().into_iter().collect(),
            })
            .await?;
        }
        tracing::info!(snapshot = %name, clone = %clone, "volume cloned from the snapshot");
        Ok(format!("Clone {clone} created successfully"))
    }

    async fn snapshot_delete(self: &Arc<Self>, s: &Snapshot) -> Result<(), Error> {
        let answers = self.on_copies(s, |_| CopyOp::Remove).await;
        let failed = failures(&s.bricks, answers);
        if !failed.is_empty() {
            return Err(format!(
                "Snapshot {} is kept: its copies could not be removed from every brick:{}",
                s.name,
                listed(&failed)
            )
            .into());
        }
        self.execute(Command::Snapshot(SnapshotChange::Remove {
            name: s.name.clone(),
        }))
        .await?;
        tracing::info!(snapshot = %s.name, volume = %s.volume, "snapshot deleted");
        Ok(())
    }

    async fn snapshot_create(
        self: &Arc<Self>,
        name: String,
        volume: String,
        description: String,
    ) -> Result<String, Error> {
        if !mortar_storage::snapshot::valid_name(&name) {
            return Err(format!(
                "{name:?} is not a snapshot name: letters, digits, - _ . only, not starting with . or -"
            )
            .into());
        }
        let v = self.volume(&volume)?;
        if v.status != VolStatus::Started {
            return Err(format!(
                "Volume ({volume}) is not started: a snapshot is taken of a started volume"
            )
            .into());
        }
        if self.state.lock().unwrap().snapshots.contains_key(&name) {
            return Err(format!("Snapshot {name} already exists").into());
        }
        let warning = self.make_room(&volume).await?;
        let desc = self
            .desc(&volume)
            .ok_or_else(|| Error::not_found(format!("Volume {volume} does not exist")))?;
        let graph = Graph::build_lazy(&desc, &rpc::internal_env(&v.key), |_| false)
            .map_err(|e| format!("{e:#}"))?;
        graph.wait_leaves(|_| true, REACH).await;
        let done = self.take_and_record(&graph, &name, &v, description).await;
        graph.fini().await;
        let pause = done?;
        tracing::info!(snapshot = %name, volume = %volume, "snapshot created; changes held back {pause:?}");
        Ok(format!("Snap {name} created successfully{warning}"))
    }

    /// Room for one more snapshot of `volume` under the pool's limits
    /// (`snapshot config`): with auto-delete, the oldest are deleted down
    /// to below the soft limit; without, a volume at the hard limit is
    /// refused. Answers a warning to add to the answer when the new one
    /// reaches the soft limit.
    async fn make_room(self: &Arc<Self>, volume: &str) -> Result<String, Error> {
        let (hard, soft, auto) = {
            let o = &self.state.lock().unwrap().options;
            let hard = (SNAP_MAX_HARD_LIMIT.int(o) as usize).min(MAX_PER_VOLUME);
            let soft = (hard * SNAP_MAX_SOFT_LIMIT.int(o) as usize / 100).max(1);
            (hard, soft, SNAP_AUTO_DELETE.str(o) == "enable")
        };
        let mut taken = self.snapshots(&SnapshotSel::Volume(volume.to_string()))?;
        if auto {
            while taken.len() >= soft {
                let oldest = taken.remove(0);
                self.snapshot_delete(&oldest).await?;
                tracing::info!(snapshot = %oldest.name, volume, "deleted: the volume reached snap-max-soft-limit (auto-delete)");
            }
            return Ok(String::new());
        }
        if taken.len() >= hard {
            return Err(format!(
                "Volume {volume} has {} snapshots, snap-max-hard-limit: delete one, or let the oldest go (snapshot config auto-delete enable)",
                taken.len()
            )
            .into());
        }
        Ok(match taken.len() + 1 >= soft {
            true => format!(
                "\nWarning: volume {volume} reached its soft limit: {} snapshots of {hard}",
                taken.len() + 1
            ),
            false => String::new(),
        })
    }

    /// Takes snapshot `name` of `v` on every brick of `graph` and records
    /// it: how long changes were held back. Its copies are removed if it
    /// cannot be recorded.
    async fn take_and_record(
        self: &Arc<Self>,
        graph: &Graph,
        name: &str,
        v: &crate::state::Volume,
        description: String,
    ) -> Result<Duration, Error> {
        let (mechanisms, pause) = self.take_on_bricks(graph, name, &v.bricks).await?;
        let snap = Snapshot {
            name: name.to_string(),
            id: uuid::Uuid::new_v4().to_string(),
            volume: v.name.clone(),
            volume_id: v.id.clone(),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            description,
            bricks: v.bricks.clone(),
            replica: v.replica,
            arbiter: v.arbiter,
            redundancy: v.redundancy,
            options: v.options.clone(),
            mechanisms,
            pause_ms: pause.as_millis() as u64,
        };
        let recorded = self
            .execute(Command::Snapshot(SnapshotChange::Add(Box::new(snap))))
            .await;
        if let Err(e) = recorded {
            let nodes = brick_nodes(graph);
            let key = format!("{SNAPSHOT_XATTR_PREFIX}{name}");
            let _ = on_all(&nodes, || removexattr(key.clone())).await;
            return Err(e);
        }
        Ok(pause)
    }

    /// Takes snapshot `name` on every brick of `graph` behind their
    /// barriers: the mechanism of each brick (in `bricks`' order), and how
    /// long changes were held back.
    async fn take_on_bricks(
        &self,
        graph: &Graph,
        name: &str,
        bricks: &[crate::state::Brick],
    ) -> Result<(Vec<String>, Duration), Error> {
        let nodes = brick_nodes(graph);
        let down: Vec<(String, String)> = nodes
            .iter()
            .filter(|(_, n)| !n.child.is_up())
            .map(|(b, _)| (b.clone(), "not connected".to_string()))
            .collect();
        if !down.is_empty() {
            return Err(format!(
                "every brick must be up to take a snapshot; down:{}",
                listed(&down)
            )
            .into());
        }
        // Each brick's mechanism, or why it has none.
        let asks = nodes.iter().map(|(b, n)| async move {
            let fop = Fop::Getxattr {
                gfid: Gfid::ROOT,
                name: SNAPSHOTS_XATTR.into(),
            };
            let report = match n.child.call(&Ctx::root(), fop).await {
                Ok(Reply::Xattr(v)) => serde_json::from_slice::<SnapshotReport>(&v)
                    .map_err(|e| format!("its answer does not parse: {e}"))
                    .and_then(|r| r.mechanism),
                Ok(other) => Err(format!("unexpected answer {other:?}")),
                Err(e) => Err(e.to_string()),
            };
            (b.clone(), report)
        });
        let reports = join_all(asks).await;
        let lacking: Vec<(String, String)> = reports
            .iter()
            .filter_map(|(b, r)| r.as_ref().err().map(|e| (b.clone(), e.clone())))
            .collect();
        if !lacking.is_empty() {
            return Err(format!(
                "Snapshot {name} not taken: these bricks cannot be snapshotted:{}",
                listed(&lacking)
            )
            .into());
        }
        // What the file systems hold in memory is written out, and copies
        // by reflink are made ahead, before changes wait, not while.
        let key = format!("{SNAPSHOT_XATTR_PREFIX}{name}");
        let prepare = || Fop::Setxattr {
            gfid: Gfid::ROOT,
            name: PREPARE_XATTR.into(),
            value: name.as_bytes().to_vec().into(),
            flags: 0,
        };
        let failed = on_all(&nodes, prepare).await;
        if !failed.is_empty() {
            // (Copies made ahead go; a brick that refused keeps its own.)
            let made = all_but(&nodes, &failed);
            let _ = on_all(&made, || removexattr(key.clone())).await;
            return Err(format!(
                "Snapshot {name} not taken: the bricks could not prepare it:{}",
                listed(&failed)
            )
            .into());
        }
        let started = Instant::now();
        let failed = on_all(&nodes, || setxattr(BARRIER_XATTR.into())).await;
        // The leader dies with every barrier up (they fall by themselves).
        fail::fail_point!("snapshot-barriers-up");
        let result = if !failed.is_empty() {
            let _ = on_all(&nodes, || removexattr(key.clone())).await;
            Err(format!(
                "Snapshot {name} not taken: the barrier did not rise on:{}",
                listed(&failed)
            ))
        } else {
            let failed = on_all(&nodes, || setxattr(key.clone())).await;
            if failed.is_empty() {
                Ok(())
            } else {
                // Removed where it was taken (a brick that refused may
                // hold another copy of that name).
                let took = all_but(&nodes, &failed);
                let _ = on_all(&took, || removexattr(key.clone())).await;
                Err(format!(
                    "Snapshot {name} not taken: it failed on:{}",
                    listed(&failed)
                ))
            }
        };
        let failed = on_all(&nodes, || removexattr(BARRIER_XATTR.into())).await;
        let pause = started.elapsed();
        if !failed.is_empty() {
            tracing::warn!(snapshot = %name, "barrier not lowered on (it falls by itself after features.barrier-timeout):{}", listed(&failed));
        }
        result?;
        let mechanisms = bricks
            .iter()
            .map(|b| {
                let r = reports.iter().find(|(l, _)| *l == b.to_string());
                r.and_then(|(_, m)| m.clone().ok()).unwrap_or_default()
            })
            .collect();
        Ok((mechanisms, pause))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stamped_as_glusterfs_does() {
        let at = UNIX_EPOCH + Duration::from_secs(1_796_677_800);
        assert_eq!(stamped("nightly", at), "nightly_GMT-2026.12.07-21.10.00");
        assert!(mortar_storage::snapshot::valid_name(&stamped("s", at)));
    }
}
