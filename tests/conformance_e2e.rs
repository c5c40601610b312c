//! pjdfstest, the POSIX conformance suite, run through a mounted replica-3
//! volume by `scripts/conformance.sh` (which builds it from the source
//! snapshot in `../shared/suites`). Every subtest must pass; where mortar
//! cannot behave as a local file system, docs/semantics.md says why.

mod common;
use common::*;

#[test]
fn pjdfstest_passes_through_a_replica_3_volume() {
    let suites = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/suites");
    if !suites.join("pjdfstest.tar.gz").exists() {
        panic!("pjdfstest sources are missing: {}", suites.display());
    }
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
