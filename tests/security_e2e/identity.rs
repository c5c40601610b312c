//! Who a request runs as on the bricks: the caller, or squashed.

use super::*;

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

/// The owner of `p` on a brick, once it is there: a mount answers a
/// create ahead of its bricks (`performance.async-dirops`), so the file an
/// application made may reach the brick a moment after it returned.
fn owner(p: &std::path::Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    wait_for("the file on the brick", Duration::from_secs(10), || {
        p.symlink_metadata().is_ok()
    });
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

    // The attack, with a credential of the volume: the brick
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

    groups_travel_with_each_request(&m, &bricks[0]);

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

    all_squash_makes_everyone_anonymous(&c, &m, &bricks[0]);

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

/// Supplementary groups travel with each request: a member of the group
/// writes in its directory (the brick checks it too).
fn groups_travel_with_each_request(m: &Mount, brick: &std::path::Path) {
    ok(&format!(
        "mkdir {0} && chgrp 5000 {0} && chmod 2770 {0}",
        m.p("team")
    ));
    let o = as_user(1000, &[5000], &format!("echo hi > {}", m.p("team/hi")));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(owner(&brick.join("team/hi")), (1000, 5000));
    let o = as_user(1001, &[], &format!("echo no > {}", m.p("team/no")));
    assert!(!o.status.success());
    assert!(!brick.join("team/no").exists());
}

/// server.all-squash: everyone is server.anonuid and server.anongid.
fn all_squash_makes_everyone_anonymous(c: &Cluster, m: &Mount, brick: &std::path::Path) {
    set_options(
        c,
        "id",
        &[
            ("server.all-squash", "on"),
            ("server.anonuid", "4242"),
            ("server.anongid", "4343"),
        ],
    );
    wait_for("users to be squashed", Duration::from_secs(20), || {
        std::fs::write(m.p("open/probe"), "x").is_ok()
            && owner(&brick.join("open/probe")) == (4242, 4343)
    });
    let o = as_user(1000, &[], &format!("echo all > {}", m.p("open/all")));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(owner(&brick.join("open/all")), (4242, 4343));
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
