//! Replicate and distribute over the real brick stack (`crate::stacked`):
//! several clients at once through real locks, leases and change
//! sessions, and bricks that restart.

use crate::stacked::{stack_bricks, stack_env, StackBrick};
use crate::testkit::{desc_over, n};
use crate::Graph;
use mortar_core::{Ctx, Fop, FsResult, Gfid, Reply};
use std::sync::Arc;
use std::time::Duration;

async fn client(bricks: &[Arc<StackBrick>], sets: usize, replica: usize) -> Graph {
    let g = Graph::build(&desc_over(sets, replica), &stack_env(bricks)).unwrap();
    assert_eq!(g.wait_up(Duration::from_secs(3)).await, bricks.len());
    g
}

/// A client whose graph caches: md-cache over the sets, as volgen
/// stacks it.
async fn caching_client(bricks: &[Arc<StackBrick>]) -> Graph {
    let mut d = desc_over(1, bricks.len());
    d.top =
        mortar_core::desc::XlDesc::new("performance/md-cache", "t-md-cache".into(), vec![d.top]);
    let g = Graph::build(&d, &stack_env(bricks)).unwrap();
    assert_eq!(g.wait_up(Duration::from_secs(3)).await, bricks.len());
    g
}

async fn call(g: &Graph, fop: Fop) -> FsResult<Reply> {
    g.top().call(&Ctx::root(), fop).await
}

async fn open(g: &Graph, gfid: Gfid) -> u64 {
    match call(
        g,
        Fop::Open {
            gfid,
            flags: libc::O_RDWR,
        },
    )
    .await
    {
        Ok(Reply::Opened { fh }) => fh,
        other => panic!("open: {other:?}"),
    }
}

/// Two clients write the same bytes of one file at once, again and
/// again: the brick's locks order them, so every copy ends equal and
/// nobody is blamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_writing_one_file_at_once_leave_equal_copies() {
    let bricks = stack_bricks(3);
    let (a, b) = (client(&bricks, 1, 3).await, client(&bricks, 1, 3).await);
    let f = Gfid::random();
    let made = call(
        &a,
        Fop::Create {
            parent: Gfid::ROOT,
            name: n("f"),
            gfid: f,
            mode: 0o644,
            umask: 0,
            flags: libc::O_RDWR,
        },
    )
    .await
    .unwrap();
    let Reply::Created { fh: fa, .. } = made else {
        panic!("{made:?}")
    };
    let fb = open(&b, f).await;
    async fn writes(g: &Graph, f: Gfid, fh: u64, byte: u8) {
        for i in 0..50u64 {
            let fop = Fop::Write {
                gfid: f,
                fh,
                offset: (i % 4) * 2048,
                data: vec![byte; 4096].into(),
                grow: 0,
                reserve: false,
            };
            call(g, fop).await.unwrap();
        }
    }
    tokio::join!(writes(&a, f, fa, b'a'), writes(&b, f, fb, b'b'));
    for (g, fh) in [(&a, fa), (&b, fb)] {
        call(g, Fop::Release { gfid: f, fh }).await.unwrap();
    }
    let first = bricks[0].content(&["f"]).unwrap().1;
    assert_eq!(first.len(), 10240);
    for (i, br) in bricks.iter().enumerate() {
        assert_eq!(br.content(&["f"]).unwrap().1, first, "brick {i} differs");
        assert_eq!(br.blame(f), 0, "brick {i}");
    }
    a.fini().await;
    b.fini().await;
}

/// A client that caches a file's attributes sees another client's change
/// of it at once: the brick recalls what the first client caches before
/// it applies the second one's change (leases).
#[tokio::test]
async fn a_change_by_one_client_is_seen_by_another_that_cached_the_file() {
    let bricks = stack_bricks(3);
    let (a, b) = (caching_client(&bricks).await, client(&bricks, 1, 3).await);
    let f = Gfid::random();
    call(
        &a,
        Fop::Mknod {
            parent: Gfid::ROOT,
            name: n("f"),
            gfid: f,
            mode: libc::S_IFREG | 0o644,
            umask: 0,
            rdev: 0,
            linkto: None,
        },
    )
    .await
    .unwrap();
    let size = |g: Graph| async move {
        match call(&g, Fop::Getattr { gfid: f }).await {
            Ok(Reply::Attr(at)) => (at.size, g),
            other => panic!("{other:?}"),
        }
    };
    let (s, a) = size(a).await;
    assert_eq!(s, 0);
    let (s, a) = size(a).await;
    assert_eq!(s, 0);
    let fb = open(&b, f).await;
    call(
        &b,
        Fop::Write {
            gfid: f,
            fh: fb,
            offset: 0,
            data: vec![1u8; 100].into(),
            grow: 0,
            reserve: false,
        },
    )
    .await
    .unwrap();
    let (s, a) = size(a).await;
    assert_eq!(s, 100, "the first client still sees its cached size");
    call(&b, Fop::Release { gfid: f, fh: fb }).await.unwrap();
    a.fini().await;
    b.fini().await;
}

/// Distribute over replica sets of real bricks: files land on the set
/// their names hash to, and every copy of a set has them.
#[tokio::test]
async fn files_spread_over_two_replica_sets_of_real_bricks() {
    let bricks = stack_bricks(4);
    let g = client(&bricks, 2, 2).await;
    for i in 0..20 {
        call(
            &g,
            Fop::Mknod {
                parent: Gfid::ROOT,
                name: n(&format!("f{i}")),
                gfid: Gfid::random(),
                mode: libc::S_IFREG | 0o644,
                umask: 0,
                rdev: 0,
                linkto: None,
            },
        )
        .await
        .unwrap();
    }
    let on = |i: usize| {
        (0..20)
            .filter(|f| bricks[i].content(&[&format!("f{f}")]).is_some())
            .count()
    };
    assert_eq!(on(0), on(1), "a set's copies differ");
    assert_eq!(on(2), on(3), "a set's copies differ");
    assert_eq!(on(0) + on(2), 20, "not every file landed once");
    assert!(on(0) > 0 && on(2) > 0, "one set took every file");
    g.fini().await;
}

async fn create(g: &Graph, name: &str) -> Gfid {
    let f = Gfid::random();
    let made = call(
        g,
        Fop::Create {
            parent: Gfid::ROOT,
            name: n(name),
            gfid: f,
            mode: 0o644,
            umask: 0,
            flags: libc::O_RDWR,
        },
    )
    .await;
    let Ok(Reply::Created { fh, .. }) = made else {
        panic!("create: {made:?}")
    };
    call(g, Fop::Release { gfid: f, fh }).await.unwrap();
    f
}

fn write(f: Gfid, fh: u64, data: &'static [u8]) -> Fop {
    Fop::Write {
        gfid: f,
        fh,
        offset: 0,
        data: bytes::Bytes::from_static(data),
        grow: 0,
        reserve: false,
    }
}

/// Opens for writing are answered before the bricks have them
/// (open-behind): one of a file another client removed meanwhile
/// succeeds, and its first write fails as the open would have; nothing
/// stays open on the bricks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_for_writing_of_a_removed_file_fails_at_its_first_write() {
    let bricks = stack_bricks(3);
    let (a, b) = (client(&bricks, 1, 3).await, client(&bricks, 1, 3).await);
    let f = create(&a, "f").await;
    let unlink = Fop::Unlink {
        parent: Gfid::ROOT,
        name: n("f"),
    };
    call(&b, unlink).await.unwrap();
    let fh = open(&a, f).await;
    let e = call(&a, write(f, fh, b"lost")).await.unwrap_err();
    assert!(e.is(libc::ENOENT) || e.is(libc::ESTALE), "{e:?}");
    // Every later use of the handle says so too.
    let e = call(
        &a,
        Fop::Fsync {
            gfid: f,
            fh,
            datasync: false,
        },
    )
    .await
    .unwrap_err();
    assert!(e.is(libc::ENOENT) || e.is(libc::ESTALE), "{e:?}");
    call(&a, Fop::Release { gfid: f, fh }).await.unwrap();
    assert!(bricks.iter().all(|b| b.open_handles() == 0));
}

/// A file opened for writing ahead of the bricks and removed by the same
/// client right away stays writable through its handle (the name goes
/// only once the bricks have it open), and a handle released without use
/// closes what the bricks opened.
// (One thread: the open on its way has not left when the unlink is asked.)
#[tokio::test(flavor = "current_thread")]
async fn a_file_opened_for_writing_stays_writable_after_its_name_goes() {
    let bricks = stack_bricks(3);
    let a = client(&bricks, 1, 3).await;
    let f = create(&a, "f").await;
    let fh = open(&a, f).await;
    let unlink = Fop::Unlink {
        parent: Gfid::ROOT,
        name: n("f"),
    };
    call(&a, unlink).await.unwrap();
    call(&a, write(f, fh, b"kept")).await.unwrap();
    let read = Fop::Read {
        gfid: f,
        fh,
        offset: 0,
        size: 4,
    };
    match call(&a, read).await {
        Ok(Reply::Data(d)) => assert_eq!(&d[..], b"kept"),
        other => panic!("read: {other:?}"),
    }
    call(&a, Fop::Release { gfid: f, fh }).await.unwrap();
    let g = create(&a, "g").await;
    let unused = open(&a, g).await;
    call(
        &a,
        Fop::Release {
            gfid: g,
            fh: unused,
        },
    )
    .await
    .unwrap();
    assert!(bricks.iter().all(|b| b.open_handles() == 0));
}
