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

pub static BITROT: Spec = Spec {
    key: "features.bitrot",
    kind: Kind::Bool,
    default: "off",
    help: "Scrubs the volume's bricks for bitrot: each server reads its bricks' files now and then (features.scrub-freq, at features.scrub-throttle) and checks every block against its checksum (storage.checksums, turned on with it); a damaged copy is rewritten from the others. `volume bitrot V scrub status` shows what was found.",
};

pub static SCRUB_THROTTLE: Spec = Spec {
    key: "features.scrub-throttle",
    kind: Kind::Enum(&["lazy", "normal", "aggressive"]),
    default: "lazy",
    help: "How fast each server's scrubber reads a volume's bricks: lazy 16 MiB/s, normal 64 MiB/s, aggressive as fast as the bricks answer (always behind the clients' requests).",
};

pub static SCRUB_FREQ: Spec = Spec {
    key: "features.scrub-freq",
    kind: Kind::Enum(&["minute", "hourly", "daily", "weekly", "biweekly", "monthly"]),
    default: "biweekly",
    help: "How often the bricks of a volume are scrubbed: the time from the end of one scrub to the start of the next (minute is for tests).",
};

pub static SCRUB: Spec = Spec {
    key: "features.scrub",
    kind: Kind::Enum(&["Active", "Inactive"]),
    default: "Active",
    help: "Inactive pauses the volume's scrubbers where they are (`volume bitrot V scrub pause`); Active resumes them (`scrub resume`).",
};
