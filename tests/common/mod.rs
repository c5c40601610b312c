//! Test harness: real daemons, real brick processes and real FUSE mounts.
//! Each cluster gets its own loopback address (127.x.y.z), so tests run in
//! parallel without sharing ports, and its own temporary directory.
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_mortar");
/// Test daemons use their own port, so that a real daemon on the default
/// port (listening on every address) does not get in their way.
pub const PORT: u16 = 24199;
static NEXT: AtomicU32 = AtomicU32::new(1);

pub mod bricks;
pub mod heal;
pub mod images;
pub mod metrics;
pub mod net;
pub mod pattern;
pub mod tools;

#[allow(unused_imports)]
pub use bricks::*;
#[allow(unused_imports)]
pub use heal::*;
#[allow(unused_imports)]
pub use images::*;
#[allow(unused_imports)]
pub use metrics::*;
#[allow(unused_imports)]
pub use pattern::*;
#[allow(unused_imports)]
pub use tools::*;

pub struct Cluster {
    pub ip: String,
    pub dir: tempfile::TempDir,
    daemon: Option<Child>,
    /// The network namespace the daemon runs in (a "host"), if any.
    netns: Option<String>,
    /// A command the daemon is started under (`unshare`, `faketime`).
    pub wrap: Vec<String>,
}

pub fn sh(cmd: &str) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("bash runs")
}

/// Runs a shell command and insists that it succeeds.
pub fn ok(cmd: &str) -> String {
    let o = sh(cmd);
    assert!(
        o.status.success(),
        "command failed: {cmd}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Cluster {
    pub fn start() -> Cluster {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = std::process::id();
        let ip = format!("127.{}.{}.{}", 1 + p % 250, (p / 250) % 250, n + 1);
        Cluster::start_at(ip, None)
    }

    /// A daemon listening on `ip`, in network namespace `netns` if given.
    pub fn start_at(ip: String, netns: Option<String>) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("mortar-test-")
            .tempdir()
            .unwrap();
        let mut c = Cluster {
            ip,
            dir,
            daemon: None,
            netns,
            wrap: Vec::new(),
        };
        c.start_daemon();
        c
    }

    /// Each brick started from now on in a process of its own
    /// (`cluster.brick-multiplex off`): for tests that kill or freeze one
    /// brick of several on this server.
    pub fn one_process_per_brick(&self) {
        self.ok(&["volume", "set", "all", "cluster.brick-multiplex", "off"]);
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn start_daemon(&mut self) {
        self.start_daemon_env(&[]);
    }

    /// Starts the daemon with extra environment (`FAILPOINTS`; its bricks
    /// and healers inherit it).
    pub fn start_daemon_env(&mut self, env: &[(&str, &str)]) {
        need_fail_points(env);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("daemon.log"))
            .unwrap();
        let mut argv: Vec<String> = self.wrap.clone();
        if let Some(ns) = &self.netns {
            argv.extend(["nsenter".into(), format!("--net=/run/netns/{ns}")]);
        }
        argv.push(BIN.into());
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        let child = cmd
            .args([
                "daemon",
                "--listen",
                &format!("{}:{PORT}", self.ip),
                "--host",
                &self.ip,
                "--state-dir",
            ])
            .arg(self.path("state"))
            .envs(env.iter().copied())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            // Its own process group, with its wrapper if any: `kill_daemon`
            // signals the group (`unshare --fork` ignores SIGTERM itself).
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {argv:?}: {e}"));
        self.daemon = Some(child);
        wait_for("the daemon", Duration::from_secs(10), || {
            self.cli(&["volume", "list"]).status.success()
        });
    }

    pub fn kill_daemon(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let _ = Command::new("kill")
                .args(["--", &format!("-{}", d.id())])
                .status();
            let _ = d.wait();
        }
    }

    /// Kills the daemon as a crash would (SIGKILL): its bricks live on.
    pub fn crash_daemon(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }

    /// Brick processes left running by a crashed daemon (from their pid files).
    fn kill_orphan_bricks(&self) {
        let Ok(dir) = std::fs::read_dir(self.path("state/run")) else {
            return;
        };
        for e in dir.flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let Some(pid) = text.split_whitespace().next() else {
                continue;
            };
            // Only a brick of this cluster: a pid may have been reused.
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let mine = self.dir.path().display().to_string();
            if String::from_utf8_lossy(&cmdline).contains(&mine) {
                let _ = Command::new("kill")
                    .args(["-9", pid])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }

    /// Waits until the daemon has exited by itself (a fail point); true
    /// if it did within `timeout`.
    pub fn wait_daemon_gone(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(d) = self.daemon.as_mut() {
                if d.try_wait().ok().flatten().is_some() {
                    self.daemon = None;
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// The management daemon's process id.
    pub fn daemon_pid(&self) -> u32 {
        self.daemon.as_ref().expect("the daemon runs").id()
    }

    pub fn server(&self) -> String {
        format!("{}:{PORT}", self.ip)
    }

    /// This server's administrator credential, which its CLI and mounts use.
    pub fn credential(&self) -> PathBuf {
        self.path("state/tls/admin.pem")
    }

    /// Adds `other` to this server's pool, with `other`'s join token.
    pub fn probe(&self, other: &Cluster) -> String {
        let token = other.ok(&["peer", "token"]);
        self.ok(&["peer", "probe", &other.ip, "--token", token.trim()])
    }

    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .env("MORTAR_CREDENTIAL", self.credential())
            .arg("--server")
            .arg(self.server())
            .args(args)
            .output()
            .unwrap()
    }

    /// Runs the CLI and insists that it succeeds; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.cli(args);
        assert!(
            o.status.success(),
            "mortar {args:?} failed: {}{}\ndaemon log:\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            std::fs::read_to_string(self.path("daemon.log")).unwrap_or_default()
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Runs the CLI and insists that it fails; returns its stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let o = self.cli(args);
        assert!(
            !o.status.success(),
            "mortar {args:?} should have failed: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        String::from_utf8_lossy(&o.stderr).into_owned()
    }

    /// The cluster state as `volume info --json` shows it.
    pub fn state(&self) -> String {
        self.ok(&["--json", "volume", "info"])
    }

    /// Insists that a command is refused with `want` in one clear line
    /// and leaves the state as `before` (`state`).
    pub fn refused(&self, args: &[&str], want: &str, before: &str) {
        let err = self.fails(args);
        assert!(
            err.contains(want),
            "mortar {args:?}: expected {want:?} in {err:?}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one clear line, got {err:?}");
        assert_eq!(self.state(), before, "mortar {args:?} changed the state");
    }

    pub fn brick(&self, name: &str) -> String {
        format!("{}:{}", self.ip, self.path(name).display())
    }

    /// Creates and starts a volume over `bricks` (relative names).
    pub fn volume(&self, vol: &str, replica: usize, bricks: &[&str]) -> Vec<PathBuf> {
        let mut args: Vec<String> = vec!["volume".into(), "create".into(), vol.into()];
        if replica > 1 {
            args.extend([
                "replica".into(),
                replica.to_string(),
                "transport".into(),
                "tcp".into(),
            ]);
        }
        args.extend(bricks.iter().map(|b| self.brick(b)));
        args.push("force".into());
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        self.ok(&a);
        self.ok(&["volume", "start", vol]);
        bricks.iter().map(|b| self.path(b)).collect()
    }

    /// Creates and starts `disperse WIDTH redundancy R` over `bricks` (whole
    /// sets of `width`); answers their paths.
    pub fn dispersed(
        &self,
        vol: &str,
        (width, r): (usize, usize),
        bricks: &[&str],
    ) -> Vec<PathBuf> {
        let shape = [
            "disperse".to_string(),
            width.to_string(),
            "redundancy".into(),
            r.to_string(),
        ];
        let mut args: Vec<String> = vec!["volume".into(), "create".into(), vol.into()];
        args.extend(shape);
        args.extend(bricks.iter().map(|b| self.brick(b)));
        args.push("force".into());
        self.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        self.ok(&["volume", "start", vol]);
        bricks.iter().map(|b| self.path(b)).collect()
    }

    pub fn mount(&self, vol: &str) -> Mount {
        self.mount_env(vol, &[])
    }

    /// Mounts with extra environment for the client (`FAILPOINTS`).
    pub fn mount_env(&self, vol: &str, env: &[(&str, &str)]) -> Mount {
        self.mount_with(vol, env, &[])
    }

    /// Mounts with extra environment and mount options (`-o ...`).
    pub fn mount_with(&self, vol: &str, env: &[(&str, &str)], options: &[&str]) -> Mount {
        self.try_mount(vol, env, options)
            .unwrap_or_else(|e| panic!("mount failed: {e}"))
    }

    /// Mounts, or says why the mount failed (its standard error).
    pub fn try_mount(
        &self,
        vol: &str,
        env: &[(&str, &str)],
        options: &[&str],
    ) -> Result<Mount, String> {
        need_fail_points(env);
        let dir = self.path(&format!(
            "mnt-{vol}-{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let o = Command::new(BIN)
            .args([
                "mount",
                "--port",
                &PORT.to_string(),
                &format!("{}:/{vol}", self.ip),
            ])
            .arg(&dir)
            .arg("--log-file")
            .arg(self.path("client.log"))
            .env("MORTAR_CREDENTIAL", self.credential())
            .args(options.iter().flat_map(|o| ["-o", o]))
            .envs(env.iter().copied())
            .output()
            .unwrap();
        if !o.status.success() {
            return Err(String::from_utf8_lossy(&o.stderr).into_owned());
        }
        Ok(Mount { dir })
    }

    pub fn volume_status_json(&self, vol: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["--json", "volume", "status", vol])).unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_daemon();
        self.kill_orphan_bricks();
        if std::thread::panicking() {
            // Keep the logs and bricks of a failed test (the directory goes).
            let keep = std::env::temp_dir().join(format!("mortar-failed-{}", self.ip));
            let _ = std::fs::create_dir_all(&keep);
            sh(&format!(
                "cp -a {}/. {} 2>/dev/null",
                self.dir.path().display(),
                keep.display()
            ));
            eprintln!("logs of {} kept in {}", self.ip, keep.display());
        }
    }
}

pub struct Mount {
    pub dir: PathBuf,
}

impl Mount {
    pub fn p(&self, rel: &str) -> String {
        self.dir.join(rel).display().to_string()
    }
    pub fn unmount(&self) {
        let _ = Command::new("umount")
            .arg(&self.dir)
            .stderr(Stdio::null())
            .status();
        wait_for("unmount", Duration::from_secs(10), || {
            !is_mounted(&self.dir)
        });
        // The client lands what it answered ahead before it exits.
        let client = format!("mount .*{}( |$)", self.dir.display());
        wait_for("the client to exit", Duration::from_secs(30), || {
            !Command::new("pgrep")
                .args(["-f", &client])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if is_mounted(&self.dir) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        if std::thread::panicking() {
            // A failed test's client may still hold writes for bricks that
            // are about to go, and would retry them for good: it goes too,
            // so that it slows no later test.
            let client = format!("mount .*{}( |$)", self.dir.display());
            let _ = Command::new("pkill").args(["-9", "-f", &client]).status();
        }
    }
}

pub fn is_mounted(dir: &Path) -> bool {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let d = dir.display().to_string();
    mi.lines().any(|l| l.split(' ').nth(4) == Some(d.as_str()))
}

/// The gfid xattr of an object on a brick.
pub fn gfid_on_brick(path: &Path) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let n = rustix::fs::lgetxattr(path, "trusted.mortar.gfid", &mut buf[..])
        .unwrap_or_else(|e| panic!("no gfid on {}: {e}", path.display()));
    buf[..n].to_vec()
}

/// Everything about a brick's tree that replicas must agree on: per path
/// (the `.mortar` index left out) its type, mode, owner, size, content
/// hash, link target and xattrs (gfid and blame included).
pub fn brick_digest(root: &Path) -> std::collections::BTreeMap<String, String> {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeMap<String, String>) {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if rel == ".mortar" {
                continue;
            }
            let md = std::fs::symlink_metadata(&p).unwrap();
            let mut d = format!("mode={:o} uid={} gid={}", md.mode(), md.uid(), md.gid());
            if md.is_file() {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::fs::read(&p).unwrap().hash(&mut h);
                d += &format!(
                    " size={} data={:x} links={}",
                    md.len(),
                    h.finish(),
                    md.nlink()
                );
            } else if md.is_symlink() {
                d += &format!(" -> {}", std::fs::read_link(&p).unwrap().display());
            }
            let mut list = vec![0u8; 4096];
            let n = rustix::fs::llistxattr(&p, &mut list[..]).unwrap();
            let mut xs: Vec<&[u8]> = list[..n]
                .split(|&c| c == 0)
                .filter(|x| !x.is_empty())
                .collect();
            xs.sort();
            for x in xs {
                let name = String::from_utf8_lossy(x).into_owned();
                let mut v = vec![0u8; 4096];
                let m = rustix::fs::lgetxattr(&p, name.as_str(), &mut v[..]).unwrap();
                d += &format!(" {name}={:02x?}", &v[..m]);
            }
            out.insert(rel, d);
            if md.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Asserts that every brick holds the same tree as the first.
pub fn assert_bricks_identical(bricks: &[PathBuf]) {
    let first = brick_digest(&bricks[0]);
    for b in &bricks[1..] {
        let other = brick_digest(b);
        let diff: Vec<String> = first
            .iter()
            .filter(|(k, v)| other.get(*k) != Some(*v))
            .map(|(k, v)| {
                format!(
                    "{k}:\n  {}: {v}\n  {}: {:?}",
                    bricks[0].display(),
                    b.display(),
                    other.get(k)
                )
            })
            .chain(
                other
                    .keys()
                    .filter(|k| !first.contains_key(*k))
                    .map(|k| format!("{k}: only on {}", b.display())),
            )
            .take(10)
            .collect();
        assert!(diff.is_empty(), "bricks differ:\n{}", diff.join("\n"));
    }
}

/// Waits until the client log shows `n` brick connections in all.
pub fn wait_connections(c: &Cluster, n: usize) {
    wait_for("the client to reconnect", Duration::from_secs(30), || {
        std::fs::read_to_string(c.path("client.log"))
            .unwrap_or_default()
            .matches("connected to brick")
            .count()
            >= n
    })
}

/// Sets volume options, in order.
pub fn set_options(c: &Cluster, vol: &str, opts: &[(&str, &str)]) {
    for (k, v) in opts {
        c.ok(&["volume", "set", vol, k, v]);
    }
}

/// The pid of the client serving `dir`.
pub fn client_pid(dir: &Path) -> u32 {
    let want = dir.display().to_string();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmd
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.iter().any(|a| a == "--foreground") && args.contains(&want) {
            return pid;
        }
    }
    panic!("no client process for {want}");
}

/// The calls a mount has sent once it has gone quiet: nothing sent for
/// a second. A change's locks are let go of in the background once idle
/// (half a second, looked for every 200 ms): a count taken right after a
/// change would catch them whenever the machine is slow.
pub fn requests_when_idle(m: &Mount) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = requests(m);
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_secs(1) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = requests(m);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    last
}

/// Writes `data` to `path` through a mount and syncs it, so that a brick
/// can be read: a close returns before its writes land
/// (`performance.flush-behind`).
pub fn write_synced(
    path: impl AsRef<std::path::Path>,
    data: impl AsRef<[u8]>,
) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    f.write_all(data.as_ref())?;
    f.sync_all()
}

/// Requests the mount at `m` has sent to bricks so far.
pub fn requests(m: &Mount) -> u64 {
    ok(&format!(
        "getfattr --only-values -n trusted.mortar.client.requests {}",
        m.dir.display()
    ))
    .trim()
    .parse()
    .unwrap()
}

/// The translator graph a mount runs, as it describes it.
pub fn graph_of(m: &Mount) -> String {
    ok(&format!(
        "getfattr --only-values -n trusted.mortar.client.graph {}",
        m.dir.display()
    ))
}

/// How many times a mount has switched to a new graph.
pub fn switches(m: &Mount) -> u64 {
    let g = graph_of(m);
    g.lines()
        .find_map(|l| l.strip_prefix("switches "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no switch count in {g}"))
}

/// Sets options of a volume that is mounted, and waits until the mount
/// runs the graph they make: `volume set` answers once the change is on
/// record, and mounts switch to the new graph a moment later.
pub fn set_options_seen_by(c: &Cluster, vol: &str, opts: &[(&str, &str)], m: &Mount) {
    let before = switches(m);
    set_options(c, vol, opts);
    wait_for(
        "the mount to switch graphs",
        Duration::from_secs(10),
        || switches(m) > before,
    );
}

/// The address (`ip:port`) brick `i` of a volume listens on.
pub fn brick_addr(c: &Cluster, vol: &str, i: usize) -> String {
    let port = c.volume_status_json(vol)[0]["bricks"][i]["port"]
        .as_u64()
        .expect("the brick listens");
    format!("{}:{port}", c.ip)
}

/// A client's first message to a brick, as a mount sends it.
pub fn hello_frame(brick: &str) -> Vec<u8> {
    use mortar::protocol::wire::{self, Msg};
    wire::encode(&Msg::Hello {
        magic: wire::MAGIC,
        version: wire::VERSION,
        brick: brick.into(),
        key: None,
    })
    .to_vec()
}

/// A connection to a server of the pool, TLS run by hand.
pub type Tls = rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>;

/// Connects to `addr` with the credential in `file`, as the pool's clients
/// do (the handshake happens with the first read or write).
pub fn tls_connect(addr: &str, file: &Path) -> Tls {
    let cred = mortar::protocol::tls::Credential::load(file).unwrap();
    let cfg = mortar::protocol::tls::client_config(&cred).unwrap();
    let name = mortar::protocol::tls::SERVER_NAME.try_into().unwrap();
    let conn = rustls::ClientConnection::new(cfg, name).unwrap();
    rustls::StreamOwned::new(conn, std::net::TcpStream::connect(addr).unwrap())
}

/// Reads one message a brick sent, by hand.
pub fn read_msg(s: &mut impl std::io::Read) -> mortar::protocol::wire::Msg {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).unwrap();
    mortar::protocol::wire::decode(bytes::Bytes::from(body)).unwrap()
}

/// A small file system of its own (tmpfs) at `dir`, unmounted when
/// dropped: a full disk, or a brick off the root partition.
pub struct SmallFs(pub PathBuf);

impl SmallFs {
    pub fn new(dir: PathBuf, size: &str) -> SmallFs {
        std::fs::create_dir_all(&dir).unwrap();
        ok(&format!(
            "mount -t tmpfs -o size={size} tmpfs {}",
            dir.display()
        ));
        SmallFs(dir)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = sh(&format!("umount -l {}", self.0.display()));
    }
}

/// Fails a test that sets `FAILPOINTS` when the programs were built
/// without them (they are only with the feature `failpoints`).
pub fn need_fail_points(env: &[(&str, &str)]) {
    if !env.iter().any(|(k, _)| *k == "FAILPOINTS") {
        return;
    }
    let out = Command::new(BIN)
        .arg("--version")
        .env("FAILPOINTS", "none=off")
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("FAILPOINTS ignored"),
        "this test crashes processes at fail points, and {BIN} has none: run the tests as README.md says (cargo test --features failpoints)"
    );
}
