//! Changes of names answered ahead (CephFS's asynchronous directory
//! operations; docs/caching.md). A directory this mount made is claimed by
//! it on every brick until another client names it (`brick::leases`): the
//! bricks then recall it, and wait until the changes answered here have
//! landed. While md-cache knows all of the directory's names (which is
//! exactly while that claim holds), a create, unlink or rename of a file
//! in it cannot meet anything it does not know: it is answered from
//! memory, md-cache's state follows it at once, and the request goes to
//! the bricks behind (`behind.rs` orders it and makes what depends on it
//! wait).

use super::behind::Keys;
use super::{Kept, MdCache, INHERITED};
use mortar_core::options::{Kind, Spec};
use mortar_core::xlator::Ack;
use mortar_core::{Attr, Ctx, Entry, Event, FileKind, Fop, FsResult, Gfid, Name, Reply};
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub static ASYNC_DIROPS: Spec = Spec {
    key: "performance.async-dirops",
    kind: Kind::Bool,
    default: "on",
    help: "Creates, unlinks and renames of files in a directory this mount made, while no other client has looked at it, are answered at the mount and sent to the bricks behind, in order (CephFS's asynchronous directory operations). Another client's first look at the directory waits until they have landed. A change that fails on the bricks is logged and reported by the next fsync of its directory. Needs features.cache-invalidation and performance.stat-prefetch; off while features.worm-file-level is on (a brick may refuse the change).",
};

/// An object a name leads to, and its kind.
type Found = (Gfid, FileKind);

/// An answer given ahead, what its change touches, and a name it makes.
type Planned = (Reply, Keys, Option<(Gfid, Name, Found)>);

fn now() -> (i64, u32) {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as i64, d.subsec_nanos())
}

/// `a` changed just now (its ctime, and for a directory its mtime).
fn touched(a: &Attr, t: (i64, u32), dir: bool) -> Attr {
    let mut a = a.clone();
    a.ctime = t;
    if dir {
        a.mtime = t;
    }
    a
}

impl MdCache {
    /// Whether all names of `dir` are known here (its claim holds), and
    /// whether `name` is one of them.
    fn claimed(&self, dir: Gfid, name: &[u8]) -> Option<bool> {
        let now = Instant::now();
        let s = self.shard(&dir).lock().unwrap();
        let n = s.get(&dir)?.names.as_ref().filter(|n| n.until > now)?;
        Some(n.set.contains(name))
    }

    /// The file (anything but a directory) `name` in `dir` leads to, as
    /// known here, with its attributes as they will be once `name` is
    /// removed or moved at `t`, if they are kept.
    fn file_named(&self, dir: Gfid, name: &[u8], t: (i64, u32)) -> Option<(Found, Option<Attr>)> {
        let (gfid, kind) = self.found_object(dir, name)?;
        if kind == FileKind::Dir {
            return None;
        }
        let attr = self.cached_attr(gfid).map(|a| touched(&a, t, false));
        Some(((gfid, kind), attr))
    }

    /// Keeps attributes this mount made up or changed ahead.
    fn keep_made(&self, attrs: &[Attr]) {
        let start = Instant::now();
        for a in attrs {
            let mut s = self.shard(&a.gfid).lock().unwrap();
            self.store(&mut s, a.gfid, Kept::Attr(a.clone()), start);
        }
    }

    /// The answer to `fop` given ahead of the bricks, with the request sent
    /// behind; None when it must wait for the bricks.
    pub(super) fn ahead(&self, cx: &Ctx, fop: &Fop) -> Option<FsResult<Reply>> {
        let names_change = matches!(
            fop,
            Fop::Unlink { .. } | Fop::Rename { flags: 0, .. } | Fop::Create { .. }
        );
        if !names_change || !self.ahead_on.load(Ordering::Relaxed) || self.behind.full() {
            return None;
        }
        let t = now();
        // Answering and noting happen under the notes' lock: a recall of
        // the directory that ends the claim meanwhile sees this change out.
        let noting = self.noting.lock().unwrap();
        // The answer, what the change touches, and a name it makes.
        let (reply, keys, names_now) = match fop {
            Fop::Unlink { parent, name } => self.unlink_ahead(*parent, name, t)?,
            Fop::Rename {
                parent,
                name,
                newparent,
                newname,
                flags: 0,
            } => self.rename_ahead((*parent, name), (*newparent, newname), t)?,
            Fop::Create {
                parent,
                name,
                gfid,
                mode,
                umask,
                ..
            } => {
                let dir = self.cached_attr(*parent)?;
                if self.claimed(*parent, name.as_bytes())? {
                    return None;
                }
                // What the new file inherits must be known: none of it
                // (a default ACL would set its mode instead of the umask).
                for &(from, _, dirs_only) in INHERITED {
                    if !dirs_only && self.cached_xattr(*parent, Some(from))?.is_ok() {
                        return None;
                    }
                }
                let perm = mode & !umask & 0o7777;
                if perm & libc::S_ISGID != 0 {
                    return None;
                }
                let mut a = Attr::plain_file(*gfid, 0);
                a.perm = perm;
                a.uid = cx.uid;
                a.gid = match dir.perm & libc::S_ISGID {
                    0 => cx.gid,
                    _ => dir.gid,
                };
                a.blksize = dir.blksize;
                a.blocks = 0;
                (a.atime, a.mtime, a.ctime) = (t, t, t);
                let keys = Keys {
                    dirs: vec![*parent],
                    names: vec![(*parent, name.as_bytes().to_vec())],
                    objects: vec![*gfid],
                };
                let entry = Entry {
                    attr: a,
                    parent: Some(touched(&dir, t, true)),
                };
                let made = (*parent, name.clone(), (*gfid, FileKind::File));
                (Reply::Created { entry, fh: 0 }, keys, Some(made))
            }
            _ => return None,
        };
        // md-cache's state follows the change now.
        for g in keys.dirs.iter().chain(&keys.objects) {
            self.bump(g);
        }
        self.follow_names(fop, true);
        let (id, fh, reply) = match reply {
            Reply::Created { entry, .. } => {
                let (id, fh) = self.behind.start_create(keys.clone());
                self.keep_made(std::slice::from_ref(&entry.attr));
                self.keep_made(entry.parent.as_slice());
                self.born_known(entry.attr.gfid);
                (id, Some(fh), Reply::Created { entry, fh })
            }
            Reply::Unnamed(after) => {
                let id = self.behind.start(keys.clone());
                self.keep_made(&after);
                // An object whose attributes were not kept has none made
                // up: the next stat asks the bricks (after the change lands).
                for g in keys
                    .objects
                    .iter()
                    .filter(|g| after.iter().all(|a| a.gfid != **g))
                {
                    self.drop_attr(*g);
                }
                (id, None, Reply::Unnamed(after))
            }
            _ => unreachable!("answers ahead are Created or Unnamed"),
        };
        if let Some((dir, name, found)) = names_now {
            self.keep_found(dir, &name, found, self.mark());
        }
        drop(noting);
        self.send_behind(cx, fop.clone(), id, keys, fh);
        Some(Ok(reply))
    }

    /// The answer to an unlink of `name` in `parent` given ahead, what it
    /// touches; None when it must wait for the bricks.
    fn unlink_ahead(&self, parent: Gfid, name: &Name, t: (i64, u32)) -> Option<Planned> {
        let dir = self.cached_attr(parent)?;
        if !self.claimed(parent, name.as_bytes())? {
            return None;
        }
        let ((obj, _), attr) = self.file_named(parent, name.as_bytes(), t)?;
        let mut after = vec![touched(&dir, t, true)];
        after.extend(attr.map(|mut gone| {
            gone.nlink = gone.nlink.saturating_sub(1);
            gone
        }));
        let keys = Keys {
            dirs: vec![parent],
            names: vec![(parent, name.as_bytes().to_vec())],
            objects: vec![obj],
        };
        Some((Reply::Unnamed(after), keys, None))
    }

    /// The answer to a rename given ahead, what it touches and the name it
    /// makes; None when it must wait for the bricks.
    fn rename_ahead(
        &self,
        (parent, name): (Gfid, &Name),
        (newparent, newname): (Gfid, &Name),
        t: (i64, u32),
    ) -> Option<Planned> {
        let from = self.cached_attr(parent)?;
        let to = self.cached_attr(newparent)?;
        if !self.claimed(parent, name.as_bytes())? {
            return None;
        }
        let replaces = self.claimed(newparent, newname.as_bytes())?;
        let (moved, attr) = self.file_named(parent, name.as_bytes(), t)?;
        let obj = moved.0;
        let mut after = vec![touched(&from, t, true)];
        if newparent != parent {
            after.push(touched(&to, t, true));
        }
        after.extend(attr);
        let mut objects = vec![obj];
        if replaces {
            let ((old, _), attr) = self.file_named(newparent, newname.as_bytes(), t)?;
            if old == obj {
                return None;
            }
            after.extend(attr.map(|mut gone| {
                gone.nlink = gone.nlink.saturating_sub(1);
                gone
            }));
            objects.push(old);
        }
        let keys = Keys {
            dirs: vec![parent, newparent],
            names: vec![
                (parent, name.as_bytes().to_vec()),
                (newparent, newname.as_bytes().to_vec()),
            ],
            objects,
        };
        let moved = (newparent, newname.clone(), moved);
        Some((Reply::Unnamed(after), keys, Some(moved)))
    }

    /// What a file created ahead is known to lack: file capabilities, and
    /// what it inherits from its directory, which lacks it all (`ahead`
    /// checked).
    fn born_known(&self, gfid: Gfid) {
        let start = Instant::now();
        let mut s = self.shard(&gfid).lock().unwrap();
        self.store(&mut s, gfid, Kept::missing("security.capability"), start);
        for &(_, name, dirs_only) in INHERITED {
            if !dirs_only {
                self.store(&mut s, gfid, Kept::missing(name), start);
            }
        }
    }

    /// Sends change `id`, answered ahead (with handle `fh` for a create),
    /// to the bricks once the changes ahead of it that touch the same
    /// names or objects have landed.
    fn send_behind(&self, cx: &Ctx, fop: Fop, id: u64, keys: Keys, fh: Option<u64>) {
        let Some(me) = self.me.upgrade() else {
            self.behind.land(id, None);
            return;
        };
        let cx = cx.clone();
        tokio::spawn(async move {
            me.behind.wait(id, |k| k.overlaps(&keys)).await;
            let mark = me.mark();
            let res = me.child.call(&cx, fop.clone()).await;
            // The bricks' attributes replace those made up. A directory's
            // are the truth once no other change of this mount in it is
            // out (another client's change comes after the recall, which
            // waits for this one); an object's only if nothing was changed
            // since (its writes may have followed the create already).
            let real = match &res {
                Ok(Reply::Created { entry, .. }) => {
                    let mut real = vec![entry.attr.clone()];
                    real.extend(entry.parent.iter().cloned());
                    real
                }
                Ok(Reply::Unnamed(attrs)) => attrs.clone(),
                _ => Vec::new(),
            };
            let (dirs, objects): (Vec<Attr>, Vec<Attr>) =
                real.into_iter().partition(|a| keys.dirs.contains(&a.gfid));
            // Not kept (something about the object, or another in its
            // bucket, changed since): what is kept of it may still be the
            // made-up attributes, whose times are not the bricks'. They go,
            // so that the next stat asks the bricks.
            let kept = me.keep_all_after_change(&objects, mark);
            for a in objects.iter().filter(|a| !kept.contains(&a.gfid)) {
                me.drop_attr(a.gfid);
            }
            // The directories changed on the bricks just now: an answer
            // about one, to a request sent before, is older than this.
            for d in &keys.dirs {
                me.bump(d);
            }
            let settled: Vec<Attr> = dirs
                .into_iter()
                .filter(|a| !me.behind.others_touch(id, &a.gfid))
                .collect();
            me.keep_made(&settled);
            // Only now may what waits for the file go on: what it asks
            // next is not older than what was just kept.
            if let Some(fh) = fh {
                let real = match &res {
                    Ok(Reply::Created { fh, .. }) => Ok(*fh),
                    Ok(_) => Err(mortar_core::FsError::errno(libc::EIO)),
                    Err(e) => Err(e.clone()),
                };
                me.behind.made(fh, real);
            }
            // An existing file opened instead (a name put there behind
            // the mount's back): the object answered ahead is not it.
            let stray = matches!(&res, Ok(Reply::Created { entry, .. }) if Some(entry.attr.gfid) != keys.objects.first().copied());
            let err = res.err();
            if stray {
                tracing::warn!(dir = %keys.dirs[0], "a create answered ahead found the name taken on the bricks; dropping what was believed");
            }
            if let Some(e) = &err {
                tracing::warn!(
                    op = fop.name(),
                    dir = %keys.dirs[0],
                    names = ?keys.names.iter().map(|(_, n)| String::from_utf8_lossy(n)).collect::<Vec<_>>(),
                    "a change answered ahead failed on the bricks: {e}; the directory's next fsync reports it"
                );
            }
            if err.is_some() || stray {
                // What this mount (and its kernel) believed is wrong: drop
                // it, as for another client's change.
                for (dir, name) in &keys.names {
                    if let Ok(name) = Name::new(name.clone()) {
                        me.drop_name(*dir, &name);
                        me.child.link.emit(Event::Recall {
                            gfid: *dir,
                            name: Some(name),
                            claim: false,
                            ack: Ack::none(),
                        });
                    }
                }
                for g in &keys.objects {
                    me.drop_object(*g);
                    me.child.link.emit(Event::Recall {
                        gfid: *g,
                        name: None,
                        claim: false,
                        ack: Ack::none(),
                    });
                }
            }
            me.behind.land(id, err);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use mortar_core::fop::ANON_FH;
    use mortar_core::{Child, FsError, Xlator};
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::sync::Semaphore;

    /// A volume whose creates and unlinks wait at a gate; `clash` exists
    /// already.
    /// Its files' times are `BRICK_TIME`.
    struct Gated {
        gate: Semaphore,
        creates: AtomicU64,
        unlinks: AtomicU64,
        opens: AtomicU64,
        made: std::sync::Mutex<Vec<(Vec<u8>, Gfid)>>,
    }

    const BRICK_TIME: (i64, u32) = (7, 0);

    fn brick_file(gfid: Gfid) -> Attr {
        let mut a = Attr::plain_file(gfid, 0);
        (a.atime, a.mtime, a.ctime) = (BRICK_TIME, BRICK_TIME, BRICK_TIME);
        a
    }

    #[async_trait]
    impl Xlator for Gated {
        fn name(&self) -> String {
            "gated".into()
        }
        async fn call(&self, _: &Ctx, fop: Fop) -> FsResult<Reply> {
            let dir = |g| Attr {
                kind: FileKind::Dir,
                ..Attr::plain_file(g, 4096)
            };
            match fop {
                Fop::Mkdir { gfid, .. } => Ok(Reply::Entry(Entry::found(dir(gfid)))),
                Fop::Getattr { gfid } => {
                    let made = self.made.lock().unwrap().iter().any(|(_, g)| *g == gfid);
                    Ok(Reply::Attr(if made { brick_file(gfid) } else { dir(gfid) }))
                }
                Fop::Lookup { name, .. } => {
                    let made = self.made.lock().unwrap();
                    match made.iter().find(|(n, _)| n == name.as_bytes()) {
                        Some((_, g)) => Ok(Reply::Entry(Entry::found(brick_file(*g)))),
                        None => Err(FsError::errno(libc::ENOENT)),
                    }
                }
                Fop::Getxattr { .. } => Err(FsError::errno(libc::ENODATA)),
                Fop::Create {
                    parent, name, gfid, ..
                } => {
                    self.gate.acquire().await.unwrap().forget();
                    self.creates.fetch_add(1, Ordering::SeqCst);
                    if name.as_bytes() == b"clash" {
                        return Err(FsError::errno(libc::EEXIST));
                    }
                    self.made
                        .lock()
                        .unwrap()
                        .push((name.as_bytes().to_vec(), gfid));
                    Ok(Reply::Created {
                        entry: Entry {
                            attr: brick_file(gfid),
                            parent: Some(dir(parent)),
                        },
                        fh: 5,
                    })
                }
                Fop::Unlink { .. } => {
                    self.gate.acquire().await.unwrap().forget();
                    self.unlinks.fetch_add(1, Ordering::SeqCst);
                    Ok(Reply::Ok)
                }
                Fop::Open { .. } => {
                    self.opens.fetch_add(1, Ordering::SeqCst);
                    Ok(Reply::Opened { fh: 6 })
                }
                _ => Ok(Reply::Ok),
            }
        }
    }

    fn rig() -> (Arc<Gated>, Arc<MdCache>) {
        let below = Arc::new(Gated {
            gate: Semaphore::new(0),
            creates: AtomicU64::new(0),
            unlinks: AtomicU64::new(0),
            opens: AtomicU64::new(0),
            made: Default::default(),
        });
        let md = MdCache::new("md".into(), Child::standalone(below.clone()));
        let mut o = mortar_core::Options::new();
        o.insert("features.cache-invalidation-timeout".into(), "60".into());
        md.reconfigure(&o);
        (below, md)
    }

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    async fn mkdir(md: &MdCache) -> Gfid {
        let d = Gfid::random();
        let mkdir = Fop::Mkdir {
            parent: Gfid::ROOT,
            name: n("d"),
            gfid: d,
            mode: 0o755,
            umask: 0,
        };
        md.call(&Ctx::root(), mkdir).await.unwrap();
        d
    }

    fn create(parent: Gfid, name: &str) -> Fop {
        Fop::Create {
            parent,
            name: n(name),
            gfid: Gfid::random(),
            mode: 0o644,
            umask: 0o022,
            flags: libc::O_WRONLY | libc::O_EXCL,
        }
    }

    /// A create of `name` in `parent`, and the gfid it gives the file.
    fn create_with_gfid(parent: Gfid, name: &str) -> (Fop, Gfid) {
        let fop = create(parent, name);
        let Fop::Create { gfid, .. } = fop else {
            unreachable!()
        };
        (fop, gfid)
    }

    async fn settled<T>(h: &tokio::task::JoinHandle<T>) -> bool {
        tokio::time::sleep(Duration::from_millis(30)).await;
        h.is_finished()
    }

    #[tokio::test]
    async fn a_create_in_a_directory_made_here_is_answered_before_the_bricks_have_it_and_its_attributes_after(
    ) {
        let (below, md) = rig();
        let cx = Ctx::root();
        let d = mkdir(&md).await;
        let (fop, gfid) = create_with_gfid(d, "a");
        // Answered while the bricks' create waits at the gate.
        let Reply::Created { entry, fh } = md.call(&cx, fop).await.unwrap() else {
            panic!("not a create's answer")
        };
        assert_eq!((entry.attr.gfid, entry.attr.perm), (gfid, 0o644));
        assert_ne!(entry.attr.ctime, BRICK_TIME);
        assert!(mortar_core::fop::is_ahead(fh));
        assert_eq!(below.creates.load(Ordering::SeqCst), 0);
        // A close with nothing written waits for nothing.
        md.call(&cx, Fop::Flush { gfid, fh }).await.unwrap();
        // What must see the file on the bricks waits until it is there:
        // an open, and its name and attributes (whose times the bricks
        // choose, not this guess).
        let spawn = |fop: Fop| {
            let md = md.clone();
            tokio::spawn(async move { md.call(&Ctx::root(), fop).await })
        };
        let open = spawn(Fop::Open {
            gfid,
            flags: libc::O_RDONLY,
        });
        let stat = spawn(Fop::Getattr { gfid });
        let found = spawn(Fop::Lookup {
            parent: d,
            name: n("a"),
        });
        assert!(md.cached(&cx, &Fop::Getattr { gfid }).is_none());
        assert!(!settled(&open).await, "an open went before the create");
        assert!(!stat.is_finished() && !found.is_finished());
        below.gate.add_permits(1);
        open.await.unwrap().unwrap();
        assert_eq!(below.opens.load(Ordering::SeqCst), 1);
        let Reply::Attr(a) = stat.await.unwrap().unwrap() else {
            panic!("not attributes")
        };
        assert_eq!(a.ctime, BRICK_TIME);
        let e = found.await.unwrap().unwrap().into_entry().unwrap();
        assert_eq!((e.attr.gfid, e.attr.ctime), (gfid, BRICK_TIME));
        // Landed: the bricks' attributes are answered from memory.
        let Some(Ok(Reply::Attr(a))) = md.cached(&cx, &Fop::Getattr { gfid }) else {
            panic!("the landed file's attributes are not kept")
        };
        assert_eq!(a.ctime, BRICK_TIME);
        // The handle given ahead leads to the bricks' one.
        md.call(&cx, Fop::Release { gfid, fh }).await.unwrap();
        md.call(
            &cx,
            Fop::Fsync {
                gfid: d,
                fh: ANON_FH,
                datasync: false,
            },
        )
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn a_failure_behind_is_reported_by_the_directorys_fsync_once() {
        let (below, md) = rig();
        let cx = Ctx::root();
        let d = mkdir(&md).await;
        md.call(&cx, create(d, "clash")).await.unwrap();
        below.gate.add_permits(10);
        let fsync = Fop::Fsync {
            gfid: d,
            fh: ANON_FH,
            datasync: false,
        };
        let e = md.call(&cx, fsync.clone()).await.unwrap_err();
        assert!(e.is(libc::EEXIST), "{e}");
        md.call(&cx, fsync).await.unwrap();
        // What was believed is gone: the name is asked of the bricks.
        assert!(md.claimed(d, b"clash").is_none());
    }

    #[tokio::test]
    async fn a_recall_of_the_directory_is_answered_once_its_changes_landed() {
        let (below, md) = rig();
        let cx = Ctx::root();
        let d = mkdir(&md).await;
        md.call(&cx, create(d, "a")).await.unwrap();
        let answered = Arc::new(AtomicBool::new(false));
        let a = answered.clone();
        let ack = Ack::new(move || a.store(true, Ordering::SeqCst));
        let recall = Event::Recall {
            gfid: d,
            name: None,
            claim: false,
            ack,
        };
        drop(md.notify(0, recall));
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(
            !answered.load(Ordering::SeqCst),
            "answered before the create landed"
        );
        // The claim is over: the next create waits for the bricks.
        let next = {
            let md = md.clone();
            tokio::spawn(async move { md.call(&Ctx::root(), create(d, "b")).await })
        };
        assert!(!settled(&next).await);
        below.gate.add_permits(2);
        next.await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(answered.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn an_unlink_is_answered_ahead_when_its_files_attributes_are_gone() {
        // A write drops a file's attributes here; its name and kind are
        // still known, which is all an unlink needs.
        let (below, md) = rig();
        let cx = Ctx::root();
        let d = mkdir(&md).await;
        let (fop, gfid) = create_with_gfid(d, "a");
        md.call(&cx, fop).await.unwrap();
        below.gate.add_permits(1);
        let fsync = Fop::Fsync {
            gfid: d,
            fh: ANON_FH,
            datasync: false,
        };
        md.call(&cx, fsync.clone()).await.unwrap();
        md.drop_attr(gfid);
        let unlink = Fop::Unlink {
            parent: d,
            name: n("a"),
        };
        let answer = tokio::time::timeout(Duration::from_secs(2), md.call(&cx, unlink));
        let Reply::Unnamed(after) = answer.await.expect("waited for the bricks").unwrap() else {
            panic!("not answered ahead")
        };
        assert_eq!(below.unlinks.load(Ordering::SeqCst), 0);
        assert_eq!(after.iter().map(|a| a.gfid).collect::<Vec<_>>(), [d]);
        assert!(md.cached(&cx, &Fop::Getattr { gfid }).is_none());
        // The name is gone here at once, and on the bricks by the fsync.
        let e = md
            .call(
                &cx,
                Fop::Lookup {
                    parent: d,
                    name: n("a"),
                },
            )
            .await
            .unwrap_err();
        assert!(e.is(libc::ENOENT), "{e}");
        below.gate.add_permits(1);
        md.call(&cx, fsync).await.unwrap();
        assert_eq!(below.unlinks.load(Ordering::SeqCst), 1);
    }
}
