//! The pool: `peer probe|token|detach|status`, `pool list|rotate-certs`,
//! and the credentials of the pool's administrators and of a volume's
//! clients (`pool credentials`, `volume credentials`).

use super::{ask, fail, format, unexpected, Out, Server, Usage};
use crate::mgmt::rpc::{self, Request, Response};
use clap::Subcommand;
use std::path::PathBuf;

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

pub(super) async fn peer(server: &Server, out: &Out, cmd: PeerCmd) -> anyhow::Result<()> {
    match cmd {
        PeerCmd::Probe { host, token } => {
            let r = ask(server, Request::PeerProbe { host, token }).await?;
            out.done("peer probe", "", r)
        }
        PeerCmd::Token => match ask(server, Request::PeerToken).await? {
            Response::Ok(t) => {
                if out.json {
                    println!("{}", serde_json::json!({ "token": t }));
                } else {
                    println!("{t}");
                }
                Ok(())
            }
            other => Err(unexpected("peer token", "", other)),
        },
        PeerCmd::Detach { host, force } => {
            let force = force.is_some();
            let r = ask(server, Request::PeerDetach { host, force }).await?;
            out.done("peer detach", "", r)
        }
        PeerCmd::Status => match ask(server, Request::PeerList).await? {
            Response::Peers { states, .. } => {
                if out.json {
                    println!("{}", serde_json::to_string_pretty(&states)?);
                } else {
                    print!("{}", format::peer_status(&states));
                }
                Ok(())
            }
            other => Err(unexpected("peer status", "", other)),
        },
    }
}

pub(super) async fn pool(server: &Server, out: &Out, cmd: PoolCmd) -> anyhow::Result<()> {
    match cmd {
        PoolCmd::Credentials { op } => {
            credentials(server, out, "pool credentials", "", op, |op| {
                Request::PoolCredentials { op }
            })
            .await
        }
        PoolCmd::RotateCerts { host } => {
            let r = ask(server, Request::RotateCerts { host: host.clone() }).await?;
            out.done("pool rotate-certs", host.as_deref().unwrap_or(""), r)
        }
        PoolCmd::List => match ask(server, Request::PeerList).await? {
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
            other => Err(unexpected("pool list", "", other)),
        },
    }
}

/// `volume credentials` and `pool credentials`: issues (to standard
/// output or a new file of mode 0600), lists or revokes, asking with
/// `request`.
pub(super) async fn credentials(
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
fn parse_identity(s: &str) -> Result<(u32, u32), Usage> {
    let num = |n: &str| {
        n.parse::<u32>()
            .ok()
            .filter(|&n| n != u32::MAX)
            .ok_or_else(|| Usage(format!("{n:?} is not a uid or gid (a number)")))
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
