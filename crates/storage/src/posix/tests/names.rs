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
