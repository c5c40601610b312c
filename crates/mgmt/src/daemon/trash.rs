//! The trash sweepers this server runs: for each started volume with
//! `features.trash` on whose first brick is here, a task that empties
//! the volume's trash by age and size now and then
//! (`xlators::features::trash::sweep`), over a graph of the whole volume
//! built for each sweep. A change of the sweep's options starts it again,
//! sweeping at once.

use super::*;
use mortar_xlators::features::trash::{sweep, TRASH};

/// How long a sweep waits for the volume's bricks.
const REACH: Duration = Duration::from_secs(5);

/// A running sweeper: the volume's graph and the options it sweeps by,
/// and its task.
pub(super) struct SweeperProc {
    desc: Arc<mortar_core::desc::VolDesc>,
    by: (Duration, String),
    task: tokio::task::JoinHandle<()>,
}

impl Daemon {
    pub(super) async fn reconcile_sweepers(&self, st: &ClusterState) {
        let mut want = HashMap::new();
        for v in st
            .volumes
            .values()
            .filter(|v| v.status == VolStatus::Started && TRASH.bool(&v.options))
        {
            let Some(first) = v.bricks.first() else {
                continue;
            };
            if !self.is_local(&first.host).await {
                continue;
            }
            let Some(desc) = self.desc(&v.name) else {
                continue;
            };
            let age = Duration::from_secs(sweep::MAX_AGE.int(&v.options).max(0) as u64);
            let size = sweep::MAX_SIZE.str(&v.options).to_string();
            want.insert(v.name.clone(), (desc, (age, size), v.key.clone()));
        }
        let mut sweepers = self.sweepers.lock().unwrap();
        sweepers.retain(|name, p| {
            let keep = want
                .get(name)
                .is_some_and(|(d, by, _)| d.top == p.desc.top && *by == p.by);
            if !keep {
                p.task.abort();
            }
            keep
        });
        for (name, (desc, by, key)) in want {
            if sweepers.contains_key(&name) {
                continue;
            }
            tracing::info!(volume = %name, max_age = ?by.0, max_size = %by.1, "trash sweeper started");
            let task = tokio::spawn(sweep_loop(name.clone(), desc.clone(), key, by.clone()));
            sweepers.insert(name, SweeperProc { desc, by, task });
        }
    }
}

async fn sweep_loop(
    volume: String,
    desc: Arc<mortar_core::desc::VolDesc>,
    key: String,
    (age, size): (Duration, String),
) {
    let max_size = mortar_core::options::ShareOrSize::parse(&size)
        .unwrap_or(mortar_core::options::ShareOrSize::Share(10));
    loop {
        if let Err(e) = sweep_once(&volume, &desc, &key, age, max_size).await {
            tracing::warn!(volume = %volume, "trash sweep: {e}");
        }
        tokio::time::sleep(sweep::sweep_every(age)).await;
    }
}

async fn sweep_once(
    volume: &str,
    desc: &mortar_core::desc::VolDesc,
    key: &str,
    age: Duration,
    max_size: mortar_core::options::ShareOrSize,
) -> Result<(), String> {
    let graph = mortar_graph::Graph::build_lazy(desc, &rpc::internal_env(key), |_| false)
        .map_err(|e| format!("{e:#}"))?;
    graph.wait_leaves(|_| true, REACH).await;
    let res = sweep::sweep(graph.top(), std::time::SystemTime::now(), age, max_size).await;
    graph.fini().await;
    let s = res.map_err(|e| e.to_string())?;
    if s.aged.0 + s.over.0 > 0 {
        tracing::info!(
            volume = %volume,
            "trash swept: {} files ({} bytes) older than {age:?} and {} ({} bytes) over the trash's size removed; {} files ({} bytes) kept",
            s.aged.0, s.aged.1, s.over.0, s.over.1, s.kept.0, s.kept.1
        );
    }
    Ok(())
}
