//! What the brick's changes touched while a snapshot's copy is made ahead
//! (`storage::snapshot::precopy`), noted as each change ends, and turned
//! into what of the copy to bring up to date behind the barrier: the
//! names changes of names touched, the objects changes touched (their
//! handles and side files), and the directories whose metadata changed.

use mortar_core::{Fop, FsResult, Gfid, Name, Reply};
use mortar_storage::posix::Posix;
use mortar_storage::snapshot::Changed;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

#[derive(Default)]
pub(super) struct Touched {
    gfids: HashSet<Gfid>,
    names: HashSet<(Gfid, Name)>,
    /// Directories a change of names touched without its names noted (it
    /// began before noting did): looked over whole.
    dirs: HashSet<Gfid>,
    /// A removal did not say what it removed: every directory of handles
    /// is looked over.
    unknown: bool,
}

/// What one change touches, read from it before it is made: its gfids
/// always, the names it changes while noting (they are copied).
pub(super) struct Touch {
    gfids: [Gfid; 2],
    names: Vec<(Gfid, Name)>,
    /// A change of names (its parents are what it changed when its names
    /// were not noted).
    renames: bool,
    /// It removes or moves a name (its answer says which objects).
    removes: bool,
}

impl Touch {
    pub(super) fn of(fop: &Fop, noting: bool) -> Touch {
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
        let names: Vec<(Gfid, &Name)> = match fop {
            Fop::Mknod { parent, name, .. }
            | Fop::Create { parent, name, .. }
            | Fop::Mkdir { parent, name, .. }
            | Fop::Symlink { parent, name, .. }
            | Fop::Unlink { parent, name }
            | Fop::Rmdir { parent, name } => vec![(*parent, name)],
            Fop::Link {
                newparent, newname, ..
            } => vec![(*newparent, newname)],
            Fop::Rename {
                parent,
                name,
                newparent,
                newname,
                ..
            } => vec![(*parent, name), (*newparent, newname)],
            _ => Vec::new(),
        };
        Touch {
            gfids: [a, b],
            renames: !names.is_empty(),
            names: match noting {
                true => names.into_iter().map(|(p, n)| (p, n.clone())).collect(),
                false => Vec::new(),
            },
            removes: matches!(
                fop,
                Fop::Unlink { .. } | Fop::Rmdir { .. } | Fop::Rename { .. }
            ),
        }
    }
}

impl Touched {
    /// Adds what `other` noted.
    pub(super) fn merge(&mut self, other: Touched) {
        self.gfids.extend(other.gfids);
        self.names.extend(other.names);
        self.dirs.extend(other.dirs);
        self.unknown |= other.unknown;
    }

    /// How many things were noted.
    pub(super) fn len(&self) -> usize {
        self.gfids.len() + self.names.len() + self.dirs.len()
    }

    /// A change that ended, with its answer: what it touched, and the
    /// objects its answer names (those a removal of a name removed or
    /// moved, and the directories it changed).
    pub(super) fn add(&mut self, t: Touch, answer: &FsResult<Reply>) {
        self.gfids
            .extend(t.gfids.iter().copied().filter(|g| !g.is_null()));
        if t.renames && t.names.is_empty() {
            self.dirs
                .extend(t.gfids.iter().copied().filter(|g| !g.is_null()));
        }
        self.names.extend(t.names);
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

    /// What of the copy to bring up to date, on the brick `posix` serves
    /// (which no longer changes).
    pub(super) fn changed(&self, posix: &Posix) -> Changed {
        let mut c = Changed::default();
        for g in &self.gfids {
            // (Its handle and side file, made, removed or changed as the
            // brick's are.)
            c.objects.extend(Posix::side_paths(*g));
            if let Ok(dir) = posix.dir_path(*g) {
                c.metas.insert(dir);
            }
        }
        for (parent, name) in &self.names {
            // (A directory gone since: the change that removed it is
            // noted too.)
            if let Ok(dir) = posix.dir_path(*parent) {
                c.entries
                    .insert(dir.join(OsStr::from_bytes(name.as_bytes())));
            }
        }
        for g in &self.dirs {
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

#[cfg(test)]
mod tests {
    use super::*;
    use mortar_core::Attr;

    fn name(s: &str) -> Name {
        Name::new(s.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn names_are_kept_only_while_noting_and_removals_say_what_they_removed() {
        let (dir, file) = (Gfid::random(), Gfid::random());
        let create = Fop::Create {
            parent: dir,
            name: name("a"),
            gfid: file,
            mode: 0o644,
            umask: 0,
            flags: 0,
        };
        let mut t = Touched::default();
        t.add(Touch::of(&create, true), &Ok(Reply::Ok));
        assert!(t.names.contains(&(dir, name("a"))));
        assert!(t.gfids.contains(&dir) && t.gfids.contains(&file));
        assert!(t.dirs.is_empty());
        // Begun before noting: its directory is looked over whole.
        let mut t = Touched::default();
        t.add(Touch::of(&create, false), &Ok(Reply::Ok));
        assert!(t.names.is_empty() && t.dirs.contains(&dir));

        let unlink = Fop::Unlink {
            parent: dir,
            name: name("a"),
        };
        let mut t = Touched::default();
        let gone = Attr::plain_file(file, 0);
        t.add(Touch::of(&unlink, true), &Ok(Reply::Unnamed(vec![gone])));
        assert!(t.gfids.contains(&file) && !t.unknown);
        t.add(Touch::of(&unlink, true), &Ok(Reply::Ok));
        assert!(t.unknown, "a removal that did not say what it removed");
        let mut failed = Touched::default();
        failed.add(
            Touch::of(&unlink, true),
            &Err(mortar_core::FsError::errno(libc::ENOENT)),
        );
        assert!(!failed.unknown, "a failed removal removed nothing");
        assert_eq!(failed.len(), 2);
    }
}
