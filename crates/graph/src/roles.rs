//! Options of the management daemon's roles: declared in the translator
//! table beside the translators' (rows of side `Server`), read by the
//! daemon alone.

use mortar_core::options::{Kind, Spec};

pub static SERVER_QUORUM_TYPE: Spec = Spec {
    key: "cluster.server-quorum-type",
    kind: Kind::Enum(&["none", "server"]),
    default: "none",
    help: "server: the bricks of this volume on a server that reaches fewer than cluster.server-quorum-ratio percent of the pool (itself included) stop serving, and start again once it does, so that a cut-off server takes no writes that diverge.",
};

pub static SERVER_QUORUM_RATIO: Spec = Spec {
    key: "cluster.server-quorum-ratio",
    kind: Kind::Int(1, 100),
    default: "51",
    help: "Percentage of the pool's servers a server must reach for its bricks to serve, under cluster.server-quorum-type server.",
};
