//! `performance/io-cache`: file data kept at the mount under the bricks'
//! leases, so that a read of what this mount wrote or read before is
//! answered from memory, with no request to a brick.
//!
//! The kernel keeps a file's pages itself, but it drops them whenever it
//! learns that the file's mtime moved (`FUSE_AUTO_INVAL_DATA`, which the
//! recalls rely on: docs/caching.md), and every write of this mount moves
//! it: a file read right after this mount wrote it was read from a brick
//! again. This translator keeps the bytes of small files:
//!
//! - **What it knows.** For each file kept, its bytes from offset 0 to some
//!   length, and whether that is the whole file. A file this mount creates
//!   is known whole (empty); its writes, and writes to any file kept, are
//!   laid over what is kept once a brick has taken them; a read from a
//!   brick adds what it returned when it continues what is kept.
//! - **Coherency.** What it keeps is valid under the leases the bricks
//!   granted with the answers it came from: a change by another client
//!   recalls the file first, which drops it here; so do a lost connection
//!   and this mount's own truncates and fallocates. An answer to a request
//!   sent before a recall (of any file) is not kept; nor is a read that
//!   overlapped a change this mount made (to any file); a write that could
//!   not be laid over what is kept drops the file. Without leases, data is
//!   kept for one second (`core::terms::UNLEASED`).
//! - **Bounds.** Files up to `FILE_MAX`, all of them together
//!   `performance.cache-size`; past that the files kept longest are dropped
//!   first. Handles opened with `O_DIRECT` are not answered from here.
//!
//! It sits under write-behind, which makes a read wait until the file's
//! writes before it have landed, so it sees writes in the order the bricks
//! do.

use async_trait::async_trait;
use mortar_core::options::{Kind, Spec};
use mortar_core::{Child, Ctx, Event, Fop, FsResult, Gfid, Reply, Xlator};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub static IO_CACHE: Spec = Spec {
    key: "performance.io-cache",
    kind: Kind::Bool,
    default: "on",
    help: "Keeps the data of small files this mount wrote or read at the mount, under the bricks' leases, and answers reads of it from memory (GlusterFS's io-cache).",
};

pub static CACHE_SIZE: Spec = Spec {
    key: "performance.cache-size",
    kind: Kind::Size,
    default: "32MB",
    help: "Bytes of file data io-cache keeps at the mount, all files together; the files kept longest are dropped first.",
};

/// Files larger than this are not kept.
const FILE_MAX: usize = 1 << 20;

/// When a request was sent, and what had happened by then.
#[derive(Clone, Copy)]
struct Mark {
    start: Instant,
    recalls: u64,
    touched: u64,
}

struct File {
    /// The file's bytes from offset 0.
    data: Vec<u8>,
    /// Whether `data` is the whole file.
    whole: bool,
    /// When the lease of the answer it last came from ends.
    until: Instant,
}

#[derive(Default)]
struct Kept {
    files: HashMap<Gfid, File>,
    /// In the order they were first kept: the first to go.
    order: VecDeque<Gfid>,
    bytes: usize,
    /// Changes out (writes, truncates), per file.
    changing: HashMap<Gfid, u32>,
    /// Handles opened with O_DIRECT, and with O_APPEND.
    direct: HashSet<u64>,
    appending: HashSet<u64>,
}

impl Kept {
    fn drop_file(&mut self, gfid: Gfid) {
        if let Some(f) = self.files.remove(&gfid) {
            self.bytes -= f.data.len();
        }
    }

    fn change_begins(&mut self, gfid: Gfid) {
        *self.changing.entry(gfid).or_default() += 1;
    }

    fn change_ends(&mut self, gfid: Gfid) {
        let n = self.changing.get_mut(&gfid).expect("counted at its start");
        *n -= 1;
        if *n == 0 {
            self.changing.remove(&gfid);
        }
    }

    /// Makes room for `more` bytes by dropping the files kept longest.
    fn make_room(&mut self, more: usize, max: usize) {
        while self.bytes + more > max {
            let Some(g) = self.order.pop_front() else {
                return;
            };
            self.drop_file(g);
        }
    }
}

pub struct IoCache {
    name: String,
    child: Child,
    kept: Mutex<Kept>,
    /// Moves on at every recall and loss: an answer to a request older
    /// than that is not kept.
    recalls: AtomicU64,
    /// Moves on at the end of every change made here: a read older than
    /// that is not kept.
    touched: AtomicU64,
    keep_ms: AtomicU64,
    max_bytes: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl IoCache {
    /// Counts an answer from the cache (hit) or not (miss), here and in
    /// the process's metrics.
    fn counted(&self, hit: bool) {
        match hit {
            true => self.hits.fetch_add(1, Ordering::Relaxed),
            false => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        mortar_metrics::cache("io-cache", hit);
    }

    pub fn new(name: String, child: Child) -> IoCache {
        IoCache {
            name,
            child,
            kept: Mutex::default(),
            recalls: AtomicU64::new(0),
            touched: AtomicU64::new(0),
            keep_ms: AtomicU64::new(mortar_core::terms::UNLEASED.as_millis() as u64),
            max_bytes: AtomicU64::new(32 << 20),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn until(&self, start: Instant) -> Instant {
        start + Duration::from_millis(self.keep_ms.load(Ordering::Relaxed))
    }

    /// What is kept of `[offset, offset + size)`, if all of it is (up to
    /// the end of a file kept whole).
    fn hit(&self, gfid: Gfid, fh: u64, offset: u64, size: u32) -> Option<bytes::Bytes> {
        let k = self.kept.lock().unwrap();
        if k.direct.contains(&fh) {
            return None;
        }
        let f = k.files.get(&gfid)?;
        if f.until <= Instant::now() {
            return None;
        }
        let len = f.data.len() as u64;
        let end = offset.saturating_add(size as u64);
        if end > len && !f.whole {
            return None;
        }
        let (from, to) = (offset.min(len) as usize, end.min(len) as usize);
        Some(bytes::Bytes::copy_from_slice(&f.data[from..to]))
    }

    /// Lays `data` (read or written at `offset` by a request sent at
    /// `mark`) over what is kept of the file; `whole`: the file ends there
    /// (a short read, or a new file); `read`: it was read, and is stale if
    /// a change was made here meanwhile. False if it could not be laid.
    fn lay(
        &self,
        gfid: Gfid,
        offset: u64,
        data: &[u8],
        whole: bool,
        read: bool,
        mark: Mark,
    ) -> bool {
        let max = self.max_bytes.load(Ordering::Relaxed) as usize;
        let mut k = self.kept.lock().unwrap();
        if self.recalls.load(Ordering::Acquire) != mark.recalls {
            return false;
        }
        if read
            && (self.touched.load(Ordering::Acquire) != mark.touched
                || k.changing.contains_key(&gfid))
        {
            return false;
        }
        let start = mark.start;
        let end = offset as usize + data.len();
        if end > FILE_MAX || end > max {
            return false;
        }
        let until = self.until(start);
        let known = k.files.get(&gfid).map(|f| (f.data.len(), f.whole));
        let grows = match known {
            // Nothing kept: only what starts the file.
            None if offset == 0 => end,
            None => return false,
            // A gap of bytes not known (of a file not known whole).
            Some((len, false)) if offset as usize > len => return false,
            Some((len, _)) => end.saturating_sub(len),
        };
        k.make_room(grows, max);
        if k.order.len() > 2 * k.files.len() + 64 {
            // Files dropped otherwise than to make room.
            let Kept { order, files, .. } = &mut *k;
            order.retain(|g| files.contains_key(g));
        }
        if !k.files.contains_key(&gfid) {
            if known.is_some() {
                // Dropped to make room.
                return false;
            }
            k.order.push_back(gfid);
            k.files.insert(
                gfid,
                File {
                    data: Vec::new(),
                    whole: false,
                    until,
                },
            );
        }
        k.bytes += grows;
        let f = k.files.get_mut(&gfid).expect("kept above");
        if f.data.len() < end {
            // Holes read as zeros (a file known whole).
            f.data.resize(end, 0);
        }
        f.data[offset as usize..end].copy_from_slice(data);
        f.whole |= whole;
        f.until = until;
        true
    }

    fn mark(&self) -> Mark {
        Mark {
            start: Instant::now(),
            recalls: self.recalls.load(Ordering::Acquire),
            touched: self.touched.load(Ordering::Acquire),
        }
    }

    /// A change of a file's data made here: what is kept of it is laid
    /// over by `lay` (a write that could be), or dropped.
    async fn change(
        &self,
        cx: &Ctx,
        fop: Fop,
        lay: impl FnOnce(&FsResult<Reply>, Mark) -> bool,
    ) -> FsResult<Reply> {
        let gfid = fop.gfid();
        self.kept.lock().unwrap().change_begins(gfid);
        let mark = self.mark();
        let res = self.child.call(cx, fop).await;
        let laid = lay(&res, mark);
        let mut k = self.kept.lock().unwrap();
        if !laid {
            k.drop_file(gfid);
        }
        k.change_ends(gfid);
        self.touched.fetch_add(1, Ordering::AcqRel);
        res
    }

    async fn read(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let Fop::Read {
            gfid,
            fh,
            offset,
            size,
        } = fop
        else {
            unreachable!()
        };
        if let Some(data) = self.hit(gfid, fh, offset, size) {
            self.counted(true);
            return Ok(Reply::Data(data));
        }
        self.counted(false);
        let mark = self.mark();
        let res = self.child.call(cx, fop).await;
        if let Ok(Reply::Data(d)) = &res {
            if !self.kept.lock().unwrap().direct.contains(&fh) {
                self.lay(gfid, offset, d, d.len() < size as usize, true, mark);
            }
        }
        res
    }

    async fn write(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let Fop::Write {
            gfid,
            fh,
            offset,
            ref data,
            ..
        } = fop
        else {
            unreachable!()
        };
        let data = data.clone();
        self.change(cx, fop, |res, mark| {
            let at = {
                let k = self.kept.lock().unwrap();
                if k.direct.contains(&fh) {
                    return false;
                }
                match k.appending.contains(&fh) {
                    false => offset,
                    // A brick appends at the end of its copy: where this
                    // mount knows the file whole, the end of what is kept.
                    true => match k.files.get(&gfid).filter(|f| f.whole) {
                        Some(f) => f.data.len() as u64,
                        None => return false,
                    },
                }
            };
            matches!(res, Ok(Reply::Written(n, _)) if *n as usize == data.len())
                && self.lay(gfid, at, &data, false, false, mark)
        })
        .await
    }

    /// Notes the handles whose reads and writes need care.
    fn opened(&self, res: &FsResult<Reply>, flags: i32) {
        let (Ok(Reply::Opened { fh }) | Ok(Reply::Created { fh, .. })) = res else {
            return;
        };
        let mut k = self.kept.lock().unwrap();
        if flags & libc::O_DIRECT != 0 {
            k.direct.insert(*fh);
        }
        if flags & libc::O_APPEND != 0 {
            k.appending.insert(*fh);
        }
    }
}

#[async_trait]
impl Xlator for IoCache {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn notify(&self, _from: usize, ev: Event) -> Option<Event> {
        match &ev {
            Event::Recall { gfid, .. } => {
                self.recalls.fetch_add(1, Ordering::AcqRel);
                self.kept.lock().unwrap().drop_file(*gfid);
            }
            Event::LeasesLost => {
                self.recalls.fetch_add(1, Ordering::AcqRel);
                let mut k = self.kept.lock().unwrap();
                k.files.clear();
                k.order.clear();
                k.bytes = 0;
            }
            _ => {}
        }
        Some(ev)
    }

    fn reconfigure(&self, options: &mortar_core::Options) {
        let t = mortar_core::terms::cache_time(options);
        self.keep_ms.store(t.as_millis() as u64, Ordering::Relaxed);
        self.max_bytes
            .store(CACHE_SIZE.size(options), Ordering::Relaxed);
    }

    fn dump(&self) -> Vec<String> {
        let k = self.kept.lock().unwrap();
        vec![format!(
            "files kept {} bytes {} reads answered from memory {} asked of the bricks {}",
            k.files.len(),
            k.bytes,
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed)
        )]
    }

    fn cached(&self, cx: &Ctx, fop: &Fop) -> Option<FsResult<Reply>> {
        self.child.xl.cached(cx, fop)
    }

    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        match fop {
            Fop::Read { .. } => self.read(cx, fop).await,
            Fop::Write { .. } => self.write(cx, fop).await,
            Fop::Create { gfid, flags, .. } => {
                let mark = self.mark();
                let res = self.child.call(cx, fop).await;
                self.opened(&res, flags);
                // A new file: known whole, and empty. (An existing one
                // opened by O_CREAT answers with another gfid.)
                if matches!(&res, Ok(Reply::Created { entry, .. }) if entry.attr.gfid == gfid && entry.attr.size == 0)
                {
                    self.lay(gfid, 0, &[], true, false, mark);
                }
                res
            }
            Fop::Open { flags, .. } => {
                let res = match flags & libc::O_TRUNC != 0 {
                    true => self.change(cx, fop, |_, _| false).await,
                    false => self.child.call(cx, fop).await,
                };
                self.opened(&res, flags);
                res
            }
            Fop::Release { fh, .. } => {
                {
                    let mut k = self.kept.lock().unwrap();
                    k.direct.remove(&fh);
                    k.appending.remove(&fh);
                }
                self.child.call(cx, fop).await
            }
            Fop::Setattr {
                set: mortar_core::SetAttr { size: Some(_), .. },
                ..
            }
            | Fop::Fallocate { .. } => self.change(cx, fop, |_, _| false).await,
            fop => self.child.call(cx, fop).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_core::xlator::Ack;
    use mortar_core::{Attr, Entry, FsError};
    use std::sync::Arc;

    /// One file's bytes; counts the reads it is asked.
    #[derive(Default)]
    struct Disk {
        data: Mutex<Vec<u8>>,
        reads: AtomicU64,
    }

    #[async_trait]
    impl Xlator for Disk {
        fn name(&self) -> String {
            "disk".into()
        }
        async fn call(&self, _: &Ctx, fop: Fop) -> FsResult<Reply> {
            match fop {
                Fop::Create { gfid, .. } => Ok(Reply::Created {
                    entry: Entry::found(Attr::plain_file(gfid, 0)),
                    fh: 1,
                }),
                Fop::Open { flags, .. } => Ok(Reply::Opened {
                    fh: if flags & libc::O_APPEND != 0 { 2 } else { 1 },
                }),
                Fop::Read { offset, size, .. } => {
                    self.reads.fetch_add(1, Ordering::Relaxed);
                    let d = self.data.lock().unwrap();
                    let from = (offset as usize).min(d.len());
                    let to = (offset as usize + size as usize).min(d.len());
                    Ok(Reply::Data(bytes::Bytes::copy_from_slice(&d[from..to])))
                }
                Fop::Write {
                    fh, offset, data, ..
                } => {
                    let mut d = self.data.lock().unwrap();
                    let at = if fh == 2 { d.len() } else { offset as usize };
                    if d.len() < at + data.len() {
                        d.resize(at + data.len(), 0);
                    }
                    d[at..at + data.len()].copy_from_slice(&data);
                    Ok(Reply::Written(data.len() as u32, None))
                }
                Fop::Setattr { set, .. } => {
                    if let Some(s) = set.size {
                        self.data.lock().unwrap().resize(s as usize, 0);
                    }
                    Ok(Reply::Ok)
                }
                _ => Err(FsError::errno(libc::ENOSYS)),
            }
        }
    }

    fn cache(disk: &Arc<Disk>) -> IoCache {
        let io = IoCache::new("io".into(), Child::standalone(disk.clone()));
        let mut o = mortar_core::Options::new();
        o.insert("features.cache-invalidation-timeout".into(), "60".into());
        io.reconfigure(&o);
        io
    }

    async fn read(io: &IoCache, f: Gfid, offset: u64, size: u32) -> Vec<u8> {
        let fop = Fop::Read {
            gfid: f,
            fh: 1,
            offset,
            size,
        };
        match io.call(&Ctx::root(), fop).await.unwrap() {
            Reply::Data(d) => d.to_vec(),
            r => panic!("{r:?}"),
        }
    }

    async fn write(io: &IoCache, f: Gfid, fh: u64, offset: u64, data: &[u8]) {
        let fop = Fop::Write {
            gfid: f,
            fh,
            offset,
            data: bytes::Bytes::copy_from_slice(data),
            grow: 0,
            reserve: false,
        };
        io.call(&Ctx::root(), fop).await.unwrap();
    }

    #[tokio::test]
    async fn what_this_mount_wrote_is_read_from_memory_until_recalled() {
        let disk = Arc::new(Disk::default());
        let io = cache(&disk);
        let (f, cx) = (Gfid::random(), Ctx::root());
        let create = Fop::Create {
            parent: Gfid::ROOT,
            name: mortar_core::Name::new("f").unwrap(),
            gfid: f,
            mode: 0o644,
            umask: 0,
            flags: libc::O_RDWR,
        };
        io.call(&cx, create).await.unwrap();
        write(&io, f, 1, 0, b"hello ").await;
        write(&io, f, 1, 6, b"world").await;
        // The whole file is known: a read past its end is short.
        assert_eq!(read(&io, f, 0, 4096).await, b"hello world");
        assert_eq!(read(&io, f, 6, 3).await, b"wor");
        assert_eq!(disk.reads.load(Ordering::Relaxed), 0);
        // Appends land at the end, whatever the offset.
        let open = Fop::Open {
            gfid: f,
            flags: libc::O_WRONLY | libc::O_APPEND,
        };
        io.call(&cx, open).await.unwrap();
        write(&io, f, 2, 0, b"!").await;
        assert_eq!(read(&io, f, 0, 4096).await, b"hello world!");
        assert_eq!(disk.reads.load(Ordering::Relaxed), 0);
        // Another client's change: the brick recalls the file first.
        disk.data.lock().unwrap()[0] = b'J';
        io.notify(
            0,
            Event::Recall {
                gfid: f,
                name: None,
                claim: false,
                ack: Ack::none(),
            },
        );
        assert_eq!(read(&io, f, 0, 4096).await, b"Jello world!");
        assert_eq!(disk.reads.load(Ordering::Relaxed), 1);
        // What was read is kept (a short read: the whole file).
        assert_eq!(read(&io, f, 0, 5).await, b"Jello");
        assert_eq!(disk.reads.load(Ordering::Relaxed), 1);
        // A truncate here drops it.
        let trunc = Fop::Setattr {
            gfid: f,
            set: mortar_core::SetAttr {
                size: Some(2),
                ..Default::default()
            },
        };
        io.call(&cx, trunc).await.unwrap();
        assert_eq!(read(&io, f, 0, 4096).await, b"Je");
        assert_eq!(disk.reads.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn files_not_known_whole_are_read_only_where_known_and_memory_is_bounded() {
        let disk = Arc::new(Disk::default());
        *disk.data.lock().unwrap() = vec![7u8; 8192];
        let io = cache(&disk);
        let mut o = mortar_core::Options::new();
        o.insert("performance.cache-size".into(), "10KB".into());
        io.reconfigure(&o);
        let (f, g) = (Gfid::random(), Gfid::random());
        // A full read: what it returned is kept, not what lies past it.
        assert_eq!(read(&io, f, 0, 4096).await.len(), 4096);
        assert_eq!(read(&io, f, 0, 4096).await.len(), 4096);
        assert_eq!(disk.reads.load(Ordering::Relaxed), 1);
        assert_eq!(read(&io, f, 4096, 4096).await.len(), 4096);
        assert_eq!(disk.reads.load(Ordering::Relaxed), 2);
        // A write past what is known of a file not known whole drops it.
        write(&io, f, 1, 12000, b"x").await;
        read(&io, f, 0, 4096).await;
        assert_eq!(disk.reads.load(Ordering::Relaxed), 3);
        // Past the budget (10 KB), the file kept longest goes first.
        read(&io, g, 0, 8192).await;
        assert_eq!(disk.reads.load(Ordering::Relaxed), 4);
        read(&io, f, 0, 4096).await;
        assert_eq!(disk.reads.load(Ordering::Relaxed), 5);
        assert!(io.kept.lock().unwrap().bytes <= 10_000);
    }
}
