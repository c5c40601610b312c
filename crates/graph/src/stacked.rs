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
    conns: Mutex<Vec<Weak<StackConn>>>,
    next_conn: AtomicU64,
    calls: AtomicU64,
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
            conns: Mutex::new(Vec::new()),
            next_conn: AtomicU64::new(0),
            calls: AtomicU64::new(0),
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
        for c in self.live_conns() {
            if down {
                if let Some(conn) = c.conn.lock().unwrap().take() {
                    stack.disconnect(&conn);
                }
                c.link.emit(Event::Down);
            } else {
                c.open(&stack);
                c.link.emit(Event::Up);
            }
        }
    }

    pub fn is_down(&self) -> bool {
        self.up.lock().unwrap().is_none()
    }

    /// Requests the brick has been asked so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
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

    /// The blame (pending changes the copy knows others missed) of the
    /// object `gfid`, as its attributes report it; None if the brick has
    /// no such object or is down.
    pub async fn blame(&self, gfid: Gfid) -> Option<u32> {
        match self.ask(Fop::Getattr { gfid }).await {
            Ok(Reply::Attr(a)) => Some(a.blame),
            _ => None,
        }
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
                        c.link.emit(Event::Recall { gfid, name, ack });
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
        stack.top().call(&conn, cx, fop).await
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
