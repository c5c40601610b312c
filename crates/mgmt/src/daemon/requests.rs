//! Answers to requests: what the CLI, the clients, the bricks and the
//! other daemons ask. Reads are answered here from the applied state;
//! changes go to the leader (`leader`), and each family's work is in its
//! module.

use super::nfs::nfs_of;
use super::*;
use mortar_nfs::options::NFS_DISABLE;

impl Daemon {
    pub(super) async fn handle(self: Arc<Self>, req: Request) -> Response {
        match req {
            Request::PeerList => {
                let states = self.peer_states();
                Response::Peers {
                    me: self.me.clone(),
                    peers: states.iter().map(|s| s.peer.clone()).collect(),
                    states,
                }
            }
            Request::Heartbeat { from } => {
                self.seen(&from);
                self.heard_table()
            }
            Request::PoolCredentials {
                op: rpc::CredentialOp::List,
            } => Response::Credentials(self.state.lock().unwrap().operators.clone()),
            Request::VolumeCredentials {
                name,
                op: rpc::CredentialOp::List,
            } => match self.volume(&name) {
                Ok(v) => Response::Credentials(v.credentials.clone()),
                Err(e) => err(e),
            },
            Request::VolumeInfo { name } => self.volume_info(name),
            Request::Snapshot {
                op: op @ (rpc::SnapshotOp::List { .. } | rpc::SnapshotOp::Status { .. }),
            } => self.snapshot_read(op).await,
            Request::SnapshotCopy { brick, name, op } => self.snapshot_copy(brick, name, op).await,
            Request::PoolOptions => Response::Options(crate::options::pool_in_force(
                &self.state.lock().unwrap().options,
            )),
            Request::VolumeStatus { name } => self.volume_status(name).await,
            Request::GetVolDesc { name } => self.vol_desc(&name, false),
            Request::VolumeClients { name, all } => self.volume_clients(name, all).await,
            Request::WatchVolDesc {
                name,
                known,
                client,
                options_only,
                slow,
            } => {
                self.watch(name, known, client.map(|c| (c, slow)), options_only)
                    .await
            }
            Request::Portmap { path } => {
                let bricks = self.bricks.lock().unwrap();
                match bricks.get(&path).and_then(|(_, i)| i.get().port) {
                    Some(port) => Response::Port(port),
                    None => err(format!("brick {path} is not running on {}", self.me.host)),
                }
            }
            Request::LocalStatus { volume } => match self.volume(&volume) {
                Ok(v) => Response::Bricks(self.local_status(&v)),
                Err(e) => err(e),
            },
            Request::LocalNfs => Response::Nfs(self.nfs_status().await),
            Request::BrickInit {
                brick,
                volume_id,
                force,
                rejoin,
            } => self.init_brick(brick, volume_id, force, rejoin),
            Request::BrickRelease { brick } => {
                self.release_brick(&brick.path);
                Response::Ok(String::new())
            }
            Request::Heal { name, op } => self.heal(name, op).await,
            Request::Scrub { name, op, here } => self.scrub(name, op, here).await,
            Request::VolumeProfile {
                name,
                op: rpc::ProfileOp::Info,
            } => self.profile_info(&name).await,
            Request::VolumeTop { name, brick } => self.top(&name, brick).await,
            Request::VolumeBrickDetails { name } => self.brick_details(&name).await,
            Request::VolumeStatedump { name } => self.statedump(&name).await,
            Request::BricksRun {
                volume,
                force,
                after,
            } => self.run_bricks(volume, force, after).await,
            Request::PeerJoin {
                me,
                secret,
                ca,
                ca_key,
            } => self.join(me, secret, ca, ca_key).await,
            Request::PeerToken => match authority::join_token(&self.cfg.state_dir) {
                Ok(t) => Response::Ok(t),
                Err(e) => err(e),
            },
            Request::Leave => self.leave().await,
            Request::Raft(m) => match serde_json::from_str(m.get()) {
                Ok(m) => match self.consensus.receive(m).await {
                    Ok(reply) => match serde_json::value::to_raw_value(&reply) {
                        Ok(v) => Response::Raft(v),
                        Err(e) => err(e.to_string()),
                    },
                    Err(e) => err(e),
                },
                Err(e) => err(format!("malformed raft message: {e}")),
            },
            Request::ReadIndex => match self.consensus.read_index().await {
                Ok(i) => Response::Index(i),
                Err(e) => err(e),
            },
            Request::RotateCerts { host } => self.clone().rotate_pool(host).await,
            Request::RotateOwnCerts => match self.clone().rotate_own().await {
                Ok(s) => Response::Ok(s),
                Err(e) => err(e),
            },
            Request::Fresh(req) => {
                if let Err(e) = self.catch_up().await {
                    return err(e);
                }
                Box::pin(self.handle(*req)).await
            }
            Request::Leader(req) => {
                if !self.consensus.is_leader() {
                    return err(Error::unavailable(NOT_LEADER));
                }
                match self.change_here(*req).await {
                    Ok(msg) => Response::Committed {
                        msg,
                        index: self.consensus.applied_index(),
                    },
                    Err(e) => err(e),
                }
            }
            other => match self.change_anywhere(other).await {
                Ok(msg) => Response::Ok(msg),
                Err(e) => Response::Err(e),
            },
        }
    }

    /// `volume info [NAME]`.
    fn volume_info(&self, name: Option<String>) -> Response {
        let st = self.state.lock().unwrap();
        match name {
            Some(n) => match st.volumes.get(&n) {
                Some(v) => Response::Volumes(vec![v.public()]),
                None => err(Error::not_found(format!("Volume {n} does not exist"))),
            },
            None => Response::Volumes(st.volumes.values().map(|v| v.public()).collect()),
        }
    }

    /// `volume status [NAME]`: the started volumes' bricks, asked.
    async fn volume_status(self: &Arc<Self>, name: Option<String>) -> Response {
        let vols: Vec<Arc<Volume>> = match name {
            Some(n) => match self.volume(&n) {
                Ok(v) if v.status == VolStatus::Started => vec![v],
                Ok(_) => return err(format!("Volume {n} is not started")),
                Err(e) => return err(e),
            },
            None => {
                let st = self.state.lock().unwrap();
                st.volumes
                    .values()
                    .filter(|v| v.status == VolStatus::Started)
                    .cloned()
                    .collect()
            }
        };
        // Every server runs the NFS server of the volumes served so: all
        // are asked, once, if any of these volumes is.
        let nfs = if vols.iter().any(|v| !NFS_DISABLE.bool(&v.options)) {
            self.nfs_everywhere().await
        } else {
            Vec::new()
        };
        let mut out = Vec::new();
        for v in vols {
            let mut bricks = self.status_of(&v).await;
            self.mark_slow(&v, &mut bricks).await;
            let nfs = if NFS_DISABLE.bool(&v.options) {
                Vec::new()
            } else {
                nfs_of(&v.name, &nfs)
            };
            out.push(rpc::VolumeStatus {
                volume: v.public(),
                bricks,
                nfs,
            });
        }
        Response::Status(out)
    }

    /// The mounted clients of a volume: those that follow it here, or
    /// (`all`) anywhere in the pool.
    async fn volume_clients(self: &Arc<Self>, name: String, all: bool) -> Response {
        if let Err(e) = self.volume(&name) {
            return err(e);
        }
        if !all && !self.knows_its_clients() {
            return err(format!(
                "{} started moments ago: the clients that follow it are still coming back",
                self.me.host
            ));
        }
        Response::Clients(if all {
            self.clients_anywhere(&name).await
        } else {
            self.clients_of(&name)
        })
    }
}
