//! Brick multiplexing (`volume set all cluster.brick-multiplex on`): a
//! server's bricks in one process, on one port, with real daemons, bricks
//! and mounts. Each brick still fails alone, is shown alone in `volume
//! status`, and outlives a daemon that crashes.

mod common;
use common::*;
use std::time::Duration;

/// The pids and ports `volume status` shows for a volume's bricks.
fn pids_and_ports(c: &Cluster, vol: &str, n: usize) -> Vec<(Option<u64>, Option<u64>)> {
    let st = c.volume_status_json(vol);
    (0..n)
        .map(|i| {
            let b = &st[0]["bricks"][i];
            (b["pid"].as_u64(), b["port"].as_u64())
        })
        .collect()
}

/// The pool option is set and read as GlusterFS's global options are, and
/// is refused where a volume's options go.
#[test]
fn brick_multiplex_is_an_option_of_the_pool() {
    let c = Cluster::start();
    let get = || c.ok(&["volume", "get", "all", "cluster.brick-multiplex"]);
    assert!(get().contains("cluster.brick-multiplex"), "{}", get());
    assert!(get().contains("on"), "on by default: {}", get());
    c.ok(&["volume", "set", "all", "cluster.brick-multiplex", "off"]);
    assert!(get().contains("off"), "{}", get());
    c.ok(&["volume", "set", "all", "cluster.brick-multiplex", "on"]);
    let json: serde_json::Value =
        serde_json::from_str(&c.ok(&["--json", "volume", "get", "all", "all"])).unwrap();
    assert_eq!(json["cluster.brick-multiplex"], "on");
    let err = c.fails(&["volume", "set", "all", "cluster.brick-multiplex", "maybe"]);
    assert!(err.contains("maybe"), "{err}");
    let err = c.fails(&["volume", "set", "all", "performance.io-cache", "on"]);
    assert!(err.contains("option of a volume"), "{err}");
    let err = c.fails(&["volume", "set", "all", "no.such-option", "on"]);
    assert!(err.contains("does not exist"), "{err}");
    c.ok(&["volume", "create", "v1", &c.brick("x1"), "force"]);
    let err = c.fails(&["volume", "set", "v1", "cluster.brick-multiplex", "on"]);
    assert!(err.contains("option of the pool"), "{err}");
    let err = c.fails(&["volume", "create", "all", &c.brick("x2"), "force"]);
    assert!(err.contains("names the pool"), "{err}");
}

/// Turned off, the option gives bricks started after it a process each:
/// a daemon that starts again takes the bricks the host served out of it
/// first (a brick is never served by two processes), and the host exits.
#[test]
fn turned_off_each_brick_moves_out_of_the_host_to_a_process_of_its_own() {
    let mut c = Cluster::start();
    let bricks = c.volume("tv", 2, &["t1", "t2"]);
    let m = c.mount("tv");
    ok(&format!("echo one > {}", m.p("f")));
    let shown = pids_and_ports(&c, "tv", 2);
    let host = shown[0].0.unwrap();
    assert_eq!(shown[0], shown[1], "one process: {shown:?}");
    c.ok(&["volume", "set", "all", "cluster.brick-multiplex", "off"]);
    c.crash_daemon();
    c.start_daemon();
    wait_for("a process for each brick", Duration::from_secs(30), || {
        let now = pids_and_ports(&c, "tv", 2);
        now.iter().all(|(p, _)| p.is_some_and(|p| p != host)) && now[0].0 != now[1].0
    });
    wait_for("the host to exit", Duration::from_secs(20), || {
        !std::path::Path::new(&format!("/proc/{host}")).exists()
            || std::fs::read_to_string(format!("/proc/{host}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
    });
    wait_for("the mount to reconnect", Duration::from_secs(30), || {
        sh(&format!("echo two > {}", m.p("g"))).status.success()
    });
    for b in &bricks {
        wait_for("the write on every brick", Duration::from_secs(20), || {
            std::fs::read_to_string(b.join("g")).is_ok_and(|t| t == "two\n")
        });
    }
    assert_eq!(ok(&format!("cat {}", m.p("f"))), "one\n");
}

/// With multiplexing on (the default), one process serves the three bricks of a
/// replica-3 volume on one port; a brick whose directory is deleted goes
/// offline alone; the bricks outlive a daemon that crashes and are taken
/// over by the next one; a killed process has its bricks started again in
/// a new one; a stopped volume leaves no process behind.
#[test]
fn one_process_serves_a_servers_bricks_and_each_still_fails_alone() {
    let mut c = Cluster::start();
    let bricks = c.volume("mv", 3, &["m1", "m2", "m3"]);
    c.ok(&["volume", "set", "mv", "storage.health-check-interval", "1"]);
    let shown = pids_and_ports(&c, "mv", 3);
    let (pid, port) = (shown[0].0.expect("a pid"), shown[0].1.expect("a port"));
    assert!(
        shown.iter().all(|&s| s == (Some(pid), Some(port))),
        "one process and one port for all three: {shown:?}"
    );
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
    assert!(cmd.contains("--host"), "the brick host: {cmd}");

    // Files written through the mount are ordinary files on every brick.
    let m = c.mount("mv");
    // (Closes return before creates and writes land: synced to read
    // the bricks.)
    ok(&format!(
        "mkdir {d} && for i in $(seq 1 30); do echo f-$i > {d}/f$i; done && sync {d} {d}/*",
        d = m.p("d")
    ));
    for b in &bricks {
        assert_eq!(
            std::fs::read_to_string(b.join("d/f17")).unwrap(),
            "f-17\n",
            "{}",
            b.display()
        );
    }

    // A writer goes on across a daemon crash: the host and its bricks
    // outlive it, and the next daemon takes them over.
    let f = m.p("log");
    let writer = std::thread::spawn(move || {
        sh(&format!(
            "set -e; for i in $(seq 1 200); do echo line-$i >> {f}; sleep 0.01; done"
        ))
    });
    std::thread::sleep(Duration::from_millis(300));
    c.crash_daemon();
    std::thread::sleep(Duration::from_millis(1000));
    c.start_daemon();
    let o = writer.join().unwrap();
    assert!(
        o.status.success(),
        "the writer failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let want: String = (1..=200).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(ok(&format!("cat {}", m.p("log"))), want);
    wait_for(
        "the bricks to be taken over",
        Duration::from_secs(20),
        || {
            pids_and_ports(&c, "mv", 3)
                .iter()
                .all(|&s| s == (Some(pid), Some(port)))
        },
    );

    // A brick whose directory is deleted goes offline alone.
    ok(&format!("rm -rf {}", bricks[2].display()));
    wait_for("the brick to go offline", Duration::from_secs(20), || {
        let st = c.volume_status_json("mv");
        st[0]["bricks"][2]["online"] == false
            && st[0]["bricks"][2]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("health check failed"))
    });
    let shown = pids_and_ports(&c, "mv", 2);
    assert!(
        shown.iter().all(|&s| s == (Some(pid), Some(port))),
        "the other two serve on in the same process: {shown:?}"
    );
    ok(&format!("echo after > {}", m.p("d/after")));
    assert_eq!(ok(&format!("cat {}", m.p("d/f3"))), "f-3\n");
    for b in &bricks[..2] {
        assert_eq!(
            std::fs::read_to_string(b.join("d/after")).unwrap(),
            "after\n"
        );
    }

    // A killed host: its bricks are started again, in a new one.
    ok(&format!("kill -9 {pid}"));
    wait_for(
        "the bricks to be started again",
        Duration::from_secs(30),
        || {
            let now = pids_and_ports(&c, "mv", 2);
            now.iter()
                .all(|&(p, port)| p.is_some_and(|p| p != pid) && port.is_some())
                && now[0] == now[1]
        },
    );
    wait_for("the mount to reconnect", Duration::from_secs(30), || {
        sh(&format!("echo again > {}", m.p("d/again")))
            .status
            .success()
    });
    assert_eq!(ok(&format!("cat {}", m.p("d/f29"))), "f-29\n");
    drop(m);

    // A stopped volume leaves no brick process.
    let host = pids_and_ports(&c, "mv", 1)[0].0.unwrap();
    c.ok(&["volume", "stop", "mv"]);
    wait_for("the host to exit", Duration::from_secs(20), || {
        !std::path::Path::new(&format!("/proc/{host}")).exists()
            || std::fs::read_to_string(format!("/proc/{host}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
    });
}
