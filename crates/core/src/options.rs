//! Volume options as translators declare them: each one a `Spec` (key,
//! type, default, help) written once, beside the translator that reads it,
//! and listed in that translator's row of the graph table
//! (`graph::table`). `volume set` validates against the spec, `volume get`
//! reports from it, and the translator reads a typed value through it, so
//! that an option cannot exist without the code that gives it an effect.

use super::Options;

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
    /// A share from 0 to 100, written with or without `%`.
    Percent,
    /// Client addresses, networks and host names (`super::addrs`).
    Addresses,
    /// Names (letters, digits, `-`, `_`), comma-separated; `*` for any.
    Names,
    /// A share of a whole (`1%`, or a bare number: a share, as GlusterFS
    /// reads `storage.reserve`) or a size (`10GB`).
    ShareOrSize,
    /// Directories with the clients each is for (`addrs::DirExport`).
    DirExports,
}

/// A `ShareOrSize` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShareOrSize {
    /// Percent of the whole.
    Share(u64),
    Bytes(u64),
}

impl ShareOrSize {
    pub fn parse(v: &str) -> Option<ShareOrSize> {
        let t = v.trim();
        if t.ends_with('%') || t.bytes().all(|b| b.is_ascii_digit()) {
            parse_percent(t).map(ShareOrSize::Share)
        } else {
            parse_size(t).map(ShareOrSize::Bytes)
        }
    }

    /// The bytes it is of `whole`.
    pub fn of(self, whole: u64) -> u64 {
        match self {
            ShareOrSize::Share(p) => (whole as u128 * p as u128 / 100) as u64,
            ShareOrSize::Bytes(b) => b,
        }
    }
}

#[derive(Debug)]
pub struct Spec {
    pub key: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    pub help: &'static str,
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

/// Why an option cannot be set as asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("option : {0} does not exist")]
    Unknown(String),
    #[error("option {key}: '{value}' is not valid ({expected}){}", .detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default())]
    BadValue {
        key: &'static str,
        value: String,
        /// What the option takes.
        expected: String,
        /// What is wrong in it, where that says more.
        detail: Option<String>,
    },
    #[error("group {name} does not exist (known groups: {known})")]
    UnknownGroup { name: String, known: String },
}

/// For the callers that still speak in strings (the daemon's operations).
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}

impl Spec {
    /// Checks a value against the type; returns it in canonical form.
    pub fn validate(&self, value: &str) -> Result<String, Error> {
        let bad = || Error::BadValue {
            key: self.key,
            value: value.to_string(),
            expected: describe(self.kind),
            detail: None,
        };
        match self.kind {
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
            Kind::Percent => parse_percent(value)
                .map(|p| format!("{p}%"))
                .ok_or_else(bad),
            Kind::Addresses => super::addrs::Patterns::parse(value)
                .map(|p| p.canonical())
                .map_err(|e| Error::BadValue {
                    key: self.key,
                    value: value.to_string(),
                    expected: describe(self.kind),
                    detail: Some(e.to_string()),
                }),
            Kind::Names => parse_names(value).ok_or_else(bad),
            Kind::DirExports => super::addrs::DirExport::parse_list(value)
                .map(|l| super::addrs::DirExport::canonical(&l))
                .map_err(|e| Error::BadValue {
                    key: self.key,
                    value: value.to_string(),
                    expected: describe(self.kind),
                    detail: Some(e),
                }),
            Kind::ShareOrSize => match ShareOrSize::parse(value) {
                Some(ShareOrSize::Share(p)) => Ok(format!("{p}%")),
                Some(ShareOrSize::Bytes(_)) => Ok(value.trim().to_string()),
                None => Err(bad()),
            },
            Kind::Text if !value.is_empty() => Ok(value.to_string()),
            Kind::Text => Err(bad()),
        }
    }

    /// The value in force among `set`: the one set, else the default.
    pub fn str<'a>(&'static self, set: &'a Options) -> &'a str {
        set.get(self.key)
            .map(String::as_str)
            .unwrap_or(self.default)
    }

    /// The value as a boolean (the default if the one set does not parse).
    pub fn bool(&'static self, set: &Options) -> bool {
        parse_bool(self.str(set))
            .or_else(|| parse_bool(self.default))
            .unwrap_or(false)
    }

    /// The value as a share from 0 to 100 (the default if the one set does
    /// not parse).
    pub fn percent(&'static self, set: &Options) -> u64 {
        parse_percent(self.str(set))
            .or_else(|| parse_percent(self.default))
            .unwrap_or(0)
    }

    /// The value as a number of bytes (the default if the one set does not
    /// parse).
    pub fn size(&'static self, set: &Options) -> u64 {
        parse_size(self.str(set))
            .or_else(|| parse_size(self.default))
            .unwrap_or(0)
    }

    /// The value as a share or a size (the default if the one set does
    /// not parse).
    pub fn share_or_size(&'static self, set: &Options) -> ShareOrSize {
        ShareOrSize::parse(self.str(set))
            .or_else(|| ShareOrSize::parse(self.default))
            .unwrap_or(ShareOrSize::Bytes(0))
    }

    /// The value as an integer (the default if the one set does not parse).
    pub fn int(&'static self, set: &Options) -> i64 {
        self.str(set)
            .parse()
            .or_else(|_| self.default.parse())
            .unwrap_or(0)
    }
}

fn describe(k: Kind) -> String {
    match k {
        Kind::Bool => "on or off".into(),
        Kind::Int(lo, hi) => format!("an integer from {lo} to {hi}"),
        Kind::Enum(w) => format!("one of {}", w.join(", ")),
        Kind::Size => "a size such as 64MB".into(),
        Kind::Text => "text".into(),
        Kind::Percent => "a share such as 10%".into(),
        Kind::Addresses => {
            "addresses, networks (10.0.0.0/8, 10.0.*.*) or host names, comma-separated; * for any, none for no one".into()
        }
        Kind::ShareOrSize => "a share such as 1% or a size such as 10GB".into(),
        Kind::DirExports => {
            "directories of the volume, each with the clients it is for if not all: /DIR[(HOST|NETWORK|...)], comma-separated".into()
        }
        Kind::Names => "names (letters, digits, - and _, not starting with -), comma-separated; * for any".into(),
    }
}

/// A name a user gives a volume or a credential: letters, digits, `-` and
/// `_`, at most 64, not starting with `-`.
pub fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !n.starts_with('-')
}

/// A list of names as it is kept: trimmed, comma-separated; `*` alone.
pub fn parse_names(v: &str) -> Option<String> {
    if v.trim() == "*" {
        return Some("*".into());
    }
    let names: Vec<&str> = v.split(',').map(str::trim).collect();
    names.iter().all(|n| valid_name(n)).then(|| names.join(","))
}

fn parse_percent(v: &str) -> Option<u64> {
    let v = v.trim();
    v.strip_suffix('%')
        .unwrap_or(v)
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|&p| p <= 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    static FLAG: Spec = Spec {
        key: "test.flag",
        kind: Kind::Bool,
        default: "on",
        help: "",
    };
    static COUNT: Spec = Spec {
        key: "test.count",
        kind: Kind::Int(1, 10),
        default: "3",
        help: "",
    };

    #[test]
    fn values_are_checked_canonical_and_typed() {
        assert_eq!(FLAG.validate("yes").unwrap(), "on");
        assert!(FLAG.validate("maybe").is_err());
        assert_eq!(COUNT.validate("10").unwrap(), "10");
        assert!(COUNT.validate("0").is_err());
        assert!(COUNT.validate("x").is_err());
        assert_eq!(parse_size("64MB"), Some(64 << 20));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        let mut set = Options::new();
        assert!(FLAG.bool(&set));
        assert_eq!(COUNT.int(&set), 3);
        set.insert("test.flag".into(), "off".into());
        set.insert("test.count".into(), "7".into());
        assert!(!FLAG.bool(&set));
        assert_eq!(COUNT.int(&set), 7);
    }

    #[test]
    fn a_share_or_size_reads_bare_numbers_as_shares_as_glusterfs_does() {
        assert_eq!(ShareOrSize::parse("1"), Some(ShareOrSize::Share(1)));
        assert_eq!(ShareOrSize::parse(" 5% "), Some(ShareOrSize::Share(5)));
        assert_eq!(
            ShareOrSize::parse("10GB"),
            Some(ShareOrSize::Bytes(10 << 30))
        );
        assert_eq!(ShareOrSize::parse("101"), None);
        assert_eq!(ShareOrSize::parse("lots"), None);
        assert_eq!(ShareOrSize::Share(1).of(1000), 10);
        assert_eq!(ShareOrSize::Bytes(7).of(1000), 7);
    }
}
