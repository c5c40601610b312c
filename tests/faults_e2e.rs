//! Faults an application must not see: real daemons, bricks and mounts,
//! bricks killed (`kill -9`) or restarted while files are read and
//! written, and the machine loaded by CPU-burning processes beside them.

mod common;
use common::*;
use std::os::unix::fs::FileExt;
use std::time::Duration;

const HEAL_TIMEOUT: Duration = Duration::from_secs(60);

/// Background processes, killed when this goes (also on a failed test).
struct Background(Vec<std::process::Child>);

impl Background {
    /// Processes that keep the CPUs busy.
    fn burners(n: usize) -> Background {
        Background(
            (0..n)
                .map(|_| {
                    std::process::Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A stopped process, continued when this goes (also on a failed test).
struct Frozen(u64);

impl Drop for Frozen {
    fn drop(&mut self) {
        thaw(self.0);
    }
}

/// A tree of nested directories, files of many sizes, modes, a symlink.
fn make_tree(dir: &std::path::Path, dirs: usize, files: usize) {
    ok(&format!(
        "mkdir -p {s} && cd {s} && for d in $(seq 1 {dirs}); do mkdir -p d$d/e; \
         for f in $(seq 1 {files}); do head -c $((f * 997)) /dev/urandom > d$d/e/f$f; done; \
         chmod 750 d$d; ln -s e/f2 d$d/sym; done",
        s = dir.display()
    ));
}

/// Reads every file of `tree` through the mount and compares it with
/// `src`; returns what went wrong (empty when everything read back).
fn read_back(src: &std::path::Path, tree: &str) -> String {
    let o = sh(&format!(
        "diff -r {} {tree} 2>&1; find {tree} -type f -exec cat {{}} + > /dev/null",
        src.display()
    ));
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Drops the kernel's cached names and attributes, so that the next reads
/// start from listings (READDIRPLUS) and lookups.
fn drop_caches() {
    ok("sync; echo 3 > /proc/sys/vm/drop_caches");
}

#[test]
fn files_a_restarted_brick_missed_are_read_from_the_good_copies() {
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = c.volume("ev", 3, &["e1", "e2", "e3"]);
    // No heal: the restarted brick keeps lacking what it missed.
    c.ok(&["volume", "set", "ev", "cluster.self-heal-daemon", "off"]);
    let m = c.mount("ev");
    ok(&format!("mkdir {}", m.p("tree")));
    let src = c.path("src");
    make_tree(&src, 4, 30);
    // The daemon, stopped, cannot restart the brick until it goes on.
    let brick = brick_pid(&c, "ev", 1);
    let daemon = c.daemon_pid();
    ok(&format!("kill -STOP {daemon}"));
    ok(&format!("kill -9 {brick}"));
    let copied = sh(&format!("cp -a {}/. {}", src.display(), m.p("tree")));
    ok(&format!("kill -CONT {daemon}"));
    assert!(copied.status.success(), "{copied:?}");
    wait_connections(&c, 4);
    // Every way of reaching the files: names the kernel still caches (the
    // files' blame comes from their create), names it has to look up, and
    // listings handed over with attributes (READDIRPLUS).
    let tree = m.p("tree");
    for round in 0..3 {
        let bad = read_back(&src, &tree);
        assert!(bad.is_empty(), "round {round}: {bad}");
        drop_caches();
        let o = sh(&format!("ls -lR {tree} > /dev/null"));
        assert!(o.status.success(), "{o:?}");
        let bad = read_back(&src, &tree);
        assert!(bad.is_empty(), "round {round} after ls -lR: {bad}");
        std::thread::sleep(Duration::from_millis(1100));
    }
    assert!(
        !bricks[1].join("tree/d1").exists(),
        "the test needs a stale brick"
    );
}

/// One round of the killed-brick test: `cp -a` of a tree with a brick
/// killed in the middle (the daemon starts it again), then every file read
/// back at once, and once more after heal.
fn killed_brick_round(round: usize, burners: usize) {
    let load = Background::burners(burners);
    let c = Cluster::start();
    c.one_process_per_brick();
    let vol = format!("kb{round}");
    let bricks = c.volume(&vol, 3, &["k1", "k2", "k3"]);
    let m = c.mount(&vol);
    let src = c.path("src");
    make_tree(&src, 6, 40);
    let pid = brick_pid(&c, &vol, 1);
    let cp = std::thread::spawn({
        let (s, t) = (src.display().to_string(), m.p("tree"));
        move || sh(&format!("cp -a {s} {t}"))
    });
    std::thread::sleep(Duration::from_millis(300));
    ok(&format!("kill -9 {pid}"));
    let cp = cp.join().unwrap();
    assert!(cp.status.success(), "round {round}: cp failed: {cp:?}");
    wait_brick_restarted(&c, &vol, 1, pid);
    let tree = m.p("tree");
    for pass in 0..2 {
        let bad = read_back(&src, &tree);
        assert!(bad.is_empty(), "round {round} pass {pass}: {bad}");
        drop_caches();
    }
    // The load is for the reads above; heal is timed without it.
    drop(load);
    wait_healed(&c, &vol, 2 * HEAL_TIMEOUT);
    let bad = read_back(&src, &tree);
    assert!(bad.is_empty(), "round {round} after heal: {bad}");
    assert_bricks_identical(&bricks);
}

#[test]
fn a_brick_killed_during_cp_never_shows_stale_handles() {
    killed_brick_round(0, 0);
    killed_brick_round(1, 0);
}

#[test]
fn a_brick_killed_during_cp_on_a_loaded_machine_never_shows_stale_handles() {
    killed_brick_round(2, 2);
    killed_brick_round(3, 2);
}

/// Writes through one file descriptor, held open while every brick in
/// turn is killed and started again by its daemon: each write goes on.
#[test]
fn an_open_file_outlives_every_brick_restarting() {
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = c.volume("ov", 3, &["o1", "o2", "o3"]);
    let m = c.mount("ov");
    let f = m.p("held");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&f)
        .unwrap();
    use std::io::{Read, Seek, Write};
    let mut want = Vec::new();
    let mut write = |file: &mut std::fs::File, what: &str| {
        let chunk = format!("{what}\n").repeat(1000);
        file.write_all(chunk.as_bytes())
            .unwrap_or_else(|e| panic!("write {what}: {e}"));
        file.sync_all()
            .unwrap_or_else(|e| panic!("fsync {what}: {e}"));
        want.extend_from_slice(chunk.as_bytes());
    };
    write(&mut file, "before");
    let mut connections = 3;
    for i in 0..3 {
        let pid = brick_pid(&c, "ov", i);
        ok(&format!("kill -9 {pid}"));
        write(&mut file, &format!("brick {i} down"));
        wait_brick_restarted(&c, "ov", i, pid);
        connections += 1;
        wait_connections(&c, connections);
        write(&mut file, &format!("brick {i} back"));
        // As in a rolling restart: the next brick goes once heal is done
        // (else no copy would hold every write, and writes are refused).
        wait_healed(&c, "ov", HEAL_TIMEOUT);
    }
    let mut got = Vec::new();
    file.seek(std::io::SeekFrom::Start(0)).unwrap();
    file.read_to_end(&mut got).unwrap();
    assert!(
        got == want,
        "the file read back differs from what was written"
    );
    drop(file);
    wait_healed(&c, "ov", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
    for b in &bricks {
        assert_eq!(std::fs::read(b.join("held")).unwrap(), want);
    }
}

/// One round of the rolling restart that made a split-brain (the faults
/// issue): a writer appends records through one open file, each followed
/// by fsync, while every brick in turn is killed and, as soon as its
/// daemon has it online again, the next one is killed, with no wait for
/// heal. Writes may fail while no good copy is up; none may be lost once
/// acknowledged; heal must converge with no split-brain and identical
/// bricks.
fn rolling_restart_round(round: usize, burners: usize) {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let load = Background::burners(burners);
    let c = Cluster::start();
    c.one_process_per_brick();
    let vol = format!("rr{round}");
    let bricks = c.volume(&vol, 3, &["r1", "r2", "r3"]);
    let m = c.mount(&vol);
    let path = m.p("log");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = std::thread::spawn({
        let stop = stop.clone();
        move || {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .unwrap();
            // (record, acknowledged)
            let mut out: Vec<(String, bool)> = Vec::new();
            let mut errors = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let rec = format!("record {:06} {}\n", out.len(), "x".repeat(200));
                let r = match file.write_all(rec.as_bytes()) {
                    Err(e) => Err(format!("{} write: {e}", out.len())),
                    Ok(()) => file
                        .sync_all()
                        .map_err(|e| format!("{} fsync: {e}", out.len())),
                };
                if let Err(e) = &r {
                    errors.push(e.clone());
                }
                out.push((rec, r.is_ok()));
                std::thread::sleep(Duration::from_millis(5));
            }
            (out, errors)
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..3 {
        let pid = brick_pid(&c, &vol, i);
        ok(&format!("kill -9 {pid}"));
        wait_brick_restarted(&c, &vol, i, pid);
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let (records, errors) = writer.join().unwrap();
    drop(load);
    wait_healed(&c, &vol, 2 * HEAL_TIMEOUT);
    let info = c.ok(&["volume", "heal", &vol, "info", "split-brain"]);
    assert!(
        !info
            .lines()
            .any(|l| l.contains("split-brain:") && !l.ends_with(": 0")),
        "round {round}: split-brain: {info}"
    );
    assert_bricks_identical(&bricks);
    let got = std::fs::read_to_string(bricks[0].join("log")).unwrap();
    if let Err(e) = check_log(&got, &records) {
        panic!(
            "round {round}: {e}; acknowledged: {:?}; errors: {errors:?}",
            records
                .iter()
                .enumerate()
                .filter(|(_, (_, a))| *a)
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        );
    }
    let acked = records.iter().filter(|(_, a)| *a).count();
    eprintln!(
        "round {round}: {acked} of {} records acknowledged; the first errors: {:?}",
        records.len(),
        &errors[..errors.len().min(3)]
    );
}

/// Checks a log the rolling restart wrote: every acknowledged record is
/// there, whole and in order; between two of them only bytes of the
/// records that failed between them. A failed append may be there whole,
/// in part or not at all: the kernel sends a write that starts inside a
/// page it does not hold as one request per page, and the part that
/// reached the copies that became the source stays (the application was
/// told the write failed, which says it may or may not be there).
fn check_log(got: &str, records: &[(String, bool)]) -> Result<(), String> {
    let mut at = 0;
    let mut failed: Vec<&str> = Vec::new();
    let gap_ok = |gap: &str, failed: &[&str]| {
        let room: usize = failed.iter().map(|r| r.len()).sum();
        gap.len() <= room
            && gap.match_indices("record ").all(|(i, _)| {
                failed
                    .iter()
                    .any(|r| gap[i..].starts_with(&r[..13.min(gap.len() - i)]))
            })
    };
    for (rec, acked) in records {
        if !acked {
            failed.push(rec);
            continue;
        }
        let Some(found) = got[at..].find(rec.as_str()) else {
            return Err(format!("acknowledged {} is lost", &rec[..13]));
        };
        let gap = &got[at..at + found];
        if !gap_ok(gap, &failed) {
            return Err(format!(
                "before acknowledged {}: {} bytes no failed write put there: {gap:?}",
                &rec[..13],
                gap.len()
            ));
        }
        at += found + rec.len();
        failed.clear();
    }
    let tail = &got[at..];
    if !gap_ok(tail, &failed) {
        return Err(format!(
            "after the last acknowledged record: {} bytes no failed write put there",
            tail.len()
        ));
    }
    Ok(())
}

#[test]
fn a_log_may_hold_failed_records_in_part_but_every_acknowledged_one_whole() {
    let rec = |i: usize, acked: bool| (format!("record {i:06} {}\n", "x".repeat(20)), acked);
    let records = vec![
        rec(0, true),
        rec(1, false),
        rec(2, false),
        rec(3, true),
        rec(4, false),
    ];
    let [r0, r1, r2, r3, r4] = [0, 1, 2, 3, 4].map(|i| &records[i].0);
    for ok in [
        format!("{r0}{r3}"),
        format!("{r0}{r1}{r3}"),
        format!("{r0}{}{r3}", &r1[..9]),
        format!("{r0}{}{r2}{r3}", &r1[..20]),
        format!("{r0}{r3}{}", &r4[..5]),
    ] {
        assert_eq!(check_log(&ok, &records), Ok(()), "{ok:?}");
    }
    for bad in [
        r0.to_string(),
        format!("{r3}{r0}"),
        format!("{r0}{}{r3}", &r3[..20]),
        format!("{r0}{r0}{r3}"),
        format!("{r0}{r3}{r3}"),
        format!("{r0}{r3}{}", &r2[..13]),
    ] {
        assert!(check_log(&bad, &records).is_err(), "{bad:?}");
    }
}

#[test]
fn a_quick_rolling_restart_under_a_writer_never_ends_in_split_brain() {
    for round in 0..3 {
        rolling_restart_round(round, 0);
    }
}

#[test]
fn a_quick_rolling_restart_on_a_loaded_machine_never_ends_in_split_brain() {
    for round in 3..5 {
        rolling_restart_round(round, 2);
    }
}

/// A writer goes on, without an error, while the management daemon
/// crashes and starts again: the bricks outlive it and are adopted.
#[test]
fn a_writer_goes_on_across_a_daemon_crash_and_restart() {
    let mut c = Cluster::start();
    c.one_process_per_brick();
    let bricks = c.volume("dv", 3, &["d1", "d2", "d3"]);
    let m = c.mount("dv");
    let f = m.p("log");
    let pids: Vec<u64> = (0..3).map(|i| brick_pid(&c, "dv", i)).collect();
    // Each brick process shows its own command line, the one the daemon
    // started ahead of need (`mortar-brick --standby`) too.
    for (pid, b) in pids.iter().zip(&bricks) {
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        assert!(
            cmd.contains(&format!("--path {} ", b.display())),
            "brick {pid} shows {cmd}"
        );
    }
    let writer = std::thread::spawn(move || {
        sh(&format!(
            "set -e; for i in $(seq 1 400); do echo line-$i >> {f}; sleep 0.01; done"
        ))
    });
    std::thread::sleep(Duration::from_millis(500));
    c.crash_daemon();
    std::thread::sleep(Duration::from_millis(1500));
    c.start_daemon();
    let o = writer.join().unwrap();
    assert!(
        o.status.success(),
        "the writer failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let want: String = (1..=400).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(ok(&format!("cat {}", m.p("log"))), want);
    // The same brick processes serve, and the new daemon knows them.
    let now: Vec<u64> = (0..3).map(|i| brick_pid(&c, "dv", i)).collect();
    assert_eq!(now, pids, "the bricks were restarted, not adopted");
    // It watches them as its own: a killed one is started again.
    ok(&format!("kill -9 {}", pids[1]));
    wait_brick_restarted(&c, "dv", 1, pids[1]);
    wait_healed(&c, "dv", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
    drop(m);
}

/// A brick whose directory is deleted fails its health check: it goes
/// offline with the reason in `volume status`, and the volume goes on with
/// the good copies.
#[test]
fn a_brick_whose_directory_is_deleted_goes_offline_and_the_volume_goes_on() {
    let c = Cluster::start();
    let bricks = c.volume("hv", 3, &["h1", "h2", "h3"]);
    c.ok(&["volume", "set", "hv", "storage.health-check-interval", "1"]);
    let m = c.mount("hv");
    ok(&format!(
        "mkdir {} && echo before > {}",
        m.p("d"),
        m.p("d/f")
    ));
    ok(&format!("rm -rf {}", bricks[2].display()));
    wait_for("the brick to go offline", Duration::from_secs(20), || {
        let st = c.volume_status_json("hv");
        st[0]["bricks"][2]["online"] == false
            && st[0]["bricks"][2]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("health check failed"))
    });
    let status = c.ok(&["volume", "status", "hv"]);
    assert!(
        status.contains("Offline: health check failed: the brick directory"),
        "{status}"
    );
    let log = std::fs::read_to_string(c.path("daemon.log")).unwrap();
    assert!(log.contains("brick offline"), "{log}");
    // Creates, reads and listings work on the two good copies.
    for i in 0..20 {
        ok(&format!("echo {i} > {}", m.p(&format!("d/n{i}"))));
    }
    assert_eq!(ok(&format!("cat {}", m.p("d/f"))), "before\n");
    assert_eq!(ok(&format!("cat {}", m.p("d/n7"))), "7\n");
    assert_eq!(ok(&format!("ls {} | wc -l", m.p("d"))).trim(), "21");
    // It stays offline, also when tried again, while its directory is gone.
    let err = c.fails(&["volume", "start", "hv", "force"]);
    assert!(err.contains("no volume id"), "{err}");
    drop(m);
}

/// A brick whose disk hangs while its process still answers pings (its
/// large writes and its health check never return) holds a writer only
/// until `storage.health-check-timeout`: it goes offline with the reason,
/// and the write lands on the other copies.
#[test]
fn a_brick_whose_disk_hangs_goes_offline_at_the_health_check_timeout() {
    let mut c = Cluster::start();
    c.kill_daemon();
    c.start_daemon_env(&[(
        "FAILPOINTS",
        "posix-large-write:g3=sleep(600000);posix-health-check:g3=sleep(600000)",
    )]);
    let bricks = c.volume("gv", 3, &["g1", "g2", "g3"]);
    let m = c.mount("gv");
    let mut dd = std::process::Command::new("dd")
        .arg("if=/dev/urandom")
        .arg(format!("of={}", m.p("f")))
        .args(["bs=1M", "count=4", "conv=fsync", "status=none"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(dd.try_wait().unwrap().is_none(), "the hung disk holds it");
    set_options(
        &c,
        "gv",
        &[
            ("storage.health-check-interval", "2"),
            ("storage.health-check-timeout", "3"),
        ],
    );
    // The option's way to the brick (polled every 2 s), the interval and
    // the timeout, with room for a loaded machine: not the default minute.
    wait_for("the write", Duration::from_secs(30), || {
        dd.try_wait().unwrap().is_some()
    });
    assert!(dd.wait().unwrap().success());
    let st = c.volume_status_json("gv");
    assert_eq!(st[0]["bricks"][2]["online"], false, "{st}");
    let reason = st[0]["bricks"][2]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("no answer from the brick's file system in 3 s"),
        "{st}"
    );
    let want = ok(&format!("md5sum < {}", m.p("f")));
    for b in &bricks[..2] {
        assert_eq!(ok(&format!("md5sum < {}", b.join("f").display())), want);
    }
}

/// A client frozen (SIGSTOP) while it holds a lock loses it after
/// `features.locks-revocation-secs`: another client's write goes through.
#[test]
fn a_frozen_client_loses_its_locks_to_a_waiting_one() {
    let c = Cluster::start();
    let bricks = c.volume("lv", 3, &["l1", "l2", "l3"]);
    c.ok(&["volume", "set", "lv", "features.locks-revocation-secs", "2"]);
    // (With closes behind, the writer's claim on the file would hold the
    // other client first, for the ping timeout: caching_e2e covers that.)
    c.ok(&["volume", "set", "lv", "performance.flush-behind", "off"]);
    // Let the bricks pick the option up (they poll every 2 s).
    std::thread::sleep(Duration::from_secs(3));
    let frozen = c.mount("lv");
    let other = c.mount("lv");
    let f = frozen.p("shared");
    ok(&format!("echo start > {f}"));
    let pid = ok(&format!(
        "pgrep -f 'mortar mount .*{}' | head -1",
        frozen.dir.display()
    ));
    let pid: u64 = pid.trim().parse().unwrap();
    // A writer keeps the file's lock busy; the client is frozen mid-way.
    let writer = Background(vec![std::process::Command::new("sh")
        .args([
            "-c",
            &format!(
                "while :; do dd if=/dev/zero of={f} bs=64k count=4 conv=notrunc status=none; done"
            ),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()]);
    std::thread::sleep(Duration::from_millis(500));
    ok(&format!("kill -STOP {pid}"));
    let frozen_client = Frozen(pid);
    // The other client waits for the lock, and gets it.
    let g = other.p("shared");
    let done = std::thread::spawn(move || sh(&format!("echo other-client > {g}")));
    wait_for("the waiting write", Duration::from_secs(30), || {
        done.is_finished()
    });
    let o = done.join().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(ok(&format!("cat {}", other.p("shared"))), "other-client\n");
    let brick_logs = ok(&format!("cat {}/state/logs/*.log", c.path("").display()));
    assert!(
        brick_logs.contains("revoking the locks of a client"),
        "{brick_logs}"
    );
    // Thawed, the client reconnects and works again.
    drop(frozen_client);
    drop(writer);
    wait_connections(&c, 9);
    ok(&format!("echo after > {}", frozen.p("after")));
    assert_eq!(ok(&format!("cat {}", other.p("after"))), "after\n");
    drop(frozen);
    drop(other);
    wait_healed(&c, "lv", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
}

#[test]
fn a_brick_that_crashes_inside_a_directory_rename_finds_the_directory_again_and_heals() {
    let mut c = Cluster::start();
    c.one_process_per_brick();
    c.kill_daemon();
    // Brick n3 dies between renaming a directory and updating its gfid
    // handle; the bricks inherit the daemon's environment.
    c.start_daemon_env(&[("FAILPOINTS", "posix-rename-before-handle:n3=panic")]);
    let bricks = c.volume("rn", 3, &["n1", "n2", "n3"]);
    let m = c.mount("rn");
    let d = m.dir.display().to_string();
    ok(&format!("mkdir -p {d}/a/b && echo in > {d}/a/b/f"));
    let pid = brick_pid(&c, "rn", 2);
    ok(&format!("mv {d}/a/b {d}/a/c"));
    wait_brick_restarted(&c, "rn", 2, pid);
    let logs = ok(&format!("cat {}/state/logs/*.log", c.path("").display()));
    assert!(logs.contains("crashing here on purpose"), "{logs}");
    ok(&format!("echo more > {d}/a/c/g"));
    wait_healed(&c, "rn", HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
    assert_eq!(
        std::fs::read_to_string(bricks[2].join("a/c/g")).unwrap(),
        "more\n"
    );
    assert_eq!(ok(&format!("ls {d}/a/c")), "f\ng\n");
}

/// A writer whose closes went behind (the writes still in the mount) is
/// killed, or frozen, on a loaded machine: another mount's reads of its
/// files wait for nobody past the ping timeout and find each file whole,
/// old or new, and the copies agree once healed.
fn writer_gone_with_closes_behind(vol: &str, freeze: bool) {
    let _load = Background::burners(2);
    let c = Cluster::start();
    let bricks = c.volume(vol, 3, &["w1", "w2", "w3"]);
    set_options(&c, vol, &[("network.ping-timeout", "3")]);
    // Let the bricks pick the option up (they poll every 2 s).
    std::thread::sleep(Duration::from_secs(3));
    // Every write this mount sends behind takes 4 s to leave it.
    let writer = c.mount_env(vol, &[("FAILPOINTS", "write-behind-send=return(4000)")]);
    let other = c.mount(vol);
    let old = vec![b'o'; 8192];
    let new = vec![b'n'; 8192];
    for i in 0..8 {
        std::fs::write(other.p(&format!("f{i}")), &old).unwrap();
    }
    for i in 0..8 {
        let t = std::time::Instant::now();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(writer.p(&format!("f{i}")))
            .unwrap();
        f.write_all_at(&new, 0).unwrap();
        drop(f);
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "f{i}: the close waited for its writes ({:?})",
            t.elapsed()
        );
    }
    let pid = client_pid(&writer.dir);
    let _frozen = match freeze {
        true => {
            ok(&format!("kill -STOP {pid}"));
            Some(Frozen(pid as u64))
        }
        false => {
            ok(&format!("kill -9 {pid}"));
            None
        }
    };
    let t = std::time::Instant::now();
    for i in 0..8 {
        let got = std::fs::read(other.p(&format!("f{i}"))).unwrap();
        assert!(got == old || got == new, "f{i}: {} bytes, mixed", got.len());
    }
    // The ping timeout (3 s) once, for the recall the writer does not
    // answer, with room for the load.
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "the reads took {:?}",
        t.elapsed()
    );
    drop(_frozen);
    if !freeze {
        let _ = sh(&format!("umount -l {}", writer.dir.display()));
    }
    drop(writer);
    drop(other);
    // A writer thawed sends its writes behind on new connections (late,
    // as clients do): what they change is healed once they are done,
    // which heal info cannot tell while their sessions are open.
    wait_for(
        "the writer's client to exit",
        Duration::from_secs(60),
        || !std::path::Path::new(&format!("/proc/{pid}")).exists(),
    );
    wait_healed(&c, vol, HEAL_TIMEOUT);
    assert_bricks_identical(&bricks);
}

#[test]
fn a_writer_killed_with_closes_behind_on_a_loaded_machine_holds_nobody_and_leaves_agreeing_copies()
{
    writer_gone_with_closes_behind("wk", false);
}

#[test]
fn a_writer_frozen_with_closes_behind_on_a_loaded_machine_holds_nobody_past_the_ping_timeout() {
    writer_gone_with_closes_behind("wf", true);
}
