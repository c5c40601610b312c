//! The NFS server this server runs (`mortar nfs-server`, docs/nfs.md):
//! one process for every started volume with `nfs.disable off`, at
//! `nfs.port` on the daemon's address. It is started again with the new
//! list when the list, the port or `nfs.register-with-portmap` changes
//! (its clients go on: their handles name the volume and the object,
//! nothing of the process), and again after a second when it exits. It
//! stops with the daemon (told to, or when its input from the daemon
//! ends).

use super::*;
use mortar_nfs::options::NFS_DISABLE;
use std::process::Stdio;

/// The NFS server running here: what it serves, how to stop it.
pub(super) struct NfsProc {
    volumes: Vec<String>,
    port: u16,
    /// Whether it registers with the machine's portmapper.
    register: bool,
    /// Its process now, as its supervisor sees it.
    running: Arc<Mutex<Running>>,
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<()>,
}

#[derive(Clone, Default)]
struct Running {
    pid: Option<u32>,
    /// How the last one ended, or why none could start.
    ended: Option<String>,
}

/// How long a server told to stop may take before it is killed.
const STOP_WITHIN: Duration = Duration::from_secs(3);

/// Waits this long before starting an NFS server that exited again.
const AGAIN_AFTER: Duration = Duration::from_secs(1);

impl Daemon {
    /// Runs the NFS server for the volumes that want it, or none.
    pub(super) async fn reconcile_nfs(&self, st: &ClusterState) {
        let mut volumes: Vec<String> = st
            .volumes
            .values()
            .filter(|v| v.status == VolStatus::Started && !NFS_DISABLE.bool(&v.options))
            .map(|v| v.name.clone())
            .collect();
        volumes.sort();
        let port = options::NFS_PORT.int(&st.options) as u16;
        let register = options::NFS_REGISTER_WITH_PORTMAP.bool(&st.options);
        let old = {
            let mut nfs = self.nfs.lock().unwrap();
            if nfs
                .as_ref()
                .is_some_and(|p| p.volumes == volumes && p.port == port && p.register == register)
                || (nfs.is_none() && volumes.is_empty())
            {
                return;
            }
            nfs.take()
        };
        if let Some(old) = old {
            let _ = old.stop.send(true);
            let _ = old.done.await;
        }
        if volumes.is_empty() {
            tracing::info!("no volume is served over NFS: NFS server stopped");
            return;
        }
        let mut args: Vec<std::ffi::OsString> = vec![
            "nfs-server".into(),
            "--listen".into(),
            SocketAddr::new(self.cfg.listen.ip(), port)
                .to_string()
                .into(),
            "--mgmt".into(),
            self.me.mgmt.clone().into(),
            "--server-credential".into(),
            authority::server_credential(&self.cfg.state_dir).into(),
            "--until-stdin-ends".into(),
        ];
        if register {
            args.push("--register-with-portmap".into());
        }
        args.extend(volumes.iter().map(Into::into));
        tracing::info!(port, volumes = volumes.join(","), "starting the NFS server");
        let (stop, stop_rx) = watch::channel(false);
        let run = self.cfg.state_dir.join("run");
        let log = self.cfg.state_dir.join("logs").join("nfs.log");
        let running = Arc::new(Mutex::new(Running::default()));
        let done = tokio::spawn(supervise_nfs(args, run, log, running.clone(), stop_rx));
        *self.nfs.lock().unwrap() = Some(NfsProc {
            volumes,
            port,
            register,
            running,
            stop,
            done,
        });
    }

    /// This server's NFS server: online when its process runs and takes
    /// connections.
    pub(super) async fn nfs_status(&self) -> rpc::NfsStatus {
        let mut st = rpc::NfsStatus {
            host: self.me.host.clone(),
            ..Default::default()
        };
        let running = match &*self.nfs.lock().unwrap() {
            Some(p) => {
                st.volumes = p.volumes.clone();
                st.port = Some(p.port);
                p.running.lock().unwrap().clone()
            }
            None => {
                st.reason = Some("serves no volume".into());
                return st;
            }
        };
        st.pid = running.pid;
        st.reason = running.ended;
        if st.pid.is_none() {
            return st;
        }
        let ip = match self.cfg.listen.ip() {
            ip if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
            ip => ip,
        };
        let at = SocketAddr::new(ip, st.port.unwrap_or_default());
        let connect = tokio::net::TcpStream::connect(at);
        match tokio::time::timeout(Duration::from_secs(2), connect).await {
            Ok(Ok(_)) => {
                st.online = true;
                st.reason = None;
            }
            Ok(Err(e)) => st.reason = Some(format!("takes no connection at {at}: {e}")),
            Err(_) => st.reason = Some(format!("takes no connection at {at} within 2 s")),
        }
        st
    }

    /// The NFS server of every server of the pool, this one first.
    pub(super) async fn nfs_everywhere(self: &Arc<Self>) -> Vec<rpc::NfsStatus> {
        let peers = self.state.lock().unwrap().peers.clone();
        let hosts: Vec<String> = std::iter::once(self.me.host.clone())
            .chain(peers.iter().map(|p| p.host.clone()))
            .collect();
        let reqs = hosts
            .iter()
            .map(|h| (h.clone(), Request::LocalNfs))
            .collect();
        let answers = self.on_hosts(reqs).await;
        hosts
            .into_iter()
            .zip(answers)
            .map(|(host, r)| match r {
                Response::Nfs(s) => s,
                Response::Err(e) => rpc::NfsStatus {
                    host,
                    reason: Some(e.to_string()),
                    ..Default::default()
                },
                other => rpc::NfsStatus {
                    host,
                    reason: Some(format!("unexpected answer {other:?}")),
                    ..Default::default()
                },
            })
            .collect()
    }
}

/// The rows of volume `name` among the pool's NFS servers: a server whose
/// NFS server does not serve it (yet) is offline for it.
pub(super) fn nfs_of(name: &str, all: &[rpc::NfsStatus]) -> Vec<rpc::NfsStatus> {
    all.iter()
        .map(|s| {
            if s.volumes.iter().any(|v| v == name) {
                return s.clone();
            }
            rpc::NfsStatus {
                host: s.host.clone(),
                port: None,
                pid: None,
                online: false,
                volumes: Vec::new(),
                reason: Some(
                    s.reason
                        .clone()
                        .unwrap_or_else(|| format!("does not serve {name} yet")),
                ),
            }
        })
        .collect()
}

impl Daemon {
    /// Stops the NFS server (the daemon is stopping).
    pub(super) async fn stop_nfs(&self) {
        let running = self.nfs.lock().unwrap().take();
        if let Some(p) = running {
            let _ = p.stop.send(true);
            let _ = p.done.await;
        }
    }
}

/// Keeps `mortar ARGS` running until told to stop; its pid is kept in
/// `run/nfs.pid`, so that one a former daemon left is stopped first.
async fn supervise_nfs(
    args: Vec<std::ffi::OsString>,
    run: PathBuf,
    log: PathBuf,
    running: Arc<Mutex<Running>>,
    mut stop: watch::Receiver<bool>,
) {
    let ended = |why: String| {
        *running.lock().unwrap() = Running {
            pid: None,
            ended: Some(why),
        };
    };
    let pid_file = run.join("nfs.pid");
    stop_left_over(&pid_file);
    loop {
        let mut cmd = tokio::process::Command::new(mortar_process::mortar_program());
        // Its input is a pipe from here: when this daemon is gone (even
        // killed), it ends, and the NFS server exits.
        cmd.args(&args)
            .stdin(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Ok(f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
        {
            if let Ok(g) = f.try_clone() {
                cmd.stdout(g);
            }
            cmd.stderr(f);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!("cannot start the NFS server: {e}");
                ended(format!("cannot start: {e}"));
                tokio::select! {
                    _ = tokio::time::sleep(AGAIN_AFTER) => continue,
                    _ = stop.changed() => return,
                }
            }
        };
        let lifeline = child.stdin.take();
        if let Some(pid) = child.id() {
            let _ = std::fs::create_dir_all(&run);
            let _ = std::fs::write(&pid_file, format!("{pid}\n"));
            running.lock().unwrap().pid = Some(pid);
        }
        tokio::select! {
            r = child.wait() => {
                let how = match r {
                    Ok(s) => s.to_string(),
                    Err(e) => e.to_string(),
                };
                tracing::warn!("the NFS server exited ({how}); starting it again");
                ended(format!("exited ({how}); see logs/nfs.log"));
                tokio::select! {
                    _ = tokio::time::sleep(AGAIN_AFTER) => {}
                    _ = stop.changed() => return,
                }
            }
            _ = stop.changed() => {
                // Told first (its input ends: it takes its registration
                // out of the portmapper and exits), then killed.
                drop(lifeline);
                if tokio::time::timeout(STOP_WITHIN, child.wait()).await.is_err() {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                }
                let _ = std::fs::remove_file(&pid_file);
                return;
            }
        }
    }
}

/// Stops the NFS server a former daemon here left running (its pid file
/// names it, and it is an NFS server still).
fn stop_left_over(pid_file: &Path) {
    let Ok(text) = std::fs::read_to_string(pid_file) else {
        return;
    };
    let Ok(pid) = text.trim().parse::<i32>() else {
        return;
    };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if cmdline.split(|b| *b == 0).any(|a| a == b"nfs-server") {
        tracing::info!(pid, "stopping the NFS server a former daemon left");
        // SAFETY: kill(2) with a pid and a signal number.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}
