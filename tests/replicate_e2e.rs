//! Replication under faults, end to end: real daemons, bricks, mounts and
//! tools; bricks killed (`kill -9`), frozen (`SIGSTOP` past the ping
//! timeout) or full; the bricks compared byte for byte after self-heal.

mod common;
use common::*;
use std::path::PathBuf;
use std::time::Duration;

const HEAL_TIMEOUT: Duration = Duration::from_secs(60);

/// Only with quorum and self-heal turned off can copies diverge.
const NO_SAFETY_NET: &[(&str, &str)] = &[
    ("network.ping-timeout", "2"),
    ("cluster.quorum-type", "none"),
    ("cluster.self-heal-daemon", "off"),
];

#[test]
fn changes_made_while_a_brick_was_frozen_are_healed() {
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = c.volume("hv", 3, &["h1", "h2", "h3"]);
    c.ok(&["volume", "set", "hv", "network.ping-timeout", "2"]);
    let m = c.mount("hv");
    let d = m.dir.display().to_string();
    ok(&format!(
        "mkdir -p {d}/keep/sub {d}/gone/deep && \
         for f in a b c d e; do echo old-$f > {d}/keep/$f; done && \
         echo bye > {d}/gone/deep/x && \
         head -c 3000000 /dev/urandom > {d}/big && \
         echo same > {d}/renamed-from && ln {d}/keep/a {d}/keep/a-link && \
         echo start > {d}/grows"
    ));
    assert_bricks_identical(&bricks);
    wait_healed(&c, "hv", HEAL_TIMEOUT);

    let pid = freeze(&c, "hv", 2);
    // Everything below happens while brick 3 is frozen. The first change
    // waits for the ping timeout; the rest go on without it.
    ok(&format!(
        "echo new-a > {d}/keep/a && \
         rm {d}/keep/b && \
         mv {d}/keep/c {d}/keep/c-moved && \
         chmod 600 {d}/keep/d && chown 1234:4321 {d}/keep/e && \
         truncate -s 1000 {d}/big && \
         dd if=/dev/urandom of={d}/big bs=4096 seek=100 count=3 conv=notrunc status=none && \
         rm -r {d}/gone && \
         mkdir {d}/fresh && for i in $(seq 1 20); do echo $i > {d}/fresh/f$i; done && \
         ln -s ../big {d}/fresh/link && \
         setfattr -n user.colour -v blue {d}/keep/d && \
         mv {d}/renamed-from {d}/keep/sub/renamed-to && \
         rm {d}/keep/a-link && echo recreated-with-other-content > {d}/keep/a-link && \
         truncate -s 48M {d}/grows && echo end >> {d}/grows && \
         truncate -s 64M {d}/fresh/sparse && echo tail >> {d}/fresh/sparse"
    ));
    // The frozen copy is never read: what the application wrote comes back.
    assert_eq!(ok(&format!("cat {d}/keep/a")), "new-a\n");
    assert_eq!(ok(&format!("stat -c %s {d}/big")).trim(), "421888");
    thaw(pid);
    wait_healed(&c, "hv", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
    assert_eq!(
        std::fs::read_to_string(bricks[2].join("keep/a-link")).unwrap(),
        "recreated-with-other-content\n"
    );
    assert!(!bricks[2].join("gone").exists());
    // Holes stay holes: a healed copy takes no more room than the source.
    for f in ["grows", "fresh/sparse"] {
        use std::os::unix::fs::MetadataExt;
        let used = |b: &PathBuf| std::fs::metadata(b.join(f)).unwrap().blocks() * 512;
        assert!(
            used(&bricks[2]) <= used(&bricks[0]).max(1 << 20),
            "{f}: {} bytes on the healed brick, {} on the source",
            used(&bricks[2]),
            used(&bricks[0])
        );
    }
    // Heal statistics say what was done.
    let stats = c.ok(&["volume", "heal", "hv", "statistics"]);
    assert!(stats.contains("Type of crawl: INDEX"), "{stats}");
}

#[test]
fn a_brick_killed_during_cp_and_a_1gib_write_loses_nothing() {
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = c.volume("kv", 3, &["k1", "k2", "k3"]);
    let m = c.mount("kv");
    // A tree to copy: nested directories, modes, owners, xattrs, links.
    let src = c.path("src");
    ok(&format!(
        "mkdir -p {s} && cd {s} && for d in $(seq 1 8); do mkdir -p d$d/e; \
         for f in $(seq 1 40); do head -c $((f * 997)) /dev/urandom > d$d/e/f$f; done; \
         chmod 750 d$d; chown 12:34 d$d/e/f1; ln -s e/f2 d$d/sym; done && \
         setfattr -n user.tag -v t1 d1/e/f3",
        s = src.display()
    ));
    let pid = brick_pid(&c, "kv", 1);
    // 1 GiB of known content written in 1 MiB writes (as `dd bs=1M`),
    // made as it is written: no local copy to take disk space beside the
    // three on the bricks.
    let took = copy_and_write_while(&src, &m.p("tree"), &m.p("big"), BIG_MIB, || {
        ok(&format!("kill -9 {pid}"));
    });
    eprintln!("cp -a and the 1 GiB write took {took:?}");
    // The application sees everything it wrote.
    assert_pattern(std::path::Path::new(&m.p("big")), BIG_MIB);
    ok(&format!("diff -r {} {}", src.display(), m.p("tree")));
    // The daemon restarts the brick; heal finishes by itself.
    wait_for("the brick to be restarted", Duration::from_secs(20), || {
        brick_pid(&c, "kv", 1) != pid
    });
    let started = std::time::Instant::now();
    // A GiB to copy while the other tests of this file run beside it: on
    // CI's two cores that once took more than a minute (the healer was
    // still copying when the deadline came).
    wait_healed(&c, "kv", 3 * HEAL_TIMEOUT);
    eprintln!("heal took {:?}", started.elapsed());
    assert_bricks_identical(&bricks);
    assert_pattern(&bricks[1].join("big"), BIG_MIB);
}

/// The size of the big file, in MiB.
const BIG_MIB: u64 = 1024;

#[test]
fn with_two_bricks_down_writes_are_refused_and_reads_go_on() {
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = c.volume("qv", 3, &["q1", "q2", "q3"]);
    c.ok(&["volume", "set", "qv", "network.ping-timeout", "2"]);
    let m = c.mount("qv");
    ok(&format!("echo before > {}", m.p("f")));
    let p1 = freeze(&c, "qv", 0);
    let p2 = freeze(&c, "qv", 1);
    // Past the ping timeout, quorum is lost: changes fail with EROFS.
    let o = sh(&format!("echo during > {}", m.p("f")));
    assert!(!o.status.success());
    let o = sh(&format!("echo during > {}", m.p("g")));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(err.contains("Read-only file system"), "{err}");
    // Reads go on from the copy that is up.
    assert_eq!(ok(&format!("cat {}", m.p("f"))), "before\n");
    thaw(p1);
    thaw(p2);
    wait_for("quorum to come back", Duration::from_secs(30), || {
        sh(&format!("echo after > {}", m.p("f"))).status.success()
    });
    assert_eq!(ok(&format!("cat {}", m.p("f"))), "after\n");
    wait_healed(&c, "qv", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
}

#[test]
fn two_mounts_writing_one_region_leave_identical_bricks() {
    let c = Cluster::start();
    let bricks = c.volume("cv", 3, &["c1", "c2", "c3"]);
    let m1 = c.mount("cv");
    let m2 = c.mount("cv");
    ok(&format!("head -c 1048576 /dev/zero > {}", m1.p("shared")));
    let writer = |path: String, seed: u32| {
        std::thread::spawn(move || {
            sh(&format!(
                "python3 -c \"
import os, random
r = random.Random({seed})
fd = os.open('{path}', os.O_WRONLY)
for i in range(1500):
    off = r.randrange(0, 1048576 - 262144)
    os.pwrite(fd, bytes([r.randrange(256)]) * r.randrange(1, 262144), off)
os.close(fd)
\""
            ))
        })
    };
    let ws = [
        writer(m1.p("shared"), 1),
        writer(m2.p("shared"), 2),
        writer(m1.p("shared"), 3),
        writer(m2.p("shared"), 4),
    ];
    for t in ws {
        let o = t.join().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    m1.unmount();
    m2.unmount();
    let sums: Vec<String> = bricks
        .iter()
        .map(|b| ok(&format!("md5sum < {}", b.join("shared").display())))
        .collect();
    assert!(
        sums.iter().all(|s| *s == sums[0]),
        "replicas diverged: {sums:?}"
    );
    wait_healed(&c, "cv", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
}

/// Every open for writing locks the file right behind the open, without
/// waiting; two mounts opening one file over and over each find the other
/// holding it at times: neither waits for the lock's revocation, and the
/// copies agree.
#[test]
fn two_mounts_opening_one_file_for_writing_by_turns_neither_wait_nor_diverge() {
    let c = Cluster::start();
    let bricks = c.volume("ov", 3, &["o1", "o2", "o3"]);
    let (m1, m2) = (c.mount("ov"), c.mount("ov"));
    ok(&format!("head -c 65536 /dev/zero > {}", m1.p("f")));
    let writer = |path: String, seed: u32| {
        std::thread::spawn(move || {
            sh(&format!(
                "python3 -c \"
import os, random
r = random.Random({seed})
for i in range(200):
    fd = os.open('{path}', os.O_WRONLY | (os.O_APPEND if i % 4 == 0 else 0))
    os.pwrite(fd, bytes([r.randrange(256)]) * 4096, r.randrange(0, 61440))
    os.close(fd)
\""
            ))
        })
    };
    let start = std::time::Instant::now();
    let ws = [writer(m1.p("f"), 1), writer(m2.p("f"), 2)];
    for t in ws {
        let o = t.join().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // Far below a lock's revocation (features.locks-revocation-secs).
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    m1.unmount();
    m2.unmount();
    wait_healed(&c, "ov", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
}

#[test]
fn a_client_that_crashes_between_a_change_and_its_blame_leaves_bricks_that_agree_after_heal() {
    let c = Cluster::start();
    let bricks = c.volume("xv", 3, &["x1", "x2", "x3"]);
    // The client dies at its 300th change, exactly in the window where the
    // bricks have the change and nothing records what a copy missed.
    let m = c.mount_env(
        "xv",
        &[("FAILPOINTS", "replicate-before-blame=300*off->panic")],
    );
    let out = sh(&format!(
        "dd if=/dev/urandom of={} bs=64k count=100000 status=none",
        m.p("partial")
    ));
    assert!(!out.status.success(), "the client was to crash mid-write");
    let log = std::fs::read_to_string(c.path("client.log")).unwrap();
    assert!(log.contains("crashing here on purpose"), "{log}");
    let _ = sh(&format!("umount -l {}", m.dir.display()));
    wait_healed(&c, "xv", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
}

#[test]
fn a_healer_that_crashes_before_clearing_blame_heals_again_after_restart() {
    let mut c = Cluster::start();
    c.one_process_per_brick();
    c.kill_daemon();
    // Only this daemon's healer reaches the fail point (clients have no
    // healer); its bricks are adopted by the next daemon.
    c.start_daemon_env(&[("FAILPOINTS", "heal-before-clear=panic")]);
    let bricks = c.volume("hc", 3, &["c1", "c2", "c3"]);
    c.ok(&["volume", "set", "hc", "network.ping-timeout", "2"]);
    let m = c.mount("hc");
    let d = m.dir.display().to_string();
    ok(&format!("mkdir {d}/dir && echo before > {d}/dir/f"));
    let pid = freeze(&c, "hc", 2);
    ok(&format!(
        "echo after > {d}/dir/f && for i in $(seq 1 20); do echo $i > {d}/dir/n$i; done"
    ));
    thaw(pid);
    // The healer copies, then dies before it clears the blame.
    assert!(
        c.wait_daemon_gone(Duration::from_secs(60)),
        "the healer never reached its crash window"
    );
    assert!(
        heal_pending(&c, "hc").is_none(),
        "no daemon should answer now"
    );
    c.start_daemon();
    wait_healed(&c, "hc", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
    assert_eq!(ok(&format!("cat {d}/dir/f")), "after\n");
}

#[test]
fn a_write_a_full_brick_refuses_is_kept_on_the_others_and_healed_once_there_is_room() {
    let c = Cluster::start();
    let small = c.path("small");
    let _small = SmallFs::new(small.clone(), "4m");
    let bricks = c.volume("fv", 3, &["f1", "f2", "small/f3"]);
    let m = c.mount("fv");
    let src = c.path("src");
    ok(&format!(
        "dd if=/dev/urandom of={} bs=1M count=8 status=none",
        src.display()
    ));
    // Two of three copies have room: the quorum took every write, so the
    // application is told it succeeded, and that is what is stored.
    ok(&format!(
        "dd if={} of={} bs=1M conv=fsync status=none",
        src.display(),
        m.p("big")
    ));
    ok(&format!("cmp {} {}", src.display(), m.p("big")));
    for b in &bricks[..2] {
        ok(&format!(
            "cmp {} {}",
            src.display(),
            b.join("big").display()
        ));
    }
    // The full brick's shortfall is recorded for heal.
    assert!(heal_pending(&c, "fv").is_some_and(|n| n > 0));
    ok(&format!("mount -o remount,size=64m {}", small.display()));
    c.ok(&["volume", "heal", "fv"]);
    wait_healed(&c, "fv", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
}

#[test]
fn split_brain_is_detected_never_served_and_resolved_by_command() {
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = c.volume("sv", 3, &["s1", "s2", "s3"]);
    set_options(&c, "sv", NO_SAFETY_NET);
    let m = c.mount("sv");
    let f = m.p("f");
    ok(&format!("echo one > {f}"));
    let reconnected = |n: usize| wait_connections(&c, n);
    let p0 = freeze(&c, "sv", 0);
    ok(&format!("echo two-two > {f}"));
    thaw(p0);
    reconnected(4);
    std::thread::sleep(Duration::from_millis(1100));
    let (p1, p2) = (freeze(&c, "sv", 1), freeze(&c, "sv", 2));
    ok(&format!("echo three-three-three > {f}"));
    thaw(p1);
    thaw(p2);
    reconnected(6);
    std::thread::sleep(Duration::from_millis(1100));
    // Never served silently: EIO.
    let o = sh(&format!("cat {f}"));
    assert!(!o.status.success(), "a file in split-brain was served");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Input/output error"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let info = c.ok(&["volume", "heal", "sv", "info", "split-brain"]);
    assert!(
        info.contains("Number of entries in split-brain: 1"),
        "{info}"
    );
    // Resolved by command: the copy written last wins everywhere.
    c.ok(&["volume", "heal", "sv", "split-brain", "latest-mtime", "/f"]);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(ok(&format!("cat {f}")), "three-three-three\n");
    let info = c.ok(&["volume", "heal", "sv", "info", "split-brain"]);
    assert!(!info.contains("split-brain: 1"), "{info}");
    // Settle the rest (directory markers) by hand: the daemon is off.
    c.ok(&["volume", "set", "sv", "cluster.self-heal-daemon", "on"]);
    wait_healed(&c, "sv", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
}

#[test]
fn two_mounts_creating_and_renaming_the_same_names_leave_identical_bricks() {
    let c = Cluster::start();
    let bricks = c.volume("nv", 3, &["n1", "n2", "n3"]);
    // No heal may hide a divergence here.
    c.ok(&["volume", "set", "nv", "cluster.self-heal-daemon", "off"]);
    let m1 = c.mount("nv");
    let m2 = c.mount("nv");
    ok(&format!("mkdir {}", m1.p("d")));
    let worker = |dir: String, tag: &'static str| {
        std::thread::spawn(move || {
            sh(&format!(
                "for i in $(seq 1 150); do n=$((i % 7)); \
                 echo {tag}-$i > {dir}/d/tmp-{tag}-$n && mv -f {dir}/d/tmp-{tag}-$n {dir}/d/name-$n; \
                 echo {tag}$i > {dir}/d/same-$n 2>/dev/null; rm -f {dir}/d/same-$((n + 1)); \
                 mkdir {dir}/d/dir-$n 2>/dev/null; rmdir {dir}/d/dir-$((n + 2)) 2>/dev/null; true; done"
            ))
        })
    };
    let a = worker(m1.dir.display().to_string(), "a");
    let b = worker(m2.dir.display().to_string(), "b");
    for t in [a, b] {
        let o = t.join().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    m1.unmount();
    m2.unmount();
    // Identical without any heal: the changes were ordered the same way
    // on every brick, and the clients, exiting, settle everything.
    wait_for("the clients to settle", Duration::from_secs(10), || {
        heal_pending(&c, "nv") == Some(0)
    });
    assert_bricks_identical(&bricks);
}

/// A brick's tree without file sizes and contents (what an arbiter keeps).
fn names_and_metadata(b: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    brick_digest(b)
        .into_iter()
        .map(|(k, v)| {
            let kept: Vec<&str> = v
                .split(' ')
                .filter(|w| !w.starts_with("size=") && !w.starts_with("data="))
                .collect();
            (k, kept.join(" "))
        })
        .collect()
}

#[test]
fn an_arbiter_volume_keeps_data_twice_and_survives_any_one_brick() {
    let c = Cluster::start();
    c.one_process_per_brick();
    let names = ["a1", "a2", "a3"];
    let mut args = vec!["volume", "create", "av", "replica", "3", "arbiter", "1"];
    let bricks: Vec<String> = names.iter().map(|n| c.brick(n)).collect();
    args.extend(bricks.iter().map(String::as_str));
    args.push("force");
    c.ok(&args);
    c.ok(&["volume", "start", "av"]);
    let info = c.ok(&["volume", "info", "av"]);
    assert!(info.contains("Number of Bricks: 1 x (2 + 1) = 3"), "{info}");
    assert!(info.contains("a3 (arbiter)"), "{info}");
    c.ok(&["volume", "set", "av", "network.ping-timeout", "2"]);
    let paths: Vec<std::path::PathBuf> = names.iter().map(|n| c.path(n)).collect();
    let m = c.mount("av");
    let d = m.dir.display().to_string();
    ok(&format!(
        "mkdir {d}/dir && head -c 2000000 /dev/urandom > {d}/dir/data && echo small > {d}/s && chmod 640 {d}/s"
    ));
    // Data on two bricks only; names and metadata on three.
    assert_eq!(
        std::fs::metadata(paths[0].join("dir/data")).unwrap().len(),
        2000000
    );
    assert_eq!(
        std::fs::metadata(paths[2].join("dir/data")).unwrap().len(),
        0
    );
    // Any one brick may go: writes and reads go on.
    for i in 0..3 {
        let pid = freeze(&c, "av", i);
        ok(&format!(
            "echo while-{i}-down >> {d}/s && head -c 100000 /dev/urandom > {d}/dir/new-{i}"
        ));
        let got = ok(&format!("cat {d}/s"));
        assert!(
            got.contains(&format!("while-{i}-down")),
            "with brick {i} down the mount read {got:?}"
        );
        thaw(pid);
        wait_healed(&c, "av", HEAL_TIMEOUT);
    }
    let sum = |p: &std::path::Path| ok(&format!("md5sum < {}", p.display()));
    assert_eq!(sum(&paths[0].join("s")), sum(&paths[1].join("s")));
    assert_eq!(
        sum(&paths[0].join("dir/new-0")),
        sum(&paths[1].join("dir/new-0"))
    );
    assert_bricks_identical(&paths[..2]);
    assert_eq!(names_and_metadata(&paths[0]), names_and_metadata(&paths[2]));
}

#[test]
fn a_full_heal_restores_what_was_removed_behind_mortars_back() {
    let c = Cluster::start();
    let bricks = c.volume("fh", 3, &["g1", "g2", "g3"]);
    let m = c.mount("fh");
    let d = m.dir.display().to_string();
    ok(&format!(
        "mkdir -p {d}/x/y && echo one > {d}/x/y/a && echo two > {d}/x/b && echo three > {d}/c"
    ));
    m.unmount();
    wait_healed(&c, "fh", HEAL_TIMEOUT);
    // Nothing in the index says brick 3 lost these: only a full heal finds it.
    ok(&format!(
        "rm -r {}/x {}/c",
        bricks[2].display(),
        bricks[2].display()
    ));
    let out = c.ok(&["volume", "heal", "fh", "full"]);
    assert!(out.contains("full self heal"), "{out}");
    let deadline = std::time::Instant::now() + HEAL_TIMEOUT;
    while !(bricks[2].join("x/y/a").exists() && bricks[2].join("c").exists()) {
        if std::time::Instant::now() > deadline {
            let log = std::fs::read_to_string(c.path("daemon.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            panic!(
                "the full heal did not restore the files; daemon log:\n{}",
                tail.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_healed(&c, "fh", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
    // The heal is a task of the volume's, in the replicated state.
    wait_for("the task completed", Duration::from_secs(10), || {
        c.volume_status_json("fh")[0]["tasks"][0]["status"] == "Completed"
    });
    let status = c.ok(&["volume", "status", "fh"]);
    assert!(
        status.contains("Task                 : Heal full")
            && status.contains("Status               : completed"),
        "{status}"
    );
}

#[test]
fn a_server_that_dies_during_a_full_heal_goes_on_with_it_when_it_returns() {
    let mut c = Cluster::start();
    let bricks = c.volume("rh", 3, &["r1", "r2", "r3"]);
    let m = c.mount("rh");
    ok(&format!(
        "mkdir -p {}/d && echo one > {}/d/a",
        m.dir.display(),
        m.dir.display()
    ));
    m.unmount();
    wait_healed(&c, "rh", HEAL_TIMEOUT);
    ok(&format!("rm -r {}/d", bricks[1].display()));
    c.crash_daemon();
    c.start_daemon_env(&[("FAILPOINTS", "heal-full-started=panic")]);
    // The daemon records the task, starts the heal and dies.
    let _ = c.cli(&["volume", "heal", "rh", "full"]);
    assert!(
        c.wait_daemon_gone(Duration::from_secs(10)),
        "the fail point was hit"
    );
    c.start_daemon();
    wait_for("the heal resumed and ended", HEAL_TIMEOUT, || {
        c.volume_status_json("rh")[0]["tasks"][0]["status"] == "Completed"
    });
    assert!(bricks[1].join("d/a").exists());
    wait_healed(&c, "rh", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
}

#[test]
fn favorite_child_policy_resolves_split_brain_by_itself() {
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = c.volume("pv", 2, &["p1", "p2"]);
    set_options(&c, "pv", NO_SAFETY_NET);
    let m = c.mount("pv");
    let f = m.p("f");
    ok(&format!("echo one > {f}"));
    let reconnected = |n: usize| wait_connections(&c, n);
    let p0 = freeze(&c, "pv", 0);
    ok(&format!("echo two-two > {f}"));
    thaw(p0);
    reconnected(3);
    std::thread::sleep(Duration::from_millis(1100));
    let p1 = freeze(&c, "pv", 1);
    ok(&format!("echo the-biggest-copy-of-all > {f}"));
    thaw(p1);
    reconnected(4);
    std::thread::sleep(Duration::from_millis(1100));
    assert!(!sh(&format!("cat {f}")).status.success());
    // The policy decides, and the healer applies it by itself.
    c.ok(&[
        "volume",
        "set",
        "pv",
        "cluster.favorite-child-policy",
        "size",
    ]);
    c.ok(&["volume", "set", "pv", "cluster.self-heal-daemon", "on"]);
    wait_healed(&c, "pv", HEAL_TIMEOUT);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(ok(&format!("cat {f}")), "the-biggest-copy-of-all\n");
    assert_bricks_identical(&bricks);
}

#[test]
fn a_file_unlinked_while_open_takes_writes_after_its_lock_lapsed() {
    let c = Cluster::start();
    let bricks = c.volume("uw", 2, &["u1", "u2", "u3", "u4"]);
    let m = c.mount("uw");
    let d = m.dir.display().to_string();
    // The lock replicate keeps after a write lapses after 500 ms: the
    // next write locks the file again, which has no name left.
    let py = format!(
        r#"
import os, time
for i in range(4):
    p = '{d}/x%d' % i
    fd = os.open(p, os.O_RDWR | os.O_CREAT)
    os.write(fd, b'before')
    os.unlink(p)
    time.sleep(1)
    os.write(fd, b'after')
    os.fsync(fd)
    assert os.pread(fd, 100, 0) == b'beforeafter'
    os.close(fd)
print('ok')
"#
    );
    assert_eq!(
        ok(&format!("python3 -c \"{}\"", py.replace('"', "\\\""))).trim(),
        "ok"
    );
    for b in &bricks {
        assert_eq!(ok(&format!("ls {}", b.display())).trim(), "");
    }
}
