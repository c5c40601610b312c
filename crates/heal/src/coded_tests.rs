//! The heal of dispersed files over the real brick stack: fragments that
//! missed writes and truncations while their bricks were down are rebuilt
//! from the others, equal to what coding the file anew gives, with holes
//! kept and blame and index cleared.

use crate::Healer;
use mortar_core::fop::SetAttr;
use mortar_core::{Ctx, Fop, Gfid, Reply};
use mortar_ec::{Codec, Geometry};
use mortar_graph::stacked::{stack_bricks, stack_env, StackBrick};
use mortar_graph::testkit::{desc_disperse, n};
use mortar_graph::Graph;
use mortar_xlators::cluster::replicate::disperse::UNIT;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::Duration;

const K: usize = 4;
const R: usize = 2;

struct Vol {
    bricks: Vec<Arc<StackBrick>>,
    graph: Graph,
}

fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| rng.u8(..)).collect()
}

impl Vol {
    async fn new() -> Vol {
        let bricks = stack_bricks(K + R);
        let graph = Graph::build(&desc_disperse(1, K, R), &stack_env(&bricks)).unwrap();
        assert_eq!(graph.wait_up(Duration::from_secs(3)).await, K + R);
        Vol { bricks, graph }
    }

    async fn call(&self, fop: Fop) -> Reply {
        let what = format!("{fop:.80?}");
        self.graph
            .top()
            .call(&Ctx::root(), fop)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    }

    async fn create(&self, name: &str) -> (Gfid, u64) {
        let gfid = Gfid::random();
        let Reply::Created { fh, .. } = self
            .call(Fop::Create {
                parent: Gfid::ROOT,
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
        (gfid, fh)
    }

    /// Opens file `gfid` for reading and writing: its handle.
    async fn open(&self, gfid: Gfid) -> u64 {
        let open = Fop::Open {
            gfid,
            flags: libc::O_RDWR,
        };
        let Reply::Opened { fh } = self.call(open).await else {
            panic!("not opened")
        };
        fh
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

    async fn heal(&self) {
        let h = Healer::new(&desc_disperse(1, K, R), |_| true, &stack_env(&self.bricks)).unwrap();
        h.wait_up(Duration::from_secs(3)).await;
        for _ in 0..3 {
            h.index_pass().await;
        }
        let left: usize = h.info(false).await.iter().map(|b| b.entries.len()).sum();
        assert_eq!(left, 0, "objects left in the heal index");
    }

    /// Closes this mount and replaces brick 2 by a new, empty one: the
    /// bricks now, and a healer over them.
    async fn replace_brick_2(self) -> (Vec<Arc<StackBrick>>, Arc<Healer>) {
        self.graph.fini().await;
        let mut bricks = self.bricks;
        bricks[2] = StackBrick::new("s2-new", false);
        let h = Healer::new(&desc_disperse(1, K, R), |_| true, &stack_env(&bricks)).unwrap();
        h.wait_up(Duration::from_secs(3)).await;
        (bricks, h)
    }

    /// Every fragment of `name` is what coding `want` gives, as long as
    /// the file, and nobody is blamed.
    fn assert_coded(&self, gfid: Gfid, name: &str, want: &[u8]) {
        let g = Geometry::new(K, UNIT);
        let size = want.len() as u64;
        let plen = g.parity_len(size) as usize;
        let mut whole = want.to_vec();
        whole.resize(
            g.stripes(0, size).end as usize * g.stripe_bytes() as usize,
            0,
        );
        let data: Vec<Vec<u8>> = g
            .scatter(0, &whole)
            .into_iter()
            .map(|mut d| {
                d.truncate(plen);
                d
            })
            .collect();
        let mut parity = vec![vec![0u8; plen]; R];
        Codec::new(K, R)
            .unwrap()
            .encode(&data, &mut parity)
            .unwrap();
        for (i, b) in self.bricks.iter().enumerate() {
            let got = b.content(&[name]).expect("a fragment").1;
            assert_eq!(got.len(), want.len(), "fragment {i} is as long as the file");
            let frag = if i < K { &data[i] } else { &parity[i - K] };
            assert!(got[..plen] == frag[..], "fragment {i} is the file coded");
            assert!(
                got[plen..].iter().all(|&x| x == 0),
                "fragment {i} ends in zeros"
            );
            assert_eq!(b.blame(gfid), 0, "fragment {i} is blamed");
        }
    }
}

#[tokio::test]
async fn fragments_that_missed_writes_are_rebuilt_from_the_others() {
    let v = Vol::new().await;
    let (f, fh) = v.create("f").await;
    let mut want = bytes(300_000, 1);
    v.write(f, fh, 0, &want).await;
    // A data fragment and a parity fragment away: an overwrite inside,
    // an append, and a truncation into the middle of a stripe.
    v.bricks[1].set_down(true);
    v.bricks[5].set_down(true);
    let over = bytes(40_000, 2);
    v.write(f, fh, 20_000, &over).await;
    want[20_000..60_000].copy_from_slice(&over);
    let tail = bytes(150_000, 3);
    v.write(f, fh, want.len() as u64, &tail).await;
    want.extend_from_slice(&tail);
    let set = SetAttr {
        size: Some(400_001),
        ..Default::default()
    };
    v.call(Fop::Setattr { gfid: f, set }).await;
    want.truncate(400_001);
    v.call(Fop::Release { gfid: f, fh }).await;
    v.bricks[1].set_down(false);
    v.bricks[5].set_down(false);
    assert_ne!(v.bricks[0].blame(f), 0, "the fragments away are blamed");
    v.heal().await;
    v.assert_coded(f, "f", &want);
    v.graph.fini().await;
}

/// A source whose block was damaged behind its brick's back, which no
/// read had found yet: the heal rebuilds from a spare source instead, and
/// rewrites the damaged block too.
#[tokio::test]
async fn a_damaged_source_is_replaced_by_a_spare_and_healed_as_well() {
    use std::os::unix::fs::FileExt;
    let v = Vol::new().await;
    for b in &v.bricks {
        b.set_checksums(true);
    }
    let (f, fh) = v.create("f").await;
    let mut want = bytes(300_000, 4);
    v.write(f, fh, 0, &want).await;
    v.bricks[1].set_down(true);
    let over = bytes(30_000, 5);
    v.write(f, fh, 100_000, &over).await;
    want[100_000..130_000].copy_from_slice(&over);
    v.call(Fop::Release { gfid: f, fh }).await;
    v.bricks[1].set_down(false);
    // Bytes of data fragment 0, a source, flipped on its disk, within the
    // ranges the heal looks at (the parity and fragments 2 and 3 took the
    // write at 16 KiB + 1,696 of each fragment on: the block from 0).
    let frag = std::fs::OpenOptions::new()
        .write(true)
        .open(v.bricks[0].root().join("f"))
        .unwrap();
    frag.write_all_at(b"damage", 20_000).unwrap();
    drop(frag);
    v.heal().await;
    v.assert_coded(f, "f", &want);
    v.graph.fini().await;
}

/// A client gone in the middle of a write (killed): the write reached the
/// data fragments and not the parity; nobody is blamed, and only the index
/// entries its ended sessions left say so. The heal codes the data
/// fragments as they are anew.
#[tokio::test]
async fn a_write_whose_client_died_midway_is_settled_by_coding_the_data_anew() {
    let v = Vol::new().await;
    let (f, fh) = v.create("f").await;
    v.write(f, fh, 0, &bytes(300_000, 9)).await;
    v.call(Fop::Release { gfid: f, fh }).await;
    let fh = v.open(f).await;
    for b in &v.bricks[K..] {
        b.set_write_delay(Duration::from_secs(2));
    }
    let want = bytes(300_000, 10);
    let top = v.graph.top().clone();
    let data = want.clone();
    let write = tokio::spawn(async move {
        let fop = Fop::Write {
            gfid: f,
            fh,
            offset: 0,
            data: data.into(),
            grow: 0,
            reserve: false,
        };
        top.call(&Ctx::root(), fop).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for b in &v.bricks {
        b.cut_clients();
        b.set_write_delay(Duration::ZERO);
    }
    let _ = write.await;
    for b in &v.bricks {
        assert_eq!(b.blame(f), 0, "nobody is blamed");
    }
    assert!(
        v.bricks[0].pending().contains(&f),
        "the index keeps the file"
    );
    v.heal().await;
    v.assert_coded(f, "f", &want);
    v.graph.fini().await;
}

/// Granular heal: a large file of which a few bytes changed while two
/// bricks were away is healed by reading and comparing the blocks around
/// those bytes, not the whole file.
#[tokio::test]
async fn only_the_ranges_changed_are_read_and_rebuilt() {
    let v = Vol::new().await;
    let (f, fh) = v.create("f").await;
    let mut want = bytes(8 << 20, 11);
    v.write(f, fh, 0, &want).await;
    v.call(Fop::Release { gfid: f, fh }).await;
    // Its change sessions settled (the lock kept for the next change goes
    // after 500 ms) before the bricks go: else a brick stopped in the
    // middle of a session leaves the whole file to compare.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    v.bricks[2].set_down(true);
    v.bricks[4].set_down(true);
    let fh = v.open(f).await;
    for (at, len) in [
        (3 << 20, 4096),
        ((5 << 20) + 70_000, 1),
        ((7 << 20) + 5, 100_000),
    ] {
        let b = bytes(len, at as u64);
        v.write(f, fh, at as u64, &b).await;
        want[at..at + len].copy_from_slice(&b);
    }
    v.call(Fop::Release { gfid: f, fh }).await;
    v.bricks[2].set_down(false);
    v.bricks[4].set_down(false);
    // `heal info` says how much of each fragment the heal will compare:
    // the 4 KiB, the byte and the 100,000 bytes, as each data fragment
    // and the parity took them (4,096 + 1 + 32,768 bytes at its offsets).
    let h = Healer::new(&desc_disperse(1, K, R), |_| true, &stack_env(&v.bricks)).unwrap();
    h.wait_up(Duration::from_secs(3)).await;
    for b in h.info(false).await {
        let want = if b.entries.is_empty() { 0 } else { 36_865 };
        assert_eq!(b.to_compare, want, "{}", b.brick);
    }
    let before: u64 = v.bricks.iter().map(|b| b.read_bytes()).sum();
    v.heal().await;
    let read: u64 = v.bricks.iter().map(|b| b.read_bytes()).sum::<u64>() - before;
    v.assert_coded(f, "f", &want);
    // Whole, it is 2 MiB from each of four sources and each of two sinks.
    assert!(read < 2 << 20, "the heal read {read} bytes");
    v.graph.fini().await;
}

/// A brick killed while a change session was open on a file has lost
/// what the session changed: the heal compares the whole file. (A brick
/// stopped, `set_down`, writes its sessions' ranges down as they end.)
#[tokio::test]
async fn a_brick_killed_in_a_session_has_the_whole_file_compared() {
    let v = Vol::new().await;
    let (f, fh) = v.create("f").await;
    let mut want = bytes(1 << 20, 12);
    v.write(f, fh, 0, &want).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // Fragment 0 changed on its disk behind the bricks' backs while a
    // write's session is open everywhere: only a whole compare finds it.
    v.write(f, fh, 100, b"x").await;
    want[100] = b'x';
    let p = v.bricks[0].root().join("f");
    let mut frag = std::fs::read(&p).unwrap();
    frag[200_000] ^= 0xff;
    std::fs::write(&p, &frag).unwrap();
    v.bricks[0].kill();
    v.write(f, fh, 150, b"y").await;
    want[150] = b'y';
    v.call(Fop::Release { gfid: f, fh }).await;
    v.bricks[0].set_down(false);
    let before: u64 = v.bricks.iter().map(|b| b.read_bytes()).sum();
    v.heal().await;
    let read: u64 = v.bricks.iter().map(|b| b.read_bytes()).sum::<u64>() - before;
    v.assert_coded(f, "f", &want);
    assert!(read >= 5 * (256 << 10), "the heal read {read} bytes");
    v.graph.fini().await;
}

#[tokio::test]
async fn a_sparse_file_heals_without_filling_its_holes() {
    let v = Vol::new().await;
    let (f, fh) = v.create("sparse").await;
    v.write(f, fh, 0, b"head").await;
    v.bricks[0].set_down(true);
    v.bricks[4].set_down(true);
    let far = 64 << 20;
    v.write(f, fh, far, b"tail").await;
    v.call(Fop::Release { gfid: f, fh }).await;
    v.bricks[0].set_down(false);
    v.bricks[4].set_down(false);
    v.heal().await;
    let mut want = vec![0u8; far as usize + 4];
    want[..4].copy_from_slice(b"head");
    want[far as usize..].copy_from_slice(b"tail");
    v.assert_coded(f, "sparse", &want);
    for i in [0, 4] {
        let m = std::fs::metadata(v.bricks[i].root().join("sparse")).unwrap();
        assert!(
            m.blocks() * 512 < 1 << 20,
            "fragment {i} took {} bytes of disk for 8 written",
            m.blocks() * 512
        );
    }
    v.graph.fini().await;
}

#[tokio::test]
async fn fewer_good_fragments_than_k_wait_and_lose_nothing() {
    let v = Vol::new().await;
    let (f, fh) = v.create("f").await;
    let want = bytes(100_000, 4);
    v.write(f, fh, 0, &want).await;
    v.call(Fop::Release { gfid: f, fh }).await;
    // Blame three fragments by hand on every brick: only three good are
    // left of the four needed.
    let before: Vec<Vec<u8>> = v
        .bricks
        .iter()
        .map(|b| b.content(&["f"]).unwrap().1)
        .collect();
    for b in &v.bricks {
        b.ask(Fop::Lock {
            gfid: f,
            wait: true,
            mark: Some(0b111),
        })
        .await
        .unwrap();
    }
    assert_eq!(v.bricks[5].blame(f) & 0b111, 0b111);
    let h = Healer::new(&desc_disperse(1, K, R), |_| true, &stack_env(&v.bricks)).unwrap();
    h.wait_up(Duration::from_secs(3)).await;
    h.index_pass().await;
    for (i, b) in v.bricks.iter().enumerate() {
        assert_eq!(
            b.content(&["f"]).unwrap().1,
            before[i],
            "fragment {i} untouched"
        );
    }
    v.graph.fini().await;
}

#[tokio::test]
async fn a_brick_replaced_empty_is_rebuilt_by_a_full_heal() {
    let v = Vol::new().await;
    let (f, fh) = v.create("f").await;
    let want = bytes(500_000, 5);
    v.write(f, fh, 0, &want).await;
    v.call(Fop::Release { gfid: f, fh }).await;
    let (e, fh) = v.create("empty").await;
    v.call(Fop::Release { gfid: e, fh }).await;
    let (bricks, h) = v.replace_brick_2().await;
    assert_eq!(h.full().await, 0, "every set crawled");
    let graph = Graph::build(&desc_disperse(1, K, R), &stack_env(&bricks)).unwrap();
    let v = Vol { bricks, graph };
    v.assert_coded(f, "f", &want);
    v.assert_coded(e, "empty", b"");
    v.graph.fini().await;
}

/// The full crawl heals each file once: those its directory's heal made
/// on the empty brick (and healed right after) are not locked and read
/// again when the crawl lists the directory.
#[tokio::test]
async fn a_full_heal_visits_each_file_it_rebuilt_once() {
    let v = Vol::new().await;
    let files = 20;
    for i in 0..files {
        let (f, fh) = v.create(&format!("f{i}")).await;
        v.write(f, fh, 0, &bytes(20_000, i)).await;
        v.call(Fop::Release { gfid: f, fh }).await;
    }
    let (bricks, h) = v.replace_brick_2().await;
    let before = bricks[0].calls();
    assert_eq!(h.full().await, 0);
    let rebuild = bricks[0].calls() - before;
    // A crawl with nothing to heal: each file looked at once (about ten
    // requests on a source; its rebuild asks about as many). Each file
    // looked at again after its rebuild made it twice that.
    let before = bricks[0].calls();
    assert_eq!(h.full().await, 0);
    let look = bricks[0].calls() - before;
    assert!(
        rebuild < look + look / 2,
        "the rebuild asked brick 0 {rebuild} requests, a crawl with nothing to heal {look}"
    );
    assert_eq!(bricks[2].pending().len(), 0);
}

/// An application appending while a heal rebuilds the parity of a file of
/// many pieces (a brick killed in a change session left the whole file to
/// compare, nobody blamed): the heal lets the lock go between windows of
/// pieces, the appends reach every fragment, and the heal's end leaves
/// them there (it once set the sinks' length to the one the file had at
/// the start).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_application_appends_during_a_heal_stays_on_every_fragment() {
    let v = Vol::new().await;
    let (f, fh) = v.create("f").await;
    // More pieces than one turn of the lock takes.
    let mut want = bytes(40 << 20, 13);
    v.write(f, fh, 0, &want).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    v.write(f, fh, 100, b"x").await;
    want[100] = b'x';
    v.bricks[0].kill();
    v.call(Fop::Release { gfid: f, fh }).await;
    v.bricks[0].set_down(false);
    for b in &v.bricks {
        assert_eq!(b.blame(f), 0, "nobody is blamed");
    }
    let h = Healer::new(&desc_disperse(1, K, R), |_| true, &stack_env(&v.bricks)).unwrap();
    h.wait_up(Duration::from_secs(3)).await;
    let fh = v.open(f).await;
    let read = v.bricks[0].read_bytes();
    let pass = tokio::spawn({
        let h = h.clone();
        async move { h.index_pass().await }
    });
    // One append once the heal reads the sources (under the lock): it
    // lands when the heal lets the lock go between windows of pieces.
    while v.bricks[0].read_bytes() == read {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let more = bytes(4096, 14);
    v.write(f, fh, want.len() as u64, &more).await;
    want.extend_from_slice(&more);
    pass.await.unwrap();
    v.call(Fop::Release { gfid: f, fh }).await;
    v.assert_coded(f, "f", &want);
    // The next passes find the fragments agree (the file changed under
    // the first, which left it in the index to look at again).
    v.heal().await;
    v.assert_coded(f, "f", &want);
    v.graph.fini().await;
}
