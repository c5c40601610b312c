//! `features/index`: change sessions, blame and the heal index
//! (`store`, docs/replication.md). A lock request with a mark
//! opens the connection's session on the object and records the blame; an
//! unlock settles the sessions; heal clears blame and reads the index. A
//! connection that ends leaves its sessions unsettled, for heal.

use crate::{BrickEnv, BrickXlator, Conn};
use mortar_core::changed::{Changed, CHANGED_XATTR};
use mortar_core::{Ctx, Fop, FsResult, Gfid, Reply};
mod store;
pub use store::{Index, PENDING_BASE};

use async_trait::async_trait;
use std::sync::Arc;

pub struct IndexXl {
    index: Arc<Index>,
    below: Arc<dyn BrickXlator>,
}

pub fn build(
    env: &BrickEnv,
    below: Option<Arc<dyn BrickXlator>>,
) -> anyhow::Result<Option<Arc<dyn BrickXlator>>> {
    let below = below.ok_or_else(|| anyhow::anyhow!("the index needs a translator below"))?;
    let index = Index::open(env.posix.clone())
        .map_err(|e| anyhow::anyhow!("cannot open the heal index: {e}"))?;
    Ok(Some(Arc::new(IndexXl {
        index: Arc::new(index),
        below,
    })))
}

/// The bytes of an object's data `fop` may change: `start..end`.
fn changes(fop: &Fop) -> Option<(Gfid, u64, u64)> {
    match fop {
        Fop::Write {
            gfid,
            offset,
            data,
            grow,
            ..
        } => Some((*gfid, *offset, (*offset + data.len() as u64).max(*grow))),
        Fop::Fallocate {
            gfid, offset, len, ..
        } => Some((*gfid, *offset, offset.saturating_add(*len))),
        Fop::Setattr { gfid, set } => set.size.map(|s| (*gfid, s, u64::MAX)),
        Fop::Open { gfid, flags } if flags & libc::O_TRUNC != 0 => Some((*gfid, 0, u64::MAX)),
        _ => None,
    }
}

#[async_trait]
impl BrickXlator for IndexXl {
    async fn call(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        match fop {
            // The lock itself is granted above; here only the session.
            Fop::Lock { gfid, mark, .. } => {
                if let Some(blame) = mark {
                    match self.index.mark(conn.id, gfid, blame) {
                        // Unlinked, still open by this client (POSIX
                        // keeps it): nothing a heal could find by name.
                        Err(e) if e.is(libc::ESTALE) && conn.fds.has_open(gfid) => {}
                        r => r?,
                    }
                }
                Ok(Reply::Ok)
            }
            Fop::Unlock { gfids } => {
                self.index.settle(conn.id, &gfids);
                Ok(Reply::Ok)
            }
            Fop::Clear { gfid, unblame } => self.index.clear(gfid, unblame).map(Reply::Blame),
            Fop::Pending { max } => {
                // A crawl of the index directory: on the blocking pool.
                let index = self.index.clone();
                tokio::task::spawn_blocking(move || {
                    let gfids = index.pending(max as usize)?;
                    let bytes = index.backlog(&gfids);
                    Ok((gfids, bytes))
                })
                .await
                .unwrap_or_else(|e| {
                    Err(mortar_core::FsError::new(
                        libc::EIO,
                        format!("index task failed: {e}"),
                    ))
                })
                .map(|(gfids, bytes)| Reply::Pending(gfids, bytes))
            }
            Fop::Blamed { max } => Ok(Reply::Blames(self.index.blamed(max as usize))),
            Fop::Getxattr { gfid, name } if name == CHANGED_XATTR => {
                let c = self.index.known_changed(gfid)?;
                Ok(Reply::Xattr(c.encode().into()))
            }
            Fop::Setxattr {
                gfid, name, value, ..
            } if name == CHANGED_XATTR => {
                self.index.add_changed(gfid, &Changed::decode(&value))?;
                Ok(Reply::Ok)
            }
            other => {
                // Before the change is made: a record larger than what
                // happened is harmless, a smaller one is not.
                if let Some((gfid, start, end)) = changes(&other) {
                    self.index.changed(gfid, start, end);
                }
                self.below.call(conn, cx, other).await
            }
        }
    }

    fn disconnect(&self, conn: &Conn) {
        self.index.disconnect(conn.id);
    }

    fn stopping(&self) {
        self.index.stopping();
    }
}
