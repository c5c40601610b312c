//! The cluster state a daemon keeps: who it is, its peers, and the volumes.
//! Saved as one JSON file, replaced atomically (write, fsync, rename), so a
//! crash leaves either the old state or the new one.

use crate::error::Error;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod bricks;
mod snapshot;
mod store;
mod task;

pub use snapshot::Snapshot;
pub use store::{replace, write_atomic, Store};
pub use task::{Task, TaskKind, TaskRow, TaskStatus};

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
    pub fn parse(s: &str) -> Result<Brick, Error> {
        let (host, path) = s.split_once(':').ok_or_else(|| {
            format!("wrong brick type: {s}, use <HOSTNAME>:<export-dir-abs-path>")
        })?;
        if host.is_empty() || !path.starts_with('/') {
            return Err(
                format!("wrong brick type: {s}, use <HOSTNAME>:<export-dir-abs-path>").into(),
            );
        }
        let mut norm = String::new();
        for c in path.split('/').filter(|c| !c.is_empty()) {
            if c == "." || c == ".." {
                return Err(format!("brick path {path} must not contain '.' or '..'").into());
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
    /// Parity bricks per set of a dispersed volume, whose sets are
    /// `replica` bricks each (0: replicated or distributed only).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub redundancy: usize,
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

/// Whether sets of `width` bricks with `redundancy` parity bricks make a
/// disperse volume (the rules of GlusterFS's `volume create`).
pub fn check_disperse(
    width: usize,
    redundancy: usize,
    arbiter: usize,
) -> Result<(), crate::error::Error> {
    if arbiter > 0 {
        return Err("an arbiter belongs to a replica set, not a disperse set".into());
    }
    if width < 3 {
        return Err(format!("disperse count must be greater than 2 (it is {width})").into());
    }
    if redundancy == 0 {
        return Err("redundancy must be greater than 0".into());
    }
    if 2 * redundancy >= width {
        return Err(format!(
            "redundancy must be less than {} for a disperse {width} volume",
            width.div_ceil(2)
        )
        .into());
    }
    if width - redundancy > 16 {
        return Err(format!(
            "a disperse set holds at most 16 data bricks ({} asked)",
            width - redundancy
        )
        .into());
    }
    Ok(())
}

fn is_zero(n: &usize) -> bool {
    *n == 0
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
            redundancy: 0,
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
            _ if self.redundancy > 0 && sets > 1 => "Distributed-Disperse",
            _ if self.redundancy > 0 => "Disperse",
            (true, false) => "Replicate",
            (true, true) => "Distributed-Replicate",
        }
    }

    /// Whether its sets are dispersed (erasure-coded) rather than copies.
    pub fn dispersed(&self) -> bool {
        self.redundancy > 0
    }
    /// Whether brick `i` is an arbiter.
    pub fn is_arbiter(&self, i: usize) -> bool {
        self.arbiter > 0 && self.replica > 1 && i % self.replica == self.replica - 1
    }
    pub fn brick_count_line(&self) -> String {
        if self.dispersed() {
            format!(
                "{} x ({} + {}) = {}",
                self.bricks.len() / self.replica,
                self.replica - self.redundancy,
                self.redundancy,
                self.bricks.len()
            )
        } else if self.arbiter > 0 && self.replica > 1 {
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
    /// The pool's own options (`volume set all KEY VALUE`,
    /// `options::POOL`), validated already.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
    /// The volumes' snapshots, by name (`snapshot create`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub snapshots: BTreeMap<String, Snapshot>,
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
    fn a_dispersed_volume_grows_by_whole_sets_and_keeps_its_bricks_in_place() {
        let b = |s: &str| Brick::parse(s).unwrap();
        let set = |from: usize| -> Vec<Brick> {
            (from..from + 6).map(|i| b(&format!("h:/{i}"))).collect()
        };
        let mut v = Volume::sample("e");
        (v.replica, v.redundancy, v.bricks) = (6, 2, set(0));
        let before = v.clone();
        assert!(v.add_bricks(6, &set(6)[..3]).is_err(), "half a set");
        let err = v.add_bricks(8, &set(6)).unwrap_err().to_string();
        assert!(err.contains("disperse count"), "{err}");
        assert!(v.lower_replica(5, &[b("h:/0")]).is_err());
        assert_eq!(v, before, "refusals change nothing");
        // A brick replaced keeps its place in its set (its fragment is
        // rebuilt by heal).
        v.replace_brick(&b("h:/1"), &b("g:/1")).unwrap();
        assert_eq!(v.bricks[1], b("g:/1"));
        v.reset_brick(&b("h:/2"), true).unwrap();
        v.add_bricks(6, &set(6)).unwrap();
        assert_eq!(
            (v.bricks.len(), v.type_name()),
            (12, "Distributed-Disperse")
        );
        assert_eq!(v.brick_count_line(), "2 x (4 + 2) = 12");
    }

    #[test]
    fn each_brick_of_a_host_gets_a_port_of_its_own() {
        let mut st = ClusterState::default();
        let mut v = Volume::sample("a");
        v.bricks[0].port = Some(crate::BRICK_PORT_BASE);
        st.volumes.insert("a".into(), std::sync::Arc::new(v));
        let mut new: Vec<Brick> = ["h:/c", "g:/c", "h:/d"]
            .iter()
            .map(|b| Brick::parse(b).unwrap())
            .collect();
        new[2].port = Some(30000);
        st.assign_ports(&mut new);
        let base = crate::BRICK_PORT_BASE;
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
