//! Freeing a file off the caller's thread. An unlinked file's blocks are
//! freed when its last descriptor closes, which for a file of many
//! extents can take long, and on a file system mounted with `discard`
//! waits for the disk even for a small one; the brick runs quick fops
//! (an unlink among them) on its runtime's thread, where such a wait would
//! hold up every other request. The last descriptor of a file that lost
//! its last name and holds blocks (8 MiB of them, or any where the file
//! system discards: `FreeBehind`) is handed to one thread of the
//! process, which closes it; while `QUEUE` of them wait there, the caller
//! closes its own.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// From this many blocks on, an unlinked file is freed by the reaper on
/// a file system that frees blocks without waiting for the disk: there,
/// only a file of many extents takes long.
const LARGE: u64 = (8 << 20) / 512;

/// Which unlinked files the reaper closes on a brick's file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreeBehind {
    /// The file system is mounted with `discard`: a close that frees
    /// blocks waits for the disk to discard them.
    pub(crate) discards: bool,
}

impl FreeBehind {
    /// Reads the mount options of the file system of `root`.
    pub(crate) fn of(root: impl AsFd) -> FreeBehind {
        let discards = rustix::fs::fstat(root).is_ok_and(|st| discards(st.st_dev));
        FreeBehind { discards }
    }

    /// Whether a file that lost its last name holding `blocks` (of 512
    /// bytes) is closed by the reaper: any that holds one where the file
    /// system discards, 8 MiB's worth elsewhere.
    pub(crate) fn takes(self, blocks: u64) -> bool {
        blocks >= if self.discards { 1 } else { LARGE }
    }
}

/// Whether the file system of device `dev` is mounted with `discard`
/// (its options in `/proc/self/mountinfo`, after the ` - `).
fn discards(dev: u64) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|info| discards_in(&info, dev))
}

fn discards_in(mountinfo: &str, dev: u64) -> bool {
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let want = format!("{major}:{minor}");
    mountinfo
        .lines()
        .filter(|l| l.split(' ').nth(2) == Some(want.as_str()))
        .filter_map(|l| l.split_once(" - "))
        .filter_map(|(_, fs)| fs.split(' ').nth(2))
        .any(|opts| opts.split(',').any(|o| o == "discard"))
}

/// Descriptors waiting for the reaper at most.
const QUEUE: usize = 1024;

/// Descriptors handed to the reaper, and closed by it, since the process
/// started.
static SENT: AtomicU64 = AtomicU64::new(0);
static CLOSED: AtomicU64 = AtomicU64::new(0);

/// How long `drain` waits at most.
const DRAIN_AT_MOST: Duration = Duration::from_secs(5);

/// The reaper's queue; its thread starts with the first file it gets.
fn reaper() -> &'static SyncSender<OwnedFd> {
    static REAPER: OnceLock<SyncSender<OwnedFd>> = OnceLock::new();
    REAPER.get_or_init(|| {
        let (tx, rx) = sync_channel::<OwnedFd>(QUEUE);
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

/// Closes `fd` on the reaper's thread, or here when its queue is full
/// (the failed send hands `fd` back in its error, dropped at once).
pub(crate) fn close_behind(fd: OwnedFd) {
    SENT.fetch_add(1, Ordering::AcqRel);
    if reaper().try_send(fd).is_err() {
        SENT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Waits until every descriptor handed to the reaper before now is closed
/// (their files' blocks are free), for a few seconds at most: what a
/// write refused for want of room does before it looks again. Whether any
/// was waiting.
pub(crate) fn drain() -> bool {
    let sent = SENT.load(Ordering::Acquire);
    if CLOSED.load(Ordering::Acquire) >= sent {
        return false;
    }
    let deadline = Instant::now() + DRAIN_AT_MOST;
    while CLOSED.load(Ordering::Acquire) < sent && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// How many descriptors the reaper has closed.
pub fn closed() -> u64 {
    CLOSED.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discard_is_read_from_the_devices_own_mount_options() {
        let info = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict\n\
                    30 27 254:16 / /data rw,noatime - xfs /dev/vdb rw,attr2,noquota\n\
                    31 27 0:40 / /mnt/x rw - fuse.discard discard rw,user_id=0\n";
        let dev = |major, minor| rustix::fs::makedev(major, minor);
        assert!(discards_in(info, dev(254, 0)));
        assert!(!discards_in(info, dev(254, 16)));
        // A file system type or source named so is not the option.
        assert!(!discards_in(info, dev(0, 40)));
        assert!(!discards_in(info, dev(8, 1)), "a device not mounted");
        let (discarding, other) = (
            FreeBehind { discards: true },
            FreeBehind { discards: false },
        );
        assert!(discarding.takes(1) && !discarding.takes(0));
        assert!(!other.takes(LARGE - 1) && other.takes(LARGE));
    }
}
