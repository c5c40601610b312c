//! `features/worm`: retention of files, write once, read many
//! (`features.worm-file-level`, GlusterFS's name), enforced here so that
//! no client and no client configuration gets around it.
//!
//! A regular file is committed when a client takes its write permission
//! away from everyone (a setattr leaving no `w` bit), or, at its next
//! change, once it has not changed for `features.auto-commit-period`
//! (its ctime, which no client can set back). The commit is recorded on
//! the copy (`RETENTION_XATTR`: since, until). Until then every change of
//! the file is refused with EROFS: an open for writing or truncation, a
//! write, fallocate, setattr, xattr change, a link to it, an unlink or a
//! rename of it or over it. After it, it is an ordinary file again, until
//! the next `chmod a-w` commits it anew.
//!
//! The pool's own requests (`Ctx::internal`, honoured from the pool's
//! servers only: self-heal, rebalance) pass, so copies can be healed and
//! moved. A copy that missed the commit (its brick was down) has no record
//! and is committed by its own auto-commit.

use super::{BrickEnv, BrickXlator, Conn};
use async_trait::async_trait;
use mortar_core::options::{Kind, Spec};
use mortar_core::terms::WORM_FILE_LEVEL;
use mortar_core::{Attr, Ctx, FileKind, Fop, FsError, FsResult, Gfid, Name, Reply};
use mortar_storage::posix::{read_retention, write_retention, Posix};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

const HUNDRED_YEARS: i64 = 100 * 365 * 86_400;

pub static RETENTION_PERIOD: Spec = Spec {
    key: "features.default-retention-period",
    kind: Kind::Int(0, HUNDRED_YEARS),
    default: "120",
    help: "Seconds a file committed under features.worm-file-level refuses every change (GlusterFS's default: 120).",
};

pub static AUTO_COMMIT_PERIOD: Spec = Spec {
    key: "features.auto-commit-period",
    kind: Kind::Int(0, HUNDRED_YEARS),
    default: "180",
    help: "Seconds after its last change (its ctime) at which a file is committed under features.worm-file-level, at its next change; 0: only chmod a-w commits.",
};

pub struct Worm {
    below: Arc<dyn BrickXlator>,
    posix: Arc<Posix>,
    on: AtomicBool,
    period: AtomicI64,
    auto: AtomicI64,
}

pub fn build(
    env: &BrickEnv,
    below: Option<Arc<dyn BrickXlator>>,
) -> anyhow::Result<Option<Arc<dyn BrickXlator>>> {
    let below = below.ok_or_else(|| anyhow::anyhow!("features/worm needs a layer below"))?;
    Ok(Some(Arc::new(Worm {
        below,
        posix: env.posix.clone(),
        on: AtomicBool::new(false),
        period: AtomicI64::new(120),
        auto: AtomicI64::new(180),
    })))
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Whether an open with `flags` may change the file.
fn opens_for_change(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

/// Whether a setattr commits: it leaves the file no write permission.
fn commits(set: &mortar_core::SetAttr) -> bool {
    set.mode.is_some_and(|m| m & 0o222 == 0)
}

fn retained(what: &str, until: i64) -> FsError {
    FsError::new(
        libc::EROFS,
        format!(
            "{what} is retained for {} s more (features.worm-file-level)",
            until - now()
        ),
    )
}

impl Worm {
    /// Until when the file is retained, if it is now: committing it first
    /// when it has not changed for the auto-commit period.
    fn retained_until(&self, attr: &Attr) -> FsResult<Option<i64>> {
        if attr.kind != FileKind::File {
            return Ok(None);
        }
        let fd = self.posix.resolve(attr.gfid)?;
        let t = now();
        if let Some((_, until)) = read_retention(&*fd)? {
            return Ok((until > t).then_some(until));
        }
        let auto = self.auto.load(Ordering::Relaxed);
        if auto == 0 || t - attr.ctime.0 < auto {
            return Ok(None);
        }
        let until = t + self.period.load(Ordering::Relaxed);
        write_retention(&*fd, t, until)?;
        tracing::info!(brick = %self.posix.path().display(), gfid = %attr.gfid, "committed after {auto} s without a change: retained until {until}");
        Ok((until > t).then_some(until))
    }

    fn attr(&self, conn: &Conn, gfid: Gfid) -> FsResult<Attr> {
        self.posix
            .call(&Ctx::root(), &conn.fds, &Fop::Getattr { gfid })?
            .into_attr()
    }

    /// Refuses a change of `gfid` while it is retained.
    fn guard(&self, conn: &Conn, gfid: Gfid) -> FsResult<()> {
        let attr = self.attr(conn, gfid)?;
        match self.retained_until(&attr)? {
            Some(until) => Err(retained(&format!("file {gfid}"), until)),
            None => Ok(()),
        }
    }

    /// Refuses a change of the file `name` in `parent` leads to, if any,
    /// while it is retained.
    fn guard_name(&self, conn: &Conn, parent: Gfid, name: &Name) -> FsResult<()> {
        let lookup = Fop::Lookup {
            parent,
            name: name.clone(),
        };
        let attr = match self.posix.call(&Ctx::root(), &conn.fds, &lookup) {
            Ok(r) => r.into_entry()?.attr,
            Err(e) if e.is(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(e),
        };
        match self.retained_until(&attr)? {
            Some(until) => Err(retained(&format!("{name:?}"), until)),
            None => Ok(()),
        }
    }

    /// Refuses `fop` if it would change a retained file.
    fn check(&self, conn: &Conn, fop: &Fop) -> FsResult<()> {
        match fop {
            Fop::Open { gfid, flags } if opens_for_change(*flags) => self.guard(conn, *gfid),
            Fop::Write { gfid, .. }
            | Fop::Fallocate { gfid, .. }
            | Fop::Setattr { gfid, .. }
            | Fop::Setxattr { gfid, .. }
            | Fop::Removexattr { gfid, .. }
            | Fop::Link { gfid, .. } => self.guard(conn, *gfid),
            Fop::Unlink { parent, name } => self.guard_name(conn, *parent, name),
            Fop::Rename {
                parent,
                name,
                newparent,
                newname,
                ..
            } => {
                self.guard_name(conn, *parent, name)?;
                self.guard_name(conn, *newparent, newname)
            }
            _ => Ok(()),
        }
    }

    /// After a setattr that took every write permission away: the file is
    /// committed from now.
    fn commit(&self, gfid: Gfid) -> FsResult<()> {
        let fd = self.posix.resolve(gfid)?;
        let t = now();
        let until = t + self.period.load(Ordering::Relaxed);
        write_retention(&*fd, t, until)?;
        tracing::info!(brick = %self.posix.path().display(), %gfid, "committed (write permission taken away): retained until {until}");
        Ok(())
    }
}

#[async_trait]
impl BrickXlator for Worm {
    async fn call(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        if cx.internal || !self.on.load(Ordering::Relaxed) {
            return self.below.call(conn, cx, fop).await;
        }
        self.check(conn, &fop)?;
        let commit = match &fop {
            Fop::Setattr { gfid, set } if commits(set) => Some(*gfid),
            _ => None,
        };
        let reply = self.below.call(conn, cx, fop).await?;
        if let Some(gfid) = commit {
            if let Reply::Attr(a) = &reply {
                if a.kind == FileKind::File {
                    self.commit(gfid)?;
                }
            }
        }
        Ok(reply)
    }

    fn reconfigure(&self, options: &mortar_core::Options) {
        self.on
            .store(WORM_FILE_LEVEL.bool(options), Ordering::Relaxed);
        self.period
            .store(RETENTION_PERIOD.int(options), Ordering::Relaxed);
        self.auto
            .store(AUTO_COMMIT_PERIOD.int(options), Ordering::Relaxed);
    }

    fn dump(&self) -> Vec<String> {
        vec![format!(
            "worm-file-level {} retention {} s auto-commit {} s",
            if self.on.load(Ordering::Relaxed) {
                "on"
            } else {
                "off"
            },
            self.period.load(Ordering::Relaxed),
            self.auto.load(Ordering::Relaxed),
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_opens_that_may_change_and_setattrs_that_take_every_write_bit_count() {
        assert!(!opens_for_change(libc::O_RDONLY));
        assert!(opens_for_change(libc::O_WRONLY | libc::O_APPEND));
        assert!(opens_for_change(libc::O_RDWR));
        assert!(opens_for_change(libc::O_RDONLY | libc::O_TRUNC));
        let set = |mode| mortar_core::SetAttr {
            mode,
            ..Default::default()
        };
        assert!(commits(&set(Some(0o444))));
        assert!(commits(&set(Some(0o500))));
        assert!(!commits(&set(Some(0o644))));
        assert!(!commits(&set(Some(0o464))));
        assert!(!commits(&set(None)));
    }
}
