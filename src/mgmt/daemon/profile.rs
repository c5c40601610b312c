//! `volume profile` and `volume top`: start and stop are changes of the
//! volume's options (`diagnostics.latency-measurement`, read by every
//! brick's `debug/profile`, and `diagnostics.count-fop-hits`, which stacks
//! `debug/io-stats` on the clients, as GlusterFS's profile does); `info`
//! and `top` ask each brick for its report over a client graph of the
//! whole volume, as the pool's own client (the volume's key).

use super::{err, Daemon};
use crate::core::{Ctx, Fop, Gfid, Reply};
use crate::debug::io_stats::COUNT_FOP_HITS;
use crate::debug::profile::{LATENCY_MEASUREMENT, PROFILE_XATTR, TOP_XATTR};
use crate::graph::Graph;
use crate::mgmt::command::Command;
use crate::mgmt::rpc::{self, BrickReport, ProfileOp, Response};
use crate::mgmt::state::VolStatus;
use std::time::Duration;

/// How long the bricks are given to connect.
const REACH: Duration = Duration::from_secs(3);

impl Daemon {
    /// `volume profile NAME start|stop`: a change, on the leader.
    pub(super) async fn profile_switch(
        &self,
        name: String,
        op: ProfileOp,
    ) -> Result<String, String> {
        let v = self.volume(&name)?;
        let on = LATENCY_MEASUREMENT.bool(&v.options);
        let value = match op {
            ProfileOp::Start if on => {
                return Err(format!("Profile on Volume {name} is already started"))
            }
            ProfileOp::Stop if !on => {
                return Err(format!("Profile on Volume {name} is not started"))
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

    /// Reads the virtual xattr `what` of each brick's root (or of brick
    /// `only`, HOST:/PATH), as JSON of a `T`.
    async fn ask_bricks<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
        only: Option<&str>,
        what: &str,
    ) -> Result<Vec<BrickReport<T>>, String> {
        let v = self.volume(name)?;
        if v.status != VolStatus::Started {
            return Err(format!("Volume {name} is not started"));
        }
        let label = |n: &crate::graph::Node| {
            let get = |k: &str| n.params.get(k).cloned().unwrap_or_default();
            format!("{}:{}", get("host"), get("brick"))
        };
        let desc = self
            .desc(name)
            .ok_or_else(|| format!("Volume {name} does not exist"))?;
        let graph = Graph::build_lazy(&desc, &rpc::internal_env(&v.key), |_| false)
            .map_err(|e| format!("{e:#}"))?;
        if let Some(b) = only {
            if !graph.leaves().any(|n| label(n) == b) {
                return Err(format!("brick {b} is not a brick of volume {name}"));
            }
        }
        let wanted = |n: &crate::graph::Node| only.is_none_or(|b| label(n) == b);
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
                    Ok(Reply::Xattr(json)) => serde_json::from_slice(&json)
                        .map_err(|e| format!("the brick's answer does not parse: {e}")),
                    Ok(other) => Err(format!("unexpected answer {other:?}")),
                    Err(e) => Err(e.to_string()),
                },
            };
            let (report, error) = match answer {
                Ok(r) => (Some(r), None),
                Err(e) => (None, Some(e)),
            };
            out.push(BrickReport {
                brick,
                report,
                error,
            });
        }
        graph.fini().await;
        Ok(out)
    }
}
