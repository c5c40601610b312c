//! What the brick's changes touched while a snapshot's copy is made ahead
//! (`storage::snapshot::precopy`): noted by gfid as each change enters and
//! ends, and turned into the copy's directories and objects to bring up
//! to date behind the barrier.

use mortar_core::{Fop, FsResult, Gfid, Reply};
use mortar_storage::posix::Posix;
use mortar_storage::snapshot::Changed;
use std::collections::HashSet;
use std::path::Path;

/// Gfids changes touched, and whether one removed a name without saying
/// what it removed (every handle directory is then looked over).
#[derive(Default)]
pub(super) struct Touched {
    gfids: HashSet<Gfid>,
    unknown: bool,
}

/// What one change touches, read from it before it is made (no copy of
/// the request is kept).
pub(super) struct Touch {
    gfids: [Gfid; 2],
    /// It removes or moves a name (its answer says which objects).
    removes: bool,
}

impl Touch {
    pub(super) fn of(fop: &Fop) -> Touch {
        let (a, b) = match fop {
            Fop::Mknod { parent, gfid, .. }
            | Fop::Create { parent, gfid, .. }
            | Fop::Mkdir { parent, gfid, .. }
            | Fop::Symlink { parent, gfid, .. } => (*parent, *gfid),
            Fop::Rename {
                parent, newparent, ..
            } => (*parent, *newparent),
            Fop::Link {
                gfid, newparent, ..
            } => (*gfid, *newparent),
            other => (other.gfid(), Gfid::NULL),
        };
        let removes = matches!(
            fop,
            Fop::Unlink { .. } | Fop::Rmdir { .. } | Fop::Rename { .. }
        );
        Touch {
            gfids: [a, b],
            removes,
        }
    }
}

impl Touched {
    /// A change that ended, with its answer: what it touched, and the
    /// objects its answer names (those a removal of a name removed or
    /// moved, and the directories it changed).
    pub(super) fn add(&mut self, t: &Touch, answer: &FsResult<Reply>) {
        self.gfids
            .extend(t.gfids.iter().copied().filter(|g| !g.is_null()));
        match answer {
            Ok(Reply::Unnamed(attrs)) => self.gfids.extend(attrs.iter().map(|a| a.gfid)),
            Ok(Reply::Entry(e)) | Ok(Reply::Created { entry: e, .. }) => {
                self.gfids.insert(e.attr.gfid);
            }
            Ok(Reply::Attr(a)) | Ok(Reply::Written(_, Some(a))) => {
                self.gfids.insert(a.gfid);
            }
            // A removal that did not say what it removed.
            Ok(_) if t.removes => self.unknown = true,
            _ => {}
        }
    }

    /// The copy's directories and objects to bring up to date, on the
    /// brick `posix` serves (which no longer changes).
    pub(super) fn changed(&self, posix: &Posix) -> Changed {
        let mut c = Changed::default();
        for g in &self.gfids {
            // (Its handle and side file, made, removed or changed as the
            // brick's are: their directories are not looked over.)
            c.objects.extend(Posix::side_paths(*g));
            if let Ok(dir) = posix.dir_path(*g) {
                c.dirs.insert(dir);
            }
        }
        if self.unknown {
            let index = Posix::side_paths(Gfid::ROOT)[0].clone();
            if let Some(root) = index.parent().and_then(Path::parent) {
                c.dirs
                    .extend((0..=255u8).map(|b| root.join(format!("{b:02x}"))));
            }
        }
        c
    }
}
