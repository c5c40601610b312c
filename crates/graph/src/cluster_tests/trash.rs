//! The trash's sweep (`features::trash::sweep`) over a replicated volume:
//! what goes by age, what goes by size (oldest first), and the
//! directories left empty.

use crate::testkit::rig;
use mortar_core::options::ShareOrSize;
use mortar_core::Gfid;
use mortar_xlators::features::trash::sweep::{sweep, Swept};
use std::time::{Duration, UNIX_EPOCH};

#[tokio::test]
async fn the_sweep_removes_the_old_then_the_oldest_past_the_size_and_empty_directories() {
    let r = rig(1, 2);
    let trash = r.mkdir(Gfid::ROOT, ".trashcan").await.unwrap();
    let a = r.mkdir(trash, "a").await.unwrap();
    let b = r.mkdir(a, "b").await.unwrap();
    // Went at 01:00, 02:00, 03:00 and 04:00 on 2020-01-01, 100 bytes each;
    // one without a time in its name (its ctime: now, the newest).
    for (dir, name) in [
        (a, "f_2020-01-01-010000"),
        (b, "g_2020-01-01-020000"),
        (a, "h_2020-01-01-030000_2"),
        (trash, "i_2020-01-01-040000"),
        (trash, "put-here-by-hand"),
    ] {
        r.create(dir, name, &[7u8; 100]).await.unwrap();
    }
    let at = |h: u64| UNIX_EPOCH + Duration::from_secs(1_577_836_800 + h * 3600);
    // At 05:30, kept 3 hours: f and g are too old; b is left empty.
    let s = sweep(
        r.graph.top(),
        at(5) + Duration::from_secs(1800),
        Duration::from_secs(3 * 3600),
        ShareOrSize::Bytes(0),
    )
    .await
    .unwrap();
    assert_eq!(
        s,
        Swept {
            aged: (2, 200),
            over: (0, 0),
            kept: (3, 300)
        }
    );
    assert_eq!(r.list(a).await.unwrap(), vec!["h_2020-01-01-030000_2"]);
    assert!(r.list(trash).await.unwrap().contains(&"a".to_string()));
    assert!(
        !r.list(a).await.unwrap().contains(&"b".to_string()),
        "b left empty goes"
    );
    // At most 150 bytes: the oldest go first (h, then i); the one by hand
    // (now) stays. a is left empty.
    let s = sweep(
        r.graph.top(),
        at(6),
        Duration::ZERO,
        ShareOrSize::Bytes(150),
    )
    .await
    .unwrap();
    assert_eq!(s.over, (2, 200));
    assert_eq!(r.list(trash).await.unwrap(), vec!["put-here-by-hand"]);
    // No trash at all: nothing to do.
    let empty = rig(1, 2);
    let s = sweep(
        empty.graph.top(),
        at(6),
        Duration::ZERO,
        ShareOrSize::Bytes(1),
    )
    .await
    .unwrap();
    assert_eq!(s, Swept::default());
}
