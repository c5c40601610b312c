use super::*;
use proptest::prelude::*;

/// A dispersed file held in memory: K + R fragments, each as long as the
/// file (its content, then zeros), as the bricks hold them.
struct Set {
    g: Geometry,
    codec: Codec,
    frags: Vec<Vec<u8>>,
    size: u64,
}

impl Set {
    fn new(k: usize, r: usize, unit: u64) -> Set {
        Set {
            g: Geometry::new(k, unit),
            codec: Codec::new(k, r).unwrap(),
            frags: vec![Vec::new(); k + r],
            size: 0,
        }
    }

    fn r(&self) -> usize {
        self.codec.r()
    }

    fn read(&self, f: usize, r: &Range<u64>) -> Vec<u8> {
        let frag = &self.frags[f];
        let lo = (r.start as usize).min(frag.len());
        let hi = (r.end as usize).min(frag.len());
        frag[lo..hi].to_vec()
    }

    fn old(&self, needs: &[Need]) -> Vec<Option<Vec<u8>>> {
        needs
            .iter()
            .map(|n| Some(self.read(n.fragment, &n.range)))
            .collect()
    }

    fn put(&mut self, f: usize, w: &FragmentWrite) {
        let frag = &mut self.frags[f];
        let end = w.offset as usize + w.bytes.len();
        if frag.len() < end {
            frag.resize(end, 0);
        }
        frag[w.offset as usize..end].copy_from_slice(&w.bytes);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let w = Write::new(self.g, self.r(), offset, data.len() as u64, self.size);
        let old = self.old(w.needs());
        let writes = w.writes(&self.codec, data, &old).unwrap();
        for (f, x) in writes.iter().enumerate() {
            if let Some(x) = x {
                self.put(f, x);
            }
        }
        self.size = w.new_size();
        for f in &mut self.frags {
            f.resize(self.size as usize, 0);
        }
    }

    fn truncate(&mut self, size: u64) {
        let t = Truncate::new(self.g, self.r(), self.size, size);
        let old = self.old(t.needs());
        let k = self.g.k();
        for (j, x) in t
            .parity_writes(&self.codec, &old)
            .unwrap()
            .iter()
            .enumerate()
        {
            if let Some(x) = x {
                self.put(k + j, x);
            }
        }
        for (f, frag) in self.frags.iter_mut().enumerate() {
            if let Some(c) = t.cut(f) {
                frag.truncate(c as usize);
            }
            frag.resize(size as usize, 0);
        }
        self.size = size;
    }

    /// The fragments are what coding `want` anew gives.
    fn check(&self, want: &[u8]) -> Result<(), TestCaseError> {
        let (g, k) = (self.g, self.g.k());
        prop_assert_eq!(self.size, want.len() as u64);
        for f in &self.frags {
            prop_assert_eq!(
                f.len() as u64,
                self.size,
                "every fragment is as long as the file"
            );
        }
        let ranges = g.fragment_ranges(0, self.size);
        let parts: Vec<&[u8]> = (0..k)
            .map(|i| &self.frags[i][ranges[i].start as usize..ranges[i].end as usize])
            .collect();
        prop_assert_eq!(g.gather(0, self.size, &parts), want.to_vec());
        let plen = g.parity_len(self.size) as usize;
        for (f, frag) in self.frags.iter().enumerate() {
            let content = if f < k {
                g.content_len(self.size, f) as usize
            } else {
                plen
            };
            prop_assert!(
                frag[content..].iter().all(|&b| b == 0),
                "fragment {} is zeros after its content",
                f
            );
        }
        let data: Vec<&[u8]> = (0..k).map(|i| &self.frags[i][..plen]).collect();
        let mut parity = vec![vec![0u8; plen]; self.r()];
        self.codec.encode(&data, &mut parity).unwrap();
        for (j, p) in parity.iter().enumerate() {
            prop_assert_eq!(
                &self.frags[k + j][..plen],
                &p[..],
                "parity {} coded anew",
                j
            );
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum Op {
    Write(u64, Vec<u8>),
    Truncate(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..700, prop::collection::vec(any::<u8>(), 0..400)).prop_map(|(o, d)| Op::Write(o, d)),
        1 => (0u64..800).prop_map(Op::Truncate),
    ]
}

proptest! {
    /// Any series of writes (holes, overwrites, appends) and truncations
    /// leaves fragments equal to the file's bytes coded anew.
    #[test]
    fn changes_keep_the_fragments_coded(k in 1usize..6, r in 1usize..4, unit in 1u64..48, ops in prop::collection::vec(op(), 1..12)) {
        let mut set = Set::new(k, r, unit);
        let mut want: Vec<u8> = Vec::new();
        for op in ops {
            match op {
                Op::Write(o, d) => {
                    set.write(o, &d);
                    if !d.is_empty() {
                        let end = o as usize + d.len();
                        if want.len() < end {
                            want.resize(end, 0);
                        }
                        want[o as usize..end].copy_from_slice(&d);
                    }
                }
                Op::Truncate(s) => {
                    set.truncate(s);
                    want.resize(s as usize, 0);
                }
            }
            set.check(&want)?;
        }
    }

    /// A change reads nothing past the old end of the file, nor of a
    /// stripe it gives whole.
    #[test]
    fn a_change_reads_only_old_bytes_it_overwrites(k in 1usize..6, unit in 1u64..48, size in 0u64..900, offset in 0u64..900, len in 0u64..500) {
        let g = Geometry::new(k, unit);
        let w = Write::new(g, 2, offset, len, size);
        for n in w.needs() {
            let content = if n.fragment < k { g.content_len(size, n.fragment) } else { g.parity_len(size) };
            prop_assert!(n.range.end <= content && n.range.start < n.range.end);
            let stripe = n.range.start / unit;
            let s = stripe * g.stripe_bytes()..(stripe + 1) * g.stripe_bytes();
            prop_assert!(!(offset <= s.start && s.end <= offset + len), "a whole stripe is not read");
        }
    }
}

#[test]
fn whole_stripes_and_writes_past_the_end_read_nothing() {
    let g = Geometry::new(4, 16);
    // Stripes 1 and 2 whole, in a file of 1000 bytes.
    assert!(Write::new(g, 2, 64, 128, 1_000).needs().is_empty());
    // Appending to an empty file.
    assert!(Write::new(g, 2, 0, 10, 0).needs().is_empty());
    // Appending to a file of 10 bytes: only the parity of its 10 bytes,
    // which the new bytes' parity is added to.
    let w = Write::new(g, 2, 10, 10, 10);
    assert_eq!(
        w.needs(),
        [
            Need {
                fragment: 4,
                range: 0..10
            },
            Need {
                fragment: 5,
                range: 0..10
            }
        ]
    );
}

#[test]
fn a_write_over_every_old_byte_of_its_stripes_reads_nothing() {
    let (k, r, unit) = (4, 2, 16_384u64);
    let g = Geometry::new(k, unit);
    // A 4 KiB file written over whole, or past its end: its old bytes go.
    assert!(Write::new(g, r, 0, 4_096, 4_096).needs().is_empty());
    assert!(Write::new(g, r, 0, 6_000, 4_096).needs().is_empty());
    // From the start of stripe 1 to the old end of the file.
    let sb = g.stripe_bytes();
    assert!(Write::new(g, r, sb, 5_000, sb + 5_000).needs().is_empty());
    // Old bytes left after the write, or before it, are read as before.
    assert!(!Write::new(g, r, 0, 3_000, 4_096).needs().is_empty());
    assert!(!Write::new(g, r, 10, 4_086, 4_096).needs().is_empty());
    // And the parity is the file's coded anew.
    let mut set = Set::new(k, r, unit);
    set.write(0, &[3u8; 4_096]);
    set.write(0, &[9u8; 4_096]);
    set.check(&[9u8; 4_096]).unwrap();
    set.write(0, &[5u8; 4_000]);
    let mut want = vec![5u8; 4_000];
    want.extend([9u8; 96]);
    set.check(&want).unwrap();
}

#[test]
fn a_small_overwrite_reads_its_own_range_and_the_parity_of_it() {
    let g = Geometry::new(4, 4_096);
    // 100 bytes in unit 2 of stripe 3 of a 1 MiB file.
    let at = 3 * g.stripe_bytes() + 2 * 4_096 + 500;
    let w = Write::new(g, 2, at, 100, 1 << 20);
    let r = 3 * 4_096 + 500..3 * 4_096 + 600;
    assert_eq!(
        w.needs(),
        [
            Need {
                fragment: 2,
                range: r.clone()
            },
            Need {
                fragment: 4,
                range: r.clone()
            },
            Need {
                fragment: 5,
                range: r
            }
        ]
    );
}

#[test]
fn a_small_file_is_written_to_one_data_fragment_and_the_parity() {
    let g = Geometry::new(4, 4_096);
    let codec = Codec::new(4, 2).unwrap();
    let w = Write::new(g, 2, 0, 100, 0);
    let out = w
        .writes(&codec, &[7u8; 100], &Vec::<Option<Vec<u8>>>::new())
        .unwrap();
    let written: Vec<bool> = out.iter().map(Option::is_some).collect();
    assert_eq!(written, [true, false, false, false, true, true]);
    assert!(out
        .iter()
        .flatten()
        .all(|x| x.offset == 0 && x.bytes.len() == 100));
}

#[test]
fn missing_old_bytes_leave_out_a_parity_and_stop_for_data() {
    let g = Geometry::new(2, 8);
    let codec = Codec::new(2, 2).unwrap();
    let w = Write::new(g, 2, 3, 4, 16);
    assert_eq!(w.needs().len(), 3);
    let mut old: Vec<Option<Vec<u8>>> = vec![Some(vec![1; 4]), Some(vec![2; 4]), None];
    let out = w.writes(&codec, &[9; 4], &old).unwrap();
    assert!(out[2].is_some() && out[3].is_none());
    old[0] = None;
    assert_eq!(
        w.writes(&codec, &[9; 4], &old).unwrap_err(),
        ChangeError::Missing(0)
    );
}

#[test]
fn a_truncation_cuts_each_fragment_at_its_new_content() {
    let g = Geometry::new(4, 10);
    let t = Truncate::new(g, 2, 100, 25);
    let cuts: Vec<Option<u64>> = (0..6).map(|f| t.cut(f)).collect();
    assert_eq!(
        cuts,
        [Some(10), Some(10), Some(5), Some(0), Some(10), Some(10)]
    );
    // Growing cuts nothing and reads nothing.
    let t = Truncate::new(g, 2, 25, 100);
    assert!(t.needs().is_empty() && t.cut(0).is_none());
    // To a stripe boundary: whole stripes go, no parity to update.
    assert!(Truncate::new(g, 2, 100, 40).needs().is_empty());
}

#[test]
fn a_lost_data_fragment_is_rebuilt_from_the_stripes_for_its_delta() {
    // 4 + 2 with 8-byte units; fragment 1 is away when bytes 10..14 (its
    // unit in stripe 0) are overwritten.
    let mut set = Set::new(4, 2, 8);
    let file: Vec<u8> = (0..100u8).collect();
    set.write(0, &file);
    let w = Write::new(set.g, 2, 10, 4, 100);
    let lost = 1;
    // What each survivor gives: the touched stripes' range, the lost
    // fragment rebuilt from them.
    let range = set.g.stripe_range(10, 4);
    let mut frags: Vec<Vec<u8>> = (0..6).map(|f| set.read(f, &range)).collect();
    let present: Vec<bool> = (0..6).map(|f| f != lost).collect();
    frags[lost].fill(0);
    set.codec.rebuild(&mut frags, &present).unwrap();
    let old: Vec<Option<Vec<u8>>> = w
        .needs()
        .iter()
        .map(|n| {
            let at = (n.range.start - range.start) as usize;
            Some(frags[n.fragment][at..at + (n.range.end - n.range.start) as usize].to_vec())
        })
        .collect();
    let out = w.writes(&set.codec, &[0xAA; 4], &old).unwrap();
    for (f, x) in out.iter().enumerate() {
        if let (Some(x), true) = (x, f != lost) {
            set.put(f, x);
        }
    }
    // The lost fragment missed the write: rebuilt from the others, the
    // file reads as written.
    let mut want = file.clone();
    want[10..14].fill(0xAA);
    let all = 0..set.g.parity_len(100);
    let mut frags: Vec<Vec<u8>> = (0..6).map(|f| set.read(f, &all)).collect();
    frags[lost].fill(0);
    set.codec.rebuild(&mut frags, &present).unwrap();
    set.frags[lost][..frags[lost].len()].copy_from_slice(&frags[lost]);
    set.check(&want).unwrap();
}
