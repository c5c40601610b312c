//! The workloads, each a function that runs once in a directory and returns
//! its samples. They use plain file-system calls, so that any target (a
//! local directory, a mortar or GlusterFS mount, another file system) is
//! measured the same way. Nothing here asserts a speed.

use anyhow::{bail, Context};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Barrier;
use std::time::Instant;

pub const ALL: &[&str] = &[
    "seed-smallfile",
    "seed-largefile",
    "smallfile-ops",
    "block-size",
    "file-size",
    "streams",
    "everyday",
    "dbench",
    "space",
];

#[derive(Clone, Debug)]
pub struct Params {
    /// seed-smallfile: number of files (the practical work's N).
    pub files: usize,
    /// seed-largefile: file size in MiB.
    pub large_mib: u64,
    /// Threads for the multi-threaded small-file figures and streams.
    pub threads: usize,
    /// smallfile-ops: files per run.
    pub ops_files: usize,
    /// block-size sweep: file size in MiB.
    pub sweep_mib: u64,
    /// file-size sweep: largest file size in bytes.
    pub max_file: u64,
    /// streams: MiB per stream.
    pub stream_mib: u64,
    /// everyday: tree of `everyday_files` files and a text file of `everyday_mib`.
    pub everyday_files: usize,
    pub everyday_mib: u64,
    /// dbench: seconds per run (with `threads` clients).
    pub dbench_secs: u64,
    /// seed-smallfile also runs the practical work's shell loop verbatim.
    pub replay_shell: bool,
    /// A directory on the local disk for sources and copies out (never a
    /// target under test).
    pub scratch: PathBuf,
}

impl Params {
    pub fn list(&self) -> Vec<(String, String)> {
        vec![
            ("files".into(), self.files.to_string()),
            ("large_mib".into(), self.large_mib.to_string()),
            ("threads".into(), self.threads.to_string()),
            ("ops_files".into(), self.ops_files.to_string()),
            ("sweep_mib".into(), self.sweep_mib.to_string()),
            ("max_file".into(), self.max_file.to_string()),
            ("stream_mib".into(), self.stream_mib.to_string()),
            ("everyday_files".into(), self.everyday_files.to_string()),
            ("everyday_mib".into(), self.everyday_mib.to_string()),
            ("dbench_secs".into(), self.dbench_secs.to_string()),
            ("replay_shell".into(), self.replay_shell.to_string()),
        ]
    }
}

/// One sample: metric, unit, higher is better, sweep position, value.
pub struct Sample {
    pub metric: String,
    pub unit: &'static str,
    pub higher_is_better: bool,
    pub x: Option<f64>,
    pub value: f64,
}

fn ops(metric: &str, n: usize, secs: f64) -> Sample {
    Sample {
        metric: metric.into(),
        unit: "ops/s",
        higher_is_better: true,
        x: None,
        value: n as f64 / secs.max(1e-9),
    }
}

fn mbps(metric: &str, bytes: u64, secs: f64, x: Option<f64>) -> Sample {
    Sample {
        metric: metric.into(),
        unit: "MB/s",
        higher_is_better: true,
        x,
        value: bytes as f64 / 1e6 / secs.max(1e-9),
    }
}

/// A figure where less is better, in `unit`.
fn cost(metric: &str, unit: &'static str, value: f64) -> Sample {
    Sample {
        metric: metric.into(),
        unit,
        higher_is_better: false,
        x: None,
        value,
    }
}

fn seconds(metric: &str, secs: f64) -> Sample {
    Sample {
        metric: metric.into(),
        unit: "s",
        higher_is_better: false,
        x: None,
        value: secs,
    }
}

/// Flushes dirty data and empties the page, dentry and inode caches, so that
/// "uncached" means what it says (root only; reported once otherwise).
pub fn drop_caches() {
    rustix::fs::sync();
    if fs::write("/proc/sys/vm/drop_caches", "3").is_err() {
        static WARN: std::sync::Once = std::sync::Once::new();
        WARN.call_once(|| {
            eprintln!("warning: cannot drop caches (not root?): uncached figures are cached")
        });
    }
}

fn fresh(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let d = dir.join(format!("{name}-{}", uuid::Uuid::new_v4().simple()));
    fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
    Ok(d)
}

/// The bytes the file system holds for everything under `dirs` (blocks,
/// as `du` counts them: a file's hard links once per directory).
fn used(dirs: &[PathBuf]) -> anyhow::Result<u64> {
    rustix::fs::sync();
    let mut total = 0;
    for d in dirs {
        let out = Command::new("du").arg("-s").arg("-B1").arg(d).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        total += text
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .with_context(|| format!("du of {} answered {text:?}", d.display()))?;
    }
    Ok(total)
}

/// `space`: the disk a target uses for `SPACE_FILES` files of 4 KiB, and
/// for one file of `large_mib` MiB, in all it stores on (`store`: a
/// volume's bricks, their own metadata included), each file synced so
/// that it has landed.
fn space(dir: &Path, store: &[PathBuf], p: &Params) -> anyhow::Result<Vec<Sample>> {
    const SPACE_FILES: usize = 1000;
    let d = fresh(dir, "space")?;
    let before = used(store)?;
    let block = vec![0x5au8; 4096];
    for i in 0..SPACE_FILES {
        let mut f = File::create(d.join(format!("f{i}")))?;
        f.write_all(&block)?;
        f.sync_all()?;
    }
    let small = used(store)?.saturating_sub(before);
    let mib = vec![0xa5u8; 1 << 20];
    let mut f = File::create(d.join("large"))?;
    for _ in 0..p.large_mib {
        f.write_all(&mib)?;
    }
    f.sync_all()?;
    drop(f);
    let large = used(store)?.saturating_sub(before + small);
    fs::remove_dir_all(&d)?;
    Ok(vec![
        cost(
            "disk per 4 KiB file",
            "KiB",
            small as f64 / 1024.0 / SPACE_FILES as f64,
        ),
        cost(
            "disk per byte of a large file",
            "x",
            large as f64 / (p.large_mib << 20) as f64,
        ),
    ])
}

/// Runs `workload` in `dir`, of a target whose bytes land in `store`.
pub fn run(
    workload: &str,
    dir: &Path,
    store: &[PathBuf],
    p: &Params,
) -> anyhow::Result<Vec<Sample>> {
    match workload {
        "seed-smallfile" => seed_smallfile(dir, p),
        "seed-largefile" => seed_largefile(dir, p),
        "smallfile-ops" => smallfile_ops(dir, p),
        "block-size" => block_size(dir, p),
        "file-size" => file_size(dir, p),
        "streams" => streams(dir, p),
        "everyday" => everyday(dir, p),
        "dbench" => dbench(dir, p),
        "space" => space(dir, store, p),
        other => bail!("unknown workload {other}; known: {}", ALL.join(", ")),
    }
}

/// The practical work's section 4.1: N files of one short line, then sync;
/// then read them all back.
fn seed_smallfile(dir: &Path, p: &Params) -> anyhow::Result<Vec<Sample>> {
    let d = fresh(dir, "smalltest")?;
    let t = Instant::now();
    for i in 1..=p.files {
        fs::write(d.join(format!("file_{i}")), format!("hello_{i}\n"))?;
    }
    rustix::fs::sync();
    let w = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut buf = Vec::with_capacity(64);
    for i in 1..=p.files {
        buf.clear();
        File::open(d.join(format!("file_{i}")))?.read_to_end(&mut buf)?;
    }
    let r = t.elapsed().as_secs_f64();
    let mut out = vec![ops("write", p.files, w), ops("read", p.files, r)];
    if p.replay_shell {
        let script = include_str!("../../../scripts/smallfile_bench.sh");
        let o = Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg("smallfile_bench.sh")
            .arg(dir)
            .arg(p.files.to_string())
            .output()?;
        let text = String::from_utf8_lossy(&o.stdout);
        let parse = |key: &str| -> Option<f64> {
            let line = text.lines().find(|l| l.starts_with(key))?;
            line.split("=>")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        match (parse("Write time:"), parse("Read time:")) {
            (Some(w), Some(r)) => {
                out.push(Sample {
                    metric: "write (shell loop)".into(),
                    unit: "ops/s",
                    higher_is_better: true,
                    x: None,
                    value: w,
                });
                out.push(Sample {
                    metric: "read (shell loop)".into(),
                    unit: "ops/s",
                    higher_is_better: true,
                    x: None,
                    value: r,
                });
            }
            _ => bail!(
                "the shell loop failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
        }
    }
    let _ = fs::remove_dir_all(&d);
    Ok(out)
}

/// A buffer aligned for O_DIRECT.
fn aligned(size: usize) -> (Vec<u8>, usize) {
    let raw = vec![0u8; size + 4096];
    let off = raw.as_ptr().align_offset(4096);
    (raw, off)
}

/// The practical work's section 4.2 (dd with O_DIRECT, 1 MiB blocks), and
/// the same buffered, with caches dropped before reading.
fn seed_largefile(dir: &Path, p: &Params) -> anyhow::Result<Vec<Sample>> {
    let path = dir.join(format!("largefile-{}", uuid::Uuid::new_v4().simple()));
    let bytes = p.large_mib << 20;
    let (mut raw, off) = aligned(1 << 20);
    let buf = &mut raw[off..off + (1 << 20)];
    drop_caches();
    let t = Instant::now();
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)?;
    for i in 0..p.large_mib {
        f.write_all_at(buf, i << 20)?;
    }
    drop(f);
    let dw = t.elapsed().as_secs_f64();
    drop_caches();
    let t = Instant::now();
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)?;
    let mut done = 0u64;
    loop {
        let n = f.read_at(buf, done)?;
        if n == 0 {
            break;
        }
        done += n as u64;
    }
    drop(f);
    let dr = t.elapsed().as_secs_f64();
    fs::remove_file(&path)?;
    // Buffered, with an fsync so that the write is measured to the bricks.
    let t = Instant::now();
    let mut f = File::create(&path)?;
    for _ in 0..p.large_mib {
        f.write_all(buf)?;
    }
    f.sync_all()?;
    drop(f);
    let bw = t.elapsed().as_secs_f64();
    drop_caches();
    let t = Instant::now();
    let mut f = File::open(&path)?;
    while f.read(buf)? > 0 {}
    let br = t.elapsed().as_secs_f64();
    fs::remove_file(&path)?;
    Ok(vec![
        mbps("direct write", bytes, dw, None),
        mbps("direct read", done, dr, None),
        mbps("buffered write+fsync", bytes, bw, None),
        mbps("buffered read, uncached", bytes, br, None),
    ])
}

/// Runs `f(thread, first, count)` on `threads` threads over `n` items and
/// returns the wall time from a common start.
fn parallel(
    n: usize,
    threads: usize,
    f: impl Fn(usize, usize, usize) -> anyhow::Result<()> + Sync,
) -> anyhow::Result<f64> {
    let threads = threads.max(1).min(n.max(1));
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (b, f) = (&barrier, &f);
                let (first, count) = (n * t / threads, n * (t + 1) / threads - n * t / threads);
                s.spawn(move || {
                    b.wait();
                    f(t, first, count)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("worker panicked"))??;
        }
        Ok(start.elapsed().as_secs_f64())
    })
}

/// The whitepaper's small-file operations table (4 KiB files; each step
/// timed until the directory's fsync returns), with one
/// thread and with `threads` threads.
fn smallfile_ops(dir: &Path, p: &Params) -> anyhow::Result<Vec<Sample>> {
    let mut out = Vec::new();
    let data = vec![b'x'; 4096];
    let mut thread_counts = vec![1];
    if p.threads > 1 {
        thread_counts.push(p.threads);
    }
    for &th in &thread_counts {
        let d = fresh(dir, "ops")?;
        let n = p.ops_files;
        let f = |i: usize| d.join(format!("f{i}"));
        let g = |i: usize| d.join(format!("g{i}"));
        let e = |i: usize| d.join(format!("e{i}"));
        let label = |m: &str| {
            if th == 1 {
                m.to_string()
            } else {
                format!("{m}, {th} threads")
            }
        };
        // Each step's time ends once the directory's fsync returned: a
        // file system that answers changes of names ahead of its disks
        // (mortar's `performance.async-dirops`) is timed until they are
        // there, not until they are answered.
        let each = |op: &(dyn Fn(usize) -> std::io::Result<()> + Sync)| {
            let t = parallel(n, th, |_, first, count| {
                for i in first..first + count {
                    op(i)?;
                }
                Ok(())
            })?;
            let synced = Instant::now();
            File::open(&d)?.sync_all()?;
            Ok::<f64, anyhow::Error>(t + synced.elapsed().as_secs_f64())
        };
        let t = each(&|i| fs::write(f(i), &data))?;
        out.push(ops(&label("small-file create"), n, t));
        let t = each(&|i| File::create(e(i)).map(|_| ()))?;
        out.push(ops(&label("empty-file create"), n, t));
        let t = each(&|i| fs::metadata(f(i)).map(|_| ()))?;
        out.push(ops(&label("stat"), n, t));
        let t = each(&|i| fs::read(f(i)).map(|_| ()))?;
        out.push(ops(&label("small-file read, cached"), n, t));
        drop_caches();
        let t = each(&|i| fs::read(f(i)).map(|_| ()))?;
        out.push(ops(&label("small-file read, uncached"), n, t));
        let t = each(&|i| {
            OpenOptions::new()
                .write(true)
                .open(f(i))?
                .write_all_at(&data, 0)
        })?;
        out.push(ops(&label("small-file write"), n, t));
        let t = each(&|i| OpenOptions::new().append(true).open(f(i))?.write_all(&data))?;
        out.push(ops(&label("small-file append"), n, t));
        if th == 1 {
            // `ls -l` of the directory: a listing and a stat of every entry.
            let t = Instant::now();
            let o = Command::new("ls").arg("-l").arg(&d).output()?;
            if !o.status.success() {
                bail!("ls -l failed");
            }
            out.push(ops("ls -l (entries)", 2 * n, t.elapsed().as_secs_f64()));
        }
        let t = each(&|i| fs::rename(f(i), g(i)))?;
        out.push(ops(&label("rename"), n, t));
        let t = each(&|i| fs::remove_file(g(i)))?;
        out.push(ops(&label("small-file delete"), n, t));
        let t = each(&|i| fs::remove_file(e(i)))?;
        out.push(ops(&label("empty-file delete"), n, t));
        let _ = fs::remove_dir_all(&d);
    }
    Ok(out)
}

/// dbench (Samba's file-server load: creates, writes, reads, renames,
/// deletes, locks and stats from `threads` clients), its throughput.
fn dbench(dir: &Path, p: &Params) -> anyhow::Result<Vec<Sample>> {
    let d = fresh(dir, "dbench")?;
    let o = Command::new("dbench")
        .arg("-D")
        .arg(&d)
        .args(["-t", &p.dbench_secs.to_string(), &p.threads.to_string()])
        .output()
        .context("cannot run dbench (apt-get install dbench)")?;
    let _ = fs::remove_dir_all(&d);
    let text = String::from_utf8_lossy(&o.stdout);
    let mbs = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Throughput "))
        .and_then(|l| l.split_whitespace().next()?.parse::<f64>().ok());
    match mbs {
        Some(v) if o.status.success() => Ok(vec![Sample {
            metric: format!("{} clients", p.threads),
            unit: "MB/s",
            higher_is_better: true,
            x: None,
            value: v,
        }]),
        _ => bail!(
            "dbench failed: {}{}",
            text.lines().last().unwrap_or(""),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
    }
}

const BLOCK_SIZES: &[usize] = &[4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];

/// Block-size sweep: one file written (then fsync) and read (uncached) with
/// each block size.
fn block_size(dir: &Path, p: &Params) -> anyhow::Result<Vec<Sample>> {
    let mut out = Vec::new();
    let bytes = p.sweep_mib << 20;
    for &bs in BLOCK_SIZES {
        let path = dir.join(format!("sweep-{}", uuid::Uuid::new_v4().simple()));
        let buf = vec![7u8; bs];
        let t = Instant::now();
        let mut f = File::create(&path)?;
        for _ in 0..bytes / bs as u64 {
            f.write_all(&buf)?;
        }
        f.sync_all()?;
        drop(f);
        out.push(mbps(
            "write",
            bytes,
            t.elapsed().as_secs_f64(),
            Some(bs as f64),
        ));
        drop_caches();
        let mut buf = vec![0u8; bs];
        let t = Instant::now();
        let mut f = File::open(&path)?;
        while f.read(&mut buf)? > 0 {}
        out.push(mbps(
            "read",
            bytes,
            t.elapsed().as_secs_f64(),
            Some(bs as f64),
        ));
        fs::remove_file(&path)?;
    }
    Ok(out)
}

/// File-size sweep, 4 KiB to `max_file`: enough files of each size to move
/// at least 16 MiB (or one file), written with fsync, read uncached.
fn file_size(dir: &Path, p: &Params) -> anyhow::Result<Vec<Sample>> {
    let mut out = Vec::new();
    let mut size: u64 = 4 << 10;
    while size <= p.max_file {
        let d = fresh(dir, "fsize")?;
        let count = ((16u64 << 20) / size).clamp(1, 4096);
        let chunk = vec![3u8; size.min(1 << 20) as usize];
        let t = Instant::now();
        for i in 0..count {
            let mut f = File::create(d.join(format!("f{i}")))?;
            let mut left = size;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                f.write_all(&chunk[..n])?;
                left -= n as u64;
            }
            f.sync_all()?;
        }
        out.push(mbps(
            "write+fsync",
            size * count,
            t.elapsed().as_secs_f64(),
            Some(size as f64),
        ));
        drop_caches();
        let mut buf = vec![0u8; chunk.len()];
        let t = Instant::now();
        for i in 0..count {
            let mut f = File::open(d.join(format!("f{i}")))?;
            while f.read(&mut buf)? > 0 {}
        }
        out.push(mbps(
            "read, uncached",
            size * count,
            t.elapsed().as_secs_f64(),
            Some(size as f64),
        ));
        let _ = fs::remove_dir_all(&d);
        size *= 4;
    }
    Ok(out)
}

/// `threads` concurrent streams, each writing then reading its own file in
/// 128 KiB records (as `iozone -t`): aggregate MB/s.
fn streams(dir: &Path, p: &Params) -> anyhow::Result<Vec<Sample>> {
    let d = fresh(dir, "streams")?;
    let bytes = p.stream_mib << 20;
    let rec = vec![5u8; 128 << 10];
    let path = |t: usize| d.join(format!("s{t}"));
    let th = p.threads.max(1);
    let w = parallel(th, th, |t, _, _| {
        let mut f = File::create(path(t))?;
        for _ in 0..bytes / rec.len() as u64 {
            f.write_all(&rec)?;
        }
        f.sync_all()?;
        Ok(())
    })?;
    drop_caches();
    let r = parallel(th, th, |t, _, _| {
        let mut f = File::open(path(t))?;
        let mut buf = vec![0u8; 128 << 10];
        while f.read(&mut buf)? > 0 {}
        Ok(())
    })?;
    let _ = fs::remove_dir_all(&d);
    Ok(vec![
        mbps(&format!("write, {th} streams"), bytes * th as u64, w, None),
        mbps(&format!("read, {th} streams"), bytes * th as u64, r, None),
    ])
}

/// Writes the everyday tree (on the local disk, once) that `everyday`
/// copies in: text files in directories, and one large text file.
pub fn everyday_source(base: &Path, p: &Params) -> anyhow::Result<PathBuf> {
    let src = base.join(format!(
        "everyday-src-{}-{}",
        p.everyday_files, p.everyday_mib
    ));
    if src.join("done").exists() {
        return Ok(src);
    }
    let _ = fs::remove_dir_all(&src);
    let tree = src.join("tree");
    let mut line = 0u64;
    let mut text = |len: usize| {
        let mut s = String::with_capacity(len + 80);
        while s.len() < len {
            line += 1;
            let h = xxhash_rust::xxh64::xxh64(&line.to_le_bytes(), 7);
            s.push_str(&format!(
                "line {line} value {h:016x} lorem ipsum dolor sit amet\n"
            ));
        }
        s
    };
    for i in 0..p.everyday_files {
        let d = tree.join(format!("dir{:03}", i % 40));
        fs::create_dir_all(&d)?;
        fs::write(
            d.join(format!("file{i:05}.txt")),
            text(2048 + (i % 7) * 1024),
        )?;
    }
    let mut big = File::create(src.join("big.txt"))?;
    for _ in 0..p.everyday_mib {
        big.write_all(text(1 << 20).as_bytes())?;
    }
    fs::write(src.join("done"), "")?;
    Ok(src)
}

/// The Lustre comparison's everyday commands, timed in seconds.
fn everyday(dir: &Path, p: &Params) -> anyhow::Result<Vec<Sample>> {
    let src = everyday_source(&p.scratch, p)?;
    let d = fresh(dir, "everyday")?;
    let out_dir = p
        .scratch
        .join(format!("everyday-out-{}", uuid::Uuid::new_v4().simple()));
    let steps: Vec<(&str, String)> = vec![
        (
            "cp -r in",
            format!(
                "cp -r {}/tree {d}/tree && cp {}/big.txt {d}/big.txt",
                src.display(),
                src.display(),
                d = d.display()
            ),
        ),
        (
            "find",
            format!("find {}/tree -type f | wc -l > /dev/null", d.display()),
        ),
        (
            "md5sum all",
            format!(
                "find {}/tree -type f -exec md5sum {{}} + > /dev/null",
                d.display()
            ),
        ),
        (
            "base64",
            format!("base64 {0}/big.txt > {0}/big.b64", d.display()),
        ),
        (
            "grep",
            format!(
                "grep -c 'value 00' {}/big.b64 > /dev/null; true",
                d.display()
            ),
        ),
        ("gzip", format!("gzip -1 -k {}/big.txt", d.display())),
        (
            "gunzip",
            format!("gunzip -c {0}/big.txt.gz > {0}/big.back", d.display()),
        ),
        (
            "tar czf",
            format!("tar -C {0} -czf {0}/tree.tgz tree", d.display()),
        ),
        (
            "tar xzf",
            format!(
                "mkdir {0}/untar && tar -C {0}/untar -xzf {0}/tree.tgz",
                d.display()
            ),
        ),
        (
            "cp -r out",
            format!("cp -r {}/tree {}", d.display(), out_dir.display()),
        ),
    ];
    let mut out = Vec::new();
    for (name, cmd) in steps {
        drop_caches();
        let t = Instant::now();
        let o = Command::new("bash").arg("-c").arg(&cmd).output()?;
        let secs = t.elapsed().as_secs_f64();
        if !o.status.success() {
            bail!(
                "everyday step {name} failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        out.push(seconds(name, secs));
    }
    let _ = fs::remove_dir_all(&d);
    let _ = fs::remove_dir_all(&out_dir);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Params {
        Params {
            files: 20,
            large_mib: 2,
            threads: 2,
            ops_files: 10,
            sweep_mib: 1,
            max_file: 64 << 10,
            stream_mib: 1,
            everyday_files: 10,
            everyday_mib: 1,
            dbench_secs: 3,
            replay_shell: false,
            scratch: PathBuf::new(),
        }
    }

    #[test]
    fn every_workload_runs_on_a_local_directory() {
        let d = tempfile::tempdir().unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let p = Params {
            scratch: scratch.path().to_path_buf(),
            ..tiny()
        };
        for w in ALL {
            let s = run(w, d.path(), &[d.path().to_path_buf()], &p)
                .unwrap_or_else(|e| panic!("{w}: {e}"));
            assert!(!s.is_empty(), "{w}");
            assert!(
                s.iter().all(|x| x.value.is_finite() && x.value > 0.0),
                "{w}"
            );
        }
        // Each workload cleans up after itself.
        let left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
