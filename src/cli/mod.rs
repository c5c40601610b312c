//! The `mortar` command line: GlusterFS's grammar (`volume create NAME
//! replica 3 transport tcp HOST:/PATH… force`), with `--json` on every read
//! command and `--server` to talk to a daemon other than the local one.
//!
//! One module per command family: `volume` (a volume's life and the
//! dispatch of `volume` commands), `bricks`, `rebalance`, `heal`,
//! `observe` (status, profile, top), `pool` (peers, the pool, credentials),
//! `snapshot`;
//! `format` prints what they show, `manual` the manual pages.

mod bitrot;
mod bricks;
pub mod format;
mod heal;
pub mod manual;
mod observe;
mod pool;
mod rebalance;
mod snapshot;
mod volume;

use crate::brickd::BrickArgs;
use crate::mgmt::error::Error;
use crate::mgmt::rpc::{self, Request, Response};
use crate::mgmt::DEFAULT_MGMT_PORT;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

pub use bricks::parse_add_brick;
pub use pool::{CredentialCmd, PeerCmd, PoolCmd};
pub use volume::{parse_create, CreateArgs, VolumeCmd};

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
    /// Snapshots of volumes (docs/snapshots.md).
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCmd),
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
    /// Serve all of a server's bricks in one process (started by the
    /// daemon, which attaches them: cluster.brick-multiplex).
    #[command(hide = true)]
    BrickHost(crate::brickd::host::HostArgs),
    /// Serve volumes over NFSv3 (started by the daemon, docs/nfs.md).
    #[command(hide = true)]
    NfsServer(crate::nfsd::NfsArgs),
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

/// A command line the CLI's own grammar refuses (clap checked the rest
/// before): the message says what to write instead. Exit code 2, as for
/// a line clap refuses.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

impl From<String> for Usage {
    fn from(why: String) -> Usage {
        Usage(why)
    }
}

impl From<&str> for Usage {
    fn from(why: &str) -> Usage {
        Usage(why.to_string())
    }
}

/// A command line refused, printed as `fail` prints.
fn usage(what: &str, name: &str, e: Usage) -> anyhow::Error {
    failed_with(what, name, e)
}

/// A daemon's refusal, printed as `fail` prints, and kept whole in the
/// error's chain: its kind is the exit code (`exit_code`).
fn refused(what: &str, name: &str, e: Error) -> anyhow::Error {
    failed_with(what, name, e)
}

/// `e` under the context `fail` prints (`what: name: failed`), kept whole
/// in the chain so that `exit_code` and `json_failure` find it.
fn failed_with<E: std::error::Error + Send + Sync + 'static>(
    what: &str,
    name: &str,
    e: E,
) -> anyhow::Error {
    let context = if name.is_empty() {
        format!("{what}: failed")
    } else {
        format!("{what}: {name}: failed")
    };
    anyhow::Error::new(e).context(context)
}

/// The exit code of a command that failed: the kind of the management
/// error behind it (docs/operations.md), else 1.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    if e.chain().any(|c| c.is::<Usage>()) {
        return 2;
    }
    e.chain()
        .find_map(|c| c.downcast_ref::<Error>())
        .map_or(1, |e| e.kind.exit_code())
}

/// A failed command as `--json` prints it: the whole message, and the
/// kind and what it concerns when a daemon said why.
pub fn json_failure(e: &anyhow::Error) -> serde_json::Value {
    let mgmt = e.chain().find_map(|c| c.downcast_ref::<Error>());
    serde_json::json!({
        "result": "failed",
        "message": format!("{e:#}"),
        "kind": mgmt.map(|m| m.kind),
        "concerns": mgmt.and_then(|m| m.concerns.clone()),
        "exit": exit_code(e),
    })
}

/// An answer other than the one asked for: the server's refusal, or
/// what it said instead.
fn unexpected(what: &str, name: &str, answer: Response) -> anyhow::Error {
    match answer {
        Response::Err(e) => refused(what, name, e),
        other => fail(what, name, &format!("unexpected answer {other:?}")),
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
        | Request::Snapshot {
            op: rpc::SnapshotOp::List { .. } | rpc::SnapshotOp::Status { .. },
        } if server.up_to_date => Request::Fresh(Box::new(req)),
        req => req,
    };
    rpc::call(&rpc::mgmt_addr(&server.host, DEFAULT_MGMT_PORT), &req)
        .await
        .map_err(anyhow::Error::new)
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
            other => Err(unexpected(what, name, other)),
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
        Cmd::Volume(v) => volume::run(&server, &out, v).await,
        Cmd::Peer(p) => pool::peer(&server, &out, p).await,
        Cmd::Pool(p) => pool::pool(&server, &out, p).await,
        Cmd::Snapshot(c) => snapshot::run(&server, &out, c).await,
        Cmd::Daemon(_)
        | Cmd::Mount(_)
        | Cmd::Brick(_)
        | Cmd::BrickHost(_)
        | Cmd::NfsServer(_)
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

    /// `mortar brick` (where no mortar-brick is installed beside) takes
    /// the arguments the daemon gives, and none of them is one the
    /// program refuses for a brick (the CLI's `--credential` was).
    #[test]
    fn mortar_brick_takes_the_daemons_arguments() {
        use clap::Parser;
        let t = tempfile::tempdir().unwrap();
        let run = t.path();
        let spec = crate::mgmt::supervise::BrickSpec {
            path: "/data/b1".into(),
            volume: "v".into(),
            volume_id: "id".into(),
            arbiter: true,
            ip: "127.0.0.1".parse().unwrap(),
            mgmt: "127.0.0.1:1".into(),
            logs: run.to_path_buf(),
            run: run.to_path_buf(),
            credential: run.join("server.pem"),
            port: Some(49152),
            key: "k".into(),
            metrics: None,
            options: None,
            multiplex: false,
        };
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
