//! The Reed-Solomon code of a `K + R` dispersed set: systematic (the K
//! data fragments are the data itself), over GF(2^8) with a Cauchy matrix
//! (every choice of K fragments of K + R can be inverted, which a
//! Vandermonde matrix does not promise for every K and R), computed by
//! ISA-L with the SIMD this CPU has.
//!
//! The code works byte by byte: byte `j` of each parity fragment depends
//! only on byte `j` of the data fragments. So many stripes are coded in one
//! call by handing each fragment's bytes of all of them at once, and a
//! range of a stripe unit is coded alone.

use erasure_isa_l::erasure::ErasureCode;
use std::num::NonZeroUsize;

/// The largest K + R the code takes: GF(2^8) has 255 non-zero elements,
/// and a volume needs far fewer (GlusterFS allows K ≤ 16).
pub const MAX_FRAGMENTS: usize = 255;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("a dispersed set needs at least one data and one redundancy fragment, and at most {MAX_FRAGMENTS} in all (asked {k} + {r})")]
    Shape { k: usize, r: usize },
    #[error("fragments of unequal lengths, or not K + R of them")]
    Buffers,
    #[error("{lost} fragments lost, at most {r} can be rebuilt")]
    TooManyLost { lost: usize, r: usize },
    #[error("erasure code: {0}")]
    Isal(String),
}

fn isal(e: erasure_isa_l::Error) -> CodecError {
    CodecError::Isal(e.to_string())
}

/// The code of one `k + r` shape; cheap to share (`&self` everywhere).
pub struct Codec {
    k: usize,
    r: usize,
    ec: ErasureCode,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Codec({} + {})", self.k, self.r)
    }
}

impl Codec {
    pub fn new(k: usize, r: usize) -> Result<Codec, CodecError> {
        let (Some(nk), Some(nr)) = (NonZeroUsize::new(k), NonZeroUsize::new(r)) else {
            return Err(CodecError::Shape { k, r });
        };
        if k + r > MAX_FRAGMENTS {
            return Err(CodecError::Shape { k, r });
        }
        let ec = ErasureCode::with_cauchy(nk, nr).map_err(isal)?;
        Ok(Codec { k, r, ec })
    }

    /// Data fragments per stripe.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Parity fragments per stripe: how many may be lost.
    pub fn r(&self) -> usize {
        self.r
    }

    /// Fills `parity` (R buffers) from `data` (K buffers), all of one
    /// length.
    pub fn encode<D: AsRef<[u8]>, P: AsMut<[u8]>>(
        &self,
        data: &[D],
        parity: &mut [P],
    ) -> Result<(), CodecError> {
        if data.len() != self.k || parity.len() != self.r || !same_len(data, parity) {
            return Err(CodecError::Buffers);
        }
        if data[0].as_ref().is_empty() {
            return Ok(());
        }
        self.ec.encode(data, parity).map_err(isal)
    }

    /// Rebuilds the fragments not `present` from the others, in place:
    /// `fragments` holds K + R buffers of one length, data first; the
    /// contents of those missing are ignored and overwritten.
    pub fn rebuild<F: AsMut<[u8]>>(
        &self,
        fragments: &mut [F],
        present: &[bool],
    ) -> Result<(), CodecError> {
        let n = self.k + self.r;
        if fragments.len() != n || present.len() != n {
            return Err(CodecError::Buffers);
        }
        let lost: Vec<usize> = (0..n).filter(|&i| !present[i]).collect();
        if lost.len() > self.r {
            return Err(CodecError::TooManyLost {
                lost: lost.len(),
                r: self.r,
            });
        }
        let len = fragments[0].as_mut().len();
        if fragments.iter_mut().any(|f| f.as_mut().len() != len) {
            return Err(CodecError::Buffers);
        }
        if lost.is_empty() || len == 0 {
            return Ok(());
        }
        let (data, parity) = fragments.split_at_mut(self.k);
        self.ec.decode(data, parity, lost).map_err(isal)
    }

    /// Brings `parity` (R buffers, the parity of a range of one stripe)
    /// up to date after data fragment `index` changed in that range:
    /// `delta` is the old bytes XOR the new. Only the changed range is
    /// read and written, never the other data fragments (parity delta).
    pub fn update<P: AsMut<[u8]>>(
        &self,
        index: usize,
        delta: &[u8],
        parity: &mut [P],
    ) -> Result<(), CodecError> {
        if index >= self.k
            || parity.len() != self.r
            || parity.iter_mut().any(|p| p.as_mut().len() != delta.len())
        {
            return Err(CodecError::Buffers);
        }
        if delta.is_empty() {
            return Ok(());
        }
        self.ec.update(index, delta, parity).map_err(isal)
    }
}

fn same_len<D: AsRef<[u8]>, P: AsMut<[u8]>>(data: &[D], parity: &mut [P]) -> bool {
    let len = data[0].as_ref().len();
    data.iter().all(|d| d.as_ref().len() == len)
        && parity.iter_mut().all(|p| p.as_mut().len() == len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn data(k: usize, len: usize, seed: u8) -> Vec<Vec<u8>> {
        (0..k)
            .map(|i| {
                (0..len)
                    .map(|j| (j as u8).wrapping_mul(31).wrapping_add(i as u8 * 7) ^ seed)
                    .collect()
            })
            .collect()
    }

    fn encoded(c: &Codec, d: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let mut p = vec![vec![0u8; d[0].len()]; c.r()];
        c.encode(d, &mut p).unwrap();
        d.iter().cloned().chain(p).collect()
    }

    #[test]
    fn shapes_outside_the_code_are_refused() {
        assert_eq!(
            Codec::new(0, 2).unwrap_err(),
            CodecError::Shape { k: 0, r: 2 }
        );
        assert_eq!(
            Codec::new(4, 0).unwrap_err(),
            CodecError::Shape { k: 4, r: 0 }
        );
        assert!(Codec::new(200, 56).is_err());
        assert!(Codec::new(16, 8).is_ok());
    }

    #[test]
    fn buffers_of_the_wrong_number_or_length_are_refused() {
        let c = Codec::new(4, 2).unwrap();
        let d = data(4, 64, 0);
        let mut p = vec![vec![0u8; 64]; 1];
        assert_eq!(c.encode(&d, &mut p), Err(CodecError::Buffers));
        let mut p = vec![vec![0u8; 64], vec![0u8; 63]];
        assert_eq!(c.encode(&d, &mut p), Err(CodecError::Buffers));
        let mut f = encoded(&c, &d);
        assert_eq!(c.rebuild(&mut f, &[true; 5]), Err(CodecError::Buffers));
        assert_eq!(
            c.update(4, &[0; 64], &mut [vec![0; 64], vec![0; 64]]),
            Err(CodecError::Buffers)
        );
    }

    #[test]
    fn more_lost_than_the_redundancy_is_an_error_and_changes_nothing() {
        let c = Codec::new(4, 2).unwrap();
        let mut f = encoded(&c, &data(4, 128, 1));
        let before = f.clone();
        let present = [false, true, false, true, true, false];
        assert_eq!(
            c.rebuild(&mut f, &present),
            Err(CodecError::TooManyLost { lost: 3, r: 2 })
        );
        assert_eq!(f, before);
    }

    #[test]
    fn parity_is_not_the_data_and_a_zero_stripe_has_zero_parity() {
        let c = Codec::new(4, 2).unwrap();
        let f = encoded(&c, &data(4, 256, 3));
        assert_ne!(f[4], f[0]);
        assert_ne!(f[4], f[5]);
        let z = encoded(&c, &vec![vec![0u8; 256]; 4]);
        assert!(z[4..].iter().all(|p| p.iter().all(|&b| b == 0)));
    }

    #[test]
    fn stripes_coded_together_equal_stripes_coded_one_by_one() {
        // What lets the translator code a whole write in one call.
        let c = Codec::new(4, 2).unwrap();
        let (a, b) = (data(4, 512, 5), data(4, 512, 9));
        let both: Vec<Vec<u8>> = a
            .iter()
            .zip(&b)
            .map(|(x, y)| [x.clone(), y.clone()].concat())
            .collect();
        let (fa, fb, fboth) = (encoded(&c, &a), encoded(&c, &b), encoded(&c, &both));
        for p in 4..6 {
            assert_eq!(fboth[p], [fa[p].clone(), fb[p].clone()].concat());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any R fragments lost (data or parity) come back byte for byte.
        #[test]
        fn any_r_lost_fragments_are_rebuilt(
            (k, r) in (1usize..=12).prop_flat_map(|k| (Just(k), 1usize..=4)),
            len in 1usize..600,
            seed in any::<u8>(),
            pick in any::<u64>(),
        ) {
            let c = Codec::new(k, r).unwrap();
            let whole = encoded(&c, &data(k, len, seed));
            let n = k + r;
            let mut present = vec![true; n];
            let mut lost = 0;
            let mut x = pick;
            while lost < r {
                let i = (x % n as u64) as usize;
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                if present[i] {
                    present[i] = false;
                    lost += 1;
                }
            }
            let mut f = whole.clone();
            for (i, frag) in f.iter_mut().enumerate() {
                if !present[i] {
                    frag.fill(0xee);
                }
            }
            c.rebuild(&mut f, &present).unwrap();
            prop_assert_eq!(f, whole);
        }

        /// Parity brought up to date from a delta equals parity coded anew.
        #[test]
        fn parity_from_a_delta_equals_parity_coded_anew(
            (k, r) in (1usize..=10).prop_flat_map(|k| (Just(k), 1usize..=4)),
            len in 8usize..400,
            index_pick in any::<usize>(),
            range_pick in any::<(usize, usize)>(),
            seed in any::<u8>(),
        ) {
            let c = Codec::new(k, r).unwrap();
            let old = data(k, len, seed);
            let f = encoded(&c, &old);
            let index = index_pick % k;
            let start = range_pick.0 % len;
            let end = start + 1 + range_pick.1 % (len - start);
            let mut new = old.clone();
            for b in &mut new[index][start..end] {
                *b = b.wrapping_add(0x5b);
            }
            let delta: Vec<u8> = old[index][start..end]
                .iter()
                .zip(&new[index][start..end])
                .map(|(a, b)| a ^ b)
                .collect();
            let mut parity: Vec<Vec<u8>> = f[k..].iter().map(|p| p[start..end].to_vec()).collect();
            c.update(index, &delta, &mut parity).unwrap();
            let anew = encoded(&c, &new);
            for (j, p) in parity.iter().enumerate() {
                prop_assert_eq!(&p[..], &anew[k + j][start..end]);
            }
        }
    }
}
