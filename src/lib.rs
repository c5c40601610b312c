//! mortar: a scale-out distributed file system.
//!
//! The crate is laid out by concern, in layers that only point down
//! (`tests/layers.rs` checks them; docs/architecture.md draws them):
//! `core` ← `process` ← `metrics` ← `storage`, `protocol` ← the
//! translators (`brick`; the client's `cluster`, `performance`,
//! `features`, `debug`) ← `graph` (the table of every translator kind,
//! the composition root) ← `heal`, `rebalance` ← `mgmt` ← `fuse` ← the
//! processes (`brickd`, `mount`) ← `bench` ← `cli`.
/// The brick's translator stack and server, its own crate (`crates/brick`).
pub use mortar_brick as brick;
pub mod brickd;
pub mod cli;
pub mod cluster;
/// The lowest layer, its own crate (`crates/core`).
pub use mortar_core as core;
pub mod debug;
pub mod features;
pub mod fuse;
pub mod graph;
pub mod heal;
/// The metrics of every process, its own crate (`crates/metrics`).
pub use mortar_metrics as metrics;
pub mod mgmt;
pub mod mount;
pub mod performance;
/// What every process sets up first, its own crate (`crates/process`).
pub use mortar_process as process;
/// The brick protocol, its own crate (`crates/protocol`).
pub use mortar_protocol as protocol;
pub mod rebalance;
/// Where a brick keeps its data, its own crate (`crates/storage`).
pub use mortar_storage as storage;
