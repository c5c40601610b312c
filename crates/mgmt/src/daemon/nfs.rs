//! The NFS server this server runs (`mortar nfs-server`, docs/nfs.md):
//! one process for every started volume with `nfs.disable off`, at
//! `nfs.port` on the daemon's address. It is started again with the new
//! list when the list or the port changes (its clients go on: their
//! handles name the volume and the object, nothing of the process), and
//! again after a second when it exits. It stops with the daemon (told to,
//! or when its input from the daemon ends).

use super::*;
use mortar_nfs::options::NFS_DISABLE;
use std::process::Stdio;

/// The NFS server running here: what it serves, how to stop it.
pub(super) struct NfsProc {
    volumes: Vec<String>,
    port: u16,
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<()>,
}

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
        let old = {
            let mut nfs = self.nfs.lock().unwrap();
            if nfs
                .as_ref()
                .is_some_and(|p| p.volumes == volumes && p.port == port)
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
        args.extend(volumes.iter().map(Into::into));
        tracing::info!(port, volumes = volumes.join(","), "starting the NFS server");
        let (stop, stop_rx) = watch::channel(false);
        let run = self.cfg.state_dir.join("run");
        let log = self.cfg.state_dir.join("logs").join("nfs.log");
        let done = tokio::spawn(supervise_nfs(args, run, log, stop_rx));
        *self.nfs.lock().unwrap() = Some(NfsProc {
            volumes,
            port,
            stop,
            done,
        });
    }
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
    mut stop: watch::Receiver<bool>,
) {
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
                tokio::select! {
                    _ = tokio::time::sleep(AGAIN_AFTER) => continue,
                    _ = stop.changed() => return,
                }
            }
        };
        let _lifeline = child.stdin.take();
        if let Some(pid) = child.id() {
            let _ = std::fs::create_dir_all(&run);
            let _ = std::fs::write(&pid_file, format!("{pid}\n"));
        }
        tokio::select! {
            r = child.wait() => {
                tracing::warn!("the NFS server exited ({}); starting it again", match r {
                    Ok(s) => s.to_string(),
                    Err(e) => e.to_string(),
                });
                tokio::select! {
                    _ = tokio::time::sleep(AGAIN_AFTER) => {}
                    _ = stop.changed() => return,
                }
            }
            _ = stop.changed() => {
                let _ = child.start_kill();
                let _ = child.wait().await;
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
