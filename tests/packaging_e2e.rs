//! What installs mortar as a service: the daemon's systemd unit, the
//! manual pages and the shell completions.

mod common;
use common::*;

/// The unit parses cleanly (`systemd-analyze verify`, which needs no
/// running systemd), with the daemon this build made.
#[test]
fn the_daemons_systemd_unit_is_valid() {
    if sh("command -v systemd-analyze").status.code() != Some(0) {
        eprintln!("systemd-analyze not installed: skipped");
        return;
    }
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/packaging/systemd/mortar.service"
    ))
    .unwrap();
    for want in [
        "Restart=on-failure",
        "KillMode=process",
        "Before=remote-fs-pre.target",
    ] {
        assert!(unit.contains(want), "{want}");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mortar.service");
    std::fs::write(&file, unit.replace("/usr/local/sbin/mortar", BIN)).unwrap();
    let o = sh(&format!("systemd-analyze verify {} 2>&1", file.display()));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && !said.contains("mortar.service"),
        "{said}"
    );
}

/// The manual pages and completions come from the CLI's own definitions:
/// a page for every command `--help` lists, each one `man` reads, and a
/// bash completion script that parses.
#[test]
fn man_pages_and_completions_follow_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let said = ok(&format!("{BIN} man --out {}", dir.path().display()));
    assert!(said.contains("manual pages written"), "{said}");
    // Every command of `mortar --help` and `mortar volume --help`.
    let commands = |help: &str| -> Vec<String> {
        help.lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .filter(|c| c != "help")
            .collect()
    };
    let top = commands(&ok(&format!("{BIN} --help")));
    assert!(
        top.contains(&"volume".to_string()) && top.len() >= 8,
        "{top:?}"
    );
    let volume = commands(&ok(&format!("{BIN} volume --help")));
    let pages: Vec<String> = top
        .iter()
        .map(|c| format!("mortar-{c}.1"))
        .chain(volume.iter().map(|c| format!("mortar-volume-{c}.1")))
        .chain(["mortar.1".to_string()])
        .collect();
    for page in &pages {
        let path = dir.path().join(page);
        assert!(path.exists(), "{page} missing");
        if sh("command -v man").status.success() {
            let text = ok(&format!("MANWIDTH=80 man -l {} 2>&1", path.display()));
            assert!(
                text.contains("NAME") && text.contains("SYNOPSIS"),
                "{page}: {text}"
            );
        }
    }
    // What `volume create --help` says is what its page says.
    let help = ok(&format!("{BIN} volume create --help"));
    let first = help.lines().next().unwrap().trim();
    let page = std::fs::read_to_string(dir.path().join("mortar-volume-create.1")).unwrap();
    let words: Vec<&str> = first.split_whitespace().take(4).collect();
    assert!(page.contains(&words.join(" ")), "{first:?} not in the page");

    let script = dir.path().join("mortar.bash");
    ok(&format!("{BIN} completions bash > {}", script.display()));
    ok(&format!("bash -n {}", script.display()));
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.contains("rotate-certs") && text.contains("add-brick"));
    // A reader that goes away ends it quietly.
    let o = sh(&format!("{BIN} completions zsh | head -1"));
    assert!(
        String::from_utf8_lossy(&o.stderr).is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
