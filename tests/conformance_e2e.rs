//! The conformance suites, run through mounted replica-3 volumes by
//! `scripts/conformance.sh` (which builds them from the source snapshots in
//! `../shared/suites`): all of pjdfstest, and a fast subset of xfstests
//! (the whole `-g quick` group is run by hand, docs/conformance.md). Every
//! test run must pass; where mortar cannot behave as a local file system,
//! docs/semantics.md says why.

mod common;
use common::*;
use std::path::PathBuf;

/// The directory holding the suites' snapshots, if there is one.
fn suites(file: &str) -> Option<PathBuf> {
    // The snapshots live beside the repository (`../shared/suites`) in the
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
    let found = candidates.iter().find(|d| d.join(file).exists()).cloned();
    if found.is_none() {
        eprintln!("SKIPPED: no {file} in any of {candidates:?}; set MORTAR_SUITES");
    }
    found
}

#[test]
fn pjdfstest_passes_through_a_replica_3_volume() {
    let Some(suites) = suites("pjdfstest.tar.gz") else {
        return;
    };
    let work = tempfile::Builder::new()
        .prefix("mortar-pjd-")
        .tempdir()
        .unwrap();
    let out = ok(&format!(
        "cd {} && SUITES={} WORK={} MORTAR={BIN} scripts/conformance.sh pjdfstest 2>&1",
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

/// The xfstests that exercise data paths hardest (fsx, fsx with AIO,
/// fsstress and `rm -rf` of its tree) and set-id clearing: about two
/// minutes, so that CI catches their regressions.
const XFSTESTS_SUBSET: &str = "generic/013 generic/075 generic/112 generic/193";

#[test]
fn an_xfstests_subset_passes_through_replica_3_volumes() {
    let Some(suites) = suites("xfstests.tar.gz") else {
        return;
    };
    let work = tempfile::Builder::new()
        .prefix("mortar-xfs-")
        .tempdir()
        .unwrap();
    let out = ok(&format!(
        "cd {} && SUITES={} WORK={} MORTAR={BIN} IP=127.0.77.2 XFSTESTS='{XFSTESTS_SUBSET}' scripts/conformance.sh xfstests 2>&1",
        env!("CARGO_MANIFEST_DIR"),
        suites.display(),
        work.path().display()
    ));
    let line = out
        .lines()
        .find(|l| l.starts_with("xfstests: "))
        .unwrap_or_else(|| panic!("no summary in:\n{out}"));
    // "xfstests: 4 run, 4 passed, 0 failed, 0 not run"
    let log = std::fs::read_to_string(work.path().join("xfstests.log")).unwrap_or_default();
    assert!(line.contains(" 0 failed"), "{out}\n{log}");
    assert!(line.contains(" 0 not run"), "{out}\n{log}");
}
