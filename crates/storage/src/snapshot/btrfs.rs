//! The btrfs calls (`linux/btrfs.h`): no crate binds them without the C
//! library, and they are three fixed-size ioctls.
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

const NAME_MAX: usize = 4039;
const SUBVOL_RDONLY: u64 = 1 << 1;
// _IOW(0x94, nr, 4096-byte argument)
const SUBVOL_CREATE: libc::c_ulong = 0x5000_940E;
const SNAP_DESTROY: libc::c_ulong = 0x5000_940F;
const SNAP_CREATE_V2: libc::c_ulong = 0x5000_9417;

/// `struct btrfs_ioctl_vol_args_v2`.
#[repr(C)]
struct VolArgsV2 {
    fd: i64,
    transid: u64,
    flags: u64,
    unused: [u64; 4],
    name: [u8; NAME_MAX + 1],
}

/// `struct btrfs_ioctl_vol_args`.
#[repr(C)]
struct VolArgs {
    fd: i64,
    name: [u8; 4088],
}

fn put_name(to: &mut [u8], name: &[u8]) -> io::Result<()> {
    if name.len() >= to.len() || name.contains(&0) {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    to[..name.len()].copy_from_slice(name);
    Ok(())
}

fn ioctl<T>(dir: BorrowedFd<'_>, request: libc::c_ulong, args: &mut T) -> io::Result<()> {
    // SAFETY: `args` is the structure `request` is defined with (its
    // size is encoded in the request), valid for the whole call.
    let r = unsafe { libc::ioctl(dir.as_raw_fd(), request, args as *mut T) };
    match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// A snapshot of the subvolume open at `src`, named `name` in the
/// directory open at `into`: read-only, or a writable one.
pub(crate) fn snapshot(
    src: &OwnedFd,
    into: &OwnedFd,
    name: &str,
    read_only: bool,
) -> io::Result<()> {
    let mut args = VolArgsV2 {
        fd: src.as_raw_fd() as i64,
        transid: 0,
        flags: if read_only { SUBVOL_RDONLY } else { 0 },
        unused: [0; 4],
        name: [0; NAME_MAX + 1],
    };
    put_name(&mut args.name, name.as_bytes())?;
    ioctl(into.as_fd(), SNAP_CREATE_V2, &mut args)
}

/// Destroys the subvolume `name` in the directory open at `dir`.
pub(crate) fn destroy(dir: &OwnedFd, name: &str) -> io::Result<()> {
    let mut args = VolArgs {
        fd: 0,
        name: [0; 4088],
    };
    put_name(&mut args.name, name.as_bytes())?;
    ioctl(dir.as_fd(), SNAP_DESTROY, &mut args)
}

/// Makes a new, empty subvolume `name` in the directory open at `dir`.
pub(crate) fn subvolume(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let mut args = VolArgs {
        fd: 0,
        name: [0; 4088],
    };
    put_name(&mut args.name, name.as_bytes())?;
    ioctl(dir.as_fd(), SUBVOL_CREATE, &mut args)
}

#[cfg(test)]
#[test]
fn the_arguments_have_the_kernels_sizes() {
    assert_eq!(std::mem::size_of::<VolArgsV2>(), 4096);
    assert_eq!(std::mem::size_of::<VolArgs>(), 4096);
}
