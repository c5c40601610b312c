//! The daemon as operators watch it. Its metrics, read when scraped
//! (`mortar_metrics::on_scrape`): its bricks, the pool's servers as it
//! hears them, server quorum, the rebalances it runs (its self-heal
//! daemon counts heals as it goes). Its statedump: peers, volumes, its
//! bricks.

use super::members::GONE;
use super::Daemon;
use mortar_metrics::{BrickLabels, Metrics, PeerLabels, StateLabels, VolumeLabels};
use std::sync::{Arc, Weak};

impl Daemon {
    /// Serves the daemon's metrics at `cfg.metrics`, if set.
    pub(super) async fn serve_metrics(self: &Arc<Self>) {
        let Some(addr) = self.cfg.metrics else { return };
        let weak: Weak<Daemon> = Arc::downgrade(self);
        mortar_metrics::on_scrape(move |m| {
            if let Some(d) = weak.upgrade() {
                d.fill_metrics(m);
            }
        });
        let labels = vec![("host".to_string(), self.cfg.host.clone())];
        mortar_metrics::serve::start(Some(addr), mortar_metrics::Role::Daemon, labels).await;
    }

    /// The sections of this daemon's statedump (`kill -USR1`).
    pub(super) fn statedump_sections(self: &Arc<Self>) {
        use mortar_process::statedump::section;
        let weak: Weak<Daemon> = Arc::downgrade(self);
        section("peers", move || {
            let Some(d) = weak.upgrade() else {
                return String::new();
            };
            let st = d.state.lock().unwrap().clone();
            let mut out = format!("me={} {} {}\n", d.me.uuid, d.me.host, d.me.mgmt);
            for p in st.peers.iter() {
                out.push_str(&format!(
                    "peer={} {} {} silent_ms={}\n",
                    p.uuid,
                    p.host,
                    p.mgmt,
                    d.silent_for(&p.uuid).as_millis()
                ));
            }
            out
        });
        let weak: Weak<Daemon> = Arc::downgrade(self);
        section("volumes", move || {
            let Some(d) = weak.upgrade() else {
                return String::new();
            };
            let mut out = String::new();
            for v in d.volumes() {
                out.push_str(&format!(
                    "volume={} status={:?} replica={} bricks={} options={}\n",
                    v.name,
                    v.status,
                    v.replica,
                    v.bricks.len(),
                    v.options.len()
                ));
            }
            out
        });
        let weak: Weak<Daemon> = Arc::downgrade(self);
        section("bricks", move || {
            let Some(d) = weak.upgrade() else {
                return String::new();
            };
            let mut out = String::new();
            for (path, (proc, info)) in d.bricks.lock().unwrap().iter() {
                let st = info.get();
                out.push_str(&format!(
                    "brick={path} volume={} pid={:?} port={:?} offline={:?}\n",
                    proc.volume, st.pid, st.port, st.offline
                ));
            }
            out
        });
        mortar_process::statedump::on_signal(format!("daemon {}", self.cfg.host));
    }

    fn fill_metrics(&self, m: &Metrics) {
        m.brick_up.clear();
        for (path, (proc, info)) in self.bricks.lock().unwrap().iter() {
            let st = info.get();
            let up = st.port.is_some() && st.offline.is_none();
            let labels = BrickLabels {
                volume: proc.volume.clone(),
                brick: format!("{}:{path}", proc.host),
            };
            m.brick_up.get_or_create(&labels).set(up as i64);
            // Heal figures from the start, at zero until the self-heal
            // daemon finds work, so that alerts on them have a series.
            let _ = m.heal_pending.get_or_create(&labels);
            let _ = m.heal_pending_bytes.get_or_create(&labels);
            let volume = VolumeLabels {
                volume: proc.volume.clone(),
            };
            let _ = m.healed.get_or_create(&volume);
            let _ = m.heal_failed.get_or_create(&volume);
        }
        let peers: Vec<String> = {
            let st = self.state.lock().unwrap();
            st.peers.iter().map(|p| p.uuid.clone()).collect()
        };
        let (mut connected, mut gone) = (0, 0);
        for uuid in peers.iter().filter(|u| **u != self.me.uuid) {
            match self.silent_for(uuid) < GONE {
                true => connected += 1,
                false => gone += 1,
            }
        }
        m.peers
            .get_or_create(&PeerLabels { state: "connected" })
            .set(connected);
        m.peers
            .get_or_create(&PeerLabels {
                state: "disconnected",
            })
            .set(gone);
        m.quorum
            .set(self.quorum_lost.lock().unwrap().is_empty() as i64);
        m.rebalance_files.clear();
        for r in self.rebalancers.lock().unwrap().values() {
            let p = r.progress();
            for (state, n) in [
                ("scanned", p.scanned),
                ("moved", p.moved),
                ("skipped", p.skipped),
                ("failed", p.failed),
            ] {
                m.rebalance_files
                    .get_or_create(&StateLabels {
                        volume: r.volume().to_string(),
                        state,
                    })
                    .set(n as i64);
            }
        }
    }
}
