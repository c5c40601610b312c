//! The real healer over the real brick stack in memory (`graph::testkit`) after
//! replicate's writes with bricks going down and coming back: what heal
//! settles, and that it never ends in split-brain.

use mortar_core::fop::UNSETTLED;
use mortar_core::{Fop, Gfid};
use mortar_graph::testkit::{
    errno, model_seeds, n, open_for_writing, rig, write_at, written_while_brick_0_was_down, Rig,
};

/// What the self-heal daemon does, with the real healer over the rig's
/// bricks: index passes until no brick has anything pending (or gives up
/// after `passes`). Returns whether it got there.
async fn heal_until_settled(r: &Rig, passes: usize) -> bool {
    let (desc, env) = (
        mortar_graph::testkit::desc_over(1, r.bricks.len()),
        mortar_graph::testkit::env_over(&r.bricks),
    );
    let h = crate::Healer::new(&desc, |_| true, &env).unwrap();
    h.wait_up(std::time::Duration::from_secs(3)).await;
    for _ in 0..passes {
        if r.bricks.iter().all(|b| b.pending().is_empty()) {
            return true;
        }
        h.index_pass().await;
    }
    let left = r.bricks.iter().all(|b| b.pending().is_empty());
    if !left {
        for (i, b) in r.bricks.iter().enumerate() {
            for g in b.pending() {
                eprintln!("brick {i}: {g} pending, blame {:#x}", b.blame(g));
            }
        }
    }
    left
}

/// The rolling restart of the faults issue: brick 0, then brick 1 go down
/// and come back unhealed, so brick 2 holds the only good copy; then brick
/// 2 dies with a write in flight that only the stale copies took (or that
/// it took too). That write reached no good copy: it fails (EIO), nobody
/// blames brick 2, and once it is back heal makes the others equal to it.
/// Before, the stale copies acknowledged it and blamed brick 2: every copy
/// blamed the other two, a split-brain with quorum on throughout.
#[tokio::test]
async fn a_good_copy_dying_with_a_write_in_flight_leaves_no_split_brain() {
    for applied in [false, true] {
        let r = rig(1, 3);
        let (f, fh) = written_while_brick_0_was_down(&r).await;
        r.bricks[0].set_down(false);
        r.bricks[1].set_down(true);
        write_at(&r, f, fh, 8, b"cccc").await.unwrap();
        r.bricks[1].set_down(false);
        r.bricks[2].die_on("write", applied);
        assert_eq!(errno(write_at(&r, f, fh, 12, b"dddd").await), libc::EIO);
        for (i, b) in r.bricks.iter().enumerate() {
            assert_eq!(b.blame(f) & (1 << 2), 0, "brick {i} blames the good copy");
        }
        // No good copy up: no reads, no changes, until it is back.
        assert_eq!(errno(r.read(f).await), libc::EIO);
        assert_eq!(errno(write_at(&r, f, fh, 12, b"eeee").await), libc::EIO);
        r.bricks[2].set_down(false);
        r.call(Fop::Release { gfid: f, fh }).await.unwrap();
        r.graph.fini().await;
        assert!(
            heal_until_settled(&r, 5).await,
            "applied {applied}: heal never settled"
        );
        let mut want = b"aaaabbbbcccc".to_vec();
        if applied {
            want.extend_from_slice(b"dddd");
        }
        for (i, b) in r.bricks.iter().enumerate() {
            assert_eq!(
                b.content(&["f"]).unwrap().1,
                want,
                "applied {applied}: brick {i}"
            );
            assert_eq!(b.blame(f), 0);
        }
    }
}

/// A write that reached one copy only (the others died or were down with
/// it in flight) fails with EROFS, and that copy marks itself `UNSETTLED`;
/// the copy that died with it holds every acknowledged write and nothing
/// else. Heal makes the unsettled copy equal to that clean one. Before, it
/// took both as sources, healed neither from the other and cleared the
/// mark: the copies differed silently, and appends (which land at each
/// copy's own end) went on to different offsets.
#[tokio::test]
async fn a_copy_that_took_a_failed_write_is_healed_from_a_clean_one() {
    let r = rig(1, 3);
    let (f, fh) = written_while_brick_0_was_down(&r).await;
    r.bricks[1].die_on("write", false);
    assert_eq!(errno(write_at(&r, f, fh, 8, b"cccc").await), libc::EROFS);
    r.call(Fop::Release { gfid: f, fh }).await.unwrap();
    r.graph.fini().await;
    assert_eq!(r.bricks[2].blame(f), UNSETTLED | 1 << 0);
    assert_eq!(r.bricks[1].blame(f), 1 << 0);
    r.bricks[0].set_down(false);
    r.bricks[1].set_down(false);
    assert!(heal_until_settled(&r, 5).await, "heal never settled");
    for (i, b) in r.bricks.iter().enumerate() {
        assert_eq!(b.content(&["f"]).unwrap().1, b"aaaabbbb", "brick {i}");
        assert_eq!(b.blame(f), 0, "brick {i}");
    }
}

/// A rolling restart that waits for no heal, at random: a writer adds
/// records through one handle while one brick at a time goes down (often
/// with a write in flight, which it took or did not) and comes back, and
/// the next goes down at once. A write may fail while only copies that
/// missed earlier ones are up; every acknowledged one is kept; once every
/// brick is back the real healer settles everything (no split-brain) and
/// the copies are identical.
async fn rolling_run(seed: u64) {
    const REC: usize = 16;
    let mut rng = fastrand::Rng::with_seed(seed);
    let r = rig(1, 3);
    let f = r.create(Gfid::ROOT, "f", b"").await.unwrap();
    let fh = open_for_writing(&r, f).await;
    let mut kept: Vec<u8> = Vec::new();
    // Records whose write failed since the last that succeeded: any one of
    // them may have landed after `kept`.
    let mut maybe: Vec<Vec<u8>> = Vec::new();
    // Bricks down, oldest first: one, or two for a moment (a client
    // reconnects a little after its brick is back).
    let mut down = std::collections::VecDeque::<usize>::new();
    let mut next = 0;
    for step in 0..200 {
        let ctx = format!("seed {seed} step {step}");
        let roll = rng.u8(..5);
        if roll == 0 {
            if down.len() == 2 || (down.len() == 1 && rng.u8(..3) > 0) {
                r.bricks[down.pop_front().unwrap()].set_down(false);
            } else {
                r.bricks[next].set_down(true);
                down.push_back(next);
                next = (next + 1) % 3;
            }
            continue;
        }
        if roll == 1 {
            // A lookup: what the copies up say of each other.
            let _ = r
                .call(Fop::Lookup {
                    parent: Gfid::ROOT,
                    name: n("f"),
                })
                .await;
            continue;
        }
        let dying = (roll == 2 && down.len() < 2).then(|| {
            // This write is in flight when the brick dies.
            r.bricks[next].die_on("write", rng.bool());
            down.push_back(next);
            next = (next + 1) % 3;
            next
        });
        let rec: Vec<u8> = (0..REC).map(|_| rng.u8(..)).collect();
        let res = write_at(&r, f, fh, kept.len(), &rec).await;
        if let Some(d) = dying {
            // (Down already, unless the write was refused before it left.)
            r.bricks[(d + 2) % 3].set_down(true);
        }
        match res {
            Ok(()) => {
                kept.extend_from_slice(&rec);
                maybe.clear();
            }
            Err(e) => {
                assert!(
                    [libc::EIO, libc::EROFS, libc::ENOTCONN].contains(&e.errno),
                    "{ctx}: {e}"
                );
                maybe.push(rec);
            }
        }
    }
    for d in down {
        r.bricks[d].set_down(false);
    }
    r.call(Fop::Release { gfid: f, fh }).await.unwrap();
    r.graph.fini().await;
    assert!(
        heal_until_settled(&r, 10).await,
        "seed {seed}: heal never settled (split-brain?)"
    );
    let got = r.bricks[0].content(&["f"]).unwrap().1;
    for (i, b) in r.bricks.iter().enumerate() {
        assert_eq!(
            b.content(&["f"]).unwrap().1,
            got,
            "seed {seed}: brick {i} differs"
        );
        assert_eq!(b.blame(f), 0, "seed {seed}: brick {i}");
    }
    let (head, tail) = got.split_at(kept.len().min(got.len()));
    assert_eq!(
        head,
        &kept[..],
        "seed {seed}: an acknowledged write is lost"
    );
    assert!(
        tail.is_empty() || maybe.iter().any(|m| m == tail),
        "seed {seed}: {} bytes after the acknowledged ones that no write put there",
        tail.len()
    );
}

#[tokio::test]
async fn a_rolling_restart_without_heal_never_ends_in_split_brain() {
    for seed in model_seeds(30) {
        rolling_run(seed).await;
    }
}

/// Granular heal of a replica: a large file of which a few bytes changed
/// while a brick was away is healed by comparing the blocks around them.
#[tokio::test]
async fn only_the_ranges_changed_are_compared_on_a_replica() {
    let r = rig(1, 3);
    let mut want: Vec<u8> = (0..32u32 << 20).map(|i| (i % 251) as u8).collect();
    let f = r.create(Gfid::ROOT, "f", &want).await.unwrap();
    // The change sessions settle (the kept lock goes after 500 ms).
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    r.bricks[1].set_down(true);
    let fh = open_for_writing(&r, f).await;
    write_at(&r, f, fh, 20 << 20, b"changed").await.unwrap();
    want[20 << 20..(20 << 20) + 7].copy_from_slice(b"changed");
    r.call(Fop::Release { gfid: f, fh }).await.unwrap();
    r.bricks[1].set_down(false);
    r.graph.fini().await;
    let before: u64 = r.bricks.iter().map(|b| b.read_bytes()).sum();
    assert!(heal_until_settled(&r, 5).await, "heal never settled");
    let read = r.bricks.iter().map(|b| b.read_bytes()).sum::<u64>() - before;
    for (i, b) in r.bricks.iter().enumerate() {
        assert!(b.content(&["f"]).unwrap().1 == want, "brick {i}");
    }
    assert!(read < 1 << 20, "the heal read or summed {read} bytes");
}
