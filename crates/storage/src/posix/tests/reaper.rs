use super::*;
use crate::posix::reaper;
use std::time::{Duration, Instant};

/// Waits until the reaper has closed more than `before` descriptors.
fn reaped_since(before: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while reaper::closed() == before {
        assert!(Instant::now() < deadline, "the reaper closed nothing");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_file_whose_blocks_take_long_to_free_is_closed_off_the_callers_thread() {
    let b = brick();
    let d = b.mkdir(Gfid::ROOT, "d");
    // Made on the brick directly: its lookup gives it a gfid.
    // 8 MiB of blocks: freed behind on any file system (smaller ones
    // too where it is mounted with `discard`).
    let large = vec![7u8; 8 << 20];
    std::fs::write(b.root.join("d/full"), &large).unwrap();
    std::fs::write(b.root.join("d/over"), "o").unwrap();
    std::fs::write(b.root.join("d/other"), &large).unwrap();
    std::fs::File::create(b.root.join("d/empty")).unwrap();
    let full = b.lookup(d, "full").unwrap();
    for name in ["over", "other", "empty"] {
        b.lookup(d, name).unwrap();
    }
    let before = reaper::closed();
    b.call(Fop::Unlink {
        parent: d,
        name: n("full"),
    })
    .unwrap();
    reaped_since(before);
    assert_eq!(
        b.call(Fop::Getattr { gfid: full.gfid }).unwrap_err().errno,
        libc::ESTALE
    );
    // A file replaced by a rename goes the same way; `drain` (what a
    // write refused for want of room does) returns once it is closed.
    let before = reaper::closed();
    b.call(Fop::Rename {
        parent: d,
        name: n("over"),
        newparent: d,
        newname: n("other"),
        flags: 0,
    })
    .unwrap();
    reaper::drain();
    assert!(reaper::closed() > before);
    // One without blocks is closed where it is unlinked.
    b.call(Fop::Unlink {
        parent: d,
        name: n("empty"),
    })
    .unwrap();
    let names: Vec<_> = std::fs::read_dir(b.root.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("other")]);
    b.outside_untouched();
}
