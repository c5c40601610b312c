//! The Raft log and vote on disk: one JSON file per entry under `log/`
//! (written, and on a voter fsynced, before the append is acknowledged),
//! the vote and the last purged entry in small files replaced atomically,
//! and the last committed entry this server knows of (`committed.json`,
//! rewritten in place without fsync: from it a restarting server applies
//! its log again; lost or torn, the leader tells it again).
//! The log is short (snapshots purge it), so all of it is also kept in
//! memory. A learner's log counts for no commit: it is not fsynced (after
//! a crash of its machine the leader sends it again what it lost).

use super::{io_err, read_json, Entry, LogId, NodeId, Roles, TypeConfig, Vote};
use crate::mgmt::state::write_atomic;
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{EntryPayload, LogState, RaftLogReader, StorageError};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Inner {
    entries: BTreeMap<u64, Entry>,
    purged: Option<LogId>,
}

/// The log store; clones share one log (the reader openraft asks for).
#[derive(Clone)]
pub struct LogStore {
    dir: PathBuf,
    inner: Arc<Mutex<Inner>>,
    /// Whether this server votes: its log is then fsynced.
    roles: Arc<Roles>,
    /// This server's id.
    me: NodeId,
}

type Result<T> = std::result::Result<T, StorageError<NodeId>>;

/// `committed.json`'s width: its JSON, then spaces.
const COMMITTED_WIDTH: usize = 128;

impl LogStore {
    pub fn open(dir: &Path, me: NodeId, roles: Arc<Roles>) -> std::io::Result<LogStore> {
        let logs = dir.join("log");
        std::fs::create_dir_all(&logs)?;
        let mut inner = Inner {
            purged: read_json(&dir.join("purged.json"))?,
            ..Default::default()
        };
        for f in std::fs::read_dir(&logs)? {
            let p = f?.path();
            if p.extension().is_some_and(|e| e == "json") {
                let e: Entry = read_json(&p)?.expect("listed");
                inner.entries.insert(e.log_id.index, e);
            }
        }
        Ok(LogStore {
            dir: dir.to_path_buf(),
            inner: Arc::new(Mutex::new(inner)),
            roles,
            me,
        })
    }

    fn entry_path(&self, index: u64) -> PathBuf {
        self.dir.join("log").join(format!("{index:020}.json"))
    }

    fn remove(&self, index: u64) -> std::io::Result<()> {
        match std::fs::remove_file(self.entry_path(index)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>> {
        let inner = self.inner.lock().unwrap();
        Ok(inner.entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>> {
        let inner = self.inner.lock().unwrap();
        let last = inner
            .entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(inner.purged);
        Ok(LogState {
            last_purged_log_id: inner.purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<()> {
        self.roles.live().map_err(io_err)?;
        let b = serde_json::to_vec(vote).map_err(|e| io_err(e.into()))?;
        write_atomic(&self.dir.join("vote.json"), &b).map_err(io_err)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>> {
        read_json(&self.dir.join("vote.json")).map_err(io_err)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<()> {
        self.roles.live().map_err(io_err)?;
        let mut b = serde_json::to_vec(&committed).map_err(|e| io_err(e.into()))?;
        // Overwritten in place, padded to a fixed width, not truncated and
        // written again (which frees and allocates the file's block).
        b.resize(b.len().max(COMMITTED_WIDTH), b' ');
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join("committed.json"))
            .and_then(|f| f.write_all_at(&b, 0))
            .map_err(io_err)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>> {
        let saved: Option<LogId> = std::fs::read(self.dir.join("committed.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .flatten();
        // Entries a machine crash took from a learner's log (not fsynced)
        // cannot be applied again: only up to the first one missing.
        let inner = self.inner.lock().unwrap();
        let mut have = inner.purged;
        for (i, e) in inner.entries.iter() {
            let hole = have.is_some_and(|h| *i != h.index + 1);
            if hole || saved.is_some_and(|s| *i > s.index) {
                break;
            }
            have = Some(e.log_id);
        }
        Ok(saved.and(have))
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<()>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let sync = self.roles.me_votes.load(Ordering::Relaxed);
        let res = (|| {
            self.roles.live()?;
            let mut inner = self.inner.lock().unwrap();
            for e in entries {
                use std::io::Write;
                let mut f = std::fs::File::create(self.entry_path(e.log_id.index))?;
                f.write_all(&serde_json::to_vec(&e)?)?;
                if sync {
                    f.sync_data()?;
                }
                if matches!(e.payload, EntryPayload::Normal(_))
                    && e.log_id.leader_id.node_id == self.me
                {
                    // The leader dies with a change on its own disk, maybe
                    // on others', not yet committed.
                    fail::fail_point!("raft-leader-appended");
                }
                inner.entries.insert(e.log_id.index, e);
            }
            if sync {
                std::fs::File::open(self.dir.join("log"))?.sync_all()?;
            }
            Ok::<(), std::io::Error>(())
        })();
        let failed = res
            .as_ref()
            .err()
            .map(|e| std::io::Error::new(e.kind(), e.to_string()));
        callback.log_io_completed(res);
        match failed {
            Some(e) => Err(io_err(e)),
            None => Ok(()),
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<()> {
        self.roles.live().map_err(io_err)?;
        let mut inner = self.inner.lock().unwrap();
        let gone: Vec<u64> = inner
            .entries
            .range(log_id.index..)
            .map(|(i, _)| *i)
            .collect();
        for i in gone.into_iter().rev() {
            self.remove(i).map_err(io_err)?;
            inner.entries.remove(&i);
        }
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<()> {
        // On the blocking pool: it follows a snapshot, which every server
        // of a pool takes at the same moment (see `Machine::keep`).
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.purge_now(log_id))
            .await
            .map_err(|e| io_err(std::io::Error::other(e)))?
            .map_err(io_err)
    }
}

impl LogStore {
    fn purge_now(&self, log_id: LogId) -> std::io::Result<()> {
        self.roles.live()?;
        let mut inner = self.inner.lock().unwrap();
        let b = serde_json::to_vec(&log_id)?;
        write_atomic(&self.dir.join("purged.json"), &b)?;
        inner.purged = Some(log_id);
        let gone: Vec<u64> = inner
            .entries
            .range(..=log_id.index)
            .map(|(i, _)| *i)
            .collect();
        for i in gone {
            self.remove(i)?;
            inner.entries.remove(&i);
        }
        Ok(())
    }
}
