//! `mortar volume heal VOL [full | info [summary|split-brain] | statistics
//! | split-brain (bigger-file|latest-mtime) FILE | split-brain source-brick
//! HOST:PATH [FILE]]`, in GlusterFS's words and layout.

use super::{ask, refused, unexpected, usage, Out, Server, Usage};
use crate::mgmt::rpc::{HealOp, HealReport, Request, Response};
use std::time::Duration;

/// `volume heal NAME ARGS [--wait [--timeout S]]`.
pub(super) async fn run(
    server: &Server,
    out: &Out,
    name: String,
    args: &[String],
    wait: bool,
    timeout: Option<u64>,
) -> anyhow::Result<()> {
    let op = parse(args).map_err(|e| usage("volume heal", &name, e))?;
    let req = Request::Heal {
        name: name.clone(),
        op: op.clone(),
    };
    match ask(server, req).await? {
        Response::Heal(rep) if out.json => println!("{}", serde_json::to_string_pretty(&rep)?),
        Response::Heal(rep) => print(&name, &op, &rep),
        other => return Err(unexpected("volume heal", &name, other)),
    }
    if wait && matches!(op, HealOp::Index | HealOp::Full) {
        self::wait(server, &name, timeout).await?;
    }
    Ok(())
}

const USAGE: &str = "Usage: volume heal <VOLNAME> [full | statistics | info [summary | split-brain] | \
split-brain {bigger-file <FILE> | latest-mtime <FILE> | source-brick <HOSTNAME:BRICKNAME> [<FILE>]}]";

pub fn parse(args: &[String]) -> Result<HealOp, Usage> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    Ok(match a.as_slice() {
        [] => HealOp::Index,
        ["full"] => HealOp::Full,
        ["info"] => HealOp::Info,
        ["info", "summary"] => HealOp::InfoSummary,
        ["info", "split-brain"] => HealOp::InfoSplitBrain,
        ["statistics"] => HealOp::Statistics,
        ["split-brain", how @ ("bigger-file" | "latest-mtime"), file] => HealOp::SplitBrain {
            how: how.to_string(),
            file: Some(file.to_string()),
            source: None,
        },
        ["split-brain", "source-brick", brick, rest @ ..] if rest.len() <= 1 => {
            if !brick.contains(":/") {
                return Err(format!("{brick}: a brick is HOST:/PATH\n{USAGE}").into());
            }
            HealOp::SplitBrain {
                how: "source-brick".into(),
                file: rest.first().map(|f| f.to_string()),
                source: Some(brick.to_string()),
            }
        }
        _ => return Err(USAGE.to_string().into()),
    })
}

/// Unix seconds as a person reads them.
pub(super) fn time(secs: u64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_secs(secs);
    humantime::format_rfc3339_seconds(t).to_string()
}

pub fn print(name: &str, op: &HealOp, rep: &HealReport) {
    match op {
        HealOp::Index | HealOp::Full | HealOp::SplitBrain { .. } => println!("{}", rep.message),
        HealOp::Info => print_entries(rep, "Number of entries", true),
        HealOp::InfoSummary => {
            for b in &rep.bricks {
                println!("Brick {}", b.brick);
                println!("Status: {}", status(b.connected));
                let n = b.entries.len();
                let sb = b.split_brain.len();
                println!("Total Number of entries: {}", count(b.connected, n));
                println!(
                    "Number of entries in heal pending: {}",
                    count(b.connected, n - sb)
                );
                println!(
                    "Number of entries in split-brain: {}",
                    count(b.connected, sb)
                );
                println!(
                    "Number of entries possibly healing: {}\n",
                    count(b.connected, 0)
                );
            }
        }
        HealOp::InfoSplitBrain => print_entries(rep, "Number of entries in split-brain", false),
        HealOp::Progress => print_entries(rep, "Number of entries", false),
        HealOp::Statistics => {
            println!("Gathering crawl statistics on volume {name} has been successful");
            println!("------------------------------------------------");
            if rep.crawls.is_empty() {
                println!("\nNo crawl has had anything to heal yet.");
            }
            for c in &rep.crawls {
                println!();
                println!("Starting time of crawl: {}", time(c.started));
                match c.ended {
                    Some(e) => println!("Ending time of crawl: {}", time(e)),
                    None => println!("Crawl is in progress"),
                }
                println!("Type of crawl: {}", c.kind);
                println!("No. of entries healed: {}", c.healed);
                println!("No. of names healed in directories: {}", c.entries);
                println!("No. of bytes healed: {}", c.bytes);
                println!("No. of entries in split-brain: {}", c.split_brain);
                println!("No. of heal failed entries: {}", c.failed);
            }
        }
    }
}

/// Each brick's entries, its status and their count under `label`; with
/// `to_compare`, also the bytes their heal will compare (a line beyond
/// GlusterFS's).
fn print_entries(rep: &HealReport, label: &str, to_compare: bool) {
    for b in &rep.bricks {
        println!("Brick {}", b.brick);
        for e in &b.entries {
            println!("{e}");
        }
        println!("Status: {}", status(b.connected));
        println!("{label}: {}", count(b.connected, b.entries.len()));
        if to_compare {
            let bytes = count(b.connected, b.to_compare as usize);
            println!("Bytes to compare: {bytes}");
        }
        println!();
    }
}

fn status(up: bool) -> &'static str {
    if up {
        "Connected"
    } else {
        "Transport endpoint is not connected"
    }
}

fn count(up: bool, n: usize) -> String {
    if up {
        n.to_string()
    } else {
        "-".into()
    }
}

/// Entries pending over all connected bricks.
fn pending(rep: &HealReport) -> usize {
    rep.bricks.iter().map(|b| b.entries.len()).sum()
}

/// Shows a progress bar until nothing is pending (or `timeout` passes).
pub async fn wait(server: &Server, name: &str, timeout: Option<u64>) -> anyhow::Result<()> {
    let deadline = timeout.map(|t| std::time::Instant::now() + Duration::from_secs(t));
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("heal {bar:40} {pos}/{len} entries healed, {msg}")
            .unwrap(),
    );
    let mut most = 0usize;
    loop {
        let req = Request::Heal {
            name: name.to_string(),
            op: HealOp::Progress,
        };
        let rep = match super::ask(server, req).await? {
            Response::Heal(r) => r,
            Response::Err(e) => return Err(refused("volume heal", name, e)),
            other => anyhow::bail!("unexpected answer {other:?}"),
        };
        let n = pending(&rep);
        let down = rep.bricks.iter().filter(|b| !b.connected).count();
        most = most.max(n);
        bar.set_length(most as u64);
        bar.set_position((most - n) as u64);
        let split: std::collections::HashSet<&String> =
            rep.bricks.iter().flat_map(|b| &b.split_brain).collect();
        let bytes: u64 = rep.bricks.iter().map(|b| b.to_compare).sum();
        bar.set_message(format!(
            "{n} pending ({} in split-brain), {} to compare, {down} brick(s) down",
            split.len(),
            indicatif::HumanBytes(bytes)
        ));
        if n == 0 {
            bar.finish_with_message("nothing pending".to_string());
            return Ok(());
        }
        if deadline.is_some_and(|d| std::time::Instant::now() > d) {
            bar.abandon();
            anyhow::bail!("volume heal: {name}: {n} entries still pending after the timeout");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<HealOp, Usage> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn heal_grammar() {
        assert_eq!(p("").unwrap(), HealOp::Index);
        assert_eq!(p("full").unwrap(), HealOp::Full);
        assert_eq!(p("info summary").unwrap(), HealOp::InfoSummary);
        assert_eq!(p("info split-brain").unwrap(), HealOp::InfoSplitBrain);
        assert!(
            matches!(p("split-brain bigger-file /a").unwrap(), HealOp::SplitBrain { how, file: Some(f), .. } if how == "bigger-file" && f == "/a")
        );
        assert!(
            matches!(p("split-brain source-brick h:/b").unwrap(), HealOp::SplitBrain { source: Some(s), file: None, .. } if s == "h:/b")
        );
        assert!(p("split-brain source-brick nobrick /a").is_err());
        assert!(p("info everything").is_err());
        assert!(p("split-brain bigger-file").is_err());
        assert_eq!(time(951_782_400), "2000-02-29T00:00:00Z");
    }
}
