//! File operations as data. One `Fop` value is one request travelling down
//! the translator stack (and over the wire to a brick); one `Reply` value is
//! its answer. Serde derives give the wire encoding, `Fop::name` the name
//! used in logs and metrics, and `Fop::is_modifying` the replicate
//! translator's fan-out rule, so nothing is written once per operation by
//! hand.
//!
//! Objects are named the way a brick can resolve safely: by gfid, or by a
//! parent directory's gfid and one validated name component.

use super::{FsError, FsResult, Gfid};
use serde::{Deserialize, Serialize};

pub use super::name::{Name, NAME_MAX};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

impl FileKind {
    pub fn from_mode(mode: u32) -> FileKind {
        match mode & libc::S_IFMT {
            libc::S_IFDIR => FileKind::Dir,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDev,
            libc::S_IFBLK => FileKind::BlockDev,
            _ => FileKind::File,
        }
    }

    /// The file type bits of a mode (`S_IFREG` and so on): what `mknod`
    /// is given to make an object of this kind.
    pub fn type_bits(self) -> u32 {
        match self {
            FileKind::File => libc::S_IFREG,
            FileKind::Dir => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDev => libc::S_IFCHR,
            FileKind::BlockDev => libc::S_IFBLK,
        }
    }
}

/// A blame bit that names no replica: this copy took a change whose outcome
/// is unknown (the change reached no quorum, or only copies that had missed
/// earlier changes, and the application was told it failed). It blames
/// nobody, so the copy is no source of its own accord; it keeps the object
/// in the heal index until heal has compared every copy
/// (docs/replication.md).
pub const UNSETTLED: u32 = 1 << 31;

/// Attributes of one object as a brick reports them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    pub gfid: Gfid,
    pub kind: FileKind,
    /// Permission bits and set-id/sticky bits (no file type bits).
    pub perm: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    pub size: u64,
    pub blocks: u64,
    pub blksize: u32,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    /// Replica positions this copy knows to have missed changes (its
    /// `trusted.mortar.blame` xattr; see docs/replication.md). Zero when
    /// nothing is pending. Bit `UNSETTLED` is no replica: see there.
    pub blame: u32,
    /// For a distribute pointer (docs/distribute.md): the stable id of the
    /// replica set holding the file this name stands for. A brick reports
    /// it for a regular file of mode `POINTER_PERM` carrying
    /// `LINKTO_XATTR`; None for every other object.
    pub linkto: Option<u32>,
    /// Which of `WATCHED_XATTRS` the object carries (bit `i` for name
    /// `i`), as its brick listed them with these attributes; None where
    /// they were not listed. A mount then answers that the others are
    /// missing without asking (`performance/md-cache`).
    pub watched: Option<u8>,
}

/// The xattrs a kernel asks about of its own accord: the security label
/// and the access ACL of every entry `ls -l` shows, a directory's default
/// ACL, and a file's capabilities before every write. A brick reports
/// which of them an object has with its attributes (`Attr::watched`), as
/// GlusterFS's bricks return the xattrs md-cache names in a lookup's or
/// readdirplus's answer.
pub const WATCHED_XATTRS: [&str; 4] = [
    "security.selinux",
    "system.posix_acl_access",
    "system.posix_acl_default",
    "security.capability",
];

impl Attr {
    /// Whether the object is known to have no xattr `name` (one of
    /// `WATCHED_XATTRS` its brick listed without it).
    pub fn lacks(&self, name: &str) -> bool {
        let Some(bits) = self.watched else {
            return false;
        };
        WATCHED_XATTRS
            .iter()
            .position(|w| *w == name)
            .is_some_and(|i| bits & (1 << i) == 0)
    }

    /// A regular file (0644, one link, owned by root, all times zero) of
    /// this id and size: for tests and placeholders.
    pub fn plain_file(gfid: Gfid, size: u64) -> Attr {
        Attr {
            gfid,
            kind: FileKind::File,
            perm: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            size,
            blocks: 0,
            blksize: 4096,
            atime: (0, 0),
            mtime: (0, 0),
            ctime: (0, 0),
            blame: 0,
            linkto: None,
            watched: None,
        }
    }
}

/// Where the distribute translator keeps a directory's layout, on every
/// copy of the directory (docs/distribute.md). Bricks let clients (root)
/// read and write it; the mount never shows it.
pub const LAYOUT_XATTR: &str = "trusted.mortar.layout";
/// The set a pointer names, as 4 little-endian bytes.
pub const LINKTO_XATTR: &str = "trusted.mortar.linkto";
/// The permission bits of a pointer: `---------T`.
pub const POINTER_PERM: u32 = 0o1000;

/// Read-only, answered by a brick: how many handles clients hold open on
/// the file there (a rebalance does not move a file in use).
pub const OPEN_COUNT_XATTR: &str = "trusted.mortar.open-count";

/// Set by a rebalance on a file it is moving, answered by the brick
/// (`brick::hold`), never stored: a number of seconds holds the file for
/// the connection that set it (every other one gets ESTALE for changes and
/// opens), `moved` marks it gone from this brick (ESTALE to everything but
/// closing, on every handle left), removing it ends the hold.
pub const HOLD_XATTR: &str = "trusted.mortar.hold";
/// The daemon's requests of a brick's own layers are virtual xattrs of
/// its root under this prefix (`debug/profile`, `features/barrier`):
/// never stored, and no change of the root.
pub const BRICK_CONTROL_PREFIX: &str = "trusted.mortar.brick.";
/// How long a rebalance holds a file at most (if it dies holding it, the
/// file is free again after that); clients wait that long for a held file.
pub const HOLD_LEASE: std::time::Duration = std::time::Duration::from_secs(60);

/// Internal xattrs that clients may use through a brick (distribute's
/// bookkeeping); heal copies the stored ones like any xattr.
pub fn is_distribute_xattr(name: &str) -> bool {
    name == LAYOUT_XATTR || name == LINKTO_XATTR || name == OPEN_COUNT_XATTR || name == HOLD_XATTR
}

/// A name that was looked up or created, with what it refers to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub attr: Attr,
    /// For a name made by this request (create, mknod, mkdir, symlink,
    /// link): its directory's attributes right after, when the brick
    /// could tell; a client keeps them instead of asking
    /// (`performance/md-cache`). None for a lookup.
    pub parent: Option<Attr>,
}

impl Entry {
    /// An entry found (no directory attributes with it).
    pub fn found(attr: Attr) -> Entry {
        Entry { attr, parent: None }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: serde_bytes::ByteBuf,
    pub kind: FileKind,
    /// The brick-side offset of the entry after this one.
    pub next: u64,
    /// Present for readdirplus when the entry's gfid is known.
    pub attr: Option<Attr>,
    /// Whether the kernel may cache `attr`. A replicate translator clears it
    /// when the attributes come from a copy other than the one it answers
    /// every other question about this object from.
    pub cacheable: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeSet {
    Now,
    At(i64, u32),
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatFs {
    pub bsize: u32,
    pub frsize: u32,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub namelen: u32,
}

/// The handle a client uses to read a file it never opened on a brick
/// (GlusterFS's anonymous fd): the brick opens the file by gfid, read-only,
/// and keeps it for the connection. Saves a round trip per read-only open.
/// Real handles start at 1.
pub const ANON_FH: u64 = 0;

/// Handles with this bit set are given by a create answered before the
/// bricks made the file (`performance/md-cache`'s changes ahead; the
/// translators below it count theirs from 1). The attributes answered with
/// one are the client's guess, which the bricks' own times replace once
/// the create lands: the mount drops the kernel's copy when the file is
/// closed.
pub const AHEAD_FH: u64 = 1 << 63;

/// Whether handle `fh` was given by a create answered ahead (`AHEAD_FH`).
pub fn is_ahead(fh: u64) -> bool {
    fh & AHEAD_FH != 0
}

/// Every file operation. `fh` values are handles issued by the layer the
/// operation is sent to (each translator maps its own to its children's).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Fop {
    Lookup {
        parent: Gfid,
        name: Name,
    },
    Getattr {
        gfid: Gfid,
    },
    Setattr {
        gfid: Gfid,
        set: SetAttr,
    },
    Mknod {
        parent: Gfid,
        name: Name,
        gfid: Gfid,
        mode: u32,
        umask: u32,
        rdev: u64,
        /// Makes the new file a distribute pointer to this set
        /// (`LINKTO_XATTR`, set with the gfid).
        linkto: Option<u32>,
    },
    Create {
        parent: Gfid,
        name: Name,
        gfid: Gfid,
        mode: u32,
        umask: u32,
        flags: i32,
    },
    Mkdir {
        parent: Gfid,
        name: Name,
        gfid: Gfid,
        mode: u32,
        umask: u32,
    },
    Unlink {
        parent: Gfid,
        name: Name,
    },
    Rmdir {
        parent: Gfid,
        name: Name,
    },
    Rename {
        parent: Gfid,
        name: Name,
        newparent: Gfid,
        newname: Name,
        flags: u32,
    },
    Link {
        gfid: Gfid,
        newparent: Gfid,
        newname: Name,
    },
    Symlink {
        parent: Gfid,
        name: Name,
        gfid: Gfid,
        target: serde_bytes::ByteBuf,
    },
    Readlink {
        gfid: Gfid,
    },
    Open {
        gfid: Gfid,
        flags: i32,
    },
    Read {
        gfid: Gfid,
        fh: u64,
        offset: u64,
        size: u32,
    },
    Write {
        gfid: Gfid,
        fh: u64,
        offset: u64,
        /// Carried as the frame's payload, not inside the encoded header,
        /// so that one buffer serves every replica without a copy.
        #[serde(skip)]
        data: bytes::Bytes,
        /// Then lengthens the file to at least this many bytes, never
        /// shortening it (0: leaves its length to the write): a dispersed
        /// file's fragments are each as long as the file
        /// (docs/disperse.md), including those a write gives no bytes.
        grow: u64,
        /// May use the room the brick keeps free (`storage.reserve`): a
        /// fragment's part of a dispersed write for which room was set
        /// aside first (a `Fallocate` the reserve allowed), or that the
        /// other fragments already took. Other writes are refused with
        /// ENOSPC, changing nothing, once the brick's free space would fall
        /// within the reserve.
        reserve: bool,
    },
    Flush {
        gfid: Gfid,
        fh: u64,
    },
    Fsync {
        gfid: Gfid,
        fh: u64,
        datasync: bool,
    },
    Release {
        gfid: Gfid,
        fh: u64,
    },
    Fallocate {
        gfid: Gfid,
        fh: u64,
        mode: i32,
        offset: u64,
        len: u64,
    },
    Lseek {
        gfid: Gfid,
        fh: u64,
        offset: u64,
        whence: i32,
    },
    Opendir {
        gfid: Gfid,
    },
    Readdir {
        gfid: Gfid,
        fh: u64,
        offset: u64,
        plus: bool,
    },
    Releasedir {
        gfid: Gfid,
        fh: u64,
    },
    Statfs {
        gfid: Gfid,
    },
    Setxattr {
        gfid: Gfid,
        name: String,
        value: serde_bytes::ByteBuf,
        flags: i32,
    },
    Getxattr {
        gfid: Gfid,
        name: String,
    },
    Listxattr {
        gfid: Gfid,
    },
    Removexattr {
        gfid: Gfid,
        name: String,
    },
    // Replication bookkeeping (docs/replication.md). Sent by the replicate
    // translator and the self-heal daemon, never by the FUSE layer.
    /// Takes the object's lock for this connection (granted at once if this
    /// connection holds it already), waiting for it or failing with EAGAIN
    /// when `wait` is false. With `mark`, also opens this connection's change
    /// session on the object (it enters the brick's heal index until the
    /// session ends) and adds `mark` to the replica positions it blames.
    Lock {
        gfid: Gfid,
        wait: bool,
        mark: Option<u32>,
    },
    /// Ends this connection's change sessions on the objects (every replica
    /// sent a change got it) and releases their locks.
    Unlock {
        gfids: Vec<Gfid>,
    },
    /// Heal: removes `unblame` from the object's blame, and the object from
    /// the heal index when nothing is left pending on it. Answers the blame
    /// left.
    Clear {
        gfid: Gfid,
        unblame: u32,
    },
    /// The brick's heal index: objects that may differ between replicas,
    /// with the bytes of their copies here a heal would compare
    /// (`Reply::Pending`).
    Pending {
        max: u32,
    },
    /// The objects this brick's copies blame other copies of, with the
    /// blame: `max` at most (`max + 1` answered means there are more). A
    /// copy that missed a change does not know it; its peers do, so a
    /// client asks them before trusting one copy's directory listing.
    Blamed {
        max: u32,
    },
    /// A hash of each `block`-sized piece of a file's data, from `offset`,
    /// `count` pieces at most (fewer at the end of the file).
    Checksum {
        gfid: Gfid,
        offset: u64,
        block: u32,
        count: u32,
    },
    /// The object whose inode number is `ino` (the first eight bytes of its
    /// gfid, `Gfid::ino`), found in the brick's gfid index: how
    /// a file handle the kernel exported (`open_by_handle_at`, NFS) finds
    /// its object after the client forgot it. Answers an entry or ESTALE.
    Resolve {
        ino: u64,
    },
    /// The directory holding directory `gfid` (the root's is itself): how
    /// the kernel reconnects a directory it found by file handle to the
    /// tree. Answers an entry.
    Parent {
        gfid: Gfid,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Reply {
    Ok,
    Entry(Entry),
    Attr(Attr),
    Created {
        entry: Entry,
        fh: u64,
    },
    Opened {
        fh: u64,
    },
    /// File data or a link target; carried as the frame's payload.
    Data(#[serde(skip)] bytes::Bytes),
    /// Bytes written, and the file's attributes right after the write
    /// (what a stat would answer), when the brick could tell them: a
    /// client keeps them instead of asking (`performance/md-cache`).
    Written(u32, Option<Attr>),
    /// What a change of names (unlink, rmdir, rename) left its
    /// directories and the objects it removed, replaced or moved with,
    /// right after it (an object whose last name went has `nlink` 0): all
    /// of them, or `Ok` when the brick could not tell. A client keeps them
    /// instead of asking.
    Unnamed(Vec<Attr>),
    Offset(u64),
    Entries(Vec<DirEntry>),
    /// The first entries of a listing read without opening the directory
    /// (`Readdir` through `ANON_FH` at offset 0), and the handle to read
    /// the rest through (released with `Releasedir`), when there is more.
    Listed(Vec<DirEntry>, Option<u64>),
    StatFs(StatFs),
    Xattr(serde_bytes::ByteBuf),
    /// The objects of a brick's heal index (`Fop::Pending`), and the bytes
    /// of their copies there that a heal would compare: the ranges
    /// recorded as changed, the whole copy where none is.
    Pending(Vec<Gfid>, u64),
    Sums(Vec<u64>),
    /// The blame left on an object (`Fop::Clear`).
    Blame(u32),
    /// Objects and the replica positions they blame (`Fop::Blamed`).
    Blames(Vec<(Gfid, u32)>),
}

impl Fop {
    /// Name used in logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Fop::Lookup { .. } => "lookup",
            Fop::Getattr { .. } => "getattr",
            Fop::Setattr { .. } => "setattr",
            Fop::Mknod { .. } => "mknod",
            Fop::Create { .. } => "create",
            Fop::Mkdir { .. } => "mkdir",
            Fop::Unlink { .. } => "unlink",
            Fop::Rmdir { .. } => "rmdir",
            Fop::Rename { .. } => "rename",
            Fop::Link { .. } => "link",
            Fop::Symlink { .. } => "symlink",
            Fop::Readlink { .. } => "readlink",
            Fop::Open { .. } => "open",
            Fop::Read { .. } => "read",
            Fop::Write { .. } => "write",
            Fop::Flush { .. } => "flush",
            Fop::Fsync { .. } => "fsync",
            Fop::Release { .. } => "release",
            Fop::Fallocate { .. } => "fallocate",
            Fop::Lseek { .. } => "lseek",
            Fop::Opendir { .. } => "opendir",
            Fop::Readdir { .. } => "readdir",
            Fop::Releasedir { .. } => "releasedir",
            Fop::Statfs { .. } => "statfs",
            Fop::Setxattr { .. } => "setxattr",
            Fop::Getxattr { .. } => "getxattr",
            Fop::Listxattr { .. } => "listxattr",
            Fop::Removexattr { .. } => "removexattr",
            Fop::Lock { .. } => "lock",
            Fop::Unlock { .. } => "unlock",
            Fop::Clear { .. } => "clear",
            Fop::Pending { .. } => "pending",
            Fop::Blamed { .. } => "blamed",
            Fop::Checksum { .. } => "checksum",
            Fop::Resolve { .. } => "resolve",
            Fop::Parent { .. } => "parent",
        }
    }

    /// The name the operation is about, for those about one (the new
    /// name of a rename or link), as the logs show it.
    pub fn entry_name(&self) -> Option<&Name> {
        match self {
            Fop::Lookup { name, .. }
            | Fop::Mknod { name, .. }
            | Fop::Create { name, .. }
            | Fop::Mkdir { name, .. }
            | Fop::Unlink { name, .. }
            | Fop::Rmdir { name, .. }
            | Fop::Symlink { name, .. } => Some(name),
            Fop::Rename { newname, .. } | Fop::Link { newname, .. } => Some(newname),
            Fop::Getattr { .. }
            | Fop::Setattr { .. }
            | Fop::Readlink { .. }
            | Fop::Open { .. }
            | Fop::Read { .. }
            | Fop::Write { .. }
            | Fop::Flush { .. }
            | Fop::Fsync { .. }
            | Fop::Release { .. }
            | Fop::Fallocate { .. }
            | Fop::Lseek { .. }
            | Fop::Opendir { .. }
            | Fop::Readdir { .. }
            | Fop::Releasedir { .. }
            | Fop::Statfs { .. }
            | Fop::Setxattr { .. }
            | Fop::Getxattr { .. }
            | Fop::Listxattr { .. }
            | Fop::Removexattr { .. }
            | Fop::Lock { .. }
            | Fop::Unlock { .. }
            | Fop::Clear { .. }
            | Fop::Pending { .. }
            | Fop::Blamed { .. }
            | Fop::Checksum { .. }
            | Fop::Resolve { .. }
            | Fop::Parent { .. } => None,
        }
    }

    /// The object the operation is about: the object itself, the new
    /// object for creations, the parent directory for name operations
    /// (`Gfid::NULL` for requests about a whole brick).
    pub fn gfid(&self) -> Gfid {
        match self {
            Fop::Getattr { gfid }
            | Fop::Parent { gfid }
            | Fop::Setattr { gfid, .. }
            | Fop::Link { gfid, .. }
            | Fop::Readlink { gfid }
            | Fop::Open { gfid, .. }
            | Fop::Read { gfid, .. }
            | Fop::Write { gfid, .. }
            | Fop::Flush { gfid, .. }
            | Fop::Fsync { gfid, .. }
            | Fop::Release { gfid, .. }
            | Fop::Fallocate { gfid, .. }
            | Fop::Lseek { gfid, .. }
            | Fop::Opendir { gfid }
            | Fop::Readdir { gfid, .. }
            | Fop::Releasedir { gfid, .. }
            | Fop::Statfs { gfid }
            | Fop::Setxattr { gfid, .. }
            | Fop::Getxattr { gfid, .. }
            | Fop::Listxattr { gfid }
            | Fop::Removexattr { gfid, .. }
            | Fop::Mknod { gfid, .. }
            | Fop::Create { gfid, .. }
            | Fop::Mkdir { gfid, .. }
            | Fop::Symlink { gfid, .. }
            | Fop::Lock { gfid, .. }
            | Fop::Clear { gfid, .. }
            | Fop::Checksum { gfid, .. } => *gfid,
            Fop::Lookup { parent, .. }
            | Fop::Unlink { parent, .. }
            | Fop::Rmdir { parent, .. }
            | Fop::Rename { parent, .. } => *parent,
            Fop::Unlock { .. } | Fop::Pending { .. } | Fop::Blamed { .. } | Fop::Resolve { .. } => {
                Gfid::NULL
            }
        }
    }

    /// The handle the operation uses, for operations on an open file or
    /// directory.
    pub fn fh(&self) -> Option<u64> {
        match self {
            Fop::Read { fh, .. }
            | Fop::Write { fh, .. }
            | Fop::Flush { fh, .. }
            | Fop::Fsync { fh, .. }
            | Fop::Release { fh, .. }
            | Fop::Fallocate { fh, .. }
            | Fop::Lseek { fh, .. }
            | Fop::Readdir { fh, .. }
            | Fop::Releasedir { fh, .. } => Some(*fh),
            _ => None,
        }
    }

    /// The same operation on another handle: how a translator that issues
    /// its own handles passes an operation to a child, which knows the
    /// child's handle instead. Operations without a handle are unchanged.
    pub fn with_fh(mut self, new: u64) -> Fop {
        match &mut self {
            Fop::Read { fh, .. }
            | Fop::Write { fh, .. }
            | Fop::Flush { fh, .. }
            | Fop::Fsync { fh, .. }
            | Fop::Release { fh, .. }
            | Fop::Fallocate { fh, .. }
            | Fop::Lseek { fh, .. }
            | Fop::Readdir { fh, .. }
            | Fop::Releasedir { fh, .. } => *fh = new,
            _ => {}
        }
        self
    }

    /// True for operations that change data, metadata or the namespace:
    /// the replicate translator sends these to every replica.
    pub fn is_modifying(&self) -> bool {
        matches!(
            self,
            Fop::Setattr { .. }
                | Fop::Mknod { .. }
                | Fop::Create { .. }
                | Fop::Mkdir { .. }
                | Fop::Unlink { .. }
                | Fop::Rmdir { .. }
                | Fop::Rename { .. }
                | Fop::Link { .. }
                | Fop::Symlink { .. }
                | Fop::Write { .. }
                | Fop::Fsync { .. }
                | Fop::Fallocate { .. }
                | Fop::Setxattr { .. }
                | Fop::Removexattr { .. }
        )
    }
}

impl Reply {
    pub fn into_entry(self) -> FsResult<Entry> {
        match self {
            Reply::Entry(e) | Reply::Created { entry: e, .. } => Ok(e),
            other => Err(unexpected(other)),
        }
    }
    pub fn into_attr(self) -> FsResult<Attr> {
        match self {
            Reply::Attr(a) => Ok(a),
            Reply::Entry(e) => Ok(e.attr),
            other => Err(unexpected(other)),
        }
    }
    pub fn into_fh(self) -> FsResult<u64> {
        match self {
            Reply::Opened { fh } | Reply::Created { fh, .. } => Ok(fh),
            other => Err(unexpected(other)),
        }
    }
}

pub fn unexpected(r: Reply) -> FsError {
    FsError::new(libc::EIO, format!("unexpected reply {r:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_and_its_type_bits_agree() {
        use FileKind::*;
        for k in [File, Dir, Symlink, Fifo, Socket, CharDev, BlockDev] {
            assert_eq!(FileKind::from_mode(k.type_bits() | 0o644), k);
        }
    }

    #[test]
    fn names_that_could_escape_are_refused() {
        for bad in [&b""[..], b".", b"..", b"a/b", b"/", b"a\0b"] {
            assert!(Name::new(bad.to_vec()).is_err(), "{bad:?}");
        }
        assert_eq!(
            Name::new(vec![b'x'; 256]).unwrap_err().errno,
            libc::ENAMETOOLONG
        );
        assert!(Name::new(vec![b'x'; 255]).is_ok());
        assert!(Name::new(&b"...hidden"[..]).is_ok());
    }

    #[test]
    fn handles_are_swapped_without_touching_the_rest() {
        let g = Gfid::random();
        let w = Fop::Write {
            gfid: g,
            fh: 3,
            offset: 10,
            data: bytes::Bytes::from_static(b"abc"),
            grow: 0,
            reserve: false,
        };
        assert_eq!((w.gfid(), w.fh()), (g, Some(3)));
        match w.with_fh(9) {
            Fop::Write {
                gfid,
                fh,
                offset,
                data,
                grow: 0,
                reserve: false,
            } => assert_eq!((gfid, fh, offset, &data[..]), (g, 9, 10, &b"abc"[..])),
            other => panic!("{other:?}"),
        }
        let l = Fop::Getattr { gfid: g };
        assert_eq!(l.fh(), None);
        assert!(matches!(l.with_fh(4), Fop::Getattr { gfid } if gfid == g));
    }

    #[test]
    fn decoding_validates_names() {
        // A hostile peer cannot smuggle "../x" past Name::new through the wire.
        let raw = postcard::to_allocvec(&serde_bytes::ByteBuf::from(b"../x".to_vec())).unwrap();
        assert!(postcard::from_bytes::<Name>(&raw).is_err());
        let ok = postcard::to_allocvec(&Name::new(&b"x"[..]).unwrap()).unwrap();
        assert_eq!(postcard::from_bytes::<Name>(&ok).unwrap().as_bytes(), b"x");
    }
}
