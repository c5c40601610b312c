//! `performance/write-behind`: a write is answered from the mount's memory
//! and sent to the bricks behind the application's back, as a local file
//! system's page cache does. The application sees an error of a write sent
//! behind at its next fsync or close of that file, as it would from a local
//! file system: every handle open when the write failed is told, by its
//! next fsync, once, and so is a handle opened later while no fsync has
//! reported it (`errors.rs`); `fsync` waits until every write before
//! it has landed, so fsync still means durable on every replica that is
//! up.
//!
//! **Closes.** A close waits for the file's writes too, unless the bricks
//! claim the file for this mount (`performance.flush-behind`,
//! `brick::leases`, `claims.rs`): then it returns once the bricks have the
//! file's open (at once, after the first), and a recall of the file
//! (another client names it) is answered once the writes closed behind
//! have landed, so another mount still sees the data after close
//! (close-to-open).
//!
//! **Never at a write.** The kernel sends one `write(2)` as several
//! requests when it starts inside a page the kernel does not hold (one per
//! page). An error answered to a later request becomes a short write that
//! hides the earlier part's failure, and the application's write of the
//! rest then succeeds: an append acknowledged by write and fsync lost its
//! first bytes that way in the rolling-restart test.
//!
//! **Order.** Writes of one file are queued in the order they came. They
//! are sent from the head of the queue, several at once
//! (`SENDING_MAX`), never two that overlap, so that where writes overlap
//! the later one wins on the bricks as it did at the mount. A write that
//! continues one that is out waits for it to land, and is then sent joined
//! with those that continue it in turn (`JOIN_MAX`): a stream of 4 KiB
//! writes becomes a few large requests, one after the other.
//!
//! **Everything else sees the writes.** Operations whose answer depends on
//! the data (read, getattr, truncate and other setattrs, fallocate, lseek,
//! link, a checksum) wait until the writes of the file accepted before them
//! have landed. An answer that carries a file's attributes (a lookup, a
//! listing) while writes of it accepted before the request are still out
//! reports at least the size they make: otherwise the kernel would take an
//! older size than the one it was told by the writes, and an `O_APPEND`
//! write would go to the wrong place.
//!
//! **Appends.** A brick writes through an `O_APPEND` handle at the end of
//! its copy, whatever the offset (so that appends from several mounts all
//! land): writes of such a handle are sent one at a time, in order
//! (GlusterFS's write-behind orders them the same way).
//!
//! **Not behind.** Handles opened with `O_DIRECT`, `O_SYNC` or `O_DSYNC`
//! write through (after the file's queue). A file's queue holds at most
//! `performance.write-behind-window-size` bytes, and all files together
//! `ALL_FILES_MAX`; a write past either waits until some land.
//!
//! **Off.** A graph whose options turn `performance.write-behind` off
//! while the translator is in it (the NFS server pins it off: its clients
//! are answered only what the bricks hold) writes everything through.
//!
//! GlusterFS's write-behind (xlators/performance/write-behind) keeps the
//! same rules with a per-inode request list and "liabilities"; this one
//! keeps per file a queue, the writes out, and what failed.

use async_trait::async_trait;
use mortar_core::options::{Kind, Spec};
use mortar_core::{Child, Ctx, Event, Fop, FsError, FsResult, Gfid, Reply, Xlator};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod claims;
mod errors;

/// (Defined with the terms: whether the bricks claim files for closes
/// behind depends on it.)
pub use mortar_core::terms::{FLUSH_BEHIND, WRITE_BEHIND};

pub static WINDOW_SIZE: Spec = Spec {
    key: "performance.write-behind-window-size",
    kind: Kind::Size,
    default: "1MB",
    help: "How many bytes of one file's writes may wait to be sent; a write past that waits until earlier ones land.",
};

/// Writes of one file out to the bricks at once.
const SENDING_MAX: usize = 8;
/// The largest request queued writes are joined into.
const JOIN_MAX: usize = 1 << 20;
/// Bytes of all files' writes that may wait to be sent at once (a program
/// writing many files at a time does not make the mount grow without end).
const ALL_FILES_MAX: usize = 64 << 20;

/// One write accepted and not yet landed.
struct Queued {
    /// Its place in the order writes were accepted (all files).
    seq: u64,
    cx: Ctx,
    fh: u64,
    offset: u64,
    data: bytes::Bytes,
    /// Written at the end of the file, whatever the offset.
    append: bool,
    /// What it takes of `ALL_FILES_MAX` until it lands.
    charge: u32,
}

impl Queued {
    fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }

    /// The bytes it may touch (all of them for an append).
    fn range(&self) -> (u64, u64) {
        if self.append {
            (0, u64::MAX)
        } else {
            (self.offset, self.end())
        }
    }
}

#[derive(Default)]
struct FileState {
    /// Accepted, not sent yet, in order.
    queue: VecDeque<Queued>,
    /// Out to the bricks: the byte ranges, by the first seq of each.
    sending: BTreeMap<u64, (u64, u64)>,
    /// Every accepted write not landed yet: seq → end offset.
    unlanded: BTreeMap<u64, u64>,
    /// Bytes accepted and not landed.
    bytes: usize,
    /// The writes accepted up to this seq were closed behind: a recall of
    /// the file is answered once they have landed.
    closed: u64,
}

impl FileState {
    /// True while a write accepted at or before `seq` has not landed.
    fn owes(&self, seq: u64) -> bool {
        self.unlanded.keys().next().is_some_and(|&s| s <= seq)
    }

    fn idle(&self) -> bool {
        self.unlanded.is_empty()
    }

    /// The size writes accepted at or before `seq`, still out, give the file.
    fn size_owed(&self, seq: u64) -> Option<u64> {
        self.unlanded.range(..=seq).map(|(_, &end)| end).max()
    }
}

struct File {
    state: Mutex<FileState>,
    /// Bumped whenever a write lands.
    landed: tokio::sync::watch::Sender<u64>,
}

impl File {
    fn new() -> Arc<File> {
        Arc::new(File {
            state: Mutex::default(),
            landed: tokio::sync::watch::channel(0).0,
        })
    }
}

pub struct WriteBehind {
    /// Itself, for the tasks that send writes behind.
    me: std::sync::Weak<WriteBehind>,
    name: String,
    child: Child,
    window: AtomicU64,
    /// `performance.write-behind` off: every write goes through.
    off: std::sync::atomic::AtomicBool,
    /// Files with writes out.
    files: Mutex<HashMap<Gfid, Arc<File>>>,
    /// Writes sent behind that failed, and which handles were told
    /// (locked after a file's state, never before).
    errors: Mutex<errors::Errors>,
    /// The last seq given to a write.
    accepted: AtomicU64,
    /// The child's handles that write through.
    write_through: Mutex<HashSet<u64>>,
    /// The child's handles opened to append.
    appending: Mutex<HashSet<u64>>,
    /// Room left under `ALL_FILES_MAX`, in bytes.
    room: tokio::sync::Semaphore,
    sent: AtomicU64,
    joined: AtomicU64,
    /// The files the bricks claim for this mount: closed behind.
    claims: Mutex<claims::Claims>,
    /// How long a recall waits for the writes closed behind before it is
    /// answered anyway (half the bricks' recall timeout, so that the
    /// bricks never disconnect this mount for it).
    recall_wait: Mutex<Duration>,
    closed_behind: AtomicU64,
}

fn writes_through(flags: i32) -> bool {
    flags & (libc::O_DIRECT | libc::O_SYNC | libc::O_DSYNC) != 0
}

impl WriteBehind {
    pub fn new(name: String, child: Child) -> Arc<WriteBehind> {
        Arc::new_cyclic(|me| WriteBehind {
            me: me.clone(),
            name,
            child,
            window: AtomicU64::new(1 << 20),
            off: Default::default(),
            files: Mutex::default(),
            errors: Mutex::default(),
            accepted: AtomicU64::new(0),
            write_through: Mutex::default(),
            appending: Mutex::default(),
            room: tokio::sync::Semaphore::new(ALL_FILES_MAX),
            sent: AtomicU64::new(0),
            joined: AtomicU64::new(0),
            claims: Mutex::default(),
            recall_wait: Mutex::new(Duration::from_secs(5)),
            closed_behind: AtomicU64::new(0),
        })
    }

    /// Marks the writes of `gfid` accepted up to `seq` closed behind: a
    /// recall of the file waits for them.
    fn closed_behind(&self, gfid: Gfid, seq: u64) {
        if let Some(f) = self.file(gfid) {
            let mut s = f.state.lock().unwrap();
            s.closed = s.closed.max(seq);
        }
        self.closed_behind.fetch_add(1, Ordering::Relaxed);
    }

    /// A close (flush) of handle `fh` of `gfid`. A file the bricks claim
    /// for this mount is closed without waiting for its writes: another
    /// client's first request naming it waits for them instead
    /// (`recalled`). A claim begins once the bricks have the open (sent
    /// ahead, `cluster::replicate::open`): the first close after it waits
    /// for that.
    async fn close(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let (gfid, fh) = (fop.gfid(), fop.fh().unwrap_or(0));
        let seq = self.accepted.load(Ordering::Acquire);
        let how = {
            let claims = self.claims.lock().unwrap();
            let how = claims.close(gfid, fh);
            if how == claims::Close::Behind {
                // (Under the claims' lock: a recall sees it.)
                self.closed_behind(gfid, seq);
            }
            how
        };
        match how {
            claims::Close::Behind => self.peek_error(gfid, fh).map(|()| Reply::Ok),
            claims::Close::AfterOpen { mark, sent } => {
                let res = self.child.call(cx, fop).await;
                let behind = res.is_ok() && {
                    let mut claims = self.claims.lock().unwrap();
                    let ok = claims.confirm(gfid, fh, mark, sent);
                    if ok {
                        self.closed_behind(gfid, seq);
                    }
                    ok
                };
                // (Not claimed after all: the writes land first.)
                if !behind {
                    self.settle_file(gfid).await;
                }
                self.peek_error(gfid, fh)?;
                res
            }
            claims::Close::Waiting => {
                self.settle_file(gfid).await;
                self.peek_error(gfid, fh)?;
                self.child.call(cx, fop).await
            }
        }
    }

    /// Another client names the file (or a connection was lost): it is no
    /// longer claimed for this mount. The recall's `ack` is held until the
    /// writes closed behind have landed, or `recall_wait` has passed.
    fn recalled(&self, gfid: Option<Gfid>, ack: Option<&mortar_core::xlator::Ack>) {
        let owed = {
            let mut claims = self.claims.lock().unwrap();
            claims.recalled(gfid);
            gfid.and_then(|g| self.file(g)).and_then(|f| {
                let (closed, owes) = {
                    let s = f.state.lock().unwrap();
                    (s.closed, s.owes(s.closed))
                };
                owes.then_some((f, closed))
            })
        };
        let (Some((f, closed)), Some(ack)) = (owed, ack) else {
            return;
        };
        let (me, ack) = (self.me.clone(), ack.clone());
        let wait = *self.recall_wait.lock().unwrap();
        tokio::spawn(async move {
            let Some(me) = me.upgrade() else { return };
            let landed = me.wait_for(&f, |s| !s.owes(closed));
            if tokio::time::timeout(wait, landed).await.is_err() {
                tracing::warn!(
                    xlator = %me.name,
                    gfid = %gfid.unwrap_or(Gfid::NULL),
                    "writes closed behind had not landed {wait:?} after another client asked for the file; answering the recall anyway"
                );
            }
            drop(ack);
        });
    }

    fn file(&self, gfid: Gfid) -> Option<Arc<File>> {
        self.files.lock().unwrap().get(&gfid).cloned()
    }

    /// Forgets a file with nothing out and nothing to report.
    fn tidy(&self, gfid: Gfid) {
        let mut files = self.files.lock().unwrap();
        if files
            .get(&gfid)
            .is_some_and(|f| f.state.lock().unwrap().idle())
        {
            files.remove(&gfid);
        }
    }

    /// Waits until `until(state)` holds for the file.
    async fn wait_for(&self, f: &File, until: impl Fn(&FileState) -> bool) {
        let mut rx = f.landed.subscribe();
        loop {
            if until(&f.state.lock().unwrap()) {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Waits until the writes of `gfid` closed behind have landed. An open
    /// of the file for writing does, before it goes down: the bricks may
    /// make it wait for another client's writes closed behind, and
    /// replicate keeps the file's lock state to itself while it waits (the
    /// lock is taken behind the open, `cluster::replicate::open`), so ours
    /// could not take the lock meanwhile, and a recall of the file, which
    /// waits for them, would not be answered (two mounts opening one file
    /// by turns).
    async fn settle_closed(&self, gfid: Gfid) {
        if let Some(f) = self.file(gfid) {
            let closed = f.state.lock().unwrap().closed;
            self.wait_for(&f, |s| !s.owes(closed)).await;
        }
    }

    /// Waits until every write of `gfid` accepted so far has landed.
    async fn settle_file(&self, gfid: Gfid) {
        let seq = self.accepted.load(Ordering::Acquire);
        if let Some(f) = self.file(gfid) {
            self.wait_for(&f, |s| !s.owes(seq)).await;
        }
    }

    /// Settles the file's writes, then reports a failure of one that
    /// handle `fh` was not told of yet, once.
    async fn drain(&self, gfid: Gfid, fh: u64) -> FsResult<()> {
        self.settle_file(gfid).await;
        self.errors
            .lock()
            .unwrap()
            .take(gfid, fh)
            .map_or(Ok(()), Err)
    }

    /// A failure handle `fh` was not told of, left for its fsync.
    fn peek_error(&self, gfid: Gfid, fh: u64) -> FsResult<()> {
        self.errors
            .lock()
            .unwrap()
            .unseen(gfid, fh)
            .map_or(Ok(()), Err)
    }

    async fn write(self: &Arc<Self>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let Fop::Write {
            gfid,
            fh,
            offset,
            data,
            grow,
            reserve,
        } = fop
        else {
            unreachable!()
        };
        // A write that lengthens the file as well (`grow`) or may use the
        // bricks' reserve (both written below a disperse translator only)
        // is not merged with others.
        if grow != 0
            || reserve
            || self.off.load(Ordering::Relaxed)
            || self.write_through.lock().unwrap().contains(&fh)
        {
            // (An error of the writes behind is left for fsync or close.)
            self.settle_file(gfid).await;
            let fop = Fop::Write {
                gfid,
                fh,
                offset,
                data,
                grow,
                reserve,
            };
            return self.child.call(cx, fop).await;
        }
        let len = data.len();
        // Room in the window (a write larger than the window waits for an
        // empty queue, and goes alone).
        if let Some(f) = self.file(gfid) {
            let window = self.window.load(Ordering::Relaxed) as usize;
            self.wait_for(&f, |s| s.bytes == 0 || s.bytes + len <= window)
                .await;
        }
        let charge = len.min(ALL_FILES_MAX) as u32;
        match self.room.acquire_many(charge).await {
            Ok(p) => p.forget(),
            Err(_) => return Err(FsError::errno(libc::EIO)),
        }
        // Queued under the map's lock, so that the file cannot be tidied
        // away in between.
        let f = {
            let mut files = self.files.lock().unwrap();
            let f = files.entry(gfid).or_insert_with(File::new).clone();
            let mut s = f.state.lock().unwrap();
            let seq = self.accepted.fetch_add(1, Ordering::AcqRel) + 1;
            let q = Queued {
                seq,
                cx: cx.clone(),
                fh,
                offset,
                data,
                append: self.appending.lock().unwrap().contains(&fh),
                charge,
            };
            s.unlanded.insert(seq, q.end());
            s.bytes += len;
            s.queue.push_back(q);
            drop(s);
            f
        };
        self.pump(gfid, &f);
        Ok(Reply::Written(len as u32, None))
    }

    /// Sends what may go from the head of the file's queue.
    fn pump(self: &Arc<Self>, gfid: Gfid, f: &Arc<File>) {
        loop {
            let batch = {
                let mut s = f.state.lock().unwrap();
                if s.sending.len() >= SENDING_MAX {
                    return;
                }
                let Some(head) = s.queue.front() else { return };
                let (start, end) = head.range();
                // Never two that overlap; and a write that continues one
                // out waits for it, to go joined with those behind it.
                if s.sending
                    .values()
                    .any(|&(a, b)| a < end && start < b || b == start)
                {
                    return;
                }
                let mut batch = vec![s.queue.pop_front().unwrap()];
                let mut size = batch[0].data.len();
                while let Some(next) = s.queue.front() {
                    let last = batch.last().unwrap();
                    let (a, b) = next.range();
                    if next.fh != last.fh
                        || next.offset != last.end()
                        || size + next.data.len() > JOIN_MAX
                        || s.sending.values().any(|&(x, y)| x < b && a < y)
                    {
                        break;
                    }
                    size += next.data.len();
                    batch.push(s.queue.pop_front().unwrap());
                }
                let range = match batch[0].append {
                    true => (0, u64::MAX),
                    false => (batch[0].offset, batch.last().unwrap().end()),
                };
                s.sending.insert(batch[0].seq, range);
                batch
            };
            let me = self.clone();
            let f = f.clone();
            tokio::spawn(async move { me.send(gfid, f, batch).await });
        }
    }

    async fn send(self: Arc<Self>, gfid: Gfid, f: Arc<File>, batch: Vec<Queued>) {
        let first = &batch[0];
        let data = if batch.len() == 1 {
            first.data.clone()
        } else {
            self.joined
                .fetch_add(batch.len() as u64 - 1, Ordering::Relaxed);
            let mut b = bytes::BytesMut::with_capacity(batch.iter().map(|q| q.data.len()).sum());
            for q in &batch {
                b.extend_from_slice(&q.data);
            }
            b.freeze()
        };
        let len = data.len();
        let fop = Fop::Write {
            gfid,
            fh: first.fh,
            offset: first.offset,
            data,
            grow: 0,
            reserve: false,
        };
        self.sent.fetch_add(1, Ordering::Relaxed);
        // A slow brick, for the tests: `write-behind-send=return(MS)`.
        #[cfg(feature = "failpoints")]
        if let Some(Some(ms)) =
            fail::eval("write-behind-send", |ms| ms.and_then(|m| m.parse().ok()))
        {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let res = match self.child.call(&first.cx, fop).await {
            Ok(Reply::Written(n, _)) if n as usize == len => Ok(()),
            Ok(Reply::Written(n, _)) => Err(FsError::new(
                libc::EIO,
                format!("short write behind: {n} of {len} bytes"),
            )),
            Ok(other) => Err(mortar_core::fop::unexpected(other)),
            Err(e) => Err(e),
        };
        {
            let mut s = f.state.lock().unwrap();
            s.sending.remove(&first.seq);
            for q in &batch {
                s.unlanded.remove(&q.seq);
                s.bytes -= q.data.len();
                self.room.add_permits(q.charge as usize);
            }
            if let Err(e) = res {
                tracing::warn!(
                    %gfid,
                    offset = first.offset,
                    len,
                    "a write sent behind failed (reported at the file's next fsync or close): {e}"
                );
                // (Under the file's lock: a drain that sees the write
                // landed sees its failure too.)
                self.errors.lock().unwrap().failed(gfid, e);
            }
        }
        f.landed.send_modify(|n| *n += 1);
        self.pump(gfid, &f);
        self.tidy(gfid);
    }

    /// Passes `fop` on; its answer reports at least the sizes that writes
    /// accepted before it and still out will give (`owed_sizes`).
    async fn passed_on(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let seq = self.accepted.load(Ordering::Acquire);
        // A new file is placed leaving room for the writes held here
        // (`Ctx::behind`).
        let held = ALL_FILES_MAX.saturating_sub(self.room.available_permits()) as u64;
        let mut res = match fop {
            Fop::Create { .. } | Fop::Mknod { .. } if held > 0 => {
                let cx = Ctx {
                    behind: held,
                    ..cx.clone()
                };
                self.child.call(&cx, fop).await
            }
            fop => self.child.call(cx, fop).await,
        };
        if let Ok(r) = &mut res {
            self.owed_sizes(seq, r);
        }
        res
    }

    /// Raises the sizes an answer carries to what writes accepted before
    /// the request (`seq`) and still out will make them.
    fn owed_sizes(&self, seq: u64, reply: &mut Reply) {
        let files = self.files.lock().unwrap();
        if files.is_empty() {
            return;
        }
        let raise = |a: &mut mortar_core::Attr| {
            if let Some(f) = files.get(&a.gfid) {
                if let Some(end) = f.state.lock().unwrap().size_owed(seq) {
                    a.size = a.size.max(end);
                }
            }
        };
        match reply {
            Reply::Attr(a) => raise(a),
            Reply::Entry(e) | Reply::Created { entry: e, .. } => raise(&mut e.attr),
            Reply::Entries(ents) => ents
                .iter_mut()
                .filter_map(|e| e.attr.as_mut())
                .for_each(raise),
            _ => {}
        }
    }
}

#[async_trait]
impl Xlator for WriteBehind {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn reconfigure(&self, options: &mortar_core::Options) {
        let w = WINDOW_SIZE.size(options).max(4096);
        self.window.store(w, Ordering::Relaxed);
        self.off
            .store(!WRITE_BEHIND.bool(options), Ordering::Relaxed);
        let terms = mortar_core::terms::Terms::from_options(options);
        // The bricks claim a file for a lease's time; writes closed behind
        // land well within the margin left.
        let length = match (terms.claims, terms.lease) {
            (true, Some(lease)) => lease - terms.recall_timeout.min(lease / 2),
            _ => Duration::ZERO,
        };
        self.claims.lock().unwrap().set_length(length);
        *self.recall_wait.lock().unwrap() = terms.recall_timeout / 2;
    }

    fn notify(&self, _from: usize, ev: Event) -> Option<Event> {
        match &ev {
            Event::Recall {
                gfid,
                name: None,
                claim: true,
                ack,
            } => self.recalled(Some(*gfid), Some(ack)),
            Event::LeasesLost => self.recalled(None, None),
            _ => {}
        }
        Some(ev)
    }

    async fn settle(&self) {
        let files: Vec<Arc<File>> = self.files.lock().unwrap().values().cloned().collect();
        for f in files {
            self.wait_for(&f, |s| s.unlanded.is_empty()).await;
        }
    }

    fn dump(&self) -> Vec<String> {
        vec![format!(
            "files with writes out {} files with a failed write not told to every handle {} requests sent {} writes joined into others {} closes behind {} files claimed {}",
            self.files.lock().unwrap().len(),
            self.errors.lock().unwrap().files(),
            self.sent.load(Ordering::Relaxed),
            self.joined.load(Ordering::Relaxed),
            self.closed_behind.load(Ordering::Relaxed),
            self.claims.lock().unwrap().counts().0,
        )]
    }

    fn cached(&self, cx: &Ctx, fop: &Fop) -> Option<FsResult<Reply>> {
        match fop {
            // Attributes are at hand below only once the file's writes
            // have landed (and then no size is owed).
            Fop::Getattr { gfid } if self.file(*gfid).is_some() => None,
            Fop::Getattr { .. }
            | Fop::Getxattr { .. }
            | Fop::Listxattr { .. }
            | Fop::Lookup { .. } => self.child.xl.cached(cx, fop),
            _ => None,
        }
    }

    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        match fop {
            Fop::Write { .. } => {
                let me = self.me.upgrade().expect("a translator called is alive");
                me.write(cx, fop).await
            }
            Fop::Open { flags, gfid } | Fop::Create { flags, gfid, .. }
                if flags & libc::O_ACCMODE != libc::O_RDONLY =>
            {
                if matches!(fop, Fop::Open { .. }) {
                    self.settle_closed(gfid).await;
                }
                let (mark, sent) = (self.claims.lock().unwrap().mark(), Instant::now());
                let res = self.passed_on(cx, fop).await;
                if let Ok(Reply::Opened { fh } | Reply::Created { fh, .. }) = &res {
                    self.claims.lock().unwrap().opened(gfid, *fh, mark, sent);
                    self.errors.lock().unwrap().opened(gfid, *fh, true);
                    let set = match writes_through(flags) {
                        true => Some(&self.write_through),
                        false if flags & libc::O_APPEND != 0 => Some(&self.appending),
                        false => None,
                    };
                    if let Some(set) = set {
                        set.lock().unwrap().insert(*fh);
                    }
                }
                res
            }
            // A reader's handle: told of failures by its fsync only.
            Fop::Open { gfid, .. } | Fop::Create { gfid, .. } => {
                let res = self.passed_on(cx, fop).await;
                if let Ok(Reply::Opened { fh } | Reply::Created { fh, .. }) = &res {
                    self.errors.lock().unwrap().opened(gfid, *fh, false);
                }
                res
            }
            // What must see every write accepted before it, and reports
            // what failed.
            Fop::Fsync { gfid, fh, .. } => {
                self.drain(gfid, fh).await?;
                self.child.call(cx, fop).await
            }
            // Every close of the file sends one, a forked process's
            // close-on-exec too: it reports the error and leaves it for
            // the fsync (as a local file system's close leaves it), which
            // it must not steal from.
            Fop::Flush { .. } => self.close(cx, fop).await,
            Fop::Release { gfid, fh } => {
                self.claims.lock().unwrap().released(fh);
                self.settle_file(gfid).await;
                // (A failure no fsync reported outlives the last handle:
                // the next fsync of the file reports it.)
                self.errors.lock().unwrap().released(fh);
                self.write_through.lock().unwrap().remove(&fh);
                self.appending.lock().unwrap().remove(&fh);
                self.child.call(cx, fop).await
            }
            Fop::Read { gfid, .. }
            | Fop::Getattr { gfid }
            | Fop::Setattr { gfid, .. }
            | Fop::Fallocate { gfid, .. }
            | Fop::Lseek { gfid, .. }
            | Fop::Link { gfid, .. }
            | Fop::Checksum { gfid, .. } => {
                self.settle_file(gfid).await;
                self.passed_on(cx, fop).await
            }
            fop => self.passed_on(cx, fop).await,
        }
    }
}

#[cfg(test)]
mod tests;
