//! What a benchmark run produced, as data: every sample of every metric of
//! every workload on every target, plus the machine and the parameters.
//! Saved as `results.json`, so that two runs can be compared.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Measurement {
    pub workload: String,
    pub metric: String,
    pub unit: String,
    pub higher_is_better: bool,
    /// Position in a sweep (bytes, threads, bricks), if any.
    pub x: Option<f64>,
    pub target: String,
    pub samples: Vec<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub disk: String,
    pub date: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Results {
    pub command: String,
    pub machine: Machine,
    /// Parameter name → value, as given or defaulted.
    pub params: Vec<(String, String)>,
    pub targets: Vec<String>,
    pub measurements: Vec<Measurement>,
}

/// One metric's identity, for adding samples.
pub struct Metric<'a> {
    pub workload: &'a str,
    pub metric: &'a str,
    pub unit: &'a str,
    pub higher_is_better: bool,
    pub x: Option<f64>,
}

impl Results {
    pub fn add(&mut self, m: Metric<'_>, target: &str, value: f64) {
        let found = self.measurements.iter_mut().find(|x| {
            x.workload == m.workload && x.metric == m.metric && x.x == m.x && x.target == target
        });
        match found {
            Some(x) => x.samples.push(value),
            None => self.measurements.push(Measurement {
                workload: m.workload.into(),
                metric: m.metric.into(),
                unit: m.unit.into(),
                higher_is_better: m.higher_is_better,
                x: m.x,
                target: target.into(),
                samples: vec![value],
            }),
        }
    }

    pub fn get(
        &self,
        workload: &str,
        metric: &str,
        x: Option<f64>,
        target: &str,
    ) -> Option<&Measurement> {
        self.measurements.iter().find(|m| {
            m.workload == workload && m.metric == metric && m.x == x && m.target == target
        })
    }

    /// Workloads in the order they were first measured.
    pub fn workloads(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for m in &self.measurements {
            if !out.contains(&m.workload) {
                out.push(m.workload.clone());
            }
        }
        out
    }

    /// (metric, x) rows of one workload, in the order first measured.
    pub fn rows(&self, workload: &str) -> Vec<(String, Option<f64>, String, bool)> {
        let mut out: Vec<(String, Option<f64>, String, bool)> = Vec::new();
        for m in self.measurements.iter().filter(|m| m.workload == workload) {
            if !out.iter().any(|(k, x, _, _)| *k == m.metric && *x == m.x) {
                out.push((m.metric.clone(), m.x, m.unit.clone(), m.higher_is_better));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_gather_under_their_metric() {
        let mut r = Results::default();
        let m = || Metric {
            workload: "w",
            metric: "read",
            unit: "MB/s",
            higher_is_better: true,
            x: Some(4096.0),
        };
        r.add(m(), "mortar", 1.0);
        r.add(m(), "mortar", 2.0);
        r.add(m(), "local", 3.0);
        r.add(Metric { x: None, ..m() }, "mortar", 9.0);
        assert_eq!(r.measurements.len(), 3);
        assert_eq!(
            r.get("w", "read", Some(4096.0), "mortar").unwrap().samples,
            vec![1.0, 2.0]
        );
        assert_eq!(r.rows("w").len(), 2);
        let back: Results = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
