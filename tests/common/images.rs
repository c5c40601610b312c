//! File systems of their own for bricks: a loop-mounted image of btrfs,
//! XFS (with reflink) or ext4, unmounted and removed when dropped (make
//! it before the cluster whose bricks it holds, so that it goes after).

use super::*;

pub struct LoopFs {
    pub dir: PathBuf,
    image: PathBuf,
}

impl LoopFs {
    /// A `size` image of `kind` ("btrfs", "xfs", "ext4"); fails saying
    /// what to install when its tools are missing.
    pub fn new(kind: &str, size: &str) -> LoopFs {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let base =
            std::env::temp_dir().join(format!("mortar-fs-{}-{kind}-{n}", std::process::id()));
        let (image, dir) = (base.with_extension("img"), base.with_extension("mnt"));
        let mkfs = match kind {
            "btrfs" => "mkfs.btrfs -q -f",
            "xfs" => "mkfs.xfs -q -f -m reflink=1",
            _ => "mkfs.ext4 -q -F",
        };
        let tool = mkfs.split(' ').next().unwrap();
        assert!(
            sh(&format!("command -v {tool}")).status.success(),
            "{tool} is missing: install btrfs-progs, xfsprogs or e2fsprogs (Debian)"
        );
        ok(&format!("truncate -s {size} {}", image.display()));
        ok(&format!("{mkfs} {}", image.display()));
        std::fs::create_dir_all(&dir).unwrap();
        ok(&format!(
            "mount -o loop {} {}",
            image.display(),
            dir.display()
        ));
        LoopFs { dir, image }
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = sh(&format!("umount -l {}", self.dir.display()));
        let _ = std::fs::remove_dir(&self.dir);
        let _ = std::fs::remove_file(&self.image);
    }
}
