//! Management: the cluster's state (peers, volumes, options), the daemon
//! that keeps it and runs the bricks, the RPC the CLI and clients use to
//! reach it, and the volume-description generator (`volgen`).
pub mod authority;
pub mod command;
pub mod consensus;
pub mod daemon;
pub mod error;
pub mod options;
pub mod rpc;
pub mod state;
pub mod supervise;
pub mod volgen;

/// Default port of the management daemon. GlusterFS uses 24007-24008 and
/// 49152 and up; mortar stays clear of both so they can run side by side.
pub const DEFAULT_MGMT_PORT: u16 = 24107;
/// First port tried for brick servers.
pub const BRICK_PORT_BASE: u16 = 24300;
/// Default port of the daemon's Prometheus metrics (on its IP); each brick
/// serves its own at its port + `brickd::METRICS_PORT_OFFSET`.
pub const DEFAULT_METRICS_PORT: u16 = 24108;
