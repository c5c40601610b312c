//! NFS file handles: the volume and the object, nothing that lives only
//! in one server's memory, so that a handle stays good across a restart
//! of the NFS server and on every server of the pool (a client that fails
//! over to another server's address goes on with the handles it has).
//!
//! Layout (49 bytes, RFC 1813 allows 64): a version byte (2), the
//! volume's id (16 bytes), the export's root directory (its gfid: the
//! volume's root, or the directory the client mounted, which keeps it
//! beneath), the object's gfid (16 bytes). Version 1 handles, without the
//! export's root, are of the whole volume.

use mortar_core::Gfid;

const VERSION: u8 = 2;
pub const LEN: usize = 49;
/// A version 1 handle's length.
const LEN_1: usize = 33;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle {
    pub volume: [u8; 16],
    /// The directory the client mounted.
    pub root: Gfid,
    pub gfid: Gfid,
}

/// Not a handle this server makes (NFS3ERR_BADHANDLE).
#[derive(Debug, PartialEq, Eq)]
pub struct BadHandle;

impl Handle {
    pub fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0] = VERSION;
        b[1..17].copy_from_slice(&self.volume);
        b[17..33].copy_from_slice(&self.root.0);
        b[33..].copy_from_slice(&self.gfid.0);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Handle, BadHandle> {
        let gfid = |b: &[u8]| Gfid::from_slice(b).ok_or(BadHandle);
        let (root, object) = match (b.len(), b.first()) {
            (LEN, Some(&VERSION)) => (gfid(&b[17..33])?, &b[33..]),
            (LEN_1, Some(1)) => (Gfid::ROOT, &b[17..]),
            _ => return Err(BadHandle),
        };
        Ok(Handle {
            volume: b[1..17].try_into().unwrap(),
            root,
            gfid: gfid(object)?,
        })
    }
}

/// The 16 bytes of a volume's id (a UUID as its daemons write it; any
/// other string is hashed).
pub fn volume_id(id: &str) -> [u8; 16] {
    let hex: Vec<u8> = id.bytes().filter(|b| *b != b'-').collect();
    let mut out = [0u8; 16];
    if hex.len() == 32 {
        let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        let parsed: Option<Vec<u8>> = hex
            .chunks(2)
            .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
            .collect();
        if let Some(p) = parsed {
            out.copy_from_slice(&p);
            return out;
        }
    }
    // FNV-1a over the string, twice with different seeds.
    for (half, seed) in [(0, 0xcbf2_9ce4_8422_2325u64), (8, 0x8422_2325_cbf2_9ce4)] {
        let h = id
            .bytes()
            .fold(seed, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
        out[half..half + 8].copy_from_slice(&h.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_decodes_to_what_it_was_and_nothing_else_decodes() {
        let h = Handle {
            volume: [7; 16],
            root: Gfid::random(),
            gfid: Gfid::random(),
        };
        assert_eq!(Handle::decode(&h.encode()), Ok(h));
        let mut other = h.encode();
        other[0] = 3;
        assert_eq!(Handle::decode(&other), Err(BadHandle));
        assert_eq!(Handle::decode(&h.encode()[..48]), Err(BadHandle));
        assert_eq!(Handle::decode(&[2; 64]), Err(BadHandle));
        let mut null = h.encode();
        null[33..].fill(0);
        assert_eq!(Handle::decode(&null), Err(BadHandle));
        let mut no_root = h.encode();
        no_root[17..33].fill(0);
        assert_eq!(Handle::decode(&no_root), Err(BadHandle));
    }

    #[test]
    fn a_version_1_handle_is_of_the_whole_volume() {
        let gfid = Gfid::random();
        let mut v1 = vec![1u8];
        v1.extend_from_slice(&[7; 16]);
        v1.extend_from_slice(&gfid.0);
        let h = Handle::decode(&v1).unwrap();
        assert_eq!((h.volume, h.root, h.gfid), ([7; 16], Gfid::ROOT, gfid));
    }

    #[test]
    fn a_volume_id_is_its_uuid() {
        let id = volume_id("0123abcd-4567-89ef-0123-456789abcdef");
        assert_eq!(id[0], 0x01);
        assert_eq!(id[15], 0xef);
        assert_ne!(volume_id("v1"), volume_id("v2"));
    }
}
