//! The manual pages and shell completions, made from the same definitions
//! as `--help` (clap_mangen, clap_complete): they cannot say anything else.

use super::Cli;
use clap::CommandFactory;
use std::path::{Path, PathBuf};

/// Writes one manual page per command (`mortar.1`, `mortar-volume.1`,
/// `mortar-volume-create.1`, …) to `dir`; returns the files written.
pub fn write_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot make {}: {e}", dir.display()))?;
    clap_mangen::generate_to(Cli::command(), dir)
        .map_err(|e| anyhow::anyhow!("cannot write the pages to {}: {e}", dir.display()))?;
    let mut written: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("mortar") && n.ends_with(".1"))
        })
        .collect();
    written.sort();
    Ok(written)
}

/// Prints the completion script of `shell` for `mortar` (a reader that
/// goes away, `| head`, ends it quietly).
pub fn print_completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    use std::io::Write;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "mortar", &mut script);
    match std::io::stdout().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
