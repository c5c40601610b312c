//! Erasure coding for dispersed volumes (issue 45, docs/disperse.md).
//!
//! A file of a `disperse K + R` volume is cut into stripes of K units;
//! each unit is stored whole, in order, on one of the K data bricks
//! (the code is systematic: a healthy read decodes nothing), and the R
//! parity bricks hold Reed-Solomon parity of each stripe. Any K of the
//! K + R fragments give the file back.
//!
//! - `codec`: the Reed-Solomon code (encode, rebuild, parity from a delta);
//! - `geometry`: where a file's bytes sit in its fragments;
//! - `change`: what a write or a truncation reads and writes of them.
//!
//! Nothing here does I/O; the disperse translator reads and writes the
//! fragments.

pub mod change;
pub mod codec;
pub mod geometry;

pub use change::{ChangeError, FragmentWrite, Need, Truncate, Write};
pub use codec::{Codec, CodecError};
pub use geometry::{Geometry, Piece};
