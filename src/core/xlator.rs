//! The translator trait. A volume's client is a graph of translators, each
//! holding its children; a request is a `Fop` passed down with a `Ctx`.
//! A parent learns whether a child can serve from `is_up`, which the
//! protocol client keeps current from its connection and ping timer.

use super::{Fop, FsResult, Gfid, Reply};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Receives a brick's unasked notices: their kind ("contention": another
/// client waits for a lock this one holds) and object.
pub type Upcall = std::sync::Arc<dyn Fn(&str, Gfid) + Send + Sync>;

/// Volume options in force, by key (see `mgmt::options`).
pub type Options = std::collections::BTreeMap<String, String>;

/// Per-request context: who asks, for what, on whose behalf.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Ctx {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// The FUSE request id, for logs.
    pub unique: u64,
}

impl Ctx {
    pub fn root() -> Ctx {
        Ctx::default()
    }
}

#[async_trait]
pub trait Xlator: Send + Sync {
    /// A short name for logs: the translator type and its instance.
    fn name(&self) -> String;
    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply>;
    /// True when this translator can serve requests now.
    fn is_up(&self) -> bool {
        true
    }
    /// Changes whenever handles this translator issued may have become
    /// invalid (a brick connection was lost): a parent holding handles from
    /// an older epoch must not use them.
    fn epoch(&self) -> u64 {
        0
    }
    /// Network requests this translator and those below it have sent to
    /// bricks (the benchmark's requests-per-create figure).
    fn requests(&self) -> u64 {
        0
    }
    /// Applies changed volume options (key → value in force) to this
    /// translator and its children, without rebuilding the graph.
    fn reconfigure(&self, _options: &Options) {}
    /// Where to deliver notices from the bricks below (the parent that
    /// holds their locks subscribes).
    fn set_upcall(&self, _upcall: Upcall) {}
    /// Lets go of what this translator holds on the bricks (locks, change
    /// sessions) before the client exits.
    async fn shutdown(&self) {}
}
