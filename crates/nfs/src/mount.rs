//! The MOUNT program, version 3 (RFC 1813, appendix I): a client asks
//! for the root handle of an export (`/VOLUME`, or a directory in it:
//! `/VOLUME/DIR`), and lists the exports (`showmount -e`). Versions 1 and
//! 2 answer NULL, DUMP, UMNT and EXPORT the same way.

use crate::exports::Exports;
use crate::handle::Handle;
use crate::nfs3::stat;
use crate::xdr::{Reader, Writer};
use mortar_core::Ctx;
use std::sync::{Arc, Mutex};

pub const PROGRAM: u32 = 100005;
pub const VERSIONS: (u32, u32) = (1, 3);

const MNTPATHLEN: usize = 1024;

/// The MOUNT program of a server.
pub struct Mount {
    exports: Arc<Exports>,
    /// Who mounted what (DUMP).
    mounts: Mutex<Vec<(String, String)>>,
}

impl Mount {
    pub fn new(exports: Arc<Exports>) -> Mount {
        Mount {
            exports,
            mounts: Mutex::default(),
        }
    }

    /// Answers procedure `proc_` of MOUNT `vers` for `cx`: None for a
    /// procedure that does not exist, Err for arguments that do not
    /// decode.
    pub async fn call(
        &self,
        vers: u32,
        proc_: u32,
        cx: Ctx,
        peer: std::net::IpAddr,
        args: &mut Reader,
    ) -> Option<Result<Writer, crate::xdr::Garbage>> {
        let mut w = Writer::new();
        match proc_ {
            0 => {}
            1 if vers == 3 => {
                let path = match args.opaque(MNTPATHLEN) {
                    Ok(p) => p,
                    Err(g) => return Some(Err(g)),
                };
                match self.mnt(&path, cx, peer).await {
                    Ok(h) => {
                        self.mounted(peer, &path);
                        w.u32(0).opaque(&h.encode());
                        // The flavors served: AUTH_SYS, AUTH_NULL.
                        w.u32(2).u32(1).u32(0);
                    }
                    Err(status) => {
                        w.u32(status);
                    }
                }
            }
            2 => {
                for (host, dir) in self.mounts.lock().unwrap().iter() {
                    w.bool(true).opaque(dir.as_bytes()).opaque(host.as_bytes());
                }
                w.bool(false);
            }
            3 => {
                if let Ok(path) = args.opaque(MNTPATHLEN) {
                    let dir = String::from_utf8_lossy(&path).into_owned();
                    self.mounts
                        .lock()
                        .unwrap()
                        .retain(|(h, d)| !(*h == peer.to_string() && *d == dir));
                }
            }
            4 => self
                .mounts
                .lock()
                .unwrap()
                .retain(|(h, _)| *h != peer.to_string()),
            5 => {
                for e in self.exports.all() {
                    // (The volume's auth rules are checked on each call.)
                    for (path, groups) in e.listed() {
                        w.bool(true).opaque(path.as_bytes());
                        for g in groups {
                            w.bool(true).opaque(g.as_bytes());
                        }
                        w.bool(false);
                    }
                }
                w.bool(false);
            }
            _ => return None,
        }
        Some(Ok(w))
    }

    fn mounted(&self, peer: std::net::IpAddr, path: &[u8]) {
        let peer = peer.to_string();
        let dir = String::from_utf8_lossy(path).into_owned();
        let mut mounts = self.mounts.lock().unwrap();
        if !mounts.iter().any(|(h, d)| *h == peer && *d == dir) {
            mounts.push((peer, dir));
        }
    }

    /// The handle of `path`: `/VOLUME[/DIR...]`, for a client at `peer`
    /// the volume's rules let in, if what it names may be mounted.
    async fn mnt(&self, path: &[u8], mut cx: Ctx, peer: std::net::IpAddr) -> Result<Handle, u32> {
        let path = std::str::from_utf8(path).map_err(|_| stat::NOENT)?;
        let path = path.trim_start_matches('/');
        let (vol, dir) = path.split_once('/').unwrap_or((path, ""));
        let export = self.exports.named(vol).ok_or(stat::NOENT)?;
        if export.refuses(peer).await.is_some() {
            return Err(stat::ACCES);
        }
        export.squash(&mut cx);
        let root = export.walk(&cx, dir).await?.gfid;
        export.admits(root, peer).await?;
        Ok(Handle {
            volume: export.id,
            root,
            gfid: root,
        })
    }
}
