//! What changes of names answer.

use super::*;

#[test]
fn a_change_of_names_answers_what_it_left_blame_included() {
    // The blame of a directory is read through the descriptor the brick
    // holds it by; that of a moved or removed object is the one its
    // lookup read (a change of names changes no xattr).
    let b = brick();
    let d = b.mkdir(Gfid::ROOT, "d");
    let (a, fh) = b.create(d, "a");
    b.call(Fop::Release { gfid: a, fh }).unwrap();
    let blame = |path: &str, v: u32| {
        let p = b.root.join(path);
        rfs::setxattr(&p, BLAME_XATTR, &v.to_le_bytes(), rfs::XattrFlags::empty()).unwrap();
    };
    blame("d", 0b10);
    blame("d/a", 0b100);
    let unnamed = |r: Reply| -> HashMap<Gfid, Attr> {
        let Reply::Unnamed(v) = r else {
            panic!("not what the change left: {r:?}")
        };
        v.into_iter().map(|a| (a.gfid, a)).collect()
    };
    let left = unnamed(
        b.call(Fop::Rename {
            parent: d,
            name: n("a"),
            newparent: d,
            newname: n("b"),
            flags: 0,
        })
        .unwrap(),
    );
    assert_eq!((left[&d].blame, left[&a].blame), (0b10, 0b100));
    assert_eq!(left[&a].nlink, 1);
    let left = unnamed(
        b.call(Fop::Unlink {
            parent: d,
            name: n("b"),
        })
        .unwrap(),
    );
    assert_eq!((left[&d].blame, left[&a].blame), (0b10, 0b100));
    assert_eq!(left[&a].nlink, 0);
    assert!(b.call(Fop::Getattr { gfid: a }).is_err());
}

#[test]
fn lookups_and_listings_tell_which_watched_xattrs_an_object_has() {
    // `ls -l` asks of every entry its label and access ACL: the answers
    // say which of those the object has, so a mount asks for none it
    // lacks.
    let b = brick();
    let d = b.mkdir(Gfid::ROOT, "d");
    for f in ["plain", "labelled"] {
        let (g, fh) = b.create(d, f);
        b.call(Fop::Release { gfid: g, fh }).unwrap();
    }
    let p = b.root.join("d/labelled");
    rfs::setxattr(&p, "security.selinux", b"x\0", rfs::XattrFlags::empty()).unwrap();
    rfs::setxattr(
        &p,
        BLAME_XATTR,
        &2u32.to_le_bytes(),
        rfs::XattrFlags::empty(),
    )
    .unwrap();
    let plain = b.lookup(d, "plain").unwrap();
    assert_eq!(plain.watched, Some(0));
    assert!(plain.lacks("security.selinux") && plain.lacks("system.posix_acl_access"));
    let labelled = b.lookup(d, "labelled").unwrap();
    assert_eq!((labelled.watched, labelled.blame), (Some(1), 2));
    assert!(!labelled.lacks("security.selinux") && labelled.lacks("security.capability"));
    let Reply::Listed(ents, _) = b
        .call(Fop::Readdir {
            gfid: d,
            fh: mortar_core::fop::ANON_FH,
            offset: 0,
            plus: true,
        })
        .unwrap()
    else {
        panic!("not a listing")
    };
    let listed: HashMap<_, _> = ents
        .iter()
        .map(|e| (e.name.to_vec(), e.attr.as_ref().and_then(|a| a.watched)))
        .collect();
    assert_eq!(listed[&b"plain"[..]], Some(0));
    assert_eq!(listed[&b"labelled"[..]], Some(1));
}
