//! Object locks of a brick (GlusterFS's features/locks, reduced to what
//! replication needs): one exclusive lock per object, owned by a client
//! connection, with waiters served in arrival order. The owner keeps a lock
//! as long as nobody else wants it ("eager locking"); when another
//! connection starts waiting, the server tells the owner (a contention
//! notice) so that it finishes and lets go. Locks die with their connection.

use mortar_core::Gfid;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::oneshot;

pub type ConnId = u64;

/// Read by the brick server, which revokes (`brick::server`).
pub static REVOCATION_SECS: mortar_core::options::Spec = mortar_core::options::Spec {
    key: "features.locks-revocation-secs",
    kind: mortar_core::options::Kind::Int(0, 3600),
    default: "60",
    help: "Seconds a client may keep a lock that another client waits for; after that the brick revokes it by closing the holder's connection (its unfinished change is healed). 0: never.",
};

struct Held {
    owner: ConnId,
    waiters: VecDeque<(ConnId, oneshot::Sender<()>)>,
}

#[derive(Default)]
pub struct LockTable {
    held: Mutex<HashMap<Gfid, Held>>,
}

pub enum Acquire {
    Granted,
    /// Held by `owner`; not waiting.
    Busy {
        owner: ConnId,
    },
    /// Held by `owner`; granted when the receiver fires.
    Wait {
        owner: ConnId,
        granted: oneshot::Receiver<()>,
    },
}

impl LockTable {
    /// For a statedump: each lock held, its owner and how many wait.
    pub fn dump(&self) -> Vec<String> {
        let held = self.held.lock().unwrap();
        let mut out = vec![format!("locks held: {}", held.len())];
        out.extend(held.iter().take(100).map(|(g, h)| {
            format!(
                "lock {g}: owner conn {}, {} waiting",
                h.owner,
                h.waiters.len()
            )
        }));
        out
    }

    pub fn acquire(&self, conn: ConnId, gfid: Gfid, wait: bool) -> Acquire {
        let mut held = self.held.lock().unwrap();
        let Some(h) = held.get_mut(&gfid) else {
            held.insert(
                gfid,
                Held {
                    owner: conn,
                    waiters: VecDeque::new(),
                },
            );
            return Acquire::Granted;
        };
        if h.owner == conn {
            return Acquire::Granted;
        }
        if !wait {
            return Acquire::Busy { owner: h.owner };
        }
        let (tx, rx) = oneshot::channel();
        h.waiters.push_back((conn, tx));
        Acquire::Wait {
            owner: h.owner,
            granted: rx,
        }
    }

    /// Releases `gfid` if `conn` owns it, handing it to the next waiter that
    /// is still there.
    pub fn release(&self, conn: ConnId, gfid: Gfid) {
        let mut held = self.held.lock().unwrap();
        let Some(h) = held.get_mut(&gfid) else { return };
        if h.owner != conn {
            return;
        }
        Self::hand_on(&mut held, gfid);
    }

    fn hand_on(held: &mut HashMap<Gfid, Held>, gfid: Gfid) {
        let h = held.get_mut(&gfid).expect("held");
        while let Some((next, tx)) = h.waiters.pop_front() {
            if tx.send(()).is_ok() {
                h.owner = next;
                return;
            }
        }
        held.remove(&gfid);
    }

    /// A connection ended: its locks go to their next waiters and it stops
    /// waiting for others.
    pub fn release_all(&self, conn: ConnId) {
        let mut held = self.held.lock().unwrap();
        let gfids: Vec<Gfid> = held.keys().copied().collect();
        for g in gfids {
            let h = held.get_mut(&g).unwrap();
            h.waiters.retain(|(c, _)| *c != conn);
            if h.owner == conn {
                Self::hand_on(&mut held, g);
            }
        }
    }

    /// The connection holding `gfid`, if any.
    pub fn owner(&self, gfid: Gfid) -> Option<ConnId> {
        self.held.lock().unwrap().get(&gfid).map(|h| h.owner)
    }

    /// Whether anyone waits for `gfid` (the owner should let go).
    pub fn contended(&self, gfid: Gfid) -> bool {
        self.held
            .lock()
            .unwrap()
            .get(&gfid)
            .is_some_and(|h| !h.waiters.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_are_served_in_order_and_locks_die_with_their_connection() {
        let t = LockTable::default();
        let g = Gfid::random();
        assert!(matches!(t.acquire(1, g, true), Acquire::Granted));
        assert!(matches!(t.acquire(1, g, true), Acquire::Granted));
        assert!(matches!(t.acquire(2, g, false), Acquire::Busy { owner: 1 }));
        let Acquire::Wait {
            owner: 1,
            granted: mut w2,
        } = t.acquire(2, g, true)
        else {
            panic!()
        };
        let Acquire::Wait {
            granted: mut w3, ..
        } = t.acquire(3, g, true)
        else {
            panic!()
        };
        assert!(t.contended(g));
        t.release(3, g); // not the owner: nothing happens
        assert!(w2.try_recv().is_err());
        t.release(1, g);
        assert!(w2.try_recv().is_ok());
        // Connection 2 dies holding it: 3 gets it.
        t.release_all(2);
        assert!(w3.try_recv().is_ok());
        t.release(3, g);
        assert!(matches!(t.acquire(4, g, false), Acquire::Granted));
    }

    #[test]
    fn a_waiter_that_went_away_is_skipped() {
        let t = LockTable::default();
        let g = Gfid::random();
        t.acquire(1, g, true);
        let Acquire::Wait { granted, .. } = t.acquire(2, g, true) else {
            panic!()
        };
        drop(granted);
        t.release(1, g);
        assert!(matches!(t.acquire(3, g, false), Acquire::Granted));
    }
}
