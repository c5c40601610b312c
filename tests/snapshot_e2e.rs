//! Snapshots of volumes on bricks of their own file systems (loop-mounted
//! btrfs, XFS and ext4 images): taken under a writer, each brick's copy
//! holds the same completed writes; copies keep what the bricks held;
//! a volume whose bricks have no mechanism, or one of whose bricks is
//! down, is refused with the bricks named and nothing left behind.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A replica-3 volume `vol` over three new bricks under `dir`.
fn replica3(c: &Cluster, vol: &str, dir: &Path) -> Vec<PathBuf> {
    let bricks: Vec<PathBuf> = (1..=3).map(|i| dir.join(format!("{vol}-b{i}"))).collect();
    let mut args = vec!["volume", "create", vol, "replica", "3", "transport", "tcp"];
    let named: Vec<String> = bricks
        .iter()
        .map(|b| format!("{}:{}", c.ip, b.display()))
        .collect();
    args.extend(named.iter().map(String::as_str));
    args.push("force");
    c.ok(&args);
    c.ok(&["volume", "start", vol]);
    bricks
}

fn snap_dir(brick: &Path, name: &str) -> PathBuf {
    brick.join(".mortar/snaps").join(name)
}

/// Each file the writer wrote: when its write began and when it was
/// answered (synced).
type Written = Arc<Mutex<Vec<(usize, Instant, Instant)>>>;

fn content(i: usize) -> Vec<u8> {
    format!("file {i}\n").repeat(50).into_bytes()
}

/// Writers per volume, each writing and syncing new files one at a time.
const WRITERS: usize = 4;

/// Takes snapshot `name` of `vol` (mounted at `m`) while `WRITERS`
/// writers write new files under `w/`: every write answered before it was
/// asked for is in every brick's copy, none begun after it was answered
/// is in any, and the copies differ at most in writes in flight while
/// the barriers were up (one per writer).
fn snapshot_under_writers(
    c: &Cluster,
    vol: &str,
    bricks: &[PathBuf],
    m: &Mount,
    name: &str,
) -> Vec<(String, Vec<u8>)> {
    std::fs::create_dir(m.p("w")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let written: Written = Default::default();
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let (stop, written, dir) = (stop.clone(), written.clone(), m.p("w"));
            std::thread::spawn(move || {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    write_synced(format!("{dir}/f{i}"), content(i)).expect("a writer's write");
                    written.lock().unwrap().push((i, began, Instant::now()));
                    i += WRITERS;
                }
            })
        })
        .collect();
    wait_for("the writers to get going", Duration::from_secs(20), || {
        written.lock().unwrap().len() >= 40
    });
    let asked = Instant::now();
    let said = c.ok(&[
        "snapshot",
        "create",
        name,
        vol,
        "no-timestamp",
        "description",
        "under writers",
    ]);
    let answered = Instant::now();
    assert!(
        said.contains(&format!("Snap {name} created successfully")),
        "{said}"
    );
    let before = written.lock().unwrap().len();
    wait_for("the writers to go on", Duration::from_secs(20), || {
        written.lock().unwrap().len() >= before + 40
    });
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let copies: Vec<BTreeMap<String, Vec<u8>>> = bricks
        .iter()
        .map(|b| {
            let w = snap_dir(b, name).join("w");
            std::fs::read_dir(&w)
                .unwrap_or_else(|e| panic!("{}: {e}", w.display()))
                .map(|e| {
                    let e = e.unwrap();
                    let name = e.file_name().to_string_lossy().into_owned();
                    (name, std::fs::read(e.path()).unwrap())
                })
                .collect()
        })
        .collect();
    let mut straddling = Vec::new();
    let mut answered_before = Vec::new();
    for (i, began, done) in written.lock().unwrap().iter().copied() {
        let file = format!("f{i}");
        let held: Vec<Option<&Vec<u8>>> = copies.iter().map(|c| c.get(&file)).collect();
        if done < asked {
            for h in &held {
                assert_eq!(
                    *h,
                    Some(&content(i)),
                    "{file}, answered before the snapshot"
                );
            }
            answered_before.push((format!("w/{file}"), content(i)));
        } else if began > answered {
            assert!(
                held.iter().all(Option::is_none),
                "{file}, begun after the snapshot"
            );
        } else if held.windows(2).any(|w| w[0] != w[1]) {
            straddling.push(file);
        }
    }
    assert!(
        straddling.len() <= WRITERS,
        "writes that differ between the copies: {straddling:?}"
    );
    answered_before
}

#[test]
fn a_snapshot_under_writers_holds_the_same_completed_writes_on_every_brick() {
    let fs = LoopFs::new("btrfs", "1G");
    let c = Cluster::start();
    let bricks = replica3(&c, "sv", &fs.dir);
    let m = c.mount("sv");
    let kept = snapshot_under_writers(&c, "sv", &bricks, &m, "s1");
    // The copies are read-only (btrfs subvolume snapshots).
    let e = std::fs::write(snap_dir(&bricks[0], "s1").join("new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));

    let info = c.ok(&["--json", "snapshot", "info", "s1"]);
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    let pause = info[0]["pause_ms"].as_u64().unwrap();
    eprintln!("changes held back for {pause} ms");
    assert_eq!(info[0]["mechanisms"][0], "btrfs-subvolume");
    assert_eq!(info[0]["description"], "under writers");

    // A name with the time appended; list, status, delete.
    let said = c.ok(&["snapshot", "create", "s2", "sv"]);
    assert!(said.contains("Snap s2_GMT-"), "{said}");
    let info = c.ok(&["volume", "info", "sv"]);
    assert!(info.contains("Snapshot Count: 2"), "{info}");
    let list = c.ok(&["snapshot", "list", "sv"]);
    let names: Vec<&str> = list.lines().collect();
    assert_eq!(names.len(), 2, "{list}");
    assert_eq!(names[0], "s1");
    let status = c.ok(&["snapshot", "status", "s1"]);
    assert_eq!(
        status.matches("Present           :   Yes").count(),
        3,
        "{status}"
    );
    c.refused(
        &["snapshot", "create", "s1", "sv", "no-timestamp"],
        "Snapshot s1 already exists",
        &c.state(),
    );

    // Restore: refused while the volume is in use; stopped, every brick
    // goes back to its copy, and they heal to identical bricks.
    std::fs::write(m.p("after"), b"after").unwrap();
    std::fs::remove_file(m.p(&kept[0].0)).unwrap();
    c.refused(
        &["snapshot", "restore", "s1"],
        "Volume needs to be stopped before restoring a snapshot",
        &c.state(),
    );
    m.unmount();
    c.ok(&["volume", "stop", "sv"]);
    let said = c.ok(&["snapshot", "restore", "s1"]);
    assert!(said.contains("Snap s1 restored successfully"), "{said}");
    c.ok(&["volume", "start", "sv"]);
    let m = c.mount("sv");
    c.ok(&["volume", "heal", "sv"]);
    wait_healed(&c, "sv", Duration::from_secs(60));
    assert!(
        !Path::new(&m.p("after")).exists(),
        "written after the snapshot"
    );
    for (file, data) in &kept {
        assert_eq!(&std::fs::read(m.p(file)).unwrap(), data, "{file}");
    }
    m.unmount();
    assert_bricks_identical(&bricks);
    assert_eq!(c.ok(&["snapshot", "list", "sv"]).lines().count(), 2);

    c.ok(&["volume", "stop", "sv"]);
    c.refused(&["volume", "delete", "sv"], "has 2 snapshot(s)", &c.state());
    c.refused(
        &["snapshot", "create", "s3", "sv"],
        "is not started",
        &c.state(),
    );
    let said = c.ok(&["snapshot", "delete", "volume", "sv"]);
    assert_eq!(
        said.matches("snap removed successfully").count(),
        2,
        "{said}"
    );
    for b in &bricks {
        let left: Vec<_> = std::fs::read_dir(b.join(".mortar/snaps"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{}: {left:?}", b.display());
    }
    assert_eq!(c.ok(&["snapshot", "list"]).trim(), "No snapshots present");
    c.ok(&["volume", "delete", "sv"]);
}

#[test]
fn a_reflink_copy_keeps_what_each_brick_held_and_a_brick_down_refuses() {
    let fs = LoopFs::new("xfs", "1G");
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = replica3(&c, "xv", &fs.dir);
    let m = c.mount("xv");
    std::fs::create_dir_all(m.p("a/b")).unwrap();
    for i in 0..50 {
        std::fs::write(m.p(&format!("a/b/f{i}")), vec![i as u8; 10_000 + i]).unwrap();
    }
    std::fs::hard_link(m.p("a/b/f1"), m.p("a/linked")).unwrap();
    std::os::unix::fs::symlink("b/f2", m.p("a/sym")).unwrap();
    std::os::unix::fs::chown(m.p("a/b/f3"), Some(1000), Some(1000)).unwrap();
    ok(&format!("setfattr -n user.note -v kept {}", m.p("a/b/f4")));
    ok(&format!("sync -f {}", m.p("a")));
    m.unmount();
    c.ok(&["snapshot", "create", "r1", "xv", "no-timestamp"]);
    for b in &bricks {
        let copy = snap_dir(b, "r1");
        assert_eq!(brick_digest(&copy), brick_digest(b), "{}", copy.display());
    }

    // A clone: a new volume of writable copies, beside the bricks.
    let said = c.ok(&["snapshot", "clone", "xc", "r1"]);
    assert!(said.contains("Clone xc created successfully"), "{said}");
    c.refused(
        &["snapshot", "clone", "xc", "r1"],
        "Volume xc already exists",
        &c.state(),
    );
    let info: serde_json::Value =
        serde_json::from_str(&c.ok(&["--json", "volume", "info", "xc"])).unwrap();
    assert_eq!(info[0]["replica"], 3);
    assert_eq!(info[0]["status"], "Created");
    c.ok(&["volume", "start", "xc"]);
    let mc = c.mount("xc");
    for i in 0..50 {
        let f = format!("a/b/f{i}");
        assert_eq!(
            std::fs::read(mc.p(&f)).unwrap(),
            vec![i as u8; 10_000 + i],
            "{f}"
        );
    }
    assert_eq!(
        std::fs::read_link(mc.p("a/sym")).unwrap(),
        Path::new("b/f2")
    );
    std::fs::write(mc.p("a/b/f0"), b"the clone's own").unwrap();
    mc.unmount();
    for b in &bricks {
        let cb = PathBuf::from(format!("{}-xc", b.display()));
        assert_eq!(
            std::fs::read(cb.join("a/b/f0")).unwrap(),
            b"the clone's own"
        );
        assert_eq!(std::fs::read(b.join("a/b/f0")).unwrap(), vec![0u8; 10_000]);
    }

    // Under writers, on bricks whose copies take a while (a tree of
    // 2,000 more files to walk).
    let m = c.mount("xv");
    std::fs::create_dir(m.p("many")).unwrap();
    for i in 0..2000 {
        std::fs::write(m.p(&format!("many/{i}")), b"x").unwrap();
    }
    snapshot_under_writers(&c, "xv", &bricks, &m, "r0");
    c.ok(&["snapshot", "delete", "r0"]);
    let info = c.ok(&["--json", "snapshot", "info", "r1"]);
    assert!(info.contains("\"reflink\""), "{info}");

    // A brick that does not answer: refused, naming it; nothing kept.
    let before = c.state();
    let pid = freeze(&c, "xv", 1);
    let err = c.fails(&["snapshot", "create", "r2", "xv", "no-timestamp"]);
    thaw(pid);
    assert!(err.contains("every brick must be up"), "{err}");
    assert!(err.contains(&bricks[1].display().to_string()), "{err}");
    assert_eq!(c.state(), before);
    for b in &bricks {
        assert!(!snap_dir(b, "r2").exists(), "{}", b.display());
    }
    assert_eq!(c.ok(&["snapshot", "list"]).trim(), "r1");
}

#[test]
fn bricks_without_a_snapshot_mechanism_are_named_and_nothing_is_taken() {
    let fs = LoopFs::new("ext4", "256M");
    let c = Cluster::start();
    let bricks = replica3(&c, "ev", &fs.dir);
    let m = c.mount("ev");
    std::fs::write(m.p("f"), b"kept").unwrap();
    let before = c.state();
    let err = c.fails(&["snapshot", "create", "e1", "ev"]);
    assert!(err.contains("cannot be snapshotted"), "{err}");
    for b in &bricks {
        assert!(err.contains(&format!("{}:{}", c.ip, b.display())), "{err}");
        assert!(err.contains("no snapshot mechanism"), "{err}");
        let left: Vec<_> = std::fs::read_dir(b.join(".mortar/snaps"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{}: {left:?}", b.display());
    }
    assert_eq!(c.state(), before);
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"kept");
    assert_eq!(c.ok(&["snapshot", "list"]).trim(), "No snapshots present");
    let err = c.fails(&["snapshot", "create", "../x", "ev", "no-timestamp"]);
    assert!(err.contains("is not a snapshot name"), "{err}");
}

#[test]
fn the_pools_limits_refuse_or_let_the_oldest_go() {
    let fs = LoopFs::new("btrfs", "512M");
    let c = Cluster::start();
    let brick = format!("{}:{}", c.ip, fs.dir.join("lb").display());
    c.ok(&["volume", "create", "lv", &brick, "force"]);
    c.ok(&["volume", "start", "lv"]);
    c.ok(&[
        "snapshot",
        "config",
        "snap-max-hard-limit",
        "3",
        "snap-max-soft-limit",
        "67",
    ]);
    let shown = c.ok(&["snapshot", "config"]);
    assert!(shown.contains("snap-max-hard-limit : 3"), "{shown}");
    assert!(shown.contains("snap-max-soft-limit : 67%"), "{shown}");
    assert!(shown.contains("auto-delete : disable"), "{shown}");
    let create = |n: &str| c.ok(&["snapshot", "create", n, "lv", "no-timestamp"]);
    assert!(!create("a1").contains("Warning"));
    assert!(create("a2").contains("reached its soft limit"));
    create("a3");
    c.refused(
        &["snapshot", "create", "a4", "lv", "no-timestamp"],
        "snap-max-hard-limit",
        &c.state(),
    );
    let e = c.fails(&["snapshot", "config", "lv", "snap-max-hard-limit", "3"]);
    assert!(e.contains("per-volume limits are not built"), "{e}");
    c.ok(&["snapshot", "config", "auto-delete", "enable"]);
    create("a5");
    let list = c.ok(&["snapshot", "list", "lv"]);
    assert_eq!(list.lines().collect::<Vec<_>>(), ["a3", "a5"], "{list}");
    for gone in ["a1", "a2"] {
        assert!(
            !fs.dir.join("lb/.mortar/snaps").join(gone).exists(),
            "{gone}"
        );
    }
}

#[test]
fn barriers_left_up_by_a_leader_that_died_fall_by_themselves() {
    let fs = LoopFs::new("btrfs", "512M");
    let mut c = Cluster::start();
    let bricks = replica3(&c, "dv", &fs.dir);
    c.ok(&["volume", "set", "dv", "features.barrier-timeout", "3"]);
    let m = c.mount("dv");
    write_synced(m.p("before"), b"before").unwrap();
    c.crash_daemon();
    c.start_daemon_env(&[("FAILPOINTS", "snapshot-barriers-up=panic")]);
    let _ = c.cli(&["snapshot", "create", "z1", "dv", "no-timestamp"]);
    assert!(
        c.wait_daemon_gone(Duration::from_secs(10)),
        "the fail point was hit"
    );
    // Changes wait behind the barriers, which fall after the timeout.
    let after = m.p("after");
    let writer = std::thread::spawn(move || write_synced(after, b"after"));
    wait_for("the barriers to fall", Duration::from_secs(30), || {
        writer.is_finished()
    });
    writer
        .join()
        .unwrap()
        .expect("a write once the barriers fell");
    assert_eq!(std::fs::read(m.p("after")).unwrap(), b"after");
    c.start_daemon();
    assert_eq!(c.ok(&["snapshot", "list"]).trim(), "No snapshots present");
    for b in &bricks {
        assert!(!snap_dir(b, "z1").exists(), "{}", b.display());
        assert_eq!(std::fs::read(b.join("after")).unwrap(), b"after");
    }
    // And the next snapshot is taken as any other.
    c.ok(&["snapshot", "create", "z2", "dv", "no-timestamp"]);
}

#[test]
fn a_dispersed_volume_is_snapshotted_cloned_and_read_back() {
    let fs = LoopFs::new("xfs", "1G");
    let c = Cluster::start();
    let mut args = vec!["volume", "create", "dp", "disperse", "6", "redundancy", "2"];
    let named: Vec<String> = (1..=6)
        .map(|i| format!("{}:{}", c.ip, fs.dir.join(format!("dp-b{i}")).display()))
        .collect();
    args.extend(named.iter().map(String::as_str));
    args.push("force");
    c.ok(&args);
    c.ok(&["volume", "start", "dp"]);
    let m = c.mount("dp");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(m.p("big"), &data).unwrap();
    std::fs::write(m.p("small"), b"small").unwrap();
    ok(&format!("sync -f {}", m.p("big")));
    c.ok(&["snapshot", "create", "d1", "dp", "no-timestamp"]);
    std::fs::write(m.p("big"), b"overwritten").unwrap();
    m.unmount();
    c.ok(&["snapshot", "clone", "dpc", "d1"]);
    c.ok(&["volume", "start", "dpc"]);
    let mc = c.mount("dpc");
    assert_eq!(std::fs::read(mc.p("big")).unwrap(), data);
    assert_eq!(std::fs::read(mc.p("small")).unwrap(), b"small");
    mc.unmount();
    c.ok(&["volume", "stop", "dp"]);
    c.ok(&["snapshot", "restore", "d1"]);
    c.ok(&["volume", "start", "dp"]);
    let m = c.mount("dp");
    assert_eq!(std::fs::read(m.p("big")).unwrap(), data);
}
