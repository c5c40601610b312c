//! Management at scale, as CI can afford it: `scripts/scale-drill.sh`
//! with 60 servers (where TLS once broke `volume create`), each a network
//! namespace of its own on a bridge, TLS on: probes, `volume create` and
//! `start`, a mount written through, `volume set`, `status`, `peer
//! status` and one server more. The drill fails on any command that fails
//! or takes more than a few seconds, and on any malformed message in the
//! daemons' logs. Larger pools (84, 300) are drilled by hand
//! (docs/benchmarks.md).

use std::process::Command;

#[test]
fn a_pool_of_sixty_hosts_answers_every_command_in_seconds() {
    for tool in ["ip", "nsenter", "sysctl", "pgrep"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            found,
            "the drill needs `{tool}` (iproute2, util-linux, procps)"
        );
    }
    let here = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::Builder::new()
        .prefix("mortar-drill-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let out = Command::new("bash")
        .arg(format!("{here}/scripts/scale-drill.sh"))
        .env("MORTAR", env!("CARGO_BIN_EXE_mortar"))
        .env("N", "60")
        .env("NETNS", "1")
        .env("LIMIT", "5000")
        .env("SETTLE", "1")
        .env("DIR", dir.path().join("pool"))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    println!("{stdout}");
    if !out.status.success() {
        // The daemons' logs stay for a look.
        let kept = dir.keep();
        panic!(
            "the drill failed (logs in {}):\n{stdout}\n{stderr}",
            kept.display()
        );
    }
    assert!(
        stdout.contains("no malformed message in any log"),
        "{stdout}"
    );
    for step in [
        "adding one server",
        "volume create",
        "volume start",
        "volume set",
        "volume status",
    ] {
        assert!(stdout.contains(step), "no `{step}` in:\n{stdout}");
    }
}
