//! The daemon's metrics, read when scraped (`crate::metrics::on_scrape`):
//! its bricks, the pool's servers as it hears them, server quorum, the
//! rebalances it runs. (Its self-heal daemon counts heals as it goes.)

use super::members::GONE;
use super::Daemon;
use crate::metrics::{BrickLabels, Metrics, PeerLabels, StateLabels};
use std::sync::{Arc, Weak};

impl Daemon {
    /// Serves the daemon's metrics at `cfg.metrics`, if set.
    pub(super) async fn serve_metrics(self: &Arc<Self>) {
        let Some(addr) = self.cfg.metrics else { return };
        let weak: Weak<Daemon> = Arc::downgrade(self);
        crate::metrics::on_scrape(move |m| {
            if let Some(d) = weak.upgrade() {
                d.fill_metrics(m);
            }
        });
        let labels = vec![("host".to_string(), self.cfg.host.clone())];
        crate::metrics::serve::start(Some(addr), crate::metrics::Role::Daemon, labels).await;
    }

    fn fill_metrics(&self, m: &Metrics) {
        m.brick_up.clear();
        for (path, (proc, info)) in self.bricks.lock().unwrap().iter() {
            let st = info.get();
            let up = st.port.is_some() && st.offline.is_none();
            m.brick_up
                .get_or_create(&BrickLabels {
                    volume: proc.volume.clone(),
                    brick: format!("{}:{path}", self.cfg.host),
                })
                .set(up as i64);
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
