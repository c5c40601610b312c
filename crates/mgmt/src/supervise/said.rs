//! What a brick process and the daemon say to each other, one line each:
//! a brick program on its standard output, the brick host on the control
//! connection of each brick it serves. Both ends spell them from here.
//!
//! - `LISTENING PORT`: the brick serves on PORT.
//! - `OFFLINE REASON`: the brick cannot serve and stays offline.
//! - `DETACHED`: the host no longer serves the brick (it was asked to).
//!
//! The daemon's side of a control connection is `ATTACH ARGS` (the
//! brick's command line as a JSON list of strings), then the volume's
//! options, one JSON line each, then `DETACH` when the brick is to stop.

use std::fmt;

/// A line the brick side says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Said {
    Listening(u16),
    Offline(String),
    Detached,
}

impl Said {
    /// The line's meaning; None for anything else (a brick's stray
    /// output).
    pub fn parse(line: &str) -> Option<Said> {
        if let Some(port) = line.strip_prefix("LISTENING ") {
            return port.trim().parse().ok().map(Said::Listening);
        }
        if let Some(reason) = line.strip_prefix("OFFLINE ") {
            return Some(Said::Offline(reason.to_string()));
        }
        (line == "DETACHED").then_some(Said::Detached)
    }

    /// Whether nothing more follows it on a control connection.
    pub fn is_last(&self) -> bool {
        !matches!(self, Said::Listening(_))
    }
}

impl fmt::Display for Said {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Said::Listening(port) => write!(f, "LISTENING {port}"),
            Said::Offline(reason) => write!(f, "OFFLINE {reason}"),
            Said::Detached => f.write_str("DETACHED"),
        }
    }
}

/// The daemon's last line on a control connection: stop serving the brick.
pub const DETACH: &str = "DETACH";

/// The daemon's first line on a control connection, without its newline;
/// None if an argument is not text.
pub fn attach(args: &[std::ffi::OsString]) -> Option<String> {
    let args: Vec<&str> = args.iter().map(|a| a.to_str()).collect::<Option<_>>()?;
    Some(format!("ATTACH {}", serde_json::to_string(&args).ok()?))
}

/// The brick's arguments of an attach line; Err says what is wrong.
pub fn attached(line: &str) -> Result<Vec<String>, String> {
    let Some(args) = line.strip_prefix("ATTACH ") else {
        return Err(format!("not an attach: {line:.60}"));
    };
    serde_json::from_str(args).map_err(|e| format!("an attach's arguments: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_reads_back_as_said() {
        for said in [
            Said::Listening(49152),
            Said::Offline("the brick's directory is gone".into()),
            Said::Detached,
        ] {
            assert_eq!(Said::parse(&said.to_string()), Some(said));
        }
        assert_eq!(Said::parse("LISTENING many"), None);
        assert_eq!(Said::parse("hello"), None);
    }

    #[test]
    fn an_attach_carries_the_arguments_as_given() {
        let args = ["--path".into(), "/b r/x".into()];
        let line = attach(&args).unwrap();
        assert_eq!(attached(&line).unwrap(), ["--path", "/b r/x"]);
        assert!(attached("DETACH").unwrap_err().contains("not an attach"));
        assert!(attached("ATTACH {").is_err());
    }
}
