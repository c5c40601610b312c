//! `features/arbiter`: an arbiter brick keeps names and metadata but no
//! file data. Writes are acknowledged without storing their bytes (a
//! zero-length write still checks the handle), space is not allocated,
//! sizes stay 0, and data reads fail: replicate never reads data there.

use super::{BrickEnv, BrickXlator, Conn};
use async_trait::async_trait;
use mortar_core::{Ctx, Fop, FsError, FsResult, Reply};
use std::sync::Arc;

pub struct Arbiter {
    below: Arc<dyn BrickXlator>,
}

pub fn build(
    env: &BrickEnv,
    below: Option<Arc<dyn BrickXlator>>,
) -> anyhow::Result<Option<Arc<dyn BrickXlator>>> {
    if !env.arbiter {
        return Ok(None);
    }
    let below = below.ok_or_else(|| anyhow::anyhow!("the arbiter needs a translator below"))?;
    Ok(Some(Arc::new(Arbiter { below })))
}

#[async_trait]
impl BrickXlator for Arbiter {
    async fn call(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        match fop {
            Fop::Read { .. } => Err(FsError::new(
                libc::EIO,
                "an arbiter brick holds no file data",
            )),
            Fop::Write {
                gfid,
                fh,
                offset,
                data,
                ..
            } => {
                let empty = Fop::Write {
                    gfid,
                    fh,
                    offset,
                    data: bytes::Bytes::new(),
                    grow: 0,
                    reserve: false,
                };
                self.below.call(conn, cx, empty).await?;
                Ok(Reply::Written(data.len() as u32, None))
            }
            Fop::Fallocate {
                gfid, fh, offset, ..
            } => {
                let empty = Fop::Write {
                    gfid,
                    fh,
                    offset,
                    data: bytes::Bytes::new(),
                    grow: 0,
                    reserve: false,
                };
                self.below.call(conn, cx, empty).await.map(|_| Reply::Ok)
            }
            Fop::Setattr { gfid, mut set } => {
                set.size = None;
                self.below.call(conn, cx, Fop::Setattr { gfid, set }).await
            }
            other => self.below.call(conn, cx, other).await,
        }
    }
}
