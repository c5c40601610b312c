//! What a client has been told to stop caching, in the order it was told:
//! the answer to a request sent before a recall of the same object reached
//! the client may carry the state before the change the recall announced,
//! so it is passed on but not cached (docs/caching.md).

use super::Gfid;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Recalls are remembered at least this long (a request in flight longer
/// than that is not cached from at all).
const KEEP: Duration = Duration::from_secs(60);
/// Above this many remembered recalls, the older ones are let go.
const PRUNE_AT: usize = 4096;

#[derive(Default)]
pub struct RecallLog {
    seq: AtomicU64,
    /// The last time every cache was lost (a connection ended).
    all: AtomicU64,
    /// Recalls let go of are all before this one.
    floor: AtomicU64,
    by_gfid: Mutex<HashMap<Gfid, (u64, Instant)>>,
}

impl RecallLog {
    /// A mark to take before sending a request.
    pub fn mark(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// A recall of `gfid` (an object, or names in a directory) arrived.
    pub fn note(&self, gfid: Gfid) {
        let now = Instant::now();
        let mut m = self.by_gfid.lock().unwrap();
        let s = self.seq.fetch_add(1, Ordering::AcqRel) + 1;
        m.insert(gfid, (s, now));
        if m.len() > PRUNE_AT {
            let mut floor = 0;
            m.retain(|_, (s, t)| {
                let keep = now.duration_since(*t) < KEEP;
                if !keep {
                    floor = floor.max(*s);
                }
                keep
            });
            self.floor.fetch_max(floor, Ordering::AcqRel);
        }
    }

    /// Every cache was lost.
    pub fn note_all(&self) {
        let s = self.seq.fetch_add(1, Ordering::AcqRel) + 1;
        self.all.fetch_max(s, Ordering::AcqRel);
    }

    /// Whether anything said since `mark` makes an answer about `gfids`
    /// unfit to cache.
    pub fn since(&self, mark: u64, gfids: &[Gfid]) -> bool {
        if self.all.load(Ordering::Acquire) > mark || self.floor.load(Ordering::Acquire) > mark {
            return true;
        }
        if self.seq.load(Ordering::Acquire) == mark {
            return false;
        }
        let m = self.by_gfid.lock().unwrap();
        gfids
            .iter()
            .any(|g| m.get(g).is_some_and(|(s, _)| *s > mark))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_to_requests_older_than_a_recall_are_not_cached() {
        let log = RecallLog::default();
        let (a, b) = (Gfid::random(), Gfid::random());
        let before = log.mark();
        assert!(!log.since(before, &[a, b]));
        log.note(a);
        assert!(log.since(before, &[a]));
        assert!(log.since(before, &[b, a]));
        assert!(!log.since(before, &[b]));
        let after = log.mark();
        assert!(!log.since(after, &[a, b]));
        log.note_all();
        assert!(log.since(after, &[b]));
        assert!(!log.since(log.mark(), &[a, b]));
    }

    #[test]
    fn recalls_let_go_of_make_older_requests_uncacheable() {
        let log = RecallLog::default();
        let old = log.mark();
        for _ in 0..PRUNE_AT + 1 {
            log.note(Gfid::random());
        }
        // Nothing is older than KEEP yet: all remembered.
        assert!(!log.since(old, &[Gfid::random()]));
        assert_eq!(log.floor.load(Ordering::Relaxed), 0);
    }
}
