//! Builds translators from a description, one factory per table row, and
//! joins them: each child's link is attached to its parent, so events
//! travel up without any translator forwarding them.

use super::desc::XlDesc;
use super::table;
use crate::cluster::{distribute::Distribute, replicate::Replicate};
use crate::core::{Child, Link, Xlator};
use std::sync::Arc;

/// Makes the connection to one brick from its description, emitting on
/// the link given.
pub type Connect = Arc<dyn Fn(&XlDesc, Arc<Link>) -> anyhow::Result<Arc<dyn Xlator>> + Send + Sync>;

/// What the graph's owner provides to the factories.
pub struct Env {
    /// How a `protocol/client` connects: over TCP to a brick whose port
    /// its host's daemon gives (`mgmt::rpc::graph_env`), or to an
    /// in-memory brick in tests.
    pub connect: Connect,
}

/// What a factory gets: its description, the link it emits events on, the
/// owner's environment.
pub struct BuildCtx<'a> {
    pub desc: &'a XlDesc,
    pub link: Arc<Link>,
    pub env: &'a Env,
}

/// A built translator: where it is in the graph.
pub struct Node {
    pub kind: String,
    pub name: String,
    pub params: std::collections::BTreeMap<String, String>,
    pub child: Child,
    /// Its children's positions in the graph's node list.
    pub children: Vec<usize>,
    /// Whether the graph called its `start` (once at build, or later for
    /// a bottom one left to `wait_leaves`).
    started: std::sync::atomic::AtomicBool,
}

impl Node {
    /// Calls the translator's `start`, the first time only.
    pub(super) fn start(&self) {
        if !self.started.swap(true, std::sync::atomic::Ordering::AcqRel) {
            self.child.xl.start();
        }
    }
}

/// Builds `d` and everything below it into `nodes` (children first);
/// returns its position.
pub fn build_into(d: &XlDesc, env: &Env, nodes: &mut Vec<Node>) -> anyhow::Result<usize> {
    let mut idx = Vec::with_capacity(d.children.len());
    for c in &d.children {
        idx.push(build_into(c, env, nodes)?);
    }
    let row = table::row(&d.kind)
        .ok_or_else(|| anyhow::anyhow!("{}: unknown translator kind {}", d.name, d.kind))?;
    let factory = row
        .build
        .ok_or_else(|| anyhow::anyhow!("{}: {} is not a client translator", d.name, d.kind))?;
    let children: Vec<Child> = idx.iter().map(|&i| nodes[i].child.clone()).collect();
    let link = Link::new();
    let ctx = BuildCtx {
        desc: d,
        link: link.clone(),
        env,
    };
    let xl = factory(&ctx, children.clone())?;
    for (i, c) in children.iter().enumerate() {
        c.link.attach(Arc::downgrade(&xl), i, link.clone());
    }
    nodes.push(Node {
        kind: d.kind.clone(),
        name: d.name.clone(),
        params: d.params.clone(),
        child: Child::new(xl, link),
        children: idx,
        started: Default::default(),
    });
    Ok(nodes.len() - 1)
}

pub(super) fn protocol_client(
    cx: &BuildCtx,
    _children: Vec<Child>,
) -> anyhow::Result<Arc<dyn Xlator>> {
    (cx.env.connect)(cx.desc, cx.link.clone())
}

pub(super) fn replicate(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let arbiter = (cx.desc.param("arbiter") == Some("on")).then(|| children.len() - 1);
    Ok(Arc::new(
        Replicate::new(cx.desc.name.clone(), children).with_arbiter(arbiter),
    ))
}

pub(super) fn distribute(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    if children.is_empty() {
        anyhow::bail!("{}: distribute needs children", cx.desc.name);
    }
    // Stable set ids and the layout generation, as volgen writes them;
    // a description without them (tests) numbers the sets in order.
    let mut ids = Vec::new();
    for (i, d) in cx.desc.children.iter().enumerate() {
        ids.push(match d.param("set-id") {
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|&v| v < 1 << 16)
                .ok_or_else(|| anyhow::anyhow!("{}: bad set-id {v:?}", d.name))?,
            None => i as u32,
        });
    }
    let mut seen = ids.clone();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != ids.len() {
        anyhow::bail!("{}: two sets share an id", cx.desc.name);
    }
    let commit = match cx.desc.param("layout-commit") {
        Some(v) => v
            .parse()
            .map_err(|_| anyhow::anyhow!("{}: bad layout-commit {v:?}", cx.desc.name))?,
        None => 1,
    };
    let draining = cx
        .desc
        .children
        .iter()
        .map(|d| d.param("draining") == Some("on"))
        .collect();
    Ok(Arc::new(
        Distribute::with_sets(cx.desc.name.clone(), children, ids, commit).with_draining(draining),
    ))
}

/// The one child a translator stacked above the volume takes.
fn only_child(cx: &BuildCtx, mut children: Vec<Child>, what: &str) -> anyhow::Result<Child> {
    if children.len() != 1 {
        anyhow::bail!("{}: {what} takes one child", cx.desc.name);
    }
    Ok(children.remove(0))
}

pub(super) fn read_only(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let child = only_child(cx, children, "read-only")?;
    let name = cx.desc.name.clone();
    Ok(Arc::new(crate::features::read_only::ReadOnly::new(
        name, child,
    )))
}

pub(super) fn md_cache(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let child = only_child(cx, children, "md-cache")?;
    let name = cx.desc.name.clone();
    Ok(crate::performance::md_cache::MdCache::new(name, child))
}

pub(super) fn io_cache(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let child = only_child(cx, children, "io-cache")?;
    let name = cx.desc.name.clone();
    Ok(Arc::new(crate::performance::io_cache::IoCache::new(
        name, child,
    )))
}

pub(super) fn write_behind(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let child = only_child(cx, children, "write-behind")?;
    let name = cx.desc.name.clone();
    Ok(Arc::new(
        crate::performance::write_behind::WriteBehind::new(name, child),
    ))
}

pub(super) fn io_stats(cx: &BuildCtx, children: Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>> {
    let child = only_child(cx, children, "io-stats")?;
    let name = cx.desc.name.clone();
    Ok(Arc::new(crate::debug::io_stats::IoStats::new(name, child)))
}
