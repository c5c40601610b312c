//! How quickly each brick of a disperse set answers reads (or, in a
//! second `Pace`, writes), so that a brick that keeps answering late is
//! read around (written around: `disperse::written_around`; GlusterFS's
//! #251: one slow brick held a dispersed volume to its pace).
//!
//! Each child's read times are averaged (an exponentially weighted mean);
//! a child is slow when its mean is many times the set's median and above
//! a floor. A read of data fragments waits for them for a few times the
//! median (`patience`), then rebuilds from the others; a child that had
//! not answered by then is charged twice the time waited, so a frozen
//! brick soon counts as slow and is no longer asked first. One read in
//! `PROBE_EVERY` asks a slow child anyway: once it answers in time again,
//! its past is forgotten.
//!
//! Writes are also weighed against the other fragments of the same write
//! (`record_write`): a brick is written around only when it keeps
//! answering several times later than the others did the same write. When
//! hundreds of writes are in flight every brick answers late, and one
//! that has more of them queued (the first data fragment holds all of a
//! small file's bytes and answers its attributes) looks slow against the
//! set's usual pace without being slow against its peers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A child is slow above this many times the median...
const SLOW_FACTOR: u64 = 8;
/// ...and above this mean, in microseconds.
const SLOW_FLOOR_US: u64 = 20_000;
/// A brick is slow to write only above this many times the median of the
/// same writes' fragments, on average. (With hundreds of writes in
/// flight, the brick of the first data fragment answered 2 to 4 times
/// later than the parity; one taking 200 ms per write, 7 to 100 times.)
const AGAINST_FACTOR: u64 = 5;
/// A read waits at least this long for the data fragments it asks.
const PATIENCE_FLOOR: Duration = Duration::from_millis(100);
/// ...or this many times the median read time.
const PATIENCE_FACTOR: u64 = 4;
/// One read in this many asks the slow children too.
const PROBE_EVERY: u64 = 32;

fn micros(t: Duration) -> u64 {
    t.as_micros().min(u64::MAX as u128) as u64
}

pub struct Pace {
    /// Per child: its mean read time in microseconds (0: no sample yet).
    mean_us: Vec<AtomicU64>,
    /// Per child: its mean time against the median of the same writes,
    /// in thousandths (0: no sample yet; `record_write`).
    against_us: Vec<AtomicU64>,
    reads: AtomicU64,
}

impl Pace {
    pub fn new(children: usize) -> Pace {
        Pace {
            mean_us: (0..children).map(|_| AtomicU64::new(0)).collect(),
            against_us: (0..children).map(|_| AtomicU64::new(0)).collect(),
            reads: AtomicU64::new(0),
        }
    }

    /// Child `i` answered a read in `took`.
    pub fn record(&self, i: usize, took: Duration) {
        let us = micros(took);
        let again = self.in_time(us) && self.is_slow(i);
        self.average(&self.mean_us[i], us, again);
    }

    /// The fragments of one write answered in these times (by child):
    /// each time is kept as a read's is, and weighed against the median of
    /// the write's (with two or more). A slow child is quick again when it
    /// answers in time by both.
    pub fn record_write(&self, took: &[(usize, Duration)]) {
        let mut v: Vec<u64> = took.iter().map(|&(_, t)| micros(t)).collect();
        v.sort_unstable();
        let median = v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0);
        for &(i, t) in took {
            let us = micros(t);
            let against = (took.len() >= 2).then(|| us * 1000 / median.max(1));
            let in_time = self.in_time(us) && against.is_none_or(|a| a <= AGAINST_FACTOR * 1000);
            let again = in_time && self.is_slow(i);
            self.average(&self.mean_us[i], us, again);
            if let Some(a) = against {
                self.average(&self.against_us[i], a, again);
            }
        }
    }

    /// Whether an answer in `us` is in time for the set's pace.
    fn in_time(&self, us: u64) -> bool {
        us <= SLOW_FLOOR_US.max(SLOW_FACTOR * self.median_us())
    }

    /// Adds `sample` to mean `m`, or starts it again from `sample`.
    fn average(&self, m: &AtomicU64, sample: u64, again: bool) {
        let old = m.load(Ordering::Relaxed);
        let new = if old == 0 || again {
            sample
        } else {
            (old * 7 + sample) / 8
        };
        m.store(new.max(1), Ordering::Relaxed);
    }

    /// Whether this read asks the slow children too (one in
    /// `PROBE_EVERY`), to learn whether they are quick again.
    pub fn probe(&self) -> bool {
        self.reads
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(PROBE_EVERY)
    }

    fn median_us(&self) -> u64 {
        let mut v: Vec<u64> = self
            .mean_us
            .iter()
            .map(|m| m.load(Ordering::Relaxed))
            .filter(|&m| m > 0)
            .collect();
        if v.is_empty() {
            return 0;
        }
        v.sort_unstable();
        v[v.len() / 2]
    }

    /// Whether child `i` keeps answering late: many times the set's
    /// median, and for writes several times the others of the same writes.
    pub fn is_slow(&self, i: usize) -> bool {
        let m = self.mean_us[i].load(Ordering::Relaxed);
        let against = self.against_us[i].load(Ordering::Relaxed);
        m > SLOW_FLOOR_US
            && m > SLOW_FACTOR * self.median_us()
            && (against == 0 || against > AGAINST_FACTOR * 1000)
    }

    /// The children slow now.
    pub fn slow(&self) -> Vec<usize> {
        (0..self.mean_us.len())
            .filter(|&i| self.is_slow(i))
            .collect()
    }

    /// How long a read waits for the fragments it asked before it
    /// rebuilds from others.
    pub fn patience(&self) -> Duration {
        PATIENCE_FLOOR.max(Duration::from_micros(PATIENCE_FACTOR * self.median_us()))
    }

    /// `among` with the slow children last (in order otherwise).
    pub fn fastest_first(&self, among: &[usize]) -> Vec<usize> {
        let mut v = among.to_vec();
        v.sort_by_key(|&i| self.is_slow(i));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_many_times_slower_than_the_others_is_slow_and_asked_last() {
        let p = Pace::new(6);
        for _ in 0..10 {
            for i in 0..6 {
                let ms = if i == 2 { 400 } else { 2 };
                p.record(i, Duration::from_millis(ms));
            }
        }
        assert_eq!(p.slow(), [2]);
        assert_eq!(p.fastest_first(&[0, 1, 2, 3]), [0, 1, 3, 2]);
        assert_eq!(p.patience(), PATIENCE_FLOOR);
        // It answers in time again: no longer slow at once.
        p.record(2, Duration::from_millis(2));
        assert!(p.slow().is_empty());
        // One read in PROBE_EVERY asks it anyway.
        let probes = (0..PROBE_EVERY * 3).filter(|_| p.probe()).count();
        assert_eq!(probes, 3);
    }

    #[test]
    fn a_brick_late_only_with_the_others_is_not_written_around() {
        // Hundreds of writes in flight: the first fragment answers 3 to 4
        // times later than the parity of the same writes (more of its
        // requests are queued), far beyond the set's usual pace.
        let p = Pace::new(6);
        for _ in 0..20 {
            p.record_write(&[(1, ms(1)), (2, ms(1)), (3, ms(1)), (4, ms(2)), (5, ms(2))]);
        }
        for _ in 0..20 {
            p.record_write(&[(0, ms(200)), (4, ms(60)), (5, ms(50))]);
        }
        assert!(p.slow().is_empty());
        // One that keeps answering many times later than the same
        // writes' others is.
        for _ in 0..20 {
            p.record_write(&[(0, ms(200)), (4, ms(2)), (5, ms(3))]);
        }
        assert_eq!(p.slow(), [0]);
        // Late together with loaded peers (in time against them, not
        // against the set's pace): still slow.
        p.record_write(&[(0, ms(400)), (4, ms(200)), (5, ms(150))]);
        assert_eq!(p.slow(), [0]);
        // In time with the others again: no longer slow at once.
        p.record_write(&[(0, ms(3)), (4, ms(2)), (5, ms(3))]);
        assert!(p.slow().is_empty());
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_set_slow_alike_has_no_slow_child_and_waits_longer() {
        let p = Pace::new(3);
        for i in 0..3 {
            p.record(i, Duration::from_millis(60));
        }
        assert!(p.slow().is_empty());
        assert_eq!(p.patience(), Duration::from_millis(240));
        // Without samples: nobody slow, the floor.
        assert!(Pace::new(3).slow().is_empty());
        assert_eq!(Pace::new(3).patience(), PATIENCE_FLOOR);
    }
}
