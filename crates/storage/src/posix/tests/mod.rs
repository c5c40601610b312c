mod caller;
mod data;
mod layout;
mod names;
mod reaper;
mod sums;

use super::*;
use mortar_core::fop::{TimeSet, ANON_FH};

fn n(s: &str) -> Name {
    Name::new(s.as_bytes().to_vec()).unwrap()
}

struct Brick {
    _dir: tempfile::TempDir,
    outside: PathBuf,
    root: PathBuf,
    p: Posix,
    fds: FdTable,
}

fn brick() -> Brick {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("brick");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "s3cret").unwrap();
    let p = Posix::open(&root).unwrap();
    Brick {
        _dir: dir,
        outside,
        root,
        p,
        fds: FdTable::default(),
    }
}

impl Brick {
    /// The same brick directory served anew (its handles gone).
    fn restarted(self) -> Brick {
        let Brick {
            _dir,
            outside,
            root,
            ..
        } = self;
        let p = Posix::open(&root).unwrap();
        Brick {
            _dir,
            outside,
            root,
            p,
            fds: FdTable::default(),
        }
    }
    fn call(&self, fop: Fop) -> FsResult<Reply> {
        self.p.call(&Ctx::root(), &self.fds, &fop)
    }
    fn lookup(&self, parent: Gfid, name: &str) -> FsResult<Attr> {
        self.call(Fop::Lookup {
            parent,
            name: n(name),
        })?
        .into_attr()
    }
    fn mkdir(&self, parent: Gfid, name: &str) -> Gfid {
        let gfid = Gfid::random();
        self.call(Fop::Mkdir {
            parent,
            name: n(name),
            gfid,
            mode: 0o755,
            umask: 0,
        })
        .unwrap();
        gfid
    }
    /// Creates file `name` in `parent`, open for reading and writing:
    /// its gfid and handle.
    fn create(&self, parent: Gfid, name: &str) -> (Gfid, u64) {
        let gfid = Gfid::random();
        let Reply::Created { fh, .. } = self
            .call(Fop::Create {
                parent,
                name: n(name),
                gfid,
                mode: 0o644,
                umask: 0,
                flags: libc::O_RDWR,
            })
            .unwrap()
        else {
            panic!("a create answers Created")
        };
        (gfid, fh)
    }
    fn outside_untouched(&self) {
        let names: Vec<_> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("secret")]);
        assert_eq!(
            std::fs::read_to_string(self.outside.join("secret")).unwrap(),
            "s3cret"
        );
    }
}

#[test]
fn files_round_trip_and_keep_their_gfid_across_renames() {
    let b = brick();
    let d = b.mkdir(Gfid::ROOT, "d");
    let e = b.mkdir(d, "e");
    let gfid = Gfid::random();
    let rep = b
        .call(Fop::Create {
            parent: e,
            name: n("f"),
            gfid,
            mode: 0o644,
            umask: 0o022,
            flags: libc::O_RDWR,
        })
        .unwrap();
    let Reply::Created { fh, .. } = rep else {
        panic!()
    };
    b.call(Fop::Write {
        gfid,
        fh,
        offset: 0,
        data: bytes::Bytes::from_static(b"hello"),
        grow: 0,
        reserve: false,
    })
    .unwrap();
    assert_eq!(b.fds.len(), 1);
    b.call(Fop::Release { gfid, fh }).unwrap();
    assert!(b.fds.is_empty(), "release closes the handle");
    assert_eq!(
        std::fs::read_to_string(b.root.join("d/e/f")).unwrap(),
        "hello"
    );
    // Rename the directory above; the file and its directory stay reachable by gfid.
    b.call(Fop::Rename {
        parent: Gfid::ROOT,
        name: n("d"),
        newparent: Gfid::ROOT,
        newname: n("d2"),
        flags: 0,
    })
    .unwrap();
    let fresh = Posix::open(&b.root).unwrap();
    let a = fresh
        .call(&Ctx::root(), &b.fds, &Fop::Getattr { gfid })
        .unwrap()
        .into_attr()
        .unwrap();
    assert_eq!((a.size, a.nlink), (5, 1));
    let x = fresh
        .call(
            &Ctx::root(),
            &b.fds,
            &Fop::Lookup {
                parent: e,
                name: n("f"),
            },
        )
        .unwrap();
    assert_eq!(x.into_attr().unwrap().gfid, gfid);
    // Times and modes.
    let set = SetAttr {
        mode: Some(0o600),
        mtime: Some(TimeSet::At(1_000_000_000, 5)),
        ..Default::default()
    };
    let a = b
        .call(Fop::Setattr { gfid, set })
        .unwrap()
        .into_attr()
        .unwrap();
    assert_eq!((a.perm, a.mtime), (0o600, (1_000_000_000, 5)));
    // Unlinking the last name drops the handle.
    b.call(Fop::Unlink {
        parent: e,
        name: n("f"),
    })
    .unwrap();
    assert_eq!(
        b.call(Fop::Getattr { gfid }).unwrap_err().errno,
        libc::ESTALE
    );
}

#[test]
fn anonymous_reads_and_open_files_outlive_their_names() {
    let b = brick();
    let gfid = Gfid::random();
    let c = Fop::Create {
        parent: Gfid::ROOT,
        name: n("f"),
        gfid,
        mode: 0o644,
        umask: 0,
        flags: libc::O_RDWR,
    };
    let Reply::Created { fh, .. } = b.call(c).unwrap() else {
        panic!()
    };
    b.call(Fop::Write {
        gfid,
        fh,
        offset: 0,
        data: bytes::Bytes::from_static(b"data"),
        grow: 0,
        reserve: false,
    })
    .unwrap();
    // Read without ever opening: the brick opens it by gfid.
    let read = |b: &Brick| {
        b.call(Fop::Read {
            gfid,
            fh: ANON_FH,
            offset: 0,
            size: 10,
        })
    };
    let Reply::Data(d) = read(&b).unwrap() else {
        panic!()
    };
    assert_eq!(&d[..], b"data");
    // Anonymous handles are read-only.
    let w = Fop::Write {
        gfid,
        fh: ANON_FH,
        offset: 0,
        data: bytes::Bytes::from_static(b"x"),
        grow: 0,
        reserve: false,
    };
    assert_eq!(b.call(w).unwrap_err().errno, libc::EBADF);
    // A connection that holds it open for real, not anonymously.
    let held = FdTable::default();
    b.p.call(
        &Ctx::root(),
        &held,
        &Fop::Open {
            gfid,
            flags: libc::O_RDONLY,
        },
    )
    .unwrap();
    // Unlinked while open here: still readable and stat-able, as POSIX wants.
    b.call(Fop::Unlink {
        parent: Gfid::ROOT,
        name: n("f"),
    })
    .unwrap();
    assert!(matches!(read(&b).unwrap(), Reply::Data(d) if &d[..] == b"data"));
    // Read anonymously there (a second open of it, by file handle or
    // /proc/PID/fd), it is read through the open one.
    let anon = Fop::Read {
        gfid,
        fh: ANON_FH,
        offset: 0,
        size: 10,
    };
    let r = b.p.call(&Ctx::root(), &held, &anon).unwrap();
    assert!(matches!(r, Reply::Data(d) if &d[..] == b"data"));
    assert_eq!(
        b.call(Fop::Getattr { gfid })
            .unwrap()
            .into_attr()
            .unwrap()
            .nlink,
        0
    );
    // Another connection, which never had it open, sees it gone.
    let other = FdTable::default();
    assert_eq!(
        b.p.call(&Ctx::root(), &other, &Fop::Getattr { gfid })
            .unwrap_err()
            .errno,
        libc::ESTALE
    );
}

#[test]
fn a_planted_symlink_never_leads_outside_the_brick() {
    let b = brick();
    std::os::unix::fs::symlink(&b.outside, b.root.join("evil")).unwrap();
    let evil = b.lookup(Gfid::ROOT, "evil").unwrap();
    assert_eq!(evil.kind, FileKind::Symlink);
    // Using it as a directory or opening it as a file is refused.
    assert!(b.lookup(evil.gfid, "secret").is_err());
    let c = Fop::Create {
        parent: evil.gfid,
        name: n("x"),
        gfid: Gfid::random(),
        mode: 0o644,
        umask: 0,
        flags: 2,
    };
    assert!(b.call(c).is_err());
    assert!(b
        .call(Fop::Mkdir {
            parent: evil.gfid,
            name: n("x"),
            gfid: Gfid::random(),
            mode: 0o755,
            umask: 0
        })
        .is_err());
    assert!(b
        .call(Fop::Open {
            gfid: evil.gfid,
            flags: libc::O_RDWR
        })
        .is_err());
    assert!(b.call(Fop::Opendir { gfid: evil.gfid }).is_err());
    assert!(b
        .call(Fop::Setattr {
            gfid: evil.gfid,
            set: SetAttr {
                size: Some(0),
                ..Default::default()
            }
        })
        .is_err());
    // Its target is readable as a link, as POSIX wants.
    let Reply::Data(t) = b.call(Fop::Readlink { gfid: evil.gfid }).unwrap() else {
        panic!()
    };
    assert_eq!(&t[..], b.outside.as_os_str().as_encoded_bytes());
    b.outside_untouched();
}

#[test]
fn a_tampered_handle_never_leads_outside_the_brick() {
    let b = brick();
    let d = b.mkdir(Gfid::ROOT, "d");
    let handle = b.root.join(INDEX_REL).join(d.handle_rel());
    for target in [
        b.outside.display().to_string(),
        "../../../../../outside".into(),
        "../../../../..".into(),
    ] {
        std::fs::remove_file(&handle).unwrap();
        std::os::unix::fs::symlink(&target, &handle).unwrap();
        let fresh = Posix::open(&b.root).unwrap();
        let fds = FdTable::default();
        let lk = Fop::Lookup {
            parent: d,
            name: n("secret"),
        };
        assert!(fresh.call(&Ctx::root(), &fds, &lk).is_err(), "{target}");
        let mk = Fop::Mknod {
            parent: d,
            name: n("x"),
            gfid: Gfid::random(),
            mode: libc::S_IFREG | 0o644,
            umask: 0,
            rdev: 0,
            linkto: None,
        };
        assert!(fresh.call(&Ctx::root(), &fds, &mk).is_err(), "{target}");
    }
    b.outside_untouched();
}

#[test]
fn the_index_is_hidden_and_reserved() {
    let b = brick();
    assert_eq!(
        b.lookup(Gfid::ROOT, META_DIR).unwrap_err().errno,
        libc::ENOENT
    );
    let mk = Fop::Mkdir {
        parent: Gfid::ROOT,
        name: n(META_DIR),
        gfid: Gfid::random(),
        mode: 0o755,
        umask: 0,
    };
    assert_eq!(b.call(mk).unwrap_err().errno, libc::EPERM);
    let Reply::Opened { fh } = b.call(Fop::Opendir { gfid: Gfid::ROOT }).unwrap() else {
        panic!()
    };
    let Reply::Entries(e) = b
        .call(Fop::Readdir {
            gfid: Gfid::ROOT,
            fh,
            offset: 0,
            plus: true,
        })
        .unwrap()
    else {
        panic!()
    };
    assert!(e.is_empty(), "{e:?}");
    let set = Fop::Setxattr {
        gfid: Gfid::ROOT,
        name: GFID_XATTR.into(),
        value: Default::default(),
        flags: 0,
    };
    assert_eq!(b.call(set).unwrap_err().errno, libc::EPERM);
}

#[test]
fn a_rewound_listing_shows_the_directory_as_it_is_now() {
    let b = brick();
    b.mkdir(Gfid::ROOT, "a");
    let Reply::Opened { fh } = b.call(Fop::Opendir { gfid: Gfid::ROOT }).unwrap() else {
        panic!()
    };
    let names = |offset| {
        let Reply::Entries(e) = b
            .call(Fop::Readdir {
                gfid: Gfid::ROOT,
                fh,
                offset,
                plus: false,
            })
            .unwrap()
        else {
            panic!()
        };
        e.iter()
            .map(|e| String::from_utf8_lossy(&e.name).into_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(0), ["a"]);
    b.mkdir(Gfid::ROOT, "b");
    // Offsets into the listing stay as they were...
    assert!(names(1).is_empty());
    // ...until the reader rewinds.
    let mut now = names(0);
    now.sort();
    assert_eq!(now, ["a", "b"]);
}

#[test]
fn directories_with_any_bytes_in_their_names_are_reachable_by_gfid() {
    let b = brick();
    let name = Name::new(vec![0xff, b'd', 0xfe]).unwrap();
    let gfid = Gfid::random();
    b.call(Fop::Mkdir {
        parent: Gfid::ROOT,
        name: name.clone(),
        gfid,
        mode: 0o755,
        umask: 0,
    })
    .unwrap();
    let child = b.mkdir(gfid, "inner");
    let fresh = Posix::open(&b.root).unwrap();
    let a = fresh
        .call(&Ctx::root(), &b.fds, &Fop::Getattr { gfid: child })
        .unwrap()
        .into_attr()
        .unwrap();
    assert_eq!(a.kind, FileKind::Dir);
}

#[test]
fn objects_made_on_the_brick_directly_get_a_gfid() {
    let b = brick();
    std::fs::create_dir(b.root.join("made")).unwrap();
    std::fs::write(b.root.join("made/by-hand"), "x").unwrap();
    let d = b.lookup(Gfid::ROOT, "made").unwrap();
    let f = b.lookup(d.gfid, "by-hand").unwrap();
    assert_eq!(b.lookup(d.gfid, "by-hand").unwrap().gfid, f.gfid, "stable");
    assert_eq!(
        b.call(Fop::Getattr { gfid: f.gfid })
            .unwrap()
            .into_attr()
            .unwrap()
            .size,
        1
    );
}

#[test]
fn a_directory_moved_behind_the_bricks_back_is_found_again_by_its_lookup() {
    // What a crash between a rename and its handle update leaves: the
    // directory at its new name, its handle pointing at the old one.
    let b = brick();
    let a = b.mkdir(Gfid::ROOT, "a");
    let d = b.mkdir(a, "old");
    std::fs::rename(b.root.join("a/old"), b.root.join("a/new")).unwrap();
    b.p.call(
        &Ctx::root(),
        &FdTable::default(),
        &Fop::Getattr { gfid: Gfid::ROOT },
    )
    .unwrap();
    assert!(
        b.call(Fop::Opendir { gfid: d }).is_err(),
        "the handle is stale"
    );
    assert_eq!(b.lookup(a, "new").unwrap().gfid, d);
    b.call(Fop::Opendir { gfid: d })
        .expect("repaired by the lookup");
}

#[test]
fn a_prepared_brick_is_taken_back_whole_unless_it_keeps_something() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("brick");
    std::fs::create_dir(&root).unwrap();
    Posix::prepare(&root).unwrap();
    for made in [".mortar/pending", ".mortar/health_check", ".mortar/gfid"] {
        assert!(root.join(made).exists(), "{made} not made");
    }
    Posix::unprepare(&root);
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
    assert!(rustix::fs::getxattr(&root, GFID_XATTR, &mut [0u8; 16][..]).is_err());

    // A brick that was used keeps what it holds, and the handles of it.
    Posix::prepare(&root).unwrap();
    let b = Brick {
        p: Posix::open(&root).unwrap(),
        _dir: dir,
        outside: PathBuf::new(),
        root: root.clone(),
        fds: FdTable::default(),
    };
    b.mkdir(Gfid::ROOT, "d");
    Posix::unprepare(&root);
    assert!(root.join("d").is_dir());
    assert!(root.join(".mortar/gfid").is_dir());
    assert!(rustix::fs::getxattr(&root, GFID_XATTR, &mut [0u8; 16][..]).is_ok());
}

#[test]
fn pointers_and_layouts_are_the_clients_to_keep_and_nothing_else_internal_is() {
    use mortar_core::fop::{LAYOUT_XATTR, LINKTO_XATTR};
    let b = brick();
    let f = Gfid::random();
    let mk = |name: &str, gfid, linkto| Fop::Mknod {
        parent: Gfid::ROOT,
        name: n(name),
        gfid,
        mode: libc::S_IFREG | 0o1000,
        umask: 0o022,
        rdev: 0,
        linkto,
    };
    b.call(mk("ptr", f, Some(7))).unwrap();
    assert_eq!(b.lookup(Gfid::ROOT, "ptr").unwrap().linkto, Some(7));
    // An ordinary file of the same mode is no pointer.
    b.call(mk("plain", Gfid::random(), None)).unwrap();
    let plain = b.lookup(Gfid::ROOT, "plain").unwrap();
    assert_eq!((plain.perm, plain.linkto), (0o1000, None));
    // A second pointer with the same gfid is refused (the client links).
    let again = b.call(mk("ptr2", f, Some(7)));
    assert_eq!(again.unwrap_err().errno, libc::EEXIST);
    assert!(b.lookup(Gfid::ROOT, "ptr2").is_err(), "nothing left behind");
    // The layout xattr is the client's; other internal names are not.
    let set = |name: &str| Fop::Setxattr {
        gfid: Gfid::ROOT,
        name: name.into(),
        value: serde_bytes::ByteBuf::from(vec![1, 2, 3]),
        flags: 0,
    };
    b.call(set(LAYOUT_XATTR)).unwrap();
    assert_eq!(b.call(set(GFID_XATTR)).unwrap_err().errno, libc::EPERM);
    assert_eq!(
        b.call(set("trusted.mortar.blame")).unwrap_err().errno,
        libc::EPERM
    );
    // A user (a mount whose root is squashed) may change distribute's
    // xattrs only where it may write: not on the root's directory.
    let user = b.p.call(
        &Ctx {
            uid: 1000,
            ..Ctx::default()
        },
        &b.fds,
        &set(LAYOUT_XATTR),
    );
    let expect = if rustix::process::geteuid().is_root() {
        libc::EACCES
    } else {
        0
    };
    assert_eq!(user.map_or_else(|e| e.errno, |_| 0), expect);
    let other = b.p.call(
        &Ctx {
            uid: 1000,
            ..Ctx::default()
        },
        &b.fds,
        &set("trusted.other"),
    );
    assert_eq!(other.unwrap_err().errno, libc::EPERM);
    let Reply::Xattr(names) = b.call(Fop::Listxattr { gfid: Gfid::ROOT }).unwrap() else {
        panic!("listxattr answers names");
    };
    let names = String::from_utf8(names.into_vec()).unwrap();
    assert!(names.contains(LAYOUT_XATTR), "{names}");
    assert!(!names.contains(GFID_XATTR), "{names}");
    let Reply::Xattr(names) = b
        .call(Fop::Listxattr {
            gfid: b.lookup(Gfid::ROOT, "ptr").unwrap().gfid,
        })
        .unwrap()
    else {
        panic!("listxattr answers names");
    };
    assert!(String::from_utf8_lossy(&names).contains(LINKTO_XATTR));
}

#[test]
fn the_brick_counts_open_files_and_forgets_them_with_their_connection() {
    use mortar_core::fop::OPEN_COUNT_XATTR;
    let b = brick();
    let (f, fh) = b.create(Gfid::ROOT, "f");
    let count = |b: &Brick| match b.call(Fop::Getxattr {
        gfid: f,
        name: OPEN_COUNT_XATTR.into(),
    }) {
        Ok(Reply::Xattr(v)) => String::from_utf8(v.into_vec()).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(count(&b), "1");
    let other = FdTable::default();
    b.p.call(&Ctx::root(), &other, &Fop::Open { gfid: f, flags: 0 })
        .unwrap();
    assert_eq!(count(&b), "2");
    b.call(Fop::Release { gfid: f, fh }).unwrap();
    assert_eq!(count(&b), "1");
    drop(other);
    assert_eq!(count(&b), "0");
    let set = b.call(Fop::Setxattr {
        gfid: f,
        name: OPEN_COUNT_XATTR.into(),
        value: serde_bytes::ByteBuf::from(b"5".to_vec()),
        flags: 0,
    });
    assert_eq!(set.unwrap_err().errno, libc::EPERM);
}

#[test]
fn changes_of_names_answer_what_they_left_behind() {
    let b = brick();
    let d = b.mkdir(Gfid::ROOT, "d");
    let stat = |g| {
        b.call(Fop::Getattr { gfid: g })
            .unwrap()
            .into_attr()
            .unwrap()
    };
    let make = |name: &str| {
        let gfid = Gfid::random();
        let rep = b.call(Fop::Create {
            parent: d,
            name: n(name),
            gfid,
            mode: 0o644,
            umask: 0,
            flags: libc::O_RDWR,
        });
        let Ok(Reply::Created { entry, fh }) = rep else {
            panic!("{rep:?}")
        };
        b.call(Fop::Release { gfid, fh }).unwrap();
        (gfid, entry.parent.expect("a create tells its directory"))
    };
    let (f, parent) = make("f");
    assert_eq!(parent, stat(d), "what a stat of the directory answers");
    let (g, _) = make("g");
    // A rename over another name: both directories' entries, the moved
    // object and the replaced one (its last name gone).
    let rep = b.call(Fop::Rename {
        parent: d,
        name: n("f"),
        newparent: d,
        newname: n("g"),
        flags: 0,
    });
    let Ok(Reply::Unnamed(left)) = rep else {
        panic!("{rep:?}")
    };
    assert_eq!(
        left.iter().map(|a| a.gfid).collect::<Vec<_>>(),
        vec![d, f, g]
    );
    assert_eq!(left[0], stat(d));
    assert_eq!(left[1], stat(f));
    assert_eq!(left[2].nlink, 0);
    // An unlink: the directory, and the object with one link less.
    let link = b.call(Fop::Link {
        gfid: f,
        newparent: Gfid::ROOT,
        newname: n("l"),
    });
    let Ok(Reply::Entry(e)) = link else {
        panic!("{link:?}")
    };
    assert_eq!(e.attr.nlink, 2);
    assert_eq!(e.parent.as_ref().map(|p| p.gfid), Some(Gfid::ROOT));
    let rep = b.call(Fop::Unlink {
        parent: d,
        name: n("g"),
    });
    let Ok(Reply::Unnamed(left)) = rep else {
        panic!("{rep:?}")
    };
    assert_eq!(left, vec![stat(d), stat(f)]);
    assert_eq!(left[1].nlink, 1);
    // A lookup carries no directory.
    assert_eq!(
        b.call(Fop::Lookup {
            parent: Gfid::ROOT,
            name: n("l"),
        })
        .unwrap()
        .into_entry()
        .unwrap()
        .parent,
        None
    );
}

#[test]
fn a_listing_without_a_handle_keeps_one_only_when_more_is_left() {
    let b = brick();
    let d = b.mkdir(Gfid::ROOT, "d");
    let list = |fh: u64, offset: u64| {
        b.call(Fop::Readdir {
            gfid: d,
            fh,
            offset,
            plus: true,
        })
        .unwrap()
    };
    for i in 0..3 {
        b.mkdir(d, &format!("s{i}"));
    }
    let Reply::Listed(ents, None) = list(ANON_FH, 0) else {
        panic!("a small directory is listed in one batch, no handle kept")
    };
    assert_eq!(ents.len(), 3);
    assert!(ents.iter().all(|e| e.attr.is_some()));
    assert!(b.fds.is_empty());
    for i in 3..READDIR_BATCH + 10 {
        b.mkdir(d, &format!("s{i}"));
    }
    let Reply::Listed(first, Some(fh)) = list(ANON_FH, 0) else {
        panic!("more than a batch: a handle for the rest")
    };
    assert_eq!(first.len(), READDIR_BATCH);
    let Reply::Entries(rest) = list(fh, first.last().unwrap().next) else {
        panic!()
    };
    assert_eq!(first.len() + rest.len(), READDIR_BATCH + 10);
    b.call(Fop::Releasedir { gfid: d, fh }).unwrap();
    assert!(b.fds.is_empty());
    // Only from the start.
    assert!(b
        .call(Fop::Readdir {
            gfid: d,
            fh: ANON_FH,
            offset: 5,
            plus: false,
        })
        .is_err());
}
