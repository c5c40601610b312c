//! The registry of volume options: each declared once, with its type,
//! default and help. `volume set` validates against it, `volume get`
//! reports from it, and volgen reads typed values from it.

use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bool,
    /// An integer within the bounds.
    Int(i64, i64),
    /// One of a fixed set of words.
    Enum(&'static [&'static str]),
    /// A size with an optional KB/MB/GB suffix.
    Size,
    /// Free text (address lists and the like).
    Text,
}

pub struct OptionSpec {
    pub key: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    pub help: &'static str,
}

pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec { key: "network.ping-timeout", kind: Kind::Int(1, 1800), default: "42", help: "Seconds without an answer after which a brick with requests outstanding is declared down." },
    OptionSpec { key: "cluster.read-hash-mode", kind: Kind::Int(0, 3), default: "1", help: "How reads choose a replica: 0 first up, 1 by gfid." },
    OptionSpec { key: "cluster.quorum-type", kind: Kind::Enum(&["none", "auto", "fixed"]), default: "auto", help: "Client quorum: changes need more than half the replicas up (auto; exactly half if it includes the first), cluster.quorum-count of them (fixed), or any (none). Without it they fail with EROFS." },
    OptionSpec { key: "cluster.self-heal-daemon", kind: Kind::Bool, default: "on", help: "Heal what the bricks' heal index names, in the background, on every server with bricks of the volume." },
    OptionSpec { key: "cluster.quorum-count", kind: Kind::Int(1, 64), default: "1", help: "Replicas needed when cluster.quorum-type is fixed." },
    OptionSpec { key: "cluster.favorite-child-policy", kind: Kind::Enum(&["none", "size", "mtime", "ctime", "majority"]), default: "none", help: "How split-brain is resolved automatically." },
    OptionSpec { key: "storage.health-check-interval", kind: Kind::Int(0, 3600), default: "30", help: "Seconds between checks that each brick's directory is still there and takes a write, fsync and read back; a brick that fails goes offline, with the reason in volume status, until volume start force. 0 turns the check off." },
    OptionSpec { key: "features.locks-revocation-secs", kind: Kind::Int(0, 3600), default: "60", help: "Seconds a client may keep a lock that another client waits for; after that the brick revokes it by closing the holder's connection (its unfinished change is healed). 0: never." },
];

pub fn spec(key: &str) -> Option<&'static OptionSpec> {
    OPTIONS.iter().find(|o| o.key == key)
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "on" | "yes" | "true" | "enable" | "1" => Some(true),
        "off" | "no" | "false" | "disable" | "0" => Some(false),
        _ => None,
    }
}

pub fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim().to_ascii_uppercase();
    let (num, mul) = if let Some(n) = v.strip_suffix("GB").or_else(|| v.strip_suffix('G')) {
        (n, 1u64 << 30)
    } else if let Some(n) = v.strip_suffix("MB").or_else(|| v.strip_suffix('M')) {
        (n, 1 << 20)
    } else if let Some(n) = v.strip_suffix("KB").or_else(|| v.strip_suffix('K')) {
        (n, 1 << 10)
    } else {
        (v.strip_suffix('B').unwrap_or(&v), 1)
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

/// Checks a value against the option's type; returns it in canonical form.
pub fn validate(key: &str, value: &str) -> Result<String, String> {
    let s = spec(key).ok_or_else(|| format!("option : {key} does not exist"))?;
    let bad = || {
        format!(
            "option {key}: '{value}' is not valid ({})",
            describe(s.kind)
        )
    };
    match s.kind {
        Kind::Bool => parse_bool(value)
            .map(|b| if b { "on" } else { "off" }.to_string())
            .ok_or_else(bad),
        Kind::Int(lo, hi) => match value.parse::<i64>() {
            Ok(n) if (lo..=hi).contains(&n) => Ok(n.to_string()),
            _ => Err(bad()),
        },
        Kind::Enum(words) => words
            .iter()
            .find(|w| **w == value)
            .map(|w| w.to_string())
            .ok_or_else(bad),
        Kind::Size => parse_size(value).map(|_| value.to_string()).ok_or_else(bad),
        Kind::Text if !value.is_empty() => Ok(value.to_string()),
        Kind::Text => Err(bad()),
    }
}

fn describe(k: Kind) -> String {
    match k {
        Kind::Bool => "on or off".into(),
        Kind::Int(lo, hi) => format!("an integer from {lo} to {hi}"),
        Kind::Enum(w) => format!("one of {}", w.join(", ")),
        Kind::Size => "a size such as 64MB".into(),
        Kind::Text => "text".into(),
    }
}

/// The value in force: the volume's own setting or the default.
pub fn effective<'a>(set: &'a BTreeMap<String, String>, key: &str) -> &'a str {
    set.get(key)
        .map(String::as_str)
        .unwrap_or_else(|| spec(key).map(|s| s.default).unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_and_canonical() {
        assert_eq!(validate("cluster.self-heal-daemon", "yes").unwrap(), "on");
        assert!(validate("cluster.self-heal-daemon", "maybe").is_err());
        assert_eq!(validate("network.ping-timeout", "10").unwrap(), "10");
        assert!(validate("network.ping-timeout", "0").is_err());
        assert!(validate("network.ping-timeout", "x").is_err());
        assert!(validate("no.such-option", "1")
            .unwrap_err()
            .contains("does not exist"));
        assert!(validate("cluster.quorum-type", "auto").is_ok());
        assert!(validate("cluster.quorum-type", "most").is_err());
        assert_eq!(parse_size("64MB"), Some(64 << 20));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        let mut m = BTreeMap::new();
        assert_eq!(effective(&m, "network.ping-timeout"), "42");
        m.insert("network.ping-timeout".into(), "5".into());
        assert_eq!(effective(&m, "network.ping-timeout"), "5");
    }
}
