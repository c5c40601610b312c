//! What installs mortar as a service: the daemon's systemd unit.

mod common;
use common::*;

/// The unit parses cleanly (`systemd-analyze verify`, which needs no
/// running systemd), with the daemon this build made.
#[test]
fn the_daemons_systemd_unit_is_valid() {
    if sh("command -v systemd-analyze").status.code() != Some(0) {
        eprintln!("systemd-analyze not installed: skipped");
        return;
    }
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/packaging/systemd/mortar.service"
    ))
    .unwrap();
    for want in [
        "Restart=on-failure",
        "KillMode=process",
        "Before=remote-fs-pre.target",
    ] {
        assert!(unit.contains(want), "{want}");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mortar.service");
    std::fs::write(&file, unit.replace("/usr/local/sbin/mortar", BIN)).unwrap();
    let o = sh(&format!("systemd-analyze verify {} 2>&1", file.display()));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && !said.contains("mortar.service"),
        "{said}"
    );
}
