use super::*;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;

#[test]
fn snapshot_names_are_single_plain_components() {
    for good in ["s1", "nightly_GMT-2026.12.07-21.00.00", "a.b-c"] {
        assert!(valid_name(good), "{good}");
    }
    for bad in [
        "",
        ".",
        "..",
        ".hidden",
        "-x",
        "a/b",
        "a b",
        "é",
        &"x".repeat(201),
    ] {
        assert!(!valid_name(bad), "{bad:?}");
    }
}

#[test]
fn a_brick_without_a_mechanism_refuses_and_keeps_nothing() {
    let fs = LoopFs::new("ext4");
    let brick = fs.dir.join("brick");
    make_brick_dir(&brick).unwrap();
    fill(&brick);
    let why = mechanism(&brick).unwrap_err();
    assert!(why.contains("no snapshot mechanism"), "{why}");
    let e = take(&brick, "s1").unwrap_err();
    assert!(e.to_string().contains("no snapshot mechanism"), "{e}");
    assert!(list(&brick).unwrap().is_empty());
    assert!(take(&brick, "../x").is_err());
    assert_eq!(
        std::fs::read(brick.join("d/e/f")).unwrap(),
        vec![7u8; 100_000]
    );
}

/// A file system of `kind` on a loop-mounted image, unmounted and
/// removed when dropped. Panics saying what to install when its tools
/// are missing.
struct LoopFs {
    image: PathBuf,
    dir: PathBuf,
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {cmd} ({e}): install it (Debian: btrfs-progs, xfsprogs, mount)")
        });
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl LoopFs {
    fn new(kind: &str) -> LoopFs {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base =
            std::env::temp_dir().join(format!("mortar-snap-{kind}-{}-{n}", std::process::id()));
        let (image, dir) = (base.with_extension("img"), base.with_extension("mnt"));
        std::fs::File::create(&image)
            .unwrap()
            .set_len(512 << 20)
            .unwrap();
        match kind {
            "btrfs" => run("mkfs.btrfs", &["-q", "-f", image.to_str().unwrap()]),
            "ext4" => run("mkfs.ext4", &["-q", "-F", image.to_str().unwrap()]),
            _ => run(
                "mkfs.xfs",
                &["-q", "-f", "-m", "reflink=1", image.to_str().unwrap()],
            ),
        };
        std::fs::create_dir_all(&dir).unwrap();
        run(
            "mount",
            &["-o", "loop", image.to_str().unwrap(), dir.to_str().unwrap()],
        );
        LoopFs { image, dir }
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
        let _ = std::fs::remove_file(&self.image);
    }
}

/// A small brick: files, a hard link, a symlink, a fifo, xattrs, owners.
fn fill(brick: &Path) {
    use std::os::unix::fs::{chown, symlink};
    std::fs::create_dir_all(brick.join(".mortar/gfid")).unwrap();
    std::fs::create_dir_all(brick.join("d/e")).unwrap();
    std::fs::write(brick.join("d/e/f"), vec![7u8; 100_000]).unwrap();
    std::fs::hard_link(brick.join("d/e/f"), brick.join(".mortar/gfid/f")).unwrap();
    symlink("../d", brick.join("d/e/up")).unwrap();
    run("mkfifo", &[brick.join("fifo").to_str().unwrap()]);
    chown(brick.join("d/e/f"), Some(1234), Some(5678)).unwrap();
    rfs::setxattr(
        brick.join("d/e/f"),
        "trusted.mortar.gfid",
        b"0123456789abcdef",
        rfs::XattrFlags::empty(),
    )
    .unwrap();
}

fn check_copy(brick: &Path, snap: &Path) {
    use std::os::unix::fs::MetadataExt;
    let (a, b) = (
        std::fs::metadata(brick.join("d/e/f")).unwrap(),
        std::fs::metadata(snap.join("d/e/f")).unwrap(),
    );
    assert_eq!(
        std::fs::read(snap.join("d/e/f")).unwrap(),
        vec![7u8; 100_000]
    );
    assert_eq!(
        (b.uid(), b.gid(), b.mode(), b.mtime_nsec()),
        (a.uid(), a.gid(), a.mode(), a.mtime_nsec())
    );
    let linked = std::fs::metadata(snap.join(".mortar/gfid/f")).unwrap();
    assert_eq!(
        (linked.ino(), linked.nlink()),
        (b.ino(), 2),
        "hard links stay links"
    );
    assert_eq!(
        std::fs::read_link(snap.join("d/e/up")).unwrap(),
        Path::new("../d")
    );
    assert!(std::fs::symlink_metadata(snap.join("fifo"))
        .unwrap()
        .file_type()
        .is_fifo_like());
    let mut v = [0u8; 16];
    rfs::getxattr(snap.join("d/e/f"), "trusted.mortar.gfid", &mut v).unwrap();
    assert_eq!(&v, b"0123456789abcdef");
    assert!(
        !snap.join(SNAPS_REL).join("s1").exists(),
        "snapshots hold no snapshots"
    );
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}
impl FifoLike for std::fs::FileType {
    fn is_fifo_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_fifo(self)
    }
}

/// Takes s1 and s2 of a filled brick, changes the brick after s1, and
/// checks s1 kept what it had; then removes both.
fn snapshots_on(brick: &Path, want: Mechanism) {
    fill(brick);
    assert_eq!(mechanism(brick), Ok(want));
    let (m, s1) = take(brick, "s1").unwrap();
    assert_eq!(m, want);
    check_copy(brick, &s1);
    std::fs::write(brick.join("d/e/f"), b"changed").unwrap();
    std::fs::remove_file(brick.join("fifo")).unwrap();
    let (_, s2) = take(brick, "s2").unwrap();
    assert_eq!(std::fs::read(s1.join("d/e/f")).unwrap(), vec![7u8; 100_000]);
    assert!(s1.join("fifo").exists());
    assert_eq!(std::fs::read(s2.join("d/e/f")).unwrap(), b"changed");
    assert!(!s2.join("fifo").exists());
    assert!(take(brick, "s1")
        .unwrap_err()
        .to_string()
        .contains("exists"));
    assert_eq!(list(brick).unwrap(), ["s1", "s2"]);
    remove(brick, "s1").unwrap();
    remove(brick, "s2").unwrap();
    assert!(list(brick).unwrap().is_empty());
    assert!(remove(brick, "s1").is_err());
}

#[test]
fn a_btrfs_subvolume_brick_is_snapshotted_whole_and_read_only() {
    let fs = LoopFs::new("btrfs");
    let brick = fs.dir.join("brick");
    make_brick_dir(&brick).unwrap();
    snapshots_on(&brick, Mechanism::Subvolume);
    take(&brick, "ro").unwrap();
    let e = std::fs::write(brick.join(SNAPS_REL).join("ro/new"), b"x").unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EROFS),
        "a snapshot is read-only"
    );
    remove(&brick, "ro").unwrap();
}

#[test]
fn a_plain_directory_on_btrfs_or_xfs_is_copied_with_shared_data() {
    for kind in ["btrfs", "xfs"] {
        let fs = LoopFs::new(kind);
        let brick = fs.dir.join("plain");
        std::fs::create_dir(&brick).unwrap();
        snapshots_on(&brick, Mechanism::Reflink);
    }
}

/// What a brick holds for a client: every path but `META_DIR`, with its
/// bytes (files) or its target (symlinks).
fn tree(brick: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            if rel == Path::new(crate::posix::META_DIR) {
                continue;
            }
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                out.insert(rel, Vec::new());
                walk(root, &p, out);
            } else if md.is_symlink() {
                out.insert(
                    rel,
                    std::fs::read_link(&p)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                );
            } else if md.is_file() {
                out.insert(rel, std::fs::read(&p).unwrap());
            } else {
                out.insert(rel, b"special".to_vec());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(brick, brick, &mut out);
    out
}

/// Restores a brick to s1 after changes, then to s2, keeping both; and
/// finishes a restore a crash interrupted half way.
fn restores_on(brick: &Path) {
    fill(brick);
    take(brick, "s1").unwrap();
    let at_s1 = tree(brick);
    std::fs::write(brick.join("d/e/f"), b"changed").unwrap();
    std::fs::write(brick.join("new"), b"new").unwrap();
    std::fs::remove_file(brick.join("fifo")).unwrap();
    take(brick, "s2").unwrap();
    let at_s2 = tree(brick);
    assert_ne!(at_s1, at_s2);

    restore(brick, "s1").unwrap();
    assert_eq!(tree(brick), at_s1);
    assert_eq!(list(brick).unwrap(), ["s1", "s2"]);
    let linked = std::fs::metadata(brick.join(".mortar/gfid/f")).unwrap();
    assert_eq!(
        linked.ino(),
        std::fs::metadata(brick.join("d/e/f")).unwrap().ino()
    );
    restore(brick, "s2").unwrap();
    assert_eq!(tree(brick), at_s2);

    // A crash after part of the brick was moved aside: not to be served,
    // and the restore asked again finishes it.
    let root = open_dir(rfs::CWD, brick).unwrap();
    let snaps = snaps_dir(&root).unwrap();
    reflink_tree(&open_dir(&snaps, "s1").unwrap(), &snaps, ".restoring").unwrap();
    std::fs::write(brick.join(".mortar/restoring"), "s1 out\n").unwrap();
    std::fs::create_dir(brick.join(".mortar/snaps/.replaced")).unwrap();
    std::fs::rename(brick.join("d"), brick.join(".mortar/snaps/.replaced/d")).unwrap();
    assert_eq!(unfinished(brick).as_deref(), Some("s1"));
    let e = restore(brick, "s2").unwrap_err();
    assert!(e.to_string().contains("unfinished"), "{e}");
    restore(brick, "s1").unwrap();
    assert_eq!(unfinished(brick), None);
    assert_eq!(tree(brick), at_s1);
    assert_eq!(list(brick).unwrap(), ["s1", "s2"]);
}

#[test]
fn a_brick_is_restored_to_a_snapshot_and_a_restore_cut_short_is_finished() {
    for kind in ["btrfs", "xfs"] {
        let fs = LoopFs::new(kind);
        let brick = fs.dir.join("brick");
        make_brick_dir(&brick).unwrap();
        restores_on(&brick);
    }
}

#[test]
fn a_clone_is_a_writable_copy_with_no_volume_and_no_snapshots() {
    for kind in ["btrfs", "xfs"] {
        let fs = LoopFs::new(kind);
        let brick = fs.dir.join("brick");
        make_brick_dir(&brick).unwrap();
        fill(&brick);
        rfs::setxattr(
            &brick,
            crate::posix::VOLUME_ID_XATTR,
            b"vol-1",
            rfs::XattrFlags::empty(),
        )
        .unwrap();
        take(&brick, "s1").unwrap();
        take(&brick, "s2").unwrap();
        let at_s2 = tree(&brick);
        std::fs::write(brick.join("later"), b"later").unwrap();
        let to = fs.dir.join("clones/c1");
        clone(&brick, "s2", &to).unwrap();
        assert_eq!(tree(&to), at_s2, "{kind}");
        assert!(list(&to).unwrap().is_empty(), "{kind}: {:?}", list(&to));
        let mut id = [0u8; 16];
        assert!(rfs::getxattr(&to, crate::posix::VOLUME_ID_XATTR, &mut id).is_err());
        std::fs::write(to.join("d/e/f"), b"the clone's own").unwrap();
        assert_eq!(
            std::fs::read(brick.join("d/e/f")).unwrap(),
            vec![7u8; 100_000]
        );
        let e = clone(&brick, "s2", &to).unwrap_err();
        assert!(e.to_string().contains("exists"), "{e}");
    }
}

#[test]
fn a_copy_made_ahead_is_brought_up_to_date_with_what_changed_meanwhile() {
    for kind in ["xfs", "btrfs"] {
        let fs = LoopFs::new(kind);
        let brick = fs.dir.join("plain");
        std::fs::create_dir(&brick).unwrap();
        fill(&brick);
        std::fs::create_dir_all(brick.join("d/moved/deep")).unwrap();
        std::fs::write(brick.join("d/moved/deep/x"), b"x").unwrap();
        std::fs::write(brick.join("gone"), b"gone").unwrap();
        std::fs::create_dir_all(brick.join(".mortar/pending")).unwrap();
        let pre = precopy(&brick, "s1").unwrap();
        // Changes after the walk, each noted as the barrier notes them.
        let mut changed = Changed::default();
        std::fs::write(brick.join("d/e/f"), b"rewritten").unwrap();
        changed.objects.insert(".mortar/gfid/f".into());
        rfs::setxattr(
            brick.join("d/e/f"),
            "user.new",
            b"1",
            rfs::XattrFlags::empty(),
        )
        .unwrap();
        std::fs::write(brick.join("d/new"), b"new").unwrap();
        std::fs::hard_link(brick.join("d/new"), brick.join(".mortar/gfid/new")).unwrap();
        changed.entries.insert("d/new".into());
        changed.objects.insert(".mortar/gfid/new".into());
        std::fs::remove_file(brick.join("gone")).unwrap();
        changed.entries.insert("gone".into());
        std::fs::rename(brick.join("d/moved"), brick.join("d/e/moved")).unwrap();
        changed.entries.insert("d/moved".into());
        changed.entries.insert("d/e/moved".into());
        changed.metas.insert("d/e".into());
        std::fs::set_permissions(
            brick.join("d/e"),
            std::os::unix::fs::PermissionsExt::from_mode(0o750),
        )
        .unwrap();
        std::fs::hard_link(brick.join("d/e/f"), brick.join(".mortar/pending/f")).unwrap();
        let at = pre.finish(&changed).unwrap();
        let copy = brick.join(at);
        assert_eq!(tree(&copy), tree(&brick), "{kind}");
        let mut v = [0u8; 4];
        assert_eq!(
            rfs::getxattr(copy.join("d/e/f"), "user.new", &mut v).unwrap(),
            1,
            "{kind}"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(copy.join("d/e"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o750, "{kind}");
        let (a, b) = (
            std::fs::metadata(copy.join("d/new")).unwrap(),
            std::fs::metadata(copy.join(".mortar/gfid/new")).unwrap(),
        );
        assert_eq!(
            a.ino(),
            b.ino(),
            "{kind}: the new file's handle is a link to it"
        );
        let pend = std::fs::metadata(copy.join(".mortar/pending/f")).unwrap();
        assert_eq!(
            pend.ino(),
            std::fs::metadata(copy.join("d/e/f")).unwrap().ino(),
            "{kind}"
        );
        assert_eq!(list(&brick).unwrap(), ["s1"]);
        // One abandoned leaves nothing.
        precopy(&brick, "s2").unwrap().abandon();
        assert_eq!(list(&brick).unwrap(), ["s1"]);
        assert!(!brick.join(".mortar/snaps/.s2.partial").exists());
    }
}
