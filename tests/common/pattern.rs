//! A large file of known content, made as it is written and checked
//! MiB by MiB: no local copy beside the bricks'.

use super::*;

/// MiB number `i` of the big file: pseudo-random, different for every
/// MiB (a MiB written at the wrong place is caught).
pub fn pattern(i: u64) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = vec![0u8; 1 << 20];
    for word in out.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        word.copy_from_slice(&x.to_le_bytes());
    }
    out
}

pub fn write_pattern(path: &std::path::Path, mib: u64) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    for i in 0..mib {
        f.write_all(&pattern(i))?;
    }
    f.sync_all()
}

pub fn assert_pattern(path: &std::path::Path, mib: u64) {
    use std::io::Read;
    let mut f = std::fs::File::open(path).unwrap();
    assert_eq!(f.metadata().unwrap().len(), mib << 20, "{}", path.display());
    let mut buf = vec![0; 1 << 20];
    for i in 0..mib {
        f.read_exact(&mut buf).unwrap();
        assert!(buf == pattern(i), "{}: MiB {i} differs", path.display());
    }
}

/// Copies the tree `src` to `tree` (`cp -a`) and writes `mib` MiB of
/// `pattern` to `big` at once, runs `during` 700 ms in, and waits for
/// both: they must succeed. The time they took.
pub fn copy_and_write_while(
    src: &Path,
    tree: &str,
    big: &str,
    mib: u64,
    during: impl FnOnce(),
) -> Duration {
    let cp = std::thread::spawn({
        let (s, t) = (src.display().to_string(), tree.to_string());
        move || sh(&format!("cp -a {s} {t}"))
    });
    let started = Instant::now();
    let write = std::thread::spawn({
        let f = big.to_string();
        move || write_pattern(Path::new(&f), mib)
    });
    std::thread::sleep(Duration::from_millis(700));
    during();
    let cp = cp.join().unwrap();
    assert!(
        cp.status.success(),
        "cp failed: {}",
        String::from_utf8_lossy(&cp.stderr)
    );
    if let Err(e) = write.join().unwrap() {
        panic!(
            "the {mib} MiB write failed: {e} ({})",
            free_space(Path::new(big).parent().unwrap_or(Path::new(".")))
        );
    }
    started.elapsed()
}

/// What is free on the file system holding `p` (for a failure's message:
/// a CI machine's disk may be nearly full).
pub fn free_space(p: &Path) -> String {
    match rustix::fs::statvfs(p) {
        Ok(s) => format!(
            "{} MiB free at {}",
            (s.f_bavail * s.f_frsize) >> 20,
            p.display()
        ),
        Err(e) => format!("free space at {} unknown: {e}", p.display()),
    }
}
