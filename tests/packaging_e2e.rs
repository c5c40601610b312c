//! What installs mortar as a service: the daemon's systemd unit, the
//! manual pages and the shell completions.

mod common;
use common::*;

/// The units parse cleanly (`systemd-analyze verify`, which needs no
/// running systemd), with the daemon this build made: the daemon's, the
/// target that groups it, the example mount unit, and the scheduled
/// snapshots' service and timer.
#[test]
fn the_systemd_units_are_valid() {
    if !have_tool("systemd-analyze", "systemd") {
        return;
    }
    let read = |name: &str| {
        std::fs::read_to_string(format!(
            "{}/packaging/systemd/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    };
    let unit = read("mortar.service");
    for want in [
        "Restart=on-failure",
        "KillMode=process",
        "Before=remote-fs-pre.target",
        "PartOf=mortar.target",
    ] {
        assert!(unit.contains(want), "{want}");
    }
    let mount = read("mnt-gv0.mount");
    assert!(
        mount.contains("Type=mortar") && mount.contains("_netdev"),
        "{mount}"
    );
    let timer = read("mortar-snapshot@.timer");
    assert!(
        timer.contains("OnCalendar=") && timer.contains("Persistent=true"),
        "{timer}"
    );
    let snap = read("mortar-snapshot@.service");
    assert!(snap.contains("snapshot create %i %i"), "{snap}");
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    // (A template is checked as an instance of it.)
    for (name, as_name) in [
        ("mortar.service", "mortar.service"),
        ("mortar.target", "mortar.target"),
        ("mnt-gv0.mount", "mnt-gv0.mount"),
        ("mortar-snapshot@.service", "mortar-snapshot@gv0.service"),
        ("mortar-snapshot@.timer", "mortar-snapshot@gv0.timer"),
    ] {
        let file = dir.path().join(as_name);
        std::fs::write(&file, read(name).replace("/usr/local/sbin/mortar", BIN)).unwrap();
        files.push(file.display().to_string());
    }
    let o = sh(&format!("systemd-analyze verify {} 2>&1", files.join(" ")));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && !said.contains("mortar.") && !said.contains("mnt-gv0"),
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
        if have_tool("man", "man-db") {
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
