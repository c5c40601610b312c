//! The NFS server, end to end: a volume served by the pool's NFS servers
//! (`nfs.disable off`), reached with libnfs's tools (this machine has no kernel NFS client),
//! beside a native mount of the same volume.

mod common;
use common::*;
use std::time::Duration;

const NFS_PORT: u16 = 2049;

/// `vol` served over NFS by the pool (`nfs.disable off`): its URL for
/// libnfs's tools.
fn nfs_on(c: &Cluster, vol: &str) -> String {
    need("nfs-ls", "libnfs-utils");
    c.ok(&["volume", "set", vol, "nfs.disable", "off"]);
    let addr = format!("{}:{NFS_PORT}", c.ip);
    wait_for("the NFS server", Duration::from_secs(20), || {
        std::net::TcpStream::connect(&addr).is_ok()
    });
    format!(
        "nfs://{}/{vol}?nfsport={NFS_PORT}&mountport={NFS_PORT}&version=3",
        c.ip
    )
}

/// `url` with `path` in the export.
fn at(url: &str, path: &str) -> String {
    let (base, query) = url.split_once('?').unwrap();
    format!("{base}/{path}?{query}")
}

/// Fails with what to install when `tool` is missing.
fn need(tool: &str, package: &str) {
    if sh(&format!("command -v {tool}")).status.success() {
        return;
    }
    panic!("{tool} is missing: install {package} (apt-get install {package})");
}

#[test]
fn files_written_through_nfs_read_through_a_mount_and_the_other_way() {
    let c = Cluster::start();
    c.volume("nv", 3, &["n1", "n2", "n3"]);
    let m = c.mount("nv");
    let url = nfs_on(&c, "nv");
    // Native to NFS.
    std::fs::create_dir(m.p("d")).unwrap();
    ok(&format!(
        "head -c 3000000 /dev/urandom > {} && echo hi > {}",
        m.p("d/big"),
        m.p("small")
    ));
    let listing = ok(&format!("nfs-ls '{}'", url));
    assert!(
        listing.contains("small") && listing.contains(" d"),
        "{listing}"
    );
    assert_eq!(ok(&format!("nfs-cat '{}'", at(&url, "small"))), "hi\n");
    let want = ok(&format!("md5sum < {}", m.p("d/big")));
    let got = ok(&format!("nfs-cat '{}' | md5sum", at(&url, "d/big")));
    assert_eq!(got, want);
    // NFS to native.
    let src = c.path("src");
    ok(&format!("head -c 2500000 /dev/urandom > {}", src.display()));
    ok(&format!(
        "nfs-cp {} '{}'",
        src.display(),
        at(&url, "d/copied")
    ));
    let want = ok(&format!("md5sum < {}", src.display()));
    assert_eq!(ok(&format!("md5sum < {}", m.p("d/copied"))), want);
}

#[test]
fn the_nfs_server_follows_nfs_disable() {
    let c = Cluster::start();
    c.volume("nd", 1, &["d1"]);
    let url = nfs_on(&c, "nd");
    assert!(ok(&format!("nfs-ls '{url}'")).is_empty());
    c.ok(&["volume", "set", "nd", "nfs.disable", "on"]);
    let addr = format!("{}:{NFS_PORT}", c.ip);
    wait_for("the NFS server to stop", Duration::from_secs(20), || {
        std::net::TcpStream::connect(&addr).is_err()
    });
    let log = std::fs::read_to_string(c.path("daemon.log")).unwrap();
    assert!(log.contains("NFS server stopped"), "{log}");
}
