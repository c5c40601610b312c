//! Management's errors: what went wrong, of which kind, and the server or
//! brick it concerns. They travel in answers (`Response::Err`), the CLI
//! prints their message and exits with their kind's code
//! (docs/operations.md lists them), and `--json` shows all three.

use serde::{Deserialize, Serialize};

/// What kind of failure: what a script reads from the exit code.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The request does not fit the pool as it is: a name taken, a volume
    /// not started, a value out of range, bricks that do not make sets.
    Refused,
    /// What the request names does not exist: a volume, a peer, a brick.
    NotFound,
    /// The caller's credential does not allow it.
    NotPermitted,
    /// A server could not be reached, or did not answer in time.
    Unreachable,
    /// The pool cannot decide now (no leader, no quorum, a task in the
    /// way): the same request may succeed later.
    Unavailable,
    /// A brick failed what was asked of it.
    Brick,
}

impl Kind {
    /// The CLI's exit code (2 is a command line clap refused).
    pub fn exit_code(self) -> u8 {
        match self {
            Kind::Refused => 1,
            Kind::NotFound => 3,
            Kind::NotPermitted => 4,
            Kind::Unreachable => 5,
            Kind::Unavailable => 6,
            Kind::Brick => 7,
        }
    }
}

/// A management error.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, thiserror::Error)]
#[serde(from = "Repr")]
#[error("{message}")]
pub struct Error {
    pub kind: Kind,
    /// Says what happened, naming what it happened to: printed as it is.
    pub message: String,
    /// The server (`host` or `host:port`) or brick (`host:/path`) it
    /// concerns, when one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concerns: Option<String>,
}

/// As an error arrives: whole, or as the bare message of a daemon from
/// before errors had kinds (a refusal).
#[derive(Deserialize)]
#[serde(untagged)]
enum Repr {
    Whole {
        kind: Kind,
        message: String,
        #[serde(default)]
        concerns: Option<String>,
    },
    Text(String),
}

impl From<Repr> for Error {
    fn from(r: Repr) -> Error {
        match r {
            Repr::Whole {
                kind,
                message,
                concerns,
            } => Error {
                kind,
                message,
                concerns,
            },
            Repr::Text(message) => Error::refused(message),
        }
    }
}

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            concerns: None,
        }
    }

    pub fn refused(message: impl Into<String>) -> Error {
        Error::new(Kind::Refused, message)
    }

    pub fn not_found(message: impl Into<String>) -> Error {
        Error::new(Kind::NotFound, message)
    }

    pub fn not_permitted(message: impl Into<String>) -> Error {
        Error::new(Kind::NotPermitted, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Error {
        Error::new(Kind::Unavailable, message)
    }

    /// `server` could not be reached (the message says how).
    pub fn unreachable(server: impl Into<String>, message: impl Into<String>) -> Error {
        Error::new(Kind::Unreachable, message).concerning(server)
    }

    /// `brick` (`host:/path`) failed (the message says what).
    pub fn brick(brick: impl Into<String>, message: impl Into<String>) -> Error {
        Error::new(Kind::Brick, message).concerning(brick)
    }

    /// The same error, concerning `what` (a server or a brick).
    pub fn concerning(mut self, what: impl Into<String>) -> Error {
        self.concerns = Some(what.into());
        self
    }
}

/// A message without a kind is a refusal: most of what management says
/// no to is a request that does not fit the pool as it is.
impl From<String> for Error {
    fn from(message: String) -> Error {
        Error::refused(message)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Error {
        Error::refused(message)
    }
}

/// The authority's failures (a credential file, a certificate, a join
/// token) refuse the request that needed them.
impl From<crate::authority::Error> for Error {
    fn from(e: crate::authority::Error) -> Error {
        Error::refused(e.to_string())
    }
}

/// A value an option cannot take, an option or group that does not exist.
impl From<mortar_core::options::Error> for Error {
    fn from(e: mortar_core::options::Error) -> Error {
        Error::refused(e.to_string())
    }
}

/// A credential that cannot be read or used.
impl From<mortar_protocol::tls::Error> for Error {
    fn from(e: mortar_protocol::tls::Error) -> Error {
        Error::refused(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_travels_whole_and_reads_a_bare_message_as_a_refusal() {
        let e = Error::brick("h1:/b1", "h1:/b1: not started: no space left");
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"brick","message":"h1:/b1: not started: no space left","concerns":"h1:/b1"}"#
        );
        assert_eq!(serde_json::from_str::<Error>(&json).unwrap(), e);
        let old: Error = serde_json::from_str(r#""volume gv0 exists""#).unwrap();
        assert_eq!(old, Error::refused("volume gv0 exists"));
        assert_eq!(old.to_string(), "volume gv0 exists");
    }

    #[test]
    fn each_kind_has_its_own_exit_code() {
        let kinds = [
            Kind::Refused,
            Kind::NotFound,
            Kind::NotPermitted,
            Kind::Unreachable,
            Kind::Unavailable,
            Kind::Brick,
        ];
        let mut codes: Vec<u8> = kinds.iter().map(|k| k.exit_code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), kinds.len());
        assert!(!codes.contains(&0) && !codes.contains(&2));
    }
}
