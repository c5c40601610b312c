//! An in-memory brick, for unit tests of the cluster translators without
//! root, FUSE or processes. It answers the fops a brick answers with the
//! same rules that matter to replicate and distribute: gfids given by the
//! client, ENOENT/EEXIST/ENOTEMPTY, handles per connection, anonymous
//! reads, locks per connection with contention notices, change sessions,
//! blame and the heal index. A test takes connections from it
//! (`MemBrick::connect`), takes it down and brings it back (`set_down`),
//! and inspects its copies (`content`, `blame`, `pending`).
//!
//! Not modelled: permissions, times beyond a change counter, xattr
//! namespaces, checksums (heal's block compare).

use async_trait::async_trait;
use mortar_core::fop::{DirEntry, StatFs, ANON_FH};
use mortar_core::{
    Attr, Ctx, Entry, Event, FileKind, Fop, FsError, FsResult, Gfid, Link, Name, Reply, Xlator,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Entries per readdir answer: small, so that tests page through listings.
mod serve;

const BATCH: usize = 4;

#[derive(Clone, Debug)]
struct Obj {
    kind: FileKind,
    perm: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    data: Vec<u8>,
    entries: BTreeMap<Vec<u8>, Gfid>,
    parent: Gfid,
    blame: u32,
    changes: i64,
    xattrs: BTreeMap<String, Vec<u8>>,
}

impl Obj {
    fn new(kind: FileKind, perm: u32, parent: Gfid) -> Obj {
        Obj {
            kind,
            perm,
            uid: 0,
            gid: 0,
            nlink: if kind == FileKind::Dir { 2 } else { 1 },
            data: Vec::new(),
            entries: BTreeMap::new(),
            parent,
            blame: 0,
            changes: 0,
            xattrs: BTreeMap::new(),
        }
    }
    fn attr(&self, gfid: Gfid) -> Attr {
        Attr {
            gfid,
            kind: self.kind,
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            size: self.data.len() as u64,
            blocks: self.data.len().div_ceil(512) as u64,
            blksize: 4096,
            atime: (self.changes, 0),
            mtime: (self.changes, 0),
            ctime: (self.changes, 0),
            blame: self.blame,
            linkto: (self.kind == FileKind::File && self.perm == mortar_core::fop::POINTER_PERM)
                .then(|| self.xattrs.get(mortar_core::fop::LINKTO_XATTR))
                .flatten()
                .and_then(|v| Some(u32::from_le_bytes(v.as_slice().try_into().ok()?))),
        }
    }
}

#[derive(Default)]
struct State {
    down: bool,
    objs: HashMap<Gfid, Obj>,
    /// Open handles: fh → (connection, object).
    fds: HashMap<u64, (u64, Gfid)>,
    next_fh: u64,
    locks: HashMap<Gfid, u64>,
    /// Connections waiting for a lock, served in arrival order.
    queue: HashMap<Gfid, std::collections::VecDeque<u64>>,
    sessions: HashMap<Gfid, HashSet<u64>>,
    index: HashSet<Gfid>,
    conns: HashMap<u64, Arc<Link>>,
    next_conn: u64,
    calls: u64,
    /// Scripted failures: fop name → (errno, how many more times).
    inject: HashMap<&'static str, (i32, usize)>,
    /// Writes that landed while their connection did not hold the lock.
    unlocked_writes: u64,
    /// Writes in flight (with `write_jitter`): object and byte range.
    writing: Vec<(Gfid, u64, u64)>,
    /// Writes that arrived while another write of some of their bytes was
    /// in flight: they may land in either order.
    overlapping_writes: u64,
    /// Writes wait up to this long before they are applied (a disk whose
    /// latency varies): requests sent together may land in any order.
    write_jitter: std::time::Duration,
    /// The next call of this fop ends the brick: applied first when true
    /// (`MemBrick::die_on`).
    die: Option<(&'static str, bool)>,
}

pub struct MemBrick {
    name: String,
    state: Mutex<State>,
    unlocked: tokio::sync::Notify,
}

/// One client connection to a `MemBrick`: the leaf translator tests use.
pub struct MemConn {
    brick: Arc<MemBrick>,
    id: u64,
    link: Arc<Link>,
}

fn err(errno: i32) -> FsError {
    FsError::errno(errno)
}

impl MemBrick {
    pub fn new(name: &str) -> Arc<MemBrick> {
        let mut st = State {
            next_fh: 1,
            next_conn: 1,
            ..Default::default()
        };
        st.objs
            .insert(Gfid::ROOT, Obj::new(FileKind::Dir, 0o755, Gfid::ROOT));
        Arc::new(MemBrick {
            name: name.into(),
            state: Mutex::new(st),
            unlocked: tokio::sync::Notify::new(),
        })
    }

    /// A new connection, emitting on `link`; up once started.
    pub fn connect(self: &Arc<Self>, link: Arc<Link>) -> Arc<MemConn> {
        let id = {
            let mut st = self.state.lock().unwrap();
            st.next_conn += 1;
            let id = st.next_conn;
            st.conns.insert(id, link.clone());
            id
        };
        Arc::new(MemConn {
            brick: self.clone(),
            id,
            link,
        })
    }

    /// Takes the brick down (its connections end: handles closed, locks
    /// released, sessions left unsettled in the index) or brings it back.
    pub fn set_down(&self, down: bool) {
        let links: Vec<Arc<Link>> = {
            let mut st = self.state.lock().unwrap();
            if st.down == down {
                return;
            }
            st.down = down;
            st.die = None;
            if down {
                st.fds.clear();
                st.locks.clear();
                st.sessions.clear();
            }
            st.conns.values().cloned().collect()
        };
        self.unlocked.notify_waiters();
        for l in links {
            l.emit(if down { Event::Down } else { Event::Up });
        }
    }

    /// The object at `path` (names from the root): its kind and data.
    pub fn content(&self, path: &[&str]) -> Option<(FileKind, Vec<u8>)> {
        let st = self.state.lock().unwrap();
        let mut g = Gfid::ROOT;
        for n in path {
            g = *st.objs.get(&g)?.entries.get(n.as_bytes())?;
        }
        st.objs.get(&g).map(|o| (o.kind, o.data.clone()))
    }

    /// Every name under the root, recursively, with its object's gfid.
    pub fn tree(&self) -> BTreeMap<String, Gfid> {
        fn walk(st: &State, dir: Gfid, prefix: &str, out: &mut BTreeMap<String, Gfid>) {
            let Some(d) = st.objs.get(&dir) else { return };
            for (n, g) in &d.entries {
                let p = format!("{prefix}/{}", String::from_utf8_lossy(n));
                out.insert(p.clone(), *g);
                walk(st, *g, &p, out);
            }
        }
        let st = self.state.lock().unwrap();
        let mut out = BTreeMap::new();
        walk(&st, Gfid::ROOT, "", &mut out);
        out
    }

    /// Every distribute pointer under the root: its path and the set it
    /// names.
    pub fn pointers(&self) -> BTreeMap<String, u32> {
        let tree = self.tree();
        let st = self.state.lock().unwrap();
        tree.into_iter()
            .filter_map(|(p, g)| Some((p, st.objs.get(&g)?.attr(g).linkto?)))
            .collect()
    }

    /// The replica positions this copy of `gfid` blames.
    pub fn blame(&self, gfid: Gfid) -> u32 {
        self.state
            .lock()
            .unwrap()
            .objs
            .get(&gfid)
            .map_or(0, |o| o.blame)
    }

    /// The heal index.
    pub fn pending(&self) -> HashSet<Gfid> {
        self.state.lock().unwrap().index.clone()
    }

    /// What the self-heal daemon achieves, at once: this copy becomes
    /// `good`'s copy, and no copy blames another any more.
    pub fn heal_from(&self, good: &MemBrick, all: &[Arc<MemBrick>]) {
        let objs = good.state.lock().unwrap().objs.clone();
        self.state.lock().unwrap().objs = objs;
        for b in all {
            let mut st = b.state.lock().unwrap();
            for o in st.objs.values_mut() {
                o.blame = 0;
            }
            st.index.clear();
        }
    }

    /// Makes the next `times` calls of `fop` (its name, `Fop::name`) fail
    /// with `errno` before they change anything: a scripted brick.
    /// Makes each write wait a random time up to `max` before it is
    /// applied (`State::write_jitter`).
    pub fn set_write_jitter(&self, max: std::time::Duration) {
        self.state.lock().unwrap().write_jitter = max;
    }

    /// How many writes landed while their connection did not hold the
    /// file's lock (replicate sends none: each would be a write that may
    /// meet another client's on the copies in a different order).
    pub fn unlocked_writes(&self) -> u64 {
        self.state.lock().unwrap().unlocked_writes
    }

    /// How many writes arrived while another write of some of their bytes
    /// was in flight (with `set_write_jitter`): such writes may land in
    /// different orders on different copies.
    pub fn overlapping_writes(&self) -> u64 {
        self.state.lock().unwrap().overlapping_writes
    }

    /// Makes the next call of `fop` the brick's last: it is applied (when
    /// `applied`) or not, then the brick goes down and the call is
    /// answered ENOTCONN, as a brick killed with the change in flight.
    pub fn die_on(&self, fop: &'static str, applied: bool) {
        self.state.lock().unwrap().die = Some((fop, applied));
    }

    pub fn inject(&self, fop: &'static str, errno: i32, times: usize) {
        self.state
            .lock()
            .unwrap()
            .inject
            .insert(fop, (errno, times));
    }

    /// Handles open on this brick, all connections together.
    pub fn open_handles(&self) -> usize {
        self.state.lock().unwrap().fds.len()
    }

    pub fn calls(&self) -> u64 {
        self.state.lock().unwrap().calls
    }

    fn end_session(st: &mut State, conn: u64, gfid: Gfid) {
        let empty = match st.sessions.get_mut(&gfid) {
            Some(s) => {
                s.remove(&conn);
                s.is_empty()
            }
            None => return,
        };
        if empty {
            st.sessions.remove(&gfid);
            if st.objs.get(&gfid).is_none_or(|o| o.blame == 0) {
                st.index.remove(&gfid);
            }
        }
    }

    /// Drops an object whose last name went and that no handle holds.
    fn reap(st: &mut State, gfid: Gfid) {
        let gone = st.objs.get(&gfid).is_some_and(|o| o.nlink == 0)
            && !st.fds.values().any(|(_, g)| *g == gfid);
        if gone {
            st.objs.remove(&gfid);
        }
    }

    fn new_obj(st: &mut State, parent: Gfid, name: &Name, gfid: Gfid, obj: Obj) -> FsResult<Attr> {
        let p = st.objs.get(&parent).ok_or(err(libc::ESTALE))?;
        if p.kind != FileKind::Dir {
            return Err(err(libc::ENOTDIR));
        }
        if p.entries.contains_key(name.as_bytes()) {
            return Err(err(libc::EEXIST));
        }
        if st.objs.contains_key(&gfid) {
            return Err(err(libc::EEXIST));
        }
        let is_dir = obj.kind == FileKind::Dir;
        let attr = obj.attr(gfid);
        st.objs.insert(gfid, obj);
        let p = st.objs.get_mut(&parent).unwrap();
        p.entries.insert(name.as_bytes().to_vec(), gfid);
        p.changes += 1;
        if is_dir {
            p.nlink += 1;
        }
        Ok(attr)
    }

    fn remove_name(st: &mut State, parent: Gfid, name: &Name, dir: bool) -> FsResult<()> {
        let p = st.objs.get(&parent).ok_or(err(libc::ESTALE))?;
        let g = *p.entries.get(name.as_bytes()).ok_or(err(libc::ENOENT))?;
        let o = st.objs.get(&g).ok_or(err(libc::ESTALE))?;
        match (dir, o.kind == FileKind::Dir) {
            (true, false) => return Err(err(libc::ENOTDIR)),
            (false, true) => return Err(err(libc::EISDIR)),
            (true, true) if !o.entries.is_empty() => return Err(err(libc::ENOTEMPTY)),
            _ => {}
        }
        let p = st.objs.get_mut(&parent).unwrap();
        p.entries.remove(name.as_bytes());
        p.changes += 1;
        if dir {
            p.nlink -= 1;
        }
        let o = st.objs.get_mut(&g).unwrap();
        o.nlink = if dir { 0 } else { o.nlink - 1 };
        Self::reap(st, g);
        Ok(())
    }

    fn obj(st: &mut State, gfid: Gfid) -> FsResult<&mut Obj> {
        st.objs.get_mut(&gfid).ok_or(err(libc::ESTALE))
    }

    fn handle(st: &State, conn: u64, gfid: Gfid, fh: u64) -> FsResult<Gfid> {
        if fh == ANON_FH {
            return st
                .objs
                .contains_key(&gfid)
                .then_some(gfid)
                .ok_or(err(libc::ESTALE));
        }
        match st.fds.get(&fh) {
            Some((c, g)) if *c == conn => Ok(*g),
            _ => Err(err(libc::EBADF)),
        }
    }

    fn open(st: &mut State, conn: u64, gfid: Gfid) -> u64 {
        let fh = st.next_fh;
        st.next_fh += 1;
        st.fds.insert(fh, (conn, gfid));
        fh
    }

    /// Every fop but a lock that must wait.
    fn serve(&self, conn: u64, fop: Fop) -> FsResult<Reply> {
        let st = &mut *self.state.lock().unwrap();
        if st.down {
            return Err(FsError::notconn(format!("{} is down", self.name)));
        }
        st.calls += 1;
        if let Some((errno, left)) = st.inject.get_mut(fop.name()) {
            if *left > 0 {
                *left -= 1;
                return Err(FsError::new(*errno, "injected"));
            }
        }
        match fop {
            Fop::Lookup { .. }
            | Fop::Getattr { .. }
            | Fop::Setattr { .. }
            | Fop::Create { .. }
            | Fop::Mknod { .. }
            | Fop::Mkdir { .. }
            | Fop::Symlink { .. }
            | Fop::Readlink { .. }
            | Fop::Unlink { .. }
            | Fop::Rmdir { .. }
            | Fop::Link { .. }
            | Fop::Rename { .. } => Self::serve_names(st, conn, fop),
            Fop::Open { .. }
            | Fop::Opendir { .. }
            | Fop::Read { .. }
            | Fop::Write { .. }
            | Fop::Fallocate { .. }
            | Fop::Lseek { .. }
            | Fop::Flush { .. }
            | Fop::Fsync { .. }
            | Fop::Release { .. }
            | Fop::Releasedir { .. }
            | Fop::Readdir { .. }
            | Fop::Statfs { .. } => Self::serve_data(st, conn, fop),
            _ => self.serve_meta(st, conn, fop),
        }
    }
}

/// A lock request's place in the queue, left when it is granted or given up.
struct Queued<'a> {
    brick: &'a MemBrick,
    conn: u64,
    gfid: Gfid,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let mut st = self.brick.state.lock().unwrap();
        if let Some(q) = st.queue.get_mut(&self.gfid) {
            q.retain(|&c| c != self.conn);
            if q.is_empty() {
                st.queue.remove(&self.gfid);
            }
        }
        drop(st);
        self.brick.unlocked.notify_waiters();
    }
}

/// A connection that ends closes its handles and gives up its locks; its
/// change sessions end unsettled (their objects stay in the index).
impl Drop for MemConn {
    fn drop(&mut self) {
        let mut st = self.brick.state.lock().unwrap();
        let id = self.id;
        st.conns.remove(&id);
        st.fds.retain(|_, (c, _)| *c != id);
        st.locks.retain(|_, c| *c != id);
        for s in st.sessions.values_mut() {
            s.remove(&id);
        }
        st.sessions.retain(|_, s| !s.is_empty());
        drop(st);
        self.brick.unlocked.notify_waiters();
    }
}

#[async_trait]
impl Xlator for MemConn {
    fn name(&self) -> String {
        format!("{}#{}", self.brick.name, self.id)
    }

    fn start(&self) {
        if !self.brick.state.lock().unwrap().down {
            self.link.emit(Event::Up);
        }
    }

    async fn call(&self, _cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let die = {
            let mut st = self.brick.state.lock().unwrap();
            match st.die {
                Some((name, applied)) if name == fop.name() && !st.down => {
                    st.die = None;
                    Some(applied)
                }
                _ => None,
            }
        };
        if let Some(applied) = die {
            if applied {
                let _ = self.brick.serve(self.id, fop);
            }
            self.brick.set_down(true);
            return Err(FsError::notconn(format!(
                "{} died with the call in flight",
                self.brick.name
            )));
        }
        if let Fop::Write {
            gfid,
            offset,
            ref data,
            ..
        } = fop
        {
            let max = self.brick.state.lock().unwrap().write_jitter;
            if !max.is_zero() {
                let range = (gfid, offset, offset + data.len() as u64);
                {
                    let mut st = self.brick.state.lock().unwrap();
                    if st
                        .writing
                        .iter()
                        .any(|&(g, s, e)| g == gfid && s < range.2 && range.1 < e)
                    {
                        st.overlapping_writes += 1;
                    }
                    st.writing.push(range);
                }
                let us = fastrand::u64(0..=max.as_micros() as u64);
                tokio::time::sleep(std::time::Duration::from_micros(us)).await;
                let r = self.brick.serve(self.id, fop);
                let mut st = self.brick.state.lock().unwrap();
                if let Some(i) = st.writing.iter().position(|w| *w == range) {
                    st.writing.swap_remove(i);
                }
                return r;
            }
        }
        if let Fop::Lock { gfid, wait, .. } = fop {
            // Queued (when waiting) until granted or given up.
            let _queued = Queued {
                brick: &self.brick,
                conn: self.id,
                gfid,
            };
            loop {
                let waiting = self.brick.unlocked.notified();
                let holder = {
                    let mut st = self.brick.state.lock().unwrap();
                    if st.down {
                        return Err(FsError::notconn(format!("{} is down", self.brick.name)));
                    }
                    let held = st.locks.get(&gfid).copied().filter(|&h| h != self.id);
                    let q = st.queue.entry(gfid).or_default();
                    let first = q.front().is_none_or(|&c| c == self.id);
                    if held.is_none() && first {
                        // Granted, in the same breath as the check.
                        q.retain(|&c| c != self.id);
                        st.locks.insert(gfid, self.id);
                        None
                    } else {
                        if wait && !q.contains(&self.id) {
                            q.push_back(self.id);
                        }
                        let owner = held.or_else(|| q.front().copied());
                        Some(owner.and_then(|h| st.conns.get(&h).cloned()))
                    }
                };
                let Some(holder) = holder else { break };
                if let Some(h) = holder {
                    h.emit(Event::Contention(gfid));
                }
                if !wait {
                    return Err(err(libc::EAGAIN));
                }
                waiting.await;
            }
        }
        self.brick.serve(self.id, fop)
    }
}
