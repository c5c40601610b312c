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
