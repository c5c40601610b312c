//! Address patterns, as `auth.allow` and `auth.reject` take them
//! (GlusterFS's spelling): a comma-separated list of addresses
//! (`192.168.1.10`, `2001:db8::1`), IPv4 addresses with `*` for whole
//! octets (`10.0.*.*`), networks (`10.0.0.0/8`, `2001:db8::/32`) and host
//! names (`client1.example.com`, matched by the addresses they resolve
//! to); `*` for any client, `none` for no one.

use std::net::IpAddr;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pattern {
    Any,
    /// An address and how many of its leading bits must match.
    Net(IpAddr, u8),
    /// An IPv4 address, each octet given or `*`.
    Octets([Option<u8>; 4]),
    Host(String),
}

/// A parsed list; empty for `none`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Patterns(pub Vec<Pattern>);

/// A word of an address list that is none of the forms it takes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not an address, network or host name")]
pub struct NotAnAddress(pub String);

impl Patterns {
    pub fn parse(v: &str) -> Result<Patterns, NotAnAddress> {
        let v = v.trim();
        if v.eq_ignore_ascii_case("none") {
            return Ok(Patterns(Vec::new()));
        }
        let list = v
            .split(',')
            .map(str::trim)
            .map(|p| Pattern::parse(p).ok_or_else(|| NotAnAddress(p.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Patterns(list))
    }

    /// Whether an address pattern matches `ip` (host names are not looked
    /// at: see `hosts`).
    pub fn matches(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|p| p.matches(ip))
    }

    /// The host names in the list, to be resolved by the caller.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|p| match p {
            Pattern::Host(h) => Some(h.as_str()),
            _ => None,
        })
    }

    /// The list in the canonical form `volume get` shows.
    pub fn canonical(&self) -> String {
        if self.0.is_empty() {
            return "none".into();
        }
        let one = |p: &Pattern| match p {
            Pattern::Any => "*".to_string(),
            Pattern::Net(a, bits) if *bits == full(a) => a.to_string(),
            Pattern::Net(a, bits) => format!("{a}/{bits}"),
            Pattern::Octets(o) => o
                .iter()
                .map(|x| x.map_or("*".to_string(), |x| x.to_string()))
                .collect::<Vec<_>>()
                .join("."),
            Pattern::Host(h) => h.clone(),
        };
        self.0.iter().map(one).collect::<Vec<_>>().join(",")
    }
}

/// One directory of a volume exported on its own (`nfs.export-dir`,
/// GlusterFS's spelling: `/DIR[(HOST|HOST...)]`, comma-separated), and
/// the clients it is for (None: every client the volume takes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirExport {
    /// `/a/b`: absolute in the volume, no `.` or `..`, not `/` itself.
    pub path: String,
    pub hosts: Option<Patterns>,
}

impl DirExport {
    /// A list of them; empty for "".
    pub fn parse_list(v: &str) -> Result<Vec<DirExport>, String> {
        v.split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(DirExport::parse)
            .collect()
    }

    fn parse(d: &str) -> Result<DirExport, String> {
        let (path, hosts) = match d.split_once('(') {
            Some((path, rest)) => {
                let spec = rest
                    .strip_suffix(')')
                    .ok_or_else(|| format!("'{d}': the hosts end with ')'"))?;
                let hosts =
                    Patterns::parse(&spec.replace('|', ",")).map_err(|e| format!("'{d}': {e}"))?;
                (path, Some(hosts))
            }
            None => (d, None),
        };
        if !path.starts_with('/') {
            return Err(format!("'{path}' is not absolute (/DIR in the volume)"));
        }
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        if parts.is_empty() {
            return Err("'/' is the volume itself (nfs.export-volumes)".into());
        }
        if let Some(p) = parts.iter().find(|p| **p == "." || **p == "..") {
            return Err(format!("'{path}': '{p}' is not a directory's name"));
        }
        Ok(DirExport {
            path: format!("/{}", parts.join("/")),
            hosts,
        })
    }

    /// The form `volume get` shows.
    pub fn canonical(list: &[DirExport]) -> String {
        let one = |d: &DirExport| match &d.hosts {
            None => d.path.clone(),
            Some(h) => format!("{}({})", d.path, h.canonical().replace(',', "|")),
        };
        list.iter().map(one).collect::<Vec<_>>().join(",")
    }
}

fn full(a: &IpAddr) -> u8 {
    if a.is_ipv4() {
        32
    } else {
        128
    }
}

impl Pattern {
    fn parse(p: &str) -> Option<Pattern> {
        if p == "*" {
            return Some(Pattern::Any);
        }
        if let Ok(a) = p.parse::<IpAddr>() {
            return Some(Pattern::Net(a.to_canonical(), full(&a.to_canonical())));
        }
        if let Some((a, bits)) = p.split_once('/') {
            let a: IpAddr = a.parse().ok()?;
            let bits: u8 = bits.parse().ok()?;
            return (bits <= full(&a)).then_some(Pattern::Net(a, bits));
        }
        if p.contains('*') {
            let parts: Vec<&str> = p.split('.').collect();
            if parts.len() != 4 {
                return None;
            }
            let mut o = [None; 4];
            for (slot, part) in o.iter_mut().zip(parts) {
                *slot = match part {
                    "*" => None,
                    n => Some(n.parse().ok()?),
                };
            }
            return Some(Pattern::Octets(o));
        }
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        let host = p.strip_suffix('.').unwrap_or(p);
        (host.len() <= 253
            && host.split('.').all(label_ok)
            && host.bytes().any(|b| b.is_ascii_alphabetic()))
        .then(|| Pattern::Host(host.to_ascii_lowercase()))
    }

    fn matches(&self, ip: IpAddr) -> bool {
        match (self, ip) {
            (Pattern::Any, _) => true,
            (Pattern::Net(IpAddr::V4(n), bits), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - *bits as u32).unwrap_or(0);
                u32::from(*n) & mask == u32::from(a) & mask
            }
            (Pattern::Net(IpAddr::V6(n), bits), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - *bits as u32).unwrap_or(0);
                u128::from(*n) & mask == u128::from(a) & mask
            }
            (Pattern::Octets(o), IpAddr::V4(a)) => o
                .iter()
                .zip(a.octets())
                .all(|(want, got)| want.is_none_or(|w| w == got)),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn directory_exports_take_glusterfs_spelling_and_refuse_escapes() {
        let l = DirExport::parse_list("/foo(192.168.1.0/24|host1|10.1.1.8), /a//b/").unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].path, "/foo");
        assert!(l[0].hosts.as_ref().unwrap().matches(ip("192.168.1.77")));
        assert!(!l[0].hosts.as_ref().unwrap().matches(ip("10.1.1.9")));
        assert_eq!(
            l[1],
            DirExport {
                path: "/a/b".into(),
                hosts: None
            }
        );
        assert_eq!(
            DirExport::canonical(&l),
            "/foo(192.168.1.0/24|host1|10.1.1.8),/a/b"
        );
        assert!(DirExport::parse_list("").unwrap().is_empty());
        for bad in ["foo", "/", "/a/../b", "/./a", "/a(10.0.0.1", "/a(no way)"] {
            assert!(DirExport::parse_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn addresses_networks_wildcards_and_names() {
        let p = Patterns::parse(
            "192.168.1.10, 10.0.*.*,172.16.0.0/12, 2001:db8::/32, client-1.example.com",
        )
        .unwrap();
        for yes in [
            "192.168.1.10",
            "10.0.7.9",
            "172.31.255.1",
            "2001:db8::5",
            "::ffff:10.0.1.1",
        ] {
            assert!(p.matches(ip(yes)), "{yes}");
        }
        for no in [
            "192.168.1.11",
            "10.1.0.1",
            "172.32.0.1",
            "2001:db9::1",
            "127.0.0.1",
        ] {
            assert!(!p.matches(ip(no)), "{no}");
        }
        assert_eq!(p.hosts().collect::<Vec<_>>(), ["client-1.example.com"]);
        assert_eq!(
            p.canonical(),
            "192.168.1.10,10.0.*.*,172.16.0.0/12,2001:db8::/32,client-1.example.com"
        );
        assert!(Patterns::parse("*").unwrap().matches(ip("8.8.8.8")));
        let none = Patterns::parse("none").unwrap();
        assert!(!none.matches(ip("127.0.0.1")));
        assert_eq!(none.canonical(), "none");
        assert!(Patterns::parse("0.0.0.0/0").unwrap().matches(ip("1.2.3.4")));
    }

    #[test]
    fn garbage_is_refused() {
        for bad in [
            "",
            "10.0.0.0/33",
            "10.*.1",
            "300.*.*.*",
            "a b",
            "-x.com",
            "1.2.3.4/x",
            "10.0.0.1,,",
            "*.example.com",
            "123",
        ] {
            assert!(Patterns::parse(bad).is_err(), "{bad:?}");
        }
    }
}
