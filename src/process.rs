//! What every mortar process sets up first: its log and its fail points.

pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MORTAR_LOG")
        .unwrap_or_else(|_| "info,openraft=warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

/// Fail points (`FAILPOINTS=name=action;…`, crate `fail`): the crash
/// windows end-to-end tests hit on purpose. A fail point set to `panic`
/// ends the whole process at once, as a crash there would.
pub fn init_fail_points() -> Option<fail::FailScenario<'static>> {
    std::env::var_os("FAILPOINTS")?;
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
