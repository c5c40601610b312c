//! File data: writes that also lengthen the file.

use super::*;

#[test]
fn a_write_that_grows_the_file_never_shortens_it() {
    use std::os::unix::fs::MetadataExt;
    let b = brick();
    let gfid = Gfid::random();
    let Reply::Created { fh, .. } = b
        .call(Fop::Create {
            parent: Gfid::ROOT,
            name: n("frag"),
            gfid,
            mode: 0o644,
            umask: 0,
            flags: libc::O_RDWR,
        })
        .unwrap()
    else {
        panic!()
    };
    let write = |offset: u64, data: &'static [u8], grow: u64| {
        b.call(Fop::Write {
            gfid,
            fh,
            offset,
            data: bytes::Bytes::from_static(data),
            grow,
        })
        .unwrap()
    };
    // Bytes, then a hole up to the length asked: no blocks for the hole.
    let Reply::Written(2, Some(a)) = write(0, b"ab", 1 << 20) else {
        panic!()
    };
    assert_eq!(
        a.size,
        1 << 20,
        "the answer's attributes are after the growth"
    );
    let meta = std::fs::metadata(b.root.join("frag")).unwrap();
    assert_eq!(meta.len(), 1 << 20);
    assert!(meta.blocks() * 512 < 64 << 10, "the growth is a hole");
    // A write asking less, or nothing to write at all, shortens nothing.
    write(4, b"cd", 100);
    write(0, b"", 10);
    assert_eq!(
        std::fs::metadata(b.root.join("frag")).unwrap().len(),
        1 << 20
    );
    // Growths carried out together end at the longest, whatever the order.
    std::thread::scope(|s| {
        for i in 1..=8u64 {
            s.spawn(move || write(0, b"", (1 << 20) + i * 4096));
        }
    });
    assert_eq!(
        std::fs::metadata(b.root.join("frag")).unwrap().len(),
        (1 << 20) + 8 * 4096
    );
    let content = std::fs::read(b.root.join("frag")).unwrap();
    assert_eq!(&content[..6], b"ab\0\0cd");
}
