//! Volume description generator: stacks a volume's client graph from the
//! translator table (`graph::table`): one `Place::Brick` translator per
//! brick, a `Place::Set` translator over each replica set (replica > 1), a
//! `Place::Volume` translator over the sets, then every `Place::Above`
//! row whose option is on, in table order. The client builds the graph
//! from the result with `graph::Graph::build`.

use super::options::in_force;
use super::state::{Brick, ClusterState, Volume};
use mortar_core::desc::{VolDesc, XlDesc};
use mortar_graph::table::{Place, Row, Side, TABLE};
use std::collections::HashMap;

/// The management address of a brick's host, as this daemon knows it
/// (`peers`: by host name).
fn mgmt_of(
    peers: &HashMap<&str, &str>,
    host: &str,
    self_host: &str,
    self_mgmt: &str,
    port: u16,
) -> String {
    if host == self_host {
        return self_mgmt.to_string();
    }
    match peers.get(host) {
        Some(m) => m.to_string(),
        None => super::rpc::mgmt_addr(host, port),
    }
}

/// The client rows at `place` that this volume's options turn on.
fn rows_at(
    place: Place,
    options: &mortar_core::Options,
) -> impl Iterator<Item = &'static Row> + '_ {
    TABLE.iter().filter(move |r| {
        r.side == Side::Client && r.place == place && r.enabled_by.is_none_or(|s| s.bool(options))
    })
}

/// The one row a place must have (the table's own test checks there is one).
fn one_row(place: Place, options: &mortar_core::Options) -> &'static Row {
    rows_at(place, options)
        .next()
        .expect("the translator table has a row for every place")
}

/// Short instance names, as GlusterFS writes them: "gv0-replicate-0".
fn short(kind: &str) -> &str {
    match kind {
        "cluster/distribute" => "dht",
        "protocol/client" => "client",
        k => k.rsplit('/').next().unwrap_or(k),
    }
}

pub fn generate(
    state: &ClusterState,
    vol: &Volume,
    self_host: &str,
    self_mgmt: &str,
    port: u16,
) -> VolDesc {
    generate_sets(state, vol, self_host, self_mgmt, port, &|_| true).expect("a volume has bricks")
}

/// The volume's options in force, its graph left empty: all a brick
/// needs to follow its volume.
pub fn options_only(state: &ClusterState, vol: &Volume) -> VolDesc {
    VolDesc {
        volume: vol.name.clone(),
        id: vol.id.clone(),
        version: vol.version,
        options: in_force(&vol.options),
        top: XlDesc::new("", String::new(), vec![]),
        clients: vol
            .credentials
            .iter()
            .flat_map(|c| {
                let access = |fingerprint: &String, retired| mortar_core::desc::ClientAccess {
                    fingerprint: fingerprint.clone(),
                    name: c.name.clone(),
                    read_only: c.read_only,
                    identity: c.identity,
                    retired,
                };
                std::iter::once(access(&c.fingerprint, false))
                    .chain(c.retired.iter().map(move |fp| access(fp, true)))
            })
            .collect(),
        pool: state
            .pool_certs()
            .map(|c| c.into_iter().collect())
            .unwrap_or_default(),
        retired: state.retired_certs().into_iter().collect(),
    }
}

/// The description with only the replica sets (with replica 1, the
/// bricks) `keep` picks by their bricks; None if it picks none. A
/// self-heal daemon needs the sets with a brick on its server: at 300
/// servers, one set instead of a hundred.
pub fn generate_sets(
    state: &ClusterState,
    vol: &Volume,
    self_host: &str,
    self_mgmt: &str,
    port: u16,
    keep: &dyn Fn(&[Brick]) -> bool,
) -> Option<VolDesc> {
    let mut desc = options_only(state, vol);
    // Which credentials a volume has is the bricks' business only; the
    // pool's certificates on record (not secret) are the servers a client
    // takes.
    desc.clients.clear();
    desc.retired.clear();
    let options = &desc.options;
    let leaf = one_row(Place::Brick, options);
    let peers: HashMap<&str, &str> = state
        .peers
        .iter()
        .map(|p| (p.host.as_str(), p.mgmt.as_str()))
        .collect();
    let client = |i: usize, b: &Brick| {
        let d = XlDesc::new(
            leaf.kind,
            format!("{}-{}-{i}", vol.name, short(leaf.kind)),
            vec![],
        )
        .with("host", &b.host)
        .with("mgmt", mgmt_of(&peers, &b.host, self_host, self_mgmt, port))
        .with("brick", &b.path);
        match b.port {
            Some(p) => d.with("port", p.to_string()),
            None => d,
        }
    };
    let width = vol.replica.max(1);
    let set = one_row(Place::Set, options);
    let set_ids = vol.set_ids();
    let below: Vec<XlDesc> = vol
        .bricks
        .chunks(width)
        .enumerate()
        .filter(|(_, bricks)| keep(bricks))
        .flat_map(|(si, bricks)| {
            let sid = set_ids.get(si).copied().unwrap_or(si as u32);
            let draining = vol.draining.contains(&sid);
            let id = sid.to_string();
            let leaves = bricks
                .iter()
                .enumerate()
                .map(move |(j, b)| client(si * width + j, b));
            if vol.replica > 1 {
                let kind = if vol.dispersed() {
                    "cluster/disperse"
                } else {
                    set.kind
                };
                let d = XlDesc::new(
                    kind,
                    format!("{}-{}-{si}", vol.name, short(kind)),
                    leaves.collect(),
                );
                let d = if vol.dispersed() {
                    d.with("data", (vol.replica - vol.redundancy).to_string())
                        .with("redundancy", vol.redundancy.to_string())
                } else {
                    d
                };
                let d = d.with("set-id", id);
                let d = if draining {
                    d.with("draining", "on")
                } else {
                    d
                };
                vec![if vol.arbiter > 0 {
                    d.with("arbiter", "on")
                } else {
                    d
                }]
            } else {
                leaves
                    .map(|l| l.with("set-id", &id))
                    .map(|l| {
                        if draining {
                            l.with("draining", "on")
                        } else {
                            l
                        }
                    })
                    .collect()
            }
        })
        .collect();
    if below.is_empty() {
        return None;
    }
    let whole = one_row(Place::Volume, options);
    let mut top = XlDesc::new(
        whole.kind,
        format!("{}-{}", vol.name, short(whole.kind)),
        below,
    )
    .with("layout-commit", vol.layout_commit.to_string());
    for r in rows_at(Place::Above, options) {
        top = XlDesc::new(r.kind, format!("{}-{}", vol.name, short(r.kind)), vec![top]);
    }
    desc.top = top;
    Some(desc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Brick, VolStatus};

    fn volume(replica: usize, bricks: usize, arbiter: usize) -> Volume {
        Volume {
            name: "gv0".into(),
            id: "id".into(),
            replica,
            arbiter,
            redundancy: 0,
            transport: "tcp".into(),
            bricks: (0..bricks)
                .map(|i| Brick {
                    host: "h".into(),
                    path: format!("/b{i}"),
                    port: Some(49152 + i as u16),
                })
                .collect(),
            status: VolStatus::Started,
            options: Default::default(),
            version: 7,
            tasks: Vec::new(),
            set_ids: Vec::new(),
            layout_commit: 1,
            draining: Vec::new(),
            resetting: Vec::new(),
            key: String::new(),
            credentials: Vec::new(),
        }
    }

    fn kinds(d: &XlDesc) -> Vec<String> {
        d.walk()
            .iter()
            .map(|x| format!("{}:{}", x.kind, x.name))
            .collect()
    }

    #[test]
    fn a_dispersed_volume_has_disperse_sets() {
        let st = ClusterState::default();
        let mut v = volume(6, 12, 0);
        v.redundancy = 2;
        assert_eq!(v.type_name(), "Distributed-Disperse");
        assert_eq!(v.brick_count_line(), "2 x (4 + 2) = 12");
        let d = generate(&st, &v, "h", "h:24107", 24107);
        let dht = d
            .top
            .walk()
            .into_iter()
            .find(|x| x.kind == "cluster/distribute")
            .unwrap()
            .clone();
        assert_eq!(dht.children.len(), 2);
        let set = &dht.children[1];
        assert_eq!(
            (set.kind.as_str(), set.name.as_str()),
            ("cluster/disperse", "gv0-disperse-1")
        );
        assert_eq!(
            (set.param("data"), set.param("redundancy")),
            (Some("4"), Some("2"))
        );
        assert_eq!(set.children.len(), 6);
        v.bricks.truncate(6);
        assert_eq!(v.type_name(), "Disperse");
    }

    #[test]
    fn the_stack_follows_the_table() {
        let st = ClusterState::default();
        let d = generate(&st, &volume(3, 6, 1), "h", "h:24107", 24107);
        assert_eq!(d.version, 7);
        // Performance layers on by default stand above the volume.
        assert_eq!(d.top.kind, "performance/write-behind");
        assert_eq!(d.top.name, "gv0-write-behind");
        let io = &d.top.children[0];
        assert_eq!(io.kind, "performance/io-cache");
        let md = &io.children[0];
        assert_eq!(md.kind, "performance/md-cache");
        let dht = &md.children[0];
        assert_eq!(dht.kind, "cluster/distribute");
        assert_eq!(dht.children.len(), 2);
        let set = &dht.children[1];
        assert_eq!(set.name, "gv0-replicate-1");
        assert_eq!(set.param("arbiter"), Some("on"));
        assert_eq!(set.children[2].param("brick"), Some("/b5"));
        assert_eq!(set.children[2].param("port"), Some("49157"));
        assert_eq!(set.children[2].param("mgmt"), Some("h:24107"));
        assert_eq!(d.options["network.ping-timeout"], "10");
        // Only the sets asked for, named as in the whole.
        let part = generate_sets(&st, &volume(3, 6, 1), "h", "h:24107", 24107, &|b| {
            b.iter().any(|b| b.path == "/b4")
        })
        .unwrap();
        let part_dht = &part.top.children[0].children[0].children[0];
        assert_eq!(part_dht.children.len(), 1);
        assert_eq!(part_dht.children[0], dht.children[1]);
        assert!(generate_sets(&st, &volume(3, 6, 1), "h", "h", 1, &|_| false).is_none());
        let plain = generate(&st, &volume(1, 2, 0), "h", "h:24107", 24107);
        assert_eq!(
            kinds(&plain.top),
            vec![
                "performance/write-behind:gv0-write-behind",
                "performance/io-cache:gv0-io-cache",
                "performance/md-cache:gv0-md-cache",
                "cluster/distribute:gv0-dht",
                "protocol/client:gv0-client-0",
                "protocol/client:gv0-client-1"
            ]
        );
    }
}
