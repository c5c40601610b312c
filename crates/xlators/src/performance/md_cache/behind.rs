//! Changes of names answered ahead of the bricks (docs/caching.md,
//! "Changes of names ahead"): the creates, unlinks and renames md-cache
//! answered from what it knows of a directory it claims, on their way to
//! the bricks. Each is noted here with what it touches (its directories,
//! names and objects) until the bricks have it, so that:
//! - a request that would see the bricks' state of something a change
//!   ahead touches waits until that change has landed (a lookup of the
//!   name, a listing of the directory, an open of the new file);
//! - changes ahead that touch the same name or object reach the bricks in
//!   the order they were answered;
//! - a brick's recall of the directory is answered once they have landed
//!   (the other client then sees them);
//! - a change that failed on the bricks is reported by the next `fsync`
//!   of its directory (and logged), as a local file system reports a
//!   failed writeback; a file created ahead reports it at every use.

use mortar_core::fop::AHEAD_FH;
use mortar_core::{FsError, FsResult, Gfid};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use tokio::sync::Notify;

/// Changes ahead at most; past that, changes wait for the bricks.
pub const MAX_OUT: usize = 1024;

/// What a change ahead touches.
#[derive(Clone, Debug, Default)]
pub struct Keys {
    pub dirs: Vec<Gfid>,
    pub names: Vec<(Gfid, Vec<u8>)>,
    pub objects: Vec<Gfid>,
}

impl Keys {
    /// Whether `self` and `other` touch a common name or object (they must
    /// reach the bricks in order).
    pub fn overlaps(&self, other: &Keys) -> bool {
        self.names.iter().any(|n| other.names.contains(n))
            || self.objects.iter().any(|o| other.objects.contains(o))
    }

    /// Whether this touches `gfid`, as a directory or an object.
    pub fn touches(&self, gfid: &Gfid) -> bool {
        self.dirs.contains(gfid) || self.objects.contains(gfid)
    }
}

/// The bricks' handle of a file created ahead.
enum Handle {
    Making,
    Made(u64),
    Failed(FsError),
}

#[derive(Default)]
struct Inner {
    ops: BTreeMap<u64, Keys>,
    /// How many changes out touch each object (`Keys::objects`).
    objects: HashMap<Gfid, u32>,
    handles: HashMap<u64, Handle>,
    /// Per directory: the first error of a change ahead in it, for the
    /// directory's next fsync.
    errors: HashMap<Gfid, FsError>,
}

#[derive(Default)]
pub struct Behind {
    inner: Mutex<Inner>,
    next: AtomicU64,
    out: AtomicUsize,
    landed: Notify,
}

impl Behind {
    /// No change is out.
    pub fn idle(&self) -> bool {
        self.out.load(Ordering::Acquire) == 0
    }

    /// As many changes are out as may be.
    pub fn full(&self) -> bool {
        self.out.load(Ordering::Acquire) >= MAX_OUT
    }

    /// Notes a change answered ahead; its id orders it after every change
    /// noted before.
    pub fn start(&self, keys: Keys) -> u64 {
        let id = self.next.fetch_add(1, Ordering::AcqRel);
        let mut g = self.inner.lock().unwrap();
        for o in &keys.objects {
            *g.objects.entry(*o).or_insert(0) += 1;
        }
        g.ops.insert(id, keys);
        drop(g);
        self.out.fetch_add(1, Ordering::AcqRel);
        id
    }

    /// Notes a create answered ahead, with the handle given for it.
    pub fn start_create(&self, keys: Keys) -> (u64, u64) {
        let id = self.start(keys);
        let fh = AHEAD_FH | id;
        self.inner
            .lock()
            .unwrap()
            .handles
            .insert(fh, Handle::Making);
        (id, fh)
    }

    /// The create behind handle `fh` landed (with the bricks' handle) or
    /// failed.
    pub fn made(&self, fh: u64, res: FsResult<u64>) {
        let h = match res {
            Ok(real) => Handle::Made(real),
            Err(e) => Handle::Failed(e),
        };
        self.inner.lock().unwrap().handles.insert(fh, h);
        self.landed.notify_waiters();
    }

    /// Change `id` reached the bricks, or failed there (its error is kept
    /// for its directories' next fsync).
    pub fn land(&self, id: u64, err: Option<FsError>) {
        let mut g = self.inner.lock().unwrap();
        if let Some(keys) = g.ops.remove(&id) {
            self.out.fetch_sub(1, Ordering::AcqRel);
            for o in &keys.objects {
                if let Some(n) = g.objects.get_mut(o) {
                    *n -= 1;
                    if *n == 0 {
                        g.objects.remove(o);
                    }
                }
            }
            if let Some(e) = err {
                for d in keys.dirs {
                    g.errors.entry(d).or_insert_with(|| e.clone());
                }
            }
        }
        drop(g);
        self.landed.notify_waiters();
    }

    /// The first error of a change ahead in directory `dir` not reported
    /// yet.
    pub fn take_error(&self, dir: Gfid) -> Option<FsError> {
        self.inner.lock().unwrap().errors.remove(&dir)
    }

    /// Whether a change out touches object `gfid` (creates, unlinks,
    /// renames or replaces it): what is known of it here is made up until
    /// the change lands.
    pub fn changes_object(&self, gfid: &Gfid) -> bool {
        !self.idle() && self.inner.lock().unwrap().objects.contains_key(gfid)
    }

    /// Whether a change out other than `id` touches `gfid`.
    pub fn others_touch(&self, id: u64, gfid: &Gfid) -> bool {
        self.inner
            .lock()
            .unwrap()
            .ops
            .iter()
            .any(|(i, k)| *i != id && k.touches(gfid))
    }

    /// The id the next change will get: changes before it are out now.
    pub fn now(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    /// Returns once no change noted before `before` for which `hit` holds
    /// is out.
    pub async fn wait(&self, before: u64, hit: impl Fn(&Keys) -> bool) {
        loop {
            let landed = self.landed.notified();
            tokio::pin!(landed);
            landed.as_mut().enable();
            if !self
                .inner
                .lock()
                .unwrap()
                .ops
                .range(..before)
                .any(|(_, k)| hit(k))
            {
                return;
            }
            landed.await;
        }
    }

    /// Whether the create behind `fh` is still on its way.
    pub fn making(&self, fh: u64) -> bool {
        matches!(
            self.inner.lock().unwrap().handles.get(&fh),
            Some(Handle::Making)
        )
    }

    /// The bricks' handle for `fh`, once its create landed; its error if
    /// it failed.
    pub async fn handle(&self, fh: u64) -> FsResult<u64> {
        loop {
            let landed = self.landed.notified();
            tokio::pin!(landed);
            landed.as_mut().enable();
            match self.inner.lock().unwrap().handles.get(&fh) {
                Some(Handle::Made(real)) => return Ok(*real),
                Some(Handle::Failed(e)) => return Err(e.clone()),
                Some(Handle::Making) => {}
                None => return Err(FsError::errno(libc::EBADF)),
            }
            landed.await;
        }
    }

    /// Forgets `fh` once its create landed: the bricks' handle to release,
    /// None if the create failed.
    pub async fn release(&self, fh: u64) -> Option<u64> {
        let real = self.handle(fh).await.ok();
        self.inner.lock().unwrap().handles.remove(&fh);
        real
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn keys(dir: Gfid, name: &str, obj: Gfid) -> Keys {
        Keys {
            dirs: vec![dir],
            names: vec![(dir, name.as_bytes().to_vec())],
            objects: vec![obj],
        }
    }

    #[tokio::test]
    async fn a_wait_ends_when_the_changes_it_depends_on_land() {
        let b = Arc::new(Behind::default());
        let (d, f, g) = (Gfid::random(), Gfid::random(), Gfid::random());
        let first = b.start(keys(d, "a", f));
        let second = b.start(keys(d, "b", g));
        // A change of another name does not wait for the first.
        let other = keys(d, "b", g);
        let w = {
            let b = b.clone();
            tokio::spawn(async move { b.wait(second, move |k| k.overlaps(&other)).await })
        };
        w.await.unwrap();
        // A listing of the directory waits for both.
        let list = {
            let b = b.clone();
            tokio::spawn(async move { b.wait(u64::MAX, move |k| k.touches(&d)).await })
        };
        b.land(first, None);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!list.is_finished());
        b.land(second, Some(FsError::errno(libc::ENOSPC)));
        list.await.unwrap();
        assert!(b.idle());
        assert!(b.take_error(d).unwrap().is(libc::ENOSPC));
        assert!(b.take_error(d).is_none(), "reported once");
    }

    #[tokio::test]
    async fn a_handle_given_ahead_leads_to_the_bricks_handle_or_the_error() {
        let b = Arc::new(Behind::default());
        let (id, fh) = b.start_create(Keys::default());
        assert!(mortar_core::fop::is_ahead(fh) && b.making(fh));
        let h = {
            let b = b.clone();
            tokio::spawn(async move { b.handle(fh).await })
        };
        b.made(fh, Ok(7));
        b.land(id, None);
        assert_eq!(h.await.unwrap().unwrap(), 7);
        assert_eq!(b.release(fh).await, Some(7));
        let (_, fh) = b.start_create(Keys::default());
        b.made(fh, Err(FsError::errno(libc::EDQUOT)));
        assert!(b.handle(fh).await.unwrap_err().is(libc::EDQUOT));
        assert_eq!(b.release(fh).await, None);
    }
}
