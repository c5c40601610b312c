//! Growing a mounted volume: add-brick and rebalance while a writer and an
//! open file keep working, through a real FUSE mount over real bricks.

#[path = "../common/mod.rs"]
mod common;
mod disperse;
mod moves;

use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every regular file under a brick (the brick's own `.mortar` aside),
/// pointers apart: path → whether it is a pointer.
fn files_on(brick: &Path) -> BTreeMap<String, bool> {
    let out = ok(&format!(
        "cd {} && find . -path ./.mortar -prune -o -type f -printf '%P %m\\n'",
        brick.display()
    ));
    out.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(p, m)| (p.to_string(), m == "1000"))
        .collect()
}

/// For every file of the volume, the replica sets holding its data.
fn sets_of(bricks: &[PathBuf], replica: usize) -> BTreeMap<String, Vec<usize>> {
    let mut out: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (s, set) in bricks.chunks(replica).enumerate() {
        for (p, pointer) in files_on(&set[0]) {
            if !pointer {
                out.entry(p).or_default().push(s);
            }
        }
    }
    out
}

/// Asserts two `checksums` are the same, naming the files that differ.
#[track_caller]
fn assert_same(now: &BTreeMap<String, String>, before: &BTreeMap<String, String>) {
    let differ: Vec<(&String, Option<&String>, Option<&String>)> = before
        .keys()
        .chain(now.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| now.get(*k) != before.get(*k))
        .map(|k| (k, before.get(k), now.get(k)))
        .collect();
    assert!(differ.is_empty(), "files changed (before, now): {differ:?}");
}

fn checksums(dir: &str) -> BTreeMap<String, String> {
    ok(&format!(
        "cd {dir} && find . -type f -not -path './open/*' -not -path './w/*' -print0 | sort -z | xargs -0 md5sum"
    ))
    .lines()
    .filter_map(|l| l.split_once("  "))
    .map(|(sum, p)| (p.to_string(), sum.to_string()))
    .collect()
}

/// A writer that appends a numbered line to each of `paths`, kept open,
/// every 10 ms until `stop` exists and at least `at_least` rounds are
/// done; then syncs and closes them and prints the rounds written.
fn appender(
    paths: &[String],
    stop: &Path,
    at_least: usize,
) -> std::thread::JoinHandle<std::process::Output> {
    let (stop, paths) = (stop.display().to_string(), paths.join(" "));
    std::thread::spawn(move || {
        sh(&format!(
            "python3 -c \"
import os, time
fds = [os.open(p, os.O_WRONLY | os.O_APPEND) for p in '{paths}'.split()]
n = 0
while not os.path.exists('{stop}') or n < {at_least}:
    for fd in fds:
        os.write(fd, b'%d\\n' % n)
    n += 1
    time.sleep(0.01)
for fd in fds:
    os.fsync(fd)
    os.close(fd)
print(n)
\""
        ))
    })
}

/// Lets every set take files however full this host's disk is. The bricks
/// of these tests sit on the host's disk, and `cluster.min-free-disk`
/// (10% by default) would leave every file in place on a host more than
/// 90% full: what they test is the move, not the room.
fn any_room(c: &Cluster, vol: &str) {
    c.ok(&["volume", "set", vol, "cluster.min-free-disk", "0%"]);
}

#[test]
fn a_volume_grows_from_2x3_to_3x3_under_a_writer_and_rebalances() {
    let c = Cluster::start();
    let names: Vec<String> = (1..=9).map(|i| format!("g{i}")).collect();
    let first: Vec<&str> = names[..6].iter().map(String::as_str).collect();
    let mut bricks = c.volume("grow", 3, &first);
    any_room(&c, "grow");
    let m = c.mount_env("grow", &[("MORTAR_LOG", "mortar=debug")]);
    ok(&format!(
        "mkdir -p {0}/a/b {0}/c {0}/open {0}/w && for i in $(seq 1 120); do head -c $((i * 97)) /dev/urandom > {0}/a/b/f$i; done \
         && for i in $(seq 1 40); do echo $i > {0}/c/s$i; done \
         && truncate -s 5M {0}/c/sparse && echo tail >> {0}/c/sparse \
         && for i in $(seq 1 10); do mv {0}/c/s$i {0}/c/r$i; done && ln {0}/c/s20 {0}/a/hard",
        m.dir.display()
    ));
    let before = checksums(&m.dir.to_string_lossy());
    assert_eq!(before.len(), 120 + 40 + 1 + 1);

    // An open file written all along, and a writer making new files.
    let open = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "exec 3>>{0}/open/log; for i in $(seq 1 60); do echo line$i >&3; sleep 0.1; done",
            m.dir.display()
        ))
        .spawn()
        .unwrap();
    let writer = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "for i in $(seq 1 150); do echo w$i > {0}/w/w$i || exit 1; sleep 0.02; done",
            m.dir.display()
        ))
        .spawn()
        .unwrap();

    let added: Vec<String> = names[6..].iter().map(|b| c.brick(b)).collect();
    let mut args = vec!["volume", "add-brick", "grow"];
    args.extend(added.iter().map(String::as_str));
    args.push("force");
    c.ok(&args);
    bricks.extend(names[6..].iter().map(|b| c.path(b)));
    assert!(c
        .ok(&["volume", "info", "grow"])
        .contains("Number of Bricks: 3 x 3 = 9"));
    // Refused while a rebalance runs; a second one too.
    c.ok(&["volume", "rebalance", "grow", "start"]);
    let refused = c.fails(&[
        "volume",
        "add-brick",
        "grow",
        &c.brick("g10"),
        &c.brick("g11"),
        &c.brick("g12"),
        "force",
    ]);
    assert!(refused.contains("in progress"), "{refused}");
    wait_for("the rebalance to end", Duration::from_secs(120), || {
        let s = c.ok(&["volume", "rebalance", "grow", "status"]);
        !s.contains("in progress")
    });
    let status = c.ok(&["volume", "rebalance", "grow", "status"]);
    assert!(status.contains("completed"), "{status}");

    assert!(writer.wait_with_output().unwrap().status.success());
    assert!(open.wait_with_output().unwrap().status.success());
    let log = std::fs::read_to_string(m.dir.join("open/log")).unwrap();
    assert_eq!(log.lines().count(), 60, "{log}");
    for i in 1..=150 {
        assert_eq!(
            std::fs::read_to_string(m.dir.join(format!("w/w{i}"))).unwrap(),
            format!("w{i}\n")
        );
    }
    // Every byte as it was; every file on exactly one set; the new set
    // holds some; listings show each name once.
    assert_same(&checksums(&m.dir.to_string_lossy()), &before);
    let sets = sets_of(&bricks, 3);
    for (p, s) in &sets {
        assert_eq!(s.len(), 1, "{p} on sets {s:?}");
    }
    let on_new = sets.values().filter(|s| s.contains(&2)).count();
    assert!(on_new > 20, "only {on_new} files moved to the new set");
    assert_eq!(ok(&format!("ls {} | wc -l", m.p("a/b"))).trim(), "120");
    assert_eq!(
        ok(&format!("ls {} | sort | uniq -d | wc -l", m.p("c"))).trim(),
        "0"
    );
    // Sparse files stay sparse.
    let sparse = sets.get("c/sparse").expect("the sparse file")[0];
    let used = ok(&format!("du -k {}/c/sparse", bricks[sparse * 3].display()));
    let kb: u64 = used.split_whitespace().next().unwrap().parse().unwrap();
    assert!(kb < 1024, "sparse file uses {kb} KiB on its brick");
    // New files go to every set, the new one included.
    ok(&format!(
        "for i in $(seq 1 60); do echo n$i > {}/n$i; done",
        m.p("a/b")
    ));
    let sets = sets_of(&bricks, 3);
    assert!((1..=60).any(|i| sets[&format!("a/b/n{i}")] == vec![2]));

    // Shrunk back: the new set's files move to the others, then it goes.
    let before = checksums(&m.dir.to_string_lossy());
    let mut rm = vec!["volume", "remove-brick", "grow"];
    rm.extend(added.iter().map(String::as_str));
    let refused = c.fails(&[&rm[..], &["commit"]].concat());
    assert!(refused.contains("commit refused"), "{refused}");
    let partial = c.fails(&["volume", "remove-brick", "grow", &added[0], "start"]);
    assert!(partial.contains("give all of its bricks"), "{partial}");
    c.ok(&[&rm[..], &["start"]].concat());
    wait_for("the bricks to be emptied", Duration::from_secs(120), || {
        !c.ok(&[&rm[..], &["status"]].concat())
            .contains("in progress")
    });
    let status = c.ok(&[&rm[..], &["status"]].concat());
    assert!(status.contains("completed"), "{status}");
    c.ok(&[&rm[..], &["commit"]].concat());
    assert!(c
        .ok(&["volume", "info", "grow"])
        .contains("Number of Bricks: 2 x 3 = 6"));
    // The mount switches to the graph without the removed bricks a
    // moment after the commit (they serve for two seconds more).
    wait_for(
        "the mount to leave the removed set",
        Duration::from_secs(10),
        || {
            !ok(&format!(
                "getfattr --only-values -n trusted.mortar.client.graph {}",
                m.dir.display()
            ))
            .contains("grow-replicate-2")
        },
    );
    let kept = &bricks[..6];
    assert_same(&checksums(&m.dir.to_string_lossy()), &before);
    for (p, s) in &sets_of(kept, 3) {
        assert_eq!(s.len(), 1, "{p} on sets {s:?}");
    }
    assert!(files_on(&bricks[6]).values().all(|pointer| *pointer));
    assert_eq!(ok(&format!("ls {} | wc -l", m.p("a/b"))).trim(), "180");
    assert_eq!(ok(&format!("cat {}", m.p("a/b/n7"))), "n7\n");
}

#[test]
fn bad_add_brick_and_rebalance_requests_are_refused_and_change_nothing() {
    let c = Cluster::start();
    c.volume("bad", 3, &["x1", "x2", "x3"]);
    c.volume("dist", 1, &["y1", "y2"]);
    let before = c.state();
    let b = |n: &str| c.brick(n);
    let used = b("x1");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec![b("n1"), b("n2")], "Incorrect number of bricks"),
        (
            vec![used.clone(), b("n2"), b("n3")],
            "already part of a volume",
        ),
        (
            vec!["nosuchhost.invalid:/x/y".into(), b("n2"), b("n3")],
            "is not in 'Peer in Cluster' state",
        ),
        (
            vec!["replica".into(), "2".into(), b("n1"), b("n2")],
            "below the volume's",
        ),
        (vec![b("n1"), b("n1"), b("n2")], "Found duplicate exports"),
        (
            vec!["replica".into(), "x".into(), b("n1")],
            "is not a number",
        ),
    ];
    for (extra, want) in &cases {
        let mut args = vec!["volume".to_string(), "add-brick".into(), "bad".into()];
        args.extend(extra.iter().cloned());
        args.push("force".into());
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        c.refused(&a, want, &before);
    }
    assert!(!c.path("n1").exists() && !c.path("n2").exists());
    for (args, want) in [
        (
            vec!["volume", "add-brick", "nosuch", "h:/x"],
            "does not exist",
        ),
        (
            vec!["volume", "rebalance", "bad", "start"],
            "not a distribute volume",
        ),
        (
            vec!["volume", "rebalance", "dist", "begin"],
            "use rebalance NAME",
        ),
        (
            vec!["volume", "rebalance", "dist", "status"],
            "no rebalance has been started",
        ),
        (
            vec!["volume", "rebalance", "dist", "stop"],
            "no rebalance of dist",
        ),
        (
            vec!["volume", "rebalance", "nosuch", "start"],
            "does not exist",
        ),
    ] {
        c.refused(&args, want, &before);
    }
    // A stopped volume is not rebalanced.
    c.ok(&["volume", "stop", "dist"]);
    let err = c.fails(&["volume", "rebalance", "dist", "start"]);
    assert!(err.contains("needs to be started"), "{err}");
}

#[test]
fn a_rebalance_cut_short_by_a_server_crash_resumes_and_loses_nothing() {
    let mut c = Cluster::start();
    let mut bricks = c.volume("rs", 1, &["r1", "r2"]);
    any_room(&c, "rs");
    let m = c.mount("rs");
    ok(&format!(
        "mkdir -p {0}/d && for i in $(seq 1 90); do echo file$i > {0}/d/f$i; done",
        m.dir.display()
    ));
    let before = checksums(&m.dir.to_string_lossy());
    c.ok(&["volume", "add-brick", "rs", &c.brick("r3"), "force"]);
    bricks.push(c.path("r3"));
    c.crash_daemon();
    c.start_daemon_env(&[("FAILPOINTS", "rebalance-moved=5*off->panic")]);
    let _ = c.cli(&["volume", "rebalance", "rs", "start"]);
    assert!(
        c.wait_daemon_gone(Duration::from_secs(30)),
        "the fail point was hit"
    );
    let moved_before = sets_of(&bricks, 1)
        .values()
        .filter(|s| s.contains(&2))
        .count();
    assert!(moved_before >= 5, "{moved_before} moved before the crash");
    c.start_daemon();
    wait_for(
        "the rebalance to resume and end",
        Duration::from_secs(60),
        || {
            c.cli(&["volume", "rebalance", "rs", "status"])
                .status
                .success()
                && c.ok(&["volume", "rebalance", "rs", "status"])
                    .contains("completed")
        },
    );
    assert_same(&checksums(&m.dir.to_string_lossy()), &before);
    let sets = sets_of(&bricks, 1);
    for (p, s) in &sets {
        assert_eq!(s.len(), 1, "{p} on sets {s:?}");
    }
    assert!(sets.values().filter(|s| s.contains(&2)).count() > moved_before);
    assert_eq!(ok(&format!("ls {} | wc -l", m.p("d"))).trim(), "90");
}

#[test]
fn new_files_go_where_there_is_room_when_their_set_is_full() {
    let mut c = Cluster::start();
    // The small brick's disk is slow on large writes: files closed behind
    // are still being written there while the next ones are placed (as
    // CI's loaded machine once had it, and 7 files lost their data to
    // ENOSPC after their close).
    c.crash_daemon();
    c.start_daemon_env(&[("FAILPOINTS", "posix-large-write:s=sleep(100)")]);
    // Bricks on file systems of 3 MiB and 64 MiB: 60 files of 128 KiB
    // (7.5 MiB) do not fit on the small one.
    let _small = SmallFs::new(c.path("small"), "3m");
    let _large = SmallFs::new(c.path("large"), "64m");
    let bricks = c.volume("room", 1, &["small/s", "large/l"]);
    let m = c.mount("room");
    ok(&format!(
        // (Synced: closes return before creates and writes land; a write
        // that failed after its close fails the sync.)
        "mkdir {0}/d && for i in $(seq 1 60); do dd if=/dev/urandom of={0}/d/f$i bs=128k count=1 status=none || exit 1; done && sync {0}/d {0}/d/*",
        m.dir.display()
    ));
    let on_small = files_on(&bricks[0]);
    let on_large = files_on(&bricks[1]);
    let data_small = on_small.values().filter(|p| !**p).count();
    let pointers = on_small.values().filter(|p| **p).count();
    assert!(data_small < 24, "{data_small} files on the 3 MiB brick");
    assert!(pointers > 0, "no file was placed off its full set");
    assert_eq!(data_small + on_large.values().filter(|p| !**p).count(), 60);
    assert_eq!(ok(&format!("ls {} | wc -l", m.p("d"))).trim(), "60");
    for i in 1..=60 {
        let len = std::fs::metadata(m.dir.join(format!("d/f{i}")))
            .unwrap()
            .len();
        assert_eq!(len, 131072, "f{i}");
    }
    // The files placed off their set are found, renamed and removed as
    // any other.
    ok(&format!(
        "cd {} && for i in $(seq 1 60); do mv f$i g$i; done && rm g*",
        m.p("d")
    ));
    assert_eq!(ok(&format!("ls -A {} | wc -l", m.p("d"))).trim(), "0");
    assert!(files_on(&bricks[0]).is_empty() && files_on(&bricks[1]).is_empty());
    // The limit is an option like any other; 0% turns it off.
    c.ok(&["volume", "set", "room", "cluster.min-free-disk", "0%"]);
    let bad = c.fails(&["volume", "set", "room", "cluster.min-free-disk", "150%"]);
    assert!(bad.contains("not valid"), "{bad}");
}

#[test]
fn a_weighted_rebalance_gives_a_larger_set_a_larger_share() {
    let c = Cluster::start();
    // Bricks on file systems of 32 MiB and 96 MiB: shares 1:3.
    let _small = SmallFs::new(c.path("s32"), "32m");
    let _large = SmallFs::new(c.path("s96"), "96m");
    let bricks = c.volume("wt", 1, &["s32/b", "s96/b"]);
    let m = c.mount("wt");
    ok(&format!(
        // (Synced: closes return before creates and writes land.)
        "mkdir {0}/d && for i in $(seq 1 300); do echo $i > {0}/d/f$i; done && sync {0}/d {0}/d/*",
        m.dir.display()
    ));
    let count = |b: &Path, dir: &str| {
        files_on(b)
            .iter()
            .filter(|(p, pointer)| p.starts_with(dir) && !**pointer)
            .count()
    };
    // A new volume's layouts are equal.
    let (small, large) = (count(&bricks[0], "d/"), count(&bricks[1], "d/"));
    assert!(small > 100 && large > 100, "{small} and {large} before");
    c.ok(&["volume", "rebalance", "wt", "start", "--wait"]);
    let (small, large) = (count(&bricks[0], "d/"), count(&bricks[1], "d/"));
    assert_eq!(small + large, 300);
    // How many of these 300 names a quarter of the hash space holds
    // depends on where the directory's layout starts (its gfid): over
    // every start, 48 to 101 (75 on average); half of it holds 113 to 187.
    let quarter = 40..=105;
    assert!(quarter.contains(&small), "{small} of 300 on the small set");
    // A directory made afterwards takes its parent's shares.
    ok(&format!(
        "mkdir {0}/e && for i in $(seq 1 300); do echo $i > {0}/e/f$i; done && sync {0}/e {0}/e/*",
        m.dir.display()
    ));
    let small = count(&bricks[0], "e/");
    assert!(
        quarter.contains(&small),
        "{small} of 300 new files on the small set"
    );
    assert_eq!(checksums(&m.dir.to_string_lossy()).len(), 600);
}

#[test]
fn a_directory_has_the_same_mode_owner_and_xattrs_on_every_set() {
    let c = Cluster::start();
    let mut bricks = c.volume("dm", 1, &["m1", "m2"]);
    let m = c.mount("dm");
    ok(&format!(
        "mkdir {0}/d && chmod 750 {0}/d && chown 12:34 {0}/d && setfattr -n user.k -v v {0}/d",
        m.dir.display()
    ));
    let meta = |b: &Path| {
        ok(&format!(
            "stat -c '%a %u %g' {0}/d && getfattr --only-values -n user.k {0}/d; echo",
            b.display()
        ))
    };
    let want = "750 12 34\nv\n";
    assert_eq!(meta(&bricks[1]), want);
    // One copy changed behind the volume's back is healed when listed.
    ok(&format!(
        "chmod 777 {0}/d && chown 0:0 {0}/d && setfattr -x user.k {0}/d",
        bricks[1].display()
    ));
    ok(&format!("ls {}", m.p("d")));
    wait_for("the copy to be healed", Duration::from_secs(10), || {
        meta(&bricks[1]) == want
    });
    // A new set's copy, made by the rebalance, gets them too.
    c.ok(&["volume", "add-brick", "dm", &c.brick("m3"), "force"]);
    bricks.push(c.path("m3"));
    c.ok(&["volume", "rebalance", "dm", "fix-layout", "start", "--wait"]);
    assert_eq!(meta(&bricks[2]), want);
}

#[test]
fn files_moved_by_a_rebalance_stay_found_by_a_client_that_kept_old_layouts() {
    let mut c = Cluster::start();
    // Sets of different sizes: a weighted rebalance changes every layout
    // although the set list does not change.
    let _small = SmallFs::new(c.path("t32"), "32m");
    let _large = SmallFs::new(c.path("t96"), "96m");
    c.volume("kept", 1, &["t32/b", "t96/b"]);
    let m = c.mount("kept");
    ok(&format!(
        "mkdir {0}/d && for i in $(seq 1 200); do echo $i > {0}/d/f$i; done && ls {0}/d > /dev/null",
        m.dir.display()
    ));
    // The directory stays known to the kernel (and its layout to the
    // client) throughout. (Waited for at the end; a failure before that
    // leaves a sleep to end by itself.)
    #[allow(clippy::zombie_processes)]
    let mut pin = std::process::Command::new("sleep")
        .arg("120")
        .current_dir(m.p("d"))
        .spawn()
        .unwrap();
    c.crash_daemon();
    c.start_daemon_env(&[("FAILPOINTS", "rebalance-moved=20*off->panic")]);
    let _ = c.cli(&["volume", "rebalance", "kept", "start"]);
    assert!(
        c.wait_daemon_gone(Duration::from_secs(30)),
        "the fail point was hit"
    );
    // Cut short after 20 moves, never committed: every name is found by
    // name (the kernel asks again).
    ok("echo 2 > /proc/sys/vm/drop_caches");
    let missing = sh(&format!(
        "cd {} && for i in $(seq 1 200); do cat f$i > /dev/null || echo f$i; done",
        m.p("d")
    ));
    let _ = pin.kill();
    assert_eq!(
        String::from_utf8_lossy(&missing.stdout),
        "",
        "not found by name"
    );
    assert!(missing.status.success());
}
