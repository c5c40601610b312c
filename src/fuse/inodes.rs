//! Kernel inode numbers ↔ gfids. Inode 1 is the volume root. Each entry
//! counts the lookups the kernel holds on it; `forget` drops the entry when
//! the count reaches zero, so memory follows the kernel's inode cache.

use crate::core::Gfid;
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
struct Inner {
    by_ino: HashMap<u64, (Gfid, u64)>,
    by_gfid: HashMap<Gfid, u64>,
    next: u64,
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
        let mut inner = Inner {
            next: 2,
            ..Default::default()
        };
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
        let ino = g.next;
        g.next += 1;
        g.by_ino.insert(ino, (gfid, 1));
        g.by_gfid.insert(gfid, ino);
        ino
    }

    /// The inode for `gfid` if known, without counting a lookup (plain
    /// readdir); an unknown object gets a number the kernel will look up.
    pub fn peek(&self, gfid: Gfid) -> u64 {
        self.inner
            .lock()
            .unwrap()
            .by_gfid
            .get(&gfid)
            .copied()
            .unwrap_or(u64::MAX)
    }

    pub fn forget(&self, ino: u64, n: u64) {
        if ino == 1 {
            return;
        }
        let mut g = self.inner.lock().unwrap();
        if let Some(e) = g.by_ino.get_mut(&ino) {
            e.1 = e.1.saturating_sub(n);
            if e.1 == 0 {
                let gfid = e.0;
                g.by_ino.remove(&ino);
                g.by_gfid.remove(&gfid);
            }
        }
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
