//! The brick protocol: a framed binary wire format (`wire`), the brick
//! server that serves a storage translator over it (`server`), and the
//! client translator that talks to one brick (`client`).
pub mod admit;
pub mod auth;
pub mod budget;
pub mod client;
pub mod server;
pub mod tls;
pub mod wire;
