//! `storage/posix` as the bottom of the brick stack: runs each fop on the
//! brick directory (`storage::posix::Posix`, blocking calls). Quick ones run
//! right away on the calling task (no thread hand-off, which is most of the
//! cost of a small request); slow ones (syncing, large transfers, listing,
//! truncating) on the blocking pool, so that they never hold up the quick
//! ones behind them on the same connection. An unlink is quick: a large
//! file's blocks are freed on a thread of their own
//! (`storage::posix::reaper`).

use super::{BrickEnv, BrickXlator, Conn};
use async_trait::async_trait;
use mortar_core::{Ctx, Fop, FsError, FsResult, Reply};
use mortar_storage::posix::Posix;
use std::sync::Arc;

pub struct PosixXl {
    posix: Arc<Posix>,
}

pub fn build(
    env: &BrickEnv,
    _below: Option<Arc<dyn BrickXlator>>,
) -> anyhow::Result<Option<Arc<dyn BrickXlator>>> {
    Ok(Some(Arc::new(PosixXl {
        posix: env.posix.clone(),
    })))
}

/// Operations that may take long.
fn is_slow(fop: &Fop) -> bool {
    const BIG: usize = 64 << 10;
    match fop {
        Fop::Fsync { .. }
        | Fop::Fallocate { .. }
        | Fop::Opendir { .. }
        | Fop::Readdir { .. }
        | Fop::Checksum { .. }
        | Fop::Resolve { .. } => true,
        Fop::Read { size, .. } => *size as usize > BIG,
        Fop::Write { data, .. } => data.len() > BIG,
        Fop::Setattr { set, .. } => set.size.is_some(),
        _ => false,
    }
}

#[async_trait]
impl BrickXlator for PosixXl {
    async fn call(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        if !is_slow(&fop) {
            return self.posix.call(cx, &conn.fds, &fop);
        }
        let (posix, conn, cx) = (self.posix.clone(), conn.clone(), cx.clone());
        tokio::task::spawn_blocking(move || posix.call(&cx, &conn.fds, &fop))
            .await
            .unwrap_or_else(|e| Err(FsError::new(libc::EIO, format!("brick task failed: {e}"))))
    }
}
