//! A graph as data: what the management daemon generates (`mgmt::volgen`)
//! and sends to clients, and what `graph::build` turns into translators.

use crate::Options;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One translator of a graph and the translators below it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct XlDesc {
    /// Its kind: a row of `graph::table` ("cluster/replicate", ...).
    pub kind: String,
    /// Its instance name, for logs ("gv0-replicate-0").
    pub name: String,
    /// Settings of this instance alone (a brick's host and path, whether
    /// the last child is an arbiter); volume options are in `VolDesc`.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    pub children: Vec<XlDesc>,
}

impl XlDesc {
    pub fn new(kind: &str, name: String, children: Vec<XlDesc>) -> XlDesc {
        XlDesc {
            kind: kind.into(),
            name,
            params: BTreeMap::new(),
            children,
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<String>) -> XlDesc {
        self.params.insert(key.into(), value.into());
        self
    }

    pub fn param(&self, key: &str) -> Option<&str> {
        self.params.get(key).map(String::as_str)
    }

    /// This translator and all below it, parents before children.
    pub fn walk(&self) -> Vec<&XlDesc> {
        let mut out = vec![self];
        for c in &self.children {
            out.extend(c.walk());
        }
        out
    }
}

/// A volume's client graph and the options in force.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VolDesc {
    pub volume: String,
    pub id: String,
    /// Moves on with every change of the volume (options, bricks).
    pub version: u64,
    /// Every declared option's value in force for this volume.
    pub options: Options,
    pub top: XlDesc,
    /// The volume's client credentials: what a brick checks a client of
    /// the `client` role against. Only in the description bricks follow
    /// (`mgmt::volgen::options_only`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clients: Vec<ClientAccess>,
    /// The certificates (SHA-256, hex) of the pool's servers and their
    /// administrators: the only ones of those roles a brick takes, and the
    /// only servers a mount takes (empty: any of the pool's CA, in a pool
    /// that has not recorded them yet).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pool: Vec<String>,
    /// Certificates of the pool's servers and administrators that a
    /// rotation replaced: a brick keeps the connections opened with them,
    /// and takes no new one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<String>,
}

/// One client credential of a volume, as its bricks know it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClientAccess {
    /// SHA-256 of its certificate, in hex.
    pub fingerprint: String,
    pub name: String,
    pub read_only: bool,
    /// Every request of its holder runs as this uid and gid, whatever it
    /// claims (None: as claimed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<(u32, u32)>,
    /// A certificate its rotation replaced: the connections opened with
    /// it go on, no new one is taken.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retired: bool,
}
