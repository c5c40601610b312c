//! What `volume status NAME detail|clients|mem|inode|fd` shows of a brick
//! process: its file system, memory, connections and open objects. A
//! brick answers it as JSON (`STATUS_XATTR`, `debug/profile`); the figures
//! of the process itself are read here, from /proc and statvfs.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Read-only virtual xattrs of a brick's root, root's only.
pub const STATUS_XATTR: &str = "trusted.mortar.brick.status";
pub const STATEDUMP_XATTR: &str = "trusted.mortar.brick.statedump";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Disk {
    pub fs_type: String,
    pub device: String,
    pub mount_options: String,
    pub block_size: u64,
    pub size: u64,
    pub free: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub resident: u64,
    pub peak_resident: u64,
    pub virtual_size: u64,
    pub threads: u64,
}

/// One client connected to a brick.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientConn {
    pub peer: String,
    /// Seconds since the epoch.
    pub since: u64,
    pub fops: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub open_fds: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BrickDetail {
    pub pid: u32,
    pub disk: Disk,
    pub memory: Memory,
    pub clients: Vec<ClientConn>,
    /// Files clients hold open here, and the handles on them.
    pub open_objects: u64,
    pub open_handles: u64,
}

/// The file system `path` is on: from statvfs and the mount table.
pub fn disk_of(path: &Path) -> Disk {
    let mut d = Disk::default();
    if let Ok(s) = rustix::fs::statvfs(path) {
        let frsize = s.f_frsize.max(1);
        d.block_size = s.f_bsize;
        d.size = s.f_blocks * frsize;
        d.free = s.f_bavail * frsize;
        d.inodes = s.f_files;
        d.inodes_free = s.f_favail;
    }
    // The longest mount point above the path (mountinfo: id, parent,
    // dev, root, point, options, optional fields, -, type, source,
    // super options).
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut best = 0;
    for line in info.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let Some(dash) = f.iter().position(|x| *x == "-") else {
            continue;
        };
        if f.len() < dash + 3 || f.len() < 6 {
            continue;
        }
        let point = f[4].replace("\\040", " ");
        if path.starts_with(&point) && point.len() >= best {
            best = point.len();
            d.mount_options = f[5].to_string();
            d.fs_type = f[dash + 1].to_string();
            d.device = f[dash + 2].to_string();
        }
    }
    d
}

/// This process's memory, from /proc/self/status.
pub fn memory() -> Memory {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Memory {
        resident: field("VmRSS:") * 1024,
        peak_resident: field("VmHWM:") * 1024,
        virtual_size: field("VmSize:") * 1024,
        threads: field("Threads:"),
    }
}

/// Sizes as GlusterFS's status shows them: 9.5GB, 512.0MB.
pub fn human(bytes: u64) -> String {
    let units = ["Bytes", "KB", "MB", "GB", "TB", "PB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    match u {
        0 => format!("{bytes}Bytes"),
        _ => format!("{v:.1}{}", units[u]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_and_memory_of_this_process_are_read() {
        let d = disk_of(Path::new("/proc/self"));
        assert_eq!(d.fs_type, "proc");
        let d = disk_of(&std::env::temp_dir());
        assert!(d.size > 0 && !d.fs_type.is_empty(), "{d:?}");
        let m = memory();
        assert!(m.resident > 0 && m.threads >= 1, "{m:?}");
        assert_eq!(human(512), "512Bytes");
        assert_eq!(human(10 << 30), "10.0GB");
    }
}
