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
//! write, fallocate, setattr, xattr change, a link to it, a create of
//! its name that would open it, an unlink or a rename of it or over it; but a setattr of its access time alone, to a
//! given time, moves the end of its retention there (later, or in
//! `features.retention-mode relax` earlier too). After it, it is an
//! ordinary file again, until the next `chmod a-w` commits it anew;
//! with `features.worm-files-deletable off` it is never deleted.
//!
//! The pool's own requests (`Ctx::internal`, honoured from the pool's
//! servers only: self-heal, rebalance) pass, so copies can be healed and
//! moved. A copy that missed the commit (its brick was down) has no record
//! and is committed by its own auto-commit.

use super::{BrickEnv, BrickXlator, Conn};
use async_trait::async_trait;
use mortar_core::fop::{SetAttr, TimeSet};
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

pub static RETENTION_MODE: Spec = Spec {
    key: "features.retention-mode",
    kind: Kind::Enum(&["relax", "enterprise"]),
    default: "relax",
    help: "How the end of a retained file's retention may be moved, by setting its access time to it (touch -a -d TIME): relax, earlier or later; enterprise, only later.",
};

pub static FILES_DELETABLE: Spec = Spec {
    key: "features.worm-files-deletable",
    kind: Kind::Bool,
    default: "on",
    help: "Whether a file may be deleted (or renamed over) once its retention has ended; off: a file once committed is never deleted, though it may change again.",
};

pub struct Worm {
    below: Arc<dyn BrickXlator>,
    posix: Arc<Posix>,
    on: AtomicBool,
    period: AtomicI64,
    auto: AtomicI64,
    enterprise: AtomicBool,
    deletable: AtomicBool,
}

/// Where a file stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Never committed (or not a regular file).
    Free,
    /// Committed, and retained until `until` (Unix seconds).
    Retained { since: i64, until: i64 },
    /// Committed once; its retention has ended.
    Ended,
}

/// A retention to record on a copy, and why.
struct Record {
    since: i64,
    until: i64,
    why: &'static str,
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
        enterprise: AtomicBool::new(false),
        deletable: AtomicBool::new(true),
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
fn commits(set: &SetAttr) -> bool {
    set.mode.is_some_and(|m| m & 0o222 == 0)
}

/// The time a setattr of the access time alone sets it to, if that is
/// all it does (`touch -a -d`; not `touch -a`, which sets it to now).
fn atime_alone(set: &SetAttr) -> Option<i64> {
    match set {
        SetAttr {
            atime: Some(TimeSet::At(to, _)),
            mode: None,
            uid: None,
            gid: None,
            size: None,
            mtime: None,
        } => Some(*to),
        _ => None,
    }
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
    /// Where the file stands now: committing it first when it has not
    /// changed for the auto-commit period.
    fn state(&self, attr: &Attr) -> FsResult<State> {
        // (A distribute pointer is the volume's bookkeeping, not a file.)
        if attr.kind != FileKind::File || attr.linkto.is_some() {
            return Ok(State::Free);
        }
        let fd = self.posix.resolve(attr.gfid)?;
        let t = now();
        if let Some((since, until)) = read_retention(&*fd)? {
            return Ok(match until > t {
                true => State::Retained { since, until },
                false => State::Ended,
            });
        }
        let auto = self.auto.load(Ordering::Relaxed);
        if auto == 0 || t - attr.ctime.0 < auto {
            return Ok(State::Free);
        }
        let until = t + self.period.load(Ordering::Relaxed);
        let why = "committed (unchanged for the auto-commit period)";
        self.record(
            &*fd,
            attr.gfid,
            &Record {
                since: t,
                until,
                why,
            },
        )?;
        Ok(match until > t {
            true => State::Retained { since: t, until },
            false => State::Ended,
        })
    }

    fn attr(&self, conn: &Conn, gfid: Gfid) -> FsResult<Attr> {
        self.posix
            .call(&Ctx::root(), &conn.fds, &Fop::Getattr { gfid })?
            .into_attr()
    }

    /// Whether a change may reach a file in `state`: never while it is
    /// retained; a removal of its name (`removes`) never once it was
    /// committed, when committed files are not deletable.
    fn allows(&self, state: State, removes: bool, what: &str) -> FsResult<()> {
        match state {
            State::Retained { until, .. } => Err(retained(what, until)),
            State::Ended if removes && !self.deletable.load(Ordering::Relaxed) => {
                Err(FsError::new(
                    libc::EROFS,
                    format!("{what} was committed: it is never deleted (features.worm-files-deletable off)"),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Refuses a change of `gfid` while it is retained.
    fn guard(&self, conn: &Conn, gfid: Gfid) -> FsResult<()> {
        let attr = self.attr(conn, gfid)?;
        self.allows(self.state(&attr)?, false, &format!("file {gfid}"))
    }

    /// Refuses a change of the file the name `name` in `parent` leads to,
    /// if any: the removal of that file (`removes`: an unlink, a rename
    /// over it), or an open or a rename of it.
    fn guard_name(&self, conn: &Conn, parent: Gfid, name: &Name, removes: bool) -> FsResult<()> {
        let lookup = Fop::Lookup {
            parent,
            name: name.clone(),
        };
        let attr = match self.posix.call(&Ctx::root(), &conn.fds, &lookup) {
            Ok(r) => r.into_entry()?.attr,
            Err(e) if e.is(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(e),
        };
        self.allows(self.state(&attr)?, removes, &format!("{name:?}"))
    }

    /// What a setattr may do to a file, read once: on a retained file, a
    /// setattr of the access time alone, to a given time, sets when its
    /// retention ends (GlusterFS's rule; later in either mode, earlier
    /// only in `relax`), and any other is refused; on another file, one
    /// that takes every write permission away commits it from now. The
    /// retention to record once the setattr has passed.
    fn setattr(&self, conn: &Conn, gfid: Gfid, set: &SetAttr) -> FsResult<Option<Record>> {
        let attr = self.attr(conn, gfid)?;
        let state = self.state(&attr)?;
        if let (State::Retained { since, until }, Some(to)) = (state, atime_alone(set)) {
            if to < until && self.enterprise.load(Ordering::Relaxed) {
                return Err(FsError::new(
                    libc::EROFS,
                    format!("file {gfid}: its retention may only be lengthened (features.retention-mode enterprise)"),
                ));
            }
            return Ok(Some(Record {
                since,
                until: to,
                why: "its end moved",
            }));
        }
        self.allows(state, false, &format!("file {gfid}"))?;
        let file = attr.kind == FileKind::File && attr.linkto.is_none();
        Ok((file && commits(set)).then(|| {
            let t = now();
            Record {
                since: t,
                until: t + self.period.load(Ordering::Relaxed),
                why: "committed (write permission taken away)",
            }
        }))
    }

    /// Records on the copy open at `fd` that file `gfid` is retained.
    fn record(&self, fd: impl std::os::fd::AsFd, gfid: Gfid, r: &Record) -> FsResult<()> {
        write_retention(fd, r.since, r.until)?;
        tracing::info!(brick = %self.posix.path().display(), %gfid, "{}: retained until {}", r.why, r.until);
        Ok(())
    }

    /// Refuses `fop` if it would change a retained file (or remove one no
    /// longer deletable); answers a retention to record once it is done.
    fn check(&self, conn: &Conn, fop: &Fop) -> FsResult<Option<Record>> {
        match fop {
            Fop::Setattr { gfid, set } => self.setattr(conn, *gfid, set),
            Fop::Open { gfid, flags } if opens_for_change(*flags) => {
                self.guard(conn, *gfid).map(|()| None)
            }
            Fop::Write { gfid, .. }
            | Fop::Fallocate { gfid, .. }
            | Fop::Setxattr { gfid, .. }
            | Fop::Removexattr { gfid, .. }
            | Fop::Link { gfid, .. } => self.guard(conn, *gfid).map(|()| None),
            // A create of a name that is there opens that file.
            Fop::Create {
                parent,
                name,
                flags,
                ..
            } if flags & libc::O_EXCL == 0 && opens_for_change(*flags) => {
                self.guard_name(conn, *parent, name, false).map(|()| None)
            }
            Fop::Unlink { parent, name } => {
                self.guard_name(conn, *parent, name, true).map(|()| None)
            }
            Fop::Rename {
                parent,
                name,
                newparent,
                newname,
                ..
            } => {
                // (The file renamed stays; the one renamed over goes.)
                self.guard_name(conn, *parent, name, false)?;
                self.guard_name(conn, *newparent, newname, true)
                    .map(|()| None)
            }
            _ => Ok(None),
        }
    }
}

#[async_trait]
impl BrickXlator for Worm {
    async fn call(&self, conn: &Arc<Conn>, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        if cx.internal || !self.on.load(Ordering::Relaxed) {
            return self.below.call(conn, cx, fop).await;
        }
        // (Only a setattr answers a retention to record.)
        let record = self.check(conn, &fop)?.map(|r| (fop.gfid(), r));
        let reply = self.below.call(conn, cx, fop).await?;
        if let Some((gfid, r)) = record {
            self.record(&*self.posix.resolve(gfid)?, gfid, &r)?;
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
        self.enterprise.store(
            RETENTION_MODE.str(options) == "enterprise",
            Ordering::Relaxed,
        );
        self.deletable
            .store(FILES_DELETABLE.bool(options), Ordering::Relaxed);
    }

    fn dump(&self) -> Vec<String> {
        vec![format!(
            "worm-file-level {} retention {} s auto-commit {} s mode {} deletable {}",
            if self.on.load(Ordering::Relaxed) {
                "on"
            } else {
                "off"
            },
            self.period.load(Ordering::Relaxed),
            self.auto.load(Ordering::Relaxed),
            if self.enterprise.load(Ordering::Relaxed) {
                "enterprise"
            } else {
                "relax"
            },
            self.deletable.load(Ordering::Relaxed),
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
        let set = |mode| SetAttr {
            mode,
            ..Default::default()
        };
        assert!(commits(&set(Some(0o444))));
        assert!(commits(&set(Some(0o500))));
        assert!(!commits(&set(Some(0o644))));
        assert!(!commits(&set(Some(0o464))));
        assert!(!commits(&set(None)));
        let at = SetAttr {
            atime: Some(TimeSet::At(2_000_000_000, 0)),
            ..Default::default()
        };
        assert_eq!(atime_alone(&at), Some(2_000_000_000));
        let now = SetAttr {
            atime: Some(TimeSet::Now),
            ..Default::default()
        };
        assert_eq!(atime_alone(&now), None);
        let both = SetAttr {
            mode: Some(0o644),
            ..at
        };
        assert_eq!(atime_alone(&both), None);
    }
}
