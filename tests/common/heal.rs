//! What self-heal has left, as `volume heal VOL info` and `volume info`
//! tell it.

use super::*;

/// Number of objects the bricks' heal index names (None if a brick is down).
pub fn heal_pending(c: &Cluster, vol: &str) -> Option<usize> {
    let o = c.cli(&["--json", "volume", "heal", vol, "info"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
    let mut n = 0;
    for b in v["bricks"].as_array()? {
        if b["connected"] != true {
            return None;
        }
        n += b["entries"].as_array()?.len();
    }
    Some(n)
}

/// Waits until self-heal has nothing left, by itself.
pub fn wait_healed(c: &Cluster, vol: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while heal_pending(c, vol) != Some(0) {
        if Instant::now() > deadline {
            let o = c.cli(&["--json", "volume", "heal", vol, "info"]);
            panic!(
                "timed out waiting for self-heal to finish; heal info says: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the volume's last full heal has completed and nothing is
/// left to heal.
pub fn wait_full_heal(c: &Cluster, vol: &str) {
    wait_for("the full heal to complete", Duration::from_secs(90), || {
        let info: serde_json::Value =
            serde_json::from_str(&c.ok(&["--json", "volume", "info", vol])).unwrap();
        let done = info[0]["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["kind"] == "HealFull" && t["status"] == "Completed");
        done && heal_pending(c, vol) == Some(0)
    });
}
