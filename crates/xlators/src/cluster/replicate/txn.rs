//! Transactions of the replicate translator (docs/replication.md).
//!
//! Every change to an object (its data, its metadata, or for a directory
//! its names) runs as a transaction on the object:
//! 1. **Quorum**: enough replicas must be up (`cluster.quorum-type`), or
//!    the change fails with EROFS before anything is sent.
//! 2. **Lock and mark**: the object is locked on every replica up, in
//!    replica order (so two clients never deadlock); each lock request also
//!    opens a change session on the brick (the object enters the brick's
//!    heal index) and records the replicas this change will not reach
//!    (the blame). One request per brick: the first change of a series pays
//!    one round trip, later ones none, because the lock is kept ("eager")
//!    until another client wants it or the object has been idle for a
//!    moment.
//! 3. **Change** on every locked replica.
//! 4. **Blame** before the answer: replicas that failed the change are
//!    recorded on those that have it, and only then is the change
//!    acknowledged (or its error returned).
//! 5. **Settle**, later and batched: the lock is released and the change
//!    session closed; an object that blames nobody leaves the heal index.

use mortar_core::fop::UNSETTLED;
use mortar_core::{Child, Fop, FsError, FsResult, Gfid, Reply};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a lock is kept after the last change, for the next one.
const IDLE: Duration = Duration::from_millis(500);
/// How often idle locks are looked for.
const SWEEP: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quorum {
    /// Any replica up may take changes (split-brain possible).
    None,
    /// More than half the replicas, or exactly half including the first.
    Auto,
    /// At least this many.
    Fixed(usize),
}

impl Quorum {
    pub fn from_options(kind: &str, count: Option<usize>) -> Quorum {
        match (kind, count) {
            ("none", _) => Quorum::None,
            ("fixed", Some(n)) if n > 0 => Quorum::Fixed(n),
            _ => Quorum::Auto,
        }
    }

    /// Whether changes may go to the replicas `up` of `n`.
    pub fn met(self, up: &[usize], n: usize) -> bool {
        match self {
            Quorum::None => !up.is_empty(),
            Quorum::Fixed(k) => up.len() >= k.min(n),
            Quorum::Auto => up.len() * 2 > n || (up.len() * 2 == n && up.contains(&0)),
        }
    }
}

struct Txn {
    /// Per child: the child's epoch when its lock was granted.
    held: tokio::sync::Mutex<Held>,
    inflight: AtomicUsize,
    /// Told when the last change in flight ends.
    drained: tokio::sync::Notify,
    /// Byte ranges that data changes in flight (`Claim`) are changing.
    claimed: Mutex<Vec<(u64, u64)>>,
    /// Told when a claim ends.
    unclaimed: tokio::sync::Notify,
    contended: AtomicBool,
    /// Milliseconds since `Txns::start` of the last use.
    last_used: AtomicU64,
}

#[derive(Default)]
struct Held {
    on: Vec<Option<u64>>,
    /// The blame already recorded in this lock's sessions.
    blamed: u32,
    /// A dispersed file's size as this client's last change under this
    /// lock left it: nobody else changes the file while the lock is held
    /// (forgotten with the lock).
    size: Option<u64>,
}

impl Held {
    fn let_go(&mut self) {
        self.on.iter_mut().for_each(|h| *h = None);
        self.blamed = 0;
        self.size = None;
    }
}

/// One change in progress on one object: where it may go.
pub struct Ticket {
    gfid: Gfid,
    txn: Arc<Txn>,
    pub targets: Vec<usize>,
    /// The size known under the lock (`Held::size`), when it was taken.
    pub size: Option<u64>,
}

impl Ticket {
    pub fn gfid(&self) -> Gfid {
        self.gfid
    }
}

/// The bytes `start..end` of a file, which a data change of this client
/// is changing: another of this client's changes of bytes among them waits
/// until this one is answered (`Txns::claim`), so that each copy takes
/// overlapping changes in one order, whatever order requests sent together
/// are carried out in on each brick.
pub struct Claim {
    txn: Arc<Txn>,
    range: (u64, u64),
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claimed = self.txn.claimed.lock().unwrap();
        if let Some(i) = claimed.iter().position(|r| *r == self.range) {
            claimed.swap_remove(i);
        }
        drop(claimed);
        self.txn.unclaimed.notify_waiters();
    }
}

pub struct Txns {
    name: String,
    children: Vec<Child>,
    map: Mutex<HashMap<Gfid, Arc<Txn>>>,
    quorum: Mutex<Quorum>,
    start: Instant,
    /// Wakes the sweeper when a transaction is taken (it sleeps while
    /// none is: an idle client or healer sets no timer) and when this
    /// is dropped (it then ends).
    taken: Arc<tokio::sync::Notify>,
}

impl Drop for Txns {
    fn drop(&mut self) {
        self.taken.notify_one();
    }
}

/// The bit mask of replica positions `idx` (the blame's encoding).
pub fn bits(idx: &[usize]) -> u32 {
    idx.iter().fold(0, |m, &i| m | 1 << i)
}

/// The blame of a change that reaches `targets` of `n` replicas: those it misses.
pub fn missed_by(n: usize, targets: &[usize]) -> u32 {
    bits(&(0..n).collect::<Vec<_>>()) & !bits(targets)
}

/// The replicas whose answer is a success.
pub fn succeeded(results: &[(usize, FsResult<Reply>)]) -> Vec<usize> {
    results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(i, _)| *i)
        .collect()
}

/// The replicas that refused a change: failed other than by being down.
pub fn refused(results: &[(usize, FsResult<Reply>)]) -> Vec<usize> {
    results
        .iter()
        .filter(|(_, r)| matches!(r, Err(e) if !e.is(libc::ENOTCONN)))
        .map(|(i, _)| *i)
        .collect()
}

fn lock_fop(gfid: Gfid, wait: bool, blame: u32) -> Fop {
    Fop::Lock {
        gfid,
        wait,
        mark: Some(blame),
    }
}

impl Txns {
    pub fn new(name: String, children: Vec<Child>) -> Arc<Txns> {
        let t = Arc::new(Txns {
            name,
            children,
            map: Mutex::new(HashMap::new()),
            quorum: Mutex::new(Quorum::Auto),
            start: Instant::now(),
            taken: Arc::new(tokio::sync::Notify::new()),
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(sweep(Arc::downgrade(&t), t.taken.clone()));
        }
        t
    }

    pub fn set_quorum(&self, q: Quorum) {
        let mut cur = self.quorum.lock().unwrap();
        if *cur != q {
            tracing::info!(xlator = %self.name, "client quorum is now {q:?}");
            *cur = q;
        }
    }

    pub fn quorum(&self) -> Quorum {
        *self.quorum.lock().unwrap()
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// The answers needed to know which copies are stale: with a quorum
    /// that any two changes' replica sets share a member of, any such
    /// number of answers includes, for every change a copy missed, a copy
    /// that took it and blames the one that did not; else all of them.
    pub fn answers_needed(&self) -> usize {
        let n = self.children.len();
        match *self.quorum.lock().unwrap() {
            Quorum::Auto if n % 2 == 1 => n / 2 + 1,
            Quorum::Fixed(k) if 2 * k > n => k.min(n),
            _ => n,
        }
    }

    /// Fails with EROFS unless the replicas `up` make a quorum; `what`
    /// they are ("up", or "locked" once the lock was asked for), so that
    /// the message tells a replica down from a lock refused.
    pub fn check_quorum(&self, up: &[usize], what: &str) -> FsResult<()> {
        let q = *self.quorum.lock().unwrap();
        if q.met(up, self.children.len()) {
            Ok(())
        } else {
            Err(FsError::new(
                libc::EROFS,
                format!(
                    "{}: quorum not met ({} of {} replicas {what}, quorum {q:?}); changes refused",
                    self.name,
                    up.len(),
                    self.children.len()
                ),
            ))
        }
    }

    fn txn(&self, gfid: Gfid) -> Arc<Txn> {
        self.map
            .lock()
            .unwrap()
            .entry(gfid)
            .or_insert_with(|| {
                self.taken.notify_one();
                Arc::new(Txn {
                    held: tokio::sync::Mutex::new(Held {
                        on: vec![None; self.children.len()],
                        blamed: 0,
                        size: None,
                    }),
                    inflight: AtomicUsize::new(0),
                    drained: tokio::sync::Notify::new(),
                    claimed: Mutex::new(Vec::new()),
                    unclaimed: tokio::sync::Notify::new(),
                    contended: AtomicBool::new(false),
                    last_used: AtomicU64::new(0),
                })
            })
            .clone()
    }

    /// Claims bytes `start..end` of `gfid` for a data change, once no other
    /// change of this client in flight claims any of them (`Claim`).
    pub async fn claim(&self, gfid: Gfid, start: u64, end: u64) -> Claim {
        let txn = self.txn(gfid);
        loop {
            let unclaimed = txn.unclaimed.notified();
            {
                let mut claimed = txn.claimed.lock().unwrap();
                if !claimed.iter().any(|&(s, e)| s < end && start < e) {
                    claimed.push((start, end));
                    break;
                }
            }
            unclaimed.await;
        }
        Claim {
            txn,
            range: (start, end),
        }
    }

    /// Starts a change of `gfid` on `targets` (the replicas it can reach):
    /// checks quorum, takes the lock and marks the change on each of them.
    /// The ticket's targets are those locked.
    pub async fn begin(self: &Arc<Self>, gfid: Gfid, targets: &[usize]) -> FsResult<Ticket> {
        self.check_quorum(targets, "up")?;
        let txn = self.txn(gfid);
        let mut held = loop {
            let drained = txn.drained.notified();
            let held = txn.held.lock().await;
            let kept = targets
                .iter()
                .all(|&i| held.on[i] == Some(self.children[i].epoch()));
            if txn.inflight.load(Ordering::Acquire) == 0
                || (kept && !txn.contended.load(Ordering::Acquire))
            {
                break held;
            }
            // The lock must be let go of (another client waits for it) or
            // taken again (a replica came back), and changes of ours are
            // still on their way to the bricks: it may only go once they
            // are done, else another client's changes and ours could meet
            // the copies in different orders.
            drop(held);
            drained.await;
        };
        let n = self.children.len();
        let epochs: Vec<u64> = self.children.iter().map(|c| c.epoch()).collect();
        if txn.contended.swap(false, Ordering::AcqRel) {
            // Another client waits: let it have the object first.
            self.unlock_held(gfid, &mut held).await;
        }
        let blame = missed_by(n, targets);
        let have: Vec<usize> = targets
            .iter()
            .copied()
            .filter(|&i| held.on[i] == Some(epochs[i]))
            .collect();
        let locked = if have.len() == targets.len() {
            if blame & !held.blamed != 0 {
                // Still held, but a replica more is out of reach now.
                let res = self.each(targets, |_| lock_fop(gfid, false, blame)).await;
                held.blamed |= blame;
                res.into_iter()
                    .filter(|(_, r)| r.is_ok())
                    .map(|(i, _)| i)
                    .collect()
            } else {
                have
            }
        } else {
            self.unlock_held(gfid, &mut held).await;
            let got = self.acquire(gfid, targets, blame).await;
            for &i in &got {
                held.on[i] = Some(epochs[i]);
            }
            held.blamed = blame;
            got
        };
        txn.inflight.fetch_add(1, Ordering::AcqRel);
        let size = held.size;
        drop(held);
        let ticket = Ticket {
            gfid,
            txn,
            targets: locked,
            size,
        };
        if let Err(e) = self.check_quorum(&ticket.targets, "locked") {
            self.end(ticket);
            return Err(e);
        }
        Ok(ticket)
    }

    /// Runs `f` with `gfid` locked on `targets`, without a change session:
    /// a read that must not meet another client's change half done (a
    /// dispersed file's stripes rebuilt from fragments some of which took
    /// a write and some not yet). A lock this client keeps for its changes
    /// serves as it is, held until `f` ends; else the lock is taken in
    /// replica order, waiting, and let go after.
    pub async fn read_locked<T>(
        &self,
        gfid: Gfid,
        targets: &[usize],
        f: impl std::future::Future<Output = T>,
    ) -> T {
        let txn = self.txn(gfid);
        let kept = |held: &Held| {
            targets
                .iter()
                .all(|&i| held.on[i] == Some(self.children[i].epoch()))
        };
        let mut held = loop {
            let drained = txn.drained.notified();
            let held = txn.held.lock().await;
            if kept(&held) || txn.inflight.load(Ordering::Acquire) == 0 {
                break held;
            }
            drop(held);
            drained.await;
        };
        if kept(&held) {
            return f.await;
        }
        self.unlock_held(gfid, &mut held).await;
        let mut got = Vec::new();
        for &i in targets {
            let lock = Fop::Lock {
                gfid,
                wait: true,
                mark: None,
            };
            if self.children[i]
                .call(&mortar_core::Ctx::root(), lock)
                .await
                .is_ok()
            {
                got.push(i);
            }
        }
        let out = f.await;
        self.each(&got, |_| Fop::Unlock { gfids: vec![gfid] }).await;
        txn.last_used.store(self.now(), Ordering::Relaxed);
        out
    }

    /// Locks `gfid` on `targets`: all at once when nobody else holds it,
    /// else one replica after another in replica order, waiting.
    async fn acquire(&self, gfid: Gfid, targets: &[usize], blame: u32) -> Vec<usize> {
        let res = self.each(targets, |_| lock_fop(gfid, false, blame)).await;
        let granted: Vec<usize> = res
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(i, _)| *i)
            .collect();
        let busy = res
            .iter()
            .any(|(_, r)| matches!(r, Err(e) if e.is(libc::EAGAIN)));
        for (i, r) in &res {
            match r {
                Err(e) if !e.is(libc::EAGAIN) => {
                    tracing::info!(xlator = %self.name, %gfid, replica = i, "lock refused: {e}");
                }
                _ => {}
            }
        }
        if !busy {
            return granted;
        }
        // Someone else holds it somewhere: give back what we got, so that
        // we cannot deadlock with it, and queue up in order.
        self.each(&granted, |_| Fop::Unlock { gfids: vec![gfid] })
            .await;
        let mut got = Vec::new();
        for &i in targets {
            if self.children[i]
                .call(&mortar_core::Ctx::root(), lock_fop(gfid, true, blame))
                .await
                .is_ok()
            {
                got.push(i);
            }
        }
        got
    }

    /// Releases what this client holds of `gfid` and closes its sessions.
    async fn unlock_held(&self, gfid: Gfid, held: &mut Held) {
        let idx: Vec<usize> = (0..held.on.len())
            .filter(|&i| held.on[i] == Some(self.children[i].epoch()) && self.children[i].is_up())
            .collect();
        held.let_go();
        if !idx.is_empty() {
            self.each(&idx, |_| Fop::Unlock { gfids: vec![gfid] }).await;
        }
    }

    /// Finishes a change: the replicas of the ticket whose result failed are
    /// blamed on those that succeeded, before the caller answers. Returns
    /// the blame recorded. `undone`: the change must not stand (the
    /// application is told it failed, and the copies that took it are the
    /// wrong ones: `Replicate::finish`); the copies that refused it blame
    /// those, and those mark themselves `UNSETTLED`, blaming nobody (a
    /// copy that went away with the change in flight may hold everything
    /// else: blaming it would leave no good copy).
    pub async fn finish(
        self: &Arc<Self>,
        ticket: Ticket,
        results: &[(usize, FsResult<Reply>)],
        undone: bool,
    ) -> u32 {
        let ok = succeeded(results);
        if ok.is_empty() {
            // Failed everywhere: nothing changed, nobody to blame.
            self.end(ticket);
            return 0;
        }
        if undone {
            let wrong = bits(&ok);
            tracing::warn!(xlator = %self.name, gfid = %ticket.gfid, wrong, "a change that must not stand was applied by some replicas; recording those for heal");
            let gfid = ticket.gfid;
            let refusers = refused(results);
            tokio::join!(
                self.each(&refusers, |_| lock_fop(gfid, false, wrong)),
                self.each(&ok, |_| lock_fop(gfid, false, UNSETTLED)),
            );
            self.end(ticket);
            return wrong;
        }
        let failed = bits(&ticket.targets) & !bits(&ok);
        if failed != 0 {
            let why: Vec<String> = results
                .iter()
                .filter_map(|(i, r)| r.as_ref().err().map(|e| format!("replica {i}: {e}")))
                .collect();
            tracing::warn!(xlator = %self.name, gfid = %ticket.gfid, failed, "a replica missed a change; recording it for heal ({})", why.join("; "));
            let gfid = ticket.gfid;
            self.each(&ok, |_| lock_fop(gfid, false, failed)).await;
            ticket.txn.held.lock().await.blamed |= failed;
        }
        self.end(ticket);
        failed
    }

    /// Records a dispersed file's size as a change under `ticket` left it
    /// (None: not known), for the next change under the same lock. (The
    /// lock cannot go while the ticket is out.)
    pub async fn set_size(&self, ticket: &Ticket, size: Option<u64>) {
        ticket.txn.held.lock().await.size = size;
    }

    fn end(self: &Arc<Self>, ticket: Ticket) {
        let txn = ticket.txn;
        txn.last_used.store(self.now(), Ordering::Relaxed);
        if txn.inflight.fetch_sub(1, Ordering::AcqRel) == 1 {
            txn.drained.notify_waiters();
            if txn.contended.load(Ordering::Acquire) {
                self.release_soon(ticket.gfid, txn);
            }
        }
    }

    /// Whether this client has anything going on `gfid` (a lock held or
    /// being taken, a change in flight).
    pub fn known(&self, gfid: Gfid) -> bool {
        self.map.lock().unwrap().contains_key(&gfid)
    }

    /// Takes locks right behind a creating call or an open for writing
    /// (`send`: the call with a `Fop::Lock` on the same connections, giving
    /// back where the lock was granted) and keeps them for the changes to
    /// come, so the first writes need no round trip. Locks another client
    /// held are simply not among them: the first change takes the rest in
    /// replica order (`begin`). `send` runs in this object's order with
    /// this client's other lockings and releases of it, so that no release
    /// of ours still on its way undoes the lock it takes.
    pub async fn lock_behind<T>(
        &self,
        gfid: Gfid,
        blame: u32,
        epochs: &[u64],
        send: impl std::future::Future<Output = (T, Vec<usize>)>,
    ) -> T {
        let txn = self.txn(gfid);
        let mut held = txn.held.lock().await;
        let (out, locked) = send.await;
        for &i in &locked {
            held.on[i] = Some(epochs[i]);
        }
        held.blamed = blame;
        held.size = None;
        txn.last_used.store(self.now(), Ordering::Relaxed);
        out
    }

    /// A brick says another client waits for `gfid`.
    /// Another client waits for `gfid`: let go of it once the changes in
    /// flight are done.
    pub fn contention(self: &Arc<Self>, gfid: Gfid) {
        let Some(txn) = self.map.lock().unwrap().get(&gfid).cloned() else {
            return;
        };
        txn.contended.store(true, Ordering::Release);
        if txn.inflight.load(Ordering::Acquire) == 0 {
            self.release_soon(gfid, txn);
        }
    }

    fn release_soon(self: &Arc<Self>, gfid: Gfid, txn: Arc<Txn>) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut held = txn.held.lock().await;
            if txn.inflight.load(Ordering::Acquire) == 0 {
                txn.contended.store(false, Ordering::Release);
                me.unlock_held(gfid, &mut held).await;
            }
        });
    }

    /// Sends one request to each of `idx` at once.
    async fn each(
        &self,
        idx: &[usize],
        make: impl Fn(usize) -> Fop,
    ) -> Vec<(usize, FsResult<Reply>)> {
        let calls = idx.iter().map(|&i| {
            let (child, fop) = (self.children[i].clone(), make(i));
            async move { (i, child.call(&mortar_core::Ctx::root(), fop).await) }
        });
        futures_util::future::join_all(calls).await
    }

    /// Releases every lock idle for `IDLE`, one batched request per brick.
    /// An object stays known while its locks are being released, so that a
    /// new change or open of it waits for the release before locking again
    /// (a lock request may overtake an earlier release on its way).
    async fn sweep_once(&self) {
        let now = self.now();
        let idle: Vec<(Gfid, Arc<Txn>)> = self
            .map
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, t)| {
                Arc::strong_count(t) == 1
                    && t.inflight.load(Ordering::Acquire) == 0
                    && now.saturating_sub(t.last_used.load(Ordering::Relaxed))
                        >= IDLE.as_millis() as u64
            })
            .map(|(g, t)| (*g, t.clone()))
            .collect();
        if idle.is_empty() {
            return;
        }
        let mut guards: Vec<_> = idle
            .iter()
            .filter_map(|(g, t)| t.held.try_lock().ok().map(|h| (*g, t, h)))
            .collect();
        let mut per_child: Vec<Vec<Gfid>> = vec![Vec::new(); self.children.len()];
        for (g, _, held) in &guards {
            for (i, h) in held.on.iter().enumerate() {
                if *h == Some(self.children[i].epoch()) {
                    per_child[i].push(*g);
                }
            }
        }
        let idx: Vec<usize> = (0..per_child.len())
            .filter(|&i| !per_child[i].is_empty() && self.children[i].is_up())
            .collect();
        self.each(&idx, |i| Fop::Unlock {
            gfids: per_child[i].clone(),
        })
        .await;
        for (_, _, held) in &mut guards {
            held.let_go();
        }
        // Forgotten only if nobody took it up meanwhile (the map's and
        // `idle`'s references are the only ones).
        let mut map = self.map.lock().unwrap();
        for (g, t, held) in guards {
            drop(held);
            if Arc::strong_count(t) == 2 && map.get(&g).is_some_and(|m| Arc::ptr_eq(m, t)) {
                map.remove(&g);
            }
        }
    }

    /// Releases everything now (unmount).
    pub async fn release_all(&self) {
        let all: Vec<(Gfid, Arc<Txn>)> = self.map.lock().unwrap().drain().collect();
        for (g, t) in all {
            let mut held = t.held.lock().await;
            self.unlock_held(g, &mut held).await;
        }
    }
}

/// Releases idle locks every `SWEEP` while any transaction is kept.
async fn sweep(weak: std::sync::Weak<Txns>, taken: Arc<tokio::sync::Notify>) {
    loop {
        let idle = match weak.upgrade() {
            Some(t) => t.map.lock().unwrap().is_empty(),
            None => return,
        };
        if idle {
            taken.notified().await;
            continue;
        }
        tokio::time::sleep(SWEEP).await;
        let Some(t) = weak.upgrade() else { return };
        t.sweep_once().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_rules() {
        let q = Quorum::Auto;
        assert!(q.met(&[0, 1, 2], 3));
        assert!(q.met(&[1, 2], 3));
        assert!(!q.met(&[2], 3));
        // Even counts: exactly half is enough only with the first replica.
        assert!(q.met(&[0], 2));
        assert!(!q.met(&[1], 2));
        assert!(Quorum::Fixed(3).met(&[0, 1, 2], 3));
        assert!(!Quorum::Fixed(3).met(&[0, 1], 3));
        assert!(Quorum::None.met(&[2], 3));
        assert!(!Quorum::None.met(&[], 3));
        assert_eq!(Quorum::from_options("fixed", Some(2)), Quorum::Fixed(2));
        assert_eq!(Quorum::from_options("auto", None), Quorum::Auto);
        assert_eq!(Quorum::from_options("none", Some(2)), Quorum::None);
    }
}
