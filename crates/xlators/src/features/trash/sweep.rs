//! Emptying the trash by age and by size: what one of the pool's servers
//! runs over a graph of the whole volume now and then (`mgmt`'s
//! `daemon/trash.rs`). Files that went more than
//! `features.trash-max-age` ago are removed, then the oldest until the
//! trash holds at most `features.trash-max-size`; directories left empty
//! go too. When a file went is read from its name (`NAME_TIME`, the
//! mount's clock when it was kept), or its ctime for a name without one.

use super::Trash;
use mortar_core::options::{Kind, ShareOrSize, Spec};
use mortar_core::{Child, Ctx, Fop, FsResult, Gfid, Name, Reply};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub static MAX_AGE: Spec = Spec {
    key: "features.trash-max-age",
    kind: Kind::Int(0, i64::MAX),
    default: "604800",
    help: "Seconds a file is kept in the trash (0: until the trash is over features.trash-max-size). A server of the pool removes older ones at least every 10 minutes, and at once when this changes.",
};

pub static MAX_SIZE: Spec = Spec {
    key: "features.trash-max-size",
    kind: Kind::ShareOrSize,
    default: "10%",
    help: "Most the trash may hold, a share of the volume's size (10%) or a size (50GB); past it the oldest files go first; 0: no limit. Checked with features.trash-max-age.",
};

/// The longest time between two sweeps.
pub const SWEEP_EVERY_MAX: Duration = Duration::from_secs(600);

/// Time between two sweeps of a trash whose files are kept `max_age`:
/// a quarter of it, at least 1 s, at most `SWEEP_EVERY_MAX`.
pub fn sweep_every(max_age: Duration) -> Duration {
    match max_age.is_zero() {
        true => SWEEP_EVERY_MAX,
        false => (max_age / 4).clamp(Duration::from_secs(1), SWEEP_EVERY_MAX),
    }
}

/// What a sweep found and did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Files removed for their age, and their bytes.
    pub aged: (u64, u64),
    /// Files removed for the trash's size, and their bytes.
    pub over: (u64, u64),
    /// Files kept, and their bytes.
    pub kept: (u64, u64),
}

struct Kept {
    dir: Gfid,
    name: Name,
    size: u64,
    went: SystemTime,
}

/// When a file named `name` went into the trash: the time in its name.
pub(super) fn went_at(name: &[u8]) -> Option<SystemTime> {
    let s = std::str::from_utf8(name).ok()?;
    // NAME_2026-12-08-011500 or NAME_2026-12-08-011500_2
    let stamp_of = |s: &str| -> Option<SystemTime> {
        let (_, stamp) = s.rsplit_once('_')?;
        let b = stamp.as_bytes();
        if b.len() != 17 || b[4] != b'-' || b[7] != b'-' || b[10] != b'-' {
            return None;
        }
        let t = format!(
            "{}T{}:{}:{}Z",
            &stamp[..10],
            &stamp[11..13],
            &stamp[13..15],
            &stamp[15..17]
        );
        humantime::parse_rfc3339(&t).ok()
    };
    stamp_of(s).or_else(|| {
        let (head, n) = s.rsplit_once('_')?;
        n.parse::<u32>().ok()?;
        stamp_of(head)
    })
}

/// Sweeps the trash of the volume under `top` as of `now`.
pub async fn sweep(
    top: &Child,
    now: SystemTime,
    max_age: Duration,
    max_size: ShareOrSize,
) -> FsResult<Swept> {
    let cx = Ctx::background();
    let look = Fop::Lookup {
        parent: Gfid::ROOT,
        name: Trash::trash_name(),
    };
    let trash = match top.call(&cx, look).await {
        Ok(r) => r.into_entry()?.attr,
        Err(e) if e.is(libc::ENOENT) => return Ok(Swept::default()),
        Err(e) => return Err(e),
    };
    if trash.kind != mortar_core::FileKind::Dir {
        return Ok(Swept::default());
    }
    // Every file, and the directories deepest first.
    let mut files = Vec::new();
    let mut dirs = vec![(Gfid::ROOT, Trash::trash_name(), trash.gfid)];
    let mut i = 0;
    while i < dirs.len() {
        let dir = dirs[i].2;
        for e in list(top, &cx, dir).await? {
            let Some(a) = e.attr else { continue };
            let name = Name::new(e.name.to_vec())?;
            match a.kind {
                mortar_core::FileKind::Dir => dirs.push((dir, name, a.gfid)),
                _ => {
                    let went = went_at(name.as_bytes()).unwrap_or_else(|| {
                        UNIX_EPOCH + Duration::new(a.ctime.0.max(0) as u64, a.ctime.1)
                    });
                    files.push(Kept {
                        dir,
                        name,
                        size: a.size,
                        went,
                    });
                }
            }
        }
        i += 1;
    }
    files.sort_by_key(|f| f.went);
    let cap = match max_size {
        ShareOrSize::Bytes(0) | ShareOrSize::Share(0) => u64::MAX,
        ShareOrSize::Bytes(b) => b,
        share => match top.call(&cx, Fop::Statfs { gfid: Gfid::ROOT }).await? {
            Reply::StatFs(s) => share.of(s.blocks.saturating_mul(s.frsize as u64)),
            other => return Err(mortar_core::fop::unexpected(other)),
        },
    };
    let mut total: u64 = files.iter().map(|f| f.size).sum();
    let mut swept = Swept::default();
    for f in &files {
        let old = !max_age.is_zero() && now.duration_since(f.went).unwrap_or_default() > max_age;
        if !old && total <= cap {
            swept.kept.0 += 1;
            swept.kept.1 += f.size;
            continue;
        }
        let rm = Fop::Unlink {
            parent: f.dir,
            name: f.name.clone(),
        };
        match top.call(&cx, rm).await {
            Ok(_) => {}
            // (Taken out meanwhile.)
            Err(e) if e.is(libc::ENOENT) => {}
            Err(e) => return Err(e),
        }
        total -= f.size;
        let n = if old {
            &mut swept.aged
        } else {
            &mut swept.over
        };
        n.0 += 1;
        n.1 += f.size;
    }
    // Directories left empty (not the trash itself), deepest first.
    for (parent, name, _) in dirs.iter().skip(1).rev() {
        let rm = Fop::Rmdir {
            parent: *parent,
            name: name.clone(),
        };
        match top.call(&cx, rm).await {
            Ok(_) => {}
            Err(e) if e.is(libc::ENOTEMPTY) || e.is(libc::EEXIST) || e.is(libc::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(swept)
}

/// Every entry of directory `dir` but `.` and `..`.
async fn list(top: &Child, cx: &Ctx, dir: Gfid) -> FsResult<Vec<mortar_core::DirEntry>> {
    let fh = match top.call(cx, Fop::Opendir { gfid: dir }).await? {
        Reply::Opened { fh } => fh,
        other => return Err(mortar_core::fop::unexpected(other)),
    };
    let all = top.read_whole_dir(cx, dir, fh).await?;
    Ok(all
        .into_iter()
        .filter(|e| e.name.as_slice() != b"." && e.name.as_slice() != b"..")
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_a_file_went_is_read_from_its_name() {
        let at = UNIX_EPOCH + Duration::from_secs(1_796_692_500);
        assert_eq!(went_at(b"report.txt_2026-12-08-011500"), Some(at));
        assert_eq!(went_at(b"a_b_2026-12-08-011500_3"), Some(at));
        assert_eq!(went_at(b"report.txt"), None);
        assert_eq!(went_at(b"x_2026-12-08"), None);
        assert_eq!(went_at(b"x_2026-13-08-011500"), None);
        // What the trash names, it reads back.
        let n = Name::new("f").unwrap();
        assert_eq!(
            went_at(Trash::kept_name(&n, at, 4).unwrap().as_bytes()),
            Some(at)
        );
    }

    #[test]
    fn sweeps_come_more_often_for_short_ages() {
        assert_eq!(sweep_every(Duration::ZERO), SWEEP_EVERY_MAX);
        assert_eq!(sweep_every(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(
            sweep_every(Duration::from_secs(60)),
            Duration::from_secs(15)
        );
        assert_eq!(sweep_every(Duration::from_secs(604_800)), SWEEP_EVERY_MAX);
    }
}
