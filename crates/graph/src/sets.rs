//! The graph's sets as typed views, for the processes that work on them
//! (the healer, the rebalancer, a mount's metrics): the bricks of each
//! replica set, the sets below distribute with their stable ids. The
//! parameters they are read from are volgen's (`host`, `brick`, `arbiter`,
//! `set-id`, `draining`), read here and in the table's factories only.

use super::{Graph, Node};
use mortar_core::Child;

/// A brick of the graph: a client connection (protocol/client).
#[derive(Clone)]
pub struct BrickNode {
    pub host: String,
    pub path: String,
    pub child: Child,
}

impl BrickNode {
    fn of(n: &Node) -> BrickNode {
        let param = |k: &str| n.params.get(k).cloned().unwrap_or_default();
        BrickNode {
            host: param("host"),
            path: param("brick"),
            child: n.child.clone(),
        }
    }

    /// `host:/path`, as the CLI shows a brick.
    pub fn label(&self) -> String {
        format!("{}:{}", self.host, self.path)
    }
}

/// The host of a brick's node (None: not a brick).
pub fn brick_host(n: &Node) -> Option<&str> {
    n.params.get("host").map(String::as_str)
}

/// `host:/path` of a brick's node.
pub fn brick_label(n: &Node) -> String {
    BrickNode::of(n).label()
}

/// A replica set (cluster/replicate) and its bricks, in set order.
pub struct ReplicaSet {
    /// Its translator's name (`gv0-replicate-0`).
    pub name: String,
    pub bricks: Vec<BrickNode>,
    /// The brick that keeps names and metadata but no file data.
    pub arbiter: Option<usize>,
}

/// A set below distribute: its stable id, whether a remove-brick empties
/// it, and the translator above its bricks.
pub struct DistSet {
    pub id: u32,
    pub draining: bool,
    pub child: Child,
}

impl Graph {
    /// Every brick of the graph.
    pub fn bricks(&self) -> impl Iterator<Item = BrickNode> + '_ {
        self.leaves().map(BrickNode::of)
    }

    /// The replica sets, in graph order.
    pub fn replica_sets(&self) -> Vec<ReplicaSet> {
        self.of_kind("cluster/replicate")
            .map(|r| {
                let bricks: Vec<BrickNode> = r
                    .children
                    .iter()
                    .map(|&c| BrickNode::of(&self.nodes()[c]))
                    .collect();
                let arbiter = (r.params.get("arbiter").map(String::as_str) == Some("on"))
                    .then(|| bricks.len() - 1);
                ReplicaSet {
                    name: r.name.clone(),
                    bricks,
                    arbiter,
                }
            })
            .collect()
    }

    /// The sets below the distribute translator, in its order (a graph
    /// without one: None). A set without an id is numbered by position,
    /// as distribute numbers it.
    pub fn distribute_sets(&self) -> Option<Vec<DistSet>> {
        let dht = self.of_kind("cluster/distribute").next()?;
        Some(
            dht.children
                .iter()
                .enumerate()
                .map(|(i, &c)| {
                    let n = &self.nodes()[c];
                    DistSet {
                        id: n
                            .params
                            .get("set-id")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(i as u32),
                        draining: n.params.get("draining").map(String::as_str) == Some("on"),
                        child: n.child.clone(),
                    }
                })
                .collect(),
        )
    }
}
