//! What this mount knows of the bricks' claims on the files it writes
//! (`brick::leases`): a file opened or made for writing is claimed for
//! this mount from when the bricks answer that open, until another client
//! names the file (the bricks recall it first) or the lease time passes.
//! While a file is claimed, its close need not wait for its writes.

use mortar_core::Gfid;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Files kept at most (past that, the lapsed go, or all).
const FILES_MAX: usize = 100_000;

/// When a close of a handle may return before its file's writes land.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Close {
    /// Now: the file is claimed.
    Behind,
    /// Once the open (sent with `mark` recalls seen, at `sent`) has
    /// reached the bricks: the claim begins there.
    AfterOpen { mark: u64, sent: Instant },
    /// Only once its writes have landed.
    Waiting,
}

#[derive(Default)]
pub(super) struct Claims {
    /// Files claimed for this mount, until when (less a margin, so that
    /// writes closed behind land well before the bricks' claim lapses).
    files: HashMap<Gfid, Instant>,
    /// Handles opened for writing, whose open may not have reached the
    /// bricks yet: their file, the recalls seen and the time when it was
    /// sent.
    opening: HashMap<u64, (Gfid, u64, Instant)>,
    /// Recalls seen (and connections lost): an open sent before one may
    /// not trust the claim it brings.
    recalls: u64,
    /// How long a claim lasts here (0: flush-behind is off).
    length: Duration,
}

impl Claims {
    /// Claims last `length` here (zero: none are taken).
    pub fn set_length(&mut self, length: Duration) {
        self.length = length;
        if length.is_zero() {
            self.files.clear();
            self.opening.clear();
        }
    }

    /// A mark to take before sending an open for writing.
    pub fn mark(&self) -> u64 {
        self.recalls
    }

    /// Handle `fh` of `gfid` was opened (or made) for writing by a request
    /// sent at `sent`, with `mark`.
    pub fn opened(&mut self, gfid: Gfid, fh: u64, mark: u64, sent: Instant) {
        if !self.length.is_zero() {
            self.opening.insert(fh, (gfid, mark, sent));
        }
    }

    /// How a close of handle `fh` of `gfid` may go.
    ///
    /// A close while the file is claimed goes behind even if the handle's
    /// own open is still on its way. The bricks may hold that open until
    /// another writer answers the recall of a claim; if that writer's
    /// answer waits in turn for writes behind an open held the same way
    /// (two handles of one file on each of two mounts), the answers go
    /// after `recall_wait` (the write-behind translator's), logged. Waiting
    /// for the open here instead made every close of a file opened again
    /// a round trip (appends 2,900/s became 720/s).
    pub fn close(&self, gfid: Gfid, fh: u64) -> Close {
        if self.length.is_zero() {
            return Close::Waiting;
        }
        if self.claimed(gfid) {
            return Close::Behind;
        }
        match self.opening.get(&fh) {
            Some(&(g, mark, sent)) if g == gfid && mark == self.recalls => {
                Close::AfterOpen { mark, sent }
            }
            _ => Close::Waiting,
        }
    }

    fn claimed(&self, gfid: Gfid) -> bool {
        self.files.get(&gfid).is_some_and(|t| *t > Instant::now())
    }

    /// The bricks have the open of handle `fh`, sent at `sent` with
    /// `mark`: unless a recall came since, `gfid` is claimed from then.
    /// Whether it is claimed (by this open or still by an earlier one).
    pub fn confirm(&mut self, gfid: Gfid, fh: u64, mark: u64, sent: Instant) -> bool {
        self.opening.remove(&fh);
        if self.length.is_zero() {
            return false;
        }
        if mark != self.recalls {
            return self.claimed(gfid);
        }
        if self.files.len() >= FILES_MAX {
            let now = Instant::now();
            self.files.retain(|_, t| *t > now);
            if self.files.len() >= FILES_MAX {
                self.files.clear();
            }
        }
        let until = sent + self.length;
        let t = self.files.entry(gfid).or_insert(until);
        *t = (*t).max(until);
        true
    }

    /// Handle `fh` is released.
    pub fn released(&mut self, fh: u64) {
        self.opening.remove(&fh);
    }

    /// A brick recalled `gfid` (None: a connection was lost, every claim
    /// with it): it is no longer claimed here.
    pub fn recalled(&mut self, gfid: Option<Gfid>) {
        self.recalls += 1;
        match gfid {
            Some(g) => {
                self.files.remove(&g);
                self.opening.retain(|_, (f, _, _)| *f != g);
            }
            None => {
                self.files.clear();
                self.opening.clear();
            }
        }
    }

    /// Files known claimed, handles whose claim is not known yet.
    pub fn counts(&self) -> (usize, usize) {
        (self.files.len(), self.opening.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        let mut c = Claims::default();
        c.set_length(Duration::from_secs(60));
        c
    }

    #[test]
    fn a_file_is_claimed_once_an_open_reached_the_bricks_until_a_recall() {
        let mut c = claims();
        let (f, now) = (Gfid::random(), Instant::now());
        assert_eq!(c.close(f, 1), Close::Waiting);
        c.opened(f, 1, c.mark(), now);
        let Close::AfterOpen { mark, sent } = c.close(f, 1) else {
            panic!("not after the open")
        };
        assert!(c.confirm(f, 1, mark, sent));
        // Any handle of it now, even one opened later.
        assert_eq!(c.close(f, 1), Close::Behind);
        c.opened(f, 3, c.mark(), Instant::now());
        assert_eq!(c.close(f, 3), Close::Behind);
        c.recalled(Some(f));
        assert_eq!(c.close(f, 2), Close::Waiting);
        assert_eq!(c.close(f, 1), Close::Waiting);
        assert_eq!(c.close(f, 3), Close::Waiting);
    }

    #[test]
    fn a_recall_while_an_open_was_on_its_way_leaves_the_file_unclaimed() {
        let mut c = claims();
        let (f, g) = (Gfid::random(), Gfid::random());
        c.opened(f, 1, c.mark(), Instant::now());
        let Close::AfterOpen { mark, sent } = c.close(f, 1) else {
            panic!("not after the open")
        };
        // (Of another file: the recall may have overtaken this open's
        // answer all the same.)
        c.recalled(Some(g));
        assert!(!c.confirm(f, 1, mark, sent));
        assert_eq!(c.close(f, 1), Close::Waiting);
        // Already claimed by an earlier open: still claimed.
        c.opened(g, 2, c.mark(), Instant::now());
        let Close::AfterOpen { mark, sent } = c.close(g, 2) else {
            panic!("not after the open")
        };
        assert!(c.confirm(g, 2, mark, sent));
        // An open sent before a recall of another file, of a file still
        // claimed by an earlier one: claimed all the same.
        let mark3 = c.mark();
        c.recalled(Some(f));
        assert!(c.confirm(g, 3, mark3, Instant::now()));
    }

    #[test]
    fn a_claim_lapses_and_nothing_is_claimed_with_flush_behind_off() {
        let mut c = claims();
        let f = Gfid::random();
        let long_ago = Instant::now() - Duration::from_secs(120);
        assert!(c.confirm(f, 1, c.mark(), long_ago));
        assert_eq!(c.close(f, 1), Close::Waiting);
        c.set_length(Duration::ZERO);
        c.opened(f, 1, c.mark(), Instant::now());
        assert_eq!(c.close(f, 1), Close::Waiting);
        assert!(!c.confirm(f, 1, c.mark(), Instant::now()));
    }
}
