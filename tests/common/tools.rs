//! The tools and suites tests need: found, built, or reported missing.

use super::*;

/// The directory holding the conformance suites' snapshots (pjdfstest,
/// xfstests), if there is one. They live beside the repository
/// (`../shared/suites`) in the workplace; MORTAR_SUITES names another place.
pub fn suites(file: &str) -> Option<PathBuf> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let candidates: Vec<PathBuf> = std::env::var_os("MORTAR_SUITES")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            here.join("../shared/suites"),
            PathBuf::from("/work/shared/suites"),
        ])
        .collect();
    let found = candidates.iter().find(|d| d.join(file).exists()).cloned();
    if found.is_none() {
        missing(&format!(
            "no {file} in any of {candidates:?}: put the conformance suites' snapshots there, or name their directory in MORTAR_SUITES"
        ));
    }
    found
}

/// What to do when a tool or suite a test needs is not here: the test
/// fails with `what` (what is missing and how to get it), unless
/// MORTAR_SKIP_MISSING is set, when it says it skips and returns.
pub fn missing(what: &str) {
    if std::env::var_os("MORTAR_SKIP_MISSING").is_some() {
        eprintln!("SKIPPED (MORTAR_SKIP_MISSING is set): {what}");
        return;
    }
    panic!("{what} (or set MORTAR_SKIP_MISSING=1 to skip the tests that need it)");
}

/// Whether `tool` is on the PATH; when it is not, `missing` says which
/// Debian package has it.
pub fn have_tool(tool: &str, package: &str) -> bool {
    if sh(&format!("command -v {tool}")).status.success() {
        return true;
    }
    missing(&format!(
        "`{tool}` is not installed: apt-get install {package}"
    ));
    false
}

/// xfstests' fsx (the file system exerciser: random reads, writes,
/// truncates, mapped I/O and fallocates, each checked against a copy kept
/// in memory), compiled on its own from the xfstests snapshot, without
/// xfstests' build; None without the snapshot (`missing`).
pub fn fsx() -> Option<PathBuf> {
    static BUILT: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    let mut built = BUILT.lock().unwrap();
    if let Some(b) = built.as_ref() {
        return Some(b.clone());
    }
    let snapshot = suites("xfstests.tar.gz")?.join("xfstests.tar.gz");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fsx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // What xfstests' configure would write: only the headers fsx.c needs.
    std::fs::write(
        dir.join("config.h"),
        "#include <assert.h>\n#include <getopt.h>\n#include <sys/param.h>\n",
    )
    .unwrap();
    let d = dir.display();
    ok(&format!(
        "tar -xzf {} -C {d} xfstests/ltp/fsx.c xfstests/src xfstests/include && \
         cc -O1 -w -D_GNU_SOURCE -I{d} -I{d}/xfstests/src -I{d}/xfstests/include \
         -DHAVE_SYS_TYPES_H -DHAVE_SYS_STAT_H -DHAVE_UNISTD_H -DHAVE_STDLIB_H \
         -DHAVE_STRING_H -DHAVE_SYS_FCNTL_H -DHAVE_ERR_H -DHAVE_LINUX_FALLOC_H \
         -DHAVE_COPY_FILE_RANGE -DHAVE_SYS_TIME_H -DHAVE_SYS_IOCTL_H -DHAVE_ERRNO_H \
         -DHAVE_SYS_WAIT_H -o {d}/fsx {d}/xfstests/ltp/fsx.c",
        snapshot.display()
    ));
    *built = Some(dir.join("fsx"));
    built.clone()
}
