//! The brick process alone (`mortar brick` without the rest of the CLI):
//! the daemon starts this one when it is installed beside it. A smaller
//! program starts faster: at 300 servers on one machine, starting 300
//! bricks was half of a `volume start`'s work, most of it the loading,
//! relocating and paging in of a program (docs/benchmarks.md).

use clap::Parser;
use std::process::ExitCode;

/// Serve one brick (started by the management daemon).
#[derive(Parser)]
#[command(name = "mortar-brick", version)]
struct Cli {
    #[command(flatten)]
    brick: mortar::cli::BrickArgs,
}

fn main() -> ExitCode {
    let _fail_points = mortar::process::init_fail_points();
    let cli = Cli::parse();
    mortar::process::init_logs();
    match mortar::mgmt::brick::main(&cli.brick) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
