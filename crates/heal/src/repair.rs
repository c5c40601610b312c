//! Repairing a copy found damaged (bitrot: its blocks no longer match
//! their checksums, `storage.checksums`): the scrubber names the brick and
//! the file, and the copy is rewritten from the others under the lock of
//! every copy up, whatever the blame says (nothing blames a copy that
//! rotted). A replica is made like another up copy block by block where
//! their checksums differ (`copy::heal_data`, over the whole file); a
//! disperse fragment is rebuilt from K others (`coded::rebuild_sinks`).

use super::object::{pieces, Set};
use super::*;
use mortar_core::changed::Changed;

impl Set {
    /// Rewrites copy `bad` of file `gfid` from the others: the bytes
    /// written.
    pub async fn repair(&self, gfid: Gfid, bad: usize) -> FsResult<u64> {
        let claim = self.busy.claim(gfid).await;
        let up: Vec<usize> = (0..self.bricks.len())
            .filter(|&i| self.bricks[i].x.is_up())
            .collect();
        if !up.contains(&bad) {
            return Err(FsError::new(
                libc::ENOTCONN,
                "the damaged copy's brick is down",
            ));
        }
        let locked = self.lock(gfid, &up).await;
        let res = self.repair_locked(gfid, bad, &locked).await;
        self.unlock(gfid, &locked).await;
        drop(claim);
        res
    }

    async fn repair_locked(&self, gfid: Gfid, bad: usize, locked: &[usize]) -> FsResult<u64> {
        let copies = self.stat(gfid, locked).await?;
        let others: Vec<usize> = copies
            .iter()
            .map(|(i, _)| *i)
            .filter(|&i| i != bad && Some(i) != self.arbiter)
            .collect();
        let Some(size) = copies.iter().find(|(i, _)| *i == bad).map(|(_, a)| a.size) else {
            return Err(FsError::new(libc::ENOENT, "the damaged copy is gone"));
        };
        match &self.coding {
            None => {
                let Some(&src) = others.first() else {
                    return Err(FsError::new(libc::ENOTCONN, "no other copy is up"));
                };
                let (bytes, _) = self
                    .heal_data(gfid, (src, bad), &Changed::Whole, locked)
                    .await?;
                Ok(bytes)
            }
            Some(c) => {
                let k = c.g.k();
                if others.len() < k {
                    return Err(FsError::new(
                        libc::ENOTCONN,
                        format!(
                            "{} other fragments are up, the code needs {k}",
                            others.len()
                        ),
                    ));
                }
                let file_size = copies
                    .iter()
                    .filter(|(i, _)| others.contains(i))
                    .map(|(_, a)| a.size)
                    .max()
                    .unwrap_or(0);
                let sizes: HashMap<usize, u64> = [(bad, size)].into();
                let pieces = pieces(
                    &Changed::Whole,
                    self.copy_len(file_size),
                    coded::BLOCK as u64,
                    coded::CHUNK,
                );
                let (healed, bytes) = self
                    .rebuild_sinks(gfid, &others, vec![bad], &sizes, file_size, &pieces, locked)
                    .await;
                if healed.contains(&bad) {
                    Ok(bytes)
                } else {
                    Err(FsError::new(libc::EIO, "the fragment could not be rebuilt"))
                }
            }
        }
    }
}

impl Healer {
    /// The bricks of this healer's sets on this server: label and
    /// connection.
    pub fn local_bricks(&self) -> Vec<(String, mortar_core::Child)> {
        self.sets
            .iter()
            .zip(&self.local)
            .flat_map(|(s, l)| {
                l.iter()
                    .map(|&i| (s.bricks[i].label.clone(), s.bricks[i].x.clone()))
            })
            .collect()
    }

    /// Rewrites the copy of file `gfid` on brick `label` (this server's)
    /// from the other copies of its set: the bytes written.
    pub async fn repair(&self, label: &str, gfid: Gfid) -> FsResult<u64> {
        for s in &self.sets {
            if let Some(bad) = s.bricks.iter().position(|b| b.label == label) {
                if s.bricks.len() < 2 {
                    return Err(FsError::new(
                        libc::EIO,
                        "the volume keeps one copy: nothing to repair from",
                    ));
                }
                // (The others' connections are made on first need.)
                self.wait_up(Duration::from_secs(5)).await;
                return s.repair(gfid, bad).await;
            }
        }
        Err(FsError::new(libc::ENOENT, format!("no brick {label} here")))
    }
}
