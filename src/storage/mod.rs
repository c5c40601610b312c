//! Brick-side storage translators.
pub mod posix;
