//! `volume rebalance NAME [fix-layout] start | stop | status [--wait]`,
//! and the status of `volume remove-brick`, which is a rebalance too.

use super::{ask, fail, refused, usage, Out, Server, Usage};
use crate::mgmt::rpc::{RebalanceOp, Request, Response};
use crate::mgmt::state::{Task, TaskKind, TaskStatus};
use crate::rebalance::Progress;
use std::time::Duration;

/// What was asked: a change, or the status.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked {
    Change(RebalanceOp),
    Status,
}

pub fn parse(args: &[String]) -> Result<Asked, Usage> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    Ok(match words.as_slice() {
        ["start"] | ["start", "force"] => Asked::Change(RebalanceOp::Start { migrate: true }),
        ["fix-layout", "start"] => Asked::Change(RebalanceOp::Start { migrate: false }),
        ["stop"] => Asked::Change(RebalanceOp::Stop),
        ["status"] => Asked::Status,
        _ => {
            return Err(format!(
                "'{}': use rebalance NAME {{start [force] | fix-layout start | stop | status}}",
                args.join(" ")
            )
            .into())
        }
    })
}

/// `volume rebalance NAME ARGS [--wait]`.
pub(super) async fn run(
    server: &Server,
    out: &Out,
    name: String,
    args: &[String],
    wait: bool,
) -> anyhow::Result<()> {
    let kinds = kinds(false);
    match parse(args).map_err(|e| usage("volume rebalance", &name, e))? {
        Asked::Status if wait => self::wait(server, &name, kinds).await,
        Asked::Status => status(server, &name, out.json, kinds).await,
        Asked::Change(op) => {
            let req = Request::VolumeRebalance {
                name: name.clone(),
                op,
            };
            out.done("volume rebalance", &name, ask(server, req).await?)?;
            if wait && op != RebalanceOp::Stop {
                self::wait(server, &name, kinds).await?;
            }
            Ok(())
        }
    }
}

/// Which tasks a command shows: rebalances, or remove-bricks.
pub fn kinds(remove: bool) -> &'static [TaskKind] {
    if remove {
        &[TaskKind::RemoveBrick]
    } else {
        &[TaskKind::Rebalance, TaskKind::FixLayout]
    }
}

/// The volume's last task of one of `kinds`.
async fn last(server: &Server, name: &str, kinds: &[TaskKind]) -> anyhow::Result<Option<Task>> {
    let req = Request::VolumeInfo {
        name: Some(name.to_string()),
    };
    match ask(server, req).await? {
        Response::Volumes(vs) => Ok(vs
            .into_iter()
            .next()
            .and_then(|v| v.tasks.into_iter().rev().find(|t| kinds.contains(&t.kind)))),
        Response::Err(e) => Err(refused("volume rebalance", name, e)),
        other => Err(fail("volume rebalance", name, &format!("{other:?}"))),
    }
}

fn size(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1}GB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1}MB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1}KB", b as f64 / 1024.0),
        b => format!("{b}Bytes"),
    }
}

fn hms(s: u64) -> String {
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// Prints the status as GlusterFS lays it out, one row for each server
/// running a share of it.
pub async fn status(
    server: &Server,
    name: &str,
    json: bool,
    kinds: &[TaskKind],
) -> anyhow::Result<()> {
    let what = kinds[0].as_str().to_lowercase();
    let Some(t) = last(server, name, kinds).await? else {
        return Err(fail(
            &format!("volume {what}"),
            name,
            &format!("no {what} has been started on this volume"),
        ));
    };
    let p = t.progress.clone().unwrap_or_default();
    if json {
        println!("{}", serde_json::to_string_pretty(&t)?);
        return Ok(());
    }
    println!(
        "{:>40} {:>16} {:>13} {:>13} {:>13} {:>13} {:>20} {:>18}",
        "Node",
        "Rebalanced-files",
        "size",
        "scanned",
        "failures",
        "skipped",
        "status",
        "run time in h:m:s"
    );
    println!(
        "{:>40} {:>16} {:>13} {:>13} {:>13} {:>13} {:>20} {:>18}",
        "---------",
        "-----------",
        "-----------",
        "-----------",
        "-----------",
        "-----------",
        "------------",
        "--------------"
    );
    let line = |host: &str, p: &Progress, status: TaskStatus| {
        println!(
            "{:>40} {:>16} {:>13} {:>13} {:>13} {:>13} {:>20} {:>18}",
            host,
            p.moved,
            size(p.bytes),
            p.scanned,
            p.failed,
            p.skipped,
            status.as_str(),
            hms(p.secs)
        )
    };
    if t.rows.is_empty() {
        line(&t.host, &p, t.status);
    }
    for r in &t.rows {
        line(&r.host, &r.progress, r.status);
    }
    if t.status == TaskStatus::InProgress {
        match p.eta_secs {
            Some(eta) => println!(
                "Estimated time left for {what} to complete : {:>10} (pass {})",
                hms(eta),
                p.pass + 1
            ),
            None => println!("Estimated time left for {what} to complete : not yet known"),
        }
    }
    if !t.detail.is_empty() {
        println!("{}: {}", t.kind.as_str(), t.detail);
    }
    println!("volume {what}: {name}: success");
    Ok(())
}

fn rate(p: &Progress) -> String {
    let secs = p.secs.max(1) as f64;
    format!(
        "{:.1} files/s, {}/s",
        p.moved as f64 / secs,
        size((p.bytes as f64 / secs) as u64)
    )
}

/// How far the pass in progress is, in thousandths, and the time left.
fn done(p: &Progress) -> (u64, String) {
    match p.eta_secs {
        Some(eta) => (
            1000 * p.secs / (p.secs + eta).max(1),
            format!("pass {}, about {} left", p.pass + 1, hms(eta)),
        ),
        None => (0, format!("pass {}", p.pass + 1)),
    }
}

/// Shows the running rebalance until it ends; an error if it did not
/// complete.
pub async fn wait(server: &Server, name: &str, kinds: &[TaskKind]) -> anyhow::Result<()> {
    let what = kinds[0].as_str().to_lowercase();
    let bar = indicatif::ProgressBar::new(1000);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{what} {{elapsed_precise}} [{{bar:24}}] {{prefix}}\n  {{msg}}"
        ))
        .unwrap(),
    );
    loop {
        let Some(t) = last(server, name, kinds).await? else {
            anyhow::bail!("volume {what}: {name}: no {what} has been started");
        };
        let p = t.progress.clone().unwrap_or_default();
        let (pos, left) = done(&p);
        bar.set_position(pos);
        bar.set_prefix(left);
        bar.set_message(format!(
            "{} directories, {} files scanned, {} moved ({}), {} left in place, {} failed; {}",
            p.dirs,
            p.scanned,
            p.moved,
            size(p.bytes),
            p.skipped,
            p.failed,
            rate(&p)
        ));
        match t.status {
            TaskStatus::InProgress => bar.tick(),
            TaskStatus::Completed => {
                bar.set_position(1000);
                bar.set_prefix("done");
                bar.finish_with_message(format!("completed: {}", t.detail));
                return Ok(());
            }
            s => {
                bar.abandon_with_message(format!("{}: {}", s.as_str(), t.detail));
                anyhow::bail!("volume {what}: {name}: {}: {}", s.as_str(), t.detail);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Asked, Usage> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn rebalance_grammar() {
        assert_eq!(
            p("start").unwrap(),
            Asked::Change(RebalanceOp::Start { migrate: true })
        );
        assert_eq!(
            p("fix-layout start").unwrap(),
            Asked::Change(RebalanceOp::Start { migrate: false })
        );
        assert_eq!(p("stop").unwrap(), Asked::Change(RebalanceOp::Stop));
        assert_eq!(p("status").unwrap(), Asked::Status);
        for bad in ["", "begin", "fix-layout", "start now", "status all"] {
            assert!(p(bad).is_err(), "{bad}");
        }
        assert_eq!(hms(3725), "1:02:05");
        assert_eq!(size(3 << 20), "3.0MB");
        let p = Progress {
            secs: 30,
            eta_secs: Some(90),
            ..Default::default()
        };
        assert_eq!(done(&p), (250, "pass 1, about 0:01:30 left".into()));
        assert_eq!(done(&Progress::default()).0, 0);
    }
}
