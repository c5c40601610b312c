//! What two mounts of one volume see while each caches (docs/caching.md):
//! a change made through one is seen through the other as soon as the
//! changing call returned, whatever the other cached; a mount that stops
//! answering recalls delays a change by the ping timeout at most.

mod common;
use common::*;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
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

/// `stat -c '%y %h'` (mtime in nanoseconds, link count) of a path.
fn times_and_links(path: &str) -> String {
    ok(&format!("stat -c '%y %h' {path}"))
}

#[test]
fn what_a_change_of_names_left_is_known_without_asking() {
    let c = Cluster::start();
    let bricks = c.volume("nv", 3, &["n1", "n2", "n3"]);
    let m = c.mount("nv");
    fs::create_dir(m.p("d")).unwrap();
    // The directory's first brick holds what a stat answers (replicate's
    // attribute copy); each change below must leave the mount knowing it.
    let on_brick = |rel: &str| times_and_links(&bricks[0].join(rel).display().to_string());
    // Each change, and the file it leaves to look at.
    let steps = [
        ("create", "echo x > {m}/d/a", "d/a"),
        ("link", "ln {m}/d/a {m}/d/h", "d/a"),
        ("rename", "mv {m}/d/a {m}/d/b", "d/b"),
        ("unlink", "rm {m}/d/h", "d/b"),
        ("mkdir", "mkdir {m}/d/sub", "d/b"),
    ];
    for (what, cmd, file) in steps {
        ok(&cmd.replace("{m}/", &m.p("")));
        let before = requests_when_idle(&m);
        let seen_dir = times_and_links(&m.p("d"));
        let seen_file = times_and_links(&m.p(file));
        let asked = requests(&m) - before;
        assert_eq!(asked, 0, "{what}: requests for the directory and the file");
        assert_eq!(seen_dir, on_brick("d"), "{what}: the directory");
        // (A file's link count on a brick counts its gfid handle too.)
        let mtime = |s: String| s.rsplit_once(' ').unwrap().0.to_string();
        assert_eq!(mtime(seen_file), mtime(on_brick(file)), "{what}: {file}");
    }
    assert!(times_and_links(&m.p("d/b")).trim_end().ends_with(" 1"));
}

/// A file's times (atime, mtime, ctime, in nanoseconds) as `meta` has them.
fn times(meta: &fs::Metadata) -> [(i64, i64); 3] {
    use std::os::unix::fs::MetadataExt;
    [
        (meta.atime(), meta.atime_nsec()),
        (meta.mtime(), meta.mtime_nsec()),
        (meta.ctime(), meta.ctime_nsec()),
    ]
}

/// A create answered ahead of the bricks (docs/caching.md) makes up its
/// file's times; the bricks then choose their own. Once the file is
/// closed no stat may show the guess: a file's ctime changes only when the
/// file does (pjdfstest checks that a refused chown leaves it as it was).
#[test]
fn a_file_created_ahead_shows_the_bricks_times_once_closed() {
    let c = Cluster::start();
    let bricks = c.volume("tv", 3, &["t1", "t2", "t3"]);
    let m = c.mount("tv");
    fs::create_dir(m.p("d")).unwrap();
    let mut first = Vec::new();
    for i in 0..30 {
        let path = m.p(&format!("d/f{i}"));
        // Every third one made read-only, `open(O_CREAT | O_RDONLY)` as
        // pjdfstest's `create` does: a handle the kernel may close
        // without a flush.
        let f = match i % 3 {
            2 => fs::File::options()
                .read(true)
                .custom_flags(libc::O_CREAT)
                .open(&path)
                .unwrap(),
            _ => fs::File::create(&path).unwrap(),
        };
        // (Until the close, the kernel may answer with the guess.)
        times(&f.metadata().unwrap());
        if i % 3 == 1 {
            (&f).write_all(b"data").unwrap();
        }
        drop(f);
        first.push(times(&fs::symlink_metadata(&path).unwrap()));
    }
    requests_when_idle(&m);
    for (i, seen) in first.iter().enumerate() {
        let rel = format!("d/f{i}");
        let now = times(&fs::symlink_metadata(m.p(&rel)).unwrap());
        assert_eq!(*seen, now, "{rel}: its first stat, and one after it landed");
        // Replicate answers attributes from its first brick up.
        let brick = times(&fs::symlink_metadata(bricks[0].join(&rel)).unwrap());
        assert_eq!(now, brick, "{rel}: the mount, and its first brick");
    }
}

#[test]
fn names_missing_from_a_directory_made_here_cost_nothing_until_another_mount_adds_one() {
    let c = Cluster::start();
    // Two replica sets: a name lands on either, by its hash.
    c.volume("mv", 2, &["m1", "m2", "m3", "m4"]);
    let (m1, m2) = (c.mount("mv"), c.mount("mv"));
    fs::create_dir(m1.p("d")).unwrap();
    let before = requests_when_idle(&m1);
    for i in 0..20 {
        assert!(!exists(&m1.p(&format!("d/none{i}"))));
    }
    assert_eq!(requests(&m1) - before, 0, "requests for names missing");
    // Names made here are still found.
    for i in 0..5 {
        fs::write(m1.p(&format!("d/mine{i}")), "m\n").unwrap();
    }
    // The other mount adds names, on both sets: each is seen at once.
    for i in 0..20 {
        let name = format!("d/theirs{i}");
        fs::write(m2.p(&name), "t\n").unwrap();
        assert_eq!(fs::read_to_string(m1.p(&name)).unwrap(), "t\n", "{name}");
    }
    let mut names: Vec<String> = fs::read_dir(m1.p("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 25);
    assert!(names
        .iter()
        .all(|n| n.starts_with("mine") || n.starts_with("theirs")));
    // And ones the other mount removes or renames.
    fs::rename(m2.p("d/mine0"), m2.p("d/moved")).unwrap();
    assert!(!exists(&m1.p("d/mine0")));
    assert_eq!(fs::read_to_string(m1.p("d/moved")).unwrap(), "m\n");
}

#[test]
fn what_a_mount_wrote_it_reads_back_from_memory_until_another_mount_changes_it() {
    let c = Cluster::start();
    c.volume("iv", 3, &["i1", "i2", "i3"]);
    let (m1, m2) = (c.mount("iv"), c.mount("iv"));
    let data: String = (0..4096).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    fs::write(m1.p("f"), &data).unwrap();
    // Read back by new processes, as a build or a script would.
    let before = requests_when_idle(&m1);
    for _ in 0..3 {
        assert_eq!(ok(&format!("cat {}", m1.p("f"))), data);
    }
    assert_eq!(
        requests(&m1) - before,
        0,
        "requests to read back what was written"
    );
    // Another mount's changes, each seen at once.
    let cat = |m: &Mount| ok(&format!("cat {}", m.p("f")));
    ok(&format!(
        "printf XYZ | dd of={} conv=notrunc status=none",
        m2.p("f")
    ));
    assert_eq!(cat(&m1), format!("XYZ{}", &data[3..]));
    ok(&format!("printf tail >> {}", m2.p("f")));
    assert_eq!(cat(&m1), format!("XYZ{}tail", &data[3..]));
    ok(&format!("truncate -s 2 {}", m2.p("f")));
    assert_eq!(cat(&m1), "XY");
    // And this mount's own: appends, overwrites, truncates.
    ok(&format!("printf 123 >> {}", m1.p("f")));
    ok(&format!(
        "printf Q | dd of={} conv=notrunc status=none",
        m1.p("f")
    ));
    assert_eq!(cat(&m1), "QY123");
    assert_eq!(cat(&m2), "QY123");
    ok(&format!("truncate -s 1 {}", m1.p("f")));
    assert_eq!(cat(&m1), "Q");
    // Turned off, a read back asks a brick.
    set_options_seen_by(&c, "iv", &[("performance.io-cache", "off")], &m1);
    fs::write(m1.p("g"), &data).unwrap();
    let before = requests(&m1);
    assert_eq!(ok(&format!("cat {}", m1.p("g"))), data);
    assert!(requests(&m1) - before > 0, "io-cache off still answered");
}

/// Makes the kernel drop every unused name and inode it caches, as memory
/// pressure would.
fn drop_kernel_names() {
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
}

#[test]
fn names_found_outlive_the_kernels_own_and_follow_another_mounts_changes() {
    let c = Cluster::start();
    c.volume("fv", 3, &["f1", "f2", "f3"]);
    let (m1, m2) = (c.mount("fv"), c.mount("fv"));
    fs::create_dir(m1.p("d")).unwrap();
    for f in ["a", "b", "c", "e"] {
        fs::write(m1.p(&format!("d/{f}")), format!("{f}\n")).unwrap();
    }
    let stat = |m: &Mount, f: &str| fs::metadata(m.p(&format!("d/{f}"))).ok();
    let read = |m: &Mount, f: &str| fs::read_to_string(m.p(&format!("d/{f}"))).ok();
    for f in ["a", "b", "c", "e"] {
        assert_eq!(read(&m2, f).unwrap(), format!("{f}\n"));
    }
    // The kernel forgets the names; the mount still knows where they
    // lead, under the directory's lease.
    drop_kernel_names();
    let before = requests(&m2);
    for f in ["a", "b", "c", "e"] {
        assert!(stat(&m2, f).is_some());
    }
    assert_eq!(requests(&m2) - before, 0, "requests for names found before");
    // Another mount's changes: recalled before they are made, so the
    // names lead where they lead now, whatever either cache held.
    fs::remove_file(m1.p("d/a")).unwrap();
    fs::rename(m1.p("d/c"), m1.p("d/b")).unwrap();
    fs::set_permissions(m1.p("d/e"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(m1.p("d/n"), "n\n").unwrap();
    for round in 0..2 {
        assert!(
            stat(&m2, "a").is_none(),
            "round {round}: unlinked name found"
        );
        assert!(stat(&m2, "c").is_none(), "round {round}: moved name found");
        assert_eq!(read(&m2, "b").as_deref(), Some("c\n"), "round {round}");
        assert_eq!(mode(&m2.p("d/e")), 0o600, "round {round}");
        assert_eq!(read(&m2, "n").as_deref(), Some("n\n"), "round {round}");
        drop_kernel_names();
    }
    // This mount's own changes of names, with the kernel's names dropped.
    fs::rename(m2.p("d/b"), m2.p("d/z")).unwrap();
    fs::remove_file(m2.p("d/n")).unwrap();
    drop_kernel_names();
    assert!(stat(&m2, "b").is_none());
    assert!(stat(&m2, "n").is_none());
    assert_eq!(read(&m2, "z").as_deref(), Some("c\n"));
    assert_eq!(read(&m1, "z").as_deref(), Some("c\n"));
    assert!(stat(&m1, "b").is_none());
}

#[test]
fn listings_kept_by_the_kernel_follow_every_change_of_names() {
    let c = Cluster::start();
    // Two sets: a directory's mtime comes from one, so only the recalls
    // tell a listing in the other set changed.
    c.volume("dv", 3, &["d1", "d2", "d3", "d4", "d5", "d6"]);
    let (m1, m2) = (c.mount("dv"), c.mount("dv"));
    fs::create_dir(m1.p("d")).unwrap();
    for i in 0..20 {
        fs::write(m1.p(&format!("d/f{i}")), "x").unwrap();
    }
    // Settled first: creates still landing from m1 would recall names in
    // "d" from m2 while its first lookup of "d" is out, and an answer
    // that raced a recall is not cached (the kernel would look again).
    fs::File::open(m1.p("d")).unwrap().sync_all().unwrap();
    requests_when_idle(&m1);
    let list = |m: &Mount| {
        let mut v: Vec<String> = fs::read_dir(m.p("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let mut want: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
    want.sort();
    assert_eq!(list(&m2), want);
    // Listed again from the kernel's copy.
    let before = requests(&m2);
    for _ in 0..3 {
        assert_eq!(list(&m2), want);
    }
    assert_eq!(requests(&m2) - before, 0, "requests to list again");
    // Another mount's changes, each seen by the next listing.
    let check = |want: &mut Vec<String>| {
        want.sort();
        assert_eq!(&list(&m2), want);
        assert_eq!(&list(&m1), want);
    };
    for i in 20..30 {
        fs::write(m1.p(&format!("d/f{i}")), "x").unwrap();
        want.push(format!("f{i}"));
        check(&mut want);
    }
    for i in 0..10 {
        fs::remove_file(m1.p(&format!("d/f{i}"))).unwrap();
        want.retain(|n| *n != format!("f{i}"));
        check(&mut want);
    }
    for i in 10..15 {
        fs::rename(m1.p(&format!("d/f{i}")), m1.p(&format!("d/g{i}"))).unwrap();
        want.retain(|n| *n != format!("f{i}"));
        want.push(format!("g{i}"));
        check(&mut want);
    }
    // And this mount's own.
    fs::write(m2.p("d/own"), "x").unwrap();
    want.push("own".into());
    check(&mut want);
    fs::remove_file(m2.p("d/g10")).unwrap();
    want.retain(|n| n != "g10");
    check(&mut want);
}

/// The names in a directory, sorted.
fn listing(dir: &str) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn changes_of_names_answered_ahead_are_all_there_at_another_mounts_first_look() {
    let c = Cluster::start();
    // Two replica sets: names land on either, and renames cross them.
    let bricks = c.volume("av", 2, &["a1", "a2", "a3", "a4"]);
    let (m1, m2) = (c.mount("av"), c.mount("av"));
    fs::create_dir(m1.p("d")).unwrap();
    let mut want = std::collections::BTreeMap::new();
    for i in 0..300 {
        fs::write(m1.p(&format!("d/f{i}")), format!("file {i}\n")).unwrap();
        want.insert(format!("f{i}"), format!("file {i}\n"));
    }
    for i in 0..50 {
        fs::File::create(m1.p(&format!("d/e{i}"))).unwrap();
        want.insert(format!("e{i}"), String::new());
    }
    // Renames to new names, and over names that exist.
    for i in 0..100 {
        fs::rename(m1.p(&format!("d/f{i}")), m1.p(&format!("d/g{i}"))).unwrap();
        let v = want.remove(&format!("f{i}")).unwrap();
        want.insert(format!("g{i}"), v);
    }
    for i in 100..150 {
        fs::rename(m1.p(&format!("d/f{i}")), m1.p(&format!("d/f{}", i + 50))).unwrap();
        let v = want.remove(&format!("f{i}")).unwrap();
        want.insert(format!("f{}", i + 50), v);
    }
    for i in 200..260 {
        fs::remove_file(m1.p(&format!("d/f{i}"))).unwrap();
        want.remove(&format!("f{i}"));
    }
    // A name removed and made again, and a file read back at once.
    fs::remove_file(m1.p("d/e0")).unwrap();
    fs::write(m1.p("d/e0"), "again\n").unwrap();
    want.insert("e0".into(), "again\n".into());
    assert_eq!(fs::read_to_string(m1.p("d/g7")).unwrap(), "file 7\n");

    // The other mount's first look, with no pause: every change is there.
    let names: Vec<String> = want.keys().cloned().collect();
    assert_eq!(listing(&m2.p("d")), names);
    for (name, content) in &want {
        assert_eq!(
            fs::read_to_string(m2.p(&format!("d/{name}"))).unwrap(),
            *content,
            "{name}"
        );
    }
    // And this mount's own view, and its directory's fsync: nothing failed.
    assert_eq!(listing(&m1.p("d")), names);
    fs::File::open(m1.p("d")).unwrap().sync_all().unwrap();
    assert_bricks_identical(&bricks[0..2]);
    assert_bricks_identical(&bricks[2..4]);
}

#[test]
fn a_change_answered_ahead_that_fails_on_the_bricks_is_reported_by_the_directorys_fsync() {
    let c = Cluster::start();
    let bricks = c.volume("fv", 3, &["f1", "f2", "f3"]);
    let m = c.mount("fv");
    fs::create_dir(m.p("d")).unwrap();
    fs::write(m.p("d/a"), "a\n").unwrap();
    // A name put on the bricks behind the mount's back (not supported:
    // here it stands for any failure the mount could not foresee).
    for b in &bricks {
        fs::write(b.join("d/clash"), "planted\n").unwrap();
    }
    // The mount knows every name of a directory it made: this one is
    // missing, so the create is answered ahead and fails on the bricks.
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(m.p("d/clash"))
        .unwrap();
    let dir = fs::File::open(m.p("d")).unwrap();
    let e = dir.sync_all().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST), "{e}");
    // Reported once; what the mount believed is dropped. (The kernel's
    // name goes on the recall thread's second step, a moment after:
    // docs/caching.md.)
    dir.sync_all().unwrap();
    wait_for(
        "the kernel to drop the name",
        Duration::from_secs(5),
        || fs::read_to_string(m.p("d/clash")).is_ok_and(|s| s == "planted\n"),
    );
    assert_eq!(listing(&m.p("d")), ["a", "clash"]);
}

/// fsx on one mount while the other reads the file and changes its
/// attributes and xattrs (each a recall of what the fsx mount caches); then
/// fsx on each mount by turns over the same file, each run starting from
/// what the other left (`-k`), which must be what the bricks hold: a mount
/// that kept pages, io-cache bytes or attributes from its own earlier run
/// would read them back as stale data, and fsx would fail.
#[test]
fn fsx_on_one_mount_while_the_other_reads_and_writes_the_same_file_finds_no_stale_data() {
    let Some(fsx) = fsx() else {
        return;
    };
    let c = Cluster::start();
    let bricks = c.volume("xv", 3, &["x1", "x2", "x3"]);
    let (m1, m2) = (c.mount("xv"), c.mount("xv"));
    let run_fsx = |m: &Mount, args: &str, seed: usize| {
        let log = c.path(&format!("fsx-{seed}"));
        std::fs::create_dir_all(&log).unwrap();
        let o = sh(&format!(
            "cd {} && {} -q -S {seed} -P {} {args} f",
            m.dir.display(),
            fsx.display(),
            log.display()
        ));
        assert!(
            o.status.success(),
            "fsx -S {seed} {args} on {}: {}\n{}\nlog: {}",
            m.dir.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            fs::read_to_string(log.join("f.fsxlog")).unwrap_or_default()
        );
    };

    // Concurrent: the other mount reads the whole file, chmods, sets an
    // xattr and touches it, over and over, until fsx ends.
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let f = m2.p("f");
                let _ = fs::read(&f);
                let _ = fs::set_permissions(&f, fs::Permissions::from_mode(0o644 | (i & 2)));
                sh(&format!("setfattr -n user.turn -v {i} {f}; touch {f}"));
            }
        });
        run_fsx(&m1, "-N 4000", 1);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });

    // By turns: each run starts from a 256 KiB file (grown on the mount
    // that ran last, so that this one learns of it by a recall only) whose
    // every byte must be what the bricks hold.
    for turn in 2..8 {
        let (m, last) = if turn % 2 == 0 {
            (&m2, &m1)
        } else {
            (&m1, &m2)
        };
        ok(&format!("truncate -s 262144 {}", last.p("f")));
        let seen = fs::read(m.p("f")).unwrap();
        let held = fs::read(bricks[0].join("f")).unwrap();
        assert!(
            seen == held,
            "turn {turn}: {} read what the bricks do not hold",
            m.dir.display()
        );
        run_fsx(m, "-k -N 1500", turn);
    }
    assert_eq!(fs::read(m1.p("f")).unwrap(), fs::read(m2.p("f")).unwrap());
    m1.unmount();
    m2.unmount();
    assert_bricks_identical(&bricks);
}

/// The mount widens the kernel's read-ahead window to its largest request
/// (FUSE leaves it at 128 KiB): a sequential read reaches the bricks in
/// 1 MiB reads.
#[test]
fn a_sequential_read_reaches_the_bricks_in_one_mib_requests() {
    let c = Cluster::start();
    c.volume("rv", 3, &["r1", "r2", "r3"]);
    let (m1, m2) = (c.mount("rv"), c.mount("rv"));
    let data: Vec<u8> = (0..16u32 << 20).map(|i| (i % 251) as u8).collect();
    fs::write(m1.p("big"), &data).unwrap();
    let dev = ok(&format!("stat -c '%d' {}", m2.dir.display()));
    let dev: u64 = dev.trim().parse().unwrap();
    let window = format!("/sys/class/bdi/{}:{}/read_ahead_kb", dev >> 8, dev & 0xff);
    assert_eq!(fs::read_to_string(&window).unwrap().trim(), "1024");
    // The other mount has none of it in memory.
    let before = requests(&m2);
    assert!(fs::read(m2.p("big")).unwrap() == data);
    let asked = requests(&m2) - before;
    // 16 reads, and the lookup, open and the like around them; 128 KiB
    // reads would be 128.
    assert!(asked <= 24, "{asked} requests to read 16 MiB");
}

/// A close of a file opened for writing returns before its writes reach
/// the bricks (`performance.flush-behind`); another mount's first look at
/// the file waits until they have landed (close-to-open), whether it
/// cached the file before or never saw it.
#[test]
fn a_file_closed_behind_is_read_whole_by_another_mount() {
    let c = Cluster::start();
    let bricks = c.volume("fb", 3, &["b1", "b2", "b3"]);
    // Every write this mount sends behind takes 300 ms to leave it.
    let slow = c.mount_env("fb", &[("FAILPOINTS", "write-behind-send=return(300)")]);
    let other = c.mount("fb");
    for i in 0..4 {
        fs::write(slow.p(&format!("f{i}")), b"old").unwrap();
    }
    requests_when_idle(&slow);
    for i in 0..4 {
        assert_eq!(fs::read(other.p(&format!("f{i}"))).unwrap(), b"old");
    }
    for i in 0..4 {
        let name = format!("f{i}");
        let f = fs::OpenOptions::new()
            .write(true)
            .open(slow.p(&name))
            .unwrap();
        f.write_all_at(b"new", 0).unwrap();
        drop(f);
        assert_eq!(
            fs::read(bricks[0].join(&name)).unwrap(),
            b"old",
            "{name}: the close waited for its write"
        );
        // Even a stat first: it must not leave the read an older size.
        if i % 2 == 0 {
            fs::metadata(other.p(&name)).unwrap();
        }
        assert_eq!(fs::read(other.p(&name)).unwrap(), b"new", "{name}");
    }
    // A file made and written here, never seen there.
    fs::write(slow.p("g"), b"made").unwrap();
    assert_eq!(fs::read(other.p("g")).unwrap(), b"made");
    let graph = ok(&format!(
        "getfattr --only-values -n trusted.mortar.client.graph {}",
        slow.dir.display()
    ));
    assert!(!graph.contains("closes behind 0 "), "{graph}");
}
