//! The options of distribute's placement: read by each mount's
//! distribute translator (`cluster.min-free-disk`) and by the rebalance,
//! which runs the same translator's graph.

use mortar_core::options::{Kind, Spec};

pub static MIN_FREE_DISK: Spec = Spec {
    key: "cluster.min-free-disk",
    kind: Kind::Percent,
    default: "10%",
    help: "A new file whose name hashes to a replica set with less free space than this share of its size goes to the set of its directory with the most (a pointer is left on its own); 0% turns this off.",
};

pub static REBAL_THROTTLE: Spec = Spec {
    key: "cluster.rebal-throttle",
    kind: Kind::Enum(&["lazy", "normal", "aggressive"]),
    default: "normal",
    help: "How hard a rebalance works: lazy moves one file at a time and rests as long as each took; normal moves two at a time; aggressive four.",
};

pub static WEIGHTED_REBALANCE: Spec = Spec {
    key: "cluster.weighted-rebalance",
    kind: Kind::Bool,
    default: "on",
    help: "Whether a rebalance or fix-layout gives each replica set a share of every directory's hash space in proportion to its size (the total size of its smallest brick's file system); off: equal shares. New directories take their parent's shares.",
};
