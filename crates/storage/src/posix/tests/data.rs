//! File data: writes that also lengthen the file.

use super::*;

#[test]
fn a_write_that_grows_the_file_never_shortens_it() {
    use std::os::unix::fs::MetadataExt;
    let b = brick();
    let (gfid, fh) = b.create(Gfid::ROOT, "frag");
    let write = |offset: u64, data: &'static [u8], grow: u64| {
        b.call(Fop::Write {
            gfid,
            fh,
            offset,
            data: bytes::Bytes::from_static(data),
            grow,
            reserve: false,
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

#[test]
fn the_reserve_refuses_writes_and_allocations_unless_a_write_may_use_it() {
    let b = brick();
    let (gfid, fh) = b.create(Gfid::ROOT, "f");
    let write = |data: &'static [u8], reserve: bool| {
        b.call(Fop::Write {
            gfid,
            fh,
            offset: 0,
            data: bytes::Bytes::from_static(data),
            grow: 0,
            reserve,
        })
    };
    write(b"old", false).unwrap();
    b.p.set_reserve(mortar_core::options::ShareOrSize::Share(100));
    let e = write(b"new", false).unwrap_err();
    assert_eq!(e.errno, libc::ENOSPC);
    assert!(e.msg.contains("storage.reserve"), "{e}");
    assert_eq!(std::fs::read(b.root.join("f")).unwrap(), b"old");
    let alloc = b.call(Fop::Fallocate {
        gfid,
        fh,
        mode: libc::FALLOC_FL_KEEP_SIZE,
        offset: 0,
        len: 1 << 20,
    });
    assert_eq!(alloc.unwrap_err().errno, libc::ENOSPC);
    write(b"new", true).unwrap();
    assert_eq!(std::fs::read(b.root.join("f")).unwrap(), b"new");
    let Reply::StatFs(s) = b.call(Fop::Statfs { gfid: Gfid::ROOT }).unwrap() else {
        panic!()
    };
    assert_eq!(s.bavail, 0, "df shows no room outside the reserve");
}

#[test]
fn a_file_read_anonymously_is_let_go_when_its_last_name_goes() {
    let b = brick();
    let (gfid, fh) = b.create(Gfid::ROOT, "f");
    b.call(Fop::Release { gfid, fh }).unwrap();
    // Another connection reads it without opening it, and stays.
    let other = FdTable::default();
    let read = Fop::Read {
        gfid,
        fh: mortar_core::fop::ANON_FH,
        offset: 0,
        size: 10,
    };
    b.p.call(&Ctx::root(), &other, &read).unwrap();
    assert_eq!(other.anon.lock().unwrap().len(), 1);
    b.call(Fop::Unlink {
        parent: Gfid::ROOT,
        name: n("f"),
    })
    .unwrap();
    assert!(
        other.anon.lock().unwrap().is_empty(),
        "the deleted file's blocks are not held"
    );
}

#[test]
fn strict_o_direct_opens_direct_and_takes_any_offset_and_buffer() {
    let b = brick();
    b.p.set_strict_o_direct(true);
    let gfid = Gfid::random();
    let created = b.call(Fop::Create {
        parent: Gfid::ROOT,
        name: n("d"),
        gfid,
        mode: 0o644,
        umask: 0,
        flags: libc::O_RDWR | libc::O_DIRECT,
    });
    let Ok(Reply::Created { fh, .. }) = created else {
        panic!("{created:?}")
    };
    let Handle::File(f, ..) = &*b.fds.file(fh).unwrap() else {
        panic!()
    };
    let flags = rustix::fs::fcntl_getfl(f).unwrap();
    assert!(flags.contains(OFlags::DIRECT), "{flags:?}");
    // Aligned and not: every write lands, every read answers.
    let page = bytes::Bytes::from(vec![b'p'; 8192]);
    let odd = bytes::Bytes::from(vec![b'o'; 100]);
    for (offset, data) in [(0, page), (10, odd)] {
        let w = Fop::Write {
            gfid,
            fh,
            offset,
            data,
            grow: 0,
            reserve: false,
        };
        assert!(matches!(b.call(w), Ok(Reply::Written(_, Some(_)))));
    }
    let mut want = vec![b'p'; 8192];
    want[10..110].fill(b'o');
    for (offset, size) in [(0u64, 8192u32), (5, 200)] {
        let r = b.call(Fop::Read {
            gfid,
            fh,
            offset,
            size,
        });
        let Ok(Reply::Data(d)) = r else {
            panic!("{r:?}")
        };
        assert_eq!(&d[..], &want[offset as usize..][..size as usize]);
    }
    assert_eq!(std::fs::read(b.root.join("d")).unwrap(), want);
}
