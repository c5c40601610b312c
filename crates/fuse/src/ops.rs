//! How requests are handed to the graph: each runs on the FUSE session
//! thread until it would wait, and then on the tokio runtime, with the
//! reply sent from wherever it ends, so the session thread never waits on
//! the network (`spawn`); what the graph has at hand is answered there.

use super::*;

impl MortarFs {
    /// Runs `f`: first here, on the session thread, until it would wait
    /// (an answer from memory, such as a read io-cache holds or a flush
    /// with nothing to send, is given there and then), and then on the
    /// runtime, which wakes it when what it waits for is ready.
    ///
    /// Handing every request to the runtime cost a thread wake-up per
    /// request, more than what most answers from memory cost themselves.
    /// The first poll uses a waker that does nothing: the runtime polls a
    /// task it is given at once, and every future here registers the
    /// waker it is polled with again, so nothing is missed.
    pub(super) fn spawn<F, Fut>(&self, f: F)
    where
        F: FnOnce(Arc<dyn Xlator>, Arc<InodeTable>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let g: Arc<dyn Xlator> = self.graph.clone();
        let i = self.inodes.clone();
        let _in_runtime = self.rt.enter();
        let mut task = Box::pin(f(g, i));
        let mut first = std::task::Context::from_waker(std::task::Waker::noop());
        if task.as_mut().poll(&mut first).is_pending() {
            self.rt.spawn(task);
        }
    }

    pub(super) fn entry_op(&self, req: &Request, fop: Result<Fop, Errno>, reply: ReplyEntry) {
        let fop = match fop {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let cx = ctx(req);
        let lease = self.lease();
        // For a lookup, the directory; for a creation, the new object.
        let about = fop.gfid();
        let lookup = matches!(fop, Fop::Lookup { .. });
        // A missing name, cached as such (inode 0) while the directory's
        // lease lasts.
        let missing = move |lease: &super::cache::Lease, reply: ReplyEntry| {
            let ttl = lease.entry_ttl(&[about]);
            reply.entry(
                &ttl,
                &fuse_attr(0, &placeholder_attr()),
                fuser::Generation(0),
            );
        };
        if lookup {
            match self.graph.cached(&cx, &fop) {
                Some(Err(e)) if e.is(libc::ENOENT) => return missing(&lease, reply),
                Some(Err(e)) => return reply.error(errno(&e)),
                _ => {}
            }
        }
        self.spawn(move |g, inodes| async move {
            match g.call(&cx, fop).await.and_then(Reply::into_entry) {
                Ok(e) => {
                    let ino = inodes.remember(e.attr.gfid);
                    let ttl = lease.entry_ttl(&[about, e.attr.gfid]);
                    reply.entry(&ttl, &fuse_attr(ino, &e.attr), fuser::Generation(0));
                }
                Err(e) if lookup && e.is(libc::ENOENT) => missing(&lease, reply),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    /// LOOKUP of "." in inode `ino`: the kernel decoding a file handle it
    /// exported (FUSE_EXPORT_SUPPORT) whose inode it no longer holds. The
    /// number comes from the gfid, so the bricks can find the object again
    /// even if this client forgot it (or never knew it: another mount's
    /// handle, or one from before a remount).
    pub(super) fn lookup_self(&self, req: &Request, ino: u64, reply: ReplyEntry) {
        let cx = ctx(req);
        let lease = self.lease();
        self.spawn(move |g, inodes| async move {
            let attr = match inodes.gfid(ino) {
                Some(gfid) => g
                    .call(&cx, Fop::Getattr { gfid })
                    .await
                    .and_then(Reply::into_attr),
                None => g
                    .call(&cx, Fop::Resolve { ino })
                    .await
                    .and_then(Reply::into_entry)
                    .map(|e| e.attr),
            };
            match attr {
                Ok(a) => {
                    let ino = inodes.remember(a.gfid);
                    let ttl = lease.entry_ttl(&[a.gfid]);
                    reply.entry(&ttl, &fuse_attr(ino, &a), fuser::Generation(0));
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    /// Runs `fop`, then clears the object's set-gid bit if the caller is
    /// neither root nor in the object's group (by its primary group or the
    /// supplementary ones in /proc), as a local file system does when such
    /// a caller sets an ACL.
    pub(super) fn then_drop_sgid(
        &self,
        req: &Request,
        ino: INodeNo,
        fop: Result<Fop, Errno>,
        reply: ReplyEmpty,
    ) {
        let (fop, gfid) = match (fop, self.gfid(ino)) {
            (Ok(f), Ok(g)) => (f, g),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        let cx = ctx(req);
        self.spawn(move |g, _| async move {
            let res = async {
                g.call(&cx, fop).await?;
                if cx.uid == 0 {
                    return Ok(());
                }
                let a = g.call(&cx, Fop::Getattr { gfid }).await?.into_attr()?;
                let in_group = cx.gid == a.gid || cx.groups.contains(&a.gid);
                if a.perm & libc::S_ISGID != 0 && !in_group {
                    let set = SetAttr {
                        mode: Some(a.perm & !libc::S_ISGID),
                        ..Default::default()
                    };
                    g.call(&cx, Fop::Setattr { gfid, set }).await?;
                }
                Ok::<_, FsError>(())
            }
            .await;
            match res {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    pub(super) fn empty_op(&self, req: &Request, fop: Result<Fop, Errno>, reply: ReplyEmpty) {
        self.empty_op_then(req, fop, reply, || {})
    }

    /// `empty_op`, with `then` done after success and before the answer.
    pub(super) fn empty_op_then(
        &self,
        req: &Request,
        fop: Result<Fop, Errno>,
        reply: ReplyEmpty,
        then: impl FnOnce() + Send + 'static,
    ) {
        let fop = match fop {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let cx = ctx(req);
        self.spawn(move |g, _| async move {
            match g.call(&cx, fop).await {
                Ok(_) => {
                    then();
                    reply.ok()
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    pub(super) fn xattr_op(
        &self,
        req: &Request,
        fop: Result<Fop, Errno>,
        size: u32,
        reply: ReplyXattr,
    ) {
        let fop = match fop {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let cx = ctx(req);
        let list = matches!(fop, Fop::Listxattr { .. });
        if let Some(r) = self.graph.cached(&cx, &fop) {
            return xattr_reply(r, list, size, reply);
        }
        self.spawn(
            move |g, _| async move { xattr_reply(g.call(&cx, fop).await, list, size, reply) },
        );
    }
}

/// Answers an xattr request (`size` 0: only the value's size).
fn xattr_reply(r: mortar_core::FsResult<Reply>, list: bool, size: u32, reply: ReplyXattr) {
    match r {
        Ok(Reply::Xattr(mut v)) => {
            if list {
                // Distribute's bookkeeping is the bricks' to see.
                v = serde_bytes::ByteBuf::from(
                    v.split_inclusive(|&c| c == 0)
                        .filter(|n| {
                            !std::str::from_utf8(n.strip_suffix(&[0]).unwrap_or(n))
                                .is_ok_and(is_distribute_xattr)
                        })
                        .flatten()
                        .copied()
                        .collect::<Vec<u8>>(),
                );
            }
            if size == 0 {
                reply.size(v.len() as u32)
            } else if v.len() > size as usize {
                reply.error(Errno::ERANGE)
            } else {
                reply.data(&v)
            }
        }
        Ok(_) => reply.error(Errno::EIO),
        Err(e) => reply.error(errno(&e)),
    }
}
