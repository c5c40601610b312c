//! The pool's members: `peer probe` (a server joins with its join
//! token and takes the pool's certificate authority) and `peer detach`.

use super::*;
use crate::error::Error;

impl Daemon {
    /// `peer probe HOST [--token T]`: enrols HOST (or replaces a member
    /// that came back with a new identity).
    pub(super) async fn probe(
        self: &Arc<Self>,
        host: String,
        token: Option<String>,
    ) -> Result<String, Error> {
        if self.is_local(&host).await {
            return Ok("Probe on localhost not needed".into());
        }
        let token = token
            .as_deref()
            .map(crate::authority::parse_token)
            .transpose()?;
        let known = self
            .state
            .lock()
            .unwrap()
            .peers
            .iter()
            .find(|p| p.host == host)
            .cloned();
        if let Some(old) = &known {
            // A member that answers with another identity lost its
            // state (a wiped state directory, and with it the
            // pool's certificates): it is replaced once it shows
            // its new join token.
            match answered_within(&host, rpc::call(&old.mgmt, &Request::PeerList)).await {
                Ok(Response::Peers { me, .. }) if me.uuid != old.uuid => {
                    tracing::warn!(peer = %host, old = %old.uuid, new = %me.uuid, "the server came back with a new identity: replacing it");
                }
                Err(_) if token.is_some() => {
                    tracing::warn!(peer = %host, old = %old.uuid, "the server is no longer of the pool and shows a join token: replacing it");
                }
                _ => {
                    return Ok(format!(
                        "Host {host} port {} already in peer list",
                        self.cfg.listen.port()
                    ))
                }
            }
        }
        let Some((pin, secret)) = token else {
            return Err(format!(
                "{host} is not in this pool: it joins with its join token. Run `mortar peer token` on {host}, \
                 then here `mortar peer probe {host} --token TOKEN`"
            ).into());
        };
        let (ca, ca_key) = crate::authority::pool_ca(&self.cfg.state_dir)?;
        let addr = rpc::mgmt_addr(&host, self.cfg.listen.port());
        let t0 = std::time::Instant::now();
        // Under the change lock: bounded, as every call to a host.
        let req = Request::PeerJoin {
            me: self.me.clone(),
            secret,
            ca,
            ca_key,
        };
        let resp = answered_within(&host, rpc::call_pinned(&addr, &req, pin))
            .await
            .map_err(|e| format!("Probe returned with {e}"))?;
        let (me, certs) = match resp {
            Response::Joined { me, certs } => (me, certs),
            Response::Err(e) => return Err(format!("Probe refused: {e}").into()),
            other => return Err(format!("Probe returned with unexpected answer {other:?}").into()),
        };
        let peer = Peer {
            uuid: me.uuid,
            host: host.clone(),
            mgmt: addr,
        };
        if let Some(old) = known {
            self.remove_member(&old).await?;
        }
        // Its certificates are the pool's before it is a member:
        // the pool never takes any certificate of its CA meanwhile.
        self.execute(Command::SetCerts {
            uuid: peer.uuid.clone(),
            certs,
            retire: false,
        })
        .await?;
        let joined = t0.elapsed().as_millis();
        self.consensus
            .add_learner(peer)
            .await
            .map_err(|e| format!("Probe failed: {host} could not be added: {e}"))?;
        let added = t0.elapsed().as_millis();
        self.refresh();
        self.balance().await;
        tracing::info!(peer = %host, joined_ms = joined, added_ms = added, balanced_ms = t0.elapsed().as_millis(), "peer added");
        Ok(String::new())
    }

    /// `peer detach HOST [force]`: refused while HOST holds bricks,
    /// unless forced.
    pub(super) async fn detach(
        self: &Arc<Self>,
        host: String,
        force: bool,
    ) -> Result<String, Error> {
        let (peer, uses) = {
            let st = self.state.lock().unwrap();
            let Some(p) = st.peers.iter().find(|p| p.host == host) else {
                return Err(Error::not_found(format!("{host} is not part of cluster")));
            };
            let uses: Vec<String> = st
                .volumes
                .values()
                .filter(|v| v.bricks.iter().any(|b| b.host == host))
                .map(|v| v.name.clone())
                .collect();
            (p.clone(), uses)
        };
        if !uses.is_empty() && !force {
            return Err(format!(
                "Peer {host} hosts one or more bricks (volumes {}). Remove them before detaching, or use 'force'.",
                uses.join(", ")
            ).into());
        }
        self.remove_member(&peer).await?;
        // (Off the record now: reached as any server of the CA.)
        if let Err(e) = rpc::call_any_of_ca(&peer.mgmt, &Request::Leave).await {
            tracing::warn!(peer = %host, "detached, but not told so: {e}");
        }
        Ok(String::new())
    }

    /// Takes a server out of the pool's membership (a voter gives its
    /// vote to another server first).
    async fn remove_member(&self, peer: &Peer) -> Result<(), Error> {
        let id = consensus::node_id(&peer.uuid);
        if self.consensus.roles().0.contains(&id) {
            self.balance_without(Some(id)).await;
        }
        let ids = std::collections::BTreeSet::from([id]);
        let change = if self.consensus.roles().0.contains(&id) {
            openraft::ChangeMembers::RemoveVoters(ids)
        } else {
            openraft::ChangeMembers::RemoveNodes(ids)
        };
        self.consensus
            .change(change, false)
            .await
            .map_err(|e| format!("{} could not be taken out of the pool: {e}", peer.host))?;
        self.refresh();
        // Its certificates are no longer taken (the daemons here stopped
        // taking them with the membership; this tells the bricks).
        if let Err(e) = self
            .execute(Command::SetCerts {
                uuid: peer.uuid.clone(),
                certs: Vec::new(),
                retire: false,
            })
            .await
        {
            tracing::warn!(peer = %peer.host, "its certificates are still on record: {e}");
        }
        Ok(())
    }

    /// `PeerJoin`: this server joins the pool of the prober, which
    /// showed its join token: it takes the pool's certificate authority
    /// and starts afresh as a learner.
    pub(super) async fn join(
        &self,
        prober: Peer,
        secret: String,
        ca: String,
        ca_key: String,
    ) -> Response {
        let _g = self.op_lock.lock().await;
        if !authority::secret_matches(&self.cfg.state_dir, &secret) {
            tracing::warn!(prober = %prober.host, "refused to join a pool: wrong join token");
            return err(format!(
                "{} refused to join: the join token is not its own (run `mortar peer token` on it)",
                self.me.host
            ));
        }
        if let Err(e) = self.may_join(&prober) {
            return err(e);
        }
        match authority::adopt(&self.cfg.state_dir, &self.cfg.host, &ca, &ca_key)
            .and_then(|_| self.install_credential())
        {
            Ok(()) => {}
            Err(e) => return err(format!("cannot take the pool's certificates: {e}")),
        }
        if let Err(e) = self.consensus.reset(false).await {
            return err(format!("cannot reset the local state: {e}"));
        }
        self.refresh();
        tracing::info!(leader = %prober.host, "joining a pool: took its certificate authority");
        Response::Joined {
            me: self.me.clone(),
            certs: authority::fingerprints(&self.cfg.state_dir).unwrap_or_default(),
        }
    }

    /// `Leave`: detached from the pool, this server becomes a pool of
    /// one again, with an authority of its own.
    pub(super) async fn leave(&self) -> Response {
        let _g = self.op_lock.lock().await;
        match self.consensus.reset(true).await {
            Ok(()) => {
                // A pool of one again, with an authority of its own.
                if let Err(e) = authority::renew(&self.cfg.state_dir, &self.cfg.host)
                    .and_then(|_| self.install_credential())
                {
                    tracing::error!("cannot make new certificates after leaving the pool: {e}");
                }
                tracing::info!("detached from the pool: a pool of one again");
                self.refresh();
                Response::Ok(String::new())
            }
            Err(e) => err(format!("cannot reset the local state: {e}")),
        }
    }
}
