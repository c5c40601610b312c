//! The brick process alone (`mortar brick` without the rest of the CLI):
//! the daemon starts this one when it is installed beside it. A smaller
//! program starts faster: at 300 servers on one machine, starting 300
//! bricks was half of a `volume start`'s work, most of it the loading,
//! relocating and paging in of a program (docs/benchmarks.md).
//!
//! `mortar-brick --standby` is the program started ahead of need: loaded,
//! it waits for its arguments on its standard input (one JSON list), so
//! that the daemon starts a brick without waiting for a program to load.
//!
//! `mortar-brick --host` is a brick host: one process for all of a
//! server's bricks (`cluster.brick-multiplex`, `brickd::host`).

use clap::Parser;
use std::process::ExitCode;

/// Serve one brick (started by the management daemon).
#[derive(Parser)]
#[command(
    name = "mortar-brick",
    version,
    after_help = "`mortar-brick --standby` is the program the daemon loads ahead of need: it reads the options above as one JSON list of strings on its standard input, then serves that brick.\n`mortar-brick --host --help`: one process serving all of a server's bricks (cluster.brick-multiplex)."
)]
struct Cli {
    #[command(flatten)]
    brick: mortar::brickd::BrickArgs,
}

/// Tells the daemon why this brick cannot start, as a brick that goes
/// offline does.
fn offline(reason: &str) -> ExitCode {
    let first = reason.lines().next().unwrap_or_default();
    println!(
        "{}",
        mortar::mgmt::supervise::said::Said::Offline(format!("cannot start the brick: {first}"))
    );
    ExitCode::FAILURE
}

/// Serve all of a server's bricks in one process (started by the
/// management daemon, which attaches them).
#[derive(Parser)]
#[command(name = "mortar-brick --host", version)]
struct HostCli {
    #[command(flatten)]
    host: mortar::brickd::host::HostArgs,
}

fn main() -> ExitCode {
    let _fail_points = mortar::process::init_fail_points();
    let mut args = std::env::args();
    let program = args.next().unwrap_or_else(|| "mortar-brick".into());
    let first = args.next();
    let standby = first.as_deref() == Some("--standby");
    let argv: Vec<String> = if standby {
        match mortar::brickd::standby_args() {
            None => return ExitCode::SUCCESS,
            Some(Err(e)) => return offline(&e.to_string()),
            Some(Ok(more)) => {
                let argv: Vec<String> = std::iter::once(program).chain(more).collect();
                mortar::brickd::show_command_line(&argv);
                argv
            }
        }
    } else {
        std::iter::once(program).chain(first).chain(args).collect()
    };
    // A brick host (the standby program may become one too).
    if argv.get(1).is_some_and(|a| a == "--host") {
        let host = argv[..1].iter().chain(&argv[2..]);
        let cli = match HostCli::try_parse_from(host) {
            Ok(c) => c,
            Err(e) => e.exit(),
        };
        return match mortar::brickd::host::main(&cli.host) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let cli = match Cli::try_parse_from(&argv) {
        Ok(c) => c,
        Err(e) if standby => return offline(&e.to_string()),
        Err(e) => e.exit(),
    };
    match mortar::brickd::main(&cli.brick) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
