//! Every bad input to the CLI gets one clear error and changes nothing.

mod common;
use common::*;
use std::time::Duration;

/// A command line's words (none of them holds a space).
fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_string).collect()
}

#[test]
fn bad_volume_commands_are_refused_and_change_nothing() {
    let c = Cluster::start();
    c.volume("gv0", 3, &["b1/gv0", "b2/gv0", "b3/gv0"]);
    let before = c.state();
    let b = |n: &str| c.brick(n);
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            words("volume create v2 nosuchhost.invalid:/x/y force"),
            "is not in 'Peer in Cluster' state",
        ),
        (
            words(&format!(
                "volume create v2 replica 3 {} {} force",
                b("n1"),
                b("n2")
            )),
            "Incorrect number of bricks",
        ),
        (
            words(&format!("volume create v2 {} {} force", b("n1"), b("n1"))),
            "Found duplicate exports",
        ),
        (
            words(&format!(
                "volume create v2 {} {} force",
                b("n1"),
                b("n1/inner")
            )),
            "one of the bricks contain the other",
        ),
        (
            words(&format!("volume create v2 {} force", b("b1/gv0"))),
            "already part of a volume",
        ),
        (
            words(&format!("volume create v2 {} force", b("b1/gv0/sub"))),
            "already part of a volume",
        ),
        (
            words(&format!("volume create gv0 {} force", b("n9"))),
            "Volume gv0 already exists",
        ),
        (
            words(&format!("volume create v2 {}", b("n1"))),
            "root partition",
        ),
        (
            words(&format!("volume create v2 replica 1 {} force", b("n1"))),
            "replica count should be greater than 1",
        ),
        (
            words(&format!("volume create bad/name {} force", b("n1"))),
            "is not valid",
        ),
        (words("volume start gv0"), "already started"),
        (
            words("volume delete gv0"),
            "needs to be stopped before deletion",
        ),
        (words("volume start nosuch"), "does not exist"),
        (words("volume info nosuch"), "does not exist"),
        (words("volume set gv0 no.such-option 1"), "does not exist"),
        (
            words("volume set gv0 network.ping-timeout soon"),
            "is not valid",
        ),
        (
            words("volume set gv0 group virt"),
            "known groups: metadata-cache, nl-cache, db-workload",
        ),
        (words("volume create v2 h:relative"), "wrong brick type"),
    ];
    for (args, want) in &cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        c.refused(&a, want, &before);
    }
    // Each kind of failure has its exit code (docs/operations.md), and
    // `--json` says which kind it was.
    let code = |args: &[&str]| c.cli(args).status.code();
    assert_eq!(code(&["volume", "start", "gv0"]), Some(1), "a refusal");
    assert_eq!(
        code(&["volume", "rebalance", "gv0", "bogus"]),
        Some(2),
        "usage"
    );
    assert_eq!(code(&["volume", "info", "nosuch"]), Some(3), "not found");
    let o = c.cli(&["--json", "volume", "info", "nosuch"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)));
    assert_eq!(j["kind"], "not-found", "{j}");
    assert_eq!(j["exit"], 3, "{j}");
    assert!(j["message"]
        .as_str()
        .unwrap()
        .contains("Volume nosuch does not exist"));
    let away = std::process::Command::new(BIN)
        .env("MORTAR_CREDENTIAL", c.credential())
        .args(["--server", "127.0.0.1:1", "--json", "volume", "info"])
        .output()
        .unwrap();
    assert_eq!(away.status.code(), Some(5), "unreachable");
    let j: serde_json::Value = serde_json::from_slice(&away.stdout).unwrap();
    assert_eq!(j["concerns"], "127.0.0.1:1", "{j}");
    // Nothing was created on disk for refused volumes.
    assert!(!c.path("n1").exists());
    assert!(!c.path("n9").exists());
    // A stopped volume cannot be stopped again, and can then be deleted.
    c.ok(&["volume", "stop", "gv0"]);
    assert!(c
        .fails(&["volume", "stop", "gv0"])
        .contains("not in the started state"));
    c.ok(&["volume", "delete", "gv0"]);
    assert!(c.ok(&["volume", "list"]).contains("No volumes present"));
    // Its bricks can be used again; the data on them is kept.
    c.volume("gv0", 3, &["b1/gv0", "b2/gv0", "b3/gv0"]);
}

#[test]
fn options_are_set_read_and_reset() {
    let c = Cluster::start();
    c.volume("opt", 1, &["o1"]);
    c.ok(&["volume", "set", "opt", "network.ping-timeout", "7"]);
    c.ok(&["volume", "set", "opt", "storage.health-check-interval", "5"]);
    let info = c.ok(&["volume", "info", "opt"]);
    assert!(
        info.contains(
            "Options Reconfigured:\nnetwork.ping-timeout: 7\nstorage.health-check-interval: 5"
        ),
        "{info}"
    );
    let got: serde_json::Value =
        serde_json::from_str(&c.ok(&["--json", "volume", "get", "opt", "all"])).unwrap();
    assert_eq!(got["network.ping-timeout"], "7");
    assert_eq!(got["cluster.quorum-type"], "auto");
    c.ok(&["volume", "reset", "opt", "network.ping-timeout"]);
    assert!(c
        .ok(&["volume", "get", "opt", "network.ping-timeout"])
        .contains("10"));
    c.ok(&["volume", "reset", "opt"]);
    assert!(c
        .ok(&["volume", "info", "opt"])
        .ends_with("Options Reconfigured:\n"));
    // A group sets its bundle, which reset takes back like any option.
    c.ok(&["volume", "set", "opt", "group", "db-workload"]);
    let info = c.ok(&["volume", "info", "opt"]);
    assert!(
        info.ends_with(
            "Options Reconfigured:\nperformance.io-cache: off\nperformance.stat-prefetch: off\nperformance.write-behind: off\n"
        ),
        "{info}"
    );
    c.ok(&["volume", "reset", "opt"]);
}

#[test]
fn every_command_has_help() {
    for args in [
        vec!["--help"],
        vec!["volume", "--help"],
        vec!["volume", "create", "--help"],
        vec!["volume", "status", "--help"],
        vec!["peer", "probe", "--help"],
        vec!["mount", "--help"],
        vec!["daemon", "--help"],
        vec!["volume", "replace-brick", "--help"],
        vec!["volume", "reset-brick", "--help"],
    ] {
        let o = std::process::Command::new(BIN)
            .args(&args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("Usage"),
            "{args:?}"
        );
    }
}

#[test]
fn options_for_talking_to_a_daemon_are_refused_where_they_would_do_nothing() {
    for args in [
        vec!["mount", "--server", "10.0.0.1", "h:/v", "/nonexistent"],
        vec!["--json", "daemon", "--state-dir", "/nonexistent"],
        vec!["bench", "--up-to-date"],
    ] {
        let o = std::process::Command::new(BIN)
            .args(&args)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("takes none of them"), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn peers_join_and_share_volumes() {
    let a = Cluster::start();
    let b = Cluster::start();
    assert!(a
        .fails(&["volume", "create", "pv", &b.brick("x"), "force"])
        .contains("Peer in Cluster"));
    a.probe(&b);
    assert!(a
        .ok(&["peer", "status"])
        .contains(&format!("Hostname: {}", b.ip)));
    assert!(b.ok(&["pool", "list"]).contains(&a.ip));
    // A volume with a brick on each host, created from the first.
    a.ok(&[
        "volume",
        "create",
        "pv",
        "replica",
        "2",
        &a.brick("p1"),
        &b.brick("p2"),
        "force",
    ]);
    a.ok(&["volume", "start", "pv"]);
    assert!(b.ok(&["volume", "info", "pv"]).contains("Status: Started"));
    let st = b.volume_status_json("pv");
    assert!(
        st[0]["bricks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["online"] == true),
        "{st}"
    );
    let m = a.mount("pv");
    // (A close returns before its writes land: synced to read a brick.)
    ok(&format!("echo shared > {0} && sync {0}", m.p("f")));
    assert_eq!(std::fs::read_to_string(b.path("p2/f")).unwrap(), "shared\n");
    assert!(a
        .fails(&["peer", "detach", &b.ip])
        .contains("hosts one or more bricks"));
}

#[test]
fn a_peer_that_goes_away_is_shown_disconnected_and_connected_again_when_it_returns() {
    let a = Cluster::start();
    let mut b = Cluster::start();
    a.probe(&b);
    wait_for("the peer connected", Duration::from_secs(10), || {
        a.ok(&["peer", "status"]).contains("(Connected)")
    });
    b.crash_daemon();
    wait_for("the peer disconnected", Duration::from_secs(10), || {
        let s = a.ok(&["peer", "status"]);
        s.contains("State: Peer in Cluster (Disconnected)") && s.contains("Last seen: ")
    });
    assert!(a.ok(&["pool", "list"]).contains("\tDisconnected"));
    let json: serde_json::Value =
        serde_json::from_str(&a.ok(&["--json", "peer", "status"])).unwrap();
    assert_eq!(json[0]["connected"], false, "{json}");
    b.start_daemon();
    wait_for("the peer back", Duration::from_secs(10), || {
        a.ok(&["peer", "status"]).contains("(Connected)")
    });
}

#[test]
fn a_server_of_another_pool_or_with_volumes_of_its_own_is_not_probed() {
    let a = Cluster::start();
    let b = Cluster::start();
    let c = Cluster::start();
    b.probe(&c);
    let token = |x: &Cluster| x.ok(&["peer", "token"]).trim().to_string();
    assert!(a
        .fails(&["peer", "probe", &c.ip, "--token", &token(&c)])
        .contains("already part of another pool"));
    let d = Cluster::start();
    d.ok(&["volume", "create", "own", &d.brick("o1"), "force"]);
    assert!(a
        .fails(&["peer", "probe", &d.ip, "--token", &token(&d)])
        .contains("has volumes of its own (own)"));
    assert!(a.ok(&["peer", "status"]).contains("Number of Peers: 0"));
    assert!(d
        .ok(&["volume", "info", "own"])
        .contains("Volume Name: own"));
}

#[test]
fn a_server_cut_off_from_the_pool_majority_stops_its_bricks_until_it_rejoins() {
    let a = Cluster::start();
    let mut b = Cluster::start();
    let mut c = Cluster::start();
    a.probe(&b);
    a.probe(&c);
    a.ok(&[
        "volume",
        "create",
        "sq",
        "replica",
        "3",
        &a.brick("q1"),
        &b.brick("q2"),
        &c.brick("q3"),
        "force",
    ]);
    a.ok(&["volume", "start", "sq"]);
    a.ok(&[
        "volume",
        "set",
        "sq",
        "cluster.server-quorum-type",
        "server",
    ]);
    let mine = a.brick("q1");
    let state = |a: &Cluster| -> serde_json::Value {
        let st = a.volume_status_json("sq");
        st[0]["bricks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["brick"] == mine.as_str())
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(state(&a)["online"], true);
    // Nothing changes while the pool is whole.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(state(&a)["online"], true);
    // a reaches only itself: 1 of 3, below 51%.
    b.crash_daemon();
    c.crash_daemon();
    wait_for("a's brick stopped", Duration::from_secs(20), || {
        state(&a)["online"] == false
    });
    let why = state(&a)["reason"].to_string();
    assert!(why.contains("server quorum not met"), "{why}");
    // b back: 2 of 3.
    b.start_daemon();
    wait_for("a's brick back", Duration::from_secs(20), || {
        state(&a)["online"] == true
    });
}

/// A brick directory that holds files (or belongs to another volume) is
/// refused unless the administrator forces it.
#[test]
fn a_brick_directory_with_files_is_refused_unless_forced() {
    let c = Cluster::start();
    // Off the root partition (a tmpfs), so that only emptiness is checked.
    let fs = c.path("fs");
    let _fs = SmallFs::new(fs.clone(), "16m");
    std::fs::create_dir_all(fs.join("used")).unwrap();
    std::fs::write(fs.join("used/old-file"), "old\n").unwrap();
    let brick = format!("{}:{}", c.ip, fs.join("used").display());
    c.refused(
        &["volume", "create", "nv", &brick],
        "is not empty (it holds old-file)",
        &c.state(),
    );
    // An empty one (or a new one) is taken without force.
    let fresh = format!("{}:{}", c.ip, fs.join("new").display());
    c.ok(&["volume", "create", "nv", &fresh]);
    // Belonging to another volume is refused even when empty otherwise.
    c.refused(
        &["volume", "create", "nv2", &fresh],
        "already part of a volume",
        &c.state(),
    );
    // Forced, the used directory is taken as it is.
    c.ok(&["volume", "create", "nv3", &brick, "force"]);
    assert_eq!(
        std::fs::read_to_string(fs.join("used/old-file")).unwrap(),
        "old\n"
    );
}
