//! Live graph switches through a real mount: an option that adds or
//! removes a translator reaches the mounted client at once, and the client
//! moves to the new graph under load without an error or a leak.

mod common;
use common::*;
use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Resident memory (KiB) and open descriptors of a process.
fn footprint(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    (rss, fds)
}

#[test]
fn read_only_reaches_a_mounted_client_at_once_and_open_files_survive_it() {
    let c = Cluster::start();
    c.volume("ro", 3, &["r1", "r2", "r3"]);
    let m = c.mount("ro");
    std::fs::write(m.p("kept"), b"before").unwrap();
    let mut open = std::fs::File::open(m.p("kept")).unwrap();
    c.ok(&["volume", "set", "ro", "features.read-only", "on"]);
    // The daemon tells the client at once; the switch takes a moment.
    wait_for("the read-only graph", Duration::from_secs(10), || {
        graph_of(&m).contains("(features/read-only)")
    });
    let e = std::fs::write(m.p("new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    assert_eq!(
        std::fs::remove_file(m.p("kept"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EROFS)
    );
    let mut s = String::new();
    open.read_to_string(&mut s).unwrap();
    assert_eq!(s, "before");
    c.ok(&["volume", "set", "ro", "features.read-only", "off"]);
    wait_for("the writable graph", Duration::from_secs(10), || {
        !graph_of(&m).contains("(features/read-only)")
    });
    std::fs::write(m.p("new"), b"after").unwrap();
    assert_eq!(std::fs::read(m.p("new")).unwrap(), b"after");
    // The daemon lists the mount and the graph version it runs.
    let version: u64 = graph_of(&m)
        .lines()
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    wait_for("the client listed", Duration::from_secs(10), || {
        let v: serde_json::Value =
            serde_json::from_str(&c.ok(&["--json", "volume", "status", "ro", "clients"])).unwrap();
        v["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["client"]["mount"] == m.dir.display().to_string() && x["version"] == version)
    });
    let text = c.ok(&["volume", "status", "ro", "clients"]);
    assert!(text.contains("Clients connected : 1"), "{text}");
}

#[test]
fn a_thousand_graph_switches_under_load_lose_nothing_and_leak_nothing() {
    let c = Cluster::start();
    let bricks = c.volume("sw", 3, &["s1", "s2", "s3"]);
    let m = c.mount("sw");
    let fixed: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(m.p("fixed"), &fixed).unwrap();
    let pid = client_pid(&m.dir);

    let stop = Arc::new(AtomicBool::new(false));
    let records = Arc::new(AtomicU64::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    // A writer appending numbered records to a file it keeps open, and a
    // reader checking a fixed file through a handle it keeps open: both
    // handles move with every switch.
    let writer = {
        let (stop, records, path) = (stop.clone(), records.clone(), m.p("log"));
        std::thread::spawn(move || -> std::io::Result<()> {
            let mut f = std::fs::File::create(path)?;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                f.write_all(format!("{n:016}\n").as_bytes())?;
                if n.is_multiple_of(64) {
                    f.sync_data()?;
                }
                n += 1;
                records.store(n, Ordering::Relaxed);
            }
            f.sync_all()
        })
    };
    let reader = {
        let (stop, reads, path, fixed) = (stop.clone(), reads.clone(), m.p("fixed"), fixed.clone());
        std::thread::spawn(move || -> std::io::Result<()> {
            let mut f = std::fs::File::open(path)?;
            let mut buf = vec![0u8; fixed.len()];
            while !stop.load(Ordering::Relaxed) {
                f.seek(SeekFrom::Start(0))?;
                f.read_exact(&mut buf)?;
                if buf != fixed {
                    return Err(std::io::Error::other("the fixed file read back wrong"));
                }
                reads.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
    };

    // Warm up, then measure the client before and after.
    c.ok(&["volume", "set", "sw", "diagnostics.count-fop-hits", "on"]);
    c.ok(&["volume", "set", "sw", "diagnostics.count-fop-hits", "off"]);
    wait_for("the first switches", Duration::from_secs(20), || {
        switches(&m) >= 2
    });
    let before = footprint(pid);
    let start = Instant::now();
    let switches_wanted: u64 = std::env::var("MORTAR_SWITCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let mut rss = Vec::new();
    for i in 0..switches_wanted {
        if i % 250 == 0 {
            rss.push(footprint(pid).0);
        }
        let value = if i % 2 == 0 { "on" } else { "off" };
        c.ok(&["volume", "set", "sw", "diagnostics.count-fop-hits", value]);
        let want = i + 3;
        wait_for("the switch", Duration::from_secs(20), || {
            switches(&m) >= want
        });
    }
    let took = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap().expect("the writer saw an error");
    reader.join().unwrap().expect("the reader saw an error");
    // Old graphs are dropped once idle: give the last ones a moment.
    std::thread::sleep(Duration::from_secs(1));
    let after = footprint(pid);
    let n = records.load(Ordering::Relaxed);
    println!(
        "{switches_wanted} switches in {took:?} ({:.1} ms each) under load: {n} records written, {} reads of 1 MiB checked; client RSS {} KiB -> {} KiB (every 250 switches: {rss:?}), open fds {} -> {}",
        took.as_secs_f64() * 1000.0 / switches_wanted as f64,
        reads.load(Ordering::Relaxed),
        before.0,
        after.0,
        before.1,
        after.1
    );
    // Every record is there, in order.
    let log = std::fs::read_to_string(m.p("log")).unwrap();
    assert_eq!(log.lines().count() as u64, n);
    for (i, l) in log.lines().enumerate() {
        assert_eq!(l, format!("{i:016}"), "record {i}");
    }
    // Nothing leaked: no connection or file is left behind by a switch
    // (three connections per switch would show), and memory stays flat.
    assert!(
        after.1 <= before.1 + 8,
        "descriptors grew: {before:?} -> {after:?}"
    );
    assert!(
        after.0 < before.0 + 64 * 1024,
        "memory grew: {before:?} -> {after:?}"
    );
    m.unmount();
    assert_bricks_identical(&bricks);
}

#[test]
fn a_mount_follows_its_volume_through_a_backup_server_when_its_own_is_gone() {
    let mut a = Cluster::start();
    let b = Cluster::start();
    // A third server: with a gone, b and c are the majority that commits.
    let c = Cluster::start();
    a.probe(&b);
    a.probe(&c);
    a.ok(&[
        "volume",
        "create",
        "bk",
        "replica",
        "2",
        &a.brick("k1"),
        &b.brick("k2"),
        "force",
    ]);
    a.ok(&["volume", "start", "bk"]);
    let backup = format!("backup-volfile-servers={}", b.ip);
    let m = a.mount_with("bk", &[], &[&backup]);
    std::fs::write(m.p("f"), b"before").unwrap();
    // The daemon the mount came from dies (its brick lives on); a change
    // made on the other server still reaches the mount.
    a.crash_daemon();
    b.ok(&["volume", "set", "bk", "diagnostics.count-fop-hits", "on"]);
    wait_for(
        "the change through the backup server",
        Duration::from_secs(30),
        || graph_of(&m).contains("(debug/io-stats)"),
    );
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"before");
    // A new mount whose first server is down gets the volume from the next.
    let m2 = a.mount_with("bk", &[], &[&backup]);
    assert_eq!(std::fs::read(m2.p("f")).unwrap(), b"before");
}
