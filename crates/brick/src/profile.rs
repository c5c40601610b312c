//! `debug/profile`, the top of every brick's stack: each fop that reaches
//! the brick passes here once. It counts every fop in the process's
//! Prometheus metrics (`mortar_metrics`), always; keeps what
//! `volume top` shows (opens, reads and writes per file, open handles),
//! always, as GlusterFS's io-stats does; and, while
//! `diagnostics.latency-measurement` is on (`volume profile VOL start`),
//! what `volume profile` shows: per fop its calls and latency, the sizes
//! of reads and writes, the data moved, since the start and since the
//! last `info` (an interval).
//!
//! Both are read as virtual xattrs of the brick's root, by root only
//! (the daemon, with the volume's key): `PROFILE_XATTR` answers a
//! `ProfileReport` as JSON and begins a new interval; `TOP_XATTR` a
//! `TopReport`. Per-file figures are kept for `MAX_FILES` files at most and
//! names for `MAX_NAMES`; a file whose name is not known is shown by gfid.

use crate::{BrickEnv, BrickXlator, Conn, ConnId};
use async_trait::async_trait;
use mortar_core::clock::unix_secs;
use mortar_core::options::{Kind, Spec};
use mortar_core::{Ctx, Fop, FsError, FsResult, Gfid, Name, Reply};
use mortar_process::status::{BrickDetail, ClientConn, STATEDUMP_XATTR, STATUS_XATTR};
use mortar_storage::posix::Posix;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

pub static LATENCY_MEASUREMENT: Spec = Spec {
    key: "diagnostics.latency-measurement",
    kind: Kind::Bool,
    default: "off",
    help: "Profiles every brick's fops: calls, latency, read and write sizes, data moved (volume profile VOL info). Turned on by volume profile VOL start, off by stop.",
};

pub const PROFILE_XATTR: &str = "trusted.mortar.brick.profile";
pub const TOP_XATTR: &str = "trusted.mortar.brick.top";

/// Files whose opens, reads and writes are counted at most.
const MAX_FILES: usize = 50_000;
/// Names kept to show files by path.
const MAX_NAMES: usize = 100_000;
/// Entries of each list a brick answers for `volume top`.
pub const TOP_LIST: usize = 100;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FopStat {
    pub calls: u64,
    pub total_us: f64,
    pub min_us: f64,
    pub max_us: f64,
}

/// Profile figures over some time (since `start`, or one interval).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub seconds: u64,
    pub fops: BTreeMap<String, FopStat>,
    /// Reads and writes by size: the power of two at or below it.
    pub read_sizes: BTreeMap<u64, u64>,
    pub write_sizes: BTreeMap<u64, u64>,
    pub read_bytes: u64,
    pub written_bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileReport {
    pub on: bool,
    pub cumulative: Interval,
    /// The interval this `info` ended, and its number (from 0).
    pub interval: Interval,
    pub interval_no: u64,
}

/// One file in a `volume top` list: its count (or MB/s), path, and for
/// the throughput lists, when it was measured (seconds since the epoch).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopEntry {
    pub value: f64,
    pub path: String,
    pub at: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TopReport {
    pub open_fds: u64,
    pub max_open_fds: u64,
    pub max_open_at: u64,
    pub open: Vec<TopEntry>,
    pub read: Vec<TopEntry>,
    pub write: Vec<TopEntry>,
    pub read_perf: Vec<TopEntry>,
    pub write_perf: Vec<TopEntry>,
}

struct Running {
    since: Instant,
    fops: HashMap<&'static str, FopStat>,
    read_sizes: BTreeMap<u64, u64>,
    write_sizes: BTreeMap<u64, u64>,
    read_bytes: u64,
    written_bytes: u64,
}

impl Running {
    fn new() -> Running {
        Running {
            since: Instant::now(),
            fops: HashMap::new(),
            read_sizes: BTreeMap::new(),
            write_sizes: BTreeMap::new(),
            read_bytes: 0,
            written_bytes: 0,
        }
    }

    fn add(&mut self, fop: &'static str, us: f64, read: Option<u64>, written: Option<u64>) {
        let s = self.fops.entry(fop).or_default();
        if s.calls == 0 || us < s.min_us {
            s.min_us = us;
        }
        s.max_us = s.max_us.max(us);
        s.calls += 1;
        s.total_us += us;
        if let Some(n) = read {
            *self.read_sizes.entry(bucket(n)).or_default() += 1;
            self.read_bytes += n;
        }
        if let Some(n) = written {
            *self.write_sizes.entry(bucket(n)).or_default() += 1;
            self.written_bytes += n;
        }
    }

    fn report(&self) -> Interval {
        Interval {
            seconds: self.since.elapsed().as_secs(),
            fops: self
                .fops
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            read_sizes: self.read_sizes.clone(),
            write_sizes: self.write_sizes.clone(),
            read_bytes: self.read_bytes,
            written_bytes: self.written_bytes,
        }
    }
}

/// The power of two at or below `n` (0 for 0).
fn bucket(n: u64) -> u64 {
    match n {
        0 => 0,
        n => 1 << (63 - n.leading_zeros()),
    }
}

#[derive(Default, Clone)]
struct FileStat {
    opens: u64,
    reads: u64,
    writes: u64,
    open_fds: u64,
    read_bytes: u64,
    read_us: f64,
    read_at: u64,
    written_bytes: u64,
    write_us: f64,
    write_at: u64,
}

struct Top {
    files: HashMap<Gfid, FileStat>,
    names: HashMap<Gfid, (Gfid, Name)>,
    open_fds: u64,
    max_open_fds: u64,
    max_open_at: u64,
}

/// One connection, as `volume status … clients|fd` shows it.
struct ConnStat {
    conn: Weak<Conn>,
    shown: ClientConn,
}

pub struct Profile {
    below: Arc<dyn BrickXlator>,
    posix: Arc<Posix>,
    conns: Mutex<HashMap<ConnId, ConnStat>>,
    /// Whether `volume profile` is on (`diagnostics.latency-measurement`).
    on: AtomicBool,
    was_on: AtomicBool,
    profile: Mutex<(Running, Running, u64)>,
    top: Mutex<Top>,
}

pub fn build(
    env: &BrickEnv,
    below: Option<Arc<dyn BrickXlator>>,
) -> anyhow::Result<Option<Arc<dyn BrickXlator>>> {
    let below = below.ok_or_else(|| anyhow::anyhow!("the profile needs a translator below"))?;
    let p = Arc::new(Profile::new(below, env.posix.clone()));
    let weak = Arc::downgrade(&p);
    let brick = env.posix.path().display().to_string();
    mortar_process::statedump::brick_section(&brick, "connections", move || {
        weak.upgrade().map(|p| p.dump_conns()).unwrap_or_default()
    });
    Ok(Some(p))
}

impl Profile {
    pub fn new(below: Arc<dyn BrickXlator>, posix: Arc<Posix>) -> Profile {
        Profile {
            below,
            posix,
            conns: Mutex::new(HashMap::new()),
            on: AtomicBool::new(false),
            was_on: AtomicBool::new(false),
            profile: Mutex::new((Running::new(), Running::new(), 0)),
            top: Mutex::new(Top {
                files: HashMap::new(),
                names: HashMap::new(),
                open_fds: 0,
                max_open_fds: 0,
                max_open_at: 0,
            }),
        }
    }

    /// Whether profiling is on; a profile turned on starts from nothing.
    fn profiling(&self) -> bool {
        let on = self.on.load(Ordering::Relaxed);
        if on && !self.was_on.swap(true, Ordering::Relaxed) {
            *self.profile.lock().unwrap() = (Running::new(), Running::new(), 0);
        } else if !on {
            self.was_on.store(false, Ordering::Relaxed);
        }
        on
    }

    fn profile_report(&self) -> ProfileReport {
        let on = self.profiling();
        let mut p = self.profile.lock().unwrap();
        let interval = std::mem::replace(&mut p.1, Running::new()).report();
        let no = p.2;
        p.2 += 1;
        ProfileReport {
            on,
            cumulative: p.0.report(),
            interval,
            interval_no: no,
        }
    }

    fn path(top: &Top, gfid: Gfid) -> String {
        let mut parts = Vec::new();
        let mut at = gfid;
        // At most as deep as the names known.
        for _ in 0..256 {
            if at == Gfid::ROOT {
                parts.reverse();
                return format!("/{}", parts.join("/"));
            }
            match top.names.get(&at) {
                Some((parent, name)) => {
                    parts.push(String::from_utf8_lossy(name.as_bytes()).to_string());
                    at = *parent;
                }
                None => break,
            }
        }
        parts.reverse();
        let mut out = format!("<gfid:{at}>");
        for p in parts {
            out.push('/');
            out.push_str(&p);
        }
        out
    }

    fn top_report(&self) -> TopReport {
        let top = self.top.lock().unwrap();
        let list = |value: &dyn Fn(&FileStat) -> (f64, u64)| {
            let mut v: Vec<(f64, u64, Gfid)> = top
                .files
                .iter()
                .map(|(g, s)| {
                    let (x, at) = value(s);
                    (x, at, *g)
                })
                .filter(|(x, _, _)| *x > 0.0)
                .collect();
            v.sort_by(|a, b| b.0.total_cmp(&a.0));
            v.truncate(TOP_LIST);
            v.into_iter()
                .map(|(value, at, g)| TopEntry {
                    value,
                    path: Self::path(&top, g),
                    at,
                })
                .collect::<Vec<_>>()
        };
        let mbps = |bytes: u64, us: f64| match us {
            us if us > 0.0 => bytes as f64 / us,
            _ => 0.0,
        };
        TopReport {
            open_fds: top.open_fds,
            max_open_fds: top.max_open_fds,
            max_open_at: top.max_open_at,
            open: list(&|s| (s.opens as f64, 0)),
            read: list(&|s| (s.reads as f64, 0)),
            write: list(&|s| (s.writes as f64, 0)),
            read_perf: list(&|s| (mbps(s.read_bytes, s.read_us), s.read_at)),
            write_perf: list(&|s| (mbps(s.written_bytes, s.write_us), s.write_at)),
        }
    }

    /// Keeps what `volume top` shows of one fop that ended.
    fn note_top(&self, fop: &Fop, us: f64, result: &FsResult<Reply>) {
        let Ok(reply) = result else { return };
        let mut top = self.top.lock().unwrap();
        let named = match (fop, reply) {
            (Fop::Lookup { parent, name }, Reply::Entry(e))
            | (Fop::Mknod { parent, name, .. }, Reply::Entry(e))
            | (Fop::Mkdir { parent, name, .. }, Reply::Entry(e))
            | (Fop::Symlink { parent, name, .. }, Reply::Entry(e))
            | (Fop::Create { parent, name, .. }, Reply::Created { entry: e, .. }) => {
                Some((e.attr.gfid, *parent, name))
            }
            (
                Fop::Link {
                    gfid,
                    newparent,
                    newname,
                },
                _,
            ) => Some((*gfid, *newparent, newname)),
            _ => None,
        };
        if let Some((gfid, parent, name)) = named {
            if top.names.len() >= MAX_NAMES && !top.names.contains_key(&gfid) {
                top.names.clear();
            }
            top.names.insert(gfid, (parent, name.clone()));
        }
        let (gfid, opened) = match (fop, reply) {
            (Fop::Open { gfid, .. }, _) => (*gfid, 1),
            (Fop::Create { .. }, Reply::Created { entry, .. }) => (entry.attr.gfid, 1),
            (Fop::Release { gfid, .. }, _) => (*gfid, -1),
            (Fop::Read { gfid, .. }, _) | (Fop::Write { gfid, .. }, _) => (*gfid, 0),
            _ => return,
        };
        if top.files.len() >= MAX_FILES && !top.files.contains_key(&gfid) {
            // The busiest half stays, and every file open now.
            let mut counts: Vec<u64> = top
                .files
                .values()
                .map(|s| s.opens + s.reads + s.writes)
                .collect();
            counts.sort_unstable();
            let median = counts[counts.len() / 2];
            top.files
                .retain(|_, s| s.open_fds > 0 || s.opens + s.reads + s.writes > median);
        }
        let now = unix_secs();
        let s = top.files.entry(gfid).or_default();
        match (fop, reply, opened) {
            (_, _, 1) => {
                s.opens += 1;
                s.open_fds += 1;
            }
            (_, _, -1) => s.open_fds = s.open_fds.saturating_sub(1),
            (Fop::Read { .. }, Reply::Data(d), _) => {
                s.reads += 1;
                s.read_bytes += d.len() as u64;
                s.read_us += us;
                s.read_at = now;
            }
            (Fop::Write { .. }, Reply::Written(n, _), _) => {
                s.writes += 1;
                s.written_bytes += *n as u64;
                s.write_us += us;
                s.write_at = now;
            }
            _ => {}
        }
        if s.open_fds == 0 && s.opens + s.reads + s.writes == 0 {
            top.files.remove(&gfid);
        }
        match opened {
            1 => {
                top.open_fds += 1;
                if top.open_fds > top.max_open_fds {
                    top.max_open_fds = top.open_fds;
                    top.max_open_at = now;
                }
            }
            -1 => top.open_fds = top.open_fds.saturating_sub(1),
            _ => {}
        }
    }

    fn clients(&self) -> Vec<ClientConn> {
        let conns = self.conns.lock().unwrap();
        let mut v: Vec<ClientConn> = conns
            .values()
            .map(|c| ClientConn {
                open_fds: c.conn.upgrade().map_or(0, |c| c.fds.len() as u64),
                ..c.shown.clone()
            })
            .collect();
        v.sort_by(|a, b| a.peer.cmp(&b.peer));
        v
    }

    fn detail(&self) -> BrickDetail {
        let (open_objects, open_handles) = self.posix.open_objects();
        BrickDetail {
            pid: std::process::id(),
            disk: mortar_process::status::disk_of(self.posix.path()),
            memory: mortar_process::status::memory(),
            clients: self.clients(),
            open_objects,
            open_handles,
        }
    }

    fn dump_conns(&self) -> String {
        let mut out = String::new();
        for c in self.clients() {
            out.push_str(&format!(
                "client={} since={} fops={} read_bytes={} written_bytes={} open_fds={}\n",
                c.peer, c.since, c.fops, c.read_bytes, c.written_bytes, c.open_fds
            ));
        }
        let top = self.top_report();
        out.push_str(&format!(
            "open_fds={} max_open_fds={}\n",
            top.open_fds, top.max_open_fds
        ));
        out
    }

    fn report(&self, cx: &Ctx, name: &str) -> FsResult<Reply> {
        if cx.uid != 0 {
            return Err(FsError::new(libc::EPERM, "the brick's profile is root's"));
        }
        let json = match name {
            PROFILE_XATTR => serde_json::to_vec(&self.profile_report()),
            TOP_XATTR => serde_json::to_vec(&self.top_report()),
            STATUS_XATTR => serde_json::to_vec(&self.detail()),
            _ => {
                let what = format!("brick {}", self.posix.path().display());
                let brick = self.posix.path().display().to_string();
                return Ok(Reply::Xattr(
                    mortar_process::statedump::render_brick(&what, &brick)
                        .into_bytes()
                        .into(),
                ));
            }
        }
        .map_err(|e| FsError::new(libc::EIO, format!("cannot encode: {e}")))?;
        Ok(Reply::Xattr(json.into()))
    }
}

#[async_trait]
impl BrickXlator for Profile {
    fn reconfigure(&self, options: &mortar_core::Options) {
        self.on
            .store(LATENCY_MEASUREMENT.bool(options), Ordering::Relaxed);
    }

    async fn call(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        if let Fop::Getxattr { gfid, name } = &fop {
            let ours = [PROFILE_XATTR, TOP_XATTR, STATUS_XATTR, STATEDUMP_XATTR];
            if *gfid == Gfid::ROOT && ours.contains(&name.as_str()) {
                return self.report(cx, name);
            }
        }
        let name = fop.name();
        let written = match &fop {
            Fop::Write { data, .. } => Some(data.len() as u64),
            _ => None,
        };
        // What top keeps needs the request after the answer: a copy of
        // it (a write's data is shared, not copied).
        let kept = match &fop {
            Fop::Write { .. }
            | Fop::Lookup { .. }
            | Fop::Mknod { .. }
            | Fop::Mkdir { .. }
            | Fop::Symlink { .. }
            | Fop::Create { .. }
            | Fop::Link { .. }
            | Fop::Open { .. }
            | Fop::Release { .. }
            | Fop::Read { .. } => Some(fop.clone()),
            _ => None,
        };
        let started = Instant::now();
        let result = self.below.call(conn, cx, fop).await;
        let us = started.elapsed().as_secs_f64() * 1e6;
        mortar_metrics::fop_done(name, started, &result);
        if let Some(c) = self.conns.lock().unwrap().get_mut(&conn.id) {
            c.shown.fops += 1;
            match &result {
                Ok(Reply::Data(d)) if name == "read" => c.shown.read_bytes += d.len() as u64,
                Ok(Reply::Written(n, _)) => c.shown.written_bytes += *n as u64,
                _ => {}
            }
        }
        if let Some(f) = &kept {
            self.note_top(f, us, &result);
        }
        if self.profiling() {
            let read = match &result {
                Ok(Reply::Data(d)) if name == "read" => Some(d.len() as u64),
                _ => None,
            };
            let written = written.filter(|_| result.is_ok());
            let mut p = self.profile.lock().unwrap();
            p.0.add(name, us, read, written);
            p.1.add(name, us, read, written);
        }
        result
    }

    // (The stack tells every translator of connections itself.)
    fn connect(&self, conn: &Arc<Conn>) {
        mortar_metrics::get().clients.inc();
        self.conns.lock().unwrap().insert(
            conn.id,
            ConnStat {
                conn: Arc::downgrade(conn),
                shown: ClientConn {
                    peer: conn.peer.clone(),
                    since: unix_secs(),
                    ..Default::default()
                },
            },
        );
    }

    fn disconnect(&self, conn: &Conn) {
        mortar_metrics::get().clients.dec();
        self.conns.lock().unwrap().remove(&conn.id);
    }

    fn dump(&self) -> Vec<String> {
        let top = self.top.lock().unwrap();
        vec![format!(
            "files counted for top: {}, names known: {}, profiling: {}",
            top.files.len(),
            top.names.len(),
            self.was_on.load(Ordering::Relaxed)
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_go_to_the_power_of_two_below() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 1);
        assert_eq!(bucket(4095), 2048);
        assert_eq!(bucket(4096), 4096);
        assert_eq!(bucket(131072), 131072);
    }
}
