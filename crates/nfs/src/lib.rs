//! mortar's NFS server: NFSv3 (RFC 1813) and its MOUNT program over ONC
//! RPC on TCP, answered by a volume's client graph, as a native mount's
//! requests are (docs/nfs.md).
//!
//! - `xdr`, `rpc`: the wire (bounded, no allocation sized by a peer);
//! - `handle`: file handles (the volume and the gfid);
//! - `exports`: the volumes served;
//! - `nfs3`, `mount`: the programs;
//! - `portmap`: where they are, for clients that ask port 111;
//! - `rpcbind`: the same told to the machine's portmapper when it holds
//!   port 111;
//! - `status`: nfsstat3;
//! - `service`: the programs over the exports, the answer to a call;
//! - `server`: connections.

pub mod exports;
pub mod handle;
pub mod mount;
pub mod nfs3;
pub mod options;
pub mod portmap;
pub mod rpc;
pub mod rpcbind;
pub mod server;
pub mod service;
pub mod status;
pub mod xdr;

pub use exports::Export;
pub use service::Service;

/// The largest READ or WRITE (rtmax, wtmax) and READDIR reply.
pub const MAX_IO: usize = 1 << 20;
/// The longest name argument decoded (longer ones are garbage; over 255
/// bytes they get NAMETOOLONG).
pub const MAX_NAME_ARG: usize = 4096;
