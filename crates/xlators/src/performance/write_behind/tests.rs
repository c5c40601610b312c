use super::*;
use mortar_core::Attr;
use std::time::Duration;

/// Keeps one file's bytes; writes wait until the test lets them go,
/// and can be made to fail.
struct Disk {
    data: Mutex<Vec<u8>>,
    /// Writes received, as (offset, len), in the order they arrived.
    writes: Mutex<Vec<(u64, usize)>>,
    gate: tokio::sync::Semaphore,
    fail: std::sync::atomic::AtomicBool,
    /// Handles given so far.
    opens: AtomicU64,
}

#[async_trait]
impl Xlator for Disk {
    fn name(&self) -> String {
        "disk".into()
    }
    async fn call(&self, _: &Ctx, fop: Fop) -> FsResult<Reply> {
        match fop {
            Fop::Write { offset, data, .. } => {
                self.writes.lock().unwrap().push((offset, data.len()));
                self.gate.acquire().await.unwrap().forget();
                if self.fail.load(Ordering::Relaxed) {
                    return Err(FsError::errno(libc::ENOSPC));
                }
                let mut d = self.data.lock().unwrap();
                let end = offset as usize + data.len();
                if d.len() < end {
                    d.resize(end, 0);
                }
                d[offset as usize..end].copy_from_slice(&data);
                Ok(Reply::Written(data.len() as u32, None))
            }
            Fop::Getattr { gfid } | Fop::Lookup { parent: gfid, .. } => {
                let size = self.data.lock().unwrap().len() as u64;
                let a = Attr::plain_file(gfid, size);
                Ok(match fop {
                    Fop::Getattr { .. } => Reply::Attr(a),
                    _ => Reply::Entry(mortar_core::Entry::found(a)),
                })
            }
            Fop::Open { .. } => Ok(Reply::Opened {
                fh: 7 + self.opens.fetch_add(1, Ordering::Relaxed),
            }),
            _ => Ok(Reply::Ok),
        }
    }
}

fn rig() -> (Arc<Disk>, Arc<WriteBehind>) {
    let disk = Arc::new(Disk {
        data: Mutex::default(),
        writes: Mutex::default(),
        gate: tokio::sync::Semaphore::new(0),
        fail: Default::default(),
        opens: Default::default(),
    });
    let wb = WriteBehind::new("wb".into(), Child::standalone(disk.clone()));
    (disk, wb)
}

fn write(gfid: Gfid, offset: u64, b: &[u8]) -> Fop {
    Fop::Write {
        gfid,
        fh: 1,
        offset,
        data: bytes::Bytes::copy_from_slice(b),
        grow: 0,
        reserve: false,
    }
}

fn fsync(gfid: Gfid) -> Fop {
    Fop::Fsync {
        gfid,
        fh: 1,
        datasync: false,
    }
}

async fn settled(wb: &Arc<WriteBehind>) {
    tokio::time::timeout(Duration::from_secs(5), wb.settle())
        .await
        .expect("writes land");
}

#[tokio::test]
async fn writes_are_answered_at_once_and_joined_while_one_is_out() {
    let (disk, wb) = rig();
    let (f, cx) = (Gfid::random(), Ctx::root());
    for i in 0..64u64 {
        let r = wb.call(&cx, write(f, i * 4, b"abcd")).await.unwrap();
        assert!(matches!(r, Reply::Written(4, None)));
    }
    // The first went alone; the rest waited behind it, joined.
    disk.gate.add_permits(1000);
    settled(&wb).await;
    let writes = disk.writes.lock().unwrap().clone();
    assert_eq!(writes, vec![(0, 4), (4, 252)]);
    assert_eq!(disk.data.lock().unwrap().len(), 256);
    assert_eq!(&disk.data.lock().unwrap()[..8], b"abcdabcd");
}

#[tokio::test]
async fn overlapping_writes_land_in_the_order_they_came() {
    let (disk, wb) = rig();
    let (f, cx) = (Gfid::random(), Ctx::root());
    wb.call(&cx, write(f, 0, b"old old")).await.unwrap();
    wb.call(&cx, write(f, 100, b"elsewhere")).await.unwrap();
    wb.call(&cx, write(f, 4, b"new")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Two are out (they do not overlap); the third waits for the first.
    assert_eq!(disk.writes.lock().unwrap().len(), 2);
    disk.gate.add_permits(1000);
    settled(&wb).await;
    assert_eq!(&disk.data.lock().unwrap()[..7], b"old new");
}

#[tokio::test]
async fn an_error_is_reported_once_by_the_next_fsync() {
    let (disk, wb) = rig();
    let (f, cx) = (Gfid::random(), Ctx::root());
    disk.fail.store(true, Ordering::Relaxed);
    disk.gate.add_permits(1000);
    wb.call(&cx, write(f, 0, b"lost")).await.unwrap();
    let e = wb.call(&cx, fsync(f)).await.unwrap_err();
    assert!(e.is(libc::ENOSPC));
    wb.call(&cx, fsync(f)).await.unwrap();
    assert!(wb.files.lock().unwrap().is_empty(), "nothing kept");
}

/// A write that failed behind is reported by fsync, never by the next
/// write: that may be the rest of the same write(2), which the kernel
/// would then answer short, hiding the failed first part.
#[tokio::test]
async fn an_error_is_not_reported_by_the_next_write() {
    let (disk, wb) = rig();
    let (f, cx) = (Gfid::random(), Ctx::root());
    disk.fail.store(true, Ordering::Relaxed);
    disk.gate.add_permits(1000);
    wb.call(&cx, write(f, 0, b"first")).await.unwrap();
    settled(&wb).await;
    disk.fail.store(false, Ordering::Relaxed);
    wb.call(&cx, write(f, 5, b" part")).await.unwrap();
    assert!(wb.call(&cx, fsync(f)).await.unwrap_err().is(libc::ENOSPC));
}

/// A forked process's close-on-exec flushes the file too: the error
/// is the application's fsync's to report as well (the rolling-restart
/// test saw a flush take it, and the fsync answer success).
#[tokio::test]
async fn a_flush_reports_an_error_and_leaves_it_for_the_fsync() {
    let (disk, wb) = rig();
    let (f, cx) = (Gfid::random(), Ctx::root());
    disk.fail.store(true, Ordering::Relaxed);
    disk.gate.add_permits(1000);
    wb.call(&cx, write(f, 0, b"lost")).await.unwrap();
    let flush = Fop::Flush { gfid: f, fh: 1 };
    assert!(wb
        .call(&cx, flush.clone())
        .await
        .unwrap_err()
        .is(libc::ENOSPC));
    assert!(wb.call(&cx, fsync(f)).await.unwrap_err().is(libc::ENOSPC));
    wb.call(&cx, fsync(f)).await.unwrap();
    wb.call(&cx, flush).await.unwrap();
    assert!(wb.files.lock().unwrap().is_empty(), "nothing kept");
}

/// A reader's close of the file (its release) leaves the failure of the
/// writer's write for the writer's fsync: session 52 saw a write lost
/// behind while the writer's fsync and close succeeded.
#[tokio::test]
async fn another_handles_release_leaves_the_error_for_the_writers_fsync() {
    let (disk, wb) = rig();
    let (f, cx) = (Gfid::random(), Ctx::root());
    let open = |flags| Fop::Open { gfid: f, flags };
    let Reply::Opened { fh: writer } = wb.call(&cx, open(libc::O_WRONLY)).await.unwrap() else {
        panic!("not opened")
    };
    let Reply::Opened { fh: reader } = wb.call(&cx, open(libc::O_RDONLY)).await.unwrap() else {
        panic!("not opened")
    };
    disk.fail.store(true, Ordering::Relaxed);
    disk.gate.add_permits(1000);
    let data = bytes::Bytes::from_static(b"lost");
    let w = Fop::Write {
        gfid: f,
        fh: writer,
        offset: 0,
        data,
        grow: 0,
        reserve: false,
    };
    wb.call(&cx, w).await.unwrap();
    settled(&wb).await;
    let (flush, release) = (
        Fop::Flush {
            gfid: f,
            fh: reader,
        },
        Fop::Release {
            gfid: f,
            fh: reader,
        },
    );
    wb.call(&cx, flush).await.unwrap();
    wb.call(&cx, release).await.unwrap();
    let fsync = |fh| Fop::Fsync {
        gfid: f,
        fh,
        datasync: false,
    };
    let e = wb.call(&cx, fsync(writer)).await.unwrap_err();
    assert!(e.is(libc::ENOSPC), "the writer is told");
    wb.call(&cx, fsync(writer)).await.unwrap();
    // A handle opened since is not told of it.
    let Reply::Opened { fh: later } = wb.call(&cx, open(libc::O_WRONLY)).await.unwrap() else {
        panic!("not opened")
    };
    wb.call(&cx, fsync(later)).await.unwrap();
}

#[tokio::test]
async fn reads_and_stats_wait_and_lookups_report_the_size_owed() {
    let (disk, wb) = rig();
    let (f, cx) = (Gfid::random(), Ctx::root());
    wb.call(&cx, write(f, 0, b"0123456789")).await.unwrap();
    // A lookup answered while the write is out says 10 bytes.
    let name = mortar_core::Name::new("x").unwrap();
    let r = wb.call(&cx, Fop::Lookup { parent: f, name }).await.unwrap();
    assert_eq!(r.into_attr().unwrap().size, 10);
    // Nothing is at hand while a write is out, and a getattr waits.
    assert!(wb.cached(&cx, &Fop::Getattr { gfid: f }).is_none());
    let wb2 = wb.clone();
    let stat = tokio::spawn(async move { wb2.call(&Ctx::root(), Fop::Getattr { gfid: f }).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!stat.is_finished());
    disk.gate.add_permits(1000);
    let a = stat.await.unwrap().unwrap().into_attr().unwrap();
    assert_eq!((a.size, disk.data.lock().unwrap().len()), (10, 10));
}

#[tokio::test]
async fn a_full_window_makes_the_writer_wait() {
    let (disk, wb) = rig();
    let mut o = mortar_core::Options::new();
    o.insert(WINDOW_SIZE.key.into(), "8KB".into());
    wb.reconfigure(&o);
    let (f, cx) = (Gfid::random(), Ctx::root());
    let page = vec![7u8; 4096];
    wb.call(&cx, write(f, 0, &page)).await.unwrap();
    wb.call(&cx, write(f, 4096, &page)).await.unwrap();
    let wb2 = wb.clone();
    let third = tokio::spawn(async move { wb2.call(&Ctx::root(), write(f, 8192, &page)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!third.is_finished(), "the window is full");
    disk.gate.add_permits(1000);
    third.await.unwrap().unwrap();
    settled(&wb).await;
    assert_eq!(disk.data.lock().unwrap().len(), 12288);
}

#[tokio::test]
async fn appends_go_one_at_a_time() {
    let (disk, wb) = rig();
    let (f, cx) = (Gfid::random(), Ctx::root());
    let open = Fop::Open {
        gfid: f,
        flags: libc::O_WRONLY | libc::O_APPEND,
    };
    let fh = wb.call(&cx, open).await.unwrap().into_fh().unwrap();
    for (i, line) in [&b"1\n"[..], b"2\n", b"3\n"].iter().enumerate() {
        let w = Fop::Write {
            gfid: f,
            fh,
            offset: 2 * i as u64 + 100,
            data: bytes::Bytes::copy_from_slice(line),
            grow: 0,
            reserve: false,
        };
        wb.call(&cx, w).await.unwrap();
    }
    // Two writes of another handle, apart from the appends' offsets,
    // wait too: an append may write anywhere.
    wb.call(&cx, write(f, 0, b"x")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(disk.writes.lock().unwrap().len(), 1, "one append out");
    disk.gate.add_permits(1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    // The two queued appends went joined, still alone.
    assert_eq!(disk.writes.lock().unwrap()[1], (102, 4));
    assert_eq!(disk.writes.lock().unwrap().len(), 2);
    disk.gate.add_permits(1000);
    settled(&wb).await;
    assert_eq!(disk.writes.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn all_files_together_stay_within_their_room() {
    let (disk, wb) = rig();
    let cx = Ctx::root();
    let big = vec![1u8; 1 << 20];
    // 64 files of 1 MiB fill the room; the 65th waits.
    for _ in 0..ALL_FILES_MAX >> 20 {
        wb.call(&cx, write(Gfid::random(), 0, &big)).await.unwrap();
    }
    let wb2 = wb.clone();
    let more = tokio::spawn(async move {
        wb2.call(&Ctx::root(), write(Gfid::random(), 0, &[1u8; 4096]))
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!more.is_finished(), "no room left");
    disk.gate.add_permits(1);
    more.await.unwrap().unwrap();
    disk.gate.add_permits(1000);
    settled(&wb).await;
    assert_eq!(wb.room.available_permits(), ALL_FILES_MAX);
}

#[tokio::test]
async fn sync_handles_write_through() {
    let (disk, wb) = rig();
    let (f, cx) = (Gfid::random(), Ctx::root());
    let fh = wb
        .call(
            &cx,
            Fop::Open {
                gfid: f,
                flags: libc::O_WRONLY | libc::O_SYNC,
            },
        )
        .await
        .unwrap()
        .into_fh()
        .unwrap();
    let wb2 = wb.clone();
    let w = tokio::spawn(async move {
        let fop = Fop::Write {
            gfid: f,
            fh,
            offset: 0,
            data: bytes::Bytes::from_static(b"sync"),
            grow: 0,
            reserve: false,
        };
        wb2.call(&Ctx::root(), fop).await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!w.is_finished(), "answered only once it landed");
    disk.gate.add_permits(1);
    w.await.unwrap().unwrap();
    assert_eq!(&disk.data.lock().unwrap()[..], b"sync");
}

#[tokio::test]
async fn switched_off_it_writes_through_after_the_writes_behind() {
    let (disk, wb) = rig();
    let (f, cx) = (Gfid::random(), Ctx::root());
    wb.call(&cx, write(f, 0, b"behind")).await.unwrap();
    let off = [(WRITE_BEHIND.key.to_string(), "off".to_string())].into();
    wb.reconfigure(&off);
    let wb2 = wb.clone();
    let w = tokio::spawn(async move { wb2.call(&Ctx::root(), write(f, 0, b"though")).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!w.is_finished(), "answered only once it landed");
    disk.gate.add_permits(2);
    w.await.unwrap().unwrap();
    assert_eq!(&disk.data.lock().unwrap()[..], b"though");
    assert_eq!(disk.writes.lock().unwrap().len(), 2);
}

/// With flush-behind on (and leases): the bricks claim files opened for
/// writing for this mount.
fn flushing_behind(wb: &Arc<WriteBehind>) {
    let mut o = mortar_core::Options::new();
    o.insert("performance.flush-behind".into(), "on".into());
    wb.reconfigure(&o);
}

/// Opens `gfid` for writing and writes `data` at its start: the handle.
async fn open_and_write(wb: &Arc<WriteBehind>, gfid: Gfid, data: &[u8]) -> u64 {
    let (open, cx) = (
        Fop::Open {
            gfid,
            flags: libc::O_WRONLY,
        },
        Ctx::root(),
    );
    let Reply::Opened { fh } = wb.call(&cx, open).await.unwrap() else {
        panic!("not opened")
    };
    wb.call(&cx, write(gfid, 0, data)).await.unwrap();
    fh
}

/// Whether a close of `fh` is still waiting after 50 ms.
async fn close_waits(wb: &Arc<WriteBehind>, gfid: Gfid, fh: u64) -> bool {
    let cx = Ctx::root();
    let flush = wb.call(&cx, Fop::Flush { gfid, fh });
    tokio::time::timeout(Duration::from_millis(50), flush)
        .await
        .is_err()
}

/// A brick's recall of `gfid`, ending this mount's claim on it; the flag
/// is set once it is answered.
fn recall(gfid: Gfid) -> (Event, Arc<std::sync::atomic::AtomicBool>) {
    recall_of(gfid, true)
}

/// A brick's recall of `gfid`, of a claim or of a lease alone.
fn recall_of(gfid: Gfid, claim: bool) -> (Event, Arc<std::sync::atomic::AtomicBool>) {
    let answered = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let a = answered.clone();
    let ev = Event::Recall {
        gfid,
        name: None,
        claim,
        ack: mortar_core::xlator::Ack::new(move || a.store(true, Ordering::SeqCst)),
    };
    (ev, answered)
}

#[tokio::test]
async fn a_claimed_file_closes_behind_and_a_recall_waits_for_its_writes() {
    let (disk, wb) = rig();
    flushing_behind(&wb);
    let (f, cx) = (Gfid::random(), Ctx::root());
    let fh = open_and_write(&wb, f, b"made").await;
    // The close returns with the write still held at the gate.
    let flush = Fop::Flush { gfid: f, fh };
    tokio::time::timeout(Duration::from_secs(1), wb.call(&cx, flush))
        .await
        .expect("the close waited")
        .unwrap();
    assert!(disk.data.lock().unwrap().is_empty());
    // Another client names the file: the recall is answered once the
    // write has landed.
    let (ev, answered) = recall(f);
    drop(wb.notify(0, ev));
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(
        !answered.load(Ordering::SeqCst),
        "answered before the write"
    );
    disk.gate.add_permits(1);
    settled(&wb).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(answered.load(Ordering::SeqCst));
    assert_eq!(&disk.data.lock().unwrap()[..], b"made");
    // No longer claimed: the next close of the handle waits for its writes.
    wb.call(&cx, write(f, 0, b"more")).await.unwrap();
    assert!(
        close_waits(&wb, f, fh).await,
        "a close after the recall did not wait"
    );
    disk.gate.add_permits(10);
    settled(&wb).await;
}

#[tokio::test]
async fn a_recall_of_a_lease_alone_is_answered_at_once_and_leaves_the_claim() {
    let (disk, wb) = rig();
    flushing_behind(&wb);
    let (f, cx) = (Gfid::random(), Ctx::root());
    let fh = open_and_write(&wb, f, b"made").await;
    wb.call(&cx, Fop::Flush { gfid: f, fh }).await.unwrap();
    // Another client changes the file (its write holds the file's lock
    // while it waits for the answer): not waiting for our write, which
    // may need that lock.
    let (ev, answered) = recall_of(f, false);
    drop(wb.notify(0, ev));
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(answered.load(Ordering::SeqCst), "the answer waited");
    // Still claimed: the next close goes behind too.
    wb.call(&cx, write(f, 4, b"!")).await.unwrap();
    assert!(
        !close_waits(&wb, f, fh).await,
        "a recall of a lease ended the claim"
    );
    disk.gate.add_permits(10);
    settled(&wb).await;
    assert_eq!(&disk.data.lock().unwrap()[..], b"made!");
}

#[tokio::test]
async fn without_flush_behind_a_close_waits_for_the_writes() {
    let (disk, wb) = rig();
    let f = Gfid::random();
    let fh = open_and_write(&wb, f, b"held").await;
    assert!(close_waits(&wb, f, fh).await, "the close did not wait");
    disk.gate.add_permits(1);
    settled(&wb).await;
}

#[tokio::test]
async fn a_recall_is_answered_anyway_once_its_wait_is_over() {
    let (disk, wb) = rig();
    flushing_behind(&wb);
    *wb.recall_wait.lock().unwrap() = Duration::from_millis(100);
    let (f, cx) = (Gfid::random(), Ctx::root());
    let fh = open_and_write(&wb, f, b"stuck").await;
    wb.call(&cx, Fop::Flush { gfid: f, fh }).await.unwrap();
    // The write cannot land (another client holds what it needs): the
    // recall does not hold the other client for the bricks' whole timeout.
    let (ev, answered) = recall(f);
    drop(wb.notify(0, ev));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(answered.load(Ordering::SeqCst));
    disk.gate.add_permits(10);
    settled(&wb).await;
    assert_eq!(&disk.data.lock().unwrap()[..], b"stuck");
}
