//! The gfid index's layouts: a brick of the first (two levels) is moved
//! to one level at its start, whole, and resumably.

use super::*;

/// Puts a brick's gfid index back into the first layout (`xx/yy/<gfid>`,
/// directory handles `../../xx/yy/<parent>/<name>`, the root's
/// `../../../..`), as a brick of an older mortar has it; `keep` handles are
/// left in the new layout, as a migration that crashed midway leaves them.
fn to_first_layout(root: &Path, keep: usize) {
    use std::os::unix::fs::MetadataExt;
    let index = root.join(INDEX_REL);
    let mut left = keep;
    for top in std::fs::read_dir(&index).unwrap() {
        let top = top.unwrap().path();
        for h in std::fs::read_dir(&top).unwrap() {
            let h = h.unwrap();
            let name = h.file_name().into_string().unwrap();
            if left > 0 && name != Gfid::ROOT.to_string() {
                left -= 1;
                continue;
            }
            let leaf = top.join(&name[2..4]);
            std::fs::create_dir_all(&leaf).unwrap();
            let meta = std::fs::symlink_metadata(h.path()).unwrap();
            if meta.file_type().is_symlink() && meta.nlink() == 1 {
                let t = std::fs::read_link(h.path()).unwrap();
                let t = t.as_os_str().as_bytes();
                let old = if t == b"../../.." {
                    b"../../../..".to_vec()
                } else {
                    let rest = t.strip_prefix(b"../").unwrap();
                    let mut o = b"../../".to_vec();
                    o.extend_from_slice(&rest[..3]);
                    o.extend_from_slice(&rest[5..7]);
                    o.push(b'/');
                    o.extend_from_slice(&rest[3..]);
                    o
                };
                std::fs::remove_file(h.path()).unwrap();
                std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&old), leaf.join(&name))
                    .unwrap();
            } else {
                std::fs::rename(h.path(), leaf.join(&name)).unwrap();
            }
        }
    }
    std::fs::remove_file(root.join(LAYOUT_REL)).unwrap();
}

#[test]
fn a_brick_of_the_first_index_layout_is_moved_to_one_level_whole() {
    use std::os::unix::fs::MetadataExt;
    for keep in [0, 2] {
        let b = brick();
        let d = b.mkdir(Gfid::ROOT, "d");
        let e = b.mkdir(d, "e\nwith a newline");
        let mut files = Vec::new();
        for i in 0..5 {
            let (gfid, fh) = b.create(e, &format!("f{i}"));
            b.call(Fop::Release { gfid, fh }).unwrap();
            files.push(gfid);
        }
        let before = std::fs::metadata(b.root.join("d/e\nwith a newline/f0")).unwrap();
        drop(b.p);
        to_first_layout(&b.root, keep);
        let old_root = b
            .root
            .join(INDEX_REL)
            .join("00/00")
            .join(Gfid::ROOT.to_string());
        assert!(old_root.is_symlink());

        let p = Posix::open(&b.root).unwrap();
        let fds = FdTable::default();
        // Every object is reached by its gfid, directories by their chain.
        let ino = |g: Gfid| {
            p.call(&Ctx::root(), &fds, &Fop::Getattr { gfid: g })
                .unwrap()
                .into_attr()
                .unwrap()
        };
        assert_eq!(ino(files[0]).nlink, 1, "a link moved, not a copy made");
        let after = std::fs::metadata(b.root.join("d/e\nwith a newline/f0")).unwrap();
        assert_eq!(after.ino(), before.ino());
        for g in files.iter().chain([&d, &e, &Gfid::ROOT]) {
            assert_eq!(ino(*g).gfid, *g);
        }
        assert_eq!(p.read_dir_handle(e).unwrap(), (d, n("e\nwith a newline")));
        // Found by inode number too (the first half of the gfid), as the
        // kernel asks for a handle it forgot.
        for g in [files[1], e] {
            let ino = u64::from_be_bytes(g.0[..8].try_into().unwrap());
            let Reply::Entry(found) = p.resolve_ino(ino).unwrap() else {
                panic!()
            };
            assert_eq!(found.attr.gfid, g);
        }
        p.dirs.lock().unwrap().clear();
        assert!(p.walk_dir(e).is_ok());
        // Nothing of the first layout is left, and the next start moves nothing.
        for top in std::fs::read_dir(b.root.join(INDEX_REL)).unwrap() {
            for h in std::fs::read_dir(top.unwrap().path()).unwrap() {
                assert_eq!(h.unwrap().file_name().len(), 36);
            }
        }
        drop(p);
        assert_eq!(Posix::open(&b.root).unwrap().migrate().unwrap(), 0);
    }
}

#[test]
fn an_object_exists_while_its_handle_does() {
    let b = brick();
    let d = b.mkdir(Gfid::ROOT, "d");
    let f = Gfid::random();
    let made = b.call(Fop::Create {
        parent: d,
        name: n("f"),
        gfid: f,
        mode: 0o644,
        umask: 0,
        flags: libc::O_WRONLY,
    });
    let Ok(Reply::Created { fh, .. }) = made else {
        panic!("create: {made:?}")
    };
    b.call(Fop::Release { gfid: f, fh }).unwrap();
    for g in [Gfid::ROOT, d, f] {
        b.p.exists(g).unwrap();
    }
    b.call(Fop::Unlink {
        parent: d,
        name: n("f"),
    })
    .unwrap();
    for g in [f, Gfid::random()] {
        assert!(b.p.exists(g).unwrap_err().is(libc::ESTALE));
    }
}

/// An open by gfid of a FIFO, which the kernel never sends (it opens
/// special files itself) but a hostile request may, is refused before
/// anything is opened: a FIFO's open for writing would hold the brick.
#[test]
fn an_open_of_a_fifo_is_refused_without_opening_it() {
    let b = brick();
    let fifo = Gfid::random();
    b.call(Fop::Mknod {
        parent: Gfid::ROOT,
        name: n("fifo"),
        gfid: fifo,
        mode: libc::S_IFIFO | 0o666,
        umask: 0,
        rdev: 0,
        linkto: None,
    })
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let p = Posix::open(&b.root).unwrap();
    std::thread::spawn(move || {
        let fds = FdTable::default();
        let open = |flags| p.call(&Ctx::root(), &fds, &Fop::Open { gfid: fifo, flags });
        let _ = tx.send((open(libc::O_WRONLY), open(libc::O_RDONLY)));
    });
    let (w, r) = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the open of a FIFO held the brick");
    assert!(w.unwrap_err().is(libc::EINVAL));
    assert!(r.unwrap_err().is(libc::EINVAL));
}
