//! Distribute's decisions: where names go, what a lookup asks, layouts in
//! flux, directories healed across sets, listings.

use super::*;

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
    let bricks = test_bricks(4);
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
    let bricks = test_bricks(3);
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
    use mortar_core::fop::LAYOUT_XATTR;
    use mortar_core::{Ctx, Reply};
    use mortar_xlators::cluster::layout::Layout;
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
fn sets_of(r: &Rig) -> Vec<mortar_core::Child> {
    let dht = r.graph.of_kind("cluster/distribute").next().unwrap();
    dht.children
        .iter()
        .map(|&c| r.graph.nodes()[c].child.clone())
        .collect()
}

/// A directory's mode and an xattr on one set's copy.
async fn copy_on(set: &mortar_core::Child, d: Gfid) -> (u32, Option<Vec<u8>>) {
    use mortar_core::{Ctx, Reply};
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
    use mortar_core::Ctx;
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
    let Ok(mortar_core::Reply::Opened { fh }) = r.call(Fop::Opendir { gfid: d }).await else {
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
    use mortar_core::Reply;
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
    use mortar_core::Ctx;
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
                grow: 0,
                reserve: false,
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
                s.call(&mortar_core::Ctx::root(), Fop::Getattr { gfid: g })
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
