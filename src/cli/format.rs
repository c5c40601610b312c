//! Text layouts of `volume info` and `volume status`, field for field as
//! GlusterFS prints them, so that scripts written for it keep working.

use crate::mgmt::rpc::VolumeStatus;
use crate::mgmt::state::Volume;
use std::fmt::Write;

/// `snapshots`: how many snapshots each volume has.
pub fn info(vols: &[Volume], snapshots: &std::collections::BTreeMap<&str, usize>) -> String {
    let mut s = String::new();
    for v in vols {
        let _ = writeln!(s, " ");
        let _ = writeln!(s, "Volume Name: {}", v.name);
        let _ = writeln!(s, "Type: {}", v.type_name());
        let _ = writeln!(s, "Volume ID: {}", v.id);
        let _ = writeln!(s, "Status: {}", v.status.as_str());
        let count = snapshots.get(v.name.as_str()).copied().unwrap_or(0);
        let _ = writeln!(s, "Snapshot Count: {count}");
        let _ = writeln!(s, "Number of Bricks: {}", v.brick_count_line());
        let _ = writeln!(s, "Transport-type: {}", v.transport);
        let _ = writeln!(s, "Bricks:");
        for (i, b) in v.bricks.iter().enumerate() {
            let tag = if v.is_arbiter(i) { " (arbiter)" } else { "" };
            let _ = writeln!(s, "Brick{}: {b}{tag}", i + 1);
        }
        let _ = writeln!(s, "Options Reconfigured:");
        for (k, val) in &v.options {
            let _ = writeln!(s, "{k}: {val}");
        }
    }
    s
}

pub fn status(st: &[VolumeStatus]) -> String {
    let mut s = String::new();
    let rule = "-".repeat(78);
    for VolumeStatus {
        volume: v,
        bricks,
        nfs,
    } in st
    {
        let _ = writeln!(s, "Status of volume: {}", v.name);
        let _ = writeln!(
            s,
            "{:<50}{:<10}{:<11}{:<8}Pid",
            "Mortar process", "TCP Port", "RDMA Port", "Online"
        );
        let _ = writeln!(s, "{rule}");
        for b in bricks {
            let port = b
                .port
                .map(|p| p.to_string())
                .unwrap_or_else(|| "N/A".into());
            let pid = b.pid.map(|p| p.to_string()).unwrap_or_else(|| "N/A".into());
            let online = if b.online { "Y" } else { "N" };
            let _ = writeln!(
                s,
                "{:<50}{:<10}{:<11}{:<8}{}",
                format!("Brick {}", b.brick),
                port,
                "0",
                online,
                pid
            );
            if let Some(r) = &b.reason {
                let _ = writeln!(s, "  Offline: {r}");
            }
            if !b.slow_for.is_empty() {
                let _ = writeln!(
                    s,
                    "  Slow: answers late; avoided by {}",
                    b.slow_for.join(", ")
                );
            }
        }
        for n in nfs {
            let port = n.port.filter(|_| n.online);
            let _ = writeln!(
                s,
                "{:<50}{:<10}{:<11}{:<8}{}",
                format!("NFS Server on {}", n.host),
                port.map_or("N/A".into(), |p| p.to_string()),
                "N/A",
                if n.online { "Y" } else { "N" },
                n.pid.map_or("N/A".into(), |p| p.to_string()),
            );
            if let Some(r) = n.reason.as_ref().filter(|_| !n.online) {
                let _ = writeln!(s, "  Offline: {r}");
            }
        }
        let _ = writeln!(s, " ");
        let _ = writeln!(s, "Task Status of Volume {}", v.name);
        let _ = writeln!(s, "{rule}");
        if v.tasks.is_empty() {
            let _ = writeln!(s, "There are no active volume tasks");
        }
        for t in &v.tasks {
            for (k, val) in [
                ("Task", t.kind.as_str().to_string()),
                ("ID", t.id.clone()),
                ("Host", t.host.clone()),
                ("Started", super::heal::time(t.started)),
                ("Status", t.status.as_str().to_string()),
            ] {
                let _ = writeln!(s, "{k:<21}: {val}");
            }
            if !t.detail.is_empty() {
                let _ = writeln!(s, "{:<21}: {}", "Result", t.detail);
            }
        }
        let _ = writeln!(s, " ");
    }
    s
}

pub fn status_json(st: &[VolumeStatus]) -> serde_json::Value {
    serde_json::Value::Array(
        st.iter()
            .map(|v| {
                serde_json::json!({
                    "volume": v.volume.name,
                    "bricks": v.bricks,
                    "nfs": v.nfs,
                    "tasks": v.volume.tasks,
                })
            })
            .collect(),
    )
}

pub fn connected(s: &crate::mgmt::rpc::PeerState) -> &'static str {
    if s.connected {
        "Connected"
    } else {
        "Disconnected"
    }
}

/// `peer status`, as GlusterFS prints it, with when a disconnected peer
/// was last heard from.
pub fn peer_status(states: &[crate::mgmt::rpc::PeerState]) -> String {
    let mut out = format!("Number of Peers: {}\n", states.len());
    for s in states {
        out.push_str(&format!(
            "\nHostname: {}\nUuid: {}\nState: Peer in Cluster ({})\n",
            s.peer.host,
            s.peer.uuid,
            connected(s)
        ));
        if !s.role.is_empty() {
            out.push_str(&format!("Role: {}\n", s.role));
        }
        if !s.connected {
            out.push_str(&match s.last_seen_secs {
                Some(n) => format!("Last seen: {n} s ago\n"),
                None => "Last seen: not since this server's daemon started\n".into(),
            });
        }
    }
    out
}

/// `volume status NAME clients`.
pub fn clients(name: &str, clients: &[crate::mgmt::rpc::ClientSeen]) -> String {
    let rule = "-".repeat(78);
    let mut out = format!("Client connections for volume {name}\n{rule}\n");
    out.push_str(&format!("Clients connected : {}\n", clients.len()));
    out.push_str(&format!(
        "{:<32} {:<24} {:>7} {:>10}  {}\n",
        "Client", "Mount", "Graph", "Last seen", "Server"
    ));
    for c in clients {
        out.push_str(&format!(
            "{:<32} {:<24} {:>7} {:>8} s  {}\n",
            format!("{}:{}", c.client.host, c.client.pid),
            c.client.mount,
            c.version.map_or("-".into(), |v| v.to_string()),
            c.seen_secs_ago,
            c.server
        ));
    }
    out.push_str(&rule);
    out.push('\n');
    out
}

/// `volume credentials VOL list`.
pub fn credentials(list: &[crate::mgmt::state::IssuedCredential]) -> String {
    if list.is_empty() {
        return "No credentials\n".into();
    }
    let mut out = format!(
        "{:<24} {:<6} {:<12} {:<20} FINGERPRINT (SHA-256)\n",
        "NAME", "ACCESS", "RUNS AS", "ISSUED"
    );
    for c in list {
        let issued = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(c.issued),
        )
        .to_string();
        let runs_as = match c.identity {
            Some((u, g)) => format!("{u}:{g}"),
            None => "claimed".into(),
        };
        out += &format!(
            "{:<24} {:<6} {:<12} {:<20} {}\n",
            c.name,
            if c.read_only { "ro" } else { "rw" },
            runs_as,
            issued,
            c.fingerprint
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mgmt::state::{Brick, VolStatus};

    #[test]
    fn info_matches_glusterfs_layout() {
        let v = Volume {
            name: "gv0".into(),
            id: "id".into(),
            replica: 3,
            transport: "tcp".into(),
            bricks: (1..=3)
                .map(|i| Brick {
                    host: "kali".into(),
                    path: format!("/data/brick{i}/gv0"),
                    port: None,
                })
                .collect(),
            status: VolStatus::Started,
            options: [("network.ping-timeout".to_string(), "10".to_string())].into(),
            arbiter: 0,
            redundancy: 0,
            version: 1,
            tasks: Vec::new(),
            set_ids: Vec::new(),
            layout_commit: 1,
            draining: Vec::new(),
            resetting: Vec::new(),
            key: String::new(),
            credentials: Vec::new(),
        };
        let text = info(&[v], &[("gv0", 2)].into_iter().collect());
        for line in [
            "Volume Name: gv0",
            "Snapshot Count: 2",
            "Type: Replicate",
            "Volume ID: id",
            "Status: Started",
            "Number of Bricks: 1 x 3 = 3",
            "Transport-type: tcp",
            "Bricks:",
            "Brick1: kali:/data/brick1/gv0",
            "Brick3: kali:/data/brick3/gv0",
            "Options Reconfigured:",
            "network.ping-timeout: 10",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
}
