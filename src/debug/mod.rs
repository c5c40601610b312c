//! Diagnostic translators: `io_stats`, stacked on a client's graph when an
//! option asks; `profile`, the top of every brick's stack (metrics,
//! `volume profile`, `volume top`, `volume status … detail` and the
//! bricks' statedumps); `status` and `statedump`, what a process shows of
//! itself.
pub mod io_stats;
pub mod profile;
pub mod statedump;
pub mod status;
