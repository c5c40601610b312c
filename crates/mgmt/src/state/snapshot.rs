//! A snapshot of a volume on record (`snapshot create`): what it was
//! taken of, when, and where each brick's copy is (`storage::snapshot`:
//! under the brick, `.mortar/snaps/NAME`).

use super::Brick;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Snapshot {
    /// Unique in the pool.
    pub name: String,
    pub id: String,
    /// The volume it was taken of, and that volume's id then.
    pub volume: String,
    pub volume_id: String,
    /// Unix seconds.
    pub created: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The volume's bricks when it was taken, in the volume's order; each
    /// brick's copy is beside it.
    pub bricks: Vec<Brick>,
    /// How each brick's copy was made ("btrfs-subvolume", "reflink"), in
    /// the same order.
    pub mechanisms: Vec<String>,
    /// The volume's shape and options when it was taken (what a clone
    /// of it is made with).
    #[serde(default)]
    pub replica: usize,
    #[serde(default)]
    pub arbiter: usize,
    #[serde(default)]
    pub redundancy: usize,
    #[serde(default)]
    pub options: std::collections::BTreeMap<String, String>,
    /// How long the volume's changes were held back while it was taken
    /// (milliseconds): from the first brick's barrier up to the last one's
    /// down.
    pub pause_ms: u64,
}

impl Snapshot {
    /// Where brick `b`'s writable copy goes in clone `clone` (a volume):
    /// beside it, `BRICK-CLONE`.
    pub fn clone_path(b: &Brick, clone: &str) -> String {
        format!("{}-{clone}", b.path.trim_end_matches('/'))
    }

    /// Where brick `b`'s copy is.
    pub fn path_on(&self, b: &Brick) -> String {
        format!(
            "{}/{}/{}",
            b.path.trim_end_matches('/'),
            mortar_storage::snapshot::SNAPS_REL,
            self.name
        )
    }
}
