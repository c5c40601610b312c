use super::*;
use mortar_storage::posix::FdTable;
use std::sync::atomic::AtomicBool;

/// Answers everything at once.
struct Anything;

#[async_trait]
impl BrickXlator for Anything {
    async fn call(&self, _: &Arc<Conn>, _: &Ctx, _: Fop) -> FsResult<Reply> {
        Ok(Reply::Ok)
    }
}

/// A connection whose notices are kept, and which can tell whether the
/// brick closed it.
struct Client {
    conn: Arc<Conn>,
    notices: Arc<Mutex<Vec<Notice>>>,
    closed: Arc<AtomicBool>,
}

fn client(id: ConnId) -> Client {
    let notices = Arc::new(Mutex::new(Vec::new()));
    let closed = Arc::new(AtomicBool::new(false));
    let (n, c) = (notices.clone(), closed.clone());
    Client {
        conn: Arc::new(Conn {
            id,
            peer: format!("client{id}"),
            fds: FdTable::default(),
            notice: Box::new(move |x| n.lock().unwrap().push(x)),
            close: Box::new(move || c.store(true, Ordering::SeqCst)),
        }),
        notices,
        closed,
    }
}

fn leases(timeout: Duration) -> Arc<Leases> {
    let terms = Terms {
        lease: Some(Duration::from_secs(600)),
        recall_timeout: timeout,
        claims: true,
    };
    Arc::new(Leases::new(Arc::new(Anything), terms))
}

fn setattr(gfid: Gfid) -> Fop {
    Fop::Setattr {
        gfid,
        set: Default::default(),
    }
}

/// `fop` from `c`, going on in a task of its own.
fn start(l: &Arc<Leases>, c: &Client, fop: Fop) -> tokio::task::JoinHandle<FsResult<Reply>> {
    let (l, conn) = (l.clone(), c.conn.clone());
    tokio::spawn(async move { l.call(&conn, &Ctx::root(), fop).await })
}

fn recall_ids(c: &Client) -> Vec<(u64, Gfid, Option<Name>)> {
    c.notices
        .lock()
        .unwrap()
        .iter()
        .filter_map(|n| match n {
            Notice::Recall { id, gfid, name, .. } => Some((*id, *gfid, name.clone())),
            _ => None,
        })
        .collect()
}

/// Makes directory `d` in the root, as `dir`.
fn mkdir_d(dir: Gfid) -> Fop {
    Fop::Mkdir {
        parent: Gfid::ROOT,
        name: Name::new("d").unwrap(),
        gfid: dir,
        mode: 0o755,
        umask: 0,
    }
}

#[tokio::test]
async fn a_directory_is_claimed_by_its_maker_until_another_connection_names_it() {
    let l = leases(Duration::from_secs(30));
    let (a, b) = (client(1), client(2));
    l.connect(&a.conn);
    l.connect(&b.conn);
    let dir = Gfid::random();
    start(&l, &a, mkdir_d(dir)).await.unwrap().unwrap();
    // The maker's own requests in it recall nothing.
    let lookup = |n: &str| Fop::Lookup {
        parent: dir,
        name: Name::new(n).unwrap(),
    };
    start(&l, &a, lookup("x")).await.unwrap().unwrap();
    assert!(recall_ids(&a).is_empty());
    // Another connection's mere lookup in it waits for the maker.
    let look = start(&l, &b, lookup("x"));
    wait_recalls(&a, 1).await;
    let (id, gfid, name) = recall_ids(&a)[0].clone();
    assert_eq!((gfid, name), (dir, None));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !look.is_finished(),
        "the lookup went on before the maker answered"
    );
    l.recalled(&a.conn, id);
    look.await.unwrap().unwrap();
    // The claim is over: a second lookup recalls nothing more.
    start(&l, &b, lookup("y")).await.unwrap().unwrap();
    assert_eq!(recall_ids(&a).len(), 1);
    assert!(!a.closed.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_change_waits_until_the_other_cacher_has_dropped_its_copy() {
    let l = leases(Duration::from_secs(30));
    let (a, b) = (client(1), client(2));
    l.connect(&a.conn);
    l.connect(&b.conn);
    let (f, dir) = (Gfid::random(), Gfid::random());
    let cx = Ctx::root();
    // b caches the file's attributes, a missing name in dir.
    l.call(&b.conn, &cx, Fop::Getattr { gfid: f })
        .await
        .unwrap();
    let missing = Fop::Lookup {
        parent: dir,
        name: Name::new("x").unwrap(),
    };
    l.call(&b.conn, &cx, missing).await.unwrap();
    // a's own reads never recall a's own leases.
    l.call(&a.conn, &cx, Fop::Getattr { gfid: f })
        .await
        .unwrap();

    let change = start(&l, &a, setattr(f));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!change.is_finished(), "the change waits for b");
    let r = recall_ids(&b);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].1, r[0].2.clone()), (f, None));
    assert!(recall_ids(&a).is_empty());
    l.recalled(&b.conn, r[0].0);
    change.await.unwrap().unwrap();

    // A lease recalled for a change of attributes stays (b may
    // still cache names under a directory's): the next change is
    // recalled too. One recalled for a write ends.
    let change = start(&l, &a, setattr(f));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = recall_ids(&b);
    assert_eq!(r.len(), 2);
    l.recalled(&b.conn, r[1].0);
    change.await.unwrap().unwrap();
    let write = Fop::Write {
        gfid: f,
        fh: 1,
        offset: 0,
        data: bytes::Bytes::from_static(b"x"),
        grow: 0,
        reserve: false,
    };
    let change = start(&l, &a, write.clone());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = recall_ids(&b);
    assert_eq!(r.len(), 3);
    l.recalled(&b.conn, r[2].0);
    change.await.unwrap().unwrap();
    l.call(&a.conn, &cx, write).await.unwrap();
    assert_eq!(recall_ids(&b).len(), 3);

    // A new name in dir recalls b's missing name.
    let create = Fop::Mknod {
        parent: dir,
        name: Name::new("x").unwrap(),
        gfid: Gfid::random(),
        mode: libc::S_IFREG | 0o644,
        umask: 0,
        rdev: 0,
        linkto: None,
    };
    let change = start(&l, &a, create);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = recall_ids(&b);
    assert_eq!(r.len(), 4);
    assert_eq!(
        (r[3].1, r[3].2.clone()),
        (dir, Some(Name::new("x").unwrap()))
    );
    // A connection that goes away answers nothing and holds nothing up.
    l.disconnect(&b.conn);
    change.await.unwrap().unwrap();
    assert!(!b.closed.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_directory_stays_leased_after_a_recall_of_one_of_its_names() {
    let l = leases(Duration::from_secs(30));
    let (a, b) = (client(1), client(2));
    l.connect(&a.conn);
    l.connect(&b.conn);
    let dir = Gfid::random();
    let cx = Ctx::root();
    let n = |s: &str| Name::new(s).unwrap();
    // b caches two names of dir.
    for name in ["x", "y"] {
        let look = Fop::Lookup {
            parent: dir,
            name: n(name),
        };
        l.call(&b.conn, &cx, look).await.unwrap();
    }
    // a changes one, then the other: b is recalled for each, with no
    // answer of its own in between (it still caches "y" after the
    // recall of "x").
    for name in ["x", "y"] {
        let unlink = Fop::Unlink {
            parent: dir,
            name: n(name),
        };
        let change = start(&l, &a, unlink);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let r = recall_ids(&b);
        let last = r.last().expect("b was recalled");
        assert_eq!((last.1, last.2.clone()), (dir, Some(n(name))));
        l.recalled(&b.conn, last.0);
        change.await.unwrap().unwrap();
    }
    assert_eq!(recall_ids(&b).len(), 2);
}

#[tokio::test]
async fn a_cacher_that_does_not_answer_is_disconnected_after_the_timeout() {
    let l = leases(Duration::from_millis(200));
    let (a, b) = (client(1), client(2));
    l.connect(&a.conn);
    l.connect(&b.conn);
    let f = Gfid::random();
    let cx = Ctx::root();
    l.call(&b.conn, &cx, Fop::Getattr { gfid: f })
        .await
        .unwrap();
    let t = Instant::now();
    let write = Fop::Write {
        gfid: f,
        fh: 1,
        offset: 0,
        data: bytes::Bytes::from_static(b"x"),
        grow: 0,
        reserve: false,
    };
    l.call(&a.conn, &cx, write).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(200));
    assert!(b.closed.load(Ordering::SeqCst), "b was disconnected");
    assert!(!a.closed.load(Ordering::SeqCst));
}

#[tokio::test]
async fn without_leases_nothing_is_noted_or_recalled() {
    let terms = Terms {
        lease: None,
        recall_timeout: Duration::from_secs(30),
        claims: false,
    };
    let l = Leases::new(Arc::new(Anything), terms);
    let (a, b) = (client(1), client(2));
    l.connect(&a.conn);
    l.connect(&b.conn);
    let f = Gfid::random();
    let cx = Ctx::root();
    l.call(&b.conn, &cx, Fop::Getattr { gfid: f })
        .await
        .unwrap();
    l.call(&a.conn, &cx, setattr(f)).await.unwrap();
    assert!(recall_ids(&b).is_empty());
}

#[tokio::test]
async fn a_read_granted_while_a_change_waited_is_recalled_again_after_it() {
    let l = leases(Duration::from_secs(30));
    let (a, b, c) = (client(1), client(2), client(3));
    for x in [&a, &b, &c] {
        l.connect(&x.conn);
    }
    let f = Gfid::random();
    let cx = Ctx::root();
    l.call(&b.conn, &cx, Fop::Getattr { gfid: f })
        .await
        .unwrap();
    let change = start(&l, &a, setattr(f));
    tokio::time::sleep(Duration::from_millis(50)).await;
    // c reads while the change waits for b: c's answer may be the old state.
    l.call(&c.conn, &cx, Fop::Getattr { gfid: f })
        .await
        .unwrap();
    let rb = recall_ids(&b);
    l.recalled(&b.conn, rb[0].0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let rc = recall_ids(&c);
    assert_eq!(rc.len(), 1, "c is recalled once the change is done");
    assert!(
        !change.is_finished(),
        "and the change is answered after that"
    );
    l.recalled(&c.conn, rc[0].0);
    change.await.unwrap().unwrap();
}

/// Opens files (each handle a new number), answers everything else.
#[derive(Default)]
struct Files(AtomicU64);

#[async_trait]
impl BrickXlator for Files {
    async fn call(&self, _: &Arc<Conn>, _: &Ctx, fop: Fop) -> FsResult<Reply> {
        Ok(match fop {
            Fop::Open { .. } => Reply::Opened {
                fh: self.0.fetch_add(1, Ordering::Relaxed) + 1,
            },
            _ => Reply::Ok,
        })
    }
}

/// A user's request (a mount's), not mortar's own.
fn user() -> Ctx {
    Ctx {
        internal: false,
        ..Ctx::root()
    }
}

fn open_for_writing(l: &Arc<Leases>, c: &Client, gfid: Gfid) -> tokio::task::JoinHandle<u64> {
    let (l, conn) = (l.clone(), c.conn.clone());
    tokio::spawn(async move {
        let open = Fop::Open {
            gfid,
            flags: libc::O_WRONLY,
        };
        match l.call(&conn, &user(), open).await {
            Ok(Reply::Opened { fh }) => fh,
            other => panic!("{other:?}"),
        }
    })
}

async fn wait_recalls(c: &Client, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while recall_ids(c).len() < n {
        assert!(Instant::now() < deadline, "no recall sent");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn files_leases() -> Arc<Leases> {
    let terms = Terms {
        lease: Some(Duration::from_secs(600)),
        recall_timeout: Duration::from_secs(30),
        claims: true,
    };
    Arc::new(Leases::new(Arc::new(Files::default()), terms))
}

#[tokio::test]
async fn a_file_opened_for_writing_is_claimed_until_another_connection_names_it() {
    let l = files_leases();
    let (a, b) = (client(1), client(2));
    l.connect(&a.conn);
    l.connect(&b.conn);
    let f = Gfid::random();
    let fh = open_for_writing(&l, &a, f).await.unwrap();
    // Released (the writer's close may still have writes on their way):
    // the claim stays.
    l.call(&a.conn, &user(), Fop::Release { gfid: f, fh })
        .await
        .unwrap();
    // Another connection's look at the file waits for the writer.
    let look = start(&l, &b, Fop::Getattr { gfid: f });
    wait_recalls(&a, 1).await;
    let (id, gfid, name) = recall_ids(&a)[0].clone();
    assert_eq!((gfid, name), (f, None));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !look.is_finished(),
        "the look went on before the writer answered"
    );
    l.recalled(&a.conn, id);
    look.await.unwrap().unwrap();
    // Over: the next look recalls nothing.
    start(&l, &b, Fop::Getattr { gfid: f })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recall_ids(&a).len(), 1);
    // Claimed again by a new open, which first ends what b caches.
    let open = open_for_writing(&l, &a, f);
    wait_recalls(&b, 1).await;
    l.recalled(&b.conn, recall_ids(&b)[0].0);
    open.await.unwrap();
    let look = start(&l, &b, Fop::Getattr { gfid: f });
    wait_recalls(&a, 2).await;
    l.recalled(&a.conn, recall_ids(&a)[1].0);
    look.await.unwrap().unwrap();
    assert!(!a.closed.load(Ordering::SeqCst) && !b.closed.load(Ordering::SeqCst));
}

#[tokio::test]
async fn every_look_at_a_file_whose_claim_is_ending_waits_for_the_writers_answer() {
    let l = files_leases();
    let (a, b, c) = (client(1), client(2), client(3));
    for x in [&a, &b, &c] {
        l.connect(&x.conn);
    }
    let f = Gfid::random();
    open_for_writing(&l, &a, f).await.unwrap();
    // b's look ends the claim; c's, and b's second, come before the
    // writer has answered: they wait for the same answer (no second
    // recall).
    let first = start(&l, &b, Fop::Getattr { gfid: f });
    wait_recalls(&a, 1).await;
    let looks = [
        start(&l, &c, Fop::Getattr { gfid: f }),
        start(
            &l,
            &b,
            Fop::Read {
                gfid: f,
                fh: 0,
                offset: 0,
                size: 10,
            },
        ),
    ];
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(looks.iter().all(|h| !h.is_finished()), "a look went on");
    assert!(!first.is_finished());
    assert_eq!(recall_ids(&a).len(), 1);
    l.recalled(&a.conn, recall_ids(&a)[0].0);
    first.await.unwrap().unwrap();
    for h in looks {
        h.await.unwrap().unwrap();
    }
    // Nothing is left ending: the next look waits for nobody.
    start(&l, &c, Fop::Getattr { gfid: f })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(l.claimed.load(Ordering::Acquire), 0);
}

#[tokio::test]
async fn an_open_for_writing_ends_the_leases_others_hold_first() {
    let l = files_leases();
    let (a, b) = (client(1), client(2));
    l.connect(&a.conn);
    l.connect(&b.conn);
    let f = Gfid::random();
    start(&l, &b, Fop::Getattr { gfid: f })
        .await
        .unwrap()
        .unwrap();
    let open = open_for_writing(&l, &a, f);
    wait_recalls(&b, 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !open.is_finished(),
        "the open went on while b cached the file"
    );
    l.recalled(&b.conn, recall_ids(&b)[0].0);
    open.await.unwrap();
    // mortar's own opens (heal, rebalance) claim nothing.
    let g = Gfid::random();
    let open = Fop::Open {
        gfid: g,
        flags: libc::O_RDWR,
    };
    l.call(&a.conn, &Ctx::root(), open).await.unwrap();
    start(&l, &b, Fop::Getattr { gfid: g })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recall_ids(&a).len(), 0);
}

/// Answers every lookup with one object.
struct Finds(Gfid);

#[async_trait]
impl BrickXlator for Finds {
    async fn call(&self, _: &Arc<Conn>, _: &Ctx, fop: Fop) -> FsResult<Reply> {
        Ok(match fop {
            Fop::Lookup { .. } => Reply::Entry(mortar_core::Entry::found(
                mortar_core::Attr::plain_file(self.0, 0),
            )),
            _ => Reply::Ok,
        })
    }
}

#[tokio::test]
async fn a_lookup_telling_of_a_claimed_directory_waits_for_its_maker_without_file_claims() {
    let terms = Terms {
        lease: Some(Duration::from_secs(600)),
        recall_timeout: Duration::from_secs(30),
        claims: false,
    };
    let dir = Gfid::random();
    let l = Arc::new(Leases::new(Arc::new(Finds(dir)), terms));
    let (a, b) = (client(1), client(2));
    l.connect(&a.conn);
    l.connect(&b.conn);
    start(&l, &a, mkdir_d(dir)).await.unwrap().unwrap();
    // A lookup in the root whose answer is the claimed directory.
    let lookup = Fop::Lookup {
        parent: Gfid::ROOT,
        name: Name::new("d").unwrap(),
    };
    let look = start(&l, &b, lookup);
    wait_recalls(&a, 1).await;
    assert_eq!(recall_ids(&a)[0].1, dir);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!look.is_finished(), "answered before the maker landed");
    l.recalled(&a.conn, recall_ids(&a)[0].0);
    look.await.unwrap().unwrap();
}
