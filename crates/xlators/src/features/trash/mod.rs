//! `features/trash`: while `features.trash` is on, a file removed through
//! a mount, or cut short by a truncation, is kept in the volume's
//! `.trashcan` at the path it had, its name followed by the time it went
//! (`.trashcan/DIR/NAME_2026-12-08-011500`, UTC, as GlusterFS names
//! them). Its owner finds it there and moves or copies it back.
//!
//! **On the client, above the caches.** A removal becomes a rename into
//! the trash sent down the same stack, so every copy of a replicated or
//! dispersed file goes to the same name in the same step, and the caches
//! below see a rename. (GlusterFS's trash runs on each brick: its copies
//! of one file are named by each brick's own clock.)
//!
//! **What is kept.** Regular files with one name (removing one of several
//! names loses no data), of at most `features.trash-max-filesize`, removed
//! or truncated by users (not by mortar's own work: self-heal, rebalance).
//! A removal inside the trash removes for good; the trash directory itself
//! cannot be removed or renamed (EPERM). Its directories are made by root
//! with mode 1777, so that anyone can put files there and only a file's
//! owner can take them out. A truncation keeps a copy of the whole file
//! first (of a file whose name the mount does not know, under its gfid at
//! the trash's top).

mod names;
pub mod sweep;

use async_trait::async_trait;
use mortar_core::options::{Kind, Spec};
use mortar_core::{Child, Ctx, Fop, FsError, FsResult, Gfid, Name, Reply, SetAttr, Xlator};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub static TRASH: Spec = Spec {
    key: "features.trash",
    kind: Kind::Bool,
    default: "off",
    help: "Keeps files removed or truncated through the volume's mounts in /.trashcan, at the path they had, named NAME_YYYY-MM-DD-HHMMSS (UTC). A removal inside /.trashcan removes for good.",
};

pub static MAX_FILESIZE: Spec = Spec {
    key: "features.trash-max-filesize",
    kind: Kind::Size,
    default: "5MB",
    help: "Files larger than this are removed for good instead of kept in the trash (and truncated without a copy).",
};

pub static ELIMINATE_PATH: Spec = Spec {
    key: "features.trash-eliminate-path",
    kind: Kind::Text,
    default: "none",
    help: "Directories whose files are removed for good, not kept in the trash: paths from the volume's root, comma-separated (/scratch,/build/tmp), each with everything below it; none for no such directory.",
};

/// The paths of `features.trash-eliminate-path`, as names from the root.
fn eliminate_paths(v: &str) -> Vec<Vec<Name>> {
    if v.trim() == "none" {
        return Vec::new();
    }
    v.split(',')
        .map(|p| {
            p.trim()
                .split('/')
                .filter(|c| !c.is_empty() && *c != ".")
                .filter_map(|c| Name::new(c).ok())
                .collect::<Vec<Name>>()
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// The trash directory, at the volume's root.
pub const TRASH_DIR: &str = ".trashcan";

/// Mode of the trash's directories: anyone may put files in, only a
/// file's owner may take it out.
const DIR_MODE: u32 = libc::S_IFDIR | 0o1777;

/// Tries at a free name in the trash for one file.
const NAME_TRIES: u32 = 64;

pub struct Trash {
    name: String,
    child: Child,
    on: AtomicBool,
    max_filesize: AtomicU64,
    names: names::Names,
    /// The trash directory found for each directory files left (None:
    /// the directory is in the trash).
    found: std::sync::Mutex<std::collections::HashMap<Option<Gfid>, Option<Gfid>>>,
    /// `features.trash-eliminate-path`.
    eliminate: std::sync::Mutex<Vec<Vec<Name>>>,
    kept: AtomicU64,
}

/// Trash directories remembered at most (past that, all are forgotten).
const FOUND_MAX: usize = 4096;

impl Trash {
    pub fn new(name: String, child: Child) -> Trash {
        Trash {
            name,
            child,
            on: AtomicBool::new(false),
            max_filesize: AtomicU64::new(MAX_FILESIZE.size(&Default::default())),
            names: Default::default(),
            found: Default::default(),
            eliminate: Default::default(),
            kept: AtomicU64::new(0),
        }
    }

    fn trash_name() -> Name {
        Name::new(TRASH_DIR).expect("a valid name")
    }

    /// Whether `name` in `parent` is the trash directory itself.
    fn is_trash_dir(parent: Gfid, name: &Name) -> bool {
        parent == Gfid::ROOT && name.as_bytes() == TRASH_DIR.as_bytes()
    }

    /// Root's context for the trash's own directories (as a user: no
    /// privilege a brick gives the pool's servers).
    fn as_root(cx: &Ctx) -> Ctx {
        Ctx {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
            internal: false,
            ..cx.clone()
        }
    }

    /// Whether a file of `attr` is kept when it goes.
    fn keeps(&self, attr: &mortar_core::Attr) -> bool {
        attr.kind == mortar_core::FileKind::File
            && attr.nlink <= 1
            && attr.size <= self.max_filesize.load(Ordering::Relaxed)
    }

    /// The trash directory for files of `dir` (made as needed), or None
    /// when `dir` is inside the trash. As found before, unless `fresh`
    /// (what was found may have been swept away since).
    async fn trash_dir_for(
        &self,
        cx: &Ctx,
        dir: Option<Gfid>,
        fresh: bool,
    ) -> FsResult<Option<Gfid>> {
        if !fresh {
            if let Some(to) = self.found.lock().unwrap().get(&dir) {
                return Ok(*to);
            }
        }
        let to = self.trash_dir_made(cx, dir).await?;
        let mut found = self.found.lock().unwrap();
        if found.len() >= FOUND_MAX {
            found.clear();
        }
        found.insert(dir, to);
        Ok(to)
    }

    async fn trash_dir_made(&self, cx: &Ctx, dir: Option<Gfid>) -> FsResult<Option<Gfid>> {
        let path = match dir {
            Some(d) => self.names.path(cx, &self.child, d).await?,
            None => Vec::new(),
        };
        if path
            .first()
            .is_some_and(|n| n.as_bytes() == TRASH_DIR.as_bytes())
            || self.eliminated(&path)
        {
            return Ok(None);
        }
        let root = Self::as_root(cx);
        let mut at = Gfid::ROOT;
        for name in std::iter::once(Self::trash_name()).chain(path) {
            at = self.dir_in(&root, at, name).await?;
        }
        Ok(Some(at))
    }

    /// Whether files of the directory at `path` are removed for good
    /// (`features.trash-eliminate-path`: it is one of those or below one).
    fn eliminated(&self, path: &[Name]) -> bool {
        self.eliminate.lock().unwrap().iter().any(|e| {
            e.len() <= path.len()
                && e.iter()
                    .zip(path)
                    .all(|(a, b)| a.as_bytes() == b.as_bytes())
        })
    }

    /// Directory `name` in `parent`, made if missing.
    async fn dir_in(&self, cx: &Ctx, parent: Gfid, name: Name) -> FsResult<Gfid> {
        loop {
            let look = Fop::Lookup {
                parent,
                name: name.clone(),
            };
            match self.child.call(cx, look).await {
                Ok(Reply::Entry(e)) if e.attr.kind == mortar_core::FileKind::Dir => {
                    return Ok(e.attr.gfid)
                }
                Ok(Reply::Entry(_)) => {
                    return Err(FsError::new(
                        libc::ENOTDIR,
                        format!("{}: {name:?} in the trash is not a directory", self.name),
                    ))
                }
                Ok(other) => return Err(mortar_core::fop::unexpected(other)),
                Err(e) if e.is(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
            let mk = Fop::Mkdir {
                parent,
                name: name.clone(),
                gfid: Gfid::random(),
                mode: DIR_MODE,
                umask: 0,
            };
            match self.child.call(cx, mk).await {
                Ok(r) => {
                    let e = r.into_entry()?;
                    self.tell_kernel(parent, name);
                    // (mkdir's mode is cut by the umask on some stacks:
                    // the sticky bit is set again.)
                    let set = SetAttr {
                        mode: Some(DIR_MODE),
                        ..Default::default()
                    };
                    let gfid = e.attr.gfid;
                    self.child.call(cx, Fop::Setattr { gfid, set }).await?;
                    return Ok(gfid);
                }
                // Another mount made it meanwhile.
                Err(e) if e.is(libc::EEXIST) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// A name in the trash for `name` removed now: `NAME_TIME`, then
    /// `NAME_TIME_2` and so on if taken (try `n`).
    fn kept_name(name: &Name, at: std::time::SystemTime, n: u32) -> FsResult<Name> {
        let t = humantime::format_rfc3339_seconds(at).to_string();
        // 2026-12-08T01:15:00Z -> 2026-12-08-011500
        let stamp = t.trim_end_matches('Z').replace('T', "-").replace(':', "");
        let suffix = match n {
            0 => format!("_{stamp}"),
            n => format!("_{stamp}_{}", n + 1),
        };
        let keep = 255usize.saturating_sub(suffix.len());
        let mut b = name.as_bytes()[..name.as_bytes().len().min(keep)].to_vec();
        b.extend_from_slice(suffix.as_bytes());
        Name::new(b)
    }

    /// Moves `name` of `parent` into the trash as the user. Answers None
    /// when it was not kept (and must be removed for good).
    async fn keep_removed(&self, cx: &Ctx, parent: Gfid, name: &Name) -> FsResult<Option<Reply>> {
        let look = Fop::Lookup {
            parent,
            name: name.clone(),
        };
        let attr = self.child.call(cx, look).await?.into_entry()?.attr;
        if !self.keeps(&attr) {
            return Ok(None);
        }
        for fresh in [false, true] {
            match self.move_to_trash(cx, parent, name, fresh).await {
                // (The trash directory found before was swept away.)
                Err(e) if !fresh && (e.is(libc::ENOENT) || e.is(libc::ESTALE)) => continue,
                r => return r,
            }
        }
        unreachable!("the second try answers")
    }

    async fn move_to_trash(
        &self,
        cx: &Ctx,
        parent: Gfid,
        name: &Name,
        fresh: bool,
    ) -> FsResult<Option<Reply>> {
        let Some(to) = self.trash_dir_for(cx, Some(parent), fresh).await? else {
            return Ok(None);
        };
        let now = std::time::SystemTime::now();
        for n in 0..NAME_TRIES {
            let newname = Self::kept_name(name, now, n)?;
            let fop = Fop::Rename {
                parent,
                name: name.clone(),
                newparent: to,
                newname: newname.clone(),
                flags: libc::RENAME_NOREPLACE,
            };
            match self.child.call(cx, fop).await {
                Err(e) if e.is(libc::EEXIST) => continue,
                Ok(_) => {
                    self.tell_kernel(to, newname);
                    self.kept.fetch_add(1, Ordering::Relaxed);
                    // A rename's answer tells of the directories; an
                    // unlink's caller wants none of it.
                    return Ok(Some(Reply::Ok));
                }
                Err(e) => return Err(e),
            }
        }
        Err(FsError::new(
            libc::EEXIST,
            format!("{}: no free name in the trash for {name:?}", self.name),
        ))
    }

    /// Copies file `gfid` (of `attr`) into the trash before it is cut
    /// short.
    async fn keep_copy(&self, cx: &Ctx, attr: &mortar_core::Attr) -> FsResult<()> {
        let gfid = attr.gfid;
        let (dir, name) = match self.names.of(gfid) {
            Some((p, n)) => (Some(p), n),
            None => (None, Name::new(gfid.to_string())?),
        };
        let Some(to) = self.trash_dir_for(cx, dir, true).await? else {
            return Ok(());
        };
        let root = Self::as_root(cx);
        let now = std::time::SystemTime::now();
        let mut made = None;
        for n in 0..NAME_TRIES {
            let kept = Self::kept_name(&name, now, n)?;
            let create = Fop::Create {
                parent: to,
                name: kept.clone(),
                gfid: Gfid::random(),
                mode: libc::S_IFREG | 0o600,
                umask: 0,
                flags: libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            };
            match self.child.call(&root, create).await {
                Err(e) if e.is(libc::EEXIST) => continue,
                Ok(Reply::Created { entry, fh }) => {
                    self.tell_kernel(to, kept.clone());
                    made = Some((entry.attr.gfid, fh, kept));
                    break;
                }
                Ok(other) => return Err(mortar_core::fop::unexpected(other)),
                Err(e) => return Err(e),
            }
        }
        let Some((copy, wfh, kept)) = made else {
            return Err(FsError::new(
                libc::EEXIST,
                format!("{}: no free name in the trash for {name:?}", self.name),
            ));
        };
        let copied = self.copy_data(&root, gfid, copy, wfh, attr.size).await;
        let _ = self
            .child
            .call(
                &root,
                Fop::Release {
                    gfid: copy,
                    fh: wfh,
                },
            )
            .await;
        if let Err(e) = copied {
            let _ = self
                .child
                .call(
                    &root,
                    Fop::Unlink {
                        parent: to,
                        name: kept,
                    },
                )
                .await;
            return Err(e);
        }
        let set = SetAttr {
            mode: Some(attr.perm),
            uid: Some(attr.uid),
            gid: Some(attr.gid),
            ..Default::default()
        };
        self.child
            .call(&root, Fop::Setattr { gfid: copy, set })
            .await?;
        self.kept.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn copy_data(&self, cx: &Ctx, from: Gfid, to: Gfid, wfh: u64, size: u64) -> FsResult<()> {
        const CHUNK: u32 = 1 << 20;
        let open = Fop::Open {
            gfid: from,
            flags: libc::O_RDONLY,
        };
        let rfh = match self.child.call(cx, open).await? {
            Reply::Opened { fh } => fh,
            other => return Err(mortar_core::fop::unexpected(other)),
        };
        let mut offset = 0;
        let res = async {
            while offset < size {
                let read = Fop::Read {
                    gfid: from,
                    fh: rfh,
                    offset,
                    size: CHUNK,
                };
                let data = match self.child.call(cx, read).await? {
                    Reply::Data(d) => d,
                    other => return Err(mortar_core::fop::unexpected(other)),
                };
                if data.is_empty() {
                    break;
                }
                let len = data.len() as u64;
                let write = Fop::Write {
                    gfid: to,
                    fh: wfh,
                    offset,
                    data,
                    grow: 0,
                    reserve: false,
                };
                self.child.call(cx, write).await?;
                offset += len;
            }
            let sync = Fop::Fsync {
                gfid: to,
                fh: wfh,
                datasync: false,
            };
            self.child.call(cx, sync).await.map(|_| ())
        }
        .await;
        let _ = self
            .child
            .call(
                cx,
                Fop::Release {
                    gfid: from,
                    fh: rfh,
                },
            )
            .await;
        res
    }

    /// Keeps a copy of file `gfid` if a truncation to `to` bytes would
    /// lose some of it.
    async fn before_truncation(&self, cx: &Ctx, gfid: Gfid, to: u64) -> FsResult<()> {
        let attr = match self.child.call(cx, Fop::Getattr { gfid }).await? {
            Reply::Attr(a) => a,
            other => return Err(mortar_core::fop::unexpected(other)),
        };
        if attr.size <= to || attr.kind != mortar_core::FileKind::File {
            return Ok(());
        }
        if attr.size > self.max_filesize.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.keep_copy(cx, &attr).await
    }

    /// The kernel did not ask for the name made in `dir`: its listing of
    /// `dir` (and what it believes of the name) is dropped, as for another
    /// client's change.
    fn tell_kernel(&self, dir: Gfid, name: Name) {
        self.child.link.emit(mortar_core::Event::Recall {
            gfid: dir,
            name: Some(name),
            claim: false,
            ack: mortar_core::xlator::Ack::none(),
        });
    }

    /// A file could not be kept (a full disk, a trash directory that is
    /// not one): it is removed all the same, as without the trash, so
    /// that a full volume can still be emptied.
    fn not_kept(&self, parent: Gfid, name: &Name, e: &FsError) {
        if !e.is(libc::ENOENT) && !e.is(libc::EACCES) && !e.is(libc::EPERM) {
            tracing::warn!(xlator = %self.name, %parent, ?name, "not kept in the trash, removed: {e}");
        }
    }

    fn not_copied(&self, gfid: Gfid, e: &FsError) {
        tracing::warn!(xlator = %self.name, %gfid, "no copy kept in the trash before a truncation: {e}");
    }

    fn refused(&self, what: &str) -> FsError {
        FsError::new(
            libc::EPERM,
            format!(
                "{}: the trash directory /{TRASH_DIR} cannot be {what} (features.trash)",
                self.name
            ),
        )
    }

    async fn passed_on(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        if let Fop::Rename { .. } | Fop::Rmdir { .. } = &fop {
            // A directory's path may change: its trash directory too.
            self.found.lock().unwrap().clear();
        }
        let reply = self.child.call(cx, fop.clone()).await?;
        self.names.note(&fop, &reply);
        Ok(reply)
    }
}

#[async_trait]
impl Xlator for Trash {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn reconfigure(&self, options: &mortar_core::Options) {
        self.on.store(TRASH.bool(options), Ordering::Relaxed);
        self.max_filesize
            .store(MAX_FILESIZE.size(options), Ordering::Relaxed);
        let eliminate = eliminate_paths(ELIMINATE_PATH.str(options));
        let mut e = self.eliminate.lock().unwrap();
        if *e != eliminate {
            *e = eliminate;
            self.found.lock().unwrap().clear();
        }
    }

    fn cached(&self, cx: &Ctx, fop: &Fop) -> Option<FsResult<Reply>> {
        self.child.xl.cached(cx, fop)
    }

    fn forget(&self, gfid: Gfid) {
        self.names.forget(gfid);
    }

    fn dump(&self) -> Vec<String> {
        vec![format!(
            "files kept in the trash {}",
            self.kept.load(Ordering::Relaxed)
        )]
    }

    async fn call(&self, cx: &Ctx, fop: Fop) -> FsResult<Reply> {
        if !self.on.load(Ordering::Relaxed) || cx.internal {
            return self.passed_on(cx, fop).await;
        }
        match &fop {
            Fop::Unlink { parent, name } => {
                match self.keep_removed(cx, *parent, name).await {
                    Ok(Some(r)) => return Ok(r),
                    Ok(None) => {}
                    // (The removal itself says what it thinks.)
                    Err(e) => self.not_kept(*parent, name, &e),
                }
            }
            Fop::Rmdir { parent, name } if Self::is_trash_dir(*parent, name) => {
                return Err(self.refused("removed"))
            }
            Fop::Rename { parent, name, .. } if Self::is_trash_dir(*parent, name) => {
                return Err(self.refused("renamed"))
            }
            Fop::Setattr {
                gfid,
                set: SetAttr { size: Some(to), .. },
            } => {
                if let Err(e) = self.before_truncation(cx, *gfid, *to).await {
                    self.not_copied(*gfid, &e);
                }
            }
            Fop::Open { gfid, flags }
                if flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE != libc::O_RDONLY =>
            {
                if let Err(e) = self.before_truncation(cx, *gfid, 0).await {
                    self.not_copied(*gfid, &e);
                }
            }
            _ => {}
        }
        self.passed_on(cx, fop).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_names_carry_the_time_and_fit() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_692_500);
        let n = Name::new("report.txt").unwrap();
        let k = Trash::kept_name(&n, at, 0).unwrap();
        assert_eq!(k.as_bytes(), b"report.txt_2026-12-08-011500");
        let k = Trash::kept_name(&n, at, 1).unwrap();
        assert_eq!(k.as_bytes(), b"report.txt_2026-12-08-011500_2");
        let long = Name::new(vec![b'a'; 255]).unwrap();
        let k = Trash::kept_name(&long, at, 3).unwrap();
        assert_eq!(k.as_bytes().len(), 255);
        assert!(k.as_bytes().ends_with(b"_2026-12-08-011500_4"));
    }

    #[test]
    fn eliminated_paths_are_read_from_the_root() {
        let p = |s: &str| -> Vec<Vec<u8>> {
            eliminate_paths(s)
                .into_iter()
                .map(|v| {
                    v.iter()
                        .flat_map(|n| [n.as_bytes(), b"/"].concat())
                        .collect()
                })
                .collect()
        };
        assert!(p("none").is_empty());
        assert_eq!(
            p("/scratch,build/tmp/, /"),
            vec![b"scratch/".to_vec(), b"build/tmp/".to_vec()]
        );
    }

    #[test]
    fn only_the_trash_at_the_root_is_the_trash() {
        let t = Name::new(TRASH_DIR).unwrap();
        assert!(Trash::is_trash_dir(Gfid::ROOT, &t));
        assert!(!Trash::is_trash_dir(Gfid::random(), &t));
        assert!(!Trash::is_trash_dir(Gfid::ROOT, &Name::new("x").unwrap()));
    }
}
