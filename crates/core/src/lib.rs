//! Core types shared by every layer: object ids, file operations as data,
//! errors with an errno, option specs, and the translator trait with its
//! event path.
//!
//! Dependencies point one way: `core` knows nothing of the network, the
//! brick storage, FUSE or the management daemon.

pub mod addrs;
pub mod changed;
pub mod clock;
pub mod desc;
pub mod error;
pub mod fop;
pub mod gfid;
pub mod name;
pub mod options;
pub mod recalls;
pub mod terms;
pub mod xlator;

pub use error::{FsError, FsResult};
pub use fop::{Attr, DirEntry, Entry, FileKind, Fop, Name, Reply, SetAttr, StatFs};
pub use gfid::Gfid;
pub use xlator::{Child, Ctx, Event, Link, Options, Xlator};
