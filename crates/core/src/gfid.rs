//! The 128-bit object id (gfid) that names every file and directory on every
//! brick. A new object's gfid is chosen by the client at the top of the stack,
//! so that every replica stores the same id for it.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Gfid(pub [u8; 16]);

impl Gfid {
    /// The volume's root directory, as in GlusterFS.
    pub const ROOT: Gfid = Gfid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    pub const NULL: Gfid = Gfid([0; 16]);
    /// Not an object: the key under which a brick leases the list of
    /// objects it blames (`Fop::Blamed`), recalled before blame is added.
    pub const BLAMES: Gfid = Gfid([0xff; 16]);

    pub fn random() -> Gfid {
        Gfid(*uuid::Uuid::new_v4().as_bytes())
    }

    pub fn is_null(&self) -> bool {
        *self == Gfid::NULL
    }

    pub fn from_slice(b: &[u8]) -> Option<Gfid> {
        let a: [u8; 16] = b.try_into().ok()?;
        let g = Gfid(a);
        (!g.is_null()).then_some(g)
    }

    /// The object's inode number, as mounts show it (FUSE's inode, NFS's
    /// fileid): its first eight bytes (random for every gfid but the
    /// root's; they also name the brick index directory its handle is in,
    /// so that a brick finds an object by number: `Fop::Resolve`), kept
    /// clear of 0, the root's 1 and `u64::MAX`.
    pub fn ino(&self) -> u64 {
        if *self == Gfid::ROOT {
            return 1;
        }
        let n = u64::from_be_bytes(self.0[..8].try_into().unwrap());
        match n {
            0 | 1 | u64::MAX => n ^ 0x5a5a_5a5a_5a5a_5a5a,
            n => n,
        }
    }

    /// Relative path of this object's handle inside the brick's index
    /// directory: `ab/abcd....-....` (one level of 256 directories).
    pub fn handle_rel(&self) -> String {
        let s = self.to_string();
        format!("{}/{}", &s[0..2], s)
    }
}

impl fmt::Display for Gfid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", uuid::Uuid::from_bytes(self.0).hyphenated())
    }
}

impl fmt::Debug for Gfid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_handle_path() {
        assert_eq!(
            Gfid::ROOT.to_string(),
            "00000000-0000-0000-0000-000000000001"
        );
        assert_eq!(
            Gfid::ROOT.handle_rel(),
            "00/00000000-0000-0000-0000-000000000001"
        );
        assert!(Gfid::from_slice(&[0u8; 16]).is_none());
        assert!(Gfid::from_slice(&[1u8; 15]).is_none());
        let g = Gfid::random();
        assert_eq!(Gfid::from_slice(&g.0), Some(g));
    }
}
