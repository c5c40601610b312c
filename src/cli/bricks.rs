//! The bricks of a volume: `volume add-brick`, `remove-brick`,
//! `replace-brick` and `reset-brick`, in GlusterFS's grammar.

use super::{ask, fail, rebalance, usage, Out, Server, Usage};
use crate::mgmt::rpc::{self, Request};

/// `add-brick`'s arguments after the volume name: `[replica N] BRICK...
/// [force]`.
pub fn parse_add_brick(args: &[String]) -> Result<(Option<usize>, Vec<String>, bool), Usage> {
    let mut args = args;
    let mut replica = None;
    if args.first().map(String::as_str) == Some("replica") {
        let n = args.get(1).ok_or("replica needs a count")?;
        replica = Some(
            n.parse::<usize>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| format!("replica count {n} is not a number above 0"))?,
        );
        args = &args[2..];
    }
    let force = args.last().map(String::as_str) == Some("force");
    let bricks = &args[..args.len() - force as usize];
    if let Some(w) = bricks
        .iter()
        .find(|b| ["replica", "arbiter", "transport", "stripe", "disperse"].contains(&b.as_str()))
    {
        return Err(format!(
            "'{w}' is not a brick: add-brick takes [replica N] HOST:/PATH... [force]"
        )
        .into());
    }
    if bricks.is_empty() {
        return Err("no bricks given: use HOST:/PATH".into());
    }
    Ok((replica, bricks.to_vec(), force))
}

pub(super) async fn add(
    server: &Server,
    out: &Out,
    name: String,
    args: &[String],
) -> anyhow::Result<()> {
    let (replica, bricks, force) =
        parse_add_brick(args).map_err(|e| usage("volume add-brick", &name, e))?;
    let r = ask(
        server,
        Request::VolumeAddBrick {
            name: name.clone(),
            replica,
            bricks,
            force,
        },
    )
    .await?;
    out.done("volume add-brick", &name, r)
}

pub(super) async fn remove(
    server: &Server,
    out: &Out,
    name: String,
    args: &[String],
    wait: bool,
) -> anyhow::Result<()> {
    let what = "volume remove-brick";
    let (replica, args) = match args {
        [r, n, rest @ ..] if r == "replica" => {
            let n = n
                .parse()
                .map_err(|_| fail(what, &name, &format!("replica count '{n}' is not a number")))?;
            (Some(n), rest)
        }
        _ => (None, args),
    };
    let usage =
        "remove-brick NAME [replica N] HOST:/PATH... {start | status | stop | commit | force}";
    if args.len() < 2 {
        return Err(fail(what, &name, &format!("use {usage}")));
    }
    let (bricks, op) = args.split_at(args.len() - 1);
    let kinds = rebalance::kinds(true);
    let op = match op[0].as_str() {
        "status" if wait => return rebalance::wait(server, &name, kinds).await,
        "status" => return rebalance::status(server, &name, out.json, kinds).await,
        "start" => rpc::RemoveOp::Start,
        "stop" => rpc::RemoveOp::Stop,
        "commit" => rpc::RemoveOp::Commit,
        "force" => rpc::RemoveOp::Force,
        other => return Err(fail(what, &name, &format!("'{other}': use {usage}"))),
    };
    let r = ask(
        server,
        Request::VolumeRemoveBrick {
            name: name.clone(),
            bricks: bricks.to_vec(),
            op,
            replica,
        },
    )
    .await?;
    out.done(what, &name, r)?;
    if wait && op == rpc::RemoveOp::Start {
        rebalance::wait(server, &name, kinds).await?;
    }
    Ok(())
}

pub(super) async fn replace(
    server: &Server,
    out: &Out,
    name: String,
    from: String,
    to: String,
) -> anyhow::Result<()> {
    let r = ask(
        server,
        Request::VolumeReplaceBrick {
            name: name.clone(),
            from,
            to,
        },
    )
    .await?;
    out.done("volume replace-brick", &name, r)
}

pub(super) async fn reset(
    server: &Server,
    out: &Out,
    name: String,
    args: &[String],
) -> anyhow::Result<()> {
    let what = "volume reset-brick";
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let (brick, down) = match words.as_slice() {
        [b, "start"] => (b.to_string(), true),
        [b, again, "commit"] | [b, again, "commit", "force"] if b == again => {
            (b.to_string(), false)
        }
        [b, other, "commit", ..] => {
            return Err(fail(
                what,
                &name,
                &format!("{other} is not {b}: reset-brick brings the same brick back (use replace-brick to move it)"),
            ))
        }
        _ => {
            return Err(fail(
                what,
                &name,
                &format!("'{}': use reset-brick NAME HOST:/PATH start, or reset-brick NAME HOST:/PATH HOST:/PATH commit [force]", args.join(" ")),
            ))
        }
    };
    let r = ask(
        server,
        Request::VolumeResetBrick {
            name: name.clone(),
            brick,
            down,
        },
    )
    .await?;
    out.done(what, &name, r)
}
