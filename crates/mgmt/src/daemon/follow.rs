//! Volume descriptions for clients and bricks, told of changes at once
//! (`WatchVolDesc`), and the clients that follow them here.

use super::*;
use crate::error::Error;

/// The graph version a client runs, when it last asked, and the bricks it
/// said it reads around.
pub(super) type Seen = (Option<u64>, std::time::Instant, Vec<String>);

/// A client not heard from for this long is no longer listed (it asks at
/// least every `WATCH_MAX`).
const CLIENT_GONE: Duration = Duration::from_secs(60);

/// How long a `WatchVolDesc` waits for a change before it answers anyway.
const WATCH_MAX: Duration = Duration::from_secs(25);

impl Daemon {
    /// The clients that followed volume `name` here lately.
    pub(super) fn clients_of(&self, name: &str) -> Vec<rpc::ClientSeen> {
        let mut clients = self.clients.lock().unwrap();
        clients.retain(|_, (_, seen, _)| seen.elapsed() < CLIENT_GONE);
        let mut out: Vec<rpc::ClientSeen> = clients
            .iter()
            .filter(|((v, _), _)| v == name)
            .map(|((_, c), (version, seen, slow))| rpc::ClientSeen {
                client: c.clone(),
                server: self.me.host.clone(),
                version: *version,
                seen_secs_ago: seen.elapsed().as_secs(),
                slow: slow.clone(),
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.client.host, &a.client.mount).cmp(&(&b.client.host, &b.client.mount))
        });
        out
    }

    /// Whether this daemon knows the clients that follow it: those that
    /// followed its predecessor come back within `FOLLOW_RETRY`.
    pub(super) fn knows_its_clients(&self) -> bool {
        self.born.elapsed() > 2 * rpc::FOLLOW_RETRY + Duration::from_secs(1)
    }

    /// The clients that followed volume `name` lately at any server of
    /// the pool (those that cannot be asked left out).
    pub(super) async fn clients_anywhere(&self, name: &str) -> Vec<rpc::ClientSeen> {
        self.clients_everywhere(name).await.0
    }

    /// `clients_anywhere`, and whether the list is complete: every server
    /// answered, and each had run long enough to know its clients.
    pub(super) async fn clients_everywhere(&self, name: &str) -> (Vec<rpc::ClientSeen>, bool) {
        let mut out = self.clients_of(name);
        let mut complete = self.knows_its_clients();
        let peers = self.state.lock().unwrap().peers.clone();
        for p in peers.iter() {
            let req = Request::VolumeClients {
                name: name.to_string(),
                all: false,
            };
            match rpc::call(&p.mgmt, &req).await {
                Ok(Response::Clients(c)) => out.extend(c),
                // Down, or started moments ago.
                _ => complete = false,
            }
        }
        (out, complete)
    }

    /// Volume `name`'s client graph description, from the view now
    /// (None: no such volume).
    pub(super) fn desc(&self, name: &str) -> Option<Arc<mortar_core::desc::VolDesc>> {
        let st = self.state.lock().unwrap();
        let mut descs = self.descs.lock().unwrap();
        if let Some(d) = descs.get(name) {
            return Some(d.clone());
        }
        let v = st.volumes.get(name)?;
        let port = self.cfg.listen.port();
        let d = Arc::new(volgen::generate(&st, v, &self.me.host, &self.me.mgmt, port));
        descs.insert(name.to_string(), d.clone());
        Some(d)
    }

    /// The view now, if volume `name` is started in it; else why not.
    fn started(&self, name: &str) -> Result<Arc<ClusterState>, Error> {
        let st = self.state.lock().unwrap().clone();
        match st.volumes.get(name) {
            Some(v) if v.status == VolStatus::Started => Ok(st),
            Some(_) => Err(format!("Volume {name} is not started").into()),
            None => Err(Error::not_found(format!("Volume {name} does not exist"))),
        }
    }

    /// A started volume's client graph description; with `options_only`,
    /// its graph left empty (what a brick needs), made without the graph.
    pub(super) fn vol_desc(&self, name: &str, options_only: bool) -> Response {
        let st = match self.started(name) {
            Ok(s) => s,
            Err(e) => return err(e),
        };
        if options_only {
            return Response::VolDesc(volgen::options_only(&st, &st.volumes[name]));
        }
        match self.desc(name) {
            Some(d) => Response::VolDesc((*d).clone()),
            None => err(Error::not_found(format!("Volume {name} does not exist"))),
        }
    }

    /// `WatchVolDesc`: answers once the volume's description is not at
    /// version `known`, or after `WATCH_MAX` anyway; notes the client.
    pub(super) async fn watch(
        &self,
        name: String,
        known: Option<u64>,
        client: Option<(rpc::ClientInfo, Vec<String>)>,
        options_only: bool,
    ) -> Response {
        if let Some((c, slow)) = client {
            self.clients
                .lock()
                .unwrap()
                .insert((name.clone(), c), (known, std::time::Instant::now(), slow));
        }
        let mut rx = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + WATCH_MAX;
        loop {
            let same = self
                .started(&name)
                .is_ok_and(|st| known == Some(st.volumes[&name].version));
            if !same {
                return self.vol_desc(&name, options_only);
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return self.vol_desc(&name, options_only);
            }
        }
    }
}
