//! Diagnostic translators: `io_stats`, stacked on a client's graph when an
//! option asks; `profile`, the top of every brick's stack (metrics,
//! `volume profile` and `volume top`).
pub mod io_stats;
pub mod profile;
