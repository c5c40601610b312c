//! A volume: `volume create|start|stop|delete|set|get|reset|info|list|
//! statedump`, and the dispatch of every `volume` command to the module
//! of its family (bricks, rebalance, heal, what operators watch, the
//! credentials).

use super::pool::{self, CredentialCmd};
use super::{
    ask, bitrot, bricks, fail, format, heal, observe, rebalance, unexpected, usage, Out, Server,
    Usage,
};
use crate::mgmt::options;
use crate::mgmt::rpc::{self, Request, Response};
use clap::Subcommand;

#[derive(Subcommand)]
pub enum VolumeCmd {
    /// volume create NAME [replica N [arbiter 1] | disperse [N] [disperse-data K] [redundancy R]] [transport tcp] HOST:/PATH... [force]
    Create {
        name: String,
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// volume add-brick NAME [replica N] HOST:/PATH... [force]: new
    /// replica sets (then `volume rebalance NAME start`), or with a higher
    /// replica count, that many more bricks in every set (healed from the
    /// others). Mounted clients switch to the new bricks without a remount.
    #[command(name = "add-brick")]
    AddBrick {
        name: String,
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// volume remove-brick NAME [replica N] HOST:/PATH... {start | status |
    /// stop | commit | force}: `start` moves the files of these bricks
    /// (whole replica or disperse sets) to the others; `commit`, refused until they
    /// have all left, takes the bricks out; `force` takes them out at
    /// once, their files with them. With `replica N` below the volume's
    /// count, `force` takes the bricks (as many of every set) out of their
    /// sets: their replicas keep the files.
    #[command(name = "remove-brick")]
    RemoveBrick {
        name: String,
        #[arg(required = true, num_args = 2.., allow_hyphen_values = true)]
        args: Vec<String>,
        /// With start or status: show progress until it ends.
        #[arg(long)]
        wait: bool,
    },
    /// volume replace-brick NAME FROM TO commit force: the brick TO (new,
    /// empty) takes FROM's place in its replica set and is healed from
    /// the others; FROM is stopped and left as it is.
    #[command(name = "replace-brick")]
    ReplaceBrick {
        name: String,
        from: String,
        to: String,
        #[arg(value_parser = ["commit"])]
        commit: String,
        #[arg(value_parser = ["force"])]
        force: String,
    },
    /// volume reset-brick NAME BRICK start | NAME BRICK BRICK commit
    /// [force]: `start` stops the brick and keeps it down (to repair or
    /// replace its disk); `commit` brings it back, prepared again, and
    /// heals it from its replicas.
    #[command(name = "reset-brick")]
    ResetBrick {
        name: String,
        #[arg(required = true, num_args = 2..=4)]
        args: Vec<String>,
    },
    /// volume rebalance NAME {start [force] | fix-layout start | stop |
    /// status}: lays every directory out over all replica sets (and with
    /// `start`, moves files to the sets their names hash to), on the server
    /// asked; resumed after a restart. Speed: `cluster.rebal-throttle`.
    Rebalance {
        name: String,
        #[arg(required = true, num_args = 1..)]
        args: Vec<String>,
        /// After starting, or with status: show progress until it ends.
        #[arg(long)]
        wait: bool,
    },
    /// Start a volume: its bricks are started and watched.
    Start {
        name: String,
        #[arg(value_parser = ["force"])]
        force: Option<String>,
    },
    /// Stop a volume.
    Stop {
        name: String,
        #[arg(value_parser = ["force"])]
        force: Option<String>,
    },
    /// Delete a stopped volume (the data on the bricks is kept).
    Delete { name: String },
    /// Show volume definitions.
    Info { name: Option<String> },
    /// Show bricks, ports, pids and whether they are online; with
    /// `clients`, the mounted clients (the graph version each runs) and
    /// each brick's connections with the bytes they moved; `detail`, each
    /// brick's file system, space and inodes; `mem`, each brick process's
    /// memory; `inode`, the files open on each brick; `fd`, each
    /// connection's open handles.
    Status {
        name: Option<String>,
        #[arg(value_parser = ["clients", "detail", "mem", "inode", "fd"])]
        what: Option<String>,
    },
    /// Write a dump of every brick process's state (translators, locks,
    /// leases, connections, open files) for a bug report, into the state
    /// directory of the server asked; `kill -USR1 PID` makes any mortar
    /// process (a client too) write its own into /var/run/mortar.
    Statedump { name: String },
    /// List volume names.
    List,
    /// Set an option: volume set NAME KEY VALUE; or a bundle of them:
    /// volume set NAME group metadata-cache|nl-cache|db-workload; or an
    /// option of the pool: volume set all cluster.brick-multiplex on|off.
    Set {
        name: String,
        key: String,
        value: String,
    },
    /// Show options in force: volume get NAME KEY|all (NAME all: the
    /// pool's options).
    Get { name: String, key: String },
    /// Reset one option or all of them to the default.
    Reset { name: String, key: Option<String> },
    /// Client credentials of a volume: a holder may mount this volume and
    /// nothing else (`mount -o credential=FILE`); read-only ones may not
    /// change it (docs/security.md).
    Credentials {
        name: String,
        #[command(subcommand)]
        op: CredentialCmd,
    },
    /// Profile every brick's fops: volume profile NAME start | info
    /// [incremental] | stop. `info` shows, per brick, each fop's calls
    /// and latency, reads and writes by size and the data moved, since
    /// `start` and since the last `info`.
    Profile {
        name: String,
        #[arg(value_parser = ["start", "info", "stop"])]
        op: String,
        #[arg(value_parser = ["incremental"])]
        incremental: Option<String>,
    },
    /// The files most opened, read or written on each brick, or with the
    /// highest read or write throughput: volume top NAME
    /// open|read|write|read-perf|write-perf [brick HOST:/PATH]
    /// [list-cnt N].
    Top {
        name: String,
        #[arg(value_parser = ["open", "read", "write", "read-perf", "write-perf"])]
        what: String,
        /// brick HOST:/PATH and/or list-cnt N (at most 100; 10 if not given).
        #[arg(num_args = 0..=4)]
        args: Vec<String>,
    },
    /// Bitrot: volume bitrot NAME {enable|disable} | scrub-throttle
    /// {lazy|normal|aggressive} | scrub-frequency
    /// {minute|hourly|daily|weekly|biweekly|monthly} | scrub
    /// {pause|resume|status|ondemand}.
    Bitrot {
        name: String,
        #[arg(num_args = 1..)]
        args: Vec<String>,
    },
    /// Self-heal: volume heal NAME [full | info [summary|split-brain] |
    /// statistics | split-brain (bigger-file|latest-mtime) FILE |
    /// split-brain source-brick HOST:/PATH [FILE]].
    Heal {
        name: String,
        #[arg(num_args = 0..)]
        args: Vec<String>,
        /// After starting a heal, show its progress until nothing is pending.
        #[arg(long)]
        wait: bool,
        /// With --wait: give up (exit 1) after this many seconds.
        #[arg(long, requires = "wait")]
        timeout: Option<u64>,
    },
}

pub(super) async fn run(server: &Server, out: &Out, cmd: VolumeCmd) -> anyhow::Result<()> {
    match cmd {
        VolumeCmd::Create { name, args } => create(server, out, name, &args).await,
        VolumeCmd::AddBrick { name, args } => bricks::add(server, out, name, &args).await,
        VolumeCmd::RemoveBrick { name, args, wait } => {
            bricks::remove(server, out, name, &args, wait).await
        }
        VolumeCmd::ReplaceBrick { name, from, to, .. } => {
            bricks::replace(server, out, name, from, to).await
        }
        VolumeCmd::ResetBrick { name, args } => bricks::reset(server, out, name, &args).await,
        VolumeCmd::Rebalance { name, args, wait } => {
            rebalance::run(server, out, name, &args, wait).await
        }
        VolumeCmd::Start { name, force } => {
            let force = force.is_some();
            let r = ask(
                server,
                Request::VolumeStart {
                    name: name.clone(),
                    force,
                },
            )
            .await?;
            out.done("volume start", &name, r)
        }
        VolumeCmd::Stop { name, .. } => {
            let r = ask(server, Request::VolumeStop { name: name.clone() }).await?;
            out.done("volume stop", &name, r)
        }
        VolumeCmd::Delete { name } => {
            let r = ask(server, Request::VolumeDelete { name: name.clone() }).await?;
            out.done("volume delete", &name, r)
        }
        VolumeCmd::Set { name, key, value } => {
            let r = ask(server, Request::VolumeSet { name, key, value }).await?;
            out.done("volume set", "", r)
        }
        VolumeCmd::Reset { name, key } => {
            let r = ask(server, Request::VolumeReset { name, key }).await?;
            out.done("volume reset", "", r)
        }
        VolumeCmd::Get { name, key } => get(server, out, name, &key).await,
        VolumeCmd::Info { name } => info(server, out, name).await,
        VolumeCmd::List => list(server, out).await,
        VolumeCmd::Statedump { name } => {
            let r = ask(server, Request::VolumeStatedump { name: name.clone() }).await?;
            match r {
                Response::Ok(files) if !out.json => {
                    println!("Volume statedump successful. Dumps written:\n{files}");
                    Ok(())
                }
                r => out.done("volume statedump", &name, r),
            }
        }
        VolumeCmd::Status { name, what } => observe::volume_status(server, out, name, what).await,
        VolumeCmd::Profile {
            name,
            op,
            incremental,
        } => observe::profile(server, out.json, &name, &op, incremental.is_some()).await,
        VolumeCmd::Top { name, what, args } => {
            observe::top(server, out.json, &name, &what, &args).await
        }
        VolumeCmd::Bitrot { name, args } => bitrot::run(server, out, name, &args).await,
        VolumeCmd::Heal {
            name,
            args,
            wait,
            timeout,
        } => heal::run(server, out, name, &args, wait, timeout).await,
        VolumeCmd::Credentials { name, op } => {
            pool::credentials(server, out, "volume credentials", &name, op, |op| {
                Request::VolumeCredentials {
                    name: name.clone(),
                    op,
                }
            })
            .await
        }
    }
}

async fn create(server: &Server, out: &Out, name: String, args: &[String]) -> anyhow::Result<()> {
    let a = parse_create(args).map_err(|e| usage("volume create", &name, e))?;
    let r = ask(
        server,
        Request::VolumeCreate {
            name: name.clone(),
            replica: a.replica,
            arbiter: a.arbiter,
            redundancy: a.redundancy,
            transport: a.transport,
            bricks: a.bricks,
            force: a.force,
        },
    )
    .await?;
    out.done("volume create", &name, r)
}

async fn info(server: &Server, out: &Out, name: Option<String>) -> anyhow::Result<()> {
    match ask(server, Request::VolumeInfo { name }).await? {
        Response::Volumes(vs) => {
            if out.json {
                println!("{}", serde_json::to_string_pretty(&vs)?);
            } else if vs.is_empty() {
                println!("No volumes present");
            } else {
                let op = rpc::SnapshotOp::List {
                    which: rpc::SnapshotSel::All,
                };
                let snaps = match ask(server, Request::Snapshot { op }).await? {
                    Response::Snapshots(s) => s,
                    other => return Err(unexpected("volume info", "", other)),
                };
                let mut counts = std::collections::BTreeMap::new();
                for s in &snaps {
                    *counts.entry(s.volume.as_str()).or_insert(0) += 1;
                }
                print!("{}", format::info(&vs, &counts));
            }
            Ok(())
        }
        other => Err(unexpected("volume info", "", other)),
    }
}

async fn list(server: &Server, out: &Out) -> anyhow::Result<()> {
    match ask(server, Request::VolumeInfo { name: None }).await? {
        Response::Volumes(vs) => {
            let names: Vec<&str> = vs.iter().map(|v| v.name.as_str()).collect();
            if out.json {
                println!("{}", serde_json::to_string(&names)?);
            } else if names.is_empty() {
                println!("No volumes present in cluster");
            } else {
                for n in names {
                    println!("{n}");
                }
            }
            Ok(())
        }
        other => Err(unexpected("volume list", "", other)),
    }
}

/// `volume get all KEY|all`: the pool's options in force.
async fn get_pool(server: &Server, out: &Out, key: &str) -> anyhow::Result<()> {
    let mut all = match ask(server, Request::PoolOptions).await? {
        Response::Options(o) => o,
        other => return Err(unexpected("volume get", "", other)),
    };
    if key != "all" {
        all.retain(|k, _| k == key);
        if all.is_empty() {
            let hint = match options::spec(key) {
                Some(_) => format!("{key} is an option of a volume, not of the pool"),
                None => format!("option : {key} does not exist"),
            };
            return Err(fail("volume get", "", &hint));
        }
    }
    print_options(out, all.into_iter().collect())
}

/// Options and their values, as `volume get` shows them.
fn print_options(out: &Out, rows: Vec<(String, String)>) -> anyhow::Result<()> {
    if out.json {
        let m: std::collections::BTreeMap<_, _> = rows.into_iter().collect();
        println!("{}", serde_json::to_string_pretty(&m)?);
    } else {
        println!("{:<40} Value", "Option");
        println!("{:<40} -----", "------");
        for (k, v) in rows {
            println!("{k:<40} {v}");
        }
    }
    Ok(())
}

/// `volume get NAME KEY|all`: the options in force, defaults included.
async fn get(server: &Server, out: &Out, name: String, key: &str) -> anyhow::Result<()> {
    if name == "all" {
        return get_pool(server, out, key).await;
    }
    let vs = match ask(server, Request::VolumeInfo { name: Some(name) }).await? {
        Response::Volumes(vs) => vs,
        other => return Err(unexpected("volume get", "", other)),
    };
    let v = &vs[0];
    let keys: Vec<&str> = if key == "all" {
        options::all().into_iter().map(|o| o.key).collect()
    } else if options::spec(key).is_some() {
        vec![key]
    } else {
        return Err(fail(
            "volume get",
            "",
            &format!("option : {key} does not exist"),
        ));
    };
    let rows: Vec<(String, String)> = keys
        .iter()
        .map(|k| (k.to_string(), options::effective(&v.options, k).to_string()))
        .collect();
    print_options(out, rows)
}

pub struct CreateArgs {
    /// Bricks per set: the replica count, or the disperse count.
    pub replica: usize,
    pub arbiter: usize,
    /// Parity bricks per disperse set (0: not dispersed).
    pub redundancy: usize,
    pub transport: String,
    pub bricks: Vec<String>,
    pub force: bool,
}

/// Parses GlusterFS's `volume create` words after the name.
pub fn parse_create(args: &[String]) -> Result<CreateArgs, Usage> {
    let mut replica = 1;
    let mut arbiter = 0;
    // disperse N, disperse-data K, redundancy R (None: not given).
    let (mut disperse, mut data, mut redundancy): (Option<usize>, Option<usize>, Option<usize>) =
        (None, None, None);
    // `disperse` may come without its count (then: every brick).
    let count = |i: usize, what: &str| -> Result<usize, Usage> {
        let n = args
            .get(i + 1)
            .ok_or_else(|| format!("{what} needs a count"))?;
        Ok(n.parse::<usize>()
            .map_err(|_| format!("{what} count {n} is not a number"))?)
    };
    let mut transport = "tcp".to_string();
    let mut bricks = Vec::new();
    let mut force = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "replica" => {
                let n = args.get(i + 1).ok_or("replica needs a count")?;
                replica = n
                    .parse::<usize>()
                    .map_err(|_| format!("replica count {n} is not a number"))?;
                if replica < 2 {
                    return Err("replica count should be greater than 1".into());
                }
                i += 2;
            }
            "transport" => {
                transport = args
                    .get(i + 1)
                    .ok_or("transport needs a type (tcp)")?
                    .clone();
                i += 2;
            }
            "arbiter" => {
                let n = args.get(i + 1).ok_or("arbiter needs a count (1)")?;
                if n != "1" {
                    return Err(format!("arbiter count must be 1, not {n}").into());
                }
                arbiter = 1;
                i += 2;
            }
            "disperse" => match args.get(i + 1).and_then(|n| n.parse::<usize>().ok()) {
                Some(n) => {
                    disperse = Some(n);
                    i += 2;
                }
                None => {
                    disperse = Some(0);
                    i += 1;
                }
            },
            "disperse-data" => {
                data = Some(count(i, "disperse-data")?);
                i += 2;
            }
            "redundancy" => {
                redundancy = Some(count(i, "redundancy")?);
                i += 2;
            }
            "stripe" => {
                return Err(
                    "'stripe' volumes are not supported (GlusterFS removed them too): use disperse"
                        .into(),
                );
            }
            "force" if i == args.len() - 1 => {
                force = true;
                i += 1;
            }
            b => {
                bricks.push(b.to_string());
                i += 1;
            }
        }
    }
    if bricks.is_empty() {
        return Err("no bricks given: use HOST:/PATH".into());
    }
    if arbiter > 0 && replica != 3 {
        return Err("For arbiter configuration, replica count must be 3 and arbiter count must be 1. The 3rd brick of the replica will be the arbiter".into());
    }
    let mut parity = 0;
    if disperse.is_some() || data.is_some() || redundancy.is_some() {
        if replica > 1 {
            return Err(
                "a volume is either replicated or dispersed: give replica or disperse, not both"
                    .into(),
            );
        }
        (replica, parity) = disperse_shape(disperse, data, redundancy, bricks.len())?;
    }
    Ok(CreateArgs {
        replica,
        arbiter,
        redundancy: parity,
        transport,
        bricks,
        force,
    })
}

/// The bricks per disperse set and the parity bricks among them, from
/// GlusterFS's words: `disperse N` (N: every brick when not given),
/// `disperse-data K`, `redundancy R`. Without a redundancy, the largest R
/// that leaves a power of two of data bricks, or 1, as GlusterFS chooses.
pub fn disperse_shape(
    disperse: Option<usize>,
    data: Option<usize>,
    redundancy: Option<usize>,
    bricks: usize,
) -> Result<(usize, usize), Usage> {
    let n = match (disperse, data, redundancy) {
        (Some(n), _, _) if n > 0 => n,
        (_, Some(k), Some(r)) => k + r,
        (_, Some(_), None) => return Err("disperse-data needs a redundancy count".into()),
        _ => bricks,
    };
    let r = match (redundancy, data) {
        (Some(r), _) => r,
        (None, Some(k)) => n.saturating_sub(k),
        (None, None) => (1..n)
            .rev()
            .find(|&r| 2 * r < n && (n - r).is_power_of_two())
            .unwrap_or(1),
    };
    if let (Some(k), Some(d)) = (data, disperse.filter(|&d| d > 0)) {
        if k + r != d {
            return Err(format!(
                "disperse-data {k} and redundancy {r} make {} bricks, not the disperse count {d}",
                k + r
            )
            .into());
        }
    }
    // The daemon's own checks of a disperse set (it checks them again).
    crate::mgmt::state::check_disperse(n, r, 0).map_err(|e| e.to_string())?;
    if !bricks.is_multiple_of(n) {
        return Err(format!(
            "Incorrect number of bricks supplied {bricks} with count {n}: a distributed-disperse volume needs a multiple of the disperse count"
        )
        .into());
    }
    Ok((n, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disperse_grammar() {
        let shape = |v: &[&str]| {
            let a = parse_create(&s(v)).map_err(|e| e.to_string())?;
            Ok::<_, String>((a.replica, a.redundancy))
        };
        let six = ["h:/1", "h:/2", "h:/3", "h:/4", "h:/5", "h:/6"];
        let with = |w: &[&'static str]| -> Vec<&'static str> { [w, &six[..]].concat() };
        assert_eq!(
            shape(&with(&["disperse", "6", "redundancy", "2"])),
            Ok((6, 2))
        );
        assert_eq!(
            shape(&with(&["disperse-data", "4", "redundancy", "2"])),
            Ok((6, 2))
        );
        // Without a count, every brick; without a redundancy, 4 + 2.
        assert_eq!(shape(&with(&["disperse"])), Ok((6, 2)));
        assert_eq!(shape(&with(&["disperse", "3"])), Ok((3, 1)));
        assert_eq!(shape(&with(&["redundancy", "1"])), Ok((6, 1)));
        for bad in [
            &["disperse", "6", "redundancy", "0"][..],
            &["disperse", "6", "redundancy", "3"],
            &["disperse", "2"],
            &["disperse", "4"],
            &["disperse-data", "4"],
            &["disperse", "6", "disperse-data", "3", "redundancy", "2"],
            &["replica", "3", "disperse", "3"],
            &["stripe", "2"],
        ] {
            assert!(shape(&with(bad)).is_err(), "{bad:?} accepted");
        }
        let err = shape(&with(&["disperse", "6", "redundancy", "3"])).unwrap_err();
        assert!(err.contains("redundancy must be less than 3"), "{err}");
        let twenty: Vec<String> = (0..20).map(|i| format!("h:/{i}")).collect();
        let mut v = s(&["disperse", "20", "redundancy", "2"]);
        v.extend(twenty);
        assert!(parse_create(&v).is_err(), "18 data bricks");
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn create_grammar() {
        let a = parse_create(&s(&[
            "replica",
            "3",
            "transport",
            "tcp",
            "h:/a",
            "h:/b",
            "h:/c",
            "force",
        ]))
        .unwrap();
        assert_eq!(
            (a.replica, a.transport.as_str(), a.bricks.len(), a.force),
            (3, "tcp", 3, true)
        );
        let a = parse_create(&s(&["h:/a", "h:/b"])).unwrap();
        assert_eq!((a.replica, a.bricks.len(), a.force), (1, 2, false));
        let a = parse_create(&s(&[
            "replica", "3", "arbiter", "1", "h:/a", "h:/b", "h:/c",
        ]))
        .unwrap();
        assert_eq!((a.replica, a.arbiter), (3, 1));
        assert!(parse_create(&s(&["replica", "2", "arbiter", "1", "h:/a", "h:/b"])).is_err());
        assert!(parse_create(&s(&["replica", "3", "arbiter", "2", "h:/a"])).is_err());
        assert!(parse_create(&s(&["replica", "1", "h:/a"])).is_err());
        assert!(parse_create(&s(&["replica", "x", "h:/a"])).is_err());
        assert!(parse_create(&s(&["replica", "3"])).is_err());
    }
}
