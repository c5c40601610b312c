//! Statistics over repeated measurements: median, min and max, and ratios
//! taken pair by pair (repetition k of one target against repetition k of
//! the baseline, which ran beside it).

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s: Vec<f64> = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    })
}

pub fn summarize(v: &[f64]) -> Option<Summary> {
    Some(Summary {
        median: median(v)?,
        min: v.iter().copied().fold(f64::INFINITY, f64::min),
        max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        n: v.len(),
    })
}

/// The median of the pairwise ratios a[k] / b[k], oriented so that above 1
/// means `a` is better.
pub fn paired_ratio(a: &[f64], b: &[f64], higher_is_better: bool) -> Option<f64> {
    let r: Vec<f64> = a
        .iter()
        .zip(b)
        .filter(|(x, y)| **x > 0.0 && **y > 0.0)
        .map(|(x, y)| if higher_is_better { x / y } else { y / x })
        .collect();
    median(&r)
}

/// Formats a figure the way people read them: 3 significant digits, with
/// thousands kept whole.
pub fn fmt(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ranges() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        let s = summarize(&[2.0, 9.0, 4.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (4.0, 2.0, 9.0, 3));
    }

    #[test]
    fn ratios_are_paired_and_oriented() {
        // Throughput: higher is better.
        assert_eq!(
            paired_ratio(&[200.0, 300.0, 400.0], &[100.0, 100.0, 100.0], true),
            Some(3.0)
        );
        // Seconds: lower is better, so a faster `a` gives a ratio above 1.
        assert_eq!(
            paired_ratio(&[1.0, 1.0, 1.0], &[2.0, 4.0, 3.0], false),
            Some(3.0)
        );
        assert_eq!(paired_ratio(&[], &[], true), None);
    }

    #[test]
    fn figures_read_well() {
        assert_eq!(fmt(11679.4), "11679");
        assert_eq!(fmt(12.345), "12.3");
        assert_eq!(fmt(1.2345), "1.23");
        assert_eq!(fmt(0.01234), "0.012");
    }
}
