//! The client's translators, named as their kinds are: `cluster`
//! (replicate, distribute), `performance` (md-cache, io-cache,
//! write-behind), `features` (read-only) and `debug` (io-stats). Each
//! reads only the core's types and its children; the table that names
//! them and builds them into a graph is above them (`mortar::graph`).
pub mod cluster;
pub mod debug;
pub mod features;
pub mod performance;
