//! The translator table: every kind of translator mortar has, where it
//! sits in a stack, the option that turns it on, the options it reads, and
//! how it is built. `mgmt::volgen` stacks a volume's client graph from the
//! rows, `graph::build` builds each translator through its row's factory,
//! and the option registry (`mgmt::options`) is the union of the rows'
//! options. Adding a translator is its file plus one row here.

use super::build::{BuildCtx, Factory};
use super::sets;
use mortar_core::desc::XlDesc;
use mortar_core::options::Spec;
use mortar_core::{Child, Xlator};
use mortar_xlators::cluster::{distribute::Distribute, replicate::Replicate};
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
    pub brick: Option<mortar_brick::BrickFactory>,
    pub about: &'static str,
}

pub static TABLE: &[Row] = &[
    Row {
        kind: "protocol/client",
        side: Side::Client,
        place: Place::Brick,
        enabled_by: None,
        options: &[&mortar_core::terms::PING_TIMEOUT],
        build: Some(protocol_client),
        brick: None,
        about: "one connection to one brick; requests in flight in any number",
    },
    Row {
        kind: "cluster/replicate",
        side: Side::Client,
        place: Place::Set,
        enabled_by: None,
        options: mortar_xlators::cluster::replicate::options::OPTIONS,
        build: Some(replicate),
        brick: None,
        about: "copies every change to each brick of a replica set; reads from one good copy",
    },
    Row {
        kind: "cluster/disperse",
        side: Side::Client,
        place: Place::Set,
        enabled_by: None,
        options: &[],
        build: Some(disperse),
        brick: None,
        about: "erasure-codes each file over a disperse set's bricks: K data fragments and R of parity",
    },
    Row {
        kind: "cluster/distribute",
        side: Side::Client,
        place: Place::Volume,
        enabled_by: None,
        // Read by the rebalance, which runs this translator's graph.
        options: &[
            &mortar_xlators::cluster::distribute::options::MIN_FREE_DISK,
            &mortar_xlators::cluster::distribute::options::REBAL_THROTTLE,
            &mortar_xlators::cluster::distribute::options::WEIGHTED_REBALANCE,
        ],
        build: Some(distribute),
        brick: None,
        about: "places files on replica sets by the hash of their names",
    },
    Row {
        kind: "performance/md-cache",
        side: Side::Client,
        place: Place::Above,
        enabled_by: Some(&mortar_xlators::performance::md_cache::STAT_PREFETCH),
        options: &[&mortar_xlators::performance::md_cache::ASYNC_DIROPS],
        build: Some(md_cache),
        brick: None,
        about: "objects' xattrs (missing ones too) kept at the mount under the bricks' leases",
    },
    Row {
        kind: "performance/io-cache",
        side: Side::Client,
        place: Place::Above,
        enabled_by: Some(&mortar_xlators::performance::io_cache::IO_CACHE),
        options: &[&mortar_xlators::performance::io_cache::CACHE_SIZE],
        build: Some(io_cache),
        brick: None,
        about: "small files' data this mount wrote or read, kept at the mount under the bricks' leases",
    },
    Row {
        kind: "performance/write-behind",
        side: Side::Client,
        place: Place::Above,
        enabled_by: Some(&mortar_xlators::performance::write_behind::WRITE_BEHIND),
        options: &[
            &mortar_xlators::performance::write_behind::WINDOW_SIZE,
            &mortar_xlators::performance::write_behind::FLUSH_BEHIND,
        ],
        build: Some(write_behind),
        brick: None,
        about: "writes answered from memory and sent behind, in order, joined; errors at the next fsync or close",
    },
    Row {
        kind: "features/trash",
        side: Side::Client,
        place: Place::Above,
        enabled_by: Some(&mortar_xlators::features::trash::TRASH),
        // The sweep (mgmt) reads the last two.
        options: &[
            &mortar_xlators::features::trash::MAX_FILESIZE,
            &mortar_xlators::features::trash::ELIMINATE_PATH,
            &mortar_xlators::features::trash::sweep::MAX_AGE,
            &mortar_xlators::features::trash::sweep::MAX_SIZE,
        ],
        build: Some(trash),
        brick: None,
        about: "files removed or truncated through the mounts kept in /.trashcan at the path they had",
    },
    Row {
        kind: "features/read-only",
        side: Side::Client,
        place: Place::Above,
        enabled_by: Some(&mortar_xlators::features::read_only::READ_ONLY),
        options: &[],
        build: Some(read_only),
        brick: None,
        about: "refuses every change with EROFS",
    },
    Row {
        kind: "debug/io-stats",
        side: Side::Client,
        place: Place::Above,
        enabled_by: Some(&mortar_xlators::debug::io_stats::COUNT_FOP_HITS),
        options: &[],
        build: Some(io_stats),
        brick: None,
        about: "counts fops, errors and latency",
    },
    Row {
        kind: "storage/posix",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[
            &mortar_storage::posix::health::HEALTH_CHECK_INTERVAL,
            &mortar_storage::posix::health::HEALTH_CHECK_TIMEOUT,
            &mortar_storage::posix::STRICT_O_DIRECT,
            &mortar_storage::posix::room::RESERVE,
            &mortar_storage::posix::sums::CHECKSUMS,
        ],
        build: None,
        brick: Some(mortar_brick::posix::build),
        about: "the brick's directory: files at their own path, a gfid index beside them",
    },
    Row {
        kind: "features/barrier",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[&mortar_brick::barrier::BARRIER_TIMEOUT],
        build: None,
        brick: Some(mortar_brick::barrier::build),
        about: "changes held back while a snapshot of the brick is taken (snapshot create), and its snapshots",
    },
    Row {
        kind: "performance/priority",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[&mortar_brick::priority::LEAST_PRIORITY],
        build: None,
        brick: Some(mortar_brick::priority::build),
        about: "self-heal's and rebalance's reads and writes give way to the clients' (GlusterFS io-threads' least priority)",
    },
    Row {
        kind: "features/arbiter",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[],
        build: None,
        brick: Some(mortar_brick::arbiter::build),
        about: "on an arbiter brick: names and metadata, no file data",
    },
    Row {
        kind: "features/index",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[],
        build: None,
        brick: Some(mortar_brick::index::build),
        about: "change sessions, blame and the heal index",
    },
    Row {
        kind: "features/locks",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[&mortar_brick::locks::REVOCATION_SECS],
        build: None,
        brick: Some(mortar_brick::locks::build),
        about: "object locks for replicate's transactions, with contention notices and revocation",
    },
    Row {
        kind: "features/hold",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[],
        build: None,
        brick: Some(mortar_brick::hold::build),
        about: "files a rebalance is moving: changes from others wait (ESTALE) until they are where they go",
    },
    Row {
        kind: "features/leases",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        // The client reads them too: how long the kernel may cache.
        options: &[
            &mortar_core::terms::CACHE_INVALIDATION,
            &mortar_core::terms::CACHE_INVALIDATION_TIMEOUT,
        ],
        build: None,
        brick: Some(mortar_brick::leases::build),
        about: "which clients cache which objects and names; recalled before another client's change",
    },
    Row {
        kind: "features/worm",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        // md-cache reads the first too: no change of names answered ahead.
        options: &[
            &mortar_core::terms::WORM_FILE_LEVEL,
            &mortar_brick::worm::RETENTION_PERIOD,
            &mortar_brick::worm::AUTO_COMMIT_PERIOD,
            &mortar_brick::worm::RETENTION_MODE,
            &mortar_brick::worm::FILES_DELETABLE,
        ],
        build: None,
        brick: Some(mortar_brick::worm::build),
        about: "retention: a committed file refuses every change with EROFS until its retention ends (features.worm-file-level)",
    },
    Row {
        kind: "debug/profile",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[&mortar_brick::profile::LATENCY_MEASUREMENT],
        build: None,
        brick: Some(mortar_brick::profile::build),
        about: "every fop counted (metrics, volume top) and, while profiling, timed (volume profile)",
    },
    Row {
        kind: "protocol/server",
        side: Side::Brick,
        place: Place::Brick,
        enabled_by: None,
        options: &[
            &mortar_protocol::auth::AUTH_ALLOW,
            &mortar_protocol::auth::AUTH_REJECT,
            &mortar_protocol::auth::SERVER_SSL,
            &mortar_protocol::auth::AUTH_SSL_ALLOW,
            &mortar_protocol::auth::ROOT_SQUASH,
            &mortar_protocol::auth::ALL_SQUASH,
            &mortar_protocol::auth::ANON_UID,
            &mortar_protocol::auth::ANON_GID,
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
            &crate::roles::SERVER_QUORUM_TYPE,
            &crate::roles::SERVER_QUORUM_RATIO,
        ],
        build: None,
        brick: None,
        about: "a server cut off from the pool's majority stops its bricks",
    },
    Row {
        kind: "mgmt/bitrot",
        side: Side::Server,
        place: Place::Brick,
        enabled_by: None,
        options: &[
            &crate::roles::BITROT,
            &crate::roles::SCRUB_THROTTLE,
            &crate::roles::SCRUB_FREQ,
            &crate::roles::SCRUB,
        ],
        build: None,
        brick: None,
        about: "each server scrubs its bricks of the volume for bitrot and rewrites damaged copies from the others (volume bitrot)",
    },
    Row {
        kind: "mgmt/nfs-server",
        side: Side::Server,
        place: Place::Volume,
        enabled_by: None,
        options: &[
            &mortar_nfs::options::NFS_DISABLE,
            &mortar_nfs::options::NFS_VOLUME_ACCESS,
            &mortar_nfs::options::NFS_EXPORT_VOLUMES,
            &mortar_nfs::options::NFS_EXPORT_DIRS,
            &mortar_nfs::options::NFS_EXPORT_DIR,
            &mortar_nfs::options::NFS_WRITE_BEHIND,
        ],
        build: None,
        brick: None,
        about: "each server of the pool serves the volumes that turn it on over NFSv3 (mortar nfs-server)",
    },
];

pub fn row(kind: &str) -> Option<&'static Row> {
    TABLE.iter().find(|r| r.kind == kind)
}

/// How a client builds the translator `d` describes.
pub fn factory(d: &XlDesc) -> anyhow::Result<Factory> {
    let row = row(&d.kind)
        .ok_or_else(|| anyhow::anyhow!("{}: unknown translator kind {}", d.name, d.kind))?;
    row.build
        .ok_or_else(|| anyhow::anyhow!("{}: {} is not a client translator", d.name, d.kind))
}

/// The brick's translators, bottom to top, and how each is built: what
/// the brick process stacks (`brick::Stack::build`).
pub fn brick_layers() -> impl Iterator<Item = (&'static str, mortar_brick::BrickFactory)> {
    TABLE.iter().filter_map(|r| Some((r.kind, r.brick?)))
}

/// Every option any translator declares.
pub fn all_options() -> impl Iterator<Item = &'static Spec> {
    TABLE
        .iter()
        .flat_map(|r| r.enabled_by.into_iter().chain(r.options.iter().copied()))
}

fn protocol_client(cx: &BuildCtx, _children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    (cx.env.connect)(cx.desc, cx.link.clone())
}

fn replicate(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let arbiter = sets::arbiter_of(cx.desc.param("arbiter"), children.len());
    Ok(Arc::new(
        Replicate::new(cx.desc.name.clone(), children).with_arbiter(arbiter),
    ))
}

/// A disperse set: `data` (K) and `redundancy` (R) as volgen writes them.
fn disperse(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let num = |key: &str| -> anyhow::Result<usize> {
        cx.desc
            .param(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("{}: a disperse set needs its {key}", cx.desc.name))
    };
    let set = Replicate::new(cx.desc.name.clone(), children)
        .with_disperse(num("data")?, num("redundancy")?)
        .map_err(anyhow::Error::msg)?;
    Ok(Arc::new(set))
}

fn distribute(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    if children.is_empty() {
        anyhow::bail!("{}: distribute needs children", cx.desc.name);
    }
    // Stable set ids and the layout generation, as volgen writes them.
    let below = &cx.desc.children;
    let ids = sets::set_ids(below.iter().map(|d| (d.name.as_str(), d.param("set-id"))))
        .map_err(|e| anyhow::anyhow!("{}: {e}", cx.desc.name))?;
    let commit = match cx.desc.param("layout-commit") {
        Some(v) => v
            .parse()
            .map_err(|_| anyhow::anyhow!("{}: bad layout-commit {v:?}", cx.desc.name))?,
        None => 1,
    };
    let draining = below
        .iter()
        .map(|d| sets::is_on(d.param("draining")))
        .collect();
    Ok(Arc::new(
        Distribute::with_sets(cx.desc.name.clone(), children, ids, commit).with_draining(draining),
    ))
}

/// The one child a translator stacked above the volume takes.
fn only_child(cx: &BuildCtx, mut children: Vec<Child>, what: &str) -> anyhow::Result<Child> {
    if children.len() != 1 {
        anyhow::bail!("{}: {what} takes one child", cx.desc.name);
    }
    Ok(children.remove(0))
}

fn read_only(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let child = only_child(cx, children, "read-only")?;
    let name = cx.desc.name.clone();
    Ok(Arc::new(
        mortar_xlators::features::read_only::ReadOnly::new(name, child),
    ))
}

fn trash(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let child = only_child(cx, children, "trash")?;
    let name = cx.desc.name.clone();
    Ok(Arc::new(mortar_xlators::features::trash::Trash::new(
        name, child,
    )))
}

fn md_cache(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let child = only_child(cx, children, "md-cache")?;
    let name = cx.desc.name.clone();
    Ok(mortar_xlators::performance::md_cache::MdCache::new(
        name, child,
    ))
}

fn io_cache(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let child = only_child(cx, children, "io-cache")?;
    let name = cx.desc.name.clone();
    Ok(Arc::new(
        mortar_xlators::performance::io_cache::IoCache::new(name, child),
    ))
}

fn write_behind(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let child = only_child(cx, children, "write-behind")?;
    let name = cx.desc.name.clone();
    Ok(mortar_xlators::performance::write_behind::WriteBehind::new(
        name, child,
    ))
}

fn io_stats(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let child = only_child(cx, children, "io-stats")?;
    let name = cx.desc.name.clone();
    Ok(Arc::new(mortar_xlators::debug::io_stats::IoStats::new(
        name, child,
    )))
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

    #[test]
    fn the_stack_follows_the_table_and_the_arbiter_only_where_it_belongs() {
        let d = tempfile::tempdir().unwrap();
        let posix = Arc::new(mortar_storage::posix::Posix::open(d.path()).unwrap());
        let env = |arbiter| mortar_brick::BrickEnv {
            posix: posix.clone(),
            arbiter,
        };
        assert_eq!(
            mortar_brick::Stack::build(&env(false), brick_layers())
                .unwrap()
                .kinds(),
            vec![
                "storage/posix",
                "features/barrier",
                "performance/priority",
                "features/index",
                "features/locks",
                "features/hold",
                "features/leases",
                "features/worm",
                "debug/profile"
            ]
        );
        assert_eq!(
            mortar_brick::Stack::build(&env(true), brick_layers())
                .unwrap()
                .kinds(),
            vec![
                "storage/posix",
                "features/barrier",
                "performance/priority",
                "features/arbiter",
                "features/index",
                "features/locks",
                "features/hold",
                "features/leases",
                "features/worm",
                "debug/profile"
            ]
        );
    }
}
