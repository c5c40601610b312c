//! READ, WRITE and COMMIT, and the files kept open for them.
//!
//! NFS has no open or close: a READ or WRITE names a file by its handle.
//! The server opens the file through the volume as the caller (so the
//! bricks check the caller's permission, as for a native mount), keeps it
//! open for the next calls of the same caller, and closes it once idle.
//! An UNSTABLE write is answered once the bricks hold it (the server's
//! graphs leave write-behind out, `src/nfsd.rs`: a client that never
//! compares write verifiers loses nothing when the server is killed), and
//! COMMIT (or a FILE_SYNC write) syncs the file on every brick that holds
//! it. A COMMIT waits for the closes of the file under way; should writes
//! held behind a close ever fail to land (a graph with write-behind), the
//! write verifier changes, and clients send again what they have not
//! committed.

use super::attrs::stale;
use super::*;
use crate::exports::Export;
use mortar_core::{Fop, Reply};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A file open and not used for this long is closed.
pub const IDLE: Duration = Duration::from_secs(5);

// stable_how.
const UNSTABLE: u32 = 0;
const DATA_SYNC: u32 = 1;
const FILE_SYNC: u32 = 2;

/// Who a file is open for and how: the same caller (uid, gid and groups)
/// reuses it.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    volume: [u8; 16],
    gfid: Gfid,
    write: bool,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

struct Open {
    export: Arc<Export>,
    fh: u64,
    used: Instant,
}

/// The files open for NFS calls.
pub struct Files {
    open: Mutex<HashMap<Key, Open>>,
    /// The files opened for writing being closed (their writes held
    /// behind landing): told when done.
    closing: Arc<Mutex<Vec<Closing>>>,
    /// The write verifier (RFC 1813's writeverf3).
    verifier: Arc<AtomicU64>,
}

struct Closing {
    id: u64,
    volume: [u8; 16],
    gfid: Gfid,
    done: tokio::sync::watch::Receiver<()>,
}

impl Default for Files {
    fn default() -> Self {
        Files {
            open: Mutex::default(),
            closing: Arc::default(),
            verifier: Arc::new(AtomicU64::new(fastrand::u64(..))),
        }
    }
}

fn key(export: &Export, cx: &Ctx, gfid: Gfid, write: bool) -> Key {
    Key {
        volume: export.id,
        gfid,
        write,
        uid: cx.uid,
        gid: cx.gid,
        groups: cx.groups.clone(),
    }
}

impl Files {
    /// Keeps `fh`, just opened for `cx`, for its next calls.
    pub fn keep(&self, export: &Arc<Export>, cx: &Ctx, gfid: Gfid, fh: u64, write: bool) {
        let old = self.open.lock().unwrap().insert(
            key(export, cx, gfid, write),
            Open {
                export: export.clone(),
                fh,
                used: Instant::now(),
            },
        );
        if let Some(old) = old {
            self.release(key(export, cx, gfid, write), old);
        }
    }

    /// The write verifier now: new with every start of the server, and
    /// again whenever writes answered as taken could not land.
    pub fn verifier(&self) -> [u8; 8] {
        self.verifier.load(Ordering::Acquire).to_be_bytes()
    }

    /// A handle on `gfid` open for `cx` (opened now if none is).
    async fn get(
        &self,
        export: &Arc<Export>,
        cx: &Ctx,
        gfid: Gfid,
        write: bool,
    ) -> mortar_core::FsResult<u64> {
        let k = key(export, cx, gfid, write);
        if let Some(o) = self.open.lock().unwrap().get_mut(&k) {
            o.used = Instant::now();
            return Ok(o.fh);
        }
        let flags = if write {
            libc::O_WRONLY
        } else {
            libc::O_RDONLY
        };
        let fh = export
            .xl
            .call(cx, Fop::Open { gfid, flags })
            .await?
            .into_fh()?;
        self.keep(export, cx, gfid, fh, write);
        Ok(fh)
    }

    /// The handles open for writing `gfid`, whoever they are open for.
    fn writers(&self, volume: [u8; 16], gfid: Gfid) -> Vec<(Arc<Export>, u64)> {
        self.open
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.write && k.gfid == gfid && k.volume == volume)
            .map(|(_, o)| (o.export.clone(), o.fh))
            .collect()
    }

    /// Waits for the closes of `gfid` under way (their writes held behind
    /// landed, or the verifier changed).
    async fn closed(&self, volume: [u8; 16], gfid: Gfid) {
        let waits: Vec<tokio::sync::watch::Receiver<()>> = self
            .closing
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.gfid == gfid && c.volume == volume)
            .map(|c| c.done.clone())
            .collect();
        for mut done in waits {
            // Ends when the close's task drops its sender.
            while done.changed().await.is_ok() {}
        }
    }

    /// Lands the writes held behind for `gfid` (before its size changes).
    pub async fn flush(&self, volume: [u8; 16], gfid: Gfid) {
        for (export, fh) in self.writers(volume, gfid) {
            let _ = export.xl.call(&Ctx::root(), Fop::Flush { gfid, fh }).await;
        }
    }

    /// Closes the files idle for `IDLE`.
    pub fn close_idle(&self) {
        let now = Instant::now();
        let idle: Vec<(Key, Open)> = self
            .open
            .lock()
            .unwrap()
            .extract_if(|_, o| now.duration_since(o.used) >= IDLE)
            .collect();
        for (k, o) in idle {
            self.release(k, o);
        }
    }

    /// Closes `o` in the background: its writes held behind land first
    /// (it is among the writers until then); if they cannot, the write
    /// verifier changes.
    fn release(&self, k: Key, o: Open) {
        let (gfid, fh, export) = (k.gfid, o.fh, o.export);
        let id = fastrand::u64(..);
        let (told, done) = tokio::sync::watch::channel(());
        if k.write {
            self.closing.lock().unwrap().push(Closing {
                id,
                volume: k.volume,
                gfid,
                done,
            });
        }
        let closing = self.closing.clone();
        let verifier = self.verifier.clone();
        tokio::spawn(async move {
            let cx = Ctx::root();
            let landed = export.xl.call(&cx, Fop::Flush { gfid, fh }).await;
            if let Err(e) = landed {
                let new = fastrand::u64(..);
                verifier.store(new, Ordering::Release);
                tracing::warn!(
                    %gfid,
                    volume = %export.name,
                    "nfs: writes held behind could not land at an idle close ({e}): \
                     the write verifier changes, so that clients send again what they have not committed"
                );
            }
            closing.lock().unwrap().retain(|c| c.id != id);
            drop(told);
            let _ = export.xl.call(&cx, Fop::Release { gfid, fh }).await;
        });
    }
}

impl Op<'_> {
    pub(super) async fn read(&self, gfid: Gfid, args: &mut Reader) -> Answer {
        let offset = args.u64()?;
        let count = args.u32()?.min(crate::MAX_IO as u32);
        let files = &self.service.files;
        let fh = files
            .get(&self.export, &self.cx, gfid, false)
            .await
            .map_err(stale)?;
        let data = match self
            .call(Fop::Read {
                gfid,
                fh,
                offset,
                size: count,
            })
            .await?
        {
            Reply::Data(d) => d,
            other => return Err(mortar_core::fop::unexpected(other).into()),
        };
        let a = self.attr_opt(gfid).await;
        let eof = match &a {
            Some(a) => offset + data.len() as u64 >= a.size,
            None => (data.len() as u32) < count,
        };
        let mut b = Body::ok();
        self.post_op(&mut b.w, a.as_ref());
        b.w.u32(data.len() as u32).bool(eof).u32(data.len() as u32);
        b.data = Some(data);
        Ok(b)
    }

    pub(super) async fn write(&self, gfid: Gfid, args: &mut Reader) -> Answer {
        let offset = args.u64()?;
        let count = args.u32()?;
        let stable = args.u32()?;
        if stable > FILE_SYNC {
            return Err(Fail::Garbage);
        }
        let data = args.opaque(crate::MAX_IO)?;
        if data.len() as u32 != count {
            return Err(Fail::Status(stat::INVAL));
        }
        let files = &self.service.files;
        let fh = files
            .get(&self.export, &self.cx, gfid, true)
            .await
            .map_err(stale)?;
        // Read before the write is taken: a loss after it changes it.
        let verifier = files.verifier();
        let fop = Fop::Write {
            gfid,
            fh,
            offset,
            data,
            grow: 0,
            reserve: false,
        };
        let (n, after) = match self.call(fop).await? {
            Reply::Written(n, a) => (n, a),
            other => return Err(mortar_core::fop::unexpected(other).into()),
        };
        let committed = match stable {
            UNSTABLE => UNSTABLE,
            _ => {
                let datasync = stable == DATA_SYNC;
                self.call(Fop::Fsync { gfid, fh, datasync }).await?;
                FILE_SYNC
            }
        };
        // An unstable write's attributes after only if they are at hand
        // (RFC 1813 lets them be left out), never by waiting for more.
        let after = match (after, committed) {
            (Some(a), _) => Some(a),
            (None, UNSTABLE) => self.attr_at_hand(gfid),
            (None, _) => self.attr_opt(gfid).await,
        };
        let mut b = Body::ok();
        self.wcc(&mut b.w, after.as_ref());
        b.w.u32(n).u32(committed).fixed(&verifier);
        Ok(b)
    }

    pub(super) async fn commit(&self, gfid: Gfid, args: &mut Reader) -> Answer {
        let (_offset, _count) = (args.u64()?, args.u32()?);
        // Every handle that wrote it: what any of them holds behind lands.
        // The verifier first: if writes held behind fail to land
        // meanwhile, the client sees it change.
        let files = &self.service.files;
        let verifier = files.verifier();
        files.closed(self.export.id, gfid).await;
        let mut writers = files.writers(self.export.id, gfid);
        if writers.is_empty() {
            let fh = files
                .get(&self.export, &self.cx, gfid, true)
                .await
                .map_err(stale)?;
            writers.push((self.export.clone(), fh));
        }
        for (export, fh) in writers {
            let fop = Fop::Fsync {
                gfid,
                fh,
                datasync: false,
            };
            export.xl.call(&self.cx, fop).await.map_err(stale)?;
        }
        let a = self.attr_opt(gfid).await;
        let mut b = Body::ok();
        self.wcc(&mut b.w, a.as_ref());
        b.w.fixed(&verifier);
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_core::desc::{VolDesc, XlDesc};
    use mortar_core::{FsError, FsResult, Xlator};

    /// A volume whose writes held behind fail to land when `lose` is set.
    struct Volume {
        lose: bool,
        calls: Mutex<Vec<&'static str>>,
    }

    #[async_trait::async_trait]
    impl Xlator for Volume {
        fn name(&self) -> String {
            "volume".into()
        }
        async fn call(&self, _: &Ctx, fop: Fop) -> FsResult<Reply> {
            let (name, reply) = match fop {
                Fop::Open { .. } => ("open", Ok(Reply::Opened { fh: 7 })),
                Fop::Flush { .. } if self.lose => ("flush", Err(FsError::errno(libc::EIO))),
                Fop::Flush { .. } => ("flush", Ok(Reply::Ok)),
                Fop::Fsync { .. } => ("fsync", Ok(Reply::Ok)),
                Fop::Release { .. } => ("release", Ok(Reply::Ok)),
                _ => ("other", Err(FsError::errno(libc::ENOSYS))),
            };
            self.calls.lock().unwrap().push(name);
            reply
        }
    }

    fn export(lose: bool) -> (Arc<Export>, Arc<Volume>) {
        let v = Arc::new(Volume {
            lose,
            calls: Mutex::default(),
        });
        let desc = VolDesc {
            volume: "v".into(),
            id: "v".into(),
            version: 1,
            options: Default::default(),
            top: XlDesc::new("debug/none", "v".into(), vec![]),
            clients: Vec::new(),
            pool: Vec::new(),
            retired: Vec::new(),
        };
        let e = Export::new("v".into(), [1; 16], v.clone(), &desc);
        (Arc::new(e), v)
    }

    /// Closes every file as if idle, and waits for the closes to end.
    async fn close_all(files: &Files, export: &Export, gfid: Gfid) {
        let all: Vec<(Key, Open)> = files.open.lock().unwrap().drain().collect();
        for (k, o) in all {
            files.release(k, o);
        }
        files.closed(export.id, gfid).await;
    }

    #[tokio::test]
    async fn writes_lost_at_an_idle_close_change_the_write_verifier() {
        let gfid = Gfid([9; 16]);
        let cx = Ctx::root();
        for lose in [false, true] {
            let (export, volume) = export(lose);
            let files = Files::default();
            let before = files.verifier();
            files.get(&export, &cx, gfid, true).await.unwrap();
            close_all(&files, &export, gfid).await;
            assert_eq!(files.verifier() != before, lose, "lose: {lose}");
            assert_eq!(&volume.calls.lock().unwrap()[..2], ["open", "flush"]);
        }
    }

    #[tokio::test]
    async fn a_commit_waits_for_the_closes_under_way() {
        let gfid = Gfid([9; 16]);
        let (export, volume) = export(false);
        let files = Files::default();
        files.get(&export, &Ctx::root(), gfid, true).await.unwrap();
        let all: Vec<(Key, Open)> = files.open.lock().unwrap().drain().collect();
        for (k, o) in all {
            files.release(k, o);
        }
        // Once `closed` returns, the close's flush has been answered.
        files.closed(export.id, gfid).await;
        assert!(volume.calls.lock().unwrap().contains(&"flush"));
        assert!(files.closing.lock().unwrap().is_empty());
    }
}
