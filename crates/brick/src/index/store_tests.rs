//! The changed ranges an index keeps (`Index::changed` and its rules).

use super::*;
use mortar_core::{Ctx, Fop, Name};
use mortar_storage::posix::FdTable;

struct Brick {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    posix: Arc<Posix>,
    index: Index,
    gfid: Gfid,
}

/// A brick holding one file, its index open.
fn brick() -> Brick {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("brick");
    std::fs::create_dir_all(&root).unwrap();
    let posix = Arc::new(Posix::open(&root).unwrap());
    let gfid = Gfid::random();
    posix
        .call(
            &Ctx::root(),
            &FdTable::default(),
            &Fop::Mknod {
                parent: Gfid::ROOT,
                name: Name::new(b"f".to_vec()).unwrap(),
                gfid,
                mode: libc::S_IFREG | 0o644,
                umask: 0,
                rdev: 0,
                linkto: None,
            },
        )
        .unwrap();
    let index = Index::open(posix.clone()).unwrap();
    Brick {
        _dir: dir,
        root,
        posix,
        index,
        gfid,
    }
}

impl Brick {
    /// The brick's process stopped and started again.
    fn restarted(self) -> Brick {
        let posix = Arc::new(Posix::open(&self.root).unwrap());
        let index = Index::open(posix.clone()).unwrap();
        Brick {
            posix,
            index,
            ..self
        }
    }

    fn known(&self) -> Changed {
        self.index.known_changed(self.gfid).unwrap()
    }

    fn recorded(&self) -> Option<Changed> {
        read_changed(&*self.posix.resolve(self.gfid).unwrap()).unwrap()
    }
}

fn ranges(r: &[(u64, u64)]) -> Changed {
    Changed::Ranges(r.to_vec())
}

#[test]
fn a_healthy_change_leaves_no_record_and_nothing_to_heal() {
    let b = brick();
    b.index.mark(1, b.gfid, 0).unwrap();
    b.index.changed(b.gfid, 0, 4096);
    assert_eq!(b.known(), ranges(&[(0, 4096)]));
    b.index.settle(1, &[b.gfid]);
    assert!(b.known().is_empty());
    assert_eq!(b.recorded(), None);
    // Outside a session (a heal's own writes) nothing is kept.
    b.index.changed(b.gfid, 0, 10);
    assert!(b.known().is_empty());
}

#[test]
fn a_blamed_object_keeps_the_ranges_of_every_session_until_healed() {
    let b = brick();
    b.index.mark(1, b.gfid, 0b10).unwrap();
    b.index.changed(b.gfid, 100, 200);
    b.index.settle(1, &[b.gfid]);
    assert_eq!(b.recorded(), Some(ranges(&[(100, 200)])));
    // The next session takes the record in and adds to it.
    b.index.mark(2, b.gfid, 0).unwrap();
    assert_eq!(b.recorded(), None, "taken while the session is open");
    b.index.changed(b.gfid, 1000, 1100);
    assert_eq!(b.known(), ranges(&[(100, 200), (1000, 1100)]));
    b.index.settle(2, &[b.gfid]);
    assert_eq!(b.recorded(), Some(ranges(&[(100, 200), (1000, 1100)])));
    // A heal of some of the blame keeps it; of all of it, removes it.
    b.index.mark(3, b.gfid, 0b100).unwrap();
    b.index.settle(3, &[b.gfid]);
    b.index.clear(b.gfid, 0b10).unwrap();
    assert_eq!(b.known(), ranges(&[(100, 200), (1000, 1100)]));
    b.index.clear(b.gfid, 0b100).unwrap();
    assert_eq!(b.recorded(), None);
    assert!(b.known().is_empty());
    assert!(b.index.pending(10).unwrap().is_empty());
}

#[test]
fn a_client_gone_leaves_its_ranges_and_a_brick_stopped_leaves_the_whole_file() {
    let b = brick();
    b.index.mark(1, b.gfid, 0).unwrap();
    b.index.changed(b.gfid, 0, 10);
    b.index.disconnect(1);
    assert_eq!(b.recorded(), Some(ranges(&[(0, 10)])));
    let b = b.restarted();
    assert_eq!(b.known(), ranges(&[(0, 10)]), "written down, it survives");
    // A session open when the brick stops: nothing says what it changed.
    b.index.mark(2, b.gfid, 0).unwrap();
    b.index.changed(b.gfid, 50, 60);
    let b = b.restarted();
    assert_eq!(b.known(), Changed::Whole);
    assert_eq!(b.index.pending(10).unwrap(), vec![b.gfid]);
    // A new object's session stopped the same way: Whole too.
    let b2 = brick();
    b2.index.mark(1, b2.gfid, 0).unwrap();
    let b2 = b2.restarted();
    assert_eq!(b2.known(), Changed::Whole);
}

#[test]
fn ranges_are_added_by_clients_only_within_a_session() {
    let b = brick();
    assert!(b.index.add_changed(b.gfid, &Changed::Whole).is_err());
    b.index.mark(1, b.gfid, 0b1).unwrap();
    b.index.add_changed(b.gfid, &Changed::Whole).unwrap();
    b.index.settle(1, &[b.gfid]);
    assert_eq!(b.known(), Changed::Whole);
}

#[test]
fn a_brick_told_to_stop_writes_its_sessions_ranges_down_and_each_change_after() {
    let b = brick();
    b.index.mark(1, b.gfid, 0).unwrap();
    b.index.changed(b.gfid, 0, 10);
    b.index.stopping();
    assert_eq!(b.recorded(), Some(ranges(&[(0, 10)])));
    b.index.changed(b.gfid, 20, 30);
    assert_eq!(b.recorded(), Some(ranges(&[(0, 10), (20, 30)])));
    let b = b.restarted();
    assert_eq!(b.known(), ranges(&[(0, 10), (20, 30)]));
    // A session on an object not pending that settles with nothing to
    // heal takes the record written meanwhile along.
    let b2 = brick();
    b2.index.stopping();
    b2.index.mark(2, b2.gfid, 0).unwrap();
    b2.index.changed(b2.gfid, 0, 5);
    assert_eq!(b2.recorded(), Some(ranges(&[(0, 5)])));
    b2.index.settle(2, &[b2.gfid]);
    assert_eq!(b2.recorded(), None);
    assert!(b2.index.pending(10).unwrap().is_empty());
}

#[test]
fn an_entry_left_for_heal_outlives_the_next_clean_session() {
    let b = brick();
    // A client went away in the middle of a change.
    b.index.mark(1, b.gfid, 0).unwrap();
    b.index.changed(b.gfid, 0, 10);
    b.index.disconnect(1);
    // Another one's change settles with nobody blamed: the copies may
    // still differ by the first one's, and heal must look.
    b.index.mark(2, b.gfid, 0).unwrap();
    b.index.changed(b.gfid, 50, 60);
    b.index.settle(2, &[b.gfid]);
    assert_eq!(b.index.pending(10).unwrap(), vec![b.gfid]);
    assert_eq!(b.known(), ranges(&[(0, 10), (50, 60)]));
    b.index.clear(b.gfid, 0).unwrap();
    assert!(b.index.pending(10).unwrap().is_empty());
    assert_eq!(b.recorded(), None);
}

#[test]
fn a_client_gone_while_another_changes_the_object_leaves_it_for_heal() {
    let b = brick();
    b.index.mark(1, b.gfid, 0).unwrap();
    b.index.mark(2, b.gfid, 0).unwrap();
    b.index.changed(b.gfid, 0, 10);
    b.index.disconnect(1);
    assert_eq!(b.recorded(), None, "a session is still open");
    b.index.settle(2, &[b.gfid]);
    assert_eq!(b.index.pending(10).unwrap(), vec![b.gfid]);
    assert_eq!(b.known(), ranges(&[(0, 10)]));
}

#[test]
fn the_backlog_is_the_ranges_recorded_within_the_file_or_the_whole_file() {
    let b = brick();
    std::fs::write(b.root.join("f"), vec![1u8; 10_000]).unwrap();
    assert_eq!(b.index.backlog(&[b.gfid]), 0, "not pending");
    b.index.mark(1, b.gfid, 0b10).unwrap();
    b.index.changed(b.gfid, 100, 200);
    b.index.changed(b.gfid, 9_000, 20_000);
    b.index.settle(1, &[b.gfid]);
    assert_eq!(b.index.backlog(&[b.gfid]), 100 + 1_000);
    // A session open when the brick stopped: the whole file.
    b.index.mark(2, b.gfid, 0).unwrap();
    let b = b.restarted();
    assert_eq!(b.index.backlog(&[b.gfid]), 10_000);
    assert_eq!(b.index.backlog(&[Gfid::random()]), 0, "gone");
}
