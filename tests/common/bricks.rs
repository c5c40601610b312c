//! A brick process's faults: its pid, a kill it comes back from, a freeze.

use super::*;

/// The pid of brick `i` of a volume.
pub fn brick_pid(c: &Cluster, vol: &str, i: usize) -> u64 {
    brick_pid_now(c, vol, i).expect("the brick runs")
}

/// The pid of brick `i` of a volume, if it runs.
pub fn brick_pid_now(c: &Cluster, vol: &str, i: usize) -> Option<u64> {
    c.volume_status_json(vol)[0]["bricks"][i]["pid"].as_u64()
}

/// Waits until the daemon has started brick `i` again after `old` died.
pub fn wait_brick_restarted(c: &Cluster, vol: &str, i: usize, old: u64) {
    wait_for("the brick to be restarted", Duration::from_secs(20), || {
        brick_pid_now(c, vol, i).is_some_and(|p| p != old)
    });
}

/// Freezes brick `i` until the client's ping timeout declares it down.
pub fn freeze(c: &Cluster, vol: &str, i: usize) -> u64 {
    let pid = brick_pid(c, vol, i);
    ok(&format!("kill -STOP {pid}"));
    pid
}

pub fn thaw(pid: u64) {
    ok(&format!("kill -CONT {pid}"));
}
