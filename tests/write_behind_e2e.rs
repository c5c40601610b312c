//! Write-behind through a real mount (docs/caching.md): small writes leave
//! the mount as few large requests; what an application synced survives a
//! killed client and a killed brick; an error of a write sent behind
//! reaches the application at its next write, fsync or close, or, once
//! the file was closed behind, at the next fsync of anyone who opens it.

mod common;
use common::*;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::Duration;

/// What the mount's write-behind reports: (requests sent, writes joined).
fn sent_and_joined(m: &Mount) -> (u64, u64) {
    let g = ok(&format!(
        "getfattr --only-values -n trusted.mortar.client.graph {}",
        m.dir.display()
    ));
    let line = g
        .lines()
        .find(|l| l.contains("files with writes out"))
        .unwrap_or_else(|| panic!("no write-behind in {g}"));
    let num = |after: &str| -> u64 {
        line.split(after)
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    (num("requests sent "), num("writes joined into others "))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn small_writes_leave_the_mount_as_few_large_requests() {
    let c = Cluster::start();
    c.volume("wb", 3, &["w1", "w2", "w3"]);
    let m = c.mount("wb");
    let data = pattern(4 << 20, 1);
    let mut f = std::fs::File::create(m.p("f")).unwrap();
    for page in data.chunks(4096) {
        f.write_all(page).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    // The bricks told the attributes with the last write: a stat now
    // asks nothing (close's own requests are let end first).
    let before = requests_when_idle(&m);
    assert_eq!(std::fs::metadata(m.p("f")).unwrap().len(), 4 << 20);
    assert_eq!(
        requests(&m) - before,
        0,
        "requests for a stat after writing"
    );
    let (sent, joined) = sent_and_joined(&m);
    // (How many are joined depends on how fast the bricks answer: the
    // application writes while a request is out.)
    assert!(sent <= 512, "1,024 writes of 4 KiB took {sent} requests");
    assert_eq!(sent + joined, 1024, "every write sent once");
    // Another mount, and every brick, has every byte.
    let other = c.mount("wb");
    assert!(std::fs::read(other.p("f")).unwrap() == data);
    for b in ["w1", "w2", "w3"] {
        assert!(std::fs::read(c.path(b).join("f")).unwrap() == data, "{b}");
    }
    // With write-behind off, every write is one request again.
    c.ok(&["volume", "set", "wb", "performance.write-behind", "off"]);
    wait_for(
        "the graph without write-behind",
        Duration::from_secs(10),
        || {
            !ok(&format!(
                "getfattr --only-values -n trusted.mortar.client.graph {}",
                m.dir.display()
            ))
            .contains("write-behind")
        },
    );
}

#[test]
fn a_killed_client_keeps_every_synced_byte() {
    let c = Cluster::start();
    let bricks = c.volume("kc", 3, &["k1", "k2", "k3"]);
    let m = c.mount("kc");
    let synced = pattern(1 << 20, 2);
    let f = std::fs::File::create(m.p("f")).unwrap();
    for (i, page) in synced.chunks(4096).enumerate() {
        f.write_all_at(page, i as u64 * 4096).unwrap();
    }
    f.sync_all().unwrap();
    // More writes, over the synced ones and past them, never synced.
    let unsynced = pattern(2 << 20, 3);
    for (i, page) in unsynced.chunks(4096).enumerate() {
        f.write_all_at(page, (1 << 19) + i as u64 * 4096).unwrap();
    }
    let pid = client_pid(&m.dir);
    ok(&format!("kill -9 {pid}"));
    drop(f);
    m.unmount();
    // Every synced byte that no later write covered is there; past that,
    // the file holds written bytes or nothing.
    let m2 = c.mount("kc");
    let now = std::fs::read(m2.p("f")).unwrap();
    assert!(now.len() >= 1 << 20, "{} bytes", now.len());
    assert!(now[..1 << 19] == synced[..1 << 19], "synced bytes lost");
    for (i, &b) in now.iter().enumerate().skip(1 << 19) {
        let later = unsynced.get(i - (1 << 19)).copied();
        let earlier = synced.get(i).copied();
        assert!(
            Some(b) == later || Some(b) == earlier || b == 0,
            "byte {i} is {b}, never written there"
        );
    }
    // The copies agree once healed.
    wait_healed(&c, "kc", Duration::from_secs(60));
    assert_bricks_identical(&bricks);
}

#[test]
fn a_brick_killed_under_unsent_writes_loses_no_synced_write() {
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = c.volume("kb", 3, &["b1", "b2", "b3"]);
    let m = c.mount("kb");
    let data = pattern(8 << 20, 4);
    let mut f = std::fs::File::create(m.p("f")).unwrap();
    let (first, rest) = data.split_at(3 << 20);
    for page in first.chunks(4096) {
        f.write_all(page).unwrap();
    }
    // A brick dies while writes are still queued at the mount.
    let pid = brick_pid(&c, "kb", 1);
    ok(&format!("kill -9 {pid}"));
    for page in rest.chunks(4096) {
        f.write_all(page).unwrap();
    }
    f.sync_all().expect("fsync with two copies of three");
    drop(f);
    for b in [0, 2] {
        assert!(
            std::fs::read(bricks[b].join("f")).unwrap() == data,
            "{}",
            bricks[b].display()
        );
    }
    assert!(std::fs::read(m.p("f")).unwrap() == data);
    wait_brick_restarted(&c, "kb", 1, pid);
    wait_healed(&c, "kb", Duration::from_secs(60));
    assert_bricks_identical(&bricks);
}

#[test]
fn an_error_of_a_write_sent_behind_reaches_the_application() {
    let c = Cluster::start();
    let _small = SmallFs::new(c.path("small"), "4m");
    c.volume("full", 1, &["small/b"]);
    let m = c.mount("full");
    // 16 MiB in 64 KiB writes onto 4 MiB: some call must say ENOSPC, be it
    // a later write, the fsync or the close.
    let f = std::fs::File::create(m.p("big")).unwrap();
    let chunk = vec![7u8; 64 << 10];
    let mut failed = None;
    for i in 0..256u64 {
        if let Err(e) = f.write_all_at(&chunk, i * chunk.len() as u64) {
            failed = Some(("write", e));
            break;
        }
    }
    if failed.is_none() {
        if let Err(e) = f.sync_all() {
            failed = Some(("fsync", e));
        }
    }
    let (call, e) = failed.expect("the full brick's error reached the application");
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{call}: {e}");
    // Reported once: the file goes on working as far as room allows.
    drop(f);
    std::fs::remove_file(m.p("big")).unwrap();
    std::fs::write(m.p("small"), b"fits").unwrap();
    assert_eq!(std::fs::read(m.p("small")).unwrap(), b"fits");
}

#[test]
fn an_error_of_a_write_closed_behind_reaches_the_next_fsync_of_the_file() {
    let mut c = Cluster::start();
    c.crash_daemon();
    // Large writes on the brick fail (EIO), after the close returned.
    c.start_daemon_env(&[("FAILPOINTS", "posix-large-write:b=return")]);
    c.volume("lost", 1, &["b"]);
    let m = c.mount("lost");
    // (The close may or may not have seen it: either way no fsync has.)
    let _ = sh(&format!(
        "dd if=/dev/urandom of={} bs=128k count=1 status=none",
        m.p("f")
    ));
    let first = sh(&format!("sync {}", m.p("f")));
    assert!(!first.status.success(), "the lost write was reported");
    let err = String::from_utf8_lossy(&first.stderr);
    assert!(err.contains("Input/output error"), "{err}");
    // Once: the next sync, and a reader's, do not get it again.
    ok(&format!("sync {}", m.p("f")));
    ok(&format!("cat {} > /dev/null", m.p("f")));
}
