//! The report a person reads: the reference's two tables, one table per
//! workload with ratios against the baselines, plots for the sweeps, and a
//! comparison of two runs.

use super::results::Results;
use super::stats::{fmt, paired_ratio, summarize};
use std::fmt::Write;

/// The targets ratios are taken against, when present.
pub const BASELINES: &[&str] = &["local", "glusterfs", "bindfs", "glusterfs-nfs"];

/// The mortar target a baseline is held against: the one reached the same
/// way (through NFS, or mounted natively).
pub fn mortar_beside(baseline: &str) -> &'static str {
    match baseline.ends_with("-nfs") {
        true => "mortar-nfs",
        false => "mortar",
    }
}

fn med(r: &Results, w: &str, metric: &str, t: &str) -> Option<f64> {
    summarize(&r.get(w, metric, None, t)?.samples).map(|s| s.median)
}

/// The practical work's Table 1 and Table 2, one row per target.
pub fn seed_tables(r: &Results) -> String {
    let mut s = String::new();
    if r.workloads().iter().any(|w| w == "seed-smallfile") {
        let n = r
            .params
            .iter()
            .find(|(k, _)| k == "files")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "Table 1: Small file benchmark ({n} files, median of repetitions)\n"
        );
        let _ = writeln!(
            s,
            "| Backend | Write time (s) | Write (ops/s) | Read time (s) | Read (ops/s) |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|");
        let files: f64 = n.parse().unwrap_or(0.0);
        for t in &r.targets {
            let w = med(r, "seed-smallfile", "write", t);
            let rd = med(r, "seed-smallfile", "read", t);
            let time = |o: Option<f64>| o.map(|v| fmt(files / v)).unwrap_or("-".into());
            let ops = |o: Option<f64>| o.map(fmt).unwrap_or("-".into());
            let _ = writeln!(
                s,
                "| {t} | {} | {} | {} | {} |",
                time(w),
                ops(w),
                time(rd),
                ops(rd)
            );
        }
        let _ = writeln!(s);
    }
    if r.workloads().iter().any(|w| w == "seed-largefile") {
        let _ = writeln!(
            s,
            "Table 2: Large file benchmark (bs=1M, O_DIRECT, median of repetitions)\n"
        );
        let _ = writeln!(s, "| Backend | Write throughput | Read throughput |");
        let _ = writeln!(s, "|---|---|---|");
        for t in &r.targets {
            let w = med(r, "seed-largefile", "direct write", t);
            let rd = med(r, "seed-largefile", "direct read", t);
            let mb = |o: Option<f64>| o.map(|v| format!("{} MB/s", fmt(v))).unwrap_or("-".into());
            let _ = writeln!(s, "| {t} | {} | {} |", mb(w), mb(rd));
        }
        let _ = writeln!(s);
    }
    s
}

fn x_label(workload: &str, x: f64) -> String {
    if workload.contains("size") {
        human_bytes(x as u64)
    } else {
        format!("{x}")
    }
}

pub fn human_bytes(b: u64) -> String {
    let (v, unit) = match b {
        b if b >= 1 << 30 => (b as f64 / (1u64 << 30) as f64, "G"),
        b if b >= 1 << 20 => (b as f64 / (1u64 << 20) as f64, "M"),
        b if b >= 1 << 10 => (b as f64 / 1024.0, "K"),
        b => (b as f64, ""),
    };
    if v.fract() == 0.0 {
        format!("{v:.0}{unit}")
    } else {
        format!("{v:.1}{unit}")
    }
}

/// One table per workload: median [min–max] per target, and the paired
/// ratio of every other target against each baseline.
pub fn workload_tables(r: &Results) -> String {
    let mut s = String::new();
    for w in r.workloads() {
        // The targets this workload measured: the run's targets, or the
        // volumes a workload set up for itself (replication, scale).
        let mut targets: Vec<String> = r
            .targets
            .iter()
            .filter(|t| {
                r.measurements
                    .iter()
                    .any(|m| m.workload == w && &m.target == *t)
            })
            .cloned()
            .collect();
        for m in r.measurements.iter().filter(|m| m.workload == w) {
            if !targets.contains(&m.target) {
                targets.push(m.target.clone());
            }
        }
        let others: Vec<&String> = targets
            .iter()
            .filter(|t| !BASELINES.contains(&t.as_str()))
            .collect();
        let bases: Vec<&String> = targets
            .iter()
            .filter(|t| BASELINES.contains(&t.as_str()))
            .collect();
        let _ = writeln!(s, "### {w}\n");
        let mut head = "| metric | unit |".to_string();
        let mut rule = "|---|---|".to_string();
        for t in &targets {
            let _ = write!(head, " {t} |");
            rule.push_str("---|");
        }
        for o in &others {
            for b in &bases {
                let _ = write!(head, " {o} / {b} |");
                rule.push_str("---|");
            }
        }
        let _ = writeln!(s, "{head}\n{rule}");
        for (metric, x, unit, hib) in r.rows(&w) {
            let name = match x {
                Some(x) => format!("{metric} @ {}", x_label(&w, x)),
                None => metric.clone(),
            };
            let _ = write!(s, "| {name} | {unit} |");
            for t in &targets {
                let cell = r
                    .get(&w, &metric, x, t)
                    .and_then(|m| summarize(&m.samples))
                    .map(|v| {
                        if v.n > 1 {
                            format!("{} [{}–{}]", fmt(v.median), fmt(v.min), fmt(v.max))
                        } else {
                            fmt(v.median)
                        }
                    })
                    .unwrap_or("-".into());
                let _ = write!(s, " {cell} |");
            }
            for o in &others {
                for b in &bases {
                    let ratio = match (r.get(&w, &metric, x, o), r.get(&w, &metric, x, b)) {
                        (Some(a), Some(c)) => paired_ratio(&a.samples, &c.samples, hib),
                        _ => None,
                    };
                    let _ = write!(
                        s,
                        " {} |",
                        ratio.map(|v| format!("{}x", fmt(v))).unwrap_or("-".into())
                    );
                }
            }
            let _ = writeln!(s);
        }
        let _ = writeln!(s);
    }
    s
}

/// Where a figure measures a cache rather than the disk: an O_DIRECT
/// figure above the local disk's own (the bricks, or the file system
/// under a FUSE pass-through, read and write through their page cache:
/// O_DIRECT binds the client only), and every O_DIRECT figure of a target
/// that is known to ignore it on the server side.
pub fn cache_notes(r: &Results) -> Vec<String> {
    let mut notes = Vec::new();
    for metric in ["direct read", "direct write"] {
        let Some(local) = med(r, "seed-largefile", metric, "local") else {
            continue;
        };
        for t in r.targets.iter().filter(|t| t.as_str() != "local") {
            let Some(v) = med(r, "seed-largefile", metric, t) else {
                continue;
            };
            if v > local * 1.05 {
                notes.push(format!(
                    "seed-largefile {metric}, {t}: {} MB/s, above the local disk's {} MB/s with O_DIRECT. \
                     O_DIRECT binds the client only: {}, so this figure is the page cache under it, not the disk.",
                    fmt(v),
                    fmt(local),
                    match t.as_str() {
                        "glusterfs" => "GlusterFS's bricks open files without it unless performance.strict-o-direct is on",
                        "bindfs" => "bindfs opens the files below it without it",
                        _ => "mortar's bricks open files without it unless performance.strict-o-direct is on",
                    }
                ));
            }
        }
    }
    let direct: Vec<&str> = ["mortar", "glusterfs"]
        .into_iter()
        .filter(|t| med(r, "seed-largefile", "direct read", t).is_some())
        .collect();
    if !direct.is_empty() {
        notes.push(format!(
            "seed-largefile direct write and read, {}: O_DIRECT binds the client only. The bricks open files \
             without it (unless performance.strict-o-direct is on, which this run leaves off), so a direct \
             write lands in the bricks' page cache and a direct read of the file just written is served from \
             the bricks' memory: these figures measure the network and the bricks' page cache, not the disk.",
            direct.join(", ")
        ));
    }
    if r.measurements
        .iter()
        .any(|m| m.metric.contains("cached") && !m.metric.contains("uncached"))
    {
        notes.push(
            "\"cached\" reads read files just written or read, from the client's caches (the kernel's page cache, \
             mortar's io-cache): they measure the cache, on purpose; \"uncached\" ones drop the kernel's caches first."
                .into(),
        );
    }
    if r.measurements
        .iter()
        .any(|m| m.target == "mortar" && m.metric.contains("uncached"))
    {
        notes.push(
            "mortar's \"uncached\" reads: dropping the kernel's caches does not empty mortar's io-cache \
             (small files' data kept in the client process under the bricks' leases), so small files this \
             mount wrote or read may still come from memory; files above 1 MiB (io-cache's limit per file) do not."
                .into(),
        );
    }
    notes
}

/// The Markdown report.
pub fn markdown(r: &Results, plots: &[String]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# mortar bench report\n");
    let _ = writeln!(s, "Command: `{}`\n", r.command);
    let m = &r.machine;
    let _ = writeln!(
        s,
        "Machine: {} cores, {:.1} GiB memory, kernel {}, disk {}; {}\n",
        m.cores, m.memory_gib, m.kernel, m.disk, m.date
    );
    let params: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(s, "Parameters: {}\n", params.join(", "));
    let _ = writeln!(
        s,
        "Every figure is the median of the repetitions, [min–max] beside it; targets ran interleaved, \
         in a rotating order, and ratios are medians of pairwise ratios (above 1: the first target is better).\n"
    );
    let _ = writeln!(s, "## The reference tables\n\n{}", seed_tables(r));
    let notes = cache_notes(r);
    if !notes.is_empty() {
        let _ = writeln!(s, "## Figures bound by a cache\n");
        for n in notes {
            let _ = writeln!(s, "- {n}");
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## Workloads\n\n{}", workload_tables(r));
    if !plots.is_empty() {
        let _ = writeln!(
            s,
            "## Plots\n\nFirst the summary: for each workload and metric, mortar's figure over each baseline's \
             (paired medians; above 1, mortar is better). Then the reference tables, one panel per metric \
             on its own axis (a log axis where the targets differ by more than 20 times), and the sweeps.\n"
        );
        for p in plots {
            let _ = writeln!(s, "![{p}]({p})\n");
        }
    }
    s
}

/// Compares two runs metric by metric: median of A, median of B, B / A.
pub fn compare(a: &Results, b: &Results) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| workload | metric | target | unit | A | B | B / A |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for m in &a.measurements {
        let Some(other) = b.get(&m.workload, &m.metric, m.x, &m.target) else {
            continue;
        };
        let (Some(x), Some(y)) = (summarize(&m.samples), summarize(&other.samples)) else {
            continue;
        };
        let ratio = if m.higher_is_better {
            y.median / x.median
        } else {
            x.median / y.median
        };
        let name = match m.x {
            Some(v) => format!("{} @ {}", m.metric, x_label(&m.workload, v)),
            None => m.metric.clone(),
        };
        let _ = writeln!(
            s,
            "| {} | {name} | {} | {} | {} | {} | {}x |",
            m.workload,
            m.target,
            m.unit,
            fmt(x.median),
            fmt(y.median),
            fmt(ratio)
        );
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::results::Metric;
    use super::*;

    /// A run of two targets over the seed workloads and one sweep.
    pub(crate) fn sample() -> Results {
        let mut r = Results {
            command: "mortar bench".into(),
            params: vec![("files".into(), "2000".into())],
            targets: vec!["local".into(), "mortar".into(), "glusterfs".into()],
            ..Default::default()
        };
        for (t, w, rd, dw, dr) in [
            ("local", 11679.0, 658.0, 934.0, 1100.0),
            ("mortar", 3000.0, 900.0, 700.0, 2000.0),
            ("glusterfs", 282.0, 405.0, 176.0, 672.0),
        ] {
            let m = |metric| Metric {
                workload: "seed-smallfile",
                metric,
                unit: "ops/s",
                higher_is_better: true,
                x: None,
            };
            r.add(m("write"), t, w);
            r.add(m("read"), t, rd);
            let l = |metric| Metric {
                workload: "seed-largefile",
                metric,
                unit: "MB/s",
                higher_is_better: true,
                x: None,
            };
            r.add(l("direct write"), t, dw);
            r.add(l("direct read"), t, dr);
            for (bs, v) in [(4096.0, 10.0), (1048576.0, 100.0)] {
                let s = Metric {
                    workload: "block-size",
                    metric: "write",
                    unit: "MB/s",
                    higher_is_better: true,
                    x: Some(bs),
                };
                r.add(s, t, v);
            }
        }
        r
    }

    #[test]
    fn figures_above_the_disk_with_o_direct_are_called_cache_bound() {
        let notes = cache_notes(&sample());
        assert!(
            notes
                .iter()
                .any(|n| n.contains("direct read, mortar: 2000 MB/s, above the local disk's 1100")),
            "{notes:?}"
        );
        assert!(!notes.iter().any(|n| n.contains("direct read, glusterfs: ")));
        assert!(notes
            .iter()
            .any(|n| n.contains("mortar, glusterfs: O_DIRECT binds the client only")));
        assert!(markdown(&sample(), &[]).contains("## Figures bound by a cache"));
    }

    #[test]
    fn seed_tables_have_a_row_per_target() {
        let t = seed_tables(&sample());
        assert!(t.contains(
            "| Backend | Write time (s) | Write (ops/s) | Read time (s) | Read (ops/s) |"
        ));
        assert!(t.contains("| local | 0.171 | 11679 | 3.04 | 658 |"), "{t}");
        assert!(t.contains("| glusterfs | 176 MB/s | 672 MB/s |"), "{t}");
    }

    #[test]
    fn workload_tables_carry_ratios_against_baselines() {
        let t = workload_tables(&sample());
        assert!(t.contains("| metric | unit | local | mortar | glusterfs | mortar / local | mortar / glusterfs |"), "{t}");
        assert!(
            t.contains("| write | ops/s | 11679 | 3000 | 282 | 0.257x | 10.6x |"),
            "{t}"
        );
        assert!(t.contains("write @ 4K"), "{t}");
    }

    #[test]
    fn two_runs_compare_metric_by_metric() {
        let a = sample();
        let mut b = sample();
        for m in &mut b.measurements {
            m.samples.iter_mut().for_each(|v| *v *= 2.0);
        }
        let c = compare(&a, &b);
        assert!(
            c.contains("| seed-smallfile | write | mortar | ops/s | 3000 | 6000 | 2.00x |"),
            "{c}"
        );
    }
}
