//! The brick acts as the caller: what the kernel grants each identity
//! (docs/security.md).

use super::*;

fn as_user(uid: u32, groups: &[u32]) -> Ctx {
    Ctx {
        uid,
        gid: uid,
        groups: groups.to_vec(),
        ..Ctx::default()
    }
}

impl Brick {
    fn call_as(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        self.p.call(cx, &self.fds, &fop)
    }
    fn create_as(&self, cx: &Ctx, parent: Gfid, name: &str, mode: u32) -> FsResult<Gfid> {
        let gfid = Gfid::random();
        let rep = self.call_as(
            cx,
            Fop::Create {
                parent,
                name: n(name),
                gfid,
                mode,
                umask: 0,
                flags: libc::O_RDWR,
            },
        )?;
        let Reply::Created { fh, .. } = rep else {
            panic!("create answers a handle")
        };
        self.call(Fop::Release { gfid, fh }).unwrap();
        Ok(gfid)
    }
    fn chmod(&self, gfid: Gfid, mode: u32) {
        let set = SetAttr {
            mode: Some(mode),
            ..Default::default()
        };
        self.call(Fop::Setattr { gfid, set }).unwrap();
    }
}

fn errno_of(r: FsResult<Reply>) -> i32 {
    r.map_or_else(|e| e.errno, |_| 0)
}

/// Part of the security model (docs/security.md): a brick acts as the
/// caller a connection may claim, and the kernel checks what it may do.
#[test]
fn a_caller_gets_what_the_kernel_grants_it_and_no_more() {
    if !rustix::process::geteuid().is_root() {
        return; // only root can act as others
    }
    let s = scene();
    names_are_searched_made_and_removed_as_granted(&s);
    data_is_read_only_as_granted(&s);
    attributes_and_xattrs_change_only_as_granted(&s);
    what_she_opened_stays_hers(&s);
    nothing_of_roots_changed(&s);
}

/// What the caller tests stand on: a brick of root's files, and two users.
/// Root's: a private directory with a private file, a file all may read, a
/// sticky directory all may write (with a file of alice's), a group's
/// directory.
struct Scene {
    b: Brick,
    alice: Ctx,
    bob: Ctx,
    root: Ctx,
    private: Gfid,
    secret: Gfid,
    public: Gfid,
    tmp: Gfid,
    team: Gfid,
    hers: Gfid,
}

fn scene() -> Scene {
    let b = brick();
    let (alice, bob) = (as_user(1000, &[]), as_user(2000, &[]));
    let root = Ctx::default();
    b.chmod(Gfid::ROOT, 0o755);
    let private = b.mkdir(Gfid::ROOT, "private");
    b.chmod(private, 0o700);
    let secret = b.create_as(&root, private, "secret", 0o600).unwrap();
    let public = b.create_as(&root, Gfid::ROOT, "public", 0o644).unwrap();
    let tmp = b.mkdir(Gfid::ROOT, "tmp");
    b.chmod(tmp, 0o1777);
    let team = b.mkdir(Gfid::ROOT, "team");
    b.chmod(team, 0o2775);
    let set_gid = SetAttr {
        gid: Some(5000),
        ..Default::default()
    };
    b.call(Fop::Setattr {
        gfid: team,
        set: set_gid,
    })
    .unwrap();

    let hers = b.create_as(&alice, tmp, "hers", 0o644).unwrap();
    Scene {
        b,
        alice,
        bob,
        root,
        private,
        secret,
        public,
        tmp,
        team,
        hers,
    }
}

fn names_are_searched_made_and_removed_as_granted(s: &Scene) {
    let &Scene {
        ref b,
        ref alice,
        ref bob,
        ref root,
        private,
        tmp,
        team,
        hers,
        ..
    } = s;
    let eacces = libc::EACCES;
    // Names: searching, making and removing.
    let lookup = |cx: &Ctx, parent, name: &str| {
        errno_of(b.call_as(
            cx,
            Fop::Lookup {
                parent,
                name: n(name),
            },
        ))
    };
    assert_eq!(lookup(alice, private, "secret"), eacces);
    assert_eq!(lookup(root, private, "secret"), 0);
    assert_eq!(
        b.create_as(alice, Gfid::ROOT, "mine", 0o644)
            .unwrap_err()
            .errno,
        eacces
    );
    let mkdir = b.call_as(
        alice,
        Fop::Mkdir {
            parent: Gfid::ROOT,
            name: n("d"),
            gfid: Gfid::random(),
            mode: 0o755,
            umask: 0,
        },
    );
    assert_eq!(errno_of(mkdir), eacces);
    assert_eq!(
        b.call(Fop::Getattr { gfid: hers })
            .unwrap()
            .into_attr()
            .unwrap()
            .uid,
        1000
    );
    let unlink = |cx: &Ctx| {
        errno_of(b.call_as(
            cx,
            Fop::Unlink {
                parent: tmp,
                name: n("hers"),
            },
        ))
    };
    assert_eq!(unlink(bob), libc::EPERM, "the sticky bit");
    let rename = b.call_as(
        alice,
        Fop::Rename {
            parent: Gfid::ROOT,
            name: n("public"),
            newparent: tmp,
            newname: n("taken"),
            flags: 0,
        },
    );
    assert_eq!(errno_of(rename), eacces);
    // The group's directory: by a supplementary group, not without it.
    assert_eq!(
        b.create_as(bob, team, "x", 0o644).unwrap_err().errno,
        eacces
    );
    let made = b
        .create_as(&as_user(2000, &[5000]), team, "x", 0o644)
        .unwrap();
    let a = b
        .call(Fop::Getattr { gfid: made })
        .unwrap()
        .into_attr()
        .unwrap();
    assert_eq!((a.uid, a.gid), (2000, 5000), "set-gid directory's group");
}

fn data_is_read_only_as_granted(s: &Scene) {
    let &Scene {
        ref b,
        ref alice,
        private,
        secret,
        public,
        ..
    } = s;
    let eacces = libc::EACCES;
    // Data: opening by gfid, the anonymous handle, sums of the data.
    let open = |cx: &Ctx, gfid, flags| errno_of(b.call_as(cx, Fop::Open { gfid, flags }));
    assert_eq!(open(alice, secret, libc::O_RDONLY), eacces);
    assert_eq!(open(alice, public, libc::O_RDONLY), 0);
    assert_eq!(open(alice, public, libc::O_WRONLY), eacces);
    let read = b.call_as(
        alice,
        Fop::Read {
            gfid: secret,
            fh: ANON_FH,
            offset: 0,
            size: 10,
        },
    );
    assert_eq!(errno_of(read), eacces);
    let sums = b.call_as(
        alice,
        Fop::Checksum {
            gfid: secret,
            offset: 0,
            block: 4096,
            count: 1,
        },
    );
    assert_eq!(errno_of(sums), eacces);
    assert_eq!(
        errno_of(b.call_as(alice, Fop::Opendir { gfid: private })),
        eacces
    );
    let listed = b.call_as(
        alice,
        Fop::Readdir {
            gfid: private,
            fh: ANON_FH,
            offset: 0,
            plus: false,
        },
    );
    assert_eq!(errno_of(listed), eacces);
}

fn attributes_and_xattrs_change_only_as_granted(s: &Scene) {
    let &Scene {
        ref b,
        ref alice,
        ref bob,
        ref root,
        secret,
        public,
        tmp,
        hers,
        ..
    } = s;
    let eacces = libc::EACCES;
    // Attributes and xattrs.
    let setattr = |cx: &Ctx, gfid, set| errno_of(b.call_as(cx, Fop::Setattr { gfid, set }));
    let chmod = SetAttr {
        mode: Some(0o666),
        ..Default::default()
    };
    let truncate = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    let chown = SetAttr {
        uid: Some(1000),
        ..Default::default()
    };
    assert_eq!(setattr(alice, public, chmod.clone()), libc::EPERM);
    assert_eq!(setattr(alice, public, truncate.clone()), eacces);
    assert_eq!(setattr(alice, public, chown.clone()), libc::EPERM);
    assert_eq!(setattr(alice, hers, chmod), 0, "the owner may");
    assert_eq!(setattr(bob, hers, chown), libc::EPERM);
    // Clearing the set-id bits of a file she may write is what her write
    // does (the kernel asks it as a change of mode); nothing else.
    let setuid = b.create_as(root, tmp, "setuid", 0o6777).unwrap();
    b.chmod(setuid, 0o6777);
    let mode = |m| SetAttr {
        mode: Some(m),
        ..Default::default()
    };
    assert_eq!(setattr(alice, setuid, mode(0o6666)), libc::EPERM);
    assert_eq!(setattr(alice, setuid, mode(0o2777)), 0);
    assert_eq!(setattr(alice, setuid, mode(0o0777)), 0);
    assert_eq!(setattr(alice, setuid, mode(0o0776)), libc::EPERM);
    assert_eq!(setattr(alice, public, mode(0o0644)), libc::EPERM);
    let setxattr = b.call_as(
        alice,
        Fop::Setxattr {
            gfid: public,
            name: "user.note".into(),
            value: serde_bytes::ByteBuf::from(b"x".to_vec()),
            flags: 0,
        },
    );
    assert_eq!(errno_of(setxattr), eacces);
    b.call(Fop::Setxattr {
        gfid: secret,
        name: "user.note".into(),
        value: serde_bytes::ByteBuf::from(b"x".to_vec()),
        flags: 0,
    })
    .unwrap();
    let getxattr = b.call_as(
        alice,
        Fop::Getxattr {
            gfid: secret,
            name: "user.note".into(),
        },
    );
    assert_eq!(errno_of(getxattr), eacces);
}

fn what_she_opened_stays_hers(s: &Scene) {
    let &Scene {
        ref b,
        ref alice,
        hers,
        ..
    } = s;
    let setattr = |cx: &Ctx, gfid, set| errno_of(b.call_as(cx, Fop::Setattr { gfid, set }));
    let truncate = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    // What she opened stays hers to write and truncate, whatever its mode
    // becomes, as through a local descriptor.
    let Reply::Opened { fh } = b
        .call_as(
            alice,
            Fop::Open {
                gfid: hers,
                flags: libc::O_RDWR,
            },
        )
        .unwrap()
    else {
        panic!("open answers a handle")
    };
    b.chmod(hers, 0);
    let write = b.call_as(
        alice,
        Fop::Write {
            gfid: hers,
            fh,
            offset: 0,
            data: bytes::Bytes::from_static(b"still mine"),
            grow: 0,
            reserve: false,
        },
    );
    assert_eq!(errno_of(write), 0);
    assert_eq!(setattr(alice, hers, truncate.clone()), 0);
    let read = b.call_as(
        alice,
        Fop::Read {
            gfid: hers,
            fh: ANON_FH,
            offset: 0,
            size: 10,
        },
    );
    assert_eq!(errno_of(read), 0);
    // Not another user's of the same connection (a mount's, an NFS
    // server's): what the mode says goes for him.
    let bob = &s.bob;
    assert_eq!(setattr(bob, hers, truncate), libc::EACCES);
    let read = b.call_as(
        bob,
        Fop::Read {
            gfid: hers,
            fh: ANON_FH,
            offset: 0,
            size: 10,
        },
    );
    assert_eq!(errno_of(read), libc::EACCES);
}

fn nothing_of_roots_changed(s: &Scene) {
    let Scene { b, .. } = s;
    // Nothing of root's changed.
    assert_eq!(std::fs::metadata(b.root.join("public")).unwrap().len(), 0);
    assert!(b.root.join("private/secret").exists());
}
