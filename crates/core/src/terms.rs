//! The terms clients and bricks share about caching: how long a client may
//! cache what a brick told it (a lease, `features/leases`), how long a
//! brick waits for a client to drop it before disconnecting it, and whether
//! a file opened for writing is claimed for its writer (so that its close
//! need not wait). Both sides read them from the same volume options.

use crate::options::{Kind, Spec};
use crate::Options;
use std::time::Duration;

/// Read by every protocol client (`reconfigure`) and by the leases.
pub static PING_TIMEOUT: Spec = Spec {
    key: "network.ping-timeout",
    kind: Kind::Int(1, 1800),
    // GlusterFS's default is 42. Here a brick answers pings on the task
    // that reads its connection, apart from the disk: under full load on
    // two cores the slowest answer seen was 0.4 s (docs/protocol.md).
    default: "10",
    help: "Seconds without an answer after which a brick with requests outstanding is declared down (and a client that does not answer a brick's recall is disconnected).",
};

pub static CACHE_INVALIDATION: Spec = Spec {
    key: "features.cache-invalidation",
    kind: Kind::Bool,
    default: "on",
    help: "Bricks note which clients cache which objects and names, and recall them before another client's change is applied; clients then cache names and attributes for features.cache-invalidation-timeout seconds. Off: nothing is recalled and clients cache for 1 second.",
};

pub static CACHE_INVALIDATION_TIMEOUT: Spec = Spec {
    key: "features.cache-invalidation-timeout",
    kind: Kind::Int(1, 3600),
    default: "600",
    help: "Seconds a client may cache a name, an object's attributes or a missing name under a lease (the kernel's entry and attribute timeouts).",
};

/// Read by write-behind, and by the leases (`FLUSH_BEHIND`).
pub static WRITE_BEHIND: Spec = Spec {
    key: "performance.write-behind",
    kind: Kind::Bool,
    default: "on",
    help: "Answers writes from the mount's memory and sends them to the bricks in order, joined into large requests; an error is reported at the file's next fsync or close; fsync waits until every write has landed, and close too unless performance.flush-behind lets it return first (GlusterFS's write-behind).",
};

/// Read by the bricks' `features/worm` (which enforces it) and by
/// md-cache (which then answers no change of names ahead: a brick may
/// refuse it).
pub static WORM_FILE_LEVEL: Spec = Spec {
    key: "features.worm-file-level",
    kind: Kind::Bool,
    default: "off",
    help: "Retention of files (write once, read many), enforced by the bricks: a regular file is committed when its write permission is taken away from everyone (chmod a-w), or once it has not changed for features.auto-commit-period; a committed file refuses writes, truncation, renames, links, unlinks, attribute and xattr changes with EROFS for features.default-retention-period, and is an ordinary file again after it. Changes of names are then not answered ahead at mounts (performance.async-dirops).",
};

/// Read by write-behind (whether a close waits) and by the leases (whether
/// a file opened for writing is claimed for its opener).
pub static FLUSH_BEHIND: Spec = Spec {
    key: "performance.flush-behind",
    kind: Kind::Bool,
    default: "on",
    help: "A close of a file opened for writing returns without waiting for its writes to reach the bricks: the bricks claim the file for its writer, and another client's first read or open of it waits until those writes have landed (close-to-open holds). An error of such a write is logged, and reported by fsync only while the file is still open. Needs features.cache-invalidation; off: every close waits for its writes (GlusterFS's flush-behind).",
};

/// The terms on which a brick grants leases now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terms {
    /// How long a client may cache under a lease (None: no leases).
    pub lease: Option<Duration>,
    /// How long a recall waits for a client before disconnecting it.
    pub recall_timeout: Duration,
    /// Whether a file opened for writing is claimed for its opener, whose
    /// close then does not wait for its writes (`FLUSH_BEHIND`, only with
    /// leases).
    pub claims: bool,
}

impl Terms {
    pub fn from_options(o: &Options) -> Terms {
        let lease = CACHE_INVALIDATION
            .bool(o)
            .then(|| Duration::from_secs(CACHE_INVALIDATION_TIMEOUT.int(o).max(1) as u64));
        Terms {
            lease,
            recall_timeout: Duration::from_secs(PING_TIMEOUT.int(o).max(1) as u64),
            claims: lease.is_some() && WRITE_BEHIND.bool(o) && FLUSH_BEHIND.bool(o),
        }
    }
}

impl Default for Terms {
    fn default() -> Self {
        Terms::from_options(&Default::default())
    }
}

/// How long the kernel may cache names and attributes when nothing would
/// recall them.
pub const UNLEASED: Duration = Duration::from_secs(1);

/// How long a client may cache a name, attributes or xattrs under these
/// options: the lease's time when the bricks recall
/// (`features.cache-invalidation`), else `UNLEASED`.
pub fn cache_time(options: &Options) -> Duration {
    Terms::from_options(options).lease.unwrap_or(UNLEASED)
}
