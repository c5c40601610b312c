//! The bitrot scrubbers this server runs (`mortar_heal::scrub`): one per
//! started volume with `features.bitrot` on and a brick here, over a
//! healer of the volume's sets with a brick here (its repairs); and
//! `volume bitrot NAME scrub status|ondemand`, asked of every server with
//! a brick of the volume.

use super::*;
use crate::rpc::ScrubOp;
use mortar_heal::scrub::{Scrubber, BITROT};

/// A running scrubber: the graph it was built for, and its task.
pub(super) struct ScrubberProc {
    desc: mortar_core::desc::VolDesc,
    scrubber: Arc<Scrubber>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScrubberProc {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether `v` keeps more than one copy of its files (a scrubber has
/// something to repair from).
pub(super) fn redundant(v: &crate::state::Volume) -> bool {
    v.replica > 1 || v.redundancy > 0
}

impl Daemon {
    pub(super) async fn reconcile_scrubbers(&self, st: &ClusterState) {
        let mut want: HashMap<String, Vec<(String, PathBuf)>> = HashMap::new();
        for v in st
            .volumes
            .values()
            .filter(|v| v.status == VolStatus::Started && BITROT.bool(&v.options) && redundant(v))
        {
            let mut local = Vec::new();
            for b in &v.bricks {
                if self.is_local(&b.host).await {
                    local.push((format!("{}:{}", b.host, b.path), PathBuf::from(&b.path)));
                }
            }
            if !local.is_empty() {
                want.insert(v.name.clone(), local);
            }
        }
        let mut scrubbers = self.scrubbers.lock().unwrap();
        scrubbers.retain(|name, p| {
            let Some(local) = want.get(name) else {
                return false;
            };
            let hosts: Vec<String> = local.iter().map(|(l, _)| host_of(l)).collect();
            let Some(d) = self.local_desc(st, name, &hosts) else {
                return false;
            };
            if d.top != p.desc.top {
                return false;
            }
            if d.options != p.desc.options {
                p.scrubber.reconfigure(&d.options);
                p.desc = d;
            }
            true
        });
        for (name, local) in want {
            if scrubbers.contains_key(&name) {
                continue;
            }
            let hosts: Vec<String> = local.iter().map(|(l, _)| host_of(l)).collect();
            let Some(desc) = self.local_desc(st, &name, &hosts) else {
                continue;
            };
            let key = st.volumes.get(&name).map_or("", |v| v.key.as_str());
            let healer = match mortar_heal::Healer::new(
                &desc,
                |h| hosts.iter().any(|l| l == h),
                &rpc::internal_env(key),
            ) {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(volume = %name, "cannot start the scrubber: {e:#}");
                    continue;
                }
            };
            let saved = self.cfg.state_dir.join(format!("scrub-{name}.json"));
            let scrubber = Scrubber::new(
                healer,
                &local,
                |p, each| mortar_storage::posix::files_of(p, each),
                saved,
            );
            scrubber.reconfigure(&desc.options);
            tracing::info!(volume = %name, bricks = local.len(), "bitrot scrubber started");
            let task = tokio::spawn(scrubber.clone().run());
            scrubbers.insert(
                name,
                ScrubberProc {
                    desc,
                    scrubber,
                    task,
                },
            );
        }
    }

    /// `volume bitrot NAME scrub status|ondemand`.
    pub(super) async fn scrub(self: &Arc<Self>, name: String, op: ScrubOp, here: bool) -> Response {
        let v = match self.volume(&name) {
            Ok(v) => v,
            Err(e) => return err(e),
        };
        if !BITROT.bool(&v.options) {
            return err(format!("Bitrot is not enabled on volume {name}"));
        }
        if v.status != VolStatus::Started {
            return err(format!("Volume {name} is not started."));
        }
        if here {
            let s = self
                .scrubbers
                .lock()
                .unwrap()
                .get(&name)
                .map(|p| p.scrubber.clone());
            let Some(s) = s else {
                return Response::Scrub(Vec::new());
            };
            if op == ScrubOp::Ondemand {
                s.now();
            }
            return Response::Scrub(s.status());
        }
        let mut hosts: Vec<String> = v.bricks.iter().map(|b| b.host.clone()).collect();
        hosts.sort();
        hosts.dedup();
        let asks = hosts.iter().map(|h| {
            let req = Request::Scrub {
                name: name.clone(),
                op: op.clone(),
                here: true,
            };
            async move { (h.clone(), self.on_host(h, req).await) }
        });
        let mut all = Vec::new();
        for (host, r) in futures_util::future::join_all(asks).await {
            match r {
                Response::Scrub(s) => all.extend(s),
                Response::Err(e) => all.push(mortar_heal::scrub::BrickScrub {
                    brick: host,
                    state: format!("not reached: {e}"),
                    ..Default::default()
                }),
                other => all.push(mortar_heal::scrub::BrickScrub {
                    brick: host,
                    state: format!("not reached: {other:?}"),
                    ..Default::default()
                }),
            }
        }
        Response::Scrub(all)
    }
}

/// The host of a brick's label (`host:/path`).
fn host_of(label: &str) -> String {
    label.split_once(":/").map_or(label, |(h, _)| h).to_string()
}
