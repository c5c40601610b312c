//! Brick-side storage translators: `posix` keeps the data in a local
//! directory, `index` the pending markers and heal index, `locks` the
//! object locks that order changes from different clients.
pub mod index;
pub mod locks;
pub mod posix;
