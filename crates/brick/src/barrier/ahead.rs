//! A snapshot's copy made ahead of the barrier on a brick copied by
//! reflink (`storage::snapshot::precopy`), and what the brick's changes
//! touch meanwhile: the barrier then only has to wait for those to be
//! copied again (docs/snapshots.md).

use super::changes::{Touch, Touched};
use mortar_core::{FsResult, Reply};
use mortar_storage::posix::Posix;
use mortar_storage::snapshot::{self, Precopy};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Rounds of catching up at most, and how few things noted are left for
/// the barrier at once.
const CATCH_UPS: usize = 3;
const SMALL: usize = 64;

#[derive(Default)]
pub(super) struct Ahead {
    /// Whether changes are noted (from before a copy ahead begins until it
    /// is taken or abandoned).
    noting: AtomicBool,
    touched: Mutex<Touched>,
    /// The copy made ahead, by snapshot name, and which one it is.
    made: Mutex<Option<(u64, Precopy)>>,
    next: AtomicU64,
}

impl Ahead {
    /// Whether changes are noted now.
    pub(super) fn noting(&self) -> bool {
        self.noting.load(Ordering::SeqCst)
    }

    /// Notes what a change that ended touched, while a copy is made ahead.
    pub(super) fn note(&self, t: Touch, answer: &FsResult<Reply>) {
        if self.noting.load(Ordering::SeqCst) {
            self.touched.lock().unwrap().add(t, answer);
        }
    }

    /// Makes snapshot `name`'s copy of `brick` ahead (blocking), noting
    /// changes from before it begins; answers which copy it is.
    pub(super) fn make(&self, posix: &Posix, name: &str) -> std::io::Result<u64> {
        let brick = posix.path();
        self.abandon_any();
        *self.touched.lock().unwrap() = Touched::default();
        self.noting.store(true, Ordering::SeqCst);
        match snapshot::precopy(brick, name).and_then(|p| self.catch_up(p, posix)) {
            Ok(p) => {
                let id = self.next.fetch_add(1, Ordering::SeqCst);
                *self.made.lock().unwrap() = Some((id, p));
                Ok(id)
            }
            Err(e) => {
                self.noting.store(false, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    /// The copy made ahead for snapshot `name`, if there is one, as the
    /// work that brings it up to date and makes it the snapshot (the
    /// brick no longer changing): noting ends.
    #[allow(clippy::type_complexity)]
    pub(super) fn take(
        &self,
        name: &str,
        posix: Arc<Posix>,
    ) -> Option<Box<dyn FnOnce() -> std::io::Result<(snapshot::Mechanism, PathBuf)> + Send>> {
        let mut made = self.made.lock().unwrap();
        if made.as_ref().is_none_or(|(_, p)| p.name() != name) {
            return None;
        }
        let (_, pre) = made.take()?;
        self.noting.store(false, Ordering::SeqCst);
        let touched = std::mem::take(&mut *self.touched.lock().unwrap());
        Some(Box::new(move || {
            let at = pre.finish(&touched.changed(&posix))?;
            Ok((snapshot::Mechanism::Reflink, posix.path().join(at)))
        }))
    }

    /// The copy made ahead for snapshot `name`, if there is one, taken
    /// away to be removed (`Precopy::abandon`, blocking).
    pub(super) fn abandon(&self, name: &str) -> Option<Precopy> {
        let mut made = self.made.lock().unwrap();
        if made.as_ref().is_none_or(|(_, p)| p.name() != name) {
            return None;
        }
        let (_, pre) = made.take()?;
        self.noting.store(false, Ordering::SeqCst);
        Some(pre)
    }

    /// Brings a copy made ahead up to date with what changed while it was
    /// made, while the brick still changes, a few times over: each round
    /// has less to copy again than the one before, and the barrier waits
    /// only for the last one's changes.
    fn catch_up(&self, mut pre: Precopy, posix: &Posix) -> std::io::Result<Precopy> {
        for _ in 0..CATCH_UPS {
            let touched = std::mem::take(&mut *self.touched.lock().unwrap());
            if touched.len() < SMALL {
                // (Put back: the barrier brings these up to date.)
                self.touched.lock().unwrap().merge(touched);
                break;
            }
            pre.catch_up(&touched.changed(posix))?;
        }
        Ok(pre)
    }

    /// Removes copy `id` if it is still waiting to be taken.
    pub(super) fn expire(&self, id: u64) -> Option<String> {
        let mut made = self.made.lock().unwrap();
        if made.as_ref().is_none_or(|(i, _)| *i != id) {
            return None;
        }
        let (_, pre) = made.take().expect("checked");
        self.noting.store(false, Ordering::SeqCst);
        drop(made);
        let name = pre.name().to_string();
        pre.abandon();
        Some(name)
    }

    fn abandon_any(&self) {
        if let Some((_, pre)) = self.made.lock().unwrap().take() {
            pre.abandon();
        }
        self.noting.store(false, Ordering::SeqCst);
    }
}
