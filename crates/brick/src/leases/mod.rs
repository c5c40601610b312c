//! `features/leases`: which clients cache what, and recalling it before
//! another client changes it (docs/caching.md).
//!
//! Every answer a client gets about an object or a name grants that
//! connection a lease on it: the brick notes (connection, object) until the
//! lease ends. Before a change, the brick sends every other connection
//! holding a lease on what the change touches a `Notice::Recall` and waits
//! until each has answered (the client dropped what it caches) or
//! `network.ping-timeout` has passed (the client is then disconnected: a
//! client that lost a connection drops everything it caches under it).
//!
//! A lease recalled for a change of a file's data (write, fallocate, an
//! `O_TRUNC` open) ends: the client dropped all it had of the file, and gets
//! a new lease with its next answer. Any other recall leaves the lease in
//! place until its time: a client drops one name of a directory when that
//! name changes, and keeps caching the directory's other names, which the
//! directory's lease must go on covering (the kernel keeps a directory's
//! names when its attributes are dropped, too).
//!
//! A read that runs while a change waits for its recalls may answer the
//! state before the change: the connections granted a lease after the
//! recalls began are recalled again once the change is done, before it is
//! answered. A client does not cache an answer to a request it sent before
//! a recall of the same object reached it (`core::xlator::RecallLog`).

//!
//! **Claims.** A directory's maker also holds a claim on it: until the
//! lease's time, no other connection has looked at it, so the maker may
//! answer changes of names in it before the bricks have them (md-cache's
//! changes ahead). With `performance.flush-behind`, a file opened (or made)
//! for writing is claimed for that connection the same way, so that its
//! closes need not wait for the writes behind them (write-behind); the
//! open ends the leases others hold on the file first, so nobody caches it
//! meanwhile.
//!
//! Any request of another connection naming a claimed directory (a lookup
//! in it, a listing, its attributes, a lock, a change), or reading or
//! opening a claimed file, first ends the claim and recalls it, and waits
//! until the holder has landed what it answered ahead (requests that come
//! before the holder has answered wait for that answer too); a request that only
//! reads and whose answer tells of a claimed object is asked again after
//! that (the lease it takes and the claim it finds are looked at together,
//! so that a claim taken while it ran is seen). Changes and locks of a
//! claimed file pass (`end_claim`).

use super::{BrickEnv, BrickXlator, Conn, ConnId, ConnTable, Notice};
use mortar_core::fop::{BRICK_CONTROL_PREFIX, HOLD_XATTR};

use async_trait::async_trait;
use mortar_core::terms::Terms;
use mortar_core::{Ctx, Fop, FsResult, Gfid, Name, Reply};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// Leases are kept in this many maps (by gfid).
const SHARDS: usize = 64;
/// How often a map is cleared of ended leases.
const SWEEP: Duration = Duration::from_secs(10);

struct Holder {
    conn: ConnId,
    /// When it was granted, in grant order (`Leases::seq`).
    seq: u64,
    until: Instant,
}

/// Until another connection names the object (or `until`), only `conn`
/// may hold changes of it that are not on the brick yet.
struct Claim {
    conn: ConnId,
    until: Instant,
    /// A file's claim (its writes behind a close) is ended only by a
    /// request that looks at the file; a directory's by any request.
    file: bool,
}

/// A claim ended whose holder has not answered the recall yet: requests
/// it would have held wait for that answer too (not only the one that
/// ended it).
struct Ending {
    holder: ConnId,
    file: bool,
    /// Tells of the answer (or of giving up on it) by closing.
    done: watch::Receiver<()>,
    id: u64,
}

#[derive(Default)]
struct Shard {
    holders: HashMap<Gfid, Vec<Holder>>,
    claims: HashMap<Gfid, Claim>,
    ending: HashMap<Gfid, Ending>,
    swept: Option<Instant>,
}

/// What a claim found in a request's way asks of it.
enum Ended<'a> {
    /// It ended the claim: recall it from `holder`; the others waiting
    /// for that are let go when `ending` is dropped.
    Recall {
        holder: ConnId,
        ending: EndingGuard<'a>,
    },
    /// Another request ended it: wait for that recall.
    Wait(watch::Receiver<()>),
}

/// Forgets an ending claim, and lets its waiters go, when dropped.
struct EndingGuard<'a> {
    leases: &'a Leases,
    gfid: Gfid,
    id: u64,
    _done: watch::Sender<()>,
}

impl Drop for EndingGuard<'_> {
    fn drop(&mut self) {
        let mut sh = self.leases.shard(&self.gfid).lock().unwrap();
        if sh.ending.get(&self.gfid).is_some_and(|e| e.id == self.id) {
            sh.ending.remove(&self.gfid);
            self.leases.claimed.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// What a change touches: an object, or a name in a directory.
type Target = (Gfid, Option<Name>);

pub struct Leases {
    below: Arc<dyn BrickXlator>,
    /// The terms it grants on (`features.cache-invalidation` and its
    /// timeout).
    terms: Mutex<Terms>,
    shards: Vec<Mutex<Shard>>,
    conns: ConnTable,
    /// Grants so far: a change recalls again the leases granted while it
    /// waited for its recalls.
    seq: AtomicU64,
    next_recall: AtomicU64,
    /// Recalls not answered yet: their connection, and the change waiting.
    waiting: Mutex<HashMap<u64, (ConnId, oneshot::Sender<()>)>>,
    /// Claims held or ending (a request looks for them only when there
    /// are some).
    claimed: AtomicUsize,
}

pub fn build(
    _env: &BrickEnv,
    below: Option<Arc<dyn BrickXlator>>,
) -> anyhow::Result<Option<Arc<dyn BrickXlator>>> {
    let below = below.ok_or_else(|| anyhow::anyhow!("leases need a translator below"))?;
    Ok(Some(Arc::new(Leases::new(below, Terms::default()))))
}

impl Leases {
    pub fn new(below: Arc<dyn BrickXlator>, terms: Terms) -> Leases {
        Leases {
            below,
            terms: Mutex::new(terms),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            conns: ConnTable::default(),
            seq: AtomicU64::new(0),
            next_recall: AtomicU64::new(1),
            waiting: Mutex::default(),
            claimed: AtomicUsize::new(0),
        }
    }

    fn shard(&self, gfid: &Gfid) -> &Mutex<Shard> {
        &self.shards[gfid.0[15] as usize % SHARDS]
    }

    /// Grants `conn` a lease on `gfid`; with `claims_too`, ends another
    /// connection's claim on it in the same step (so that a claim taken
    /// while the answer was made is seen): what to recall or wait for is
    /// added to `ended`.
    fn grant<'a>(
        &'a self,
        conn: ConnId,
        gfid: Gfid,
        until: Instant,
        claims_too: bool,
        ended: &mut Vec<Ended<'a>>,
    ) {
        if gfid == Gfid::NULL {
            return;
        }
        let seq = self.seq.fetch_add(1, Ordering::AcqRel) + 1;
        let now = Instant::now();
        let mut sh = self.shard(&gfid).lock().unwrap();
        if sh.swept.is_none_or(|t| now.duration_since(t) > SWEEP) {
            sh.holders.retain(|_, hs| {
                hs.retain(|h| h.until > now);
                !hs.is_empty()
            });
            let before = sh.claims.len();
            sh.claims.retain(|_, c| c.until > now);
            self.claimed
                .fetch_sub(before - sh.claims.len(), Ordering::AcqRel);
            sh.swept = Some(now);
        }
        let hs = sh.holders.entry(gfid).or_default();
        match hs.iter_mut().find(|h| h.conn == conn) {
            Some(h) => {
                h.seq = seq;
                h.until = until;
            }
            None => hs.push(Holder { conn, seq, until }),
        }
        if claims_too {
            self.end_claim(conn, gfid, &mut sh, true, ended);
        }
    }

    /// The connections other than `caller` holding a lease on `gfid`
    /// granted after `since`; with `end`, those leases end.
    fn take(&self, caller: ConnId, gfid: &Gfid, since: u64, end: bool) -> Vec<ConnId> {
        let now = Instant::now();
        let mut sh = self.shard(gfid).lock().unwrap();
        let Some(hs) = sh.holders.get_mut(gfid) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        hs.retain(|h| {
            if h.until <= now {
                return false;
            }
            if h.conn != caller && h.seq > since {
                out.push(h.conn);
                return !end;
            }
            true
        });
        if hs.is_empty() {
            sh.holders.remove(gfid);
        }
        out
    }

    /// Whether a connection other than `caller` holds a lease on `gfid`.
    fn others_hold(&self, caller: ConnId, gfid: &Gfid) -> bool {
        let now = Instant::now();
        let sh = self.shard(gfid).lock().unwrap();
        sh.holders
            .get(gfid)
            .is_some_and(|hs| hs.iter().any(|h| h.conn != caller && h.until > now))
    }

    /// Recalls the leases other connections hold on `targets` (granted
    /// after `since`; with `end`, they end) and waits until each is
    /// answered or times out.
    async fn recall(
        &self,
        caller: ConnId,
        targets: &[Target],
        since: u64,
        end: bool,
        timeout: Duration,
    ) {
        let mut waits = Vec::new();
        for (gfid, name) in targets {
            for holder in self.take(caller, gfid, since, end) {
                waits.extend(self.send_recall(holder, *gfid, name.clone(), false));
            }
        }
        self.wait_recalls(waits, timeout).await;
    }

    /// `conn` made directory `gfid`, or opened (or made) file `gfid` for
    /// writing: it holds the claim until `until`. Another connection's
    /// claim on it, taken while this request ran, is ended: returned, for
    /// the request to recall.
    fn claim(&self, conn: ConnId, gfid: Gfid, until: Instant, file: bool) -> Option<Ended<'_>> {
        let now = Instant::now();
        let mut sh = self.shard(&gfid).lock().unwrap();
        match sh.claims.insert(gfid, Claim { conn, until, file }) {
            None => {
                self.claimed.fetch_add(1, Ordering::AcqRel);
                None
            }
            Some(c) if c.conn != conn && c.until > now => {
                self.claimed.fetch_add(1, Ordering::AcqRel);
                Some(self.ending(&mut sh, gfid, c.conn, c.file))
            }
            Some(_) => None,
        }
    }

    /// Ends another connection's claim on `gfid` (in shard `sh`) for a
    /// request that `looks` at it or not: its holder, to recall, unless it
    /// had lapsed; and a claim being ended by another request, to wait for.
    ///
    /// A file's claim outlives changes and locks of others: the writes its
    /// holder closed behind may need the file's lock, which such a request
    /// may hold while it waits (two clients writing one file), and they
    /// land in either order then, as concurrent writes do. What looks
    /// (a read, an open, a lookup or listing telling of it) waits for them.
    fn end_claim<'a>(
        &'a self,
        caller: ConnId,
        gfid: Gfid,
        sh: &mut Shard,
        looks: bool,
        out: &mut Vec<Ended<'a>>,
    ) {
        let holds = |holder: ConnId, file: bool| holder != caller && (looks || !file);
        if let Some(e) = sh.ending.get(&gfid).filter(|e| holds(e.holder, e.file)) {
            out.push(Ended::Wait(e.done.clone()));
        }
        let Some(c) = sh.claims.get(&gfid) else {
            return;
        };
        if !holds(c.conn, c.file) {
            return;
        }
        let (holder, live, file) = (c.conn, c.until > Instant::now(), c.file);
        sh.claims.remove(&gfid);
        match live {
            true => out.push(self.ending(sh, gfid, holder, file)),
            false => {
                self.claimed.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Notes `holder`'s claim on `gfid` ending (counted in `claimed`
    /// already), for the request that ends it to recall.
    fn ending(&self, sh: &mut Shard, gfid: Gfid, holder: ConnId, file: bool) -> Ended<'_> {
        let (done, rx) = watch::channel(());
        let id = self.next_recall.fetch_add(1, Ordering::Relaxed);
        let e = Ending {
            holder,
            file,
            done: rx,
            id,
        };
        if sh.ending.insert(gfid, e).is_some() {
            // (Its waiters keep waiting for their own end of it.)
            self.claimed.fetch_sub(1, Ordering::AcqRel);
        }
        Ended::Recall {
            holder,
            ending: EndingGuard {
                leases: self,
                gfid,
                id,
                _done: done,
            },
        }
    }

    /// Ends the claims of other connections on `objects`, recalls them
    /// and waits until each holder has answered (it landed what it
    /// answered ahead in them) or times out. Whether any was in the way.
    async fn end_claims(
        &self,
        caller: ConnId,
        objects: impl IntoIterator<Item = Gfid>,
        looks: bool,
        timeout: Duration,
    ) -> bool {
        if self.claimed.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut ended = Vec::new();
        for gfid in objects {
            let mut sh = self.shard(&gfid).lock().unwrap();
            self.end_claim(caller, gfid, &mut sh, looks, &mut ended);
        }
        self.recall_claims(ended, timeout).await
    }

    /// Recalls the claims `ended` from their holders and waits until each
    /// has answered, and for the recalls of other requests among them,
    /// or times out. Whether there were any.
    async fn recall_claims(&self, ended: Vec<Ended<'_>>, timeout: Duration) -> bool {
        if ended.is_empty() {
            return false;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let (mut waits, mut guards, mut others) = (Vec::new(), Vec::new(), Vec::new());
        for e in ended {
            match e {
                Ended::Recall { holder, ending } => {
                    waits.extend(self.send_recall(holder, ending.gfid, None, true));
                    guards.push(ending);
                }
                Ended::Wait(rx) => others.push(rx),
            }
        }
        self.wait_recalls(waits, timeout).await;
        drop(guards);
        for mut rx in others {
            // (Closed once that recall is over.)
            let _ = tokio::time::timeout_at(deadline, rx.changed()).await;
        }
        true
    }

    /// Sends `holder` a recall of `gfid` (or of `name` in it); `claim`:
    /// it ends the holder's claim on `gfid` (the holder answers once what
    /// it closed behind has landed; a recall of a lease alone is answered
    /// at once, else a change holding the file's lock while it waits and
    /// the holder's writes waiting for that lock would wait for each
    /// other).
    fn send_recall(
        &self,
        holder: ConnId,
        gfid: Gfid,
        name: Option<Name>,
        claim: bool,
    ) -> Option<(Arc<Conn>, oneshot::Receiver<()>)> {
        let conn = self.conns.get(holder)?;
        let id = self.next_recall.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().unwrap().insert(id, (holder, tx));
        (conn.notice)(Notice::Recall {
            id,
            gfid,
            name,
            claim,
        });
        Some((conn, rx))
    }

    /// Waits until each recall is answered; a client that does not answer
    /// by `timeout` is disconnected.
    async fn wait_recalls(
        &self,
        waits: Vec<(Arc<Conn>, oneshot::Receiver<()>)>,
        timeout: Duration,
    ) {
        let deadline = tokio::time::Instant::now() + timeout;
        for (conn, rx) in waits {
            // An answer, or the connection gone: done either way.
            if tokio::time::timeout_at(deadline, rx).await.is_err() {
                tracing::warn!(
                    client = %conn.peer,
                    "client did not answer a recall within {timeout:?}; disconnecting it"
                );
                (conn.close)();
            }
        }
    }

    /// The objects a name operation replaces or moves, when another
    /// connection could be caching them (it holds a lease on the directory).
    async fn named(&self, conn: &Arc<Conn>, cx: &Ctx, parent: Gfid, name: &Name) -> Option<Gfid> {
        if !self.others_hold(conn.id, &parent) {
            return None;
        }
        let fop = Fop::Lookup {
            parent,
            name: name.clone(),
        };
        match self.below.call(conn, cx, fop).await {
            Ok(Reply::Entry(e)) => Some(e.attr.gfid),
            _ => None,
        }
    }

    /// What `fop` changes that other clients may cache (a file about to
    /// be claimed, `claiming`, counts as changed: nobody else may go on
    /// caching it).
    async fn targets(
        &self,
        conn: &Arc<Conn>,
        cx: &Ctx,
        fop: &Fop,
        claiming: Option<Gfid>,
    ) -> Vec<Target> {
        if let Some(gfid) = claiming.filter(|_| matches!(fop, Fop::Open { .. })) {
            return vec![(gfid, None)];
        }
        let mut t: Vec<Target> = match fop {
            Fop::Setattr { gfid, .. } | Fop::Write { gfid, .. } | Fop::Fallocate { gfid, .. } => {
                vec![(*gfid, None)]
            }
            // (The daemon's requests of the brick's layers change nothing.)
            Fop::Removexattr { gfid, name } if !name.starts_with(BRICK_CONTROL_PREFIX) => {
                vec![(*gfid, None)]
            }
            Fop::Setxattr { gfid, name, .. }
                if name != HOLD_XATTR && !name.starts_with(BRICK_CONTROL_PREFIX) =>
            {
                vec![(*gfid, None)]
            }
            // A heal settled: which copies are good changed.
            Fop::Clear { gfid, .. } => vec![(*gfid, None)],
            // A change that will blame copies it misses: the list of blamed
            // objects clients keep (`Fop::Blamed`) is about to grow.
            Fop::Lock {
                mark: Some(blame), ..
            } if *blame != 0 => vec![(Gfid::BLAMES, None)],
            Fop::Open { gfid, flags } if flags & libc::O_TRUNC != 0 => vec![(*gfid, None)],
            Fop::Create { parent, name, .. }
            | Fop::Mknod { parent, name, .. }
            | Fop::Mkdir { parent, name, .. }
            | Fop::Symlink { parent, name, .. } => vec![(*parent, Some(name.clone()))],
            Fop::Link {
                gfid,
                newparent,
                newname,
            } => vec![(*gfid, None), (*newparent, Some(newname.clone()))],
            Fop::Unlink { parent, name } | Fop::Rmdir { parent, name } => {
                let mut t = vec![(*parent, Some(name.clone()))];
                t.extend(self.named(conn, cx, *parent, name).await.map(|g| (g, None)));
                t
            }
            Fop::Rename {
                parent,
                name,
                newparent,
                newname,
                ..
            } => {
                let mut t = vec![
                    (*parent, Some(name.clone())),
                    (*newparent, Some(newname.clone())),
                ];
                t.extend(self.named(conn, cx, *parent, name).await.map(|g| (g, None)));
                t.extend(
                    self.named(conn, cx, *newparent, newname)
                        .await
                        .map(|g| (g, None)),
                );
                t
            }
            _ => Vec::new(),
        };
        t.dedup();
        t
    }
}

/// The objects a request names (a directory it looks in or changes, an
/// object it reads or changes): what another connection's claim on them
/// must be ended for. (Not a connection's own handles going: those wait
/// for nobody.)
fn named_objects(fop: &Fop) -> impl Iterator<Item = Gfid> {
    let own = matches!(
        fop,
        Fop::Release { .. } | Fop::Releasedir { .. } | Fop::Flush { .. }
    );
    let newparent = match fop {
        Fop::Rename { newparent, .. } | Fop::Link { newparent, .. } => Some(*newparent),
        _ => None,
    };
    std::iter::once(fop.gfid())
        .chain(newparent)
        .filter(move |g| *g != Gfid::NULL && !own)
}

/// Whether the recalls a change sends end the leases they recall: only
/// for a change of a file's data (or a file about to be claimed), after
/// which the client has nothing of the file left.
fn ends_leases(fop: &Fop, claiming: bool) -> bool {
    match fop {
        Fop::Write { .. } | Fop::Fallocate { .. } => true,
        Fop::Open { flags, .. } => claiming || flags & libc::O_TRUNC != 0,
        _ => false,
    }
}

/// The file a request opens (or makes) for writing on a user's behalf:
/// what it claims for the connection when claims are on.
fn opens_for_writing(cx: &Ctx, fop: &Fop) -> Option<Gfid> {
    match fop {
        Fop::Open { gfid, flags } | Fop::Create { gfid, flags, .. }
            if !cx.internal && flags & libc::O_ACCMODE != libc::O_RDONLY =>
        {
            Some(*gfid)
        }
        _ => None,
    }
}

/// Whether a request only reads: one whose answer may be asked again
/// (after claims it tells of have ended) without changing anything.
fn only_reads(fop: &Fop) -> bool {
    match fop {
        Fop::Lookup { .. }
        | Fop::Getattr { .. }
        | Fop::Readlink { .. }
        | Fop::Read { .. }
        | Fop::Readdir { .. }
        | Fop::Opendir { .. }
        | Fop::Getxattr { .. }
        | Fop::Listxattr { .. }
        | Fop::Parent { .. }
        | Fop::Resolve { .. } => true,
        Fop::Open { flags, .. } => {
            flags & libc::O_ACCMODE == libc::O_RDONLY && flags & libc::O_TRUNC == 0
        }
        _ => false,
    }
}

/// The objects a request's answer will tell a client about (what it may
/// cache), as far as the request says; None: nothing a client caches.
fn told_by(fop: &Fop) -> Option<Vec<Gfid>> {
    Some(match fop {
        // Bookkeeping and handles.
        Fop::Lock { .. }
        | Fop::Unlock { .. }
        | Fop::Clear { .. }
        | Fop::Pending { .. }
        | Fop::Checksum { .. }
        | Fop::Statfs { .. }
        | Fop::Flush { .. }
        | Fop::Fsync { .. }
        | Fop::Release { .. }
        | Fop::Releasedir { .. }
        | Fop::Lseek { .. } => return None,
        Fop::Resolve { .. } => Vec::new(),
        Fop::Blamed { .. } => vec![Gfid::BLAMES],
        Fop::Rename {
            parent, newparent, ..
        } => vec![*parent, *newparent],
        Fop::Link {
            gfid, newparent, ..
        } => vec![*gfid, *newparent],
        Fop::Create { parent, .. }
        | Fop::Mknod { parent, .. }
        | Fop::Mkdir { parent, .. }
        | Fop::Symlink { parent, .. } => vec![*parent, fop.gfid()],
        other => vec![other.gfid()],
    })
}

/// Adds the objects the answer itself tells of.
fn told_in(res: &FsResult<Reply>, out: &mut Vec<Gfid>) {
    match res {
        Ok(Reply::Entry(e)) | Ok(Reply::Created { entry: e, .. }) => out.push(e.attr.gfid),
        Ok(Reply::Entries(ents)) | Ok(Reply::Listed(ents, _)) => {
            out.extend(ents.iter().filter_map(|e| e.attr.as_ref()).map(|a| a.gfid))
        }
        _ => {}
    }
}

#[async_trait]
impl BrickXlator for Leases {
    fn reconfigure(&self, options: &mortar_core::Options) {
        *self.terms.lock().unwrap() = Terms::from_options(options);
    }

    fn dump(&self) -> Vec<String> {
        let (mut objects, mut leases, mut claims) = (0, 0, 0);
        for shard in &self.shards {
            let s = shard.lock().unwrap();
            objects += s.holders.len();
            leases += s.holders.values().map(Vec::len).sum::<usize>();
            claims += s.claims.len();
        }
        vec![format!(
            "objects under lease: {objects}, leases: {leases}, objects claimed: {claims}"
        )]
    }

    async fn call(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let terms = *self.terms.lock().unwrap();
        let Some(lease) = terms.lease else {
            return self.below.call(conn, cx, fop).await;
        };
        let looks = only_reads(&fop) || matches!(fop, Fop::Open { .. });
        self.end_claims(conn.id, named_objects(&fop), looks, terms.recall_timeout)
            .await;
        let claiming = opens_for_writing(cx, &fop).filter(|_| terms.claims);
        let targets = self.targets(conn, cx, &fop, claiming).await;
        let since = self.seq.load(Ordering::Acquire);
        let end = ends_leases(&fop, claiming.is_some());
        if !targets.is_empty() {
            self.recall(conn.id, &targets, 0, end, terms.recall_timeout)
                .await;
        }
        let told = told_by(&fop);
        // A missing name is cached too (a negative entry).
        let lookup = matches!(fop, Fop::Lookup { .. });
        let made_dir = match &fop {
            Fop::Mkdir { gfid, .. } => Some(*gfid),
            _ => None,
        };
        // A read whose answer tells of objects claimed by others is asked
        // again once their holders have landed what they answered ahead.
        // (Files are claimed from any open for writing with claims on, so a
        // claim may be taken while this read runs; directories only by
        // their makers, counted in `claimed`.)
        let claims_may_be = terms.claims || self.claimed.load(Ordering::Acquire) > 0;
        let again = (claims_may_be && only_reads(&fop)).then(|| fop.clone());
        let mut res = self.below.call(conn, cx, fop).await;
        // Nobody else can have seen the directory just made: its maker may
        // change names in it ahead.
        if let (Some(dir), Ok(_)) = (made_dir, &res) {
            let displaced = self.claim(conn.id, dir, Instant::now() + lease, false);
            self.recall_claims(displaced.into_iter().collect(), terms.recall_timeout)
                .await;
        }
        // A file opened for writing: its writer may close it before its
        // writes land. (Claimed before the leases granted meanwhile are
        // recalled, below: a read that ran meanwhile is either recalled or
        // sees the claim.)
        if let (Some(file), Ok(Reply::Opened { .. } | Reply::Created { .. })) = (claiming, &res) {
            let displaced = self.claim(conn.id, file, Instant::now() + lease, true);
            self.recall_claims(displaced.into_iter().collect(), terms.recall_timeout)
                .await;
        }
        if let Some(asked) = told {
            // The client's cache lasts `lease` from when it gets the
            // answer: the brick keeps the lease until any answer has
            // surely arrived.
            let grant = |res: &FsResult<Reply>, claims_too: bool| {
                if res.is_err() && !lookup {
                    return Vec::new();
                }
                let mut gfids = asked.clone();
                told_in(res, &mut gfids);
                let until = Instant::now() + lease + terms.recall_timeout;
                let mut ended = Vec::new();
                for g in gfids {
                    self.grant(conn.id, g, until, claims_too, &mut ended);
                }
                ended
            };
            let ended = grant(&res, again.is_some());
            if self.recall_claims(ended, terms.recall_timeout).await {
                if let Some(again) = again {
                    res = self.below.call(conn, cx, again).await;
                    grant(&res, false);
                }
            }
        }
        if !targets.is_empty() && res.is_ok() {
            self.recall(conn.id, &targets, since, end, terms.recall_timeout)
                .await;
        }
        res
    }

    fn connect(&self, conn: &Arc<Conn>) {
        self.conns.add(conn);
    }

    fn disconnect(&self, conn: &Conn) {
        self.conns.remove(conn.id);
        for sh in &self.shards {
            let mut sh = sh.lock().unwrap();
            let before = sh.claims.len();
            sh.claims.retain(|_, c| c.conn != conn.id);
            self.claimed
                .fetch_sub(before - sh.claims.len(), Ordering::AcqRel);
        }
        // Changes waiting for its answers go on.
        self.waiting
            .lock()
            .unwrap()
            .retain(|_, (c, _)| *c != conn.id);
    }

    fn recalled(&self, conn: &Conn, id: u64) {
        let mut w = self.waiting.lock().unwrap();
        if w.get(&id).is_some_and(|(c, _)| *c == conn.id) {
            if let Some((_, tx)) = w.remove(&id) {
                let _ = tx.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests;
