//! The wall clock, as every layer records it: whole seconds since the
//! Unix epoch (0 if the clock is set before it).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in Unix seconds.
pub fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
