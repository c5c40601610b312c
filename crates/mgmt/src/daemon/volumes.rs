//! A volume's life: created on checked bricks, started (its bricks up
//! before it answers), stopped, deleted, its options set and reset, bricks
//! added.

use super::*;
use crate::error::Error;
use mortar_heal::scrub::BITROT;
use mortar_storage::posix::sums::CHECKSUMS;

use mortar_core::options::valid_name;

fn nested(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"))
}

/// The options a new volume starts with: a dispersed one checks its
/// fragments' blocks (`storage.checksums`), so that a fragment damaged
/// behind its brick's back is read around and healed, never decoded into
/// a file (docs/disperse.md). Shown, and changed, as any option set.
fn new_volume_options(redundancy: usize) -> std::collections::BTreeMap<String, String> {
    let mut o = std::collections::BTreeMap::new();
    if redundancy > 0 {
        o.insert(
            mortar_storage::posix::sums::CHECKSUMS.key.to_string(),
            "on".to_string(),
        );
    }
    o
}

/// Checks a local brick path before a volume is created on it (or,
/// `rejoin`ing, before it comes back to the volume of that id).
pub(super) fn check_local_brick(
    path: &Path,
    force: bool,
    rejoin: Option<&str>,
) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if !md.is_dir() {
            return Err(format!("{} is not a directory", path.display()).into());
        }
        let mut id = [0u8; 64];
        if let Ok(n) = rustix::fs::getxattr(path, VOLUME_ID_XATTR, &mut id[..]) {
            if rejoin.is_none_or(|v| v.as_bytes() != &id[..n]) {
                return Err(format!("{} is already part of a volume", path.display()).into());
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
        ).into());
    }
    // Files already there would be served as the volume's without being
    // its (no identity, no copies elsewhere); a brick comes back to its
    // own volume with what it holds (`rejoin`).
    if rejoin.is_none() && !force {
        let stray = std::fs::read_dir(path).ok().and_then(|mut d| {
            d.find_map(|e| {
                let name = e.ok()?.file_name();
                let name = name.to_string_lossy();
                (name != mortar_storage::posix::META_DIR && name != "lost+found")
                    .then(|| name.into_owned())
            })
        });
        if let Some(name) = stray {
            return Err(format!(
                "The brick {} is not empty (it holds {name}). A brick's directory must be new or empty: \
                 use another, or 'force' at the end of the command to take it as it is.",
                path.display()
            ).into());
        }
    }
    Ok(())
}

impl Daemon {
    /// `volume start NAME [force]`: commits the status, then each host
    /// starts its bricks; answers once they are up, or says which are not.
    pub(super) async fn start_volume(
        self: &Arc<Self>,
        name: String,
        force: bool,
    ) -> Result<String, Error> {
        let v = self.volume(&name)?;
        if v.status == VolStatus::Started && !force {
            return Err(format!("Volume {name} already started").into());
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
                return Err(format!("bricks offline: {}", offline.join("; ")).into());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "bricks did not come online: {} (see the brick logs under the daemon's state directory)",
                    down.join(", ")
                ).into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            st = self.status_of(&v).await;
        }
    }

    pub(super) async fn stop_volume(self: &Arc<Self>, name: String) -> Result<String, Error> {
        let v = self.volume(&name)?;
        if v.status != VolStatus::Started {
            return Err(format!("Volume {name} is not in the started state").into());
        }
        self.execute(Command::SetStatus {
            volume: name,
            status: VolStatus::Stopped,
        })
        .await?;
        Ok(String::new())
    }

    /// `volume delete NAME`: a stopped volume; its bricks keep their data.
    pub(super) async fn delete_volume(self: &Arc<Self>, name: String) -> Result<String, Error> {
        let v = self.volume(&name)?;
        if v.status == VolStatus::Started {
            return Err(format!(
                "Volume {name} has been started.Volume needs to be stopped before deletion."
            )
            .into());
        }
        let snaps = (self.state.lock().unwrap().snapshots.values())
            .filter(|s| s.volume == name)
            .count();
        if snaps > 0 {
            return Err(format!(
                "Volume {name} has {snaps} snapshot(s): delete them first (snapshot delete volume {name})"
            )
            .into());
        }
        self.release(&v.bricks).await;
        self.execute(Command::RemoveVolume { volume: name }).await?;
        Ok(String::new())
    }

    /// `volume set NAME KEY VALUE`, or `volume set NAME group GROUP`.
    pub(super) async fn set_option(
        self: &Arc<Self>,
        name: String,
        key: String,
        value: String,
    ) -> Result<String, Error> {
        if name == "all" {
            let spec = options::pool_spec(&key).ok_or_else(|| match options::spec(&key) {
                Some(_) => Error::from(format!(
                    "{key} is an option of a volume, not of the pool: volume set VOLNAME {key} VALUE"
                )),
                None => Error::not_found(format!("option : {key} does not exist")),
            })?;
            let value = spec.validate(&value)?;
            self.execute(Command::SetPoolOption { key, value }).await?;
            return Ok(String::new());
        }
        if options::pool_spec(&key).is_some() {
            return Err(format!(
                "{key} is an option of the pool, not of a volume: volume set all {key} VALUE"
            )
            .into());
        }
        if key == "group" {
            self.volume(&name)?;
            let options = options::group(&value)?;
            self.execute(Command::SetOptions {
                volume: name,
                options,
            })
            .await?;
            return Ok(String::new());
        }
        let v = self.volume(&name)?;
        let value = options::validate(&key, &value)?;
        if key == BITROT.key && value == "on" {
            if !super::bitrot::redundant(&v) {
                return Err(format!(
                    "Volume {name} keeps one copy of each file: bitrot scrubbing needs another copy or fragments to repair from"
                )
                .into());
            }
            // The scrubber checks the bricks' checksums: they are kept
            // from now on.
            self.execute(Command::SetOptions {
                volume: name,
                options: vec![(CHECKSUMS.key.to_string(), "on".into()), (key, value)],
            })
            .await?;
            return Ok(String::new());
        }
        self.execute(Command::SetOption {
            volume: name,
            key,
            value,
        })
        .await?;
        Ok(String::new())
    }

    /// `volume reset NAME [KEY]`.
    pub(super) async fn reset_options(
        self: &Arc<Self>,
        name: String,
        key: Option<String>,
    ) -> Result<String, Error> {
        self.volume(&name)?;
        if let Some(k) = &key {
            if options::spec(k).is_none() {
                return Err(Error::not_found(format!("option : {k} does not exist")));
            }
        }
        self.execute(Command::ResetOptions { volume: name, key })
            .await?;
        Ok(String::new())
    }

    /// Takes the volume id off bricks (a volume deleted, or not created),
    /// and what preparing them made where nothing else is kept.
    pub(super) async fn release(self: &Arc<Self>, bricks: &[Brick]) {
        self.on_bricks(bricks, |b| Request::BrickRelease { brick: b.clone() })
            .await;
    }

    pub(super) async fn create_volume(
        self: &Arc<Self>,
        name: String,
        (replica, arbiter, redundancy): (usize, usize, usize),
        transport: String,
        bricks: Vec<String>,
        force: bool,
    ) -> Result<String, Error> {
        if name == "all" {
            return Err(
                "\"all\" names the pool in `volume set all`: choose another volume name".into(),
            );
        }
        if !valid_name(&name) {
            return Err(format!(
                "Volume name {name} is not valid: use letters, digits, '-' and '_'"
            )
            .into());
        }
        if self.state.lock().unwrap().volumes.contains_key(&name) {
            return Err(format!("Volume {name} already exists").into());
        }
        if transport != "tcp" {
            return Err(format!("transport {transport} is not supported (use tcp)").into());
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
            )
            .into());
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
            options: new_volume_options(redundancy),
            version: 1,
            arbiter,
            redundancy,
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
    ) -> Result<Vec<Brick>, Error> {
        let parsed: Vec<Brick> = bricks
            .iter()
            .map(|b| Brick::parse(b))
            .collect::<Result<_, _>>()?;
        for (i, a) in parsed.iter().enumerate() {
            for b in &parsed[i + 1..] {
                if a.host == b.host && a.path == b.path {
                    return Err(format!("Found duplicate exports {a}").into());
                }
                if a.host == b.host && nested(&a.path, &b.path) {
                    return Err(
                        format!("Brick: {a}, {b} one of the bricks contain the other").into(),
                    );
                }
            }
        }
        for b in &parsed {
            if !self.is_local(&b.host).await && self.peer_mgmt(&b.host).is_none() {
                return Err(format!("Host {} is not in 'Peer in Cluster' state", b.host).into());
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
                            )
                            .into());
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
    ) -> Result<(), Error> {
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
                o => failed = failed.or(Some(format!("unexpected answer {o:?}").into())),
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
    ) -> Result<String, Error> {
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
                    return Err(format!("bricks added, but not all started: {e}").into());
                }
            }
        }
        Ok(if replica > v.replica {
            self.heal_new_bricks(&name).await
        } else {
            "run 'volume rebalance NAME start' to spread existing data over the new bricks".into()
        })
    }

    /// `BrickInit`: prepares a brick of this server for volume
    /// `volume_id` (checked first, as `check_local_brick` says).
    pub(super) fn init_brick(
        &self,
        brick: Brick,
        volume_id: String,
        force: bool,
        rejoin: bool,
    ) -> Response {
        let p = Path::new(&brick.path);
        let init = || -> Result<(), Error> {
            check_local_brick(p, force, rejoin.then_some(volume_id.as_str()))?;
            // (On btrfs, a subvolume: its snapshots cost one call.)
            mortar_storage::snapshot::make_brick_dir(p)
                .map_err(|e| format!("cannot create {}: {e}", p.display()))?;
            rustix::fs::setxattr(
                p,
                VOLUME_ID_XATTR,
                volume_id.as_bytes(),
                rustix::fs::XattrFlags::empty(),
            )
            .map_err(|e| format!("cannot set the volume id on {}: {e}", p.display()))?;
            mortar_storage::posix::Posix::prepare(p).map_err(|e| Error::refused(e.0))
        };
        match init() {
            Ok(()) => Response::Ok(String::new()),
            Err(e) => err(Error::brick(brick.to_string(), e.message)),
        }
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
            .message
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
            .message
            .contains("already part of a volume"));
        // Back to its own volume, not to another.
        assert!(check_local_brick(&used, true, Some("id")).is_ok());
        assert!(check_local_brick(&used, true, Some("other")).is_err());
        assert!(check_local_brick(&d.path().join("new/brick"), true, None).is_ok());
    }
}
