//! Client translators that answer from the mount's memory what the bricks
//! would answer, under the bricks' leases (docs/caching.md).

pub mod io_cache;
pub mod md_cache;
pub mod write_behind;
