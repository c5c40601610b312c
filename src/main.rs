use clap::Parser;
use mortar::cli::{Cli, Cmd, DEFAULT_SERVER};
use mortar::mount::{self, MountArgs};
use std::process::ExitCode;

/// `mount -t mortar SRC DIR -o OPTS` runs `mount.mortar SRC DIR -o OPTS`
/// (and `mount -t fuse.mortar` runs `mount.fuse.mortar`, as xfstests does).
fn mount_helper_args() -> Option<Vec<String>> {
    let argv0 = std::env::args().next()?;
    if !argv0.ends_with("mount.mortar") && !argv0.ends_with("mount.fuse.mortar") {
        return None;
    }
    let mut out = vec!["mortar".to_string(), "mount".to_string()];
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => {
                if let Some(o) = it.next() {
                    out.push("-o".into());
                    out.push(o);
                }
            }
            // mount(8) passes these; they do not concern us.
            "-n" | "-s" | "-f" | "-v" => {}
            _ => out.push(a),
        }
    }
    Some(out)
}

fn main() -> ExitCode {
    let _fail_points = mortar::process::init_fail_points();
    let cli = match mount_helper_args() {
        Some(args) => Cli::parse_from(args),
        None => Cli::parse(),
    };
    // The options for commands that talk to a daemon do nothing for those
    // that are (or start) one, or mount: refused rather than ignored.
    let serves = matches!(
        cli.cmd,
        Cmd::Daemon(_)
            | Cmd::Brick(_)
            | Cmd::BrickHost(_)
            | Cmd::NfsServer(_)
            | Cmd::Mount(_)
            | Cmd::Bench { .. }
            | Cmd::Man { .. }
            | Cmd::Completions { .. }
    );
    if serves
        && (cli.server != DEFAULT_SERVER || cli.json || cli.up_to_date || cli.credential.is_some())
    {
        eprintln!(
            "--server, --credential, --json and --up-to-date are for commands that talk to a daemon; this one takes none of them{}",
            if matches!(cli.cmd, Cmd::Mount(_)) {
                " (HOST in HOST:/VOLUME names the daemon, --port its port, -o credential=FILE the credential)"
            } else {
                ""
            }
        );
        return ExitCode::FAILURE;
    }
    let json = cli.json;
    let res = match cli.cmd {
        Cmd::Daemon(ref a) => {
            mortar::process::init_logs();
            // One worker: management is light, and a pool of many servers
            // on one machine wakes fewer threads per message.
            run_async_on(Some(1), async {
                let listen: std::net::SocketAddr = a
                    .listen
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--listen {}: {e}", a.listen))?;
                let host = a.host.clone().unwrap_or_else(|| {
                    rustix::system::uname()
                        .nodename()
                        .to_string_lossy()
                        .into_owned()
                });
                let metrics =
                    match a.metrics.as_deref() {
                        None => Some(std::net::SocketAddr::new(
                            listen.ip(),
                            mortar::mgmt::DEFAULT_METRICS_PORT,
                        )),
                        Some("off") => None,
                        Some(m) => Some(m.parse().map_err(|e| {
                            anyhow::anyhow!("--metrics {m}: {e} (ADDR:PORT or off)")
                        })?),
                    };
                mortar::mgmt::daemon::Daemon::run(mortar::mgmt::daemon::Config {
                    listen,
                    host,
                    state_dir: a.state_dir.clone(),
                    metrics,
                })
                .await
                .inspect_err(|e| {
                    // Its bricks run on; a supervisor (the systemd unit)
                    // starts it again, and it adopts them.
                    tracing::error!("the management daemon exits: {e:#}")
                })
            })
        }
        Cmd::Brick(ref a) => mortar::brickd::main(a),
        Cmd::BrickHost(ref a) => mortar::brickd::host::main(a),
        Cmd::NfsServer(ref a) => mortar::nfsd::main(a),
        Cmd::Mount(ref m) => {
            let args = MountArgs {
                source: m.source.clone(),
                dir: m.dir.clone(),
                port: m.port,
                foreground: m.foreground,
                log: m.log_file.clone(),
                options: m.options.clone(),
            };
            if m.foreground {
                mortar::process::init_logs();
                mount::mount_foreground(&args)
            } else {
                mount::mount_background(&args)
            }
        }
        Cmd::Bench { ref args } => bench(args),
        Cmd::Man { ref out } => mortar::cli::manual::write_pages(out)
            .map(|pages| println!("{} manual pages written to {}", pages.len(), out.display())),
        Cmd::Completions { shell } => mortar::cli::manual::print_completions(shell),
        _ => {
            // A command whose reader goes away (`mortar ... | head -1`)
            // ends quietly, as Unix tools do, instead of panicking on
            // EPIPE. Only here: servers must outlive a closed socket.
            // SAFETY: no other thread runs yet; SIG_DFL is a valid action.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            }
            run_async(mortar::cli::run_client(cli))
        }
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e:#}");
            if json {
                println!("{}", mortar::cli::json_failure(&e));
            }
            ExitCode::from(mortar::cli::exit_code(&e))
        }
    }
}

/// `mortar bench`: the benchmark is its own program, `mortar-bench`
/// (the servers' programs carry no plotting); this one becomes it.
fn bench(args: &[std::ffi::OsString]) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let program = mortar::process::program_beside("mortar-bench");
    let e = std::process::Command::new(&program).args(args).exec();
    anyhow::bail!(
        "mortar bench runs {}, which could not start ({e}): build it with `cargo build --release -p mortar-bench` and put it beside mortar",
        program.display()
    )
}

fn run_async<F: std::future::Future<Output = anyhow::Result<()>>>(f: F) -> anyhow::Result<()> {
    run_async_on(None, f)
}

/// Runs `f` on a runtime of `workers` threads (None: one per core).
fn run_async_on<F: std::future::Future<Output = anyhow::Result<()>>>(
    workers: Option<usize>,
    f: F,
) -> anyhow::Result<()> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        b.worker_threads(n);
    }
    b.enable_all().build()?.block_on(f)
}
