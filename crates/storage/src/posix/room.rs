//! The room a brick keeps free (`storage.reserve`, as GlusterFS names it).
//!
//! A write or an allocation that would leave less free space than the
//! reserve is refused with ENOSPC before anything changes, unless it says
//! it may use the reserve (`Fop::Write::reserve`): a dispersed write uses
//! the reserve for room set aside by an allocation first, or to finish a
//! change the other fragments of the file already took, so that every
//! fragment holds the change or none does (docs/disperse.md, "Full
//! bricks"). `statfs` answers the space available outside the reserve, so
//! `df` shows what can still be written.
//!
//! The free space is asked of the file system (`fstatvfs`) at most every
//! `FRESH` while it is far from the reserve, and at every change near it;
//! in between, the bytes written are taken off what was last seen.

use mortar_core::options::{Kind, ShareOrSize, Spec};
use mortar_core::{FsError, FsResult};
use rustix::fs as rfs;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub static RESERVE: Spec = Spec {
    key: "storage.reserve",
    kind: Kind::ShareOrSize,
    default: "1%",
    help: "Room each brick keeps free: a share of its file system (1%, or a bare number) or a size (10GB); 0 keeps none. A write that would use it fails with ENOSPC and changes nothing; a dispersed volume's writes use it only to finish a change the other fragments took, so that a full brick never leaves a file half written. df shows the space outside it.",
};

/// How long a look at the free space serves while it is far from the line.
const FRESH: Duration = Duration::from_millis(100);

/// The reserve, and the last look at the file system less the bytes
/// taken since: one lock per write.
pub struct Room(Mutex<(ShareOrSize, Option<Seen>)>);

#[derive(Clone, Copy)]
struct Seen {
    at: Instant,
    /// Free bytes, as an unprivileged writer has them.
    free: u64,
    total: u64,
}

impl Default for Room {
    fn default() -> Room {
        let reserve = ShareOrSize::parse(RESERVE.default).expect("a valid default");
        Room(Mutex::new((reserve, None)))
    }
}

fn look(fs: impl AsFd) -> FsResult<Seen> {
    let s = rfs::fstatvfs(fs)?;
    Ok(Seen {
        at: Instant::now(),
        free: s.f_bavail.saturating_mul(s.f_frsize),
        total: s.f_blocks.saturating_mul(s.f_frsize),
    })
}

impl Room {
    pub fn set_reserve(&self, r: ShareOrSize) {
        self.0.lock().unwrap().0 = r;
    }

    /// Whether `len` more bytes may be written on the file system of `fs`
    /// (the brick's): ENOSPC, saying why, if they would reach into the
    /// reserve. Counts them as written when they may.
    pub fn take(&self, fs: impl AsFd, len: u64) -> FsResult<()> {
        let fs = fs.as_fd();
        match self.take_once(fs, len) {
            // Files unlinked just before may still hold their blocks.
            Err(e) if e.is(libc::ENOSPC) && super::reaper::drain() => {
                self.0.lock().unwrap().1 = None;
                self.take_once(fs, len)
            }
            r => r,
        }
    }

    fn take_once(&self, fs: BorrowedFd<'_>, len: u64) -> FsResult<()> {
        if len == 0 {
            return Ok(());
        }
        let mut state = self.0.lock().unwrap();
        let (reserve, seen) = &mut *state;
        if reserve.of(u64::MAX) == 0 {
            return Ok(());
        }
        let (mut s, looked) = match *seen {
            Some(s) if s.at.elapsed() < FRESH => (s, false),
            _ => (look(fs.as_fd())?, true),
        };
        let line = reserve.of(s.total);
        // Near the line, a fresh look every time: others may have freed
        // space, or taken it.
        if !looked && s.free < line.saturating_mul(4).saturating_add(len) {
            s = look(fs.as_fd())?;
        }
        let refused = s.free.saturating_sub(len) < line;
        if !refused {
            s.free -= len;
        }
        *seen = Some(s);
        if refused {
            return Err(FsError::new(
                libc::ENOSPC,
                format!(
                    "{len} bytes refused: {} bytes are free and storage.reserve keeps {line}",
                    s.free
                ),
            ));
        }
        Ok(())
    }

    /// Of `bavail` blocks of `frsize` bytes in a file system of `blocks`,
    /// those outside the reserve.
    pub fn available(&self, bavail: u64, blocks: u64, frsize: u64) -> u64 {
        let line = self.0.lock().unwrap().0.of(blocks.saturating_mul(frsize));
        bavail.saturating_sub(line.div_ceil(frsize.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn here() -> std::fs::File {
        std::fs::File::open(std::env::temp_dir()).unwrap()
    }

    #[test]
    fn writes_are_refused_before_they_reach_the_reserve() {
        let dir = here();
        let Seen { free, total, .. } = look(&dir).unwrap();
        let room = Room::default();
        room.set_reserve(ShareOrSize::Bytes(0));
        room.take(&dir, 1 << 20).unwrap();
        // A reserve of all but 4 MiB of the free space: 8 MiB do not go,
        // 512 KiB do.
        room.set_reserve(ShareOrSize::Bytes(free - (4 << 20)));
        let e = room.take(&dir, 8 << 20).unwrap_err();
        room.take(&dir, 512 << 10).unwrap();
        assert_eq!(e.errno, libc::ENOSPC);
        assert!(e.to_string().contains("storage.reserve"), "{e}");
        // A share: 100% refuses everything.
        room.set_reserve(ShareOrSize::Share(100));
        assert_eq!(room.take(&dir, 1).unwrap_err().errno, libc::ENOSPC);
        assert_eq!(room.available(1000, total / 4096, 4096), 0);
        room.set_reserve(ShareOrSize::Share(0));
        assert_eq!(room.available(1000, 4000, 4096), 1000);
    }
}
