//! Which copy a heal takes as its source, and which copies it heals: a
//! pure function of the copies' attributes and blame (docs/replication.md).
//!
//! The copies nobody blames are the sources, the blamed ones the sinks. A
//! copy that took a change of unknown outcome (`UNSETTLED`) is a source
//! only when no clean copy holding data is. With no blame at all, or only
//! unsettled changes, any copy is a valid outcome and the fullest is
//! taken. Copies blaming each other are split-brain: resolved by the
//! policy (`cluster.favorite-child-policy`) or left alone. File data
//! never comes from the arbiter.

use mortar_core::fop::{FileKind, UNSETTLED};
use mortar_core::{Attr, FsError, FsResult};

/// How copies that blame each other are resolved
/// (`cluster.favorite-child-policy`): by none, or the copy biggest, last
/// modified, last changed, or shared by a majority.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    None,
    Size,
    Mtime,
    Ctime,
    Majority,
}

impl Policy {
    pub fn parse(s: &str) -> Policy {
        match s {
            "size" | "bigger-file" => Policy::Size,
            "mtime" | "latest-mtime" => Policy::Mtime,
            "ctime" => Policy::Ctime,
            "majority" => Policy::Majority,
            _ => Policy::None,
        }
    }
}

/// What a heal of one object does, judged from its copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Nothing now: a copy away may be the good one, or no source holds
    /// data.
    Defer,
    /// The copies blame each other and the policy does not decide.
    SplitBrain,
    Heal(Plan),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The copy data and metadata come from.
    pub src: usize,
    /// Every copy that may be a source (`src` among them).
    pub sources: Vec<usize>,
    /// The copies to heal: those not sources, or for a merge of names
    /// every copy (the source of metadata may lack names others have).
    pub sinks: Vec<usize>,
    /// Every copy read.
    pub everyone: Vec<usize>,
    /// No blame to go by (or copies of a directory blaming each other):
    /// names are merged from every copy, none removed.
    pub conservative: bool,
    /// The split-brain policy chose `src`.
    pub by_policy: bool,
    /// Blame on any copy, `UNSETTLED` aside.
    pub blamed: u32,
    /// Blame on any copy, `UNSETTLED` included.
    pub marks: u32,
}

/// Chooses for `copies` (position in the set, attributes), all of one
/// kind, read under the lock of every copy up. `all_locked`: every brick
/// of the set is among them. `forced`: the source an administrator named.
pub fn choose(
    copies: &[(usize, Attr)],
    arbiter: Option<usize>,
    all_locked: bool,
    policy: Policy,
    forced: Option<usize>,
) -> FsResult<Choice> {
    let Some((_, first)) = copies.first() else {
        return Ok(Choice::Defer);
    };
    let kind = first.kind;
    let marks = copies.iter().fold(0, |b, (_, a)| b | a.blame);
    // A change of unknown outcome blames nobody (`UNSETTLED`).
    let blamed = marks & !UNSETTLED;
    let unblamed: Vec<usize> = copies
        .iter()
        .filter(|(i, _)| blamed & (1 << i) == 0)
        .map(|(i, _)| *i)
        .collect();
    // A copy that took such a change is a source only when no copy
    // without one is: else it is made equal to one, which drops the
    // change (the application was told it failed). Taking it as a
    // source beside a clean copy left the two different, and clearing
    // its mark then hid that.
    let clean: Vec<usize> = copies
        .iter()
        .filter(|(i, a)| blamed & (1 << i) == 0 && a.blame & UNSETTLED == 0)
        .map(|(i, _)| *i)
        .collect();
    let holds_data = |i: &usize| kind != FileKind::File || Some(*i) != arbiter;
    let data_copies = |copies: &[(usize, Attr)]| -> Vec<(usize, Attr)> {
        copies
            .iter()
            .filter(|(i, _)| Some(*i) != arbiter)
            .cloned()
            .collect()
    };
    let unsure = !clean.iter().any(holds_data);
    let mut sources = if unsure { unblamed } else { clean };
    let conservative = forced.is_none() && (blamed == 0 || sources.is_empty());
    let mut by_policy = false;
    if let Some(f) = forced {
        if !copies.iter().any(|(i, _)| *i == f) {
            return Err(FsError::new(libc::ENOENT, "the chosen source has no copy"));
        }
        sources = vec![f];
    } else if sources.is_empty() && !all_locked {
        // Every copy up is blamed, and a copy away may be the good one
        // (it went away with a change in flight): wait for it.
        return Ok(Choice::Defer);
    } else if sources.is_empty() && kind != FileKind::Dir {
        match pick_by_policy(&data_copies(copies), policy) {
            Some(s) => {
                sources = vec![s];
                by_policy = true;
            }
            None => return Ok(Choice::SplitBrain),
        }
    } else if blamed == 0
        || sources.is_empty()
        || (unsure && sources.len() > 1 && kind == FileKind::File)
    {
        // Only unsettled changes (or a directory whose copies blame each
        // other): every source is a valid outcome; take the fullest, and
        // make the others equal to it (sources that each took a change
        // of unknown outcome may differ).
        let pool: Vec<(usize, Attr)> = copies
            .iter()
            .filter(|(i, _)| sources.is_empty() || sources.contains(i))
            .cloned()
            .collect();
        let candidates = if kind == FileKind::File {
            data_copies(&pool)
        } else {
            pool
        };
        let Some(first) = candidates.first() else {
            return Ok(Choice::Defer);
        };
        sources = vec![pick_by_policy(&candidates, Policy::Size).unwrap_or(first.0)];
    }
    // File data comes from a copy that holds data.
    let Some(src) = sources.iter().copied().find(holds_data) else {
        return Ok(Choice::Defer);
    };
    let everyone: Vec<usize> = copies.iter().map(|(i, _)| *i).collect();
    let sinks: Vec<usize> = if conservative && kind == FileKind::Dir {
        everyone.clone()
    } else {
        everyone
            .iter()
            .copied()
            .filter(|i| !sources.contains(i))
            .collect()
    };
    Ok(Choice::Heal(Plan {
        src,
        sources,
        sinks,
        everyone,
        conservative,
        by_policy,
        blamed,
        marks,
    }))
}

/// The copy a split-brain policy chooses, if it decides.
pub fn pick_by_policy(copies: &[(usize, Attr)], policy: Policy) -> Option<usize> {
    let best = |key: &dyn Fn(&Attr) -> (i64, u64)| {
        let max = copies.iter().map(|(_, a)| key(a)).max()?;
        let top: Vec<usize> = copies
            .iter()
            .filter(|(_, a)| key(a) == max)
            .map(|(i, _)| *i)
            .collect();
        // A tie decides nothing, except for the "fullest copy" rule used
        // when every copy is valid.
        (top.len() == 1 || policy == Policy::Size).then(|| top[0])
    };
    match policy {
        Policy::None => None,
        Policy::Size => best(&|a| {
            (
                a.size as i64,
                a.mtime.0 as u64 * 1_000_000_000 + a.mtime.1 as u64,
            )
        }),
        Policy::Mtime => best(&|a| (a.mtime.0, a.mtime.1 as u64)),
        Policy::Ctime => best(&|a| (a.ctime.0, a.ctime.1 as u64)),
        Policy::Majority => {
            // The copy whose (size, mtime) more than half the copies share.
            let key = |a: &Attr| (a.size, a.mtime);
            copies
                .iter()
                .find(|(_, a)| {
                    copies.iter().filter(|(_, b)| key(b) == key(a)).count() * 2 > copies.len()
                })
                .map(|(i, _)| *i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_core::Gfid;

    /// Copies of one file: (position, size, mtime seconds, blame).
    fn files(spec: &[(usize, u64, i64, u32)]) -> Vec<(usize, Attr)> {
        let g = Gfid::random();
        spec.iter()
            .map(|&(i, size, mtime, blame)| {
                let mut a = Attr::plain_file(g, size);
                a.mtime = (mtime, 0);
                a.ctime = (mtime, 0);
                a.blame = blame;
                (i, a)
            })
            .collect()
    }

    fn dirs(spec: &[(usize, u32)]) -> Vec<(usize, Attr)> {
        let mut c = files(&spec.iter().map(|&(i, b)| (i, 0, 0, b)).collect::<Vec<_>>());
        for (_, a) in c.iter_mut() {
            a.kind = FileKind::Dir;
        }
        c
    }

    fn plan(c: FsResult<Choice>) -> Plan {
        match c.unwrap() {
            Choice::Heal(p) => p,
            other => panic!("no heal: {other:?}"),
        }
    }

    #[test]
    fn the_copies_nobody_blames_heal_the_blamed_one() {
        // Copies 0 and 1 blame copy 2.
        let c = files(&[(0, 10, 5, 0b100), (1, 10, 5, 0b100), (2, 3, 1, 0)]);
        let p = plan(choose(&c, None, true, Policy::None, None));
        assert_eq!((p.src, p.sources, p.sinks), (0, vec![0, 1], vec![2]));
        assert!(!p.conservative && !p.by_policy);
        assert_eq!(p.blamed, 0b100);
    }

    #[test]
    fn without_blame_the_fullest_copy_is_taken() {
        let c = files(&[(0, 10, 5, 0), (1, 20, 4, 0), (2, 20, 6, 0)]);
        let p = plan(choose(&c, None, true, Policy::None, None));
        assert_eq!((p.src, p.sinks), (2, vec![0, 1]));
        assert!(p.conservative);
    }

    #[test]
    fn an_unsettled_copy_is_no_source_beside_a_clean_one() {
        // Copy 1 took a change of unknown outcome; copy 0 did not.
        let c = files(&[(0, 10, 5, 0), (1, 99, 9, UNSETTLED)]);
        let p = plan(choose(&c, None, true, Policy::None, None));
        assert_eq!((p.src, p.sinks), (0, vec![1]));
        assert_eq!(p.marks, UNSETTLED);
        // Both unsettled: the fullest wins.
        let c = files(&[(0, 10, 5, UNSETTLED), (1, 99, 9, UNSETTLED)]);
        let p = plan(choose(&c, None, true, Policy::None, None));
        assert_eq!(p.src, 1);
    }

    #[test]
    fn copies_blaming_each_other_are_split_brain_unless_a_policy_decides() {
        let c = files(&[(0, 10, 5, 0b10), (1, 20, 4, 0b01)]);
        assert_eq!(
            choose(&c, None, true, Policy::None, None).unwrap(),
            Choice::SplitBrain
        );
        let p = plan(choose(&c, None, true, Policy::Size, None));
        assert_eq!((p.src, p.sinks, p.by_policy), (1, vec![0], true));
        let p = plan(choose(&c, None, true, Policy::Mtime, None));
        assert_eq!(p.src, 0);
        // A tie decides nothing.
        let c = files(&[(0, 10, 5, 0b10), (1, 20, 5, 0b01)]);
        assert_eq!(
            choose(&c, None, true, Policy::Mtime, None).unwrap(),
            Choice::SplitBrain
        );
    }

    #[test]
    fn every_copy_up_blamed_waits_for_the_one_away() {
        let c = files(&[(0, 10, 5, 0b10), (1, 20, 4, 0b01)]);
        assert_eq!(
            choose(&c, None, false, Policy::Size, None).unwrap(),
            Choice::Defer
        );
    }

    #[test]
    fn the_arbiter_is_never_the_source_of_data() {
        // Only the arbiter (2) is unblamed: nothing to take data from.
        let c = files(&[(0, 10, 5, 0b011), (1, 10, 5, 0b011), (2, 0, 9, 0b011)]);
        assert_eq!(
            choose(&c, Some(2), true, Policy::None, None).unwrap(),
            Choice::Defer
        );
        // Without blame, the fullest copy that holds data.
        let c = files(&[(0, 10, 5, 0), (1, 5, 5, 0), (2, 0, 9, 0)]);
        let p = plan(choose(&c, Some(2), true, Policy::None, None));
        assert_eq!(p.src, 0);
    }

    #[test]
    fn directories_blaming_each_other_merge_names_into_every_copy() {
        let c = dirs(&[(0, 0b10), (1, 0b01)]);
        let p = plan(choose(&c, None, true, Policy::None, None));
        assert!(p.conservative);
        assert_eq!(p.sinks, vec![0, 1], "the source of metadata too");
    }

    #[test]
    fn a_forced_source_must_have_a_copy() {
        let c = files(&[(0, 10, 5, 0b10), (1, 20, 4, 0b01)]);
        let p = plan(choose(&c, None, true, Policy::None, Some(1)));
        assert_eq!((p.src, p.sinks, p.conservative), (1, vec![0], false));
        assert!(choose(&c, None, true, Policy::None, Some(2)).is_err());
    }

    #[test]
    fn majority_takes_what_more_than_half_share() {
        let c = files(&[(0, 10, 5, 0), (1, 10, 5, 0), (2, 30, 7, 0)]);
        assert_eq!(pick_by_policy(&c, Policy::Majority), Some(0));
        let c = files(&[(0, 10, 5, 0), (1, 20, 5, 0)]);
        assert_eq!(pick_by_policy(&c, Policy::Majority), None);
        assert_eq!(pick_by_policy(&c, Policy::None), None);
    }
}
