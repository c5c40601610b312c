//! Reading a process's Prometheus metrics.

use std::io::{Read, Write};
use std::time::Duration;

/// The body of `GET /metrics` at `addr`.
pub fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}

/// The sum of the samples of `metric` whose labels contain every one of
/// `labels` (`key="value"`).
pub fn value(text: &str, metric: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, rest) = l.split_once('{').unwrap_or((l.split(' ').next()?, ""));
            (name == metric && labels.iter().all(|want| rest.contains(want)))
                .then(|| l.rsplit(' ').next()?.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}
