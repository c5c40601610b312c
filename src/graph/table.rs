//! The translator table: every kind of translator mortar has, where it
//! sits in a stack, the option that turns it on, the options it reads, and
//! how it is built. `mgmt::volgen` stacks a volume's client graph from the
//! rows, `graph::build` builds each translator through its row's factory,
//! and the option registry (`mgmt::options`) is the union of the rows'
//! options. Adding a translator is its file plus one row here.

use super::build::BuildCtx;
use crate::core::options::Spec;
use crate::core::{Child, Xlator};
use std::sync::Arc;

/// Which process runs a translator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Client,
    Brick,
    /// The management daemon: a role with options, not a translator.
    Server,
}

/// Where a client translator sits, bottom to top.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    /// One per brick: the bottom of the stack.
    Brick,
    /// One over each replica set's bricks (volumes with replica > 1).
    Set,
    /// One over all replica sets.
    Volume,
    /// One over the whole volume, stacked in table order (performance
    /// layers); present when its `enabled_by` option is on.
    Above,
}

pub type Factory = fn(&BuildCtx, Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>>;

pub struct Row {
    pub kind: &'static str,
    pub side: Side,
    pub place: Place,
    /// The volume option that turns it on (None: always there).
    pub enabled_by: Option<&'static Spec>,
    /// The volume options it reads (in `reconfigure`).
    pub options: &'static [&'static Spec],
    /// How a client builds it (client rows).
    pub build: Option<Factory>,
    /// How a brick builds it (brick rows, stacked in table order).
    pub brick: Option<crate::brick::BrickFactory>,
    pub about: &'static str,
}

pub static TABLE: &[Row] = &[
    Row {
        kind: "protocol/client",
        side: Side::Client,
        place: Place::Brick,
        enabled_by: None,
        options: &[&crate::protocol::client::PING_TIMEOUT],
        build: Some(super::build::protocol_client),
        brick: None,
        about: "one connection to one brick; requests in flight in any number",
    },
    Row {
        kind: "cluster/replicate",
        side: Side::Client,
        place: Place::Set,
        enabled_by: None,
        options: crate::cluster::replicate::options::OPTIONS,
        build: Some(super::build::replicate),
        brick: None,
        about: "copies every change to each brick of a replica set; reads from one good copy",
    },
    Row {
        kind: "cluster/distribute",
        side: Side::Client,
        place: Place::Volume,
        enabled_by: None,
        // Read by the rebalance, which runs this translator's graph.
        options: &[
            &crate::cluster::distribute::MIN_FREE_DISK,
            &crate::rebalance::REBAL_THROTTLE,
            &crate::rebalance::WEIGHTED_REBALANCE,
        ],
        build: Some(super::build::distribute),
        brick: None,
        about: "places files on replica sets by the hash of their names",
    },
    Row {
        kind: "performance/md-cache",
        side: Side::Client,
        place: Place::Above,
        enabled_by: Some(&crate::performance::md_cache::STAT_PREFETCH),
        options: &[&crate::performance::md_cache::ASYNC_DIROPS],
        build: Some(super::build::md_cache),
        brick: None,
        about: "objects' xattrs (missing ones too) kept at the mount under the bricks' leases",
    },
    Row {
        kind: "performance/io-cache",
        side: Side::Client,
        place: Place::Above,
        enabled_by: Some(&crate::performance::io_cache::IO_CACHE),
        options: &[&crate::performance::io_cache::CACHE_SIZE],
        build: Some(super::build::io_cache),
        brick: None,
        about: "small files' data this mount wrote or read, kept at the mount under the bricks' leases",
    },
    Row {
        kind: "performance/write-behind",
        side: Side::Client,
        place: Place::Above,
        enabled_by: Some(&crate::performance::write_behind::WRITE_BEHIND),
        options: &[&crate::performance::write_behind::WINDOW_SIZE],
        build: Some(super::build::write_behind),
        brick: None,
        about: "writes answered from memory and sent behind, in order, joined; errors at the next fsync or close",
    },
    Row {
        kind: "features/read-only",
        side: Side::Client,
        place: Place::Above,
        enabled_by: Some(&crate::features::read_only::READ_ONLY),
        options: &[],
        build: Some(super::build::read_only),
        brick: None,
        about: "refuses every change with EROFS",
    },
    Row {
        kind: "debug/io-stats",
        side: Side::Client,
        place: Place::Above,
        enabled_by: Some(&crate::debug::io_stats::COUNT_FOP_HITS),
        options: &[],
        build: Some(super::build::io_stats),
        brick: None,
        about: "counts fops, errors and latency",
    },
    Row {
        kind: "storage/posix",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[
            &crate::storage::health::HEALTH_CHECK_INTERVAL,
            &crate::storage::posix::STRICT_O_DIRECT,
        ],
        build: None,
        brick: Some(crate::brick::posix::build),
        about: "the brick's directory: files at their own path, a gfid index beside them",
    },
    Row {
        kind: "features/arbiter",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[],
        build: None,
        brick: Some(crate::brick::arbiter::build),
        about: "on an arbiter brick: names and metadata, no file data",
    },
    Row {
        kind: "features/index",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[],
        build: None,
        brick: Some(crate::brick::index::build),
        about: "change sessions, blame and the heal index",
    },
    Row {
        kind: "features/locks",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[&crate::storage::locks::REVOCATION_SECS],
        build: None,
        brick: Some(crate::brick::locks::build),
        about: "object locks for replicate's transactions, with contention notices and revocation",
    },
    Row {
        kind: "features/hold",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[],
        build: None,
        brick: Some(crate::brick::hold::build),
        about: "files a rebalance is moving: changes from others wait (ESTALE) until they are where they go",
    },
    Row {
        kind: "features/leases",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        // The client reads them too: how long the kernel may cache.
        options: &[
            &crate::brick::leases::CACHE_INVALIDATION,
            &crate::brick::leases::CACHE_INVALIDATION_TIMEOUT,
        ],
        build: None,
        brick: Some(crate::brick::leases::build),
        about: "which clients cache which objects and names; recalled before another client's change",
    },
    Row {
        kind: "debug/profile",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[&crate::debug::profile::LATENCY_MEASUREMENT],
        build: None,
        brick: Some(crate::debug::profile::build),
        about: "every fop counted (metrics, volume top) and, while profiling, timed (volume profile)",
    },
    Row {
        kind: "protocol/server",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[
            &crate::protocol::auth::AUTH_ALLOW,
            &crate::protocol::auth::AUTH_REJECT,
            &crate::protocol::auth::SERVER_SSL,
            &crate::protocol::auth::AUTH_SSL_ALLOW,
            &crate::protocol::auth::ROOT_SQUASH,
            &crate::protocol::auth::ALL_SQUASH,
            &crate::protocol::auth::ANON_UID,
            &crate::protocol::auth::ANON_GID,
        ],
        build: None,
        brick: None,
        about: "the brick's server: which clients it serves (by address and credential), whether in the clear, and who their requests run as",
    },
    Row {
        kind: "mgmt/server-quorum",
        side: Side::Server,
        place: Place::Brick,
        enabled_by: None,
        options: &[
            &crate::mgmt::daemon::SERVER_QUORUM_TYPE,
            &crate::mgmt::daemon::SERVER_QUORUM_RATIO,
        ],
        build: None,
        brick: None,
        about: "a server cut off from the pool's majority stops its bricks",
    },
];

pub fn row(kind: &str) -> Option<&'static Row> {
    TABLE.iter().find(|r| r.kind == kind)
}

/// Every option any translator declares.
pub fn all_options() -> impl Iterator<Item = &'static Spec> {
    TABLE
        .iter()
        .flat_map(|r| r.enabled_by.into_iter().chain(r.options.iter().copied()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_is_declared_once_and_valid_by_default() {
        let mut keys: Vec<&str> = all_options().map(|s| s.key).collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "an option declared twice");
        for s in all_options() {
            assert_eq!(s.validate(s.default).as_deref(), Ok(s.default), "{}", s.key);
        }
    }

    #[test]
    fn every_row_can_be_built_on_its_side() {
        for r in TABLE {
            assert_eq!(r.build.is_some(), r.side == Side::Client, "{}", r.kind);
            assert!(r.brick.is_none() || r.side == Side::Brick, "{}", r.kind);
            // (Server rows are roles with options: the daemon reads them;
            // so is the brick's own server, `protocol/server`.)
        }
    }
}
