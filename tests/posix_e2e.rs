//! POSIX behaviour through a mounted replica-3 volume, checked with real
//! tools and, where tools fall short (mmap, fallocate), with python3.

mod common;
use common::*;

#[test]
fn posix_semantics_through_the_mount() {
    let c = Cluster::start();
    let bricks = c.volume("px", 3, &["p1", "p2", "p3"]);
    let m = c.mount("px");
    let d = m.dir.display().to_string();

    ownership_and_permissions(&d, &bricks);
    acls(&d, &bricks);
    times_and_links(&d, &bricks);
    appends_xattrs_statfs(&d, &bricks);
    mmap_and_open_files(&d, &bricks);
    whiteouts_and_names(&d, &bricks);
}

/// Ownership and permissions, and set-id bits cleared by writes.
fn ownership_and_permissions(d: &str, bricks: &[std::path::PathBuf]) {
    // Ownership and permissions, enforced for an ordinary user.
    ok(&format!("mkdir {d}/pub && chmod 1777 {d}/pub && echo root-only > {d}/secret && chmod 600 {d}/secret"));
    ok(&format!("su nobody -s /bin/sh -c 'echo mine > {d}/pub/n'"));
    assert_eq!(ok(&format!("stat -c %U {d}/pub/n")).trim(), "nobody");
    assert_eq!(
        ok(&format!("stat -c %U {}", bricks[1].join("pub/n").display())).trim(),
        "nobody"
    );
    assert!(!sh(&format!("su nobody -s /bin/sh -c 'cat {d}/secret'"))
        .status
        .success());
    assert!(
        !sh(&format!("su nobody -s /bin/sh -c 'echo x > {d}/denied'"))
            .status
            .success()
    );
    ok(&format!(
        "chown 1234:2345 {d}/secret && chmod 4640 {d}/secret"
    ));
    assert_eq!(
        ok(&format!("stat -c '%u %g %a' {d}/secret")).trim(),
        "1234 2345 4640"
    );
    assert_eq!(
        ok(&format!(
            "stat -c '%u %g %a' {}",
            bricks[2].join("secret").display()
        ))
        .trim(),
        "1234 2345 4640"
    );

    // A write by a process without CAP_FSETID clears the set-id bits, also
    // an O_DIRECT one by the owner (xfstests generic/355); a file opened
    // with O_DIRECT can still be mapped (generic/091, 263).
    ok(&format!(
        "su nobody -s /bin/sh -c 'echo x > {d}/pub/s && chmod 6775 {d}/pub/s && \
         dd if=/dev/zero of={d}/pub/s bs=4096 count=1 oflag=direct conv=notrunc status=none'"
    ));
    assert_eq!(ok(&format!("stat -c %a {d}/pub/s")).trim(), "775");
    let py = format!(
        r#"
import mmap, os
fd = os.open('{d}/pub/s', os.O_RDWR | os.O_DIRECT)
m = mmap.mmap(fd, 4096)
m[0:5] = b'hello'
m.flush()
m.close()
os.close(fd)
assert open('{d}/pub/s', 'rb').read(5) == b'hello'
print('ok')
"#
    );
    assert_eq!(
        ok(&format!("python3 -c \"{}\"", py.replace('"', "\\\""))).trim(),
        "ok"
    );
}

/// POSIX ACLs.
fn acls(d: &str, bricks: &[std::path::PathBuf]) {
    // POSIX ACLs: enforced, kept on the bricks as their own ACLs, and a
    // directory's default ACL takes over from the umask.
    ok(&format!(
        "echo acl > {d}/acl && chmod 600 {d}/acl && setfacl -m u:nobody:rw {d}/acl"
    ));
    ok(&format!("su nobody -s /bin/sh -c 'echo by-acl >> {d}/acl'"));
    assert!(
        ok(&format!("getfacl -c {}", bricks[2].join("acl").display())).contains("user:nobody:rw-")
    );
    ok(&format!("setfacl -x u:nobody {d}/acl"));
    assert!(!sh(&format!("su nobody -s /bin/sh -c 'cat {d}/acl'"))
        .status
        .success());
    ok(&format!(
        "mkdir {d}/inherit && setfacl -d -m u::rwx,g::rwx,o::rwx,u:nobody:r-x {d}/inherit"
    ));
    ok(&format!(
        "umask 077 && mkdir {d}/inherit/sub && touch {d}/inherit/f"
    ));
    assert_eq!(ok(&format!("stat -c %a {d}/inherit/sub")).trim(), "777");
    // An owner outside the file's group who sets an ACL loses set-gid, as
    // with chmod (xfstests generic/375).
    ok(&format!(
        "touch {d}/pub/sg && chown nobody:root {d}/pub/sg && chmod 2755 {d}/pub/sg && \
         su nobody -s /bin/sh -c 'setfacl -m u::rwx,g::rwx,o::rwx {d}/pub/sg'"
    ));
    assert_eq!(ok(&format!("stat -c %a {d}/pub/sg")).trim(), "777");
    assert!(ok(&format!("getfacl -c {d}/inherit/f")).contains("user:nobody:r-x"));
    for b in bricks {
        assert!(
            ok(&format!("getfacl -c {}", b.join("inherit/sub").display()))
                .contains("default:user:nobody:r-x")
        );
    }
}

/// Timestamps, links, renames over a file.
fn times_and_links(d: &str, bricks: &[std::path::PathBuf]) {
    // Timestamps.
    ok(&format!("touch -d '2001-02-03 04:05:06.5' {d}/secret"));
    assert_eq!(
        ok(&format!("stat -c %y {d}/secret")).trim(),
        "2001-02-03 04:05:06.500000000 +0000"
    );
    // Reads leave atime alone, on every copy (no copy's differs from the
    // others by which one served the read).
    ok(&format!(
        "echo r > {d}/reads && touch -a -d '2001-01-01' {d}/reads"
    ));
    std::thread::sleep(std::time::Duration::from_millis(1100));
    for _ in 0..3 {
        ok(&format!("cat {d}/reads >/dev/null && ls {d} >/dev/null"));
    }
    for p in std::iter::once(format!("{d}/reads"))
        .chain(bricks.iter().map(|b| b.join("reads").display().to_string()))
    {
        assert_eq!(ok(&format!("stat -c %X {p}")).trim(), "978307200", "{p}");
    }

    // Hard links, symlinks, rename over an existing file.
    ok(&format!(
        "echo data > {d}/a && ln {d}/a {d}/a2 && ln -s a {d}/sl"
    ));
    assert_eq!(ok(&format!("stat -c %h {d}/a")).trim(), "2");
    assert_eq!(ok(&format!("readlink {d}/sl")).trim(), "a");
    assert_eq!(ok(&format!("cat {d}/sl")), "data\n");
    ok(&format!("echo new > {d}/b && mv {d}/b {d}/a"));
    assert_eq!(ok(&format!("cat {d}/a")), "new\n");
    assert_eq!(ok(&format!("cat {d}/a2")), "data\n");
    ok(&format!(
        "mkdir -p {d}/x/y && mv {d}/x {d}/z && echo deep > {d}/z/y/f"
    ));
    assert_eq!(ok(&format!("cat {d}/z/y/f")), "deep\n");
    ok(&format!(
        "rm {d}/a2 {d}/sl && rmdir {d}/z/y 2>/dev/null || rm -r {d}/z"
    ));
}

/// Appends, sparse and large files, xattrs, statfs.
fn appends_xattrs_statfs(d: &str, bricks: &[std::path::PathBuf]) {
    // O_APPEND, sparse and large (> 4 GiB) files.
    ok(&format!(
        "echo 1 > {d}/ap && echo 2 >> {d}/ap && echo 3 >> {d}/ap"
    ));
    assert_eq!(ok(&format!("cat {d}/ap")), "1\n2\n3\n");
    ok(&format!("truncate -s 6G {d}/big && printf tail | dd of={d}/big bs=1 seek=$((5*1024*1024*1024)) conv=notrunc status=none"));
    assert_eq!(
        ok(&format!("stat -c %s {d}/big")).trim(),
        (6u64 << 30).to_string()
    );
    assert_eq!(
        ok(&format!(
            "dd if={d}/big bs=1 skip=$((5*1024*1024*1024)) count=4 status=none"
        )),
        "tail"
    );
    let blocks: u64 = ok(&format!("stat -c %b {}", bricks[0].join("big").display()))
        .trim()
        .parse()
        .unwrap();
    assert!(
        blocks < 1024,
        "sparse file is not sparse on the brick: {blocks} blocks"
    );

    // xattrs, and internal ones hidden and protected.
    ok(&format!("setfattr -n user.colour -v blue {d}/ap"));
    assert!(ok(&format!("getfattr -n user.colour {d}/ap")).contains("blue"));
    let all = ok(&format!("getfattr -d -m - {d}/ap"));
    assert!(!all.contains("trusted.mortar"), "{all}");
    assert!(
        !sh(&format!("setfattr -n trusted.mortar.gfid -v 0x00 {d}/ap"))
            .status
            .success()
    );
    ok(&format!("setfattr -x user.colour {d}/ap"));

    // statfs reports the bricks' real capacity.
    let vol = ok(&format!("stat -f -c '%b %S' {d}"));
    let brick = ok(&format!("stat -f -c '%b %S' {}", bricks[0].display()));
    assert_eq!(vol, brick);
}

/// mmap, fallocate, and files read after their last name goes.
fn mmap_and_open_files(d: &str, bricks: &[std::path::PathBuf]) {
    // mmap, fallocate (plain, punch-hole, zero-range) and read coherency.
    let py = format!(
        r#"
import mmap, os, ctypes
libc = ctypes.CDLL(None, use_errno=True)
p = '{d}/mm'
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, 65536)
m = mmap.mmap(fd, 65536)
m[100:105] = b'hello'
m.flush()
assert os.pread(fd, 5, 100) == b'hello', 'mapped write not seen by read'
os.pwrite(fd, b'X' * 16384, 4096)
assert m[4096:4100] == b'XXXX', 'write not seen through the mapping'
m.close()
assert libc.fallocate(fd, 3, ctypes.c_long(4096), ctypes.c_long(4096)) == 0, 'punch hole'
assert os.pread(fd, 4096, 4096) == bytes(4096) and os.pread(fd, 1, 8192) == b'X'
assert libc.fallocate(fd, 0x10, ctypes.c_long(8192), ctypes.c_long(4096)) == 0, 'zero range'
assert os.pread(fd, 4096, 8192) == bytes(4096) and os.pread(fd, 1, 12288) == b'X'
m = mmap.mmap(fd, 65536)
assert m[4096:4100] == bytes(4) and m[12288:12289] == b'X' and m[100:105] == b'hello'
m.close()
assert libc.fallocate(fd, 0, ctypes.c_long(0), ctypes.c_long(1 << 20)) == 0
assert os.fstat(fd).st_size == 1 << 20
os.close(fd)
print('ok')
"#
    );
    assert_eq!(
        ok(&format!("python3 -c \"{}\"", py.replace('"', "\\\""))).trim(),
        "ok"
    );
    let sum = ok(&format!("md5sum < {d}/mm"));
    for b in bricks {
        assert_eq!(ok(&format!("md5sum < {}", b.join("mm").display())), sum);
    }

    // A file opened for reading stays readable after its last name goes
    // (unlinked, or renamed over), as POSIX wants.
    let py = format!(
        r#"
import os
for how in ('unlink', 'rename'):
    p = '{d}/gone-' + how
    with open(p, 'w') as f:
        f.write('still here')
    fd = os.open(p, os.O_RDONLY)
    if how == 'unlink':
        os.unlink(p)
    else:
        open(p + '.new', 'w').write('other')
        os.rename(p + '.new', p)
    assert os.read(fd, 100) == b'still here', how
    assert os.fstat(fd).st_nlink == 0, how
    os.close(fd)
# An open directory a rename replaced: fstat says it has no links left
# (xfstests generic/035), rather than ESTALE.
os.mkdir('{d}/dir1')
os.mkdir('{d}/dir2')
fd = os.open('{d}/dir2', os.O_RDONLY)
os.rename('{d}/dir1', '{d}/dir2')
assert os.fstat(fd).st_nlink == 0
os.close(fd)
os.rmdir('{d}/dir2')
print('ok')
"#
    );
    assert_eq!(
        ok(&format!("python3 -c \"{}\"", py.replace('"', "\\\""))).trim(),
        "ok"
    );
}

/// Whiteouts, and names: reserved, long, deep.
fn whiteouts_and_names(d: &str, bricks: &[std::path::PathBuf]) {
    // RENAME_WHITEOUT (overlayfs) leaves a 0/0 character device, the same
    // object (one gfid) on every brick.
    let py = format!(
        r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
open('{d}/wo', 'w').write('x')
assert libc.renameat2(-100, b'{d}/wo', -100, b'{d}/wo2', 4) == 0, os.strerror(ctypes.get_errno())
st = os.lstat('{d}/wo')
assert (st.st_mode, st.st_rdev) == (0o20000, 0), (oct(st.st_mode), st.st_rdev)
print('ok')
"#
    );
    assert_eq!(
        ok(&format!("python3 -c \"{}\"", py.replace('"', "\\\""))).trim(),
        "ok"
    );
    let gfids: Vec<Vec<u8>> = bricks
        .iter()
        .map(|b| gfid_on_brick(&b.join("wo")))
        .collect();
    assert!(gfids.iter().all(|g| *g == gfids[0]), "{gfids:?}");

    // Names: the index is hidden and reserved; long names and deep paths work.
    assert!(!sh(&format!("mkdir {d}/.mortar")).status.success());
    let long = "n".repeat(255);
    ok(&format!("echo x > {d}/{long}"));
    assert!(!sh(&format!("echo x > {d}/{long}n")).status.success());
    let deep = (0..40)
        .map(|_| "d".repeat(100))
        .collect::<Vec<_>>()
        .join("/");
    ok(&format!(
        "cd {d} && mkdir -p {deep} && cd {deep} && echo bottom > f && cat f"
    ));
}

#[test]
fn a_second_mount_sees_changes_within_the_attribute_timeout() {
    let c = Cluster::start();
    c.volume("co", 3, &["c1", "c2", "c3"]);
    let a = c.mount("co");
    let b = c.mount("co");
    ok(&format!("echo first > {}", a.p("f")));
    // b reads it (and caches the pages)...
    assert_eq!(ok(&format!("cat {}", b.p("f"))), "first\n");
    // ...a changes it, same size and then longer...
    ok(&format!("echo secnd > {}", a.p("f")));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(ok(&format!("cat {}", b.p("f"))), "secnd\n");
    ok(&format!("echo 'third, longer' > {}", a.p("f")));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(ok(&format!("cat {}", b.p("f"))), "third, longer\n");
    // ...and names made and removed on one are seen on the other.
    ok(&format!("mkdir {}", a.p("d")));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(b.dir.join("d").is_dir());
    ok(&format!("rmdir {}", a.p("d")));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(!b.dir.join("d").exists());

    // Inode numbers come from the gfid: both mounts show the same ones,
    // and a directory listing (getdents' d_ino, also in the batches the
    // kernel reads without attributes) agrees with stat (xfstests 257).
    ok(&format!(
        "mkdir {} && touch {}/{{1..600}}",
        a.p("many"),
        a.p("many")
    ));
    let inodes = |m: &Mount| {
        let py = format!(
            "import os\nd = '{}'\nfor e in sorted(os.scandir(d), key=lambda e: e.name):\n    assert e.inode() == os.stat(d + '/' + e.name).st_ino, e.name\n    print(e.name, e.inode())",
            m.p("many")
        );
        ok(&format!("python3 -c \"{py}\""))
    };
    let (ia, ib) = (inodes(&a), inodes(&b));
    assert_eq!(ia.lines().count(), 600);
    assert_eq!(ia, ib);

    // File handles (open_by_handle_at; xfstests 426, 467, 477, 756, 777):
    // one taken on a is opened on b, which never looked the file up, and
    // after both kernels dropped their inodes.
    ok(&format!(
        "echo handled > {} && mkdir -p {}/x/y",
        a.p("h"),
        a.p("hd")
    ));
    let py = format!(
        r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
class FH(ctypes.Structure):
    _fields_ = [('bytes', ctypes.c_uint), ('type', ctypes.c_int), ('f', ctypes.c_ubyte * 128)]
h, mnt = FH(), ctypes.c_int()
h.bytes = 128
assert libc.name_to_handle_at(-100, b'{a}/h', ctypes.byref(h), ctypes.byref(mnt), 0) == 0, os.strerror(ctypes.get_errno())
# A directory found by handle is reconnected to the tree through '..'.
dh = FH()
dh.bytes = 128
assert libc.name_to_handle_at(-100, b'{a}/hd/x/y', ctypes.byref(dh), ctypes.byref(mnt), 0) == 0
for rnd in (0, 1):
    mfd = os.open('{b}', os.O_RDONLY | os.O_DIRECTORY)
    fd = libc.open_by_handle_at(mfd, ctypes.byref(h), os.O_RDONLY)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    assert os.read(fd, 100) == b'handled\n'
    os.close(fd)
    fd = libc.open_by_handle_at(mfd, ctypes.byref(dh), os.O_RDONLY | os.O_DIRECTORY)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    assert os.readlink('/proc/self/fd/%d' % fd) == '{b}/hd/x/y', os.readlink('/proc/self/fd/%d' % fd)
    os.close(fd)
    os.close(mfd)
    open('/proc/sys/vm/drop_caches', 'w').write('2')
print('ok')
"#,
        a = a.dir.display(),
        b = b.dir.display()
    );
    assert_eq!(
        ok(&format!("python3 -c \"{}\"", py.replace('"', "\\\""))).trim(),
        "ok"
    );
}

#[test]
fn a_full_disk_gives_enospc_and_loses_nothing() {
    let c = Cluster::start();
    // Three bricks on small file systems of their own.
    let _small: Vec<SmallFs> = ["s1", "s2", "s3"]
        .iter()
        .map(|b| SmallFs::new(c.path(b), "8m"))
        .collect();
    let bricks = c.volume("full", 3, &["s1/b", "s2/b", "s3/b"]);
    let m = c.mount("full");
    ok(&format!("echo precious > {}", m.p("keep")));
    // Fill the volume: the application gets ENOSPC, not a silent short file.
    let o = sh(&format!(
        "dd if=/dev/zero of={} bs=1M count=64 2>&1",
        m.p("big")
    ));
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("No space left on device"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // Creating more files fails cleanly too, or succeeds; either way what
    // was there before is intact on every brick.
    for i in 0..50 {
        let _ = sh(&format!("echo x > {}", m.p(&format!("more{i}"))));
    }
    assert_eq!(ok(&format!("cat {}", m.p("keep"))), "precious\n");
    for b in bricks {
        assert_eq!(
            std::fs::read_to_string(b.join("keep")).unwrap(),
            "precious\n"
        );
    }
    // Space comes back when the big file goes.
    ok(&format!("rm {}", m.p("big")));
    ok(&format!("echo after > {}", m.p("after")));
    assert_eq!(ok(&format!("cat {}", m.p("after"))), "after\n");
    m.unmount();
}

/// Opens `path` with O_DIRECT through the mount, writes 8 KiB from an
/// aligned buffer and 100 bytes at an unaligned place, and answers how
/// many descriptors the brick processes `pids` hold with O_DIRECT while it
/// is open, and whether the file reads back right (through O_DIRECT, and
/// through the page cache).
fn direct_io(path: &str, pids: &[u64]) -> (usize, bool) {
    let pids: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
    let out = ok(&format!(
        "python3 -c \"
import mmap, os, sys
fd = os.open('{path}', os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
buf = mmap.mmap(-1, 8192)
buf.write(b'd' * 8192)
assert os.pwrite(fd, buf, 0) == 8192
assert os.pwrite(fd, b'x' * 100, 10) == 100
n = 0
for p in sys.argv[1:]:
    for f in os.listdir('/proc/%s/fdinfo' % p):
        try:
            for line in open('/proc/%s/fdinfo/%s' % (p, f)):
                if line.startswith('flags:') and int(line.split()[1], 8) & os.O_DIRECT:
                    n += 1
        except OSError:
            pass
want = b'd' * 10 + b'x' * 100 + b'd' * (8192 - 110)
back = mmap.mmap(-1, 8192)
same = os.preadv(fd, [back], 0) == 8192 and back[:] == want
os.close(fd)
same = same and open('{path}', 'rb').read() == want
print(n, same)
\" {}",
        pids.join(" ")
    ));
    let mut w = out.split_whitespace();
    (w.next().unwrap().parse().unwrap(), w.next() == Some("True"))
}

#[test]
fn o_direct_reaches_the_bricks_under_strict_o_direct() {
    let c = Cluster::start();
    c.volume("od", 3, &["d1", "d2", "d3"]);
    let m = c.mount("od");
    // (One process serves the three: the brick host.)
    let mut pids: Vec<u64> = (0..3).map(|i| brick_pid(&c, "od", i)).collect();
    pids.dedup();
    // By default the bricks go through their page cache.
    assert_eq!(direct_io(&m.p("buffered"), &pids), (0, true));
    c.ok(&["volume", "set", "od", "performance.strict-o-direct", "on"]);
    // Every brick opens the file with O_DIRECT (once it has the option).
    wait_for(
        "the bricks to apply it",
        std::time::Duration::from_secs(10),
        || direct_io(&m.p("direct"), &pids) == (3, true),
    );
}

/// Reads `count` entries of `dir` through libc, noting each one's
/// `telldir` position, then goes back to every position (`seekdir`) in a
/// scattered order and reads the same entry there.
fn positions_hold(dir: &str, count: usize) {
    use std::ffi::{CStr, CString};
    let path = CString::new(dir).unwrap();
    // SAFETY: `d` is a stream opened here, used and closed only here; each
    // entry's name is copied before the next readdir.
    unsafe {
        let d = libc::opendir(path.as_ptr());
        assert!(!d.is_null(), "opendir {dir}");
        // Its name, inode number and type, as t_readdir_3 compares them.
        let name = |e: *mut libc::dirent| {
            let n = CStr::from_ptr((*e).d_name.as_ptr()).to_string_lossy();
            format!("{n} {} {}", (*e).d_ino, (*e).d_type)
        };
        let mut seen = Vec::new();
        // `count` entries, not to the end: the kernel keeps a listing
        // read to its end (FOPEN_CACHE_DIR) and would answer the seeks.
        for _ in 0..count {
            let pos = libc::telldir(d);
            let e = libc::readdir(d);
            assert!(!e.is_null(), "{dir} ended early");
            seen.push((pos, name(e)));
            // As xfstests' t_readdir_3: each entry read through a seek to
            // where the last one ended (so each is a readdir of its own).
            libc::seekdir(d, libc::telldir(d));
        }
        // A prime stride visits every position once, far from the last.
        let n = seen.len();
        for k in 0..n {
            let (pos, want) = &seen[(k * 7919) % n];
            libc::seekdir(d, *pos);
            let e = libc::readdir(d);
            assert!(!e.is_null(), "nothing at position {pos}");
            assert_eq!(&name(e), want, "at position {pos}");
        }
        libc::closedir(d);
    }
}

/// Directories are listed without being opened on a brick: a small one
/// costs one readdir, a large one is read through a brick handle for the
/// rest, and every name is seen once either way; a directory removed
/// while open stays open.
#[test]
fn listings_cost_one_request_and_see_every_name_once() {
    let c = Cluster::start();
    c.volume("lv", 3, &["l1", "l2", "l3"]);
    let m = c.mount("lv");
    ok(&format!("mkdir {0}/small {0}/big", m.p("")));
    for i in 0..5 {
        std::fs::write(m.p(&format!("small/f{i}")), "x").unwrap();
    }
    // More than a brick's batch (512), by names long enough that the
    // kernel takes each batch in several readdirs.
    ok(&format!(
        "cd {} && seq -f 'a-rather-long-file-name-to-fill-pages-%04g' 1 1300 | xargs touch",
        m.p("big")
    ));
    // The new files' locks are let go of in the background once idle:
    // not part of the listing.
    let before = requests_when_idle(&m);
    assert_eq!(ok(&format!("ls {}", m.p("small"))).lines().count(), 5);
    // One readdirplus (of the attribute copy) and the blame probes of the
    // two other copies; no opendir, no second readdir, no releasedir.
    assert_eq!(requests(&m) - before, 3, "requests for a listing");
    for cmd in ["ls -f", "ls -l", "find"] {
        let out = ok(&format!("cd {} && {cmd} .", m.p("big")));
        let mut names: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .map(|n| n.trim_start_matches("./"))
            .filter(|n| n.starts_with("a-rather"))
            .collect();
        let all = names.len();
        names.sort();
        names.dedup();
        assert_eq!((all, names.len()), (1300, 1300), "{cmd}");
    }
    // Each position telldir gave leads back to its name (seekdir; what
    // NFS cookies need), also back into batches read before; in a
    // directory just filled, as xfstests' generic/676 does.
    ok(&format!(
        "mkdir {0} && cd {0} && seq -f 'name-%04g' 1 1300 | xargs touch",
        m.p("seek")
    ));
    positions_hold(&m.p("seek"), 1300);
    // Removed while open: still listed (empty) and stat'ed.
    ok(&format!("mkdir {}", m.p("gone")));
    let out = ok(&format!(
        "cd {} && python3 -c \"
import os
fd = os.open('gone', os.O_RDONLY | os.O_DIRECTORY)
os.rmdir('gone')
print(len(os.listdir(fd)), os.fstat(fd).st_nlink)
os.close(fd)
\"",
        m.p("")
    ));
    assert_eq!(out.trim(), "0 0");
}
