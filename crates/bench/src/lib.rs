//! `mortar bench`: the reference documents' measurements, run on mortar and
//! on the baselines (the local disk, GlusterFS, any directory) in one run,
//! with warm-up, repetitions, interleaved targets and pairwise ratios, and a
//! report with the reference's tables, one table per workload, plots and raw
//! JSON (`mortar bench compare A B` compares two runs).

pub mod charts;
pub mod report;
pub mod results;
pub mod stats;
pub mod target;
pub mod undo;
pub mod workloads;

use clap::{Args, Subcommand};
use results::{Machine, Metric, Results};
use std::path::{Path, PathBuf};
use target::{Shape, Target};
use workloads::Params;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub cmd: Option<BenchCmd>,
    /// Baselines measured beside mortar: local, glusterfs, bindfs (a
    /// pass-through FUSE file system over the local disk: the ceiling of
    /// one FUSE hop; `apt-get install bindfs`), mortar-plain (mortar with
    /// server.ssl off: what TLS costs), glusterfs-nfs (the GlusterFS volume
    /// served by NFS-Ganesha's Gluster module, through fuse-nfs; `apt-get
    /// install nfs-ganesha-gluster rpcbind`), comma-separated.
    #[arg(long, default_value = "local", value_delimiter = ',')]
    pub against: Vec<String>,
    /// How the workloads reach the mortar volume, comma-separated: native
    /// (its mount), nfs (the volume's NFS server, through fuse-nfs, an NFS
    /// client over FUSE built by scripts/fuse-nfs.sh: this machine has no
    /// kernel NFS client). Each is a target: mortar, mortar-nfs.
    #[arg(long, default_value = "native", value_delimiter = ',')]
    pub access: Vec<String>,
    /// Also measure these mounted directories (other file systems).
    #[arg(long)]
    pub target: Vec<PathBuf>,
    /// Measure only the baselines and --target directories, not mortar.
    #[arg(long)]
    pub no_mortar: bool,
    /// Option groups set on the GlusterFS volume (`gluster volume set VOL
    /// group NAME`), e.g. metadata-cache, nl-cache.
    #[arg(long, value_delimiter = ',')]
    pub glusterfs_group: Vec<String>,
    /// Volume shape: replica3, replica2, distributeN, RxN (sets x replica),
    /// disperseK+R (K data and R parity bricks, as `disperse K+R
    /// redundancy R`).
    #[arg(long, default_value = "replica3")]
    pub shape: String,
    /// A degraded run: this many bricks of each set are taken down (`volume
    /// reset-brick … start`, on mortar and GlusterFS alike) once the volume
    /// is mounted: the first of each set, a dispersed set's data bricks,
    /// so that its reads decode.
    #[arg(long, default_value_t = 0)]
    pub down: usize,
    /// Workloads (comma-separated), or "all": seed-smallfile, seed-largefile,
    /// smallfile-ops, block-size, file-size, streams, everyday, space (disk
    /// used for 1,000 files of 4 KiB and one of --large-mib), replication, scale.
    #[arg(
        long,
        default_value = "seed-smallfile,seed-largefile",
        value_delimiter = ','
    )]
    pub workloads: Vec<String>,
    /// Repetitions of every measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Where bricks, the local baseline and scratch files go (one file system).
    #[arg(long, default_value = "/var/tmp/mortar-bench")]
    pub dir: PathBuf,
    /// Where the report is written.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Tiny sizes, one repetition: checks that everything runs.
    #[arg(long)]
    pub quick: bool,
    /// seed-smallfile: number of files.
    #[arg(long, default_value_t = 2000)]
    pub files: usize,
    /// seed-largefile: MiB.
    #[arg(long, default_value_t = 1024)]
    pub large_mib: u64,
    /// Threads for multi-threaded figures and streams.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// dbench: seconds of each run (after its warm-up).
    #[arg(long, default_value_t = 20)]
    pub dbench_secs: u64,
    /// smallfile-ops: files.
    #[arg(long, default_value_t = 1000)]
    pub ops_files: usize,
    /// block-size sweep: MiB.
    #[arg(long, default_value_t = 256)]
    pub sweep_mib: u64,
    /// file-size sweep: largest file in MiB.
    #[arg(long, default_value_t = 1024)]
    pub max_file_mib: u64,
    /// streams: MiB per stream.
    #[arg(long, default_value_t = 256)]
    pub stream_mib: u64,
    /// everyday: files in the tree and MiB of the large text file (the
    /// Lustre comparison used far more; these fit this machine).
    #[arg(long, default_value_t = 2000)]
    pub everyday_files: usize,
    #[arg(long, default_value_t = 256)]
    pub everyday_mib: u64,
    /// scale: largest brick count (1, 2, 4, ... and this one).
    #[arg(long, default_value_t = 8)]
    pub scale_max: usize,
    /// seed-smallfile also runs the practical work's shell loop verbatim.
    #[arg(long)]
    pub replay_shell: bool,
}

#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// Compare two runs' results.json, metric by metric.
    Compare { a: PathBuf, b: PathBuf },
    /// Draw a run's report (report.md and its charts) again from its
    /// results.json, into OUT (default: the run's own directory).
    Report {
        run: PathBuf,
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

const META: &[&str] = &["replication", "scale"];

fn params(a: &BenchArgs, scratch: &Path) -> Params {
    if a.quick {
        return Params {
            files: 100,
            large_mib: 16,
            threads: 2,
            ops_files: 50,
            sweep_mib: 4,
            max_file: 1 << 20,
            stream_mib: 4,
            everyday_files: 50,
            everyday_mib: 2,
            dbench_secs: 3,
            replay_shell: a.replay_shell,
            scratch: scratch.to_path_buf(),
        };
    }
    Params {
        files: a.files,
        large_mib: a.large_mib,
        threads: a.threads,
        ops_files: a.ops_files,
        sweep_mib: a.sweep_mib,
        max_file: a.max_file_mib << 20,
        stream_mib: a.stream_mib,
        everyday_files: a.everyday_files,
        everyday_mib: a.everyday_mib,
        dbench_secs: a.dbench_secs,
        replay_shell: a.replay_shell,
        scratch: scratch.to_path_buf(),
    }
}

fn machine(dir: &Path) -> Machine {
    let mem_kib: f64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0.0);
    let disk = std::process::Command::new("df")
        .args(["--output=source,fstype,size"])
        .arg(dir)
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .nth(1)
                .unwrap_or("")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let date = std::process::Command::new("date")
        .arg("-u")
        .arg("+%F %TZ")
        .output()
        .ok();
    Machine {
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        memory_gib: mem_kib / (1024.0 * 1024.0),
        kernel: rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned(),
        disk,
        date: date
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default(),
    }
}

/// Touches as much memory as the largest workload will, so that whichever
/// target runs first does not pay for the guest's first use of its memory
/// (measured on this project's machines; docs/benchmarks.md).
fn warm_memory(dir: &Path, mib: u64) -> anyhow::Result<()> {
    use std::io::Write;
    let path = dir.join("warmup.tmp");
    let mut f = std::fs::File::create(&path)?;
    let buf = vec![0u8; 1 << 20];
    for _ in 0..mib {
        f.write_all(&buf)?;
    }
    drop(f);
    std::fs::remove_file(&path)?;
    workloads::drop_caches();
    Ok(())
}

fn request_count(t: &Target) -> Option<u64> {
    let mnt = t.mnt.as_ref()?;
    let mut buf = [0u8; 32];
    let n = rustix::fs::getxattr(mnt, mortar::fuse::REQUESTS_XATTR, &mut buf[..]).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.parse().ok()
}

struct Run<'a> {
    args: &'a BenchArgs,
    /// Where the report goes (and a failed run's logs).
    report_dir: PathBuf,
    params: Params,
    results: Results,
    bar: indicatif::ProgressBar,
}

/// What a failed run leaves for its post-mortem, before its teardown
/// removes it: every log under `base` (the daemons', bricks' and clients')
/// in `report_dir/failed-logs/`, and the figures measured so far in
/// `report_dir/results.json`.
fn keep_failed(base: &Path, report_dir: &Path, results: &Results, error: &anyhow::Error) {
    undo::settle();
    fn logs(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let (p, name) = (e.path(), e.file_name());
            // Not into mounts, bricks or workloads' files.
            let skip = ["mnt", "bricks", "work", "scratch", "local"];
            match e.file_type() {
                Ok(t) if t.is_dir() && depth < 6 && !skip.iter().any(|s| name == *s) => {
                    logs(&p, depth + 1, out)
                }
                Ok(t) if t.is_file() && p.extension().is_some_and(|x| x == "log") => out.push(p),
                _ => {}
            }
        }
    }
    let into = report_dir.join("failed-logs");
    if std::fs::create_dir_all(&into).is_err() {
        return;
    }
    let mut found = Vec::new();
    logs(base, 0, &mut found);
    for f in &found {
        let rel = f.strip_prefix(base).unwrap_or(f).display().to_string();
        let _ = std::fs::copy(f, into.join(rel.replace('/', "-")));
    }
    let _ = std::fs::write(into.join("error.txt"), format!("{error:#}\n"));
    if let Ok(json) = serde_json::to_vec_pretty(results) {
        let _ = std::fs::write(report_dir.join("results.json"), json);
    }
    eprintln!(
        "the run failed: {error:#}; its logs ({} files) and the figures measured so far are in {}",
        found.len(),
        report_dir.display()
    );
}

impl Run<'_> {
    /// One workload on every target, `reps` times, targets interleaved in a
    /// rotating order so that drift on the machine affects all alike.
    fn measure(&mut self, w: &str, targets: &[Target], reps: usize) -> anyhow::Result<()> {
        for rep in 0..reps {
            for k in 0..targets.len() {
                let t = &targets[(rep + k) % targets.len()];
                self.bar
                    .set_message(format!("{w} on {} (repetition {}/{reps})", t.name, rep + 1));
                let samples = workloads::run(w, &t.dir, &t.store, &self.params)
                    .map_err(|e| e.context(format!("{w} on {}", t.name)))?;
                for s in samples {
                    let m = Metric {
                        workload: w,
                        metric: &s.metric,
                        unit: s.unit,
                        higher_is_better: s.higher_is_better,
                        x: s.x,
                    };
                    self.results.add(m, &t.name, s.value);
                }
                self.bar.inc(1);
            }
        }
        Ok(())
    }

    /// `replication`: the small-file and streaming workloads on distribute,
    /// replica 2 and replica 3 volumes of mortar.
    fn replication(&mut self, base: &Path) -> anyhow::Result<()> {
        for shape in [
            Shape {
                replica: 1,
                sets: 3,
                redundancy: 0,
                down: 0,
            },
            Shape {
                replica: 2,
                sets: 1,
                redundancy: 0,
                down: 0,
            },
            Shape {
                replica: 3,
                sets: 1,
                redundancy: 0,
                down: 0,
            },
        ] {
            self.bar
                .set_message(format!("replication: mortar {}", shape.label()));
            let t = target::mortar(
                base,
                shape,
                "mortar-replication",
                2,
                &[],
                target::Access::Native,
            )?;
            let mut run_one = || -> anyhow::Result<()> {
                for _ in 0..self.args_reps() {
                    for w in ["seed-smallfile", "streams"] {
                        for s in workloads::run(w, &t.dir, &t.store, &self.params)? {
                            let metric = format!("{w}: {}", s.metric);
                            let m = Metric {
                                workload: "replication",
                                metric: &metric,
                                unit: s.unit,
                                higher_is_better: s.higher_is_better,
                                x: None,
                            };
                            self.results
                                .add(m, &format!("mortar {}", shape.label()), s.value);
                        }
                    }
                }
                Ok(())
            };
            let r = run_one();
            if let Err(e) = &r {
                keep_failed(base, &self.report_dir, &self.results, e);
            }
            t.close();
            r?;
            self.bar.inc(1);
        }
        Ok(())
    }

    /// `scale`: distribute volumes of 1, 2, 4, ... bricks: aggregate MB/s,
    /// creates/s, and the requests the client sent per create.
    fn scale(&mut self, base: &Path) -> anyhow::Result<()> {
        for n in scale_counts(self.args.scale_max) {
            self.bar
                .set_message(format!("scale: mortar distribute {n}"));
            let t = target::mortar(
                base,
                Shape {
                    replica: 1,
                    sets: n,
                    redundancy: 0,
                    down: 0,
                },
                "mortar-scale",
                2,
                &[],
                target::Access::Native,
            )?;
            let x = Some(n as f64);
            let mut run_one = || -> anyhow::Result<()> {
                for _ in 0..self.args_reps() {
                    let before = request_count(&t);
                    let s = workloads::run("seed-smallfile", &t.dir, &t.store, &self.params)?;
                    let after = request_count(&t);
                    let creates = s
                        .iter()
                        .find(|s| s.metric == "write")
                        .map(|s| s.value)
                        .unwrap_or(0.0);
                    self.results.add(
                        Metric {
                            workload: "scale",
                            metric: "creates",
                            unit: "ops/s",
                            higher_is_better: true,
                            x,
                        },
                        "mortar",
                        creates,
                    );
                    if let (Some(a), Some(b)) = (before, after) {
                        // The small-file run does create+write+read per file.
                        let per = (b - a) as f64 / self.params.files as f64;
                        self.results.add(
                            Metric {
                                workload: "scale",
                                metric: "requests per file",
                                unit: "requests",
                                higher_is_better: false,
                                x,
                            },
                            "mortar",
                            per,
                        );
                    }
                    for s in workloads::run("streams", &t.dir, &t.store, &self.params)? {
                        let metric = s.metric.split(',').next().unwrap_or("").to_string();
                        self.results.add(
                            Metric {
                                workload: "scale",
                                metric: &format!("aggregate {metric}"),
                                unit: s.unit,
                                higher_is_better: true,
                                x,
                            },
                            "mortar",
                            s.value,
                        );
                    }
                }
                Ok(())
            };
            let r = run_one();
            if let Err(e) = &r {
                keep_failed(base, &self.report_dir, &self.results, e);
            }
            t.close();
            r?;
            self.bar.inc(1);
        }
        Ok(())
    }

    fn args_reps(&self) -> usize {
        if self.args.quick {
            1
        } else {
            self.args.reps.max(1)
        }
    }
}

/// The brick counts `scale` measures: powers of two below `max`, and `max`.
fn scale_counts(max: usize) -> Vec<usize> {
    let max = max.max(1);
    let mut out: Vec<usize> = std::iter::successors(Some(1usize), |n| Some(n * 2))
        .take_while(|&n| n < max)
        .collect();
    out.push(max);
    out
}

pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    if let Some(cmd) = &a.cmd {
        return saved(cmd);
    }
    let wl = chosen_workloads(&a)?;
    let shape = Shape::parse(&a.shape)?.with_down(a.down)?;
    undo::on_signals()?;
    let base = a.dir.clone();
    std::fs::create_dir_all(&base)?;
    let scratch = base.join("scratch");
    std::fs::create_dir_all(&scratch)?;
    let reps = if a.quick { 1 } else { a.reps.max(1) };
    let p = params(&a, &scratch);
    let report_dir = a.report.clone().unwrap_or_else(|| {
        let d = std::process::Command::new("date")
            .arg("+%Y%m%d-%H%M%S")
            .output()
            .ok();
        PathBuf::from(format!(
            "bench-report-{}",
            d.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default()
        ))
    });

    // Set up every target first, so that a missing one fails before hours
    // of measuring.
    let targets = set_up(&a, &base, shape)?;

    let per_target: Vec<&String> = wl
        .iter()
        .filter(|w| workloads::ALL.contains(&w.as_str()))
        .collect();
    let mut steps = (per_target.len() * reps * targets.len()) as u64;
    if wl.iter().any(|w| w == "replication") {
        steps += 3;
    }
    if wl.iter().any(|w| w == "scale") {
        steps += scale_counts(a.scale_max).len() as u64;
    }
    let bar = progress_bar(steps);
    let mut run = Run {
        args: &a,
        report_dir: report_dir.clone(),
        params: p.clone(),
        results: Results {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            machine: machine(&base),
            params: [
                vec![
                    ("reps".to_string(), reps.to_string()),
                    ("shape".to_string(), shape.label()),
                ],
                p.list(),
            ]
            .concat(),
            targets: targets.iter().map(|t| t.name.clone()).collect(),
            measurements: Vec::new(),
        },
        bar,
    };

    let measured = (|| -> anyhow::Result<()> {
        run.bar.set_message("warm-up");
        warm_memory(
            &base,
            (p.large_mib * 4)
                .max(p.stream_mib * p.threads as u64 * 4)
                .min(8192),
        )?;
        for t in &targets {
            let tiny = Params {
                files: 20,
                ..p.clone()
            };
            workloads::run("seed-smallfile", &t.dir, &t.store, &tiny)?;
        }
        for w in &per_target {
            run.measure(w, &targets, reps)?;
        }
        Ok(())
    })();
    if let Err(e) = &measured {
        keep_failed(&base, &report_dir, &run.results, e);
    }
    for t in targets {
        t.close();
    }
    measured?;
    if wl.iter().any(|w| w == "replication") {
        run.replication(&base)?;
    }
    if wl.iter().any(|w| w == "scale") {
        run.scale(&base)?;
    }
    run.bar.finish_with_message("done");

    write_report(&run.results, &report_dir)
}

/// `compare` and `report`: what a saved run shows.
fn saved(cmd: &BenchCmd) -> anyhow::Result<()> {
    let load = |f: &Path| -> anyhow::Result<Results> {
        Ok(serde_json::from_slice(
            &std::fs::read(f).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?,
        )?)
    };
    match cmd {
        BenchCmd::Compare { a, b } => {
            let file = |p: &Path| match p.is_dir() {
                true => p.join("results.json"),
                false => p.to_path_buf(),
            };
            print!("{}", report::compare(&load(&file(a))?, &load(&file(b))?));
        }
        BenchCmd::Report { run, out } => {
            let results = load(&run.join("results.json"))?;
            let dir = out.clone().unwrap_or_else(|| run.clone());
            std::fs::create_dir_all(&dir)?;
            let plots = charts::draw(&results, &dir)?;
            std::fs::write(dir.join("report.md"), report::markdown(&results, &plots))?;
            println!("report: {}", dir.join("report.md").display());
        }
    }
    Ok(())
}

/// The workloads asked for (`all`: every one), checked, and the baselines.
fn chosen_workloads(a: &BenchArgs) -> anyhow::Result<Vec<String>> {
    let mut wl: Vec<String> = if a.workloads.iter().any(|w| w == "all") {
        workloads::ALL
            .iter()
            .chain(META)
            .map(|s| s.to_string())
            .collect()
    } else {
        a.workloads.clone()
    };
    wl.dedup();
    for w in &wl {
        if !workloads::ALL.contains(&w.as_str()) && !META.contains(&w.as_str()) {
            anyhow::bail!(
                "unknown workload {w}; known: {}, {}",
                workloads::ALL.join(", "),
                META.join(", ")
            );
        }
    }
    for b in &a.against {
        if ![
            "local",
            "glusterfs",
            "bindfs",
            "mortar-plain",
            "glusterfs-nfs",
        ]
        .contains(&b.as_str())
        {
            anyhow::bail!(
                "unknown baseline {b}: use local, glusterfs, bindfs, mortar-plain, glusterfs-nfs, or --target DIR for any directory"
            );
        }
    }
    for x in &a.access {
        target::Access::parse(x)?;
    }
    Ok(wl)
}

/// Sets up every target asked for; on a failure, closes those set up.
fn set_up(a: &BenchArgs, base: &Path, shape: Shape) -> anyhow::Result<Vec<Target>> {
    use target::Access;
    let mut targets: Vec<Target> = Vec::new();
    // Started first: mortar's NFS servers answer port 111 themselves
    // where it is free.
    let mut rpcbind = Vec::new();
    let setup = (|| -> anyhow::Result<()> {
        if a.against.iter().any(|b| b == "glusterfs-nfs") {
            rpcbind = target::rpcbind()?;
        }
        if a.against.iter().any(|b| b == "local") {
            targets.push(target::local(base)?);
        }
        for access in a
            .access
            .iter()
            .map(|x| Access::parse(x))
            .collect::<Result<Vec<_>, _>>()?
        {
            if a.no_mortar {
                break;
            }
            let (name, nth) = match access {
                Access::Native => ("mortar", 0),
                Access::Nfs => ("mortar-nfs", 3),
            };
            eprintln!("setting up a mortar {} volume ({name}) ...", shape.label());
            targets.push(target::mortar(base, shape, name, nth, &[], access)?);
        }
        if a.against.iter().any(|b| b == "mortar-plain") {
            eprintln!(
                "setting up a mortar {} volume without TLS ...",
                shape.label()
            );
            targets.push(target::mortar(
                base,
                shape,
                "mortar-plain",
                1,
                &[("server.ssl", "off")],
                Access::Native,
            )?);
        }
        for (b, access) in [
            ("glusterfs", Access::Native),
            ("glusterfs-nfs", Access::Nfs),
        ] {
            if a.against.iter().any(|x| x == b) {
                eprintln!("setting up a GlusterFS {} volume ({b}) ...", shape.label());
                let mut t = target::glusterfs(base, shape, &a.glusterfs_group, access)?;
                if access == Access::Nfs {
                    t.also_undo(std::mem::take(&mut rpcbind));
                }
                targets.push(t);
            }
        }
        if a.against.iter().any(|b| b == "bindfs") {
            targets.push(target::bindfs(base)?);
        }
        for d in &a.target {
            targets.push(target::directory(d)?);
        }
        Ok(())
    })();
    if let Err(e) = setup {
        for t in targets {
            t.close();
        }
        undo::run(&rpcbind);
        return Err(e);
    }
    Ok(targets)
}

fn progress_bar(steps: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(steps);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar
}

/// Writes the run's results, plots and report, and prints its tables.
fn write_report(results: &Results, report_dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(report_dir)?;
    let plots = charts::draw(results, report_dir)?;
    std::fs::write(
        report_dir.join("results.json"),
        serde_json::to_vec_pretty(results)?,
    )?;
    std::fs::write(
        report_dir.join("report.md"),
        report::markdown(results, &plots),
    )?;
    println!("{}", report::seed_tables(results));
    println!("{}", report::workload_tables(results));
    println!("report: {}", report_dir.join("report.md").display());
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn scale_measures_powers_of_two_and_the_largest_count_asked() {
        assert_eq!(super::scale_counts(24), vec![1, 2, 4, 8, 16, 24]);
        assert_eq!(super::scale_counts(8), vec![1, 2, 4, 8]);
        assert_eq!(super::scale_counts(0), vec![1]);
    }
}
