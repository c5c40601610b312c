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
    Add(Snapshot),
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
                st.snapshots.insert(s.name.clone(), s.clone());
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
