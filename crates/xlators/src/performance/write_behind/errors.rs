//! Which open handles have been told that a write sent behind failed.
//!
//! As Linux does for a local file (`errseq_t`): a failure is reported by
//! the next fsync of every handle that was open when it happened, once per
//! handle; a close of a handle opened for writing reports it without using
//! it up (the application's fsync still gets it), a reader's close does not
//! (as NFS's close); a handle opened after it is not told. Until session 53
//! the first fsync or the release of any handle used the failure up, so a
//! reader's close could hide a writer's lost append from the writer's
//! fsync.
//!
//! A handle this translator never saw opened (a write or fsync without an
//! open, as some internal callers send) is told of every failure not yet
//! used up, and its fsync uses it up once no known handle still owes it.

use mortar_core::{FsError, Gfid};
use std::collections::HashMap;

#[derive(Default)]
pub(super) struct Errors {
    /// Failures so far, all files: each failure's number.
    count: u64,
    /// Per file: the number of its latest failure, and the error reported
    /// (the first one not yet reported to every handle).
    pending: HashMap<Gfid, (u64, FsError)>,
    /// Open handles, by number.
    handles: HashMap<u64, Handle>,
}

struct Handle {
    gfid: Gfid,
    /// The number of the last failure it was told of (or that happened
    /// before it was opened).
    told: u64,
    /// Opened for writing.
    writes: bool,
}

impl Errors {
    pub(super) fn opened(&mut self, gfid: Gfid, fh: u64, writes: bool) {
        let told = self.count;
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
        let e = match self.pending.remove(&gfid) {
            Some((_, first)) => first,
            None => e,
        };
        self.pending.insert(gfid, (n, e));
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
        let (n, e) = self.pending.get(&gfid)?;
        let told = match self.handles.get(&fh) {
            Some(h) if h.gfid == gfid => h.told,
            _ => 0,
        };
        (told < *n).then(|| e.clone())
    }

    /// The failure `fh` has not been told of, once (an fsync).
    pub(super) fn take(&mut self, gfid: Gfid, fh: u64) -> Option<FsError> {
        let e = self.untold(gfid, fh)?;
        let n = self.pending[&gfid].0;
        if let Some(h) = self.handles.get_mut(&fh) {
            if h.gfid == gfid {
                h.told = n;
            }
        }
        self.forget_told(gfid);
        Some(e)
    }

    /// Drops the failure of `gfid` once every handle open on it was told.
    fn forget_told(&mut self, gfid: Gfid) {
        let Some(&(n, _)) = self.pending.get(&gfid) else {
            return;
        };
        let owed = self.handles.values().any(|h| h.gfid == gfid && h.told < n);
        if !owed {
            self.pending.remove(&gfid);
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
        errs.opened(f, 3, true);
        assert!(errs.unseen(f, 3).is_none(), "opened after it");
        assert!(errs.unseen(f, 1).is_some(), "a writer's close is told");
        assert!(errs.unseen(f, 2).is_none(), "a reader's close is not");
        assert!(errs.take(f, 1).is_some());
        assert!(errs.take(f, 1).is_none(), "once");
        assert!(errs.take(f, 2).is_some(), "a reader's fsync is");
        assert_eq!(errs.files(), 0);
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
        // The last release forgets it.
        errs.opened(f, 4, true);
        errs.failed(f, eio());
        errs.released(4);
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
