//! Why a connection or a client is refused: said to the client and
//! logged, as it is.

/// A refusal and its reason (naming the address, credential or rule).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

impl From<String> for Refusal {
    fn from(reason: String) -> Refusal {
        Refusal(reason)
    }
}

impl From<&str> for Refusal {
    fn from(reason: &str) -> Refusal {
        Refusal(reason.to_string())
    }
}
