//! The codec's speed on this machine, for the shapes and stripe units
//! docs/disperse.md compares:
//!
//!     cargo run --release -p mortar-ec --example codec-speed
//!
//! Each line runs one operation for half a second on one core: encoding a
//! stripe, rebuilding R lost data fragments of it, and bringing the parity
//! up to date after a 4 KiB change of one data fragment (parity delta).
use mortar_ec::Codec;
use std::time::Instant;

fn run(what: &str, k: usize, r: usize, unit: usize, bytes: usize, f: &mut dyn FnMut()) {
    let t = Instant::now();
    let mut n = 0u64;
    while t.elapsed().as_secs_f64() < 0.5 {
        f();
        n += 1;
    }
    let s = t.elapsed().as_secs_f64();
    let mbps = bytes as f64 * n as f64 / s / 1e6;
    println!(
        "| {k} + {r} | {:>3} KiB | {what:<22} | {:>6.0} MB/s | {:>7.2} µs |",
        unit / 1024,
        mbps,
        s / n as f64 * 1e6
    );
}

fn main() {
    println!("| shape | unit | operation | data coded per second | per call |");
    println!("|---|---|---|---|---|");
    for (k, r) in [(4usize, 2usize), (8, 3)] {
        let c = Codec::new(k, r).unwrap();
        for unit in [4096usize, 16_384, 65_536] {
            let data: Vec<Vec<u8>> = (0..k)
                .map(|i| (0..unit).map(|j| (i * 31 + j * 7) as u8).collect())
                .collect();
            let mut parity = vec![vec![0u8; unit]; r];
            run("encode", k, r, unit, k * unit, &mut || {
                c.encode(&data, &mut parity).unwrap()
            });
            let whole: Vec<Vec<u8>> = data.iter().cloned().chain(parity.clone()).collect();
            let mut f = whole.clone();
            let present: Vec<bool> = (0..k + r).map(|i| i >= r).collect();
            run("rebuild R data lost", k, r, unit, k * unit, &mut || {
                c.rebuild(&mut f, &present).unwrap()
            });
            assert_eq!(f, whole);
            let delta = vec![0x5au8; 4096];
            run("parity delta, 4 KiB", k, r, unit, 4096, &mut || {
                let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..4096]).collect();
                c.update(1, &delta, &mut p).unwrap()
            });
        }
    }
}
