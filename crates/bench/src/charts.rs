//! The report's charts (SVG, plotters), drawn to be read at a glance:
//!
//! - the reference tables as one small chart per metric, each on its own
//!   axis (a log axis when the targets differ by more than `LOG_SPREAD`),
//!   with the value written on every bar;
//! - one chart per swept metric: a line per target over the swept
//!   quantity, named on its axis (block size, file size, bricks, streams);
//!   sizes on a log axis, counts on a linear one;
//! - a summary of ratios: for every workload and metric, mortar's figure
//!   over each baseline's (above 1: mortar is better), on a log axis
//!   centred on 1.
//!
//! Tick labels are plain numbers (`180k`, `2.5`), never `180000.0`.

use super::results::Results;
use super::stats::{paired_ratio, summarize};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Targets that differ by more than this share a log axis.
const LOG_SPREAD: f64 = 20.0;

/// A tick or bar label: 180k, 1.2M, 25, 2.5, 0.031.
pub fn plain(v: f64) -> String {
    let a = v.abs();
    let (x, unit) = match a {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e4 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let digits = match x.abs() {
        a if a >= 100.0 || a == 0.0 => 0,
        a if a >= 10.0 => 1,
        a if a >= 1.0 => 2,
        _ => 3,
    };
    let s = format!("{x:.digits$}");
    // 2.50 → 2.5, 3.00 → 3
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    format!("{s}{unit}")
}

/// What a sweep's x is, in words, and whether it is a size (log axis,
/// bytes) or a count (linear axis).
fn sweep_axis(workload: &str) -> (&'static str, bool) {
    match workload {
        "block-size" => ("block size (bytes)", true),
        "file-size" => ("file size (bytes)", true),
        "streams" => ("parallel streams", false),
        "scale" => ("bricks (distribute)", false),
        "replication" => ("replicas", false),
        _ => ("x", false),
    }
}

fn sweep_label(is_size: bool, x: f64) -> String {
    match is_size {
        true => super::report::human_bytes(x as u64),
        false => plain(x),
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// One metric of a reference table: a bar per target, the value on top.
fn metric_panel(
    area: &Area,
    title: &str,
    unit: &str,
    bars: &[(String, f64, RGBColor)],
) -> anyhow::Result<()> {
    let max = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9);
    let min = bars
        .iter()
        .map(|b| b.1)
        .filter(|v| *v > 0.0)
        .fold(f64::MAX, f64::min);
    let n = bars.len() as f64;
    let label_area = 56;
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(22)
        .y_label_area_size(label_area);
    let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let x_fmt = move |x: &f64| {
        let i = x.floor() as usize;
        match ((x.fract() - 0.5).abs() < 0.01, names.get(i)) {
            (true, Some(n)) => n.clone(),
            _ => String::new(),
        }
    };
    let draw_bars = |bars: &[(String, f64, RGBColor)], base: f64| {
        bars.iter()
            .enumerate()
            .map(move |(i, (_, v, c))| {
                Rectangle::new(
                    [(i as f64 + 0.15, base), (i as f64 + 0.85, v.max(base))],
                    c.filled(),
                )
            })
            .collect::<Vec<_>>()
    };
    let value_text = |bars: &[(String, f64, RGBColor)]| {
        bars.iter()
            .enumerate()
            .map(|(i, (_, v, _))| {
                Text::new(
                    plain(*v),
                    (i as f64 + 0.5, *v),
                    ("sans-serif", 12).into_font().color(&BLACK).pos(
                        plotters::style::text_anchor::Pos::new(
                            plotters::style::text_anchor::HPos::Center,
                            plotters::style::text_anchor::VPos::Bottom,
                        ),
                    ),
                )
            })
            .collect::<Vec<_>>()
    };
    if max / min > LOG_SPREAD {
        let lo = 10f64.powf((min / 2.0).log10().floor());
        let mut chart = builder.build_cartesian_2d(0.0..n, (lo..max * 3.0).log_scale())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len() * 2 + 1)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&|v| plain(*v))
            .y_desc(format!("{unit} (log)"))
            .draw()?;
        chart.draw_series(draw_bars(bars, lo))?;
        chart.draw_series(value_text(bars))?;
    } else {
        let mut chart = builder.build_cartesian_2d(0.0..n, 0.0..max * 1.2)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len() * 2 + 1)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&|v| plain(*v))
            .y_desc(unit)
            .draw()?;
        chart.draw_series(draw_bars(bars, 0.0))?;
        chart.draw_series(value_text(bars))?;
    }
    Ok(())
}

fn color(i: usize) -> RGBColor {
    // Distinct and readable in print: blue, orange, green, red, purple,
    // brown, pink, grey.
    const C: [(u8, u8, u8); 8] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
    ];
    let (r, g, b) = C[i % C.len()];
    RGBColor(r, g, b)
}

/// The reference tables: one chart per workload, a panel per metric.
fn seed_panels(r: &Results, dir: &Path, files: &mut Vec<String>) -> anyhow::Result<()> {
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
        let name = format!("{w}.svg");
        let path = dir.join(&name);
        {
            let cols = metrics.len().min(2);
            let rows = metrics.len().div_ceil(cols);
            let width = 140 + 110 * r.targets.len() as u32;
            let root = SVGBackend::new(&path, (width * cols as u32, 300 * rows as u32 + 40))
                .into_drawing_area();
            root.fill(&WHITE)?;
            let root = root.titled(
                &format!("{w}: median of the repetitions, higher is better"),
                ("sans-serif", 18),
            )?;
            let panels = root.split_evenly((rows, cols));
            for (m, area) in metrics.iter().zip(panels.iter()) {
                let bars: Vec<(String, f64, RGBColor)> = r
                    .targets
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| {
                        let v = summarize(&r.get(w, m, None, t)?.samples)?.median;
                        Some((short(t), v, color(i)))
                    })
                    .collect();
                if !bars.is_empty() {
                    metric_panel(area, m, unit, &bars)?;
                }
            }
            root.present()?;
        }
        files.push(name);
    }
    Ok(())
}

/// A target's name on an axis: a mount point's last part.
fn short(t: &str) -> String {
    match t.rsplit('/').find(|p| !p.is_empty()) {
        Some(last) if t.starts_with('/') => format!("…/{last}"),
        _ => t.to_string(),
    }
}

/// Each target's points (x, median) of `metric` in workload `w`, sorted by
/// x; targets without any left out.
fn sweep_series(r: &Results, w: &str, metric: &str) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut targets: Vec<String> = r.targets.clone();
    for m in r.measurements.iter().filter(|m| m.workload == w) {
        if !targets.contains(&m.target) {
            targets.push(m.target.clone());
        }
    }
    targets
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
        .collect()
}

/// One chart per swept metric, a line per target.
fn sweeps(r: &Results, dir: &Path, files: &mut Vec<String>) -> anyhow::Result<()> {
    for w in r.workloads() {
        let (x_desc, is_size) = sweep_axis(&w);
        let mut metrics: Vec<(String, String, bool)> = Vec::new();
        for (m, x, unit, hib) in r.rows(&w) {
            if x.is_some() && !metrics.iter().any(|(k, _, _)| *k == m) {
                metrics.push((m, unit, hib));
            }
        }
        for (metric, unit, hib) in metrics {
            let series = sweep_series(r, &w, &metric);
            if series.is_empty() {
                continue;
            }
            let xs: Vec<f64> = {
                let mut v: Vec<f64> = series
                    .iter()
                    .flat_map(|(_, p)| p.iter().map(|q| q.0))
                    .collect();
                v.sort_by(f64::total_cmp);
                v.dedup();
                v
            };
            let (xmin, xmax) = (xs[0], xs[xs.len() - 1]);
            let ys = || series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1));
            let ytop = ys().fold(0.0, f64::max);
            let ymax = ytop * 1.15 + 1e-9;
            // A log axis where one target's figures would flatten another's.
            let ylow = ys().filter(|y| *y > 0.0).fold(f64::INFINITY, f64::min);
            let log_y = ylow.is_finite() && ytop / ylow > LOG_SPREAD;
            let y_desc = match log_y {
                true => format!("{unit} (log)"),
                false => unit.clone(),
            };
            let log_range = (ylow / 1.5..ytop * 1.5).log_scale();
            let name: String = format!("{w}-{metric}")
                .split(|c: char| !c.is_ascii_alphanumeric() && c != '+')
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join("-")
                + ".svg";
            let path = dir.join(&name);
            {
                let root = SVGBackend::new(&path, (760, 440)).into_drawing_area();
                root.fill(&WHITE)?;
                let mut b = ChartBuilder::on(&root);
                b.caption(
                    format!(
                        "{w}: {metric} ({unit}, median; {} is better)",
                        if hib { "higher" } else { "lower" }
                    ),
                    ("sans-serif", 18),
                )
                .margin(14)
                .x_label_area_size(44)
                .y_label_area_size(64);
                // Ticks at the measured points only.
                let at_points = |x: &f64| match xs.iter().any(|p| (p - x).abs() <= p * 1e-6) {
                    true => sweep_label(is_size, *x),
                    false => String::new(),
                };
                macro_rules! draw {
                    ($chart:expr, $at:expr, $fmt:expr) => {{
                        let mut chart = $chart;
                        chart
                            .configure_mesh()
                            .x_desc(x_desc)
                            .y_desc(y_desc.as_str())
                            .x_label_formatter($fmt)
                            .y_label_formatter(&|v| plain(*v))
                            .draw()?;
                        for (i, (t, pts)) in series.iter().enumerate() {
                            let c = color(i);
                            chart
                                .draw_series(LineSeries::new(
                                    pts.iter().map(|&(x, y)| ($at(x), y)),
                                    c.stroke_width(2),
                                ))?
                                .label(short(t))
                                .legend(move |(x, y)| {
                                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                                });
                            chart.draw_series(
                                pts.iter()
                                    .map(|&(x, y)| Circle::new(($at(x), y), 3, c.filled())),
                            )?;
                        }
                        chart
                            .configure_series_labels()
                            .position(SeriesLabelPosition::UpperLeft)
                            .background_style(WHITE.mix(0.85))
                            .border_style(BLACK)
                            .draw()?;
                    }};
                }
                let size_x = || {
                    (xmin * 0.8..xmax * 1.25)
                        .log_scale()
                        .with_key_points(xs.clone())
                };
                // Counts: evenly spaced integers, a tick at each measured one.
                let (lo, hi) = (xmin.floor() as i32, xmax.ceil() as i32);
                let count_x =
                    || (lo - 1..hi + 1).with_key_points(xs.iter().map(|x| *x as i32).collect());
                let count_fmt = |x: &i32| {
                    if xs.contains(&(*x as f64)) {
                        x.to_string()
                    } else {
                        String::new()
                    }
                };
                let count_at = |x: f64| x.round() as i32;
                match (is_size, log_y) {
                    (true, true) => {
                        let c = b.build_cartesian_2d(size_x(), log_range)?;
                        draw!(c, |x: f64| x, &at_points);
                    }
                    (true, false) => {
                        let c = b.build_cartesian_2d(size_x(), 0.0..ymax)?;
                        draw!(c, |x: f64| x, &at_points);
                    }
                    (false, true) => {
                        let c = b.build_cartesian_2d(count_x(), log_range)?;
                        draw!(c, count_at, &count_fmt);
                    }
                    (false, false) => {
                        let c = b.build_cartesian_2d(count_x(), 0.0..ymax)?;
                        draw!(c, count_at, &count_fmt);
                    }
                }
                root.present()?;
            }
            files.push(name);
        }
    }
    Ok(())
}

/// Every (workload, metric, x) with mortar's figure over each baseline's,
/// as `mortar / BASELINE`: reached the same way (an NFS baseline against
/// mortar's NFS server, the others against the native mount).
pub fn ratio_rows(r: &Results) -> Vec<(String, Vec<(String, f64)>)> {
    let pairs: Vec<(&str, &String)> = r
        .targets
        .iter()
        .filter(|t| super::report::BASELINES.contains(&t.as_str()))
        .map(|b| (super::report::mortar_beside(b), b))
        .collect();
    let mut out = Vec::new();
    for w in r.workloads() {
        for (metric, x, _, hib) in r.rows(&w) {
            let ratios: Vec<(String, f64)> = pairs
                .iter()
                .filter_map(|(m, b)| {
                    let ours = r.get(&w, &metric, x, m)?;
                    let base = r.get(&w, &metric, x, b)?;
                    let v = paired_ratio(&ours.samples, &base.samples, hib)?;
                    Some((format!("{m} / {b}"), v))
                })
                .filter(|(_, v)| v.is_finite() && *v > 0.0)
                .collect();
            if ratios.is_empty() {
                continue;
            }
            let label = match x {
                Some(x) => format!("{w}: {metric} @ {}", sweep_label(sweep_axis(&w).1, x)),
                None => format!("{w}: {metric}"),
            };
            out.push((label, ratios));
        }
    }
    out
}

/// The summary: a row per workload and metric, a bar per baseline.
fn ratios(r: &Results, dir: &Path, files: &mut Vec<String>) -> anyhow::Result<()> {
    let rows = ratio_rows(r);
    if rows.is_empty() {
        return Ok(());
    }
    let bases: Vec<String> = {
        let mut v: Vec<String> = Vec::new();
        for (_, rs) in &rows {
            for (b, _) in rs {
                if !v.contains(b) {
                    v.push(b.clone());
                }
            }
        }
        v
    };
    let (lo, hi) = rows
        .iter()
        .flat_map(|(_, rs)| rs.iter().map(|x| x.1))
        .fold((1.0f64, 1.0f64), |(a, b), v| (a.min(v), b.max(v)));
    let (lo, hi) = ((lo * 0.7).min(0.5), (hi * 1.4).max(2.0));
    let name = "ratios.svg".to_string();
    let path = dir.join(&name);
    {
        // Two empty rows on top hold the legend.
        let height = 90 + 24 * (rows.len() as u32 + 2) + 30;
        let root = SVGBackend::new(&path, (1000, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let n = rows.len() as f64;
        let top = n + 2.0;
        let labels: Vec<String> = rows.iter().map(|(l, _)| l.clone()).collect();
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "mortar / each baseline, per workload (above 1: mortar is better)",
                ("sans-serif", 18),
            )
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(330)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..top)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels((rows.len() + 2) * 2 + 1)
            .y_label_formatter(&|y| {
                let i = y.floor() as usize;
                match (
                    (y.fract() - 0.5).abs() < 0.01,
                    labels.len().checked_sub(i + 1),
                ) {
                    (true, Some(j)) => labels[j].clone(),
                    _ => String::new(),
                }
            })
            .x_label_formatter(&|v| format!("{}x", plain(*v)))
            .x_desc("ratio (log)")
            .draw()?;
        let k = bases.len() as f64;
        for (j, b) in bases.iter().enumerate() {
            let c = color(j + 1);
            let bars: Vec<_> = rows
                .iter()
                .enumerate()
                .filter_map(|(i, (_, rs))| {
                    let v = rs.iter().find(|(x, _)| x == b)?.1;
                    // The first row at the top.
                    let y0 = (rows.len() - 1 - i) as f64 + 0.1 + j as f64 * 0.8 / k;
                    let (a, z) = if v >= 1.0 { (1.0, v) } else { (v, 1.0) };
                    Some(Rectangle::new(
                        [(a, y0), (z, y0 + 0.8 / k * 0.9)],
                        c.filled(),
                    ))
                })
                .collect();
            chart
                .draw_series(bars)?
                .label(b.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        // A rule between rows, and the line of parity.
        for i in 0..=rows.len() {
            let y = i as f64;
            chart.draw_series(LineSeries::new([(lo, y), (hi, y)], BLACK.mix(0.15)))?;
        }
        chart.draw_series(LineSeries::new(
            [(1.0, 0.0), (1.0, n)],
            BLACK.stroke_width(1),
        ))?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    files.push(name);
    Ok(())
}

/// Draws every chart of the report into `dir`; answers the files' names.
pub fn draw(r: &Results, dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut files = Vec::new();
    ratios(r, dir, &mut files)?;
    seed_panels(r, dir, &mut files)?;
    sweeps(r, dir, &mut files)?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_plain_numbers() {
        assert_eq!(plain(180000.0), "180k");
        assert_eq!(plain(169414.0), "169k");
        assert_eq!(plain(1_250_000.0), "1.25M");
        assert_eq!(plain(2.5), "2.5");
        assert_eq!(plain(3.0), "3");
        assert_eq!(plain(25.0), "25");
        assert_eq!(plain(0.0312), "0.031");
        assert_eq!(plain(0.0), "0");
        assert_eq!(plain(413.0), "413");
    }

    #[test]
    fn sweeps_name_their_axis() {
        assert_eq!(sweep_axis("scale"), ("bricks (distribute)", false));
        assert!(sweep_axis("block-size").1);
        assert_eq!(sweep_label(true, 4096.0), "4K");
        assert_eq!(sweep_label(false, 3.0), "3");
    }

    /// A sweep whose targets differ by more than `LOG_SPREAD` times gets a
    /// log axis (the local disk would flatten the others); a close one
    /// keeps a linear axis from zero.
    #[test]
    fn sweeps_far_apart_get_a_log_axis() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Results::default();
        for (bs, local, mortar) in [(4096.0, 600.0, 20.0), (65536.0, 1600.0, 190.0)] {
            for (t, v) in [("local", local), ("mortar", mortar)] {
                let m = |metric| crate::results::Metric {
                    workload: "block-size",
                    metric,
                    unit: "MB/s",
                    higher_is_better: true,
                    x: Some(bs),
                };
                r.add(m("write"), t, v);
                r.add(m("read"), t, v.min(300.0) + 100.0);
            }
        }
        let files = draw(&r, dir.path()).unwrap();
        let svg = |name: &str| {
            assert!(files.iter().any(|f| f == name), "{files:?}");
            std::fs::read_to_string(dir.path().join(name)).unwrap()
        };
        assert!(svg("block-size-write.svg").contains("MB/s (log)"));
        assert!(!svg("block-size-read.svg").contains("(log)"));
    }

    #[test]
    fn plots_are_drawn_for_sweeps() {
        let d = tempfile::tempdir().unwrap();
        let files = draw(&crate::report::tests::sample(), d.path()).unwrap();
        assert_eq!(
            files,
            vec![
                "ratios.svg",
                "seed-smallfile.svg",
                "seed-largefile.svg",
                "block-size-write.svg"
            ]
        );
        assert_eq!(
            (
                crate::report::human_bytes(4096),
                crate::report::human_bytes(10000),
                crate::report::human_bytes(1 << 30)
            ),
            ("4K".into(), "9.8K".into(), "1G".into())
        );
        let svg = std::fs::read_to_string(d.path().join(&files[3])).unwrap();
        assert!(svg.contains("<svg") && svg.contains("mortar"));
        // Named axes and plain ticks.
        assert!(
            svg.contains("block size (bytes)") && !svg.contains(".0<"),
            "{svg}"
        );
        let ratios = std::fs::read_to_string(d.path().join(&files[0])).unwrap();
        assert!(ratios.contains("mortar / local"), "{ratios}");
    }
}
