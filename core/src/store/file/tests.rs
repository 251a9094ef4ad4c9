use super::sidecar::{flock_holder, proc_locks_holder};
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

/// `/proc/locks` is made a page at a time: a lock taken or let go elsewhere between two pages
/// shifts its lines, and one read can skip the line of a lock held all along. Seen as a flake
/// of `store_file::a_lock_held_within_this_process_is_named_as_such` under a mutation run's
/// load ("held by another process": no holder found). The scenario: a held lock among a few
/// pages of others, while other threads take and let go of locks; every lookup must name it.
/// A bounded loop (at most 2 s).
#[test]
fn a_held_lock_is_found_in_proc_locks_while_other_locks_come_and_go() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let lock = |name: String| {
        let f = std::fs::File::create(dir.path().join(name)).unwrap();
        // SAFETY: flock(2) on a file this test owns.
        assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
        f
    };
    // Enough lines for several pages of /proc/locks (about 80 lines a page).
    let _others: Vec<_> = (0..300).map(|i| lock(format!("held{i}"))).collect();
    let ours = lock("ours".into());
    let meta = ours.metadata().unwrap();
    let stop = AtomicBool::new(false);
    let (found, missed) = std::thread::scope(|s| {
        for t in 0..3 {
            let (dir, stop) = (dir.path(), &stop);
            s.spawn(move || {
                let files: Vec<_> = (0..40)
                    .map(|i| std::fs::File::create(dir.join(format!("churn{t}.{i}"))).unwrap())
                    .collect();
                while !stop.load(Ordering::Relaxed) {
                    for op in [libc::LOCK_EX, libc::LOCK_UN] {
                        for f in &files {
                            // SAFETY: flock(2) on files this test owns.
                            unsafe { libc::flock(f.as_raw_fd(), op) };
                        }
                    }
                }
            });
        }
        #[allow(clippy::disallowed_methods)] // bounds the test's own loop, decides nothing
        let start = std::time::Instant::now();
        let (mut found, mut missed) = (0, 0);
        while found + missed < 500 && start.elapsed() < Duration::from_secs(2) {
            match proc_locks_holder(meta.dev(), meta.ino()) {
                Some(pid) if pid == std::process::id() => found += 1,
                _ => missed += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
        (found, missed)
    });
    assert!(
        found > 0 && missed == 0,
        "{missed} of {} lookups missed a held lock",
        found + missed
    );
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

/// A directory's watch is shared by its waiters and goes with the last of them: a waiter that
/// leaves does not deafen another waiter of the same directory, and a directory watched again
/// after its last waiter left is watched again.
#[tokio::test]
#[allow(clippy::disallowed_methods)] // a hang guard on kernel events, no simulated time
async fn a_directorys_watch_outlives_each_waiter_but_the_last() {
    use crate::store::{Cond, Store};
    let root = tempfile::tempdir().unwrap();
    let store = FileStore::open(root.path()).unwrap();
    let meta = Meta::default();
    let create = |key: &'static str| {
        let (store, meta) = (&store, &meta);
        async move {
            match store
                .put(key, Bytes::from_static(b"a"), Cond::Create, meta)
                .await
            {
                Ok(Put::Written { version, .. }) => version,
                other => panic!("{key} created: {other:?}"),
            }
        }
    };
    let a_version = create("d/a").await;
    let mut a = store.watch("d/a").expect("inotify here");
    let b = store.watch("d/b").expect("inotify here");
    drop(b);
    // a's watch survived b's leaving: a change of a's own object still wakes it.
    store.delete("d/a", &a_version).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), a.changed())
        .await
        .expect("a is woken by its own object's change after b left");
    drop(a);
    // The directory is watched again after its last waiter left.
    let b_version = create("d/b").await;
    let mut c = store.watch("d/b").expect("inotify here");
    store.delete("d/b", &b_version).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), c.changed())
        .await
        .expect("a directory watched again wakes its waiter");
}

/// Every waiter of a process is woken by the kernel, however many there are: the kernel lets
/// a user open only `max_user_instances` inotify instances (128 by default), so an instance per
/// waiter made every waiter past that poll instead, without a word (issue 23). One instance
/// per process holds every watch (up to `max_user_watches`, 8,192 or more).
#[tokio::test]
#[allow(clippy::disallowed_methods)] // a hang guard on kernel events, no simulated time
async fn more_waiters_than_the_kernel_allows_instances_are_each_woken() {
    use crate::store::{Cond, Store};
    let limit: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .map(|s| s.trim().parse().unwrap())
        .unwrap_or(128);
    let count = limit + 20;
    let root = tempfile::tempdir().unwrap();
    let store = FileStore::open(root.path()).unwrap();
    let meta = Meta::default();
    // One object per directory (a watch each), and two waiters on one of them.
    let keys: Vec<String> = (0..count).map(|i| format!("d{i}/job")).collect();
    let mut versions = Vec::new();
    for key in &keys {
        let put = store
            .put(key, Bytes::from_static(b"a"), Cond::Create, &meta)
            .await
            .unwrap();
        let Put::Written { version, .. } = put else {
            panic!("created")
        };
        versions.push(version);
    }
    let mut watches: Vec<_> = keys
        .iter()
        .map(|key| {
            store
                .watch(key)
                .unwrap_or_else(|| panic!("no kernel watch for {key}"))
        })
        .collect();
    let mut twin = store.watch(&keys[0]).expect("a second watch of one object");
    for (key, version) in keys.iter().zip(&versions) {
        store.delete(key, version).await.unwrap();
    }
    for (key, watch) in keys.iter().zip(watches.iter_mut()) {
        // A hang guard, not a timed assertion: the event is already queued.
        tokio::time::timeout(Duration::from_secs(10), watch.changed())
            .await
            .unwrap_or_else(|_| panic!("{key}'s waiter was not woken"));
    }
    tokio::time::timeout(Duration::from_secs(10), twin.changed())
        .await
        .expect("both waiters of one object are woken");
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

#[test]
fn only_the_shared_sessions_directory_may_start_with_a_dot() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path().to_path_buf()).unwrap();
    let sid = "0123456789abcdef0123456789abcdef";
    assert!(store.path_of(&format!(".lease-sessions/{sid}")).is_ok());
    assert!(store
        .path_of(&format!("team-a/.lease-sessions/{sid}"))
        .is_ok());
    for key in [
        ".lease-sessions",
        "a/.lease-sessions",
        ".job.lock",
        ".other/x",
        ".lease-sessions/.x",
    ] {
        let e = store.path_of(key).unwrap_err();
        assert!(e.to_string().contains("reserves names"), "{key}: {e}");
    }
}
