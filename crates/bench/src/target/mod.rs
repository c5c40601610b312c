//! What a benchmark runs against, set up on this host and torn down after:
//! the local disk, a mortar volume of the requested shape (on a private
//! management daemon, so a running one is never touched), a GlusterFS volume
//! of the same shape through the installed `gluster` CLI, or any directory.

mod nfs;

use crate::undo;
use anyhow::{bail, Context};
use mortar::mgmt::rpc::{self, Request, Response};
use mortar::mount::{self, MountArgs};
use nfs::{fuse_nfs, ganesha, GANESHA_MNT_PORT, GANESHA_NFS_PORT, NFS_PORT};
pub use nfs::{rpcbind, Access};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Port of the benchmark's private management daemon.
pub const BENCH_MGMT_PORT: u16 = 24198;

/// A volume shape: `replica` bricks per set, `sets` sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub replica: usize,
    pub sets: usize,
    /// Parity bricks per set of a dispersed volume (`replica` is then the
    /// disperse count); 0 for copies.
    pub redundancy: usize,
    /// Bricks of each set taken down before the workloads run (the first
    /// of each set: a dispersed set's data bricks, so reads decode).
    pub down: usize,
}

impl Shape {
    /// `replica3`, `replica2`, `distribute4` (or `4`), `2x3` (2 sets of
    /// replica 3), `disperse4+2` (4 data and 2 parity bricks).
    pub fn parse(s: &str) -> anyhow::Result<Shape> {
        let num = |v: &str| {
            v.parse::<usize>()
                .with_context(|| format!("bad volume shape {s}"))
        };
        let shape = if let Some((k, r)) = s.strip_prefix("disperse").and_then(|x| x.split_once('+'))
        {
            let (k, r) = (num(k)?, num(r)?);
            Shape {
                replica: k + r,
                sets: 1,
                redundancy: r,
                down: 0,
            }
        } else if let Some(n) = s.strip_prefix("replica") {
            Shape {
                replica: num(n)?,
                sets: 1,
                redundancy: 0,
                down: 0,
            }
        } else if let Some(n) = s.strip_prefix("distribute") {
            Shape {
                replica: 1,
                sets: num(n)?,
                redundancy: 0,
                down: 0,
            }
        } else if let Some((a, b)) = s.split_once('x') {
            Shape {
                replica: num(b)?,
                sets: num(a)?,
                redundancy: 0,
                down: 0,
            }
        } else {
            Shape {
                replica: 1,
                sets: num(s)?,
                redundancy: 0,
                down: 0,
            }
        };
        let bad_disperse =
            shape.redundancy > 0 && (2 * shape.redundancy >= shape.replica || shape.replica < 3);
        if shape.replica == 0 || shape.sets == 0 || shape.bricks() > 64 || bad_disperse {
            bail!("bad volume shape {s}");
        }
        Ok(shape)
    }
    /// The shape with `down` bricks of each set down: no more than its
    /// redundancy, or for copies than leaves a majority up (the quorum).
    pub fn with_down(self, down: usize) -> anyhow::Result<Shape> {
        let most = match self.redundancy {
            0 => (self.replica - 1) / 2,
            r => r,
        };
        if down > most {
            bail!(
                "--down {down}: a {} volume serves with at most {most} brick(s) of each set down",
                self.label()
            );
        }
        Ok(Shape { down, ..self })
    }

    /// The bricks taken down: the first `down` of each set, 0-based.
    pub fn down_bricks(&self) -> Vec<usize> {
        (0..self.sets)
            .flat_map(|s| (0..self.down).map(move |j| s * self.replica + j))
            .collect()
    }

    pub fn bricks(&self) -> usize {
        self.replica * self.sets
    }
    pub fn label(&self) -> String {
        match self.down {
            0 => self.healthy_label(),
            n => format!("{}, {n} brick(s) of each set down", self.healthy_label()),
        }
    }

    fn healthy_label(&self) -> String {
        if self.redundancy > 0 {
            let (k, r) = (self.replica - self.redundancy, self.redundancy);
            return match self.sets {
                1 => format!("disperse {k} + {r}"),
                n => format!("{n} x ({k} + {r})"),
            };
        }
        match (self.replica, self.sets) {
            (1, n) => format!("distribute {n}"),
            (r, 1) => format!("replica {r}"),
            (r, n) => format!("{n} x {r}"),
        }
    }
}

pub struct Target {
    pub name: String,
    /// Where the workloads run (a directory inside the mount).
    pub dir: PathBuf,
    /// The mount point, for targets that are mounts.
    pub mnt: Option<PathBuf>,
    /// Where its bytes land on the local disk (a volume's bricks), for
    /// the `space` workload.
    pub store: Vec<PathBuf>,
    /// Its steps in `undo`, run at close or drop.
    teardown: Vec<u64>,
}

impl Target {
    /// Records the mount the target just made: unmounted at teardown, and
    /// the workloads run in a directory inside it.
    fn mounted(mut self, mnt: PathBuf) -> anyhow::Result<Target> {
        let m2 = mnt.clone();
        self.teardown.push(undo::push(move || umount(&m2)));
        self.dir = mnt.join("work");
        self.mnt = Some(mnt);
        std::fs::create_dir_all(&self.dir)?;
        Ok(self)
    }

    /// Takes it down (also done when it is dropped).
    pub fn close(self) {}

    /// Runs these `undo` steps too when it is taken down.
    pub fn also_undo(&mut self, steps: Vec<u64>) {
        self.teardown.extend(steps);
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        undo::run(&self.teardown);
    }
}

fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{:?} failed: {}{}",
            cmd,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn umount(dir: &Path) {
    for _ in 0..50 {
        if Command::new("umount")
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("umount").arg("-l").arg(dir).status();
}

pub fn local(base: &Path) -> anyhow::Result<Target> {
    scratch("local".into(), base.join("local"))
}

/// Target `name`: directory `dir`, made now and removed after.
fn scratch(name: String, dir: PathBuf) -> anyhow::Result<Target> {
    std::fs::create_dir_all(&dir)?;
    let d = dir.clone();
    Ok(Target {
        name,
        store: vec![dir.clone()],
        dir,
        mnt: None,
        teardown: vec![undo::push(move || {
            let _ = std::fs::remove_dir_all(d);
        })],
    })
}

/// Any directory, e.g. another file system's mount.
pub fn directory(path: &Path) -> anyhow::Result<Target> {
    if !path.is_dir() {
        bail!("--target {}: not a directory", path.display());
    }
    let dir = path.join(format!("mortar-bench-{}", std::process::id()));
    scratch(path.display().to_string(), dir)
}

/// bindfs (a pass-through FUSE file system) over a directory of the local
/// disk: what one FUSE hop costs, with no network and no replicas.
pub fn bindfs(base: &Path) -> anyhow::Result<Target> {
    if Command::new("bindfs").arg("--version").output().is_err() {
        bail!("bindfs is not installed here (apt-get install bindfs), so it cannot be measured");
    }
    let root = base.join("bindfs");
    let _ = std::fs::remove_dir_all(&root);
    let (src, mnt) = (root.join("src"), root.join("mnt"));
    std::fs::create_dir_all(&src)?;
    std::fs::create_dir_all(&mnt)?;
    let t = Target {
        name: "bindfs".into(),
        dir: PathBuf::new(),
        mnt: None,
        store: vec![src.clone()],
        teardown: vec![undo::push(move || {
            let _ = std::fs::remove_dir_all(&root);
        })],
    };
    if let Err(e) = run(Command::new("bindfs").arg(&src).arg(&mnt)) {
        t.close();
        return Err(e);
    }
    t.mounted(mnt)
}

async fn ask(addr: &str, req: Request) -> anyhow::Result<()> {
    match rpc::call(addr, &req).await.map_err(anyhow::Error::msg)? {
        Response::Err(e) => bail!("{e}"),
        _ => Ok(()),
    }
}

/// Starts a private daemon, creates and starts a volume with `options`
/// set, mounts it. `name` is the target's (and its directory's); each
/// has a daemon of its own, the first on `BENCH_MGMT_PORT`, the next
/// below it.
pub fn mortar(
    base: &Path,
    shape: Shape,
    name: &str,
    nth: u16,
    options: &[(&str, &str)],
    access: Access,
) -> anyhow::Result<Target> {
    let root = base.join(name);
    std::fs::create_dir_all(&root)?;
    let log = std::fs::File::create(root.join("daemon.log"))?;
    let port = BENCH_MGMT_PORT - nth;
    let addr = format!("127.0.0.1:{port}");
    // Another daemon there would be measured (and changed) in its place.
    if let Err(e) = std::net::TcpListener::bind(&addr) {
        bail!("the benchmark's own daemon needs {addr}, which is taken ({e}): stop what listens there (`ss -ltnp`)");
    }
    let mut daemon: Child = Command::new(mortar::process::mortar_program())
        .args([
            "daemon",
            "--listen",
            &addr,
            "--host",
            "127.0.0.1",
            "--state-dir",
        ])
        .arg(root.join("state"))
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let mut teardown: Vec<u64> = Vec::new();
    let r2 = root.clone();
    teardown.push(undo::push(move || {
        let _ = std::fs::remove_dir_all(&r2);
    }));
    let pid = daemon.id();
    teardown.push(undo::push(move || {
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let _ = daemon.wait();
    }));
    let t = Target {
        name: name.into(),
        dir: PathBuf::new(),
        mnt: None,
        store: (1..=shape.bricks())
            .map(|i| root.join(format!("bricks/b{i}")))
            .collect(),
        teardown,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    // The daemon makes its pool's certificates as it starts; the
    // benchmark is its administrator.
    let credential = mortar::mgmt::authority::admin_credential(&root.join("state"));
    while mortar::protocol::tls::install_file(&credential).is_err()
        || rt
            .block_on(rpc::call(&addr, &Request::VolumeInfo { name: None }))
            .is_err()
    {
        if Instant::now() > deadline {
            t.close();
            bail!(
                "the benchmark's mortar daemon did not start; see {}",
                root.join("daemon.log").display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let bricks: Vec<String> = (1..=shape.bricks())
        .map(|i| format!("127.0.0.1:{}/bricks/b{i}", root.display()))
        .collect();
    let vol = "mortarbench".to_string();
    let nfs_port = NFS_PORT - nth;
    let made = rt.block_on(create_volume(
        &addr,
        &vol,
        shape,
        bricks,
        options,
        (access == Access::Nfs).then_some(nfs_port),
    ));
    if let Err(e) = made {
        t.close();
        return Err(e.context("cannot set up the mortar volume"));
    }
    let mnt = root.join("mnt");
    std::fs::create_dir_all(&mnt)?;
    let mounted = match access {
        Access::Native => mount::mount_background(&MountArgs {
            source: format!("127.0.0.1:/{vol}"),
            dir: mnt.clone(),
            port,
            foreground: false,
            log: Some(root.join("client.log")),
            options: vec![format!("credential={}", credential.display())],
        }),
        Access::Nfs => fuse_nfs(("127.0.0.1", nfs_port, nfs_port), &vol, &mnt),
    };
    if let Err(e) = mounted {
        t.close();
        return Err(e);
    }
    let t = t.mounted(mnt)?;
    let down = rt.block_on(async {
        for i in shape.down_bricks() {
            let brick = format!("127.0.0.1:{}/bricks/b{}", root.display(), i + 1);
            ask(
                &addr,
                Request::VolumeResetBrick {
                    name: vol.clone(),
                    brick,
                    down: true,
                },
            )
            .await?;
        }
        anyhow::Ok(())
    });
    if let Err(e) = down {
        t.close();
        return Err(e.context("cannot take the mortar bricks down"));
    }
    Ok(t)
}

/// Creates volume `vol` of `shape` on `bricks` with `options` set, served
/// over NFS at `nfs` if given, and starts it.
async fn create_volume(
    addr: &str,
    vol: &str,
    shape: Shape,
    bricks: Vec<String>,
    options: &[(&str, &str)],
    nfs: Option<u16>,
) -> anyhow::Result<()> {
    let set = |name: &str, key: &str, value: &str| Request::VolumeSet {
        name: name.into(),
        key: key.into(),
        value: value.into(),
    };
    if let Some(port) = nfs {
        ask(addr, set("all", "nfs.port", &port.to_string())).await?;
        // NFS-Ganesha (glusterfs-nfs) registers with the machine's
        // rpcbind, which the bench may start: the bench's clients are
        // given the ports.
        ask(addr, set("all", "nfs.register-with-portmap", "off")).await?;
    }
    let create = Request::VolumeCreate {
        name: vol.into(),
        replica: shape.replica,
        arbiter: 0,
        redundancy: shape.redundancy,
        transport: "tcp".into(),
        bricks,
        force: true,
    };
    ask(addr, create).await?;
    let served = [("nfs.disable", "off")];
    let served: &[(&str, &str)] = if nfs.is_some() { &served } else { &[] };
    for (key, value) in options.iter().chain(served) {
        ask(addr, set(vol, key, value)).await?;
    }
    let start = Request::VolumeStart {
        name: vol.into(),
        force: false,
    };
    ask(addr, start).await
}

/// A GlusterFS volume of the same shape, through the `gluster` CLI,
/// mounted with its FUSE client, or (`Access::Nfs`) served by NFS-Ganesha
/// with its Gluster module and mounted with fuse-nfs (`rpcbind` must run:
/// Ganesha registers with it).
pub fn glusterfs(
    base: &Path,
    shape: Shape,
    groups: &[String],
    access: Access,
) -> anyhow::Result<Target> {
    if access == Access::Nfs && Command::new("ganesha.nfsd").arg("-v").output().is_err() {
        bail!("NFS-Ganesha is not installed here (apt-get install nfs-ganesha nfs-ganesha-gluster), so GlusterFS over NFS cannot be measured");
    }
    if Command::new("gluster").arg("--version").output().is_err() {
        bail!("GlusterFS is not installed here (apt-get install glusterfs-server), so it cannot be measured");
    }
    let running = Command::new("pgrep")
        .arg("-x")
        .arg("glusterd")
        .stdout(Stdio::null())
        .status()?
        .success();
    if !running {
        run(&mut Command::new("glusterd")).context("cannot start glusterd")?;
    }
    let g = || {
        let mut c = Command::new("gluster");
        c.arg("--mode=script");
        c
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while run(g().args(["volume", "list"])).is_err() {
        if Instant::now() > deadline {
            bail!("glusterd does not answer");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let name = access.name("glusterfs");
    let root = base.join(&name);
    let vol = match access {
        Access::Native => "mortarbenchg",
        Access::Nfs => "mortarbenchgn",
    };
    // A volume left over by an interrupted run is removed first.
    if run(g().args(["volume", "info", vol])).is_ok() {
        let _ = run(g().args(["volume", "stop", vol, "force"]));
        let _ = run(g().args(["volume", "delete", vol]));
    }
    let _ = std::fs::remove_dir_all(&root);
    // gluster creates the bricks, but not their parent.
    std::fs::create_dir_all(root.join("bricks"))?;
    let mut args: Vec<String> = vec!["volume".into(), "create".into(), vol.into()];
    if shape.redundancy > 0 {
        args.extend([
            "disperse".into(),
            shape.replica.to_string(),
            "redundancy".into(),
            shape.redundancy.to_string(),
        ]);
    } else if shape.replica > 1 {
        args.extend(["replica".into(), shape.replica.to_string()]);
    }
    args.extend(["transport".into(), "tcp".into()]);
    args.extend((1..=shape.bricks()).map(|i| format!("{host}:{}/bricks/b{i}", root.display())));
    args.push("force".into());
    run(g().args(&args))?;
    let mut t = Target {
        name: name.clone(),
        dir: PathBuf::new(),
        mnt: None,
        store: (1..=shape.bricks())
            .map(|i| root.join(format!("bricks/b{i}")))
            .collect(),
        teardown: Vec::new(),
    };
    let r2 = root.clone();
    t.teardown.push(undo::push(move || {
        let _ = run(g().args(["volume", "stop", vol, "force"]));
        let _ = run(g().args(["volume", "delete", vol]));
        let _ = std::fs::remove_dir_all(&r2);
    }));
    for group in groups {
        if let Err(e) = run(g().args(["volume", "set", vol, "group", group])) {
            t.close();
            return Err(e.context(format!("cannot set option group {group} on GlusterFS")));
        }
    }
    if let Err(e) = run(g().args(["volume", "start", vol])) {
        t.close();
        return Err(e);
    }
    let mnt = root.join("mnt");
    std::fs::create_dir_all(&mnt)?;
    let mounted = match access {
        Access::Native => run(Command::new("mount")
            .args(["-t", "glusterfs", &format!("{host}:/{vol}")])
            .arg(&mnt))
        .map(drop),
        Access::Nfs => ganesha(&root, &host, vol)
            .map(|steps| t.teardown.extend(steps))
            .and_then(|()| fuse_nfs(("127.0.0.1", GANESHA_NFS_PORT, GANESHA_MNT_PORT), vol, &mnt)),
    };
    if let Err(e) = mounted {
        t.close();
        return Err(e);
    }
    let t = t.mounted(mnt)?;
    for i in shape.down_bricks() {
        let brick = format!("{host}:{}/bricks/b{}", root.display(), i + 1);
        if let Err(e) = run(g().args(["volume", "reset-brick", vol, &brick, "start"])) {
            t.close();
            return Err(e.context("cannot take the GlusterFS bricks down"));
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_degraded_shape_takes_the_first_bricks_of_each_set_down_within_its_redundancy() {
        let d = Shape::parse("disperse4+2").unwrap().with_down(2).unwrap();
        assert_eq!(d.down_bricks(), vec![0, 1]);
        assert_eq!(d.label(), "disperse 4 + 2, 2 brick(s) of each set down");
        assert!(Shape::parse("disperse4+2").unwrap().with_down(3).is_err());
        let r = Shape::parse("2x3").unwrap().with_down(1).unwrap();
        assert_eq!(r.down_bricks(), vec![0, 3]);
        assert!(Shape::parse("replica3").unwrap().with_down(2).is_err());
        assert!(Shape::parse("distribute2").unwrap().with_down(1).is_err());
        assert!(Shape::parse("replica2").unwrap().with_down(0).is_ok());
    }

    #[test]
    fn shapes_parse() {
        assert_eq!(
            Shape::parse("replica3").unwrap(),
            Shape {
                replica: 3,
                sets: 1,
                redundancy: 0,
                down: 0,
            }
        );
        assert_eq!(
            Shape::parse("distribute4").unwrap(),
            Shape {
                replica: 1,
                sets: 4,
                redundancy: 0,
                down: 0,
            }
        );
        assert_eq!(
            Shape::parse("4").unwrap(),
            Shape {
                replica: 1,
                sets: 4,
                redundancy: 0,
                down: 0,
            }
        );
        assert_eq!(
            Shape::parse("2x3").unwrap(),
            Shape {
                replica: 3,
                sets: 2,
                redundancy: 0,
                down: 0,
            }
        );
        assert_eq!(Shape::parse("2x3").unwrap().label(), "2 x 3");
        let d = Shape::parse("disperse4+2").unwrap();
        assert_eq!(
            (d.bricks(), d.redundancy, d.label().as_str()),
            (6, 2, "disperse 4 + 2")
        );
        assert!(Shape::parse("disperse2+2").is_err());
        assert!(Shape::parse("replica0").is_err());
        assert!(Shape::parse("lots").is_err());
    }
}
