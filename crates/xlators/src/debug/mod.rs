//! `debug/io-stats`: the client translator stacked on a graph when an
//! option asks, counting fops, errors and latency.
pub mod io_stats;
