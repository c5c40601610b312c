//! The brick process (`mortar brick`), started and watched by the daemon:
//! opens the brick directory, checks that it belongs to the volume, binds
//! the port the cluster state gives it (or, when that one is taken, the
//! first free port from `BRICK_PORT_BASE`) and tells the daemon which one
//! by printing `LISTENING <port>` on its standard output (and in its pid
//! file, for a daemon that restarts and adopts it).
//!
//! A brick outlives a daemon that crashes: clients go on talking to it.
//! It follows its volume's options by asking the daemon for the volume's
//! description every few seconds, as clients do, and runs the health check
//! (`storage.health-check-interval`). A brick that cannot serve (it fails
//! the check, or its directory is not the volume's) prints
//! `OFFLINE <reason>` and exits; the daemon shows the reason in
//! `volume status` and leaves it down until `volume start NAME force`.

mod brick;
pub mod host;

use crate::brick::server;
use crate::mgmt::supervise::said::Said;
use brick::*;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The brick process's command line (`mortar brick`, `mortar-brick`).
#[derive(clap::Args)]
pub struct BrickArgs {
    #[arg(long)]
    pub path: PathBuf,
    #[arg(long)]
    pub ip: std::net::IpAddr,
    #[arg(long)]
    pub volume_id: String,
    /// Keep names and metadata but no file data (an arbiter brick).
    #[arg(long)]
    pub arbiter: bool,
    /// The volume's name, to follow its options (with --mgmt).
    #[arg(long)]
    pub volume: Option<String>,
    /// The management daemon to ask for the volume's options.
    #[arg(long)]
    pub mgmt: Option<String>,
    /// Where to write "<pid> <port>" once serving.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// The port to listen on; when it is taken, the first free one from
    /// 24300.
    #[arg(long)]
    pub port: Option<u16>,
    /// Append the brick's log (its standard error) to this file.
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// The file holding the volume's key, which the pool's own clients
    /// (self-heal, rebalance) give to pass auth.allow and auth.reject.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// The server's credential, which the brick serves and connects with
    /// (not `--credential`: that one is the CLI's, for talking to a daemon).
    #[arg(long)]
    pub server_credential: PathBuf,
    /// Serve Prometheus metrics on this address, at the brick's port +
    /// 1000 (a free port when that one is taken).
    #[arg(long, value_name = "IP")]
    pub metrics: Option<std::net::IpAddr>,
    /// Take the volume's options from standard input, one JSON line each
    /// time they change, as the daemon that starts the brick writes them;
    /// once the input ends (that daemon went away), ask --mgmt instead.
    #[arg(long)]
    pub options_on_stdin: bool,
}

/// What a brick needs to know to run.
pub struct BrickConfig {
    pub path: PathBuf,
    pub ip: IpAddr,
    pub volume_id: String,
    pub arbiter: bool,
    /// The volume's name and the daemon to ask for its options.
    pub volume: Option<String>,
    pub mgmt: Option<String>,
    /// Where to write `<pid> <port>` once listening.
    pub pid_file: Option<PathBuf>,
    /// The port to listen on, if free.
    pub port: Option<u16>,
    /// The file holding the volume's key (`Volume::key`).
    pub key_file: Option<PathBuf>,
    /// The server's credential (TLS).
    pub credential: PathBuf,
    /// Where to serve metrics (at the brick's port + `METRICS_PORT_OFFSET`).
    pub metrics: Option<IpAddr>,
    /// The volume's options arrive on standard input (`follow`).
    pub options_on_stdin: bool,
}

/// A brick serves its metrics at its own port plus this.
pub const METRICS_PORT_OFFSET: u16 = 1000;

/// The volume options a brick applies itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tunables {
    /// `storage.health-check-interval`; None: off.
    pub health_check: Option<Duration>,
    /// `storage.health-check-timeout`; None: no limit.
    pub health_check_timeout: Option<Duration>,
    /// `performance.strict-o-direct`.
    pub strict_o_direct: bool,
    /// `storage.reserve`.
    pub reserve: crate::core::options::ShareOrSize,
    /// `storage.checksums`.
    pub checksums: bool,
    /// `auth.allow` and `auth.reject`.
    pub auth: crate::protocol::auth::Rules,
    /// The volume's options, for the brick's translators
    /// (`Stack::reconfigure`).
    pub options: crate::core::Options,
}

impl Tunables {
    pub fn from_options(o: &crate::core::Options) -> Tunables {
        let secs = |spec: &'static crate::core::options::Spec| match spec.int(o) {
            n if n > 0 => Some(Duration::from_secs(n as u64)),
            _ => None,
        };
        Tunables {
            health_check: secs(&crate::storage::posix::health::HEALTH_CHECK_INTERVAL),
            health_check_timeout: secs(&crate::storage::posix::health::HEALTH_CHECK_TIMEOUT),
            strict_o_direct: crate::storage::posix::STRICT_O_DIRECT.bool(o),
            reserve: crate::storage::posix::room::RESERVE.share_or_size(o),
            checksums: crate::storage::posix::sums::CHECKSUMS.bool(o),
            auth: crate::protocol::auth::Rules::from_options(o),
            options: o.clone(),
        }
    }
}

/// Exits when told to stop (SIGTERM, as the daemon stops a brick), once
/// every brick of `exports` has written down what must outlive the
/// process (`brick::Stack::stopping`: the ranges of the change sessions
/// open, so that their files heal by those ranges, not whole).
fn stop_on_term(exports: Arc<server::Exports>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        tracing::warn!("cannot catch SIGTERM: a brick stopped leaves its open files to heal whole");
        return;
    };
    tokio::spawn(async move {
        term.recv().await;
        tracing::info!("told to stop (SIGTERM): exiting");
        exports.stopping();
        std::process::exit(0);
    });
}

/// Tells the daemon (if it still listens) why this brick stops serving,
/// then exits.
fn go_offline(reason: &str) -> ! {
    tracing::error!("brick going offline: {reason}");
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{}", Said::Offline(reason.to_string()));
    let _ = out.flush();
    std::process::exit(3);
}

/// The arguments of a brick program started ahead of need
/// (`mortar-brick --standby`): the daemon writes them on its standard
/// input, as one JSON list of strings, when it has a brick to start.
/// None at the end of the input: the daemon went away first.
pub fn standby_args() -> Option<anyhow::Result<Vec<String>>> {
    let mut line = String::new();
    match std::io::stdin().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => {
            Some(serde_json::from_str(&line).map_err(|e| anyhow::anyhow!("bad arguments: {e}")))
        }
    }
}

/// Shows `args` as this process's command line (in `ps` and
/// /proc/PID/cmdline), so that a brick started ahead of need, whose
/// command line was `mortar-brick --standby`, reads as any other. Uses
/// `prctl(PR_SET_MM_MAP)`, which needs no privilege, with the process's
/// other addresses as they are; where the kernel refuses, the command
/// line stays as it was. Call it while this process has one thread.
pub fn show_command_line(args: &[String]) -> bool {
    /// The kernel's `struct prctl_mm_map`.
    #[repr(C)]
    struct MmMap {
        start_code: u64,
        end_code: u64,
        start_data: u64,
        end_data: u64,
        start_brk: u64,
        brk: u64,
        start_stack: u64,
        arg_start: u64,
        arg_end: u64,
        env_start: u64,
        env_end: u64,
        auxv: u64,
        auxv_size: u32,
        exe_fd: u32,
    }
    let Some(fields) = crate::process::stat_fields(std::process::id()) else {
        return false;
    };
    let field = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .unwrap_or(0u64)
    };
    let mut text = Vec::new();
    for a in args {
        text.extend_from_slice(a.as_bytes());
        text.push(0);
    }
    // Kept for the process's life: the kernel reads it when asked.
    let text: &'static [u8] = Vec::leak(text);
    let map = MmMap {
        start_code: field(26),
        end_code: field(27),
        start_data: field(45),
        end_data: field(46),
        start_brk: field(47),
        // SAFETY: sbrk(0) only reads the current break.
        brk: unsafe { libc::sbrk(0) } as u64,
        start_stack: field(28),
        arg_start: text.as_ptr() as u64,
        arg_end: text.as_ptr() as u64 + text.len() as u64,
        env_start: field(50),
        env_end: field(51),
        auxv: 0,
        auxv_size: 0,
        exe_fd: u32::MAX,
    };
    // SAFETY: the kernel reads `map` (of the size given) and records the
    // addresses; the memory they name stays valid.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_MM,
            libc::PR_SET_MM_MAP as libc::c_ulong,
            &map as *const MmMap as libc::c_ulong,
            std::mem::size_of::<MmMap>() as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    r == 0
}

/// Sends this process's standard error, its log, to the end of `file`.
fn log_to(file: &Path) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)?;
    Ok(rustix::stdio::dup2_stderr(&f)?)
}

/// Runs a brick from its command line's arguments (`mortar brick`, or
/// the smaller `mortar-brick` binary the daemon starts), its log on
/// standard error or in `--log-file`.
pub fn main(a: &BrickArgs) -> anyhow::Result<()> {
    if let Some(f) = &a.log_file {
        if let Err(e) = log_to(f) {
            eprintln!("cannot log to {}: {e}", f.display());
        }
    }
    crate::process::init_logs();
    // One thread serves a brick's quick requests; slow ones go to the
    // blocking pool (see brick::server).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(config(a)))
}

/// What the brick of command line `a` runs with.
fn config(a: &BrickArgs) -> BrickConfig {
    BrickConfig {
        path: a.path.clone(),
        ip: a.ip,
        volume_id: a.volume_id.clone(),
        arbiter: a.arbiter,
        volume: a.volume.clone(),
        mgmt: a.mgmt.clone(),
        pid_file: a.pid_file.clone(),
        port: a.port,
        key_file: a.key_file.clone(),
        credential: a.server_credential.clone(),
        metrics: a.metrics,
        options_on_stdin: a.options_on_stdin,
    }
}

pub async fn run(cfg: BrickConfig) -> anyhow::Result<()> {
    prepare_process(&cfg.credential).unwrap_or_else(|e| go_offline(&e));
    let options = match cfg.options_on_stdin {
        true => OptionsSource::Lines(stdin_lines()),
        false => OptionsSource::Mgmt,
    };
    // Checked before the port is taken: a brick that cannot serve binds
    // nothing.
    let opened = open(&cfg).unwrap_or_else(|e| go_offline(&e));
    let posix = opened.0.clone();
    let (listener, port) = listen(cfg.ip, cfg.port).await?;
    let exports = Arc::new(server::Exports::default());
    let offline: Offline = Arc::new(|reason: String| go_offline(&reason));
    let brick = start(&cfg, opened, &exports, port, offline, options).await;
    let _brick = brick.unwrap_or_else(|e| go_offline(&e));
    crate::process::statedump::on_signal(format!("brick {}", cfg.path.display()));
    stop_on_term(exports.clone());
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{}", Said::Listening(port));
    let _ = out.flush();
    if let Some(ip) = cfg.metrics {
        let labels = vec![
            ("volume".to_string(), cfg.volume.clone().unwrap_or_default()),
            ("brick".to_string(), cfg.path.display().to_string()),
        ];
        let path = posix.path().to_path_buf();
        let disks: Disks = Box::new(move || vec![(Vec::new(), path.clone())]);
        serve_metrics(ip, port, labels, disks).await;
    }
    server::serve(listener, exports, format!("brick {}", cfg.path.display())).await?;
    Ok(())
}

/// What a brick process does once, for all the bricks it serves: its
/// umask and its credential.
fn prepare_process(credential: &Path) -> Result<(), String> {
    // Objects are made with the mode the client asked for, the caller's
    // umask already applied by the client (FUSE_DONT_MASK): the brick's own
    // umask must not take more away.
    rustix::process::umask(rustix::fs::Mode::empty());
    crate::protocol::tls::install_file(credential)
        .map_err(|e| format!("cannot take the server's credential: {e}"))
}

/// The bricks whose disks a process's metrics show: each one's labels
/// (none for a process of one brick: its registry names it) and path.
type Disks = Box<dyn Fn() -> Vec<(Vec<(String, String)>, PathBuf)> + Send + Sync>;

/// Serves the brick's metrics at `port` + `METRICS_PORT_OFFSET` on `ip`
/// (any free port when that one is taken), the figures of the disks of
/// `disks` read when scraped.
async fn serve_metrics(ip: IpAddr, port: u16, labels: Vec<(String, String)>, disks: Disks) {
    use crate::metrics::{serve, Role};
    crate::metrics::on_scrape(move |m| {
        let families = [&m.disk_bytes, &m.disk_free_bytes, &m.inodes, &m.inodes_free];
        for f in families {
            f.clear();
        }
        for (labels, path) in disks() {
            let d = crate::process::status::disk_of(&path);
            if d.size == 0 {
                continue; // statvfs failed: no figures
            }
            let figures = [d.size, d.free, d.inodes, d.inodes_free];
            for (f, v) in families.iter().zip(figures) {
                f.get_or_create(&labels).set(v as i64);
            }
        }
    });
    let registry = || crate::metrics::registry(Role::Brick, labels.clone());
    let wanted = SocketAddr::new(ip, port.saturating_add(METRICS_PORT_OFFSET));
    if let Err(e) = serve::serve(wanted, registry()).await {
        tracing::warn!(%wanted, "metrics: cannot listen ({e}); taking a free port");
        serve::start(Some(SocketAddr::new(ip, 0)), Role::Brick, labels.clone()).await;
    }
}

/// Binds `wanted`, or when it is taken (or none is given) the first free
/// port from `BRICK_PORT_BASE`.
async fn listen(
    ip: IpAddr,
    wanted: Option<u16>,
) -> std::io::Result<(tokio::net::TcpListener, u16)> {
    if let Some(p) = wanted {
        match tokio::net::TcpListener::bind(SocketAddr::new(ip, p)).await {
            // Port 0 asks the kernel for one: say which it gave.
            Ok(l) => {
                let port = l.local_addr()?.port();
                return Ok((l, port));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                tracing::warn!(port = p, "the brick's port is taken; taking another")
            }
            Err(e) => return Err(e),
        }
    }
    let mut port = crate::mgmt::BRICK_PORT_BASE;
    loop {
        match tokio::net::TcpListener::bind(SocketAddr::new(ip, port)).await {
            Ok(l) => return Ok((l, port)),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && port < u16::MAX => port += 1,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::watch;

    #[test]
    fn tunables_follow_the_options_and_zero_turns_them_off() {
        let mut o = crate::core::Options::new();
        let t = Tunables::from_options(&o);
        assert_eq!(t.health_check, Some(Duration::from_secs(30)));
        assert_eq!(t.health_check_timeout, Some(Duration::from_secs(20)));
        o.insert("storage.health-check-interval".into(), "0".into());
        o.insert("storage.health-check-timeout".into(), "0".into());
        o.insert("features.locks-revocation-secs".into(), "5".into());
        let t = Tunables::from_options(&o);
        assert_eq!(t.health_check, None);
        assert_eq!(t.health_check_timeout, None, "no limit");
        assert_eq!(t.options, o, "the translators' options");
    }

    /// A brick's configuration with no daemon to ask.
    fn config_for_tests() -> BrickConfig {
        BrickConfig {
            path: "/nowhere".into(),
            ip: "127.0.0.1".parse().unwrap(),
            volume_id: "id".into(),
            arbiter: false,
            volume: None,
            mgmt: None,
            pid_file: None,
            port: None,
            key_file: None,
            credential: "/nowhere.pem".into(),
            metrics: None,
            options_on_stdin: true,
        }
    }

    /// The options-only description of a volume whose health check runs
    /// every `secs`, as its daemon writes it to a brick.
    fn options_line(secs: &str) -> String {
        let mut options = crate::core::Options::new();
        options.insert("storage.health-check-interval".into(), secs.into());
        let d = crate::core::desc::VolDesc {
            volume: "v".into(),
            id: "id".into(),
            version: 1,
            options,
            top: crate::core::desc::XlDesc::new("", String::new(), vec![]),
            clients: vec![],
            pool: vec!["ab".repeat(32)],
            retired: vec![],
        };
        serde_json::to_string(&d).unwrap() + "\n"
    }

    #[tokio::test]
    async fn options_on_the_input_are_in_force_from_the_first_line_on() {
        use std::io::Write;
        let (tx, mut rx) = watch::channel(Tunables::from_options(&Default::default()));
        let (input, mut daemon) = std::io::pipe().unwrap();
        let cfg = config_for_tests();
        let (_task, first) = follow(OptionsSource::Lines(lines_of(input)), &cfg, Arc::new(tx));
        daemon.write_all(options_line("7").as_bytes()).unwrap();
        // The first line is in force once `first` answers.
        first.await.unwrap();
        assert_eq!(
            rx.borrow_and_update().health_check,
            Some(Duration::from_secs(7))
        );
        assert!(
            rx.borrow().auth.pool.len() == 1,
            "the pool's record comes too"
        );
        // A bad line is passed over; the next one is taken.
        let more = format!("not json\n{}", options_line("9"));
        daemon.write_all(more.as_bytes()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), rx.changed())
            .await
            .expect("the next line is taken")
            .unwrap();
        assert_eq!(rx.borrow().health_check, Some(Duration::from_secs(9)));
    }

    #[tokio::test]
    async fn an_input_that_ends_at_once_leaves_the_defaults() {
        let (tx, rx) = watch::channel(Tunables::from_options(&Default::default()));
        let cfg = config_for_tests();
        let (_task, first) = follow(
            OptionsSource::Lines(lines_of(std::io::empty())),
            &cfg,
            Arc::new(tx),
        );
        assert!(
            first.await.is_err(),
            "no options came: the brick does not wait"
        );
        assert_eq!(rx.borrow().health_check, Some(Duration::from_secs(30)));
    }

    #[tokio::test]
    async fn a_brick_asked_for_port_0_says_the_port_it_was_given() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let (l, port) = listen(ip, Some(0)).await.unwrap();
        assert_ne!(port, 0);
        assert_eq!(l.local_addr().unwrap().port(), port);
        // A port that is taken: the first free one from the base instead.
        let (_l2, other) = listen(ip, Some(port)).await.unwrap();
        assert!(other >= crate::mgmt::BRICK_PORT_BASE && other != port);
    }
}
