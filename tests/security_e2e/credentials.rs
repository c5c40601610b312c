//! Credentials: a volume's clients' (mount their volume only, revoked),
//! the administrators' (read-only or not), a detached server's refused,
//! certificates rotated under mounts.

use super::*;

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
    write_synced(m.p("g"), "from laptop\n").unwrap();
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
pub(crate) fn brick_handshake_with(addr: &str, brick: &str, file: &std::path::Path) -> Msg {
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
    write_synced(m.p("after"), "still served\n").unwrap();
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
