//! The registry of volume options: the options the translator table's
//! rows declare (`graph::table`), each written once beside the code that
//! reads it. `volume set` validates against it, `volume get` reports from
//! it; a key no translator reads does not exist.

use mortar_core::options::{Error, Spec};
use mortar_graph::table;
use std::collections::BTreeMap;

pub use mortar_core::options::parse_size;

/// GlusterFS's option groups (`volume set VOL group NAME`), with the
/// options of theirs that mortar has: a user who knows the bundle by name
/// gets what it means here. Each value is checked against its spec by the
/// tests below.
pub static GROUPS: &[(&str, &[(&str, &str)])] = &[
    (
        // Attributes and xattrs kept at the mount, under long leases.
        "metadata-cache",
        &[
            ("features.cache-invalidation", "on"),
            ("features.cache-invalidation-timeout", "600"),
            ("performance.stat-prefetch", "on"),
        ],
    ),
    (
        // Missing names kept at the mount (the kernel's negative entries,
        // under the same leases).
        "nl-cache",
        &[
            ("features.cache-invalidation", "on"),
            ("features.cache-invalidation-timeout", "600"),
        ],
    ),
    (
        // Databases: every write on the bricks when it returns, no caching
        // of metadata at the mount.
        "db-workload",
        &[
            ("performance.write-behind", "off"),
            ("performance.stat-prefetch", "off"),
            ("performance.io-cache", "off"),
        ],
    ),
];

/// The options a group sets, or why there is no such group.
pub fn group(name: &str) -> Result<Vec<(String, String)>, Error> {
    let (_, opts) = GROUPS.iter().find(|(n, _)| *n == name).ok_or_else(|| {
        let known: Vec<&str> = GROUPS.iter().map(|(n, _)| *n).collect();
        Error::UnknownGroup {
            name: name.to_string(),
            known: known.join(", "),
        }
    })?;
    opts.iter()
        .map(|(k, v)| Ok((k.to_string(), validate(k, v)?)))
        .collect()
}

/// Every option, in table order.
/// `cluster.brick-multiplex`: each server serves all its bricks from one
/// process (`brickd::host`).
pub static BRICK_MULTIPLEX: Spec = Spec {
    key: "cluster.brick-multiplex",
    kind: mortar_core::options::Kind::Bool,
    default: "on",
    help: "Serve all of a server's bricks from one process (one port, one runtime) instead of a process per brick; bricks started after the change follow it",
};

/// `nfs.port`: where each server's NFS server listens (NFS and MOUNT on
/// the one port). One per server, so the pool's: GlusterFS sets it per
/// volume for its one NFS process per server.
pub static NFS_PORT: Spec = Spec {
    key: "nfs.port",
    kind: mortar_core::options::Kind::Int(1, 65535),
    default: "2049",
    help: "The port each server's NFS server takes (NFSv3 and MOUNT both), for the volumes with nfs.disable off",
};

/// `nfs.register-with-portmap`: whether each server's NFS server tells
/// the machine's portmapper (rpcbind) where it is, when that holds port
/// 111. Pool-wide, as `nfs.port`.
pub static NFS_REGISTER_WITH_PORTMAP: Spec = Spec {
    key: "nfs.register-with-portmap",
    kind: mortar_core::options::Kind::Bool,
    default: "on",
    help: "When the machine's portmapper (rpcbind) holds port 111, each server's NFS server registers NFS and MOUNT with it (and takes them out when it stops), so that clients find them without being given the port; off: it does not (for a machine that runs another NFS server, such as NFS-Ganesha, that registers). Where port 111 is free, the NFS server answers there itself either way (GlusterFS's option)",
};

/// `snap-max-hard-limit`, `snap-max-soft-limit`, `auto-delete`: how many
/// snapshots a volume keeps (`snapshot config`, docs/snapshots.md).
pub static SNAP_MAX_HARD_LIMIT: Spec = Spec {
    key: "snap-max-hard-limit",
    kind: mortar_core::options::Kind::Int(1, crate::command::MAX_PER_VOLUME as i64),
    default: "256",
    help: "Snapshots a volume may have: snapshot create is refused beyond it (unless auto-delete is enabled, which deletes the oldest first)",
};

pub static SNAP_MAX_SOFT_LIMIT: Spec = Spec {
    key: "snap-max-soft-limit",
    kind: mortar_core::options::Kind::Int(1, 100),
    default: "90",
    help: "Percent of snap-max-hard-limit at which snapshot create warns, or with auto-delete enabled deletes the volume's oldest snapshots down to it",
};

pub static SNAP_AUTO_DELETE: Spec = Spec {
    key: "auto-delete",
    kind: mortar_core::options::Kind::Enum(&["enable", "disable"]),
    default: "disable",
    help: "enable: snapshot create deletes a volume's oldest snapshots once it has snap-max-soft-limit percent of snap-max-hard-limit",
};

/// The options of the pool rather than of one volume, as GlusterFS's
/// global options: `volume set all KEY VALUE`, `volume get all KEY|all`.
pub static POOL: &[&Spec] = &[
    &BRICK_MULTIPLEX,
    &NFS_PORT,
    &NFS_REGISTER_WITH_PORTMAP,
    &SNAP_MAX_HARD_LIMIT,
    &SNAP_MAX_SOFT_LIMIT,
    &SNAP_AUTO_DELETE,
];

pub fn pool_spec(key: &str) -> Option<&'static Spec> {
    POOL.iter().copied().find(|o| o.key == key)
}

/// The pool's options in force, defaults included.
pub fn pool_in_force(set: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    POOL.iter()
        .map(|o| (o.key.to_string(), o.str(set).to_string()))
        .collect()
}

pub fn all() -> Vec<&'static Spec> {
    table::all_options().collect()
}

pub fn spec(key: &str) -> Option<&'static Spec> {
    table::all_options().find(|o| o.key == key)
}

/// Checks a value against the option's type; returns it in canonical form.
pub fn validate(key: &str, value: &str) -> Result<String, Error> {
    spec(key)
        .ok_or_else(|| Error::Unknown(key.to_string()))?
        .validate(value)
}

/// The value in force: the volume's own setting or the default.
pub fn effective<'a>(set: &'a BTreeMap<String, String>, key: &str) -> &'a str {
    set.get(key)
        .map(String::as_str)
        .unwrap_or_else(|| spec(key).map(|s| s.default).unwrap_or(""))
}

/// Every option's value in force for a volume with these settings.
pub fn in_force(set: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    all()
        .into_iter()
        .map(|o| (o.key.to_string(), effective(set, o.key).to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_is_what_the_translators_declare() {
        assert_eq!(validate("cluster.self-heal-daemon", "yes").unwrap(), "on");
        assert!(validate("network.ping-timeout", "0").is_err());
        let e = validate("no.such-option", "1").unwrap_err();
        assert_eq!(e, Error::Unknown("no.such-option".into()));
        assert_eq!(e.to_string(), "option : no.such-option does not exist");
        let e = validate("network.ping-timeout", "0").unwrap_err();
        assert!(
            matches!(
                e,
                Error::BadValue {
                    key: "network.ping-timeout",
                    ..
                }
            ),
            "{e}"
        );
        let e = validate("auth.allow", "10.0.0.1,no way").unwrap_err();
        assert!(
            e.to_string()
                .ends_with(": 'no way' is not an address, network or host name"),
            "{e}"
        );
        // Options without a translator that reads them are not accepted.
        for inert in ["performance.quick-read", "client.ssl", "nfs.rpc-auth-allow"] {
            assert!(validate(inert, "on").is_err(), "{inert}");
        }
        assert_eq!(validate("server.ssl", "no").unwrap(), "off");
        let mut m = BTreeMap::new();
        assert_eq!(effective(&m, "network.ping-timeout"), "10");
        m.insert("network.ping-timeout".into(), "5".into());
        assert_eq!(in_force(&m)["network.ping-timeout"], "5");
        assert_eq!(in_force(&m).len(), all().len());
    }

    #[test]
    fn every_group_sets_options_that_exist() {
        for (name, _) in GROUPS {
            assert!(!group(name).unwrap().is_empty(), "{name}");
        }
        let e = group("virt").unwrap_err().to_string();
        assert!(
            e.contains("does not exist") && e.contains("metadata-cache"),
            "{e}"
        );
    }
}
