//! The reference practical work, end to end: a replica-3 volume of three
//! bricks on one host, created, started, mounted and used with real tools.

mod common;
use common::*;
use std::time::Duration;

#[test]
fn seed_replica3_volume_end_to_end() {
    let mut c = Cluster::start();
    let bricks = c.volume("gv0", 3, &["brick1/gv0", "brick2/gv0", "brick3/gv0"]);

    let info = c.ok(&["volume", "info", "gv0"]);
    for line in [
        "Volume Name: gv0",
        "Type: Replicate",
        "Status: Started",
        "Number of Bricks: 1 x 3 = 3",
        "Transport-type: tcp",
    ] {
        assert!(
            info.lines().any(|l| l == line),
            "{line:?} missing from:\n{info}"
        );
    }
    assert!(info.contains(&format!("Brick1: {}", c.brick("brick1/gv0"))));
    let status = c.volume_status_json("gv0");
    for b in status[0]["bricks"].as_array().unwrap() {
        assert_eq!(b["online"], true, "{status}");
        assert!(b["port"].as_u64().unwrap() >= 24300);
    }

    let m = c.mount("gv0");
    the_graph_is_the_tables_stack(&m.dir);
    // The seed's functional check.
    ok(&format!("echo 'hello from mortar' > {}", m.p("test.txt")));
    assert_eq!(
        ok(&format!("cat {}", m.p("test.txt"))),
        "hello from mortar\n"
    );
    // The seed's small-file loop, at a smaller N, and its dd commands.
    let out = ok(&format!(
        "{}/scripts/smallfile_bench.sh {} 200",
        env!("CARGO_MANIFEST_DIR"),
        m.dir.display()
    ));
    assert!(
        out.contains("Write time:") && out.contains("Read time:"),
        "{out}"
    );
    ok(&format!("cd {} && dd if=/dev/zero of=largefile bs=1M count=64 oflag=direct status=none && dd if=largefile of=/dev/null bs=1M iflag=direct status=none", m.dir.display()));
    assert_eq!(
        std::fs::metadata(m.dir.join("largefile")).unwrap().len(),
        64 << 20
    );

    // A real tree in with cp -a and tar, compared with diff and md5sum.
    let src = env!("CARGO_MANIFEST_DIR");
    ok(&format!("cp -a {src}/src {}", m.p("tree")));
    ok(&format!(
        "tar -C {src} -cf - src docs | tar -C {} -xf -",
        m.dir.display()
    ));
    ok(&format!("diff -r {src}/src {}", m.p("tree")));
    ok(&format!("diff -r {src}/src {}", m.p("src")));
    let sums = |d: &str| ok(&format!("cd {d} && find . -type f | sort | xargs md5sum"));
    assert_eq!(sums(&format!("{src}/src")), sums(&m.p("tree")));

    every_file_is_on_every_brick(&m.dir, &bricks);
    // The brick's index is never visible through the mount.
    assert!(!ok(&format!("ls -a {}", m.dir.display())).contains(".mortar"));
    assert!(bricks[0].join(".mortar").is_dir());

    // Unmount, remount, read it back.
    m.unmount();
    let m = c.mount("gv0");
    ok(&format!("diff -r {src}/src {}", m.p("tree")));
    assert_eq!(
        ok(&format!("cat {}", m.p("test.txt"))),
        "hello from mortar\n"
    );

    // Restart the daemon: the volume is still there, the bricks come back,
    // and the mount reconnects to them.
    c.kill_daemon();
    c.start_daemon();
    assert!(c.ok(&["volume", "info", "gv0"]).contains("Status: Started"));
    wait_for("bricks back online", Duration::from_secs(20), || {
        c.volume_status_json("gv0")[0]["bricks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["online"] == true)
    });
    wait_for("the mount to reconnect", Duration::from_secs(20), || {
        sh(&format!("echo again > {}", m.p("after-restart.txt")))
            .status
            .success()
    });
    assert_eq!(ok(&format!("cat {}", m.p("after-restart.txt"))), "again\n");
    for b in &bricks {
        assert_eq!(
            std::fs::read_to_string(b.join("after-restart.txt")).unwrap(),
            "again\n"
        );
    }
}

/// The mount shows the graph it runs: the table's stack, every brick up.
fn the_graph_is_the_tables_stack(dir: &std::path::Path) {
    let graph = ok(&format!(
        "getfattr --only-values -n trusted.mortar.client.graph {}",
        dir.display()
    ));
    let lines: Vec<&str> = graph.lines().collect();
    assert!(lines[0].starts_with("volume gv0 version "), "{graph}");
    // write-behind, io-cache and md-cache (on by default) above the volume, with
    // their counters.
    assert_eq!(
        lines[1], "gv0-write-behind (performance/write-behind) up",
        "{graph}"
    );
    assert!(
        lines[2].starts_with("  | files with writes out "),
        "{graph}"
    );
    assert_eq!(
        lines[3], "  gv0-io-cache (performance/io-cache) up",
        "{graph}"
    );
    assert!(lines[4].starts_with("    | files kept "), "{graph}");
    assert_eq!(
        lines[5], "    gv0-md-cache (performance/md-cache) up",
        "{graph}"
    );
    assert!(
        lines[6].starts_with("      | answered from memory "),
        "{graph}"
    );
    assert_eq!(lines[7], "      gv0-dht (cluster/distribute) up", "{graph}");
    assert_eq!(
        lines[8], "        gv0-replicate-0 (cluster/replicate) up",
        "{graph}"
    );
    for i in 0..3 {
        assert_eq!(
            lines[9 + i],
            format!("          gv0-client-{i} (protocol/client) up"),
            "{graph}"
        );
    }
}

/// Every file is on all three bricks with the same content and gfid.
fn every_file_is_on_every_brick(dir: &std::path::Path, bricks: &[std::path::PathBuf]) {
    // (A close returns before its writes land: each file synced first.)
    let files = ok(&format!(
        "cd {} && find tree src docs test.txt largefile -type f -exec sync {{}} + -print",
        dir.display()
    ));
    assert!(files.lines().count() > 20);
    for f in files.lines() {
        let first = std::fs::read(bricks[0].join(f)).unwrap();
        let gfid = gfid_on_brick(&bricks[0].join(f));
        assert_eq!(gfid.len(), 16);
        for b in &bricks[1..] {
            assert_eq!(
                std::fs::read(b.join(f)).unwrap(),
                first,
                "{f} differs on {}",
                b.display()
            );
            assert_eq!(
                gfid_on_brick(&b.join(f)),
                gfid,
                "{f} has another gfid on {}",
                b.display()
            );
        }
    }
}

#[test]
fn a_killed_brick_is_restarted_and_writes_go_on() {
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = c.volume("gv1", 3, &["b1", "b2", "b3"]);
    let m = c.mount("gv1");
    let pid = brick_pid(&c, "gv1", 1);
    for i in 0..12 {
        std::fs::write(m.dir.join(format!("o{i}")), format!("old-{i:02}")).unwrap();
    }
    // Kill one brick while a file is being written, and keep writing to the
    // same open file while the daemon restarts the brick.
    let writer = std::thread::spawn({
        let f = m.p("during-kill");
        move || {
            sh(&format!(
                "python3 -c \"
import os, time
fd = os.open('{f}', os.O_WRONLY | os.O_CREAT, 0o644)
for i in range(400):
    os.write(fd, bytes([i % 251]) * 65536)
    time.sleep(0.008)
os.close(fd)
\""
            ))
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    ok(&format!("kill -9 {pid}"));
    // Overwrite files while the brick is down: its copies go stale.
    for i in 0..12 {
        std::fs::write(m.dir.join(format!("o{i}")), format!("new-{i:02}")).unwrap();
    }
    let res = writer.join().unwrap();
    assert!(
        res.status.success(),
        "write failed: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    assert_eq!(
        std::fs::metadata(m.dir.join("during-kill")).unwrap().len(),
        400 * 65536
    );
    // The two copies that stayed up hold exactly what the application wrote.
    // (The restarted brick's copy is stale until self-heal brings it up to
    // date: tests/replicate_e2e.rs checks that.)
    let expected: Vec<u8> = (0..400u32)
        .flat_map(|i| std::iter::repeat_n((i % 251) as u8, 65536))
        .collect();
    for b in [&bricks[0], &bricks[2]] {
        let got = std::fs::read(b.join("during-kill")).unwrap();
        assert!(
            got == expected,
            "{} does not hold what was written",
            b.display()
        );
    }
    // The daemon restarts the brick.
    wait_for("the brick to be restarted", Duration::from_secs(20), || {
        let b = &c.volume_status_json("gv1")[0]["bricks"][1];
        b["online"] == true && b["pid"].as_u64() != Some(pid)
    });
    // Once the client is connected to it again, its possibly stale copy is
    // never read: the mount returns what was written, over several opens
    // (data reads are spread by gfid, so try more than one file as well).
    wait_for("the client to reconnect", Duration::from_secs(20), || {
        std::fs::read_to_string(c.path("client.log"))
            .unwrap_or_default()
            .matches("connected to brick")
            .count()
            >= 4
    });
    for _ in 0..3 {
        let got = std::fs::read(m.dir.join("during-kill")).unwrap();
        assert!(got == expected, "the mount served a stale copy");
    }
    std::thread::sleep(Duration::from_millis(1100)); // past the kernel's attribute timeout
    for i in 0..12 {
        let got = std::fs::read_to_string(m.dir.join(format!("o{i}"))).unwrap();
        assert_eq!(
            got,
            format!("new-{i:02}"),
            "the mount served a stale copy of o{i}"
        );
    }
    // (A close returns before its writes land: synced to read a brick.)
    ok(&format!("echo after > {0} && sync {0}", m.p("after")));
    assert_eq!(ok(&format!("cat {}", m.p("after"))), "after\n");
    assert_eq!(
        std::fs::read_to_string(bricks[1].join("after")).unwrap(),
        "after\n",
        "changes still reach the returned brick"
    );
}

#[test]
fn plain_distribute_spreads_files_over_bricks() {
    let c = Cluster::start();
    let bricks = c.volume("dist", 1, &["d1", "d2"]);
    assert!(c
        .ok(&["volume", "info", "dist"])
        .contains("Type: Distribute"));
    let m = c.mount("dist");
    // (Closes return before creates and writes land: synced to read
    // the bricks.)
    ok(&format!(
        "mkdir -p {0}/a/b && for i in $(seq 1 60); do echo $i > {0}/a/b/f$i; done && sync {0}/a/b {0}/a/b/*",
        m.dir.display()
    ));
    let on = |b: &std::path::Path| std::fs::read_dir(b.join("a/b")).unwrap().count();
    let (n0, n1) = (on(&bricks[0]), on(&bricks[1]));
    assert_eq!(n0 + n1, 60);
    assert!(n0 > 10 && n1 > 10, "files not spread: {n0} / {n1}");
    assert_eq!(ok(&format!("ls {} | wc -l", m.p("a/b"))).trim(), "60");
    // Rename to a name that hashes elsewhere, and over an existing file.
    ok(&format!(
        "cd {} && for i in $(seq 1 20); do mv f$i g$i; done && mv f30 f31",
        m.p("a/b")
    ));
    assert_eq!(ok(&format!("ls {} | wc -l", m.p("a/b"))).trim(), "59");
    assert_eq!(ok(&format!("cat {}", m.p("a/b/g7"))), "7\n");
    assert_eq!(ok(&format!("cat {}", m.p("a/b/f31"))), "30\n");
    ok(&format!("rm -r {}", m.p("a")));
    assert!(!bricks[0].join("a").exists() && !bricks[1].join("a").exists());
}

#[test]
fn a_frozen_brick_is_declared_down_by_the_ping_timeout_set_while_mounted() {
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = c.volume("pt", 3, &["f1", "f2", "f3"]);
    let m = c.mount("pt");
    ok(&format!("echo before > {}", m.p("before")));
    // The client picks up the new option without a remount.
    c.ok(&["volume", "set", "pt", "network.ping-timeout", "2"]);
    wait_for(
        "the client to apply the option",
        Duration::from_secs(15),
        || {
            std::fs::read_to_string(c.path("client.log"))
                .unwrap_or_default()
                .contains("network.ping-timeout is now 2s")
        },
    );
    let pid = c.volume_status_json("pt")[0]["bricks"][0]["pid"]
        .as_u64()
        .unwrap();
    ok(&format!("kill -STOP {pid}"));
    let started = std::time::Instant::now();
    let res = sh(&format!(
        "echo during > {} && cat {}",
        m.p("during"),
        m.p("before")
    ));
    let took = started.elapsed();
    ok(&format!("kill -CONT {pid}"));
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&res.stdout), "before\n");
    assert!(
        took < Duration::from_secs(30),
        "I/O waited {took:?} for a frozen brick"
    );
    assert!(std::fs::read_to_string(c.path("client.log"))
        .unwrap()
        .contains("ping timeout"));
    for b in &bricks[1..] {
        let got = std::fs::read_to_string(b.join("during"));
        assert!(
            matches!(&got, Ok(s) if s == "during\n"),
            "{}: {got:?}; brick holds {}; client log:\n{}",
            b.display(),
            ok(&format!("ls {}", b.display())),
            std::fs::read_to_string(c.path("client.log")).unwrap()
        );
    }
}

#[test]
fn mount_dot_mortar_works_as_mount8_calls_it() {
    let c = Cluster::start();
    c.volume("mh", 1, &["m1"]);
    // mount(8) runs /sbin/mount.mortar SOURCE DIR -o OPTIONS; run the same
    // binary under that name.
    let helper = c.path("mount.mortar");
    std::os::unix::fs::symlink(BIN, &helper).unwrap();
    let dir = c.path("helper-mnt");
    std::fs::create_dir_all(&dir).unwrap();
    ok(&format!(
        "{} {}:/mh {} -o rw,port={PORT},credential={}",
        helper.display(),
        c.ip,
        dir.display(),
        c.credential().display()
    ));
    assert!(is_mounted(&dir));
    ok(&format!(
        "echo via-helper > {}/f && cat {}/f",
        dir.display(),
        dir.display()
    ));
    assert_eq!(
        std::fs::read_to_string(c.path("m1/f")).unwrap(),
        "via-helper\n"
    );
    // The kernel knows it as fuse.mortar, so mount(8) hands a remount to
    // the same helper, which changes the mount in place.
    let mounts = || {
        std::fs::read_to_string("/proc/mounts")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&*dir.to_string_lossy()))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let m = mounts();
    assert!(m.len() == 1 && m[0].contains(" fuse.mortar rw,"), "{m:?}");
    let remount = |how: &str| {
        ok(&format!(
            "{} {}:/mh {} -o remount,{how},port={PORT}",
            helper.display(),
            c.ip,
            dir.display()
        ))
    };
    remount("ro");
    let m = mounts();
    assert!(m.len() == 1 && m[0].contains(" fuse.mortar ro,"), "{m:?}");
    let o = sh(&format!("echo no > {}/f", dir.display()));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Read-only file system"),
        "{o:?}"
    );
    assert_eq!(ok(&format!("cat {}/f", dir.display())), "via-helper\n");
    remount("rw");
    // (A close returns before its writes land: synced to read the brick.)
    ok(&format!("echo again > {0}/f && sync {0}/f", dir.display()));
    assert_eq!(std::fs::read_to_string(c.path("m1/f")).unwrap(), "again\n");
    ok(&format!("umount {}", dir.display()));
    wait_for("unmount", Duration::from_secs(10), || !is_mounted(&dir));
    // A bad source is refused with a clear message.
    let o = sh(&format!(
        "{} nohost {} 2>&1",
        helper.display(),
        dir.display()
    ));
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("HOST:/VOLUME"));
}
