//! Kernel inode numbers ↔ gfids. Inode 1 is the volume root; any other
//! object's number is taken from its gfid (`ino_of`), so it is the same on
//! every client, across remounts and after the kernel forgot it, as tools
//! that compare `st_ino` (git, backup tools, `find -samefile`) expect. Each
//! entry counts the lookups the kernel holds on it; `forget` drops the
//! entry when the count reaches zero, so memory follows the kernel's inode
//! cache.

use mortar_core::Gfid;
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
struct Inner {
    by_ino: HashMap<u64, (Gfid, u64)>,
    by_gfid: HashMap<Gfid, u64>,
}

/// The inode number of `gfid` (`Gfid::ino`).
pub fn ino_of(gfid: Gfid) -> u64 {
    gfid.ino()
}

pub struct InodeTable {
    inner: Mutex<Inner>,
}

impl Default for InodeTable {
    fn default() -> Self {
        Self::new()
    }
}

impl InodeTable {
    pub fn new() -> Self {
        let mut inner = Inner::default();
        inner.by_ino.insert(1, (Gfid::ROOT, 1));
        inner.by_gfid.insert(Gfid::ROOT, 1);
        InodeTable {
            inner: Mutex::new(inner),
        }
    }

    pub fn gfid(&self, ino: u64) -> Option<Gfid> {
        self.inner.lock().unwrap().by_ino.get(&ino).map(|e| e.0)
    }

    /// The inode for `gfid`, counting one more kernel lookup on it.
    pub fn remember(&self, gfid: Gfid) -> u64 {
        let mut g = self.inner.lock().unwrap();
        if let Some(&ino) = g.by_gfid.get(&gfid) {
            g.by_ino.get_mut(&ino).unwrap().1 += 1;
            return ino;
        }
        // Two gfids whose numbers collide (a one in 2^64 chance) cannot
        // share one: the later one takes the next free number while both
        // are known.
        let mut ino = ino_of(gfid);
        while g.by_ino.contains_key(&ino) || ino <= 1 || ino == u64::MAX {
            ino = ino.wrapping_add(1);
        }
        g.by_ino.insert(ino, (gfid, 1));
        g.by_gfid.insert(gfid, ino);
        ino
    }

    /// The inode the kernel knows `gfid` by, if it knows it.
    pub fn ino(&self, gfid: Gfid) -> Option<u64> {
        self.inner.lock().unwrap().by_gfid.get(&gfid).copied()
    }

    /// Every inode the kernel knows.
    pub fn all(&self) -> Vec<u64> {
        self.inner.lock().unwrap().by_ino.keys().copied().collect()
    }

    /// The inode for `gfid` without counting a lookup (plain readdir).
    pub fn peek(&self, gfid: Gfid) -> u64 {
        self.inner
            .lock()
            .unwrap()
            .by_gfid
            .get(&gfid)
            .copied()
            .unwrap_or_else(|| ino_of(gfid))
    }

    /// Counts `n` kernel references out; returns the gfid when the last
    /// one went (the object is forgotten).
    pub fn forget(&self, ino: u64, n: u64) -> Option<Gfid> {
        if ino == 1 {
            return None;
        }
        let mut g = self.inner.lock().unwrap();
        let e = g.by_ino.get_mut(&ino)?;
        e.1 = e.1.saturating_sub(n);
        if e.1 != 0 {
            return None;
        }
        let gfid = e.0;
        g.by_ino.remove(&ino);
        g.by_gfid.remove(&gfid);
        Some(gfid)
    }

    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().by_ino.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_come_from_the_gfid_and_never_collide() {
        let t = InodeTable::new();
        let g = Gfid::random();
        let ino = t.remember(g);
        assert_eq!(ino, ino_of(g));
        t.forget(ino, 1);
        assert_eq!(t.remember(g), ino, "the same number after a forget");
        let mut twin = Gfid::random();
        twin.0[..8].copy_from_slice(&g.0[..8]);
        let other = t.remember(twin);
        assert_ne!(other, ino);
        assert_eq!((t.gfid(ino), t.gfid(other)), (Some(g), Some(twin)));
        assert_eq!(ino_of(Gfid::ROOT), 1);
        assert_ne!(ino_of(Gfid([0; 16])), 0);
    }

    #[test]
    fn lookups_are_counted_and_forgotten() {
        let t = InodeTable::new();
        let g = Gfid::random();
        let ino = t.remember(g);
        assert_eq!(t.remember(g), ino);
        assert_eq!(t.gfid(ino), Some(g));
        t.forget(ino, 1);
        assert_eq!(t.gfid(ino), Some(g));
        assert_eq!(t.len(), 2);
        t.forget(ino, 1);
        assert_eq!(t.gfid(ino), None);
        assert_eq!(t.len(), 1, "only the root is left");
        assert_eq!(t.gfid(1), Some(Gfid::ROOT));
        t.forget(1, 100);
        assert_eq!(t.gfid(1), Some(Gfid::ROOT));
    }
}
