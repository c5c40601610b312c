//! pjdfstest, the POSIX conformance suite, run through a mounted replica-3
//! volume by `scripts/conformance.sh` (which builds it from the source
//! snapshot in `../shared/suites`). Every subtest must pass; where mortar
//! cannot behave as a local file system, docs/semantics.md says why.

mod common;
use common::*;

#[test]
fn pjdfstest_passes_through_a_replica_3_volume() {
    // The snapshot lives beside the repository (`../shared/suites`) in the
    // workplace; MORTAR_SUITES names another place.
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let candidates: Vec<std::path::PathBuf> = std::env::var_os("MORTAR_SUITES")
        .map(std::path::PathBuf::from)
        .into_iter()
        .chain([
            here.join("../shared/suites"),
            std::path::PathBuf::from("/work/shared/suites"),
        ])
        .collect();
    let Some(suites) = candidates
        .iter()
        .find(|d| d.join("pjdfstest.tar.gz").exists())
    else {
        eprintln!("SKIPPED: no pjdfstest.tar.gz in any of {candidates:?}; set MORTAR_SUITES");
        return;
    };
    let work = tempfile::Builder::new()
        .prefix("mortar-pjd-")
        .tempdir()
        .unwrap();
    let out = ok(&format!(
        "cd {} && SUITES={} WORK={} MORTAR={BIN} scripts/conformance.sh 2>&1",
        env!("CARGO_MANIFEST_DIR"),
        suites.display(),
        work.path().display()
    ));
    let line = out
        .lines()
        .find(|l| l.starts_with("pjdfstest: "))
        .unwrap_or_else(|| panic!("no summary in:\n{out}"));
    // "pjdfstest: 8798 subtests, 0 failed (Result: PASS)"
    let num = |word: &str| -> u64 {
        let w: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
        let i = w.iter().position(|x| *x == word).unwrap();
        w[i - 1].parse().unwrap_or(u64::MAX)
    };
    let log = std::fs::read_to_string(work.path().join("pjdfstest.log")).unwrap_or_default();
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Failed") || l.contains("Wstat"))
        .collect();
    assert!(num("subtests") > 8000, "{out}");
    assert_eq!(num("failed"), 0, "{out}\n{}", failed.join("\n"));
}
