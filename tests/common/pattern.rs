//! A large file of known content, made as it is written and checked
//! MiB by MiB: no local copy beside the bricks'.

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
