//! `fallocate` and seeking holes on dispersed files, over the real brick
//! stack in memory: the bytes read back, every fragment coded, the holes
//! kept on the bricks.

use super::disperse::{assert_coded, bytes};
use crate::testkit::{errno, open_for_writing, Rig};
use mortar_core::{Fop, FsResult, Gfid, Reply};
use std::os::unix::fs::MetadataExt;

async fn fallocate(r: &Rig, gfid: Gfid, fh: u64, mode: i32, at: u64, len: u64) -> FsResult<Reply> {
    r.call(Fop::Fallocate {
        gfid,
        fh,
        mode,
        offset: at,
        len,
    })
    .await
}

async fn seek(r: &Rig, gfid: Gfid, fh: u64, offset: u64, whence: i32) -> FsResult<u64> {
    match r
        .call(Fop::Lseek {
            gfid,
            fh,
            offset,
            whence,
        })
        .await?
    {
        Reply::Offset(o) => Ok(o),
        other => panic!("{other:?}"),
    }
}

async fn size(r: &Rig, gfid: Gfid) -> u64 {
    let Reply::Attr(a) = r.call(Fop::Getattr { gfid }).await.unwrap() else {
        panic!()
    };
    a.size
}

/// Blocks of `name` on every brick.
fn blocks(r: &Rig, name: &str) -> Vec<u64> {
    r.bricks
        .iter()
        .map(|b| std::fs::metadata(b.root().join(name)).unwrap().blocks())
        .collect()
}

#[tokio::test]
async fn a_punched_hole_reads_as_zeros_and_frees_blocks_on_every_brick() {
    let r = Rig::disperse(1, 4, 2);
    let mut want = bytes(1_000_000, 11);
    let f = r.create(Gfid::ROOT, "f", &want).await.unwrap();
    let before = blocks(&r, "f");
    let fh = open_for_writing(&r, f).await;
    let keep_punch = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE;
    fallocate(&r, f, fh, keep_punch, 100_001, 700_000)
        .await
        .unwrap();
    want[100_001..800_001].fill(0);
    assert_eq!(r.read(f).await.unwrap(), want);
    assert_eq!(size(&r, f).await, 1_000_000, "the size is kept");
    assert_coded(&r, "f", 4, &want);
    let after = blocks(&r, "f");
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(a + 200 < *b, "brick {i} freed the hole's blocks: {b} → {a}");
    }
    // Zeroing a range, and a hole punched without KEEP_SIZE refused.
    fallocate(
        &r,
        f,
        fh,
        libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        900_000,
        5,
    )
    .await
    .unwrap();
    want[900_000..900_005].fill(0);
    assert_eq!(r.read(f).await.unwrap(), want);
    assert_coded(&r, "f", 4, &want);
    let e = fallocate(&r, f, fh, libc::FALLOC_FL_PUNCH_HOLE, 0, 10).await;
    assert_eq!(errno(e), libc::EINVAL);
    let e = fallocate(&r, f, fh, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 65536).await;
    assert_eq!(errno(e), libc::EOPNOTSUPP);
}

#[tokio::test]
async fn allocating_past_the_end_lengthens_the_file_with_zeros_unless_kept() {
    let r = Rig::disperse(1, 4, 2);
    let mut want = bytes(70_000, 12);
    let f = r.create(Gfid::ROOT, "f", &want).await.unwrap();
    let fh = open_for_writing(&r, f).await;
    fallocate(&r, f, fh, libc::FALLOC_FL_KEEP_SIZE, 0, 500_000)
        .await
        .unwrap();
    assert_eq!(size(&r, f).await, 70_000, "KEEP_SIZE");
    let kept = blocks(&r, "f");
    assert!(
        kept.iter().all(|&b| b * 512 >= 120_000),
        "allocated: {kept:?}"
    );
    fallocate(&r, f, fh, 0, 60_000, 200_000).await.unwrap();
    want.resize(260_000, 0);
    assert_eq!(size(&r, f).await, 260_000);
    assert_eq!(r.read(f).await.unwrap(), want);
    assert_coded(&r, "f", 4, &want);
}

#[tokio::test]
async fn seeking_finds_the_data_and_the_holes_of_the_file() {
    let r = Rig::disperse(1, 4, 2);
    let f = r.create(Gfid::ROOT, "f", &bytes(70_000, 13)).await.unwrap();
    r.write(f, 600_000, &bytes(50_000, 14)).await.unwrap();
    let fh = open_for_writing(&r, f).await;
    let hole = seek(&r, f, fh, 0, libc::SEEK_HOLE).await.unwrap();
    assert!((70_000..600_000).contains(&hole), "{hole}");
    let data = seek(&r, f, fh, hole, libc::SEEK_DATA).await.unwrap();
    assert!(data > hole && data <= 600_000, "{data}");
    assert_eq!(seek(&r, f, fh, 10, libc::SEEK_DATA).await.unwrap(), 10);
    assert_eq!(
        seek(&r, f, fh, 640_000, libc::SEEK_HOLE).await.unwrap(),
        650_000,
        "the end is a hole"
    );
    assert_eq!(
        errno(seek(&r, f, fh, 650_000, libc::SEEK_DATA).await),
        libc::ENXIO
    );
    // A punched hole is found too.
    let keep_punch = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE;
    fallocate(&r, f, fh, keep_punch, 0, 65_536).await.unwrap();
    assert_eq!(seek(&r, f, fh, 0, libc::SEEK_HOLE).await.unwrap(), 0);
    let data = seek(&r, f, fh, 0, libc::SEEK_DATA).await.unwrap();
    assert!((65_536..70_000).contains(&data), "{data}");
}
