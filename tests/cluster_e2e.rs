//! The replicated cluster state across servers: three and five daemons,
//! each in its own network namespace ("host"), through a server killed and
//! returning, changes made on any server, changes made at once on two,
//! and partitions (docs/cluster.md).

mod common;

use common::net::Net;
use common::{wait_for, Cluster};
use std::collections::BTreeMap;
use std::time::Duration;

/// The options of `vol` as server `c` has them (from what it applied).
fn options(c: &Cluster, vol: &str) -> BTreeMap<String, String> {
    let o = c.cli(&["volume", "info", vol, "--json"]);
    if !o.status.success() {
        return BTreeMap::new();
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    serde_json::from_value(v[0]["options"].clone()).unwrap_or_default()
}

fn has(c: &Cluster, vol: &str, key: &str, value: &str) -> bool {
    options(c, vol).get(key).map(String::as_str) == Some(value)
}

/// The roles each server's peers have, as server `c` reports them.
fn roles(c: &Cluster) -> Vec<String> {
    let o = c.ok(&["peer", "status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| p["role"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn pool(n: usize) -> Net {
    let net = Net::new(n);
    let a = &net.hosts[0];
    for h in &net.hosts[1..] {
        a.ok(&["peer", "probe", &h.ip]);
    }
    for h in &net.hosts {
        wait_for(
            "every server sees the pool",
            Duration::from_secs(10),
            || h.ok(&["peer", "status"]).matches("(Connected)").count() == n - 1,
        );
    }
    net
}

#[test]
fn three_servers_keep_every_change_through_a_crash_a_return_and_a_partition() {
    let mut net = pool(3);
    let bricks: Vec<String> = (0..6)
        .map(|i| net.hosts[i % 3].brick(&format!("b{i}")))
        .collect();
    let mut create = vec!["volume", "create", "cv", "replica", "3"];
    create.extend(bricks.iter().map(String::as_str));
    create.push("force");
    // The CLI talks to any server: create on the second, start on the third.
    net.hosts[1].ok(&create);
    net.hosts[2].ok(&["volume", "start", "cv"]);
    let m = net.hosts[0].mount("cv");
    std::fs::write(m.p("f"), b"written through three hosts").unwrap();
    assert_eq!(
        std::fs::read(m.p("f")).unwrap(),
        b"written through three hosts"
    );
    drop(m);

    // A change while the third server is down reaches it when it returns.
    net.hosts[2].crash_daemon();
    net.hosts[0].ok(&["volume", "set", "cv", "cluster.quorum-count", "2"]);
    net.hosts[2].start_daemon();
    wait_for(
        "the returning server catches up",
        Duration::from_secs(15),
        || has(&net.hosts[2], "cv", "cluster.quorum-count", "2"),
    );
    // A change made on the returning server keeps the first one.
    net.hosts[2].ok(&["volume", "set", "cv", "cluster.read-hash-mode", "2"]);
    for h in &net.hosts {
        let o = h.ok(&["volume", "info", "cv", "--json", "--up-to-date"]);
        assert!(o.contains("\"cluster.quorum-count\": \"2\""), "{o}");
        assert!(o.contains("\"cluster.read-hash-mode\": \"2\""), "{o}");
    }

    // Two changes at once on two servers: both applied.
    let (h0, h1) = (&net.hosts[0], &net.hosts[1]);
    std::thread::scope(|s| {
        let x = s.spawn(|| h0.ok(&["volume", "set", "cv", "diagnostics.count-fop-hits", "on"]));
        let y = s.spawn(|| {
            h1.ok(&[
                "volume",
                "set",
                "cv",
                "cluster.favorite-child-policy",
                "size",
            ])
        });
        x.join().unwrap();
        y.join().unwrap();
    });
    for h in &net.hosts {
        wait_for("both changes everywhere", Duration::from_secs(10), || {
            has(h, "cv", "diagnostics.count-fop-hits", "on")
                && has(h, "cv", "cluster.favorite-child-policy", "size")
        });
    }

    // The first server cut off: it refuses, naming whom it cannot reach;
    // the other two go on.
    let before = options(&net.hosts[0], "cv");
    net.isolate(0);
    let (b_ip, c_ip) = (net.hosts[1].ip.clone(), net.hosts[2].ip.clone());
    wait_for(
        "the cut-off server refuses",
        Duration::from_secs(20),
        || {
            let o = net.hosts[0].cli(&["volume", "set", "cv", "cluster.quorum-count", "1"]);
            let e = String::from_utf8_lossy(&o.stderr).to_string();
            let refused = !o.status.success() && e.contains(&b_ip) && e.contains(&c_ip);
            if refused {
                eprintln!("refusal: {e}");
            }
            refused
        },
    );
    wait_for("the majority goes on", Duration::from_secs(20), || {
        net.hosts[1]
            .cli(&["volume", "set", "cv", "cluster.quorum-count", "3"])
            .status
            .success()
    });
    assert_eq!(
        options(&net.hosts[0], "cv"),
        before,
        "the minority changed nothing"
    );
    assert!(has(&net.hosts[2], "cv", "cluster.quorum-count", "3"));
    net.rejoin(0);
    wait_for(
        "the cut-off server catches up",
        Duration::from_secs(20),
        || has(&net.hosts[0], "cv", "cluster.quorum-count", "3"),
    );
    assert_eq!(options(&net.hosts[0], "cv"), options(&net.hosts[1], "cv"));
}

#[test]
fn five_servers_vote_and_a_minority_of_two_refuses_while_three_go_on() {
    let net = pool(5);
    let a = &net.hosts[0];
    a.ok(&["volume", "create", "fv", &a.brick("f1"), "force"]);
    // Five servers, five voters: the leader and four voters seen from any.
    wait_for("five voters", Duration::from_secs(15), || {
        let mut r = roles(&net.hosts[4]);
        r.sort();
        r == ["leader", "voter", "voter", "voter"]
    });
    net.split(&[3, 4], &[0, 1, 2]);
    for h in &net.hosts[3..] {
        wait_for("the minority refuses", Duration::from_secs(20), || {
            let o = h.cli(&["volume", "set", "fv", "cluster.quorum-count", "1"]);
            let e = String::from_utf8_lossy(&o.stderr).to_string();
            !o.status.success() && e.contains("no change was made")
        });
    }
    wait_for("the majority goes on", Duration::from_secs(20), || {
        net.hosts[2]
            .cli(&["volume", "set", "fv", "cluster.read-hash-mode", "3"])
            .status
            .success()
    });
    assert!(!has(&net.hosts[3], "fv", "cluster.read-hash-mode", "3"));
    assert!(!has(&net.hosts[0], "fv", "cluster.quorum-count", "1"));
    net.mend(&[3, 4], &[0, 1, 2]);
    for h in &net.hosts {
        wait_for(
            "every server has the majority's change",
            Duration::from_secs(20),
            || has(h, "fv", "cluster.read-hash-mode", "3"),
        );
        assert!(!has(h, "fv", "cluster.quorum-count", "1"));
    }
}

#[test]
fn servers_restarted_together_wiped_or_detached_end_with_one_state() {
    let mut net = pool(3);
    let b_ip = net.hosts[1].ip.clone();
    let c_ip = net.hosts[2].ip.clone();
    let brick = net.hosts[1].brick("m1");
    net.hosts[0].ok(&["volume", "create", "mv", &brick, "force"]);

    // Two servers restarted at once: the pool elects, commits, agrees.
    net.hosts[1].crash_daemon();
    net.hosts[2].crash_daemon();
    net.hosts[1].start_daemon();
    net.hosts[2].start_daemon();
    wait_for("a change commits again", Duration::from_secs(20), || {
        net.hosts[0]
            .cli(&["volume", "set", "mv", "cluster.quorum-count", "2"])
            .status
            .success()
    });
    for h in &net.hosts {
        wait_for("every server has it", Duration::from_secs(10), || {
            has(h, "mv", "cluster.quorum-count", "2")
        });
    }

    // A server whose state directory was wiped comes back as a stranger
    // (a pool of one, nothing in it) until it is probed again.
    net.hosts[2].crash_daemon();
    std::fs::remove_dir_all(net.hosts[2].path("state")).unwrap();
    net.hosts[2].start_daemon();
    assert_eq!(net.hosts[2].ok(&["volume", "info", "--json"]).trim(), "[]");
    net.hosts[0].ok(&["peer", "probe", &c_ip]);
    wait_for(
        "the wiped server has the pool's state",
        Duration::from_secs(15),
        || has(&net.hosts[2], "mv", "cluster.quorum-count", "2"),
    );
    let peers = net.hosts[0].ok(&["peer", "status"]);
    assert!(peers.starts_with("Number of Peers: 2"), "{peers}");
    assert_eq!(peers.matches(&c_ip).count(), 1, "{peers}");

    // Detaching a server that holds bricks is refused unless forced.
    let e = net.hosts[2].fails(&["peer", "detach", &b_ip]);
    assert!(e.contains("hosts one or more bricks"), "{e}");
    net.hosts[2].ok(&["peer", "detach", &b_ip, "force"]);
    wait_for(
        "the detached server is alone",
        Duration::from_secs(10),
        || net.hosts[1].ok(&["volume", "info", "--json"]).trim() == "[]",
    );
    for h in [&net.hosts[0], &net.hosts[2]] {
        wait_for("one peer left", Duration::from_secs(10), || {
            h.ok(&["peer", "status"]).starts_with("Number of Peers: 1")
        });
        assert!(has(h, "mv", "cluster.quorum-count", "2"));
    }
    // The two left still agree on changes.
    net.hosts[2].ok(&["volume", "set", "mv", "cluster.read-hash-mode", "2"]);
    wait_for("both have it", Duration::from_secs(10), || {
        has(&net.hosts[0], "mv", "cluster.read-hash-mode", "2")
    });
}
