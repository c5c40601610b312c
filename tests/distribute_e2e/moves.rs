//! Files moved by a rebalance: each server moves its own sets' files, open
//! files move and lose no write, a full target keeps every file, files with
//! several names leave a removed set with all of them.

use super::*;

/// The rows of the volume's last rebalance, as server `c` reports them:
/// host → status.
fn rows(c: &Cluster, vol: &str) -> BTreeMap<String, String> {
    let v: serde_json::Value =
        serde_json::from_str(&c.ok(&["volume", "info", vol, "--json"])).unwrap();
    let t = v[0]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "Rebalance")
        .cloned()
        .unwrap_or_default();
    t["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|r| {
                    (
                        r["host"].as_str().unwrap().to_string(),
                        r["status"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The volume's last rebalance task, and the files each row moved, by host.
fn moved_by_row(c: &Cluster, vol: &str) -> (serde_json::Value, BTreeMap<String, u64>) {
    let v: serde_json::Value =
        serde_json::from_str(&c.ok(&["volume", "info", vol, "--json"])).unwrap();
    let task = v[0]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "Rebalance")
        .unwrap()
        .clone();
    let moved = task["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let n = r["progress"]["moved"].as_u64().unwrap();
            (r["host"].as_str().unwrap().to_string(), n)
        })
        .collect();
    (task, moved)
}

#[test]
fn every_server_moves_its_own_sets_files_and_one_that_crashed_finishes_its_share() {
    let mut net = common::net::Net::pool(3);
    let (h0, h1, h2) = (
        net.hosts[0].ip.clone(),
        net.hosts[1].ip.clone(),
        net.hosts[2].ip.clone(),
    );
    let b0 = net.hosts[0].brick("b0");
    let b1 = net.hosts[1].brick("b1");
    net.hosts[0].ok(&["volume", "create", "ms", &b0, &b1, "force"]);
    net.hosts[0].ok(&["volume", "start", "ms"]);
    any_room(&net.hosts[0], "ms");
    let m = net.hosts[0].mount("ms");
    ok(&format!(
        "mkdir -p {0}/d && for i in $(seq 1 120); do echo file$i > {0}/d/f$i; done && \
         for i in $(seq 1 60); do echo top$i > {0}/t$i; done",
        m.dir.display()
    ));
    let before = checksums(&m.dir.to_string_lossy());
    let b2 = net.hosts[2].brick("b2");
    net.hosts[0].ok(&["volume", "add-brick", "ms", &b2, "force"]);
    let bricks: Vec<PathBuf> = (0..3)
        .map(|i| net.hosts[i].path(&format!("b{i}")))
        .collect();

    // The second server dies after its fourth move.
    net.hosts[1].crash_daemon();
    net.hosts[1].start_daemon_env(&[("FAILPOINTS", "rebalance-moved=3*off->panic")]);
    let started = net.hosts[0].ok(&["volume", "rebalance", "ms", "start"]);
    assert!(started.contains("started successfully"), "{started}");
    assert!(
        net.hosts[1].wait_daemon_gone(Duration::from_secs(60)),
        "the fail point was hit"
    );
    wait_for(
        "the other servers' shares to complete",
        Duration::from_secs(60),
        || {
            let r = rows(&net.hosts[0], "ms");
            r.get(&h0).map(String::as_str) == Some("Completed")
                && r.get(&h2).map(String::as_str) == Some("Completed")
        },
    );
    // The crashed server's share stays in progress: nothing is committed.
    assert_eq!(rows(&net.hosts[0], "ms")[&h1], "InProgress");
    let status = net.hosts[0].ok(&["volume", "rebalance", "ms", "status"]);
    for h in [&h0, &h1, &h2] {
        assert_eq!(status.matches(h.as_str()).count(), 1, "{status}");
    }
    assert!(status.contains("in progress"), "{status}");
    let commit = |c: &Cluster| {
        let v: serde_json::Value =
            serde_json::from_str(&c.ok(&["volume", "info", "ms", "--json"])).unwrap();
        v[0]["layout_commit"].as_u64().unwrap()
    };
    let raised = commit(&net.hosts[0]);
    // Every file stays readable meanwhile.
    assert_same(&checksums(&m.dir.to_string_lossy()), &before);

    // Back, it goes on with its share; the last row commits the layouts.
    net.hosts[1].start_daemon();
    wait_for("the rebalance to complete", Duration::from_secs(90), || {
        net.hosts[2]
            .ok(&["volume", "rebalance", "ms", "status"])
            .contains("completed")
            && rows(&net.hosts[2], "ms").values().all(|s| s == "Completed")
    });
    assert_eq!(commit(&net.hosts[2]), raised + 1);
    let (task, moved) = moved_by_row(&net.hosts[0], "ms");
    let moved = |h: &str| moved[h];
    assert!(moved(&h0) > 0 && moved(&h1) > 3, "{task}");
    assert_eq!(moved(&h2), 0, "the new set had nothing to move: {task}");
    assert_same(&checksums(&m.dir.to_string_lossy()), &before);
    let sets = sets_of(&bricks, 1);
    for (p, s) in &sets {
        assert_eq!(s.len(), 1, "{p} on sets {s:?}");
    }
    assert!(sets.values().filter(|s| s.contains(&2)).count() > 20);
    assert_eq!(ok(&format!("ls {} | wc -l", m.p("d"))).trim(), "120");

    // `stop` stops every server's share; nothing is committed, and a new
    // start finishes the work. The first two servers rest after each move.
    for h in &mut net.hosts[..2] {
        h.crash_daemon();
        h.start_daemon_env(&[("FAILPOINTS", "rebalance-moved=sleep(300)")]);
    }
    let b3 = net.hosts[2].brick("b3");
    net.hosts[1].ok(&["volume", "add-brick", "ms", &b3, "force"]);
    let raised = commit(&net.hosts[1]);
    net.hosts[1].ok(&["volume", "rebalance", "ms", "start"]);
    wait_for("files to move", Duration::from_secs(30), || {
        let v: serde_json::Value =
            serde_json::from_str(&net.hosts[0].ok(&["volume", "info", "ms", "--json"])).unwrap();
        v[0]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["kind"] == "Rebalance" && t["progress"]["moved"].as_u64() > Some(0))
    });
    let stopped = net.hosts[2].ok(&["volume", "rebalance", "ms", "stop"]);
    assert!(stopped.contains("stops after that file"), "{stopped}");
    wait_for("every share to stop", Duration::from_secs(30), || {
        rows(&net.hosts[0], "ms")
            .values()
            .all(|s| s != "InProgress")
    });
    let r = rows(&net.hosts[0], "ms");
    assert_eq!(
        (r[&h0].as_str(), r[&h1].as_str()),
        ("Stopped", "Stopped"),
        "{r:?}"
    );
    let status = net.hosts[0].ok(&["volume", "rebalance", "ms", "status"]);
    assert!(status.contains("stopped"), "{status}");
    assert_eq!(commit(&net.hosts[0]), raised + 2, "not committed");
    assert_same(&checksums(&m.dir.to_string_lossy()), &before);
    net.hosts[0].ok(&["volume", "rebalance", "ms", "start"]);
    wait_for(
        "the rebalance to complete",
        Duration::from_secs(120),
        || rows(&net.hosts[0], "ms").values().all(|s| s == "Completed"),
    );
    // Each start raised it by 2 (no clients trust old layouts), the
    // completed one committed its generation: one more.
    assert_eq!(commit(&net.hosts[0]), raised + 2 + 2 + 1);
    assert_same(&checksums(&m.dir.to_string_lossy()), &before);
    let bricks: Vec<PathBuf> = bricks
        .into_iter()
        .chain([net.hosts[2].path("b3")])
        .collect();
    for (p, s) in &sets_of(&bricks, 1) {
        assert_eq!(s.len(), 1, "{p} on sets {s:?}");
    }
}

#[test]
fn files_open_for_writing_and_reading_move_and_lose_no_write() {
    open_files_move(2);
}

#[test]
fn files_open_on_a_volume_without_replicas_move_and_lose_no_write() {
    open_files_move(1);
}

/// A writer appends to files it keeps open, and a reader rereads one
/// more, while a rebalance moves them (over sets of `replica` bricks).
fn open_files_move(replica: usize) {
    let c = Cluster::start();
    let first: Vec<&str> = ["o1", "o2"][..replica].to_vec();
    let mut bricks = c.volume("mo", replica, &first);
    any_room(&c, "mo");
    let m = c.mount("mo");
    ok(&format!(
        "mkdir -p {0}/d && for i in $(seq 1 60); do echo start$i > {0}/d/f$i; done && \
         head -c 3000000 /dev/urandom > {0}/d/big",
        m.dir.display()
    ));
    let big = ok(&format!("md5sum < {}", m.p("d/big")));
    // A writer appends a numbered line to 30 files it keeps open, and a
    // reader keeps one more open, all through the rebalance.
    let stop = c.path("stop-writing");
    let paths: Vec<String> = (1..=30).map(|i| m.p(&format!("d/f{i}"))).collect();
    assert!(paths.iter().all(|p| Path::new(p).exists()));
    let writer = appender(&paths, &stop, 50);
    // It also opens and reads every file again and again: opens race
    // the moves.
    let reader = {
        let (stop, path, dir) = (stop.display().to_string(), m.p("d/big"), m.p("d"));
        std::thread::spawn(move || {
            sh(&format!(
                "python3 -c \"
import hashlib, os, time
fd = os.open('{path}', os.O_RDONLY)
sums = set()
while not os.path.exists('{stop}'):
    sums.add(hashlib.md5(os.pread(fd, 4000000, 0)).hexdigest())
    for i in range(1, 61):
        with open('{dir}/f%d' % i, 'rb') as f:
            f.read()
    time.sleep(0.02)
sums.add(hashlib.md5(os.pread(fd, 4000000, 0)).hexdigest())
os.close(fd)
print(' '.join(sorted(sums)))
\""
            ))
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    c.ok(&[
        "volume",
        "add-brick",
        "mo",
        &c.brick("o3"),
        &c.brick("o4"),
        "force",
    ]);
    bricks.extend([c.path("o3"), c.path("o4")]);
    c.ok(&["volume", "rebalance", "mo", "start"]);
    wait_for("the rebalance to end", Duration::from_secs(120), || {
        let s = c.ok(&["volume", "rebalance", "mo", "status"]);
        s.contains("completed") || s.contains("failed")
    });
    let status = c.ok(&["volume", "rebalance", "mo", "status", "--json"]);
    let t: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(t["status"], "Completed", "{status}");
    assert_eq!(
        t["progress"]["skipped"], 0,
        "open files are moved too: {status}"
    );
    std::fs::write(&stop, "").unwrap();
    let w = writer.join().unwrap();
    assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
    let lines: usize = String::from_utf8_lossy(&w.stdout).trim().parse().unwrap();
    let r = reader.join().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(
        String::from_utf8_lossy(&r.stdout).trim(),
        big.split_whitespace().next().unwrap(),
        "the open file read the same before, during and after its move"
    );

    // Every write reached the file, in order, where it is now (read on
    // its bricks: this client may still have the old place in mind).
    let sets = sets_of(&bricks, replica);
    for (p, s) in &sets {
        assert_eq!(s.len(), 1, "{p} on sets {s:?}");
    }
    for i in 1..=30 {
        let rel = format!("d/f{i}");
        let text = std::fs::read_to_string(bricks[replica * sets[&rel][0]].join(&rel)).unwrap();
        let mut want = format!("start{i}\n");
        for n in 0..lines {
            want.push_str(&format!("{n}\n"));
        }
        assert!(
            text == want,
            "{rel}: {} lines of {}",
            text.lines().count(),
            lines + 1
        );
    }
    let moved_open = (1..=30).filter(|i| sets[&format!("d/f{i}")] == [1]).count();
    assert!(
        moved_open >= 5,
        "{moved_open} of the open files moved: {sets:?}"
    );
    let log = std::fs::read_to_string(c.path("client.log")).unwrap();
    assert!(
        log.contains("is open where it is now"),
        "the client followed its open files"
    );
    if replica > 1 {
        assert_bricks_identical(&bricks[..2]);
        assert_bricks_identical(&bricks[2..]);
    }
}

#[test]
fn a_target_filled_during_the_move_keeps_every_file_and_no_partial_copy() {
    let c = Cluster::start();
    let _large = SmallFs::new(c.path("large"), "64m");
    let _small = SmallFs::new(c.path("small"), "3m");
    let mut bricks = c.volume("fill", 1, &["large/b"]);
    for (k, v) in [
        ("cluster.weighted-rebalance", "off"),
        ("cluster.min-free-disk", "0%"),
        ("cluster.rebal-throttle", "aggressive"),
    ] {
        c.ok(&["volume", "set", "fill", k, v]);
    }
    let m = c.mount("fill");
    ok(&format!(
        "mkdir {0}/d && for i in $(seq 1 32); do head -c 1048576 /dev/urandom > {0}/d/f$i || exit 1; done",
        m.dir.display()
    ));
    let before = checksums(&m.dir.to_string_lossy());
    // Equal shares: half the files hash to a set with room for two; four
    // move at once, each seeing room for itself. (32 files: where the new
    // set's half starts follows the directory's gfid, and 16 names could
    // leave it only two.)
    c.ok(&["volume", "add-brick", "fill", &c.brick("small/b"), "force"]);
    bricks.push(c.path("small/b"));
    c.ok(&["volume", "rebalance", "fill", "start"]);
    wait_for("the rebalance to end", Duration::from_secs(60), || {
        !c.ok(&["volume", "rebalance", "fill", "status"])
            .contains("in progress")
    });
    let status = c.ok(&["volume", "rebalance", "fill", "status", "--json"]);
    let t: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(t["status"], "Completed", "{status}");
    assert!(t["progress"]["skipped"].as_u64().unwrap() > 0, "{status}");
    assert_eq!(t["progress"]["failed"], 0, "{status}");
    let log = std::fs::read_to_string(c.path("daemon.log")).unwrap();
    assert!(
        log.contains("no room left on the target"),
        "a copy ran out of room"
    );

    assert_same(&checksums(&m.dir.to_string_lossy()), &before);
    for (p, s) in &sets_of(&bricks, 1) {
        assert_eq!(s.len(), 1, "{p} on sets {s:?}");
    }
    // Pointers left on the full set hold no data.
    let partial = ok(&format!(
        "find {} -path '*/.mortar' -prune -o -type f -perm 1000 -size +0 -print",
        bricks[1].display()
    ));
    assert_eq!(partial.trim(), "", "partial copies left behind");
    assert!(files_on(&bricks[1]).values().any(|pointer| !*pointer));
}

#[test]
fn files_with_several_names_leave_a_removed_set_with_all_of_them() {
    several_names_leave(&["h1", "h2"]);
}

/// With two sets left, a file's names hash to both: the set that takes
/// the file holds every name of it, and pointers lead to it from the
/// other (lookups follow a pointer by name).
#[test]
fn files_with_several_names_leave_a_removed_set_for_two_others() {
    several_names_leave(&["h1", "h2", "h3"]);
}

/// Files with three names each (two directories) leave the second of
/// the sets `names` by remove-brick: every name still leads to one file.
fn several_names_leave(names: &[&str]) {
    let c = Cluster::start();
    let bricks = c.volume("hl", 1, names);
    any_room(&c, "hl");
    let m = c.mount("hl");
    ok(&format!(
        "mkdir {0}/d {0}/e && for i in $(seq 1 30); do echo file$i > {0}/d/h$i && ln {0}/d/h$i {0}/e/l$i && ln {0}/d/h$i {0}/d/m$i; done",
        m.dir.display()
    ));
    let before = checksums(&m.dir.to_string_lossy());
    let on_second = files_on(&bricks[1]).values().filter(|p| !**p).count();
    assert!(on_second > 10, "{on_second} names on the set to be removed");
    let second = c.brick("h2");
    c.ok(&["volume", "remove-brick", "hl", &second, "start"]);
    wait_for("the set to be emptied", Duration::from_secs(60), || {
        !c.ok(&["volume", "remove-brick", "hl", &second, "status"])
            .contains("in progress")
    });
    let status = c.ok(&["volume", "remove-brick", "hl", &second, "status"]);
    assert!(status.contains("completed"), "{status}");
    let switched = switches(&m);
    c.ok(&["volume", "remove-brick", "hl", &second, "commit"]);
    assert!(files_on(&bricks[1]).values().all(|pointer| *pointer));
    // The mount runs the graph without the removed set a moment after
    // the commit (its brick serves for two seconds more).
    wait_for(
        "the mount to leave the removed set",
        Duration::from_secs(10),
        || switches(&m) > switched,
    );
    assert_same(&checksums(&m.dir.to_string_lossy()), &before);
    // Each file's three names are still one file, on a set left, and
    // through a mount that never knew where it was.
    let m2 = c.mount("hl");
    assert_same(&checksums(&m2.dir.to_string_lossy()), &before);
    for i in 1..=30 {
        let on = |b: &std::path::Path, p: &str| {
            ok(&format!(
                "stat -c '%i' {} 2>/dev/null || true",
                b.join(p).display()
            ))
        };
        let held: Vec<&std::path::PathBuf> = [&bricks[0]]
            .into_iter()
            .chain(bricks.get(2))
            .filter(|b| {
                files_on(b).get(&format!("d/h{i}")) == Some(&false)
                    || files_on(b).get(&format!("e/l{i}")) == Some(&false)
            })
            .collect();
        assert_eq!(held.len(), 1, "file {i} on sets {held:?}");
        let inode = |p: &str| on(held[0], p);
        let first = inode(&format!("d/h{i}"));
        let links = ok(&format!("stat -c %h {}", m.p(&format!("d/h{i}"))));
        assert_eq!(links.trim(), "3", "d/h{i}");
        assert_eq!(inode(&format!("e/l{i}")), first);
        assert_eq!(inode(&format!("d/m{i}")), first);
        ok(&format!("echo more >> {}", m.p(&format!("e/l{i}"))));
        assert_eq!(
            std::fs::read_to_string(m.dir.join(format!("d/m{i}"))).unwrap(),
            format!("file{i}\nmore\n")
        );
    }
}
