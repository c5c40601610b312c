//! The kernel side of a mount: `/dev/fuse` opened and mounted with
//! mount(2) as type `fuse.mortar` (so that `mount`, `df -T` and mount(8)'s
//! helper lookup see what it is), the mount options turned into the
//! kernel's flags, and `-o remount,...` applied to the mount in place.
//!
//! fuser can mount too, but always as type `fuse`: mount(8) then hands a
//! remount to the generic `mount.fuse`, which stacks a second mount.

use rustix::mount::MountFlags;
use std::os::fd::OwnedFd;
use std::path::Path;

/// The kernel's view of a mount's options.
#[derive(Debug, PartialEq, Eq)]
pub struct KernelOptions {
    pub flags: MountFlags,
    /// `-o remount`: change the flags of the mount already there.
    pub remount: bool,
    /// Options neither the kernel nor mortar knows (logged, not fatal: an
    /// fstab line written for another version should still mount).
    pub unknown: Vec<String>,
}

/// Options mortar's client reads itself, and ones mount(8) or fstab pass
/// that need nothing here.
fn is_ours(o: &str) -> bool {
    matches!(
        o,
        "" | "async"
            | "defaults"
            | "_netdev"
            | "auto"
            | "noauto"
            | "nofail"
            | "user"
            | "nouser"
            | "atime"
            | "diratime"
    ) || o.starts_with("log-file=")
        || o.starts_with("x-")
        || o.starts_with("port=")
        || o.starts_with("backup-volfile-servers=")
        || o.starts_with("credential=")
        || o.starts_with("metrics=")
}

/// Parses `-o` lists (each comma-separated). Only root mounts, so the
/// defaults are mount(8)'s (`suid`, `dev`), as for a local or NFS file
/// system and for GlusterFS's mounts (not fusermount's `nosuid,nodev`, which
/// guards mounts made by ordinary users); `nosuid`, `nodev` turn them off.
pub fn parse(options: &[String]) -> KernelOptions {
    let mut flags = MountFlags::empty();
    let (mut suid, mut dev) = (true, true);
    let mut remount = false;
    let mut unknown = Vec::new();
    for o in options.iter().flat_map(|o| o.split(',')) {
        let f = match o {
            "ro" => MountFlags::RDONLY,
            "rw" => {
                flags.remove(MountFlags::RDONLY);
                continue;
            }
            "suid" => {
                suid = true;
                continue;
            }
            "nosuid" => {
                suid = false;
                continue;
            }
            "dev" => {
                dev = true;
                continue;
            }
            "nodev" => {
                dev = false;
                continue;
            }
            "exec" => {
                flags.remove(MountFlags::NOEXEC);
                continue;
            }
            "noexec" => MountFlags::NOEXEC,
            "sync" => MountFlags::SYNCHRONOUS,
            "dirsync" => MountFlags::DIRSYNC,
            "noatime" => MountFlags::NOATIME,
            "nodiratime" => MountFlags::NODIRATIME,
            "relatime" => MountFlags::RELATIME,
            "strictatime" => MountFlags::STRICTATIME,
            "lazytime" => MountFlags::LAZYTIME,
            "remount" => {
                remount = true;
                continue;
            }
            o if is_ours(o) => continue,
            o => {
                unknown.push(o.to_string());
                continue;
            }
        };
        flags |= f;
    }
    if !suid {
        flags |= MountFlags::NOSUID;
    }
    if !dev {
        flags |= MountFlags::NODEV;
    }
    KernelOptions {
        flags,
        remount,
        unknown,
    }
}

/// Opens `/dev/fuse` and mounts it on `dir` as `fuse.mortar` from
/// `source`; the returned descriptor is the session's channel.
pub fn mount(source: &str, dir: &Path, flags: MountFlags) -> std::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let dev = rustix::fs::open("/dev/fuse", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| std::io::Error::new(e.kind(), format!("/dev/fuse: {e} (is fuse loaded?)")))?;
    let root = rustix::fs::stat(dir)?;
    let data = format!(
        "fd={},rootmode={:o},user_id={},group_id={},default_permissions,allow_other",
        std::os::fd::AsRawFd::as_raw_fd(&dev),
        root.st_mode & libc::S_IFMT,
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    );
    let data = std::ffi::CString::new(data).expect("no NUL in mount data");
    rustix::mount::mount(source, dir, "fuse.mortar", flags, data.as_c_str())?;
    Ok(dev)
}

/// Applies `flags` to the mortar mount on `dir` (read-only or back, and
/// the per-mount flags), as `mount -o remount,...` asks.
pub fn remount(dir: &Path, flags: MountFlags) -> std::io::Result<()> {
    rustix::mount::mount_remount(dir, flags, "")?;
    Ok(())
}

/// The kernel's read-ahead window for FUSE mounts starts at the block
/// layer's default (128 KiB), whatever the file system's INIT answer
/// allows, so sequential reads reach the bricks as 128 KiB requests. Sets
/// the mount's own window (its `bdi`, named by the device number in
/// `/proc/self/mountinfo`: no request to the mount itself) to `kib`.
pub fn set_read_ahead(dir: &Path, kib: u32) -> std::io::Result<()> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let dev = device_of(&info, dir).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, "mount not in mountinfo")
    })?;
    std::fs::write(
        format!("/sys/class/bdi/{dev}/read_ahead_kb"),
        kib.to_string(),
    )
}

/// The `major:minor` of the last mount on `dir` in a mountinfo text.
fn device_of(mountinfo: &str, dir: &Path) -> Option<String> {
    let dir = dir.to_str()?;
    mountinfo.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        // Mount points escape spaces and the like as octal (\040).
        (f.len() > 4 && f[4].replace("\\040", " ") == dir).then(|| f[2].to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> KernelOptions {
        parse(&[s.to_string()])
    }

    #[test]
    fn mounts_are_suid_and_dev_unless_asked_otherwise() {
        assert_eq!(p("").flags, MountFlags::empty());
        assert_eq!(
            p("nosuid,nodev").flags,
            MountFlags::NOSUID | MountFlags::NODEV
        );
        assert_eq!(p("nodev,dev").flags, MountFlags::empty());
    }

    #[test]
    fn kernel_flags_and_remount_are_read_and_ours_pass_through() {
        let o = p("remount,ro,noatime,port=24007,log-file=/x,_netdev,noexec");
        assert!(o.remount);
        assert!(o.unknown.is_empty());
        assert!(o
            .flags
            .contains(MountFlags::RDONLY | MountFlags::NOATIME | MountFlags::NOEXEC));
        let o = parse(&["ro".into(), "rw,bogus".into()]);
        assert!(!o.flags.contains(MountFlags::RDONLY));
        assert_eq!(o.unknown, vec!["bogus".to_string()]);
    }

    #[test]
    fn the_device_of_a_mount_comes_from_mountinfo() {
        let info = "22 1 253:1 / / rw - ext4 /dev/vda rw\n\
                    40 22 0:39 / /mnt/my\\040vol rw - fuse.mortar h:/v rw\n\
                    41 22 0:40 / /mnt/gv0 rw - fuse.mortar h:/gv0 rw\n\
                    42 22 0:41 / /mnt/gv0 rw - fuse.mortar h:/gv0 rw\n";
        assert_eq!(device_of(info, Path::new("/mnt/gv0")).unwrap(), "0:41");
        assert_eq!(device_of(info, Path::new("/mnt/my vol")).unwrap(), "0:39");
        assert_eq!(device_of(info, Path::new("/mnt/none")), None);
    }
}
