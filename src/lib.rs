//! mortar: a scale-out distributed file system.
//!
//! The crate is laid out by concern, dependencies pointing one way:
//! `core` (operations, ids, errors, the translator trait) ← `storage`
//! (the brick's posix translator) and `cluster` (replicate, distribute) ←
//! `protocol` (wire format, brick server, client translator) ← `mgmt`
//! (state, options, volgen, daemon) ← `graph`, `fuse`, `mount` and `cli`.
pub mod bench;
pub mod brick;
pub mod cli;
pub mod cluster;
pub mod core;
pub mod debug;
pub mod features;
pub mod fuse;
pub mod graph;
pub mod heal;
pub mod metrics;
pub mod mgmt;
pub mod mount;
pub mod performance;
pub mod process;
pub mod protocol;
pub mod rebalance;
pub mod storage;
