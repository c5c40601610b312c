//! Who may use a volume (docs/security.md): `auth.allow` and `auth.reject`
//! enforced by the bricks, by the address a client connects from.

#[path = "../common/mod.rs"]
mod common;
mod credentials;
mod identity;

use credentials::brick_handshake_with;

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
    c.one_process_per_brick();
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
    write_synced(m.p("f"), "clear\n").unwrap();
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
        write_synced(m.p("g"), "tls\n").is_ok()
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
