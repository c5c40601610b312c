//! The bitrot scrubber (`volume bitrot V enable`): now and then it reads
//! every file of this server's bricks of a volume and checks each 4 KiB
//! block against the checksum the brick kept when it was written
//! (`storage.checksums`; the brick does the checking on every read). A
//! copy whose data no longer matches is recorded, logged, counted in the
//! metrics, and rewritten from the other copies or fragments of its set
//! (`repair.rs`). A reader never gets such data: its read fails on that
//! copy and the client reads another.
//!
//! The scrubber reads as background work (the bricks serve clients
//! first), at most at its throttle's rate, one file at a time, and keeps
//! what it found in a file of the daemon's, so that its schedule and its
//! findings outlive a restart.

use super::Healer;
use mortar_core::fop::{FileKind, ANON_FH};
use mortar_core::{Child, Ctx, Fop, FsError, FsResult, Gfid, Reply};
pub use mortar_graph::roles::{BITROT, SCRUB, SCRUB_FREQ, SCRUB_THROTTLE};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes read per request.
const CHUNK: u32 = 1 << 20;

/// Bytes a second a throttle allows (None: no limit).
pub fn rate(throttle: &str) -> Option<u64> {
    match throttle {
        "aggressive" => None,
        "normal" => Some(64 << 20),
        _ => Some(16 << 20),
    }
}

/// The time between two scrubs of a brick.
pub fn every(freq: &str) -> Duration {
    let day = 86_400;
    Duration::from_secs(match freq {
        "minute" => 60,
        "hourly" => 3_600,
        "daily" => day,
        "weekly" => 7 * day,
        "monthly" => 30 * day,
        _ => 14 * day,
    })
}

/// What a brick's scrubber did and found.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BrickScrub {
    pub brick: String,
    /// Scrubbing, Paused, Idle.
    pub state: String,
    /// Scrubs finished.
    pub runs: u64,
    /// Files and bytes checked by the scrub running, or the last.
    pub files: u64,
    pub bytes: u64,
    /// Unix times; the last scrub's length in seconds.
    pub last_started: Option<u64>,
    pub last_finished: Option<u64>,
    pub last_secs: Option<u64>,
    pub next: Option<u64>,
    /// Copies found damaged (the latest 1,000).
    pub damaged: Vec<Damaged>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Damaged {
    pub gfid: String,
    pub found: u64,
    pub error: String,
    /// When it was rewritten from the others, or why it could not be.
    pub repaired: Option<u64>,
    pub repair_error: Option<String>,
}

/// Damaged copies remembered per brick.
const DAMAGED_MAX: usize = 1000;

/// Lists the regular files of the brick in a directory, a batch at a
/// time (`storage::posix::files_of`). Blocking.
pub type Walk = fn(&std::path::Path, &mut dyn FnMut(Vec<Gfid>)) -> std::io::Result<()>;

pub struct Scrubber {
    pub volume: String,
    walk: Walk,
    healer: Arc<Healer>,
    /// This server's bricks: label, directory, connection.
    bricks: Vec<(String, PathBuf, Child)>,
    status: Mutex<Vec<BrickScrub>>,
    /// Where the status is kept across restarts.
    saved: PathBuf,
    wake: tokio::sync::Notify,
    asked: AtomicBool,
    paused: AtomicBool,
    /// Bytes a second (0: no limit).
    rate: AtomicU64,
    every: Mutex<Duration>,
}

fn now_secs() -> u64 {
    mortar_core::clock::unix_secs()
}

impl Scrubber {
    /// A scrubber of `bricks` (label, directory) of `healer`'s volume,
    /// keeping its status in `saved`.
    pub fn new(
        healer: Arc<Healer>,
        bricks: &[(String, PathBuf)],
        walk: Walk,
        saved: PathBuf,
    ) -> Arc<Scrubber> {
        let conns = healer.local_bricks();
        let bricks: Vec<(String, PathBuf, Child)> = bricks
            .iter()
            .filter_map(|(l, p)| {
                let c = conns.iter().find(|(cl, _)| cl == l)?.1.clone();
                Some((l.clone(), p.clone(), c))
            })
            .collect();
        // Served at 0 from the start (an alert's `increase()` needs them).
        let labels = mortar_metrics::VolumeLabels {
            volume: healer.volume.clone(),
        };
        let m = mortar_metrics::get();
        let _ = m.scrubbed_bytes.get_or_create(&labels);
        let _ = m.scrub_damaged.get_or_create(&labels);
        let _ = m.scrub_repaired.get_or_create(&labels);
        let old: Vec<BrickScrub> = std::fs::read(&saved)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let status = bricks
            .iter()
            .map(|(l, _, _)| {
                let mut s = old
                    .iter()
                    .find(|s| &s.brick == l)
                    .cloned()
                    .unwrap_or_else(|| BrickScrub {
                        brick: l.clone(),
                        ..Default::default()
                    });
                s.state = "Idle".into();
                s
            })
            .collect();
        Arc::new(Scrubber {
            volume: healer.volume.clone(),
            walk,
            healer,
            bricks,
            status: Mutex::new(status),
            saved,
            wake: tokio::sync::Notify::new(),
            asked: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            rate: AtomicU64::new(0),
            every: Mutex::new(every("biweekly")),
        })
    }

    pub fn reconfigure(&self, options: &mortar_core::Options) {
        self.rate.store(
            rate(SCRUB_THROTTLE.str(options)).unwrap_or(0),
            Ordering::Relaxed,
        );
        *self.every.lock().unwrap() = every(SCRUB_FREQ.str(options));
        let paused = SCRUB.str(options) == "Inactive";
        self.paused.store(paused, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// Scrubs every brick now (`scrub ondemand`), even while one is going:
    /// the next one starts when it ends.
    pub fn now(&self) {
        self.asked.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }

    pub fn status(&self) -> Vec<BrickScrub> {
        let mut s = self.status.lock().unwrap().clone();
        if self.paused.load(Ordering::Relaxed) {
            for b in &mut s {
                b.state = "Paused".into();
            }
        }
        s
    }

    fn save(&self) {
        let s = self.status.lock().unwrap().clone();
        if let Ok(b) = serde_json::to_vec_pretty(&s) {
            let tmp = self.saved.with_extension("tmp");
            if std::fs::write(&tmp, b).is_ok() {
                let _ = std::fs::rename(&tmp, &self.saved);
            }
        }
    }

    /// Scrubs each brick when it is due, for as long as it runs.
    pub async fn run(self: Arc<Self>) {
        loop {
            let asked = self.asked.swap(false, Ordering::Relaxed);
            let every = *self.every.lock().unwrap();
            let mut next: Option<u64> = None;
            for i in 0..self.bricks.len() {
                let last = self.status.lock().unwrap()[i].last_finished;
                let due = last.map_or(0, |t| t + every.as_secs());
                if asked || due <= now_secs() {
                    self.scrub_brick(i).await;
                } else {
                    next = Some(next.map_or(due, |n| n.min(due)));
                    self.status.lock().unwrap()[i].next = Some(due);
                }
            }
            let wait = next.map_or(every, |n| Duration::from_secs(n.saturating_sub(now_secs())));
            if self.asked.load(Ordering::Relaxed) {
                continue;
            }
            let _ =
                tokio::time::timeout(wait.max(Duration::from_secs(1)), self.wake.notified()).await;
        }
    }

    async fn scrub_brick(&self, i: usize) {
        let (label, path, conn) = self.bricks[i].clone();
        let started = Instant::now();
        {
            let mut s = self.status.lock().unwrap();
            let b = &mut s[i];
            b.state = "Scrubbing".into();
            b.files = 0;
            b.bytes = 0;
            b.last_started = Some(now_secs());
            b.next = None;
        }
        tracing::info!(volume = %self.volume, brick = %label, "scrub started");
        // The brick's files, one index directory at a time.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<Gfid>>(2);
        let list = self.walk;
        let walk = tokio::task::spawn_blocking(move || {
            list(&path, &mut |batch| {
                let _ = tx.blocking_send(batch);
            })
        });
        let mut budget = Budget::new();
        while let Some(batch) = rx.recv().await {
            for gfid in batch {
                while self.paused.load(Ordering::Relaxed) {
                    self.status.lock().unwrap()[i].state = "Paused".into();
                    let _ =
                        tokio::time::timeout(Duration::from_secs(1), self.wake.notified()).await;
                }
                self.status.lock().unwrap()[i].state = "Scrubbing".into();
                match self.scrub_file(&conn, gfid, &mut budget, i).await {
                    Ok(()) => {}
                    Err(e) => self.damaged(i, &label, gfid, e).await,
                }
            }
        }
        match walk.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(volume = %self.volume, brick = %label, "scrub cannot list the brick's files: {e}")
            }
            Err(e) => tracing::warn!(volume = %self.volume, brick = %label, "scrub: {e}"),
        }
        let (files, bytes, damaged) = {
            let mut s = self.status.lock().unwrap();
            let b = &mut s[i];
            b.state = "Idle".into();
            b.runs += 1;
            b.last_finished = Some(now_secs());
            b.last_secs = Some(started.elapsed().as_secs());
            b.next = Some(now_secs() + self.every.lock().unwrap().as_secs());
            (b.files, b.bytes, b.damaged.len())
        };
        self.save();
        tracing::info!(volume = %self.volume, brick = %label, files, bytes, damaged, "scrub finished in {:?}", started.elapsed());
    }

    /// Reads file `gfid` on the brick through `conn`: an error if a block
    /// is damaged (EIO) or cannot be read.
    async fn scrub_file(
        &self,
        conn: &Child,
        gfid: Gfid,
        budget: &mut Budget,
        i: usize,
    ) -> FsResult<()> {
        let cx = Ctx::background();
        let attr = match conn.call(&cx, Fop::Getattr { gfid }).await {
            Ok(Reply::Attr(a)) => a,
            Ok(_) => return Ok(()),
            // Removed since it was listed.
            Err(e) if e.is(libc::ENOENT) || e.is(libc::ESTALE) => return Ok(()),
            Err(e) => return Err(e),
        };
        if attr.kind != FileKind::File {
            return Ok(());
        }
        let metrics = mortar_metrics::get()
            .scrubbed_bytes
            .get_or_create(&mortar_metrics::VolumeLabels {
                volume: self.volume.clone(),
            })
            .clone();
        let mut offset = 0;
        while offset < attr.size {
            let read = Fop::Read {
                gfid,
                fh: ANON_FH,
                offset,
                size: CHUNK,
            };
            let n = match conn.call(&cx, read).await {
                Ok(Reply::Data(d)) => d.len() as u64,
                Ok(_) => 0,
                Err(e) if e.is(libc::ENOENT) || e.is(libc::ESTALE) => return Ok(()),
                Err(e) => return Err(e),
            };
            if n == 0 {
                break;
            }
            offset += n;
            metrics.inc_by(n);
            self.status.lock().unwrap()[i].bytes += n;
            budget.spend(n, self.rate.load(Ordering::Relaxed)).await;
        }
        self.status.lock().unwrap()[i].files += 1;
        Ok(())
    }

    /// Copy `gfid` on brick `i` failed its check with `e`: recorded, and
    /// rewritten from the others.
    async fn damaged(&self, i: usize, label: &str, gfid: Gfid, e: FsError) {
        let labels = mortar_metrics::VolumeLabels {
            volume: self.volume.clone(),
        };
        tracing::error!(volume = %self.volume, brick = %label, %gfid, "scrub: the copy is damaged: {e}");
        mortar_metrics::get()
            .scrub_damaged
            .get_or_create(&labels)
            .inc();
        let mut d = Damaged {
            gfid: gfid.to_string(),
            found: now_secs(),
            error: e.to_string(),
            repaired: None,
            repair_error: None,
        };
        match self.healer.repair(label, gfid).await {
            Ok(bytes) => {
                tracing::info!(volume = %self.volume, brick = %label, %gfid, bytes, "scrub: the damaged copy was rewritten from the others");
                mortar_metrics::get()
                    .scrub_repaired
                    .get_or_create(&labels)
                    .inc();
                d.repaired = Some(now_secs());
            }
            Err(e) => {
                tracing::error!(volume = %self.volume, brick = %label, %gfid, "scrub: the damaged copy cannot be rewritten: {e}");
                d.repair_error = Some(e.to_string());
            }
        }
        {
            let mut s = self.status.lock().unwrap();
            let b = &mut s[i];
            b.damaged.push(d);
            if b.damaged.len() > DAMAGED_MAX {
                b.damaged.remove(0);
            }
        }
        self.save();
    }
}

/// The throttle: sleeps so that the bytes spent since it began go no
/// faster than the rate.
struct Budget {
    since: tokio::time::Instant,
    spent: u64,
}

impl Budget {
    fn new() -> Budget {
        Budget {
            since: tokio::time::Instant::now(),
            spent: 0,
        }
    }

    async fn spend(&mut self, n: u64, rate: u64) {
        self.spent += n;
        if rate == 0 {
            return;
        }
        let due = Duration::from_secs_f64(self.spent as f64 / rate as f64);
        let elapsed = self.since.elapsed();
        if due > elapsed {
            tokio::time::sleep(due - elapsed).await;
        }
        // A long pause (paused, a slow brick) is not made up for later.
        if elapsed > due + Duration::from_secs(1) {
            *self = Budget::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttles_and_frequencies_are_glusterfs_words() {
        assert_eq!(rate("lazy"), Some(16 << 20));
        assert_eq!(rate("normal"), Some(64 << 20));
        assert_eq!(rate("aggressive"), None);
        assert_eq!(every("minute"), Duration::from_secs(60));
        assert_eq!(every("biweekly"), Duration::from_secs(14 * 86_400));
        for s in [&SCRUB_THROTTLE, &SCRUB_FREQ, &SCRUB, &BITROT] {
            assert!(s.validate(s.default).is_ok(), "{}", s.key);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_keeps_to_its_rate() {
        let start = tokio::time::Instant::now();
        let mut b = Budget::new();
        for _ in 0..4 {
            b.spend(1 << 20, 2 << 20).await;
        }
        // 4 MiB at 2 MiB/s: about 2 s.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(1900), "{took:?}");
    }
}
