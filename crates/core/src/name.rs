//! A name inside a directory, validated once (`Name::new`), so that a
//! brick never sees one that could lead out of the directory it was given.

use super::{FsError, FsResult};
use serde::{Deserialize, Serialize};
use std::fmt;

/// One validated path component: not empty, not `.` or `..`, no `/`, no NUL,
/// at most 255 bytes. Built only through `Name::new`, so that a brick never
/// sees a name that could leave the directory it was given.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "serde_bytes::ByteBuf", into = "serde_bytes::ByteBuf")]
pub struct Name(Vec<u8>);

pub const NAME_MAX: usize = 255;

impl Name {
    pub fn new(b: impl Into<Vec<u8>>) -> FsResult<Name> {
        let b = b.into();
        if b.is_empty() || b == b"." || b == b".." {
            return Err(FsError::inval("invalid name"));
        }
        if b.len() > NAME_MAX {
            return Err(FsError::new(libc::ENAMETOOLONG, "name too long"));
        }
        if b.iter().any(|&c| c == b'/' || c == 0) {
            return Err(FsError::inval("name contains '/' or NUL"));
        }
        Ok(Name(b))
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
    pub fn as_os_str(&self) -> &std::ffi::OsStr {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(&self.0)
    }
}

impl TryFrom<serde_bytes::ByteBuf> for Name {
    type Error = FsError;
    fn try_from(b: serde_bytes::ByteBuf) -> FsResult<Name> {
        Name::new(b.into_vec())
    }
}

impl From<Name> for serde_bytes::ByteBuf {
    fn from(n: Name) -> Self {
        serde_bytes::ByteBuf::from(n.0)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}
