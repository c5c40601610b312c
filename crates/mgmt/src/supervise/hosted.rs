//! Bricks served by the server's brick host (`cluster.brick-multiplex`):
//! one process for all of them, started by the first brick that needs it,
//! each brick attached, fed its options and detached over the host's
//! control socket (the lines are in `said`).

use super::program::{brick_program, hand_over, spawn_brick, take_standby};
use super::*;

/// The pid of the brick host whose pid file is in `run`, if it is alive.
pub(super) fn host_pid(run: &std::path::Path) -> Option<u32> {
    let text = std::fs::read_to_string(run.join(HOST_PID_FILE)).ok()?;
    let mut words = text.split_whitespace();
    let pid: u32 = words.next()?.parse().ok()?;
    let since: u64 = words.nth(1)?.parse().ok()?;
    (mortar_process::start_time(pid) == Some(since) && alive(pid)).then_some(pid)
}

/// Serves the brick of `spec` in the server's brick host (started when
/// none runs): attaches it over the host's control socket, feeds it its
/// options there and detaches it when told to stop; attaches it again to
/// a new host when the host dies. An attach of a brick the host serves
/// already (a daemon restarted) takes it over without a pause.
pub(super) async fn supervise_hosted(
    spec: &BrickSpec,
    args: &[std::ffi::OsString],
    info: &BrickInfo,
    mut stop: watch::Receiver<bool>,
) {
    use tokio::io::AsyncWriteExt;
    let brick = spec.path.display().to_string();
    let attach = match said::attach(args) {
        Some(a) => a + "\n",
        None => {
            let reason = "its arguments are not text: a brick host cannot take it".to_string();
            tracing::error!(%brick, "{reason}");
            info.set(|i| i.offline = Some(reason));
            let _ = stop.changed().await;
            return;
        }
    };
    loop {
        if *stop.borrow() {
            return;
        }
        let stream = match host_connect(spec).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(%brick, "cannot reach the brick host: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let (rd, mut wr) = stream.into_split();
        if wr.write_all(attach.as_bytes()).await.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        // The host says LISTENING or OFFLINE, now or later.
        let run = spec.run.clone();
        let mut reader = follow_said(rd, info.clone(), brick.clone(), move || host_pid(&run));
        let stopping = {
            let feeding = async {
                if let Some(feed) = spec.options.as_ref() {
                    feed_options(&mut wr, feed).await
                }
                std::future::pending::<()>().await
            };
            tokio::select! {
                _ = feeding => unreachable!(),
                _ = &mut reader => false,
                _ = stop.changed() => true,
            }
        };
        if stopping {
            let _ = wr.write_all(format!("{}\n", said::DETACH).as_bytes()).await;
            if tokio::time::timeout(Duration::from_secs(5), &mut reader)
                .await
                .is_err()
            {
                tracing::warn!(%brick, "the brick host did not say the brick was detached");
                reader.abort();
            }
            stopped(spec, info);
            return;
        }
        if ended(info, &brick) {
            let _ = stop.changed().await;
            return;
        }
        tracing::warn!(%brick, "the brick host ended; attaching the brick again");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Takes the brick of `spec` out of the brick host that serves it (it is
/// to have a process of its own): attaches it, to take it over, and
/// detaches it at once.
pub(super) async fn release(spec: &BrickSpec, args: &[std::ffi::OsString]) {
    use tokio::io::AsyncWriteExt;
    let brick = spec.path.display().to_string();
    let Ok(stream) = tokio::net::UnixStream::connect(spec.run.join(HOST_SOCKET)).await else {
        return;
    };
    let Some(attach) = said::attach(args) else {
        return;
    };
    let (rd, mut wr) = stream.into_split();
    let said = async {
        wr.write_all(format!("{attach}\n{}\n", said::DETACH).as_bytes())
            .await?;
        let mut out = BufReader::new(rd).lines();
        while out.next_line().await?.is_some() {}
        Ok::<_, std::io::Error>(())
    };
    match tokio::time::timeout(Duration::from_secs(5), said).await {
        Ok(Ok(())) => tracing::info!(%brick, "brick taken out of the brick host"),
        _ => tracing::warn!(%brick, "the brick host did not let the brick go"),
    }
}

/// A connection to the server's brick host, which is started first if
/// none answers.
async fn host_connect(spec: &BrickSpec) -> std::io::Result<tokio::net::UnixStream> {
    /// One start at a time: the bricks of a volume start together.
    static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let socket = spec.run.join(HOST_SOCKET);
    if let Ok(s) = tokio::net::UnixStream::connect(&socket).await {
        return Ok(s);
    }
    let _one = STARTING.lock().await;
    if let Ok(s) = tokio::net::UnixStream::connect(&socket).await {
        return Ok(s);
    }
    let (exe, first) = brick_program().await;
    let log = spec.logs.join("bricks.log");
    let mut args: Vec<std::ffi::OsString> = vec![
        match first {
            None => "--host".into(),
            Some(_) => "brick-host".into(),
        },
        "--run".into(),
        spec.run.clone().into(),
        "--ip".into(),
        spec.ip.to_string().into(),
        "--server-credential".into(),
        spec.credential.clone().into(),
        "--log-file".into(),
        log.clone().into(),
    ];
    if let Some(p) = spec.port {
        args.extend(["--port".into(), p.to_string().into()]);
    }
    if let Some(ip) = spec.metrics {
        args.extend(["--metrics".into(), ip.to_string().into()]);
    }
    // The program loaded ahead of need becomes the host, if one waits.
    let handed = match first.is_none().then(take_standby).flatten() {
        Some(c) => hand_over(c, &args, false).await,
        None => None,
    };
    let mut child = match handed {
        Some(c) => c,
        None => spawn_brick(&exe, None, &args, false, &log).await?,
    };
    let mut out = BufReader::new(child.stdout.take().expect("piped")).lines();
    let said = tokio::time::timeout(Duration::from_secs(30), out.next_line()).await;
    // Reaped when it exits (it outlives this daemon otherwise).
    tokio::spawn(async move {
        let status = child.wait().await;
        tracing::warn!("the brick host exited ({status:?})");
    });
    match said {
        Ok(Ok(Some(line))) if matches!(Said::parse(&line), Some(Said::Listening(_))) => {
            tracing::info!(pid = ?host_pid(&spec.run), "brick host started: {line}");
        }
        _ => {
            return Err(std::io::Error::other(format!(
                "the brick host did not start (log: {})",
                log.display()
            )))
        }
    }
    tokio::net::UnixStream::connect(&socket).await
}
