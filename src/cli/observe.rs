//! What operators watch: `volume profile`, `volume top` and `volume
//! status NAME clients|detail|mem|inode|fd`, printed as GlusterFS prints
//! them (or as JSON with `--json`).

use super::{ask, fail, format, refused, unexpected, usage, Out, Server, Usage};
use crate::brick::profile::{FopStat, Interval, ProfileReport, TopEntry, TopReport, TOP_LIST};
use crate::mgmt::rpc::{BrickReport, ProfileOp, Request, Response};
use crate::process::status::{human, BrickDetail};
use std::fmt::Write;

pub(super) async fn profile(
    server: &Server,
    json: bool,
    name: &str,
    op: &str,
    incremental: bool,
) -> anyhow::Result<()> {
    let what = "volume profile";
    let op = match op {
        "start" => ProfileOp::Start,
        "stop" => ProfileOp::Stop,
        _ => ProfileOp::Info,
    };
    if incremental && op != ProfileOp::Info {
        return Err(fail(what, name, "incremental goes with info only"));
    }
    let req = Request::VolumeProfile {
        name: name.to_string(),
        op,
    };
    match ask(server, req).await? {
        Response::Profile(bricks) if json => {
            println!("{}", serde_json::to_string_pretty(&bricks)?);
            Ok(())
        }
        Response::Profile(bricks) => {
            print!("{}", show_profile(&bricks, incremental));
            Ok(())
        }
        Response::Ok(msg) if !json => {
            println!("{msg}");
            Ok(())
        }
        other => super::Out { json }.done(what, name, other),
    }
}

pub(super) async fn top(
    server: &Server,
    json: bool,
    name: &str,
    list: &str,
    args: &[String],
) -> anyhow::Result<()> {
    let what = "volume top";
    let (brick, count) = parse_top_args(args).map_err(|e| usage(what, name, e))?;
    let req = Request::VolumeTop {
        name: name.to_string(),
        brick,
    };
    match ask(server, req).await? {
        Response::Top(bricks) => {
            let picked: Vec<BrickReport<Listed>> = bricks
                .into_iter()
                .map(|b| BrickReport {
                    brick: b.brick,
                    report: b.report.map(|r| pick(&r, list, count)),
                    error: b.error,
                })
                .collect();
            if json {
                println!("{}", serde_json::to_string_pretty(&picked)?);
            } else {
                print!("{}", show_top(&picked, list));
            }
            Ok(())
        }
        Response::Err(e) => Err(refused(what, name, e)),
        other => Err(fail(what, name, &format!("unexpected answer {other:?}"))),
    }
}

/// `volume status NAME detail|mem|inode|fd`.
/// `volume status [NAME [clients|detail|mem|inode|fd]]`.
pub(super) async fn volume_status(
    server: &Server,
    out: &Out,
    name: Option<String>,
    what: Option<String>,
) -> anyhow::Result<()> {
    match (name, what) {
        (Some(name), Some(what)) if what == "clients" => clients(server, out, name).await,
        (Some(name), Some(what)) => status(server, out.json, &name, &what).await,
        (None, Some(w)) => Err(fail(
            "volume status",
            "",
            &format!("'{w}' needs a volume name: volume status NAME {w}"),
        )),
        (name, None) => match ask(server, Request::VolumeStatus { name }).await? {
            Response::Status(st) => {
                if out.json {
                    let json = format::status_json(&st);
                    println!("{}", serde_json::to_string_pretty(&json)?);
                } else if st.is_empty() {
                    println!("No volumes present");
                } else {
                    print!("{}", format::status(&st));
                }
                Ok(())
            }
            other => Err(unexpected("volume status", "", other)),
        },
    }
}

/// `volume status NAME clients`: the mounts that follow the volume, and
/// each brick's own connections.
async fn clients(server: &Server, out: &Out, name: String) -> anyhow::Result<()> {
    let req = Request::VolumeClients {
        name: name.clone(),
        all: true,
    };
    let c = match ask(server, req).await? {
        Response::Clients(c) => c,
        other => return Err(unexpected("volume status", "", other)),
    };
    let req = Request::VolumeBrickDetails { name: name.clone() };
    let bricks = match ask(server, req).await? {
        Response::BrickDetails(b) => b,
        _ => Vec::new(),
    };
    if out.json {
        let json = serde_json::json!({
            "mounts": c,
            "bricks": brick_clients_json(&bricks),
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", format::clients(&name, &c));
        print!("{}", brick_clients(&bricks));
    }
    Ok(())
}

async fn status(server: &Server, json: bool, name: &str, what: &str) -> anyhow::Result<()> {
    let details = match ask(
        server,
        Request::VolumeBrickDetails {
            name: name.to_string(),
        },
    )
    .await?
    {
        Response::BrickDetails(d) => d,
        other => return Err(unexpected("volume status", name, other)),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&details)?);
        return Ok(());
    }
    // Ports and whether each brick is online, as plain status shows them.
    let ports = match ask(
        server,
        Request::VolumeStatus {
            name: Some(name.to_string()),
        },
    )
    .await?
    {
        Response::Status(st) => st.into_iter().flat_map(|v| v.bricks).collect(),
        _ => Vec::new(),
    };
    print!("{}", show_status(name, what, &details, &ports));
    Ok(())
}

fn show_status(
    name: &str,
    what: &str,
    details: &[BrickReport<BrickDetail>],
    ports: &[crate::mgmt::rpc::BrickStatus],
) -> String {
    let rule = "-".repeat(78);
    let title = match what {
        "mem" => format!("Memory status for volume : {name}"),
        "inode" => format!("Inode tables for volume {name}"),
        "fd" => format!("FD tables for volume {name}"),
        _ => format!("Status of volume: {name}"),
    };
    let mut out = format!("{title}\n{rule}\n");
    for b in details {
        let Some(d) = &b.report else {
            let _ = writeln!(out, "Brick                : Brick {}", b.brick);
            let _ = writeln!(
                out,
                "Online               : N ({})\n{rule}",
                b.error.as_deref().unwrap_or("?")
            );
            continue;
        };
        match what {
            "detail" => {
                let port = ports.iter().find(|p| p.brick == b.brick);
                let rows = [
                    ("Brick", format!("Brick {}", b.brick)),
                    (
                        "TCP Port",
                        port.and_then(|p| p.port)
                            .map_or("N/A".into(), |p| p.to_string()),
                    ),
                    ("Online", "Y".into()),
                    ("Pid", d.pid.to_string()),
                    ("File System", d.disk.fs_type.clone()),
                    ("Device", d.disk.device.clone()),
                    ("Mount Options", d.disk.mount_options.clone()),
                    ("Block Size", d.disk.block_size.to_string()),
                    ("Disk Space Free", human(d.disk.free)),
                    ("Total Disk Space", human(d.disk.size)),
                    ("Inode Count", d.disk.inodes.to_string()),
                    ("Free Inodes", d.disk.inodes_free.to_string()),
                ];
                for (k, v) in rows {
                    let _ = writeln!(out, "{k:<21}: {v}");
                }
            }
            "mem" => {
                let _ = writeln!(out, "Brick : {}", b.brick);
                let _ = writeln!(out, "Pid               : {}", d.pid);
                let _ = writeln!(out, "Resident memory   : {}", human(d.memory.resident));
                let _ = writeln!(out, "Peak resident     : {}", human(d.memory.peak_resident));
                let _ = writeln!(out, "Virtual size      : {}", human(d.memory.virtual_size));
                let _ = writeln!(out, "Threads           : {}", d.memory.threads);
            }
            "inode" => {
                let _ = writeln!(out, "Brick : {}", b.brick);
                let _ = writeln!(out, "Open files        : {}", d.open_objects);
                let _ = writeln!(out, "Handles on them   : {}", d.open_handles);
            }
            _ => {
                let _ = writeln!(out, "Brick : {}", b.brick);
                let _ = writeln!(out, "Connection {:<40} {:>10}", "", "open fds");
                for (i, c) in d.clients.iter().enumerate() {
                    let _ = writeln!(out, "{:<10} {:<40} {:>10}", i + 1, c.peer, c.open_fds);
                }
            }
        }
        let _ = writeln!(out, "{rule}");
    }
    out
}

/// Each brick's connections, for `volume status NAME clients`.
fn brick_clients(details: &[BrickReport<BrickDetail>]) -> String {
    let mut out = String::new();
    for b in details {
        let _ = writeln!(out, "Brick : {}", b.brick);
        let Some(d) = &b.report else {
            let _ = writeln!(out, "(no answer: {})", b.error.as_deref().unwrap_or("?"));
            continue;
        };
        let _ = writeln!(out, "Clients connected : {}", d.clients.len());
        let _ = writeln!(
            out,
            "{:<32} {:>14} {:>14} {:>10}",
            "Hostname", "BytesRead", "BytesWritten", "Fops"
        );
        let _ = writeln!(
            out,
            "{:<32} {:>14} {:>14} {:>10}",
            "--------", "---------", "------------", "----"
        );
        for c in &d.clients {
            let _ = writeln!(
                out,
                "{:<32} {:>14} {:>14} {:>10}",
                c.peer, c.read_bytes, c.written_bytes, c.fops
            );
        }
        let _ = writeln!(out, "{}", "-".repeat(78));
    }
    out
}

fn brick_clients_json(details: &[BrickReport<BrickDetail>]) -> serde_json::Value {
    details
        .iter()
        .map(|b| {
            serde_json::json!({
                "brick": b.brick,
                "clients": b.report.as_ref().map(|d| &d.clients),
                "error": b.error,
            })
        })
        .collect()
}

/// `[brick HOST:/PATH] [list-cnt N]`, in either order.
fn parse_top_args(args: &[String]) -> Result<(Option<String>, usize), Usage> {
    let (mut brick, mut count) = (None, 10);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = it.next().ok_or(format!("{a} needs a value"))?;
        match a.as_str() {
            "brick" => brick = Some(value.clone()),
            "list-cnt" => {
                count = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=TOP_LIST).contains(n))
                    .ok_or(format!("list-cnt must be a number from 1 to {TOP_LIST}"))?
            }
            other => {
                return Err(
                    format!("unknown argument {other}: brick HOST:/PATH or list-cnt N").into(),
                )
            }
        }
    }
    Ok((brick, count))
}

/// One brick's list, as shown: with its open handles for `open`.
#[derive(serde::Serialize)]
struct Listed {
    #[serde(skip_serializing_if = "Option::is_none")]
    open_fds: Option<String>,
    entries: Vec<TopEntry>,
}

fn pick(r: &TopReport, list: &str, count: usize) -> Listed {
    let l = match list {
        "open" => &r.open,
        "read" => &r.read,
        "write" => &r.write,
        "read-perf" => &r.read_perf,
        _ => &r.write_perf,
    };
    Listed {
        open_fds: (list == "open").then(|| open_line(r)),
        entries: l.iter().take(count).cloned().collect(),
    }
}

fn date(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
}

fn show_top(bricks: &[BrickReport<Listed>], list: &str) -> String {
    let mut out = String::new();
    for b in bricks {
        let _ = writeln!(out, "Brick: {}", b.brick);
        let Some(listed) = &b.report else {
            let _ = writeln!(out, "(no answer: {})\n", b.error.as_deref().unwrap_or("?"));
            continue;
        };
        if let Some(l) = &listed.open_fds {
            let _ = writeln!(out, "{l}");
        }
        let entries = &listed.entries;
        if list.ends_with("-perf") {
            let _ = writeln!(out, "MBps\t\tFilename\t\tTime");
            let _ = writeln!(out, "====\t\t========\t\t====");
            for e in entries {
                let _ = writeln!(out, "{:.1}\t\t{}\t\t{}", e.value, e.path, date(e.at));
            }
        } else {
            let _ = writeln!(out, "Count\t\tfilename");
            let _ = writeln!(out, "=======================");
            for e in entries {
                let _ = writeln!(out, "{}\t\t{}", e.value as u64, e.path);
            }
        }
        out.push('\n');
    }
    out
}

/// The open handles line `volume top … open` starts each brick with.
fn open_line(r: &TopReport) -> String {
    format!(
        "Current open fds: {}, Max open fds: {}, Max openfd time: {}",
        r.open_fds,
        r.max_open_fds,
        date(r.max_open_at)
    )
}

fn show_profile(bricks: &[BrickReport<ProfileReport>], incremental: bool) -> String {
    let mut out = String::new();
    for b in bricks {
        let head = format!("Brick: {}", b.brick);
        let _ = writeln!(out, "{head}\n{}", "-".repeat(head.len()));
        let Some(r) = &b.report else {
            let _ = writeln!(out, "(no answer: {})\n", b.error.as_deref().unwrap_or("?"));
            continue;
        };
        if !incremental {
            out.push_str(&show_interval("Cumulative Stats:", &r.cumulative));
        }
        out.push_str(&show_interval(
            &format!("Interval {} Stats:", r.interval_no),
            &r.interval,
        ));
    }
    out
}

fn show_interval(title: &str, i: &Interval) -> String {
    let mut out = format!("{title}\n");
    // Block sizes, three to a row.
    let sizes: Vec<u64> = i
        .read_sizes
        .keys()
        .chain(i.write_sizes.keys())
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for row in sizes.chunks(3) {
        let cell = |w: &str, f: &dyn Fn(u64) -> String| {
            let mut l = format!("{w:>14}");
            for &s in row {
                let _ = write!(l, "{:>21}", f(s));
            }
            l
        };
        let _ = writeln!(
            out,
            "{}",
            cell("Block Size:", &|s| format!("{}+", block(s)))
        );
        let _ = writeln!(
            out,
            "{}",
            cell("No. of Reads:", &|s| i
                .read_sizes
                .get(&s)
                .copied()
                .unwrap_or(0)
                .to_string())
        );
        let _ = writeln!(
            out,
            "{}\n",
            cell("No. of Writes:", &|s| i
                .write_sizes
                .get(&s)
                .copied()
                .unwrap_or(0)
                .to_string())
        );
    }
    let total: f64 = i.fops.values().map(|s| s.total_us).sum();
    let mut fops: Vec<(&String, &FopStat)> = i.fops.iter().collect();
    fops.sort_by(|a, b| a.1.total_us.total_cmp(&b.1.total_us));
    let _ = writeln!(
        out,
        " %-latency   Avg-latency   Min-Latency   Max-Latency   No. of calls         Fop"
    );
    let _ = writeln!(
        out,
        " ---------   -----------   -----------   -----------   ------------        ----"
    );
    for (fop, s) in fops {
        let _ = writeln!(
            out,
            "{:>10.2} {:>10.2} us {:>10.2} us {:>10.2} us {:>14} {:>11}",
            if total > 0.0 {
                100.0 * s.total_us / total
            } else {
                0.0
            },
            s.total_us / s.calls.max(1) as f64,
            s.min_us,
            s.max_us,
            s.calls,
            fop.to_uppercase()
        );
    }
    let _ = writeln!(out, "\n    Duration: {} seconds", i.seconds);
    let _ = writeln!(out, "   Data Read: {} bytes", i.read_bytes);
    let _ = writeln!(out, "Data Written: {} bytes\n", i.written_bytes);
    out
}

/// A block size as GlusterFS writes it: 512b, 4Kb, 1Mb.
fn block(s: u64) -> String {
    match s {
        s if s >= 1 << 20 => format!("{}Mb", s >> 20),
        s if s >= 1 << 10 => format!("{}Kb", s >> 10),
        s => format!("{s}b"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_arguments_come_in_either_order_and_are_checked() {
        let a = |v: &[&str]| parse_top_args(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(a(&[]).unwrap(), (None, 10));
        assert_eq!(
            a(&["list-cnt", "3", "brick", "h:/b"]).unwrap(),
            (Some("h:/b".into()), 3)
        );
        assert!(a(&["list-cnt", "0"]).is_err());
        assert!(a(&["list-cnt", "101"]).is_err());
        assert!(a(&["brick"]).is_err());
        assert!(a(&["bs", "4"]).is_err());
    }

    #[test]
    fn a_profile_reads_as_glusterfs_prints_it() {
        let mut i = Interval {
            seconds: 7,
            read_bytes: 4096,
            written_bytes: 8192,
            ..Default::default()
        };
        i.read_sizes.insert(4096, 1);
        i.write_sizes.insert(4096, 2);
        i.fops.insert(
            "write".into(),
            FopStat {
                calls: 2,
                total_us: 30.0,
                min_us: 10.0,
                max_us: 20.0,
            },
        );
        let text = show_interval("Cumulative Stats:", &i);
        assert!(text.contains("Block Size:"), "{text}");
        assert!(text.contains("4Kb+"), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        // Labels end in one column, figures in the next ones.
        assert_eq!(lines[1].find("Block Size:"), Some(3), "{text}");
        assert!(lines[1].ends_with("4Kb+") && lines[2].ends_with(" 1") && lines[3].ends_with(" 2"));
        assert_eq!(lines[1].len(), lines[3].len(), "{text}");
        let row = lines.iter().find(|l| l.ends_with("WRITE")).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells,
            ["100.00", "15.00", "us", "10.00", "us", "20.00", "us", "2", "WRITE"]
        );
        assert!(text.contains("Data Written: 8192 bytes"), "{text}");
    }
}
