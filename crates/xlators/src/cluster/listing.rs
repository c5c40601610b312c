//! Reading a directory's copies on every replica set at once: distribute
//! hands the kernel one set's entries after another, but asks all of them
//! ahead. Each set of an open directory gets a reader, a task that reads
//! its copy batch by batch into a small queue (`AHEAD` batches) while the
//! listing is still on earlier sets, so a listing over many sets costs
//! about as many round trips as its largest set has batches, not the sum.
//!
//! A request at another offset than the reader's (a seek, a rewind)
//! replaces that reader with one starting there. Readers end with the
//! directory's handle (dropped, their tasks aborted) or at the end of
//! their set's listing.

use mortar_core::{Child, Ctx, DirEntry, Fop, FsError, FsResult, Gfid, Reply};
use std::sync::Mutex;
use tokio::sync::mpsc;

/// Batches a reader fetches ahead of the listing, per set.
const AHEAD: usize = 2;

type Batch = FsResult<Vec<DirEntry>>;

struct Reader {
    /// The offset the next batch it hands over starts at.
    next: u64,
    rx: mpsc::Receiver<Batch>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The readers of one open directory, one slot per set.
pub struct Ahead {
    readers: Mutex<Vec<Option<Reader>>>,
    /// Whether a set's reader was started since the listing began (so that
    /// one that ran to its end is not started again from the start).
    started: Mutex<Vec<bool>>,
}

impl Ahead {
    pub fn new(sets: usize) -> Ahead {
        Ahead {
            readers: Mutex::new((0..sets).map(|_| None).collect()),
            started: Mutex::new(vec![false; sets]),
        }
    }

    /// Starts reading set `i` from the start, unless it was started.
    pub fn prefetch(&self, i: usize, child: &Child, cx: &Ctx, gfid: Gfid, fh: u64) {
        let mut started = self.started.lock().unwrap();
        if std::mem::replace(&mut started[i], true) {
            return;
        }
        self.readers.lock().unwrap()[i] = Some(spawn(child.clone(), cx.clone(), gfid, fh, 0));
    }

    /// The batch of set `i` (`child`, its handle `fh`) at `offset`: from
    /// its reader if that is where it stands, else from a new reader
    /// started there. A listing from offset 0 of the first set begins
    /// anew: every reader may be started again.
    pub async fn batch(
        &self,
        i: usize,
        child: &Child,
        cx: &Ctx,
        gfid: Gfid,
        fh: u64,
        offset: u64,
    ) -> Batch {
        let taken = self.readers.lock().unwrap()[i].take();
        let mut r = match taken {
            Some(r) if r.next == offset => r,
            _ => {
                self.started.lock().unwrap()[i] = true;
                spawn(child.clone(), cx.clone(), gfid, fh, offset)
            }
        };
        let batch =
            r.rx.recv()
                .await
                .unwrap_or_else(|| Err(FsError::new(libc::EIO, "directory reader ended")));
        if let Ok(Some(last)) = batch.as_ref().map(|b| b.last()) {
            r.next = last.next;
            self.readers.lock().unwrap()[i] = Some(r);
        }
        batch
    }

    /// Ends every reader (the directory is closed).
    pub fn stop(&self) {
        self.readers.lock().unwrap().fill_with(|| None);
    }

    /// Forgets which sets were started (a listing from the beginning).
    pub fn rewind(&self) {
        self.started.lock().unwrap().fill(false);
    }
}

/// A reader of `child`'s copy from `offset`.
fn spawn(child: Child, cx: Ctx, gfid: Gfid, fh: u64, offset: u64) -> Reader {
    let (tx, rx) = mpsc::channel(AHEAD);
    let task = tokio::spawn(async move {
        let mut offset = offset;
        loop {
            let fop = Fop::Readdir {
                gfid,
                fh,
                offset,
                plus: true,
            };
            let batch = match child.call(&cx, fop).await {
                Ok(Reply::Entries(e)) => Ok(e),
                Ok(_) => Err(FsError::errno(libc::EIO)),
                Err(e) => Err(e),
            };
            let next = match &batch {
                Ok(e) => e.last().map(|l| l.next),
                Err(_) => None,
            };
            if tx.send(batch).await.is_err() {
                return;
            }
            match next {
                Some(n) => offset = n,
                None => return,
            }
        }
    });
    Reader {
        next: offset,
        rx,
        task,
    }
}
