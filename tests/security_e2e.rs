//! Who may use a volume (docs/security.md): `auth.allow` and `auth.reject`
//! enforced by the bricks, by the address a client connects from.

mod common;
use common::*;
use mortar::protocol::wire::Msg;
use std::io::Write;
use std::time::Duration;

/// A handshake sent by hand, with the server's administrator credential:
/// what the brick answers.
fn handshake(c: &Cluster, addr: &str, brick: &str) -> Msg {
    brick_handshake_with(addr, brick, &c.credential())
}

#[test]
fn clients_not_allowed_by_address_are_refused_and_cut_off() {
    let c = Cluster::start();
    let bricks = c.volume("av", 1, &["a1"]);
    let m = c.mount("av");
    std::fs::write(m.p("secret"), "kept\n").unwrap();
    let addr = brick_addr(&c, "av", 0);
    let brick = bricks[0].display().to_string();

    // Garbage is refused, and the list is shown as it is kept.
    let before = c.state();
    c.refused(
        &["volume", "set", "av", "auth.allow", "10.0.0.0/33"],
        "is not an address, network or host name",
        &before,
    );
    c.ok(&["volume", "set", "av", "auth.allow", "10.9.9.9, 10.1.*.*"]);
    assert!(c
        .ok(&["volume", "get", "av", "auth.allow"])
        .contains("10.9.9.9,10.1.*.*"));

    // The mounted client is cut off within seconds (the bricks follow the
    // volume's options), a new one is refused, and so is a hand-made
    // handshake, with the reason.
    wait_for("the mount to be cut off", Duration::from_secs(20), || {
        std::fs::read_to_string(m.p("secret")).is_err()
    });
    let why = c
        .try_mount("av", &[], &[])
        .err()
        .expect("the mount is refused");
    assert!(why.contains("auth.allow"), "{why}");
    match handshake(&c, &addr, &brick) {
        Msg::Refused { reason } => assert!(reason.contains("not in auth.allow"), "{reason}"),
        other => panic!("{other:?}"),
    }

    // Allowed again: the old mount comes back by itself.
    c.ok(&["volume", "set", "av", "auth.allow", "127.0.0.0/8"]);
    wait_for("the mount to come back", Duration::from_secs(30), || {
        std::fs::read_to_string(m.p("secret")).is_ok_and(|s| s == "kept\n")
    });
    assert!(matches!(handshake(&c, &addr, &brick), Msg::Welcome { .. }));

    // auth.reject wins over auth.allow.
    c.ok(&["volume", "set", "av", "auth.reject", "127.*.*.*"]);
    wait_for("the reject to take hold", Duration::from_secs(20), || {
        matches!(handshake(&c, &addr, &brick), Msg::Refused { .. })
    });
    c.ok(&["volume", "reset", "av", "auth.reject"]);
    c.ok(&["volume", "reset", "av", "auth.allow"]);
    wait_for("the mount to come back", Duration::from_secs(30), || {
        std::fs::read_to_string(m.p("secret")).is_ok()
    });
    // Nothing was lost or changed meanwhile.
    assert_eq!(
        std::fs::read_to_string(bricks[0].join("secret")).unwrap(),
        "kept\n"
    );
}

/// The pool's own clients (self-heal here) give the volume's key in their
/// handshake and pass `auth.allow`; the key is shown to no one.
#[test]
fn the_pools_own_clients_pass_auth_allow_and_the_key_stays_private() {
    let c = Cluster::start();
    let bricks = c.volume("kv", 3, &["k1", "k2", "k3"]);
    let m = c.mount("kv");
    std::fs::write(m.p("before"), "one\n").unwrap();
    // A brick down while files change: they must be healed onto it.
    let pid = brick_pid(&c, "kv", 2);
    ok(&format!("kill -9 {pid}"));
    for i in 0..20 {
        std::fs::write(m.p(&format!("f{i}")), format!("{i}\n")).unwrap();
    }
    // Then nobody on this host may mount: self-heal still may.
    c.ok(&["volume", "set", "kv", "auth.allow", "10.9.9.9"]);
    wait_brick_restarted(&c, "kv", 2, pid);
    wait_healed(&c, "kv", Duration::from_secs(60));
    drop(m);
    assert_bricks_identical(&bricks);
    assert_eq!(
        std::fs::read_to_string(bricks[2].join("f7")).unwrap(),
        "7\n"
    );

    // The key: in a file only root reads, never in what the CLI shows.
    let files = ok(&format!("ls {}/state/run/", c.path(".").display()));
    let key_file = files
        .lines()
        .find(|f| f.ends_with(".key"))
        .unwrap_or_else(|| panic!("no key file in {files}"));
    let key_path = c.path(&format!("state/run/{key_file}"));
    let key = std::fs::read_to_string(&key_path).unwrap();
    assert!(key.len() >= 32, "{key:?}");
    assert_eq!(
        ok(&format!("stat -c %a {}", key_path.display())).trim(),
        "600"
    );
    for shown in [
        c.ok(&["--json", "volume", "info", "kv"]),
        c.ok(&["--json", "volume", "status", "kv"]),
        c.ok(&["volume", "info"]),
    ] {
        assert!(!shown.contains(key.trim()), "the key is shown: {shown}");
    }
    assert!(!ok("ps -eo args").contains(key.trim()));
}

/// Sends one request line on `s` and reads the answer (None: the
/// connection ended without one).
fn ask_line(s: &mut (impl std::io::Read + Write), line: &str) -> Option<String> {
    use std::io::BufRead;
    s.write_all(format!("{line}\n").as_bytes()).ok()?;
    let mut answer = String::new();
    match std::io::BufReader::new(s).read_line(&mut answer) {
        Ok(n) if n > 0 => Some(answer),
        _ => None,
    }
}

/// The issue's first attack: a JSON line that stops and deletes a volume,
/// sent by whoever reaches the daemon. Without TLS, without a certificate,
/// with another pool's, or with a wrong join token: refused, and the
/// volume and its data are as they were.
#[test]
fn management_requests_need_a_credential_of_the_pool() {
    let c = Cluster::start();
    let bricks = c.volume("mv", 1, &["m1"]);
    let m = c.mount("mv");
    std::fs::write(m.p("f"), "kept\n").unwrap();
    let before = c.state();
    let stop = r#"{"VolumeStop":{"name":"mv"}}"#;
    let delete = r#"{"VolumeDelete":{"name":"mv"}}"#;

    // In the clear: the daemon speaks only TLS (its answer is an alert).
    let mut s = std::net::TcpStream::connect(c.server()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let answer = ask_line(&mut s, stop);
    assert!(
        answer.as_deref().is_none_or(|a| !a.contains('{')),
        "{answer:?}"
    );

    // TLS without a certificate: only a join may be asked.
    let cred = mortar::protocol::tls::Credential::load(&c.credential()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cred.ca.clone()).unwrap();
    let anonymous = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let anonymous = std::sync::Arc::new(anonymous);
    let connect = || {
        let conn = rustls::ClientConnection::new(
            anonymous.clone(),
            mortar::protocol::tls::SERVER_NAME.try_into().unwrap(),
        )
        .unwrap();
        rustls::StreamOwned::new(conn, std::net::TcpStream::connect(c.server()).unwrap())
    };
    for line in [stop, delete] {
        // (A refusal closes the connection.)
        let mut s = connect();
        let answer = ask_line(&mut s, line).expect("an answer");
        assert!(
            answer.contains("needs a credential of the pool"),
            "{answer}"
        );
        assert_eq!(ask_line(&mut s, line), None, "closed after a refusal");
    }
    // ... with the right join token only (and this one is wrong).
    let join = serde_json::json!({"PeerJoin": {
        "me": {"uuid": "00000000-0000-0000-0000-000000000001", "host": "10.9.9.9", "mgmt": "10.9.9.9:24107"},
        "secret": "00000000000000000000000000000000", "ca": "", "ca_key": ""}});
    let answer = ask_line(&mut connect(), &join.to_string()).expect("an answer");
    assert!(answer.contains("join token is not its own"), "{answer}");

    // Another pool's administrator.
    let other = Cluster::start();
    let mut s = tls_connect(&c.server(), &other.credential());
    assert_eq!(ask_line(&mut s, delete), None);
    let o = std::process::Command::new(BIN)
        .args(["--server", &c.server(), "--credential"])
        .arg(other.credential())
        .args(["volume", "stop", "mv"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("different pools"), "{e}");
    // The CLI without a readable credential says what it needs.
    let o = std::process::Command::new(BIN)
        .args(["--server", &c.server(), "--credential", "/nonexistent"])
        .args(["volume", "info"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("cannot read the credential"),
        "{e}"
    );

    // Nothing changed; the mount reads on.
    assert_eq!(c.state(), before);
    assert_eq!(std::fs::read_to_string(m.p("f")).unwrap(), "kept\n");
    assert_eq!(
        std::fs::read_to_string(bricks[0].join("f")).unwrap(),
        "kept\n"
    );
}

/// Credentials are files only root reads, and a mount without one says so.
#[test]
fn credentials_are_private_and_a_mount_needs_one() {
    let c = Cluster::start();
    c.volume("cv", 1, &["c1"]);
    for f in ["ca.key", "server.pem", "admin.pem", "join-token"] {
        let p = c.path(&format!("state/tls/{f}"));
        assert_eq!(
            ok(&format!("stat -c %a {}", p.display())).trim(),
            "600",
            "{f}"
        );
    }
    let why = c
        .try_mount("cv", &[], &["credential=/nonexistent/admin.pem"])
        .err()
        .expect("refused");
    assert!(
        why.contains("cannot read the credential /nonexistent/admin.pem"),
        "{why}"
    );
    // Another pool's credential: the mount fails and says why.
    let other = Cluster::start();
    let why = c
        .try_mount(
            "cv",
            &[],
            &[&format!("credential={}", other.credential().display())],
        )
        .err()
        .expect("refused");
    assert!(why.contains("different pools"), "{why}");
}

/// `server.ssl off`: the volume's clients speak to its bricks in the
/// clear, and a brick takes a client without a credential; on again, the
/// clients in the clear are cut off and the mount comes back over TLS.
#[test]
fn server_ssl_off_lets_clients_in_the_clear_and_on_cuts_them_off() {
    let c = Cluster::start();
    let bricks = c.volume("sv", 1, &["s1"]);
    let addr = brick_addr(&c, "sv", 0);
    let brick = bricks[0].display().to_string();
    let plain = || {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        s.write_all(&hello_frame(&brick)).unwrap();
        s
    };
    // On (the default): a handshake in the clear gets no answer.
    let mut s = plain();
    let mut buf = [0u8; 64];
    assert!(matches!(
        std::io::Read::read(&mut s, &mut buf),
        Ok(0) | Err(_)
    ));

    c.ok(&["volume", "set", "sv", "server.ssl", "off"]);
    let m = c.mount("sv");
    std::fs::write(m.p("f"), "clear\n").unwrap();
    wait_for(
        "a brick that takes the clear",
        Duration::from_secs(20),
        || matches!(read_msg(&mut plain()), Msg::Welcome { .. }),
    );
    let mut kept = plain();
    assert!(matches!(read_msg(&mut kept), Msg::Welcome { .. }));

    c.ok(&["volume", "set", "sv", "server.ssl", "on"]);
    // The connection in the clear is closed; the mount reconnects over TLS.
    kept.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    assert!(matches!(
        std::io::Read::read(&mut kept, &mut buf),
        Ok(0) | Err(_)
    ));
    wait_for("the mount over TLS", Duration::from_secs(30), || {
        std::fs::write(m.p("g"), "tls\n").is_ok()
    });
    assert_eq!(
        std::fs::read_to_string(bricks[0].join("f")).unwrap(),
        "clear\n"
    );
    assert_eq!(
        std::fs::read_to_string(bricks[0].join("g")).unwrap(),
        "tls\n"
    );
}

/// A volume's client credential (`volume credentials`): it mounts its
/// volume and no other, asks the daemon for nothing else, a read-only one
/// reads but changes nothing, and a revoked one is cut off.
#[test]
fn client_credentials_mount_their_volume_only_and_are_revoked() {
    let c = Cluster::start();
    let bricks = c.volume("cr", 1, &["r1"]);
    c.volume("other", 1, &["o1"]);
    let admin = c.mount("cr");
    std::fs::write(admin.p("f"), "data\n").unwrap();

    let rw = c.path("rw.pem");
    c.ok(&[
        "volume",
        "credentials",
        "cr",
        "create",
        "laptop",
        "--out",
        rw.to_str().unwrap(),
    ]);
    assert_eq!(ok(&format!("stat -c %a {}", rw.display())).trim(), "600");
    let ro = c.ok(&["volume", "credentials", "cr", "create", "reader", "ro"]);
    assert!(ro.contains("BEGIN PRIVATE KEY"), "{ro}");
    let ro_file = c.path("ro.pem");
    std::fs::write(&ro_file, &ro).unwrap();
    // Names are unique, and the list shows them without their keys.
    c.refused(
        &["volume", "credentials", "cr", "create", "laptop"],
        "already has a credential named laptop",
        &c.state(),
    );
    let list = c.ok(&["volume", "credentials", "cr", "list"]);
    assert!(
        list.contains("laptop") && list.contains("reader") && list.contains(" ro "),
        "{list}"
    );
    assert!(!list.contains("PRIVATE"), "{list}");

    let with = |f: &std::path::Path| format!("credential={}", f.display());
    // Read-write: reads and writes its volume.
    let m = c.try_mount("cr", &[], &[&with(&rw)]).expect("mounts");
    assert_eq!(std::fs::read_to_string(m.p("f")).unwrap(), "data\n");
    std::fs::write(m.p("g"), "from laptop\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(bricks[0].join("g")).unwrap(),
        "from laptop\n"
    );
    // Not another volume, and nothing else of the daemon.
    let why = c
        .try_mount("other", &[], &[&with(&rw)])
        .err()
        .expect("refused");
    assert!(why.contains("not one of volume other's"), "{why}");
    let o = std::process::Command::new(BIN)
        .args(["--server", &c.server(), "--credential"])
        .arg(&rw)
        .args(["volume", "delete", "cr"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("may only mount it"),
        "{e}"
    );

    // Read-only: reads; every change fails with EROFS and changes nothing.
    let r = c.try_mount("cr", &[], &[&with(&ro_file)]).expect("mounts");
    assert_eq!(std::fs::read_to_string(r.p("f")).unwrap(), "data\n");
    for cmd in [
        format!("echo x > {}", r.p("new")),
        format!("echo x >> {}", r.p("f")),
        format!("rm {}", r.p("f")),
        format!("mkdir {}", r.p("d")),
        format!("chmod 600 {}", r.p("f")),
        format!("mv {} {}", r.p("f"), r.p("moved")),
    ] {
        let o = sh(&cmd);
        assert!(!o.status.success(), "{cmd} succeeded");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("Read-only file system"), "{cmd}: {e}");
    }
    assert_eq!(
        std::fs::read_to_string(bricks[0].join("f")).unwrap(),
        "data\n"
    );
    assert!(!bricks[0].join("new").exists() && !bricks[0].join("d").exists());

    // auth.ssl-allow names the credentials taken: the reader only.
    c.ok(&["volume", "set", "cr", "auth.ssl-allow", "reader"]);
    wait_for(
        "laptop to be cut off by name",
        Duration::from_secs(20),
        || std::fs::read_to_string(m.p("f")).is_err(),
    );
    let why = c
        .try_mount("cr", &[], &[&with(&rw)])
        .err()
        .expect("refused");
    assert!(why.contains("not in auth.ssl-allow"), "{why}");
    assert_eq!(std::fs::read_to_string(r.p("f")).unwrap(), "data\n");
    c.ok(&["volume", "reset", "cr", "auth.ssl-allow"]);
    wait_for("laptop to come back", Duration::from_secs(30), || {
        std::fs::read_to_string(m.p("f")).is_ok()
    });

    // Revoked: cut off within seconds; a new mount is refused.
    c.ok(&["volume", "credentials", "cr", "revoke", "laptop"]);
    wait_for(
        "the revoked mount to be cut off",
        Duration::from_secs(20),
        || std::fs::read_to_string(m.p("f")).is_err(),
    );
    assert!(c.try_mount("cr", &[], &[&with(&rw)]).is_err());
    // The others go on.
    assert_eq!(std::fs::read_to_string(r.p("f")).unwrap(), "data\n");
    assert_eq!(
        std::fs::read_to_string(admin.p("g")).unwrap(),
        "from laptop\n"
    );
}

/// Asks a brick one fop over a connection made by hand, as `cx`.
fn ask(
    s: &mut Tls,
    id: u64,
    cx: mortar::core::Ctx,
    fop: mortar::core::Fop,
) -> Result<mortar::core::Reply, i32> {
    s.write_all(&mortar::protocol::wire::encode(&Msg::Call { id, cx, fop }).to_vec())
        .unwrap();
    loop {
        match read_msg(s) {
            Msg::Answer { id: got, result } if got == id => {
                return result.map_err(|e| e.errno);
            }
            _ => continue,
        }
    }
}

/// Runs `cmd` through `sh` as uid:gid with the given supplementary groups.
fn as_user(uid: u32, groups: &[u32], cmd: &str) -> std::process::Output {
    let groups = if groups.is_empty() {
        "--clear-groups".to_string()
    } else {
        format!(
            "--groups={}",
            groups
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    std::process::Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            &groups,
            "sh",
            "-c",
            cmd,
        ])
        .output()
        .unwrap()
}

fn owner(p: &std::path::Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.gid())
}

#[test]
fn bricks_act_as_the_caller_and_squash_root_when_told() {
    use mortar::core::{Ctx, Fop, Gfid, Name};
    let c = Cluster::start();
    let bricks = c.volume("id", 1, &["i1"]);
    let m = c.mount("id");
    std::fs::write(m.p("secret"), "root only\n").unwrap();
    ok(&format!(
        "chmod 600 {0} && mkdir {1} && chmod 1777 {1}",
        m.p("secret"),
        m.p("open")
    ));

    // The issue's attack, with a credential of the volume: the brick
    // protocol spoken by hand, claiming to be nobody, reading root's file.
    let cred = c.path("spoof.pem");
    c.ok(&[
        "volume",
        "credentials",
        "id",
        "create",
        "spoof",
        "--out",
        cred.to_str().unwrap(),
    ]);
    let addr = brick_addr(&c, "id", 0);
    // (Made again for each step: a client by hand answers no recalls, and
    // the brick closes it when the mount changes what it looked at.)
    let connect_as = |cred: &std::path::Path| {
        let mut s = tls_connect(&addr, cred);
        s.write_all(&hello_frame(&bricks[0].display().to_string()))
            .unwrap();
        assert!(matches!(read_msg(&mut s), Msg::Welcome { .. }));
        s
    };
    let connect = || connect_as(&cred);
    let mut s = connect();
    let who = |uid: u32, internal: bool| Ctx {
        uid,
        gid: uid,
        internal,
        ..Ctx::default()
    };
    let lookup = Fop::Lookup {
        parent: Gfid::ROOT,
        name: Name::new(&b"secret"[..]).unwrap(),
    };
    let attr = ask(&mut s, 1, who(65534, false), lookup.clone())
        .unwrap()
        .into_attr()
        .unwrap();
    let read = |fh| Fop::Read {
        gfid: attr.gfid,
        fh,
        offset: 0,
        size: 100,
    };
    let open = Fop::Open {
        gfid: attr.gfid,
        flags: libc::O_RDONLY,
    };
    let anon = mortar::core::fop::ANON_FH;
    for internal in [false, true] {
        let nobody = who(65534, internal);
        assert_eq!(
            ask(&mut s, 2, nobody.clone(), open.clone()).unwrap_err(),
            libc::EACCES
        );
        assert_eq!(
            ask(&mut s, 3, nobody, read(anon)).unwrap_err(),
            libc::EACCES
        );
    }
    // Claiming root is root's, unless root is squashed.
    assert!(ask(&mut s, 4, who(0, false), read(anon)).is_ok());

    // Supplementary groups travel with each request: a member of the
    // group writes in its directory (the brick checks it too).
    ok(&format!(
        "mkdir {0} && chgrp 5000 {0} && chmod 2770 {0}",
        m.p("team")
    ));
    let o = as_user(1000, &[5000], &format!("echo hi > {}", m.p("team/hi")));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(owner(&bricks[0].join("team/hi")), (1000, 5000));
    let o = as_user(1001, &[], &format!("echo no > {}", m.p("team/no")));
    assert!(!o.status.success());
    assert!(!bricks[0].join("team/no").exists());

    // A credential bound to an identity: its mount's root is that user,
    // and so is whatever its holder claims by hand.
    let bound = c.path("bound.pem");
    c.fails(&["volume", "credentials", "id", "create", "x", "--as", "abc"]);
    c.ok(&[
        "volume",
        "credentials",
        "id",
        "create",
        "bound",
        "--as",
        "1234:1235",
        "--out",
        bound.to_str().unwrap(),
    ]);
    let list = c.ok(&["volume", "credentials", "id", "list"]);
    assert!(
        list.contains("1234:1235") && list.contains("claimed"),
        "{list}"
    );
    let b = c
        .try_mount("id", &[], &[&format!("credential={}", bound.display())])
        .expect("mounts");
    std::fs::write(b.p("open/bound"), "x").unwrap();
    assert_eq!(owner(&bricks[0].join("open/bound")), (1234, 1235));
    let e = sh(&format!("cat {}", b.p("secret")));
    assert!(String::from_utf8_lossy(&e.stderr).contains("Permission denied"));
    let mut h = connect_as(&bound);
    assert_eq!(
        ask(&mut h, 1, who(0, true), read(anon)).unwrap_err(),
        libc::EACCES
    );
    drop((h, b));

    // server.root-squash: root of the mounts is nobody (for the connection
    // made by hand too, whatever it claims).
    c.ok(&["volume", "set", "id", "server.root-squash", "on"]);
    wait_for("root to be squashed", Duration::from_secs(20), || {
        std::fs::read_to_string(m.p("secret")).is_err()
    });
    let e = sh(&format!("cat {}", m.p("secret")));
    assert!(String::from_utf8_lossy(&e.stderr).contains("Permission denied"));
    let mut s = connect();
    assert_eq!(
        ask(&mut s, 5, who(0, true), read(anon)).unwrap_err(),
        libc::EACCES
    );
    std::fs::write(m.p("open/by-root"), "x").unwrap();
    assert_eq!(owner(&bricks[0].join("open/by-root")), (65534, 65534));
    assert!(sh(&format!("touch {}", m.p("at-top"))).status.code() != Some(0));
    // Users are themselves still.
    let o = as_user(1000, &[], &format!("echo me > {}", m.p("open/by-user")));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(owner(&bricks[0].join("open/by-user")).0, 1000);

    // server.all-squash: everyone is server.anonuid and server.anongid.
    set_options(
        &c,
        "id",
        &[
            ("server.all-squash", "on"),
            ("server.anonuid", "4242"),
            ("server.anongid", "4343"),
        ],
    );
    wait_for("users to be squashed", Duration::from_secs(20), || {
        std::fs::write(m.p("open/probe"), "x").is_ok()
            && owner(&bricks[0].join("open/probe")) == (4242, 4343)
    });
    let o = as_user(1000, &[], &format!("echo all > {}", m.p("open/all")));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(owner(&bricks[0].join("open/all")), (4242, 4343));

    // Back to trusting what mounts say: root reads its file again.
    for o in [
        "server.root-squash",
        "server.all-squash",
        "server.anonuid",
        "server.anongid",
    ] {
        c.ok(&["volume", "reset", "id", o]);
    }
    wait_for("root to be root again", Duration::from_secs(20), || {
        std::fs::read_to_string(m.p("secret")).is_ok_and(|s| s == "root only\n")
    });
}

/// What the daemon at `c` answers the CLI's `args` sent with the
/// credential in `file`: its output, or the error shown.
fn cli_with(c: &Cluster, file: &std::path::Path, args: &[&str]) -> Result<String, String> {
    let o = std::process::Command::new(BIN)
        .args(["--server", &c.server(), "--credential"])
        .arg(file)
        .args(args)
        .output()
        .unwrap();
    match o.status.success() {
        true => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&o.stderr).into_owned()),
    }
}

fn pool_list_with(c: &Cluster, file: &std::path::Path) -> Result<String, String> {
    cli_with(c, file, &["pool", "list"])
}

/// What a brick answers a handshake made with the credential in `file`.
fn brick_handshake_with(addr: &str, brick: &str, file: &std::path::Path) -> Msg {
    let mut s = tls_connect(addr, file);
    s.write_all(&hello_frame(brick)).unwrap();
    read_msg(&mut s)
}

#[test]
fn a_detached_servers_certificates_and_any_it_makes_after_are_refused() {
    let a = Cluster::start();
    let b = Cluster::start();
    a.probe(&b);
    let bricks = a.volume("dv", 1, &["d1"]);
    let brick = bricks[0].display().to_string();
    let addr = brick_addr(&a, "dv", 0);
    // What b has while it is of the pool: its credentials, and the pool's
    // CA with its key (every server holds it).
    let kept = a.path("kept");
    std::fs::create_dir_all(kept.join("tls")).unwrap();
    for f in ["server.pem", "admin.pem", "ca.pem", "ca.key"] {
        std::fs::copy(b.path("state/tls").join(f), kept.join("tls").join(f)).unwrap();
    }
    let (server, admin) = (kept.join("tls/server.pem"), kept.join("tls/admin.pem"));
    pool_list_with(&a, &server).expect("a member's server certificate is taken");
    pool_list_with(&a, &admin).expect("a member's administrator certificate is taken");
    wait_for(
        "the brick to know b's certificates",
        Duration::from_secs(20),
        || {
            matches!(
                brick_handshake_with(&addr, &brick, &server),
                Msg::Welcome { .. }
            )
        },
    );

    a.ok(&["peer", "detach", &b.ip]);
    // Its certificates, and one it makes with the CA's key it kept, are
    // refused by the daemon and by the brick.
    let forged = kept.join("forged.pem");
    let pem = mortar::mgmt::authority::issue(
        &kept,
        mortar::protocol::tls::SERVER_NAME,
        "made after leaving",
    )
    .unwrap();
    std::fs::write(&forged, pem).unwrap();
    for cred in [&server, &admin, &forged] {
        let e = pool_list_with(&a, cred).expect_err("refused");
        assert!(
            e.contains("not one the pool takes"),
            "{}: {e}",
            cred.display()
        );
    }
    wait_for(
        "the brick to refuse b's certificates",
        Duration::from_secs(20),
        || {
            [&server, &admin, &forged].iter().all(|c| {
                matches!(brick_handshake_with(&addr, &brick, c),
                Msg::Refused { reason } if reason.contains("not one the pool takes"))
            })
        },
    );
    // The pool's own go on.
    pool_list_with(&a, &a.credential()).expect("the pool's administrator");
    let m = a.mount("dv");
    std::fs::write(m.p("after"), "still served\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(bricks[0].join("after")).unwrap(),
        "still served\n"
    );

    // Nor can it pose as the pool to a client that knows the record: with
    // a's daemon and brick gone, a server holding the forged certificate
    // listens on the brick's port; the mount reconnecting there refuses it.
    let mut a = a;
    a.kill_daemon();
    let mut listener = None;
    wait_for(
        "the brick's port to be free",
        Duration::from_secs(20),
        || {
            listener = std::net::TcpListener::bind(&addr).ok();
            listener.is_some()
        },
    );
    let listener = listener.unwrap();
    listener.set_nonblocking(true).unwrap();
    let poke = m.p("after");
    std::thread::spawn(move || {
        for _ in 0..20 {
            let _ = std::fs::metadata(&poke);
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let (tried, served) = std::thread::spawn(move || {
        use mortar::protocol::tls;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            tls::install(&tls::Credential::load(&forged).unwrap()).unwrap();
            let acceptor = tls::acceptor(tls::Clients::Anyone).unwrap();
            let l = tokio::net::TcpListener::from_std(listener).unwrap();
            let (mut tried, mut served) = (0, 0);
            while tried < 2 {
                let Ok(Ok((tcp, _))) =
                    tokio::time::timeout(Duration::from_secs(30), l.accept()).await
                else {
                    break;
                };
                tried += 1;
                served += acceptor.accept(tcp).await.is_ok() as usize;
            }
            (tried, served)
        })
    })
    .join()
    .unwrap();
    assert!(tried > 0, "the mount never tried the brick's port again");
    assert_eq!(
        served, 0,
        "a handshake with the forged certificate completed"
    );
    let log = std::fs::read_to_string(a.path("client.log")).unwrap();
    assert!(log.contains("not on the pool's record"), "{log}");
}

#[test]
fn administrator_credentials_read_only_or_not_and_revoked() {
    let c = Cluster::start();
    c.volume("pc", 1, &["p1"]);
    let (ro, rw) = (c.path("watcher.pem"), c.path("ops.pem"));
    for (name, access, file) in [("watcher", "ro", &ro), ("ops", "rw", &rw)] {
        c.ok(&[
            "pool",
            "credentials",
            "create",
            name,
            access,
            "--out",
            file.to_str().unwrap(),
        ]);
        assert_eq!(ok(&format!("stat -c %a {}", file.display())).trim(), "600");
    }
    c.fails(&["pool", "credentials", "create", "x", "--as", "1000"]);
    let list = c.ok(&["pool", "credentials", "list"]);
    assert!(list.contains("watcher") && list.contains("ops"), "{list}");

    // Read-only: looks, changes nothing, mounts nothing.
    let info = cli_with(&c, &ro, &["volume", "info", "pc"]).expect("info");
    assert!(info.contains("pc"), "{info}");
    cli_with(&c, &ro, &["volume", "status", "pc"]).expect("status");
    cli_with(&c, &ro, &["pool", "credentials", "list"]).expect("list");
    for change in [
        &["volume", "set", "pc", "performance.io-cache", "off"][..],
        &["peer", "token"],
        &["pool", "credentials", "create", "more"],
        &["volume", "credentials", "pc", "create", "laptop"],
    ] {
        let e = cli_with(&c, &ro, change).expect_err("refused");
        assert!(e.contains("may not change"), "{change:?}: {e}");
    }
    assert!(!c
        .ok(&["volume", "get", "pc", "performance.io-cache"])
        .contains("off"));
    let why = c
        .try_mount("pc", &[], &[&format!("credential={}", ro.display())])
        .err()
        .expect("refused");
    assert!(why.contains("does not mount"), "{why}");

    // Read-write: an administrator's.
    cli_with(
        &c,
        &rw,
        &["volume", "set", "pc", "performance.io-cache", "off"],
    )
    .expect("set");

    // Rotated: the new one works, the old one no more.
    let old = c.path("ops-old.pem");
    std::fs::copy(&rw, &old).unwrap();
    c.ok(&[
        "pool",
        "credentials",
        "rotate",
        "ops",
        "--out",
        rw.to_str().unwrap(),
    ]);
    cli_with(&c, &rw, &["volume", "info", "pc"]).expect("the new one");
    let e = cli_with(&c, &old, &["volume", "info", "pc"]).expect_err("retired");
    assert!(e.contains("a rotation replaced it"), "{e}");
    c.fails(&["pool", "credentials", "rotate", "nobody"]);

    // Revoked: refused from then on.
    c.ok(&["pool", "credentials", "revoke", "watcher"]);
    c.ok(&["pool", "credentials", "revoke", "ops"]);
    let e = cli_with(&c, &ro, &["volume", "info", "pc"]).expect_err("revoked");
    assert!(e.contains("not one of the pool's"), "{e}");
    let e = cli_with(&c, &rw, &["volume", "info", "pc"]).expect_err("revoked");
    assert!(e.contains("not one the pool takes"), "{e}");
    c.ok(&["volume", "info", "pc"]);
}

/// Kills brick `i` of `vol` and waits until its daemon started it again:
/// every client's connection to it is new after.
fn restart_brick(c: &Cluster, vol: &str, i: usize) {
    let pid = brick_pid(c, vol, i);
    ok(&format!("kill -9 {pid}"));
    wait_brick_restarted(c, vol, i, pid);
}

/// Waits until a file written through `dir` reaches `brick`: the mount
/// is connected to it again.
fn wait_reaches(dir: &str, brick: &std::path::Path, what: &str) {
    let mut n = 0;
    wait_for(what, Duration::from_secs(30), || {
        n += 1;
        let name = format!("probe-{n}");
        std::fs::write(format!("{dir}/{name}"), "x").is_ok() && brick.join(&name).exists()
    });
}

#[test]
fn certificates_rotate_while_mounts_go_on() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let a = Cluster::start();
    let b = Cluster::start();
    a.probe(&b);
    let bricks = a.volume("rv", 2, &["r1", "r2"]);
    let brick = bricks[0].display().to_string();
    let addr = brick_addr(&a, "rv", 0);
    let m = a.mount("rv");
    let laptop = a.path("laptop.pem");
    a.ok(&[
        "volume",
        "credentials",
        "rv",
        "create",
        "laptop",
        "--out",
        laptop.to_str().unwrap(),
    ]);
    let with = |f: &std::path::Path| format!("credential={}", f.display());
    let lm = a.try_mount("rv", &[], &[&with(&laptop)]).expect("mounts");
    // Copies of what the servers and the laptop hold now.
    let old = a.path("old");
    std::fs::create_dir_all(&old).unwrap();
    let keep = |from: std::path::PathBuf, name: &str| {
        let to = old.join(name);
        std::fs::copy(from, &to).unwrap();
        to
    };
    let a_admin = keep(a.path("state/tls/admin.pem"), "a-admin.pem");
    let a_server = keep(a.path("state/tls/server.pem"), "a-server.pem");
    let b_server = keep(b.path("state/tls/server.pem"), "b-server.pem");
    let old_laptop = keep(laptop.clone(), "laptop.pem");

    // Both servers rotate while a program writes through the mount.
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, dir) = (stop.clone(), m.p(""));
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                std::fs::write(format!("{dir}/w{n}"), n.to_string())
                    .map_err(|e| format!("w{n}: {e}"))?;
                n += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok::<usize, String>(n)
        })
    };
    let said = a.ok(&["pool", "rotate-certs"]);
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap().expect("every write succeeded");
    assert!(written > 10, "{written} writes");
    for host in [&a.ip, &b.ip] {
        assert!(
            said.contains(&format!("{host}: certificates rotated")),
            "{said}"
        );
    }
    for (f, was) in [
        (a.path("state/tls/admin.pem"), &a_admin),
        (b.path("state/tls/server.pem"), &b_server),
    ] {
        assert_ne!(std::fs::read(&f).unwrap(), std::fs::read(was).unwrap());
        assert_eq!(ok(&format!("stat -c %a {}", f.display())).trim(), "600");
    }

    // The old certificates: no new connection, to a daemon or a brick.
    for cred in [&a_admin, &a_server, &b_server] {
        let e = pool_list_with(&a, cred).expect_err("retired");
        assert!(e.contains("a rotation replaced it"), "{e}");
    }
    wait_for(
        "the brick to refuse the retired certificate",
        Duration::from_secs(20),
        || {
            matches!(brick_handshake_with(&addr, &brick, &a_admin),
                Msg::Refused { reason } if reason.contains("replaced by a rotation"))
        },
    );
    // The pool goes on with the new ones: a change through b reaches the
    // leader, a new mount works.
    b.ok(&["volume", "set", "rv", "performance.io-cache", "off"]);
    assert!(a
        .ok(&["volume", "get", "rv", "performance.io-cache"])
        .contains("off"));
    let fresh = a.mount("rv");
    assert_eq!(std::fs::read_to_string(fresh.p("w0")).unwrap(), "0");
    // The mount's connections opened before went on; new ones (its brick
    // restarted) are made with the new credential its file holds.
    restart_brick(&a, "rv", 0);
    wait_reaches(
        &m.p(""),
        &bricks[0],
        "the mount to reconnect with its new credential",
    );

    // A client credential rotated: the file replaced in place, the mount
    // using it goes on and takes it for its next connection; the old one
    // mounts no more.
    a.ok(&[
        "volume",
        "credentials",
        "rv",
        "rotate",
        "laptop",
        "--out",
        laptop.to_str().unwrap(),
    ]);
    assert_ne!(
        std::fs::read(&laptop).unwrap(),
        std::fs::read(&old_laptop).unwrap()
    );
    assert_eq!(
        ok(&format!("stat -c %a {}", laptop.display())).trim(),
        "600"
    );
    std::fs::write(lm.p("from-laptop"), "still\n").unwrap();
    let why = a
        .try_mount("rv", &[], &[&with(&old_laptop)])
        .err()
        .expect("refused");
    assert!(why.contains("a rotation replaced it"), "{why}");
    a.try_mount("rv", &[], &[&with(&laptop)])
        .expect("the new one mounts");
    restart_brick(&a, "rv", 0);
    wait_reaches(
        &lm.p(""),
        &bricks[0],
        "the laptop to reconnect with its new credential",
    );
    let list = a.ok(&["volume", "credentials", "rv", "list"]);
    assert!(list.contains("laptop"), "{list}");

    // No rotation while a server is away: it could not follow the pool
    // when it came back.
    let mut b = b;
    b.kill_daemon();
    wait_for(
        "a rotation to be refused with b away",
        Duration::from_secs(30),
        || {
            let o = a.cli(&["pool", "rotate-certs"]);
            !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("not connected")
        },
    );
}

/// server.root-squash turned on while a mount holds root's files in its
/// caches: what the mount just wrote and read back, or holds open, is
/// refused to a new open as soon as the setting has reached the bricks
/// (within 10 s here; `volume set` returns once they have it).
#[test]
fn root_squash_turned_on_under_a_mount_applies_to_what_it_holds() {
    let c = Cluster::start();
    c.volume("rs", 3, &["r1", "r2", "r3"]);
    let m = c.mount("rs");
    let write_secret = |name: &str| {
        let p = m.p(name);
        std::fs::write(&p, "root only\n").unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "root only\n");
    };
    write_secret("fresh");
    write_secret("also");
    // One held open for reading across the change.
    let held = std::fs::File::open(m.p("also")).unwrap();
    c.ok(&["volume", "set", "rs", "server.root-squash", "on"]);
    // The setting reaches the bricks within seconds; then nothing the
    // mount held lets root read.
    let start = std::time::Instant::now();
    wait_for("root to be squashed", Duration::from_secs(10), || {
        std::fs::read_to_string(m.p("fresh")).is_err()
    });
    let took = start.elapsed();
    for f in ["fresh", "also"] {
        let e = sh(&format!("cat {}", m.p(f)));
        assert!(
            String::from_utf8_lossy(&e.stderr).contains("Permission denied"),
            "{f}: {e:?}"
        );
    }
    eprintln!("root squashed after {took:?}");
    drop(held);
}
