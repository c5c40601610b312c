//! The `mortar` command line: GlusterFS's grammar (`volume create NAME
//! replica 3 transport tcp HOST:/PATH… force`), with `--json` on every read
//! command and `--server` to talk to a daemon other than the local one.

pub mod format;
mod heal;
pub mod manual;
mod observe;
mod rebalance;

use crate::brickd::BrickArgs;
use crate::mgmt::rpc::{self, Request, Response};
use crate::mgmt::{options, DEFAULT_MGMT_PORT};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// The daemon commands talk to unless `--server` names another.
pub const DEFAULT_SERVER: &str = "127.0.0.1";

#[derive(Parser)]
#[command(
    name = "mortar",
    version,
    about = "mortar: a scale-out distributed file system",
    propagate_version = true
)]
pub struct Cli {
    /// Management daemon to talk to (HOST or HOST:PORT).
    #[arg(long, global = true, default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Credential to connect with (default: $MORTAR_CREDENTIAL, else this
    /// server's administrator credential, /var/lib/mortar/tls/admin.pem).
    #[arg(long, global = true)]
    pub credential: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// Answer reads from the pool's latest committed state: the server
    /// asked first catches up with the leader (any server answers
    /// without it, from what it has applied).
    #[arg(long, global = true)]
    pub up_to_date: bool,
    /// Accepted for GlusterFS compatibility (`--mode=script`); mortar never prompts.
    #[arg(long, global = true, hide = true)]
    pub mode: Option<String>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Manage volumes.
    #[command(subcommand)]
    Volume(VolumeCmd),
    /// Manage the trusted storage pool.
    #[command(subcommand)]
    Peer(PeerCmd),
    /// The trusted storage pool: its servers, administrator credentials
    /// and certificates.
    #[command(subcommand)]
    Pool(PoolCmd),
    /// Run the management daemon (one per server).
    Daemon(DaemonArgs),
    /// Benchmark mortar beside the local disk and GlusterFS (see
    /// docs/benchmarks.md): runs the program mortar-bench, found beside
    /// mortar or on the PATH.
    #[command(disable_help_flag = true)]
    Bench {
        /// mortar-bench's arguments (`mortar bench --help` lists them).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Mount a volume: mortar mount HOST:/VOLUME DIR.
    Mount(MountCmd),
    /// Serve one brick (started by the daemon).
    #[command(hide = true)]
    Brick(BrickArgs),
    /// Write the manual pages, one per command (mortar.1,
    /// mortar-volume.1, mortar-volume-create.1, ...), to DIR.
    Man {
        /// Where to write them (created if missing), e.g.
        /// /usr/local/share/man/man1.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Print the shell completion script for SHELL (bash, zsh, fish,
    /// elvish, powershell), e.g. `mortar completions bash >
    /// /usr/share/bash-completion/completions/mortar`.
    Completions { shell: clap_complete::Shell },
}

#[derive(Subcommand)]
pub enum VolumeCmd {
    /// volume create NAME [replica N [arbiter 1]] [transport tcp] HOST:/PATH... [force]
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
    /// (whole replica sets) to the others; `commit`, refused until they
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
    /// volume set NAME group metadata-cache|nl-cache|db-workload.
    Set {
        name: String,
        key: String,
        value: String,
    },
    /// Show options in force: volume get NAME KEY|all.
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

/// `volume credentials` and `pool credentials`: issues (to standard
/// output or a new file of mode 0600), lists or revokes, asking with
/// `request`.
async fn credentials(
    server: &Server,
    out: &Out,
    what: &str,
    name: &str,
    op: CredentialCmd,
    request: impl Fn(rpc::CredentialOp) -> Request,
) -> anyhow::Result<()> {
    let (op, out_file) = match op {
        CredentialCmd::Create {
            cred,
            access,
            as_user,
            out,
        } => (
            rpc::CredentialOp::Create {
                name: cred,
                read_only: access.as_deref() == Some("ro"),
                identity: as_user,
            },
            out,
        ),
        CredentialCmd::List => (rpc::CredentialOp::List, None),
        CredentialCmd::Revoke { cred } => (rpc::CredentialOp::Revoke { name: cred }, None),
        CredentialCmd::Rotate { cred, out } => (rpc::CredentialOp::Rotate { name: cred }, out),
    };
    // A rotated credential's file is replaced (a mount that uses it takes
    // the new one for its next connection); a new one's is new.
    let replace = matches!(op, rpc::CredentialOp::Rotate { .. });
    let create = replace || matches!(op, rpc::CredentialOp::Create { .. });
    match ask(server, request(op)).await? {
        Response::Credentials(list) => {
            if out.json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                print!("{}", format::credentials(&list));
            }
            Ok(())
        }
        Response::Ok(pem) if create => match out_file {
            Some(f) => {
                write_credential(&f, &pem, replace)
                    .map_err(|e| fail(what, name, &format!("cannot write {}: {e}", f.display())))?;
                out.done(
                    what,
                    name,
                    Response::Ok(format!("credential written to {}", f.display())),
                )
            }
            None => {
                print!("{pem}");
                Ok(())
            }
        },
        r => out.done(what, name, r),
    }
}

/// Writes a credential to a file of mode 0600: a new one, or (`replace`)
/// one put in place of `f` at once, so that a process watching `f` reads
/// the old credential or the new, whole.
fn write_credential(f: &std::path::Path, pem: &str, replace: bool) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let target = if replace {
        let mut name = f.file_name().unwrap_or_default().to_os_string();
        name.push(".new");
        let tmp = f.with_file_name(name);
        let _ = std::fs::remove_file(&tmp);
        tmp
    } else {
        f.to_path_buf()
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&target)?;
    file.write_all(pem.as_bytes())?;
    file.sync_all()?;
    if replace {
        std::fs::rename(&target, f)?;
    }
    Ok(())
}

/// `UID` or `UID:GID`, numbers.
fn parse_identity(s: &str) -> Result<(u32, u32), String> {
    let num = |n: &str| {
        n.parse::<u32>()
            .ok()
            .filter(|&n| n != u32::MAX)
            .ok_or_else(|| format!("{n:?} is not a uid or gid (a number)"))
    };
    match s.split_once(':') {
        Some((u, g)) => Ok((num(u)?, num(g)?)),
        None => num(s).map(|u| (u, u)),
    }
}

#[derive(Subcommand)]
pub enum CredentialCmd {
    /// Issue a credential: credentials VOL create NAME [ro|rw] [--as
    /// UID[:GID]] [--out FILE].
    Create {
        cred: String,
        #[arg(value_parser = ["ro", "rw"])]
        access: Option<String>,
        /// Every request of its holder runs on the bricks as this uid (and
        /// gid, the same number if not given), whatever the holder claims:
        /// for a client not trusted with its users' identities.
        #[arg(long = "as", value_name = "UID[:GID]", value_parser = parse_identity)]
        as_user: Option<(u32, u32)>,
        /// Write it to this new file (mode 0600) instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The volume's credentials: names, access, when issued, fingerprints.
    List,
    /// Revoke a credential: the bricks close its connections within seconds.
    Revoke { cred: String },
    /// Issue a credential again, for the same access: a new key and
    /// certificate. The one it replaces is retired: connections opened
    /// with it go on, no new one is taken. A mount reads its credential
    /// file again before each new connection: replace the file (--out does)
    /// and it takes the new one.
    Rotate {
        cred: String,
        /// Write it to this file (mode 0600), replacing the file at once if
        /// there is one, instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub enum PeerCmd {
    /// Add a server to the pool. A server not in it yet shows its join
    /// token (`peer token` on it), which proves that whoever probes it may
    /// enrol it, and that it is the server meant.
    Probe {
        host: String,
        /// The join token of HOST (from `mortar peer token` on HOST).
        #[arg(long)]
        token: Option<String>,
    },
    /// Print this server's join token, for `peer probe` on a server of
    /// the pool it is to join.
    Token,
    /// Remove a server from the pool (refused while it holds bricks,
    /// unless forced).
    Detach {
        host: String,
        #[arg(value_parser = ["force"])]
        force: Option<String>,
    },
    /// Show the peers.
    Status,
}

#[derive(Subcommand)]
pub enum PoolCmd {
    /// List the servers of the pool, this one included.
    List,
    /// Administrator credentials, for the CLI away from the servers: rw may
    /// do anything an administrator may, ro only look (info, status,
    /// lists, heal info); neither mounts (docs/security.md).
    Credentials {
        #[command(subcommand)]
        op: CredentialCmd,
    },
    /// Give every server of the pool (or HOST only) new certificates from
    /// the pool's CA: its daemon's and bricks', and its local administrator
    /// credential. New ones are put on record, then used; the old ones are
    /// retired (no new connection is taken with them; those open go on).
    RotateCerts { host: Option<String> },
}

#[derive(Args)]
pub struct DaemonArgs {
    /// Address to listen on.
    #[arg(long, default_value_t = format!("0.0.0.0:{DEFAULT_MGMT_PORT}"))]
    pub listen: String,
    /// The name bricks on this server are given (HOST in HOST:/PATH).
    #[arg(long)]
    pub host: Option<String>,
    /// Where the cluster state and logs are kept.
    #[arg(long, default_value = "/var/lib/mortar")]
    pub state_dir: PathBuf,
    /// Serve Prometheus metrics at this address, or `off`; the bricks it
    /// starts serve theirs on its IP at their own port + 1000. Default:
    /// the --listen address's IP, port 24108.
    #[arg(long, value_name = "ADDR|off")]
    pub metrics: Option<String>,
}

#[derive(Args)]
pub struct MountCmd {
    /// HOST:/VOLUME
    pub source: String,
    /// Mount point.
    pub dir: PathBuf,
    /// Port of the management daemon on HOST.
    #[arg(long, default_value_t = DEFAULT_MGMT_PORT)]
    pub port: u16,
    /// Stay in the foreground (logs go to standard error).
    #[arg(long, short = 'f')]
    pub foreground: bool,
    /// Mount options (as mount -o): ro, nosuid, nodev, noexec, sync, dirsync,
    /// noatime, remount, port=N, log-file=PATH, credential=PATH,
    /// backup-volfile-servers=H1:H2, metrics=ADDR (serve the client's
    /// Prometheus metrics there; off by default).
    #[arg(short = 'o')]
    pub options: Vec<String>,
    /// Log file of the background client.
    #[arg(long)]
    pub log_file: Option<PathBuf>,
}

pub struct CreateArgs {
    pub replica: usize,
    pub arbiter: usize,
    pub transport: String,
    pub bricks: Vec<String>,
    pub force: bool,
}

/// Parses GlusterFS's `volume create` words after the name.
/// `add-brick`'s arguments after the volume name: `[replica N] BRICK...
/// [force]`.
pub fn parse_add_brick(args: &[String]) -> Result<(Option<usize>, Vec<String>, bool), String> {
    let mut args = args;
    let mut replica = None;
    if args.first().map(String::as_str) == Some("replica") {
        let n = args.get(1).ok_or("replica needs a count")?;
        replica = Some(
            n.parse::<usize>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| format!("replica count {n} is not a number above 0"))?,
        );
        args = &args[2..];
    }
    let force = args.last().map(String::as_str) == Some("force");
    let bricks = &args[..args.len() - force as usize];
    if let Some(w) = bricks
        .iter()
        .find(|b| ["replica", "arbiter", "transport", "stripe", "disperse"].contains(&b.as_str()))
    {
        return Err(format!(
            "'{w}' is not a brick: add-brick takes [replica N] HOST:/PATH... [force]"
        ));
    }
    if bricks.is_empty() {
        return Err("no bricks given: use HOST:/PATH".into());
    }
    Ok((replica, bricks.to_vec(), force))
}

pub fn parse_create(args: &[String]) -> Result<CreateArgs, String> {
    let mut replica = 1;
    let mut arbiter = 0;
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
                    return Err(format!("arbiter count must be 1, not {n}"));
                }
                arbiter = 1;
                i += 2;
            }
            "disperse" | "redundancy" | "stripe" => {
                return Err(format!("'{}' volumes are not supported yet", args[i]));
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
    Ok(CreateArgs {
        replica,
        arbiter,
        transport,
        bricks,
        force,
    })
}

struct Out {
    json: bool,
}

fn fail(what: &str, name: &str, msg: &str) -> anyhow::Error {
    if name.is_empty() {
        anyhow::anyhow!("{what}: failed: {msg}")
    } else {
        anyhow::anyhow!("{what}: {name}: failed: {msg}")
    }
}

/// The daemon the CLI talks to, and whether reads must be up to date.
pub struct Server {
    host: String,
    up_to_date: bool,
}

async fn ask(server: &Server, req: Request) -> anyhow::Result<Response> {
    let req = match req {
        Request::VolumeInfo { .. }
        | Request::VolumeStatus { .. }
        | Request::PeerList
        | Request::VolumeClients { .. }
        | Request::GetVolDesc { .. }
            if server.up_to_date =>
        {
            Request::Fresh(Box::new(req))
        }
        req => req,
    };
    rpc::call(&rpc::mgmt_addr(&server.host, DEFAULT_MGMT_PORT), &req)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
}

impl Out {
    fn done(&self, what: &str, name: &str, resp: Response) -> anyhow::Result<()> {
        match resp {
            Response::Ok(msg) => {
                if self.json {
                    println!(
                        "{}",
                        serde_json::json!({ "op": what, "name": name, "result": "success", "message": msg })
                    );
                } else {
                    let mut line = if name.is_empty() {
                        format!("{what}: success")
                    } else {
                        format!("{what}: {name}: success")
                    };
                    if !msg.is_empty() {
                        line = if name.is_empty() {
                            format!("{what}: success: {msg}")
                        } else {
                            format!("{line}: {msg}")
                        };
                    }
                    println!("{line}");
                }
                Ok(())
            }
            Response::Err(e) => Err(fail(what, name, &e)),
            other => Err(fail(what, name, &format!("unexpected answer {other:?}"))),
        }
    }
}

pub async fn run_client(cli: Cli) -> anyhow::Result<()> {
    let cred = crate::protocol::tls::credential_path(cli.credential.as_deref());
    crate::protocol::tls::install_file(&cred).map_err(|e| {
        anyhow::anyhow!(
            "{e}\n(the CLI connects with this server's administrator credential: run it as root on a server of the pool, or name one with --credential)"
        )
    })?;
    let out = Out { json: cli.json };
    let server = Server {
        host: cli.server.clone(),
        up_to_date: cli.up_to_date,
    };
    match cli.cmd {
        Cmd::Volume(v) => match v {
            VolumeCmd::Create { name, args } => {
                let a = parse_create(&args).map_err(|e| fail("volume create", &name, &e))?;
                let r = ask(
                    &server,
                    Request::VolumeCreate {
                        name: name.clone(),
                        replica: a.replica,
                        arbiter: a.arbiter,
                        transport: a.transport,
                        bricks: a.bricks,
                        force: a.force,
                    },
                )
                .await?;
                out.done("volume create", &name, r)
            }
            VolumeCmd::AddBrick { name, args } => {
                let (replica, bricks, force) =
                    parse_add_brick(&args).map_err(|e| fail("volume add-brick", &name, &e))?;
                let r = ask(
                    &server,
                    Request::VolumeAddBrick {
                        name: name.clone(),
                        replica,
                        bricks,
                        force,
                    },
                )
                .await?;
                out.done("volume add-brick", &name, r)
            }
            VolumeCmd::RemoveBrick { name, args, wait } => {
                let (replica, args) = match args.as_slice() {
                    [r, n, rest @ ..] if r == "replica" => {
                        let n = n.parse().map_err(|_| {
                            fail(
                                "volume remove-brick",
                                &name,
                                &format!("replica count '{n}' is not a number"),
                            )
                        })?;
                        (Some(n), rest)
                    }
                    _ => (None, args.as_slice()),
                };
                if args.len() < 2 {
                    return Err(fail("volume remove-brick", &name, "use remove-brick NAME [replica N] HOST:/PATH... {start | status | stop | commit | force}"));
                }
                let (bricks, op) = args.split_at(args.len() - 1);
                let kinds = rebalance::kinds(true);
                let op = match op[0].as_str() {
                    "status" if wait => return rebalance::wait(&server, &name, kinds).await,
                    "status" => return rebalance::status(&server, &name, out.json, kinds).await,
                    "start" => rpc::RemoveOp::Start,
                    "stop" => rpc::RemoveOp::Stop,
                    "commit" => rpc::RemoveOp::Commit,
                    "force" => rpc::RemoveOp::Force,
                    other => {
                        return Err(fail(
                            "volume remove-brick",
                            &name,
                            &format!("'{other}': use remove-brick NAME HOST:/PATH... {{start | status | stop | commit | force}}"),
                        ))
                    }
                };
                let r = ask(
                    &server,
                    Request::VolumeRemoveBrick {
                        name: name.clone(),
                        bricks: bricks.to_vec(),
                        op,
                        replica,
                    },
                )
                .await?;
                out.done("volume remove-brick", &name, r)?;
                if wait && op == rpc::RemoveOp::Start {
                    rebalance::wait(&server, &name, kinds).await?;
                }
                Ok(())
            }
            VolumeCmd::ReplaceBrick { name, from, to, .. } => {
                let r = ask(
                    &server,
                    Request::VolumeReplaceBrick {
                        name: name.clone(),
                        from,
                        to,
                    },
                )
                .await?;
                out.done("volume replace-brick", &name, r)
            }
            VolumeCmd::ResetBrick { name, args } => {
                let words: Vec<&str> = args.iter().map(String::as_str).collect();
                let (brick, down) = match words.as_slice() {
                    [b, "start"] => (b.to_string(), true),
                    [b, again, "commit"] | [b, again, "commit", "force"] if b == again => {
                        (b.to_string(), false)
                    }
                    [b, other, "commit", ..] => {
                        return Err(fail(
                            "volume reset-brick",
                            &name,
                            &format!("{other} is not {b}: reset-brick brings the same brick back (use replace-brick to move it)"),
                        ))
                    }
                    _ => {
                        return Err(fail(
                            "volume reset-brick",
                            &name,
                            &format!("'{}': use reset-brick NAME HOST:/PATH start, or reset-brick NAME HOST:/PATH HOST:/PATH commit [force]", args.join(" ")),
                        ))
                    }
                };
                let r = ask(
                    &server,
                    Request::VolumeResetBrick {
                        name: name.clone(),
                        brick,
                        down,
                    },
                )
                .await?;
                out.done("volume reset-brick", &name, r)
            }
            VolumeCmd::Rebalance { name, args, wait } => {
                let asked =
                    rebalance::parse(&args).map_err(|e| fail("volume rebalance", &name, &e))?;
                match asked {
                    rebalance::Asked::Status if wait => {
                        rebalance::wait(&server, &name, rebalance::kinds(false)).await
                    }
                    rebalance::Asked::Status => {
                        rebalance::status(&server, &name, out.json, rebalance::kinds(false)).await
                    }
                    rebalance::Asked::Change(op) => {
                        let r = ask(
                            &server,
                            Request::VolumeRebalance {
                                name: name.clone(),
                                op,
                            },
                        )
                        .await?;
                        out.done("volume rebalance", &name, r)?;
                        if wait && op != rpc::RebalanceOp::Stop {
                            rebalance::wait(&server, &name, rebalance::kinds(false)).await?;
                        }
                        Ok(())
                    }
                }
            }
            VolumeCmd::Start { name, force } => {
                let r = ask(
                    &server,
                    Request::VolumeStart {
                        name: name.clone(),
                        force: force.is_some(),
                    },
                )
                .await?;
                out.done("volume start", &name, r)
            }
            VolumeCmd::Stop { name, .. } => {
                let r = ask(&server, Request::VolumeStop { name: name.clone() }).await?;
                out.done("volume stop", &name, r)
            }
            VolumeCmd::Delete { name } => {
                let r = ask(&server, Request::VolumeDelete { name: name.clone() }).await?;
                out.done("volume delete", &name, r)
            }
            VolumeCmd::Set { name, key, value } => {
                let r = ask(
                    &server,
                    Request::VolumeSet {
                        name: name.clone(),
                        key,
                        value,
                    },
                )
                .await?;
                out.done("volume set", "", r)
            }
            VolumeCmd::Profile {
                name,
                op,
                incremental,
            } => observe::profile(&server, out.json, &name, &op, incremental.is_some()).await,
            VolumeCmd::Top { name, what, args } => {
                observe::top(&server, out.json, &name, &what, &args).await
            }
            VolumeCmd::Heal {
                name,
                args,
                wait,
                timeout,
            } => {
                let op = heal::parse(&args).map_err(|e| fail("volume heal", &name, &e))?;
                let req = Request::Heal {
                    name: name.clone(),
                    op: op.clone(),
                };
                match ask(&server, req).await? {
                    Response::Heal(rep) => {
                        if out.json {
                            println!("{}", serde_json::to_string_pretty(&rep)?);
                        } else {
                            heal::print(&name, &op, &rep);
                        }
                    }
                    Response::Err(e) => return Err(fail("volume heal", &name, &e)),
                    other => return Err(fail("volume heal", &name, &format!("{other:?}"))),
                }
                if wait && matches!(op, rpc::HealOp::Index | rpc::HealOp::Full) {
                    heal::wait(&server, &name, timeout).await?;
                }
                Ok(())
            }
            VolumeCmd::Credentials { name, op } => {
                credentials(&server, &out, "volume credentials", &name, op, |op| {
                    Request::VolumeCredentials {
                        name: name.clone(),
                        op,
                    }
                })
                .await
            }
            VolumeCmd::Reset { name, key } => {
                let r = ask(
                    &server,
                    Request::VolumeReset {
                        name: name.clone(),
                        key,
                    },
                )
                .await?;
                out.done("volume reset", "", r)
            }
            VolumeCmd::Info { name } => {
                match ask(&server, Request::VolumeInfo { name: name.clone() }).await? {
                    Response::Volumes(vs) => {
                        if out.json {
                            println!("{}", serde_json::to_string_pretty(&vs)?);
                        } else if vs.is_empty() {
                            println!("No volumes present");
                        } else {
                            print!("{}", format::info(&vs));
                        }
                        Ok(())
                    }
                    Response::Err(e) => Err(fail("volume info", "", &e)),
                    other => Err(fail(
                        "volume info",
                        "",
                        &format!("unexpected answer {other:?}"),
                    )),
                }
            }
            VolumeCmd::List => match ask(&server, Request::VolumeInfo { name: None }).await? {
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
                Response::Err(e) => Err(fail("volume list", "", &e)),
                other => Err(fail(
                    "volume list",
                    "",
                    &format!("unexpected answer {other:?}"),
                )),
            },
            VolumeCmd::Get { name, key } => match ask(
                &server,
                Request::VolumeInfo {
                    name: Some(name.clone()),
                },
            )
            .await?
            {
                Response::Volumes(vs) => {
                    let v = &vs[0];
                    let keys: Vec<&str> = if key == "all" {
                        options::all().into_iter().map(|o| o.key).collect()
                    } else if options::spec(&key).is_some() {
                        vec![key.as_str()]
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
                Response::Err(e) => Err(fail("volume get", "", &e)),
                other => Err(fail(
                    "volume get",
                    "",
                    &format!("unexpected answer {other:?}"),
                )),
            },
            VolumeCmd::Statedump { name } => {
                let r = ask(&server, Request::VolumeStatedump { name: name.clone() }).await?;
                match r {
                    Response::Ok(files) if !out.json => {
                        println!("Volume statedump successful. Dumps written:\n{files}");
                        Ok(())
                    }
                    r => out.done("volume statedump", &name, r),
                }
            }
            VolumeCmd::Status {
                name: Some(name),
                what: Some(what),
            } if what != "clients" => observe::status(&server, out.json, &name, &what).await,
            VolumeCmd::Status {
                name: Some(name),
                what: Some(_),
            } => match ask(
                &server,
                Request::VolumeClients {
                    name: name.clone(),
                    all: true,
                },
            )
            .await?
            {
                Response::Clients(c) => {
                    // And each brick's own connections.
                    let bricks =
                        match ask(&server, Request::VolumeBrickDetails { name: name.clone() })
                            .await?
                        {
                            Response::BrickDetails(b) => b,
                            _ => Vec::new(),
                        };
                    if out.json {
                        let json = serde_json::json!({
                            "mounts": c,
                            "bricks": observe::brick_clients_json(&bricks),
                        });
                        println!("{}", serde_json::to_string_pretty(&json)?);
                    } else {
                        print!("{}", format::clients(&name, &c));
                        print!("{}", observe::brick_clients(&bricks));
                    }
                    Ok(())
                }
                Response::Err(e) => Err(fail("volume status", "", &e)),
                other => Err(fail(
                    "volume status",
                    "",
                    &format!("unexpected answer {other:?}"),
                )),
            },
            VolumeCmd::Status {
                name: None,
                what: Some(w),
            } => Err(fail(
                "volume status",
                "",
                &format!("'{w}' needs a volume name: volume status NAME {w}"),
            )),
            VolumeCmd::Status { name, what: None } => {
                match ask(&server, Request::VolumeStatus { name }).await? {
                    Response::Status(st) => {
                        if out.json {
                            println!(
                                "{}",
                                serde_json::to_string_pretty(&format::status_json(&st))?
                            );
                        } else if st.is_empty() {
                            println!("No volumes present");
                        } else {
                            print!("{}", format::status(&st));
                        }
                        Ok(())
                    }
                    Response::Err(e) => Err(fail("volume status", "", &e)),
                    other => Err(fail(
                        "volume status",
                        "",
                        &format!("unexpected answer {other:?}"),
                    )),
                }
            }
        },
        Cmd::Peer(p) => match p {
            PeerCmd::Probe { host, token } => {
                let r = ask(&server, Request::PeerProbe { host, token }).await?;
                out.done("peer probe", "", r)
            }
            PeerCmd::Token => match ask(&server, Request::PeerToken).await? {
                Response::Ok(t) => {
                    if out.json {
                        println!("{}", serde_json::json!({ "token": t }));
                    } else {
                        println!("{t}");
                    }
                    Ok(())
                }
                Response::Err(e) => Err(fail("peer token", "", &e)),
                other => Err(fail("peer token", "", &format!("{other:?}"))),
            },
            PeerCmd::Detach { host, force } => {
                let force = force.is_some();
                let r = ask(&server, Request::PeerDetach { host, force }).await?;
                out.done("peer detach", "", r)
            }
            PeerCmd::Status => match ask(&server, Request::PeerList).await? {
                Response::Peers { states, .. } => {
                    if out.json {
                        println!("{}", serde_json::to_string_pretty(&states)?);
                    } else {
                        print!("{}", format::peer_status(&states));
                    }
                    Ok(())
                }
                other => Err(fail("peer status", "", &format!("{other:?}"))),
            },
        },
        Cmd::Pool(PoolCmd::Credentials { op }) => {
            credentials(&server, &out, "pool credentials", "", op, |op| {
                Request::PoolCredentials { op }
            })
            .await
        }
        Cmd::Pool(PoolCmd::RotateCerts { host }) => {
            let r = ask(&server, Request::RotateCerts { host: host.clone() }).await?;
            out.done("pool rotate-certs", host.as_deref().unwrap_or(""), r)
        }
        Cmd::Pool(PoolCmd::List) => match ask(&server, Request::PeerList).await? {
            Response::Peers { me, states, .. } => {
                if out.json {
                    println!(
                        "{}",
                        serde_json::json!({ "localhost": me, "peers": states })
                    );
                } else {
                    println!("UUID\t\t\t\t\tHostname \tState");
                    for s in &states {
                        println!("{}\t{}\t{}", s.peer.uuid, s.peer.host, format::connected(s));
                    }
                    println!("{}\tlocalhost\tConnected", me.uuid);
                }
                Ok(())
            }
            other => Err(fail("pool list", "", &format!("{other:?}"))),
        },
        Cmd::Daemon(_)
        | Cmd::Mount(_)
        | Cmd::Brick(_)
        | Cmd::Bench { .. }
        | Cmd::Man { .. }
        | Cmd::Completions { .. } => {
            unreachable!("handled in main")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// `mortar brick` (where no mortar-brick is installed beside) takes
    /// the arguments the daemon gives, and none of them is one the
    /// program refuses for a brick (the CLI's `--credential` was).
    #[test]
    fn mortar_brick_takes_the_daemons_arguments() {
        use clap::Parser;
        let t = tempfile::tempdir().unwrap();
        let spec =
            crate::mgmt::supervise::tests::spec_for(std::path::Path::new("/data/b1"), t.path());
        let args = crate::mgmt::supervise::brick_args(&spec, &t.path().join("log"));
        let cli = Cli::try_parse_from(
            ["mortar".into(), std::ffi::OsString::from("brick")]
                .into_iter()
                .chain(args),
        )
        .unwrap();
        assert!(cli.credential.is_none());
        let Cmd::Brick(b) = cli.cmd else {
            panic!("not a brick")
        };
        assert_eq!(b.server_credential, spec.credential);
    }
}
