//! Volume description generator: turns a volume's definition into the
//! client translator graph, as data (`XlDesc`). The client builds the graph
//! from it with `crate::graph::build`; adding a translator to every client
//! is a change here and a factory there.

use super::options::effective;
use super::state::{ClusterState, Volume};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct XlDesc {
    /// Factory name: "protocol/client", "cluster/replicate", "cluster/distribute".
    pub kind: String,
    pub name: String,
    /// For protocol/client: the brick's host, its daemon's address and path.
    pub host: Option<String>,
    pub mgmt: Option<String>,
    pub brick: Option<String>,
    pub children: Vec<XlDesc>,
    /// For cluster/replicate: the last child is an arbiter.
    #[serde(default)]
    pub arbiter: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VolDesc {
    pub volume: String,
    pub id: String,
    pub version: u64,
    pub ping_timeout_secs: u64,
    /// Every registered option's value in force for this volume.
    pub options: crate::core::Options,
    pub top: XlDesc,
}

/// The management address of a brick's host, as this daemon knows it.
fn mgmt_of(
    state: &ClusterState,
    host: &str,
    self_host: &str,
    self_mgmt: &str,
    port: u16,
) -> String {
    if host == self_host {
        return self_mgmt.to_string();
    }
    state
        .peers
        .iter()
        .find(|p| p.host == host)
        .map(|p| p.mgmt.clone())
        .unwrap_or_else(|| super::rpc::mgmt_addr(host, port))
}

pub fn generate(
    state: &ClusterState,
    vol: &Volume,
    self_host: &str,
    self_mgmt: &str,
    port: u16,
) -> VolDesc {
    let clients: Vec<XlDesc> = vol
        .bricks
        .iter()
        .enumerate()
        .map(|(i, b)| XlDesc {
            kind: "protocol/client".into(),
            name: format!("{}-client-{i}", vol.name),
            host: Some(b.host.clone()),
            mgmt: Some(mgmt_of(state, &b.host, self_host, self_mgmt, port)),
            brick: Some(b.path.clone()),
            children: vec![],
            arbiter: false,
        })
        .collect();
    let sets: Vec<XlDesc> = if vol.replica > 1 {
        clients
            .chunks(vol.replica)
            .enumerate()
            .map(|(i, c)| XlDesc {
                kind: "cluster/replicate".into(),
                name: format!("{}-replicate-{i}", vol.name),
                host: None,
                mgmt: None,
                brick: None,
                children: c.to_vec(),
                arbiter: vol.arbiter > 0,
            })
            .collect()
    } else {
        clients
    };
    let top = XlDesc {
        kind: "cluster/distribute".into(),
        name: format!("{}-dht", vol.name),
        host: None,
        mgmt: None,
        brick: None,
        children: sets,
        arbiter: false,
    };
    VolDesc {
        volume: vol.name.clone(),
        id: vol.id.clone(),
        version: vol.version,
        ping_timeout_secs: effective(&vol.options, "network.ping-timeout")
            .parse()
            .unwrap_or(42),
        options: super::options::OPTIONS
            .iter()
            .map(|o| {
                (
                    o.key.to_string(),
                    effective(&vol.options, o.key).to_string(),
                )
            })
            .collect(),
        top,
    }
}
