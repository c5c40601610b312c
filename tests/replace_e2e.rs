//! Swapping the bricks of a mounted replicated volume: replace-brick,
//! reset-brick and remove-brick lowering the replica count, with files
//! written through a real FUSE mount and compared on the bricks; and a
//! dispersed brick back from reset-brick healed by the ranges changed.

mod common;

use common::*;
use std::path::PathBuf;
use std::time::Duration;

/// Files of several kinds: small and sparse files, a symlink, a hard
/// link, nested directories with an odd mode.
fn fill(m: &Mount) {
    ok(&format!(
        "mkdir -p {0}/d/e && chmod 750 {0}/d/e && for i in $(seq 1 40); do head -c $((i * 211)) /dev/urandom > {0}/d/f$i; done \
         && truncate -s 3M {0}/d/e/sparse && echo end >> {0}/d/e/sparse && ln -s f1 {0}/d/link && ln {0}/d/f2 {0}/d/e/hard",
        m.dir.display()
    ));
}

fn sums(m: &Mount) -> String {
    ok(&format!(
        "cd {} && find . -type f -print0 | sort -z | xargs -0 md5sum",
        m.dir.display()
    ))
}

fn bricks_listed(c: &Cluster, vol: &str) -> Vec<String> {
    let info: serde_json::Value =
        serde_json::from_str(&c.ok(&["--json", "volume", "info", vol])).unwrap();
    info[0]["bricks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            format!(
                "{}:{}",
                b["host"].as_str().unwrap(),
                b["path"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn a_replaced_brick_is_healed_from_its_replicas_while_the_volume_stays_mounted() {
    let c = Cluster::start();
    let bricks = c.volume("rep", 3, &["a1", "a2", "a3", "b1", "b2", "b3"]);
    let m = c.mount("rep");
    fill(&m);
    let before = sums(&m);
    // A writer keeps going through the switch.
    let writer = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "mkdir {0}/w && for i in $(seq 1 100); do echo w$i > {0}/w/w$i || exit 1; sleep 0.02; done",
            m.dir.display()
        ))
        .spawn()
        .unwrap();
    let out = c.ok(&[
        "volume",
        "replace-brick",
        "rep",
        &c.brick("a2"),
        &c.brick("n2"),
        "commit",
        "force",
    ]);
    assert!(
        out.contains("replace-brick commit force operation successful"),
        "{out}"
    );
    assert!(out.contains("healed from their replicas"), "{out}");
    assert!(writer.wait_with_output().unwrap().status.success());
    let listed = bricks_listed(&c, "rep");
    assert_eq!(listed[1], c.brick("n2"), "same place in its set");
    assert!(!listed.contains(&c.brick("a2")));
    wait_full_heal(&c, "rep");
    let set0: Vec<PathBuf> = vec![bricks[0].clone(), c.path("n2"), bricks[2].clone()];
    assert_bricks_identical(&set0);
    let filled = ok(&format!(
        "find {} -path '*/.mortar' -prune -o -type f -print | wc -l",
        c.path("n2").display()
    ));
    assert!(filled.trim().parse::<usize>().unwrap() > 10, "{filled}");
    // The old brick keeps what it had, but is no longer the volume's.
    assert_eq!(
        std::fs::read_dir(bricks[1].join("d")).unwrap().count(),
        std::fs::read_dir(bricks[0].join("d")).unwrap().count()
    );
    let o = sh(&format!(
        "getfattr -n trusted.mortar.volume-id {}",
        bricks[1].display()
    ));
    assert!(!o.status.success(), "the old brick is released");
    assert_eq!(
        sums(&m)
            .lines()
            .filter(|l| !l.contains("./w/"))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n",
        before
    );
    assert_eq!(ok(&format!("ls {} | wc -l", m.p("w"))).trim(), "100");
    // It can go back into a volume.
    c.ok(&["volume", "create", "again", &c.brick("a2"), "force"]);
}

#[test]
fn a_reset_brick_comes_back_empty_and_is_filled() {
    let mut c = Cluster::start();
    let bricks = c.volume("rst", 3, &["r1", "r2", "r3"]);
    let m = c.mount("rst");
    fill(&m);
    // The changes' sessions settle a moment after the last one (the
    // replicas' locks are kept for the next change): until then the
    // brick's heal index lists them, and reset-brick refuses, as it should.
    wait_healed(&c, "rst", Duration::from_secs(30));
    let out = c.ok(&["volume", "reset-brick", "rst", &c.brick("r3"), "start"]);
    assert!(
        out.contains("reset-brick start operation successful"),
        "{out}"
    );
    wait_for("the brick to stop", Duration::from_secs(20), || {
        brick_pid_now(&c, "rst", 2).is_none()
    });
    // The volume goes on with two copies; the disk is "replaced".
    ok(&format!("echo more > {}", m.p("d/more")));
    ok(&format!("rm -rf {0} && mkdir {0}", bricks[2].display()));
    // Not brought back by a restart of its server meanwhile.
    c.kill_daemon();
    c.start_daemon();
    wait_for("the other bricks to run", Duration::from_secs(20), || {
        brick_pid_now(&c, "rst", 0).is_some()
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(brick_pid_now(&c, "rst", 2), None);
    let err = c.fails(&["volume", "reset-brick", "rst", &c.brick("r3"), "start"]);
    assert!(err.contains("already"), "{err}");
    let out = c.ok(&[
        "volume",
        "reset-brick",
        "rst",
        &c.brick("r3"),
        &c.brick("r3"),
        "commit",
        "force",
    ]);
    assert!(
        out.contains("reset-brick commit force operation successful"),
        "{out}"
    );
    wait_full_heal(&c, "rst");
    assert_bricks_identical(&bricks);
    assert_eq!(
        std::fs::read_to_string(bricks[2].join("d/more")).unwrap(),
        "more\n"
    );
}

#[test]
fn lowering_the_replica_count_keeps_every_file() {
    let c = Cluster::start();
    let bricks = c.volume("low", 3, &["l1", "l2", "l3", "l4", "l5", "l6"]);
    let m = c.mount("low");
    fill(&m);
    let before = sums(&m);
    wait_healed(&c, "low", Duration::from_secs(30));
    // start is refused: nothing needs to move.
    let state = c.state();
    c.refused(
        &[
            "volume",
            "remove-brick",
            "low",
            "replica",
            "2",
            &c.brick("l3"),
            &c.brick("l6"),
            "start",
        ],
        "use 'force'",
        &state,
    );
    // Every set must give as many.
    c.refused(
        &[
            "volume",
            "remove-brick",
            "low",
            "replica",
            "2",
            &c.brick("l3"),
            "force",
        ],
        "give 1 brick(s) of every replica set",
        &state,
    );
    c.refused(
        &[
            "volume",
            "remove-brick",
            "low",
            "replica",
            "4",
            &c.brick("l3"),
            "force",
        ],
        "use add-brick",
        &state,
    );
    let out = c.ok(&[
        "volume",
        "remove-brick",
        "low",
        "replica",
        "2",
        &c.brick("l2"),
        &c.brick("l6"),
        "force",
    ]);
    assert!(out.contains("2 brick(s) removed"), "{out}");
    let info = c.ok(&["volume", "info", "low"]);
    assert!(info.contains("2 x 2 = 4"), "{info}");
    assert_eq!(sums(&m), before);
    ok(&format!("echo after > {}", m.p("d/after")));
    wait_healed(&c, "low", Duration::from_secs(30));
    assert_bricks_identical(&[bricks[0].clone(), bricks[2].clone()]);
    assert_bricks_identical(&[bricks[3].clone(), bricks[4].clone()]);
    // The removed bricks keep their files, unused.
    assert!(bricks[1].join("d").exists());

    // And back to three copies: the new bricks are filled at once.
    let out = c.ok(&[
        "volume",
        "add-brick",
        "low",
        "replica",
        "3",
        &c.brick("m1"),
        &c.brick("m2"),
        "force",
    ]);
    assert!(out.contains("healed from their replicas"), "{out}");
    wait_full_heal(&c, "low");
    assert_bricks_identical(&[bricks[0].clone(), bricks[2].clone(), c.path("m1")]);
    assert_bricks_identical(&[bricks[3].clone(), bricks[4].clone(), c.path("m2")]);
    ok(&format!("rm {}", m.p("d/after")));
    assert_eq!(sums(&m), before);
}

#[test]
fn bad_replace_and_reset_requests_are_refused_and_change_nothing() {
    let c = Cluster::start();
    c.volume("one", 1, &["o1", "o2"]);
    c.volume("three", 3, &["t1", "t2", "t3"]);
    let state = c.state();
    let refused = |args: &[&str], want: &str| c.refused(args, want, &state);
    // replace-brick VOL FROM TO commit force, refused for why.
    let (o1, t1, t2, x, zz) = (
        c.brick("o1"),
        c.brick("t1"),
        c.brick("t2"),
        c.brick("x"),
        c.brick("zz"),
    );
    for (vol, from, to, why) in [
        // Nothing to heal from without replicas.
        ("one", &o1, &x, "no replicas"),
        // A brick not in the volume, a new brick already in use, the same
        // brick, no such volume, no such host.
        ("three", &zz, &x, "does not exist in volume"),
        ("three", &t1, &o1, "already part of a volume"),
        ("three", &t1, &t1, "already part of a volume"),
        ("nosuch", &t1, &x, "does not exist"),
        (
            "three",
            &t1,
            &"nohost:/x".to_string(),
            "not in 'Peer in Cluster' state",
        ),
    ] {
        refused(
            &["volume", "replace-brick", vol, from, to, "commit", "force"],
            why,
        );
    }
    refused(
        &["volume", "reset-brick", "one", &o1, "start"],
        "no replicas",
    );
    refused(
        &["volume", "reset-brick", "three", &t1, &t2, "commit"],
        "is not",
    );
    refused(
        &["volume", "reset-brick", "three", &t1, "begin"],
        "use reset-brick",
    );
    // Without its last words, replace-brick is a usage error.
    assert!(!c
        .cli(&[
            "volume",
            "replace-brick",
            "three",
            &c.brick("t1"),
            &c.brick("x")
        ])
        .status
        .success());
    assert_eq!(c.state(), state);
    assert!(!c.path("x").exists(), "nothing was prepared");
}

#[test]
fn a_brick_holding_changes_its_replicas_lack_is_not_taken_out() {
    let c = Cluster::start();
    let bricks = c.volume("held", 3, &["h1", "h2", "h3"]);
    let m = c.mount("held");
    c.ok(&["volume", "reset-brick", "held", &c.brick("h3"), "start"]);
    wait_for("the brick to stop", Duration::from_secs(20), || {
        brick_pid_now(&c, "held", 2).is_none()
    });
    // Written while h3 is down: h1 and h2 hold what h3 lacks.
    ok(&format!("echo only-two > {}", m.p("two")));
    let state = c.state();
    c.refused(
        &[
            "volume",
            "replace-brick",
            "held",
            &c.brick("h1"),
            &c.brick("n1"),
            "commit",
            "force",
        ],
        "holds changes its replicas lack",
        &state,
    );
    c.refused(
        &[
            "volume",
            "remove-brick",
            "held",
            "replica",
            "2",
            &c.brick("h1"),
            "force",
        ],
        "object(s) to heal",
        &state,
    );
    // The brick that missed them can go: its replicas fill the new one.
    c.ok(&[
        "volume",
        "replace-brick",
        "held",
        &c.brick("h3"),
        &c.brick("n3"),
        "commit",
        "force",
    ]);
    wait_full_heal(&c, "held");
    assert_bricks_identical(&[bricks[0].clone(), bricks[1].clone(), c.path("n3")]);
}

/// Granular heal on real bricks: a disperse brick stopped (`reset-brick
/// start`: its process told to stop) while a few blocks of a 64 MiB file
/// change is healed, once back, by reading the blocks around them, not
/// the file; its fragment then serves reads with two data bricks away.
#[test]
fn a_brick_back_heals_only_the_blocks_that_changed_while_it_was_away() {
    let c = Cluster::start();
    c.one_process_per_brick();
    let names: Vec<String> = (1..=6).map(|i| format!("gr{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    c.dispersed("gr", (6, 2), &names);
    c.ok(&["volume", "set", "gr", "network.ping-timeout", "2"]);
    c.ok(&["volume", "profile", "gr", "start"]);
    let m = c.mount("gr");
    let f = m.p("big");
    ok(&format!(
        "head -c 64M /dev/urandom > {f} && sync {f}",
        f = f
    ));
    // The writer's change sessions settle (its lock is kept half a second
    // after the last change): a brick stopped with a session open writes
    // down what the session changed, here the whole file, and its heal
    // then looks at all of it.
    wait_healed(&c, "gr", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(1500));
    let b6 = c.brick("gr6");
    c.ok(&["volume", "reset-brick", "gr", &b6, "start"]);
    wait_for("the brick to stop", Duration::from_secs(20), || {
        brick_pid_now(&c, "gr", 5).is_none()
    });
    for block in [100, 7000, 15000] {
        ok(&format!(
            "dd if=/dev/urandom of={} bs=4k count=1 seek={block} conv=notrunc,fsync status=none",
            f
        ));
    }
    let want = ok(&format!("md5sum < {}", f));
    // `heal info` says how much the heal will compare: the three 4 KiB
    // writes, in each fragment.
    let info: serde_json::Value =
        serde_json::from_str(&c.ok(&["--json", "volume", "heal", "gr", "info"])).unwrap();
    for b in info["bricks"].as_array().unwrap() {
        if b["connected"] == true {
            assert_eq!(b["to_compare"], 3 * 4096, "{b}");
        }
    }
    // So do the metrics, per brick as each brick recorded its writes: a
    // 4 KiB write changes one data fragment and the parity fragment up.
    let backlog = || {
        let daemon = scrape(&format!("{}:24108", c.ip));
        value(&daemon, "mortar_heal_pending_bytes", &["volume=\"gr\""])
    };
    wait_for(
        "the heal backlog in the metrics",
        Duration::from_secs(30),
        || backlog() > 0.0,
    );
    let bytes = backlog();
    assert!(
        bytes >= (3 * 4096 * 2) as f64 && bytes <= (5 * 3 * 4096) as f64,
        "{bytes}"
    );
    let before = bytes_read(&c, "gr");
    c.ok(&["volume", "reset-brick", "gr", &b6, &b6, "commit", "force"]);
    // `heal --wait` returns once nothing is pending.
    c.ok(&["volume", "heal", "gr", "--wait", "--timeout", "60"]);
    wait_full_heal(&c, "gr");
    let read = bytes_read(&c, "gr") - before;
    // The whole file would be 16 MiB from each of five bricks.
    assert!(read < 8 << 20, "the heal read {read} bytes");
    drop(m);
    let frozen = [freeze(&c, "gr", 0), freeze(&c, "gr", 1)];
    let m = c.mount("gr");
    let got = ok(&format!("md5sum < {}", m.p("big")));
    for pid in frozen {
        thaw(pid);
    }
    assert_eq!(got, want, "read with data bricks 1 and 2 away");
}

/// The bytes the bricks of `vol` up have read since they started
/// (`volume profile`).
fn bytes_read(c: &Cluster, vol: &str) -> u64 {
    let json: serde_json::Value =
        serde_json::from_str(&c.ok(&["--json", "volume", "profile", vol, "info"])).unwrap();
    json.as_array()
        .unwrap()
        .iter()
        .map(|b| {
            b["report"]["cumulative"]["read_bytes"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum()
}
