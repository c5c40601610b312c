//! A machine whose own portmapper (rpcbind) holds port 111: the NFS server
//! registers NFS and MOUNT with it (`nfs.register-with-portmap`, on by
//! default), so that `rpcinfo` and `showmount` find them, and takes them
//! out again when it stops.

use super::*;

/// rpcbind in a host's network namespace, with a `/run` of its own (its
/// socket and state apart from the machine's); killed when dropped.
struct Rpcbind(std::process::Child);

impl Rpcbind {
    fn start(netns: &str) -> Rpcbind {
        let child = std::process::Command::new("nsenter")
            .arg(format!("--net=/run/netns/{netns}"))
            .args(["unshare", "-m", "sh", "-c"])
            .arg("mount -t tmpfs none /run && exec rpcbind -f")
            .spawn()
            .unwrap();
        Rpcbind(child)
    }
}

impl Drop for Rpcbind {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_machines_rpcbind_is_told_where_nfs_and_mount_are() {
    need("rpcbind", "rpcbind");
    need("rpcinfo", "rpcbind");
    need("showmount", "nfs-common");
    let net = Net::new(1);
    let a = &net.hosts[0];
    let _rpcbind = Rpcbind::start(net.netns(0));
    let programs =
        || String::from_utf8_lossy(&sh(&format!("rpcinfo -p {}", a.ip)).stdout).into_owned();
    wait_for("rpcbind", Duration::from_secs(10), || {
        programs().contains("portmapper")
    });
    let brick = a.brick("p");
    a.ok(&["volume", "create", "pv", &brick, "force"]);
    a.ok(&["volume", "start", "pv"]);
    a.ok(&["volume", "set", "pv", "nfs.disable", "off"]);
    let has = |text: &str, row: [&str; 5]| text.lines().any(|l| l.split_whitespace().eq(row));
    wait_for(
        "NFS registered with rpcbind",
        Duration::from_secs(30),
        || {
            let p = programs();
            has(&p, ["100003", "3", "tcp", "2049", "nfs"])
                && has(&p, ["100005", "3", "tcp", "2049", "mountd"])
        },
    );
    let exports = ok(&format!("showmount -e {}", a.ip));
    assert!(exports.lines().any(|l| l.starts_with("/pv ")), "{exports}");
    // Off: the server is started again without, and its forerunner took
    // its registration out.
    a.ok(&["volume", "set", "all", "nfs.register-with-portmap", "off"]);
    wait_for("NFS taken out of rpcbind", Duration::from_secs(30), || {
        !programs().contains("nfs")
    });
    assert!(programs().contains("portmapper"));
}
