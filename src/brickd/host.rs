//! A brick host (`mortar-brick --host`): one process that serves every
//! brick of its server (`cluster.brick-multiplex`), all on one port, each
//! client connection to the brick its handshake names. One runtime, one
//! TLS acceptor, one blocking pool for all of them; a brick's failure (its
//! health check) still takes out that brick alone.
//!
//! The daemon attaches and detaches bricks over the host's control socket
//! (`bricks.sock` in its run directory, for root alone), one connection
//! per brick, which stands where a brick process's standard input and
//! output stand (the lines are spelled in `mgmt::supervise::said`):
//!
//! - the daemon writes `ATTACH <the brick's arguments as a JSON list>`,
//!   then the volume's options (one JSON line each time they change), and
//!   `DETACH` to stop the brick;
//! - the host answers `LISTENING <port>` once the brick serves, or
//!   `OFFLINE <reason>` when it cannot (then or later), and closes the
//!   connection once the brick is detached.
//!
//! A connection that ends without `DETACH` is a daemon that went away:
//! the brick serves on and follows its options at `--mgmt`, until a daemon
//! attaches it again (that daemon adopts it). The host exits once it
//! serves no brick and no daemon's connection is open.

use super::{BrickArgs, BrickConfig, Offline, OptionsSource, Running};
use crate::brick::server::Exports;
use crate::mgmt::supervise::said::{self, Said};
use crate::mgmt::supervise::{HOST_PID_FILE, HOST_SOCKET};
use std::collections::HashMap;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

/// The brick host's command line (`mortar-brick --host`, `mortar
/// brick-host`).
#[derive(clap::Args)]
pub struct HostArgs {
    /// Where the control socket and the pid file are.
    #[arg(long)]
    pub run: PathBuf,
    #[arg(long)]
    pub ip: IpAddr,
    /// The port to serve every brick on; when it is taken, the first free
    /// one from 24300.
    #[arg(long)]
    pub port: Option<u16>,
    /// Append the host's log (its standard error) to this file.
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// The server's credential, which the bricks serve and connect with.
    #[arg(long)]
    pub server_credential: PathBuf,
    /// Serve Prometheus metrics on this address, at the port + 1000.
    #[arg(long, value_name = "IP")]
    pub metrics: Option<IpAddr>,
}

/// A brick's arguments as the daemon writes them after `ATTACH`.
#[derive(clap::Parser)]
#[command(no_binary_name = true)]
struct AttachArgs {
    #[command(flatten)]
    brick: BrickArgs,
}

/// Runs a brick host from its command line, its log on standard error or
/// in `--log-file`.
pub fn main(a: &HostArgs) -> anyhow::Result<()> {
    if let Some(f) = &a.log_file {
        if let Err(e) = super::log_to(f) {
            eprintln!("cannot log to {}: {e}", f.display());
        }
    }
    crate::process::init_logs();
    // As a brick of its own: one thread serves the quick requests of all
    // the bricks, slow ones go to the blocking pool.
    // (Two worker threads instead were slower with one application
    // thread, create 762/s against 496/s, for a few percent more with
    // four: docs/benchmarks.md.)
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(a))
}

/// One brick the host serves.
struct Attached {
    running: Running,
    cfg: BrickConfig,
    /// Where its `OFFLINE` goes: the daemon's connection that attached it
    /// (None once that went away).
    events: Option<mpsc::UnboundedSender<Said>>,
    /// Which connection attached it last.
    by: u64,
}

struct Host {
    exports: Arc<Exports>,
    port: u16,
    bricks: Mutex<HashMap<PathBuf, Attached>>,
    next_conn: std::sync::atomic::AtomicU64,
    /// Control connections open now.
    controls: std::sync::atomic::AtomicUsize,
}

async fn run(a: &HostArgs) -> anyhow::Result<()> {
    super::prepare_process(&a.server_credential).map_err(anyhow::Error::msg)?;
    let (listener, port) = super::listen(a.ip, a.port).await?;
    std::fs::create_dir_all(&a.run)?;
    let socket = a.run.join(HOST_SOCKET);
    // A socket left by a host that died: no one answers on it.
    if UnixStream::connect(&socket).await.is_ok() {
        anyhow::bail!("another brick host serves {}", socket.display());
    }
    let _ = std::fs::remove_file(&socket);
    // Written before the socket answers: a daemon that reaches the host
    // finds its pid.
    super::brick::write_pid_file(&a.run.join(HOST_PID_FILE), port)?;
    let control = UnixListener::bind(&socket)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
    }
    let host = Arc::new(Host {
        exports: Arc::new(Exports::default()),
        port,
        bricks: Mutex::new(HashMap::new()),
        next_conn: 1.into(),
        controls: 0.into(),
    });
    if let Some(ip) = a.metrics {
        // One endpoint for all the bricks: their fops together, each
        // one's disk by its labels.
        let weak = Arc::downgrade(&host);
        let disks: super::Disks = Box::new(move || {
            let Some(host) = weak.upgrade() else {
                return Vec::new();
            };
            let bricks = host.bricks.lock().unwrap();
            bricks
                .iter()
                .map(|(path, b)| {
                    let labels = vec![
                        (
                            "volume".to_string(),
                            b.cfg.volume.clone().unwrap_or_default(),
                        ),
                        ("brick".to_string(), path.display().to_string()),
                    ];
                    (labels, path.clone())
                })
                .collect()
        });
        super::serve_metrics(ip, port, Vec::new(), disks).await;
    }
    let what = format!("brick host {}:{port}", a.ip);
    crate::process::statedump::on_signal(what.clone());
    super::stop_on_term(host.exports.clone());
    tokio::spawn(crate::brick::server::serve(
        listener,
        host.exports.clone(),
        what,
    ));
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{}", Said::Listening(port));
    let _ = out.flush();
    tracing::info!(port, socket = %socket.display(), "brick host serving");
    loop {
        match control.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(host.clone().control(stream));
            }
            Err(e) => {
                tracing::warn!("control socket: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

impl Host {
    /// Serves one control connection: one brick's attach, options and
    /// detach.
    async fn control(self: Arc<Self>, stream: UnixStream) {
        use std::sync::atomic::Ordering::SeqCst;
        self.controls.fetch_add(1, SeqCst);
        self.serve_control(stream).await;
        // The host exits once it serves no brick and no daemon speaks to
        // it (its last brick detached, or gone offline and let go).
        if self.controls.fetch_sub(1, SeqCst) == 1 && self.bricks.lock().unwrap().is_empty() {
            tracing::info!("brick host: no brick left to serve; exiting");
            std::process::exit(0);
        }
    }

    async fn serve_control(self: &Arc<Self>, stream: UnixStream) {
        let conn = self
            .next_conn
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (rd, mut wr) = stream.into_split();
        let mut lines = BufReader::new(rd).lines();
        let (events, mut said) = mpsc::unbounded_channel::<Said>();
        // What the host says on this connection, in order; the connection
        // closes once the brick is detached or offline.
        let writer = tokio::spawn(async move {
            while let Some(s) = said.recv().await {
                let line = format!("{s}\n");
                if wr.write_all(line.as_bytes()).await.is_err() || s.is_last() {
                    break;
                }
            }
            let _ = wr.shutdown().await;
        });
        let first = match lines.next_line().await {
            Ok(Some(l)) => l,
            _ => return,
        };
        let parsed = said::attached(&first).and_then(|a| {
            <AttachArgs as clap::Parser>::try_parse_from(a).map_err(|e| e.to_string())
        });
        let args = match parsed {
            Ok(a) => a.brick,
            Err(e) => {
                let first = e.lines().next().unwrap_or_default().to_string();
                let _ = events.send(Said::Offline(format!("cannot start the brick: {first}")));
                let _ = writer.await;
                return;
            }
        };
        let cfg = super::config(&args);
        let path = cfg.path.clone();
        // The lines that follow, read from now on: the first options are
        // in force before the brick serves.
        let (options_tx, options) = mpsc::unbounded_channel();
        let reading = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if line == said::DETACH {
                    return true;
                }
                let _ = options_tx.send(line);
            }
            false
        });
        if let Err(reason) = self.attach(cfg, conn, events.clone(), options).await {
            reading.abort();
            let _ = events.send(Said::Offline(reason));
            let _ = writer.await;
            return;
        }
        let _ = events.send(Said::Listening(self.port));
        let detached = reading.await.unwrap_or(false);
        if detached {
            self.detach(&path, conn);
            let _ = events.send(Said::Detached);
        } else if let Some(b) = self
            .bricks
            .lock()
            .unwrap()
            .get_mut(&path)
            .filter(|b| b.by == conn)
        {
            // The daemon went away: the brick follows its options at the
            // management address (its option task sees its lines end).
            tracing::info!(brick = %path.display(), "the daemon's connection for this brick ended; it serves on");
            b.events = None;
        }
        drop(events);
        let _ = writer.await;
    }

    /// Serves the brick of `cfg`, or (if it is served already) takes it
    /// over for connection `conn`: its options come from `options` and its
    /// events go to `events` from now on.
    async fn attach(
        self: &Arc<Self>,
        cfg: BrickConfig,
        conn: u64,
        events: mpsc::UnboundedSender<Said>,
        options: mpsc::UnboundedReceiver<String>,
    ) -> Result<(), String> {
        let path = cfg.path.clone();
        {
            let mut bricks = self.bricks.lock().unwrap();
            if let Some(b) = bricks.get_mut(&path) {
                if b.cfg.volume_id != cfg.volume_id {
                    return Err(format!(
                        "{} is served here for volume id {}",
                        path.display(),
                        b.cfg.volume_id
                    ));
                }
                tracing::info!(brick = %path.display(), "brick taken over by a daemon's new connection");
                b.running.options_from(OptionsSource::Lines(options), &cfg);
                b.events = Some(events);
                b.by = conn;
                return Ok(());
            }
        }
        let opened = super::open(&cfg)?;
        let offline: Offline = {
            let (host, path) = (Arc::downgrade(self), path.clone());
            Arc::new(move |reason: String| {
                if let Some(host) = host.upgrade() {
                    host.offline(&path, reason);
                }
            })
        };
        let running = super::start(
            &cfg,
            opened,
            &self.exports,
            self.port,
            offline,
            OptionsSource::Lines(options),
        )
        .await?;
        let mut bricks = self.bricks.lock().unwrap();
        // (Another connection may have attached it meanwhile: the last
        // one serves.)
        bricks.insert(
            path,
            Attached {
                running,
                cfg,
                events: Some(events),
                by: conn,
            },
        );
        Ok(())
    }

    /// Stops serving the brick at `path` (if connection `conn` attached it
    /// last).
    fn detach(&self, path: &Path, conn: u64) {
        let mut bricks = self.bricks.lock().unwrap();
        if bricks.get(path).is_some_and(|b| b.by == conn) {
            bricks.remove(path);
            tracing::info!(brick = %path.display(), "brick detached");
        }
    }

    /// A brick failed its health check: it alone stops, and its daemon is
    /// told why.
    fn offline(&self, path: &Path, reason: String) {
        tracing::error!(brick = %path.display(), "brick going offline: {reason}");
        let gone = self.bricks.lock().unwrap().remove(path);
        if let Some(events) = gone.as_ref().and_then(|b| b.events.clone()) {
            let _ = events.send(Said::Offline(reason));
        }
    }
}
