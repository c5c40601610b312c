//! The healer and `object`'s heals over the real brick stack
//! (`graph::stacked`: posix, index, locks, leases over a brick directory):
//! copies that missed a change while their brick was down are blamed by
//! the others and listed in their heal index on disk, and heal makes them
//! equal again (data, metadata, names), clears the blame and empties the
//! index; a source given by hand is the one copied.

use crate::source::Policy;
use crate::Healer;
use mortar_core::fop::SetAttr;
use mortar_core::{Ctx, Fop, Gfid, Reply};
use mortar_graph::stacked::{stack_bricks, stack_env, StackBrick};
use mortar_graph::testkit::{desc_over, n};
use mortar_graph::Graph;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

struct Vol {
    bricks: Vec<Arc<StackBrick>>,
    graph: Graph,
}

impl Vol {
    async fn new() -> Vol {
        let bricks = stack_bricks(3);
        let graph = Graph::build(&desc_over(1, 3), &stack_env(&bricks)).unwrap();
        assert_eq!(graph.wait_up(Duration::from_secs(3)).await, 3);
        Vol { bricks, graph }
    }

    async fn call(&self, fop: Fop) -> Reply {
        let what = format!("{fop:?}");
        self.graph
            .top()
            .call(&Ctx::root(), fop)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    }

    async fn create(&self, parent: Gfid, name: &str, data: &[u8]) -> (Gfid, u64) {
        let gfid = Gfid::random();
        let Reply::Created { fh, .. } = self
            .call(Fop::Create {
                parent,
                name: n(name),
                gfid,
                flags: libc::O_RDWR,
                mode: 0o644,
                umask: 0,
            })
            .await
        else {
            panic!("not created")
        };
        self.write(gfid, fh, 0, data).await;
        (gfid, fh)
    }

    async fn write(&self, gfid: Gfid, fh: u64, offset: u64, data: &[u8]) {
        self.call(Fop::Write {
            gfid,
            fh,
            offset,
            data: data.to_vec().into(),
            grow: 0,
            reserve: false,
        })
        .await;
    }

    async fn healer(&self) -> Arc<Healer> {
        let h = Healer::new(&desc_over(1, 3), |_| true, &stack_env(&self.bricks)).unwrap();
        h.wait_up(Duration::from_secs(3)).await;
        h
    }

    /// Objects any brick's heal index lists, all bricks together.
    async fn pending(&self, h: &Healer) -> usize {
        h.info(false).await.iter().map(|b| b.entries.len()).sum()
    }
}

/// Blame bit of brick `i` (replica set order).
fn blames(blame: u32, i: usize) -> bool {
    blame & (1 << i) != 0
}

#[tokio::test]
async fn a_write_missed_by_a_brick_is_blamed_indexed_and_healed() {
    let v = Vol::new().await;
    let (f, fh) = v.create(Gfid::ROOT, "f", b"aaaa").await;
    v.bricks[0].set_down(true);
    v.write(f, fh, 4, b"bbbb").await;
    v.call(Fop::Release { gfid: f, fh }).await;
    v.bricks[0].set_down(false);
    // The copies that took the write blame the one that missed it.
    for i in [1, 2] {
        let blame = v.bricks[i].blame(f);
        assert!(blames(blame, 0), "brick {i}: blame {blame:#x}");
    }
    assert_eq!(v.bricks[0].content(&["f"]).unwrap().1, b"aaaa");
    let h = v.healer().await;
    assert!(v.pending(&h).await > 0, "nothing in the heal index");
    for _ in 0..3 {
        h.index_pass().await;
    }
    for (i, b) in v.bricks.iter().enumerate() {
        assert_eq!(b.content(&["f"]).unwrap().1, b"aaaabbbb", "brick {i}");
        assert_eq!(b.blame(f), 0, "brick {i}");
    }
    assert_eq!(v.pending(&h).await, 0);
    v.graph.fini().await;
}

#[tokio::test]
async fn a_mode_and_a_name_missed_by_a_brick_are_healed() {
    let v = Vol::new().await;
    let (f, fh) = v.create(Gfid::ROOT, "f", b"x").await;
    v.call(Fop::Release { gfid: f, fh }).await;
    v.bricks[0].set_down(true);
    v.call(Fop::Setattr {
        gfid: f,
        set: SetAttr {
            mode: Some(0o600),
            ..Default::default()
        },
    })
    .await;
    let (g, gh) = v.create(Gfid::ROOT, "g", b"new").await;
    v.call(Fop::Release { gfid: g, fh: gh }).await;
    v.bricks[0].set_down(false);
    assert!(v.bricks[0].content(&["g"]).is_none());
    let h = v.healer().await;
    for _ in 0..3 {
        h.index_pass().await;
    }
    for (i, b) in v.bricks.iter().enumerate() {
        let mode = std::fs::metadata(b.root().join("f"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o600, "brick {i}");
        assert_eq!(b.content(&["g"]).unwrap().1, b"new", "brick {i}");
        // The same object (gfid) on every brick.
        let Ok(Reply::Entry(e)) = b
            .ask(Fop::Lookup {
                parent: Gfid::ROOT,
                name: n("g"),
            })
            .await
        else {
            panic!("brick {i}: no g")
        };
        assert_eq!(e.attr.gfid, g, "brick {i}");
    }
    assert_eq!(v.pending(&h).await, 0);
    v.graph.fini().await;
}

#[tokio::test]
async fn a_source_given_by_hand_is_the_copy_every_other_one_takes() {
    let v = Vol::new().await;
    let (f, fh) = v.create(Gfid::ROOT, "f", b"old!").await;
    v.bricks[0].set_down(true);
    v.write(f, fh, 0, b"new!").await;
    v.call(Fop::Release { gfid: f, fh }).await;
    v.bricks[0].set_down(false);
    let h = v.healer().await;
    // Brick 0's copy, the stale one, chosen as the source all the same
    // (`volume heal … split-brain source-brick`).
    let healed = h.sets[0].heal_from(f, 0).await.unwrap();
    assert!(healed.healed > 0, "{healed:?}");
    for (i, b) in v.bricks.iter().enumerate() {
        assert_eq!(b.content(&["f"]).unwrap().1, b"old!", "brick {i}");
        assert_eq!(b.blame(f), 0, "brick {i}");
    }
    // Healed again by blame: the copies agree now, no byte is copied.
    let again = h.sets[0].heal(f, Policy::None).await.unwrap();
    assert_eq!((again.bytes, again.split_brain), (0, false), "{again:?}");
    v.graph.fini().await;
}

#[tokio::test]
async fn a_brick_that_restarts_keeps_its_heal_index_on_disk() {
    let v = Vol::new().await;
    let (f, fh) = v.create(Gfid::ROOT, "f", b"a").await;
    v.bricks[0].set_down(true);
    v.write(f, fh, 1, b"b").await;
    v.call(Fop::Release { gfid: f, fh }).await;
    // Bricks 1 and 2 restart (new processes over the same directories):
    // what they must heal is still listed, and still healed.
    for i in [1, 2] {
        v.bricks[i].set_down(true);
        v.bricks[i].set_down(false);
    }
    v.bricks[0].set_down(false);
    let h = v.healer().await;
    assert!(v.pending(&h).await > 0);
    for _ in 0..3 {
        h.index_pass().await;
    }
    assert_eq!(v.bricks[0].content(&["f"]).unwrap().1, b"ab");
    assert_eq!(v.pending(&h).await, 0);
    v.graph.fini().await;
}

/// An application appending while a heal copies a file of several chunks:
/// the heal lets the lock go between chunks, the appends reach every copy,
/// and the heal's end leaves them there (it once set the sink's length to
/// the one the source had at the start: the appends were cut off on the
/// sink alone, and the copies differed with nobody blamed for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_application_appends_during_a_heal_stays_on_every_copy() {
    let v = Vol::new().await;
    // Three chunks (`copy::CHUNK_BLOCKS` blocks of `copy::BLOCK`).
    let len = 3 * 64 * (128 << 10);
    let (f, fh) = v.create(Gfid::ROOT, "f", &vec![1u8; len]).await;
    v.call(Fop::Release { gfid: f, fh }).await;
    v.bricks[0].set_down(true);
    let fh = open_rw(&v, f).await;
    v.write(f, fh, 0, &vec![2u8; len]).await;
    v.call(Fop::Release { gfid: f, fh }).await;
    v.bricks[0].set_down(false);
    assert!(blames(v.bricks[1].blame(f), 0));
    let h = v.healer().await;
    let fh = open_rw(&v, f).await;
    let pass = tokio::spawn({
        let h = h.clone();
        async move { h.index_pass().await }
    });
    // Appends, one after another, until the pass is over: those asked for
    // while the heal holds the lock land when it lets it go.
    let mut end = len as u64;
    let mut during = 0;
    while !pass.is_finished() {
        v.write(f, fh, end, &[3u8; 4096]).await;
        end += 4096;
        during += 1;
    }
    pass.await.unwrap();
    v.call(Fop::Release { gfid: f, fh }).await;
    assert!(during > 1, "no append while the heal ran");
    let mut want = vec![2u8; len];
    want.resize(end as usize, 3);
    for (i, b) in v.bricks.iter().enumerate() {
        let have = b.content(&["f"]).unwrap().1;
        assert_eq!(have.len(), want.len(), "brick {i}: length");
        assert!(have == want, "brick {i}: content");
    }
    v.graph.fini().await;
}

async fn open_rw(v: &Vol, gfid: Gfid) -> u64 {
    let Reply::Opened { fh } = v
        .call(Fop::Open {
            gfid,
            flags: libc::O_RDWR,
        })
        .await
    else {
        panic!("not opened")
    };
    fh
}
