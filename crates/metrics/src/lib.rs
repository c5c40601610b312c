//! Prometheus metrics of this process: what passes through it (fops,
//! their latency, errors and bytes), what it is connected to, and what it
//! has to do (heal backlog, rebalance). One set of metrics per process,
//! kept in a static; the code that sees something counts it here, and
//! `serve` shows the metrics of this process's role over HTTP. Figures
//! that are cheaper to read than to keep (memory, disk space, which bricks
//! are up) are read when scraped (`on_scrape`). docs/operations.md lists
//! them with the alerts that matter.

pub mod serve;

use mortar_core::{FsResult, Reply};
use prometheus_client::encoding::EncodeLabelSet;
pub use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

/// Which process the metrics are of: what it registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Brick,
    Client,
    Daemon,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Brick => "brick",
            Role::Client => "client",
            Role::Daemon => "daemon",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FopLabels {
    pub fop: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub fop: &'static str,
    pub errno: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BrickLabels {
    pub volume: String,
    pub brick: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VolumeLabels {
    pub volume: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub volume: String,
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    pub cache: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabels {
    pub state: &'static str,
}

/// A brick's disk figure, by the brick's labels (`volume`, `brick`).
pub type DiskFamily = Family<Vec<(String, String)>, Gauge>;

type HistogramFamily = Family<FopLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 20 µs to about 10 s, doubling.
    Histogram::new(exponential_buckets(20e-6, 2.0, 20))
}

/// Every metric mortar has; a process registers those of its role.
pub struct Metrics {
    pub fops: Family<FopLabels, Counter>,
    pub fop_errors: Family<ErrorLabels, Counter>,
    pub fop_seconds: HistogramFamily,
    pub read_bytes: Counter,
    pub written_bytes: Counter,
    /// Brick: clients connected to it.
    pub clients: Gauge,
    /// Client: its connection to each brick; daemon: each local brick
    /// process (1 up, 0 down).
    pub brick_up: Family<BrickLabels, Gauge>,
    /// Client: whether it reads around the brick because it answers late
    /// (a disperse set's slow brick: 1).
    pub brick_slow: Family<BrickLabels, Gauge>,
    /// Brick: its file system's size and what is free, labelled with the
    /// brick where a process serves several (none where it serves one:
    /// its registry names it).
    pub disk_bytes: DiskFamily,
    pub disk_free_bytes: DiskFamily,
    pub inodes: DiskFamily,
    pub inodes_free: DiskFamily,
    /// Daemon: entries in each local brick's heal index.
    pub heal_pending: Family<BrickLabels, Gauge>,
    /// Daemon: the bytes of those entries' copies on the brick that a heal
    /// would compare (recorded ranges, whole files where none).
    pub heal_pending_bytes: Family<BrickLabels, Gauge>,
    /// Daemon: objects its self-heal daemon healed, and failed to.
    pub healed: Family<VolumeLabels, Counter>,
    pub heal_failed: Family<VolumeLabels, Counter>,
    /// Daemon: bytes its self-heal daemon wrote to copies and fragments,
    /// counted as each chunk lands (a large file's heal shows progress).
    pub heal_written_bytes: Family<VolumeLabels, Counter>,
    /// Daemon: data its bitrot scrubber read and checked on this server's
    /// bricks.
    pub scrubbed_bytes: Family<VolumeLabels, Counter>,
    /// Daemon: copies its scrubber found damaged (checksums that do not
    /// match), and those it rewrote from the others.
    pub scrub_damaged: Family<VolumeLabels, Counter>,
    pub scrub_repaired: Family<VolumeLabels, Counter>,
    /// Daemon: a rebalance it runs, files by state (scanned, moved, failed,
    /// skipped).
    pub rebalance_files: Family<StateLabels, Gauge>,
    /// Daemon: the pool's servers by state (connected, disconnected), and
    /// whether this server has the pool's quorum.
    pub peers: Family<PeerLabels, Gauge>,
    pub quorum: Gauge,
    /// Client: cache answers (md-cache, io-cache) by result (hit, miss).
    pub cache: Family<CacheLabels, Counter>,
    /// Every process.
    pub resident_bytes: Gauge,
    pub up_since: Gauge<f64, AtomicU64>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    fops: Family::default(),
    fop_errors: Family::default(),
    fop_seconds: Family::new_with_constructor(latency_histogram),
    read_bytes: Counter::default(),
    written_bytes: Counter::default(),
    clients: Gauge::default(),
    brick_up: Family::default(),
    brick_slow: Family::default(),
    disk_bytes: Family::default(),
    disk_free_bytes: Family::default(),
    inodes: Family::default(),
    inodes_free: Family::default(),
    heal_pending: Family::default(),
    heal_pending_bytes: Family::default(),
    healed: Family::default(),
    heal_failed: Family::default(),
    heal_written_bytes: Family::default(),
    scrubbed_bytes: Family::default(),
    scrub_damaged: Family::default(),
    scrub_repaired: Family::default(),
    rebalance_files: Family::default(),
    peers: Family::default(),
    quorum: Gauge::default(),
    cache: Family::default(),
    resident_bytes: Gauge::default(),
    up_since: {
        let g = Gauge::default();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        g.set(now);
        g
    },
});

pub fn get() -> &'static Metrics {
    &METRICS
}

/// Counts one fop that ended: its latency, its error, the bytes it moved.
pub fn fop_done(fop: &'static str, started: Instant, result: &FsResult<Reply>) {
    let m = get();
    let labels = FopLabels { fop };
    m.fops.get_or_create(&labels).inc();
    m.fop_seconds
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    match result {
        Ok(Reply::Data(d)) if fop == "read" => {
            m.read_bytes.inc_by(d.len() as u64);
        }
        Ok(Reply::Written(n, _)) => {
            m.written_bytes.inc_by(*n as u64);
        }
        Ok(_) => {}
        Err(e) => {
            m.fop_errors
                .get_or_create(&ErrorLabels {
                    fop,
                    errno: errno_name(e.errno),
                })
                .inc();
        }
    }
}

/// Counts a cache's answer.
pub fn cache(cache: &'static str, hit: bool) {
    get()
        .cache
        .get_or_create(&CacheLabels {
            cache,
            result: if hit { "hit" } else { "miss" },
        })
        .inc();
}

/// The symbolic name of an errno (its number when it has none here).
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::ERANGE => "ERANGE",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENODATA => "ENODATA",
        libc::ENOTCONN => "ENOTCONN",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ESTALE => "ESTALE",
        libc::EDQUOT => "EDQUOT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOSYS => "ENOSYS",
        libc::EINTR => "EINTR",
        libc::ENXIO => "ENXIO",
        libc::ETXTBSY => "ETXTBSY",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EDEADLK => "EDEADLK",
        libc::ECONNREFUSED => "ECONNREFUSED",
        _ => return errno.to_string(),
    };
    name.to_string()
}

type Hook = Box<dyn Fn(&Metrics) + Send + Sync>;

static HOOKS: Mutex<Vec<Hook>> = Mutex::new(Vec::new());

/// Runs `f` before every scrape, to set the figures read then.
pub fn on_scrape(f: impl Fn(&Metrics) + Send + Sync + 'static) {
    HOOKS.lock().unwrap().push(Box::new(f));
}

/// The metrics of `role`, labelled with `labels` (the volume, the brick),
/// in Prometheus's text format.
pub fn render(registry: &Registry) -> String {
    let m = get();
    m.resident_bytes
        .set(mortar_process::status::memory().resident as i64);
    for hook in HOOKS.lock().unwrap().iter() {
        hook(m);
    }
    let mut out = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// The registry a process of `role` serves: its metrics, with `labels`
/// on every one.
pub fn registry(role: Role, labels: Vec<(String, String)>) -> Registry {
    let m = get();
    let mut labels: Vec<(
        std::borrow::Cow<'static, str>,
        std::borrow::Cow<'static, str>,
    )> = labels
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    labels.insert(0, ("role".into(), role.name().into()));
    let mut r = Registry::with_prefix_and_labels("mortar", labels.into_iter());
    r.register_with_unit(
        "process_resident_memory",
        "Resident memory of this process",
        Unit::Bytes,
        m.resident_bytes.clone(),
    );
    r.register(
        "process_start_time_seconds",
        "When this process started, in seconds since the epoch",
        m.up_since.clone(),
    );
    if role != Role::Daemon {
        r.register("fops", "File operations handled, by fop", m.fops.clone());
        r.register(
            "fop_errors",
            "File operations that failed, by fop and errno",
            m.fop_errors.clone(),
        );
        r.register_with_unit(
            "fop_duration",
            "Time from a file operation's arrival to its answer, by fop",
            Unit::Seconds,
            m.fop_seconds.clone(),
        );
        r.register_with_unit("read", "File data read", Unit::Bytes, m.read_bytes.clone());
        r.register_with_unit(
            "written",
            "File data written",
            Unit::Bytes,
            m.written_bytes.clone(),
        );
    }
    match role {
        Role::Brick => {
            r.register(
                "clients",
                "Clients connected to this brick",
                m.clients.clone(),
            );
            r.register_with_unit(
                "brick_disk_size",
                "Size of the brick's file system",
                Unit::Bytes,
                m.disk_bytes.clone(),
            );
            r.register_with_unit(
                "brick_disk_free",
                "Space free to the brick on its file system",
                Unit::Bytes,
                m.disk_free_bytes.clone(),
            );
            r.register(
                "brick_inodes",
                "Inodes of the brick's file system",
                m.inodes.clone(),
            );
            r.register(
                "brick_inodes_free",
                "Inodes free on the brick's file system",
                m.inodes_free.clone(),
            );
        }
        Role::Client => {
            r.register(
                "brick_up",
                "Whether this client is connected to the brick (1) or not (0)",
                m.brick_up.clone(),
            );
            r.register(
                "brick_slow",
                "Whether this client reads around the brick because it answers late (1) or not (0)",
                m.brick_slow.clone(),
            );
            r.register(
                "cache_lookups",
                "Answers asked of a cache, by cache and result",
                m.cache.clone(),
            );
        }
        Role::Daemon => register_daemon(&mut r, m),
    }
    r
}

/// The daemon's own metrics: its bricks, self-heal, scrubber, rebalance
/// and the pool as it sees it.
fn register_daemon(r: &mut Registry, m: &Metrics) {
    r.register(
        "brick_up",
        "Whether the brick process on this server is serving (1) or not (0)",
        m.brick_up.clone(),
    );
    r.register(
        "heal_pending",
        "Objects in the brick's heal index (changes not yet on every replica)",
        m.heal_pending.clone(),
    );
    r.register_with_unit(
        "heal_pending",
        "Data of those objects' copies on the brick that a heal would compare: the ranges recorded as changed, whole files where none is",
        Unit::Bytes,
        m.heal_pending_bytes.clone(),
    );
    r.register(
        "healed",
        "Objects this server's self-heal daemon healed",
        m.healed.clone(),
    );
    r.register(
        "heal_failed",
        "Heals of objects that failed",
        m.heal_failed.clone(),
    );
    r.register_with_unit(
        "heal_written",
        "Data this server's self-heal daemon wrote to copies and fragments that missed changes, counted as each chunk lands",
        Unit::Bytes,
        m.heal_written_bytes.clone(),
    );
    r.register_with_unit(
        "scrubbed",
        "Data this server's bitrot scrubber read and checked against its checksums",
        Unit::Bytes,
        m.scrubbed_bytes.clone(),
    );
    r.register(
        "scrub_damaged",
        "Copies this server's bitrot scrubber found damaged (their data no longer matches its checksums)",
        m.scrub_damaged.clone(),
    );
    r.register(
        "scrub_repaired",
        "Damaged copies this server's bitrot scrubber rewrote from the other copies or fragments",
        m.scrub_repaired.clone(),
    );
    r.register(
        "rebalance_files",
        "Files of the rebalance this server runs, by state",
        m.rebalance_files.clone(),
    );
    r.register(
        "peers",
        "The pool's servers by state, as this server sees them",
        m.peers.clone(),
    );
    r.register(
        "server_quorum",
        "Whether this server is in touch with the pool's majority (1) or not (0)",
        m.quorum.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fop_is_counted_with_its_latency_error_and_bytes() {
        let started = Instant::now();
        fop_done(
            "read",
            started,
            &Ok(Reply::Data(bytes::Bytes::from_static(b"abc"))),
        );
        fop_done(
            "lookup",
            started,
            &Err(mortar_core::FsError::new(libc::ENOENT, "no such name")),
        );
        let text = render(&registry(
            Role::Brick,
            vec![("brick".into(), "h:/b".into())],
        ));
        assert!(
            text.contains("mortar_fops_total{role=\"brick\",brick=\"h:/b\",fop=\"read\"}"),
            "{text}"
        );
        assert!(text.contains("mortar_fop_errors_total{role=\"brick\",brick=\"h:/b\",fop=\"lookup\",errno=\"ENOENT\"} 1"), "{text}");
        assert!(
            text.contains("mortar_fop_duration_seconds_bucket"),
            "{text}"
        );
        assert!(text.contains("mortar_read_bytes_total"), "{text}");
        assert!(
            text.contains("mortar_process_resident_memory_bytes"),
            "{text}"
        );
        // A brick shows no daemon's figures.
        assert!(!text.contains("heal_pending"), "{text}");
    }

    #[test]
    fn errnos_have_names() {
        assert_eq!(errno_name(libc::ENOSPC), "ENOSPC");
        assert_eq!(errno_name(4095), "4095");
    }
}
