//! What a client keeps of what it has seen.

use std::time::Duration;

use super::*;
use crate::protocol::testing::*;
use crate::record::RecordState;
use crate::store::Object;

fn stamped(record: &Record, g: u64, modified: f64, server: f64) -> Get {
    Get::Found(Object {
        last_modified: Some(wall(modified)),
        server_now: Some(wall(server)),
        ..object(&record.to_bytes(), g)
    })
}

#[test]
fn unix_ms_counts_milliseconds_and_clamps_times_before_1970() {
    let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_234_567);
    assert_eq!(unix_ms(t), 1_234_567);
    assert_eq!(unix_ms(SystemTime::UNIX_EPOCH - Duration::from_secs(5)), 0);
}

#[test]
fn a_view_keeps_the_first_sighting_of_a_version_and_the_latest_store_clock() {
    let r = record("a", 7, RecordState::Held);
    let mut v = View::default();
    assert_eq!((v.record(), v.version()), (None, None));
    v.absorb(stamped(&r, 1, 0.5, 1.0), at(1.0));
    assert_eq!(v.record(), Some(&r));
    assert_eq!(v.version(), Some(&version(1)));
    assert_eq!(v.server_now, Some((wall(1.0), at(1.0))));
    // The same version again: still first seen at 1 s (the observation rule counts from there),
    // while the store's clock moves on.
    v.absorb(stamped(&r, 1, 0.5, 4.0), at(4.0));
    assert_eq!(
        v.seen,
        Some(Seen::Present {
            version: version(1),
            parsed: Parsed::Valid(r.clone()),
            last_modified: Some(wall(0.5)),
            first_seen: at(1.0),
        })
    );
    assert_eq!(v.server_now, Some((wall(4.0), at(4.0))));
    // An unchanged answer to `if_none_match`: only the store's clock moves.
    v.absorb(
        Get::NotModified {
            server_now: Some(wall(5.0)),
        },
        at(5.0),
    );
    assert_eq!(v.version(), Some(&version(1)));
    assert_eq!(v.server_now, Some((wall(5.0), at(5.0))));
    // A new version is first seen now.
    let next = record("b", 8, RecordState::Held);
    v.absorb(stamped(&next, 2, 5.5, 6.0), at(6.0));
    assert!(matches!(
        &v.seen,
        Some(Seen::Present { version: seen, first_seen, .. })
            if *seen == version(2) && *first_seen == at(6.0)
    ));
    // Gone.
    v.absorb(
        Get::NotFound {
            server_now: Some(wall(7.0)),
        },
        at(7.0),
    );
    assert_eq!(v.seen, Some(Seen::Absent));
    assert_eq!((v.record(), v.version()), (None, None));
    assert_eq!(v.server_now, Some((wall(7.0), at(7.0))));
}

#[test]
fn a_corrupt_record_has_a_version_but_no_record() {
    let mut v = View::default();
    v.absorb(found_corrupt(3), at(1.0));
    assert_eq!(v.version(), Some(&version(3)));
    assert_eq!(v.record(), None);
    assert_eq!(v.prev(), vec![]);
}

#[test]
fn a_known_view_is_the_released_record_first_seen_now() {
    let r = record("a", 7, RecordState::Released);
    let v = View::known(version(4), r.clone(), at(2.0));
    assert_eq!(
        v,
        View {
            seen: Some(Seen::Present {
                version: version(4),
                parsed: Parsed::Valid(r.clone()),
                last_modified: None,
                first_seen: at(2.0),
            }),
            server_now: None,
            probe: None,
            stamp: None,
            date_refused: false,
        }
    );
    assert_eq!(v.prev(), r.prev_for_successor());
    assert_eq!(v.prev()[0].write.as_deref(), Some("w-a-7"));
}

#[test]
fn the_time_epoch_is_the_later_of_the_stores_clock_and_ours_in_milliseconds() {
    let mut v = View::default();
    assert_eq!(v.time_epoch(wall(0.0)), unix_ms(wall(0.0)));
    v.server_now = Some((wall(10.0), at(0.0)));
    assert_eq!(v.time_epoch(wall(0.0)), unix_ms(wall(10.0)));
    assert_eq!(v.time_epoch(wall(20.0)), unix_ms(wall(20.0)));
}
