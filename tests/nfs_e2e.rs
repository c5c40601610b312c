//! The NFS server, end to end: a volume served by `mortar nfs-server`,
//! reached with libnfs's tools (this machine has no kernel NFS client),
//! beside a native mount of the same volume.

mod common;
use common::*;
use std::time::Duration;

/// An NFS server of `vol`, killed when dropped.
struct NfsServer {
    child: std::process::Child,
    url: String,
}

impl Drop for NfsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const NFS_PORT: u16 = 2049;

fn nfs_server(c: &Cluster, vol: &str) -> NfsServer {
    need("nfs-ls", "libnfs-utils");
    let log = std::fs::File::create(c.path("nfs.log")).unwrap();
    let child = std::process::Command::new(BIN)
        .args(["nfs-server", "--listen"])
        .arg(format!("{}:{NFS_PORT}", c.ip))
        .arg("--mgmt")
        .arg(format!("{}:{PORT}", c.ip))
        .arg("--server-credential")
        .arg(c.credential())
        .arg(vol)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let addr = format!("{}:{NFS_PORT}", c.ip);
    wait_for("the NFS server", Duration::from_secs(20), || {
        std::net::TcpStream::connect(&addr).is_ok()
    });
    NfsServer {
        child,
        url: format!(
            "nfs://{}/{vol}?nfsport={NFS_PORT}&mountport={NFS_PORT}&version=3",
            c.ip
        ),
    }
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
    let nfs = nfs_server(&c, "nv");
    // Native to NFS.
    std::fs::create_dir(m.p("d")).unwrap();
    ok(&format!(
        "head -c 3000000 /dev/urandom > {} && echo hi > {}",
        m.p("d/big"),
        m.p("small")
    ));
    let listing = ok(&format!("nfs-ls '{}'", nfs.url));
    assert!(
        listing.contains("small") && listing.contains(" d"),
        "{listing}"
    );
    assert_eq!(ok(&format!("nfs-cat '{}'", at(&nfs.url, "small"))), "hi\n");
    let want = ok(&format!("md5sum < {}", m.p("d/big")));
    let got = ok(&format!("nfs-cat '{}' | md5sum", at(&nfs.url, "d/big")));
    assert_eq!(got, want);
    // NFS to native.
    let src = c.path("src");
    ok(&format!("head -c 2500000 /dev/urandom > {}", src.display()));
    ok(&format!(
        "nfs-cp {} '{}'",
        src.display(),
        at(&nfs.url, "d/copied")
    ));
    let want = ok(&format!("md5sum < {}", src.display()));
    assert_eq!(ok(&format!("md5sum < {}", m.p("d/copied"))), want);
}
