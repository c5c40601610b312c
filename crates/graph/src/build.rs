//! Builds translators from a description, each through the factory its
//! kind has (`table::factory`), and joins them: each child's link is
//! attached to its parent, so events travel up without any translator
//! forwarding them.

use mortar_core::desc::XlDesc;
use mortar_core::{Child, Link, Xlator};
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

/// How a client builds one translator of a kind over its children.
pub type Factory = fn(&BuildCtx, Vec<Child>) -> anyhow::Result<Arc<dyn Xlator>>;

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

/// Builds `d` and everything below it into `nodes` (children first),
/// each through the factory `factory_of` gives its kind; returns its
/// position.
pub fn build_into(
    d: &XlDesc,
    env: &Env,
    factory_of: &dyn Fn(&XlDesc) -> anyhow::Result<Factory>,
    nodes: &mut Vec<Node>,
) -> anyhow::Result<usize> {
    let mut idx = Vec::with_capacity(d.children.len());
    for c in &d.children {
        idx.push(build_into(c, env, factory_of, nodes)?);
    }
    let factory = factory_of(d)?;
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
