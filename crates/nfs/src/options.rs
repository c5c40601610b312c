//! The volume options of NFS access (GlusterFS's names), declared in the
//! translator table's `mgmt/nfs-server` row.

use mortar_core::options::{Kind, Spec};

/// Read by the daemon: whether the pool's NFS servers leave the volume
/// out.
pub static NFS_DISABLE: Spec = Spec {
    key: "nfs.disable",
    kind: Kind::Bool,
    default: "on",
    help: "off: every server of the pool serves the volume over NFSv3 (and MOUNT) at nfs.port, as /VOLUME (docs/nfs.md); on: not over NFS.",
};

/// Read by the NFS server.
pub static NFS_VOLUME_ACCESS: Spec = Spec {
    key: "nfs.volume-access",
    kind: Kind::Enum(&["read-write", "read-only"]),
    default: "read-write",
    help: "read-only: NFS clients may read the volume but change nothing (NFS3ERR_ROFS); native mounts are not affected.",
};

/// Read by the NFS server.
pub static NFS_EXPORT_VOLUMES: Spec = Spec {
    key: "nfs.export-volumes",
    kind: Kind::Bool,
    default: "on",
    help: "off: NFS clients may not mount the volume whole (/VOLUME), only the directories nfs.export-dir and nfs.export-dirs allow.",
};

/// Read by the NFS server.
pub static NFS_EXPORT_DIRS: Spec = Spec {
    key: "nfs.export-dirs",
    kind: Kind::Bool,
    default: "on",
    help: "on: NFS clients may mount directories of the volume (/VOLUME/DIR): those nfs.export-dir lists if it lists any, else every one. A client that mounted a directory is kept beneath it (docs/nfs.md). off: only the whole volume.",
};

/// Read by the NFS server.
pub static NFS_EXPORT_DIR: Spec = Spec {
    key: "nfs.export-dir",
    kind: Kind::DirExports,
    default: "",
    help: "The directories NFS clients may mount, each for the clients in parentheses or, without them, for every client the volume takes: /DIR[(HOST|NETWORK|...)], comma-separated, as /foo(192.168.1.0/24|host1),/bar. Empty: every directory (with nfs.export-dirs on).",
};

/// Read by the NFS server (`src/nfsd.rs`), which sets its graphs'
/// `performance.write-behind` from it.
pub static NFS_WRITE_BEHIND: Spec = Spec {
    key: "performance.nfs.write-behind",
    kind: Kind::Bool,
    default: "off",
    help: "on: the NFS server answers an UNSTABLE WRITE from its memory and sends it to the bricks behind (faster for clients that send one write at a time); if the server dies first, the write is lost and its write verifier changes, which the Linux and macOS clients notice and send again, but libnfs's (fuse-nfs, nfs-cp) do not. off: an UNSTABLE WRITE is answered once the bricks hold it (GlusterFS's gNFS default was on).",
};
