//! Statedumps: a readable dump of a process's state for a bug report, as
//! GlusterFS writes them. Each process registers sections (a brick its
//! translators, connections and open files; a client its graph and
//! caches; the daemon its peers, volumes and bricks); `render` writes
//! them under a header. A dump is written to a file on SIGUSR1
//! (`kill -USR1 PID`, any mortar process), into `dump_dir()`, and
//! `volume statedump NAME` collects every brick's into the daemon's
//! state directory.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Mutex;

type Section = Box<dyn Fn() -> String + Send + Sync>;

/// The sections: each one's brick (None: the process's own), title and
/// maker.
static SECTIONS: Mutex<Vec<(Option<String>, String, Section)>> = Mutex::new(Vec::new());

/// Adds a section of the process, `f` called at every dump.
pub fn section(title: &str, f: impl Fn() -> String + Send + Sync + 'static) {
    SECTIONS
        .lock()
        .unwrap()
        .push((None, title.to_string(), Box::new(f)));
}

/// Adds a section of brick `brick` (its path), `f` called at every dump:
/// in the process's dump titled with the brick, in the brick's own
/// (`render_brick`) plainly.
pub fn brick_section(brick: &str, title: &str, f: impl Fn() -> String + Send + Sync + 'static) {
    SECTIONS
        .lock()
        .unwrap()
        .push((Some(brick.to_string()), title.to_string(), Box::new(f)));
}

/// Takes out the sections of `brick` (one a process no longer serves).
pub fn remove_brick(brick: &str) {
    SECTIONS
        .lock()
        .unwrap()
        .retain(|(b, _, _)| b.as_deref() != Some(brick));
}

/// The dump of this process (`what` names it: "brick HOST:/PATH"): its
/// own sections and every brick's.
pub fn render(what: &str) -> String {
    render_of(what, None)
}

/// The dump of brick `brick` as its process serves it: the process's own
/// sections and the brick's, none of another brick's.
pub fn render_brick(what: &str, brick: &str) -> String {
    render_of(what, Some(brick))
}

fn render_of(what: &str, only: Option<&str>) -> String {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let m = super::status::memory();
    let mut out = format!(
        "DUMP-START-TIME: {now}\n\n[process]\nwhat={what}\npid={}\nversion={}\nresident={}\npeak_resident={}\nthreads={}\n\n",
        std::process::id(),
        env!("CARGO_PKG_VERSION"),
        m.resident,
        m.peak_resident,
        m.threads
    );
    for (brick, title, f) in SECTIONS.lock().unwrap().iter() {
        let title = match (brick, only) {
            (None, _) => title.clone(),
            (Some(b), Some(o)) if b == o => title.clone(),
            (Some(_), Some(_)) => continue,
            (Some(b), None) => format!("{title} {b}"),
        };
        out.push_str(&format!("[{title}]\n"));
        let body = f();
        out.push_str(&body);
        if !body.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "DUMP-END-TIME: {}\n",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    ));
    out
}

/// Where dumps asked by signal go: `$MORTAR_DUMP_DIR`, else
/// /var/run/mortar.
pub fn dump_dir() -> PathBuf {
    std::env::var_os("MORTAR_DUMP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/run/mortar"))
}

/// A dump file's name: `<what>.<pid>.dump.<unix seconds>` (without the
/// pid when not given), `what` made a file name (slashes and colons to
/// dashes).
pub fn file_name(what: &str, pid: Option<u32>) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let what: String = what
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let pid = pid.map(|p| format!(".{p}")).unwrap_or_default();
    format!("{}{pid}.dump.{secs}", what.trim_matches('-'))
}

/// Writes this process's dump into `dump_dir()`; answers its path.
pub fn write(what: &str) -> std::io::Result<PathBuf> {
    let dir = dump_dir();
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(file_name(what, Some(std::process::id())));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    f.write_all(render(what).as_bytes())?;
    Ok(path)
}

/// Writes a dump at every SIGUSR1, from a task of its own (call within a
/// tokio runtime).
pub fn on_signal(what: String) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut usr1) = signal(SignalKind::user_defined1()) else {
        tracing::warn!("statedumps by signal are off: cannot catch SIGUSR1");
        return;
    };
    tokio::spawn(async move {
        while usr1.recv().await.is_some() {
            match write(&what) {
                Ok(p) => tracing::info!(file = %p.display(), "statedump written"),
                Err(e) => tracing::warn!("statedump not written to {}: {e}", dump_dir().display()),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dump_holds_every_section_under_a_header() {
        section("test-section", || "key=value".into());
        let text = render("test HOST:/brick");
        assert!(text.starts_with("DUMP-START-TIME: "), "{text}");
        assert!(
            text.contains("[process]\nwhat=test HOST:/brick\npid="),
            "{text}"
        );
        assert!(text.contains("[test-section]\nkey=value\n"), "{text}");
        assert!(text.ends_with('\n') && text.contains("DUMP-END-TIME: "));
        let name = file_name("brick h:/data/b1", Some(42));
        assert!(name.starts_with("brick-h--data-b1.42.dump."), "{name}");
    }

    #[test]
    fn a_bricks_dump_holds_its_sections_and_none_of_another_bricks() {
        brick_section("/b/one", "translators", || "one's".into());
        brick_section("/b/two", "translators", || "two's".into());
        let one = render_brick("brick /b/one", "/b/one");
        assert!(one.contains("[translators]\none's\n"), "{one}");
        assert!(!one.contains("two's"), "{one}");
        let all = render("brick host");
        assert!(all.contains("[translators /b/one]\none's\n"), "{all}");
        assert!(all.contains("[translators /b/two]\ntwo's\n"), "{all}");
        remove_brick("/b/two");
        assert!(!render("brick host").contains("two's"));
    }
}
