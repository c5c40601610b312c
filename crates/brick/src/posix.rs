//! `storage/posix` as the bottom of the brick stack: runs each fop on the
//! brick directory (`storage::posix::Posix`, blocking calls). A client's
//! quick ones run right away on the calling task (no thread hand-off,
//! which is most of the cost of a small request); slow ones (syncing,
//! large transfers, listing, truncating) on the blocking pool, so that they
//! never hold up the quick ones behind them on the same connection. An
//! unlink is quick: a large file's blocks are freed on a thread of their
//! own (`storage::posix::reaper`).
//!
//! Background requests (self-heal, rebalance: `Ctx::background`) move
//! their data on the blocking pool whatever its size: they read what nobody
//! read lately, and a small read that waits for the disk on the calling
//! task holds up every quick request of the brick host behind it. (A brick
//! replaced empty and rebuilt from 2,000 small files took 9.2 to 10.7 s
//! this way; 7.8 to 8.7 s with their changes of names on the pool too,
//! which is not safe: below; docs/disperse.md, "Heal".)
//!
//! Changes of names never leave the calling task, background or not: a
//! name and its gfid are made in several steps (`mkdirat`, then the gfid
//! and its handle: `storage::posix::namespace`), and only running them one
//! at a time on the brick host's thread keeps those steps whole. A
//! rebalance's mkdir on the pool answered EEXIST while a mount's mkdir of
//! the same directory was between its steps, and the rebalance's next call
//! found no object by that gfid.

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

/// Operations that move a file's data and touch no name.
fn moves_data(fop: &Fop) -> bool {
    matches!(fop, Fop::Read { .. } | Fop::Write { .. })
}

/// Whether `fop` runs on the calling task (else on the blocking pool).
fn runs_inline(cx: &Ctx, fop: &Fop) -> bool {
    !(is_slow(fop) || (cx.is_background() && moves_data(fop)))
}

#[async_trait]
impl BrickXlator for PosixXl {
    async fn call(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        if runs_inline(cx, &fop) {
            return self.posix.call(cx, &conn.fds, &fop);
        }
        let (posix, conn, cx) = (self.posix.clone(), conn.clone(), cx.clone());
        tokio::task::spawn_blocking(move || posix.call(&cx, &conn.fds, &fop))
            .await
            .unwrap_or_else(|e| Err(FsError::new(libc::EIO, format!("brick task failed: {e}"))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_core::{Gfid, Name};

    #[test]
    fn background_data_goes_to_the_pool_and_changes_of_names_stay_on_the_calling_task() {
        let read = |size| Fop::Read {
            gfid: Gfid::ROOT,
            fh: 0,
            offset: 0,
            size,
        };
        let stat = Fop::Getattr { gfid: Gfid::ROOT };
        // A client's quick requests run at once, its large ones on the pool.
        assert!(runs_inline(&Ctx::root(), &read(4096)));
        assert!(runs_inline(&Ctx::root(), &stat));
        assert!(!runs_inline(&Ctx::root(), &read(1 << 20)));
        // A heal's or a rebalance's data, however small, on the pool.
        assert!(!runs_inline(&Ctx::background(), &read(4096)));
        // Their changes of names one at a time with everyone's, and their
        // other quick requests beside them.
        let mkdir = Fop::Mkdir {
            parent: Gfid::ROOT,
            name: Name::new(b"d".to_vec()).unwrap(),
            gfid: Gfid::ROOT,
            mode: 0o755,
            umask: 0,
        };
        assert!(runs_inline(&Ctx::background(), &mkdir));
        assert!(runs_inline(&Ctx::background(), &stat));
    }
}
