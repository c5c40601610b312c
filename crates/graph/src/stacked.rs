//! A brick for unit tests that is the real thing: the brick process's
//! stack of translators (the table's brick rows: posix, index, locks,
//! hold, leases, profile) over a brick directory in a temporary
//! directory, served in-process to a client's leaf translator instead of
//! over the wire. What replicate, distribute and the healer see through
//! it is what they see from a brick process: real locks and contention
//! notices, real change sessions and blame, the heal index on disk, real
//! leases and recalls. Its directory is in memory (under /dev/shm, a
//! tmpfs, where there is one). A test takes it down and brings it back
//! (`set_down`: the process ends, and a new one starts over the same
//! directory) and reads its copies (`content`, `blame`).

use mortar_brick::{BrickEnv, Conn, ConnId, Notice, Stack};
use mortar_core::xlator::Ack;
use mortar_core::{Ctx, Event, FileKind, Fop, FsError, FsResult, Gfid, Link, Reply, Xlator};
use mortar_storage::posix::{FdTable, Posix};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// A brick directory under the real brick stack.
pub struct StackBrick {
    name: String,
    arbiter: bool,
    dir: tempfile::TempDir,
    /// The running "process": its stack; None while down.
    up: Mutex<Option<Arc<Stack>>>,
    /// Scripted failures: fop name → (errno, how many more times).
    inject: Mutex<std::collections::HashMap<&'static str, (i32, usize)>>,
    /// The next call of this fop ends the brick (applied first when true).
    die: Mutex<Option<(&'static str, bool)>>,
    /// Writes wait up to this long before they reach the stack (a disk
    /// whose latency varies): requests sent together land in any order.
    write_jitter: Mutex<std::time::Duration>,
    /// How long each read waits before it reaches the stack.
    read_delay: Mutex<std::time::Duration>,
    write_delay: Mutex<std::time::Duration>,
    /// `storage.reserve` as set here, and the running process's posix.
    reserve: Mutex<Option<mortar_core::options::ShareOrSize>>,
    posix: Mutex<Option<Arc<Posix>>>,
    /// `storage.checksums` as set here.
    checksums: std::sync::atomic::AtomicBool,
    /// Writes in flight (with jitter): object and byte range.
    writing: Mutex<Vec<(Gfid, u64, u64)>>,
    /// Writes that arrived while another write of some of their bytes was
    /// in flight: they may land in either order.
    overlapping: AtomicU64,
    conns: Mutex<Vec<Weak<StackConn>>>,
    next_conn: AtomicU64,
    calls: AtomicU64,
    /// Bytes asked for by reads.
    read: AtomicU64,
}

/// One client connection to a `StackBrick`: the leaf translator of a
/// test's graph, in the place of protocol/client.
pub struct StackConn {
    brick: Arc<StackBrick>,
    link: Arc<Link>,
    /// The brick's side of the connection while the brick is up.
    conn: Mutex<Option<Arc<Conn>>>,
}

impl StackBrick {
    /// A new, empty brick (`arbiter`: the stack of an arbiter brick).
    pub fn new(name: &str, arbiter: bool) -> Arc<StackBrick> {
        // In memory where the machine has a tmpfs for it (xattrs and all),
        // else in the temporary directory.
        let shm = std::path::Path::new("/dev/shm");
        let dir = match shm.is_dir() {
            true => tempfile::tempdir_in(shm).or_else(|_| tempfile::tempdir()),
            false => tempfile::tempdir(),
        }
        .expect("a temporary directory");
        let b = Arc::new(StackBrick {
            name: name.to_string(),
            arbiter,
            dir,
            up: Mutex::new(None),
            inject: Mutex::default(),
            die: Mutex::new(None),
            write_jitter: Mutex::default(),
            read_delay: Mutex::default(),
            write_delay: Mutex::default(),
            reserve: Mutex::default(),
            posix: Mutex::default(),
            checksums: Default::default(),
            writing: Mutex::default(),
            overlapping: AtomicU64::new(0),
            conns: Mutex::new(Vec::new()),
            next_conn: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            read: AtomicU64::new(0),
        });
        std::fs::create_dir(b.root()).expect("the brick directory");
        Posix::prepare(&b.root()).expect("the brick directory is prepared");
        *b.up.lock().unwrap() = Some(b.start());
        b
    }

    /// The brick directory.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("brick")
    }

    /// A brick process's start: the stack built over the directory.
    fn start(&self) -> Arc<Stack> {
        let posix = Arc::new(Posix::open(&self.root()).expect("the brick opens"));
        if let Some(r) = *self.reserve.lock().unwrap() {
            posix.set_reserve(r);
        }
        posix.set_checksums(self.checksums.load(Ordering::Relaxed));
        *self.posix.lock().unwrap() = Some(posix.clone());
        let env = BrickEnv {
            posix,
            arbiter: self.arbiter,
        };
        Arc::new(Stack::build(&env, crate::table::brick_layers()).expect("the brick stack"))
    }

    /// A new connection, emitting on `link`; up once started.
    pub fn connect(self: &Arc<Self>, link: Arc<Link>) -> Arc<StackConn> {
        let c = Arc::new(StackConn {
            brick: self.clone(),
            link,
            conn: Mutex::new(None),
        });
        if let Some(stack) = self.stack() {
            c.open(&stack);
        }
        self.conns.lock().unwrap().push(Arc::downgrade(&c));
        c
    }

    fn stack(&self) -> Option<Arc<Stack>> {
        self.up.lock().unwrap().clone()
    }

    fn live_conns(&self) -> Vec<Arc<StackConn>> {
        let mut conns = self.conns.lock().unwrap();
        conns.retain(|c| c.strong_count() > 0);
        conns.iter().filter_map(Weak::upgrade).collect()
    }

    /// Ends the brick process (its connections end: handles closed, locks
    /// released, leases dropped, sessions left unsettled in the index), or
    /// starts a new one over the same directory.
    pub fn set_down(&self, down: bool) {
        // A death scripted for a call that never came is forgotten.
        *self.die.lock().unwrap() = None;
        let stack = {
            let mut up = self.up.lock().unwrap();
            if up.is_some() != down {
                return;
            }
            match down {
                true => up.take(),
                false => {
                    *up = Some(self.start());
                    up.clone()
                }
            }
        };
        let stack = stack.expect("a stack");
        if down {
            self.end_conns(&stack);
            return;
        }
        for c in self.live_conns() {
            c.open(&stack);
            c.link.emit(Event::Up);
        }
    }

    /// Ends the brick process as a kill does: unlike `set_down`, its
    /// translators are not told that connections end, so nothing they
    /// keep in memory is written down (a change session's ranges).
    pub fn kill(&self) {
        *self.die.lock().unwrap() = None;
        if self.up.lock().unwrap().take().is_none() {
            return;
        }
        for c in self.live_conns() {
            c.conn.lock().unwrap().take();
            c.link.emit(Event::Down);
        }
    }

    /// Ends every client connection, as a client killed: locks let go,
    /// sessions left unsettled in the index; requests not yet delivered
    /// (delayed) are lost.
    pub fn cut_clients(&self) {
        if let Some(stack) = self.stack() {
            self.end_conns(&stack);
        }
    }

    /// Ends the brick's side of every client connection and tells the
    /// clients their brick went down.
    fn end_conns(&self, stack: &Stack) {
        for c in self.live_conns() {
            if let Some(conn) = c.conn.lock().unwrap().take() {
                stack.disconnect(&conn);
            }
            c.link.emit(Event::Down);
        }
    }

    pub fn is_down(&self) -> bool {
        self.up.lock().unwrap().is_none()
    }

    /// Requests the brick has been asked so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Bytes its clients have asked to read or to checksum.
    pub fn read_bytes(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// The file or directory at `path` (names from the brick's root) as
    /// the brick directory has it: its kind, and a file's data.
    pub fn content(&self, path: &[&str]) -> Option<(FileKind, Vec<u8>)> {
        let p: PathBuf = path.iter().fold(self.root(), |p, n| p.join(n));
        let meta = std::fs::symlink_metadata(&p).ok()?;
        if meta.is_dir() {
            Some((FileKind::Dir, Vec::new()))
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&p).ok()?;
            Some((
                FileKind::Symlink,
                target.into_os_string().into_encoded_bytes(),
            ))
        } else {
            Some((FileKind::File, std::fs::read(&p).ok()?))
        }
    }

    /// The blame (the copies this one says missed changes) of the object
    /// `gfid`, read from the brick directory; 0 if it has no such object.
    pub fn blame(&self, gfid: Gfid) -> u32 {
        let posix = Posix::open(&self.root()).expect("the brick opens");
        posix
            .resolve(gfid)
            .and_then(|fd| mortar_storage::posix::read_blame(&*fd))
            .unwrap_or(0)
    }

    /// The heal index: the objects with a change session open or blame
    /// recorded, as the brick directory lists them.
    pub fn pending(&self) -> std::collections::HashSet<Gfid> {
        let dir = self.root().join(mortar_storage::posix::PENDING_REL);
        std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| {
                    let name = e.ok()?.file_name();
                    let u = uuid::Uuid::parse_str(name.to_str()?).ok()?;
                    Gfid::from_slice(u.as_bytes())
                })
                .collect()
            })
            .unwrap_or_default()
    }

    /// Every name under the root (not the brick's own `.mortar`),
    /// recursively, with its object's gfid.
    pub fn tree(&self) -> std::collections::BTreeMap<String, Gfid> {
        fn walk(dir: &Path, prefix: &str, out: &mut std::collections::BTreeMap<String, Gfid>) {
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if prefix.is_empty() && name == mortar_storage::posix::META_DIR {
                    continue;
                }
                let p = format!("{prefix}/{name}");
                let mut raw = [0u8; 16];
                let gfid =
                    rustix::fs::lgetxattr(e.path(), mortar_storage::posix::GFID_XATTR, &mut raw)
                        .ok()
                        .and_then(|n| Gfid::from_slice(&raw[..n]))
                        .unwrap_or(Gfid::ROOT);
                out.insert(p.clone(), gfid);
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&e.path(), &p, out);
                }
            }
        }
        let mut out = std::collections::BTreeMap::new();
        walk(&self.root(), "", &mut out);
        out
    }

    /// The distribute pointers under the root: path → the set they name.
    pub fn pointers(&self) -> std::collections::BTreeMap<String, u32> {
        use std::os::unix::fs::PermissionsExt;
        self.tree()
            .into_keys()
            .filter_map(|p| {
                let path = self.root().join(&p[1..]);
                let meta = std::fs::symlink_metadata(&path).ok()?;
                if !meta.is_file()
                    || meta.permissions().mode() & 0o7777 != mortar_core::fop::POINTER_PERM
                {
                    return None;
                }
                let mut v = [0u8; 8];
                let n =
                    rustix::fs::lgetxattr(&path, mortar_core::fop::LINKTO_XATTR, &mut v).ok()?;
                let set = u32::from_le_bytes(v[..n].try_into().ok()?);
                Some((p, set))
            })
            .collect()
    }

    /// Handles open on this brick, all connections together.
    pub fn open_handles(&self) -> usize {
        self.live_conns()
            .iter()
            .filter_map(|c| c.conn.lock().unwrap().clone())
            .map(|c| c.fds.len())
            .sum()
    }

    /// What the self-heal daemon achieves, at once: this copy becomes
    /// `good`'s copy (the directory copied whole, a new brick process
    /// over it), and no copy blames another any more.
    pub fn heal_from(&self, good: &StackBrick, all: &[Arc<StackBrick>]) {
        for b in all {
            b.set_down(true);
        }
        let root = self.root();
        std::fs::remove_dir_all(&root).expect("the stale copy removed");
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(good.root())
            .arg(&root)
            .status()
            .expect("cp runs");
        assert!(copied.success(), "cp -a of the good copy failed");
        for b in all {
            b.forget_blame();
            b.set_down(false);
        }
    }

    /// Removes every blame record and heal index entry (the brick down).
    fn forget_blame(&self) {
        fn walk(dir: &Path) {
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            for e in rd.flatten() {
                let _ = rustix::fs::lremovexattr(e.path(), mortar_storage::posix::BLAME_XATTR);
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&e.path());
                }
            }
        }
        let root = self.root();
        let _ = rustix::fs::lremovexattr(&root, mortar_storage::posix::BLAME_XATTR);
        walk(&root);
        let pending = root.join(mortar_storage::posix::PENDING_REL);
        if let Ok(rd) = std::fs::read_dir(&pending) {
            for e in rd.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// Makes each write wait a random time up to `max` before it reaches
    /// the stack.
    pub fn set_write_jitter(&self, max: std::time::Duration) {
        *self.write_jitter.lock().unwrap() = max;
    }

    /// Makes each read wait `d` before it reaches the stack (a brick that
    /// answers late).
    pub fn set_read_delay(&self, d: std::time::Duration) {
        *self.read_delay.lock().unwrap() = d;
    }

    /// Makes each write wait `d` before it reaches the stack (a brick
    /// whose disk writes slowly).
    pub fn set_write_delay(&self, d: std::time::Duration) {
        *self.write_delay.lock().unwrap() = d;
    }

    /// Sets the room the brick keeps free (`storage.reserve`), now and
    /// after restarts: `Share(100)` makes a brick with no room.
    pub fn set_reserve(&self, r: mortar_core::options::ShareOrSize) {
        *self.reserve.lock().unwrap() = Some(r);
        if let Some(p) = &*self.posix.lock().unwrap() {
            p.set_reserve(r);
        }
    }

    /// Keeps and checks block checksums (`storage.checksums`), now and
    /// after restarts.
    pub fn set_checksums(&self, on: bool) {
        self.checksums.store(on, Ordering::Relaxed);
        if let Some(p) = &*self.posix.lock().unwrap() {
            p.set_checksums(on);
        }
    }

    /// How many writes arrived while another write of some of their bytes
    /// was in flight (with `set_write_jitter`): such writes may land in
    /// different orders on different copies.
    pub fn overlapping_writes(&self) -> u64 {
        self.overlapping.load(Ordering::Relaxed)
    }

    /// Makes the next `times` calls of `fop` (its name) fail with `errno`
    /// before they reach the brick: a scripted brick.
    pub fn inject(&self, fop: &'static str, errno: i32, times: usize) {
        self.inject.lock().unwrap().insert(fop, (errno, times));
    }

    /// Makes the next call of `fop` the brick process's last: carried out
    /// (when `applied`) or not, then the process ends and the call is
    /// answered ENOTCONN, as a brick killed with the change in flight.
    pub fn die_on(&self, fop: &'static str, applied: bool) {
        *self.die.lock().unwrap() = Some((fop, applied));
    }

    /// Asks the brick itself (on a connection of its own, as the root).
    pub async fn ask(self: &StackBrick, fop: Fop) -> FsResult<Reply> {
        let stack = self
            .stack()
            .ok_or_else(|| FsError::notconn("the brick is down"))?;
        let conn = Arc::new(Conn {
            id: u64::MAX,
            peer: "test".into(),
            fds: FdTable::default(),
            notice: Box::new(|_| {}),
            close: Box::new(|| {}),
        });
        stack.connect(&conn);
        let r = stack.top().call(&conn, &Ctx::root(), fop).await;
        stack.disconnect(&conn);
        r
    }

    /// The path of the brick directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl StackConn {
    /// Opens the brick's side of this connection on `stack`.
    fn open(self: &Arc<Self>, stack: &Arc<Stack>) {
        let id: ConnId = self.brick.next_conn.fetch_add(1, Ordering::Relaxed) + 1;
        let me = Arc::downgrade(self);
        let recalls = Arc::downgrade(stack);
        let conn = Arc::new(Conn {
            id,
            peer: format!("{}#{id}", self.brick.name),
            fds: FdTable::default(),
            notice: Box::new(move |n| {
                let Some(c) = me.upgrade() else { return };
                match n {
                    Notice::Contention(g) => c.link.emit(Event::Contention(g)),
                    Notice::Recall {
                        id: recall,
                        gfid,
                        name,
                        claim,
                    } => {
                        let (stack, c2) = (recalls.clone(), Arc::downgrade(&c));
                        let ack = Ack::new(move || {
                            let (Some(stack), Some(c)) = (stack.upgrade(), c2.upgrade()) else {
                                return;
                            };
                            let conn = c.conn.lock().unwrap().clone();
                            if let Some(conn) = conn {
                                stack.recalled(&conn, recall);
                            }
                        });
                        c.link.emit(Event::Recall {
                            gfid,
                            name,
                            claim,
                            ack,
                        });
                    }
                }
            }),
            close: Box::new(|| {}),
        });
        stack.connect(&conn);
        *self.conn.lock().unwrap() = Some(conn);
    }
}

impl Drop for StackConn {
    fn drop(&mut self) {
        let conn = self.conn.lock().unwrap().take();
        if let (Some(conn), Some(stack)) = (conn, self.brick.stack()) {
            stack.disconnect(&conn);
        }
    }
}

#[async_trait::async_trait]
impl Xlator for StackConn {
    fn name(&self) -> String {
        format!("{}-client", self.brick.name)
    }

    fn start(&self) {
        if !self.brick.is_down() {
            self.link.emit(Event::Up);
        }
    }

    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let conn = self.conn.lock().unwrap().clone();
        let (Some(conn), Some(stack)) = (conn, self.brick.stack()) else {
            return Err(FsError::notconn(format!("{} is down", self.brick.name)));
        };
        self.brick.calls.fetch_add(1, Ordering::Relaxed);
        let asked = match fop {
            Fop::Read { size, .. } => size as u64,
            Fop::Checksum { block, count, .. } => block as u64 * count as u64,
            _ => 0,
        };
        self.brick.read.fetch_add(asked, Ordering::Relaxed);
        let name = fop.name();
        if let Some((errno, left)) = self.brick.inject.lock().unwrap().get_mut(name) {
            if *left > 0 {
                *left -= 1;
                return Err(FsError::new(*errno, format!("{name} failed (injected)")));
            }
        }
        let die = {
            let mut die = self.brick.die.lock().unwrap();
            match *die {
                Some((f, applied)) if f == name => {
                    *die = None;
                    Some(applied)
                }
                _ => None,
            }
        };
        if let Some(applied) = die {
            if applied {
                let _ = stack.top().call(&conn, cx, fop).await;
            }
            self.brick.set_down(true);
            return Err(FsError::notconn(format!(
                "{} died with the call in flight",
                self.brick.name
            )));
        }
        let delay = match fop {
            Fop::Read { .. } => *self.brick.read_delay.lock().unwrap(),
            Fop::Write { .. } => *self.brick.write_delay.lock().unwrap(),
            _ => std::time::Duration::ZERO,
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
            // A connection that ended meanwhile never delivers it.
            if self.conn.lock().unwrap().is_none() {
                return Err(FsError::notconn("the connection ended"));
            }
        }
        let max = *self.brick.write_jitter.lock().unwrap();
        let Fop::Write {
            gfid,
            offset,
            ref data,
            ..
        } = fop
        else {
            return stack.top().call(&conn, cx, fop).await;
        };
        if max.is_zero() {
            return stack.top().call(&conn, cx, fop).await;
        }
        let range = (gfid, offset, offset + data.len() as u64);
        {
            let mut writing = self.brick.writing.lock().unwrap();
            if writing
                .iter()
                .any(|&(g, s, e)| g == gfid && s < range.2 && range.1 < e)
            {
                self.brick.overlapping.fetch_add(1, Ordering::Relaxed);
            }
            writing.push(range);
        }
        let us = fastrand::u64(0..=max.as_micros() as u64);
        tokio::time::sleep(std::time::Duration::from_micros(us)).await;
        let r = stack.top().call(&conn, cx, fop).await;
        let mut writing = self.brick.writing.lock().unwrap();
        if let Some(i) = writing.iter().position(|w| *w == range) {
            writing.swap_remove(i);
        }
        r
    }
}

/// `count` bricks under the real stack, named s0, s1, ...
pub fn stack_bricks(count: usize) -> Vec<Arc<StackBrick>> {
    (0..count)
        .map(|i| StackBrick::new(&format!("s{i}"), false))
        .collect()
}

/// Connects a description's bricks (`index`) to `bricks`.
pub fn stack_env(bricks: &[Arc<StackBrick>]) -> crate::Env {
    let b = bricks.to_vec();
    crate::Env {
        connect: Arc::new(move |d: &mortar_core::desc::XlDesc, link| {
            let i: usize = d.param("index").unwrap_or("0").parse()?;
            Ok(b[i].connect(link) as Arc<dyn Xlator>)
        }),
    }
}
