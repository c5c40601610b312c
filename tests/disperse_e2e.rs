//! Dispersed volumes end to end: real daemons, bricks, mounts and tools;
//! each brick holding one fragment of every file, bricks frozen past the
//! ping timeout (`SIGSTOP`), and the self-heal daemon rebuilding what
//! they missed.

mod common;
use common::*;
use std::time::Duration;

/// Creates and starts `disperse 6 redundancy 2` over bricks d1..d6.
fn four_plus_two(c: &Cluster, vol: &str) -> Vec<std::path::PathBuf> {
    let names: Vec<String> = (1..=6).map(|i| format!("{vol}{i}")).collect();
    four_plus_two_over(c, vol, &names)
}

/// A `disperse 6 redundancy 2` volume `vol` whose bricks run with
/// `failpoints` (the bricks inherit the daemon's environment), each in
/// a process of its own so that a brick made slow holds up no other.
fn four_plus_two_failing(vol: &str, failpoints: &str) -> Cluster {
    let env = [("FAILPOINTS", failpoints)];
    need_fail_points(&env);
    let mut c = Cluster::start();
    c.one_process_per_brick();
    c.kill_daemon();
    c.start_daemon_env(&env);
    four_plus_two(&c, vol);
    c
}

/// Creates and starts `disperse 6 redundancy 2` over the bricks `names`.
fn four_plus_two_over(c: &Cluster, vol: &str, names: &[String]) -> Vec<std::path::PathBuf> {
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    c.dispersed(vol, (6, 2), &names)
}

#[test]
fn volume_info_shows_the_disperse_shape_and_bad_shapes_are_refused() {
    let c = Cluster::start();
    four_plus_two(&c, "iv");
    let info = c.ok(&["volume", "info", "iv"]);
    for want in ["Type: Disperse", "Number of Bricks: 1 x (4 + 2) = 6"] {
        assert!(info.contains(want), "{want} missing from:\n{info}");
    }
    let bricks: Vec<String> = (1..=6).map(|i| c.brick(&format!("bad{i}"))).collect();
    for (words, says) in [
        (
            &["disperse", "6", "redundancy", "3"][..],
            "redundancy must be less than 3",
        ),
        (
            &["disperse", "6", "redundancy", "0"],
            "redundancy must be greater than 0",
        ),
        (&["disperse", "4"], "Incorrect number of bricks"),
        (
            &["replica", "3", "disperse", "6"],
            "either replicated or dispersed",
        ),
    ] {
        let mut args = vec!["volume", "create", "bad"];
        args.extend(words);
        args.extend(bricks.iter().map(String::as_str));
        let err = c.fails(&args);
        assert!(err.contains(says), "{words:?}: {err}");
    }
    assert!(!c.ok(&["volume", "list"]).contains("bad"));
}

#[test]
fn with_redundancy_bricks_frozen_every_file_reads_back_and_takes_writes() {
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = four_plus_two(&c, "ev");
    c.ok(&["volume", "set", "ev", "network.ping-timeout", "2"]);
    let m = c.mount("ev");
    // A tree, and a file of 48 MiB (many whole stripes and a partial one).
    let src = c.path("src");
    ok(&format!(
        "mkdir -p {s} && cd {s} && for d in $(seq 1 4); do mkdir -p d$d/e; \
         for f in $(seq 1 25); do head -c $((f * 1999)) /dev/urandom > d$d/e/f$f; done; \
         chmod 750 d$d; ln -s e/f2 d$d/sym; done && \
         head -c $((48 * 1048576 + 12345)) /dev/urandom > {big}",
        s = src.display(),
        big = c.path("big").display()
    ));
    ok(&format!("cp -a {} {}", src.display(), m.p("tree")));
    ok(&format!("cp {} {}", c.path("big").display(), m.p("big")));
    ok(&format!("diff -r {} {}", src.display(), m.p("tree")));
    ok(&format!("cmp {} {}", c.path("big").display(), m.p("big")));
    // Each brick holds a fragment as long as the file; none holds it whole.
    for b in &bricks {
        let len = std::fs::metadata(b.join("big")).unwrap().len();
        assert_eq!(len, 48 * 1048576 + 12345, "{}", b.display());
    }
    let whole = ok(&format!("md5sum < {}", c.path("big").display()));
    for b in &bricks {
        assert_ne!(ok(&format!("md5sum < {}", b.join("big").display())), whole);
    }
    // Mounts that have read nothing yet: what they read comes from bricks.
    let m2 = c.mount("ev");
    let m3 = c.mount("ev");
    // A data brick and a parity brick away.
    let frozen = [freeze(&c, "ev", 0), freeze(&c, "ev", 5)];
    ok(&format!("diff -r {} {}", src.display(), m2.p("tree")));
    ok(&format!("cmp {} {}", c.path("big").display(), m2.p("big")));
    // Writes go on: an overwrite in the middle, an append, a truncation,
    // done to the local copy alike.
    let local = c.path("big").display().to_string();
    for target in [local.as_str(), &m2.p("big")] {
        ok(&format!(
            "dd if=/dev/zero of={target} bs=1000 seek=7777 count=300 conv=notrunc status=none && \
             echo appended >> {target} && truncate -s 40000123 {target}"
        ));
    }
    ok(&format!("cmp {local} {}", m2.p("big")));
    // One brick more away: a read is refused, not answered wrong.
    let third = freeze(&c, "ev", 2);
    let o = sh(&format!("cat {} > /dev/null", m3.p("tree/d1/e/f7")));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "a read with 3 of 6 bricks away");
    assert!(
        err.contains("Transport endpoint is not connected") || err.contains("Input/output error"),
        "{err}"
    );
    // So is a write, and nothing of it is there once they are back (the
    // comparison with the local copy below).
    let o = sh(&format!(
        "dd if=/dev/urandom of={} bs=4k count=3 seek=5 conv=notrunc status=none",
        m3.p("big")
    ));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "a write with 3 of 6 bricks away");
    assert!(
        err.contains("Transport endpoint is not connected") || err.contains("Input/output error"),
        "{err}"
    );
    for pid in frozen.into_iter().chain([third]) {
        thaw(pid);
    }
    // The bricks back (their fragments of `big` stale and never read).
    // `big` needs the third brick: two of its fragments are stale, and the
    // mount may have reconnected to the other two first.
    wait_for("the bricks to be back", Duration::from_secs(30), || {
        sh(&format!(
            "cat {} {} > /dev/null",
            m3.p("tree/d1/e/f7"),
            m3.p("big")
        ))
        .status
        .success()
    });
    ok(&format!("cmp {local} {}", m3.p("big")));
    ok(&format!("diff -r {} {}", src.display(), m3.p("tree")));
    // The self-heal daemon rebuilds the fragments that missed the writes.
    wait_healed(&c, "ev", Duration::from_secs(120));
    // Then they serve: two other bricks away, a new mount decodes the
    // files from the healed fragments and two of the others.
    let frozen = [freeze(&c, "ev", 1), freeze(&c, "ev", 4)];
    let m4 = c.mount("ev");
    ok(&format!("cmp {local} {}", m4.p("big")));
    ok(&format!("diff -r {} {}", src.display(), m4.p("tree")));
    for pid in frozen {
        thaw(pid);
    }
}

#[test]
fn a_brick_replaced_empty_is_rebuilt_from_the_others_and_serves_reads() {
    let c = Cluster::start();
    c.one_process_per_brick();
    four_plus_two(&c, "rp");
    c.ok(&["volume", "set", "rp", "network.ping-timeout", "2"]);
    let m = c.mount("rp");
    let src = c.path("src");
    ok(&format!(
        "mkdir -p {s}/d && for f in $(seq 1 30); do head -c $((f * 3001)) /dev/urandom > {s}/d/f$f; done && \
         head -c $((9 * 1048576 + 7)) /dev/urandom > {s}/big && \
         truncate -s 200M {s}/sparse && echo end >> {s}/sparse",
        s = src.display()
    ));
    ok(&format!("cp -a {} {}", src.display(), m.p("tree")));
    let out = c.ok(&[
        "volume",
        "replace-brick",
        "rp",
        &c.brick("rp3"),
        &c.brick("new3"),
        "commit",
        "force",
    ]);
    assert!(out.contains("healed"), "{out}");
    wait_full_heal(&c, "rp");
    // The daemon counted what its healer wrote (a fragment of every file).
    let daemon = scrape(&format!("{}:24108", c.ip));
    let healed = value(
        &daemon,
        "mortar_heal_written_bytes_total",
        &["volume=\"rp\""],
    );
    assert!(healed >= (9 << 20) as f64 / 4.0, "{daemon}");
    let new = c.path("new3");
    for (f, len) in [("big", 9 * 1048576 + 7), ("sparse", 200 * 1048576 + 4)] {
        let meta = std::fs::metadata(new.join("tree").join(f)).unwrap();
        assert_eq!(
            meta.len(),
            len,
            "{f}: the new fragment is as long as the file"
        );
    }
    use std::os::unix::fs::MetadataExt;
    let sparse = std::fs::metadata(new.join("tree/sparse")).unwrap();
    assert!(sparse.blocks() * 512 < 1 << 20, "the hole stays a hole");
    // Two other bricks away: the files decode from the new fragment and
    // three others.
    let frozen = [freeze(&c, "rp", 0), freeze(&c, "rp", 5)];
    let m2 = c.mount("rp");
    ok(&format!("diff -r {} {}", src.display(), m2.p("tree")));
    for pid in frozen {
        thaw(pid);
    }
}

#[test]
fn a_full_brick_fails_writes_with_enospc_and_every_file_keeps_its_content() {
    let c = Cluster::start();
    // Brick 2 on a file system of 8 MiB; the others on the disk.
    let _small = SmallFs::new(c.path("small"), "8m");
    let names: Vec<String> = (1..=6)
        .map(|i| match i {
            2 => "small/fv2".to_string(),
            i => format!("fv{i}"),
        })
        .collect();
    four_plus_two_over(&c, "fv", &names);
    // Room for one write in flight per fragment (docs/disperse.md).
    c.ok(&["volume", "set", "fv", "storage.reserve", "2MB"]);
    let m = c.mount("fv");
    let src = c.path("src");
    ok(&format!(
        "head -c $((64 << 20)) /dev/urandom > {}",
        src.display()
    ));
    ok(&format!(
        "head -c 300000 {} > {}",
        src.display(),
        m.p("keep")
    ));
    // Each fragment holds a quarter of the file: the small brick is full
    // at about 24 MiB of 64.
    let o = sh(&format!(
        "dd if={} of={} bs=1M conv=fsync 2>&1",
        src.display(),
        m.p("big")
    ));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{said}");
    assert!(said.contains("No space left on device"), "{said}");
    // An overwrite of a file that fits fails too, and changes nothing.
    let o = sh(&format!(
        "dd if=/dev/zero of={} bs=64k count=2 conv=notrunc,fsync 2>&1",
        m.p("keep")
    ));
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // Through a mount of its own (the first one's page cache may hold
    // what it failed to write): every file reads back whole, the big one
    // as far as its writes went.
    let m2 = c.mount("fv");
    ok(&format!("cmp -n 300000 {} {}", src.display(), m2.p("keep")));
    let got = c.path("got");
    ok(&format!("cat {} > {}", m2.p("big"), got.display()));
    let len = std::fs::metadata(&got).unwrap().len();
    assert!((8 << 20..64 << 20).contains(&len), "{len}");
    ok(&format!("cmp -n {len} {} {}", got.display(), src.display()));
    // No fragment missed a write: nothing waits for heal.
    assert_eq!(heal_pending(&c, "fv"), Some(0));
    // Room again once the big file's blocks are freed (the bricks free
    // them after its last close): writes go on.
    std::fs::remove_file(m.p("big")).unwrap();
    wait_for("room again", Duration::from_secs(30), || {
        sh(&format!(
            "head -c $((4 << 20)) {} > {}",
            src.display(),
            m.p("after")
        ))
        .status
        .success()
    });
    ok(&format!(
        "cmp -n $((4 << 20)) {} {}",
        src.display(),
        m2.p("after")
    ));
}

#[test]
fn a_brick_that_answers_late_is_read_around_and_volume_status_says_so() {
    // Brick sl1 (data fragment 0) takes 400 ms for every read.
    let c = four_plus_two_failing("sl", "posix-read:sl1=sleep(400)");
    let m = c.mount("sl");
    let src = c.path("src");
    ok(&format!(
        "head -c $((4 << 20)) /dev/urandom > {}",
        src.display()
    ));
    ok(&format!("cp {} {}", src.display(), m.p("f")));
    // 64 reads of 64 KiB, each wanting a piece of fragment 0: after the
    // first, they are rebuilt from the others instead of waiting.
    let t = std::time::Instant::now();
    ok(&format!(
        "dd if={} iflag=direct bs=64k of={} && cmp {} {}",
        m.p("f"),
        c.path("back").display(),
        src.display(),
        c.path("back").display()
    ));
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "64 reads took {:?}: the slow brick was waited for",
        t.elapsed()
    );
    // The mount tells its daemon at its next question (every 25 s at most).
    let slow = c.path("sl1").display().to_string();
    wait_for(
        "volume status to show the slow brick",
        Duration::from_secs(60),
        || {
            let st = c.ok(&["volume", "status", "sl"]);
            let mut lines = st.lines();
            lines.any(|l| l.contains(&slow))
                && lines
                    .next()
                    .is_some_and(|l| l.contains("Slow: answers late"))
        },
    );
    let st = c.ok(&["volume", "status", "sl"]);
    assert_eq!(st.matches("Slow:").count(), 1, "{st}");
    assert!(st.contains(&m.dir.display().to_string()), "{st}");
}

/// A brick whose disk writes slowly (1 s for every large write) is
/// written around once it has shown it: the writes go on at the others'
/// speed, the brick is blamed and healed, and `volume status` says so.
#[test]
fn a_brick_that_writes_late_is_written_around_and_healed() {
    let c = four_plus_two_failing("sw", "posix-large-write:sw1=sleep(1000)");
    let m = c.mount("sw");
    let src = c.path("src");
    ok(&format!(
        "head -c $((24 << 20)) /dev/urandom > {}",
        src.display()
    ));
    // 24 writes of 1 MiB, each 256 KiB on sw1: 24 s if it were waited for.
    let t = std::time::Instant::now();
    ok(&format!(
        "dd if={} of={} bs=1M oflag=direct conv=fsync 2>/dev/null",
        src.display(),
        m.p("f")
    ));
    assert!(
        t.elapsed() < Duration::from_secs(12),
        "24 writes took {:?}: the slow brick was waited for",
        t.elapsed()
    );
    ok(&format!("cmp {} {}", src.display(), m.p("f")));
    let slow = c.path("sw1").display().to_string();
    wait_for(
        "volume status to show the slow brick",
        Duration::from_secs(60),
        || {
            let st = c.ok(&["volume", "status", "sw"]);
            let mut lines = st.lines();
            lines.any(|l| l.contains(&slow))
                && lines
                    .next()
                    .is_some_and(|l| l.contains("Slow: answers late"))
        },
    );
    // What it missed is healed (at its own pace) and decodes alike.
    drop(m);
    wait_healed(&c, "sw", Duration::from_secs(120));
    for away in [[0, 1], [2, 3]] {
        let decoded = read_with_away(&c, "sw", &["f"], away);
        assert!(
            decoded[0] == std::fs::read(&src).unwrap(),
            "decoded without {away:?}"
        );
    }
}

/// Data fragment `i` of file `path` in a 4 + 2 volume: the file's stripe
/// units (16 KiB) `i`, `i + 4`, `i + 8`... one after the other, zeros
/// after, as long as the file (docs/disperse.md).
fn data_fragment(path: &std::path::Path, i: usize) -> Vec<u8> {
    const UNIT: usize = 16384;
    let file = std::fs::read(path).unwrap();
    let mut frag = vec![0u8; file.len()];
    for (j, at) in (i * UNIT..file.len()).step_by(4 * UNIT).enumerate() {
        let unit = &file[at..(at + UNIT).min(file.len())];
        frag[j * UNIT..j * UNIT + unit.len()].copy_from_slice(unit);
    }
    frag
}

/// Flips the bits of `len` bytes at `at` of a brick's file, behind the
/// brick's back.
fn damage(path: &std::path::Path, at: u64, len: usize) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, at).unwrap();
    b.iter_mut().for_each(|x| *x = !*x);
    f.write_all_at(&b, at).unwrap();
}

#[test]
fn a_fragment_damaged_behind_its_bricks_back_is_read_around_and_healed() {
    let c = Cluster::start();
    let bricks = four_plus_two(&c, "dm");
    let info = c.ok(&["volume", "info", "dm"]);
    assert!(info.contains("storage.checksums: on"), "{info}");
    let m = c.mount("dm");
    let src = c.path("src");
    ok(&format!(
        "head -c $((3 * 1048576 + 777)) /dev/urandom > {}",
        src.display()
    ));
    // Synced: the writes a close leaves behind (flush-behind) landed.
    ok(&format!(
        "cp {s} {f} && sync {f}",
        s = src.display(),
        f = m.p("f")
    ));
    // A small file, kept whole on the first data brick (its sums in an
    // xattr of the brick's file).
    let small: Vec<u8> = (0..6_000u32).map(|i| (i * 7) as u8).collect();
    std::fs::write(m.p("small"), &small).unwrap();
    ok(&format!("sync {}", m.p("small")));
    let whole = bricks[0].join("small");
    assert_eq!(std::fs::read(&whole).unwrap(), small);
    let frag = bricks[1].join("f");
    let coded = || std::fs::read(&frag).unwrap() == data_fragment(&src, 1);
    assert!(coded(), "fragment 1 is the file's data coded");
    // Data fragment 1, in two places (one a run over a block's edge).
    damage(&frag, 20_000, 3);
    damage(&frag, 400_000 - 2, 5);
    assert!(!coded());
    damage(&whole, 5_000, 2);
    // A mount that has read nothing: its reads come from the bricks, and
    // never return the damaged bytes.
    let m2 = c.mount("dm");
    ok(&format!("cmp {} {}", src.display(), m2.p("f")));
    assert_eq!(std::fs::read(m2.p("small")).unwrap(), small);
    // The reads recorded the fragments for heal: the self-heal daemon
    // makes them what coding the files gives again.
    wait_for(
        "the damaged fragment to be healed",
        Duration::from_secs(60),
        coded,
    );
    wait_for(
        "the damaged small file to be healed",
        Duration::from_secs(60),
        || std::fs::read(&whole).unwrap() == small,
    );
    wait_healed(&c, "dm", Duration::from_secs(60));
    let m3 = c.mount("dm");
    ok(&format!("cmp {} {}", src.display(), m3.p("f")));
}

/// Checks the data fragments (`paths`, in order) of a 4 + 2 volume's
/// file of `mib` MiB of `pattern` against the file coded anew: fragment
/// `i` holds the file's 16 KiB stripe units `i`, `i + 4`, `i + 8`...
fn assert_data_fragments_of_pattern(paths: &[std::path::PathBuf], mib: u64) {
    use std::io::Read;
    const UNIT: usize = 16384;
    let mut files: Vec<std::fs::File> = paths
        .iter()
        .map(|p| std::fs::File::open(p).unwrap())
        .collect();
    for (f, p) in files.iter().zip(paths) {
        assert_eq!(f.metadata().unwrap().len(), mib << 20, "{}", p.display());
    }
    let mut buf = vec![0u8; UNIT];
    for m in 0..mib {
        let p = pattern(m);
        // MiB m holds 64 units, 16 of each fragment.
        for (i, f) in files.iter_mut().enumerate() {
            for k in 0..16 {
                f.read_exact(&mut buf).unwrap();
                let at = (4 * k + i) * UNIT;
                assert!(
                    buf == p[at..at + UNIT],
                    "{}: unit {} of MiB {m} differs",
                    paths[i].display(),
                    4 * k + i
                );
            }
        }
    }
}

#[test]
fn redundancy_bricks_killed_during_cp_and_a_1gib_write_lose_nothing_and_heal_to_the_coding() {
    const MIB: u64 = 1024;
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = four_plus_two(&c, "kd");
    c.ok(&["volume", "set", "kd", "network.ping-timeout", "2"]);
    let m = c.mount("kd");
    let src = c.path("src");
    ok(&format!(
        "mkdir -p {s} && cd {s} && for d in $(seq 1 6); do mkdir -p d$d/e; \
         for f in $(seq 1 30); do head -c $((f * 1777)) /dev/urandom > d$d/e/f$f; done; \
         chmod 750 d$d; ln -s e/f2 d$d/sym; done",
        s = src.display()
    ));
    // A data brick and a parity brick, killed with both copies under way.
    let pids = [brick_pid(&c, "kd", 1), brick_pid(&c, "kd", 4)];
    let took = copy_and_write_while(&src, &m.p("tree"), &m.p("big"), MIB, || {
        ok(&format!("kill -9 {} {}", pids[0], pids[1]));
    });
    eprintln!("cp -a and the 1 GiB write took {took:?}");
    let started = std::time::Instant::now();
    assert_pattern(std::path::Path::new(&m.p("big")), MIB);
    ok(&format!("diff -r {} {}", src.display(), m.p("tree")));
    eprintln!("read back in {:?}", started.elapsed());
    // The daemon starts them again, and the self-heal daemon rebuilds what
    // they missed: every data fragment is the file's units, and the parity
    // serves reads with two data bricks away.
    wait_brick_restarted(&c, "kd", 1, pids[0]);
    wait_brick_restarted(&c, "kd", 4, pids[1]);
    wait_healed(&c, "kd", Duration::from_secs(300));
    eprintln!("read back and healed in {:?}", started.elapsed());
    let data: Vec<_> = bricks[..4].iter().map(|b| b.join("big")).collect();
    assert_data_fragments_of_pattern(&data, MIB);
    let frozen = [freeze(&c, "kd", 0), freeze(&c, "kd", 2)];
    let m2 = c.mount("kd");
    assert_pattern(std::path::Path::new(&m2.p("big")), MIB);
    ok(&format!("diff -r {} {}", src.display(), m2.p("tree")));
    for pid in frozen {
        thaw(pid);
    }
}

/// Each of `files` of `vol`, read through a new mount with data bricks
/// `away` frozen: decoded from the other fragments, parity among them.
fn read_with_away(c: &Cluster, vol: &str, files: &[&str], away: [usize; 2]) -> Vec<Vec<u8>> {
    let frozen = away.map(|i| freeze(c, vol, i));
    let m = c.mount(vol);
    let got: Vec<std::io::Result<Vec<u8>>> = files.iter().map(|f| std::fs::read(m.p(f))).collect();
    drop(m);
    for pid in frozen {
        thaw(pid);
    }
    got.into_iter().map(Result::unwrap).collect()
}

#[test]
fn fsx_and_overlapping_writes_from_two_mounts_leave_consistent_fragments() {
    let c = Cluster::start();
    c.one_process_per_brick();
    four_plus_two(&c, "fx");
    c.ok(&["volume", "set", "fx", "network.ping-timeout", "2"]);
    let Some(fsx) = fsx() else {
        return;
    };
    let (a, b) = (c.mount("fx"), c.mount("fx"));
    let t = std::time::Instant::now();
    let logs = c.path("fsx-logs");
    std::fs::create_dir_all(&logs).unwrap();
    let run = |m: &Mount, file: &str, seed: u32, args: &str| {
        format!(
            "{} -q -N 1000 -S {seed} -P {} {args} {}",
            fsx.display(),
            logs.display(),
            m.p(file)
        )
    };
    // By turns on one file, from one mount and the other, each run
    // starting from what the last left (`-k`): each passes its checks.
    for (seed, m, args) in [(1, &a, ""), (2, &b, "-k"), (3, &a, "-k")] {
        let o = sh(&run(m, "turns", seed, args));
        assert!(
            o.status.success(),
            "fsx -S {seed}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    eprintln!("fsx by turns: {:?}", t.elapsed());
    // At once, each on a file of its own.
    let both = [run(&a, "fa", 4, ""), run(&b, "fb", 5, "")]
        .map(|cmd| std::thread::spawn(move || sh(&cmd)));
    for t in both {
        let o = t.join().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    }
    eprintln!("fsx at once: {:?}", t.elapsed());
    // At once on one file: unaligned writes that overlap, and truncations.
    let writer = |m: &Mount, seed: u32| {
        format!(
            "RANDOM={seed}; for i in $(seq 1 80); do \
             if [ $((i % 20)) = 0 ]; then truncate -s $((RANDOM * 5)) {f}; else \
             len=$((RANDOM % 9000 + 1)); head -c $len /dev/urandom | \
             dd of={f} bs=$len seek=$((RANDOM * 7)) oflag=seek_bytes iflag=fullblock \
             conv=notrunc status=none; fi; done",
            f = m.p("shared")
        )
    };
    ok(&format!("touch {}", a.p("shared")));
    let both = [writer(&a, 6), writer(&b, 7)].map(|cmd| std::thread::spawn(move || sh(&cmd)));
    for t in both {
        let o = t.join().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    eprintln!("overlapping writes: {:?}", t.elapsed());
    // What the data fragments hold, read directly, is what the parity
    // decodes with any two of them away.
    let files = ["turns", "fa", "fb", "shared"];
    let m = c.mount("fx");
    let whole: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(m.p(f)).unwrap())
        .collect();
    drop(m);
    for away in [[0, 1], [2, 3]] {
        let decoded = read_with_away(&c, "fx", &files, away);
        for (i, f) in files.iter().enumerate() {
            assert!(
                decoded[i] == whole[i],
                "{f}: decoded without {away:?} differs"
            );
        }
    }
}

/// A client killed (`kill -9`) in the middle of unaligned writes across
/// many stripes: every byte it had synced is there, the rest holds what it
/// wrote there or what was there before, and once healed the parity
/// decodes to the same file with two data bricks away.
#[test]
fn a_client_killed_mid_write_keeps_its_synced_bytes_and_heals_to_the_coding() {
    use std::os::unix::fs::FileExt;
    let c = Cluster::start();
    c.one_process_per_brick();
    four_plus_two(&c, "kw");
    c.ok(&["volume", "set", "kw", "network.ping-timeout", "2"]);
    let m = c.mount("kw");
    let synced = pattern(0);
    let f = std::fs::File::create(m.p("f")).unwrap();
    for (i, piece) in synced.chunks(5000).enumerate() {
        f.write_all_at(piece, i as u64 * 5000).unwrap();
    }
    f.sync_all().unwrap();
    // Over the second half and past the end, never synced.
    let later = [pattern(1), pattern(2), pattern(3)].concat();
    for (i, piece) in later.chunks(7000).enumerate() {
        f.write_all_at(piece, (1 << 19) + i as u64 * 7000).unwrap();
    }
    ok(&format!("kill -9 {}", client_pid(&m.dir)));
    drop(f);
    m.unmount();
    let written = |now: &[u8]| {
        assert!(now.len() >= 1 << 20, "{} bytes", now.len());
        assert!(now[..1 << 19] == synced[..1 << 19], "synced bytes lost");
        for (i, &b) in now.iter().enumerate().skip(1 << 19) {
            let (was, wrote) = (synced.get(i).copied(), later.get(i - (1 << 19)).copied());
            assert!(
                Some(b) == wrote || Some(b) == was || b == 0,
                "byte {i} is {b}, never written there"
            );
        }
    };
    written(&std::fs::read(c.mount("kw").p("f")).unwrap());
    wait_healed(&c, "kw", Duration::from_secs(60));
    // (Requests the killed client had sent may land after the read above:
    // the healed file is compared with itself, decoded.)
    let healed = std::fs::read(c.mount("kw").p("f")).unwrap();
    written(&healed);
    for away in [[0, 1], [2, 3]] {
        let decoded = read_with_away(&c, "kw", &["f"], away);
        assert!(decoded[0] == healed, "the parity decodes another file");
    }
}

/// A write still running on a brick when its client is killed finishes
/// there before the client's locks go: a heal let in at once would read
/// the fragments before it lands, and the write landing after would leave
/// data and parity disagreeing. Brick lw1 (data fragment 0) takes 10 s
/// for every large write after its first (nothing has shown it slow
/// before: it is not written around).
#[test]
fn a_write_still_running_when_its_client_dies_lands_before_its_locks_go() {
    use std::os::unix::fs::FileExt;
    let c = four_plus_two_failing("lw", "posix-large-write:lw1=1*off->sleep(10000)");
    let m = c.mount("lw");
    let f = std::fs::File::create(m.p("f")).unwrap();
    f.write_all_at(&pattern(1), 0).unwrap();
    f.sync_all().unwrap();
    // One write, within the write-behind window: answered at once.
    f.write_all_at(&pattern(2), 0).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    ok(&format!("kill -9 {}", client_pid(&m.dir)));
    let killed = std::time::Instant::now();
    drop(f);
    m.unmount();
    c.ok(&["volume", "heal", "lw"]);
    wait_healed(&c, "lw", Duration::from_secs(60));
    // Compared once the write has landed, whenever the heal ended.
    std::thread::sleep(Duration::from_secs(11).saturating_sub(killed.elapsed()));
    let healed = std::fs::read(c.mount("lw").p("f")).unwrap();
    for away in [[0, 1], [2, 3]] {
        let decoded = read_with_away(&c, "lw", &["f"], away);
        assert!(decoded[0] == healed, "the parity decodes another file");
    }
}

/// A brick whose directory is deleted fails its health check and goes
/// offline with the reason; the dispersed volume goes on with the other
/// five fragments.
#[test]
fn a_brick_whose_directory_is_deleted_goes_offline_and_the_dispersed_volume_goes_on() {
    let c = Cluster::start();
    let bricks = four_plus_two(&c, "hd");
    c.ok(&["volume", "set", "hd", "storage.health-check-interval", "1"]);
    let m = c.mount("hd");
    let src = c.path("src");
    // Not synced: a create answered ahead may land after the deletion,
    // and the brick without the directory only misses it.
    ok(&format!(
        "head -c 300001 /dev/urandom > {s} && mkdir {d} && cp {s} {d}/f",
        s = src.display(),
        d = m.p("d")
    ));
    // Creates still landing may refill a directory as rm empties it: it
    // is tried again.
    ok(&format!(
        "for i in $(seq 50); do rm -rf {b} 2>/dev/null && break; sleep 0.1; done; test ! -e {b}",
        b = bricks[2].display()
    ));
    wait_for("the brick to go offline", Duration::from_secs(20), || {
        let st = c.volume_status_json("hd");
        st[0]["bricks"][2]["online"] == false
            && st[0]["bricks"][2]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("health check failed"))
    });
    // Creates, writes, reads and listings go on with five fragments.
    ok(&format!(
        "for i in $(seq 1 20); do head -c $((i * 7001)) {s} > {d}/n$i; done",
        s = src.display(),
        d = m.p("d")
    ));
    ok(&format!("cmp {} {}", src.display(), m.p("d/f")));
    ok(&format!(
        "head -c 140020 {} | cmp - {}",
        src.display(),
        m.p("d/n20")
    ));
    assert_eq!(ok(&format!("ls {} | wc -l", m.p("d"))).trim(), "21");
    drop(m);
}

#[test]
fn small_files_written_around_a_brick_that_writes_late_read_back_whole() {
    // Fragment 0 holds a small file's data; written around, the parity has it.
    use std::{fs::OpenOptions, os::unix::fs::FileExt};
    let c = four_plus_two_failing("wa", "posix-write:wa1=sleep(200)");
    let m = c.mount("wa");
    let (f, data) = (|i| m.p(&format!("f{i}")), |i: u8, v: u8| vec![v ^ i; 4096]);
    let open = |i| OpenOptions::new().write(true).open(f(i)).unwrap();
    (0..200).for_each(|i| std::fs::write(f(i), data(i, 1)).unwrap());
    (0..200).for_each(|i| open(i).write_all_at(&data(i, 2), 0).unwrap());
    (0..200).for_each(|i| open(i).write_all_at(&data(i, 3), 4096).unwrap());
    ok("sync; echo 3 > /proc/sys/vm/drop_caches");
    for i in 0..200 {
        let got = std::fs::read(f(i)).unwrap_or_else(|e| panic!("f{i}: {e}"));
        assert_eq!(got, [data(i, 2), data(i, 3)].concat(), "f{i}");
    }
    // The mount tells the daemon which bricks it avoids with its next
    // question to it, seconds later.
    wait_for(
        "the late brick in volume status",
        Duration::from_secs(60),
        || {
            c.ok(&["volume", "status", "wa"])
                .contains("Slow: answers late")
        },
    );
}
