//! Builds a client translator graph from a volume description, with one
//! named factory per translator kind.

use crate::cluster::{distribute::Distribute, replicate::Replicate};
use crate::core::Xlator;
use crate::mgmt::rpc::{self, Request, Response};
use crate::mgmt::volgen::{VolDesc, XlDesc};
use crate::protocol::client::{ProtocolClient, Resolver};
use std::sync::Arc;
use std::time::Duration;

pub struct Graph {
    pub top: Arc<dyn Xlator>,
    pub clients: Vec<Arc<ProtocolClient>>,
}

impl Graph {
    /// Waits for every brick to connect, at most `timeout`; returns how many did.
    pub async fn wait_up(&self, timeout: Duration) -> usize {
        let mut n = 0;
        for c in &self.clients {
            if c.wait_up(timeout).await {
                n += 1;
            }
        }
        n
    }
}

fn port_resolver(mgmt: String, brick: String, host: String) -> Resolver {
    Arc::new(move || {
        let (mgmt, brick, host) = (mgmt.clone(), brick.clone(), host.clone());
        Box::pin(async move {
            let port = match rpc::call(
                &mgmt,
                &Request::Portmap {
                    path: brick.clone(),
                },
            )
            .await
            {
                Ok(Response::Port(p)) => p,
                Ok(Response::Err(e)) => return Err(std::io::Error::other(e)),
                Ok(other) => {
                    return Err(std::io::Error::other(format!(
                        "unexpected answer {other:?}"
                    )))
                }
                Err(e) => return Err(std::io::Error::other(e)),
            };
            let mut addrs = tokio::net::lookup_host((host.as_str(), port)).await?;
            addrs
                .next()
                .ok_or_else(|| std::io::Error::other(format!("{host} has no address")))
        })
    })
}

fn build_one(
    d: &XlDesc,
    ping: Duration,
    clients: &mut Vec<Arc<ProtocolClient>>,
) -> anyhow::Result<Arc<dyn Xlator>> {
    let children = d
        .children
        .iter()
        .map(|c| build_one(c, ping, clients))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(match d.kind.as_str() {
        "protocol/client" => {
            let (host, mgmt, brick) = match (&d.host, &d.mgmt, &d.brick) {
                (Some(h), Some(m), Some(b)) => (h.clone(), m.clone(), b.clone()),
                _ => anyhow::bail!("{}: protocol/client needs host, mgmt and brick", d.name),
            };
            let c = Arc::new(ProtocolClient::new(
                d.name.clone(),
                brick.clone(),
                port_resolver(mgmt, brick, host),
                ping,
            ));
            clients.push(c.clone());
            c
        }
        "cluster/replicate" => {
            let arbiter = d.arbiter.then(|| children.len() - 1);
            Arc::new(Replicate::new(d.name.clone(), children).with_arbiter(arbiter))
        }
        "cluster/distribute" => Arc::new(Distribute::new(d.name.clone(), children)),
        other => anyhow::bail!("unknown translator kind {other}"),
    })
}

pub fn build(desc: &VolDesc) -> anyhow::Result<Graph> {
    let mut clients = Vec::new();
    let top = build_one(
        &desc.top,
        Duration::from_secs(desc.ping_timeout_secs),
        &mut clients,
    )?;
    Ok(Graph { top, clients })
}
