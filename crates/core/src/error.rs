//! Errors that travel through the translator stack. Every error carries the
//! errno that the application finally sees, and a message for the logs.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsError {
    pub errno: i32,
    pub msg: String,
}

pub type FsResult<T> = Result<T, FsError>;

impl FsError {
    pub fn new(errno: i32, msg: impl Into<String>) -> Self {
        FsError {
            errno,
            msg: msg.into(),
        }
    }
    pub fn errno(errno: i32) -> Self {
        FsError {
            errno,
            msg: String::new(),
        }
    }
    pub fn notconn(msg: impl Into<String>) -> Self {
        Self::new(libc::ENOTCONN, msg)
    }
    pub fn inval(msg: impl Into<String>) -> Self {
        Self::new(libc::EINVAL, msg)
    }
    pub fn is(&self, errno: i32) -> bool {
        self.errno == errno
    }
}

impl From<std::io::Error> for FsError {
    fn from(e: std::io::Error) -> Self {
        FsError::new(e.raw_os_error().unwrap_or(libc::EIO), e.to_string())
    }
}

impl From<rustix::io::Errno> for FsError {
    fn from(e: rustix::io::Errno) -> Self {
        FsError::errno(e.raw_os_error())
    }
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = std::io::Error::from_raw_os_error(self.errno);
        if self.msg.is_empty() {
            write!(f, "{text}")
        } else {
            write!(f, "{text}: {}", self.msg)
        }
    }
}

impl fmt::Debug for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for FsError {}
