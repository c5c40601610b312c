//! The Raft log and vote on disk. Entries are JSON lines appended to
//! segment files under `log/` (`<first index>.jsonl`; written, and on a
//! voter fdatasynced, before the append is acknowledged). A purge starts
//! a new segment and removes the segments it covers whole; a truncation
//! cuts a segment's file at the first entry removed. The vote and the last
//! purged entry are in small files replaced atomically, and the last
//! committed entry this server knows of in `committed.json`, rewritten in
//! place without fsync: from it a restarting server applies its log again
//! (lost or torn, the leader tells it again).
//! The log is short (snapshots purge it), so all of it is also kept in
//! memory. A learner's log counts for no commit: it is not fsynced (after
//! a crash of its machine the leader sends it again what it lost: the log
//! read back ends before the first torn line or missing entry).
//! One file per entry, as this store first kept them, cost every server a
//! new inode per change: at 300 servers on one machine, a quarter of the
//! daemons' work in a `volume start` went to ext4 finding free inodes.

use super::{io_err, read_json, Entry, LogId, NodeId, Roles, TypeConfig, Vote};
use crate::state::write_atomic;
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{EntryPayload, LogState, RaftLogReader, StorageError};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::File;
use std::ops::RangeBounds;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// An entry, and where its line starts: (its segment's first index, the
/// offset in that segment's file).
struct Kept {
    entry: Entry,
    segment: u64,
    offset: u64,
}

#[derive(Default)]
struct Inner {
    entries: BTreeMap<u64, Kept>,
    purged: Option<LogId>,
    /// The segments by first index, with their length.
    segments: BTreeMap<u64, u64>,
    /// The last segment, open for appending (None: open it, or start one,
    /// at the next append).
    active: Option<(u64, File)>,
    /// Start a new segment at the next append (set by a purge, so that
    /// the next purge can remove the segment before it whole).
    roll: bool,
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
        let mut segments = BTreeMap::new();
        let mut legacy = Vec::new();
        for f in std::fs::read_dir(&logs)? {
            let p = f?.path();
            let first = p.file_stem().and_then(|s| s.to_str()?.parse::<u64>().ok());
            match (p.extension().and_then(|e| e.to_str()), first) {
                (Some("jsonl"), Some(first)) => {
                    segments.insert(first, p);
                }
                (Some("json"), Some(_)) => legacy.push(p),
                _ => {}
            }
        }
        let store = LogStore {
            dir: dir.to_path_buf(),
            inner: Arc::new(Mutex::new(Inner::default())),
            roles,
            me,
        };
        let mut torn = false;
        for (first, p) in segments {
            if torn {
                std::fs::remove_file(&p)?;
                continue;
            }
            let b = std::fs::read(&p)?;
            let mut offset = 0;
            for line in b.split_inclusive(|c| *c == b'\n') {
                let e = line
                    .strip_suffix(b"\n")
                    .and_then(|l| serde_json::from_slice::<Entry>(l).ok());
                let follows = |e: &Entry| {
                    inner
                        .entries
                        .last_key_value()
                        .is_none_or(|(i, _)| e.log_id.index == i + 1)
                };
                match e {
                    Some(e) if inner.purged.is_some_and(|p| e.log_id.index <= p.index) => {}
                    Some(e) if follows(&e) => {
                        let index = e.log_id.index;
                        let kept = Kept {
                            entry: e,
                            segment: first,
                            offset: offset as u64,
                        };
                        inner.entries.insert(index, kept);
                    }
                    // A torn line, or an entry after a lost one: the log
                    // ends before it.
                    _ => {
                        torn = true;
                        break;
                    }
                }
                offset += line.len();
            }
            if torn {
                File::options()
                    .write(true)
                    .open(&p)?
                    .set_len(offset as u64)?;
            }
            inner.segments.insert(first, offset as u64);
        }
        *store.inner.lock().unwrap() = inner;
        store.migrate(legacy)?;
        Ok(store)
    }

    /// Moves the entries of a log kept one file per entry (by an earlier
    /// version) into a segment, unless segments already hold them.
    fn migrate(&self, legacy: Vec<PathBuf>) -> std::io::Result<()> {
        if legacy.is_empty() {
            return Ok(());
        }
        let fresh = self.inner.lock().unwrap().segments.is_empty();
        if fresh {
            let purged = self.inner.lock().unwrap().purged;
            let mut old = BTreeMap::new();
            for p in &legacy {
                let e: Entry = read_json(p)?.expect("listed");
                if purged.is_none_or(|p| e.log_id.index > p.index) {
                    old.insert(e.log_id.index, e);
                }
            }
            // Up to the first one missing, as `read_committed` would.
            let mut entries = Vec::new();
            for (i, e) in old {
                if entries
                    .last()
                    .is_some_and(|l: &Entry| l.log_id.index + 1 != i)
                {
                    break;
                }
                entries.push(e);
            }
            self.write(entries, true)?;
        }
        for p in legacy {
            std::fs::remove_file(p)?;
        }
        Ok(())
    }

    fn segment_path(&self, first: u64) -> PathBuf {
        self.dir.join("log").join(format!("{first:020}.jsonl"))
    }

    /// Appends `entries` to the last segment (or a new one), fdatasynced
    /// if `sync`.
    fn write(&self, entries: Vec<Entry>, sync: bool) -> std::io::Result<()> {
        let Some(first) = entries.first().map(|e| e.log_id.index) else {
            return Ok(());
        };
        let mut inner = self.inner.lock().unwrap();
        let mut created = false;
        if inner.roll || inner.segments.is_empty() {
            let f = File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(self.segment_path(first))?;
            inner.segments.insert(first, 0);
            inner.active = Some((first, f));
            inner.roll = false;
            created = true;
        }
        let (&seg, &len) = inner.segments.last_key_value().expect("one at least");
        if inner.active.as_ref().is_none_or(|(s, _)| *s != seg) {
            let f = File::options().write(true).open(self.segment_path(seg))?;
            inner.active = Some((seg, f));
        }
        let mut buf = Vec::new();
        let mut placed = Vec::new();
        for e in entries {
            let offset = len + buf.len() as u64;
            serde_json::to_writer(&mut buf, &e)?;
            buf.push(b'\n');
            placed.push((e, offset));
        }
        let (_, f) = inner.active.as_ref().expect("opened above");
        let written = f.write_all_at(&buf, len).and_then(|()| match sync {
            true => f.sync_data(),
            false => Ok(()),
        });
        if let Err(e) = written {
            // Nothing of a batch that failed is left to be read back.
            let _ = f.set_len(len);
            return Err(e);
        }
        if sync && created {
            File::open(self.dir.join("log"))?.sync_all()?;
        }
        inner.segments.insert(seg, len + buf.len() as u64);
        for (e, offset) in placed {
            if matches!(e.payload, EntryPayload::Normal(_)) && e.log_id.leader_id.node_id == self.me
            {
                // The leader dies with a change on its own disk, maybe on
                // others', not yet committed.
                fail::fail_point!("raft-leader-appended");
            }
            let kept = Kept {
                entry: e,
                segment: seg,
                offset,
            };
            inner.entries.insert(kept.entry.log_id.index, kept);
        }
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>> {
        let inner = self.inner.lock().unwrap();
        Ok(inner
            .entries
            .range(range)
            .map(|(_, k)| k.entry.clone())
            .collect())
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
            .map(|k| k.entry.log_id)
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
        for (i, k) in inner.entries.iter() {
            let hole = have.is_some_and(|h| *i != h.index + 1);
            if hole || saved.is_some_and(|s| *i > s.index) {
                break;
            }
            have = Some(k.entry.log_id);
        }
        Ok(saved.and(have))
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<()>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let sync = self.roles.me_votes.load(Ordering::Relaxed);
        let res = self
            .roles
            .live()
            .and_then(|()| self.write(entries.into_iter().collect(), sync));
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
        self.truncate_now(log_id.index).map_err(io_err)
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
    /// Removes the entries from `index` on: the segments that begin at or
    /// after it, and the rest of the one that holds it.
    fn truncate_now(&self, index: u64) -> std::io::Result<()> {
        let mut inner = self.inner.lock().unwrap();
        let Some(cut) = inner.entries.get(&index).map(|k| (k.segment, k.offset)) else {
            return Ok(());
        };
        let later: Vec<u64> = inner.segments.range(cut.0 + 1..).map(|(s, _)| *s).collect();
        for s in later.into_iter().rev() {
            remove(&self.segment_path(s))?;
            inner.segments.remove(&s);
        }
        File::options()
            .write(true)
            .open(self.segment_path(cut.0))?
            .set_len(cut.1)?;
        inner.segments.insert(cut.0, cut.1);
        inner.active = None;
        inner.entries.split_off(&index);
        Ok(())
    }

    fn purge_now(&self, log_id: LogId) -> std::io::Result<()> {
        self.roles.live()?;
        let b = serde_json::to_vec(&log_id)?;
        write_atomic(&self.dir.join("purged.json"), &b)?;
        let mut inner = self.inner.lock().unwrap();
        inner.purged = Some(log_id);
        inner.entries = inner.entries.split_off(&(log_id.index + 1));
        // The segments of which nothing is left; the next append starts a
        // new one, so that the last one goes at the next purge.
        let firsts: Vec<u64> = inner.segments.keys().copied().collect();
        let last_of = |i: usize| firsts.get(i + 1).map(|next| next - 1);
        for (i, s) in firsts.iter().enumerate() {
            let whole = match last_of(i) {
                Some(last) => last <= log_id.index,
                None => inner.entries.is_empty(),
            };
            if whole {
                remove(&self.segment_path(*s))?;
                inner.segments.remove(s);
                if inner.active.as_ref().is_some_and(|(a, _)| a == s) {
                    inner.active = None;
                }
            }
        }
        inner.roll = true;
        Ok(())
    }
}

fn remove(p: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
