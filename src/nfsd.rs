//! `mortar nfs-server`: the NFS server of one server of the pool (started
//! by its daemon, docs/nfs.md). Each volume it serves is a client graph,
//! built from the description the daemon gives and kept in step with it,
//! as a mount's is; NFS clients' calls are answered through it.

use crate::core::desc::VolDesc;
use crate::graph::{active::Active, Graph};
use crate::mgmt::rpc::{self, Request, Response};
use crate::nfs::portmap::{self, Portmap};
use crate::nfs::rpcbind;
use crate::nfs::{handle::volume_id, server, Export, Service};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args)]
pub struct NfsArgs {
    /// Where to serve NFS and MOUNT.
    #[arg(long, default_value = "0.0.0.0:2049")]
    pub listen: String,
    /// The management daemon that gives the volumes' descriptions.
    #[arg(long, default_value_t = format!("127.0.0.1:{}", crate::mgmt::DEFAULT_MGMT_PORT))]
    pub mgmt: String,
    /// The credential to reach the bricks with (default: the server's;
    /// not `--credential`: that one is the CLI's, for talking to a
    /// daemon).
    #[arg(long)]
    pub server_credential: Option<std::path::PathBuf>,
    /// Exit when standard input ends: the daemon that started the server
    /// (and holds the other end) is gone.
    #[arg(long)]
    pub until_stdin_ends: bool,
    /// Tell the machine's portmapper (rpcbind) where NFS and MOUNT are
    /// when it holds port 111 (`nfs.register-with-portmap`), and take
    /// them out again when standard input ends.
    #[arg(long)]
    pub register_with_portmap: bool,
    /// The volumes to serve.
    #[arg(required = true)]
    pub volumes: Vec<String>,
}

pub fn main(a: &NfsArgs) -> anyhow::Result<()> {
    crate::process::init_logs();
    // A descriptor per client connection and per file kept open: as many
    // as the system lets this process have.
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut files = getrlimit(Resource::Nofile);
    if files.current < files.maximum {
        files.current = files.maximum;
        let _ = setrlimit(Resource::Nofile, files);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let credential = crate::protocol::tls::credential_path(a.server_credential.as_deref());
    crate::protocol::tls::install_file(&credential).map_err(anyhow::Error::msg)?;
    let listen: std::net::SocketAddr = a
        .listen
        .parse()
        .map_err(|e| anyhow::anyhow!("--listen {}: {e}", a.listen))?;
    if a.until_stdin_ends {
        std::thread::spawn(|| {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            tracing::info!("standard input ended (the daemon is gone): NFS server exits");
            if REGISTERED.load(std::sync::atomic::Ordering::Acquire) {
                match rpcbind::unregister() {
                    Ok(()) => tracing::info!("NFS and MOUNT taken out of the portmapper"),
                    Err(e) => {
                        tracing::warn!("cannot take NFS and MOUNT out of the portmapper: {e}")
                    }
                }
            }
            std::process::exit(0);
        });
    }
    rt.block_on(async {
        let service = Arc::new(Service::new());
        for vol in &a.volumes {
            let (active, desc) = volume(&a.mgmt, vol).await?;
            let export = Arc::new(Export::new(
                vol.clone(),
                volume_id(&desc.id),
                active.clone(),
                &desc,
            ));
            service.exports.add(export.clone());
            follow(&a.mgmt, desc, active, export);
        }
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| anyhow::anyhow!("nfs: cannot listen on {listen}: {e}"))?;
        tracing::info!(%listen, volumes = a.volumes.join(","), "serving NFS");
        tokio::join!(
            server::serve(listener, service),
            portmapper(listen.ip(), listen.port(), a.register_with_portmap)
        );
        Ok(())
    })
}

/// Whether this server registered with the machine's portmapper.
static REGISTERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Answers portmapper calls at port 111 of `ip` for the NFS server at
/// `port`, if the port is free; otherwise registers with the portmapper
/// that holds it (`register`), or says so and serves without.
async fn portmapper(ip: std::net::IpAddr, port: u16, register: bool) {
    let at = std::net::SocketAddr::new(ip, portmap::PORT);
    let bound = async {
        let tcp = tokio::net::TcpListener::bind(at).await?;
        let udp = tokio::net::UdpSocket::bind(at).await?;
        std::io::Result::Ok((tcp, udp))
    };
    match bound.await {
        Ok((tcp, udp)) => {
            tracing::info!(%at, "portmapper: NFS and MOUNT found at port {port}");
            server::serve_portmap(tcp, udp, Arc::new(Portmap::new(port))).await;
        }
        Err(e) if register => {
            let told = tokio::task::spawn_blocking(move || rpcbind::register(port)).await;
            match told.map_err(std::io::Error::other).and_then(|r| r) {
                Ok(()) => {
                    REGISTERED.store(true, std::sync::atomic::Ordering::Release);
                    tracing::info!(
                        %at,
                        "port 111 is held by another portmapper ({e}): NFS and MOUNT registered with it at port {port}"
                    );
                }
                Err(r) => tracing::warn!(
                    %at,
                    "port 111 is held by another portmapper ({e}), and registering with it failed ({r}): \
                     clients need the port given (port={port},mountport={port})"
                ),
            }
        }
        Err(e) => tracing::warn!(
            %at,
            "portmapper not served ({e}; another portmapper, such as rpcbind, holds the port; \
             nfs.register-with-portmap is off): clients need the port given (port={port},mountport={port})"
        ),
    }
}

/// The options an NFS server's graphs hold whatever the volume says,
/// because an NFS client goes on with what it was told across a restart
/// of the server:
/// - no change of names answered ahead of the bricks (RFC 1813 has
///   CREATE, REMOVE, RENAME and the others done when answered);
/// - no write answered from the server's memory unless
///   `performance.nfs.write-behind` says so: an UNSTABLE write is
///   answered once the bricks hold it (COMMIT makes it durable). RFC 1813
///   lets a server lose it and change its write verifier, but clients
///   that never compare verifiers exist (libnfs's `nfs-cp` lost 1 MiB
///   that way when its server was killed).
fn pinned(volume: &crate::core::Options) -> crate::core::Options {
    let behind = crate::nfs::options::NFS_WRITE_BEHIND.bool(volume);
    [
        (
            crate::performance::md_cache::ASYNC_DIROPS.key.to_string(),
            "off".to_string(),
        ),
        (
            crate::performance::write_behind::WRITE_BEHIND
                .key
                .to_string(),
            if behind { "on" } else { "off" }.to_string(),
        ),
    ]
    .into()
}

/// Volume `vol`'s client graph, and its description.
async fn volume(mgmt: &str, vol: &str) -> anyhow::Result<(Arc<Active>, VolDesc)> {
    let mut desc = match rpc::call(
        mgmt,
        &Request::GetVolDesc {
            name: vol.to_string(),
        },
    )
    .await
    {
        Ok(Response::VolDesc(d)) => d,
        Ok(Response::Err(e)) => return Err(anyhow::Error::new(e)),
        Ok(other) => anyhow::bail!("{mgmt}: unexpected answer {other:?}"),
        Err(e) => anyhow::bail!("{mgmt}: {}", e.message),
    };
    let pinned = pinned(&desc.options);
    desc.options.extend(pinned);
    crate::protocol::tls::set_record(Some(&desc.pool));
    let graph = Graph::build(&desc, &rpc::graph_env())?;
    let up = graph.wait_up(Duration::from_secs(10)).await;
    tracing::info!(volume = %vol, bricks_up = up, "volume graph ready for NFS");
    Ok((Active::new(graph), desc))
}

/// Keeps `active` and `export`'s rules in step with the volume's
/// description at `mgmt`.
fn follow(mgmt: &str, desc: VolDesc, active: Arc<Active>, export: Arc<Export>) {
    let me = rpc::ClientInfo::this_process("nfs".to_string());
    tokio::spawn(rpc::follow_graph(
        vec![mgmt.to_string()],
        desc,
        active,
        me,
        pinned,
        move |d| export.follow(d),
    ));
}
