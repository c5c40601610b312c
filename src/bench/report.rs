//! The report a person reads: the reference's two tables, one table per
//! workload with ratios against the baselines, plots for the sweeps, and a
//! comparison of two runs.

use super::results::Results;
use super::stats::{fmt, paired_ratio, summarize};
use std::fmt::Write;
use std::path::Path;

/// The targets ratios are taken against, when present.
const BASELINES: &[&str] = &["local", "glusterfs", "bindfs"];

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

/// Draws the reference's two tables as bar charts: one group of bars per
/// metric, one bar per target (medians).
fn seed_bars(r: &Results, dir: &Path, files: &mut Vec<String>) -> anyhow::Result<()> {
    use plotters::prelude::*;
    for (w, unit) in [("seed-smallfile", "ops/s"), ("seed-largefile", "MB/s")] {
        let metrics: Vec<String> = r
            .rows(w)
            .into_iter()
            .filter(|(_, x, _, _)| x.is_none())
            .map(|(m, ..)| m)
            .collect();
        if metrics.is_empty() {
            continue;
        }
        let value = |m: &str, t: &str| {
            r.get(w, m, None, t)
                .and_then(|x| summarize(&x.samples))
                .map(|s| s.median)
        };
        let ymax = metrics
            .iter()
            .flat_map(|m| r.targets.iter().filter_map(move |t| value(m, t)))
            .fold(0.0, f64::max)
            * 1.15
            + 1e-9;
        let name = format!("{w}.svg");
        let path = dir.join(&name);
        {
            let root = SVGBackend::new(&path, (720, 420)).into_drawing_area();
            root.fill(&WHITE)?;
            let n = metrics.len() as f64;
            let mut chart = ChartBuilder::on(&root)
                .caption(format!("{w} ({unit}, median)"), ("sans-serif", 20))
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(60)
                .build_cartesian_2d(0.0..n, 0.0..ymax)?;
            let labels = metrics.clone();
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(metrics.len() * 2 + 1)
                .x_label_formatter(&move |x| {
                    let i = x.floor() as usize;
                    if (x.fract() - 0.5).abs() < 0.01 && i < labels.len() {
                        labels[i].clone()
                    } else {
                        String::new()
                    }
                })
                .y_desc(unit)
                .draw()?;
            let k = r.targets.len().max(1) as f64;
            let width = 0.8 / k;
            for (j, t) in r.targets.iter().enumerate() {
                let color = Palette99::pick(j).mix(0.9);
                let bars: Vec<_> = metrics
                    .iter()
                    .enumerate()
                    .filter_map(|(i, m)| {
                        let v = value(m, t)?;
                        let x0 = i as f64 + 0.1 + j as f64 * width;
                        Some(Rectangle::new(
                            [(x0, 0.0), (x0 + width * 0.9, v)],
                            color.filled(),
                        ))
                    })
                    .collect();
                chart
                    .draw_series(bars)?
                    .label(t.as_str())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
            root.present()?;
        }
        files.push(name);
    }
    Ok(())
}

/// Draws the reference tables as bars, and one SVG per swept metric: one
/// line per target, log-scaled x.
pub fn plots(r: &Results, dir: &Path) -> anyhow::Result<Vec<String>> {
    use plotters::prelude::*;
    let mut files = Vec::new();
    seed_bars(r, dir, &mut files)?;
    for w in r.workloads() {
        let metrics: Vec<(String, String)> = {
            let mut v: Vec<(String, String)> = Vec::new();
            for (m, x, unit, _) in r.rows(&w) {
                if x.is_some() && !v.iter().any(|(k, _)| *k == m) {
                    v.push((m, unit));
                }
            }
            v
        };
        for (metric, unit) in metrics {
            let series: Vec<(String, Vec<(f64, f64)>)> = r
                .targets
                .iter()
                .map(|t| {
                    let mut pts: Vec<(f64, f64)> = r
                        .measurements
                        .iter()
                        .filter(|m| {
                            m.workload == w && m.metric == metric && &m.target == t && m.x.is_some()
                        })
                        .filter_map(|m| Some((m.x?, summarize(&m.samples)?.median)))
                        .collect();
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    (t.clone(), pts)
                })
                .filter(|(_, p)| !p.is_empty())
                .collect();
            if series.is_empty() {
                continue;
            }
            let xs = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
            let (xmin, xmax) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
            let ymax = series
                .iter()
                .flat_map(|(_, p)| p.iter().map(|q| q.1))
                .fold(0.0, f64::max)
                * 1.1
                + 1e-9;
            let name: String = format!("{w}-{metric}")
                .split(|c: char| !c.is_ascii_alphanumeric() && c != '+')
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join("-")
                + ".svg";
            let path = dir.join(&name);
            {
                let root = SVGBackend::new(&path, (720, 420)).into_drawing_area();
                root.fill(&WHITE)?;
                let mut chart = ChartBuilder::on(&root)
                    .caption(format!("{w}: {metric} ({unit})"), ("sans-serif", 20))
                    .margin(12)
                    .x_label_area_size(36)
                    .y_label_area_size(60)
                    .build_cartesian_2d(
                        (xmin.max(1.0)..xmax.max(xmin + 1.0)).log_scale(),
                        0.0..ymax,
                    )?;
                chart
                    .configure_mesh()
                    .x_desc(if w.contains("size") { "bytes" } else { "x" })
                    .y_desc(unit.as_str())
                    .x_label_formatter(&|x| x_label(&w, *x))
                    .draw()?;
                for (i, (t, pts)) in series.iter().enumerate() {
                    let color = Palette99::pick(i).mix(0.9);
                    chart
                        .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
                        .label(t.as_str())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                        });
                    chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()?;
                root.present()?;
            }
            files.push(name);
        }
    }
    Ok(files)
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
    let _ = writeln!(s, "## Workloads\n\n{}", workload_tables(r));
    if !plots.is_empty() {
        let _ = writeln!(s, "## Plots\n");
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
mod tests {
    use super::super::results::Metric;
    use super::*;

    fn sample() -> Results {
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
    fn plots_are_drawn_for_sweeps() {
        let d = tempfile::tempdir().unwrap();
        let files = plots(&sample(), d.path()).unwrap();
        assert_eq!(
            files,
            vec![
                "seed-smallfile.svg",
                "seed-largefile.svg",
                "block-size-write.svg"
            ]
        );
        assert_eq!(
            (human_bytes(4096), human_bytes(10000), human_bytes(1 << 30)),
            ("4K".into(), "9.8K".into(), "1G".into())
        );
        let svg = std::fs::read_to_string(d.path().join(&files[2])).unwrap();
        assert!(svg.contains("<svg") && svg.contains("mortar"));
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
