//! NFS file handles: the volume and the object, nothing that lives only
//! in one server's memory, so that a handle stays good across a restart
//! of the NFS server and on every server of the pool (a client that fails
//! over to another server's address goes on with the handles it has).
//!
//! Layout (33 bytes, RFC 1813 allows 64): a version byte, the volume's
//! id (16 bytes), the object's gfid (16 bytes).

use mortar_core::Gfid;

const VERSION: u8 = 1;
pub const LEN: usize = 33;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle {
    pub volume: [u8; 16],
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
        b[17..].copy_from_slice(&self.gfid.0);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Handle, BadHandle> {
        if b.len() != LEN || b[0] != VERSION {
            return Err(BadHandle);
        }
        Ok(Handle {
            volume: b[1..17].try_into().unwrap(),
            gfid: Gfid::from_slice(&b[17..]).ok_or(BadHandle)?,
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
            gfid: Gfid::random(),
        };
        assert_eq!(Handle::decode(&h.encode()), Ok(h));
        let mut other = h.encode();
        other[0] = 2;
        assert_eq!(Handle::decode(&other), Err(BadHandle));
        assert_eq!(Handle::decode(&h.encode()[..32]), Err(BadHandle));
        assert_eq!(Handle::decode(&[1; 64]), Err(BadHandle));
        let mut null = h.encode();
        null[17..].fill(0);
        assert_eq!(Handle::decode(&null), Err(BadHandle));
    }

    #[test]
    fn a_volume_id_is_its_uuid() {
        let id = volume_id("0123abcd-4567-89ef-0123-456789abcdef");
        assert_eq!(id[0], 0x01);
        assert_eq!(id[15], 0xef);
        assert_ne!(volume_id("v1"), volume_id("v2"));
    }
}
