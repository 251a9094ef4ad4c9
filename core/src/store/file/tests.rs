use super::sidecar::flock_holder;
use super::*;
use crate::clock::BootTime;

#[test]
fn flock_holders_are_found_in_proc_locks() {
    let dev = libc::makedev(0, 0x2d);
    let locks = "\
1: POSIX  ADVISORY  WRITE 77 00:2d:5678 0 EOF
2: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF
2: -> FLOCK  ADVISORY  WRITE 99 00:2d:5678 0 EOF
3: FLOCK  ADVISORY  WRITE 555 00:2d:9999 0 EOF
";
    assert_eq!(flock_holder(locks, dev, 5678), Some(1234));
    assert_eq!(flock_holder(locks, dev, 9999), Some(555));
    assert_eq!(flock_holder(locks, dev, 1), None);
    assert_eq!(flock_holder(locks, libc::makedev(8, 1), 5678), None);
    // Only a waiter: nobody to name.
    let waiting = "2: -> FLOCK  ADVISORY  WRITE 99 00:2d:5678 0 EOF\n";
    assert_eq!(flock_holder(waiting, dev, 5678), None);
}

#[test]
fn temporary_file_names() {
    assert!(is_temp_name(".job.0123456789abcdef.tmp"));
    assert!(is_temp_name(".a.b.0123456789ABCDEF.tmp"));
    for not in [
        "job",
        ".job.lock",
        ".0123456789abcdef.tmp",
        ".job.0123456789abcdeg.tmp",
        ".job.0123.tmp",
        "job.0123456789abcdef.tmp",
    ] {
        assert!(!is_temp_name(not), "{not}");
    }
}

#[test]
fn stamps_parse_with_and_without_a_time_namespace() {
    let with = Stamp::parse("b00t 42 time:[4026531834]").unwrap();
    assert_eq!(with.time_namespace.as_deref(), Some("time:[4026531834]"));
    assert_eq!(with.since_boot, Duration::from_nanos(42));
    let old = Stamp::parse("b00t 42").unwrap();
    assert_eq!(old.time_namespace, None);
    for bad in ["", "b00t", "b00t x", "b00t 42 ns extra"] {
        assert_eq!(Stamp::parse(bad), None, "{bad}");
    }
    let now = BootTime {
        boot_id: "b00t".into(),
        time_namespace: "time:[4026531834]".into(),
        since_boot: Duration::from_secs(1),
    };
    assert!(with.same_clock_as(&now));
    assert!(!old.same_clock_as(&now));
    let other = Stamp::parse("b00t 42 time:[4026532177]").unwrap();
    assert!(!other.same_clock_as(&now));
}

/// A waiter drops its watch the moment it sees its grant, and closing an inotify instance
/// waits for the kernel to free its marks (`fsnotify_destroy_group` flushes the mark reaper,
/// an SRCU grace period: 0.2 to 16 ms measured here, issue 23). The close must not hold up the
/// dropping thread (the waiter's acquire, a runtime worker): it runs on the blocking pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
#[allow(clippy::disallowed_methods)] // a bounded wait for another thread, no simulated time
async fn a_dropped_watch_is_closed_off_the_dropping_thread() {
    let dir = tempfile::tempdir().unwrap();
    let watch = watch::FileWatch::new(&dir.path().join("job")).expect("inotify here");
    let closed_on = watch.closed_on.clone();
    let dropped_on = std::thread::current().id();
    drop(watch);
    // Bounded wait for the close to run (it is not timed: it only has to happen).
    for _ in 0..500 {
        if closed_on.get().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let closed_on = *closed_on.get().expect("the watch was closed within 5 s");
    assert_ne!(
        closed_on, dropped_on,
        "closed on the thread that dropped it"
    );
}

/// Outside a runtime there is no pool to hand the close to: it happens in place.
#[test]
fn a_watch_dropped_outside_a_runtime_is_closed_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The stream registers with the runtime's reactor: made inside it, dropped outside it.
    let watch = rt.block_on(async { watch::FileWatch::new(&dir.path().join("job")) });
    let watch = watch.expect("inotify here");
    let closed_on = watch.closed_on.clone();
    drop(watch);
    assert_eq!(closed_on.get(), Some(&std::thread::current().id()));
}

/// The waiter's wake: a replace of the watched object (a `rename(2)` over it) completes
/// `changed` on the first event.
#[tokio::test]
#[allow(clippy::disallowed_methods)] // a hang guard on a kernel event, no simulated time
async fn a_watch_wakes_on_the_replace_of_its_object() {
    use crate::store::{Cond, Store};
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let meta = Meta::default();
    let Put::Written { version, .. } = store
        .put("job", Bytes::from_static(b"a"), Cond::Create, &meta)
        .await
        .unwrap()
    else {
        panic!("created")
    };
    let mut watch = store.watch("job").expect("inotify here");
    let put = store
        .put("job", Bytes::from_static(b"b"), Cond::Match(version), &meta)
        .await
        .unwrap();
    assert!(matches!(put, Put::Written { .. }));
    // A hang guard, not a timed assertion: the event is already queued.
    tokio::time::timeout(Duration::from_secs(10), watch.changed())
        .await
        .expect("woken by the replace");
}
