//! This server's certificates in the pool's state (docs/security.md):
//! kept on record (`register_certs`), and rotated (`rotate_own`: new ones
//! on record beside the old, then written and used, then the old ones
//! retired), on every server of the pool for `pool rotate-certs`.

use super::*;
use crate::error::Error;

/// How long a rotation waits between putting the new certificates on
/// record and using them: the time the pool's bricks take to hear of a
/// change of their volume (a long poll that answers at once).
const RECORD_SPREAD: Duration = Duration::from_secs(3);

impl Daemon {
    /// Keeps this server's certificates on record in the pool's state
    /// (`ClusterState::certs`): at its first start, after it joined or left
    /// a pool, and once after an upgrade from before they were recorded.
    /// The pool takes no other server or administrator certificate.
    pub(super) async fn register_certs(self: Arc<Self>) {
        let mut state = self.changed.subscribe();
        let mut first = true;
        loop {
            let mine = match authority::fingerprints(&self.cfg.state_dir) {
                Ok(m) => m,
                Err(e) => {
                    tracing::error!("cannot read this server's certificates: {e}");
                    return;
                }
            };
            let recorded = self
                .state
                .lock()
                .unwrap()
                .certs
                .get(&self.me.uuid)
                .cloned()
                .unwrap_or_default();
            let within = mine.iter().all(|c| recorded.contains(c));
            // While a rotation runs, the record holds the old and the new:
            // left to it. At a start, a rotation that was cut short ends
            // (its old certificates retired) or is undone (the new ones,
            // never written, dropped).
            let settled = if first { recorded == mine } else { within };
            if !settled {
                let req = Request::RegisterCerts {
                    uuid: self.me.uuid.clone(),
                    certs: mine,
                    retire: within,
                };
                match self.clone().change_anywhere(req).await {
                    Ok(_) => tracing::info!("this server's certificates are on record in the pool"),
                    Err(e) => {
                        tracing::warn!("this server's certificates are not on record yet: {e}");
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        continue;
                    }
                }
            }
            first = false;
            if state.changed().await.is_err() {
                return;
            }
        }
    }

    /// Uses the credential in this server's file for the connections it
    /// opens and accepts from now on (and whenever the file changes).
    pub(super) fn install_credential(&self) -> Result<(), authority::Error> {
        Ok(tls::install_file(&authority::server_credential(
            &self.cfg.state_dir,
        ))?)
    }

    /// `pool rotate-certs [HOST]`: each server named (all of them if none
    /// is) rotates its certificates; the answer has a line per server.
    pub(super) async fn rotate_pool(self: Arc<Self>, host: Option<String>) -> Response {
        let members: Vec<Peer> = {
            let st = self.state.lock().unwrap();
            st.peers.iter().cloned().chain([self.me.clone()]).collect()
        };
        let targets: Vec<Peer> = match &host {
            None => members.clone(),
            Some(h) => members.iter().filter(|p| &p.host == h).cloned().collect(),
        };
        // A server away while another's certificates change would refuse
        // that one's messages when it came back (its state would not have
        // them on record yet), and could not catch up with the pool.
        let away: Vec<&str> = members
            .iter()
            .filter(|p| p.uuid != self.me.uuid && self.silent_for(&p.uuid) >= members::GONE)
            .map(|p| p.host.as_str())
            .collect();
        if !away.is_empty() {
            return err(format!(
                "{} not connected: every server of the pool must be up for a rotation (bring it back, or detach it first)",
                away.join(", ")
            ));
        }
        if targets.is_empty() {
            return err(format!(
                "{} is not a server of the pool (see `mortar pool list`)",
                host.unwrap_or_default()
            ));
        }
        // Sixteen servers at a time: each changes only its own record.
        use futures_util::StreamExt;
        let rotated: Vec<(String, Result<String, Error>)> =
            futures_util::stream::iter(targets.into_iter().map(|p| {
                let d = self.clone();
                async move {
                    let res = if p.uuid == d.me.uuid {
                        d.rotate_own().await
                    } else {
                        match rpc::call(&p.mgmt, &Request::RotateOwnCerts).await {
                            Ok(Response::Ok(s)) => Ok(s),
                            Ok(Response::Err(e)) | Err(e) => Err(e),
                            Ok(other) => Err(format!("unexpected answer {other:?}").into()),
                        }
                    };
                    (p.host, res)
                }
            }))
            .buffered(16)
            .collect()
            .await;
        let failed = rotated.iter().any(|(_, r)| r.is_err());
        let lines: Vec<String> = rotated
            .into_iter()
            .map(|(host, r)| match r {
                Ok(_) => format!("{host}: certificates rotated"),
                Err(e) => format!("{host}: not rotated: {e}"),
            })
            .collect();
        match failed {
            false => Response::Ok(lines.join("\n")),
            true => err(lines.join("\n")),
        }
    }

    /// Rotates this server's certificates (its daemon's and bricks', and
    /// its administrator credential): new ones from the pool's CA are put
    /// on record beside the old ones; once the pool's bricks have heard,
    /// they are written in place of the old files (this daemon, its
    /// bricks and the mounts here take them for their next connections);
    /// then the old ones are retired: no new connection is taken with them,
    /// and those open go on.
    pub(super) async fn rotate_own(self: Arc<Self>) -> Result<String, Error> {
        let _one_at_a_time = self.rotate_lock.lock().await;
        let dir = &self.cfg.state_dir;
        let old = authority::fingerprints(dir)?;
        let fresh = authority::issue_own(dir, &self.cfg.host)?;
        let new = fresh.fingerprints()?;
        let both: Vec<String> = old.iter().chain(&new).cloned().collect();
        let record = |certs: Vec<String>, retire| Request::RegisterCerts {
            uuid: self.me.uuid.clone(),
            certs,
            retire,
        };
        self.clone()
            .change_anywhere(record(both, false))
            .await
            .map_err(|e| format!("the new certificates could not be put on record: {e}"))?;
        tokio::time::sleep(RECORD_SPREAD).await;
        fresh.save(dir)?;
        self.install_credential()?;
        tracing::info!(certificates = ?new, "this server's certificates were replaced by new ones");
        self.clone()
            .change_anywhere(record(new, true))
            .await
            .map_err(|e| format!("the old certificates could not be retired (they will be at this daemon's next start): {e}"))?;
        tracing::info!(retired = ?old, "this server's old certificates are retired");
        Ok(String::new())
    }
}
