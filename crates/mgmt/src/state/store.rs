//! The state on disk: one JSON file, replaced atomically.

use super::*;

pub struct Store {
    file: PathBuf,
}

impl Store {
    pub fn new(dir: &Path) -> std::io::Result<Store> {
        std::fs::create_dir_all(dir)?;
        Ok(Store {
            file: dir.join("state.json"),
        })
    }

    pub fn load(&self) -> std::io::Result<ClusterState> {
        match std::fs::read(&self.file) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", self.file.display()),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ClusterState {
                uuid: uuid::Uuid::new_v4().to_string(),
                ..Default::default()
            }),
            Err(e) => Err(e),
        }
    }

    pub fn save(&self, st: &ClusterState) -> std::io::Result<()> {
        write_atomic(&self.file, &serde_json::to_vec_pretty(st)?)
    }
}

/// Replaces `file` with `bytes` atomically (write a temporary file, fsync,
/// rename, fsync the directory): a crash leaves the old or the new.
pub fn write_atomic(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace(file, bytes, true)
}

/// Replaces `file` with `bytes` (write a temporary file, rename), fsynced
/// only with `sync`: without it a crash of the machine may leave the old
/// file, never a torn one.
pub fn replace(file: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    if sync {
        f.sync_all()?;
    }
    std::fs::rename(&tmp, file)?;
    if let (true, Some(dir)) = (sync, file.parent()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
