//! Brick-side storage translators: `posix` keeps the data in a local
//! directory, `index` the pending markers and heal index, `locks` the
//! object locks that order changes from different clients, `health` the
//! periodic probe that the brick's file system still works.
pub mod health;
pub mod index;
pub mod locks;
pub mod posix;
