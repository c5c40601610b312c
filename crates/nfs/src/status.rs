//! nfsstat3 (RFC 1813): the statuses NFS procedures and MOUNT answer
//! with, and the one of each errno.

use mortar_core::FsError;

/// nfsstat3 values used here.
pub mod stat {
    pub const OK: u32 = 0;
    pub const PERM: u32 = 1;
    pub const NOENT: u32 = 2;
    pub const IO: u32 = 5;
    pub const NXIO: u32 = 6;
    pub const ACCES: u32 = 13;
    pub const EXIST: u32 = 17;
    pub const XDEV: u32 = 18;
    pub const NODEV: u32 = 19;
    pub const NOTDIR: u32 = 20;
    pub const ISDIR: u32 = 21;
    pub const INVAL: u32 = 22;
    pub const FBIG: u32 = 27;
    pub const NOSPC: u32 = 28;
    pub const ROFS: u32 = 30;
    pub const MLINK: u32 = 31;
    pub const NAMETOOLONG: u32 = 63;
    pub const NOTEMPTY: u32 = 66;
    pub const DQUOT: u32 = 69;
    pub const STALE: u32 = 70;
    pub const BADHANDLE: u32 = 10001;
    pub const NOT_SYNC: u32 = 10002;
    pub const BAD_COOKIE: u32 = 10003;
    pub const NOTSUPP: u32 = 10004;
    pub const TOOSMALL: u32 = 10005;
    pub const SERVERFAULT: u32 = 10006;
    pub const BADTYPE: u32 = 10007;
    pub const JUKEBOX: u32 = 10008;
}

/// The nfsstat3 of an errno.
pub fn status_of(e: &FsError) -> u32 {
    match e.errno {
        libc::EPERM => stat::PERM,
        libc::ENOENT => stat::NOENT,
        libc::ENXIO => stat::NXIO,
        libc::EACCES => stat::ACCES,
        libc::EEXIST => stat::EXIST,
        libc::EXDEV => stat::XDEV,
        libc::ENODEV => stat::NODEV,
        libc::ENOTDIR => stat::NOTDIR,
        libc::EISDIR => stat::ISDIR,
        libc::EINVAL => stat::INVAL,
        libc::EFBIG => stat::FBIG,
        libc::ENOSPC => stat::NOSPC,
        libc::EROFS => stat::ROFS,
        libc::EMLINK => stat::MLINK,
        libc::ENAMETOOLONG => stat::NAMETOOLONG,
        libc::ENOTEMPTY => stat::NOTEMPTY,
        libc::EDQUOT => stat::DQUOT,
        libc::ESTALE => stat::STALE,
        libc::EOPNOTSUPP | libc::ENOSYS => stat::NOTSUPP,
        // Come back later (a lock held, a brick starting).
        libc::EAGAIN | libc::EBUSY => stat::JUKEBOX,
        _ => stat::IO,
    }
}
