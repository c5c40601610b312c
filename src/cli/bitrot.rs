//! `mortar volume bitrot VOL enable | disable | scrub-throttle
//! lazy|normal|aggressive | scrub-frequency
//! minute|hourly|daily|weekly|biweekly|monthly | scrub
//! pause|resume|status|ondemand`, in GlusterFS's words: each but `scrub
//! status|ondemand` sets a volume option (docs/bitrot.md).

use super::{ask, heal::time, unexpected, usage, Out, Server};
use crate::heal::scrub::BrickScrub;
use crate::mgmt::rpc::{Request, Response, ScrubOp};

const USAGE: &str = "Usage: volume bitrot <VOLNAME> {enable|disable} |\n\
volume bitrot <VOLNAME> scrub-throttle {lazy|normal|aggressive} |\n\
volume bitrot <VOLNAME> scrub-frequency {minute|hourly|daily|weekly|biweekly|monthly} |\n\
volume bitrot <VOLNAME> scrub {pause|resume|status|ondemand}";

/// What a `volume bitrot` command asks.
#[derive(Debug, PartialEq, Eq)]
pub enum Bitrot {
    Set(&'static str, String),
    Scrub(ScrubOp),
}

pub fn parse(args: &[String]) -> Result<Bitrot, String> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let set = |k: &'static str, v: &str| Ok(Bitrot::Set(k, v.to_string()));
    match a.as_slice() {
        ["enable"] => set("features.bitrot", "on"),
        ["disable"] => set("features.bitrot", "off"),
        ["scrub-throttle", t @ ("lazy" | "normal" | "aggressive")] => {
            set("features.scrub-throttle", t)
        }
        ["scrub-frequency", f @ ("minute" | "hourly" | "daily" | "weekly" | "biweekly" | "monthly")] => {
            set("features.scrub-freq", f)
        }
        ["scrub", "pause"] => set("features.scrub", "Inactive"),
        ["scrub", "resume"] => set("features.scrub", "Active"),
        ["scrub", "status"] => Ok(Bitrot::Scrub(ScrubOp::Status)),
        ["scrub", "ondemand"] => Ok(Bitrot::Scrub(ScrubOp::Ondemand)),
        _ => Err(USAGE.to_string()),
    }
}

pub(super) async fn run(
    server: &Server,
    out: &Out,
    name: String,
    args: &[String],
) -> anyhow::Result<()> {
    let what = "volume bitrot";
    let cmd = parse(args).map_err(|e| usage(what, &name, e.into()))?;
    match cmd {
        Bitrot::Set(key, value) => {
            let req = Request::VolumeSet {
                name: name.clone(),
                key: key.into(),
                value,
            };
            let r = ask(server, req).await?;
            out.done(what, &name, r)
        }
        Bitrot::Scrub(op) => {
            let req = Request::Scrub {
                name: name.clone(),
                op: op.clone(),
                here: false,
            };
            match ask(server, req).await? {
                Response::Scrub(s) if out.json => {
                    println!("{}", serde_json::to_string_pretty(&s)?);
                    Ok(())
                }
                Response::Scrub(s) => {
                    match op {
                        ScrubOp::Ondemand => {
                            println!("volume bitrot: scrubber started ondemand for volume {name}")
                        }
                        ScrubOp::Status => print_status(&name, &s),
                    }
                    Ok(())
                }
                other => Err(unexpected(what, &name, other)),
            }
        }
    }
}

fn print_status(name: &str, bricks: &[BrickScrub]) {
    println!("\nVolume name : {name}\n");
    for b in bricks {
        println!("=========================================================\n");
        println!("Brick: {}\n", b.brick);
        println!("State of scrub: {}\n", b.state);
        println!("Number of Scrubbed files: {}\n", b.files);
        println!("Bytes scrubbed: {}\n", b.bytes);
        println!("Scrubs completed: {}\n", b.runs);
        match b.last_finished {
            Some(t) => println!("Last completed scrub time: {}\n", time(t)),
            None => println!("Last completed scrub time: Scrubber pending to complete.\n"),
        }
        if let Some(s) = b.last_secs {
            println!("Duration of last scrub (D:M:H:M:S): {}\n", dhms(s));
        }
        if let Some(t) = b.next {
            println!("Next scrub: {}\n", time(t));
        }
        println!("Error count: {}\n", b.damaged.len());
        if !b.damaged.is_empty() {
            println!("Corrupted object's [GFID]:\n");
            for d in &b.damaged {
                let fate = match (&d.repaired, &d.repair_error) {
                    (Some(t), _) => format!("repaired {}", time(*t)),
                    (None, Some(e)) => format!("not repaired: {e}"),
                    (None, None) => "not repaired yet".into(),
                };
                println!("{} found {}: {}\n", d.gfid, time(d.found), fate);
            }
        }
    }
    println!("=========================================================");
}

/// Seconds as GlusterFS shows a scrub's length: days:months?:hours:minutes:seconds
/// (its "D:M:H:M:S", where M is minutes both times; here D:0:H:M:S).
fn dhms(s: u64) -> String {
    format!(
        "{}:0:{}:{}:{}",
        s / 86_400,
        s % 86_400 / 3_600,
        s % 3_600 / 60,
        s % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn bitrot_grammar() {
        assert_eq!(
            parse(&args("enable")),
            Ok(Bitrot::Set("features.bitrot", "on".into()))
        );
        assert_eq!(
            parse(&args("scrub-frequency minute")),
            Ok(Bitrot::Set("features.scrub-freq", "minute".into()))
        );
        assert_eq!(
            parse(&args("scrub pause")),
            Ok(Bitrot::Set("features.scrub", "Inactive".into()))
        );
        assert_eq!(
            parse(&args("scrub status")),
            Ok(Bitrot::Scrub(ScrubOp::Status))
        );
        for bad in [
            "",
            "scrub",
            "scrub-throttle fast",
            "scrub-frequency yearly",
            "enable now",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad}");
        }
        assert_eq!(dhms(90_061), "1:0:1:1:1");
    }
}
