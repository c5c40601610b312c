//! `volume replace-brick` and `volume reset-brick`: a brick of a
//! replicated volume swapped for an empty one (or taken down and brought
//! back), which a full heal then fills from its replicas. Both on the
//! leader, under the change lock.

use super::*;
use crate::error::Error;
use crate::state::Brick;

impl Daemon {
    /// `volume replace-brick NAME FROM TO commit force`.
    pub(super) async fn replace_brick(
        self: &Arc<Self>,
        name: String,
        from: String,
        to: String,
    ) -> Result<String, Error> {
        let v = self.volume(&name)?;
        v.no_rebalance_running()?;
        let from = self.brick_of(&v, &from)?;
        let mut to = self.check_new_bricks(&[to]).await?.remove(0);
        // Checked as the command will be, before anything is prepared.
        Volume::clone(&v).replace_brick(&from, &to)?;
        self.holds_nothing_unhealed(&v, &from).await?;
        self.state
            .lock()
            .unwrap()
            .assign_ports(std::slice::from_mut(&mut to));
        self.init_bricks(std::slice::from_ref(&to), &v.id, true)
            .await?;
        let cmd = Command::ReplaceBrick {
            volume: name.clone(),
            from: from.clone(),
            to: to.clone(),
        };
        let after = match self.execute(cmd).await {
            Ok(i) => i,
            Err(e) => {
                self.release(std::slice::from_ref(&to)).await;
                return Err(e);
            }
        };
        tracing::info!(volume = %name, %from, %to, "brick replaced");
        // Its server may be down (often why it is replaced): its mark
        // stays then, and keeps the directory from joining a volume by
        // mistake.
        self.release(std::slice::from_ref(&from)).await;
        Ok(self.fill(&v, &to, after, "replace-brick").await)
    }

    /// `volume reset-brick NAME BRICK start` (`down`): the brick is
    /// stopped and stays down; `... BRICK BRICK commit [force]`: it is
    /// prepared again (empty or as it was) and healed from its replicas.
    pub(super) async fn reset_brick(
        self: &Arc<Self>,
        name: String,
        brick: String,
        down: bool,
    ) -> Result<String, Error> {
        let v = self.volume(&name)?;
        v.no_rebalance_running()?;
        let b = self.brick_of(&v, &brick)?;
        if down {
            if v.is_resetting(&b) {
                return Err(format!("{b} was taken down by reset-brick start already").into());
            }
            Volume::clone(&v).reset_brick(&b, true)?;
            self.holds_nothing_unhealed(&v, &b).await?;
            self.execute(Command::ResetBrick {
                volume: name.clone(),
                brick: b.clone(),
                down: true,
            })
            .await?;
            tracing::info!(volume = %name, brick = %b, "brick taken down by reset-brick");
            return Ok(format!(
                "reset-brick start operation successful: {b} is stopped. Replace or repair its disk, then run 'volume reset-brick {name} {b} {b} commit force'"
            ));
        }
        Volume::clone(&v).reset_brick(&b, false)?;
        let init = Request::BrickInit {
            brick: b.clone(),
            volume_id: v.id.clone(),
            force: true,
            rejoin: true,
        };
        match self.on_host(&b.host, init).await {
            Response::Ok(_) => {}
            Response::Err(e) => return Err(e),
            o => return Err(format!("unexpected answer {o:?}").into()),
        }
        let after = self
            .execute(Command::ResetBrick {
                volume: name.clone(),
                brick: b.clone(),
                down: false,
            })
            .await?;
        tracing::info!(volume = %name, brick = %b, "brick back after reset-brick");
        Ok(self.fill(&v, &b, after, "reset-brick").await)
    }

    /// `volume remove-brick NAME replica N BRICK... force` with N below
    /// the volume's count: the bricks leave their sets, nothing moves.
    pub(super) async fn lower_replica(
        self: &Arc<Self>,
        name: String,
        replica: usize,
        bricks: Vec<String>,
        op: crate::rpc::RemoveOp,
    ) -> Result<String, Error> {
        let v = self.volume(&name)?;
        if op != crate::rpc::RemoveOp::Force {
            return Err(
                "Migration of data is not needed when reducing replica count: use 'force'".into(),
            );
        }
        v.no_rebalance_running()?;
        let parsed: Vec<Brick> = bricks
            .iter()
            .map(|b| Brick::parse(b))
            .collect::<Result<_, _>>()?;
        // Checked as the command will be, before the bricks are asked.
        let mut after = Volume::clone(&v);
        let gone = after.lower_replica(replica, &parsed)?;
        self.nothing_unhealed(&v).await?;
        self.execute(Command::LowerReplica {
            volume: name.clone(),
            replica,
            bricks: parsed,
        })
        .await?;
        tracing::info!(volume = %name, replica, "replica count lowered");
        self.release(&gone).await;
        Ok(format!(
            "{} brick(s) removed: {name} is now {}; their directories keep their files",
            gone.len(),
            after.brick_count_line()
        ))
    }

    /// Refuses while any brick of `v` has something to heal or cannot be
    /// asked: a lower replica count renumbers the copies, and blame
    /// recorded by position would then name the wrong copy.
    async fn nothing_unhealed(self: &Arc<Self>, v: &Volume) -> Result<(), Error> {
        if v.status != VolStatus::Started {
            return Err(format!(
                "Volume {} needs to be started: whether its copies agree must be known first",
                v.name
            )
            .into());
        }
        let healer = self.healer_for(v, true).await?;
        for h in healer.info(false).await {
            if !h.connected {
                return Err(format!(
                    "{} cannot be reached: whether its copies agree is not known",
                    h.brick
                )
                .into());
            }
            if !h.entries.is_empty() {
                return Err(format!(
                    "{} has {} object(s) to heal: let 'volume heal {} info' show none first",
                    h.brick,
                    h.entries.len(),
                    v.name
                )
                .into());
            }
        }
        Ok(())
    }

    /// The brick of `v` named `s` (with its port), or why not.
    fn brick_of(&self, v: &Volume, s: &str) -> Result<Brick, Error> {
        let b = Brick::parse(s)?;
        v.brick_index(&b)
            .map(|i| v.bricks[i].clone())
            .ok_or_else(|| {
                Error::not_found(format!("brick: {b} does not exist in volume: {}", v.name))
            })
    }

    /// Starts brick `b` of `v` (once its server has applied state
    /// `after`) and the full heal that fills it; answers what `what`
    /// (the command) tells the user.
    async fn fill(self: &Arc<Self>, v: &Volume, b: &Brick, after: u64, what: &str) -> String {
        let started = self.run_brick(v, b, after).await;
        let heal = self.heal_new_bricks(&v.name).await;
        format!("{what} commit force operation successful{started}; {heal}")
    }

    /// Starts brick `b` of `v` if the volume is started, once its server
    /// has applied state `after`; answers what to add to the reply.
    async fn run_brick(self: &Arc<Self>, v: &Volume, b: &Brick, after: u64) -> String {
        if v.status != VolStatus::Started {
            return String::new();
        }
        let run = Request::BricksRun {
            volume: v.name.clone(),
            force: false,
            after: Some(after),
        };
        match self.on_host(&b.host, run).await {
            Response::Err(e) => format!(" (but {b} did not start: {e})"),
            _ => String::new(),
        }
    }

    /// Refuses to take brick `b` out of its replica set while it holds
    /// changes its replicas lack (its heal index lists objects): they
    /// would be lost with it. A brick that cannot be reached is not
    /// asked (its replicas' own indexes say what it missed).
    pub(super) async fn holds_nothing_unhealed(
        self: &Arc<Self>,
        v: &Volume,
        b: &Brick,
    ) -> Result<(), Error> {
        if v.status != VolStatus::Started || v.is_resetting(b) {
            return Ok(());
        }
        let healer = self.healer_for(v, true).await?;
        let me = b.to_string();
        let info = healer.info(false).await;
        match info.iter().find(|h| h.brick == me && h.connected) {
            Some(h) if !h.entries.is_empty() => Err(format!(
                "{b} holds changes its replicas lack ({} object(s) in 'volume heal {} info'): they would be lost; let the heal finish first",
                h.entries.len(),
                v.name
            ).into()),
            _ => Ok(()),
        }
    }
}
