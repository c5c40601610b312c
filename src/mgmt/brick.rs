//! The brick process (`mortar brick`), started and watched by the daemon:
//! opens the brick directory, checks that it belongs to the volume, binds
//! the first free port from `BRICK_PORT_BASE` and tells the daemon which
//! one by printing `LISTENING <port>` on its standard output.

use crate::protocol::server;
use crate::storage::posix::{Posix, VOLUME_ID_XATTR};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

pub async fn run(path: &Path, ip: IpAddr, volume_id: &str, arbiter: bool) -> anyhow::Result<()> {
    // Die with the daemon that started us; it starts a fresh brick when it
    // comes back.
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes plain integers and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
    }
    // Objects are made with the mode the client asked for, the caller's
    // umask already applied by the client (FUSE_DONT_MASK): the brick's own
    // umask must not take more away.
    rustix::process::umask(rustix::fs::Mode::empty());
    let mut buf = [0u8; 64];
    let n = rustix::fs::getxattr(path, VOLUME_ID_XATTR, &mut buf[..]).map_err(|e| {
        anyhow::anyhow!(
            "brick {}: no volume id ({e}); was the volume created?",
            path.display()
        )
    })?;
    let found = String::from_utf8_lossy(&buf[..n]).to_string();
    if found != volume_id {
        anyhow::bail!(
            "brick {} belongs to volume id {found}, not {volume_id}",
            path.display()
        );
    }
    let posix = Arc::new(
        Posix::open(path)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .with_arbiter(arbiter),
    );
    let mut port = super::BRICK_PORT_BASE;
    let listener = loop {
        match tokio::net::TcpListener::bind(SocketAddr::new(ip, port)).await {
            Ok(l) => break l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && port < u16::MAX => port += 1,
            Err(e) => return Err(e.into()),
        }
    };
    println!("LISTENING {port}");
    tracing::info!(brick = %path.display(), port, arbiter, "brick serving");
    server::serve(listener, posix).await?;
    Ok(())
}
