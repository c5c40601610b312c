//! `snapshot create|delete|list|info|status`, in GlusterFS's grammar
//! (docs/snapshots.md).

use super::{ask, unexpected, usage, Out, Server, Usage};
use crate::mgmt::rpc::{Request, Response, SnapshotOp, SnapshotSel, SnapshotStatus};
use crate::mgmt::state::Snapshot;
use clap::Subcommand;
use std::time::{Duration, UNIX_EPOCH};

#[derive(Subcommand)]
pub enum SnapshotCmd {
    /// Take a snapshot of every brick of a started volume at one moment:
    /// create NAME VOLNAME [no-timestamp] [description TEXT]. NAME gets
    /// the time appended (NAME_GMT-YYYY.MM.DD-hh.mm.ss) unless
    /// no-timestamp. Refused, saying which bricks and why, if a brick is
    /// down or its file system has no snapshot mechanism (btrfs, or XFS
    /// with reflink).
    Create {
        name: String,
        volume: String,
        /// [no-timestamp] [description TEXT]
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        rest: Vec<String>,
    },
    /// Delete snapshots and their copies on the bricks: delete (all |
    /// NAME | volume VOLNAME).
    Delete { which: Vec<String> },
    /// Bring every brick of a snapshot's volume back to its copy: the
    /// volume must be stopped and have the bricks it had then (the
    /// snapshot is kept). A restore cut short leaves those bricks not
    /// served until it is asked again.
    Restore { name: String },
    /// Make a new volume CLONENAME of writable copies of a snapshot: each
    /// beside its brick, at BRICK-CLONENAME, the copy's data shared. The
    /// clone has the snapshot's shape and options and is created, not
    /// started.
    Clone { clone: String, name: String },
    /// Show or set the pool's snapshot limits: config [snap-max-hard-limit
    /// N] [snap-max-soft-limit PERCENT] [auto-delete enable|disable]
    /// (per-volume limits are not built).
    Config { words: Vec<String> },
    /// List the snapshots' names (of VOLNAME only).
    List { volume: Option<String> },
    /// Show snapshots: info [NAME | volume VOLNAME].
    Info { which: Vec<String> },
    /// Show where each brick's copy of snapshots is, and whether it is
    /// there: status [NAME | volume VOLNAME].
    Status { which: Vec<String> },
}

/// (all | NAME | volume VOLNAME); nothing: all.
fn which(words: &[String]) -> Result<SnapshotSel, Usage> {
    match words {
        [] => Ok(SnapshotSel::All),
        [w] if w == "all" => Ok(SnapshotSel::All),
        [v, name] if v == "volume" => Ok(SnapshotSel::Volume(name.clone())),
        [name] => Ok(SnapshotSel::Name(name.clone())),
        _ => Err("expected: all | SNAPNAME | volume VOLNAME".into()),
    }
}

/// [no-timestamp] [description TEXT], in any order.
fn create_words(rest: &[String]) -> Result<(bool, String), Usage> {
    let (mut no_timestamp, mut description) = (false, String::new());
    let mut words = rest.iter();
    while let Some(w) = words.next() {
        match w.as_str() {
            "no-timestamp" => no_timestamp = true,
            "description" => {
                description = words
                    .next()
                    .ok_or("description needs its text")?
                    .clone();
            }
            other => {
                return Err(format!(
                    "unexpected {other:?}: snapshot create NAME VOLNAME [no-timestamp] [description TEXT]"
                )
                .into())
            }
        }
    }
    Ok((no_timestamp, description))
}

fn when(secs: u64) -> String {
    let t = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs));
    t.to_string().replace('T', " ").replace('Z', " +0000")
}

fn info(snaps: &[Snapshot]) -> String {
    let mut out = String::new();
    for s in snaps {
        out.push_str(&format!(
            "Snapshot                  : {}\nSnap UUID                 : {}\n",
            s.name, s.id
        ));
        if !s.description.is_empty() {
            out.push_str(&format!("Description               : {}\n", s.description));
        }
        out.push_str(&format!(
            "Created                   : {}\nSnap Volumes:\n\n\tOrigin Volume name        : {}\n\tBricks                    : {}\n\tMechanism                 : {}\n\tChanges held back for     : {} ms\n\n",
            when(s.created),
            s.volume,
            s.bricks.len(),
            mechanisms(s),
            s.pause_ms,
        ));
    }
    out
}

/// The mechanisms a snapshot's copies were made with, each once.
fn mechanisms(s: &Snapshot) -> String {
    let mut m: Vec<&str> = s.mechanisms.iter().map(String::as_str).collect();
    m.sort();
    m.dedup();
    m.join(", ")
}

fn status(all: &[SnapshotStatus]) -> String {
    let mut out = String::new();
    for st in all {
        out.push_str(&format!(
            "\nSnap Name : {}\nSnap UUID : {}\n\n",
            st.snapshot.name, st.snapshot.id
        ));
        for b in &st.bricks {
            let present = match (b.present, &b.error) {
                (Some(true), _) => "Yes".to_string(),
                (Some(false), _) => "No (missing)".to_string(),
                (None, Some(e)) => format!("unknown: {e}"),
                (None, None) => "unknown".to_string(),
            };
            out.push_str(&format!(
                "\tBrick Path        :   {}\n\tMechanism         :   {}\n\tPresent           :   {present}\n\n",
                b.path, b.mechanism
            ));
        }
    }
    out
}

pub(super) async fn run(server: &Server, out: &Out, cmd: SnapshotCmd) -> anyhow::Result<()> {
    match cmd {
        SnapshotCmd::Create { name, volume, rest } => {
            let what = "snapshot create";
            let (no_timestamp, description) =
                create_words(&rest).map_err(|e| usage(what, "", e))?;
            let op = SnapshotOp::Create {
                name,
                volume,
                description,
                no_timestamp,
            };
            out.done(what, "", ask(server, Request::Snapshot { op }).await?)
        }
        SnapshotCmd::Delete { which: words } => {
            let what = "snapshot delete";
            if words.is_empty() {
                return Err(usage(
                    what,
                    "",
                    "expected: all | SNAPNAME | volume VOLNAME".into(),
                ));
            }
            let which = which(&words).map_err(|e| usage(what, "", e))?;
            match ask(
                server,
                Request::Snapshot {
                    op: SnapshotOp::Delete { which },
                },
            )
            .await?
            {
                Response::Ok(msg) if !out.json => {
                    println!("{msg}");
                    Ok(())
                }
                other => out.done(what, "", other),
            }
        }
        SnapshotCmd::Restore { name } => {
            let op = SnapshotOp::Restore { name };
            out.done(
                "snapshot restore",
                "",
                ask(server, Request::Snapshot { op }).await?,
            )
        }
        SnapshotCmd::Clone { clone, name } => {
            let op = SnapshotOp::Clone { clone, name };
            out.done(
                "snapshot clone",
                "",
                ask(server, Request::Snapshot { op }).await?,
            )
        }
        SnapshotCmd::Config { words } => config(server, out, &words).await,
        SnapshotCmd::List { volume } => {
            let which = volume.map_or(SnapshotSel::All, SnapshotSel::Volume);
            let snaps = list(server, "snapshot list", which).await?;
            if out.json {
                let names: Vec<&str> = snaps.iter().map(|s| s.name.as_str()).collect();
                println!("{}", serde_json::to_string_pretty(&names)?);
            } else if snaps.is_empty() {
                println!("No snapshots present");
            } else {
                for s in &snaps {
                    println!("{}", s.name);
                }
            }
            Ok(())
        }
        SnapshotCmd::Info { which: words } => {
            let which = which(&words).map_err(|e| usage("snapshot info", "", e))?;
            let snaps = list(server, "snapshot info", which).await?;
            if out.json {
                println!("{}", serde_json::to_string_pretty(&snaps)?);
            } else if snaps.is_empty() {
                println!("No snapshots present");
            } else {
                print!("{}", info(&snaps));
            }
            Ok(())
        }
        SnapshotCmd::Status { which: words } => {
            let what = "snapshot status";
            let which = which(&words).map_err(|e| usage(what, "", e))?;
            let op = SnapshotOp::Status { which };
            match ask(server, Request::Snapshot { op }).await? {
                Response::SnapshotStatus(s) if out.json => {
                    println!("{}", serde_json::to_string_pretty(&s)?);
                    Ok(())
                }
                Response::SnapshotStatus(s) if s.is_empty() => {
                    println!("No snapshots present");
                    Ok(())
                }
                Response::SnapshotStatus(s) => {
                    print!("{}", status(&s));
                    Ok(())
                }
                other => Err(unexpected(what, "", other)),
            }
        }
    }
}

/// The keys `snapshot config` sets (pool options: `volume set all`).
const CONFIG_KEYS: [&str; 3] = ["snap-max-hard-limit", "snap-max-soft-limit", "auto-delete"];

/// KEY VALUE pairs of `snapshot config`.
fn config_pairs(words: &[String]) -> Result<Vec<(String, String)>, Usage> {
    if !words.len().is_multiple_of(2)
        || words
            .chunks(2)
            .any(|p| !CONFIG_KEYS.contains(&p[0].as_str()))
    {
        return Err(format!(
            "expected: snapshot config [KEY VALUE]..., KEY one of {} (per-volume limits are not built)",
            CONFIG_KEYS.join(", ")
        )
        .into());
    }
    Ok(words
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect())
}

async fn config(server: &Server, out: &Out, words: &[String]) -> anyhow::Result<()> {
    let what = "snapshot config";
    let pairs = config_pairs(words).map_err(|e| usage(what, "", e))?;
    for (key, value) in &pairs {
        let set = Request::VolumeSet {
            name: "all".into(),
            key: key.clone(),
            value: value.clone(),
        };
        out.done(what, "", ask(server, set).await?)?;
    }
    if !pairs.is_empty() {
        return Ok(());
    }
    match ask(server, Request::PoolOptions).await? {
        Response::Options(o) => {
            let shown: std::collections::BTreeMap<&str, &str> = CONFIG_KEYS
                .iter()
                .map(|k| (*k, o.get(*k).map_or("", String::as_str)))
                .collect();
            if out.json {
                println!("{}", serde_json::to_string_pretty(&shown)?);
            } else {
                println!("Snapshot System Configuration:");
                for k in CONFIG_KEYS {
                    let pct = if k == "snap-max-soft-limit" { "%" } else { "" };
                    println!("{k} : {}{pct}", shown[k]);
                }
            }
            Ok(())
        }
        other => Err(unexpected(what, "", other)),
    }
}

async fn list(server: &Server, what: &str, which: SnapshotSel) -> anyhow::Result<Vec<Snapshot>> {
    match ask(
        server,
        Request::Snapshot {
            op: SnapshotOp::List { which },
        },
    )
    .await?
    {
        Response::Snapshots(s) => Ok(s),
        other => Err(unexpected(what, "", other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_grammar_is_glusterfs_s() {
        assert_eq!(which(&[]).unwrap(), SnapshotSel::All);
        assert_eq!(which(&words("all")).unwrap(), SnapshotSel::All);
        assert_eq!(which(&words("s1")).unwrap(), SnapshotSel::Name("s1".into()));
        assert_eq!(
            which(&words("volume gv0")).unwrap(),
            SnapshotSel::Volume("gv0".into())
        );
        assert!(which(&words("a b c")).is_err());
        assert_eq!(create_words(&[]).unwrap(), (false, String::new()));
        let (ts, d) = create_words(&[
            "description".into(),
            "before upgrade".into(),
            "no-timestamp".into(),
        ])
        .unwrap();
        assert!(ts);
        assert_eq!(d, "before upgrade");
        assert!(
            create_words(&words("force")).is_err(),
            "not accepted: it would do nothing"
        );
        assert!(create_words(&words("description")).is_err());
    }

    #[test]
    fn config_takes_the_pools_keys_in_pairs() {
        assert!(config_pairs(&[]).unwrap().is_empty());
        let p = config_pairs(&words("snap-max-hard-limit 10 auto-delete enable")).unwrap();
        assert_eq!(p.len(), 2);
        assert!(config_pairs(&words("gv0 snap-max-hard-limit 10")).is_err());
        assert!(config_pairs(&words("snap-max-hard-limit")).is_err());
        assert!(
            config_pairs(&words("activate-on-create enable")).is_err(),
            "not built"
        );
    }

    #[test]
    fn times_are_shown_in_utc() {
        assert_eq!(when(1_796_677_800), "2026-12-07 21:10:00 +0000");
    }
}
