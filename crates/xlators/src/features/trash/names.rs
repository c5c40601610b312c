//! Where objects are named: the trash keeps a removed file at the path it
//! had (`.trashcan/DIR/NAME_TIME`), so it must know the path of the
//! directory a name is removed from, and the name of a file truncated by
//! handle. The names the mount is answered (lookups, creates, renames)
//! are kept, a bounded number; a directory not among them is found by
//! asking its parent (`Fop::Parent`) and reading it.

use mortar_core::{Ctx, Fop, FsError, FsResult, Gfid, Name, Reply};
use std::collections::HashMap;
use std::sync::Mutex;

/// Names kept at most (past that, half are forgotten).
const NAMES_MAX: usize = 1 << 16;

/// The deepest path followed up to the root.
const DEPTH_MAX: usize = 256;

#[derive(Default)]
pub(super) struct Names(Mutex<HashMap<Gfid, (Gfid, Name)>>);

impl Names {
    /// `gfid` is called `name` in `parent`.
    pub(super) fn learn(&self, gfid: Gfid, parent: Gfid, name: &Name) {
        let mut m = self.0.lock().unwrap();
        if m.len() >= NAMES_MAX {
            let keep: Vec<Gfid> = m.keys().skip(NAMES_MAX / 2).copied().collect();
            let mut kept = HashMap::with_capacity(NAMES_MAX);
            for g in keep {
                if let Some(v) = m.remove(&g) {
                    kept.insert(g, v);
                }
            }
            *m = kept;
        }
        m.insert(gfid, (parent, name.clone()));
    }

    /// The kernel forgot `gfid`.
    pub(super) fn forget(&self, gfid: Gfid) {
        self.0.lock().unwrap().remove(&gfid);
    }

    /// Where `gfid` was last seen named, if it was.
    pub(super) fn of(&self, gfid: Gfid) -> Option<(Gfid, Name)> {
        self.0.lock().unwrap().get(&gfid).cloned()
    }

    /// What an answer to `fop` tells of names.
    pub(super) fn note(&self, fop: &Fop, reply: &Reply) {
        match (fop, reply) {
            (
                Fop::Lookup { parent, name }
                | Fop::Create { parent, name, .. }
                | Fop::Mknod { parent, name, .. }
                | Fop::Mkdir { parent, name, .. }
                | Fop::Symlink { parent, name, .. },
                Reply::Entry(e) | Reply::Created { entry: e, .. },
            ) => self.learn(e.attr.gfid, *parent, name),
            (Fop::Rename { .. }, _) | (Fop::Unlink { .. }, _) | (Fop::Rmdir { .. }, _) => {
                // (The object keeps its gfid: learnt again at its next
                // lookup; an old name is only a worse place in the trash.)
            }
            _ => {}
        }
    }

    /// The names from the root down to directory `dir` (empty for the
    /// root).
    pub(super) async fn path(
        &self,
        cx: &Ctx,
        child: &mortar_core::Child,
        dir: Gfid,
    ) -> FsResult<Vec<Name>> {
        let mut names = Vec::new();
        let mut at = dir;
        while at != Gfid::ROOT {
            if names.len() >= DEPTH_MAX {
                return Err(FsError::new(libc::ELOOP, "a path deeper than 256"));
            }
            let (parent, name) = match self.of(at) {
                Some(p) => p,
                None => {
                    let found = find_name(cx, child, at).await?;
                    self.learn(at, found.0, &found.1);
                    found
                }
            };
            names.push(name);
            at = parent;
        }
        names.reverse();
        Ok(names)
    }
}

/// Directory `dir`'s parent and its name there, by reading the parent.
async fn find_name(cx: &Ctx, child: &mortar_core::Child, dir: Gfid) -> FsResult<(Gfid, Name)> {
    let parent = child
        .call(cx, Fop::Parent { gfid: dir })
        .await?
        .into_entry()?
        .attr
        .gfid;
    let fh = match child.call(cx, Fop::Opendir { gfid: parent }).await? {
        Reply::Opened { fh } => fh,
        other => return Err(mortar_core::fop::unexpected(other)),
    };
    let entries = child.read_whole_dir(cx, parent, fh).await?;
    let e = entries
        .iter()
        .find(|e| e.attr.as_ref().is_some_and(|a| a.gfid == dir))
        .ok_or_else(|| {
            FsError::new(libc::ENOENT, format!("{dir} is not in its parent {parent}"))
        })?;
    Ok((parent, Name::new(e.name.to_vec())?))
}
