//! The brick protocol: a framed binary wire format (`wire`) over TLS
//! (`tls`), who may connect and as whom (`auth`, `admit`), how much a
//! connection may have in flight (`budget`), and the client translator
//! that talks to one brick (`client`). The brick's end is `brick::server`.
pub mod admit;
pub mod auth;
pub mod budget;
pub mod client;
pub mod refusal;
pub mod tls;
pub mod wire;
