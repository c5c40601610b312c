//! The options the replicate translator declares (its row in
//! `graph::table`). The self-heal daemon reads the last two; it heals
//! through the same replica sets.

use mortar_core::options::{Kind, Spec};

pub static READ_HASH_MODE: Spec = Spec {
    key: "cluster.read-hash-mode",
    kind: Kind::Int(0, 3),
    default: "1",
    help: "How reads choose a replica: 0 first up, 1 by gfid.",
};

pub static QUORUM_TYPE: Spec = Spec {
    key: "cluster.quorum-type",
    kind: Kind::Enum(&["none", "auto", "fixed"]),
    default: "auto",
    help: "Client quorum: changes need more than half the replicas up (auto; exactly half if it includes the first), cluster.quorum-count of them (fixed), or any (none). Without it they fail with EROFS.",
};

pub static QUORUM_COUNT: Spec = Spec {
    key: "cluster.quorum-count",
    kind: Kind::Int(1, 64),
    default: "1",
    help: "Replicas needed when cluster.quorum-type is fixed.",
};

pub static SELF_HEAL_DAEMON: Spec = Spec {
    key: "cluster.self-heal-daemon",
    kind: Kind::Bool,
    default: "on",
    help: "Heal what the bricks' heal index names, in the background, on every server with bricks of the volume.",
};

pub static FAVORITE_CHILD_POLICY: Spec = Spec {
    key: "cluster.favorite-child-policy",
    kind: Kind::Enum(&["none", "size", "mtime", "ctime", "majority"]),
    default: "none",
    help: "How split-brain is resolved automatically.",
};

pub static OPTIONS: &[&Spec] = &[
    &READ_HASH_MODE,
    &QUORUM_TYPE,
    &QUORUM_COUNT,
    &SELF_HEAL_DAEMON,
    &FAVORITE_CHILD_POLICY,
];
