//! Changes of the pool's snapshots on record (`snapshot create|delete`).

use crate::error::Error;
use crate::state::{ClusterState, Snapshot};
use serde::{Deserialize, Serialize};

/// Snapshots a volume may have (GlusterFS's `snap-max-hard-limit`
/// default).
pub const MAX_PER_VOLUME: usize = 256;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotChange {
    /// A snapshot taken on every brick of its volume (its name is new).
    Add(Box<Snapshot>),
    /// A snapshot whose copies were removed from every brick.
    Remove { name: String },
}

impl SnapshotChange {
    pub(super) fn apply(&self, st: &mut ClusterState) -> Result<(), Error> {
        match self {
            SnapshotChange::Add(s) => {
                if st.snapshots.contains_key(&s.name) {
                    return Err(format!("Snapshot {} already exists", s.name).into());
                }
                if !st.volumes.contains_key(&s.volume) {
                    return Err(Error::not_found(format!(
                        "Volume {} does not exist",
                        s.volume
                    )));
                }
                let taken = st.snapshots.values().filter(|o| o.volume == s.volume);
                if taken.count() >= MAX_PER_VOLUME {
                    return Err(format!(
                        "Volume {} has {MAX_PER_VOLUME} snapshots, its limit: delete one first",
                        s.volume
                    )
                    .into());
                }
                st.snapshots.insert(s.name.clone(), (**s).clone());
            }
            SnapshotChange::Remove { name } => {
                if st.snapshots.remove(name).is_none() {
                    return Err(Error::not_found(format!("Snapshot {name} does not exist")));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Volume;
    use std::sync::Arc;

    fn snap(name: &str, volume: &str) -> SnapshotChange {
        SnapshotChange::Add(Box::new(Snapshot {
            name: name.into(),
            id: format!("id-{name}"),
            volume: volume.into(),
            volume_id: "vid".into(),
            created: 1,
            description: String::new(),
            bricks: Vec::new(),
            replica: 3,
            arbiter: 0,
            redundancy: 0,
            options: Default::default(),
            mechanisms: Vec::new(),
            pause_ms: 0,
        }))
    }

    #[test]
    fn names_are_unique_volumes_exist_and_each_has_a_limit() {
        let mut st = ClusterState::default();
        st.volumes.insert("v".into(), Arc::new(Volume::sample("v")));
        snap("s1", "v").apply(&mut st).unwrap();
        let e = snap("s1", "v").apply(&mut st).unwrap_err();
        assert!(e.message.contains("already exists"), "{}", e.message);
        assert!(snap("s2", "nov").apply(&mut st).is_err());
        for i in 2..=MAX_PER_VOLUME {
            snap(&format!("s{i}"), "v").apply(&mut st).unwrap();
        }
        let e = snap("one-more", "v").apply(&mut st).unwrap_err();
        assert!(e.message.contains("its limit"), "{}", e.message);
        let rm = |n: &str| SnapshotChange::Remove { name: n.into() };
        rm("s1").apply(&mut st).unwrap();
        assert!(rm("s1").apply(&mut st).is_err());
        snap("one-more", "v").apply(&mut st).unwrap();
    }
}
