//! `debug/io-stats`: counts the fops that pass, their errors and their
//! time, per fop. On while `diagnostics.count-fop-hits` is on; the counts
//! are part of the graph a mount shows (`trusted.mortar.client.graph`).
//! Turning it on or off switches every mounted client's graph, which makes
//! it the option the graph-switch test toggles while data flows.

use async_trait::async_trait;
use mortar_core::options::{Kind, Spec};
use mortar_core::{Child, Ctx, Fop, FsResult, Reply, Xlator};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

pub static COUNT_FOP_HITS: Spec = Spec {
    key: "diagnostics.count-fop-hits",
    kind: Kind::Bool,
    default: "off",
    help: "Counts every mount's fops, their errors and mean latency, shown with the client graph (getfattr -n trusted.mortar.client.graph MOUNT).",
};

#[derive(Default, Clone, Copy)]
struct Count {
    calls: u64,
    errors: u64,
    nanos: u128,
}

pub struct IoStats {
    name: String,
    child: Child,
    counts: Mutex<BTreeMap<&'static str, Count>>,
}

impl IoStats {
    pub fn new(name: String, child: Child) -> IoStats {
        IoStats {
            name,
            child,
            counts: Mutex::new(BTreeMap::new()),
        }
    }
}

#[async_trait]
impl Xlator for IoStats {
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        let name = fop.name();
        let start = Instant::now();
        let r = self.child.call(cx, fop).await;
        let mut counts = self.counts.lock().unwrap();
        let c = counts.entry(name).or_default();
        c.calls += 1;
        c.errors += r.is_err() as u64;
        c.nanos += start.elapsed().as_nanos();
        r
    }

    fn dump(&self) -> Vec<String> {
        self.counts
            .lock()
            .unwrap()
            .iter()
            .map(|(fop, c)| {
                format!(
                    "{fop}: {} calls, {} errors, {} us mean",
                    c.calls,
                    c.errors,
                    c.nanos / 1000 / c.calls.max(1) as u128
                )
            })
            .collect()
    }
}
