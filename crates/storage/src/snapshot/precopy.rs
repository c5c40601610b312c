//! A reflink copy made ahead, while changes go on, then brought up to
//! date behind the barrier: only what changed meanwhile is copied again,
//! so changes wait for what they changed, not for the whole brick.
//!
//! `precopy` walks the brick as `take` does, but an entry that goes or
//! changes under it is skipped or copied as it is found. Whoever changes
//! the brick meanwhile (`brick::barrier`) notes what it changed, from
//! before the walk begins to the barrier: `Precopy::finish` then makes,
//! behind the barrier, each directory noted (`Changed::dirs`) hold the
//! brick's names (names gone removed, names new or now another object
//! copied) and metadata, and each object noted (`Changed::objects`, by
//! its handle) the brick's data and metadata. What was not noted has not
//! changed since before the walk saw it, so the copy is then the brick
//! at the barrier, as `take` would have made it.

use super::*;
use std::collections::BTreeSet;

/// What changed on a brick while a precopy was made, relative to the
/// brick: names made, removed or moved (`entries`), objects (a handle or
/// side file of theirs) whose data or metadata changed, directories whose
/// metadata changed (`metas`), and directories to look over whole, whose
/// changed names are not known (`dirs`).
#[derive(Debug, Default)]
pub struct Changed {
    pub entries: BTreeSet<PathBuf>,
    pub objects: BTreeSet<PathBuf>,
    pub metas: BTreeSet<PathBuf>,
    pub dirs: BTreeSet<PathBuf>,
}

/// A reflink copy of a brick made ahead, at `.mortar/snaps/.NAME.partial`.
pub struct Precopy {
    name: String,
    partial: String,
    root: OwnedFd,
    snaps: OwnedFd,
    copy: Copy,
}

/// Makes a reflink copy of the brick at `brick` while it changes, for
/// snapshot `name` (its mechanism must be `Reflink`).
pub fn precopy(brick: &Path, name: &str) -> io::Result<Precopy> {
    let (root, snaps) = open_for_new(brick, name)?;
    let partial = format!(".{name}.partial");
    let _ = remove_tree(&snaps, &partial);
    rfs::mkdirat(&snaps, partial.as_str(), Mode::from_raw_mode(0o700))?;
    let dst = open_dir(&snaps, partial.as_str())?;
    let mut copy = Copy::new(open_dir(&snaps, partial.as_str())?);
    copy.tolerant = true;
    let made = copy.dir(&root, &dst, &mut PathBuf::new());
    if let Err(e) = made {
        let _ = remove_tree(&snaps, &partial);
        return Err(e);
    }
    Ok(Precopy {
        name: name.to_string(),
        partial,
        root,
        snaps,
        copy,
    })
}

impl Precopy {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Brings the copy up to date with what `changed` names (the brick
    /// no longer changing) and makes it snapshot `name`; answers where.
    pub fn finish(mut self, changed: &Changed) -> io::Result<PathBuf> {
        let done = self.bring_up_to_date(changed);
        if let Err(e) = done {
            let _ = remove_tree(&self.snaps, &self.partial);
            return Err(e);
        }
        rfs::renameat(
            &self.snaps,
            self.partial.as_str(),
            &self.snaps,
            self.name.as_str(),
        )?;
        Ok(PathBuf::from(SNAPS_REL).join(&self.name))
    }

    /// Brings the copy up to date with what `changed` names while the
    /// brick still changes: what changes meanwhile is noted again, and
    /// `finish` has less to do behind the barrier.
    pub fn catch_up(&mut self, changed: &Changed) -> io::Result<()> {
        self.bring_up_to_date(changed)
    }

    fn bring_up_to_date(&mut self, changed: &Changed) -> io::Result<()> {
        // (The brick's own heal index still changes behind the barrier:
        // an entry that goes while it is looked at is taken as gone.)
        self.copy.tolerant = true;
        self.copy.exact = true;
        // What the brick keeps of its own, always (its heal index is
        // changed beside the requests); parents before children.
        let mut dirs: Vec<&Path> = vec![Path::new(crate::posix::META_DIR)];
        let pending = Path::new(crate::posix::PENDING_REL);
        dirs.push(pending);
        dirs.extend(changed.dirs.iter().map(PathBuf::as_path));
        dirs.sort_by_key(|d| d.components().count());
        dirs.dedup();
        for d in dirs {
            skip_gone(self.copy.resync_dir(&self.root, d))?;
        }
        let mut entries: Vec<&PathBuf> = changed.entries.iter().collect();
        entries.sort_by_key(|e| e.components().count());
        for e in entries {
            skip_gone(self.copy.resync_object(&self.root, e, false))?;
        }
        for d in &changed.metas {
            skip_gone(self.copy.resync_meta(&self.root, d))?;
        }
        let marked = names_of(&open_rel(&self.root, pending)?)?;
        let objects = changed
            .objects
            .iter()
            .cloned()
            .chain(marked.into_iter().map(|n| pending.join(n)));
        for rel in objects {
            skip_gone(self.copy.resync_object(&self.root, &rel, true))?;
        }
        Ok(())
    }

    /// Removes the copy: the snapshot is not taken.
    pub fn abandon(self) {
        let _ = remove_tree(&self.snaps, &self.partial);
    }
}

/// `r`, an object that went while it was looked at taken as gone.
fn skip_gone(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if gone(&e) => Ok(()),
        other => other,
    }
}

/// Opens directory `rel` beneath `root`, following no symlink.
fn open_rel(root: &OwnedFd, rel: &Path) -> io::Result<OwnedFd> {
    let mut dir = open_dir(root, ".")?;
    for c in rel.components() {
        dir = open_dir(&dir, c.as_os_str())?;
    }
    Ok(dir)
}

fn names_of(dir: &OwnedFd) -> io::Result<BTreeSet<std::ffi::OsString>> {
    let mut out = BTreeSet::new();
    for e in rfs::Dir::read_from(dir)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.insert(OsStr::from_bytes(n).to_os_string());
        }
    }
    Ok(out)
}

/// Whether an error says the object went or is not what was looked for
/// (it changed under the walk).
pub(super) fn gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ELOOP)
    )
}

fn gfid_of(dir: &OwnedFd, name: &OsStr) -> Option<Vec<u8>> {
    let mut v = [0u8; 16];
    let n = rfs::lgetxattr(in_dir(dir, name), crate::posix::GFID_XATTR, &mut v).ok()?;
    Some(v[..n].to_vec())
}

/// Whether `name` in `src` and in `dst` are the same object: the same
/// type and gfid (objects of the volume), target (symlinks), or size and
/// modification time (the brick's own files).
fn same_object(src: &OwnedFd, dst: &OwnedFd, name: &OsStr) -> io::Result<bool> {
    let (a, b) = (
        rfs::statat(src, name, AtFlags::SYMLINK_NOFOLLOW)?,
        rfs::statat(dst, name, AtFlags::SYMLINK_NOFOLLOW)?,
    );
    let kind = rfs::FileType::from_raw_mode(a.st_mode);
    if kind != rfs::FileType::from_raw_mode(b.st_mode) {
        return Ok(false);
    }
    let (ga, gb) = (gfid_of(src, name), gfid_of(dst, name));
    Ok(match kind {
        rfs::FileType::Symlink => {
            ga == gb
                && rfs::readlinkat(src, name, Vec::new())?
                    == rfs::readlinkat(dst, name, Vec::new())?
        }
        rfs::FileType::RegularFile if ga.is_none() && gb.is_none() => {
            (a.st_size, a.st_mtime, a.st_mtime_nsec) == (b.st_size, b.st_mtime, b.st_mtime_nsec)
        }
        _ => ga == gb,
    })
}

impl Copy {
    /// Makes directory `rel` of the copy hold the brick's names and
    /// metadata (gone from the brick: its parent's turn removes it).
    fn resync_dir(&mut self, root: &OwnedFd, rel: &Path) -> io::Result<()> {
        let (src, dst) = match (open_rel(root, rel), open_rel(&self.dst_root, rel)) {
            (Ok(s), Ok(d)) => (s, d),
            (Err(e), _) | (_, Err(e)) if gone(&e) => return Ok(()),
            (Err(e), _) | (_, Err(e)) => return Err(e),
        };
        let (theirs, ours) = (names_of(&src)?, names_of(&dst)?);
        // (In what the brick keeps by gfid, a name is its object.)
        let keyed =
            rel.starts_with(crate::posix::META_DIR) && rel != Path::new(crate::posix::META_DIR);
        for n in &ours {
            let differs = || match same_object(&src, &dst, n) {
                Ok(same) => Ok(!same),
                Err(e) if gone(&e) => Ok(true),
                Err(e) => Err(e),
            };
            if !theirs.contains(n) || (!keyed && differs()?) {
                skip_gone(remove_entry(&dst, n))?;
            }
        }
        let ours = names_of(&dst)?;
        for n in theirs.iter().filter(|n| !ours.contains(*n)) {
            let mut path = rel.join(n);
            if path.as_os_str() != OsStr::new(SNAPS_REL) {
                skip_gone(self.entry(&src, &dst, n, &mut path))?;
            }
        }
        self.meta(&src, &dst)
    }

    /// Gives directory `rel` of the copy the brick's metadata.
    fn resync_meta(&mut self, root: &OwnedFd, rel: &Path) -> io::Result<()> {
        match (open_rel(root, rel), open_rel(&self.dst_root, rel)) {
            (Ok(s), Ok(d)) => self.meta(&s, &d),
            (Err(e), _) | (_, Err(e)) if gone(&e) => Ok(()),
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    }

    /// Makes name `rel` of the copy what it is on the brick: there or
    /// not, the same object (copied whole when it is another), and with
    /// `data`, for a regular file, the same data and metadata.
    fn resync_object(&mut self, root: &OwnedFd, rel: &Path, data: bool) -> io::Result<()> {
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            return Ok(());
        };
        let (sdir, ddir) = match (open_rel(root, parent), open_rel(&self.dst_root, parent)) {
            (Ok(s), Ok(d)) => (s, d),
            (Err(e), _) if gone(&e) => return Ok(()),
            // (A directory of handles the copy lacks yet: made.)
            (Ok(_), Err(e)) if gone(&e) => {
                return self.resync_dir(root, parent.parent().unwrap_or(Path::new("")));
            }
            (Err(e), _) | (_, Err(e)) => return Err(e),
        };
        let theirs = rfs::statat(&sdir, name, AtFlags::SYMLINK_NOFOLLOW);
        let ours = rfs::statat(&ddir, name, AtFlags::SYMLINK_NOFOLLOW);
        match (theirs, ours) {
            (Err(rustix::io::Errno::NOENT), Ok(_)) => return remove_entry(&ddir, name),
            (Err(_), _) => return Ok(()),
            (Ok(_), Err(_)) => return self.entry(&sdir, &ddir, name, &mut rel.to_path_buf()),
            (Ok(st), Ok(_)) => {
                if !same_object(&sdir, &ddir, name)? {
                    remove_entry(&ddir, name)?;
                    return self.entry(&sdir, &ddir, name, &mut rel.to_path_buf());
                }
                if !data || rfs::FileType::from_raw_mode(st.st_mode) != rfs::FileType::RegularFile {
                    return Ok(());
                }
            }
        }
        let flags = OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let s = rfs::openat(&sdir, name, OFlags::RDONLY | flags, Mode::empty())?;
        let d = rfs::openat(&ddir, name, OFlags::WRONLY | flags, Mode::empty())?;
        rfs::ftruncate(&d, 0)?;
        rfs::ioctl_ficlone(&d, &s)?;
        self.meta(&s, &d)
    }
}

/// Removes `name` from `dir`, a directory with all it holds.
fn remove_entry(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let st = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Directory {
        let sub = open_dir(dir, name)?;
        empty_dir(&sub)?;
        return Ok(rfs::unlinkat(dir, name, AtFlags::REMOVEDIR)?);
    }
    Ok(rfs::unlinkat(dir, name, AtFlags::empty())?)
}
