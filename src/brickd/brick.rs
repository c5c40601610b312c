//! One brick served: its directory opened and checked, its translators
//! stacked, its options followed, its health watched. A process serves
//! one (`brickd::run`) or many (`brickd::host`) of them.

use super::{BrickConfig, Tunables};
use crate::brick::server;
use crate::mgmt::rpc;
use crate::storage::posix::{Posix, VOLUME_ID_XATTR};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// A brick directory opened, checked to be the volume's and healthy.
pub struct Opened(pub(super) Arc<Posix>);

/// Opens the brick of `cfg`, or says why it cannot serve.
pub fn open(cfg: &BrickConfig) -> Result<Opened, String> {
    let path = cfg.path.as_path();
    check_volume_id(path, &cfg.volume_id).map_err(|e| e.to_string())?;
    if let Some(snap) = crate::storage::snapshot::unfinished(path) {
        return Err(format!(
            "a restore to snapshot {snap} is unfinished: run 'snapshot restore {snap}' again"
        ));
    }
    let posix = Posix::open(path).map_err(|e| format!("cannot open the brick: {e}"))?;
    posix
        .health_check()
        .map_err(|reason| format!("health check failed: {reason}"))?;
    Ok(Opened(Arc::new(posix)))
}

/// Takes a brick out of service for good, saying why: the process exits
/// (a brick of its own), or the brick alone stops (`host`).
pub type Offline = Arc<dyn Fn(String) + Send + Sync>;

/// Where a brick's options come from.
pub enum OptionsSource {
    /// Lines its daemon writes (`volgen::options_only`, one per change);
    /// at their end, the daemon at `--mgmt`.
    Lines(tokio::sync::mpsc::UnboundedReceiver<String>),
    /// The daemon at `--mgmt`, asked every few seconds.
    Mgmt,
}

/// A brick being served; dropped, it stops: its connections end, its
/// tasks too, and its statedump sections go.
pub struct Running {
    path: String,
    exports: Arc<server::Exports>,
    export: Arc<server::Export>,
    tunables: Arc<watch::Sender<Tunables>>,
    tasks: Vec<tokio::task::AbortHandle>,
    /// The task that keeps the options (replaced when another daemon
    /// takes the brick over).
    options: tokio::task::AbortHandle,
}

impl Running {
    /// The brick's options come from `source` from now on.
    pub fn options_from(&mut self, source: OptionsSource, cfg: &BrickConfig) {
        self.options.abort();
        self.options = follow(source, cfg, self.tunables.clone()).0;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.exports.remove(&self.path, &self.export);
        self.options.abort();
        for t in &self.tasks {
            t.abort();
        }
        crate::process::statedump::remove_brick(&self.path);
    }
}

/// How a brick takes the volume's options (`follow`): as its daemon
/// writes them (one description, `volgen::options_only`, per line, each
/// time they change), so that a brick of a server opens no connection of
/// its own to its daemon (at 300 servers, 300 TLS handshakes in each
/// `volume start`). Once the lines end, the daemon went away (a brick
/// outlives it): the options are followed at `mgmt`, the daemon that
/// adopts the brick.
///
/// Starts keeping a brick's options from `source`: the task, and an
/// answer once the first are in force.
pub(super) fn follow(
    source: OptionsSource,
    cfg: &BrickConfig,
    tx: Arc<watch::Sender<Tunables>>,
) -> (tokio::task::AbortHandle, tokio::sync::oneshot::Receiver<()>) {
    let (first, taken) = tokio::sync::oneshot::channel();
    let (volume, mgmt) = (cfg.volume.clone(), cfg.mgmt.clone());
    let task = tokio::spawn(async move {
        let mut first = Some(first);
        if let OptionsSource::Lines(mut lines) = source {
            while let Some(line) = lines.recv().await {
                match serde_json::from_str::<crate::core::desc::VolDesc>(&line) {
                    Ok(d) => apply(&tx, &d),
                    Err(e) => tracing::warn!("options from the daemon not taken: {e}"),
                }
                if let Some(f) = first.take() {
                    let _ = f.send(());
                }
            }
            if volume.is_some() && mgmt.is_some() {
                tracing::info!(mgmt = ?mgmt, "the daemon that started this brick went away: its options are followed at the management address");
            }
        }
        drop(first);
        if let (Some(volume), Some(mgmt)) = (volume, mgmt) {
            follow_options(volume, mgmt, tx).await;
        }
    });
    (task.abort_handle(), taken)
}

/// Serves the brick `opened` (of `cfg`) among `exports`, which are served
/// at `port`; `offline` is called if it fails its health check later.
/// Its options are in force before it serves (a second at most: a brick
/// does not wait long for them).
pub async fn start(
    cfg: &BrickConfig,
    Opened(posix): Opened,
    exports: &Arc<server::Exports>,
    port: u16,
    offline: Offline,
    options: OptionsSource,
) -> Result<Running, String> {
    let path = cfg.path.display().to_string();
    let key = match &cfg.key_file {
        Some(f) => match std::fs::read_to_string(f) {
            Ok(k) if !k.trim().is_empty() => Some(k.trim().to_string()),
            Ok(_) => None,
            Err(e) => return Err(format!("cannot read the volume's key {}: {e}", f.display())),
        },
        None => None,
    };
    let env = crate::brick::BrickEnv {
        posix: posix.clone(),
        arbiter: cfg.arbiter,
    };
    let stack = crate::brick::Stack::build(&env, crate::graph::table::brick_layers())
        .map_err(|e| format!("cannot build the brick's translators: {e:#}"))?;
    let stack = Arc::new(stack);
    let tunables_tx = Arc::new(watch::Sender::new(Tunables::from_options(
        &Default::default(),
    )));
    let tunables = tunables_tx.subscribe();
    let (options, first) = follow(options, cfg, tunables_tx.clone());
    let _ = tokio::time::timeout(OPTIONS_FIRST, first).await;
    tracing::info!(brick = %path, stack = ?stack.kinds(), "brick translators");
    if let Some(f) = &cfg.pid_file {
        if let Err(e) = write_pid_file(f, port) {
            tracing::warn!(brick = %path, "cannot write the pid file {}: {e}", f.display());
        }
    }
    statedump_sections(cfg, port, &stack);
    let mut tasks = Vec::new();
    tasks
        .push(tokio::spawn(health_checks(posix.clone(), tunables.clone(), offline)).abort_handle());
    // The translators take the volume's options as they change (the
    // first ones are in force already when it is asked to serve).
    tasks.push(
        tokio::spawn({
            let (stack, posix, mut t) = (stack.clone(), posix.clone(), tunables.clone());
            async move {
                loop {
                    let now = t.borrow_and_update().clone();
                    stack.reconfigure(&now.options);
                    posix.set_strict_o_direct(now.strict_o_direct);
                    posix.set_reserve(now.reserve);
                    posix.set_checksums(now.checksums);
                    if t.changed().await.is_err() {
                        return;
                    }
                }
            }
        })
        .abort_handle(),
    );
    let (auth_tx, auth) = watch::channel(tunables.borrow().auth.clone());
    tasks.push(
        tokio::spawn({
            let mut t = tunables.clone();
            async move {
                while t.changed().await.is_ok() {
                    let rules = t.borrow_and_update().auth.clone();
                    auth_tx.send_if_modified(|old| {
                        let changed = *old != rules;
                        *old = rules;
                        changed
                    });
                }
            }
        })
        .abort_handle(),
    );
    let export = Arc::new(server::Export::new(stack, auth, key));
    exports.add(&path, export.clone());
    tracing::info!(brick = %path, port, arbiter = cfg.arbiter, "brick serving");
    Ok(Running {
        path,
        exports: exports.clone(),
        export,
        tunables: tunables_tx,
        tasks,
        options,
    })
}

/// Writes `<pid> <port> <start time>` to `file`, in place (the daemon
/// empties it when the brick stops). With the process's start time: a
/// daemon that finds the file after a restart adopts this very process,
/// not another that was given the same pid since.
pub(super) fn write_pid_file(file: &Path, port: u16) -> std::io::Result<()> {
    let pid = std::process::id();
    let since = crate::process::start_time(pid).unwrap_or(0);
    let text = format!("{pid} {port} {since}\n");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(file)?;
    f.write_all_at(text.as_bytes(), 0)?;
    f.set_len(text.len() as u64)
}

/// The lines of this process's standard input, read on a thread of
/// their own.
pub(super) fn stdin_lines() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    lines_of(std::io::stdin())
}

pub(super) fn lines_of(
    input: impl std::io::Read + Send + 'static,
) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    use std::io::BufRead;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let read = move || {
        for line in std::io::BufReader::new(input).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("mortar-options".into())
        .spawn(read)
    {
        tracing::warn!("cannot read the volume's options from the daemon: {e}");
    }
    rx
}

/// What this brick's statedumps hold beside its translators' own
/// sections.
fn statedump_sections(cfg: &BrickConfig, port: u16, stack: &Arc<crate::brick::Stack>) {
    use crate::process::statedump;
    let about = format!(
        "path={}\nvolume={}\nport={port}\narbiter={}\n",
        cfg.path.display(),
        cfg.volume.as_deref().unwrap_or(""),
        cfg.arbiter
    );
    let weak = Arc::downgrade(stack);
    let brick = cfg.path.display().to_string();
    statedump::brick_section(&brick, "brick", move || about.clone());
    statedump::brick_section(&brick, "translators", move || {
        weak.upgrade().map(|s| s.dump()).unwrap_or_default()
    });
}

fn check_volume_id(path: &Path, volume_id: &str) -> anyhow::Result<()> {
    let mut buf = [0u8; 64];
    let n = rustix::fs::getxattr(path, VOLUME_ID_XATTR, &mut buf[..]).map_err(|e| {
        anyhow::anyhow!(
            "brick {}: no volume id ({e}); was the volume created, is the brick's file system mounted?",
            path.display()
        )
    })?;
    let found = String::from_utf8_lossy(&buf[..n]).to_string();
    if found != volume_id {
        anyhow::bail!(
            "brick {} belongs to volume id {found}, not {volume_id}",
            path.display()
        );
    }
    Ok(())
}

/// Keeps `tx` at the volume's options, asking the daemon every few seconds.
/// While the daemon cannot be reached the last known values stay.
async fn follow_options(volume: String, mgmt: String, tx: Arc<watch::Sender<Tunables>>) {
    rpc::follow_volume(&[mgmt], &volume, None, None, true, Vec::new, |d| {
        apply(&tx, &d)
    })
    .await
}

/// Puts the options of the volume's description `d` in force.
fn apply(tx: &watch::Sender<Tunables>, d: &crate::core::desc::VolDesc) {
    let mut t = Tunables::from_options(&d.options);
    t.auth = crate::protocol::auth::Rules::from_desc(d);
    let mut applied = false;
    tx.send_if_modified(|old| {
        applied = *old != t;
        if applied {
            *old = t;
        }
        applied
    });
    if applied {
        tracing::info!(t = ?*tx.borrow(), "volume options applied");
    }
}

/// How long a brick waits for its first options on its input before it
/// serves with the defaults.
pub(super) const OPTIONS_FIRST: Duration = Duration::from_secs(1);

/// Runs the health check at the configured interval; a failure takes the
/// brick offline.
async fn health_checks(
    posix: Arc<Posix>,
    mut tunables: watch::Receiver<Tunables>,
    offline: Offline,
) {
    loop {
        let (every, limit) = {
            let t = tunables.borrow_and_update();
            (t.health_check, t.health_check_timeout)
        };
        let Some(every) = every else {
            if tunables.changed().await.is_err() {
                return;
            }
            continue;
        };
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            r = tunables.changed() => {
                if r.is_err() { return; }
                continue;
            }
        }
        let p = posix.clone();
        // A file system that hangs fails too (`storage.health-check-timeout`,
        // as GlusterFS's).
        let check = tokio::task::spawn_blocking(move || {
            // A disk that hangs, for tests (the periodic checks only):
            // `posix-health-check:<brick dir>=sleep(ms)`.
            fail::fail_point!(p.fail_point_name("health-check").as_str(), |_| Err(
                "failed on purpose".into()
            ));
            p.health_check()
        });
        let checked = match limit {
            Some(limit) => tokio::time::timeout(limit, check).await,
            None => Ok(check.await),
        };
        let failed = match checked {
            Ok(Ok(Ok(()))) => continue,
            Ok(Ok(Err(reason))) => format!("health check failed: {reason}"),
            Ok(Err(e)) => format!("health check could not run: {e}"),
            Err(_) => format!(
                "health check failed: no answer from the brick's file system in {} s",
                limit.unwrap_or_default().as_secs()
            ),
        };
        return offline(failed);
    }
}
