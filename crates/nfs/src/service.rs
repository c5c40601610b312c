//! An NFS server's programs over its exports, and the answer to each
//! call.

use crate::exports::Exports;
use crate::mount::{self, Mount};
use crate::nfs3::{self, Fail, Nfs3};
use crate::rpc::{self, Accept, Call, Cred};
use crate::xdr;
use bytes::Bytes;
use mortar_core::Ctx;
use std::sync::Arc;

/// The uid and gid of a caller without credentials (AUTH_NULL), as
/// Linux's `anonuid`.
pub const NOBODY: u32 = 65534;

pub struct Service {
    pub exports: Arc<Exports>,
    pub nfs3: Nfs3,
    pub mount: Mount,
}

impl Default for Service {
    fn default() -> Self {
        Self::new()
    }
}

impl Service {
    pub fn new() -> Service {
        let exports = Arc::new(Exports::default());
        Service {
            nfs3: Nfs3::new(exports.clone()),
            mount: Mount::new(exports.clone()),
            exports,
        }
    }

    /// Closes the files and listings nobody used for a while.
    pub fn close_idle(&self) {
        self.nfs3.close_idle();
    }

    /// The reply to `call` from `peer`: its pieces, in order (a READ's
    /// data is one of them, not copied).
    pub async fn answer(&self, mut call: Call, peer: std::net::IpAddr) -> Vec<Bytes> {
        let cx = ctx_of(&call.cred, call.xid);
        let xid = call.xid;
        match call.prog {
            nfs3::PROGRAM if call.vers == nfs3::VERSION => {
                match self.nfs3.call(call.proc_, cx, peer, &mut call.args).await {
                    None => vec![rpc::accepted(xid, Accept::ProcUnavail).into_bytes()],
                    Some(Err(Fail::Garbage)) => {
                        vec![rpc::accepted(xid, Accept::GarbageArgs).into_bytes()]
                    }
                    Some(Err(Fail::Status(s))) => {
                        tracing::debug!(xid, proc_ = call.proc_, status = s, %peer, "nfs call failed");
                        vec![
                            rpc::accepted(xid, Accept::Success).into_bytes(),
                            nfs3::failed(call.proc_, s).into_bytes(),
                        ]
                    }
                    Some(Ok(body)) => {
                        let mut out = vec![
                            rpc::accepted(xid, Accept::Success).into_bytes(),
                            body.w.into_bytes(),
                        ];
                        if let Some(d) = body.data {
                            let pad = xdr::padded(d.len()) - d.len();
                            out.push(d);
                            if pad > 0 {
                                out.push(Bytes::from_static(&[0; 3][..pad]));
                            }
                        }
                        out
                    }
                }
            }
            nfs3::PROGRAM => vec![rpc::prog_mismatch(xid, nfs3::VERSION, nfs3::VERSION)],
            mount::PROGRAM if (mount::VERSIONS.0..=mount::VERSIONS.1).contains(&call.vers) => {
                match self
                    .mount
                    .call(call.vers, call.proc_, cx, peer, &mut call.args)
                    .await
                {
                    None => vec![rpc::accepted(xid, Accept::ProcUnavail).into_bytes()],
                    Some(Err(_)) => vec![rpc::accepted(xid, Accept::GarbageArgs).into_bytes()],
                    Some(Ok(w)) => vec![
                        rpc::accepted(xid, Accept::Success).into_bytes(),
                        w.into_bytes(),
                    ],
                }
            }
            mount::PROGRAM => vec![rpc::prog_mismatch(
                xid,
                mount::VERSIONS.0,
                mount::VERSIONS.1,
            )],
            _ => vec![rpc::accepted(xid, Accept::ProgUnavail).into_bytes()],
        }
    }
}

/// The caller as the volume sees it.
fn ctx_of(cred: &Cred, xid: u32) -> Ctx {
    let (uid, gid, groups) = match cred {
        Cred::Sys {
            uid, gid, groups, ..
        } => (*uid, *gid, groups.clone()),
        Cred::Null => (NOBODY, NOBODY, Vec::new()),
    };
    Ctx {
        uid,
        gid,
        pid: 0,
        unique: xid as u64,
        groups: if uid == 0 { Vec::new() } else { groups },
        ..Ctx::default()
    }
}
