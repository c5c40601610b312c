//! Freeing a large file off the caller's thread. An unlinked file's
//! blocks are freed when its last descriptor closes, which for a file of
//! many extents can take long; the brick runs quick fops (an unlink among
//! them) on its runtime's thread, where such a wait would hold up every
//! other request. The last descriptor of a large file that lost its last
//! name is handed to one thread of the process, which closes it.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::OnceLock;

/// From this size on, a file's blocks are freed by the reaper.
pub(crate) const FREE_BEHIND: u64 = 8 << 20;

/// Descriptors closed by the reaper since the process started.
static CLOSED: AtomicU64 = AtomicU64::new(0);

/// The reaper's queue; its thread starts with the first file it gets.
fn reaper() -> &'static Sender<OwnedFd> {
    static REAPER: OnceLock<Sender<OwnedFd>> = OnceLock::new();
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
        tx
    })
}

/// Closes `fd` on the reaper's thread (here, if it cannot have it: the
/// failed send hands `fd` back in its error, dropped at once).
pub(crate) fn close_behind(fd: OwnedFd) {
    let _ = reaper().send(fd);
}

/// How many descriptors the reaper has closed.
pub fn closed() -> u64 {
    CLOSED.load(Ordering::Relaxed)
}
