//! Cluster translators: `replicate` copies every change to each brick of a
//! replica set; `distribute` places files across replica sets by the hash of
//! their names, within each directory's `layout`.
pub mod dir_meta;
pub mod distribute;
pub mod layout;
pub mod listing;
pub mod replicate;

use mortar_core::{FsError, FsResult, Reply};

/// The first child that answered with success, else the last failure
/// (ESTALE when no child was asked): for questions any one child may
/// answer, such as finding an object by inode number (`Fop::Resolve`).
pub(crate) fn first_ok(answers: impl IntoIterator<Item = FsResult<Reply>>) -> FsResult<Reply> {
    let mut last = FsError::errno(libc::ESTALE);
    for r in answers {
        match r {
            Ok(rep) => return Ok(rep),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The answer of a cluster translator to replication bookkeeping (locks,
/// markers, the heal index): those go to bricks directly, never through it.
pub(crate) fn bookkeeping_refused() -> FsError {
    FsError::new(
        libc::EOPNOTSUPP,
        "replication bookkeeping goes to bricks directly",
    )
}

/// A table of handles issued by a translator (replicate, distribute, the
/// client's active graph), each mapping to what those below issued.
pub struct HandleMap<T> {
    next: std::sync::atomic::AtomicU64,
    map: std::sync::Mutex<std::collections::HashMap<u64, T>>,
}

impl<T: Clone> Default for HandleMap<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone> HandleMap<T> {
    pub fn new() -> Self {
        HandleMap {
            next: std::sync::atomic::AtomicU64::new(1),
            map: Default::default(),
        }
    }
    pub fn insert(&self, v: T) -> u64 {
        let fh = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.map.lock().unwrap().insert(fh, v);
        fh
    }
    pub fn get(&self, fh: u64) -> FsResult<T> {
        self.map
            .lock()
            .unwrap()
            .get(&fh)
            .cloned()
            .ok_or_else(|| FsError::new(libc::EBADF, format!("unknown handle {fh}")))
    }
    /// Replaces what `fh` stands for; false if it is gone (released).
    pub(crate) fn replace(&self, fh: u64, v: T) -> bool {
        match self.map.lock().unwrap().get_mut(&fh) {
            Some(slot) => {
                *slot = v;
                true
            }
            None => false,
        }
    }
    /// Replaces what `fh` stands for if `still` holds of it; false if it
    /// is gone or changed meanwhile.
    pub fn replace_if(&self, fh: u64, still: impl FnOnce(&T) -> bool, v: T) -> bool {
        match self.map.lock().unwrap().get_mut(&fh) {
            Some(slot) if still(slot) => {
                *slot = v;
                true
            }
            _ => false,
        }
    }
    pub fn remove(&self, fh: u64) -> Option<T> {
        self.map.lock().unwrap().remove(&fh)
    }
    /// The handles `pick` chooses, as they are now.
    pub fn select(&self, pick: impl Fn(&T) -> bool) -> Vec<(u64, T)> {
        let map = self.map.lock().unwrap();
        map.iter()
            .filter(|(_, v)| pick(v))
            .map(|(k, v)| (*k, v.clone()))
            .collect()
    }
    pub fn len(&self) -> usize {
        self.map.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
