//! Where a brick keeps its data: `posix` in a local directory (files at
//! their own path, a gfid index and the heal index beside them under
//! `.mortar`, and a periodic probe that the file system still works), and
//! `snapshot`, copies of that directory at one moment.
pub mod posix;
pub mod snapshot;
