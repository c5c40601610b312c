//! Disperse sets over the real brick stack in memory: fragments on the
//! bricks, reads and changes healthy and with bricks away.

use crate::testkit::{errno, open_for_writing, write_at, Rig};
use mortar_core::{Fop, Gfid, Reply, SetAttr};
use mortar_ec::{Codec, Geometry};
use mortar_xlators::cluster::replicate::disperse::UNIT;
use std::os::unix::fs::MetadataExt;

pub(super) fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| rng.u8(..)).collect()
}

/// Each brick's fragment of `name` is as long as the file, its data
/// fragments hold the file's units, and its parity is the file coded.
pub(super) fn assert_coded(r: &Rig, name: &str, k: usize, want: &[u8]) {
    let g = Geometry::new(k, UNIT);
    let frags: Vec<Vec<u8>> = r
        .bricks
        .iter()
        .map(|b| b.content(&[name]).expect("every brick has a fragment").1)
        .collect();
    for (i, f) in frags.iter().enumerate() {
        assert_eq!(f.len(), want.len(), "fragment {i} is as long as the file");
    }
    let size = want.len() as u64;
    let ranges = g.fragment_ranges(0, size);
    let parts: Vec<&[u8]> = (0..k)
        .map(|i| &frags[i][ranges[i].start as usize..ranges[i].end as usize])
        .collect();
    assert_eq!(
        g.gather(0, size, &parts),
        want,
        "the data fragments hold the file"
    );
    let plen = g.parity_len(size) as usize;
    let codec = Codec::new(k, frags.len() - k).unwrap();
    let data: Vec<&[u8]> = (0..k).map(|i| &frags[i][..plen]).collect();
    let mut parity = vec![vec![0u8; plen]; frags.len() - k];
    codec.encode(&data, &mut parity).unwrap();
    for (j, p) in parity.iter().enumerate() {
        assert!(
            frags[k + j][..plen] == p[..],
            "parity {j} is the file coded"
        );
    }
}

async fn truncate(r: &Rig, gfid: Gfid, size: u64) -> mortar_core::FsResult<Reply> {
    let set = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    r.call(Fop::Setattr { gfid, set }).await
}

#[tokio::test]
async fn a_file_is_stored_as_k_data_fragments_and_r_of_parity() {
    let r = Rig::disperse(1, 4, 2);
    let want = bytes(200_000, 1);
    let f = r.create(Gfid::ROOT, "f", &want).await.unwrap();
    assert_coded(&r, "f", 4, &want);
    assert_eq!(r.read(f).await.unwrap(), want);
    let Reply::Attr(a) = r.call(Fop::Getattr { gfid: f }).await.unwrap() else {
        panic!()
    };
    assert_eq!(a.size, want.len() as u64);
}

#[tokio::test]
async fn a_small_file_takes_blocks_on_one_data_brick_and_the_parity() {
    let r = Rig::disperse(1, 4, 2);
    r.create(Gfid::ROOT, "small", &bytes(4096, 2))
        .await
        .unwrap();
    let blocks: Vec<u64> = r
        .bricks
        .iter()
        .map(|b| std::fs::metadata(b.root().join("small")).unwrap().blocks())
        .collect();
    assert!(
        blocks[0] > 0 && blocks[4] > 0 && blocks[5] > 0,
        "{blocks:?}"
    );
    assert_eq!(
        &blocks[1..4],
        [0, 0, 0],
        "the other data fragments are holes"
    );
}

#[tokio::test]
async fn overwrites_appends_and_truncations_keep_the_file_coded() {
    let r = Rig::disperse(1, 3, 2);
    let mut want = bytes(100_000, 3);
    let f = r.create(Gfid::ROOT, "f", &want).await.unwrap();
    let mut rng = fastrand::Rng::with_seed(4);
    for round in 0..30 {
        match rng.u8(..4) {
            0 => {
                let size = rng.u64(..150_000);
                truncate(&r, f, size).await.unwrap();
                want.resize(size as usize, 0);
            }
            _ => {
                let at = rng.usize(..want.len() + 20_000);
                let data = bytes(rng.usize(1..70_000), round);
                r.write(f, at as u64, &data).await.unwrap();
                if want.len() < at + data.len() {
                    want.resize(at + data.len(), 0);
                }
                want[at..at + data.len()].copy_from_slice(&data);
            }
        }
        assert_eq!(r.read(f).await.unwrap(), want, "round {round}");
    }
    assert_coded(&r, "f", 3, &want);
}

#[tokio::test]
async fn appends_land_at_the_end() {
    let r = Rig::disperse(1, 2, 1);
    let f = r.create(Gfid::ROOT, "log", b"first\n").await.unwrap();
    let fh = r
        .call(Fop::Open {
            gfid: f,
            flags: libc::O_WRONLY | libc::O_APPEND,
        })
        .await
        .unwrap()
        .into_fh()
        .unwrap();
    for line in [&b"second\n"[..], b"third\n"] {
        write_at(&r, f, fh, 0, line).await.unwrap();
    }
    r.call(Fop::Release { gfid: f, fh }).await.unwrap();
    assert_eq!(r.read(f).await.unwrap(), b"first\nsecond\nthird\n");
    assert_coded(&r, "log", 2, b"first\nsecond\nthird\n");
}

#[tokio::test]
async fn with_r_bricks_away_reads_and_writes_go_on() {
    let r = Rig::disperse(1, 4, 2);
    let mut want = bytes(300_000, 5);
    let f = r.create(Gfid::ROOT, "f", &want).await.unwrap();
    // A data brick and a parity brick away: reads rebuild fragment 0.
    r.bricks[0].set_down(true);
    r.bricks[5].set_down(true);
    assert_eq!(r.read(f).await.unwrap(), want);
    // An overwrite whose old bytes are on the missing data brick, an
    // append, a truncation.
    let data = bytes(5_000, 6);
    r.write(f, 1_000, &data).await.unwrap();
    want[1_000..6_000].copy_from_slice(&data);
    let more = bytes(70_000, 7);
    r.write(f, want.len() as u64, &more).await.unwrap();
    want.extend_from_slice(&more);
    truncate(&r, f, 250_001).await.unwrap();
    want.truncate(250_001);
    assert_eq!(r.read(f).await.unwrap(), want);
    // Back, but stale: blamed, and never read.
    r.bricks[0].set_down(false);
    r.bricks[5].set_down(false);
    r.graph.fini().await;
    assert_ne!(r.bricks[1].blame(f) & 1, 0, "fragment 0 is blamed");
    assert_eq!(r.read(f).await.unwrap(), want);
    // A new file made meanwhile is read whole too.
    let g = r.create(Gfid::ROOT, "g", &more).await.unwrap();
    assert_eq!(r.read(g).await.unwrap(), more);
}

/// Reads shorter than a stripe, at offsets in every fragment, healthy
/// (one unit's: the fragment's bytes as they came) and with a data brick
/// away: each rebuilt from the stripes it touches (a fragment the read does
/// not touch once made the client panic).
#[tokio::test]
async fn short_reads_healthy_and_with_a_data_brick_away() {
    let r = Rig::disperse(1, 4, 2);
    let want = bytes(5 * 4 * UNIT as usize + 777, 8);
    let f = r.create(Gfid::ROOT, "f", &want).await.unwrap();
    for away in [false, true] {
        r.bricks[1].set_down(away);
        short_reads(&r, f, &want).await;
    }
}

/// Reads of 1, 100 and a unit and a bit at offsets all through `f`.
async fn short_reads(r: &Rig, f: Gfid, want: &[u8]) {
    let fh = r
        .call(Fop::Open {
            gfid: f,
            flags: libc::O_RDONLY,
        })
        .await
        .unwrap()
        .into_fh()
        .unwrap();
    for offset in (0..want.len() as u64).step_by(UNIT as usize / 3) {
        for size in [1u32, 100, UNIT as u32 + 5] {
            let Reply::Data(got) = r
                .call(Fop::Read {
                    gfid: f,
                    fh,
                    offset,
                    size,
                })
                .await
                .unwrap()
            else {
                panic!("a read answers data")
            };
            let end = (offset as usize + size as usize).min(want.len());
            assert_eq!(
                &got[..],
                &want[offset as usize..end],
                "{size} bytes at {offset}"
            );
        }
    }
}

/// A brick whose directory was deleted behind its back (before its health
/// check takes it offline) lacks every parent: a create there answers
/// ESTALE while the others make the file. It missed the create (the new
/// file blames it), and the file is made and written on the others.
#[tokio::test]
async fn a_create_the_brick_without_the_directory_missed_is_made_on_the_others() {
    let r = Rig::disperse(1, 4, 2);
    let d = r.mkdir(Gfid::ROOT, "d").await.unwrap();
    std::fs::remove_dir_all(r.bricks[2].root()).unwrap();
    let want = bytes(100_000, 9);
    let f = r.create(d, "f", &want).await.unwrap();
    assert_eq!(r.read(f).await.unwrap(), want);
    assert_ne!(
        r.bricks[0].blame(f) & 1 << 2,
        0,
        "the file blames the brick"
    );
}

#[tokio::test]
async fn with_more_than_r_bricks_away_reads_and_writes_fail_and_change_nothing() {
    let r = Rig::disperse(1, 4, 2);
    let want = bytes(100_000, 8);
    let f = r.create(Gfid::ROOT, "f", &want).await.unwrap();
    r.graph.fini().await;
    for b in &r.bricks[..3] {
        b.set_down(true);
    }
    assert_eq!(errno(r.read(f).await), libc::ENOTCONN);
    assert_eq!(errno(r.write(f, 0, b"x").await), libc::ENOTCONN);
    for b in &r.bricks[..3] {
        b.set_down(false);
    }
    assert_eq!(r.read(f).await.unwrap(), want);
    assert_coded(&r, "f", 4, &want);
}

#[tokio::test]
async fn a_volume_reports_the_room_of_its_data_fragments() {
    let r = Rig::disperse(1, 4, 2);
    let Reply::StatFs(s) = r.call(Fop::Statfs { gfid: Gfid::ROOT }).await.unwrap() else {
        panic!()
    };
    // Every brick is on the same file system here: the volume holds K
    // times one brick's room.
    let one = rustix::fs::statvfs(r.bricks[0].root()).unwrap();
    assert_eq!(s.blocks * s.frsize as u64, 4 * one.f_blocks * one.f_frsize);
}

#[tokio::test]
async fn an_open_that_truncates_empties_every_fragment_under_the_lock() {
    let r = Rig::disperse(1, 2, 1);
    let f = r.create(Gfid::ROOT, "f", &bytes(50_000, 9)).await.unwrap();
    let fh = r
        .call(Fop::Open {
            gfid: f,
            flags: libc::O_WRONLY | libc::O_TRUNC,
        })
        .await
        .unwrap()
        .into_fh()
        .unwrap();
    write_at(&r, f, fh, 0, b"new").await.unwrap();
    r.call(Fop::Release { gfid: f, fh }).await.unwrap();
    assert_eq!(r.read(f).await.unwrap(), b"new");
    assert_coded(&r, "f", 2, b"new");
}

#[tokio::test]
async fn a_series_of_whole_stripe_writes_costs_one_request_per_fragment() {
    let r = Rig::disperse(1, 4, 2);
    let f = r.create(Gfid::ROOT, "f", b"").await.unwrap();
    let fh = open_for_writing(&r, f).await;
    let stripe = 4 * UNIT as usize;
    let data = bytes(stripe, 10);
    let write = |i: usize| write_at(&r, f, fh, i * stripe, &data);
    write(0).await.unwrap();
    let before = r.calls();
    for i in 1..6 {
        write(i).await.unwrap();
    }
    // Nothing read, the size known under the lock: six writes each.
    assert_eq!(r.calls() - before, 5 * 6);
    r.call(Fop::Release { gfid: f, fh }).await.unwrap();
    assert_eq!(r.read(f).await.unwrap(), data.repeat(6));
}

#[tokio::test]
async fn a_degraded_read_never_meets_another_clients_write_half_done() {
    let r = Rig::disperse(1, 2, 1);
    let stripe = 2 * UNIT as usize;
    let f = r.create(Gfid::ROOT, "f", &vec![0u8; stripe]).await.unwrap();
    // Another client writes whole stripes of one byte value, landing on
    // the data fragment and the parity at different moments.
    let w = Rig {
        graph: crate::Graph::build(
            &crate::testkit::desc_disperse(1, 2, 1),
            &crate::testkit::env_over(&r.bricks),
        )
        .unwrap(),
        bricks: r.bricks.clone(),
    };
    for b in &r.bricks[1..] {
        b.set_write_jitter(std::time::Duration::from_millis(4));
    }
    // Data fragment 0 away: every read rebuilds it from the others.
    r.bricks[0].set_down(true);
    let done = std::sync::atomic::AtomicBool::new(false);
    let writes = async {
        for v in 1..=60u8 {
            w.write(f, 0, &vec![v; stripe]).await.unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let reads = async {
        let mut n = 0;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            let got = r.read(f).await.unwrap();
            assert_eq!(got.len(), stripe);
            let odd = got.iter().filter(|&&b| b != got[0]).count();
            assert_eq!(odd, 0, "read {n}: {odd} bytes not of one write");
            n += 1;
            tokio::task::yield_now().await;
        }
        n
    };
    let ((), n) = tokio::join!(writes, reads);
    assert!(n > 5, "only {n} reads ran beside the writes");
}

#[tokio::test]
async fn a_brick_that_answers_late_is_read_around() {
    let r = Rig::disperse(1, 4, 2);
    let want = bytes(4 * 4 * UNIT as usize, 11);
    let f = r.create(Gfid::ROOT, "f", &want).await.unwrap();
    assert_eq!(r.read(f).await.unwrap(), want);
    // Data brick 1 answers reads after 3 s (its connection is up).
    r.bricks[1].set_read_delay(std::time::Duration::from_secs(3));
    let t = std::time::Instant::now();
    for _ in 0..20 {
        assert_eq!(r.read(f).await.unwrap(), want);
    }
    // Not one of the 20 reads waited for it: the first waited a moment
    // and rebuilt from the others, the rest did not ask it.
    assert!(
        t.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn a_brick_that_answers_writes_late_is_written_around_and_blamed() {
    let r = Rig::disperse(1, 4, 2);
    let mut want = bytes(4 * 4 * UNIT as usize, 12);
    let f = r.create(Gfid::ROOT, "f", &want).await.unwrap();
    // Data brick 1 takes 2 s per write (its locks are quick).
    r.bricks[1].set_write_delay(std::time::Duration::from_secs(2));
    let fh = open_for_writing(&r, f).await;
    let t = std::time::Instant::now();
    for n in 0..20u64 {
        let data = bytes(3 * UNIT as usize, 100 + n);
        let at = (n * 5000) as usize;
        write_at(&r, f, fh, at, &data).await.unwrap();
        want[at..at + data.len()].copy_from_slice(&data);
    }
    // The first write waited for it; the others, but at most one that
    // probes it, did not.
    assert!(
        t.elapsed() < std::time::Duration::from_secs(7),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(r.read(f).await.unwrap(), want);
    assert_ne!(
        r.bricks[0].blame(f) & (1 << 1),
        0,
        "it is blamed, to be healed"
    );
}

#[tokio::test]
async fn a_brick_with_no_room_fails_writes_with_enospc_and_leaves_the_file_as_it_was() {
    use mortar_core::options::ShareOrSize;
    let r = Rig::disperse(1, 4, 2);
    let mut want = bytes(100_000, 5);
    let f = r.create(Gfid::ROOT, "f", &want).await.unwrap();
    // Brick 1 keeps all of its file system free: it has no room.
    r.bricks[1].set_reserve(ShareOrSize::Share(100));
    // The set did not know: brick 1 refuses the write, then takes it into
    // its reserve, as the others took it.
    let new = bytes(50_000, 6);
    r.write(f, 10_000, &new).await.unwrap();
    want[10_000..60_000].copy_from_slice(&new);
    assert_coded(&r, "f", 4, &want);
    // Now it knows: writes set their room aside first, brick 1 has none,
    // and nothing is written anywhere: an overwrite, and an append.
    for at in [20_000, 100_000] {
        let e = errno(r.write(f, at, &bytes(60_000, 7)).await);
        assert_eq!(e, libc::ENOSPC, "write at {at}");
        assert_eq!(r.read(f).await.unwrap(), want);
        assert_coded(&r, "f", 4, &want);
    }
    for b in &r.bricks {
        assert_eq!(
            b.blame(f),
            0,
            "{}: no fragment is blamed",
            b.root().display()
        );
    }
    // Room again: writes go on.
    r.bricks[1].set_reserve(ShareOrSize::Share(0));
    let more = bytes(60_000, 8);
    r.write(f, 100_000, &more).await.unwrap();
    want.extend_from_slice(&more);
    assert_eq!(r.read(f).await.unwrap(), want);
    assert_coded(&r, "f", 4, &want);
}
