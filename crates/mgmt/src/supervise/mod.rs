//! The daemon's watch over one brick process: starts it, learns its port,
//! restarts it when it dies, and stops it when told.
//!
//! A brick outlives a daemon that crashes. Each brick writes `<pid> <port>
//! <start time>` to a pid file in the daemon's run directory; a daemon that
//! starts and finds there the live process that wrote it adopts it instead
//! of starting a second one, so clients never notice the restart.
//!
//! A brick is started from the standby program when one waits (see
//! `STANDBY`), else as a new program.
//!
//! A brick that says `OFFLINE <reason>` (it failed its health check, or its
//! directory is not the volume's) is not restarted: the reason shows in
//! `volume status` until `volume start NAME force` tries it again.
//!
//! With `cluster.brick-multiplex` on, the process is the server's brick
//! host, shared by all its bricks: each brick is attached to it instead
//! of started, and taken over by attaching it again (`hosted`).

mod hosted;
mod program;
pub mod said;

use hosted::{host_pid, release, supervise_hosted};
pub(crate) use program::{brick_program, keep_standby};
use program::{hand_over, spawn_brick, take_standby};
use said::Said;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{watch, Notify};

/// What the daemon knows of a brick process right now.
#[derive(Clone, Debug, Default)]
pub struct BrickState {
    pub port: Option<u16>,
    pub pid: Option<u32>,
    /// Why the brick went offline and stays so.
    pub offline: Option<String>,
}

/// What the daemon knows of one brick process, shared between its
/// supervisor (which writes it) and the daemon (which reads it), with a
/// signal, shared by all the daemon's bricks, that one of them changed.
#[derive(Clone, Default)]
pub struct BrickInfo {
    state: Arc<Mutex<BrickState>>,
    changed: Arc<Notify>,
}

impl BrickInfo {
    /// A brick not started yet, whose changes `changed` announces.
    pub fn new(changed: Arc<Notify>) -> BrickInfo {
        BrickInfo {
            state: Default::default(),
            changed,
        }
    }

    pub fn get(&self) -> BrickState {
        self.state.lock().unwrap().clone()
    }

    fn set(&self, f: impl FnOnce(&mut BrickState)) {
        f(&mut self.state.lock().unwrap());
        self.changed.notify_waiters();
    }
}

/// The brick host's control socket, in the daemon's run directory
/// (`brickd::host` serves it).
pub const HOST_SOCKET: &str = "bricks.sock";
/// The brick host's pid file, in the daemon's run directory: `<pid>
/// <port> <start time>`.
pub const HOST_PID_FILE: &str = "bricks.pid";

/// How to run one brick.
pub struct BrickSpec {
    pub path: PathBuf,
    pub volume: String,
    pub volume_id: String,
    pub arbiter: bool,
    pub ip: IpAddr,
    /// The daemon's own address, for the brick to fetch its options.
    pub mgmt: String,
    pub logs: PathBuf,
    pub run: PathBuf,
    /// The port the cluster state gives the brick.
    pub port: Option<u16>,
    /// The volume's key (`Volume::key`; empty for older volumes), handed
    /// to the brick in a file only root reads.
    pub key: String,
    /// The server's credential (`mgmt::authority`), which the brick
    /// serves and connects with.
    pub credential: PathBuf,
    /// Where the brick serves its metrics (at its port + 1000).
    pub metrics: Option<IpAddr>,
    /// The volume's options, which the brick is given on its standard
    /// input (None: it asks the daemon at `mgmt` for them).
    pub options: Option<OptionsFeed>,
    /// Served by the server's brick host with its other bricks
    /// (`cluster.brick-multiplex`), not by a process of its own.
    pub multiplex: bool,
}

/// The options of a brick's volume as the daemon has them, looked at
/// again each time `changed` moves: `next(&mut sent)` is what to write to
/// the brick (`volgen::options_only`, one JSON line) when the volume is
/// at another version than `sent` (which it then names), else None.
pub struct OptionsFeed {
    pub next: NextOptions,
    pub changed: watch::Receiver<u64>,
}

/// A version of a volume's options: its id and `Volume::version`.
pub type OptionsVersion = (String, u64);
/// `OptionsFeed::next`.
pub type NextOptions = Box<dyn Fn(&mut Option<OptionsVersion>) -> Option<String> + Send + Sync>;

/// Writes the brick's options on its standard input each time they
/// change, until the brick's input closes.
async fn feed_options(input: &mut (impl tokio::io::AsyncWrite + Unpin), feed: &OptionsFeed) {
    use tokio::io::AsyncWriteExt;
    let mut changed = feed.changed.clone();
    let mut sent = None;
    loop {
        changed.borrow_and_update();
        if let Some(mut line) = (feed.next)(&mut sent) {
            line.push('\n');
            if input.write_all(line.as_bytes()).await.is_err() {
                return;
            }
        }
        if changed.changed().await.is_err() {
            return;
        }
    }
}

impl BrickSpec {
    fn file_name(&self, ext: &str) -> String {
        format!(
            "brick{}.{ext}",
            self.path.display().to_string().replace('/', "-")
        )
    }

    pub fn pid_file(&self) -> PathBuf {
        self.run.join(self.file_name("pid"))
    }

    pub fn key_file(&self) -> PathBuf {
        self.run.join(self.file_name("key"))
    }

    /// Writes the key file (mode 0600), if the volume has a key.
    fn write_key(&self) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        if self.key.is_empty() {
            return Ok(());
        }
        // One written by an earlier start is kept (writing it anew at
        // every start was a tenth of a daemon's part in `volume start`).
        if self.key_is_written() {
            return Ok(());
        }
        let _ = std::fs::remove_file(self.key_file());
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(self.key_file())?
            .write_all(self.key.as_bytes())
    }
}

impl BrickSpec {
    /// Whether the key file holds the key, and only its owner (this
    /// process's user) may read it.
    fn key_is_written(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let file = self.key_file();
        std::fs::symlink_metadata(&file).is_ok_and(|m| {
            m.is_file()
                && m.mode() & 0o777 == 0o600
                && m.uid() == rustix::process::geteuid().as_raw()
        }) && std::fs::read(&file).is_ok_and(|k| k == self.key.as_bytes())
    }
}

/// A brick process a previous daemon left running: the pid file names
/// the live process that wrote it (same pid, same start time), or, in a
/// pid file without a start time, a live `mortar brick` process for this
/// very path.
fn adoptable(spec: &BrickSpec) -> Option<(u32, u16)> {
    let text = std::fs::read_to_string(spec.pid_file()).ok()?;
    let mut words = text.split_whitespace();
    let pid: u32 = words.next()?.parse().ok()?;
    let port: u16 = words.next()?.parse().ok()?;
    if let Some(since) = words.next() {
        let same = since.parse().ok() == mortar_process::start_time(pid);
        return (same && alive(pid)).then_some((pid, port));
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let path = spec.path.as_os_str().as_encoded_bytes();
    let brick = args.first().is_some_and(|a| a.ends_with(b"mortar-brick"))
        || args.iter().any(|a| *a == b"brick");
    let serves_it = brick && args.windows(2).any(|w| w[0] == b"--path" && w[1] == path);
    serves_it.then_some((pid, port))
}

pub(super) fn alive(pid: u32) -> bool {
    // A zombie is not alive; only this daemon's children can be zombies of
    // ours, and those are waited for.
    mortar_process::stat_fields(pid).is_some_and(|f| f.first().is_some_and(|state| state != "Z"))
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// Stops an adopted brick (not our child: it cannot be waited for).
async fn stop_adopted(pid: u32) {
    signal(pid, rustix::process::Signal::TERM);
    for _ in 0..50 {
        if !alive(pid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    signal(pid, rustix::process::Signal::KILL);
}

/// A brick was stopped as asked: nothing of it is left to adopt.
pub(super) fn stopped(spec: &BrickSpec, info: &BrickInfo) {
    // Emptied, not removed: the next start writes it in place. Creating
    // it anew at every start was a tenth of a brick's start (an inode
    // allocation, costly on ext4 among files recently deleted).
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .open(spec.pid_file())
        .and_then(|f| f.set_len(0));
    info.set(|i| *i = BrickState::default());
    tracing::info!(brick = %spec.path.display(), "brick stopped");
}

/// Runs one brick process and restarts it when it dies, until told to
/// stop or the brick goes offline.
pub async fn supervise(spec: BrickSpec, info: BrickInfo, mut stop: watch::Receiver<bool>) {
    let _ = std::fs::create_dir_all(&spec.logs);
    let _ = std::fs::create_dir_all(&spec.run);
    let log = spec.logs.join(spec.file_name("log"));
    let brick = spec.path.display().to_string();
    let args = brick_args(&spec, &log);
    let found = adoptable(&spec);
    let hosted = found.is_some_and(|(pid, _)| host_pid(&spec.run) == Some(pid));
    if hosted && !spec.multiplex {
        // Served by the brick host, and to be served by a process of its
        // own now (`cluster.brick-multiplex` turned off): never by both.
        release(&spec, &args).await;
    }
    // (A brick of the brick host is taken over by attaching it again.)
    let adopt = found.filter(|_| !hosted);
    if let Some((pid, port)) = adopt {
        tracing::info!(%brick, pid, port, "adopted a running brick");
        info.set(|i| {
            *i = BrickState {
                port: Some(port),
                pid: Some(pid),
                offline: None,
            }
        });
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {
                    if !alive(pid) {
                        info.set(|i| *i = BrickState::default());
                        tracing::warn!(%brick, "brick exited; restarting (log: {})", log.display());
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        break;
                    }
                }
                _ = stop.changed() => {
                    stop_adopted(pid).await;
                    stopped(&spec, &info);
                    return;
                }
            }
        }
    }
    if let Err(e) = spec.write_key() {
        tracing::warn!(brick = %spec.path.display(), "cannot write the volume's key ({e}); its bricks apply auth.allow to the pool's own clients too");
    }
    if spec.multiplex {
        return supervise_hosted(&spec, &args, &info, stop).await;
    }
    let (exe, first) = brick_program().await;
    loop {
        if *stop.borrow() {
            return;
        }
        let handed = match take_standby() {
            Some(c) => hand_over(c, &args, spec.options.is_some()).await,
            None => None,
        };
        let mut child = match handed {
            Some(c) => c,
            None => {
                let spawned = spawn_brick(&exe, first, &args, spec.options.is_some(), &log).await;
                match spawned {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::error!(%brick, "cannot start brick: {e}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                }
            }
        };
        let pid = child.id();
        let input = child.stdin.take();
        let feeding = async {
            if let (Some(mut input), Some(feed)) = (input, spec.options.as_ref()) {
                feed_options(&mut input, feed).await
            }
            // (Ended when the brick's input closes: the brick is going.)
            std::future::pending::<()>().await
        };
        tokio::pin!(feeding);
        // Its standard output says LISTENING or OFFLINE, now or later.
        let out = child.stdout.take().unwrap();
        let reader = follow_said(out, info.clone(), brick.clone(), move || pid);
        tokio::select! {
            _ = &mut feeding => unreachable!(),
            status = child.wait() => {
                let _ = reader.await;
                if ended(&info, &brick) {
                    let _ = stop.changed().await;
                    return;
                }
                tracing::warn!(%brick, "brick exited ({status:?}); restarting (log: {})", log.display());
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            _ = stop.changed() => {
                if let Some(pid) = pid {
                    signal(pid, rustix::process::Signal::TERM);
                }
                if tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err() {
                    let _ = child.kill().await;
                }
                reader.abort();
                stopped(&spec, &info);
                return;
            }
        }
    }
}

/// The arguments that run the brick of `spec`, logging to `log`.
pub fn brick_args(spec: &BrickSpec, log: &std::path::Path) -> Vec<std::ffi::OsString> {
    let mut a: Vec<std::ffi::OsString> = vec![
        "--path".into(),
        spec.path.clone().into(),
        "--ip".into(),
        spec.ip.to_string().into(),
        "--volume-id".into(),
        spec.volume_id.clone().into(),
        "--volume".into(),
        spec.volume.clone().into(),
        "--mgmt".into(),
        spec.mgmt.clone().into(),
        "--pid-file".into(),
        spec.pid_file().into(),
        "--log-file".into(),
        log.into(),
        "--server-credential".into(),
        spec.credential.clone().into(),
    ];
    if spec.arbiter {
        a.push("--arbiter".into());
    }
    if !spec.key.is_empty() {
        a.extend(["--key-file".into(), spec.key_file().into()]);
    }
    if let Some(p) = spec.port {
        a.extend(["--port".into(), p.to_string().into()]);
    }
    if let Some(ip) = spec.metrics {
        a.extend(["--metrics".into(), ip.to_string().into()]);
    }
    if spec.options.is_some() {
        a.push("--options-on-stdin".into());
    }
    a
}

/// The process serving a brick ended (its own, or the brick host): its
/// port and pid are forgotten. True if the brick went offline, where it
/// stays until `volume start NAME force`; false if it is to be started
/// again.
fn ended(info: &BrickInfo, brick: &str) -> bool {
    info.set(|i| {
        i.port = None;
        i.pid = None;
    });
    let Some(reason) = info.get().offline else {
        return false;
    };
    tracing::error!(%brick, "brick stays offline until `volume start NAME force`: {reason}");
    true
}

/// Follows what a brick says on `out` (`LISTENING PORT` once it serves,
/// `OFFLINE REASON` when it cannot) into `info`, until `out` ends; `pid`
/// answers which process serves it.
pub(super) fn follow_said(
    out: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    info: BrickInfo,
    brick: String,
    pid: impl Fn() -> Option<u32> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let mut out = BufReader::new(out).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = out.next_line().await {
            match Said::parse(&line) {
                Some(Said::Listening(port)) => {
                    let pid = pid();
                    tracing::info!(%brick, port, ?pid, "brick started");
                    info.set(|i| {
                        *i = BrickState {
                            port: Some(port),
                            pid,
                            offline: None,
                        }
                    });
                }
                Some(Said::Offline(reason)) => {
                    tracing::error!(%brick, "brick offline: {reason}");
                    info.set(|i| i.offline = Some(reason));
                }
                Some(Said::Detached) | None => {}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A brick as the daemon would describe it, its run files in `run`.
    fn spec_for(path: &Path, run: &Path) -> BrickSpec {
        BrickSpec {
            path: path.to_path_buf(),
            volume: "v".into(),
            volume_id: "id".into(),
            arbiter: false,
            ip: "127.0.0.1".parse().unwrap(),
            mgmt: "127.0.0.1:1".into(),
            logs: run.to_path_buf(),
            run: run.to_path_buf(),
            credential: run.join("server.pem"),
            port: None,
            key: String::new(),
            metrics: None,
            options: None,
            multiplex: false,
        }
    }

    /// The daemon writes a brick its options once, and again each time
    /// they change (not each time the daemon's view does), until the
    /// brick's input closes.
    #[tokio::test]
    async fn a_brick_is_written_its_options_when_they_change() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("input");
        let mut brick = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(format!("cat > {}", out.display()))
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let (moved, changed) = watch::channel(0u64);
        // The volume's options and their version (None: not started).
        let options = Arc::new(Mutex::new(Some(("a".to_string(), 1))));
        let feed = OptionsFeed {
            next: Box::new({
                let o = options.clone();
                move |sent| {
                    let (line, version) = o.lock().unwrap().clone()?;
                    let now = Some(("id".to_string(), version));
                    (*sent != now).then(|| {
                        *sent = now;
                        line
                    })
                }
            }),
            changed,
        };
        let mut input = brick.stdin.take().unwrap();
        let feeding = tokio::spawn(async move { feed_options(&mut input, &feed).await });
        let settle = || tokio::time::sleep(Duration::from_millis(100));
        settle().await;
        moved.send_modify(|n| *n += 1);
        settle().await;
        *options.lock().unwrap() = None;
        moved.send_modify(|n| *n += 1);
        settle().await;
        *options.lock().unwrap() = Some(("b".into(), 2));
        moved.send_modify(|n| *n += 1);
        settle().await;
        drop(moved);
        tokio::time::timeout(Duration::from_secs(5), feeding)
            .await
            .expect("the feed ends with the daemon's view")
            .unwrap();
        brick.wait().await.unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "a\nb\n");
    }

    #[test]
    fn the_key_file_is_kept_while_it_holds_the_key_for_its_owner_alone() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let t = tempfile::tempdir().unwrap();
        let mut spec = spec_for(Path::new("/data/b1"), t.path());
        spec.key = "k1".into();
        let file = spec.key_file();
        let meta = || std::fs::metadata(&file).unwrap();
        spec.write_key().unwrap();
        let first = meta().ino();
        spec.write_key().unwrap();
        assert_eq!(meta().ino(), first, "kept as it was");
        spec.key = "k2".into();
        spec.write_key().unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "k2");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        spec.write_key().unwrap();
        assert_eq!(meta().mode() & 0o777, 0o600, "made private again");
    }

    #[test]
    fn only_a_live_brick_of_the_same_path_is_adopted() {
        let t = tempfile::tempdir().unwrap();
        let spec = spec_for(Path::new("/data/b1"), t.path());
        assert!(adoptable(&spec).is_none(), "no pid file");
        // This test process is alive but is not a brick of /data/b1.
        std::fs::write(spec.pid_file(), format!("{} 24300\n", std::process::id())).unwrap();
        assert!(adoptable(&spec).is_none());
        assert!(alive(std::process::id()));
        std::fs::write(spec.pid_file(), "garbage").unwrap();
        assert!(adoptable(&spec).is_none());
        // The process that wrote the file, known by its start time.
        let me = std::process::id();
        let since = mortar_process::start_time(me).unwrap();
        std::fs::write(spec.pid_file(), format!("{me} 24300 {since}\n")).unwrap();
        assert_eq!(adoptable(&spec), Some((me, 24300)));
        // Another process given the same pid since.
        std::fs::write(spec.pid_file(), format!("{me} 24300 {}\n", since + 1)).unwrap();
        assert!(adoptable(&spec).is_none());
    }
}
