//! The graph's sets as typed views, for the processes that work on them
//! (the healer, the rebalancer, a mount's metrics): the bricks of each
//! replica set, the sets below distribute with their stable ids. The
//! parameters they are read from are volgen's (`host`, `brick`, `arbiter`,
//! `set-id`, `draining`), read here only: the table's factories read them
//! with the same functions (`arbiter_of`, `set_ids`, `is_on`), so the
//! healer and the rebalancer refuse what the client refuses.

use super::{Graph, Node};
use mortar_core::Child;

/// A flag parameter: on only when written `on`.
pub fn is_on(v: Option<&str>) -> bool {
    v == Some("on")
}

/// The arbiter of a replica set of `bricks` bricks (its last), when its
/// `arbiter` parameter is on.
pub fn arbiter_of(arbiter: Option<&str>, bricks: usize) -> Option<usize> {
    (is_on(arbiter) && bricks > 0).then(|| bricks - 1)
}

/// The stable ids of the sets below distribute, from each set's name and
/// `set-id` parameter: under 2^16 and no two alike. A set without one
/// (descriptions written by tests) is numbered by its position.
pub fn set_ids<'a>(
    sets: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> anyhow::Result<Vec<u32>> {
    let mut ids = Vec::new();
    for (i, (name, id)) in sets.enumerate() {
        ids.push(match id {
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|&v| v < 1 << 16)
                .ok_or_else(|| anyhow::anyhow!("{name}: bad set-id {v:?}"))?,
            None => i as u32,
        });
    }
    let mut seen = ids.clone();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != ids.len() {
        anyhow::bail!("two sets share an id: {ids:?}");
    }
    Ok(ids)
}

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

/// A replica set (cluster/replicate) or a disperse set (cluster/disperse)
/// and its bricks, in set order.
pub struct ReplicaSet {
    /// Its translator's name (`gv0-replicate-0`).
    pub name: String,
    pub bricks: Vec<BrickNode>,
    /// The brick that keeps names and metadata but no file data.
    pub arbiter: Option<usize>,
    /// A disperse set's data and parity fragments (K, R).
    pub coding: Option<(usize, usize)>,
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

    /// The bricks the sets read around because they answer late
    /// (`Xlator::slow`), as `host:/path`.
    pub fn slow_bricks(&self) -> Vec<String> {
        self.nodes()
            .iter()
            .flat_map(|n| {
                n.child
                    .xl
                    .slow()
                    .into_iter()
                    .filter_map(|i| n.children.get(i))
                    .map(|&c| BrickNode::of(&self.nodes()[c]).label())
            })
            .collect()
    }

    /// The replica and disperse sets, in graph order (a volume has sets of
    /// one kind).
    pub fn replica_sets(&self) -> Vec<ReplicaSet> {
        self.of_kind("cluster/replicate")
            .chain(self.of_kind("cluster/disperse"))
            .map(|r| {
                let bricks: Vec<BrickNode> = r
                    .children
                    .iter()
                    .map(|&c| BrickNode::of(&self.nodes()[c]))
                    .collect();
                let arbiter = arbiter_of(param(r, "arbiter"), bricks.len());
                let num = |k: &str| param(r, k).and_then(|v| v.parse::<usize>().ok());
                let coding = match r.kind.as_str() {
                    "cluster/disperse" => num("data").zip(num("redundancy")),
                    _ => None,
                };
                ReplicaSet {
                    name: r.name.clone(),
                    bricks,
                    arbiter,
                    coding,
                }
            })
            .collect()
    }

    /// The sets below the distribute translator, in its order (a graph
    /// without one: None), their ids read as distribute reads them.
    pub fn distribute_sets(&self) -> anyhow::Result<Option<Vec<DistSet>>> {
        let Some(dht) = self.of_kind("cluster/distribute").next() else {
            return Ok(None);
        };
        let below: Vec<&Node> = dht.children.iter().map(|&c| &self.nodes()[c]).collect();
        let ids = set_ids(below.iter().map(|n| (n.name.as_str(), param(n, "set-id"))))?;
        Ok(Some(
            below
                .iter()
                .zip(ids)
                .map(|(n, id)| DistSet {
                    id,
                    draining: is_on(param(n, "draining")),
                    child: n.child.clone(),
                })
                .collect(),
        ))
    }
}

fn param<'a>(n: &'a Node, key: &str) -> Option<&'a str> {
    n.params.get(key).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_ids_are_stable_ids_or_positions_and_never_two_alike() {
        let ids = |v: &[Option<&'static str>]| {
            set_ids(
                v.iter()
                    .enumerate()
                    .map(|(i, id)| (["a", "b", "c"][i], *id)),
            )
        };
        assert_eq!(ids(&[None, None, None]).unwrap(), [0, 1, 2]);
        assert_eq!(ids(&[Some("7"), Some("3")]).unwrap(), [7, 3]);
        let bad = ids(&[Some("1"), Some("x")]).unwrap_err().to_string();
        assert_eq!(bad, "b: bad set-id \"x\"");
        assert!(ids(&[Some("65536")]).is_err());
        assert!(ids(&[Some("1"), Some("1")]).is_err());
        // A position that collides with a stable id is refused too.
        assert!(ids(&[Some("1"), None]).is_err());
    }

    #[test]
    fn the_arbiter_is_the_last_brick_when_on() {
        assert_eq!(arbiter_of(Some("on"), 3), Some(2));
        assert_eq!(arbiter_of(Some("off"), 3), None);
        assert_eq!(arbiter_of(None, 3), None);
        assert_eq!(arbiter_of(Some("on"), 0), None);
    }
}
