//! The brick-side stack. `server` (the brick's end of the protocol) decodes
//! each request and hands
//! it, with the connection it came on, to the top of this stack; each
//! concern is one translator (its row in `graph::table`, side `Brick`),
//! bottom to top:
//!
//! | kind | file | what it does |
//! |---|---|---|
//! | `storage/posix` | `posix.rs` | the brick directory (`storage::posix`); slow fops on the blocking pool |
//! | `features/barrier` | `barrier.rs` | changes held back while a snapshot is taken, and the snapshots (`storage::snapshot`) |
//! | `performance/priority` | `priority.rs` | self-heal's and rebalance's reads and writes give way to the clients' |
//! | `features/arbiter` | `arbiter.rs` | on an arbiter brick: names and metadata, no file data |
//! | `features/index` | `index/` | change sessions, blame and the heal index (`index/store.rs`) |
//! | `features/locks` | `locks/` | object locks, contention notices, revocation (`locks/table.rs`) |
//! | `features/hold` | `hold.rs` | files a rebalance is moving: others' changes refused until they have moved |
//! | `features/leases` | `leases/` | which clients cache what; recalled before another client's change |
//! | `features/worm` | `worm.rs` | retention: committed files refuse every change until it ends (`features.worm-file-level`) |
//! | `debug/profile` | `profile.rs` | metrics, `volume profile` and `volume top` of every fop |
//!
//! A translator handles the fops it is about and passes every other one to
//! the one below unchanged; the stack tells every translator of each
//! connection that starts and ends (`connect`, `disconnect`).

pub mod arbiter;
pub mod barrier;
pub mod hold;
pub mod index;
pub mod leases;
pub mod locks;
pub mod posix;
pub mod priority;
pub mod profile;
pub mod server;
pub mod worm;

use async_trait::async_trait;
use mortar_core::{Ctx, Fop, FsResult, Gfid, Reply};
use mortar_storage::posix::{FdTable, Posix};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

pub type ConnId = u64;

/// What a brick sends a client unasked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// Another client waits for a lock this one holds.
    Contention(Gfid),
    /// Drop what you cache of the object (`name` None) or of the name in
    /// directory `gfid`, and answer recall `id` (`features/leases`);
    /// `claim`: it ends the client's claim on the object.
    Recall {
        id: u64,
        gfid: Gfid,
        name: Option<mortar_core::Name>,
        claim: bool,
    },
}

/// One client connection, as every translator of the stack sees it.
pub struct Conn {
    pub id: ConnId,
    /// The client's address, for logs.
    pub peer: String,
    /// The files and listings it has open on the brick.
    pub fds: FdTable,
    /// Sends the client a notice (never blocks; dropped if it cannot keep up).
    pub notice: Box<dyn Fn(Notice) + Send + Sync>,
    /// Ends the connection (lock revocation).
    pub close: Box<dyn Fn() + Send + Sync>,
}

/// The live connections a translator reaches by id (to send one a notice
/// or close it), kept from `connect` to `disconnect`.
#[derive(Default)]
pub struct ConnTable(Mutex<HashMap<ConnId, Weak<Conn>>>);

impl ConnTable {
    pub fn add(&self, conn: &Arc<Conn>) {
        self.0.lock().unwrap().insert(conn.id, Arc::downgrade(conn));
    }

    pub fn remove(&self, id: ConnId) {
        self.0.lock().unwrap().remove(&id);
    }

    pub fn get(&self, id: ConnId) -> Option<Arc<Conn>> {
        self.0.lock().unwrap().get(&id).and_then(Weak::upgrade)
    }
}

#[async_trait]
pub trait BrickXlator: Send + Sync {
    async fn call(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply>;
    /// A connection starts (before its first call).
    fn connect(&self, _conn: &Arc<Conn>) {}
    /// A connection ended (after its last call).
    fn disconnect(&self, _conn: &Conn) {}
    /// The client answered recall `id` (`Notice::Recall`).
    fn recalled(&self, _conn: &Conn, _id: u64) {}
    /// The brick process was told to stop and exits next: what it keeps
    /// in memory that must outlive it is written down now, and what
    /// changes from here on as it happens (calls may still come).
    fn stopping(&self) {}
    /// What it holds, one line per item, for a statedump.
    fn dump(&self) -> Vec<String> {
        Vec::new()
    }
    /// The volume's options changed (and once before the first call):
    /// it takes the ones it reads. The same contract as a client
    /// translator's (`Xlator::reconfigure`).
    fn reconfigure(&self, _options: &mortar_core::Options) {}
}

impl Conn {
    /// A connection that hears nothing and cannot be closed: for the
    /// translators' unit tests.
    #[cfg(test)]
    pub(crate) fn quiet(id: ConnId) -> Arc<Conn> {
        Arc::new(Conn {
            id,
            peer: format!("client{id}"),
            fds: FdTable::default(),
            notice: Box::new(|_| {}),
            close: Box::new(|| {}),
        })
    }
}

/// What the brick process gives the factories.
pub struct BrickEnv {
    pub posix: Arc<Posix>,
    pub arbiter: bool,
}

/// Builds one translator over `below` (None for the bottom one); None if it
/// has no place on this brick (the arbiter on a data brick).
pub type BrickFactory =
    fn(&BrickEnv, Option<Arc<dyn BrickXlator>>) -> anyhow::Result<Option<Arc<dyn BrickXlator>>>;

/// A brick's translators, bottom to top.
pub struct Stack {
    layers: Vec<(&'static str, Arc<dyn BrickXlator>)>,
}

impl Stack {
    /// Stacks the translators `kinds` name, bottom to top (the brick rows
    /// of `graph::table`, in table order).
    pub fn build(
        env: &BrickEnv,
        kinds: impl IntoIterator<Item = (&'static str, BrickFactory)>,
    ) -> anyhow::Result<Stack> {
        let mut layers: Vec<(&'static str, Arc<dyn BrickXlator>)> = Vec::new();
        for (kind, make) in kinds {
            let below = layers.last().map(|(_, x)| x.clone());
            if let Some(x) = make(env, below)? {
                layers.push((kind, x));
            }
        }
        anyhow::ensure!(!layers.is_empty(), "a brick stack of no translators");
        let stack = Stack { layers };
        stack.reconfigure(&Default::default());
        Ok(stack)
    }

    pub fn top(&self) -> Arc<dyn BrickXlator> {
        self.layers.last().expect("a stack has a top").1.clone()
    }

    /// The translators' kinds, bottom to top.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.layers.iter().map(|(k, _)| *k).collect()
    }

    /// Every translator and what it holds, top down, for a statedump.
    pub fn dump(&self) -> String {
        let mut out = String::new();
        for (kind, x) in self.layers.iter().rev() {
            out.push_str(kind);
            out.push('\n');
            for line in x.dump() {
                out.push_str(&format!("  {line}\n"));
            }
        }
        out
    }

    /// Hands the volume's options to every layer, bottom to top (`build`
    /// hands them the defaults).
    pub fn reconfigure(&self, options: &mortar_core::Options) {
        for (_, x) in &self.layers {
            x.reconfigure(options);
        }
    }

    pub fn connect(&self, conn: &Arc<Conn>) {
        for (_, x) in self.layers.iter().rev() {
            x.connect(conn);
        }
    }

    /// Top down: locks go to their waiters before the sessions end.
    pub fn disconnect(&self, conn: &Conn) {
        for (_, x) in self.layers.iter().rev() {
            x.disconnect(conn);
        }
    }

    pub fn stopping(&self) {
        for (_, x) in self.layers.iter().rev() {
            x.stopping();
        }
    }

    pub fn recalled(&self, conn: &Conn, id: u64) {
        for (_, x) in self.layers.iter().rev() {
            x.recalled(conn, id);
        }
    }
}
