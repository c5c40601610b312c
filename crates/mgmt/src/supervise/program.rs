//! The programs that run bricks: the one to start (`mortar-brick` beside
//! the daemon, else `mortar brick`), started in a process group of its
//! own, and one kept loaded ahead of need.

use super::*;

/// Starts the brick program (`exe` `first` `args`) in a process group of
/// its own, its standard output piped (it says LISTENING or OFFLINE there)
/// and its standard input too when options are `fed` to it.
pub(super) async fn spawn_brick(
    exe: &std::path::Path,
    first: Option<&str>,
    args: &[std::ffi::OsString],
    fed: bool,
    log: &std::path::Path,
) -> std::io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(first)
        .args(args)
        .stdin(match fed {
            true => Stdio::piped(),
            false => Stdio::null(),
        })
        .stdout(Stdio::piped())
        // Its own process group: a signal to the daemon's group
        // (a terminal's ^C) does not reach the bricks.
        .process_group(0);
    // Spawned from the blocking pool: `posix_spawn` holds the
    // calling thread until the child has called exec, and the
    // daemon's one thread must not stand still meanwhile (with
    // 300 servers on one machine a new process waits long for a
    // CPU: a leader held so sent the start's entry to the
    // learners 270 ms after it was committed instead of 50 to
    // 100). Its standard error goes to its log too, for what it
    // says before it opens the log itself.
    let logf = log.to_path_buf();
    tokio::task::spawn_blocking(move || {
        if let Ok(f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&logf)
        {
            cmd.stderr(f);
        }
        cmd.spawn()
    })
    .await
    .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

/// A brick program started ahead of need (`mortar-brick --standby`): it
/// has loaded and waits on its standard input for the arguments of the
/// brick it is to serve, so that a brick start does not wait for a
/// program to load (at 300 servers on one machine, loading 300 programs
/// at once was the largest part of a `volume start`). One per daemon,
/// taken by the next brick start and replaced `STANDBY_AGAIN_AFTER`
/// later, once a start's other bricks are on their way. It exits when
/// the daemon does (its input ends).
static STANDBY: Mutex<Option<tokio::process::Child>> = Mutex::new(None);

const STANDBY_AGAIN_AFTER: Duration = Duration::from_secs(2);

/// Starts a brick program ahead of need unless one waits already, or
/// bricks run as `mortar brick` (which has no standby).
pub(crate) async fn keep_standby() {
    let (exe, first) = brick_program().await;
    if first.is_some() || STANDBY.lock().unwrap().is_some() {
        return;
    }
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("--standby")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    match tokio::task::spawn_blocking(move || cmd.spawn()).await {
        Ok(Ok(c)) => {
            let mut standby = STANDBY.lock().unwrap();
            // Else another came first: this one exits as its input ends.
            if standby.is_none() {
                *standby = Some(c);
            }
        }
        Ok(Err(e)) => tracing::warn!("cannot start a brick program ahead of need: {e}"),
        Err(_) => {}
    }
}

/// The brick program started ahead of need, if one is alive; another is
/// started a moment later.
pub(super) fn take_standby() -> Option<tokio::process::Child> {
    let mut c = STANDBY.lock().unwrap().take()?;
    tokio::spawn(async {
        tokio::time::sleep(STANDBY_AGAIN_AFTER).await;
        keep_standby().await;
    });
    matches!(c.try_wait(), Ok(None)).then_some(c)
}

/// Gives the standby program `c` the brick's arguments; None if it
/// cannot take them (it died, or an argument is not text). With `more`,
/// its input stays open for the options that follow.
pub(super) async fn hand_over(
    mut c: tokio::process::Child,
    args: &[std::ffi::OsString],
    more: bool,
) -> Option<tokio::process::Child> {
    use tokio::io::AsyncWriteExt;
    let text: Option<Vec<&str>> = args.iter().map(|a| a.to_str()).collect();
    let mut line = serde_json::to_vec(&text?).ok()?;
    line.push(b'\n');
    let mut input = c.stdin.take()?;
    input.write_all(&line).await.ok()?;
    if more {
        c.stdin = Some(input);
    }
    Some(c)
}

/// The program that runs a brick, and its first arguments: `mortar-brick`
/// beside this program when it is installed there and is of this same
/// version (the same brick in a program a fifth of the size, which starts
/// faster), else `mortar brick`. Asked once per daemon, when it starts.
pub(crate) async fn brick_program() -> (PathBuf, Option<&'static str>) {
    static PROGRAM: tokio::sync::OnceCell<(PathBuf, Option<&'static str>)> =
        tokio::sync::OnceCell::const_new();
    PROGRAM
        .get_or_init(|| async {
            let me = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("mortar"));
            let small = me.with_file_name("mortar-brick");
            let answer = tokio::process::Command::new(&small)
                .arg("--version")
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .await;
            let ours = format!("mortar-brick {}", env!("CARGO_PKG_VERSION"));
            match answer {
                Ok(out) if out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == ours => {
                    (small, None)
                }
                Ok(out) => {
                    tracing::warn!(program = %small.display(), answer = %String::from_utf8_lossy(&out.stdout).trim(),
                        "not of this daemon's version ({ours}): bricks run as `mortar brick`");
                    (me, Some("brick"))
                }
                Err(_) => (me, Some("brick")),
            }
        })
        .await
        .clone()
}
