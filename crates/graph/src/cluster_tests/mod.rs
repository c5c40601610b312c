//! Replicate's and distribute's decisions, over the real brick stack in memory
//! (`graph::testkit`): the same graph a mount builds, with bricks a test
//! takes down and brings back between two operations.

use crate::testkit::{errno, model_seeds, n, rig, test_bricks, Rig};
use mortar_core::fop::UNSETTLED;
use mortar_core::{Fop, Gfid, SetAttr};
use std::collections::BTreeMap;

mod disperse;
mod distribute;
mod holes;
mod stacked;
mod trash;

#[tokio::test]
async fn a_change_reaches_every_copy_and_settles() {
    let r = rig(1, 3);
    let f = r.create(Gfid::ROOT, "f", b"hello").await.unwrap();
    for b in &r.bricks {
        assert_eq!(b.content(&["f"]).unwrap().1, b"hello");
    }
    // The lock and change session are kept for the next change...
    assert!(r.bricks.iter().all(|b| b.pending().contains(&f)));
    // ...and let go of at the end: nothing is left to heal.
    r.graph.fini().await;
    for b in &r.bricks {
        assert!(b.pending().is_empty(), "{:?}", b.pending());
        assert_eq!(b.blame(f), 0);
    }
}

#[tokio::test]
async fn a_copy_that_missed_a_change_is_blamed_and_never_read() {
    let r = rig(1, 3);
    let f = r.create(Gfid::ROOT, "f", b"old").await.unwrap();
    r.bricks[1].set_down(true);
    r.write(f, 0, b"new").await.unwrap();
    assert_eq!(r.bricks[1].content(&["f"]).unwrap().1, b"old");
    r.graph.fini().await;
    for i in [0, 2] {
        assert_eq!(r.bricks[i].blame(f), 1 << 1, "brick {i}");
        assert!(r.bricks[i].pending().contains(&f));
    }
    r.bricks[1].set_down(false);
    // However reads are spread, the stale copy is never the one read.
    for _ in 0..20 {
        assert_eq!(r.read(f).await.unwrap(), b"new");
    }
}

#[tokio::test]
async fn without_quorum_changes_are_refused_and_reads_go_on() {
    let r = rig(1, 3);
    let f = r.create(Gfid::ROOT, "f", b"data").await.unwrap();
    r.graph.fini().await;
    r.bricks[0].set_down(true);
    r.bricks[1].set_down(true);
    assert_eq!(errno(r.write(f, 0, b"x").await), libc::EROFS);
    assert_eq!(errno(r.create(Gfid::ROOT, "g", b"").await), libc::EROFS);
    assert_eq!(r.read(f).await.unwrap(), b"data");
    assert_eq!(r.bricks[2].content(&["f"]).unwrap().1, b"data");
}

#[tokio::test]
async fn up_and_down_reach_the_top_once_per_change_of_the_whole() {
    let r = rig(1, 2);
    let mut ev = r.graph.subscribe();
    r.bricks[0].set_down(true);
    assert!(r.graph.top().is_up(), "one copy is still up");
    r.bricks[1].set_down(true);
    assert!(!r.graph.top().is_up());
    r.bricks[1].set_down(false);
    assert!(r.graph.top().is_up());
    use mortar_core::Event;
    assert_eq!(ev.try_recv().unwrap(), Event::Down);
    assert_eq!(ev.try_recv().unwrap(), Event::Up);
    assert!(ev.try_recv().is_err());
}

#[tokio::test]
async fn distribute_spreads_names_and_lists_each_once() {
    let r = rig(3, 1);
    let mut want = Vec::new();
    for i in 0..30 {
        r.create(Gfid::ROOT, &format!("file{i}"), b"x")
            .await
            .unwrap();
        want.push(format!("file{i}"));
    }
    for i in 0..6 {
        r.call(Fop::Mkdir {
            parent: Gfid::ROOT,
            name: n(&format!("dir{i}")),
            gfid: Gfid::random(),
            mode: 0o755,
            umask: 0,
        })
        .await
        .unwrap();
        want.push(format!("dir{i}"));
    }
    for b in &r.bricks {
        let files = b.tree().keys().filter(|k| k.starts_with("/file")).count();
        assert!(files > 0 && files < 30, "{files} files on one brick");
        assert_eq!(b.tree().keys().filter(|k| k.starts_with("/dir")).count(), 6);
    }
    let mut got = r.list(Gfid::ROOT).await.unwrap();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

/// The reference model: names in the root and their contents.
type Model = BTreeMap<String, (Gfid, Vec<u8>)>;

/// Random changes through replica 3 while single bricks go down and come
/// back (and are healed, as the self-heal daemon would, before the next
/// one goes down): every change succeeds, every answer matches the model,
/// and whenever a brick returns, every copy that differs from the model is
/// blamed by another copy (replicas never diverge silently).
async fn model_run(seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let r = rig(1, 3);
    let mut model = Model::new();
    let names = ["a", "b", "c", "d", "e"];
    let mut down: Option<usize> = None;
    for step in 0..200 {
        let name = names[rng.usize(..names.len())].to_string();
        let ctx = format!("seed {seed} step {step}");
        match rng.u8(..10) {
            0 => {
                if let Some(d) = down.take() {
                    r.bricks[d].set_down(false);
                    r.graph.fini().await;
                    check_no_silent_divergence(&r, &model, seed);
                    let good = &r.bricks[(d + 1) % 3];
                    r.bricks[d].heal_from(good, &r.bricks);
                } else {
                    let d = rng.usize(..3);
                    r.bricks[d].set_down(true);
                    down = Some(d);
                }
            }
            1 | 2 => {
                let data: Vec<u8> = (0..rng.usize(..64)).map(|_| rng.u8(..)).collect();
                let res = r.create(Gfid::ROOT, &name, &data).await;
                match model.get(&name) {
                    Some(_) => assert_eq!(errno(res), libc::EEXIST, "{ctx}"),
                    None => {
                        model.insert(name, (res.expect(&ctx), data));
                    }
                }
            }
            3..=5 => {
                let Some((g, data)) = model.get_mut(&name) else {
                    continue;
                };
                let off = rng.usize(..=data.len());
                let bytes: Vec<u8> = (0..rng.usize(1..32)).map(|_| rng.u8(..)).collect();
                let res = r.write(*g, off as u64, &bytes).await;
                res.expect(&ctx);
                if data.len() < off + bytes.len() {
                    data.resize(off + bytes.len(), 0);
                }
                data[off..off + bytes.len()].copy_from_slice(&bytes);
            }
            6 => {
                let Some((g, data)) = model.get_mut(&name) else {
                    continue;
                };
                let size = rng.usize(..40);
                let res = r
                    .call(Fop::Setattr {
                        gfid: *g,
                        set: SetAttr {
                            size: Some(size as u64),
                            ..Default::default()
                        },
                    })
                    .await;
                res.expect(&ctx);
                data.resize(size, 0);
            }
            7 => {
                let res = r
                    .call(Fop::Unlink {
                        parent: Gfid::ROOT,
                        name: n(&name),
                    })
                    .await;
                match model.remove(&name) {
                    Some(_) => {
                        res.expect(&ctx);
                    }
                    None => assert_eq!(errno(res), libc::ENOENT, "{ctx}"),
                }
            }
            8 => {
                let to = names[rng.usize(..names.len())].to_string();
                let res = r
                    .call(Fop::Rename {
                        parent: Gfid::ROOT,
                        name: n(&name),
                        newparent: Gfid::ROOT,
                        newname: n(&to),
                        flags: 0,
                    })
                    .await;
                match model.remove(&name) {
                    Some(v) => {
                        res.expect(&ctx);
                        model.insert(to, v);
                    }
                    None => assert_eq!(errno(res), libc::ENOENT, "{ctx}"),
                }
            }
            _ => {
                let Some((g, data)) = model.get(&name) else {
                    continue;
                };
                assert_eq!(&r.read(*g).await.expect(&ctx), data, "{ctx}");
            }
        }
    }
    if let Some(d) = down {
        r.bricks[d].set_down(false);
    }
    for (name, (g, data)) in &model {
        assert_eq!(&r.read(*g).await.unwrap(), data, "seed {seed}: {name}");
    }
    r.graph.fini().await;
    check_no_silent_divergence(&r, &model, seed);
}

/// Every copy that differs from the model is blamed by another copy: a
/// wrong file's content by the file's blame, a wrong set of names by the
/// root's.
fn check_no_silent_divergence(r: &Rig, model: &Model, seed: u64) {
    let blamed = |i: usize, g: Gfid| r.bricks.iter().any(|b| b.blame(g) & (1 << i) != 0);
    for (i, b) in r.bricks.iter().enumerate() {
        let names: Vec<String> = b.tree().keys().map(|k| k[1..].to_string()).collect();
        let want: Vec<String> = model.keys().cloned().collect();
        if names != want {
            assert!(
                blamed(i, Gfid::ROOT),
                "seed {seed}: brick {i} has {names:?}, not {want:?}, and nobody blames it"
            );
        }
        for (name, (g, data)) in model {
            match b.content(&[name]) {
                Some((_, d)) if &d == data => {}
                _ => assert!(
                    blamed(i, *g) || blamed(i, Gfid::ROOT),
                    "seed {seed}: brick {i}'s {name} differs and nobody blames it"
                ),
            }
        }
    }
}

#[tokio::test]
async fn random_changes_with_bricks_going_down_match_the_model() {
    for seed in model_seeds(20) {
        model_run(seed).await;
    }
}

/// `clients` clients over three bricks whose writes land after random
/// delays, each with `handles` handles writing random bytes over one
/// 256 KiB region at once, through the bricks' real locks; then checks
/// that no two writes of the same bytes were out at once, and that the
/// copies are identical and blame nobody.
async fn writers_over_one_region(clients: usize, handles: usize) {
    const SIZE: usize = 262144;
    let bricks = test_bricks(3);
    for b in &bricks {
        b.set_write_jitter(std::time::Duration::from_millis(2));
    }
    let rigs: Vec<Rig> = (0..clients).map(|_| Rig::over(&bricks, 1, 3)).collect();
    let f = rigs[0].create(Gfid::ROOT, "f", &[0; SIZE]).await.unwrap();
    let writer = |r: &Rig, seed: u64| {
        let top = r.graph.top().clone();
        async move {
            let cx = mortar_core::Ctx::root();
            let open = Fop::Open {
                gfid: f,
                flags: libc::O_WRONLY,
            };
            let fh = top.call(&cx, open).await.unwrap().into_fh().unwrap();
            let mut rng = fastrand::Rng::with_seed(seed);
            for _ in 0..150 {
                let len = rng.usize(1..16384);
                let write = Fop::Write {
                    gfid: f,
                    fh,
                    offset: rng.u64(0..(SIZE - len) as u64),
                    data: vec![rng.u8(..); len].into(),
                    grow: 0,
                    reserve: false,
                };
                top.call(&cx, write).await.unwrap();
            }
            top.call(&cx, Fop::Release { gfid: f, fh }).await.unwrap();
        }
    };
    let writers = (0..clients * handles).map(|i| writer(&rigs[i % clients], i as u64));
    futures_util::future::join_all(writers).await;
    for r in &rigs {
        r.graph.fini().await;
    }
    for b in &bricks {
        assert_eq!(
            b.overlapping_writes(),
            0,
            "writes of the same bytes were out at once"
        );
    }
    let copies: Vec<Vec<u8>> = bricks
        .iter()
        .map(|b| b.content(&["f"]).unwrap().1)
        .collect();
    assert!(
        copies.iter().all(|c| *c == copies[0]),
        "the copies diverged"
    );
    assert!(bricks.iter().all(|b| b.blame(f) == 0));
}

/// Two clients writing one region by turns: whoever holds the lock lets go
/// of it only once its writes in flight are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_writing_one_region_leave_identical_copies() {
    writers_over_one_region(2, 2).await;
}

/// One client writing one region through four handles at once: writes of
/// the same bytes go one after the other (without write-behind, which
/// orders them too, or with O_DIRECT).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_writing_one_region_at_once_leaves_identical_copies() {
    writers_over_one_region(1, 4).await;
}

#[tokio::test]
async fn a_file_a_returning_copy_missed_opens_for_writing_before_heal() {
    let r = rig(1, 3);
    r.bricks[1].set_down(true);
    let f = r.create(Gfid::ROOT, "f", b"one").await.unwrap();
    r.bricks[1].set_down(false);
    assert!(r.bricks[1].content(&["f"]).is_none());
    r.write(f, 0, b"two").await.unwrap();
    assert_eq!(r.read(f).await.unwrap(), b"two");
    r.graph.fini().await;
    assert_eq!(r.bricks[0].blame(f), 1 << 1);
}

#[tokio::test]
async fn a_change_the_good_copies_refuse_never_makes_them_look_stale() {
    let r = rig(1, 3);
    r.create(Gfid::ROOT, "c", b"").await.unwrap();
    let rename = |from: &str, to: &str| Fop::Rename {
        parent: Gfid::ROOT,
        name: n(from),
        newparent: Gfid::ROOT,
        newname: n(to),
        flags: 0,
    };
    r.bricks[1].set_down(true);
    r.call(rename("c", "x")).await.unwrap();
    r.bricks[1].set_down(false);
    // Only the stale copy still has "c": the application is told ENOENT,
    // and that copy, not the good ones, is the one to heal.
    assert_eq!(errno(r.call(rename("c", "y")).await), libc::ENOENT);
    r.graph.fini().await;
    // (It took a change of unknown outcome: heal compares the copies.)
    assert_eq!(r.bricks[1].blame(Gfid::ROOT), UNSETTLED);
    assert_eq!(r.bricks[0].blame(Gfid::ROOT), 1 << 1);
    r.create(Gfid::ROOT, "z", b"").await.unwrap();
}

#[tokio::test]
async fn a_write_one_good_copy_refuses_fails_and_that_copy_is_the_one_to_heal() {
    let r = rig(1, 3);
    let f = r.create(Gfid::ROOT, "f", b"old").await.unwrap();
    r.bricks[2].inject("write", libc::EIO, 1);
    // A live replica's refusal is never hidden from the application...
    assert_eq!(errno(r.write(f, 0, b"new").await), libc::EIO);
    r.graph.fini().await;
    // ...and the copies that took the write are the good ones.
    assert_eq!(r.bricks[0].blame(f), 1 << 2);
    assert_eq!(r.bricks[2].blame(f), 0);
    assert_eq!(r.read(f).await.unwrap(), b"new");
    // The refusing copy going away leaves the file readable.
    r.bricks[2].set_down(true);
    assert_eq!(r.read(f).await.unwrap(), b"new");
}

#[tokio::test]
async fn a_forgotten_object_is_found_again_by_asking_every_set() {
    let r = rig(3, 1);
    let f = r.create(Gfid::ROOT, "f", b"x").await.unwrap();
    let before: u64 = r.calls();
    r.call(Fop::Getattr { gfid: f }).await.unwrap();
    let known: u64 = r.calls();
    assert_eq!(known - before, 1, "a known object is asked of its set only");
    r.graph.forget(f);
    r.call(Fop::Getattr { gfid: f }).await.unwrap();
    let after: u64 = r.calls();
    assert!(
        after - known > 1,
        "a forgotten one is looked for everywhere"
    );
}

#[tokio::test]
async fn a_copy_damaged_behind_its_bricks_back_is_read_around_and_blamed() {
    use std::os::unix::fs::FileExt;
    let r = rig(1, 3);
    r.bricks.iter().for_each(|b| b.set_checksums(true));
    let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
    // Files whose reads go to copies chosen by their gfids: two of the
    // three copies of each damaged, each in another block.
    let mut files = Vec::new();
    for n in 0..12 {
        let name = format!("f{n}");
        files.push(r.create(Gfid::ROOT, &name, &data).await.unwrap());
        for (i, at) in [(0usize, 100u64), (1, 30_000)] {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(r.bricks[i].root().join(&name))
                .unwrap();
            file.write_all_at(b"XYZ", at).unwrap();
        }
    }
    r.graph.fini().await;
    // None returns the damaged bytes.
    for &f in &files {
        assert_eq!(r.read(f).await.unwrap(), data);
    }
    // A copy found damaged is recorded for heal on the good one (nearly
    // every file's first read went to a damaged copy).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while files.iter().all(|&f| r.bricks[2].blame(f) == 0) {
        assert!(std::time::Instant::now() < deadline, "no copy blamed");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for &f in &files {
        assert_eq!(
            r.bricks[2].blame(f) & !0b11,
            0,
            "only damaged copies are blamed"
        );
    }
}
