//! The replicated cluster state across servers: three and five daemons,
//! each in its own network namespace ("host"), through a server killed and
//! returning, changes made on any server, changes made at once on two,
//! and partitions (docs/cluster.md).

mod common;

use common::net::Net;
use common::{brick_pid, ok, wait_for, Cluster};
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

#[test]
fn three_servers_keep_every_change_through_a_crash_a_return_and_a_partition() {
    let mut net = Net::pool(3);
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
    // The third server's bricks miss a write while it is down; the
    // healers of the other two, which connect to another server's brick
    // only once they have something to heal there, heal it when it is back.
    // (One process serves both: the server's brick host.)
    let mut pids: Vec<u64> = [2, 5].map(|i| brick_pid(&net.hosts[0], "cv", i)).to_vec();
    pids.dedup();
    net.hosts[2].crash_daemon();
    for pid in pids {
        ok(&format!("kill -9 {pid}"));
    }
    std::fs::write(m.p("g"), b"healed across hosts").unwrap();
    net.hosts[2].start_daemon();
    wait_for("the missed write healed", Duration::from_secs(30), || {
        ["b2", "b5"].iter().any(|b| {
            std::fs::read(net.hosts[2].path(b).join("g")).is_ok_and(|d| d == b"healed across hosts")
        })
    });
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

    // A follower cut off: it refuses, naming whom it cannot reach, once
    // their silence shows (4 s; docs/cluster.md), not after the 20 s a
    // change waits for an election; the other two go on. (A leader cut off
    // is the five-server test's.)
    let i = (0..3)
        .find(|&i| roles(&net.hosts[i]).iter().any(|r| r == "leader"))
        .expect("a follower");
    let (j, k) = ((i + 1) % 3, (i + 2) % 3);
    let before = options(&net.hosts[i], "cv");
    net.isolate(i);
    let cut = std::time::Instant::now();
    let (b_ip, c_ip) = (net.hosts[j].ip.clone(), net.hosts[k].ip.clone());
    wait_for(
        "the cut-off server refuses",
        Duration::from_secs(20),
        || {
            let o = net.hosts[i].cli(&["volume", "set", "cv", "cluster.quorum-count", "1"]);
            let e = String::from_utf8_lossy(&o.stderr).to_string();
            let refused = !o.status.success() && e.contains(&b_ip) && e.contains(&c_ip);
            if refused {
                eprintln!("refusal: {e}");
            }
            refused
        },
    );
    let took = cut.elapsed();
    eprintln!("the cut-off follower refused after {took:?}");
    assert!(took < Duration::from_secs(10), "refused after {took:?}");
    wait_for("the majority goes on", Duration::from_secs(20), || {
        net.hosts[j]
            .cli(&["volume", "set", "cv", "cluster.quorum-count", "3"])
            .status
            .success()
    });
    assert_eq!(
        options(&net.hosts[i], "cv"),
        before,
        "the minority changed nothing"
    );
    assert!(has(&net.hosts[k], "cv", "cluster.quorum-count", "3"));
    net.rejoin(i);
    let back = std::time::Instant::now();
    wait_for(
        "the cut-off server catches up",
        Duration::from_secs(20),
        || has(&net.hosts[i], "cv", "cluster.quorum-count", "3"),
    );
    eprintln!(
        "it caught up {:?} after the partition ended",
        back.elapsed()
    );
    assert_eq!(options(&net.hosts[i], "cv"), options(&net.hosts[j], "cv"));
}

#[test]
fn five_servers_vote_and_a_minority_of_two_refuses_while_three_go_on() {
    let net = Net::pool(5);
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
    let mut net = Net::pool(3);
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
    net.hosts[0].probe(&net.hosts[2]);
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

/// The port of each brick of `vol` as the replicated state has it.
fn state_ports(c: &Cluster, vol: &str) -> Vec<Option<u64>> {
    let info: serde_json::Value =
        serde_json::from_str(&c.ok(&["volume", "info", vol, "--json"])).unwrap();
    let bricks = info[0]["bricks"].as_array().unwrap();
    bricks.iter().map(|b| b["port"].as_u64()).collect()
}

/// The ports of `vol`'s bricks: as the state has them, and as the bricks'
/// hosts see them listening.
fn ports(c: &Cluster, vol: &str) -> (Vec<Option<u64>>, Vec<Option<u64>>) {
    let status = c.volume_status_json(vol);
    let bricks = status[0]["bricks"].as_array().unwrap();
    let live = bricks.iter().map(|b| b["port"].as_u64()).collect();
    (state_ports(c, vol), live)
}

#[test]
fn clients_reach_a_brick_by_its_port_in_the_state_while_its_daemon_is_down() {
    let a = Cluster::start();
    let mut b = Cluster::start();
    a.probe(&b);
    let (p1, p2) = (a.brick("p1"), b.brick("p2"));
    a.ok(&["volume", "create", "pv", "replica", "2", &p1, &p2, "force"]);
    a.ok(&["volume", "start", "pv"]);
    let (state, live) = ports(&a, "pv");
    assert!(state.iter().all(Option::is_some), "{state:?}");
    assert_eq!(state, live, "bricks listen on the ports the state gives");
    // The second host's daemon dies; its brick goes on. A client mounted
    // afterwards reaches it all the same: nobody needs to be asked.
    b.crash_daemon();
    let m = a.mount("pv");
    std::fs::write(m.p("f"), b"both copies").unwrap();
    // (A file made here closes before its writes land: the unmount lands
    // them.)
    m.unmount();
    assert_eq!(std::fs::read(b.path("p2/f")).unwrap(), b"both copies");
}

#[test]
fn a_brick_whose_port_is_taken_listens_on_another_and_the_state_follows() {
    let c = Cluster::start();
    c.ok(&["volume", "create", "tv", &c.brick("t1"), "force"]);
    let chosen = state_ports(&c, "tv")[0].expect("a port chosen at create");
    let squatter = std::net::TcpListener::bind((c.ip.as_str(), chosen as u16)).unwrap();
    c.ok(&["volume", "start", "tv"]);
    wait_for(
        "the state has the port the brick took",
        Duration::from_secs(15),
        || {
            let (state, live) = ports(&c, "tv");
            state[0].is_some() && state[0] != Some(chosen) && state == live
        },
    );
    drop(squatter);
    let m = c.mount("tv");
    std::fs::write(m.p("f"), b"moved").unwrap();
    m.unmount();
    assert_eq!(std::fs::read(c.path("t1/f")).unwrap(), b"moved");
}

#[test]
fn a_leader_killed_with_a_change_on_its_disk_leaves_one_state() {
    // The first server, which formed the pool and leads it, dies at the
    // second change of a volume it appends (after the two joiners'
    // certificates are on record): after writing it to its own log,
    // before it is committed.
    let mut cs: Vec<Cluster> = (0..3).map(|_| Cluster::start()).collect();
    wait_for(
        "its certificates on record",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(cs[0].path("daemon.log"))
                .is_ok_and(|l| l.contains("certificates are on record"))
        },
    );
    cs[0].crash_daemon();
    cs[0].start_daemon_env(&[("FAILPOINTS", "raft-leader-appended=3*off->panic")]);
    for c in &cs[1..] {
        cs[0].probe(c);
    }
    let brick = cs[0].brick("k1");
    cs[0].ok(&["volume", "create", "kv", &brick, "force"]);
    // A change made while the leader dies: the server asked passes it to
    // the next leader, or the CLI gets an error.
    let _ = cs[1].cli(&["volume", "set", "kv", "cluster.quorum-count", "2"]);
    assert!(
        cs[0].wait_daemon_gone(Duration::from_secs(5)),
        "the leader died at the fail point"
    );
    let (dead, alive) = (0, 1);
    // The two others elect a leader and go on.
    wait_for("a change commits again", Duration::from_secs(30), || {
        cs[alive]
            .cli(&["volume", "set", "kv", "cluster.read-hash-mode", "2"])
            .status
            .success()
    });
    cs[dead].start_daemon();
    let infos = || -> Vec<String> {
        cs.iter()
            .map(|c| c.ok(&["volume", "info", "kv", "--json", "--up-to-date"]))
            .collect()
    };
    wait_for("one state on all three", Duration::from_secs(30), || {
        let i = infos();
        i[0] == i[1] && i[1] == i[2]
    });
    assert!(has(&cs[dead], "kv", "cluster.read-hash-mode", "2"));
}

/// A leader whose daemon dies (its host stays up) is replaced without
/// waiting out Raft's election timeout: a voter that hears nothing from it
/// finds its port refusing connections and calls an election at once.
#[test]
fn a_dead_leaders_voters_elect_another_at_once() {
    let mut cs: Vec<Cluster> = (0..3).map(|_| Cluster::start()).collect();
    for c in &cs[1..] {
        cs[0].probe(c);
    }
    cs[0].ok(&["volume", "create", "ev", &cs[0].brick("e1"), "force"]);
    // The first server formed the pool and leads it.
    cs[0].crash_daemon();
    let t0 = std::time::Instant::now();
    wait_for("a change commits again", Duration::from_secs(30), || {
        cs[1]
            .cli(&["volume", "set", "ev", "cluster.read-hash-mode", "2"])
            .status
            .success()
    });
    eprintln!(
        "a change committed {:?} after the leader died",
        t0.elapsed()
    );
    let called = cs[1..].iter().any(|c| {
        std::fs::read_to_string(c.path("daemon.log"))
            .is_ok_and(|l| l.contains("calling an election now"))
    });
    assert!(
        called,
        "no voter called an election on finding the leader gone"
    );
    cs[0].start_daemon();
}

/// Sends one line to `c`'s management port and reads the answer.
/// Sends one line as another server of the pool would (Raft is theirs).
fn send_line(c: &Cluster, line: &[u8]) -> String {
    send_line_as(c, line, &c.path("state/tls/server.pem"))
}

fn send_line_as(c: &Cluster, line: &[u8], credential: &std::path::Path) -> String {
    use std::io::{BufRead, Write};
    let mut s = common::tls_connect(&c.server(), credential);
    s.write_all(line).unwrap();
    s.write_all(b"\n").unwrap();
    let mut answer = String::new();
    std::io::BufReader::new(s).read_line(&mut answer).unwrap();
    answer
}

#[test]
fn malformed_or_misaddressed_management_messages_change_nothing() {
    use mortar::mgmt::consensus::network::{Envelope, Message};
    use openraft::raft::VoteRequest;
    let c = Cluster::start();
    c.ok(&["volume", "create", "mv", &c.brick("m1"), "force"]);
    let before = c.ok(&["volume", "info", "--json"]);
    let pool: serde_json::Value = serde_json::from_str(&c.ok(&["pool", "list", "--json"])).unwrap();
    let me = mortar::mgmt::consensus::node_id(pool["localhost"]["uuid"].as_str().unwrap());
    // A vote for a stranger at a far later term.
    let vote = |to| {
        let msg = Message::Vote(VoteRequest::new(openraft::Vote::new(1000, 4242), None));
        let raft = serde_json::value::to_raw_value(&Envelope { to, msg }).unwrap();
        serde_json::to_vec(&mortar::mgmt::rpc::Request::Raft(raft)).unwrap()
    };
    for (line, refused) in [
        (b"garbage".to_vec(), "malformed request"),
        (
            b"{\"Raft\":{\"to\":1,\"msg\":[]}}".to_vec(),
            "malformed raft message",
        ),
        (vote(me ^ 1), "no longer member"),
    ] {
        let answer = send_line(&c, &line);
        assert!(answer.contains(refused), "{answer}");
    }
    let _ = send_line(&c, &vote(me));
    // An administrator does not speak for a server.
    let answer = send_line_as(&c, &vote(me), &c.credential());
    assert!(
        answer.contains("only the pool's servers send this"),
        "{answer}"
    );
    assert_eq!(c.ok(&["volume", "info", "--json"]), before);
    wait_for("changes commit as before", Duration::from_secs(20), || {
        c.cli(&["volume", "set", "mv", "cluster.quorum-count", "1"])
            .status
            .success()
    });
}

#[test]
fn servers_whose_clocks_differ_keep_one_state() {
    // The second server's monotonic clock runs a day ahead (a time
    // namespace: Raft's timers), the third's wall clock three days behind
    // (libfaketime); the first's is the machine's.
    let mut cs: Vec<Cluster> = (0..3).map(|_| Cluster::start()).collect();
    // libfaketime preloaded directly: the `faketime` wrapper keeps a
    // semaphore per pid in /dev/shm, left behind when it is killed, and
    // refuses to start ("sem_open: File exists") once a pid comes again.
    let lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
    let preload = format!("LD_PRELOAD={lib}");
    let faketime: Vec<&str> = if std::path::Path::new(lib).exists() {
        vec!["env", &preload, "FAKETIME=-3d"]
    } else {
        vec!["faketime", "-f", "-3d"]
    };
    let wraps: [&[&str]; 2] = [
        &[
            "unshare",
            "--time",
            "--monotonic",
            "86400",
            "--boottime",
            "86400",
            "--fork",
            "--kill-child",
            "--",
        ],
        &faketime,
    ];
    for (c, wrap) in cs[1..].iter_mut().zip(wraps) {
        c.crash_daemon();
        c.wrap = wrap.iter().map(|s| s.to_string()).collect();
        c.start_daemon();
    }
    for c in &cs[1..] {
        cs[0].probe(c);
    }
    let brick = cs[1].brick("t1");
    cs[2].ok(&["volume", "create", "tv", &brick, "force"]);
    cs[1].ok(&["volume", "set", "tv", "cluster.quorum-count", "2"]);
    // The leader goes; the two others, their clocks days apart, elect one
    // and go on; it returns and catches up.
    cs[0].crash_daemon();
    wait_for(
        "a change commits without the first",
        Duration::from_secs(30),
        || {
            cs[2]
                .cli(&["volume", "set", "tv", "cluster.read-hash-mode", "2"])
                .status
                .success()
        },
    );
    cs[0].start_daemon();
    for c in &cs {
        wait_for(
            "every server has both changes",
            Duration::from_secs(20),
            || {
                has(c, "tv", "cluster.quorum-count", "2")
                    && has(c, "tv", "cluster.read-hash-mode", "2")
            },
        );
        wait_for(
            "every server sees the two others",
            Duration::from_secs(10),
            || c.ok(&["peer", "status"]).matches("(Connected)").count() == 2,
        );
    }
}
