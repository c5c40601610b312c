//! Block checksums (`storage.checksums`): kept by writes, truncations and
//! allocations, checked by reads.

use super::*;
use std::os::unix::fs::FileExt;

impl Brick {
    fn write_at(&self, gfid: Gfid, fh: u64, offset: u64, data: &[u8]) {
        self.call(Fop::Write {
            gfid,
            fh,
            offset,
            data: bytes::Bytes::copy_from_slice(data),
            grow: 0,
            reserve: false,
        })
        .unwrap();
    }
    fn read_at(&self, gfid: Gfid, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let r = self.call(Fop::Read {
            gfid,
            fh: ANON_FH,
            offset,
            size,
        })?;
        let Reply::Data(d) = r else { panic!("{r:?}") };
        Ok(d.to_vec())
    }
    /// Truncates (or lengthens) `gfid` to `size` bytes.
    fn cut(&self, gfid: Gfid, size: u64) {
        let set = SetAttr {
            size: Some(size),
            ..Default::default()
        };
        self.call(Fop::Setattr { gfid, set }).unwrap();
    }
    /// Flips one byte of the brick's file behind the brick's back.
    fn flip(&self, name: &str, at: u64) {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.root.join(name))
            .unwrap();
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x20], at).unwrap();
    }
}

impl Brick {
    /// The sums kept in the xattr of file `name`, if any.
    fn inline_sums(&self, name: &str) -> Option<Vec<u8>> {
        let p = self.root.join(name);
        let mut buf = [0u8; 256];
        rfs::getxattr(&p, super::super::sums::SUMS_XATTR, &mut buf[..])
            .ok()
            .map(|n| buf[..n].to_vec())
    }
    fn sums_file(&self, gfid: Gfid) -> PathBuf {
        self.root
            .join(format!(".mortar/sums/{}/{gfid}", &gfid.to_string()[..2]))
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn a_byte_changed_behind_the_bricks_back_fails_the_reads_of_its_block_with_eio() {
    let b = brick();
    b.p.set_checksums(true);
    let (gfid, fh) = b.create(Gfid::ROOT, "f");
    let mut want = pattern(40_000, 1);
    b.write_at(gfid, fh, 0, &want);
    // Unaligned overwrites and an append keep the sums right.
    for (at, len, seed) in [
        (5_000u64, 100usize, 2u8),
        (12_287, 2, 3),
        (39_990, 3_000, 4),
    ] {
        let data = pattern(len, seed);
        b.write_at(gfid, fh, at, &data);
        let end = at as usize + len;
        if want.len() < end {
            want.resize(end, 0);
        }
        want[at as usize..end].copy_from_slice(&data);
    }
    assert_eq!(b.read_at(gfid, 0, 64 << 10).unwrap(), want);
    assert_eq!(b.read_at(gfid, 4_001, 333).unwrap(), &want[4_001..4_334]);
    // A hostile offset is refused, not wrapped around.
    assert!(b
        .read_at(gfid, u64::MAX - 10, 4096)
        .unwrap_err()
        .is(libc::EINVAL));
    b.flip("f", 9_000);
    // Reads touching block 2 (8192..12288) fail; the others do not.
    let e = b.read_at(gfid, 8_192, 10).unwrap_err();
    assert!(e.is(libc::EIO) && e.to_string().contains("checksum"), "{e}");
    assert!(b.read_at(gfid, 12_000, 300).is_err());
    assert_eq!(b.read_at(gfid, 0, 8_192).unwrap(), &want[..8_192]);
    assert_eq!(b.read_at(gfid, 12_288, 100).unwrap(), &want[12_288..12_388]);
    // A write of the whole block (as heal makes) makes it good again.
    b.write_at(gfid, fh, 8_192, &want[8_192..12_288]);
    assert_eq!(b.read_at(gfid, 0, 64 << 10).unwrap(), want);
}

#[test]
fn truncations_allocations_and_appends_keep_the_sums_right() {
    let b = brick();
    b.p.set_checksums(true);
    let (gfid, fh) = b.create(Gfid::ROOT, "f");
    b.write_at(gfid, fh, 0, &pattern(20_000, 7));
    // Cut inside a block, then made longer: zeros after the cut.
    b.cut(gfid, 10_000);
    b.cut(gfid, 30_000);
    let mut want = pattern(10_000, 7);
    want.resize(30_000, 0);
    assert_eq!(b.read_at(gfid, 0, 64 << 10).unwrap(), want);
    // A hole punched: it reads as zeros, unchecked.
    b.call(Fop::Fallocate {
        gfid,
        fh,
        mode: libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        offset: 1_000,
        len: 6_000,
    })
    .unwrap();
    want[1_000..7_000].fill(0);
    assert_eq!(b.read_at(gfid, 0, 64 << 10).unwrap(), want);
    // Appends through a handle opened to append land at the end, and so
    // do their sums.
    let Reply::Opened { fh: afh } = b
        .call(Fop::Open {
            gfid,
            flags: libc::O_WRONLY | libc::O_APPEND,
        })
        .unwrap()
    else {
        panic!()
    };
    b.write_at(gfid, afh, 0, b"appended");
    want.extend_from_slice(b"appended");
    assert_eq!(b.read_at(gfid, 0, 64 << 10).unwrap(), want);
    // An open that truncates starts the sums afresh.
    b.call(Fop::Open {
        gfid,
        flags: libc::O_WRONLY | libc::O_TRUNC,
    })
    .unwrap();
    b.write_at(gfid, fh, 100, b"new");
    let mut want = vec![0u8; 100];
    want.extend_from_slice(b"new");
    assert_eq!(b.read_at(gfid, 0, 4096).unwrap(), want);
}

#[test]
fn sums_are_kept_only_when_on_and_go_with_the_files_last_name() {
    let b = brick();
    let none = b.root.join(".mortar/sums");
    let (plain, fh) = b.create(Gfid::ROOT, "plain");
    b.write_at(plain, fh, 0, b"no sums");
    b.flip("plain", 1);
    assert_eq!(b.read_at(plain, 0, 100).unwrap(), b"nO sums");
    b.call(Fop::Unlink {
        parent: Gfid::ROOT,
        name: n("plain"),
    })
    .unwrap();
    assert!(!none.exists(), "a brick without sums looks for none");
    b.p.set_checksums(true);
    let (gfid, fh) = b.create(Gfid::ROOT, "summed");
    b.write_at(gfid, fh, 0, b"sums");
    assert_eq!(b.inline_sums("summed").map(|v| v.len()), Some(4));
    // Past 16 KiB, they move to a sums file of their own.
    b.write_at(gfid, fh, 20_000, b"far");
    let sums = b.sums_file(gfid);
    assert_eq!(std::fs::metadata(&sums).unwrap().len(), 20);
    assert_eq!(b.inline_sums("summed"), None);
    // Turned off: a file that has sums keeps them up to date.
    b.p.set_checksums(false);
    b.write_at(gfid, fh, 0, b"SUMS");
    assert_eq!(b.read_at(gfid, 0, 4).unwrap(), b"SUMS");
    b.flip("summed", 0);
    assert!(b.read_at(gfid, 0, 4).is_err());
    b.call(Fop::Unlink {
        parent: Gfid::ROOT,
        name: n("summed"),
    })
    .unwrap();
    assert!(!sums.exists(), "the sums go with the file");
}

/// A file of up to 16 KiB keeps its sums in an xattr, not a 4 KiB file:
/// checked all the same, after a restart too, until it outgrows them.
#[test]
fn small_files_keep_their_sums_in_an_xattr_until_they_outgrow_it() {
    let b = brick();
    b.p.set_checksums(true);
    let (gfid, fh) = b.create(Gfid::ROOT, "small");
    // A write that only sets the size (as disperse sends the bricks that
    // hold none of a small file's bytes) makes no sums.
    b.call(Fop::Write {
        gfid,
        fh,
        offset: 0,
        data: bytes::Bytes::new(),
        grow: 4096,
        reserve: false,
    })
    .unwrap();
    assert_eq!(b.inline_sums("small"), None);
    let mut want = pattern(16_384, 5);
    b.write_at(gfid, fh, 0, &want);
    assert_eq!(b.inline_sums("small").map(|v| v.len()), Some(16));
    assert!(!b.sums_file(gfid).exists());
    // Cut, then an unaligned write into the last block.
    b.cut(gfid, 10_000);
    assert_eq!(b.inline_sums("small").map(|v| v.len()), Some(12));
    want.truncate(10_000);
    b.write_at(gfid, fh, 9_000, b"tail");
    want[9_000..9_004].copy_from_slice(b"tail");
    assert_eq!(b.read_at(gfid, 0, 64 << 10).unwrap(), want);
    // Damage is found, by a brick started anew too.
    b.flip("small", 5_000);
    let b = b.restarted();
    b.p.set_checksums(false);
    assert!(b.read_at(gfid, 4_096, 10).unwrap_err().is(libc::EIO));
    assert_eq!(b.read_at(gfid, 0, 4_096).unwrap(), &want[..4_096]);
    // Healed by a write of the block, then grown past 16 KiB: the sums
    // move to a file, and every block is still checked.
    let Reply::Opened { fh } = b
        .call(Fop::Open {
            gfid,
            flags: libc::O_RDWR,
        })
        .unwrap()
    else {
        panic!()
    };
    b.write_at(gfid, fh, 4_096, &want[4_096..8_192]);
    let more = pattern(30_000, 9);
    b.write_at(gfid, fh, 10_000, &more);
    want.extend_from_slice(&more);
    assert_eq!(b.inline_sums("small"), None);
    assert_eq!(std::fs::metadata(b.sums_file(gfid)).unwrap().len(), 40);
    assert_eq!(b.read_at(gfid, 0, 64 << 10).unwrap(), want);
    b.flip("small", 100);
    b.flip("small", 39_000);
    assert!(b.read_at(gfid, 0, 10).unwrap_err().is(libc::EIO));
    assert!(b.read_at(gfid, 38_000, 10).unwrap_err().is(libc::EIO));
    assert_eq!(b.read_at(gfid, 4_096, 8_192).unwrap(), &want[4_096..12_288]);
}
