//! `mortar mount HOST:/VOL DIR` (and `mount.mortar`, its mount(8) helper).
//!
//! Fetches the volume description from the daemon on HOST, builds the
//! translator graph, waits for the bricks, and serves the FUSE mount until
//! it is unmounted. Without `--foreground` the command starts itself again
//! in the background and returns once the mount is in place, as mount(8)
//! expects of a helper.

use crate::fuse::{kmount, MortarFs};
use crate::graph::{active::Active, Graph};
use crate::mgmt::rpc::{self, Request, Response};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub struct MountArgs {
    pub source: String,
    pub dir: PathBuf,
    pub port: u16,
    pub foreground: bool,
    pub log: Option<PathBuf>,
    pub options: Vec<String>,
}

impl MountArgs {
    /// The daemon port: `-o port=N` (as mount(8) and fstab pass it) or `--port`.
    pub fn mgmt_port(&self) -> u16 {
        self.options
            .iter()
            .flat_map(|o| o.split(','))
            .find_map(|o| o.strip_prefix("port=").and_then(|p| p.parse().ok()))
            .unwrap_or(self.port)
    }

    /// The background client's log: `--log-file` or `-o log-file=PATH`
    /// (GlusterFS's mount option), or one per mount point under
    /// /var/log/mortar.
    pub fn log_path(&self) -> PathBuf {
        let from_options = self
            .options
            .iter()
            .flat_map(|o| o.split(','))
            .find_map(|o| o.strip_prefix("log-file="))
            .map(PathBuf::from);
        self.log.clone().or(from_options).unwrap_or_else(|| {
            let name = self
                .dir
                .display()
                .to_string()
                .trim_start_matches('/')
                .replace('/', "-");
            PathBuf::from(format!("/var/log/mortar/mnt-{name}.log"))
        })
    }

    /// The credential the client connects with: `-o credential=PATH`,
    /// else `$MORTAR_CREDENTIAL`, else the server's administrator
    /// credential (docs/security.md).
    pub fn credential(&self) -> PathBuf {
        let given = self
            .options
            .iter()
            .flat_map(|o| o.split(','))
            .find_map(|o| o.strip_prefix("credential="))
            .map(PathBuf::from);
        crate::protocol::tls::credential_path(given.as_deref())
    }

    /// Where the client serves its Prometheus metrics: `-o metrics=ADDR`
    /// (off by default).
    pub fn metrics(&self) -> anyhow::Result<Option<std::net::SocketAddr>> {
        self.options
            .iter()
            .flat_map(|o| o.split(','))
            .find_map(|o| o.strip_prefix("metrics="))
            .map(|a| {
                a.parse()
                    .map_err(|e| anyhow::anyhow!("metrics={a}: {e} (give IP:PORT)"))
            })
            .transpose()
    }

    /// The management daemons to ask for the volume, in order: the source's
    /// host, then `-o backup-volfile-servers=H1:H2` (GlusterFS's spelling).
    pub fn mgmt_servers(&self, host: &str) -> Vec<String> {
        let port = self.mgmt_port();
        let backups = self
            .options
            .iter()
            .flat_map(|o| o.split(','))
            .filter_map(|o| o.strip_prefix("backup-volfile-servers="))
            .flat_map(|l| l.split(':'))
            .filter(|h| !h.is_empty());
        std::iter::once(host)
            .chain(backups)
            .map(|h| rpc::mgmt_addr(h, port))
            .collect()
    }
}

pub fn parse_source(src: &str) -> anyhow::Result<(String, String)> {
    let (host, vol) = src
        .split_once(":/")
        .or_else(|| src.split_once(':'))
        .ok_or_else(|| anyhow::anyhow!("mount source must be HOST:/VOLUME, not {src}"))?;
    if host.is_empty() || vol.is_empty() || vol.contains('/') {
        anyhow::bail!("mount source must be HOST:/VOLUME, not {src}");
    }
    Ok((host.to_string(), vol.to_string()))
}

pub fn is_mounted(dir: &Path) -> bool {
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    let Ok(mi) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = dir.to_string_lossy().replace(' ', "\\040");
    mi.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() > 4 && f[4] == want && l.contains(" - fuse.mortar ")
    })
}

/// `-o remount,...`: the mount already there takes the new flags; no
/// client is started.
fn remount(a: &MountArgs, kernel: &kmount::KernelOptions) -> anyhow::Result<()> {
    if !is_mounted(&a.dir) {
        anyhow::bail!(
            "{} is not a mortar mount; nothing to remount",
            a.dir.display()
        );
    }
    kmount::remount(&a.dir, kernel.flags)
        .map_err(|e| anyhow::anyhow!("remounting {}: {e}", a.dir.display()))
}

/// Starts the mount in the background and waits until it is in place.
pub fn mount_background(a: &MountArgs) -> anyhow::Result<()> {
    parse_source(&a.source)?;
    let kernel = kmount::parse(&a.options);
    if kernel.remount {
        return remount(a, &kernel);
    }
    // Read now, so that a missing credential is said here, not in a log.
    crate::protocol::tls::Credential::load(&a.credential()).map_err(anyhow::Error::msg)?;
    if !a.dir.is_dir() {
        anyhow::bail!(
            "mount point {} does not exist or is not a directory",
            a.dir.display()
        );
    }
    let exe = crate::process::mortar_program();
    let log = a.log_path();
    if let Some(p) = log.parent() {
        std::fs::create_dir_all(p)?;
    }
    let logf = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("mount")
        .arg("--foreground")
        .arg("--port")
        .arg(a.port.to_string())
        .arg(&a.source)
        .arg(&a.dir)
        .stdin(std::process::Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf);
    for o in &a.options {
        cmd.arg("-o").arg(o);
    }
    // A new session, so the mount outlives the shell that made it.
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid() is async-signal-safe and runs in the forked child only.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if is_mounted(&a.dir) {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            let last: Vec<&str> = tail.lines().rev().take(3).collect();
            anyhow::bail!(
                "mount failed ({status}): {}; see {}",
                last.into_iter().rev().collect::<Vec<_>>().join(" | "),
                log.display()
            );
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!("mount did not come up within 30s; see {}", log.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Serves the client's metrics at `addr`; which bricks it is connected to
/// is read from the graph in use when scraped.
fn client_metrics(
    rt: &tokio::runtime::Runtime,
    addr: std::net::SocketAddr,
    vol: &str,
    active: &Arc<Active>,
) -> anyhow::Result<()> {
    let weak = Arc::downgrade(active);
    let volume = vol.to_string();
    crate::metrics::on_scrape(move |m| {
        let Some(active) = weak.upgrade() else { return };
        let graph = active.graph();
        m.brick_up.clear();
        m.brick_slow.clear();
        let slow = graph.slow_bricks();
        for b in graph.bricks() {
            let labels = crate::metrics::BrickLabels {
                volume: volume.clone(),
                brick: b.label(),
            };
            m.brick_up
                .get_or_create(&labels)
                .set(b.child.is_up() as i64);
            m.brick_slow
                .get_or_create(&labels)
                .set(slow.contains(&labels.brick) as i64);
        }
    });
    let registry = crate::metrics::registry(
        crate::metrics::Role::Client,
        vec![("volume".to_string(), vol.to_string())],
    );
    rt.block_on(crate::metrics::serve::serve(addr, registry))
        .map_err(|e| anyhow::anyhow!("metrics={addr}: cannot listen: {e}"))?;
    Ok(())
}

/// Serves the mount in this process until it is unmounted.
pub fn mount_foreground(a: &MountArgs) -> anyhow::Result<()> {
    let (host, vol) = parse_source(&a.source)?;
    let kernel = kmount::parse(&a.options);
    if kernel.remount {
        return remount(a, &kernel);
    }
    for o in &kernel.unknown {
        tracing::warn!("ignoring mount option {o}");
    }
    if a.options
        .iter()
        .flat_map(|o| o.split(','))
        .any(|o| o == "strictatime")
    {
        tracing::warn!(
            "strictatime: reads never update access times on mortar volumes (docs/semantics.md)"
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(client_threads())
        .enable_all()
        .build()?;
    crate::protocol::tls::install_file(&a.credential()).map_err(anyhow::Error::msg)?;
    let mgmts = a.mgmt_servers(&host);
    let desc = rt.block_on(async {
        // The first server that answers gives the description.
        let mut why = Vec::new();
        for m in &mgmts {
            match rpc::call(m, &Request::GetVolDesc { name: vol.clone() }).await {
                Ok(Response::VolDesc(d)) => return Ok(d),
                // The volume's own answer (not started, no such volume).
                Ok(Response::Err(e)) => return Err(anyhow::Error::new(e)),
                Ok(other) => why.push(format!("{m}: unexpected answer {other:?}")),
                Err(e) => why.push(e.message),
            }
        }
        Err(anyhow::anyhow!("{}", why.join("; ")))
    })?;
    // The bricks must be servers on the pool's record.
    crate::protocol::tls::set_record(Some(&desc.pool));
    let graph = rt.block_on(async { Graph::build(&desc, &rpc::graph_env()) })?;
    let up = rt.block_on(graph.wait_up(Duration::from_secs(10)));
    tracing::info!(volume = %vol, bricks_up = up, bricks = graph.leaves().count(), "volume graph ready");
    if up == 0 {
        anyhow::bail!("no brick of volume {vol} could be reached");
    }
    let active = Active::new(graph);
    if let Some(addr) = a.metrics()? {
        client_metrics(&rt, addr, &vol, &active)?;
    }
    {
        let weak = Arc::downgrade(&active);
        crate::process::statedump::section("graph", move || {
            weak.upgrade().map(|a| a.describe()).unwrap_or_default()
        });
        let weak = Arc::downgrade(&active);
        crate::process::statedump::section("handles", move || {
            weak.upgrade()
                .map(|a| format!("open={}\nswitches={}\n", a.open_handles(), a.switches()))
                .unwrap_or_default()
        });
        let what = format!("client {vol} {}", a.dir.display());
        rt.block_on(async move { crate::process::statedump::on_signal(what) });
    }
    // Before the mount: after it, a look at the path waits for this
    // process's own session.
    let dir = a.dir.canonicalize().unwrap_or_else(|_| a.dir.clone());
    let me = rpc::ClientInfo::this_process(dir.display().to_string());
    rt.spawn(rpc::follow_graph(
        mgmts.clone(),
        desc.clone(),
        active.clone(),
        me,
        |_| Default::default(),
        |_| {},
    ));
    let fs = MortarFs::new(active.clone(), rt.handle().clone());
    let inval = fs.invalidator();
    let mut cfg = fuser::Config::default();
    cfg.acl = fuser::SessionACL::All;
    cfg.n_threads = Some(2);
    cfg.clone_fd = true;
    tracing::info!(volume = %vol, dir = %a.dir.display(), "mounting");
    let dev = kmount::mount(&a.source, &a.dir, kernel.flags)
        .map_err(|e| anyhow::anyhow!("mounting {} on {}: {e}", a.source, a.dir.display()))?;
    let device = dev.try_clone()?;
    let session = fuser::Session::from_fd(fs, dev, fuser::SessionACL::All, cfg);
    // The kernel answers the handshake; if that fails, the mount is dead.
    let session = session.inspect_err(|_| {
        let _ = rustix::mount::unmount(&a.dir, rustix::mount::UnmountFlags::DETACH);
    })?;
    let kib = crate::fuse::READ_AHEAD / 1024;
    match kmount::set_read_ahead(&dir, kib) {
        Ok(()) => tracing::debug!(kib, "read-ahead window set"),
        Err(e) => tracing::warn!("read-ahead window left at the kernel's default: {e}"),
    }
    inval.start(session.notifier(), device);
    rt.spawn(crate::fuse::cache::follow_recalls(active.clone(), inval));
    session.run()?;
    tracing::info!(dir = %a.dir.display(), "unmounted; client exits");
    // Land what was answered ahead (changes of names), then settle what
    // was changed last, so that the bricks' heal index is left empty by a
    // clean unmount.
    let settled = rt.block_on(async {
        let graph = active.graph();
        tokio::time::timeout(Duration::from_secs(30), async {
            graph.settle().await;
            graph.fini().await
        })
        .await
    });
    if settled.is_err() {
        tracing::warn!("bricks did not answer in time; heal will settle the last changes");
    }
    drop(active);
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// The client's worker threads: `MORTAR_CLIENT_THREADS`, or half the CPUs
/// (at least one). A mount shares its machine with the applications it
/// serves: each request to a brick wakes a worker, and with more workers
/// than spare CPUs a wake is a thread switch more. On two CPUs, one worker
/// cut the client's CPU per small-file create by a fifth and its context
/// switches by a third, and moved large-file throughput not at all
/// (docs/benchmarks.md, `scripts/cpu-per-op.py`).
fn client_threads() -> usize {
    std::env::var("MORTAR_CLIENT_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(log: Option<&str>, options: &[&str]) -> MountArgs {
        MountArgs {
            source: "h:/v".into(),
            dir: PathBuf::from("/mnt/gv0"),
            port: 24007,
            foreground: false,
            log: log.map(PathBuf::from),
            options: options.iter().map(|o| o.to_string()).collect(),
        }
    }

    #[test]
    fn the_log_goes_where_the_flag_or_the_mount_option_says() {
        let default = args(None, &["ro"]).log_path();
        assert_eq!(default, PathBuf::from("/var/log/mortar/mnt-mnt-gv0.log"));
        let opt = args(None, &["ro,log-file=/tmp/m.log"]).log_path();
        assert_eq!(opt, PathBuf::from("/tmp/m.log"));
        let flag = args(Some("/tmp/f.log"), &["log-file=/tmp/m.log"]).log_path();
        assert_eq!(flag, PathBuf::from("/tmp/f.log"));
    }
}
