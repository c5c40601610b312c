//! Replicate's and distribute's decisions, over in-memory bricks
//! (`graph::testkit`): the same graph a mount builds, with bricks a test
//! takes down and brings back between two operations.

use crate::core::fop::UNSETTLED;
use crate::core::{Fop, Gfid, SetAttr};
use crate::graph::testkit::{errno, mem_bricks, model_seeds, n, rig, Rig};
use std::collections::BTreeMap;

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
    use crate::core::Event;
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
/// 256 KiB region at once; then checks that no write landed without its
/// client holding the lock, that no two writes of the same bytes were out
/// at once, and that the copies are identical and blame nobody.
async fn writers_over_one_region(clients: usize, handles: usize) {
    const SIZE: usize = 262144;
    let bricks = mem_bricks(3);
    for b in &bricks {
        b.set_write_jitter(std::time::Duration::from_millis(2));
    }
    let rigs: Vec<Rig> = (0..clients).map(|_| Rig::over(&bricks, 1, 3)).collect();
    let f = rigs[0].create(Gfid::ROOT, "f", &[0; SIZE]).await.unwrap();
    let writer = |r: &Rig, seed: u64| {
        let top = r.graph.top().clone();
        async move {
            let cx = crate::core::Ctx::root();
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
        assert_eq!(b.unlocked_writes(), 0, "writes landed without their lock");
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

/// Requests the bricks saw for one new file: a lookup that misses, then
/// the create.
async fn calls_per_new_file(r: &Rig, dir: Gfid, files: usize) -> f64 {
    let before: u64 = r.calls();
    for i in 0..files {
        let name = format!("new{i}");
        let miss = r
            .call(Fop::Lookup {
                parent: dir,
                name: n(&name),
            })
            .await;
        assert_eq!(errno(miss), libc::ENOENT);
        r.create(dir, &name, b"").await.unwrap();
    }
    let after: u64 = r.calls();
    (after - before) as f64 / files as f64
}

#[tokio::test]
async fn a_new_file_costs_the_same_at_one_set_and_at_sixteen() {
    let one = rig(1, 1);
    let flat = calls_per_new_file(&one, Gfid::ROOT, 100).await;
    let many = rig(16, 1);
    let d = many.mkdir(Gfid::ROOT, "d").await.unwrap();
    let before: u64 = many.calls();
    many.call(Fop::Getattr { gfid: d }).await.unwrap();
    let after: u64 = many.calls();
    assert_eq!(after - before, 1, "a known directory is asked of one set");
    for dir in [Gfid::ROOT, d] {
        let per = calls_per_new_file(&many, dir, 100).await;
        // The root's layout is read (and, on a new volume, stored) once.
        assert!(
            per <= flat * 1.25,
            "{per} requests per file at 16 sets, {flat} at 1"
        );
    }
    // Every set got some of the files, each file is on one set only.
    let mut seen = BTreeMap::new();
    for (i, b) in many.bricks.iter().enumerate() {
        let files: Vec<String> = b.tree().into_keys().filter(|k| k.contains("new")).collect();
        assert!(!files.is_empty(), "set {i} got no file");
        for f in files {
            assert!(seen.insert(f.clone(), i).is_none(), "{f} on two sets");
        }
    }
    assert_eq!(seen.len(), 200);
}

/// The set a path's object lives on (not a pointer), and where its
/// pointers are.
fn places(r: &Rig, path: &str) -> (Vec<usize>, Vec<usize>) {
    let (mut at, mut ptr) = (Vec::new(), Vec::new());
    for (i, b) in r.bricks.iter().enumerate() {
        if b.pointers().contains_key(path) {
            ptr.push(i);
        } else if b.tree().contains_key(path) {
            at.push(i);
        }
    }
    (at, ptr)
}

#[tokio::test]
async fn renamed_and_linked_files_are_found_under_every_name_and_listed_once() {
    let r = rig(4, 1);
    let f = r.create(Gfid::ROOT, "a", b"payload").await.unwrap();
    let (home, _) = places(&r, "/a");
    // Renamed through names that hash to every set in turn.
    let mut name = "a".to_string();
    for i in 0..12 {
        let next = format!("b{i}");
        r.call(Fop::Rename {
            parent: Gfid::ROOT,
            name: n(&name),
            newparent: Gfid::ROOT,
            newname: n(&next),
            flags: 0,
        })
        .await
        .unwrap();
        name = next;
        let e = r
            .call(Fop::Lookup {
                parent: Gfid::ROOT,
                name: n(&name),
            })
            .await
            .unwrap()
            .into_entry()
            .unwrap();
        assert_eq!(e.attr.gfid, f);
        let (at, ptr) = places(&r, &format!("/{name}"));
        assert_eq!(at, home, "the data stays where it was made");
        assert!(ptr.len() <= 1 && !ptr.contains(&home[0]));
        assert_eq!(r.list(Gfid::ROOT).await.unwrap(), vec![name.clone()]);
        // The old name is gone everywhere, pointer included.
        assert!(r.bricks.iter().all(|b| !b.tree().contains_key("/a")));
    }
    assert_eq!(r.read(f).await.unwrap(), b"payload");
    // Hard links under names that hash elsewhere.
    for i in 0..6 {
        r.call(Fop::Link {
            gfid: f,
            newparent: Gfid::ROOT,
            newname: n(&format!("l{i}")),
        })
        .await
        .unwrap();
    }
    let mut listed = r.list(Gfid::ROOT).await.unwrap();
    listed.sort();
    assert_eq!(listed.len(), 7, "{listed:?}");
    // A rename onto one of its own links does nothing.
    r.call(Fop::Rename {
        parent: Gfid::ROOT,
        name: n("l0"),
        newparent: Gfid::ROOT,
        newname: n("l1"),
        flags: 0,
    })
    .await
    .unwrap();
    assert_eq!(r.list(Gfid::ROOT).await.unwrap().len(), 7);
    // A file renamed over another that lives on another set replaces it.
    let g = r.create(Gfid::ROOT, "other", b"x").await.unwrap();
    assert_ne!(g, f);
    r.call(Fop::Rename {
        parent: Gfid::ROOT,
        name: n("other"),
        newparent: Gfid::ROOT,
        newname: n(&name),
        flags: 0,
    })
    .await
    .unwrap();
    let e = r
        .call(Fop::Lookup {
            parent: Gfid::ROOT,
            name: n(&name),
        })
        .await
        .unwrap()
        .into_entry()
        .unwrap();
    assert_eq!(e.attr.gfid, g);
    assert_eq!(r.list(Gfid::ROOT).await.unwrap().len(), 7);
    // Every name removed: nothing is left behind, no pointer either.
    for e in r.list(Gfid::ROOT).await.unwrap() {
        r.call(Fop::Unlink {
            parent: Gfid::ROOT,
            name: n(&e),
        })
        .await
        .unwrap();
    }
    for b in &r.bricks {
        assert!(b.tree().is_empty(), "{:?}", b.tree());
    }
}

#[tokio::test]
async fn a_directory_in_flux_has_missing_names_looked_up_everywhere() {
    // A volume whose set list changed (layout-commit 2): the root has no
    // layout, so a file placed off its hashed set by an older layout is
    // still found; in a new directory (committed) a miss asks one set.
    let bricks = mem_bricks(4);
    // Files put on set 2 by a client of a one-set volume, which is what
    // this volume was before.
    let before_growth = Rig::over(&bricks[2..3], 1, 1);
    let mut old = Vec::new();
    for i in 0..8 {
        old.push(
            before_growth
                .create(Gfid::ROOT, &format!("old{i}"), b"x")
                .await
                .unwrap(),
        );
    }
    let r = Rig::grown(&bricks, 2);
    for (i, f) in old.iter().enumerate() {
        let e = r
            .call(Fop::Lookup {
                parent: Gfid::ROOT,
                name: n(&format!("old{i}")),
            })
            .await
            .unwrap()
            .into_entry()
            .unwrap();
        assert_eq!(e.attr.gfid, *f);
    }
    let before: u64 = r.calls();
    assert_eq!(
        errno(
            r.call(Fop::Lookup {
                parent: Gfid::ROOT,
                name: n("missing"),
            })
            .await
        ),
        libc::ENOENT
    );
    let after: u64 = r.calls();
    // In flux: the layout read again (a rebalance may change it), and
    // every set asked.
    assert_eq!(after - before, 1 + 4);
    let d = r.mkdir(Gfid::ROOT, "new").await.unwrap();
    let before: u64 = r.calls();
    let miss = r
        .call(Fop::Lookup {
            parent: d,
            name: n("missing"),
        })
        .await;
    assert_eq!(errno(miss), libc::ENOENT);
    let after: u64 = r.calls();
    assert_eq!(after - before, 1, "a new directory is committed");
}

#[tokio::test]
async fn a_volume_grown_by_a_set_keeps_working_before_any_rebalance() {
    let bricks = mem_bricks(3);
    let before = Rig::over(&bricks[..2], 2, 1);
    let d = before.mkdir(Gfid::ROOT, "d").await.unwrap();
    for i in 0..20 {
        before.create(d, &format!("f{i}"), b"x").await.unwrap();
    }
    // The same bricks and one more, as add-brick describes them.
    let r = Rig::grown(&bricks, 2);
    let mut names = r.list(d).await.unwrap();
    names.sort();
    assert_eq!(names.len(), 20);
    for i in 0..20 {
        r.call(Fop::Lookup {
            parent: d,
            name: n(&format!("f{i}")),
        })
        .await
        .unwrap();
    }
    // The directory is not on the new set: changes to it, and new
    // directories and files in it, go to the sets that have it.
    r.call(Fop::Setattr {
        gfid: d,
        set: SetAttr {
            mode: Some(0o700),
            ..Default::default()
        },
    })
    .await
    .unwrap();
    let sub = r.mkdir(d, "sub").await.unwrap();
    for i in 0..20 {
        r.create(d, &format!("g{i}"), b"y").await.unwrap();
        r.create(sub, &format!("h{i}"), b"z").await.unwrap();
    }
    assert!(r.bricks[2].tree().is_empty(), "{:?}", r.bricks[2].tree());
    assert_eq!(r.list(d).await.unwrap().len(), 41);
    assert_eq!(r.list(sub).await.unwrap().len(), 20);
    // New directories in the root are made on every set, new set included.
    r.mkdir(Gfid::ROOT, "e").await.unwrap();
    assert!(r.bricks[2].tree().contains_key("/e"));
}

#[tokio::test]
async fn a_new_directory_takes_the_shares_its_parent_has() {
    use crate::cluster::layout::Layout;
    use crate::core::fop::LAYOUT_XATTR;
    use crate::core::{Ctx, Reply};
    let r = rig(2, 1);
    let sets = sets_of(&r);
    // The root laid out 1:3, as a weighted rebalance leaves it (the
    // volume's commit: authoritative).
    let root = Layout::fresh(&[1, 3], 7).unwrap();
    for s in &sets {
        let fop = Fop::Setxattr {
            gfid: Gfid::ROOT,
            name: LAYOUT_XATTR.into(),
            value: serde_bytes::ByteBuf::from(root.encode(1)),
            flags: 0,
        };
        s.call(&Ctx::root(), fop).await.unwrap();
    }
    let d = r.mkdir(Gfid::ROOT, "d").await.unwrap();
    let fop = Fop::Getxattr {
        gfid: d,
        name: LAYOUT_XATTR.into(),
    };
    let Ok(Reply::Xattr(v)) = sets[0].call(&Ctx::root(), fop).await else {
        panic!("no layout stored");
    };
    let (generation, l) = Layout::decode(&v).unwrap();
    assert_eq!(generation, 1);
    assert!(l.share_of(0).abs_diff(1 << 30) <= 1, "{l:?}");
    assert!(l.share_of(1).abs_diff(3 << 30) <= 1, "{l:?}");
    // Files follow the shares.
    let mut on = [0usize; 2];
    for i in 0..400 {
        r.create(d, &format!("f{i}"), b"").await.unwrap();
    }
    for (i, b) in r.bricks.iter().enumerate() {
        on[i] = b.tree().keys().filter(|k| k.starts_with("/d/")).count();
    }
    assert!(on[1] > 2 * on[0], "{on:?}");
}

/// The distribute translator's children (one per set, in set order).
fn sets_of(r: &Rig) -> Vec<crate::core::Child> {
    let dht = r.graph.of_kind("cluster/distribute").next().unwrap();
    dht.children
        .iter()
        .map(|&c| r.graph.nodes()[c].child.clone())
        .collect()
}

/// A directory's mode and an xattr on one set's copy.
async fn copy_on(set: &crate::core::Child, d: Gfid) -> (u32, Option<Vec<u8>>) {
    use crate::core::{Ctx, Reply};
    let Ok(Reply::Attr(a)) = set.call(&Ctx::root(), Fop::Getattr { gfid: d }).await else {
        panic!("no copy");
    };
    let x = match set
        .call(
            &Ctx::root(),
            Fop::Getxattr {
                gfid: d,
                name: "user.tag".into(),
            },
        )
        .await
    {
        Ok(Reply::Xattr(v)) => Some(v.into_vec()),
        _ => None,
    };
    (a.perm, x)
}

#[tokio::test]
async fn a_directory_change_that_missed_a_set_is_healed_at_its_next_use() {
    let r = rig(2, 1);
    let sets = sets_of(&r);
    let d = r.mkdir(Gfid::ROOT, "d").await.unwrap();
    r.bricks[1].set_down(true);
    // Made on the first set, missed on the second: not an error.
    let chmod = SetAttr {
        mode: Some(0o700),
        ..Default::default()
    };
    r.call(Fop::Setattr {
        gfid: d,
        set: chmod,
    })
    .await
    .unwrap();
    r.call(Fop::Setxattr {
        gfid: d,
        name: "user.tag".into(),
        value: serde_bytes::ByteBuf::from(b"v".to_vec()),
        flags: 0,
    })
    .await
    .unwrap();
    r.bricks[1].set_down(false);
    assert_eq!(copy_on(&sets[1], d).await, (0o755, None));
    r.call(Fop::Getattr { gfid: d }).await.unwrap();
    assert_eq!(copy_on(&sets[1], d).await, (0o700, Some(b"v".to_vec())));
}

#[tokio::test]
async fn copies_of_a_directory_that_disagree_are_healed_when_it_is_listed() {
    use crate::core::Ctx;
    let r = rig(3, 1);
    let sets = sets_of(&r);
    let d = r.mkdir(Gfid::ROOT, "d").await.unwrap();
    // Changed behind the client's back on the third set.
    let odd = SetAttr {
        mode: Some(0o777),
        ..Default::default()
    };
    sets[2]
        .call(&Ctx::root(), Fop::Setattr { gfid: d, set: odd })
        .await
        .unwrap();
    let Ok(crate::core::Reply::Opened { fh }) = r.call(Fop::Opendir { gfid: d }).await else {
        panic!("opendir failed");
    };
    r.call(Fop::Releasedir { gfid: d, fh }).await.unwrap();
    for _ in 0..100 {
        if copy_on(&sets[2], d).await.0 == 0o755 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the third copy stays {:o}", copy_on(&sets[2], d).await.0);
}

#[tokio::test]
async fn a_listing_reads_every_set_at_once_and_survives_a_seek() {
    use crate::core::Reply;
    let r = rig(4, 1);
    let d = r.mkdir(Gfid::ROOT, "d").await.unwrap();
    for i in 0..60 {
        r.create(d, &format!("f{i}"), b"").await.unwrap();
    }
    let fh = r
        .call(Fop::Opendir { gfid: d })
        .await
        .unwrap()
        .into_fh()
        .unwrap();
    let read = |offset| {
        let r = &r;
        async move {
            let Reply::Entries(e) = r
                .call(Fop::Readdir {
                    gfid: d,
                    fh,
                    offset,
                    plus: false,
                })
                .await
                .unwrap()
            else {
                panic!("not entries")
            };
            e
        }
    };
    let before: Vec<u64> = r.bricks.iter().map(|b| b.calls()).collect();
    let first = read(0).await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    for (i, b) in r.bricks.iter().enumerate() {
        assert!(b.calls() > before[i], "set {i} was not read ahead");
    }
    // Everything, once; then again from the second batch on.
    let mut names = Vec::new();
    let mut offset = 0;
    let mut second = None;
    loop {
        let e = if offset == 0 {
            first.clone()
        } else {
            read(offset).await
        };
        let Some(last) = e.last() else { break };
        if second.is_none() {
            second = Some(last.next);
        }
        offset = last.next;
        names.extend(
            e.iter()
                .map(|e| String::from_utf8_lossy(&e.name).into_owned()),
        );
    }
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 60);
    assert_eq!(names.len(), 60);
    let mut again = Vec::new();
    let mut offset = second.unwrap();
    loop {
        let e = read(offset).await;
        let Some(last) = e.last() else { break };
        offset = last.next;
        again.extend(
            e.iter()
                .map(|e| String::from_utf8_lossy(&e.name).into_owned()),
        );
    }
    assert_eq!(again, names[first.len()..]);
    r.call(Fop::Releasedir { gfid: d, fh }).await.unwrap();
}

#[tokio::test]
async fn a_file_moved_to_another_set_is_found_by_a_client_that_knew_its_old_place() {
    use crate::core::Ctx;
    let r = rig(2, 1);
    let sets = sets_of(&r);
    let f = r.create(Gfid::ROOT, "f", b"old").await.unwrap();
    let from = (0..2)
        .find(|&i| r.bricks[i].content(&["f"]).is_some())
        .unwrap();
    let to = 1 - from;
    // Moved behind the client's back, as a rebalance moves it: same gfid.
    let fh = sets[to]
        .call(
            &Ctx::root(),
            Fop::Create {
                parent: Gfid::ROOT,
                name: n("f"),
                gfid: f,
                mode: 0o644,
                umask: 0,
                flags: libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
            },
        )
        .await
        .unwrap()
        .into_fh()
        .unwrap();
    sets[to]
        .call(
            &Ctx::root(),
            Fop::Write {
                gfid: f,
                fh,
                offset: 0,
                data: bytes::Bytes::from_static(b"new"),
            },
        )
        .await
        .unwrap();
    sets[to]
        .call(&Ctx::root(), Fop::Release { gfid: f, fh })
        .await
        .unwrap();
    sets[from]
        .call(
            &Ctx::root(),
            Fop::Unlink {
                parent: Gfid::ROOT,
                name: n("f"),
            },
        )
        .await
        .unwrap();
    r.call(Fop::Getattr { gfid: f }).await.unwrap();
    assert_eq!(r.read(f).await.unwrap(), b"new");
}

#[tokio::test]
async fn a_directory_shows_its_entries_changing_whichever_set_they_are_on() {
    // Time stands still but for the steps below (a directory's times are
    // moved at most every half second).
    tokio::time::pause();
    let r = rig(3, 1);
    let d = r.mkdir(Gfid::ROOT, "d").await.unwrap();
    let times = || async {
        let a = r
            .call(Fop::Getattr { gfid: d })
            .await
            .unwrap()
            .into_attr()
            .unwrap();
        (a.mtime, a.ctime)
    };
    for i in 0..12 {
        let before = times().await;
        tokio::time::advance(std::time::Duration::from_millis(600)).await;
        let name = format!("f{i}");
        let f = r.create(d, &name, b"").await.unwrap();
        let created = times().await;
        assert!(
            created.0 > before.0 && created.1 > before.1,
            "create {name}"
        );
        tokio::time::advance(std::time::Duration::from_millis(600)).await;
        r.call(Fop::Link {
            gfid: f,
            newparent: d,
            newname: n(&format!("l{i}")),
        })
        .await
        .unwrap();
        let linked = times().await;
        assert!(linked.0 > created.0, "link {name}");
        tokio::time::advance(std::time::Duration::from_millis(600)).await;
        r.call(Fop::Unlink {
            parent: d,
            name: n(&name),
        })
        .await
        .unwrap();
        assert!(times().await.0 > linked.0, "unlink {name}");
    }
}

#[tokio::test]
async fn a_directory_with_entries_on_any_set_is_not_removed_or_replaced() {
    let r = rig(3, 1);
    let d = r.mkdir(Gfid::ROOT, "d").await.unwrap();
    let e = r.mkdir(Gfid::ROOT, "e").await.unwrap();
    let everywhere = |g: Gfid| {
        let sets = sets_of(&r);
        async move {
            for s in &sets {
                s.call(&crate::core::Ctx::root(), Fop::Getattr { gfid: g })
                    .await
                    .unwrap();
            }
        }
    };
    // One file at a time: whichever set it is on, d is not empty.
    for i in 0..6 {
        let name = format!("f{i}");
        r.create(d, &name, b"").await.unwrap();
        let rm = r
            .call(Fop::Rmdir {
                parent: Gfid::ROOT,
                name: n("d"),
            })
            .await;
        assert_eq!(errno(rm), libc::ENOTEMPTY, "{name}");
        let mv = r
            .call(Fop::Rename {
                parent: Gfid::ROOT,
                name: n("e"),
                newparent: Gfid::ROOT,
                newname: n("d"),
                flags: 0,
            })
            .await;
        assert_eq!(errno(mv), libc::ENOTEMPTY, "{name}");
        everywhere(d).await;
        everywhere(e).await;
        r.call(Fop::Unlink {
            parent: d,
            name: n(&name),
        })
        .await
        .unwrap();
    }
    r.call(Fop::Rmdir {
        parent: Gfid::ROOT,
        name: n("d"),
    })
    .await
    .unwrap();
    for b in &r.bricks {
        assert!(!b.tree().contains_key("/d"));
    }
}
