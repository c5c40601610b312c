//! `features/read-only`: while `features.read-only` is on, every mount of
//! the volume refuses changes with EROFS, and reads go on. Turning it on
//! or off switches the graph of every mounted client (`mount.rs`), with
//! files kept open across the switch.

use async_trait::async_trait;
use mortar_core::options::{Kind, Spec};
use mortar_core::{Child, Ctx, Fop, FsError, FsResult, Reply, Xlator};

pub static READ_ONLY: Spec = Spec {
    key: "features.read-only",
    kind: Kind::Bool,
    default: "off",
    help: "Makes every mount of the volume read-only: changes fail with EROFS, reads go on. Enforced by the clients' graph (mounted clients switch to it at once).",
};

pub struct ReadOnly {
    name: String,
    child: Child,
}

impl ReadOnly {
    pub fn new(name: String, child: Child) -> ReadOnly {
        ReadOnly { name, child }
    }
}

/// Whether a fop would change something (fsync of an open file does not).
fn changes(fop: &Fop) -> bool {
    match fop {
        Fop::Fsync { .. } => false,
        Fop::Open { flags, .. } => {
            flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
        }
        other => other.is_modifying(),
    }
}

#[async_trait]
impl Xlator for ReadOnly {
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        if changes(&fop) {
            return Err(FsError::new(
                libc::EROFS,
                format!(
                    "{}: the volume is read-only (features.read-only)",
                    self.name
                ),
            ));
        }
        self.child.call(cx, fop).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_core::Gfid;

    #[test]
    fn only_changes_are_refused() {
        let g = Gfid::ROOT;
        assert!(!changes(&Fop::Getattr { gfid: g }));
        assert!(!changes(&Fop::Open {
            gfid: g,
            flags: libc::O_RDONLY
        }));
        assert!(changes(&Fop::Open {
            gfid: g,
            flags: libc::O_RDWR
        }));
        assert!(changes(&Fop::Open {
            gfid: g,
            flags: libc::O_RDONLY | libc::O_TRUNC
        }));
        assert!(!changes(&Fop::Fsync {
            gfid: g,
            fh: 1,
            datasync: false
        }));
        assert!(changes(&Fop::Setattr {
            gfid: g,
            set: Default::default()
        }));
    }
}
