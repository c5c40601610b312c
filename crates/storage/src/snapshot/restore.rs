//! A brick brought back to one of its snapshots (`snapshot restore`,
//! the volume stopped): what it holds is replaced by a copy of the
//! snapshot, its snapshots kept.
//!
//! In steps that a crash at any point leaves resumable, never half done
//! and served:
//! 1. a reflink copy of the snapshot is made at `.mortar/snaps/.restoring`
//!    (a crash here leaves only that, removed by the next attempt);
//! 2. `RESTORE_MARKER` is written: from here on the brick is not served
//!    (`unfinished`) until a restore completes;
//! 3. everything the brick holds but its snapshots moves to
//!    `.mortar/snaps/.replaced`, then the marker says so;
//! 4. everything of the copy moves into the brick;
//! 5. the marker, the copy's empty directory and what was replaced go.
//!
//! A restore asked again after a crash resumes at the step the marker
//! names.

use super::*;

/// Under `META_DIR`: names the snapshot a restore is bringing the brick
/// back to, and its step ("out" or "in").
const RESTORE_MARKER: &str = "restoring";
const COPY: &str = ".restoring";
const REPLACED: &str = ".replaced";

/// The snapshot an unfinished restore of the brick at `brick` was
/// bringing it back to, if any: such a brick is not to be served.
pub fn unfinished(brick: &Path) -> Option<String> {
    let marker = brick.join(crate::posix::META_DIR).join(RESTORE_MARKER);
    let text = std::fs::read_to_string(marker).ok()?;
    Some(
        text.split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string(),
    )
}

fn mark(meta: &OwnedFd, name: &str, step: &str) -> io::Result<()> {
    let tmp = format!("{RESTORE_MARKER}.tmp");
    let f = rfs::openat(
        meta,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    rustix::io::write(&f, format!("{name} {step}\n").as_bytes())?;
    rfs::fsync(&f)?;
    rfs::renameat(meta, tmp.as_str(), meta, RESTORE_MARKER)?;
    Ok(rfs::fsync(meta)?)
}

/// Brings the brick at `brick` back to its snapshot `name`, or finishes
/// a restore to it that a crash interrupted.
pub fn restore(brick: &Path, name: &str) -> io::Result<()> {
    if !valid_name(name) {
        return Err(bad_name(name));
    }
    let root = open_dir(rfs::CWD, brick)?;
    let meta = open_dir(&root, crate::posix::META_DIR)?;
    let snaps = snaps_dir(&root)?;
    let step = match unfinished(brick) {
        Some(other) if other != name => {
            return Err(io::Error::other(format!(
                "{}: a restore to snapshot {other} is unfinished: restore {other} first",
                brick.display()
            )))
        }
        Some(_) => {
            std::fs::read_to_string(brick.join(crate::posix::META_DIR).join(RESTORE_MARKER))?
                .split_whitespace()
                .nth(1)
                .unwrap_or("out")
                .to_string()
        }
        None => {
            let source = open_dir(&snaps, name)?;
            let _ = remove_tree(&snaps, COPY);
            let _ = remove_tree(&snaps, REPLACED);
            reflink_tree(&source, &snaps, COPY)?;
            mark(&meta, name, "out")?;
            "out".to_string()
        }
    };
    let copy = open_dir(&snaps, COPY)?;
    if step == "out" {
        match rfs::mkdirat(&snaps, REPLACED, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let replaced = open_dir(&snaps, REPLACED)?;
        move_all(&root, &replaced, true)?;
        match rfs::mkdirat(
            &replaced,
            crate::posix::META_DIR,
            Mode::from_raw_mode(0o700),
        ) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let replaced_meta = open_dir(&replaced, crate::posix::META_DIR)?;
        move_meta(&meta, &replaced_meta)?;
        mark(&meta, name, "in")?;
    }
    move_all(&copy, &root, true)?;
    let copy_meta = open_dir(&copy, crate::posix::META_DIR)?;
    move_meta(&copy_meta, &meta)?;
    // The root's own xattrs and mode are the snapshot's.
    Copy::new(open_dir(&copy, ".")?).meta(&copy, &root)?;
    rfs::fsync(&root)?;
    rfs::unlinkat(&meta, RESTORE_MARKER, AtFlags::empty())?;
    remove_tree(&snaps, COPY)?;
    remove_tree(&snaps, REPLACED)
}

/// Moves every entry of `from` into `to` (the brick's own `META_DIR`
/// left where it is when `skip_meta`).
fn move_all(from: &OwnedFd, to: &OwnedFd, skip_meta: bool) -> io::Result<()> {
    for e in rfs::Dir::read_from(from)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n == b"." || n == b".." || (skip_meta && n == crate::posix::META_DIR.as_bytes()) {
            continue;
        }
        let name = OsStr::from_bytes(n);
        rfs::renameat(from, name, to, name)?;
    }
    Ok(())
}

/// Moves what `META_DIR` holds but the snapshots and the restore's
/// marker.
fn move_meta(from: &OwnedFd, to: &OwnedFd) -> io::Result<()> {
    for e in rfs::Dir::read_from(from)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        let keep: [&[u8]; 4] = [b".", b"..", b"snaps", RESTORE_MARKER.as_bytes()];
        if keep.contains(&n) || n.starts_with(format!("{RESTORE_MARKER}.").as_bytes()) {
            continue;
        }
        let name = OsStr::from_bytes(n);
        rfs::renameat(from, name, to, name)?;
    }
    Ok(())
}
