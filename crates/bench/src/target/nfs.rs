//! NFS access for the benchmark: how a target is reached, NFS-Ganesha
//! for GlusterFS, and fuse-nfs, the NFS client over FUSE both are
//! measured through (this machine has no kernel NFS client).

use super::run;
use crate::undo;
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How the workloads reach a volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Its own client: mortar's mount, GlusterFS's FUSE client.
    Native,
    /// An NFSv3 server (mortar's own; NFS-Ganesha's Gluster module for
    /// GlusterFS), through fuse-nfs: this machine has no kernel NFS client.
    Nfs,
}

impl Access {
    pub fn parse(s: &str) -> anyhow::Result<Access> {
        match s {
            "native" => Ok(Access::Native),
            "nfs" => Ok(Access::Nfs),
            _ => bail!("unknown access {s}: use native or nfs"),
        }
    }

    /// A target's name with the access: `mortar`, `mortar-nfs`.
    pub fn name(self, base: &str) -> String {
        match self {
            Access::Native => base.to_string(),
            Access::Nfs => format!("{base}-nfs"),
        }
    }
}

/// Where the benchmark's NFS servers listen: mortar's at `NFS_PORT` (one
/// below for each further daemon), NFS-Ganesha's NFS and MOUNT above it.
pub(super) const NFS_PORT: u16 = 20490;
pub(super) const GANESHA_NFS_PORT: u16 = 20495;
pub(super) const GANESHA_MNT_PORT: u16 = 20496;

/// NFS-Ganesha serving GlusterFS volume `vol` (on `host`) over NFSv3 at
/// 127.0.0.1, with the settings of a plain export (no NLM, no UDP, no
/// grace period), run until the returned teardown steps.
pub(super) fn ganesha(root: &Path, host: &str, vol: &str) -> anyhow::Result<Vec<u64>> {
    let conf = root.join("ganesha.conf");
    std::fs::write(
        &conf,
        format!(
            "NFS_CORE_PARAM {{
    NFS_Port = {GANESHA_NFS_PORT};
    MNT_Port = {GANESHA_MNT_PORT};
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
    Protocols = 3;
    Bind_Addr = 127.0.0.1;
}}
NFSV4 {{ Graceless = true; }}
EXPORT {{
    Export_Id = 1;
    Path = \"/{vol}\";
    Pseudo = \"/{vol}\";
    Access_Type = RW;
    Squash = No_root_squash;
    Protocols = 3;
    Transports = TCP;
    SecType = sys;
    FSAL {{ Name = GLUSTER; Hostname = \"{host}\"; Volume = \"{vol}\"; }}
}}
LOG {{ Default_Log_Level = EVENT; }}
"
        ),
    )?;
    let mut steps = Vec::new();
    if !portmapper_answers() {
        bail!("NFS-Ganesha registers with rpcbind, which does not answer at 127.0.0.1:111");
    }
    let log = root.join("ganesha.log");
    let mut child = Command::new("ganesha.nfsd")
        .arg("-F")
        .arg("-f")
        .arg(&conf)
        .arg("-L")
        .arg(&log)
        .arg("-p")
        .arg(root.join("ganesha.pid"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start ganesha.nfsd")?;
    let pid = child.id();
    let started = wait_port(
        ("127.0.0.1", GANESHA_MNT_PORT),
        Duration::from_secs(30),
        Some(&mut child),
    );
    steps.push(undo::push(move || {
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let _ = child.wait();
    }));
    if let Err(e) = started {
        undo::run(&steps);
        bail!("NFS-Ganesha did not start ({e}); see {}", log.display());
    }
    Ok(steps)
}

/// Starts rpcbind if it is not running (NFS-Ganesha registers with it),
/// before any mortar NFS server takes port 111 for its own portmapper;
/// the steps that stop it again.
pub fn rpcbind() -> anyhow::Result<Vec<u64>> {
    if portmapper_answers() {
        return Ok(Vec::new());
    }
    run(&mut Command::new("rpcbind")).context(
        "NFS-Ganesha registers with rpcbind, which cannot be started (apt-get install rpcbind)",
    )?;
    let undo = undo::push(|| {
        let _ = Command::new("pkill").args(["-x", "rpcbind"]).status();
    });
    if let Err(e) = wait_port(("127.0.0.1", 111), Duration::from_secs(10), None) {
        undo::run(&[undo]);
        bail!("rpcbind was started but does not answer at 127.0.0.1:111 ({e})");
    }
    Ok(vec![undo])
}

/// Whether a portmapper answers at 127.0.0.1:111 (an rpcbind running in
/// another network namespace, as the tests start, does not count).
fn portmapper_answers() -> bool {
    let at = std::net::SocketAddr::from(([127, 0, 0, 1], 111));
    std::net::TcpStream::connect_timeout(&at, Duration::from_secs(1)).is_ok()
}

/// Waits for `at` to take connections (while `child` runs, if one is
/// given).
fn wait_port(
    at: (&str, u16),
    within: Duration,
    mut child: Option<&mut Child>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect(at).is_err() {
        if let Some(status) = child.as_mut().map(|c| c.try_wait()).transpose()?.flatten() {
            bail!("it exited ({status})");
        }
        if Instant::now() > deadline {
            bail!("nothing listens at {}:{} after {within:?}", at.0, at.1);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// fuse-nfs: `MORTAR_FUSE_NFS`, or on the path, or where
/// scripts/fuse-nfs.sh builds it.
fn fuse_nfs_program() -> anyhow::Result<PathBuf> {
    let built = PathBuf::from("/var/tmp/mortar-tools/fuse-nfs/fuse/fuse-nfs");
    let candidates = [
        std::env::var_os("MORTAR_FUSE_NFS").map(PathBuf::from),
        Some(PathBuf::from("fuse-nfs")),
        Some(built),
    ];
    for c in candidates.into_iter().flatten() {
        if Command::new(&c).arg("--help").output().is_ok() {
            return Ok(c);
        }
    }
    bail!(
        "NFS access is measured through fuse-nfs (this machine has no kernel NFS client), which is not here: \
         scripts/fuse-nfs.sh builds it, or set MORTAR_FUSE_NFS to the program"
    )
}

/// Mounts export `vol` of the NFS server at (address, NFS port, MOUNT
/// port) on `mnt` with fuse-nfs (its defaults: attributes cached as FUSE
/// does, calls made by root). Without its log (`-L`): a line for every
/// call, each opening and closing the file, costs the client about a
/// millisecond per small file, whichever server it talks to.
pub(super) fn fuse_nfs(server: (&str, u16, u16), vol: &str, mnt: &Path) -> anyhow::Result<()> {
    let program = fuse_nfs_program()?;
    let (ip, nfs, mount) = server;
    wait_port((ip, nfs), Duration::from_secs(30), None).context("no NFS server")?;
    let url = format!("nfs://{ip}/{vol}?nfsport={nfs}&mountport={mount}&version=3");
    run(Command::new(program)
        .arg("-n")
        .arg(&url)
        .arg("-m")
        .arg(mnt)
        .arg("-a"))
    .with_context(|| format!("cannot mount {url} with fuse-nfs"))?;
    if run(Command::new("mountpoint").arg("-q").arg(mnt)).is_err() {
        bail!("fuse-nfs did not mount {url}");
    }
    Ok(())
}
