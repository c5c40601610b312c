//! The operations that change the cluster: each validates its request
//! (arguments, bricks, peers) and then states the change as `Command`s
//! (`mgmt::command`), which `Daemon::execute` applies and commits.

use super::*;

use crate::core::options::valid_name;

fn nested(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"))
}

/// Checks a local brick path before a volume is created on it (or,
/// `rejoin`ing, before it comes back to the volume of that id).
pub(super) fn check_local_brick(
    path: &Path,
    force: bool,
    rejoin: Option<&str>,
) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if !md.is_dir() {
            return Err(format!("{} is not a directory", path.display()));
        }
        let mut id = [0u8; 64];
        if let Ok(n) = rustix::fs::getxattr(path, VOLUME_ID_XATTR, &mut id[..]) {
            if rejoin.is_none_or(|v| v.as_bytes() != &id[..n]) {
                return Err(format!("{} is already part of a volume", path.display()));
            }
        }
    }
    let mut existing = path;
    while !existing.exists() {
        existing = existing.parent().unwrap_or(Path::new("/"));
    }
    let dev = std::fs::metadata(existing)
        .map_err(|e| e.to_string())?
        .dev();
    let root = std::fs::metadata("/").map_err(|e| e.to_string())?.dev();
    if dev == root && !force {
        return Err(format!(
            "The brick {} is being created in the root partition. It is recommended that you don't use the \
             system's root partition for storage backend. Or use 'force' at the end of the command if you want \
             to override this behavior.",
            path.display()
        ));
    }
    // Files already there would be served as the volume's without being
    // its (no identity, no copies elsewhere); a brick comes back to its
    // own volume with what it holds (`rejoin`).
    if rejoin.is_none() && !force {
        let stray = std::fs::read_dir(path).ok().and_then(|mut d| {
            d.find_map(|e| {
                let name = e.ok()?.file_name();
                let name = name.to_string_lossy();
                (name != crate::storage::posix::META_DIR && name != "lost+found")
                    .then(|| name.into_owned())
            })
        });
        if let Some(name) = stray {
            return Err(format!(
                "The brick {} is not empty (it holds {name}). A brick's directory must be new or empty: \
                 use another, or 'force' at the end of the command to take it as it is.",
                path.display()
            ));
        }
    }
    Ok(())
}

impl Daemon {
    /// Requests that change the cluster state; called under `op_lock`.
    pub(super) async fn change(self: &Arc<Self>, req: Request) -> Result<String, String> {
        match req {
            Request::PeerProbe { host, token } => {
                if self.is_local(&host).await {
                    return Ok("Probe on localhost not needed".into());
                }
                let token = token
                    .as_deref()
                    .map(crate::mgmt::authority::parse_token)
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
                    ));
                };
                let (ca, ca_key) = crate::mgmt::authority::pool_ca(&self.cfg.state_dir)?;
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
                    Response::Err(e) => return Err(format!("Probe refused: {e}")),
                    other => {
                        return Err(format!("Probe returned with unexpected answer {other:?}"))
                    }
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
            Request::PeerDetach { host, force } => {
                let (peer, uses) = {
                    let st = self.state.lock().unwrap();
                    let Some(p) = st.peers.iter().find(|p| p.host == host) else {
                        return Err(format!("{host} is not part of cluster"));
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
                    ));
                }
                self.remove_member(&peer).await?;
                // (Off the record now: reached as any server of the CA.)
                if let Err(e) = rpc::call_any_of_ca(&peer.mgmt, &Request::Leave).await {
                    tracing::warn!(peer = %host, "detached, but not told so: {e}");
                }
                Ok(String::new())
            }
            Request::VolumeCreate {
                name,
                replica,
                arbiter,
                transport,
                bricks,
                force,
            } => {
                if arbiter > 0 && (replica != 3 || arbiter != 1) {
                    return Err("For arbiter configuration, replica count must be 3 and arbiter count must be 1".into());
                }
                self.create_volume(name, replica, arbiter, transport, bricks, force)
                    .await
            }
            Request::VolumeAddBrick {
                name,
                replica,
                bricks,
                force,
            } => self.add_bricks(name, replica, bricks, force).await,
            Request::VolumeStart { name, force } => {
                let v = self.volume(&name)?;
                if v.status == VolStatus::Started && !force {
                    return Err(format!("Volume {name} already started"));
                }
                let t0 = std::time::Instant::now();
                let after = self
                    .execute(Command::SetStatus {
                        volume: name.clone(),
                        status: VolStatus::Started,
                    })
                    .await?;
                let committed_ms = t0.elapsed().as_millis();
                // Each host starts its bricks and answers once they are up.
                let answers = self
                    .on_volume_hosts(&v, || Request::BricksRun {
                        volume: name.clone(),
                        force,
                        after: Some(after),
                    })
                    .await;
                let mut first: Vec<BrickStatus> = Vec::new();
                for r in answers {
                    if let Response::Bricks(b) = r {
                        first.extend(b);
                    }
                }
                let mut st = self.statuses(&v, first);
                let answered_ms = t0.elapsed().as_millis();
                let late = st.iter().filter(|s| !s.online).count();
                // Report bricks that do not come up, but keep trying them.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
                loop {
                    let down: Vec<String> = st
                        .iter()
                        .filter(|s| !s.online)
                        .map(|s| s.brick.clone())
                        .collect();
                    if down.is_empty() {
                        tracing::info!(volume = %name, committed_ms, answered_ms, late, online_ms = t0.elapsed().as_millis(), "volume started");
                        return Ok(String::new());
                    }
                    let offline: Vec<String> = st
                        .iter()
                        .filter_map(|s| Some(format!("{}: {}", s.brick, s.reason.as_ref()?)))
                        .collect();
                    if !offline.is_empty() {
                        return Err(format!("bricks offline: {}", offline.join("; ")));
                    }
                    if tokio::time::Instant::now() > deadline {
                        return Err(format!(
                            "bricks did not come online: {} (see the brick logs under the daemon's state directory)",
                            down.join(", ")
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    st = self.status_of(&v).await;
                }
            }
            Request::VolumeStop { name } => {
                let v = self.volume(&name)?;
                if v.status != VolStatus::Started {
                    return Err(format!("Volume {name} is not in the started state"));
                }
                self.execute(Command::SetStatus {
                    volume: name,
                    status: VolStatus::Stopped,
                })
                .await?;
                Ok(String::new())
            }
            Request::VolumeDelete { name } => {
                let v = self.volume(&name)?;
                if v.status == VolStatus::Started {
                    return Err(format!("Volume {name} has been started.Volume needs to be stopped before deletion."));
                }
                self.release(&v.bricks).await;
                self.execute(Command::RemoveVolume { volume: name }).await?;
                Ok(String::new())
            }
            Request::VolumeProfile { name, op } => self.profile_switch(name, op).await,
            Request::VolumeSet { name, key, value } if key == "group" => {
                self.volume(&name)?;
                let options = options::group(&value)?;
                self.execute(Command::SetOptions {
                    volume: name,
                    options,
                })
                .await?;
                Ok(String::new())
            }
            Request::VolumeSet { name, key, value } => {
                self.volume(&name)?;
                let value = options::validate(&key, &value)?;
                self.execute(Command::SetOption {
                    volume: name,
                    key,
                    value,
                })
                .await?;
                Ok(String::new())
            }
            Request::VolumeCredentials { name, op } => match op {
                rpc::CredentialOp::Create {
                    name: cred,
                    read_only,
                    identity,
                } => {
                    let v = self.volume(&name)?;
                    if v.credentials.iter().any(|c| c.name == cred) {
                        return Err(format!(
                            "Volume {name} already has a credential named {cred}"
                        ));
                    }
                    let (pem, credential) = self.issue_credential(
                        &cred,
                        crate::protocol::tls::CLIENT_NAME,
                        &format!("client {cred} of volume {name}"),
                        read_only,
                        identity,
                    )?;
                    self.execute(Command::AddCredential {
                        volume: name.clone(),
                        credential,
                    })
                    .await?;
                    tracing::info!(volume = %name, credential = %cred, read_only, ?identity, "client credential issued");
                    Ok(pem)
                }
                rpc::CredentialOp::Revoke { name: cred } => {
                    self.volume(&name)?;
                    self.execute(Command::RevokeCredential {
                        volume: name.clone(),
                        name: cred.clone(),
                    })
                    .await?;
                    tracing::info!(volume = %name, credential = %cred, "client credential revoked");
                    Ok(String::new())
                }
                rpc::CredentialOp::Rotate { name: cred } => {
                    self.rotate_credential(Some(name), cred).await
                }
                rpc::CredentialOp::List => Err("not a change".into()),
            },
            Request::VolumeReset { name, key } => {
                self.volume(&name)?;
                if let Some(k) = &key {
                    if options::spec(k).is_none() {
                        return Err(format!("option : {k} does not exist"));
                    }
                }
                self.execute(Command::ResetOptions { volume: name, key })
                    .await?;
                Ok(String::new())
            }
            Request::PoolCredentials { op } => match op {
                rpc::CredentialOp::Create {
                    name,
                    read_only,
                    identity,
                } => {
                    if identity.is_some() {
                        return Err("--as is for a volume's client credentials".into());
                    }
                    if self
                        .state
                        .lock()
                        .unwrap()
                        .operators
                        .iter()
                        .any(|c| c.name == name)
                    {
                        return Err(format!("The pool already has a credential named {name}"));
                    }
                    use crate::protocol::tls;
                    let (role, what) = match read_only {
                        true => (tls::READER_NAME, "read-only administrator"),
                        false => (tls::ADMIN_NAME, "administrator"),
                    };
                    let (pem, credential) = self.issue_credential(
                        &name,
                        role,
                        &format!("{what} {name}"),
                        read_only,
                        None,
                    )?;
                    self.execute(Command::AddOperator(credential)).await?;
                    tracing::info!(credential = %name, read_only, "administrator credential issued");
                    Ok(pem)
                }
                rpc::CredentialOp::Revoke { name } => {
                    self.execute(Command::RevokeOperator { name: name.clone() })
                        .await?;
                    tracing::info!(credential = %name, "administrator credential revoked");
                    Ok(String::new())
                }
                rpc::CredentialOp::Rotate { name } => self.rotate_credential(None, name).await,
                rpc::CredentialOp::List => Err("not a change".into()),
            },
            Request::RegisterCerts {
                uuid,
                certs,
                retire,
            } => {
                // (Asked again by a server that looked before the state
                // reached it: nothing to change, nothing written.)
                if self.state.lock().unwrap().certs.get(&uuid) != Some(&certs) {
                    self.execute(Command::SetCerts {
                        uuid,
                        certs,
                        retire,
                    })
                    .await?;
                }
                Ok(String::new())
            }
            Request::BrickPort {
                volume,
                host,
                path,
                port,
            } => {
                self.execute(Command::SetBrickPort {
                    volume,
                    host,
                    path,
                    port,
                })
                .await?;
                Ok(String::new())
            }
            Request::VolumeRebalance { name, op } => self.rebalance(name, op).await,
            Request::VolumeRemoveBrick {
                name,
                bricks,
                op,
                replica,
            } => {
                let v = self.volume(&name)?;
                match replica {
                    Some(r) if r < v.replica => self.lower_replica(name, r, bricks, op).await,
                    Some(r) if r > v.replica => Err(format!(
                        "replica count {r} is above the volume's ({}): use add-brick",
                        v.replica
                    )),
                    _ => self.remove_brick(name, bricks, op).await,
                }
            }
            Request::VolumeReplaceBrick { name, from, to } => {
                self.replace_brick(name, from, to).await
            }
            Request::VolumeResetBrick { name, brick, down } => {
                self.reset_brick(name, brick, down).await
            }
            Request::TaskRow { volume, task, row } => {
                self.execute(Command::SetTaskRow { volume, task, row })
                    .await?;
                Ok(String::new())
            }
            Request::Task { volume, task } => {
                self.execute(Command::SetTask { volume, task }).await?;
                Ok(String::new())
            }
            other => Err(format!("unexpected request {other:?}")),
        }
    }

    /// Takes the volume id off bricks (a volume deleted, or not created),
    /// and what preparing them made where nothing else is kept.
    pub(super) async fn release(self: &Arc<Self>, bricks: &[Brick]) {
        self.on_bricks(bricks, |b| Request::BrickRelease { brick: b.clone() })
            .await;
    }

    /// Takes a server out of the pool's membership (a voter gives its
    /// vote to another server first).
    /// Issues a credential named `name` (checked) for `role` from this
    /// server's CA: its PEM, for the caller only, and what the pool's
    /// state keeps of it.
    fn issue_credential(
        &self,
        name: &str,
        role: &str,
        label: &str,
        read_only: bool,
        identity: Option<(u32, u32)>,
    ) -> Result<(String, crate::mgmt::state::IssuedCredential), String> {
        use crate::protocol::tls;
        if !valid_name(name) {
            return Err(format!(
                "{name:?} is not a credential name: letters, digits, - and _, at most 64"
            ));
        }
        let pem = crate::mgmt::authority::issue(&self.cfg.state_dir, role, label)?;
        let issued = tls::Credential::from_pem(pem.as_bytes())?;
        let record = crate::mgmt::state::IssuedCredential {
            name: name.to_string(),
            fingerprint: issued.fingerprint_hex(),
            read_only,
            identity,
            issued: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            retired: Vec::new(),
        };
        Ok((pem, record))
    }

    /// `credentials rotate`: issues credential `cred` of `volume` (of the
    /// pool's administrators if None) again, for the same grant, and
    /// retires the certificate it replaces. Returns the new one's PEM.
    async fn rotate_credential(
        self: &Arc<Self>,
        volume: Option<String>,
        cred: String,
    ) -> Result<String, String> {
        use crate::protocol::tls;
        let old = match &volume {
            Some(v) => self.volume(v)?.credentials.clone(),
            None => self.state.lock().unwrap().operators.clone(),
        }
        .into_iter()
        .find(|c| c.name == cred)
        .ok_or_else(|| match &volume {
            Some(v) => format!("Volume {v} has no credential named {cred}"),
            None => format!("The pool has no credential named {cred}"),
        })?;
        let (role, label) = match (&volume, old.read_only) {
            (Some(v), _) => (tls::CLIENT_NAME, format!("client {cred} of volume {v}")),
            (None, true) => (tls::READER_NAME, format!("read-only administrator {cred}")),
            (None, false) => (tls::ADMIN_NAME, format!("administrator {cred}")),
        };
        let (pem, new) = self.issue_credential(&cred, role, &label, old.read_only, old.identity)?;
        self.execute(Command::RotateCredential {
            volume: volume.clone(),
            name: cred.clone(),
            fingerprint: new.fingerprint,
            issued: new.issued,
        })
        .await?;
        tracing::info!(volume = ?volume, credential = %cred, "credential rotated: the certificate it replaces is retired");
        Ok(pem)
    }

    async fn remove_member(&self, peer: &Peer) -> Result<(), String> {
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

    pub(super) async fn create_volume(
        self: &Arc<Self>,
        name: String,
        replica: usize,
        arbiter: usize,
        transport: String,
        bricks: Vec<String>,
        force: bool,
    ) -> Result<String, String> {
        if !valid_name(&name) {
            return Err(format!(
                "Volume name {name} is not valid: use letters, digits, '-' and '_'"
            ));
        }
        if self.state.lock().unwrap().volumes.contains_key(&name) {
            return Err(format!("Volume {name} already exists"));
        }
        if transport != "tcp" {
            return Err(format!("transport {transport} is not supported (use tcp)"));
        }
        if replica == 0 {
            return Err("replica count should be greater than 1".into());
        }
        if bricks.is_empty() {
            return Err("at least one brick is needed".into());
        }
        if !bricks.len().is_multiple_of(replica) {
            return Err(format!(
                "Incorrect number of bricks supplied {} with count {replica}",
                bricks.len()
            ));
        }
        let mut parsed = self.check_new_bricks(&bricks).await?;
        self.state.lock().unwrap().assign_ports(&mut parsed);
        let id = uuid::Uuid::new_v4().to_string();
        self.init_bricks(&parsed, &id, force).await?;
        let vol = Volume {
            name: name.clone(),
            id,
            replica,
            transport,
            bricks: parsed,
            status: VolStatus::Created,
            options: Default::default(),
            version: 1,
            arbiter,
            tasks: Vec::new(),
            set_ids: Vec::new(),
            layout_commit: 1,
            draining: Vec::new(),
            resetting: Vec::new(),
            key: format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            ),
            credentials: Vec::new(),
        };
        self.execute(Command::AddVolume(vol)).await?;
        Ok("please start the volume to access data".into())
    }

    /// Bricks given on the command line, parsed and checked: no two the
    /// same or one inside another, on servers of the pool, none inside a
    /// brick of any volume.
    pub(super) async fn check_new_bricks(
        self: &Arc<Self>,
        bricks: &[String],
    ) -> Result<Vec<Brick>, String> {
        let parsed: Vec<Brick> = bricks
            .iter()
            .map(|b| Brick::parse(b))
            .collect::<Result<_, _>>()?;
        for (i, a) in parsed.iter().enumerate() {
            for b in &parsed[i + 1..] {
                if a.host == b.host && a.path == b.path {
                    return Err(format!("Found duplicate exports {a}"));
                }
                if a.host == b.host && nested(&a.path, &b.path) {
                    return Err(format!(
                        "Brick: {a}, {b} one of the bricks contain the other"
                    ));
                }
            }
        }
        for b in &parsed {
            if !self.is_local(&b.host).await && self.peer_mgmt(&b.host).is_none() {
                return Err(format!("Host {} is not in 'Peer in Cluster' state", b.host));
            }
        }
        {
            let st = self.state.lock().unwrap();
            for v in st.volumes.values() {
                for old in &v.bricks {
                    for b in &parsed {
                        if old.host == b.host && nested(&old.path, &b.path) {
                            return Err(format!(
                                "{} is already part of a volume ({}: {old})",
                                b, v.name
                            ));
                        }
                    }
                }
            }
        }
        Ok(parsed)
    }

    /// Prepares bricks for volume `id` on their servers; on any failure
    /// takes back what was done and says why.
    pub(super) async fn init_bricks(
        self: &Arc<Self>,
        parsed: &[Brick],
        id: &str,
        force: bool,
    ) -> Result<(), String> {
        let answers = self
            .on_bricks(parsed, |b| Request::BrickInit {
                brick: b.clone(),
                volume_id: id.to_string(),
                force,
                rejoin: false,
            })
            .await;
        let mut done = Vec::new();
        let mut failed = None;
        for (b, r) in parsed.iter().zip(answers) {
            match r {
                Response::Ok(_) => done.push(b.clone()),
                Response::Err(e) => failed = failed.or(Some(e)),
                o => failed = failed.or(Some(format!("unexpected answer {o:?}"))),
            }
        }
        if let Some(e) = failed {
            self.release(&done).await;
            return Err(e);
        }
        Ok(())
    }

    /// `volume add-brick`: new replica sets, or more bricks in each set.
    /// A started volume's new bricks are up before it answers, and mounted
    /// clients switch to the graph with them.
    pub(super) async fn add_bricks(
        self: &Arc<Self>,
        name: String,
        replica: Option<usize>,
        bricks: Vec<String>,
        force: bool,
    ) -> Result<String, String> {
        let v = self.volume(&name)?;
        v.no_rebalance_running()?;
        let replica = replica.unwrap_or(v.replica);
        if bricks.is_empty() {
            return Err("no bricks given: use HOST:/PATH".into());
        }
        let mut parsed = self.check_new_bricks(&bricks).await?;
        // Checked here as the command will (so that nothing is prepared
        // for a change that is refused), and again when applied.
        Volume::clone(&v).add_bricks(replica, &parsed)?;
        self.state.lock().unwrap().assign_ports(&mut parsed);
        self.init_bricks(&parsed, &v.id, force).await?;
        let cmd = Command::AddBricks {
            volume: name.clone(),
            replica,
            bricks: parsed.clone(),
        };
        let after = match self.execute(cmd).await {
            Ok(i) => i,
            Err(e) => {
                self.release(&parsed).await;
                return Err(e);
            }
        };
        if v.status == VolStatus::Started {
            let answers = self
                .on_bricks(&parsed, |_| Request::BricksRun {
                    volume: name.clone(),
                    force: false,
                    after: Some(after),
                })
                .await;
            for r in answers {
                if let Response::Err(e) = r {
                    return Err(format!("bricks added, but not all started: {e}"));
                }
            }
        }
        Ok(if replica > v.replica {
            self.heal_new_bricks(&name).await
        } else {
            "run 'volume rebalance NAME start' to spread existing data over the new bricks".into()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_names_and_nested_bricks_are_judged() {
        assert!(valid_name("gv0") && valid_name("a-b_c"));
        for bad in ["", "-x", "a/b", "a b", "ü", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert!(nested("/data/b", "/data/b"));
        assert!(nested("/data/b", "/data/b/sub"));
        assert!(nested("/data/b/sub", "/data/b"));
        assert!(!nested("/data/b", "/data/bb"));
    }

    #[test]
    fn a_brick_path_in_use_or_not_a_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert!(check_local_brick(&file, true, None)
            .unwrap_err()
            .contains("not a directory"));
        let used = d.path().join("used");
        std::fs::create_dir(&used).unwrap();
        rustix::fs::setxattr(
            &used,
            VOLUME_ID_XATTR,
            b"id",
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        assert!(check_local_brick(&used, true, None)
            .unwrap_err()
            .contains("already part of a volume"));
        // Back to its own volume, not to another.
        assert!(check_local_brick(&used, true, Some("id")).is_ok());
        assert!(check_local_brick(&used, true, Some("other")).is_err());
        assert!(check_local_brick(&d.path().join("new/brick"), true, None).is_ok());
    }
}
