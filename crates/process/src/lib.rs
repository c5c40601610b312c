//! What every mortar process sets up first: its log and its fail points;
//! and what one process knows of another.

pub mod statedump;
pub mod status;

/// The `mortar` program, to start a daemon or a mount with: this one when
/// it is `mortar`, else the one beside it (`mortar-bench` is installed
/// and built beside it), else `mortar` on the PATH.
pub fn mortar_program() -> std::path::PathBuf {
    match std::env::current_exe() {
        Ok(me) if me.file_name().is_some_and(|n| n == "mortar") => me,
        _ => program_beside("mortar"),
    }
}

/// The program `name` installed (or built) beside this one, else `name`
/// as the PATH finds it.
pub fn program_beside(name: &str) -> std::path::PathBuf {
    std::env::current_exe()
        .ok()
        .map(|me| me.with_file_name(name))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| name.into())
}

pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MORTAR_LOG")
        .unwrap_or_else(|_| "info,openraft=warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours for a person at a terminal, plain text in a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

/// Fail points (`FAILPOINTS=name=action;…`, crate `fail`): the crash
/// windows end-to-end tests hit on purpose. A fail point set to `panic`
/// ends the whole process at once, as a crash there would. Only a build
/// with the feature `failpoints` (the tests') has them; any other says
/// it ignores `FAILPOINTS`.
pub fn init_fail_points() -> Option<fail::FailScenario<'static>> {
    std::env::var_os("FAILPOINTS")?;
    if !cfg!(feature = "failpoints") {
        eprintln!("FAILPOINTS ignored: this build has no fail points (they are built with the feature `failpoints`, for the tests)");
        return None;
    }
    let scenario = fail::FailScenario::setup();
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("failpoint") {
            eprintln!("{msg}: crashing here on purpose (FAILPOINTS)");
            std::process::abort();
        }
        default(info);
    }));
    Some(scenario)
}

/// The fields of /proc/PID/stat from field 3 (the state) on: field N
/// (counted from 1, as proc(5) does) is at index N - 3.
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name in parentheses may hold spaces: count from after it.
    let (_, rest) = stat.rsplit_once(") ")?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// When process `pid` started, in clock ticks since boot (field 22 of
/// /proc/PID/stat): with the pid, it names one process for good, where a
/// pid alone may be given to another once the first has exited.
pub fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(22 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_process_start_time_is_read_and_stays() {
        let me = std::process::id();
        let t = super::start_time(me).expect("own start time");
        assert!(t > 0);
        assert_eq!(super::start_time(me), Some(t));
        assert_eq!(super::start_time(u32::MAX), None);
    }
}
