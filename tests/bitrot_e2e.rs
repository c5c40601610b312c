//! Bitrot through real bricks (docs/bitrot.md): bytes flipped in a brick's
//! copy behind the volume's back are found by the scrubber, never
//! returned by a read, and rewritten from the other copies (replicate) or
//! from the other fragments (disperse).

mod common;
use common::*;
use std::path::Path;
use std::time::Duration;

/// Writes `len` bytes of garbage into `file` at `at`, in place, as a
/// failing disk would.
fn rot(file: &Path, at: u64, len: usize) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.write_all_at(&vec![0x5a; len], at).unwrap();
    f.sync_all().unwrap();
}

fn md5(path: &Path) -> String {
    ok(&format!("md5sum < {}", path.display()))
}

/// `scrub status --json`.
fn status(c: &Cluster, vol: &str) -> serde_json::Value {
    let out = c.ok(&["volume", "bitrot", vol, "scrub", "status", "--json"]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Writes files through `m` until every brick keeps checksums (the
/// option reaches the bricks in the background).
fn wait_for_sums(m: &Mount, bricks: &[std::path::PathBuf]) {
    let mut n = 0;
    wait_for(
        "the bricks to keep checksums",
        Duration::from_secs(30),
        || {
            n += 1;
            ok(&format!(
                "head -c 40000 /dev/urandom > {}",
                m.p(&format!("probe{n}"))
            ));
            bricks.iter().all(|b| b.join(".mortar/sums").exists())
        },
    );
}

/// Waits until brick `b`'s scrubber has found and repaired `n` damaged
/// copies.
fn wait_repaired(c: &Cluster, vol: &str, brick: &Path, n: usize) -> serde_json::Value {
    let label = brick.display().to_string();
    let mut last = serde_json::Value::Null;
    wait_for(
        "the damaged copy to be found and repaired",
        Duration::from_secs(60),
        || {
            last = status(c, vol);
            last.as_array().unwrap().iter().any(|b| {
                b["brick"].as_str().unwrap().ends_with(&label)
                    && b["damaged"].as_array().unwrap().len() == n
                    && b["damaged"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|d| !d["repaired"].is_null())
            })
        },
    );
    last
}

#[test]
fn a_rotten_replica_is_found_by_the_scrubber_never_read_and_rewritten() {
    let c = Cluster::start();
    let bricks = c.volume("br", 3, &["b1", "b2", "b3"]);
    let m = c.mount("br");
    c.ok(&["volume", "bitrot", "br", "enable"]);
    let got = c.ok(&["volume", "get", "br", "storage.checksums"]);
    assert!(got.contains("on"), "{got}");
    c.ok(&["volume", "bitrot", "br", "scrub-throttle", "aggressive"]);
    wait_for_sums(&m, &bricks);
    ok(&format!(
        "head -c 3000000 /dev/urandom > {0} && echo small > {1} && sync {0} {1}",
        m.p("big"),
        m.p("small")
    ));
    let want = md5(&m.dir.join("big"));
    // Rot in the middle of the first brick's copy and in the small file's.
    rot(&bricks[0].join("big"), 1_500_000, 100);
    rot(&bricks[1].join("small"), 0, 3);
    // No read returns it, whichever copy it is served from.
    m.unmount();
    let m = c.mount("br");
    assert_eq!(md5(&m.dir.join("big")), want);
    assert_eq!(std::fs::read_to_string(m.p("small")).unwrap(), "small\n");
    // The scrubber finds both and rewrites them from the others.
    c.ok(&["volume", "bitrot", "br", "scrub", "ondemand"]);
    let s = wait_repaired(&c, "br", &bricks[0], 1);
    wait_repaired(&c, "br", &bricks[1], 1);
    assert_eq!(md5(&bricks[0].join("big")), want, "{s}");
    assert_eq!(
        std::fs::read_to_string(bricks[1].join("small")).unwrap(),
        "small\n"
    );
    // (The reads that met the damaged small copy had it blamed for
    // self-heal too: it finds nothing left to do.)
    wait_healed(&c, "br", Duration::from_secs(60));
    assert_bricks_identical(&bricks);
    let text = c.ok(&["volume", "bitrot", "br", "scrub", "status"]);
    assert!(text.contains("Error count: 1"), "{text}");
    assert!(text.contains("repaired"), "{text}");
    // Metrics count them.
    let daemon = metrics::scrape(&format!("{}:24108", c.ip));
    let count = |m| metrics::value(&daemon, m, &["volume=\"br\""]);
    assert_eq!(count("mortar_scrub_damaged_total"), 2.0, "{daemon}");
    assert_eq!(count("mortar_scrub_repaired_total"), 2.0, "{daemon}");
    assert!(
        count("mortar_scrubbed_bytes_total") >= 3_000_000.0,
        "{daemon}"
    );
}

#[test]
fn a_rotten_fragment_is_rebuilt_from_the_others() {
    let c = Cluster::start();
    let bricks = c.dispersed("bd", (3, 1), &["d1", "d2", "d3"]);
    let m = c.mount("bd");
    c.ok(&["volume", "bitrot", "bd", "enable"]);
    c.ok(&["volume", "bitrot", "bd", "scrub-throttle", "aggressive"]);
    wait_for_sums(&m, &bricks);
    ok(&format!(
        "head -c 1000000 /dev/urandom > {0} && sync {0}",
        m.p("f")
    ));
    let want = md5(&m.dir.join("f"));
    let fragment = md5(&bricks[2].join("f"));
    rot(&bricks[2].join("f"), 100_000, 10);
    c.ok(&["volume", "bitrot", "bd", "scrub", "ondemand"]);
    wait_repaired(&c, "bd", &bricks[2], 1);
    assert_eq!(md5(&bricks[2].join("f")), fragment);
    assert_eq!(md5(&m.dir.join("f")), want);
}

#[test]
fn bitrot_commands_say_what_is_wrong_and_pause_and_resume() {
    let c = Cluster::start();
    c.volume("one", 1, &["o1"]);
    let err = c.fails(&["volume", "bitrot", "one", "enable"]);
    assert!(err.contains("keeps one copy"), "{err}");
    let err = c.fails(&["volume", "bitrot", "one", "scrub", "status"]);
    assert!(err.contains("not enabled"), "{err}");
    let err = c.fails(&["volume", "bitrot", "one", "scrub-frequency", "yearly"]);
    assert!(err.contains("Usage"), "{err}");
    c.volume("two", 2, &["t1", "t2"]);
    c.ok(&["volume", "bitrot", "two", "enable"]);
    c.ok(&["volume", "bitrot", "two", "scrub-frequency", "minute"]);
    c.ok(&["volume", "bitrot", "two", "scrub", "pause"]);
    wait_for("the scrubbers paused", Duration::from_secs(30), || {
        let s = status(&c, "two");
        let all = s.as_array().unwrap();
        all.len() == 2 && all.iter().all(|b| b["state"] == "Paused")
    });
    c.ok(&["volume", "bitrot", "two", "scrub", "resume"]);
    wait_for(
        "the scrubbers resumed and done",
        Duration::from_secs(30),
        || {
            let s = status(&c, "two");
            s.as_array()
                .unwrap()
                .iter()
                .all(|b| b["state"] != "Paused" && b["runs"].as_u64().unwrap() >= 1)
        },
    );
    c.ok(&["volume", "bitrot", "two", "disable"]);
    let err = c.fails(&["volume", "bitrot", "two", "scrub", "status"]);
    assert!(err.contains("not enabled"), "{err}");
}
