use super::*;
use mortar_storage::posix::Posix;

/// Answers every call once `open` lets it (at once while it is open).
struct Gate {
    open: tokio::sync::watch::Sender<bool>,
    calls: AtomicU64,
}

#[async_trait]
impl BrickXlator for Gate {
    async fn call(&self, _: &Arc<Conn>, _: &Ctx, _: Fop) -> FsResult<Reply> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut rx = self.open.subscribe();
        let _ = rx.wait_for(|open| *open).await;
        Ok(Reply::Ok)
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    gate: Arc<Gate>,
    x: Arc<dyn BrickXlator>,
}

fn setup(timeout: &str) -> Setup {
    let d = tempfile::tempdir().unwrap();
    let env = BrickEnv {
        posix: Arc::new(Posix::open(d.path()).unwrap()),
        arbiter: false,
    };
    let gate = Arc::new(Gate {
        open: tokio::sync::watch::channel(true).0,
        calls: AtomicU64::new(0),
    });
    let x = build(&env, Some(gate.clone())).unwrap().unwrap();
    let mut o = mortar_core::Options::default();
    o.insert(BARRIER_TIMEOUT.key.into(), timeout.into());
    x.reconfigure(&o);
    Setup { _dir: d, gate, x }
}

fn conn() -> Arc<Conn> {
    Conn::quiet(1)
}

fn user() -> Ctx {
    Ctx {
        uid: 0,
        internal: false,
        ..Ctx::default()
    }
}

fn raise() -> Fop {
    Fop::Setxattr {
        gfid: Gfid::ROOT,
        name: BARRIER_XATTR.into(),
        value: Default::default(),
        flags: 0,
    }
}

fn lower() -> Fop {
    Fop::Removexattr {
        gfid: Gfid::ROOT,
        name: BARRIER_XATTR.into(),
    }
}

fn write() -> Fop {
    Fop::Write {
        gfid: Gfid::random(),
        fh: 1,
        offset: 0,
        data: bytes::Bytes::from_static(b"x"),
        grow: 0,
        reserve: false,
    }
}

async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn changes_wait_behind_the_barrier_and_reads_do_not() {
    let s = setup("120");
    let c = conn();
    s.x.call(&c, &Ctx::root(), raise()).await.unwrap();
    let x = s.x.clone();
    let c2 = c.clone();
    let held = tokio::spawn(async move { x.call(&c2, &user(), write()).await });
    settle().await;
    assert_eq!(s.gate.calls.load(Ordering::SeqCst), 0, "the write is held");
    let read = Fop::Getattr { gfid: Gfid::ROOT };
    s.x.call(&c, &user(), read).await.unwrap();
    assert_eq!(s.gate.calls.load(Ordering::SeqCst), 1, "a read passes");
    s.x.call(&c, &Ctx::root(), lower()).await.unwrap();
    held.await.unwrap().unwrap();
    assert_eq!(s.gate.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn the_barrier_rises_once_changes_in_flight_end() {
    let s = setup("120");
    let c = conn();
    s.gate.open.send_replace(false);
    let (x, c2) = (s.x.clone(), c.clone());
    let flying = tokio::spawn(async move { x.call(&c2, &user(), write()).await });
    settle().await;
    let (x, c2) = (s.x.clone(), c.clone());
    let rising = tokio::spawn(async move { x.call(&c2, &Ctx::root(), raise()).await });
    settle().await;
    assert!(!rising.is_finished(), "a change is in flight");
    s.gate.open.send_replace(true);
    flying.await.unwrap().unwrap();
    rising.await.unwrap().unwrap();
    assert!(
        s.x.call(&c, &Ctx::root(), raise()).await.is_err(),
        "up already"
    );
}

#[tokio::test(start_paused = true)]
async fn a_change_that_does_not_end_fails_the_rise_and_a_barrier_left_up_falls() {
    let s = setup("5");
    let c = conn();
    s.gate.open.send_replace(false);
    let (x, c2) = (s.x.clone(), c.clone());
    let stuck = tokio::spawn(async move { x.call(&c2, &user(), write()).await });
    settle().await;
    let e = s.x.call(&c, &Ctx::root(), raise()).await.unwrap_err();
    assert!(e.is(libc::EBUSY), "{e}");
    s.gate.open.send_replace(true);
    stuck.await.unwrap().unwrap();
    // Up, and never lowered: it falls after the timeout.
    s.x.call(&c, &Ctx::root(), raise()).await.unwrap();
    let (x, c2) = (s.x.clone(), c.clone());
    let held = tokio::spawn(async move { x.call(&c2, &user(), write()).await });
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!held.is_finished());
    tokio::time::sleep(Duration::from_secs(2)).await;
    held.await.unwrap().unwrap();
}

#[tokio::test]
async fn only_the_pool_drives_it() {
    let s = setup("120");
    let c = conn();
    for fop in [
        raise(),
        lower(),
        Fop::Getxattr {
            gfid: Gfid::ROOT,
            name: SNAPSHOTS_XATTR.into(),
        },
    ] {
        let e = s.x.call(&c, &user(), fop).await.unwrap_err();
        assert!(e.is(libc::EPERM), "{e}");
    }
    let take = Fop::Setxattr {
        gfid: Gfid::ROOT,
        name: format!("{SNAPSHOT_XATTR_PREFIX}s1"),
        value: Default::default(),
        flags: 0,
    };
    let e = s.x.call(&c, &Ctx::root(), take).await.unwrap_err();
    assert!(e.is(libc::EINVAL), "not behind a barrier: {e}");
    assert_eq!(s.gate.calls.load(Ordering::SeqCst), 0);
}
