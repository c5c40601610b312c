//! Directories: opened (kept by the kernel under leases), listed with
//! `readdir` and `readdirplus` over the graph's `Readdir` (the inode
//! numbers the kernel is handed counted as lookups), and synced.

use super::*;

impl MortarFs {
    /// `opendir`: under leases the kernel keeps what it lists.
    pub(super) fn open_dir(&self, req: &Request, ino: INodeNo, reply: ReplyOpen) {
        let gfid = match self.gfid(ino) {
            Ok(g) => g,
            Err(e) => return reply.error(e),
        };
        let cx = ctx(req);
        // Under leases the kernel keeps what it listed (FOPEN_CACHE_DIR)
        // and lists again from memory: the bricks recall the directory
        // before another client changes a name in it, which drops the
        // kernel's copy (`cache::Invalidator`); a change made here, or a
        // new mtime, drops it too.
        let flags = match self.graph.graph().cache_time() > mortar_core::terms::UNLEASED {
            true => FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
            false => FopenFlags::empty(),
        };
        self.spawn(move |g, _| async move {
            match g
                .call(&cx, Fop::Opendir { gfid })
                .await
                .and_then(Reply::into_fh)
            {
                Ok(fh) => reply.opened(FileHandle(fh), flags),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    /// `fsyncdir`.
    pub(super) fn sync_dir(&self, req: &Request, ino: INodeNo, datasync: bool, reply: ReplyEmpty) {
        // The directory's own fsync (`ANON_FH`): md-cache answers it once
        // the changes of names it answered ahead in it have landed, with
        // the error of any that failed. The bricks write names through.
        let gfid = match self.gfid(ino) {
            Ok(g) => g,
            Err(e) => return reply.error(e),
        };
        let fop = Fop::Fsync {
            gfid,
            fh: mortar_core::fop::ANON_FH,
            datasync,
        };
        let cx = ctx(req);
        self.spawn(move |g, _| async move {
            match g.call(&cx, fop).await {
                // No md-cache in the graph: nothing was answered ahead.
                Err(e) if e.is(libc::EBADF) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
                Ok(_) => reply.ok(),
            }
        });
    }

    pub(super) fn readdir_common(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        plus: bool,
        mut add: impl FnMut(&Arc<InodeTable>, u64, u64, FileKind, &[u8], Option<(&Attr, bool)>) -> bool
            + Send
            + 'static,
        done: impl FnOnce(Result<(), Errno>) + Send + 'static,
    ) {
        let gfid = match self.gfid(ino) {
            Ok(g) => g,
            Err(e) => return done(Err(e)),
        };
        let cx = ctx(req);
        self.spawn(move |g, inodes| async move {
            // Offsets 1 and 2 are "." and ".."; brick offsets are shifted by 2.
            let mut off = offset;
            if off == 0 {
                if add(&inodes, ino.0, 1, FileKind::Dir, b".", None) {
                    return done(Ok(()));
                }
                off = 1;
            }
            if off == 1 {
                let parent = if ino.0 == 1 { 1 } else { u64::MAX };
                if add(&inodes, parent, 2, FileKind::Dir, b"..", None) {
                    return done(Ok(()));
                }
                off = 2;
            }
            let mut from = off - 2;
            let rep = loop {
                let rep = g
                    .call(
                        &cx,
                        // The bricks' plus listing also for a plain
                        // readdir: it carries each entry's gfid, and so the
                        // inode number `stat` will show.
                        Fop::Readdir {
                            gfid,
                            fh: fh.0,
                            offset: from,
                            plus: true,
                        },
                    )
                    .await;
                // A batch whose every name went away meanwhile is not the
                // end of the directory: read on behind it.
                match rep {
                    Ok(Reply::Entries(ents)) if plus && !ents.is_empty() => {
                        let last = ents.last().map_or(from, |e| e.next);
                        let ents = match vouched(&g, &cx, gfid, ents).await {
                            Ok(v) => v,
                            Err(e) => return done(Err(errno(&e))),
                        };
                        if ents.is_empty() {
                            from = last;
                            continue;
                        }
                        break Ok(Reply::Entries(ents));
                    }
                    other => break other,
                }
            };
            match rep {
                Ok(Reply::Entries(ents)) => {
                    for e in ents {
                        let ino = match &e.attr {
                            Some(a) if plus => inodes.remember(a.gfid),
                            Some(a) => inodes.peek(a.gfid),
                            None => u64::MAX,
                        };
                        if add(
                            &inodes,
                            ino,
                            e.next + 2,
                            e.kind,
                            &e.name,
                            e.attr.as_ref().map(|a| (a, e.cacheable)),
                        ) {
                            break;
                        }
                    }
                    done(Ok(()))
                }
                Ok(_) => done(Err(Errno::EIO)),
                Err(e) => done(Err(errno(&e))),
            }
        });
    }

    /// `readdir`.
    pub(super) fn list(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let reply = Arc::new(std::sync::Mutex::new(Some(reply)));
        let r2 = reply.clone();
        self.readdir_common(
            req,
            ino,
            fh,
            offset,
            false,
            move |_, ino, next, kind, name, _| {
                let mut g = reply.lock().unwrap();
                g.as_mut().unwrap().add(
                    INodeNo(ino),
                    next,
                    file_type(kind),
                    OsStr::from_bytes(name),
                )
            },
            move |res| {
                let rep = r2.lock().unwrap().take().unwrap();
                match res {
                    Ok(()) => rep.ok(),
                    Err(e) => rep.error(e),
                }
            },
        );
    }

    /// `readdirplus`.
    pub(super) fn list_plus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let reply = Arc::new(std::sync::Mutex::new(Some(reply)));
        let r2 = reply.clone();
        let lease = self.lease();
        let dir = self.gfid(ino).unwrap_or(Gfid::NULL);
        self.readdir_common(
            req,
            ino,
            fh,
            offset,
            true,
            move |inodes, ino, next, kind, name, attr| {
                let mut g = reply.lock().unwrap();
                let r = g.as_mut().unwrap();
                match attr {
                    Some((a, cacheable)) => {
                        let ttl = if cacheable {
                            lease.entry_ttl(&[dir, a.gfid])
                        } else {
                            Duration::ZERO
                        };
                        let full = r.add(
                            INodeNo(ino),
                            next,
                            OsStr::from_bytes(name),
                            &ttl,
                            &fuse_attr(ino, a),
                            fuser::Generation(0),
                        );
                        if full {
                            // The kernel did not take this entry: give back its lookup count.
                            inodes.forget(ino, 1);
                        }
                        full
                    }
                    None => {
                        // "." and "..": the kernel never links these names,
                        // so the placeholder attributes are not cached.
                        // Other entries without attributes are handed over
                        // without an inode (0), and the kernel looks them up.
                        let dots = name == b"." || name == b"..";
                        let ino = if dots { ino } else { 0 };
                        let attr = fuse_attr(
                            ino,
                            &Attr {
                                kind,
                                ..placeholder_attr()
                            },
                        );
                        r.add(
                            INodeNo(ino),
                            next,
                            OsStr::from_bytes(name),
                            &Duration::ZERO,
                            &attr,
                            fuser::Generation(0),
                        )
                    }
                }
            },
            move |res| {
                let rep = r2.lock().unwrap().take().unwrap();
                match res {
                    Ok(()) => rep.ok(),
                    Err(e) => rep.error(e),
                }
            },
        );
    }
}

/// Gives every READDIRPLUS entry attributes. An entry must reach the
/// kernel with an inode: one without (glibc skips d_ino 0) would be
/// invisible to `ls` and `rm -r`. Entries the listed copy could not vouch
/// for (`attr` None) are looked up, which finds a good copy; names gone
/// meanwhile are dropped.
async fn vouched(
    g: &Arc<dyn Xlator>,
    cx: &Ctx,
    dir: Gfid,
    ents: Vec<mortar_core::fop::DirEntry>,
) -> Result<Vec<mortar_core::fop::DirEntry>, FsError> {
    let mut out = Vec::with_capacity(ents.len());
    for mut e in ents {
        if e.attr.is_none() {
            let Ok(name) = Name::new(e.name.to_vec()) else {
                continue;
            };
            match g
                .call(cx, Fop::Lookup { parent: dir, name })
                .await
                .and_then(Reply::into_attr)
            {
                Ok(a) => {
                    e.kind = a.kind;
                    e.attr = Some(a);
                    e.cacheable = true;
                }
                Err(err) if err.is(libc::ENOENT) => continue,
                Err(err) => return Err(err),
            }
        }
        out.push(e);
    }
    Ok(out)
}
