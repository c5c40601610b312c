//! mortar: a scale-out distributed file system.
//!
//! The workspace is laid out by concern, in layers that only point down
//! (`tests/layers.rs` checks them; docs/architecture.md draws them):
//! `core` ← `process` ← `metrics` ← `storage`, `protocol` ← the
//! translators (`brick`; the client's `cluster`, `performance`,
//! `features`, `debug`) ← `graph` (the table of every translator kind,
//! the composition root) ← `heal`, `rebalance` ← `mgmt` ← `fuse` ← the
//! processes (`brickd`, `mount`) ← `cli`. The layers up to the
//! translators are crates of their own under `crates/`, re-exported here
//! under their module names; the benchmark is a crate above it all
//! (`crates/bench`, the program `mortar-bench`).

// The layers below, each a crate of its own.
pub use mortar_brick as brick;
pub use mortar_core as core;
pub use mortar_metrics as metrics;
pub use mortar_process as process;
pub use mortar_protocol as protocol;
pub use mortar_storage as storage;
pub use mortar_xlators::{cluster, debug, features, performance};

// The layers of this crate.
pub mod brickd;
pub mod cli;
pub mod fuse;
pub mod graph;
pub mod heal;
pub mod mgmt;
pub mod mount;
pub mod rebalance;
