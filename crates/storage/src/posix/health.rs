//! The brick's health check (GlusterFS's posix health check): a periodic
//! probe that the brick directory is still there and its file system still
//! takes writes. A brick that fails it goes offline (`brickd`), so
//! that clients stop sending it requests that can only fail and replicate
//! carries on with the good copies.

use super::{Posix, HEALTH_PROBE as PROBE, META_DIR};
use rustix::fs::{self as rfs, Mode, OFlags, ResolveFlags};
use std::os::unix::fs::FileExt;
use std::time::{SystemTime, UNIX_EPOCH};

/// Inside the brick's hidden directory.
/// Read by the brick process (`brickd`), which runs the check.
pub static HEALTH_CHECK_INTERVAL: mortar_core::options::Spec = mortar_core::options::Spec {
    key: "storage.health-check-interval",
    kind: mortar_core::options::Kind::Int(0, 3600),
    default: "30",
    help: "Seconds between checks that each brick's directory is still there and takes a write, fsync and read back; a brick that fails goes offline, with the reason in volume status, until volume start force. 0 turns the check off.",
};

/// Read by the brick process (`brickd`), which times the check.
pub static HEALTH_CHECK_TIMEOUT: mortar_core::options::Spec = mortar_core::options::Spec {
    key: "storage.health-check-timeout",
    kind: mortar_core::options::Kind::Int(0, 3600),
    default: "20",
    help: "Seconds a brick's file system has to answer the health check; a brick whose disk hangs longer goes offline, so that clients stop waiting for it and go on with the other copies. 0: no limit.",
};

/// Why a brick directory is not fit to serve: what failed, on what.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unfit(pub String);

impl From<String> for Unfit {
    fn from(why: String) -> Unfit {
        Unfit(why)
    }
}

impl From<&str> for Unfit {
    fn from(why: &str) -> Unfit {
        Unfit(why.to_string())
    }
}

impl Posix {
    /// Checks that the brick directory is the one opened at start and not
    /// deleted, and that a small write, fsync and read back of a file in
    /// it work. The error says what failed.
    pub fn health_check(&self) -> Result<(), Unfit> {
        let held = rfs::fstat(&self.root).map_err(|e| format!("stat of the brick: {e}"))?;
        if held.st_nlink == 0 {
            return Err("the brick directory was deleted".into());
        }
        match rfs::stat(self.path()) {
            Ok(now) if now.st_dev == held.st_dev && now.st_ino == held.st_ino => {}
            Ok(_) => return Err("the brick directory was replaced by another one".into()),
            Err(e) => return Err(format!("the brick directory is gone: {e}").into()),
        }
        let fd = match rfs::openat2(
            &self.root,
            format!("{META_DIR}/{PROBE}"),
            OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o600),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
        ) {
            Ok(fd) => fd,
            // Out of descriptors (a flood of connections): the process's
            // trouble, not the disk's; the brick waits and goes on, and the
            // next check probes again.
            Err(e) if e == rustix::io::Errno::MFILE || e == rustix::io::Errno::NFILE => {
                tracing::warn!(brick = %self.path().display(), "health check skipped: {e}");
                return Ok(());
            }
            Err(e) => return Err(format!("open of {META_DIR}/{PROBE}: {e}").into()),
        };
        let f = std::fs::File::from(fd);
        // Overwritten in place at a fixed width: no truncate, so the check
        // neither frees nor allocates a block, and fdatasync has only the
        // data to write.
        let stamp = format!(
            "{:020}",
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        );
        let probe = || -> std::io::Result<String> {
            f.write_all_at(stamp.as_bytes(), 0)?;
            f.sync_data()?;
            let mut back = vec![0u8; stamp.len()];
            f.read_exact_at(&mut back, 0)?;
            Ok(String::from_utf8_lossy(&back).into_owned())
        };
        match probe() {
            Ok(back) if back == stamp => Ok(()),
            Ok(_) => Err(format!("{META_DIR}/{PROBE} read back other data").into()),
            Err(e) => Err(format!("write and fsync of {META_DIR}/{PROBE}: {e}").into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_brick_directory_fails_the_check() {
        let t = tempfile::tempdir().unwrap();
        let b = t.path().join("b");
        std::fs::create_dir(&b).unwrap();
        let p = Posix::open(&b).unwrap();
        p.health_check().unwrap();
        std::fs::remove_dir_all(&b).unwrap();
        let e = p.health_check().unwrap_err();
        assert!(e.0.contains("deleted"), "{e}");
    }

    #[test]
    fn a_replaced_brick_directory_fails_the_check() {
        let t = tempfile::tempdir().unwrap();
        let b = t.path().join("b");
        std::fs::create_dir(&b).unwrap();
        let p = Posix::open(&b).unwrap();
        std::fs::rename(&b, t.path().join("old")).unwrap();
        std::fs::create_dir(&b).unwrap();
        let e = p.health_check().unwrap_err();
        assert!(e.0.contains("replaced"), "{e}");
    }
}
