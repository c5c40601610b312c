//! `mortar bench` end to end: every workload at tiny sizes, on a mortar
//! volume it sets up itself (real daemon, bricks and FUSE mount) and on the
//! local disk, with the report written and two runs compared. No speed is
//! asserted.

/// `mortar`, built beside `mortar-bench` (the workspace's `cargo test`
/// builds both): the tests run the benchmark as users do, `mortar bench`.
fn mortar() -> std::path::PathBuf {
    let p = std::path::Path::new(env!("CARGO_BIN_EXE_mortar-bench")).with_file_name("mortar");
    assert!(
        p.is_file(),
        "{} is not built: run the tests from the workspace (cargo test --features failpoints)",
        p.display()
    );
    p
}

/// Held by a test that sets up mortar: the benchmark's daemon has one
/// port, so two such runs at once would refuse each other.
static ONE_DAEMON: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn bench_runs_every_workload_and_writes_its_report() {
    let _daemon = ONE_DAEMON.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::Builder::new()
        .prefix("mortar-bench-test-")
        .tempdir()
        .unwrap();
    let report = dir.path().join("report");
    let o = std::process::Command::new(mortar())
        .args([
            "bench",
            "--quick",
            "--against",
            "local",
            "--workloads",
            "all",
            "--scale-max",
            "2",
        ])
        .arg("--dir")
        .arg(dir.path().join("work"))
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "bench failed: {out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The reference's two tables, with a row per target.
    assert!(
        out.contains("| Backend | Write time (s) | Write (ops/s) | Read time (s) | Read (ops/s) |"),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("| local |"))
            && out.lines().any(|l| l.starts_with("| mortar |"))
    );
    for w in [
        "smallfile-ops",
        "block-size",
        "file-size",
        "streams",
        "everyday",
        "replication",
        "scale",
    ] {
        assert!(out.contains(&format!("### {w}")), "no table for {w}");
    }
    // Every step was measured on both targets.
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(report.join("results.json")).unwrap()).unwrap();
    let ms = results["measurements"].as_array().unwrap();
    for w in [
        "seed-smallfile",
        "seed-largefile",
        "smallfile-ops",
        "block-size",
        "file-size",
        "streams",
        "everyday",
    ] {
        for t in ["local", "mortar"] {
            assert!(
                ms.iter().any(|m| m["workload"] == w && m["target"] == t),
                "{w} on {t} missing"
            );
        }
    }
    assert!(ms
        .iter()
        .any(|m| m["workload"] == "scale" && m["metric"] == "requests per file"));
    assert!(ms
        .iter()
        .any(|m| m["workload"] == "replication" && m["target"] == "mortar replica 2"));
    // The report, with its plots.
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.contains("## The reference tables") && md.contains("block-size-write.svg"));
    assert!(report.join("block-size-write.svg").exists());
    // Everything it set up is gone: no mount left, no volume directories.
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mi.contains(&dir.path().display().to_string()),
        "a mount was left behind"
    );
    let left: Vec<String> = std::fs::read_dir(dir.path().join("work"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "scratch")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // Comparing a run with itself gives ratios of one.
    let c = std::process::Command::new(mortar())
        .args(["bench", "compare"])
        .arg(&report)
        .arg(&report)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&c.stdout);
    assert!(
        c.status.success()
            && text.contains("| seed-smallfile | write | mortar |")
            && text.contains("1.00x"),
        "{text}"
    );
}

#[test]
fn bench_refuses_what_it_cannot_measure() {
    let o = std::process::Command::new(mortar())
        .args(["bench", "--workloads", "nosuch", "--no-mortar"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown workload nosuch"));
    let o = std::process::Command::new(mortar())
        .args(["bench", "--against", "nfs"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown baseline nfs"));
    let o = std::process::Command::new(mortar())
        .args(["bench", "--shape", "lots"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad volume shape"));
}

/// Interrupted (SIGTERM) in the middle of a run, the benchmark unmounts
/// and stops what it set up, and exits as killed by the signal (143).
#[test]
fn an_interrupted_bench_takes_down_what_it_set_up() {
    let _daemon = ONE_DAEMON.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::Builder::new()
        .prefix("mortar-bench-test-")
        .tempdir()
        .unwrap();
    let work = dir.path().join("work");
    let mut bench = std::process::Command::new(mortar())
        .args([
            "bench",
            "--against",
            "local",
            "--workloads",
            "smallfile-ops",
        ])
        .args(["--reps", "50"])
        .arg("--dir")
        .arg(&work)
        .arg("--report")
        .arg(dir.path().join("report"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mnt = work.join("mortar/mnt");
    let mounted = || {
        std::fs::read_to_string("/proc/mounts")
            .unwrap()
            .contains(&*mnt.to_string_lossy())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !mounted() {
        assert!(
            std::time::Instant::now() < deadline,
            "the volume was never mounted"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    let pid = rustix::process::Pid::from_raw(bench.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = bench.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(bench.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert!(!mounted(), "the mount was left behind");
    // Its daemon, bricks and mount are gone with their state.
    assert!(
        !work.join("mortar").exists(),
        "the volume's state was left behind"
    );
    let left = std::process::Command::new("pgrep")
        .args(["-f", &work.to_string_lossy()])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "processes left: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}
