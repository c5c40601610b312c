//! Which open handles have been told that a write sent behind failed.
//!
//! As Linux does for a local file (`errseq_t`): a failure is reported by
//! the next fsync of every handle that was open when it happened, once per
//! handle; a close of a handle opened for writing reports it without using
//! it up (the application's fsync still gets it), a reader's close does not
//! (as NFS's close). A handle opened after it is told only while no fsync
//! has reported it yet: a failure of writes closed behind (the writer gone,
//! every handle released) waits for the next fsync of the file, as a
//! `sync FILE` after `cp` would get it from a local file system. Until
//! session 53 the first fsync or the release of any handle used the
//! failure up, so a reader's close could hide a writer's lost append from
//! the writer's fsync; until session 68 the last release forgot it.
//!
//! A handle this translator never saw opened (a write or fsync without an
//! open, as some internal callers send) is told of every failure not yet
//! used up, and its fsync uses it up once no known handle still owes it.

use mortar_core::{FsError, Gfid};
use std::collections::HashMap;

/// Failures kept that no fsync has reported, of files no handle has open
/// (past that, the oldest are forgotten: the log still has them).
const UNSEEN_MAX: usize = 4096;

#[derive(Default)]
pub(super) struct Errors {
    /// Failures so far, all files: each failure's number.
    count: u64,
    /// Per file: its latest failure, and the error reported (the first one
    /// not yet reported to every handle).
    pending: HashMap<Gfid, Failure>,
    /// Open handles, by number.
    handles: HashMap<u64, Handle>,
}

struct Failure {
    /// The number of the latest failure.
    n: u64,
    error: FsError,
    /// An fsync has reported it: a handle opened since is not told.
    seen: bool,
}

struct Handle {
    gfid: Gfid,
    /// The number of the last failure it was told of (or that happened
    /// before it was opened and was seen).
    told: u64,
    /// Opened for writing.
    writes: bool,
}

impl Errors {
    pub(super) fn opened(&mut self, gfid: Gfid, fh: u64, writes: bool) {
        let told = match self.pending.get(&gfid) {
            Some(f) if !f.seen => f.n - 1,
            _ => self.count,
        };
        self.handles.insert(fh, Handle { gfid, told, writes });
        self.forget_told(gfid);
    }

    pub(super) fn released(&mut self, fh: u64) {
        if let Some(h) = self.handles.remove(&fh) {
            self.forget_told(h.gfid);
        }
    }

    /// A write of `gfid` sent behind failed.
    pub(super) fn failed(&mut self, gfid: Gfid, e: FsError) {
        self.count += 1;
        let n = self.count;
        let error = match self.pending.remove(&gfid) {
            Some(first) => first.error,
            None => e,
        };
        self.pending.insert(
            gfid,
            Failure {
                n,
                error,
                seen: false,
            },
        );
        self.keep_unseen_bounded();
    }

    /// The failure `fh` has not been told of, left for its fsync (a
    /// close; none for a reader's).
    pub(super) fn unseen(&self, gfid: Gfid, fh: u64) -> Option<FsError> {
        match self.handles.get(&fh) {
            Some(h) if h.gfid == gfid && !h.writes => None,
            _ => self.untold(gfid, fh),
        }
    }

    fn untold(&self, gfid: Gfid, fh: u64) -> Option<FsError> {
        let f = self.pending.get(&gfid)?;
        let told = match self.handles.get(&fh) {
            Some(h) if h.gfid == gfid => h.told,
            _ => 0,
        };
        (told < f.n).then(|| f.error.clone())
    }

    /// The failure `fh` has not been told of, once (an fsync).
    pub(super) fn take(&mut self, gfid: Gfid, fh: u64) -> Option<FsError> {
        let e = self.untold(gfid, fh)?;
        let f = self.pending.get_mut(&gfid).expect("untold is pending");
        f.seen = true;
        let n = f.n;
        if let Some(h) = self.handles.get_mut(&fh) {
            if h.gfid == gfid {
                h.told = n;
            }
        }
        self.forget_told(gfid);
        Some(e)
    }

    /// Drops the failure of `gfid` once an fsync reported it and every
    /// handle open on it was told.
    fn forget_told(&mut self, gfid: Gfid) {
        let Some(f) = self.pending.get(&gfid) else {
            return;
        };
        let n = f.n;
        let owed = self.handles.values().any(|h| h.gfid == gfid && h.told < n);
        if f.seen && !owed {
            self.pending.remove(&gfid);
        }
    }

    /// Forgets the oldest failures of files no handle has open, past
    /// `UNSEEN_MAX`.
    fn keep_unseen_bounded(&mut self) {
        if self.pending.len() <= UNSEEN_MAX {
            return;
        }
        let open = |g: &Gfid| self.handles.values().any(|h| h.gfid == *g);
        let mut closed: Vec<(u64, Gfid)> = self
            .pending
            .iter()
            .filter(|(g, _)| !open(g))
            .map(|(g, f)| (f.n, *g))
            .collect();
        if closed.len() <= UNSEEN_MAX {
            return;
        }
        closed.sort_unstable();
        let extra = closed.len() - UNSEEN_MAX;
        for (_, g) in closed.into_iter().take(extra) {
            self.pending.remove(&g);
        }
    }

    /// Files with a failure some handle has not been told of.
    pub(super) fn files(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eio() -> FsError {
        FsError::errno(libc::EIO)
    }

    #[test]
    fn every_handle_open_at_the_failure_is_told_once() {
        let (mut errs, f) = (Errors::default(), Gfid::random());
        errs.opened(f, 1, true);
        errs.opened(f, 2, false);
        errs.failed(f, eio());
        assert!(errs.unseen(f, 1).is_some(), "a writer's close is told");
        assert!(errs.unseen(f, 2).is_none(), "a reader's close is not");
        assert!(errs.take(f, 1).is_some());
        assert!(errs.take(f, 1).is_none(), "once");
        errs.opened(f, 3, true);
        assert!(errs.unseen(f, 3).is_none(), "opened after an fsync saw it");
        assert!(errs.take(f, 3).is_none());
        assert!(errs.take(f, 2).is_some(), "a reader's fsync is");
        assert_eq!(errs.files(), 0);
    }

    #[test]
    fn a_failure_no_fsync_saw_is_told_to_a_handle_opened_later() {
        let (mut errs, f) = (Errors::default(), Gfid::random());
        errs.opened(f, 1, true);
        errs.opened(f, 2, true);
        errs.failed(f, FsError::errno(libc::ENOSPC));
        // Opened before any fsync: told too.
        errs.opened(f, 3, false);
        assert!(errs.unseen(f, 1).is_some());
        errs.released(1);
        errs.released(2);
        errs.released(3);
        // Every handle gone (written and closed behind): the next
        // opener's fsync gets it, once.
        assert_eq!(errs.files(), 1);
        errs.opened(f, 4, false);
        assert!(errs.take(f, 4).unwrap().is(libc::ENOSPC));
        assert!(errs.take(f, 4).is_none());
        errs.opened(f, 5, true);
        assert!(errs.take(f, 5).is_none());
        assert_eq!(errs.files(), 0);
    }

    #[test]
    fn failures_of_files_nobody_has_open_are_kept_up_to_a_bound() {
        let mut errs = Errors::default();
        let kept = Gfid::random();
        errs.opened(kept, 1, true);
        errs.failed(kept, eio());
        let first = Gfid::random();
        errs.failed(first, eio());
        for _ in 0..UNSEEN_MAX {
            errs.failed(Gfid::random(), eio());
        }
        // The oldest closed one went; the open one stays.
        assert_eq!(errs.files(), UNSEEN_MAX + 1);
        errs.opened(first, 2, false);
        assert!(errs.take(first, 2).is_none());
        assert!(errs.take(kept, 1).is_some());
    }

    #[test]
    fn a_release_of_another_handle_leaves_it_for_the_writer() {
        let (mut errs, f) = (Errors::default(), Gfid::random());
        errs.opened(f, 1, true);
        errs.opened(f, 2, true);
        errs.failed(f, eio());
        errs.released(2);
        assert!(errs.take(f, 1).is_some());
        assert_eq!(errs.files(), 0);
        errs.released(1);
        // Seen by 1's fsync: the last release forgets it.
        assert_eq!(errs.files(), 0);
    }

    #[test]
    fn a_later_failure_is_told_again_with_the_first_error() {
        let (mut errs, f) = (Errors::default(), Gfid::random());
        errs.opened(f, 1, true);
        errs.opened(f, 2, true);
        errs.failed(f, FsError::errno(libc::ENOSPC));
        assert!(errs.take(f, 1).unwrap().is(libc::ENOSPC));
        errs.failed(f, eio());
        assert!(
            errs.take(f, 1).unwrap().is(libc::ENOSPC),
            "not yet told to 2"
        );
        assert!(errs.take(f, 2).unwrap().is(libc::ENOSPC));
        errs.failed(f, eio());
        assert!(errs.take(f, 2).unwrap().is(libc::EIO));
    }
}
