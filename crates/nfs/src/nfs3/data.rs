//! READ, WRITE and COMMIT, and the files kept open for them.
//!
//! NFS has no open or close: a READ or WRITE names a file by its handle.
//! The server opens the file through the volume as the caller (so the
//! bricks check the caller's permission, as for a native mount), keeps it
//! open for the next calls of the same caller, and closes it once idle.
//! Writes go through the volume's write-behind: an UNSTABLE write is
//! answered once taken, and COMMIT (or a FILE_SYNC write) syncs the file
//! on every brick that holds it.

use super::attrs::stale;
use super::*;
use crate::exports::Export;
use mortar_core::{Fop, Reply};
use std::collections::HashMap;
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
#[derive(Default)]
pub struct Files {
    open: Mutex<HashMap<Key, Open>>,
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
            release(old, gfid);
        }
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
            release(o, k.gfid);
        }
    }
}

/// Closes `o` in the background (its writes land first).
fn release(o: Open, gfid: Gfid) {
    tokio::spawn(async move {
        let cx = Ctx::root();
        let _ = o.export.xl.call(&cx, Fop::Flush { gfid, fh: o.fh }).await;
        let _ = o.export.xl.call(&cx, Fop::Release { gfid, fh: o.fh }).await;
    });
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
        let after = match after {
            Some(a) => Some(a),
            None => self.attr_opt(gfid).await,
        };
        let mut b = Body::ok();
        self.wcc(&mut b.w, after.as_ref());
        b.w.u32(n).u32(committed).fixed(&self.service.verifier);
        Ok(b)
    }

    pub(super) async fn commit(&self, gfid: Gfid, args: &mut Reader) -> Answer {
        let (_offset, _count) = (args.u64()?, args.u32()?);
        // Every handle that wrote it: what any of them holds behind lands.
        let files = &self.service.files;
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
        b.w.fixed(&self.service.verifier);
        Ok(b)
    }
}
