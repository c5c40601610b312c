//! The measurement of where each small-file operation's CPU goes
//! (`scripts/cpu-per-op.py`, issue 44) keeps working: run small, on the
//! programs this build made, its figures have the shape they must have.
//! No figure is held to a speed here (docs/benchmarks.md has them).

use std::process::Command;

#[test]
fn cpu_per_op_measures_every_process_and_counts_the_requests() {
    let bin = env!("CARGO_BIN_EXE_mortar");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/cpu-per-op.py");
    let out = Command::new("python3")
        .args([
            script, "--mortar", bin, "--files", "60", "--base", "/tmp", "--json",
        ])
        .output()
        .expect("python3 runs (apt-get install python3)");
    assert!(
        out.status.success(),
        "cpu-per-op.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    let ops: Vec<&str> = rows.iter().map(|r| r["op"].as_str().unwrap()).collect();
    assert_eq!(
        ops,
        [
            "create",
            "stat",
            "read",
            "append",
            "overwrite",
            "rename",
            "delete"
        ]
    );
    let row = |op: &str| rows.iter().find(|r| r["op"] == op).unwrap();
    let f = |op: &str, k: &str| row(op)[k].as_f64().unwrap();
    // A create of a small file reaches each of the three bricks: the
    // create (with its lock), the write, the release.
    let requests = f("create", "requests");
    assert!(
        (6.0..=12.0).contains(&requests),
        "{requests} requests per create"
    );
    for k in ["client_us", "brick_us", "client_syscalls", "brick_syscalls"] {
        assert!(f("create", k) > 0.0, "create: {k} counted");
    }
    // A stat and a read just after are answered from the mount's caches
    // (but for the rare file whose write's attributes were not kept: its
    // write was out, behind the close, while a change of another object
    // was clocked with it).
    assert!(
        f("stat", "requests") <= 0.05,
        "{} per stat",
        f("stat", "requests")
    );
    assert_eq!(f("read", "requests"), 0.0);
    assert!(f("rename", "requests") >= 3.0);
}
