use super::*;
use crate::posix::reaper;
use std::time::{Duration, Instant};

#[test]
fn a_large_file_that_loses_its_last_name_is_closed_off_the_callers_thread() {
    let b = brick();
    let d = b.mkdir(Gfid::ROOT, "d");
    // Made on the brick directly: its lookup gives it a gfid.
    let big = std::fs::File::create(b.root.join("d/big")).unwrap();
    big.set_len(reaper::FREE_BEHIND).unwrap();
    drop(big);
    std::fs::write(b.root.join("d/small"), "s").unwrap();
    std::fs::write(b.root.join("d/over"), "o").unwrap();
    let big = b.lookup(d, "big").unwrap();
    b.lookup(d, "small").unwrap();
    b.lookup(d, "over").unwrap();
    let before = reaper::closed();
    b.call(Fop::Unlink {
        parent: d,
        name: n("big"),
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while reaper::closed() == before {
        assert!(Instant::now() < deadline, "the reaper closed nothing");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        b.call(Fop::Getattr { gfid: big.gfid }).unwrap_err().errno,
        libc::ESTALE
    );
    // A large file replaced by a rename goes the same way; small ones
    // are closed where they are unlinked.
    std::fs::File::create(b.root.join("d/big2"))
        .unwrap()
        .set_len(reaper::FREE_BEHIND)
        .unwrap();
    b.lookup(d, "big2").unwrap();
    let before = reaper::closed();
    b.call(Fop::Rename {
        parent: d,
        name: n("over"),
        newparent: d,
        newname: n("big2"),
        flags: 0,
    })
    .unwrap();
    while reaper::closed() == before {
        assert!(Instant::now() < deadline, "the reaper closed nothing");
        std::thread::sleep(Duration::from_millis(5));
    }
    b.call(Fop::Unlink {
        parent: d,
        name: n("small"),
    })
    .unwrap();
    let names: Vec<_> = std::fs::read_dir(b.root.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("big2")]);
    b.outside_untouched();
}
