//! A volume's bricks changed as commands say: sets added, emptied and
//! taken out, the replica count raised or lowered, a brick replaced or
//! reset; each refuses (and changes nothing) when it cannot be made.

use super::*;
use crate::error::Error;

impl Volume {
    /// Adds bricks as `Command::AddBricks` says, or says why not (and
    /// changes nothing).
    pub fn add_bricks(&mut self, replica: usize, bricks: &[Brick]) -> Result<(), Error> {
        let sets = self.bricks.len() / self.replica.max(1);
        if replica == self.replica {
            if bricks.is_empty() || !bricks.len().is_multiple_of(replica) {
                return Err(format!(
                    "Incorrect number of bricks supplied {} with count {replica}",
                    bricks.len()
                )
                .into());
            }
            let mut ids = self.set_ids();
            let next = ids.iter().max().map_or(0, |m| m + 1);
            let added = bricks.len() / replica;
            if next as usize + added > 1 << 16 {
                return Err("a volume has at most 65536 replica sets".into());
            }
            ids.extend(next..next + added as u32);
            self.set_ids = ids;
            self.bricks.extend(bricks.iter().cloned());
            self.raise_layout_commit();
        } else if self.dispersed() {
            return Err(format!(
                "the disperse count of a volume cannot change: add bricks in whole disperse sets of {}",
                self.replica
            )
            .into());
        } else if replica > self.replica {
            if self.arbiter > 0 {
                return Err("the replica count of an arbiter volume cannot be raised".into());
            }
            let more = replica - self.replica;
            if bricks.len() != more * sets {
                return Err(format!(
                    "Incorrect number of bricks supplied {} for replica {replica}: {sets} replica sets need {} more",
                    bricks.len(),
                    more * sets
                ).into());
            }
            let old = self.bricks.chunks(self.replica.max(1));
            let new = bricks.chunks(more);
            self.bricks = old
                .zip(new)
                .flat_map(|(o, n)| o.iter().chain(n).cloned())
                .collect();
            self.replica = replica;
        } else {
            return Err(format!(
                "replica count {replica} is below the volume's ({}): use remove-brick",
                self.replica
            )
            .into());
        }
        self.version += 1;
        Ok(())
    }

    /// Puts every directory in flux: no stored layout carries the new
    /// commit. It skips a number: a rebalance that stopped may have
    /// written `layout_commit + 1` on some directories, whose files it
    /// had not all moved.
    pub fn raise_layout_commit(&mut self) {
        self.layout_commit += 2;
        self.version += 1;
    }

    /// The rebalance (fix-layout, remove-brick) in progress, if any.
    pub fn running_rebalance(&self) -> Option<&Task> {
        self.tasks
            .iter()
            .find(|t| t.kind.moves_files() && t.status == TaskStatus::InProgress)
    }

    /// Refuses what must wait for a rebalance in progress to end.
    pub fn no_rebalance_running(&self) -> Result<(), Error> {
        match self.running_rebalance() {
            Some(t) => Err(format!(
                "a {} of {} is in progress (on {}): stop it or let it end first",
                t.kind.as_str().to_lowercase(),
                self.name,
                t.host
            )
            .into()),
            None => Ok(()),
        }
    }

    /// Takes the replica sets `sets` (by id) and their bricks out.
    pub fn remove_sets(&mut self, sets: &[u32]) -> Result<Vec<Brick>, Error> {
        let ids = self.set_ids();
        let width = self.replica.max(1);
        if sets.iter().any(|s| !ids.contains(s)) {
            return Err(format!("volume {} has no such replica set", self.name).into());
        }
        if sets.len() >= ids.len() {
            return Err("a volume keeps one replica set at least".into());
        }
        let mut kept = Vec::new();
        let mut gone = Vec::new();
        let mut kept_ids = Vec::new();
        for (chunk, id) in self.bricks.chunks(width).zip(&ids) {
            if sets.contains(id) {
                gone.extend(chunk.iter().cloned());
            } else {
                kept.extend(chunk.iter().cloned());
                kept_ids.push(*id);
            }
        }
        self.bricks = kept;
        self.set_ids = kept_ids;
        self.draining.retain(|d| !sets.contains(d));
        self.version += 1;
        Ok(gone)
    }

    /// The position of brick `b` (by host and path) in the volume.
    pub fn brick_index(&self, b: &Brick) -> Option<usize> {
        self.bricks
            .iter()
            .position(|o| o.host == b.host && o.path == b.path)
    }

    /// Puts brick `to` where `from` was (same replica set, same role),
    /// or says why not. Only a replicated volume's brick can be replaced:
    /// the new one is healed from its replicas.
    pub fn replace_brick(&mut self, from: &Brick, to: &Brick) -> Result<(), Error> {
        let i = self.brick_index(from).ok_or_else(|| {
            Error::not_found(format!(
                "brick: {from} does not exist in volume: {}",
                self.name
            ))
        })?;
        if self.replica < 2 {
            return Err(format!(
                "volume {} has no replicas to heal a new brick from: use add-brick, then remove-brick {from} start and commit",
                self.name
            ).into());
        }
        if from.host == to.host && from.path == to.path {
            return Err(format!(
                "{to} is the brick being replaced: use reset-brick to bring a brick back"
            )
            .into());
        }
        self.bricks[i] = to.clone();
        self.resetting.retain(|r| *r != from.to_string());
        self.version += 1;
        Ok(())
    }

    /// Lowers the replica count to `replica` by taking `bricks` out: the
    /// same number from every set. Answers them as the volume had them.
    pub fn lower_replica(&mut self, replica: usize, bricks: &[Brick]) -> Result<Vec<Brick>, Error> {
        let width = self.replica.max(1);
        if replica == 0 || replica >= width {
            return Err(
                format!("replica count {replica} is not below the volume's ({width})").into(),
            );
        }
        if self.dispersed() {
            return Err(
                "the disperse count of a volume cannot change: remove whole disperse sets".into(),
            );
        }
        if self.arbiter > 0 {
            return Err("the replica count of an arbiter volume cannot be lowered".into());
        }
        let mut pos = Vec::new();
        for b in bricks {
            let i = self
                .brick_index(b)
                .ok_or_else(|| format!("Incorrect brick {b} for volume {}", self.name))?;
            if pos.contains(&i) {
                return Err(format!("Found duplicate exports {b}").into());
            }
            pos.push(i);
        }
        let less = width - replica;
        for (s, set) in self.bricks.chunks(width).enumerate() {
            let taken = pos.iter().filter(|&&i| i / width == s).count();
            if taken != less {
                return Err(format!(
                    "to go from replica {width} to {replica}, give {less} brick(s) of every replica set: {} of the set of {} were given",
                    taken, set[0]
                ).into());
            }
        }
        let gone = pos.iter().map(|&i| self.bricks[i].clone()).collect();
        let mut i = 0;
        self.bricks.retain(|_| {
            i += 1;
            !pos.contains(&(i - 1))
        });
        self.resetting
            .retain(|r| self.bricks.iter().any(|b| b.to_string() == *r));
        self.replica = replica;
        self.version += 1;
        Ok(gone)
    }

    /// Marks brick `b` taken down by `reset-brick start` (`down`), or
    /// brought back by its commit.
    pub fn reset_brick(&mut self, b: &Brick, down: bool) -> Result<(), Error> {
        if self.brick_index(b).is_none() {
            return Err(Error::not_found(format!(
                "brick: {b} does not exist in volume: {}",
                self.name
            )));
        }
        if self.replica < 2 {
            return Err(format!(
                "volume {} has no replicas to heal the brick from",
                self.name
            )
            .into());
        }
        let name = b.to_string();
        self.resetting.retain(|r| *r != name);
        if down {
            self.resetting.push(name);
        }
        self.version += 1;
        Ok(())
    }

    /// Whether `reset-brick start` took brick `b` down.
    pub fn is_resetting(&self, b: &Brick) -> bool {
        self.resetting.iter().any(|r| *r == b.to_string())
    }

    /// A rebalance's rows: each replica set is owned by the server of one
    /// of its data bricks, taken in turn (set k by its brick k mod the
    /// data bricks), so that the sets of servers holding replicas of each
    /// other are spread over them; a server owning none has no row.
    pub fn rebalance_rows(&self) -> Vec<TaskRow> {
        let width = self.replica.max(1);
        let data = (width - self.arbiter.min(width - 1)).max(1);
        let mut rows: Vec<TaskRow> = Vec::new();
        for (k, (set, id)) in self.bricks.chunks(width).zip(self.set_ids()).enumerate() {
            let host = &set[k % data].host;
            match rows.iter_mut().find(|r| r.host == *host) {
                Some(r) => r.owns.push(id),
                None => rows.push(TaskRow {
                    host: host.clone(),
                    owns: vec![id],
                    status: TaskStatus::InProgress,
                    detail: String::new(),
                    progress: Default::default(),
                }),
            }
        }
        rows
    }

    /// The stable id of each replica set, in order.
    pub fn set_ids(&self) -> Vec<u32> {
        if self.set_ids.is_empty() {
            let sets = self.bricks.len() / self.replica.max(1);
            (0..sets as u32).collect()
        } else {
            self.set_ids.clone()
        }
    }
}
