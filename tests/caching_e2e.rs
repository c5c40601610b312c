//! What two mounts of one volume see while each caches (docs/caching.md):
//! a change made through one is seen through the other as soon as the
//! changing call returned, whatever the other cached; a mount that stops
//! answering recalls delays a change by the ping timeout at most.

mod common;
use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

fn mode(path: &str) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn exists(path: &str) -> bool {
    fs::symlink_metadata(path).is_ok()
}

#[test]
fn a_change_on_one_mount_is_seen_at_once_on_the_other() {
    let c = Cluster::start();
    c.volume("lv", 3, &["l1", "l2", "l3"]);
    let (m1, m2) = (c.mount("lv"), c.mount("lv"));
    fs::create_dir(m1.p("d")).unwrap();
    for f in ["a", "b", "gone"] {
        fs::write(m1.p(&format!("d/{f}")), "one\n").unwrap();
    }

    // The second mount caches names, missing names, attributes and pages.
    let look = |m: &Mount| {
        let d = fs::read_dir(m.p("d")).unwrap().count();
        let a = fs::read_to_string(m.p("d/a")).unwrap();
        (
            d,
            a,
            mode(&m.p("d/b")),
            exists(&m.p("d/new")),
            exists(&m.p("d/gone")),
        )
    };
    assert_eq!(look(&m2), (3, "one\n".into(), 0o644, false, true));
    // Cached beyond the kernel's old one second: nothing is asked again.
    std::thread::sleep(Duration::from_millis(1500));
    let before = requests(&m2);

    assert_eq!(fs::read_to_string(m2.p("d/a")).unwrap(), "one\n");
    assert_eq!(mode(&m2.p("d/b")), 0o644);
    assert!(!exists(&m2.p("d/new")));
    let asked = requests(&m2) - before;

    assert_eq!(asked, 0, "requests for what was cached");

    // Data: a write of the same size (no size change to give it away).
    fs::write(m1.p("d/a"), "two\n").unwrap();
    assert_eq!(fs::read_to_string(m2.p("d/a")).unwrap(), "two\n");
    // Truncate.
    ok(&format!("truncate -s 2 {}", m1.p("d/a")));
    assert_eq!(fs::metadata(m2.p("d/a")).unwrap().len(), 2);
    assert_eq!(fs::read_to_string(m2.p("d/a")).unwrap(), "tw");
    // Attributes.
    fs::set_permissions(m1.p("d/b"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(mode(&m2.p("d/b")), 0o600);
    // Xattrs.
    ok(&format!("setfattr -n user.k -v v1 {}", m1.p("d/b")));
    let x = ok(&format!("getfattr --only-values -n user.k {}", m2.p("d/b")));
    assert_eq!(x, "v1");
    // A new name the other mount had looked up as missing.
    fs::write(m1.p("d/new"), "new\n").unwrap();
    assert_eq!(fs::read_to_string(m2.p("d/new")).unwrap(), "new\n");
    // Unlink.
    fs::remove_file(m1.p("d/gone")).unwrap();
    assert!(!exists(&m2.p("d/gone")));
    // Rename over a name the other mount knows, and away from one.
    fs::rename(m1.p("d/new"), m1.p("d/b")).unwrap();
    assert!(!exists(&m2.p("d/new")));
    assert_eq!(fs::read_to_string(m2.p("d/b")).unwrap(), "new\n");
    assert_eq!(mode(&m2.p("d/b")), 0o644);
    // Directories: a new one, and a listing.
    fs::create_dir(m1.p("d/sub")).unwrap();
    assert!(fs::metadata(m2.p("d/sub")).unwrap().is_dir());
    let mut names: Vec<String> = fs::read_dir(m2.p("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "b", "sub"]);
    // And the other way round.
    fs::write(m2.p("d/a"), "from two\n").unwrap();
    assert_eq!(fs::read_to_string(m1.p("d/a")).unwrap(), "from two\n");
}

#[test]
fn a_mount_that_stops_answering_delays_a_change_by_the_ping_timeout_at_most() {
    let c = Cluster::start();
    c.volume("sv", 3, &["s1", "s2", "s3"]);
    set_options(&c, "sv", &[("network.ping-timeout", "3")]);
    let (m1, m2) = (c.mount("sv"), c.mount("sv"));
    fs::write(m1.p("f"), "x").unwrap();
    assert_eq!(mode(&m2.p("f")), 0o644);
    let pid = ok(&format!("pgrep -f 'mount.*{}$'", m2.dir.display()))
        .trim()
        .to_string();
    assert!(
        !pid.is_empty() && !pid.contains('\n'),
        "one client: {pid:?}"
    );
    ok(&format!("kill -STOP {pid}"));
    let t = Instant::now();
    fs::set_permissions(m1.p("f"), fs::Permissions::from_mode(0o600)).unwrap();
    let took = t.elapsed();
    ok(&format!("kill -CONT {pid}"));
    assert!(took < Duration::from_secs(15), "the change took {took:?}");
    // The stopped mount lost its connections, so it drops what it cached
    // and sees the change.
    // (Its first request may find every brick gone: ENOTCONN, once.)
    wait_for(
        "the resumed mount to see the change",
        Duration::from_secs(20),
        || fs::metadata(m2.p("f")).is_ok_and(|m| m.permissions().mode() & 0o7777 == 0o600),
    );
    fs::write(m2.p("f"), "y").unwrap();
    assert_eq!(fs::read_to_string(m1.p("f")).unwrap(), "y");
}
