//! The operations that change the cluster: each validates its request
//! (arguments, bricks, peers) and then states the change as `Command`s
//! (`mgmt::command`), which `Daemon::execute` applies and commits.

use super::*;
use crate::error::Error;

impl Daemon {
    /// Requests that change the cluster state; called under `op_lock`.
    /// Each family's operations are in their module: `peers`, `volumes`,
    /// `credentials`, `bricks`, `replace`, `rebalance`, `observe`,
    /// `snapshots`.
    pub(super) async fn change(self: &Arc<Self>, req: Request) -> Result<String, Error> {
        match req {
            Request::PeerProbe { host, token } => self.probe(host, token).await,
            Request::PeerDetach { host, force } => self.detach(host, force).await,
            Request::VolumeCreate {
                name,
                replica,
                arbiter,
                redundancy,
                transport,
                bricks,
                force,
            } => {
                if arbiter > 0 && (replica != 3 || arbiter != 1) {
                    return Err("For arbiter configuration, replica count must be 3 and arbiter count must be 1".into());
                }
                if redundancy > 0 {
                    // Checked again here: the request may not come from
                    // this CLI.
                    crate::state::check_disperse(replica, redundancy, arbiter)?;
                }
                let shape = (replica, arbiter, redundancy);
                self.create_volume(name, shape, transport, bricks, force)
                    .await
            }
            Request::VolumeAddBrick {
                name,
                replica,
                bricks,
                force,
            } => self.add_bricks(name, replica, bricks, force).await,
            Request::VolumeStart { name, force } => self.start_volume(name, force).await,
            Request::VolumeStop { name } => self.stop_volume(name).await,
            Request::VolumeDelete { name } => self.delete_volume(name).await,
            Request::VolumeProfile { name, op } => self.profile_switch(name, op).await,
            Request::VolumeSet { name, key, value } => self.set_option(name, key, value).await,
            Request::VolumeCredentials { name, op } => self.volume_credentials(name, op).await,
            Request::VolumeReset { name, key } => self.reset_options(name, key).await,
            Request::PoolCredentials { op } => self.pool_credentials(op).await,
            Request::Snapshot { op } => self.snapshot_change(op).await,
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
                    )
                    .into()),
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
            other => Err(format!("unexpected request {other:?}").into()),
        }
    }
}
