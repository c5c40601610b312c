//! Volume descriptions for clients and bricks, told of changes at once
//! (`WatchVolDesc`), and the clients that follow them here.

use super::*;

/// The graph version a client runs and when it last asked.
pub(super) type Seen = (Option<u64>, std::time::Instant);

/// A client not heard from for this long is no longer listed (it asks at
/// least every `WATCH_MAX`).
const CLIENT_GONE: Duration = Duration::from_secs(60);

/// How long a `WatchVolDesc` waits for a change before it answers anyway.
const WATCH_MAX: Duration = Duration::from_secs(25);

impl Daemon {
    /// The clients that followed volume `name` here lately.
    pub(super) fn clients_of(&self, name: &str) -> Vec<rpc::ClientSeen> {
        let mut clients = self.clients.lock().unwrap();
        clients.retain(|_, (_, seen)| seen.elapsed() < CLIENT_GONE);
        let mut out: Vec<rpc::ClientSeen> = clients
            .iter()
            .filter(|((v, _), _)| v == name)
            .map(|((_, c), (version, seen))| rpc::ClientSeen {
                client: c.clone(),
                server: self.me.host.clone(),
                version: *version,
                seen_secs_ago: seen.elapsed().as_secs(),
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.client.host, &a.client.mount).cmp(&(&b.client.host, &b.client.mount))
        });
        out
    }

    /// A started volume's client graph description.
    pub(super) fn vol_desc(&self, name: &str) -> Response {
        match self.volume(name) {
            Ok(v) if v.status == VolStatus::Started => {
                let st = self.state.lock().unwrap().clone();
                Response::VolDesc(volgen::generate(
                    &st,
                    &v,
                    &self.me.host,
                    &self.me.mgmt,
                    self.cfg.listen.port(),
                ))
            }
            Ok(_) => err(format!("Volume {name} is not started")),
            Err(e) => err(e),
        }
    }

    /// `WatchVolDesc`: answers once the volume's description is not at
    /// version `known`, or after `WATCH_MAX` anyway; notes the client.
    pub(super) async fn watch(
        &self,
        name: String,
        known: Option<u64>,
        client: Option<rpc::ClientInfo>,
    ) -> Response {
        if let Some(c) = client {
            self.clients
                .lock()
                .unwrap()
                .insert((name.clone(), c), (known, std::time::Instant::now()));
        }
        let mut rx = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + WATCH_MAX;
        loop {
            let now = self.vol_desc(&name);
            let news = match &now {
                Response::VolDesc(d) => known != Some(d.version),
                _ => true,
            };
            if news {
                return now;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => return now,
            }
        }
    }
}
