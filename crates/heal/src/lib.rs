//! The self-heal daemon (GlusterFS's shd), run by the management daemon of
//! every server for each started replicated volume with bricks there.
//!
//! It connects to every brick of the volume like a client does, and works
//! through the heal index of the bricks of its own server (`Fop::Pending`):
//! every few seconds, and at once when asked (`mortar volume heal VOL`).
//! Nothing is crawled unless a full heal is asked for. Each object is
//! healed by `object::Set::heal`. The same connections answer
//! `heal VOL info` for all bricks.

pub mod coded;
mod copy;
pub mod names;
pub mod object;
mod repair;
pub mod scrub;
pub mod source;

use futures_util::future::BoxFuture;
use mortar_core::clock::unix_secs;
use mortar_core::desc::VolDesc;
use mortar_core::fop::FileKind;
use mortar_core::{Ctx, Fop, FsError, FsResult, Gfid, Reply};
use mortar_graph::{Env, Graph};
use mortar_xlators::cluster::replicate::options::FAVORITE_CHILD_POLICY;
use object::{Brick, Outcome, Policy, Set};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the index is looked at when nobody asks.
const INTERVAL: Duration = Duration::from_secs(3);
/// How long a pass waits for the other bricks of a set with something to
/// heal to be connected (a brick that stays down is healed later).
const REACH_SET: Duration = Duration::from_secs(3);
/// Index entries taken per brick per pass.
const BATCH: u32 = 4096;
/// Objects whose kind is asked at once before an index pass heals them.
const CLASSIFIED_AT_ONCE: usize = 32;
/// Objects judged at once for `heal VOL info` (each reads every copy).
const JUDGED_AT_ONCE: usize = 32;
/// Crawls kept for `heal VOL statistics`.
const KEEP_CRAWLS: usize = 32;
/// Every this many passes, objects parked while a brick was away are
/// looked at again even if no brick came or went (a sink that failed for
/// another reason, a full disk made room).
const RECHECK_PARKED: u64 = 20;

/// One pass over the index (or the whole volume), for `statistics`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Crawl {
    /// "INDEX" or "FULL", as GlusterFS says.
    pub kind: String,
    /// Unix seconds.
    pub started: u64,
    pub ended: Option<u64>,
    pub healed: u64,
    pub entries: u64,
    pub bytes: u64,
    pub split_brain: u64,
    pub failed: u64,
}

/// What `heal VOL info` shows for one brick.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BrickHeal {
    pub brick: String,
    pub connected: bool,
    /// Objects that may need heal: `<gfid:…>`, or `/` for the root.
    pub entries: Vec<String>,
    pub split_brain: Vec<String>,
    /// The bytes of data (of each copy, or each fragment) the heal of these
    /// entries will compare: the ranges their bricks recorded as changed.
    /// `heal VOL info` judges it over each set's copies; the progress of
    /// `heal --wait` takes each brick's own record.
    #[serde(default)]
    pub to_compare: u64,
}

/// One brick's heal index as `scan` found it.
struct BrickScan {
    brick: String,
    connected: bool,
    pending: Vec<Gfid>,
    split: Vec<Gfid>,
    to_compare: u64,
}

pub struct Healer {
    pub volume: String,
    sets: Vec<Set>,
    /// Per set: the positions of bricks on this server.
    local: Vec<Vec<usize>>,
    /// `cluster.favorite-child-policy` (`reconfigure`).
    policy: Mutex<Policy>,
    wake: tokio::sync::Notify,
    /// Set by `trigger`: the next pass looks at parked objects too.
    asked: std::sync::atomic::AtomicBool,
    passes: std::sync::atomic::AtomicU64,
    crawls: Mutex<VecDeque<Crawl>>,
    current: Mutex<Option<Crawl>>,
    split: Mutex<HashSet<Gfid>>,
    graph: Graph,
}

pub fn show(g: Gfid) -> String {
    if g == Gfid::ROOT {
        "/".into()
    } else {
        format!("<gfid:{g}>")
    }
}

impl Healer {
    /// Connects to the bricks of the volume on this server (`is_local`
    /// says which hosts are), and to the others once it has something to
    /// heal in their set or is waited for (`wait_up`): at a `volume start`
    /// of 300 servers, healers knocking at bricks still starting made
    /// hundreds of refused connections, and a healer with nothing to heal
    /// holds one connection instead of three.
    pub fn new(
        desc: &VolDesc,
        is_local: impl Fn(&str) -> bool,
        env: &Env,
    ) -> anyhow::Result<Arc<Healer>> {
        // The volume's own client graph: its replicate translators say
        // which bricks form a set, their children are the connections.
        let graph = Graph::build_lazy(desc, env, |n| {
            mortar_graph::sets::brick_host(n).is_some_and(&is_local)
        })?;
        let mut sets = Vec::new();
        let mut local = Vec::new();
        for r in graph.replica_sets() {
            let bricks: Vec<Brick> = r
                .bricks
                .into_iter()
                .map(|b| Brick {
                    label: b.label(),
                    host: b.host,
                    x: b.child,
                })
                .collect();
            local.push(
                (0..bricks.len())
                    .filter(|&i| is_local(&bricks[i].host))
                    .collect(),
            );
            sets.push(Set {
                name: r.name,
                bricks,
                arbiter: r.arbiter,
                coding: match r.coding {
                    Some((k, r)) => Some(object::Coded::new(k, r).map_err(anyhow::Error::msg)?),
                    None => None,
                },
                busy: Default::default(),
                fresh: Default::default(),
                parked: Default::default(),
                written: mortar_metrics::get()
                    .heal_written_bytes
                    .get_or_create(&mortar_metrics::VolumeLabels {
                        volume: desc.volume.clone(),
                    })
                    .clone(),
            });
        }
        let policy = Policy::parse(FAVORITE_CHILD_POLICY.str(&desc.options));
        Ok(Arc::new(Healer {
            volume: desc.volume.clone(),
            sets,
            local,
            policy: Mutex::new(policy),
            wake: tokio::sync::Notify::new(),
            asked: Default::default(),
            passes: Default::default(),
            crawls: Mutex::new(VecDeque::new()),
            current: Mutex::new(None),
            split: Mutex::new(HashSet::new()),
            graph,
        }))
    }

    /// Applies changed volume options: the split-brain policy, and the
    /// options of the healer's own connections.
    pub fn reconfigure(&self, options: &mortar_core::Options) {
        *self.policy.lock().unwrap() = Policy::parse(FAVORITE_CHILD_POLICY.str(options));
        self.graph.reconfigure(options);
    }

    pub fn has_local_bricks(&self) -> bool {
        self.local.iter().any(|l| !l.is_empty())
    }

    pub async fn wait_up(&self, t: Duration) {
        self.graph.wait_up(t).await;
    }

    /// Heals what is pending now, without waiting for the next pass.
    pub fn trigger(&self) {
        self.asked.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// Works through the index until the healer is dropped.
    pub async fn run(self: Arc<Self>) {
        loop {
            let _ = tokio::time::timeout(INTERVAL, self.wake.notified()).await;
            self.index_pass().await;
        }
    }

    fn begin_crawl(&self, kind: &str) {
        *self.current.lock().unwrap() = Some(Crawl {
            kind: kind.into(),
            started: unix_secs(),
            ..Default::default()
        });
    }

    fn count(&self, o: &FsResult<Outcome>, gfid: Gfid) {
        let m = mortar_metrics::get();
        let labels = mortar_metrics::VolumeLabels {
            volume: self.volume.clone(),
        };
        match o {
            Ok(o) if o.healed > 0 => m.healed.get_or_create(&labels).inc_by(o.healed as u64),
            Err(_) => m.heal_failed.get_or_create(&labels).inc(),
            Ok(_) => 0,
        };
        let mut cur = self.current.lock().unwrap();
        let Some(c) = cur.as_mut() else { return };
        match o {
            Ok(o) => {
                c.healed += o.healed as u64;
                c.entries += o.entries;
                c.bytes += o.bytes;
                if o.split_brain {
                    c.split_brain += 1;
                    if self.split.lock().unwrap().insert(gfid) {
                        tracing::error!(volume = %self.volume, gfid = %gfid, "split-brain: the copies blame each other; reads fail with EIO until it is resolved (heal VOL split-brain …)");
                    }
                } else {
                    self.split.lock().unwrap().remove(&gfid);
                }
            }
            Err(_) => c.failed += 1,
        }
    }

    fn end_crawl(&self, keep: bool) {
        let Some(mut c) = self.current.lock().unwrap().take() else {
            return;
        };
        c.ended = Some(unix_secs());
        if keep {
            tracing::info!(volume = %self.volume, kind = %c.kind, healed = c.healed, entries = c.entries, bytes = c.bytes, split_brain = c.split_brain, failed = c.failed, "heal crawl finished");
            let mut crawls = self.crawls.lock().unwrap();
            if crawls.len() >= KEEP_CRAWLS {
                crawls.pop_front();
            }
            crawls.push_back(c);
        }
    }

    /// One pass over the index of this server's bricks.
    pub async fn index_pass(&self) {
        let pass = self.passes.fetch_add(1, Ordering::SeqCst);
        let recheck =
            self.asked.swap(false, Ordering::SeqCst) || pass.is_multiple_of(RECHECK_PARKED);
        let mut worked = false;
        for (si, set) in self.sets.iter().enumerate() {
            set.fresh.lock().unwrap().clear();
            // What the set's bricks here list, each object once, with the
            // brick that listed it.
            let mut seen = HashSet::new();
            let mut listed: Vec<(Gfid, usize)> = Vec::new();
            for &b in &self.local[si] {
                let brick = &set.bricks[b];
                if !brick.x.is_up() {
                    continue;
                }
                let Ok(Reply::Pending(gfids, bytes)) = brick
                    .x
                    .call(&Ctx::root(), Fop::Pending { max: BATCH })
                    .await
                else {
                    continue;
                };
                // (BATCH at most: a larger backlog shows as BATCH.)
                let labels = mortar_metrics::BrickLabels {
                    volume: self.volume.clone(),
                    brick: brick.label.clone(),
                };
                let m = mortar_metrics::get();
                m.heal_pending
                    .get_or_create(&labels)
                    .set(gfids.len() as i64);
                m.heal_pending_bytes
                    .get_or_create(&labels)
                    .set(bytes as i64);
                for g in gfids {
                    if seen.insert(g) && !self.split.lock().unwrap().contains(&g) {
                        listed.push((g, b));
                    }
                }
            }
            if listed.is_empty() {
                set.parked.lock().unwrap().clear();
                continue;
            }
            // The other bricks of the set, connected now if not yet.
            self.graph
                .wait_leaves(
                    |n| set.bricks.iter().any(|b| Arc::ptr_eq(&b.x.xl, &n.child.xl)),
                    REACH_SET,
                )
                .await;
            let mask = set.up_mask();
            let todo: Vec<(Gfid, usize)> = {
                let parked = set.parked.lock().unwrap();
                listed
                    .into_iter()
                    .filter(|(g, _)| recheck || parked.get(g) != Some(&mask))
                    .collect()
            };
            if !todo.is_empty() {
                if !worked {
                    self.begin_crawl("INDEX");
                    worked = true;
                }
                self.heal_listed(set, todo, mask).await;
            }
            // Forget what left the index by other ways.
            set.parked.lock().unwrap().retain(|g, _| seen.contains(g));
        }
        if worked {
            self.end_crawl(true);
        }
    }

    /// Heals the objects an index pass found pending in `set` (each with
    /// the brick that listed it): directories first, since the heal of one
    /// makes its new children on the sinks and heals them, which the pass
    /// then skips (`fresh`); a file healed before its directory would be
    /// locked and read for nothing, its sink having no copy yet.
    async fn heal_listed(&self, set: &Set, todo: Vec<(Gfid, usize)>, mask: u32) {
        let policy = *self.policy.lock().unwrap();
        let all = (1u32 << set.bricks.len()) - 1;
        let kinds = todo
            .into_iter()
            .map(|(g, b)| -> BoxFuture<'_, (Gfid, bool)> {
                Box::pin(async move {
                    let r = set.bricks[b]
                        .x
                        .call(&Ctx::root(), Fop::Getattr { gfid: g })
                        .await;
                    (
                        g,
                        matches!(r, Ok(Reply::Attr(a)) if a.kind == FileKind::Dir),
                    )
                })
            })
            .collect();
        let kinds = object::at_once(kinds, CLASSIFIED_AT_ONCE).await;
        let (dirs, files): (Vec<_>, Vec<_>) = kinds.into_iter().partition(|(_, d)| *d);
        for phase in [dirs, files] {
            let phase = phase.into_iter().map(|(g, _)| g).collect();
            for (g, r) in set.heal_each(phase, policy).await {
                let Some(r) = r else { continue };
                match &r {
                    Err(e) => {
                        tracing::warn!(volume = %self.volume, set = %set.name, gfid = %g, "heal failed: {e}")
                    }
                    Ok(o) if o.deferred && mask != all => {
                        set.parked.lock().unwrap().insert(g, mask);
                    }
                    Ok(_) => {
                        set.parked.lock().unwrap().remove(&g);
                    }
                }
                self.count(&r, g);
            }
        }
    }

    /// Heals every object of the volume, whether the index names it or not
    /// (a brick replaced by an empty one, or changed behind mortar's back).
    /// Answers how many replica sets it could not crawl (no brick up).
    pub async fn full(&self) -> usize {
        let policy = *self.policy.lock().unwrap();
        let mut unreached = 0;
        self.begin_crawl("FULL");
        // The server dies with the heal recorded as running (it resumes it).
        fail::fail_point!("heal-full-started");
        for set in &self.sets {
            let mut dirs = VecDeque::from([Gfid::ROOT]);
            while let Some(d) = dirs.pop_front() {
                let r = set.heal(d, policy).await;
                self.count(&r, d);
                let Some(src) = set.bricks.iter().find(|b| b.x.is_up()) else {
                    unreached += 1;
                    break;
                };
                let Ok(names) = list_on(src, d).await else {
                    continue;
                };
                // The directory's files, several at once, as an index pass
                // heals them; those its heal just made on a sink were
                // healed with it.
                let mut files = Vec::new();
                for (g, is_dir) in names {
                    if is_dir {
                        dirs.push_back(g);
                    } else {
                        files.push(g);
                    }
                }
                for (g, r) in set.heal_each(files, policy).await {
                    if let Some(r) = r {
                        self.count(&r, g);
                    }
                }
            }
        }
        self.end_crawl(true);
        unreached
    }

    /// What is pending, per brick (every brick of the volume).
    pub async fn info(&self, split_only: bool) -> Vec<BrickHeal> {
        Self::report(self.scan(true).await, split_only)
    }

    /// What is pending, per brick, with split-brain as this healer last
    /// found it (no copy is read).
    pub async fn progress(&self) -> Vec<BrickHeal> {
        Self::report(self.scan(false).await, false)
    }

    fn report(scans: Vec<BrickScan>, split_only: bool) -> Vec<BrickHeal> {
        scans
            .into_iter()
            .map(|b| {
                let split_brain: Vec<String> = b.split.iter().copied().map(show).collect();
                BrickHeal {
                    brick: b.brick,
                    connected: b.connected,
                    entries: if split_only {
                        split_brain.clone()
                    } else {
                        b.pending.into_iter().map(show).collect()
                    },
                    split_brain,
                    to_compare: b.to_compare,
                }
            })
            .collect()
    }

    /// Every brick's heal index, and which of its objects are in
    /// split-brain: each object judged once per replica set (`judge`, some
    /// at once), or as the passes of this healer found it.
    async fn scan(&self, judge: bool) -> Vec<BrickScan> {
        use futures_util::stream::{self, StreamExt};
        let mut out = Vec::new();
        for set in &self.sets {
            let lists = futures_util::future::join_all(set.bricks.iter().map(|b| async move {
                if !b.x.is_up() {
                    return None;
                }
                match b.x.call(&Ctx::root(), Fop::Pending { max: u32::MAX }).await {
                    Ok(Reply::Pending(gfids, bytes)) => Some((gfids, bytes)),
                    _ => Some((vec![], 0)),
                }
            }))
            .await;
            let all: HashSet<Gfid> = lists.iter().flatten().flat_map(|l| &l.0).copied().collect();
            let (split, to_compare): (HashSet<Gfid>, HashMap<Gfid, u64>) = if judge {
                let judged: Vec<(Gfid, bool, u64)> = stream::iter(all)
                    .map(|g| async move {
                        let (split, bytes) = set.judge(g).await;
                        (g, split, bytes)
                    })
                    .buffer_unordered(JUDGED_AT_ONCE)
                    .collect()
                    .await;
                (
                    judged.iter().filter(|j| j.1).map(|j| j.0).collect(),
                    judged.iter().map(|j| (j.0, j.2)).collect(),
                )
            } else {
                let known = self.split.lock().unwrap();
                let split = all.into_iter().filter(|g| known.contains(g)).collect();
                (split, HashMap::new())
            };
            for (b, list) in set.bricks.iter().zip(lists) {
                let (pending, bytes) = list.unwrap_or_default();
                out.push(BrickScan {
                    brick: b.label.clone(),
                    connected: b.x.is_up(),
                    split: pending
                        .iter()
                        .copied()
                        .filter(|g| split.contains(g))
                        .collect(),
                    // Judged: what the set's heal will compare; else what
                    // the brick recorded.
                    to_compare: match judge {
                        true => pending.iter().filter_map(|g| to_compare.get(g)).sum(),
                        false => bytes,
                    },
                    pending,
                });
            }
        }
        out
    }

    pub fn statistics(&self) -> Vec<Crawl> {
        let mut v: Vec<Crawl> = self.crawls.lock().unwrap().iter().cloned().collect();
        v.extend(self.current.lock().unwrap().clone());
        v
    }

    /// Resolves split-brain of `gfid` (every one known if None) by `how`:
    /// a policy name, or a source brick label. Answers how many were
    /// resolved.
    pub async fn resolve(
        &self,
        gfid: Option<Gfid>,
        how: &str,
        source: Option<&str>,
    ) -> FsResult<usize> {
        let targets: Vec<Gfid> = match gfid {
            Some(g) => vec![g],
            None => {
                let all: HashSet<Gfid> = self
                    .scan(true)
                    .await
                    .into_iter()
                    .flat_map(|b| b.split)
                    .collect();
                all.into_iter().collect()
            }
        };
        if targets.is_empty() {
            return Ok(0);
        }
        let mut done = 0;
        for g in targets {
            for set in &self.sets {
                let r = match source {
                    Some(label) => {
                        let Some(pos) = set.bricks.iter().position(|b| b.label == label) else {
                            continue;
                        };
                        set.heal_from(g, pos).await
                    }
                    None => set.heal(g, Policy::parse(how)).await,
                };
                match r {
                    Ok(o) if o.healed > 0 && !o.split_brain => {
                        self.split.lock().unwrap().remove(&g);
                        done += 1;
                        break;
                    }
                    Ok(_) => {}
                    Err(e) => return Err(FsError::new(e.errno, format!("{}: {e}", show(g)))),
                }
            }
        }
        Ok(done)
    }

    /// The gfid of a path in the volume (for `split-brain … FILE`).
    /// Its error's message (`msg`) says what is wrong with the path.
    pub async fn gfid_of(&self, path: &str) -> FsResult<Gfid> {
        let mut g = Gfid::ROOT;
        for comp in path.split('/').filter(|c| !c.is_empty()) {
            let name = mortar_core::Name::new(comp.as_bytes().to_vec())
                .map_err(|e| FsError::new(e.errno, e.to_string()))?;
            let mut found = None;
            'sets: for set in &self.sets {
                for b in set.bricks.iter().filter(|b| b.x.is_up()) {
                    if let Ok(Reply::Entry(e)) =
                        b.x.call(
                            &Ctx::root(),
                            Fop::Lookup {
                                parent: g,
                                name: name.clone(),
                            },
                        )
                        .await
                    {
                        found = Some(e.attr.gfid);
                        break 'sets;
                    }
                }
            }
            g = found.ok_or_else(|| {
                FsError::new(
                    libc::ENOENT,
                    format!("{path}: no such file in volume {}", self.volume),
                )
            })?;
        }
        Ok(g)
    }
}

/// The objects in directory `d` on one brick: gfid and whether a directory.
async fn list_on(b: &Brick, d: Gfid) -> FsResult<Vec<(Gfid, bool)>> {
    let cx = Ctx::background();
    let Reply::Opened { fh } = b.x.call(&cx, Fop::Opendir { gfid: d }).await? else {
        return Ok(vec![]);
    };
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let Ok(Reply::Entries(ents)) =
            b.x.call(
                &cx,
                Fop::Readdir {
                    gfid: d,
                    fh,
                    offset,
                    plus: true,
                },
            )
            .await
        else {
            break;
        };
        if ents.is_empty() {
            break;
        }
        for e in ents {
            offset = e.next;
            if let Some(a) = e.attr {
                out.push((a.gfid, a.kind == mortar_core::FileKind::Dir));
            }
        }
    }
    let _ = b.x.call(&cx, Fop::Releasedir { gfid: d, fh }).await;
    Ok(out)
}

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod coded_tests;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod stack_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use mortar_graph::testkit::{desc_over, env_over, graph_over, rig, Rig};

    fn up(h: &Healer) -> Vec<bool> {
        h.graph.leaves().map(|n| n.child.is_up()).collect()
    }

    #[tokio::test]
    async fn a_healer_reaches_the_other_bricks_of_a_set_only_with_something_to_heal() {
        let r = rig(1, 3);
        let f = r.create(Gfid::ROOT, "f", b"old").await.unwrap();
        r.graph.fini().await;
        assert!(r.bricks[0].pending().is_empty());
        let (desc, env) = (desc_over(1, 3), env_over(&r.bricks));
        // Nothing to heal: the healer on h0 holds its own brick only.
        let h = Healer::new(&desc, |host| host == "h0", &env).unwrap();
        h.index_pass().await;
        assert_eq!(up(&h), [true, false, false]);
        // A change brick 2 missed: the next pass connects to the set's
        // other bricks.
        let r = Rig {
            graph: graph_over(&r.bricks, 1, 3),
            bricks: r.bricks,
        };
        r.bricks[2].set_down(true);
        r.write(f, 0, b"new").await.unwrap();
        r.graph.fini().await;
        r.bricks[2].set_down(false);
        assert!(r.bricks[0].pending().contains(&f));
        h.index_pass().await;
        assert_eq!(up(&h), [true, true, true]);
        // Asked about the whole volume, a new healer reaches every brick.
        let all = Healer::new(&desc, |_| false, &env).unwrap();
        assert_eq!(up(&all), [false, false, false]);
        all.wait_up(Duration::from_secs(3)).await;
        assert_eq!(up(&all), [true, true, true]);
    }

    #[tokio::test]
    async fn what_waits_for_a_brick_is_looked_at_again_once_a_brick_comes_or_goes_or_when_asked() {
        let r = rig(1, 3);
        let f = r.create(Gfid::ROOT, "f", b"old").await.unwrap();
        r.bricks[2].set_down(true);
        r.write(f, 0, b"new").await.unwrap();
        r.graph.fini().await;
        let (desc, env) = (desc_over(1, 3), env_over(&r.bricks));
        let h = Healer::new(&desc, |host| host == "h0", &env).unwrap();
        // The first pass finds the sink away and leaves the file.
        h.index_pass().await;
        assert!(r.bricks[0].pending().contains(&f));
        // Later passes ask the index, and nothing of the file.
        let before = r.bricks[0].calls();
        h.index_pass().await;
        h.index_pass().await;
        assert_eq!(r.bricks[0].calls() - before, 2, "one Pending per pass");
        // Asked for a heal, the healer looks again.
        let before = r.bricks[0].calls();
        h.trigger();
        h.index_pass().await;
        assert!(r.bricks[0].calls() - before > 2);
        // The sink back, the next pass heals the file.
        r.bricks[2].set_down(false);
        h.index_pass().await;
        assert!(r.bricks[0].pending().is_empty(), "healed");
        assert!(h.sets[0].parked.lock().unwrap().is_empty());
    }
}
