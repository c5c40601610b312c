//! Watching a running volume: the Prometheus metrics of bricks, clients
//! and the daemon, `volume profile` and `volume top`.

mod common;
use common::*;
use std::io::{Read, Write};
use std::time::Duration;

#[test]
fn the_metrics_of_a_brick_a_client_and_the_daemon_move_with_a_write() {
    let c = Cluster::start();
    c.one_process_per_brick();
    c.volume("mv", 3, &["b1", "b2", "b3"]);
    // (Its scrubber's counters are served from when it starts.)
    c.ok(&["volume", "bitrot", "mv", "enable"]);
    let client_addr = format!("{}:24120", c.ip);
    let m = c.mount_with("mv", &[], &[&format!("metrics={client_addr}")]);
    let brick_port = brick_addr(&c, "mv", 0)
        .rsplit(':')
        .next()
        .unwrap()
        .parse::<u16>()
        .unwrap();
    let brick_metrics = format!("{}:{}", c.ip, brick_port + 1000);
    let daemon_metrics = format!("{}:24108", c.ip);
    wait_for("the scrubber to start", Duration::from_secs(30), || {
        scrape(&daemon_metrics).contains("mortar_scrub_damaged_total{")
    });

    let brick_before = scrape(&brick_metrics);
    let client_before = scrape(&client_addr);
    ok(&format!(
        "dd if=/dev/urandom of={} bs=64k count=32 conv=fsync status=none",
        m.p("f")
    ));
    let brick = scrape(&brick_metrics);
    let client = scrape(&client_addr);
    let moved = |after: &str, before: &str, metric: &str, labels: &[&str]| {
        value(after, metric, labels) - value(before, metric, labels)
    };
    // The brick saw the writes, their bytes and the fsync.
    assert!(
        moved(
            &brick,
            &brick_before,
            "mortar_fops_total",
            &["fop=\"write\""]
        ) >= 1.0,
        "{brick}"
    );
    assert!(
        moved(&brick, &brick_before, "mortar_written_bytes_total", &[]) >= (2 << 20) as f64,
        "{brick}"
    );
    assert!(value(&brick, "mortar_fops_total", &["fop=\"fsync\""]) >= 1.0);
    assert!(
        value(
            &brick,
            "mortar_fop_duration_seconds_count",
            &["fop=\"write\""]
        ) >= 1.0
    );
    assert!(
        value(&brick, "mortar_clients", &["role=\"brick\""]) >= 1.0,
        "{brick}"
    );
    assert!(
        value(&brick, "mortar_brick_disk_free_bytes", &[]) > 0.0,
        "{brick}"
    );
    // So did the client, which is connected to all three bricks.
    assert!(
        moved(&client, &client_before, "mortar_written_bytes_total", &[]) >= (2 << 20) as f64,
        "{client}"
    );
    assert!(
        moved(
            &client,
            &client_before,
            "mortar_fops_total",
            &["fop=\"create\""]
        ) >= 1.0
    );
    assert_eq!(
        value(&client, "mortar_brick_up", &["volume=\"mv\""]),
        3.0,
        "{client}"
    );
    // An error is counted by its errno.
    let _ = sh(&format!("stat {}", m.p("missing")));
    let client = scrape(&client_addr);
    assert!(
        value(&client, "mortar_fop_errors_total", &["errno=\"ENOENT\""]) >= 1.0,
        "{client}"
    );
    // The daemon: its bricks up, the quorum held, no peer lost.
    let daemon = scrape(&daemon_metrics);
    assert_eq!(
        value(&daemon, "mortar_brick_up", &["volume=\"mv\""]),
        3.0,
        "{daemon}"
    );
    assert_eq!(value(&daemon, "mortar_server_quorum", &[]), 1.0, "{daemon}");
    assert_eq!(
        value(&daemon, "mortar_peers", &["state=\"disconnected\""]),
        0.0
    );
    assert!(value(&daemon, "mortar_process_resident_memory_bytes", &[]) > 0.0);
    // Every metric the alert rules and the dashboard use exists.
    let all = format!("{brick}{client}{daemon}");
    for file in [
        "packaging/prometheus/mortar-rules.yml",
        "packaging/grafana/mortar-dashboard.json",
    ] {
        let text =
            std::fs::read_to_string(format!("{}/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let mut names: Vec<&str> = text
            .split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
            .filter(|w| w.starts_with("mortar_"))
            .collect();
        names.sort();
        names.dedup();
        assert!(names.len() >= 8, "{file}: {names:?}");
        for name in names {
            let base = ["_total", "_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            assert!(
                all.contains(&format!("# TYPE {base} ")),
                "{file} uses {name}, which no process serves"
            );
        }
    }
    // A killed brick shows down at the client until it is back.
    let pid = brick_pid(&c, "mv", 1);
    ok(&format!("kill -9 {pid}"));
    wait_for(
        "the client to see the brick down",
        Duration::from_secs(10),
        || value(&scrape(&client_addr), "mortar_brick_up", &["volume=\"mv\""]) < 3.0,
    );
    wait_for("the brick back", Duration::from_secs(30), || {
        value(&scrape(&client_addr), "mortar_brick_up", &["volume=\"mv\""]) == 3.0
    });
    // Anything but /metrics is not found.
    let mut s = std::net::TcpStream::connect(&brick_metrics).unwrap();
    write!(s, "GET /x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 404"), "{out}");
    m.unmount();
}

#[test]
fn volume_profile_and_top_show_what_reached_the_bricks() {
    let c = Cluster::start();
    let bricks = c.volume("pv", 3, &["b1", "b2", "b3"]);
    let m = c.mount("pv");
    let not_started = c.fails(&["volume", "profile", "pv", "info"]);
    assert!(
        not_started.contains("Profile on Volume pv is not started"),
        "{not_started}"
    );
    let started = c.ok(&["volume", "profile", "pv", "start"]);
    assert!(
        started.contains("Starting volume profile on pv has been successful"),
        "{started}"
    );
    let again = c.fails(&["volume", "profile", "pv", "start"]);
    assert!(again.contains("already started"), "{again}");
    // The bricks apply the option as they follow the volume.
    std::thread::sleep(Duration::from_secs(4));
    ok(&format!("mkdir {}", m.p("d")));
    // The big file written through (O_DIRECT: 128 writes reach each
    // brick), so that it is the one written most whatever write-behind
    // joins of the small one's two (once it joined the big one's into
    // one request and the small one came first).
    for (name, kib, flag) in [("d/big", 512, "oflag=direct"), ("d/small", 8, "")] {
        ok(&format!(
            "dd if=/dev/zero of={} bs=4k count={} conv=fsync {flag} status=none",
            m.p(name),
            kib / 4
        ));
    }
    ok(&format!("cat {} > /dev/null", m.p("d/small")));

    let text = c.ok(&["volume", "profile", "pv", "info"]);
    for b in &bricks {
        assert!(
            text.contains(&format!("Brick: {}:{}", c.ip, b.display())),
            "{text}"
        );
    }
    for want in [
        "Cumulative Stats:",
        "Interval 0 Stats:",
        "WRITE",
        "CREATE",
        "FSYNC",
        "4Kb+",
        "Data Written:",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&c.ok(&["--json", "volume", "profile", "pv", "info"])).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 3);
    for b in json.as_array().unwrap() {
        let r = &b["report"];
        // Every replica got every write: 128 + 2 blocks of 4 KiB at least
        // (the mount may join them).
        assert!(
            r["cumulative"]["fops"]["write"]["calls"].as_u64().unwrap() >= 1,
            "{b}"
        );
        assert!(
            r["cumulative"]["written_bytes"].as_u64().unwrap() >= 520 * 1024,
            "{b}"
        );
        // Nothing happened since the last info.
        assert!(r["interval"]["fops"].get("write").is_none(), "{b}");
    }
    let inc = c.ok(&["volume", "profile", "pv", "info", "incremental"]);
    assert!(
        !inc.contains("Cumulative Stats:") && inc.contains("Interval 2 Stats:"),
        "{inc}"
    );

    // Top: the file written most comes first, by path.
    let top = c.ok(&["volume", "top", "pv", "write", "list-cnt", "1"]);
    assert!(top.contains("/d/big") && !top.contains("/d/small"), "{top}");
    let one = c.ok(&["volume", "top", "pv", "open", "brick", &c.brick("b2")]);
    assert_eq!(one.matches("Brick:").count(), 1, "{one}");
    assert!(
        one.contains("Current open fds: ") && one.contains("/d/small"),
        "{one}"
    );
    let perf = c.ok(&["--json", "volume", "top", "pv", "write-perf"]);
    let perf: serde_json::Value = serde_json::from_str(&perf).unwrap();
    assert!(
        perf[0]["report"]["entries"][0]["value"].as_f64().unwrap() > 0.0,
        "{perf}"
    );
    let bad = c.fails(&["volume", "top", "pv", "open", "brick", "nowhere:/x"]);
    assert!(bad.contains("not a brick of volume pv"), "{bad}");
    let bad = c.fails(&["volume", "top", "pv", "open", "list-cnt", "1000"]);
    assert!(bad.contains("list-cnt"), "{bad}");

    let stopped = c.ok(&["volume", "profile", "pv", "stop"]);
    assert!(
        stopped.contains("Stopping volume profile on pv has been successful"),
        "{stopped}"
    );
    assert!(c
        .fails(&["volume", "profile", "pv", "info"])
        .contains("not started"));
    m.unmount();
}

#[test]
fn volume_status_details_and_statedumps_show_each_brick_process() {
    let c = Cluster::start();
    c.volume("sv", 3, &["b1", "b2", "b3"]);
    let dumps = c.path("dumps");
    let m = c.mount_env("sv", &[("MORTAR_DUMP_DIR", dumps.to_str().unwrap())]);
    ok(&format!("echo hello > {}", m.p("f")));
    // A file held open for writing: one open file on every replica.
    let mut holder = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("exec 3>>{}; sleep 60", m.p("f")))
        .spawn()
        .unwrap();
    wait_for(
        "the open file on the bricks",
        Duration::from_secs(10),
        || {
            c.ok(&["volume", "status", "sv", "inode"])
                .matches("Open files        : 1")
                .count()
                == 3
        },
    );

    let detail = c.ok(&["volume", "status", "sv", "detail"]);
    for want in [
        "File System",
        "Total Disk Space",
        "Disk Space Free",
        "Inode Count",
        "Free Inodes",
    ] {
        assert_eq!(detail.matches(want).count(), 3, "{want}: {detail}");
    }
    let mem = c.ok(&["volume", "status", "sv", "mem"]);
    assert_eq!(mem.matches("Resident memory").count(), 3, "{mem}");
    let fd = c.ok(&["volume", "status", "sv", "fd"]);
    assert_eq!(fd.matches("Brick : ").count(), 3, "{fd}");
    let json: serde_json::Value =
        serde_json::from_str(&c.ok(&["--json", "volume", "status", "sv", "fd"])).unwrap();
    for b in json.as_array().unwrap() {
        let open: u64 = b["report"]["clients"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["open_fds"].as_u64().unwrap())
            .sum();
        assert!(open >= 1, "{b}");
    }
    let clients = c.ok(&["volume", "status", "sv", "clients"]);
    assert!(clients.contains("BytesWritten"), "{clients}");
    let json: serde_json::Value =
        serde_json::from_str(&c.ok(&["--json", "volume", "status", "sv", "clients"])).unwrap();
    let written: u64 = json["bricks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| b["clients"].as_array().unwrap().iter())
        .map(|c| c["written_bytes"].as_u64().unwrap())
        .sum();
    assert!(written >= 3 * 6, "{json}");
    holder.kill().unwrap();
    holder.wait().unwrap();

    // A dump of every brick, collected on the server asked.
    let out = c.ok(&["volume", "statedump", "sv"]);
    let files: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_once(": ").map(|(_, f)| f))
        .collect();
    assert_eq!(files.len(), 3, "{out}");
    for f in files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{f}: {e}"));
        for want in [
            "[process]",
            "[brick]",
            "[translators]",
            "features/locks",
            "features/leases",
            "[connections]",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
    }
    // Any process writes its own on SIGUSR1: here the client.
    let pid = client_pid(&m.dir);
    ok(&format!("kill -USR1 {pid}"));
    wait_for("the client's dump", Duration::from_secs(10), || {
        std::fs::read_dir(&dumps).is_ok_and(|mut d| d.next().is_some())
    });
    let dump = std::fs::read_dir(&dumps)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::thread::sleep(Duration::from_millis(200));
    let text = std::fs::read_to_string(&dump).unwrap();
    assert!(
        text.contains("[graph]") && text.contains("cluster/replicate"),
        "{text}"
    );
    m.unmount();
}

/// Stops the try-out pool however the test ends.
struct TryPool(std::path::PathBuf);

impl Drop for TryPool {
    fn drop(&mut self) {
        let _ = sh(&format!(
            "{}/scripts/try-cluster.sh stop {}",
            env!("CARGO_MANIFEST_DIR"),
            self.0.display()
        ));
    }
}

#[test]
fn the_try_out_script_starts_a_pool_of_three_servers_and_stops_it() {
    let tmp = tempfile::tempdir().unwrap();
    let pool = TryPool(tmp.path().join("try"));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/try-cluster.sh");
    let d = pool.0.display().to_string();
    let out = ok(&format!("MORTAR={BIN} {script} start {d}"));
    assert!(out.contains("holds volume 'try'"), "{out}");
    // (A close returns before its writes land: synced to read a brick.)
    ok(&format!("echo hello > {d}/mnt/f && sync {d}/mnt/f"));
    for i in 1..=3 {
        let copy = std::fs::read_to_string(format!("{d}/s{i}/brick/f")).unwrap();
        assert_eq!(copy, "hello\n", "server {i}");
    }
    let info = ok(&format!(
        "{BIN} --server 10.77.0.2 --credential {d}/s2/state/tls/admin.pem volume info try"
    ));
    assert!(
        info.contains("1 x 3 = 3") && info.contains("10.77.0.3:"),
        "{info}"
    );
    let again = sh(&format!("MORTAR={BIN} {script} start {d}"));
    assert!(!again.status.success(), "a second start must refuse");
    let out = ok(&format!("{script} stop {d}"));
    assert!(out.contains("stopped"), "{out}");
    assert!(
        !sh("ip link show mtry0").status.success(),
        "the bridge is left"
    );
    assert!(!pool.0.exists());
}

/// Every `.log` file under `dir`, read.
fn logs_under(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, String)>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            logs_under(&p, out);
        } else if p.extension().is_some_and(|x| x == "log") {
            out.push((p.clone(), std::fs::read_to_string(&p).unwrap_or_default()));
        }
    }
}

/// With MORTAR_LOG=debug, one request can be followed from the mount to
/// the brick: the mount logs the fop (its span: op, gfid, name) and the
/// call it sent, numbered; the brick logs the same call number under the
/// connection from the mount's address.
#[test]
fn a_request_is_followed_from_the_mount_to_the_brick_in_the_logs() {
    let mut c = Cluster::start();
    c.kill_daemon();
    c.start_daemon_env(&[("MORTAR_LOG", "debug,openraft=warn")]);
    c.volume("tr", 1, &["t1"]);
    let m = c.mount_env("tr", &[("MORTAR_LOG", "debug")]);
    ok(&format!("echo hi > {}", m.p("traced-file")));
    // The mount's line for the create it sent: the fop's span, the call.
    let client = std::fs::read_to_string(c.path("client.log")).unwrap();
    let sent = client
        .lines()
        .find(|l| {
            l.contains("fop{")
                && l.contains("traced-file")
                && l.contains("create")
                && l.contains(" sent")
        })
        .unwrap_or_else(|| panic!("no fop span with the name in the mount's log:\n{client}"));
    assert!(sent.contains("create"), "{sent}");
    let call = sent
        .split_whitespace()
        .find_map(|w| w.strip_prefix("call="))
        .unwrap_or_else(|| panic!("no call number: {sent}"));
    let local = client
        .lines()
        .find(|l| l.contains("connected to brick"))
        .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("local=")))
        .unwrap_or_else(|| panic!("no local address in the mount's log:\n{client}"))
        .to_string();
    // The brick's lines for that call, under that connection.
    let mut logs = Vec::new();
    logs_under(c.dir.path(), &mut logs);
    let brick: Vec<&str> = logs
        .iter()
        .filter(|(p, _)| !p.ends_with("client.log") && !p.ends_with("daemon.log"))
        .flat_map(|(_, text)| text.lines())
        .filter(|l| l.contains(&format!("call{{call={call} ")) && l.contains("create"))
        .collect();
    assert!(
        brick.iter().any(|l| l.contains(&format!("peer={local}"))),
        "no brick line for call {call} from {local}: {brick:?}"
    );
}
