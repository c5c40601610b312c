use super::*;
use mortar_core::xlator::Ack;
use std::sync::Arc;

/// Answers getxattr from a map, and counts what it is asked.
#[derive(Default)]
struct Xattrs {
    map: Mutex<HashMap<String, Vec<u8>>>,
    asked: AtomicU64,
    /// Which watched xattrs attributes say the object has.
    watched: Mutex<Option<u8>>,
}

impl Xattrs {
    /// Attributes whose size counts the requests asked so far.
    fn attr(&self, gfid: Gfid) -> Attr {
        Attr {
            watched: *self.watched.lock().unwrap(),
            ..Attr::plain_file(gfid, self.asked.load(Ordering::Relaxed))
        }
    }
}

#[async_trait]
impl Xlator for Xattrs {
    fn name(&self) -> String {
        "xattrs".into()
    }
    async fn call(&self, _: &Ctx, fop: Fop) -> FsResult<Reply> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        match fop {
            Fop::Getxattr { name, .. } => match self.map.lock().unwrap().get(&name) {
                Some(v) => Ok(Reply::Xattr(ByteBuf::from(v.clone()))),
                None => Err(FsError::errno(libc::ENODATA)),
            },
            Fop::Setxattr { name, value, .. } => {
                self.map.lock().unwrap().insert(name, value.into_vec());
                Ok(Reply::Ok)
            }
            Fop::Getattr { gfid } => Ok(Reply::Attr(self.attr(gfid))),
            // What a brick tells after a write.
            Fop::Write { gfid, data, .. } => {
                tokio::task::yield_now().await;
                Ok(Reply::Written(data.len() as u32, Some(self.attr(gfid))))
            }
            _ => Ok(Reply::Ok),
        }
    }
}

/// A brick's recall of `gfid` (or of `name` in it), as the graph
/// hands it to md-cache.
fn recall(md: &MdCache, gfid: Gfid, name: Option<Name>) {
    md.notify(
        0,
        Event::Recall {
            gfid,
            name,
            claim: false,
            ack: Ack::none(),
        },
    );
}

/// md-cache over `below`, under one-minute leases.
fn leased(below: Arc<impl Xlator + 'static>) -> Arc<MdCache> {
    let md = MdCache::new("md".into(), Child::standalone(below));
    let mut o = mortar_core::Options::new();
    o.insert("features.cache-invalidation-timeout".into(), "60".into());
    md.reconfigure(&o);
    md
}

fn get(gfid: Gfid, name: &str) -> Fop {
    Fop::Getxattr {
        gfid,
        name: name.into(),
    }
}

#[tokio::test]
async fn an_answer_is_kept_while_other_objects_change_not_its_own() {
    let md = leased(Arc::new(Xattrs::default()));
    let (f, other) = (Gfid::random(), Gfid::random());
    let same_bucket = |g: &Gfid| g.0[15] as usize % BUCKETS == f.0[15] as usize % BUCKETS;
    let other = if same_bucket(&other) {
        Gfid::ROOT
    } else {
        other
    };
    assert!(!same_bucket(&other));
    // Another object's change, a recall of it, between the request
    // and its answer: kept.
    let mark = md.mark();
    md.drop_attr(other);
    md.drop_object(other);
    md.keep(f, Kept::Attr(Attr::plain_file(f, 1)), mark);
    assert_eq!(md.cached_attr(f).map(|a| a.size), Some(1));
    // Its own: not kept.
    let mark = md.mark();
    md.drop_attr(f);
    md.keep(f, Kept::Attr(Attr::plain_file(f, 2)), mark);
    assert_eq!(md.cached_attr(f), None);
    // A write's answer after another file's write: kept; one marked
    // before a later change of the same file: not kept over it.
    let (first, second) = (md.mark(), md.mark());
    md.bump(&other);
    assert!(md.keep_after_change(f, Attr::plain_file(f, 3), second));
    assert!(!md.keep_after_change(f, Attr::plain_file(f, 4), first));
    assert_eq!(md.cached_attr(f).map(|a| a.size), Some(3));
    // Everything dropped (leases lost): nothing marked before is kept.
    let mark = md.mark();
    md.drop_all();
    md.keep(other, Kept::Attr(Attr::plain_file(other, 5)), mark);
    assert_eq!(md.cached_attr(other), None);
}

#[tokio::test]
async fn answers_are_kept_until_recalled_or_changed() {
    let below = Arc::new(Xattrs::default());
    let md = leased(below.clone());
    let (f, cx) = (Gfid::random(), Ctx::root());
    let asked = || below.asked.load(Ordering::Relaxed);
    // A missing name, asked twice: once of the bricks.
    for _ in 0..2 {
        let e = md
            .call(&cx, get(f, "security.capability"))
            .await
            .unwrap_err();
        assert!(e.is(libc::ENODATA));
    }
    assert_eq!(asked(), 1);
    // This mount's own change drops it.
    let set = Fop::Setxattr {
        gfid: f,
        name: "security.capability".into(),
        value: ByteBuf::from(b"c".to_vec()),
        flags: 0,
    };
    md.call(&cx, set).await.unwrap();
    let v = md.call(&cx, get(f, "security.capability")).await.unwrap();
    assert!(matches!(v, Reply::Xattr(b) if b.as_ref() == b"c"));
    md.call(&cx, get(f, "security.capability")).await.unwrap();
    assert_eq!(asked(), 3);
    // Another client's change: the brick recalls the object first.
    below.map.lock().unwrap().clear();
    recall(&md, f, None);
    assert!(md.call(&cx, get(f, "security.capability")).await.is_err());
    assert_eq!(asked(), 4);
    // Virtual names always go down.
    md.call(&cx, get(f, "trusted.mortar.client.graph"))
        .await
        .ok();
    md.call(&cx, get(f, "trusted.mortar.client.graph"))
        .await
        .ok();
    assert_eq!(asked(), 6);
    // A lost connection drops everything.
    md.notify(0, Event::LeasesLost);
    assert!(md.call(&cx, get(f, "security.capability")).await.is_err());
    assert_eq!(asked(), 7);
}

#[tokio::test]
async fn xattrs_the_bricks_listed_with_attributes_are_answered_here() {
    let below = Arc::new(Xattrs::default());
    let md = leased(below.clone());
    let (f, cx) = (Gfid::random(), Ctx::root());
    let asked = || below.asked.load(Ordering::Relaxed);
    let acl = "system.posix_acl_access";
    below
        .map
        .lock()
        .unwrap()
        .insert(acl.into(), b"acl".to_vec());
    // Attributes that say the object has an access ACL and nothing else
    // watched: the label and capabilities are answered missing here, the
    // ACL (whose value was not sent) is asked for, once.
    *below.watched.lock().unwrap() = Some(0b10);
    md.call(&cx, Fop::Getattr { gfid: f }).await.unwrap();
    assert_eq!(asked(), 1);
    for n in ["security.selinux", "security.capability"] {
        let e = md.call(&cx, get(f, n)).await.unwrap_err();
        assert!(e.is(libc::ENODATA));
        assert!(md.cached(&cx, &get(f, n)).is_some());
    }
    assert_eq!(asked(), 1);
    for _ in 0..2 {
        let v = md.call(&cx, get(f, acl)).await.unwrap();
        assert!(matches!(v, Reply::Xattr(b) if b.as_ref() == b"acl"));
    }
    assert_eq!(asked(), 2);
    // A later answer that lists capabilities: the missing answer kept
    // before is not given again.
    md.drop_attr(f);
    *below.watched.lock().unwrap() = Some(0b1010);
    md.call(&cx, Fop::Getattr { gfid: f }).await.unwrap();
    assert!(md.cached(&cx, &get(f, "security.capability")).is_none());
    // Attributes from a brick that did not list xattrs tell nothing.
    let g = Gfid::random();
    *below.watched.lock().unwrap() = None;
    md.call(&cx, Fop::Getattr { gfid: g }).await.unwrap();
    assert!(md.cached(&cx, &get(g, "security.selinux")).is_none());
}

#[tokio::test]
async fn attributes_are_kept_until_this_mount_or_another_changes_them() {
    let below = Arc::new(Xattrs::default());
    let md = MdCache::new("md".into(), Child::standalone(below.clone()));
    // Without leases (the bricks do not recall): kept one second.
    let mut o = mortar_core::Options::new();
    o.insert("features.cache-invalidation".into(), "off".into());
    md.reconfigure(&o);
    let (f, cx) = (Gfid::random(), Ctx::root());
    let asked = || below.asked.load(Ordering::Relaxed);
    let size = |r: Reply| r.into_attr().unwrap().size;
    let stat = || md.call(&cx, Fop::Getattr { gfid: f });
    assert_eq!(size(stat().await.unwrap()), 1);
    assert_eq!(size(stat().await.unwrap()), 1, "from memory");
    assert_eq!(asked(), 1);
    // At hand for the FUSE thread too, with no wait.
    let at_hand = md.cached(&cx, &Fop::Getattr { gfid: f });
    assert_eq!(size(at_hand.unwrap().unwrap()), 1);
    assert!(md
        .cached(
            &cx,
            &Fop::Getattr {
                gfid: Gfid::random()
            }
        )
        .is_none());
    // A write here changes the size and mtime.
    let write = Fop::Write {
        gfid: f,
        fh: 1,
        offset: 0,
        data: bytes::Bytes::from_static(b"x"),
        grow: 0,
        reserve: false,
    };
    // A write here: the bricks tell the attributes after it, and a
    // stat asks nothing.
    md.call(&cx, write.clone()).await.unwrap();
    assert_eq!(size(stat().await.unwrap()), 2);
    assert_eq!(asked(), 2);
    // Two writes out at once: neither's attributes are kept (the first
    // to end may not have seen the other).
    let (a, b) = tokio::join!(md.call(&cx, write.clone()), md.call(&cx, write));
    a.unwrap();
    b.unwrap();
    assert_eq!(size(stat().await.unwrap()), 5);
    assert_eq!(size(stat().await.unwrap()), 5);
    // A name removed here: the object it named is not known, so every
    // object's attributes are asked again.
    let unlink = Fop::Unlink {
        parent: Gfid::random(),
        name: mortar_core::Name::new("x").unwrap(),
    };
    md.call(&cx, unlink).await.unwrap();
    assert_eq!(size(stat().await.unwrap()), 7);
    // Another client's change, recalled.
    recall(&md, f, None);
    assert_eq!(size(stat().await.unwrap()), 8);
    tokio::time::sleep(mortar_core::terms::UNLEASED).await;
    assert_eq!(size(stat().await.unwrap()), 9);
}

#[tokio::test]
async fn a_new_object_lacks_what_its_directory_lacks_without_asking() {
    let below = Arc::new(Xattrs::default());
    let md = leased(below.clone());
    let (dir, cx) = (Gfid::random(), Ctx::root());
    let asked = || below.asked.load(Ordering::Relaxed);
    let create = |gfid| Fop::Create {
        parent: dir,
        name: mortar_core::Name::new("f").unwrap(),
        gfid,
        mode: 0o644,
        umask: 0o022,
        flags: libc::O_WRONLY,
    };
    let (f1, f2) = (Gfid::random(), Gfid::random());
    md.call(&cx, create(f1)).await.unwrap();
    // The create, and the directory asked once for what it lacks.
    assert_eq!(asked(), 3);
    md.call(&cx, create(f2)).await.unwrap();
    assert_eq!(asked(), 4, "the directory is not asked again");
    for f in [f1, f2] {
        for n in [
            "system.posix_acl_access",
            "security.selinux",
            "security.capability",
        ] {
            let e = md.call(&cx, get(f, n)).await.unwrap_err();
            assert!(e.is(libc::ENODATA), "{n}");
        }
    }
    assert_eq!(asked(), 4, "answered from memory");
    // A directory with a default ACL: its new files are asked.
    below
        .map
        .lock()
        .unwrap()
        .insert("system.posix_acl_default".into(), b"acl".to_vec());
    recall(&md, dir, None);
    let f3 = Gfid::random();
    md.call(&cx, create(f3)).await.unwrap();
    let n = asked();
    md.call(&cx, get(f3, "system.posix_acl_access")).await.ok();
    assert_eq!(asked(), n + 1);
}

/// Answers names changes with what they left (as a brick of wire
/// version 7), or with `Ok` only (`tell` false); getattr with a size
/// that counts the getattrs asked.
struct Names {
    tell: bool,
    getattrs: AtomicU64,
    lookups: AtomicU64,
}

#[async_trait]
impl Xlator for Names {
    fn name(&self) -> String {
        "names".into()
    }
    async fn call(&self, _: &Ctx, fop: Fop) -> FsResult<Reply> {
        let dir = |g| Attr {
            kind: mortar_core::FileKind::Dir,
            ..Attr::plain_file(g, 4096)
        };
        match fop {
            Fop::Getattr { gfid } => {
                let n = self.getattrs.fetch_add(1, Ordering::Relaxed);
                Ok(Reply::Attr(Attr::plain_file(gfid, n)))
            }
            Fop::Create { parent, gfid, .. } => Ok(Reply::Created {
                entry: mortar_core::Entry {
                    attr: Attr::plain_file(gfid, 0),
                    parent: self.tell.then(|| dir(parent)),
                },
                fh: 1,
            }),
            Fop::Lookup { .. } => {
                self.lookups.fetch_add(1, Ordering::Relaxed);
                Err(FsError::errno(libc::ENOENT))
            }
            Fop::Mkdir { gfid, .. } => Ok(Reply::Entry(mortar_core::Entry::found(dir(gfid)))),
            Fop::Unlink { parent, .. } if self.tell => {
                let gone = Attr {
                    nlink: 0,
                    ..Attr::plain_file(Gfid::random(), 0)
                };
                Ok(Reply::Unnamed(vec![dir(parent), gone]))
            }
            _ => Ok(Reply::Ok),
        }
    }
}

#[tokio::test]
async fn what_a_change_of_names_left_is_kept_and_the_rest_stays() {
    for tell in [true, false] {
        let below = Arc::new(Names {
            tell,
            getattrs: AtomicU64::new(0),
            lookups: AtomicU64::new(0),
        });
        let md = leased(below.clone());
        let (d, other, cx) = (Gfid::random(), Gfid::random(), Ctx::root());
        let asked = || below.getattrs.load(Ordering::Relaxed);
        let stat = |g| {
            let md = &md;
            let cx = cx.clone();
            async move { md.call(&cx, Fop::Getattr { gfid: g }).await.unwrap() }
        };
        stat(d).await;
        stat(other).await;
        assert_eq!(asked(), 2);
        let create = Fop::Create {
            parent: d,
            name: mortar_core::Name::new("f").unwrap(),
            gfid: Gfid::random(),
            mode: 0o644,
            umask: 0,
            flags: libc::O_RDWR,
        };
        md.call(&cx, create).await.unwrap();
        // The directory as the create left it: no request when told.
        let Reply::Attr(a) = stat(d).await else {
            panic!()
        };
        assert_eq!(asked(), if tell { 2 } else { 3 });
        assert_eq!(a.kind == mortar_core::FileKind::Dir, tell);
        let unlink = Fop::Unlink {
            parent: d,
            name: mortar_core::Name::new("f").unwrap(),
        };
        md.call(&cx, unlink).await.unwrap();
        let n = asked();
        stat(d).await;
        stat(other).await;
        // Told: the directory and every other object are still known.
        // Not told: the directory and every object are asked again
        // (the name's object is not known here).
        assert_eq!(asked(), if tell { n } else { n + 2 });
    }
}

#[tokio::test]
async fn names_missing_from_a_directory_made_here_are_answered_here() {
    let below = Arc::new(Names {
        tell: true,
        getattrs: AtomicU64::new(0),
        lookups: AtomicU64::new(0),
    });
    let md = leased(below.clone());
    let (d, cx) = (Gfid::random(), Ctx::root());
    let n = |s: &str| mortar_core::Name::new(s).unwrap();
    let asked = || below.lookups.load(Ordering::Relaxed);
    let lookup = |name: &str| Fop::Lookup {
        parent: d,
        name: n(name),
    };
    let mkdir = Fop::Mkdir {
        parent: Gfid::ROOT,
        name: n("d"),
        gfid: d,
        mode: 0o755,
        umask: 0,
    };
    md.call(&cx, mkdir).await.unwrap();
    // Its owner set after (as NFS clients do): its names stay known.
    let chown = Fop::Setattr {
        gfid: d,
        set: mortar_core::fop::SetAttr {
            uid: Some(1000),
            ..Default::default()
        },
    };
    md.call(&cx, chown).await.unwrap();
    // Empty: any name is missing, on the FUSE thread too.
    let e = md.call(&cx, lookup("x")).await.unwrap_err();
    assert!(e.is(libc::ENOENT));
    assert!(matches!(md.cached(&cx, &lookup("y")), Some(Err(e)) if e.is(libc::ENOENT)));
    assert_eq!(asked(), 0);
    // A name made here leads to what was made, with no request.
    let x = Gfid::random();
    let create = Fop::Create {
        parent: d,
        name: n("x"),
        gfid: x,
        mode: 0o644,
        umask: 0,
        flags: libc::O_RDWR,
    };
    md.call(&cx, create).await.unwrap();
    let found = md
        .call(&cx, lookup("x"))
        .await
        .unwrap()
        .into_entry()
        .unwrap();
    assert_eq!(found.attr.gfid, x);
    assert_eq!(asked(), 0);
    // Renamed (answered ahead): missing again, and the new name
    // leads to the file moved.
    let rename = Fop::Rename {
        parent: d,
        name: n("x"),
        newparent: d,
        newname: n("z"),
        flags: 0,
    };
    md.call(&cx, rename).await.unwrap();
    md.call(&cx, lookup("x")).await.unwrap_err();
    let moved = md.call(&cx, lookup("z")).await.unwrap();
    assert_eq!(moved.into_entry().unwrap().attr.gfid, x);
    assert_eq!(asked(), 0);
    // Another client's change: the brick recalls the directory first.
    recall(&md, d, Some(n("w")));
    md.call(&cx, lookup("w")).await.unwrap_err();
    assert!(md.cached(&cx, &lookup("w")).is_none());
    assert_eq!(asked(), 1);
}

/// Finds every name as an object of its own (the gfid its name
/// spells), and counts the lookups it is asked.
#[derive(Default)]
struct Found {
    lookups: AtomicU64,
}

fn spelled(name: &[u8]) -> Gfid {
    let mut g = [0u8; 16];
    g[..name.len().min(16)].copy_from_slice(&name[..name.len().min(16)]);
    Gfid(g)
}

#[async_trait]
impl Xlator for Found {
    fn name(&self) -> String {
        "found".into()
    }
    async fn call(&self, _: &Ctx, fop: Fop) -> FsResult<Reply> {
        match fop {
            Fop::Lookup { name, .. } => {
                self.lookups.fetch_add(1, Ordering::Relaxed);
                let a = Attr::plain_file(spelled(name.as_bytes()), 1);
                Ok(Reply::Entry(mortar_core::Entry::found(a)))
            }
            _ => Ok(Reply::Ok),
        }
    }
}

#[tokio::test]
async fn names_found_are_answered_here_until_recalled_or_changed_here() {
    let below = Arc::new(Found::default());
    let md = leased(below.clone());
    let (d, cx) = (Gfid::random(), Ctx::root());
    let n = |s: &str| mortar_core::Name::new(s).unwrap();
    let asked = || below.lookups.load(Ordering::Relaxed);
    let lookup = |name: &str| Fop::Lookup {
        parent: d,
        name: n(name),
    };
    let find = |name: &'static str| {
        let (md, cx) = (&md, cx.clone());
        async move {
            let e = md.call(&cx, lookup(name)).await.unwrap();
            e.into_entry().unwrap().attr.gfid
        }
    };
    // Found once, then answered here (the kernel asks again after it
    // dropped its own names).
    assert_eq!(find("a").await, spelled(b"a"));
    assert_eq!(find("a").await, spelled(b"a"));
    assert_eq!(find("b").await, spelled(b"b"));
    assert_eq!(asked(), 2);
    // Another client's change of a name in the directory: recalled
    // first; that name is asked again, the others are still known.
    recall(&md, d, Some(n("b")));
    find("a").await;
    assert_eq!(asked(), 2);
    find("b").await;
    assert_eq!(asked(), 3);
    // A change of the directory itself: all its names are asked again.
    recall(&md, d, None);
    find("a").await;
    assert_eq!(asked(), 4);
    // Another client's change of the object: its attributes go, and
    // the name is asked again.
    recall(&md, spelled(b"a"), None);
    find("a").await;
    assert_eq!(asked(), 5);
    // This mount's own unlink: asked again.
    md.call(
        &cx,
        Fop::Unlink {
            parent: d,
            name: n("a"),
        },
    )
    .await
    .unwrap();
    find("a").await;
    assert_eq!(asked(), 6);
    // A lookup answered while a recall came in is not kept.
    let mark = md.mark();
    md.notify(0, Event::LeasesLost);
    md.keep_found(d, &n("q"), (spelled(b"q"), FileKind::File), mark);
    find("q").await;
    assert_eq!(asked(), 7);
}

/// Answers a mkdir once let through (`gate`).
struct SlowMkdir {
    gate: tokio::sync::Semaphore,
}

#[async_trait]
impl Xlator for SlowMkdir {
    fn name(&self) -> String {
        "slow-mkdir".into()
    }
    async fn call(&self, _: &Ctx, fop: Fop) -> FsResult<Reply> {
        match fop {
            Fop::Mkdir { gfid, .. } => {
                self.gate.acquire().await.unwrap().forget();
                let attr = Attr {
                    kind: mortar_core::fop::FileKind::Dir,
                    ..Attr::plain_file(gfid, 4096)
                };
                Ok(Reply::Entry(mortar_core::Entry::found(attr)))
            }
            _ => Ok(Reply::Ok),
        }
    }
}

/// A directory made here is known empty though other objects of its
/// bucket change while it is made (a thousand writes landing bump one
/// mkdir's bucket in six); not when it is itself recalled meanwhile.
#[tokio::test]
async fn a_new_directory_is_known_empty_unless_it_changed_itself_while_made() {
    let below = Arc::new(SlowMkdir {
        gate: tokio::sync::Semaphore::new(0),
    });
    let md = leased(below.clone());
    for recalled in [false, true] {
        let d = Gfid::random();
        // Another object in the same bucket.
        let mut other = Gfid::random();
        other.0[14..].copy_from_slice(&d.0[14..]);
        let mkdir = Fop::Mkdir {
            parent: Gfid::ROOT,
            name: Name::new(if recalled { "r" } else { "d" }).unwrap(),
            gfid: d,
            mode: 0o755,
            umask: 0,
        };
        let (m, cx) = (md.clone(), Ctx::root());
        let made = tokio::spawn(async move { m.call(&cx, mkdir).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        md.bump(&other);
        if recalled {
            recall(&md, d, None);
        }
        below.gate.add_permits(1);
        made.await.unwrap().unwrap();
        assert_eq!(md.missing(d, b"x"), !recalled, "recalled: {recalled}");
    }
}
