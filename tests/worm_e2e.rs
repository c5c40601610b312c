//! Retention (`features.worm-file-level`) through a real mount and a raw
//! brick connection: a committed file refuses every change until its
//! retention ends, and is an ordinary file after it.

mod common;
use common::*;
use mortar::core::{Ctx, Fop, Gfid, Name};
use mortar::protocol::wire::{self, Msg};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

fn erofs(what: &str, r: std::io::Result<impl std::fmt::Debug>) {
    match r {
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{what}: {e}"),
        Ok(v) => panic!("{what} was let through: {v:?}"),
    }
}

fn chmod(p: &str, mode: u32) -> std::io::Result<()> {
    fs::set_permissions(p, fs::Permissions::from_mode(mode))
}

/// Writes `data` to the end of `p` and syncs it: the first step the
/// bricks refuse fails it (the mount answers opens and writes ahead).
fn append(p: &str, data: &[u8]) -> std::io::Result<()> {
    let mut f = OpenOptions::new().append(true).open(p)?;
    f.write_all(data)?;
    f.sync_all()
}

fn truncate(p: &str) -> std::io::Result<()> {
    let c = std::ffi::CString::new(p).unwrap();
    match unsafe { libc::truncate(c.as_ptr(), 1) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn xattr(p: &str) -> std::io::Result<()> {
    let c = std::ffi::CString::new(p).unwrap();
    let r = unsafe {
        libc::setxattr(
            c.as_ptr(),
            c"user.note".as_ptr(),
            b"x".as_ptr().cast(),
            1,
            0,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[test]
fn a_committed_file_refuses_every_change_until_its_retention_ends() {
    let c = Cluster::start();
    let bricks = c.volume("wv", 3, &["w1", "w2", "w3"]);
    c.ok(&["volume", "set", "wv", "features.worm-file-level", "on"]);
    c.ok(&[
        "volume",
        "set",
        "wv",
        "features.default-retention-period",
        "15",
    ]);
    c.ok(&["volume", "set", "wv", "features.auto-commit-period", "0"]);
    let m = c.mount("wv");
    // The bricks have the options once a file made read-only refuses an
    // append.
    let mut probe = 0;
    wait_for("the bricks to retain", Duration::from_secs(20), || {
        probe += 1;
        let p = m.p(&format!("probe{probe}"));
        fs::write(&p, b"p").unwrap();
        chmod(&p, 0o444).unwrap();
        append(&p, b"more").is_err()
    });

    // In a directory this mount made, whose changes of names it would
    // otherwise answer ahead (performance.async-dirops).
    fs::create_dir(m.p("d")).unwrap();
    let doc = m.p("d/doc");
    fs::write(&doc, b"kept as it is\n").unwrap();
    fs::write(m.p("d/other"), b"other\n").unwrap();
    fs::write(m.p("raw"), b"raw\n").unwrap();
    chmod(&m.p("raw"), 0o444).unwrap();
    // A file not committed changes as any other.
    append(&doc, b"appended\n").unwrap();
    let want = b"kept as it is\nappended\n".to_vec();
    chmod(&doc, 0o444).unwrap();

    erofs("an append", append(&doc, b"x"));
    erofs(
        "a write over it",
        OpenOptions::new()
            .write(true)
            .open(&doc)
            .and_then(|mut f| f.write_all(b"y").and_then(|_| f.sync_all())),
    );
    erofs(
        "an open with O_TRUNC",
        OpenOptions::new().write(true).truncate(true).open(&doc),
    );
    erofs("a truncation", truncate(&doc));
    erofs("a chmod", chmod(&doc, 0o644));
    erofs("a chown", std::os::unix::fs::chown(&doc, Some(1), None));
    erofs("an xattr", xattr(&doc));
    erofs("a rename", fs::rename(&doc, m.p("d/moved")));
    erofs("a rename over it", fs::rename(m.p("d/other"), &doc));
    erofs("a link", fs::hard_link(&doc, m.p("d/linked")));
    erofs("an unlink", fs::remove_file(&doc));
    assert_eq!(fs::read(&doc).unwrap(), want);
    for b in &bricks {
        assert_eq!(fs::read(b.join("d/doc")).unwrap(), want, "{}", b.display());
    }

    // A client of its own, with a valid credential, speaking to a brick
    // directly: refused there too.
    let addr = brick_addr(&c, "wv", 0);
    let mut s = tls_connect(&addr, &c.credential());
    s.write_all(&hello_frame(&bricks[0].display().to_string()))
        .unwrap();
    assert!(matches!(read_msg(&mut s), Msg::Welcome { .. }));
    let user = Ctx {
        internal: false,
        ..Ctx::root()
    };
    let unlink = Fop::Unlink {
        parent: Gfid::ROOT,
        name: Name::new(&b"raw"[..]).unwrap(),
    };
    let call = wire::encode(&Msg::Call {
        id: 1,
        cx: user,
        fop: unlink,
    });
    s.write_all(&call.to_vec()).unwrap();
    match read_msg(&mut s) {
        Msg::Answer { id: 1, result } => {
            assert_eq!(result.err().map(|e| e.errno), Some(libc::EROFS))
        }
        other => panic!("{other:?}"),
    }
    // A create of its name, which opens the file that is there.
    let create = wire::encode(&Msg::Call {
        id: 2,
        cx: Ctx {
            internal: false,
            ..Ctx::root()
        },
        fop: Fop::Create {
            parent: Gfid::ROOT,
            name: Name::new(&b"raw"[..]).unwrap(),
            gfid: Gfid::random(),
            mode: 0o644,
            umask: 0,
            flags: libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        },
    });
    s.write_all(&create.to_vec()).unwrap();
    match read_msg(&mut s) {
        Msg::Answer { id: 2, result } => {
            assert_eq!(result.err().map(|e| e.errno), Some(libc::EROFS))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::read(bricks[0].join("raw")).unwrap(), b"raw\n");

    // Once its retention ends it is an ordinary file.
    wait_for("the retention to end", Duration::from_secs(20), || {
        fs::remove_file(&doc).is_ok()
    });
    for b in &bricks {
        assert!(!b.join("d/doc").exists(), "{}", b.display());
    }
}

#[test]
fn a_file_left_unchanged_for_the_auto_commit_period_is_committed() {
    let c = Cluster::start();
    c.volume("wa", 3, &["a1", "a2", "a3"]);
    c.ok(&["volume", "set", "wa", "features.worm-file-level", "on"]);
    c.ok(&["volume", "set", "wa", "features.auto-commit-period", "2"]);
    let m = c.mount("wa");
    // A change within the period goes on; once it has passed without
    // one, the next is refused (tried on fresh files until the bricks
    // have the options).
    let log = (0..8)
        .map(|i| m.p(&format!("log{i}")))
        .find(|log| {
            fs::write(log, b"one\n").unwrap();
            append(log, b"two\n").unwrap();
            std::thread::sleep(Duration::from_secs(3));
            append(log, b"more\n").is_err()
        })
        .expect("a file left alone for the period is committed");
    erofs("an unlink", fs::remove_file(&log));
    assert_eq!(fs::read(&log).unwrap(), b"one\ntwo\n");
    // Turned off, files change again.
    c.ok(&["volume", "set", "wa", "features.worm-file-level", "off"]);
    wait_for("worm off at the bricks", Duration::from_secs(20), || {
        fs::remove_file(&log).is_ok()
    });
}

/// Sets a file's access time alone (`touch -a -d @SECS`).
fn set_atime(p: &str, secs: i64) -> std::io::Result<()> {
    let c = std::ffi::CString::new(p).unwrap();
    let times = [
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    ];
    match unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn retention_is_moved_by_the_access_time_as_its_mode_allows_and_may_outlive_deletion() {
    let c = Cluster::start();
    c.volume("wm", 3, &["m1", "m2", "m3"]);
    for (k, v) in [
        ("features.worm-file-level", "on"),
        ("features.default-retention-period", "600"),
        ("features.auto-commit-period", "0"),
        ("features.retention-mode", "enterprise"),
        ("features.worm-files-deletable", "off"),
    ] {
        c.ok(&["volume", "set", "wm", k, v]);
    }
    c.fails(&["volume", "set", "wm", "features.retention-mode", "lax"]);
    let m = c.mount("wm");
    // Files committed until the bricks have the options (each tried
    // once: a brick that had them first would keep a file committed).
    let mut n = 0;
    let mut probe = || {
        n += 1;
        let p = m.p(&format!("probe{n}"));
        fs::write(&p, b"p").unwrap();
        chmod(&p, 0o444).unwrap();
        p
    };
    wait_for("the bricks to retain", Duration::from_secs(20), || {
        append(&probe(), b"x").is_err()
    });
    let f = m.p("f");
    fs::write(&f, b"f\n").unwrap();
    chmod(&f, 0o444).unwrap();
    // Enterprise: only later.
    erofs("an earlier end", set_atime(&f, unix_now() + 2));
    set_atime(&f, unix_now() + 900).unwrap();
    erofs("an append", append(&f, b"x"));
    // Relax: earlier too, once every brick has it (a probe's end moved,
    // and a moment for the others).
    c.ok(&["volume", "set", "wm", "features.retention-mode", "relax"]);
    wait_for("relax at the bricks", Duration::from_secs(20), || {
        set_atime(&probe(), unix_now() + 1).is_ok()
    });
    std::thread::sleep(Duration::from_secs(1));
    set_atime(&f, unix_now() + 2).unwrap();
    // Its retention over, it changes again, but is never deleted.
    wait_for("the retention to end", Duration::from_secs(20), || {
        chmod(&f, 0o644).is_ok()
    });
    append(&f, b"y").unwrap();
    erofs("an unlink", fs::remove_file(&f));
    erofs("a rename over it", {
        fs::write(m.p("g"), b"g").unwrap();
        fs::rename(m.p("g"), &f)
    });
    c.ok(&["volume", "set", "wm", "features.worm-files-deletable", "on"]);
    wait_for("deletable at the bricks", Duration::from_secs(20), || {
        fs::remove_file(&f).is_ok()
    });
}

#[test]
fn files_committed_on_a_distributed_volume_move_by_rename_and_their_pointers_go() {
    let c = Cluster::start();
    let bricks = c.volume("wd", 1, &["d1", "d2"]);
    for (k, v) in [
        ("features.worm-file-level", "on"),
        ("features.default-retention-period", "1"),
        ("features.auto-commit-period", "3"),
        ("features.worm-files-deletable", "off"),
    ] {
        c.ok(&["volume", "set", "wd", k, v]);
    }
    let m = c.mount("wd");
    for i in 0..20 {
        fs::write(m.p(&format!("f{i}")), b"f").unwrap();
        fs::rename(m.p(&format!("f{i}")), m.p(&format!("g{i}"))).unwrap();
    }
    let pointers = || {
        bricks
            .iter()
            .flat_map(|b| fs::read_dir(b).unwrap())
            .filter_map(|e| e.ok())
            .filter(|e| {
                let md = e.metadata().unwrap();
                md.is_file() && md.permissions().mode() & 0o7777 == 0o1000
            })
            .count()
    };
    assert!(pointers() > 0, "renames across the sets leave pointers");
    // Committed, and past their retention: renamed again, which removes
    // the pointers the first renames left (older than the auto-commit
    // period by then), though no committed file may be deleted.
    for i in 0..20 {
        chmod(&m.p(&format!("g{i}")), 0o444).unwrap();
    }
    erofs("an append", append(&m.p("g0"), b"x"));
    std::thread::sleep(Duration::from_secs(4));
    for i in 0..20 {
        fs::rename(m.p(&format!("g{i}")), m.p(&format!("h{i}"))).unwrap();
    }
    for i in 0..20 {
        assert_eq!(fs::read(m.p(&format!("h{i}"))).unwrap(), b"f");
        erofs("an unlink", fs::remove_file(m.p(&format!("h{i}"))));
    }
}
