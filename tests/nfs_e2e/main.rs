//! The NFS server, end to end: a volume served by the pool's NFS servers
//! (`nfs.disable off`), reached with libnfs's tools (this machine has no kernel NFS client),
//! beside a native mount of the same volume.

#[path = "../common/mod.rs"]
mod common;
mod rpcbind;
use common::net::Net;
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

/// The first NFS server's row for `vol` in `volume status --json`:
/// online, pid, why not online.
fn nfs_status(c: &Cluster, vol: &str) -> (bool, Option<u64>, String) {
    let n = &c.volume_status_json(vol)[0]["nfs"][0];
    (
        n["online"].as_bool().unwrap_or(false),
        n["pid"].as_u64(),
        n["reason"].as_str().unwrap_or_default().to_string(),
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
    // What the mount has looked up (and caches: a name that is not there)
    // made through NFS: the mount sees it. A file the NFS server has read
    // (and its graph caches) changed through the mount: NFS clients read
    // the new content.
    assert!(std::fs::metadata(m.p("fresh")).is_err());
    std::fs::write(&src, b"made through nfs\n").unwrap();
    ok(&format!("nfs-cp {} '{}'", src.display(), at(&url, "fresh")));
    wait_for(
        "the mount to see the file made through NFS",
        Duration::from_secs(5),
        || std::fs::read(m.p("fresh")).is_ok_and(|b| b == b"made through nfs\n"),
    );
    assert_eq!(ok(&format!("nfs-cat '{}'", at(&url, "small"))), "hi\n");
    std::fs::write(m.p("small"), b"changed natively\n").unwrap();
    assert_eq!(
        ok(&format!("nfs-cat '{}'", at(&url, "small"))),
        "changed natively\n"
    );
}

#[test]
fn the_nfs_server_follows_the_volume_access_and_nfs_disable() {
    let c = Cluster::start();
    c.volume("nd", 1, &["d1"]);
    let url = nfs_on(&c, "nd");
    assert!(ok(&format!("nfs-ls '{url}'")).is_empty());
    // `volume status` lists the pool's NFS servers, as GlusterFS does.
    let (online, pid, _) = nfs_status(&c, "nd");
    assert!(online, "{}", c.ok(&["volume", "status", "nd"]));
    let text = c.ok(&["volume", "status", "nd"]);
    assert!(
        text.lines().any(|l| l.starts_with("NFS Server on")
            && l.contains(&format!("2049      N/A        Y       {}", pid.unwrap()))),
        "{text}"
    );
    // Its port taken: it cannot listen, and status says so and why.
    let taken = std::net::TcpListener::bind((c.ip.as_str(), 0)).unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    c.ok(&["volume", "set", "all", "nfs.port", &port]);
    wait_for("the NFS server offline", Duration::from_secs(20), || {
        let (online, _, reason) = nfs_status(&c, "nd");
        !online && reason.contains("exited")
    });
    let log = std::fs::read_to_string(c.path("state/logs/nfs.log")).unwrap_or_default();
    assert!(log.contains("Address already in use"), "{log}");
    c.ok(&["volume", "set", "all", "nfs.port", &NFS_PORT.to_string()]);
    wait_for("the NFS server back", Duration::from_secs(20), || {
        nfs_status(&c, "nd").0
    });
    // Read-only for NFS clients: they read, change nothing.
    let src = c.path("src");
    std::fs::write(&src, b"x\n").unwrap();
    ok(&format!(
        "nfs-cp {} '{}'",
        src.display(),
        at(&url, "before")
    ));
    c.ok(&["volume", "set", "nd", "nfs.volume-access", "read-only"]);
    // A fresh name each try: those before the change took effect land
    // (one may be made and then refused its data, as the change comes).
    let copy = |name: &str| {
        sh(&format!("nfs-cp {} '{}'", src.display(), at(&url, name)))
            .status
            .success()
    };
    let mut tries = 0;
    wait_for(
        "the volume read-only over NFS",
        Duration::from_secs(20),
        || {
            tries += 1;
            !copy(&format!("early-{tries}"))
        },
    );
    assert!(!copy("after"), "a copy once refused");
    assert_eq!(ok(&format!("nfs-cat '{}'", at(&url, "before"))), "x\n");
    let listing = ok(&format!("nfs-ls '{url}'"));
    assert!(!listing.lines().any(|l| l.ends_with(" after")), "{listing}");
    c.ok(&["volume", "set", "nd", "nfs.disable", "on"]);
    let addr = format!("{}:{NFS_PORT}", c.ip);
    wait_for("the NFS server to stop", Duration::from_secs(20), || {
        std::net::TcpStream::connect(&addr).is_err()
    });
    // Said once the process is gone, a moment after its port closed.
    wait_for("the daemon to say so", Duration::from_secs(20), || {
        std::fs::read_to_string(c.path("daemon.log"))
            .unwrap_or_default()
            .contains("NFS server stopped")
    });
}

/// A raw ONC RPC client: calls framed by hand, so that what no real
/// client sends can be sent.
mod raw {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    pub fn u32s(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    /// A call's record (AUTH_NULL): header, then `args`.
    pub fn call(xid: u32, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        let mut b = u32s(&[xid, 0, 2, prog, vers, proc_, 0, 0, 0, 0]);
        b.extend_from_slice(args);
        b
    }

    /// A call's record with AUTH_SYS credentials of `uid` (its group
    /// the same number).
    pub fn call_as(uid: u32, xid: u32, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        let mut cred = u32s(&[0]);
        cred.extend(opaque(b"raw"));
        cred.extend(u32s(&[uid, uid, 0]));
        let mut b = u32s(&[xid, 0, 2, prog, vers, proc_, 1]);
        b.extend(opaque(&cred));
        b.extend(u32s(&[0, 0]));
        b.extend_from_slice(args);
        b
    }

    /// The handle (nfs_fh3) a reply holds at `words`: its length, then
    /// its bytes; empty where the reply is shorter.
    pub fn handle_at(words: &[u32]) -> Vec<u8> {
        let len = words.first().copied().unwrap_or(0) as usize;
        let body = words.get(1..1 + len.div_ceil(4)).unwrap_or(&[]);
        u32s(body).into_iter().take(len).collect()
    }

    /// XDR opaque data.
    pub fn opaque(data: &[u8]) -> Vec<u8> {
        let mut b = u32s(&[data.len() as u32]);
        b.extend_from_slice(data);
        b.resize(b.len().next_multiple_of(4), 0);
        b
    }

    /// Sends `record` in one fragment; the reply's words, or None when
    /// the server closed the connection.
    pub fn ask(s: &mut TcpStream, record: &[u8]) -> Option<Vec<u32>> {
        let mut out = ((record.len() as u32) | 1 << 31).to_be_bytes().to_vec();
        out.extend_from_slice(record);
        s.write_all(&out).ok()?;
        answer(s)
    }

    pub fn answer(s: &mut TcpStream) -> Option<Vec<u32>> {
        let mut head = [0u8; 4];
        s.read_exact(&mut head).ok()?;
        let len = (u32::from_be_bytes(head) & !(1 << 31)) as usize;
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).ok()?;
        Some(
            body.chunks(4)
                .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
                .collect(),
        )
    }
}

/// Copies through NFS go on when a brick is killed under them and when
/// the NFS server itself is killed (its daemon starts it again; libnfs
/// connects again and sends again): every byte arrives.
#[test]
fn nfs_copies_survive_a_killed_brick_and_a_killed_nfs_server() {
    let c = Cluster::start();
    c.one_process_per_brick();
    c.volume("kv", 3, &["k1", "k2", "k3"]);
    let m = c.mount("kv");
    let url = nfs_on(&c, "kv");
    let src = c.path("src");
    ok(&format!(
        "head -c 300000000 /dev/urandom > {}",
        src.display()
    ));
    let want = ok(&format!("md5sum < {}", src.display()));
    // Copies the source to `name`, kills the process `victim` names once
    // a tenth of it has arrived, and checks that every byte arrived.
    let copy_through_a_kill = |name: &str, victim: &dyn Fn() -> u64| {
        let mut cp = std::process::Command::new("nfs-cp")
            .arg(&src)
            .arg(at(&url, name))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for("the copy under way", Duration::from_secs(60), || {
            std::fs::metadata(m.p(name)).is_ok_and(|md| md.len() > 30_000_000)
        });
        assert!(
            cp.try_wait().unwrap().is_none(),
            "the copy ended before the kill"
        );
        ok(&format!("kill -9 {}", victim()));
        let out = cp.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(ok(&format!("md5sum < {}", m.p(name))), want);
    };
    // A brick killed mid-copy.
    copy_through_a_kill("a", &|| brick_pid(&c, "kv", 0));
    // The NFS server killed mid-copy.
    copy_through_a_kill("b", &|| nfs_status(&c, "kv").1.unwrap());
}

/// Names RFC 1813 has errors for: with '/' NFS3ERR_INVAL, "." and ".."
/// NFS3ERR_EXIST, 256 bytes NFS3ERR_NAMETOOLONG; a name that is not
/// UTF-8 is a name like any other (bytes, as on the brick).
#[test]
fn names_get_the_errors_rfc_1813_names() {
    use raw::*;
    let c = Cluster::start();
    let bricks = c.volume("nn", 1, &["n1"]);
    nfs_on(&c, "nn");
    let mut s = std::net::TcpStream::connect((c.ip.as_str(), NFS_PORT)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mnt = ask(&mut s, &call(1, 100005, 3, 1, &opaque(b"/nn"))).unwrap();
    assert_eq!(mnt[6], 0, "MNT: {mnt:?}");
    let root = handle_at(&mnt[7..]);
    let mut xid = 1;
    let mut create = |name: &[u8]| {
        xid += 1;
        let mut args = opaque(&root);
        args.extend(opaque(name));
        // UNCHECKED, nothing set.
        args.extend(u32s(&[0, 0, 0, 0, 0, 0, 0]));
        ask(&mut s, &call_as(0, xid, 100003, 3, 8, &args)).unwrap()[6]
    };
    assert_eq!(create(b"a/b"), 22);
    assert_eq!(create(b"."), 17);
    assert_eq!(create(b".."), 17);
    assert_eq!(create(&[b'x'; 256]), 63);
    assert_eq!(create(&[b'x'; 255]), 0);
    assert_eq!(create(b"caf\xe9-\xff"), 0);
    use std::os::unix::ffi::OsStrExt;
    let names: Vec<Vec<u8>> = std::fs::read_dir(&bricks[0])
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    assert!(names.contains(&b"caf\xe9-\xff".to_vec()), "{names:?}");
    assert!(names.contains(&vec![b'x'; 255]));
    assert!(!names.iter().any(|n| n.len() == 256 || n.contains(&b'/')));
}

/// A client that took its handles from one server goes on with them at
/// another when the first is gone: a handle names the volume and the
/// object, nothing of the server. `volume status` lists every server's
/// NFS server, and says which is gone.
#[test]
fn handles_from_one_server_serve_at_another_when_it_is_gone() {
    use raw::*;
    need("nfs-cp", "libnfs-utils");
    let mut net = Net::pool(2);
    let bricks: Vec<String> = (0..2).map(|i| net.hosts[i].brick("f")).collect();
    let a = &net.hosts[0];
    a.ok(&[
        "volume", "create", "fo", "replica", "2", &bricks[0], &bricks[1], "force",
    ]);
    a.ok(&["volume", "start", "fo"]);
    a.ok(&["volume", "set", "fo", "nfs.disable", "off"]);
    let ips: Vec<String> = net.hosts.iter().map(|h| h.ip.clone()).collect();
    wait_for("both NFS servers", Duration::from_secs(30), || {
        let st = a.volume_status_json("fo");
        let rows = st[0]["nfs"].as_array().cloned().unwrap_or_default();
        rows.len() == 2 && rows.iter().all(|r| r["online"] == true)
    });
    let src = a.path("src");
    std::fs::write(&src, b"failed over\n").unwrap();
    let url = format!(
        "nfs://{}/fo/f?nfsport={NFS_PORT}&mountport={NFS_PORT}&version=3",
        ips[0]
    );
    ok(&format!("nfs-cp {} '{url}'", src.display()));
    // Each server's portmapper tells where MOUNT and NFS are: showmount
    // and libnfs find them without being given the port.
    need("showmount", "nfs-common");
    for ip in &ips {
        let exports = ok(&format!("showmount -e {ip}"));
        assert!(exports.lines().any(|l| l.starts_with("/fo ")), "{exports}");
    }
    let programs = ok(&format!("rpcinfo -p {}", ips[0]));
    assert!(
        programs.lines().any(|l| l
            .split_whitespace()
            .eq(["100003", "3", "tcp", "2049", "nfs"])),
        "{programs}"
    );
    ok(&format!("rpcinfo -u {} 100000 2", ips[0]));
    let listing = ok(&format!("nfs-ls nfs://{}/fo", ips[1]));
    assert!(listing.lines().any(|l| l.ends_with(" f")), "{listing}");
    // Handles from the first server: the export's root, then the file.
    let connect = |ip: &str| {
        let s = std::net::TcpStream::connect((ip, NFS_PORT)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    };
    let mut s = connect(&ips[0]);
    let mnt = ask(&mut s, &call(1, 100005, 3, 1, &opaque(b"/fo"))).unwrap();
    assert_eq!(mnt[6], 0, "MNT: {mnt:?}");
    let root = handle_at(&mnt[7..]);
    let lookup = |s: &mut std::net::TcpStream, xid: u32| {
        let mut args = opaque(&root);
        args.extend(opaque(b"f"));
        ask(s, &call(xid, 100003, 3, 3, &args)).unwrap()
    };
    let found = lookup(&mut s, 2);
    assert_eq!(found[6], 0, "LOOKUP: {found:?}");
    let file = handle_at(&found[7..]);
    drop(s);
    // The first server gone (its NFS server ends with its daemon).
    net.hosts[0].kill_daemon();
    wait_for("the first NFS server gone", Duration::from_secs(20), || {
        std::net::TcpStream::connect((ips[0].as_str(), NFS_PORT)).is_err()
    });
    // The second server takes both handles.
    let mut s = connect(&ips[1]);
    let found = lookup(&mut s, 3);
    assert_eq!(found[6], 0, "LOOKUP at the second server: {found:?}");
    assert_eq!(handle_at(&found[7..]), file);
    let mut args = opaque(&file);
    args.extend(u32s(&[0, 0, 4096]));
    let read = ask(&mut s, &call_as(0, 4, 100003, 3, 6, &args)).unwrap();
    assert_eq!(read[6], 0, "READ at the second server: {read:?}");
    // status, attributes (follows + 21 words), count, eof, then the data.
    let data = handle_at(&read[7 + 22 + 2..]);
    assert_eq!(data, b"failed over\n");
    // The second server's status: the first's NFS server offline.
    let st = net.hosts[1].volume_status_json("fo");
    let gone = st[0]["nfs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["host"] == ips[0].as_str())
        .cloned()
        .unwrap();
    assert_eq!(gone["online"], false, "{st}");
    assert!(gone["reason"].as_str().is_some(), "{st}");
}

/// Malformed and hostile calls get the errors RPC and NFS name (or a
/// closed connection), and the server goes on serving.
#[test]
fn bad_calls_get_clear_errors_and_the_server_goes_on() {
    use raw::*;
    let c = Cluster::start();
    c.volume("bv", 1, &["b1"]);
    nfs_on(&c, "bv");
    let addr = format!("{}:{NFS_PORT}", c.ip);
    let connect = || {
        let s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    };
    let mut s = connect();
    // NULL: accepted (reply, accepted, null verifier, SUCCESS).
    assert_eq!(
        ask(&mut s, &call(1, 100003, 3, 0, &[])),
        Some(vec![1, 1, 0, 0, 0, 0])
    );
    // NFS version 4: PROG_MISMATCH, 3 to 3. MOUNT 9: 1 to 3.
    assert_eq!(
        ask(&mut s, &call(2, 100003, 4, 0, &[])),
        Some(vec![2, 1, 0, 0, 0, 2, 3, 3])
    );
    assert_eq!(
        ask(&mut s, &call(3, 100005, 9, 0, &[])),
        Some(vec![3, 1, 0, 0, 0, 2, 1, 3])
    );
    // Another program: PROG_UNAVAIL; procedure 99: PROC_UNAVAIL.
    assert_eq!(
        ask(&mut s, &call(4, 100099, 1, 0, &[])),
        Some(vec![4, 1, 0, 0, 0, 1])
    );
    assert_eq!(
        ask(&mut s, &call(5, 100003, 3, 99, &[])),
        Some(vec![5, 1, 0, 0, 0, 3])
    );
    // Arguments cut short, or a length past the record: GARBAGE_ARGS.
    assert_eq!(
        ask(&mut s, &call(6, 100003, 3, 1, &u32s(&[33, 1, 2]))),
        Some(vec![6, 1, 0, 0, 0, 4])
    );
    assert_eq!(
        ask(&mut s, &call(7, 100003, 3, 1, &u32s(&[u32::MAX]))),
        Some(vec![7, 1, 0, 0, 0, 4])
    );
    // Another RPC version: denied, RPC_MISMATCH 2 to 2. Kerberos
    // credentials: denied, AUTH_ERROR, AUTH_TOOWEAK.
    let mut v3 = call(8, 100003, 3, 0, &[]);
    v3[8..12].copy_from_slice(&3u32.to_be_bytes());
    assert_eq!(ask(&mut s, &v3), Some(vec![8, 1, 1, 0, 2, 2]));
    let mut gss = call(9, 100003, 3, 0, &[]);
    gss[24..28].copy_from_slice(&6u32.to_be_bytes());
    assert_eq!(ask(&mut s, &gss), Some(vec![9, 1, 1, 1, 5]));
    // A handle of another volume (forged): NFS3ERR_STALE; one that is no
    // handle of mortar's: NFS3ERR_BADHANDLE. Never another object.
    let mut forged = vec![1u8];
    forged.extend_from_slice(&[7; 32]);
    let stale = ask(&mut s, &call(10, 100003, 3, 1, &opaque(&forged))).unwrap();
    assert_eq!(&stale[..6], &[10, 1, 0, 0, 0, 0]);
    assert_eq!(stale[6], 70, "{stale:?}");
    let bad = ask(&mut s, &call(11, 100003, 3, 1, &opaque(b"0123456789"))).unwrap();
    assert_eq!(bad[6], 10001, "{bad:?}");
    // MOUNT of a volume that is not exported: MNT3ERR_NOENT.
    let mnt = ask(&mut s, &call(12, 100005, 3, 1, &opaque(b"/nosuch"))).unwrap();
    assert_eq!(mnt[6], 2, "{mnt:?}");
    // A record that claims 2 GiB: the connection ends, nothing is taken.
    use std::io::Write;
    s.write_all(&0x7fff_fff0u32.to_be_bytes()).unwrap();
    assert_eq!(answer(&mut s), None);
    // Ten thousand idle connections (as many as this process may hold,
    // if fewer): the server still answers.
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut files = getrlimit(Resource::Nofile);
    files.current = files.maximum;
    let _ = setrlimit(Resource::Nofile, files);
    let n = getrlimit(Resource::Nofile)
        .current
        .map_or(10_000, |l| (l as usize).saturating_sub(500).min(10_000));
    // What the server holds for them stays small (a few KiB each).
    let pid = nfs_status(&c, "bv").1.unwrap();
    let rss = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let before = rss();
    let idle: Vec<std::net::TcpStream> = (0..n).map(|_| connect()).collect();
    let mut s = connect();
    assert_eq!(
        ask(&mut s, &call(13, 100003, 3, 0, &[])),
        Some(vec![13, 1, 0, 0, 0, 0])
    );
    let grown = rss().saturating_sub(before);
    eprintln!("{n} idle connections: the NFS server grew by {grown} KiB");
    assert!(
        grown < 16 * n as u64,
        "{grown} KiB for {n} idle connections"
    );
    drop(idle);
}

/// The volume's rules for clients hold for NFS clients: root squashed
/// (`server.root-squash`), an address auth.allow leaves out refused.
#[test]
fn nfs_clients_are_squashed_and_refused_as_the_volume_says() {
    let c = Cluster::start();
    c.volume("sq", 1, &["s1"]);
    let m = c.mount("sq");
    std::fs::create_dir(m.p("open")).unwrap();
    ok(&format!("chmod 1777 {}", m.p("open")));
    let url = nfs_on(&c, "sq");
    let src = c.path("src");
    std::fs::write(&src, b"squashed\n").unwrap();
    // Root's files are root's until root is squashed (libnfs sends the
    // caller's ids: root's here).
    ok(&format!(
        "nfs-cp {} '{}'",
        src.display(),
        at(&url, "open/a")
    ));
    assert_eq!(ok(&format!("stat -c %u {}", m.p("open/a"))), "0\n");
    c.ok(&["volume", "set", "sq", "server.root-squash", "on"]);
    wait_for("root squashed", Duration::from_secs(20), || {
        let _ = sh(&format!(
            "nfs-cp {} '{}'",
            src.display(),
            at(&url, "open/b")
        ));
        sh(&format!("stat -c %u {}", m.p("open/b"))).stdout == b"65534\n"
    });
    // Root squashed may not write where only root may.
    let denied = sh(&format!("nfs-cp {} '{}'", src.display(), at(&url, "c")));
    assert!(!denied.status.success());
    // An address auth.allow leaves out: refused (MOUNT and every call).
    c.ok(&["volume", "set", "sq", "auth.allow", "10.9.9.9"]);
    wait_for("the client refused", Duration::from_secs(20), || {
        !sh(&format!("nfs-ls '{url}'")).status.success()
    });
    let log = std::fs::read_to_string(c.path("state/logs/nfs.log")).unwrap();
    assert!(log.contains("NFS client refused"), "{log}");
}

/// `nfs.export-volumes off` and `nfs.export-dir`: only the directories
/// listed may be mounted, each by the clients it names; a client that
/// mounted one stays beneath it (".." of its root is its root, a handle
/// forged to the volume's root or to a directory not for it is refused).
#[test]
fn a_directory_export_keeps_its_clients_beneath_it() {
    use raw::*;
    let c = Cluster::start();
    let bricks = c.volume("dx", 1, &["d1"]);
    let m = c.mount("dx");
    std::fs::create_dir_all(m.p("pub/in")).unwrap();
    std::fs::create_dir(m.p("secret")).unwrap();
    std::fs::write(m.p("secret/key"), b"k").unwrap();
    nfs_on(&c, "dx");
    for bad in ["/a/../secret", "pub", "/pub(10.0.0.1"] {
        let e = c.fails(&["volume", "set", "dx", "nfs.export-dir", bad]);
        assert!(e.contains("nfs.export-dir"), "{e}");
    }
    c.ok(&["volume", "set", "dx", "nfs.export-volumes", "off"]);
    c.ok(&[
        "volume",
        "set",
        "dx",
        "nfs.export-dir",
        "/pub,/secret(10.9.9.9)",
    ]);
    let mut s = std::net::TcpStream::connect((c.ip.as_str(), NFS_PORT)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut xid = 0;
    let mut ask_ = |prog: u32, proc_: u32, args: &[u8]| {
        xid += 1;
        ask(&mut s, &call_as(0, xid, prog, 3, proc_, args)).unwrap()
    };
    // A reply's status and, when it carries one first, its handle.
    let handle_of = |r: &[u32]| -> (u32, Vec<u8>) { (r[6], handle_at(r.get(7..).unwrap_or(&[]))) };
    // The two settings reach the NFS server one after the other: wait
    // until its export list shows both.
    let mut exports = Vec::new();
    let has = |exports: &[u8], b: &[u8]| exports.windows(b.len()).any(|w| w == b);
    wait_for("the directories exported", Duration::from_secs(20), || {
        exports = u32s(&ask_(100005, 5, &[]));
        has(&exports, &opaque(b"/dx/pub"))
            && has(&exports, &opaque(b"/dx/secret"))
            && !has(&exports, &opaque(b"/dx"))
    });
    assert!(has(&exports, &opaque(b"10.9.9.9")));
    assert_eq!(ask_(100005, 1, &opaque(b"/dx"))[6], 13);
    // Not for this client's address.
    assert_eq!(ask_(100005, 1, &opaque(b"/dx/secret"))[6], 13);
    let (st, root) = handle_of(&ask_(100005, 1, &opaque(b"/dx/pub")));
    assert_eq!(st, 0);
    type Ask<'a> = dyn FnMut(u32, u32, &[u8]) -> Vec<u32> + 'a;
    let lookup = |ask_: &mut Ask, dir: &[u8], name: &[u8]| {
        let mut args = opaque(dir);
        args.extend(opaque(name));
        handle_of(&ask_(100003, 3, &args))
    };
    assert_eq!(lookup(&mut ask_, &root, b".."), (0, root.clone()));
    let (st, inner) = lookup(&mut ask_, &root, b"in");
    assert_eq!(st, 0);
    assert_eq!(lookup(&mut ask_, &inner, b".."), (0, root.clone()));
    // Forged: the volume's root under this export's; the volume's root
    // as the export; the directory not for this client as the export.
    let mut forged = root.clone();
    forged[33..49].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(ask_(100003, 1, &opaque(&forged))[6], 70);
    forged.copy_within(33..49, 17);
    assert_eq!(ask_(100003, 1, &opaque(&forged))[6], 13);
    let secret = gfid_on_brick(&bricks[0].join("secret"));
    forged[17..33].copy_from_slice(&secret);
    forged[33..49].copy_from_slice(&secret);
    assert_eq!(ask_(100003, 1, &opaque(&forged))[6], 13);
    // A rename out of the export to a handle of another: NFS3ERR_XDEV.
    let mut args = opaque(&root);
    args.extend(opaque(b"in"));
    args.extend(opaque(&forged));
    args.extend(opaque(b"in"));
    assert_eq!(ask_(100003, 14, &args)[6], 18);
    // The whole volume again: its root mounts.
    c.ok(&["volume", "set", "dx", "nfs.export-volumes", "on"]);
    wait_for(
        "the whole volume mountable",
        Duration::from_secs(20),
        || ask_(100005, 1, &opaque(b"/dx"))[6] == 0,
    );
}

/// Changes are on the bricks when NFS answers them (a client goes on with
/// what it was told across a restart of the server): an UNSTABLE WRITE
/// (until performance.nfs.write-behind is on) and a REMOVE in a directory
/// the NFS server made wait for a frozen brick, where a native mount
/// would answer both ahead.
#[test]
fn changes_through_nfs_wait_for_the_bricks() {
    use raw::*;
    let c = Cluster::start();
    c.one_process_per_brick();
    let bricks = c.volume("ra", 1, &["r1"]);
    nfs_on(&c, "ra");
    let mut s = std::net::TcpStream::connect((c.ip.as_str(), NFS_PORT)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mnt = ask(&mut s, &call(1, 100005, 3, 1, &opaque(b"/ra"))).unwrap();
    assert_eq!(mnt[6], 0, "MNT: {mnt:?}");
    let root = handle_at(&mnt[7..]);
    let in_dir = |dir: &[u8], name: &[u8], rest: &[u32]| {
        let mut args = opaque(dir);
        args.extend(opaque(name));
        args.extend(u32s(rest));
        args
    };
    let made = ask(
        &mut s,
        &call_as(
            0,
            2,
            100003,
            3,
            9,
            &in_dir(&root, b"d", &[1, 0o755, 0, 0, 0, 0, 0]),
        ),
    )
    .unwrap();
    assert_eq!((made[6], made[7]), (0, 1), "MKDIR: {made:?}");
    let dir = handle_at(&made[8..]);
    let created = ask(
        &mut s,
        &call_as(
            0,
            3,
            100003,
            3,
            8,
            &in_dir(&dir, b"f", &[0, 0, 0, 0, 0, 0, 0]),
        ),
    )
    .unwrap();
    assert_eq!((created[6], created[7]), (0, 1), "CREATE: {created:?}");
    assert!(bricks[0].join("d/f").exists());
    let file = handle_at(&created[8..]);
    // Whether a call sent while the brick is frozen is answered before
    // it runs again (its answer read either way).
    let pid = brick_pid(&c, "ra", 0);
    let mut xid = 3;
    let mut early = |proc_: u32, args: &[u8]| {
        xid += 1;
        ok(&format!("kill -STOP {pid}"));
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let early = ask(&mut s, &call_as(0, xid, 100003, 3, proc_, args));
        ok(&format!("kill -CONT {pid}"));
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let got = early.clone().or_else(|| answer(&mut s)).unwrap();
        assert_eq!((got[0], got[6]), (xid, 0), "call {proc_}: {got:?}");
        early.is_some()
    };
    // An UNSTABLE WRITE is on the brick when answered (not in the
    // server's memory, lost if it were killed), unless
    // performance.nfs.write-behind says otherwise.
    let write = |data: &[u8]| {
        let mut args = opaque(&file);
        args.extend(u32s(&[0, 0, data.len() as u32, 0]));
        args.extend(opaque(data));
        args
    };
    assert!(!early(7, &write(b"hello")), "WRITE answered ahead");
    assert_eq!(std::fs::read(bricks[0].join("d/f")).unwrap(), b"hello");
    c.ok(&["volume", "set", "ra", "performance.nfs.write-behind", "on"]);
    wait_for("a WRITE answered ahead", Duration::from_secs(30), || {
        early(7, &write(b"ahead"))
    });
    assert!(
        !early(12, &in_dir(&dir, b"f", &[])),
        "REMOVE answered ahead"
    );
    assert!(!bricks[0].join("d/f").exists());
}

/// A name one caller looked up is not handed to another who may not
/// search its directory (the answer would come from the server's caches,
/// which the bricks' checks never see).
#[test]
fn a_lookup_needs_search_permission_whoever_looked_before() {
    use raw::*;
    let c = Cluster::start();
    c.volume("lp", 1, &["l1"]);
    let m = c.mount("lp");
    std::fs::create_dir(m.p("p")).unwrap();
    std::fs::write(m.p("p/s"), b"s").unwrap();
    ok(&format!(
        "chown -R 1000:1000 {0} && chmod 700 {0}",
        m.p("p")
    ));
    nfs_on(&c, "lp");
    let mut s = std::net::TcpStream::connect((c.ip.as_str(), NFS_PORT)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mnt = ask(&mut s, &call(1, 100005, 3, 1, &opaque(b"/lp"))).unwrap();
    assert_eq!(mnt[6], 0, "MNT: {mnt:?}");
    let root = handle_at(&mnt[7..]);
    let mut xid = 1;
    let mut lookup = |uid: u32, dir: &[u8], name: &[u8]| {
        xid += 1;
        let mut args = opaque(dir);
        args.extend(opaque(name));
        let r = ask(&mut s, &call_as(uid, xid, 100003, 3, 3, &args)).unwrap();
        (r[6], handle_at(r.get(7..).unwrap_or(&[])))
    };
    let (st, p) = lookup(1000, &root, b"p");
    assert_eq!(st, 0);
    assert_eq!(lookup(1000, &p, b"s").0, 0);
    assert_eq!(lookup(2000, &p, b"s").0, 13);
    assert_eq!(lookup(1000, &p, b"s").0, 0);
}
