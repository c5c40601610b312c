//! Brick-side storage translators: `posix` keeps the data in a local
//! directory, `index` the pending markers and heal index, `locks` the
//! object locks that order changes from different clients, `health` the
//! periodic probe that the brick's file system still works; `memory` is a
//! brick in memory for unit tests of the cluster translators.
pub mod health;
pub mod index;
pub mod locks;
#[cfg(test)]
pub mod memory;
pub mod posix;
