//! Which clients a brick serves: `auth.allow` and `auth.reject`, by the
//! address a connection comes from (docs/security.md). A brick checks a
//! client at its handshake, and checks every connection again when the
//! volume's rules change, closing those no longer allowed.

use crate::refusal::Refusal;
use mortar_core::addrs::Patterns;
use mortar_core::options::{Kind, Spec};
use mortar_core::Options;
use std::net::IpAddr;

pub static AUTH_ALLOW: Spec = Spec {
    key: "auth.allow",
    kind: Kind::Addresses,
    default: "*",
    help: "Clients the volume's bricks serve, by the address they connect from: addresses (192.168.1.10), networks (10.0.0.0/8, 10.0.*.*) or host names (matched by the addresses they resolve to), comma-separated; * for any. Checked at each connection; connections no longer allowed are closed within seconds of a change. Without TLS an address is all a brick knows of a client.",
};

pub static AUTH_REJECT: Spec = Spec {
    key: "auth.reject",
    kind: Kind::Addresses,
    default: "none",
    help: "Clients the volume's bricks refuse even if auth.allow names them, in the same form; none for no one.",
};

pub static SERVER_SSL: Spec = Spec {
    key: "server.ssl",
    kind: Kind::Bool,
    default: "on",
    help: "TLS with the pool's certificates on the connections of the volume's clients to its bricks. off: mounts, self-heal and rebalance speak to the bricks in the clear, and a brick also takes clients without a credential (auth.allow still applies): only for a network where every machine is trusted. Management connections stay TLS.",
};

pub static AUTH_SSL_ALLOW: Spec = Spec {
    key: "auth.ssl-allow",
    kind: Kind::Names,
    default: "*",
    help: "The volume's client credentials (volume credentials VOL create NAME) its bricks take, by name, comma-separated; * for all of them. Administrators and the pool's servers are not concerned.",
};

pub static ROOT_SQUASH: Spec = Spec {
    key: "server.root-squash",
    kind: Kind::Bool,
    default: "off",
    help: "Requests of root (uid 0) from the volume's mounts run on the bricks as server.anonuid and server.anongid, without supplementary groups: root on a client is no one special in the volume. The pool's own self-heal and rebalance are not concerned.",
};

pub static ALL_SQUASH: Spec = Spec {
    key: "server.all-squash",
    kind: Kind::Bool,
    default: "off",
    help: "Every request from the volume's mounts, whoever asks, runs on the bricks as server.anonuid and server.anongid, without supplementary groups.",
};

pub static ANON_UID: Spec = Spec {
    key: "server.anonuid",
    kind: Kind::Int(0, u32::MAX as i64 - 1),
    default: "65534",
    help: "The uid that server.root-squash and server.all-squash map requests to.",
};

pub static ANON_GID: Spec = Spec {
    key: "server.anongid",
    kind: Kind::Int(0, u32::MAX as i64 - 1),
    default: "65534",
    help: "The gid that server.root-squash and server.all-squash map requests to.",
};

/// Who a request runs as on a brick, from a connection that is not one of
/// the pool's servers: the identity it claims (a mount's user), with
/// `server.root-squash` and `server.all-squash` applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Squash {
    pub root: bool,
    pub all: bool,
    pub anon: (u32, u32),
}

impl Squash {
    /// `cx` as a brick runs it, from a client whose credential binds it to
    /// `bound` (if it does). What only the pool's servers may claim
    /// (`internal`) is dropped.
    pub fn apply(&self, cx: &mut mortar_core::Ctx, bound: Option<(u32, u32)>) {
        cx.internal = false;
        if let Some((uid, gid)) = bound {
            (cx.uid, cx.gid) = (uid, gid);
            cx.groups.clear();
        }
        if self.all || (self.root && cx.uid == 0) {
            (cx.uid, cx.gid) = self.anon;
            cx.groups.clear();
        }
    }
}

/// What a client credential is granted.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Grant {
    pub name: String,
    /// Its changes are refused (EROFS).
    pub read_only: bool,
    /// Its requests run as this uid and gid, whatever they claim.
    pub identity: Option<(u32, u32)>,
    /// A certificate the credential's rotation replaced: its connections
    /// go on, no new one is taken.
    pub retired: bool,
}

/// The rules in force.
#[derive(Clone, PartialEq, Eq)]
pub struct Rules {
    allow: Patterns,
    reject: Patterns,
    /// `server.ssl`: a client in the clear is refused.
    pub tls: bool,
    /// The volume's client credentials, by fingerprint (hex).
    pub clients: std::collections::BTreeMap<String, Grant>,
    /// `auth.ssl-allow`: the names of those taken (None: all).
    pub ssl_allow: Option<Vec<String>>,
    /// `server.root-squash`, `server.all-squash`.
    pub squash: Squash,
    /// The pool's server and administrator certificates (SHA-256, hex):
    /// the only ones of those roles taken (empty: any of the pool's CA).
    pub pool: std::collections::BTreeSet<String>,
    /// Those of the pool's certificates that a rotation replaced: the
    /// connections opened with them go on.
    pub retired: std::collections::BTreeSet<String>,
}

/// What a log line says of the rules: the lists of certificates by their
/// length (at 300 servers the pool's is 300 fingerprints).
impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("allow", &self.allow)
            .field("reject", &self.reject)
            .field("tls", &self.tls)
            .field(
                "clients",
                &self.clients.values().map(|g| &g.name).collect::<Vec<_>>(),
            )
            .field("ssl_allow", &self.ssl_allow)
            .field("squash", &self.squash)
            .field("pool", &format_args!("{} certificates", self.pool.len()))
            .field(
                "retired",
                &format_args!("{} certificates", self.retired.len()),
            )
            .finish()
    }
}

impl Default for Rules {
    fn default() -> Rules {
        Rules::from_options(&Options::new())
    }
}

impl Rules {
    pub fn from_options(o: &Options) -> Rules {
        // (`volume set` checked the values; a bad one falls back to the
        // default rather than to nothing.)
        let get = |spec: &'static Spec| {
            Patterns::parse(spec.str(o))
                .or_else(|_| Patterns::parse(spec.default))
                .expect("the default parses")
        };
        Rules {
            allow: get(&AUTH_ALLOW),
            reject: get(&AUTH_REJECT),
            tls: SERVER_SSL.bool(o),
            clients: Default::default(),
            ssl_allow: match AUTH_SSL_ALLOW.str(o) {
                "*" => None,
                names => Some(names.split(',').map(str::to_string).collect()),
            },
            squash: Squash {
                root: ROOT_SQUASH.bool(o),
                all: ALL_SQUASH.bool(o),
                anon: (ANON_UID.int(o) as u32, ANON_GID.int(o) as u32),
            },
            pool: Default::default(),
            retired: Default::default(),
        }
    }

    /// The rules of a volume's description (options and credentials).
    pub fn from_desc(d: &mortar_core::desc::VolDesc) -> Rules {
        Rules {
            clients: d
                .clients
                .iter()
                .map(|c| {
                    let grant = Grant {
                        name: c.name.clone(),
                        read_only: c.read_only,
                        identity: c.identity,
                        retired: c.retired,
                    };
                    (c.fingerprint.clone(), grant)
                })
                .collect(),
            pool: d.pool.iter().cloned().collect(),
            retired: d.retired.iter().cloned().collect(),
            ..Rules::from_options(&d.options)
        }
    }

    /// Whether a client credential may connect (`open`: may go on with a
    /// connection it opened before): Ok(what it is granted), or why not.
    pub fn credential(&self, fingerprint: &[u8; 32], open: bool) -> Result<Grant, Refusal> {
        let Some(grant) = self.clients.get(&crate::tls::hex(fingerprint)) else {
            return Err(
                "the client's credential is not one of this volume's (revoked, or another volume's)"
                    .into(),
            );
        };
        if grant.retired && !open {
            return Err(format!(
                "the client's credential {}: a rotation replaced this certificate (its holder needs the new file)",
                grant.name
            ).into());
        }
        match &self.ssl_allow {
            Some(names) if !names.contains(&grant.name) => Err(format!(
                "credential {} is not in auth.ssl-allow ({})",
                grant.name,
                names.join(",")
            )
            .into()),
            _ => Ok(grant.clone()),
        }
    }

    /// Why a client at `ip` may not connect, if it may not. Host names in
    /// the rules are resolved now.
    pub async fn refuses(&self, ip: IpAddr) -> Option<String> {
        let ip = ip.to_canonical();
        if matches(&self.reject, ip).await {
            return Some(format!(
                "address {ip} is refused by auth.reject ({})",
                self.reject.canonical()
            ));
        }
        if !matches(&self.allow, ip).await {
            return Some(format!(
                "address {ip} is not in auth.allow ({})",
                self.allow.canonical()
            ));
        }
        None
    }
}

/// Whether `p` takes a client at `ip`, host names in it resolved now.
pub async fn matches(p: &Patterns, ip: IpAddr) -> bool {
    if p.matches(ip) {
        return true;
    }
    for host in p.hosts() {
        if let Ok(addrs) = tokio::net::lookup_host((host, 0)).await {
            if addrs.into_iter().any(|a| a.ip().to_canonical() == ip) {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &str, reject: &str) -> Rules {
        let mut o = Options::new();
        o.insert("auth.allow".into(), allow.into());
        o.insert("auth.reject".into(), reject.into());
        Rules::from_options(&o)
    }

    #[test]
    fn a_rotated_credential_keeps_its_connections_and_gets_no_new_one() {
        let mut r = Rules::default();
        let grant = |retired| Grant {
            name: "laptop".into(),
            read_only: true,
            identity: None,
            retired,
        };
        r.clients.insert(crate::tls::hex(&[1; 32]), grant(false));
        r.clients.insert(crate::tls::hex(&[2; 32]), grant(true));
        assert!(r.credential(&[1; 32], false).is_ok());
        assert!(r.credential(&[2; 32], true).unwrap().read_only);
        let refused = r.credential(&[2; 32], false).unwrap_err();
        assert!(refused.0.contains("a rotation replaced"), "{refused}");
        assert!(r.credential(&[3; 32], true).is_err());
    }

    #[test]
    fn squashing_maps_root_or_everyone_and_drops_what_only_servers_may_claim() {
        let user = |uid| mortar_core::Ctx {
            uid,
            gid: uid,
            groups: vec![10, 20],
            internal: true,
            ..Default::default()
        };
        let squash = |o: &[(&str, &str)]| {
            let o: Options = o
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let s = Rules::from_options(&o).squash;
            move |uid| {
                let mut cx = user(uid);
                s.apply(&mut cx, None);
                assert!(!cx.internal);
                (cx.uid, cx.gid, cx.groups.len())
            }
        };
        let none = squash(&[]);
        assert_eq!(none(0), (0, 0, 2));
        assert_eq!(none(1000), (1000, 1000, 2));
        let root = squash(&[("server.root-squash", "on"), ("server.anonuid", "99")]);
        assert_eq!(root(0), (99, 65534, 0));
        assert_eq!(root(1000), (1000, 1000, 2));
        let all = squash(&[("server.all-squash", "on"), ("server.anongid", "98")]);
        assert_eq!(all(0), (65534, 98, 0));
        assert_eq!(all(1000), (65534, 98, 0));
        // A credential bound to an identity: that, whatever is claimed
        // (and root is still squashed).
        let bound = |s: Squash, id| {
            let mut cx = user(0);
            s.apply(&mut cx, Some(id));
            (cx.uid, cx.gid, cx.groups.len())
        };
        let plain = Squash::default();
        assert_eq!(bound(plain, (1000, 100)), (1000, 100, 0));
        let root = Squash {
            root: true,
            ..plain
        };
        assert_eq!(
            bound(root, (0, 0)).0,
            root.anon.0,
            "a credential bound to root is squashed"
        );
    }

    #[tokio::test]
    async fn allow_then_reject_by_address_and_name() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(Rules::default().refuses(lo).await, None);
        let e = rules("10.9.9.9", "none").refuses(lo).await.unwrap();
        assert!(e.contains("not in auth.allow (10.9.9.9)"), "{e}");
        assert_eq!(rules("localhost", "none").refuses(lo).await, None);
        assert_eq!(rules("127.0.0.0/8", "none").refuses(lo).await, None);
        let e = rules("*", "127.*.*.*").refuses(lo).await.unwrap();
        assert!(e.contains("auth.reject"), "{e}");
        assert!(rules("none", "none").refuses(lo).await.is_some());
    }
}
