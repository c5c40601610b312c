//! Distributed-disperse volumes grow and shrink by whole disperse sets:
//! the rebalance and remove-brick move files between sets as they do
//! between replica sets, each set coding what it receives.

use super::*;

/// Waits for the task `status` shows (`rebalance` or `remove-brick`) and
/// answers its JSON status.
fn task_done(c: &Cluster, status: &[&str]) -> serde_json::Value {
    wait_for("the task to end", Duration::from_secs(120), || {
        let s = c.ok(status);
        s.contains("completed") || s.contains("failed")
    });
    // (Before the bricks: remove-brick takes every argument after its
    // name as one.)
    let mut json = status.to_vec();
    json.insert(2, "--json");
    serde_json::from_str(&c.ok(&json)).unwrap()
}

/// A `2 x (2 + 1)` volume grows to three sets and rebalances, then its
/// first set is removed, while a writer appends to files it keeps open:
/// every file reads back whole through a new mount, with every line
/// appended, and each file's fragments are on one set only.
#[test]
fn files_move_between_disperse_sets_on_rebalance_and_remove_brick_under_a_writer() {
    let c = Cluster::start();
    let mut bricks = c.dispersed("dd", (3, 1), &["e1", "e2", "e3", "e4", "e5", "e6"]);
    any_room(&c, "dd");
    let m = c.mount("dd");
    ok(&format!(
        "mkdir -p {0}/d && for i in $(seq 1 60); do head -c $((i * 997)) /dev/urandom > {0}/d/f$i; done && \
         head -c 3000000 /dev/urandom > {0}/d/big && ln {0}/d/f1 {0}/d/link1 && ln -s f2 {0}/d/sym2 && \
         for i in $(seq 1 20); do echo start$i > {0}/d/a$i; done",
        m.dir.display()
    ));
    let before = checksums(&m.p("d"));
    let stop = c.path("stop-writing");
    let paths: Vec<String> = (1..=20).map(|i| m.p(&format!("d/a{i}"))).collect();
    let writer = appender(&paths, &stop, 30);
    std::thread::sleep(Duration::from_millis(300));
    c.ok(&[
        "volume",
        "add-brick",
        "dd",
        &c.brick("e7"),
        &c.brick("e8"),
        &c.brick("e9"),
        "force",
    ]);
    bricks.extend(["e7", "e8", "e9"].map(|b| c.path(b)));
    c.ok(&["volume", "rebalance", "dd", "start"]);
    let t = task_done(&c, &["volume", "rebalance", "dd", "status"]);
    assert_eq!(t["status"], "Completed", "{t}");
    assert!(t["progress"]["moved"].as_u64().unwrap() > 10, "{t}");
    assert_eq!(t["progress"]["failed"], 0, "{t}");
    let on_new = sets_of(&bricks, 3).values().filter(|s| s == &&[2]).count();
    assert!(on_new > 10, "{on_new} files on the new set");

    // Part of a set cannot leave.
    let err = c.fails(&[
        "volume",
        "remove-brick",
        "dd",
        &c.brick("e1"),
        &c.brick("e2"),
        "start",
    ]);
    assert!(err.contains("one of a disperse set of 3"), "{err}");
    // The first set leaves: its files move to the other two.
    let first: Vec<String> = ["e1", "e2", "e3"].map(|b| c.brick(b)).to_vec();
    let mut remove: Vec<&str> = vec!["volume", "remove-brick", "dd"];
    remove.extend(first.iter().map(String::as_str));
    c.ok(&[remove.as_slice(), &["start"]].concat());
    let t = task_done(&c, &[remove.as_slice(), &["status"]].concat());
    assert_eq!(t["status"], "Completed", "{t}");
    assert_eq!(t["progress"]["failed"], 0, "{t}");
    c.ok(&[remove.as_slice(), &["commit"]].concat());
    // The mount goes on across the change of graph, with no error while
    // it switches.
    ok(&format!(
        "for i in $(seq 1 40); do ls {0}/d > /dev/null && cat {0}/d/f7 > /dev/null || exit 1; sleep 0.02; done",
        m.dir.display()
    ));
    std::fs::write(&stop, "").unwrap();
    let w = writer.join().unwrap();
    assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
    let lines: usize = String::from_utf8_lossy(&w.stdout).trim().parse().unwrap();

    let left = &bricks[3..];
    let on_removed = files_on(&bricks[0]);
    assert!(
        on_removed.values().all(|pointer| *pointer),
        "files left on the removed set: {on_removed:?}"
    );
    for (p, s) in sets_of(left, 3) {
        assert_eq!(s.len(), 1, "{p} on sets {s:?}");
    }
    // Through a new mount (which never knew the old places).
    let m2 = c.mount("dd");
    let now = checksums(&m2.p("d"));
    for (name, sum) in &before {
        if !name.starts_with("./a") {
            assert_eq!(now.get(name), Some(sum), "{name}");
        }
    }
    for i in 1..=20 {
        let mut want = format!("start{i}\n");
        for n in 0..lines {
            want.push_str(&format!("{n}\n"));
        }
        let got = std::fs::read_to_string(m2.p(&format!("d/a{i}"))).unwrap();
        assert!(
            got == want,
            "d/a{i}: {} lines of {}",
            got.lines().count(),
            lines + 1
        );
    }
    assert_eq!(std::fs::read_link(m2.p("d/sym2")).unwrap(), Path::new("f2"));
    assert_eq!(
        std::fs::metadata(m2.p("d/link1")).unwrap().len(),
        std::fs::metadata(m2.p("d/f1")).unwrap().len()
    );
}
