//! The self-heal daemons this server runs, and `volume heal`.

use super::*;

/// A running self-heal: the graph it was built for (a change of options
/// alone reconfigures it; a change of shape builds it again), the healer,
/// its task.
pub(super) type HealerProc = (
    crate::graph::XlDesc,
    Arc<Healer>,
    tokio::task::JoinHandle<()>,
);

impl Daemon {
    /// Runs a healer for every started replicated volume with a brick here.
    pub(super) async fn reconcile_healers(&self, st: &ClusterState) {
        let mut want: HashMap<String, (Volume, Vec<String>)> = HashMap::new();
        for v in st
            .volumes
            .values()
            .filter(|v| v.status == VolStatus::Started && v.replica > 1)
            .filter(|v| SELF_HEAL_DAEMON.bool(&v.options))
        {
            let mut local = Vec::new();
            for b in &v.bricks {
                if self.is_local(&b.host).await {
                    local.push(b.host.clone());
                }
            }
            if !local.is_empty() {
                want.insert(v.name.clone(), (v.clone(), local));
            }
        }
        // Each healer connects to the replica sets with a brick here only
        // (not to every brick of the volume: at 300 servers that made
        // 90,000 connections).
        let descs: HashMap<String, crate::graph::VolDesc> = want
            .iter()
            .filter_map(|(name, (v, local))| {
                let port = self.cfg.listen.port();
                let mut d = volgen::generate(st, v, &self.me.host, &self.me.mgmt, port);
                d.top = d
                    .top
                    .keep_sets(&|hosts| hosts.iter().any(|h| local.iter().any(|l| l == h)))?;
                Some((name.clone(), d))
            })
            .collect();
        let mut healers = self.healers.lock().unwrap();
        healers.retain(|name, (top, healer, task)| {
            let keep = descs.get(name).filter(|d| d.top == *top);
            match keep {
                Some(d) => healer.reconfigure(&d.options),
                None => task.abort(),
            }
            keep.is_some()
        });
        for (name, (_, local)) in want {
            if healers.contains_key(&name) {
                continue;
            }
            let Some(desc) = descs.get(&name) else {
                continue;
            };
            match Healer::new(desc, |h| local.iter().any(|l| l == h), &rpc::graph_env()) {
                Ok(h) => {
                    tracing::info!(volume = %name, "self-heal daemon started");
                    let task = tokio::spawn(h.clone().run());
                    healers.insert(name, (desc.top.clone(), h, task));
                }
                Err(e) => tracing::warn!(volume = %name, "cannot start self-heal: {e:#}"),
            }
        }
    }

    /// `volume heal NAME …`.
    pub(super) async fn heal(self: &Arc<Self>, name: String, op: HealOp) -> Response {
        let v = match self.volume(&name) {
            Ok(v) => v,
            Err(e) => return err(e),
        };
        if v.status != VolStatus::Started {
            return err(format!("Volume {name} is not started."));
        }
        if v.replica < 2 {
            return err(format!("Volume {name} is not of type replicate"));
        }
        // The resident healer covers the sets with a brick here; what is
        // about every brick (info, split-brain) needs the whole volume.
        let whole = matches!(
            op,
            HealOp::Info
                | HealOp::InfoSummary
                | HealOp::InfoSplitBrain
                | HealOp::SplitBrain { .. }
                | HealOp::Full
        );
        let desc = volgen::generate(
            &self.state.lock().unwrap().clone(),
            &v,
            &self.me.host,
            &self.me.mgmt,
            self.cfg.listen.port(),
        );
        let running = self
            .healers
            .lock()
            .unwrap()
            .get(&name)
            .filter(|(top, _, _)| !whole || *top == desc.top)
            .map(|(_, h, _)| h.clone());
        let healer = match running {
            Some(h) => h,
            None => {
                // No brick here, or not all of them: a healer of the whole
                // volume just for this.
                match Healer::new(&desc, |_| false, &rpc::graph_env()) {
                    Ok(h) => {
                        h.wait_up(Duration::from_secs(3)).await;
                        h
                    }
                    Err(e) => return err(format!("{e:#}")),
                }
            }
        };
        if matches!(op, HealOp::Index | HealOp::Full) && !SELF_HEAL_DAEMON.bool(&v.options) {
            return err(format!(
                "Self-heal-daemon is disabled. Heal will not be triggered on volume {name}"
            ));
        }
        let mut rep = HealReport::default();
        match op {
            HealOp::Index => {
                healer.trigger();
                rep.message = format!("Launching heal operation to perform index self heal on volume {name} has been successful \nUse heal info commands to check status.");
            }
            HealOp::Full => {
                let h = healer.clone();
                tokio::spawn(async move { h.full().await });
                rep.message = format!("Launching heal operation to perform full self heal on volume {name} has been successful \nUse heal info commands to check status.");
            }
            HealOp::Info | HealOp::InfoSummary => rep.bricks = healer.info(false).await,
            HealOp::InfoSplitBrain => rep.bricks = healer.info(true).await,
            HealOp::Statistics => rep.crawls = healer.statistics(),
            HealOp::SplitBrain { how, file, source } => {
                let gfid = match &file {
                    Some(f) => match healer.gfid_of(f).await {
                        Ok(g) => Some(g),
                        Err(e) => return err(e),
                    },
                    None => None,
                };
                match healer.resolve(gfid, &how, source.as_deref()).await {
                    Ok(0) => {
                        return err(match file {
                            Some(f) => format!(
                                "{f}: not in split-brain (or its copies could not be reached)"
                            ),
                            None => format!("no file of volume {name} is in split-brain"),
                        })
                    }
                    Ok(n) => {
                        rep.message = format!("Healed {n} file(s) in split-brain of volume {name}.")
                    }
                    Err(e) => return err(e),
                }
            }
        }
        Response::Heal(rep)
    }
}
