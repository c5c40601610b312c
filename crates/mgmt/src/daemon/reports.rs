//! What the daemon asks of every brick of a volume: `volume profile`,
//! `volume top`, `volume status NAME detail|clients|mem|inode|fd` and
//! `volume statedump`. Profile start and stop are changes of the
//! volume's options (`diagnostics.latency-measurement`, read by every
//! brick's `debug/profile`, and `diagnostics.count-fop-hits`, which stacks
//! `debug/io-stats` on the clients, as GlusterFS's profile does); `info`
//! and the others ask each brick for its report (a virtual xattr of its
//! root, `debug/profile`) over a client graph of the whole volume, as the
//! pool's own client (the volume's key).

use super::{err, Daemon};
use crate::command::Command;
use crate::error::Error;
use crate::rpc::{self, BrickReport, ProfileOp, Response};
use crate::state::VolStatus;
use mortar_brick::profile::{LATENCY_MEASUREMENT, PROFILE_XATTR, TOP_XATTR};
use mortar_core::{Ctx, Fop, Gfid, Reply};
use mortar_graph::Graph;
use mortar_process::status::{STATEDUMP_XATTR, STATUS_XATTR};
use mortar_xlators::debug::io_stats::COUNT_FOP_HITS;
use std::time::Duration;

/// How long the bricks are given to connect.
const REACH: Duration = Duration::from_secs(3);

impl Daemon {
    /// `volume profile NAME start|stop`: a change, on the leader.
    pub(super) async fn profile_switch(
        &self,
        name: String,
        op: ProfileOp,
    ) -> Result<String, Error> {
        let v = self.volume(&name)?;
        let on = LATENCY_MEASUREMENT.bool(&v.options);
        let value = match op {
            ProfileOp::Start if on => {
                return Err(format!("Profile on Volume {name} is already started").into())
            }
            ProfileOp::Stop if !on => {
                return Err(format!("Profile on Volume {name} is not started").into())
            }
            ProfileOp::Start => "on",
            ProfileOp::Stop => "off",
            ProfileOp::Info => return Err("profile info is not a change".into()),
        };
        self.execute(Command::SetOptions {
            volume: name.clone(),
            options: vec![
                (LATENCY_MEASUREMENT.key.to_string(), value.to_string()),
                (COUNT_FOP_HITS.key.to_string(), value.to_string()),
            ],
        })
        .await?;
        Ok(match op {
            ProfileOp::Start => format!("Starting volume profile on {name} has been successful "),
            _ => format!("Stopping volume profile on {name} has been successful "),
        })
    }

    /// `volume profile NAME info`: every brick's profile.
    pub(super) async fn profile_info(&self, name: &str) -> Response {
        let v = match self.volume(name) {
            Ok(v) => v,
            Err(e) => return err(e),
        };
        if !LATENCY_MEASUREMENT.bool(&v.options) {
            return err(format!("Profile on Volume {name} is not started"));
        }
        match self.ask_bricks(name, None, PROFILE_XATTR).await {
            Ok(r) => Response::Profile(r),
            Err(e) => err(e),
        }
    }

    /// `volume top NAME …`: every brick's (or `brick`'s) top lists.
    pub(super) async fn top(&self, name: &str, brick: Option<String>) -> Response {
        match self.ask_bricks(name, brick.as_deref(), TOP_XATTR).await {
            Ok(r) => Response::Top(r),
            Err(e) => err(e),
        }
    }

    /// `volume status NAME detail|clients|mem|inode|fd`: every brick's.
    pub(super) async fn brick_details(&self, name: &str) -> Response {
        match self.ask_bricks(name, None, STATUS_XATTR).await {
            Ok(r) => Response::BrickDetails(r),
            Err(e) => err(e),
        }
    }

    /// `volume statedump NAME`: every brick's dump, written into this
    /// daemon's state directory; answers where.
    pub(super) async fn statedump(&self, name: &str) -> Response {
        let dumps = match self.ask_bricks_raw(name, None, STATEDUMP_XATTR).await {
            Ok(d) => d,
            Err(e) => return err(e),
        };
        let dir = self.cfg.state_dir.join("dumps");
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return err(format!("cannot make {}: {e}", dir.display()));
        }
        let mut lines = Vec::new();
        for (brick, dump) in dumps {
            match dump {
                Ok(text) => {
                    let file = dir.join(mortar_process::statedump::file_name(
                        &format!("{name} {brick}"),
                        None,
                    ));
                    match std::fs::write(&file, text) {
                        Ok(()) => lines.push(format!("{brick}: {}", file.display())),
                        Err(e) => lines.push(format!("{brick}: not written: {e}")),
                    }
                }
                Err(e) => lines.push(format!("{brick}: no dump: {e}")),
            }
        }
        tracing::info!(volume = %name, "statedumps written to {}", dir.display());
        Response::Ok(lines.join("\n"))
    }

    /// Reads the virtual xattr `what` of each brick's root (or of brick
    /// `only`, HOST:/PATH), as JSON of a `T`.
    async fn ask_bricks<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
        only: Option<&str>,
        what: &str,
    ) -> Result<Vec<BrickReport<T>>, Error> {
        let answers = self.ask_bricks_raw(name, only, what).await?;
        Ok(answers
            .into_iter()
            .map(|(brick, answer)| {
                let parsed = answer.and_then(|json| {
                    serde_json::from_slice(&json).map_err(|e| {
                        Error::brick(&brick, format!("the brick's answer does not parse: {e}"))
                    })
                });
                let (report, error) = match parsed {
                    Ok(r) => (Some(r), None),
                    Err(e) => (None, Some(e.message)),
                };
                BrickReport {
                    brick,
                    report,
                    error,
                }
            })
            .collect())
    }

    /// Reads the virtual xattr `what` of each brick's root (or of brick
    /// `only`): (brick, its value or why there is none).
    async fn ask_bricks_raw(
        &self,
        name: &str,
        only: Option<&str>,
        what: &str,
    ) -> Result<Vec<(String, Result<Vec<u8>, Error>)>, Error> {
        let v = self.volume(name)?;
        if v.status != VolStatus::Started {
            return Err(format!("Volume {name} is not started").into());
        }
        let label = mortar_graph::sets::brick_label;
        let desc = self
            .desc(name)
            .ok_or_else(|| Error::not_found(format!("Volume {name} does not exist")))?;
        let graph = Graph::build_lazy(&desc, &rpc::internal_env(&v.key), |_| false)
            .map_err(|e| format!("{e:#}"))?;
        if let Some(b) = only {
            if !graph.leaves().any(|n| label(n) == b) {
                return Err(Error::not_found(format!(
                    "brick {b} is not a brick of volume {name}"
                )));
            }
        }
        let wanted = |n: &mortar_graph::Node| only.is_none_or(|b| label(n) == b);
        graph.wait_leaves(wanted, REACH).await;
        let mut out = Vec::new();
        for n in graph.leaves().filter(|n| wanted(n)) {
            let brick = label(n);
            let fop = Fop::Getxattr {
                gfid: Gfid::ROOT,
                name: what.to_string(),
            };
            let answer = match n.child.is_up() {
                false => Err("the brick is not connected".to_string()),
                true => match n.child.call(&Ctx::root(), fop).await {
                    Ok(Reply::Xattr(value)) => Ok(value.into_vec()),
                    Ok(other) => Err(format!("unexpected answer {other:?}")),
                    Err(e) => Err(e.to_string()),
                },
            }
            .map_err(|e| Error::brick(&brick, e));
            out.push((brick, answer));
        }
        graph.fini().await;
        Ok(out)
    }
}
