//! `mortar-bench` (also run as `mortar bench`): the benchmark on its own,
//! so that the servers' programs carry no plotting.

use clap::Parser;
use std::process::ExitCode;

/// Benchmark mortar beside the local disk, GlusterFS and bindfs (see
/// docs/benchmarks.md).
#[derive(Parser)]
#[command(name = "mortar bench", bin_name = "mortar bench", version)]
struct Cli {
    #[command(flatten)]
    bench: mortar_bench::BenchArgs,
}

fn main() -> ExitCode {
    match mortar_bench::run(Cli::parse().bench) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            mortar_bench::undo::settle();
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
