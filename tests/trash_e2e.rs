//! The trash through a real mount (docs/data-protection.md): files removed
//! or truncated are kept in /.trashcan at the path they had, by the same
//! name on every copy; what is not kept is removed for good.

mod common;
use common::*;
use std::path::Path;

/// The names in `dir` (sorted).
fn names(dir: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The one name in `dir` that starts with `stem_` and the time.
fn kept(dir: &str, stem: &str) -> String {
    let found: Vec<String> = names(dir)
        .into_iter()
        .filter(|n| n.starts_with(&format!("{stem}_20")))
        .collect();
    assert_eq!(found.len(), 1, "{stem} kept once in {dir}: {found:?}");
    format!("{dir}/{}", found[0])
}

#[test]
fn removed_and_truncated_files_are_kept_in_the_trash_by_one_name_on_every_copy() {
    let c = Cluster::start();
    let bricks = c.volume("tr", 2, &["b1", "b2"]);
    c.ok(&["volume", "set", "tr", "features.trash", "on"]);
    c.ok(&["volume", "set", "tr", "features.trash-max-filesize", "64KB"]);
    let m = c.mount("tr");
    ok(&format!(
        "cd {0} && mkdir -p a/b && echo precious > a/b/f && head -c 100000 /dev/urandom > big \
         && echo linked > l1 && ln l1 l2 && echo first > t && echo second > o",
        m.dir.display()
    ));

    // Removed: kept at its path, its name and time on both copies alike.
    ok(&format!("rm {}", m.p("a/b/f")));
    let f = kept(&m.p(".trashcan/a/b"), "f");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "precious\n");
    let name = Path::new(&f).file_name().unwrap().to_owned();
    for b in &bricks {
        assert!(
            b.join(".trashcan/a/b").join(&name).exists(),
            "{}",
            b.display()
        );
    }
    let mode = ok(&format!("stat -c %a {}", m.p(".trashcan/a")));
    assert_eq!(mode.trim(), "1777");

    // Too large, or one of several names: removed for good.
    ok(&format!("rm {} {}", m.p("big"), m.p("l1")));
    assert!(!names(&m.p(".trashcan"))
        .iter()
        .any(|n| n.starts_with("big")));
    assert!(!names(&m.p(".trashcan")).iter().any(|n| n.starts_with("l1")));
    assert_eq!(std::fs::read_to_string(m.p("l2")).unwrap(), "linked\n");

    // Truncated, by truncate(2) or by an open with O_TRUNC: a copy first.
    ok(&format!("truncate -s 2 {}", m.p("t")));
    assert_eq!(
        std::fs::read_to_string(kept(&m.p(".trashcan"), "t")).unwrap(),
        "first\n"
    );
    ok(&format!("echo third > {}", m.p("o")));
    assert_eq!(
        std::fs::read_to_string(kept(&m.p(".trashcan"), "o")).unwrap(),
        "second\n"
    );
    assert_eq!(std::fs::read_to_string(m.p("o")).unwrap(), "third\n");

    // Removed inside the trash: gone for good.
    ok(&format!("rm {f}"));
    assert!(names(&m.p(".trashcan/a/b")).is_empty());

    // The trash itself stays.
    for cmd in ["rmdir {0}/.trashcan/../.trashcan", "mv {0}/.trashcan {0}/x"] {
        let out = sh(&cmd.replace("{0}", &m.dir.display().to_string()));
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("Operation not permitted"), "{cmd}: {err}");
    }

    // Directories named by features.trash-eliminate-path (and below
    // them): for good.
    c.ok(&[
        "volume",
        "set",
        "tr",
        "features.trash-eliminate-path",
        "/scratch,/x",
    ]);
    ok(&format!(
        "mkdir -p {0}/scratch/sub && echo s > {0}/scratch/sub/s && rm {0}/scratch/sub/s && echo k > {0}/scratchy && rm {0}/scratchy",
        m.dir.display()
    ));
    assert!(!m.dir.join(".trashcan/scratch").exists());
    kept(&m.p(".trashcan"), "scratchy");
    // Off: removals are for good again.
    c.ok(&["volume", "set", "tr", "features.trash", "off"]);
    ok(&format!("echo x > {0}/g && rm {0}/g", m.dir.display()));
    assert!(!names(&m.p(".trashcan")).iter().any(|n| n.starts_with("g_")));
    assert_bricks_identical(&bricks);
}

#[test]
fn a_user_takes_back_a_file_of_theirs_and_not_anothers() {
    let c = Cluster::start();
    c.volume("tu", 1, &["b"]);
    c.ok(&["volume", "set", "tu", "features.trash", "on"]);
    let m = c.mount("tu");
    let d = m.dir.display().to_string();
    ok(&format!(
        "mkdir -m 1777 {d}/shared && setpriv --reuid=1000 --regid=1000 --clear-groups sh -c 'echo mine > {d}/shared/u1 && rm {d}/shared/u1' \
         && setpriv --reuid=1001 --regid=1001 --clear-groups sh -c 'echo theirs > {d}/shared/u2 && rm {d}/shared/u2'"
    ));
    let u1 = kept(&m.p(".trashcan/shared"), "u1");
    let u2 = kept(&m.p(".trashcan/shared"), "u2");
    assert_eq!(ok(&format!("stat -c %u {u1}")).trim(), "1000");
    // Its owner moves it back; another user cannot take it.
    ok(&format!(
        "setpriv --reuid=1000 --regid=1000 --clear-groups mv {u1} {d}/shared/u1"
    ));
    assert_eq!(std::fs::read_to_string(m.p("shared/u1")).unwrap(), "mine\n");
    let out = sh(&format!(
        "setpriv --reuid=1000 --regid=1000 --clear-groups mv {u2} {d}/shared/stolen"
    ));
    assert!(!out.status.success(), "another's file was taken");
    assert_eq!(std::fs::read_to_string(&u2).unwrap(), "theirs\n");
}

#[test]
fn a_trash_that_cannot_be_made_leaves_removals_working() {
    let c = Cluster::start();
    c.volume("tn", 1, &["b"]);
    let m = c.mount("tn");
    // A file where the trash would go: nothing can be kept.
    ok(&format!(
        "echo in-the-way > {0}/.trashcan && echo x > {0}/f && echo long > {0}/t",
        m.dir.display()
    ));
    c.ok(&["volume", "set", "tn", "features.trash", "on"]);
    ok(&format!("rm {0}/f && truncate -s 0 {0}/t", m.dir.display()));
    assert!(!m.dir.join("f").exists());
    assert_eq!(std::fs::metadata(m.p("t")).unwrap().len(), 0);
    assert_eq!(
        std::fs::read_to_string(m.p(".trashcan")).unwrap(),
        "in-the-way\n"
    );
}

/// Files (not directories) under `dir`, by name, sorted.
fn files_under(dir: &str) -> Vec<String> {
    let out = ok(&format!("cd {dir} && find . -type f | sort"));
    out.lines().map(str::to_string).collect()
}

#[test]
fn the_pool_empties_the_trash_by_age_and_by_size_oldest_first() {
    let c = Cluster::start();
    c.volume("ts", 1, &["b"]);
    c.ok(&["volume", "set", "ts", "features.trash", "on"]);
    let m = c.mount("ts");
    let d = m.dir.display().to_string();
    // By size: five files of 4 KB, a second apart; a cap of 10 KB keeps
    // the two that went last.
    ok(&format!("mkdir {d}/s"));
    for i in 1..=5 {
        ok(&format!(
            "head -c 4096 /dev/urandom > {d}/s/f{i} && rm {d}/s/f{i}"
        ));
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    assert_eq!(files_under(&m.p(".trashcan/s")).len(), 5);
    c.ok(&["volume", "set", "ts", "features.trash-max-size", "10KB"]);
    wait_for(
        "the trash cut to its size",
        std::time::Duration::from_secs(30),
        || files_under(&m.p(".trashcan/s")).len() == 2,
    );
    let left = files_under(&m.p(".trashcan/s"));
    assert!(
        left[0].starts_with("./f4_") && left[1].starts_with("./f5_"),
        "{left:?}"
    );
    // By age: everything older than 2 s goes, and the directories left
    // empty with it (not the trash itself).
    c.ok(&["volume", "set", "ts", "features.trash-max-age", "2"]);
    wait_for(
        "the trash emptied by age",
        std::time::Duration::from_secs(30),
        || names(&m.p(".trashcan")).is_empty(),
    );
    // A removal in a directory whose trash directory was swept away
    // makes it again.
    c.ok(&["volume", "set", "ts", "features.trash-max-age", "0"]);
    ok(&format!("echo late > {d}/s/late && rm {d}/s/late"));
    assert_eq!(
        std::fs::read_to_string(kept(&m.p(".trashcan/s"), "late")).unwrap(),
        "late\n"
    );
    // Bad values are refused.
    let bad = c.fails(&["volume", "set", "ts", "features.trash-max-age", "soon"]);
    assert!(bad.contains("not valid"), "{bad}");
    let bad = c.fails(&["volume", "set", "ts", "features.trash-max-size", "lots"]);
    assert!(bad.contains("not valid"), "{bad}");
}
