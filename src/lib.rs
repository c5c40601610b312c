//! mortar: a scale-out distributed file system.
//!
//! The workspace is laid out by concern, in layers that only point down
//! (docs/architecture.md draws them): `core` ← `process` ← `metrics` ←
//! `storage`, `protocol` ← the translators (`brick`; the client's
//! `cluster`, `performance`, `features`, `debug`) ← `graph` (the table of
//! every translator kind, the composition root) ← `heal`, `rebalance` ←
//! `mgmt` ← `fuse` ← the processes (`brickd`, `mount`) ← `cli`. Every
//! layer below the processes is a crate of its own under `crates/` (so
//! cargo keeps them pointing one way), re-exported here under its module
//! name; `tests/layers.rs` checks this crate's modules. The benchmark is
//! a crate above it all (`crates/bench`, the program `mortar-bench`).

// The layers below, each a crate of its own.
pub use mortar_brick as brick;
pub use mortar_core as core;
pub use mortar_fuse as fuse;
pub use mortar_graph as graph;
pub use mortar_heal as heal;
pub use mortar_metrics as metrics;
pub use mortar_mgmt as mgmt;
pub use mortar_nfs as nfs;
pub use mortar_process as process;
pub use mortar_protocol as protocol;
pub use mortar_rebalance as rebalance;
pub use mortar_storage as storage;
pub use mortar_xlators::{cluster, debug, features, performance};

// The layers of this crate: the processes.
pub mod brickd;
pub mod cli;
pub mod mount;
pub mod nfsd;
