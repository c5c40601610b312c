//! Diagnostic translators, stacked on a client's graph when an option asks.
pub mod io_stats;
