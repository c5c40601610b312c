//! Open handles of the replicate translator: what one of our handles stands
//! for on each child, and how it is made whole again when a child returns.
//!
//! A child's handle dies with its connection (a brick closes a connection's
//! files when it ends). An open file keeps working across that: the next
//! operation on it opens the file again by gfid on every child that is up
//! without a live handle (as GlusterFS's client re-opens its fds when a
//! brick comes back), with the flags of the first open minus creation and
//! truncation. A child that no longer has the file (it missed the create)
//! is not asked again until it reconnects. Anonymous handles (open-behind)
//! are valid on any child that is up and need no re-open.

use mortar_core::fop::ANON_FH;
use mortar_core::{Child, FsResult, Reply};

/// How a handle was opened: what a re-open repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum How {
    /// Read-only, through each brick's anonymous handle (open-behind).
    Anon,
    /// A file opened with these flags.
    File(i32),
    /// A directory listing, opened on one child.
    Dir,
    /// A directory not opened on any child: listed through `Reply::Listed`
    /// (`Replicate::listings` keeps where), opened for real only if its
    /// name goes while it is open (`open_for_real`).
    DirBehind,
}

/// One child's part of a handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    /// Never opened there (the child was down).
    Closed,
    /// Opened: the child's handle and the child's epoch when it was issued.
    Open { fh: u64, epoch: u64 },
    /// The child refused to open it in this epoch (it lacks the object).
    Absent { epoch: u64 },
}

#[derive(Clone, Debug)]
pub(super) struct Open {
    pub how: How,
    pub on: Vec<Slot>,
}

impl Open {
    /// A handle from the answers to an open or create (`res`), each child's
    /// epoch (`epochs`) taken before the request was sent.
    pub fn from_answers(
        how: How,
        n: usize,
        res: &[(usize, FsResult<Reply>)],
        epochs: &[u64],
    ) -> Open {
        let mut on = vec![Slot::Closed; n];
        for (i, r) in res {
            on[*i] = match r.clone().and_then(Reply::into_fh) {
                Ok(fh) => Slot::Open {
                    fh,
                    epoch: epochs[*i],
                },
                Err(_) => Slot::Absent { epoch: epochs[*i] },
            };
        }
        Open { how, on }
    }

    /// An open-behind handle: valid wherever a child is up.
    pub fn anonymous(n: usize) -> Open {
        Open {
            how: How::Anon,
            on: vec![Slot::Closed; n],
        }
    }

    /// The children whose part of this handle can be used now.
    pub fn live(&self, children: &[Child]) -> Vec<usize> {
        (0..children.len())
            .filter(|&i| {
                let c = &children[i];
                c.is_up()
                    && match (self.how, self.on[i]) {
                        (How::Anon | How::DirBehind, _) => true,
                        (_, Slot::Open { epoch, .. }) => epoch == c.epoch(),
                        _ => false,
                    }
            })
            .collect()
    }

    /// The child's handle (call only for a child `live` returned).
    pub fn fh(&self, i: usize) -> u64 {
        match (self.how, self.on[i]) {
            (How::Anon | How::DirBehind, _) => ANON_FH,
            (_, Slot::Open { fh, .. }) => fh,
            _ => ANON_FH,
        }
    }

    /// The children up that should be asked to open this handle again: for
    /// a file every child without a live handle that was not found lacking
    /// the file since it last connected; for a listing (read from one child)
    /// the child that held it, if it reconnected, or the one `fallback`
    /// names (asked only then) when no child holds it any more.
    pub fn to_reopen(
        &self,
        children: &[Child],
        fallback: impl FnOnce() -> Option<usize>,
    ) -> Vec<usize> {
        let up_since = |i: usize, epoch: u64| children[i].epoch() == epoch;
        match self.how {
            How::Anon | How::DirBehind => Vec::new(),
            How::File(_) => (0..children.len())
                .filter(|&i| children[i].is_up())
                .filter(|&i| match self.on[i] {
                    Slot::Closed => true,
                    Slot::Open { epoch, .. } | Slot::Absent { epoch } => !up_since(i, epoch),
                })
                .collect(),
            How::Dir => {
                let held: Vec<usize> = (0..children.len())
                    .filter(|&i| matches!(self.on[i], Slot::Open { .. }))
                    .collect();
                if !self.live(children).is_empty() {
                    return Vec::new();
                }
                let back: Vec<usize> = held.into_iter().filter(|&i| children[i].is_up()).collect();
                if back.is_empty() {
                    fallback().into_iter().collect()
                } else {
                    back
                }
            }
        }
    }

    /// The flags a re-open uses: the first open's, minus what only the
    /// first open may do (create, insist on creating, truncate).
    pub fn reopen_flags(&self) -> i32 {
        match self.how {
            How::File(f) => f & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC),
            _ => libc::O_RDONLY,
        }
    }

    /// Children holding a real (not anonymous) handle of the current
    /// epoch: what a release closes.
    pub fn to_close(&self, children: &[Child]) -> Vec<usize> {
        if matches!(self.how, How::Anon | How::DirBehind) {
            return Vec::new();
        }
        self.live(children)
            .into_iter()
            .filter(|&i| self.fh(i) != ANON_FH)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_core::{Ctx, Event, Fop, FsError, Link, Xlator};
    use std::sync::Arc;

    struct Nothing;

    #[async_trait::async_trait]
    impl Xlator for Nothing {
        fn name(&self) -> String {
            "nothing".into()
        }
        async fn call(&self, _: &Ctx, _: Fop) -> FsResult<Reply> {
            Err(FsError::errno(libc::ENOSYS))
        }
    }

    /// Children whose links a test drives: all up, at epoch 0.
    fn children(n: usize) -> Vec<Child> {
        (0..n)
            .map(|_| Child::new(Arc::new(Nothing), Link::up()))
            .collect()
    }

    fn reconnect(c: &Child) {
        c.link.emit(Event::Down);
        c.link.emit(Event::Up);
    }

    #[test]
    fn a_file_is_reopened_where_its_child_came_back_and_nowhere_else() {
        let x = children(3);
        // Opened on 0 and 2 while 1 was down.
        x[1].link.emit(Event::Down);
        let res = vec![
            (0, Ok(Reply::Opened { fh: 7 })),
            (2, Ok(Reply::Opened { fh: 9 })),
        ];
        let o = Open::from_answers(
            How::File(libc::O_WRONLY | libc::O_TRUNC),
            3,
            &res,
            &[0, 1, 0],
        );
        assert_eq!(o.live(&x), vec![0, 2]);
        assert!(o.to_reopen(&x, || None).is_empty());
        assert_eq!(o.reopen_flags(), libc::O_WRONLY);
        // 1 comes back, 2 reconnects: both need the file again.
        x[1].link.emit(Event::Up);
        reconnect(&x[2]);
        assert_eq!(o.live(&x), vec![0]);
        assert_eq!(o.to_reopen(&x, || None), vec![1, 2]);
        assert_eq!(o.to_close(&x), vec![0]);
        assert_eq!(o.fh(0), 7);
    }

    #[test]
    fn a_child_lacking_the_file_is_asked_again_only_after_it_reconnects() {
        let x = children(2);
        let res = vec![
            (0, Ok(Reply::Opened { fh: 3 })),
            (1, Err(FsError::errno(libc::ESTALE))),
        ];
        let o = Open::from_answers(How::File(libc::O_RDWR), 2, &res, &[0, 0]);
        assert!(o.to_reopen(&x, || None).is_empty());
        reconnect(&x[1]);
        assert_eq!(o.to_reopen(&x, || None), vec![1]);
    }

    #[test]
    fn anonymous_handles_follow_whoever_is_up() {
        let x = children(3);
        let o = Open::anonymous(3);
        x[0].link.emit(Event::Down);
        reconnect(&x[2]);
        assert_eq!(o.live(&x), vec![1, 2]);
        assert_eq!(o.fh(2), ANON_FH);
        assert!(o.to_reopen(&x, || Some(1)).is_empty());
        assert!(o.to_close(&x).is_empty());
    }

    #[test]
    fn a_listing_moves_to_another_child_only_when_its_own_is_gone() {
        let x = children(3);
        let res = vec![(0, Ok(Reply::Opened { fh: 1 }))];
        let o = Open::from_answers(How::Dir, 3, &res, &[0, 0, 0]);
        assert!(o.to_reopen(&x, || Some(1)).is_empty());
        reconnect(&x[0]);
        assert_eq!(o.to_reopen(&x, || Some(1)), vec![0]);
        x[0].link.emit(Event::Down);
        assert_eq!(o.to_reopen(&x, || Some(1)), vec![1]);
    }
}
