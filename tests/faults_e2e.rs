//! Faults an application must not see: real daemons, bricks and mounts,
//! bricks killed (`kill -9`) or restarted while files are read and
//! written, and the machine loaded by CPU-burning processes beside them.

mod common;
use common::*;
use std::time::Duration;

const HEAL_TIMEOUT: Duration = Duration::from_secs(60);

/// Processes that keep the CPUs busy while they live.
struct Burners(Vec<std::process::Child>);

impl Burners {
    fn start(n: usize) -> Burners {
        Burners(
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

impl Drop for Burners {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
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
    let load = Burners::start(burners);
    let c = Cluster::start();
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
