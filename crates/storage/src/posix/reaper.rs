//! Freeing a large file off the caller's thread. An unlinked file's
//! blocks are freed when its last descriptor closes, which for a file of
//! many extents can take long; the brick runs quick fops (an unlink among
//! them) on its runtime's thread, where such a wait would hold up every
//! other request. The last descriptor of a large file that lost its last
//! name is handed to one thread of the process, which closes it.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};

/// From this size on, a file's blocks are freed by the reaper.
pub(crate) const FREE_BEHIND: u64 = 8 << 20;

/// Descriptors closed by the reaper since the process started.
static CLOSED: AtomicU64 = AtomicU64::new(0);

fn reaper() -> &'static Mutex<Sender<OwnedFd>> {
    static REAPER: OnceLock<Mutex<Sender<OwnedFd>>> = OnceLock::new();
    REAPER.get_or_init(|| {
        let (tx, rx) = channel::<OwnedFd>();
        std::thread::Builder::new()
            .name("posix-reaper".into())
            .spawn(move || {
                for fd in rx {
                    drop(fd);
                    CLOSED.fetch_add(1, Ordering::Relaxed);
                }
            })
            .expect("a thread for the reaper");
        Mutex::new(tx)
    })
}

/// Closes `fd` on the reaper's thread (at once if it cannot have it).
pub(crate) fn close_behind(fd: OwnedFd) {
    if let Err(back) = reaper().lock().unwrap().send(fd) {
        drop(back.0);
    }
}

/// How many descriptors the reaper has closed.
pub fn closed() -> u64 {
    CLOSED.load(Ordering::Relaxed)
}
