//! The fops the in-memory brick serves, by family: names and attributes;
//! open files, data and listings; xattrs, locks, blame and the heal index.

use super::*;

impl MemBrick {
    /// Names and attributes.
    pub(super) fn serve_names(st: &mut State, conn: u64, fop: Fop) -> FsResult<Reply> {
        let entry = |a: Attr| Ok(Reply::Entry(Entry::found(a)));
        match fop {
            Fop::Lookup { parent, name } => {
                let p = st.objs.get(&parent).ok_or(err(libc::ESTALE))?;
                let g = *p.entries.get(name.as_bytes()).ok_or(err(libc::ENOENT))?;
                entry(st.objs[&g].attr(g))
            }
            Fop::Getattr { gfid } => Ok(Reply::Attr(Self::obj(st, gfid)?.attr(gfid))),
            Fop::Setattr { gfid, set } => {
                let o = Self::obj(st, gfid)?;
                if let Some(m) = set.mode {
                    o.perm = m & 0o7777;
                }
                if let Some(u) = set.uid {
                    o.uid = u;
                }
                if let Some(g) = set.gid {
                    o.gid = g;
                }
                if let Some(s) = set.size {
                    o.data.resize(s as usize, 0);
                }
                o.changes += 1;
                Ok(Reply::Attr(o.attr(gfid)))
            }
            Fop::Create {
                parent,
                name,
                gfid,
                mode,
                umask,
                ..
            } => {
                let o = Obj::new(FileKind::File, mode & !umask & 0o7777, parent);
                let attr = Self::new_obj(st, parent, &name, gfid, o)?;
                let fh = Self::open(st, conn, gfid);
                Ok(Reply::Created {
                    entry: Entry::found(attr),
                    fh,
                })
            }
            Fop::Mknod {
                parent,
                name,
                gfid,
                mode,
                umask,
                linkto,
                ..
            } => {
                let mut o = Obj::new(FileKind::from_mode(mode), mode & !umask & 0o7777, parent);
                if let Some(set) = linkto {
                    o.xattrs.insert(
                        mortar_core::fop::LINKTO_XATTR.into(),
                        set.to_le_bytes().to_vec(),
                    );
                }
                entry(Self::new_obj(st, parent, &name, gfid, o)?)
            }
            Fop::Mkdir {
                parent,
                name,
                gfid,
                mode,
                umask,
            } => {
                let o = Obj::new(FileKind::Dir, mode & !umask & 0o7777, parent);
                entry(Self::new_obj(st, parent, &name, gfid, o)?)
            }
            Fop::Symlink {
                parent,
                name,
                gfid,
                target,
            } => {
                let mut o = Obj::new(FileKind::Symlink, 0o777, parent);
                o.data = target.into_vec();
                entry(Self::new_obj(st, parent, &name, gfid, o)?)
            }
            Fop::Readlink { gfid } => Ok(Reply::Data(Self::obj(st, gfid)?.data.clone().into())),
            Fop::Unlink { parent, name } => {
                Self::remove_name(st, parent, &name, false).map(|_| Reply::Ok)
            }
            Fop::Rmdir { parent, name } => {
                Self::remove_name(st, parent, &name, true).map(|_| Reply::Ok)
            }
            Fop::Link {
                gfid,
                newparent,
                newname,
            } => {
                Self::obj(st, gfid)?;
                let p = Self::obj(st, newparent)?;
                if p.entries.contains_key(newname.as_bytes()) {
                    return Err(err(libc::EEXIST));
                }
                p.entries.insert(newname.as_bytes().to_vec(), gfid);
                p.changes += 1;
                let o = Self::obj(st, gfid)?;
                o.nlink += 1;
                entry(o.attr(gfid))
            }
            Fop::Rename {
                parent,
                name,
                newparent,
                newname,
                flags,
            } => {
                let g = *Self::obj(st, parent)?
                    .entries
                    .get(name.as_bytes())
                    .ok_or(err(libc::ENOENT))?;
                let is_dir = st.objs[&g].kind == FileKind::Dir;
                if let Some(&old) = Self::obj(st, newparent)?.entries.get(newname.as_bytes()) {
                    if old == g {
                        return Ok(Reply::Ok);
                    }
                    if flags & libc::RENAME_NOREPLACE != 0 {
                        return Err(err(libc::EEXIST));
                    }
                    Self::remove_name(st, newparent, &newname, is_dir)?;
                }
                Self::obj(st, parent)?.entries.remove(name.as_bytes());
                Self::obj(st, newparent)?
                    .entries
                    .insert(newname.as_bytes().to_vec(), g);
                if is_dir && parent != newparent {
                    Self::obj(st, parent)?.nlink -= 1;
                    Self::obj(st, newparent)?.nlink += 1;
                }
                Self::obj(st, g)?.parent = newparent;
                Ok(Reply::Ok)
            }
            other => unreachable!("{} is not served here", other.name()),
        }
    }

    /// Open files and directories, data, listings.
    pub(super) fn serve_data(st: &mut State, conn: u64, fop: Fop) -> FsResult<Reply> {
        match fop {
            Fop::Open { gfid, flags } => {
                let o = Self::obj(st, gfid)?;
                if flags & libc::O_TRUNC != 0 {
                    o.data.clear();
                }
                Ok(Reply::Opened {
                    fh: Self::open(st, conn, gfid),
                })
            }
            Fop::Opendir { gfid } => {
                if Self::obj(st, gfid)?.kind != FileKind::Dir {
                    return Err(err(libc::ENOTDIR));
                }
                Ok(Reply::Opened {
                    fh: Self::open(st, conn, gfid),
                })
            }
            Fop::Read {
                gfid,
                fh,
                offset,
                size,
            } => {
                let g = Self::handle(st, conn, gfid, fh)?;
                let d = &st.objs.get(&g).ok_or(err(libc::ESTALE))?.data;
                let start = (offset as usize).min(d.len());
                let end = (start + size as usize).min(d.len());
                Ok(Reply::Data(d[start..end].to_vec().into()))
            }
            Fop::Write {
                gfid,
                fh,
                offset,
                data,
            } => {
                let g = Self::handle(st, conn, gfid, fh)?;
                if st.locks.get(&g) != Some(&conn) {
                    st.unlocked_writes += 1;
                }
                let o = Self::obj(st, g)?;
                let end = offset as usize + data.len();
                if o.data.len() < end {
                    o.data.resize(end, 0);
                }
                o.data[offset as usize..end].copy_from_slice(&data);
                o.changes += 1;
                Ok(Reply::Written(data.len() as u32, Some(o.attr(g))))
            }
            Fop::Fallocate {
                gfid,
                fh,
                offset,
                len,
                ..
            } => {
                let g = Self::handle(st, conn, gfid, fh)?;
                let o = Self::obj(st, g)?;
                let end = (offset + len) as usize;
                if o.data.len() < end {
                    o.data.resize(end, 0);
                }
                Ok(Reply::Ok)
            }
            Fop::Lseek {
                gfid,
                fh,
                offset,
                whence,
            } => {
                // Files have no holes here: data up to the end, one hole after.
                Self::handle(st, conn, gfid, fh)?;
                let len = Self::obj(st, gfid)?.data.len() as u64;
                if offset >= len {
                    return Err(err(libc::ENXIO));
                }
                Ok(Reply::Offset(if whence == libc::SEEK_HOLE {
                    len
                } else {
                    offset
                }))
            }
            Fop::Flush { gfid, fh } | Fop::Fsync { gfid, fh, .. } => {
                Self::handle(st, conn, gfid, fh)?;
                Ok(Reply::Ok)
            }
            Fop::Release { gfid, fh } | Fop::Releasedir { gfid, fh } => {
                Self::handle(st, conn, gfid, fh)?;
                st.fds.remove(&fh);
                Self::reap(st, gfid);
                Ok(Reply::Ok)
            }
            Fop::Readdir {
                gfid,
                fh,
                offset,
                plus,
            } => {
                let g = Self::handle(st, conn, gfid, fh)?;
                let d = st.objs.get(&g).ok_or(err(libc::ESTALE))?;
                if fh == ANON_FH && d.entries.len() > BATCH {
                    // Only listings of one batch are read without a handle here.
                    return Err(err(libc::EOPNOTSUPP));
                }
                let out = d
                    .entries
                    .iter()
                    .enumerate()
                    .skip(offset as usize)
                    .take(BATCH)
                    .map(|(i, (n, c))| {
                        let o = &st.objs[c];
                        DirEntry {
                            name: serde_bytes::ByteBuf::from(n.clone()),
                            kind: o.kind,
                            next: i as u64 + 1,
                            attr: plus.then(|| o.attr(*c)),
                            cacheable: true,
                        }
                    })
                    .collect();
                Ok(match fh == ANON_FH {
                    true => Reply::Listed(out, None),
                    false => Reply::Entries(out),
                })
            }
            Fop::Statfs { .. } => Ok(Reply::StatFs(StatFs {
                bsize: 4096,
                frsize: 4096,
                blocks: 1 << 20,
                bfree: 1 << 19,
                bavail: 1 << 19,
                files: 1 << 20,
                ffree: 1 << 19,
                namelen: 255,
            })),
            // Holds are answered, not stored; this brick does not enforce
            // them (`brick::hold` does, on real bricks).
            other => unreachable!("{} is not served here", other.name()),
        }
    }

    /// Xattrs, locks, blame and the heal index, checksums.
    pub(super) fn serve_meta(&self, st: &mut State, conn: u64, fop: Fop) -> FsResult<Reply> {
        match fop {
            Fop::Setxattr { gfid, name, .. } | Fop::Removexattr { gfid, name }
                if name == mortar_core::fop::HOLD_XATTR =>
            {
                Self::obj(st, gfid)?;
                Ok(Reply::Ok)
            }
            Fop::Setxattr {
                gfid,
                name,
                value,
                flags,
            } => {
                let xattrs = &mut Self::obj(st, gfid)?.xattrs;
                if flags & libc::XATTR_CREATE != 0 && xattrs.contains_key(&name) {
                    return Err(err(libc::EEXIST));
                }
                xattrs.insert(name, value.into_vec());
                Ok(Reply::Ok)
            }
            Fop::Getxattr { gfid, name } if name == mortar_core::fop::OPEN_COUNT_XATTR => {
                Self::obj(st, gfid)?;
                let n = st.fds.values().filter(|(_, g)| *g == gfid).count();
                Ok(Reply::Xattr(serde_bytes::ByteBuf::from(
                    n.to_string().into_bytes(),
                )))
            }
            Fop::Getxattr { gfid, name } => Self::obj(st, gfid)?
                .xattrs
                .get(&name)
                .map(|v| Reply::Xattr(serde_bytes::ByteBuf::from(v.clone())))
                .ok_or(err(libc::ENODATA)),
            Fop::Removexattr { gfid, name } => Self::obj(st, gfid)?
                .xattrs
                .remove(&name)
                .map(|_| Reply::Ok)
                .ok_or(err(libc::ENODATA)),
            Fop::Listxattr { gfid } => {
                let mut out = Vec::new();
                for k in Self::obj(st, gfid)?.xattrs.keys() {
                    out.extend_from_slice(k.as_bytes());
                    out.push(0);
                }
                Ok(Reply::Xattr(serde_bytes::ByteBuf::from(out)))
            }
            Fop::Lock { gfid, mark, .. } => {
                // Reached only once the lock is this connection's.
                if let Err(e) = Self::obj(st, gfid) {
                    if st.locks.get(&gfid) == Some(&conn) {
                        st.locks.remove(&gfid);
                    }
                    self.unlocked.notify_waiters();
                    return Err(e);
                }
                st.locks.insert(gfid, conn);
                if let Some(blame) = mark {
                    st.sessions.entry(gfid).or_default().insert(conn);
                    st.index.insert(gfid);
                    Self::obj(st, gfid)?.blame |= blame;
                }
                Ok(Reply::Ok)
            }
            Fop::Unlock { gfids } => {
                for g in gfids {
                    Self::end_session(st, conn, g);
                    if st.locks.get(&g) == Some(&conn) {
                        st.locks.remove(&g);
                    }
                }
                self.unlocked.notify_waiters();
                Ok(Reply::Ok)
            }
            Fop::Clear { gfid, unblame } => {
                let left = match st.objs.get_mut(&gfid) {
                    Some(o) => {
                        o.blame &= !unblame;
                        o.blame
                    }
                    None => 0,
                };
                if left == 0 && !st.sessions.contains_key(&gfid) {
                    st.index.remove(&gfid);
                }
                Ok(Reply::Blame(left))
            }
            Fop::Pending { max } => Ok(Reply::Gfids(
                st.index.iter().take(max as usize).copied().collect(),
            )),
            Fop::Blamed { max } => Ok(Reply::Blames(
                st.objs
                    .iter()
                    .filter(|(_, o)| o.blame != 0)
                    .take(max as usize + 1)
                    .map(|(g, o)| (*g, o.blame))
                    .collect(),
            )),
            Fop::Parent { gfid } => {
                let p = Self::obj(st, gfid)?.parent;
                Ok(Reply::Entry(Entry::found(
                    st.objs.get(&p).ok_or(err(libc::ESTALE))?.attr(p),
                )))
            }
            Fop::Checksum {
                gfid,
                offset,
                block,
                count,
            } => {
                // What posix answers: a sum per block, up to the end.
                let data = &Self::obj(st, gfid)?.data;
                let sums = (0..count as u64)
                    .map(|i| offset + i * block as u64)
                    .take_while(|&at| at < data.len() as u64)
                    .map(|at| {
                        let end = (at + block as u64).min(data.len() as u64);
                        xxhash_rust::xxh3::xxh3_64(&data[at as usize..end as usize])
                    })
                    .collect();
                Ok(Reply::Sums(sums))
            }
            Fop::Resolve { .. } => Err(err(libc::EOPNOTSUPP)),
            other => unreachable!("{} is not served here", other.name()),
        }
    }
}
