//! The conformance suite on the file store, plus what only the file store has: atomic
//! replacement, sidecar names, directory errors.

use crate::conformance;

use lease::store::file::FileStore;
use lease::store::{Cond, Get, GetOptions, Meta, Store};
use lease::ErrorKind;

fn store() -> (tempfile::TempDir, FileStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    (dir, store)
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let (_dir, s) = store();
            conformance::$name(conformance::dyn_store(s), "t").await;
        }
    )*};
}

conformance::every_case!(suite);

#[tokio::test]
async fn leaves_no_temporary_files() {
    let (dir, s) = store();
    let v = written(
        s.put("a/b", "1".into(), Cond::Create, &Meta::new())
            .await
            .unwrap(),
    );
    s.put("a/b", "2".into(), Cond::Match(v), &Meta::new())
        .await
        .unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path().join("a"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut names = names;
    names.sort();
    // Nor the sidecar lock file: it goes with the write that used it (issue 28).
    assert_eq!(names, vec!["b".to_string()]);
}

/// Every file and folder under `dir`, dotfiles included, as paths relative to it.
fn everything_under(dir: &std::path::Path) -> Vec<String> {
    let mut found = vec![];
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            found.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() {
                todo.push(path);
            }
        }
    }
    found.sort();
    found
}

fn written(put: lease::store::Put) -> lease::store::Version {
    match put {
        lease::store::Put::Written { version, .. } => version,
        other => panic!("not written: {other:?}"),
    }
}

/// Sidecar lock files and the folders that objects leave empty are removed (issue 28): a
/// store's directory used to fill with `.NAME.lock` files and empty `NAME.q/` folders.
#[tokio::test]
async fn no_lock_files_or_empty_folders_are_left_behind() {
    let (dir, s) = store();
    let s = std::sync::Arc::new(s);
    let client = lease::Client::new(s.clone());
    let held = client
        .acquire("job", &lease::LeaseOptions::new(Duration::from_secs(30)))
        .await
        .unwrap();
    held.renew().await.unwrap();
    held.release().await.unwrap();
    assert_eq!(everything_under(dir.path()), ["job"]);
    // A queued lock's session object (`KEY.q/ID`), used once and deleted.
    let v = written(
        s.put("job.q/abc", "1".into(), Cond::Create, &Meta::new())
            .await
            .unwrap(),
    );
    let v = written(
        s.put("job.q/abc", "2".into(), Cond::Match(v), &Meta::new())
            .await
            .unwrap(),
    );
    s.delete("job.q/abc", &v).await.unwrap();
    // Nested folders go as far up as they are empty, never the store's own directory.
    let v = written(
        s.put("a/b/x", "1".into(), Cond::Create, &Meta::new())
            .await
            .unwrap(),
    );
    s.put("a/keep", "1".into(), Cond::Create, &Meta::new())
        .await
        .unwrap();
    s.delete("a/b/x", &v).await.unwrap();
    assert_eq!(everything_under(dir.path()), ["a", "a/keep", "job"]);
    let v = written(
        s.put("top", "1".into(), Cond::Create, &Meta::new())
            .await
            .unwrap(),
    );
    s.delete("top", &v).await.unwrap();
    assert!(dir.path().is_dir());
}

/// Set when this test binary runs as one process of the hammer below.
const HAMMER_DIR: &str = "LEASE_TEST_HAMMER_DIR";
const HAMMER_ROUNDS: u32 = 60;

/// Removing lock files and empty folders must not cost mutual exclusion (the classic race:
/// unlinking a lock file another process has open and is about to lock). Four processes each
/// increment one counter by read + conditional write, and create and delete objects in one
/// folder that the others remove when empty: every increment that reported success is in the
/// counter (two writers inside one object's lock at once would lose one), no create fails
/// because its folder was removed under it, and nothing is left but the counter.
#[test]
fn lock_files_and_folders_removed_under_concurrent_processes_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let children: Vec<_> = (0..4)
        .map(|i| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "store_file::hammer_process",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(HAMMER_DIR, dir.path())
                .env("LEASE_TEST_HAMMER_ID", i.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut won = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "a hammer process failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        won += stdout
            .lines()
            .find_map(|l| l.split_once("HAMMER: won ").map(|(_, n)| n))
            .unwrap_or_else(|| panic!("no count from a hammer process:\n{stdout}"))
            .trim()
            .parse::<u32>()
            .unwrap();
    }
    assert_eq!(won, 4 * HAMMER_ROUNDS);
    let counter: u32 = std::fs::read_to_string(dir.path().join("counter"))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        counter, won,
        "increments were lost: mutual exclusion failed"
    );
    assert_eq!(everything_under(dir.path()), ["counter"]);
}

/// One process of the hammer above; runs only when that test starts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper process, started by lock_files_and_folders_removed_under_concurrent_processes_lose_nothing"]
async fn hammer_process() {
    let dir = std::env::var_os(HAMMER_DIR).expect("started by the parent test");
    let id = std::env::var("LEASE_TEST_HAMMER_ID").unwrap();
    let s = FileStore::open(dir).unwrap();
    let mut won = 0;
    for round in 0..HAMMER_ROUNDS {
        loop {
            let (value, cond) = match s.get("counter", GetOptions::default()).await.unwrap() {
                Get::Found(o) => {
                    let n: u32 = std::str::from_utf8(&o.bytes.unwrap())
                        .unwrap()
                        .parse()
                        .unwrap();
                    (n, Cond::Match(o.version))
                }
                _ => (0, Cond::Create),
            };
            match s
                .put(
                    "counter",
                    (value + 1).to_string().into(),
                    cond,
                    &Meta::new(),
                )
                .await
            {
                Ok(lease::store::Put::Written { .. }) => {
                    won += 1;
                    break;
                }
                Ok(lease::store::Put::ConditionFailed) => {}
                // A lock held past the bound on a loaded machine: nothing was changed.
                Err(e) if e.message().contains("nothing was changed") => {}
                Err(e) => panic!("increment failed: {e}"),
            }
        }
        let key = format!("q/{id}-{round}");
        let v = written(
            s.put(&key, "x".into(), Cond::Create, &Meta::new())
                .await
                .unwrap(),
        );
        let v = written(
            s.put(&key, "y".into(), Cond::Match(v), &Meta::new())
                .await
                .unwrap(),
        );
        assert!(matches!(
            s.delete(&key, &v).await.unwrap(),
            lease::store::Delete::Deleted
        ));
    }
    println!("HAMMER: won {won}");
}

#[tokio::test]
async fn bad_names_and_directories_are_typed_errors() {
    let (dir, s) = store();
    for bad in [".hidden", "a/.b", &"x".repeat(201)] {
        let e = s.get(bad, GetOptions::default()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{bad}: {e}");
    }
    // A lease name that uses another lease's file as a directory.
    s.put("file", "x".into(), Cond::Create, &Meta::new())
        .await
        .unwrap();
    let e = s
        .put("file/child", "x".into(), Cond::Create, &Meta::new())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains("file"), "{e}");
    // A directory where a lease should be.
    std::fs::create_dir(dir.path().join("adir")).unwrap();
    let e = s.get("adir", GetOptions::default()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    // Relative and non-directory roots. (A missing root opens: its first write creates it.)
    let missing = FileStore::open(dir.path().join("missing/dir")).unwrap();
    assert!(!dir.path().join("missing").exists());
    missing
        .put("gc", "x".into(), Cond::Create, &Meta::new())
        .await
        .unwrap();
    assert!(dir.path().join("missing/dir/gc").is_file());
    assert_eq!(
        FileStore::open("relative/dir").unwrap_err().kind(),
        ErrorKind::Invalid
    );
    assert_eq!(
        FileStore::open(dir.path().join("file")).unwrap_err().kind(),
        ErrorKind::Store
    );
}

#[tokio::test]
async fn unreadable_directory_is_a_store_error_naming_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    // root ignores permissions; the check only means something for other users.
    let is_root = unsafe { libc::geteuid() } == 0;
    let result = FileStore::open(&locked);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    if is_root {
        assert!(result.is_ok());
        // As root, use a path under a regular file instead: the OS refuses it for everyone.
        std::fs::write(dir.path().join("f"), "x").unwrap();
        let e = FileStore::open(dir.path().join("f").join("sub")).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Store | ErrorKind::Invalid),
            "{e}"
        );
        assert!(e.to_string().contains("/f/sub"), "{e}");
    } else {
        let e = result.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store);
        assert!(
            e.to_string().contains("locked") && e.to_string().contains("permission"),
            "{e}"
        );
    }
}

#[tokio::test]
async fn objects_are_plain_files() {
    let (dir, s) = store();
    s.put("plain", "hello".into(), Cond::Create, &Meta::new())
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("plain")).unwrap(),
        "hello"
    );
    // An edit by hand is a new version.
    let before = match s.get("plain", GetOptions::default()).await.unwrap() {
        Get::Found(o) => o.version,
        _ => panic!(),
    };
    std::fs::write(dir.path().join("plain"), "edited").unwrap();
    match s
        .get(
            "plain",
            GetOptions {
                if_none_match: Some(&before),
                max_len: None,
            },
        )
        .await
        .unwrap()
    {
        Get::Found(o) => assert_eq!(o.bytes.unwrap(), "edited"),
        other => panic!("{other:?}"),
    }
}

/// The real clocks, with the wall clock stepped by `offset` (NTP, a resumed VM).
#[derive(Debug)]
struct SteppedWall {
    offset: Duration,
}

impl lease::clock::Clock for SteppedWall {
    fn now(&self) -> lease::clock::Instant {
        lease::clock::SystemClock.now()
    }
    fn wall(&self) -> std::time::SystemTime {
        lease::clock::SystemClock.wall() + self.offset
    }
    fn sleep_until(
        &self,
        deadline: lease::clock::Instant,
    ) -> futures::future::BoxFuture<'static, ()> {
        lease::clock::SystemClock.sleep_until(deadline)
    }
    fn boot_time(&self) -> Option<lease::clock::BootTime> {
        lease::clock::SystemClock.boot_time()
    }
}

use lease::clock::Clock as _;
use std::sync::Arc;
use std::time::Duration;

fn remove_stamp(path: &std::path::Path) {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let name = std::ffi::CString::new("user.lease.stamp").unwrap();
    // SAFETY: both are valid NUL-terminated strings.
    assert_eq!(unsafe { libc::removexattr(p.as_ptr(), name.as_ptr()) }, 0);
}

#[tokio::test]
async fn a_wall_clock_step_does_not_expire_a_live_lease() {
    let dir = tempfile::tempdir().unwrap();
    let holder = lease::Client::new(Arc::new(FileStore::open(dir.path()).unwrap()));
    // A long ttl, so its request timeout (ttl/6) outlasts a slow file system: with a 5 s ttl
    // the try of `other` below failed twice after 2.2 s while a release build ran beside it
    // (2026-11-27; the error was not kept, and 70 runs under CPU or fsync load since did not
    // fail). Its error is now printed.
    let opts = lease::LeaseOptions::new(Duration::from_secs(30))
        .store_clock_rule(true)
        .observation_rule(false);
    let held = holder.acquire("job", &opts).await.unwrap();

    // Another process whose wall clock has jumped an hour ahead.
    let stepped: Arc<dyn lease::clock::Clock> = Arc::new(SteppedWall {
        offset: Duration::from_secs(3600),
    });
    let store = FileStore::open_with_clock(dir.path(), stepped.clone()).unwrap();
    let waiter = lease::Client::builder(Arc::new(store))
        .clock(stepped)
        .build();
    assert!(
        waiter.try_acquire("job", &opts).await.unwrap().is_none(),
        "a wall-clock step let a waiter take a live lease"
    );
    let s = waiter.status("job").await.unwrap();
    assert_eq!(s.state, lease::LeaseState::Held);
    assert!(s.expires_in.unwrap() > Duration::from_secs(3));

    // Negative control: without its boot stamp (a file system without extended attributes,
    // say) the record falls back to mtime and the wall clock, and the step fools the rule.
    held.renew().await.unwrap(); // the renewer may not touch the file while we look
    held.release().await.unwrap();
    let held = holder.acquire("other", &opts).await.unwrap();
    remove_stamp(&dir.path().join("other"));
    let stolen = waiter
        .try_acquire("other", &opts)
        .await
        .unwrap_or_else(|e| panic!("the try failed: {e} ({:?})", e.kind()));
    assert!(
        stolen.is_some(),
        "without the stamp the step should fool the store-clock rule"
    );
    drop(held);
}

#[tokio::test]
async fn store_times_use_the_boot_clock_within_a_boot() {
    let (dir, s) = store();
    s.put("k", "x".into(), Cond::Create, &Meta::new())
        .await
        .unwrap();
    let boot = lease::clock::SystemClock.boot_time().unwrap();
    match s.get("k", GetOptions::default()).await.unwrap() {
        Get::Found(o) => {
            let modified = o
                .last_modified
                .unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            assert!(
                modified <= boot.since_boot,
                "{modified:?} is not on the boot clock"
            );
            let now = o
                .server_now
                .unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            assert!(now >= modified && now - modified < Duration::from_secs(60));
        }
        other => panic!("{other:?}"),
    }
    // Written by hand (no stamp): mtime and the wall clock.
    std::fs::write(dir.path().join("hand"), "x").unwrap();
    match s.get("hand", GetOptions::default()).await.unwrap() {
        Get::Found(o) => {
            let modified = o
                .last_modified
                .unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            assert!(
                modified > Duration::from_secs(1_700_000_000),
                "{modified:?} is not a wall time"
            );
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Time namespaces (issue 11 item 5): a boot-clock stamp written in one time namespace must not
// be read on another namespace's CLOCK_BOOTTIME (same boot id, shifted clock).

/// Set when this test binary runs as the waiter of `a_waiter_in_another_time_namespace_...`.
const TIMENS_WAITER_DIR: &str = "LEASE_TEST_TIMENS_WAITER_DIR";
const TIMENS_PARENT_NS: &str = "LEASE_TEST_TIMENS_PARENT_NS";

fn time_namespace() -> String {
    std::fs::read_link("/proc/self/ns/time")
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// Whether `unshare --time` works here; `Err` says why not.
fn can_unshare_time() -> Result<(), String> {
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root: `unshare --time` needs CAP_SYS_ADMIN".into());
    }
    match std::process::Command::new("unshare")
        .args(["--time", "--boottime", "+100000", "true"])
        .output()
    {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "`unshare --time` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run unshare: {e}")),
    }
}

/// Skip with a clear message, except under CI=true where a skip would hide a regression.
fn skip_or_fail(test: &str, why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} cannot run here (CI=true forbids skipping): {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_another_time_namespace_does_not_take_a_live_lease() {
    const TEST: &str = "a_waiter_in_another_time_namespace_does_not_take_a_live_lease";
    if let Err(why) = can_unshare_time() {
        return skip_or_fail(TEST, &why);
    }
    let dir = tempfile::tempdir().unwrap();
    let holder = lease::Client::new(Arc::new(FileStore::open(dir.path()).unwrap()));
    let opts = lease::LeaseOptions::new(Duration::from_secs(30));
    let held = holder.acquire("job", &opts).await.unwrap();

    // The waiter: this test binary again, in a new time namespace whose CLOCK_BOOTTIME runs
    // 100000 s ahead (as after a checkpoint-restore), same boot id.
    let out = tokio::process::Command::new("unshare")
        .args(["--time", "--boottime", "+100000"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "store_file::timens_waiter_process",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(TIMENS_WAITER_DIR, dir.path())
        .env(TIMENS_PARENT_NS, time_namespace())
        .output()
        .await
        .unwrap();
    let report = format!(
        "waiter stdout:\n{}\nwaiter stderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the waiter in another time namespace failed ({}):\n{report}",
        out.status
    );
    assert!(
        report.contains("WAITER: held"),
        "the waiter did not run:\n{report}"
    );
    assert!(held.ensure_held(Duration::from_secs(20)).is_ok());
    held.release().await.unwrap();
}

/// The waiter process of the test above; runs only when that test starts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper process, started by a_waiter_in_another_time_namespace_does_not_take_a_live_lease"]
async fn timens_waiter_process() {
    let dir = std::env::var_os(TIMENS_WAITER_DIR).expect("started by the parent test");
    let parent_ns = std::env::var(TIMENS_PARENT_NS).unwrap();
    // The test is only meaningful in another namespace, on a clock far from the holder's.
    assert_ne!(time_namespace(), parent_ns, "not in a new time namespace");
    let boot = lease::clock::SystemClock.boot_time().unwrap();
    assert!(
        boot.since_boot > Duration::from_secs(100_000),
        "CLOCK_BOOTTIME is not shifted: {boot:?}"
    );
    let waiter = lease::Client::new(Arc::new(FileStore::open(dir).unwrap()));
    let opts = lease::LeaseOptions::new(Duration::from_secs(30));
    let status = waiter.status("job").await.unwrap();
    println!("WAITER: status {:?}", status.state);
    match waiter.try_acquire("job", &opts).await.unwrap() {
        None => println!("WAITER: held"),
        Some(l) => {
            let _ = l.release().await;
            panic!("a waiter in another time namespace took a live 30 s lease at once")
        }
    }
    assert_eq!(status.state, lease::LeaseState::Held);
}

fn set_stamp(path: &std::path::Path, value: &str) {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let name = std::ffi::CString::new("user.lease.stamp").unwrap();
    // SAFETY: valid NUL-terminated strings; value is valid for its length.
    let rc = unsafe {
        libc::setxattr(
            p.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

fn is_wall_time(t: std::time::SystemTime) -> bool {
    t.duration_since(std::time::UNIX_EPOCH).unwrap() > Duration::from_secs(1_700_000_000)
}

#[tokio::test]
async fn stamps_without_or_from_another_time_namespace_fall_back_to_mtime() {
    let (dir, s) = store();
    let boot = lease::clock::SystemClock.boot_time().unwrap();
    let last_modified = |s: FileStore| async move {
        match s.get("k", GetOptions::default()).await.unwrap() {
            Get::Found(o) => (o.last_modified.unwrap(), o.server_now.unwrap()),
            other => panic!("{other:?}"),
        }
    };
    s.put("k", "x".into(), Cond::Create, &Meta::new())
        .await
        .unwrap();
    let (modified, _) = last_modified(s.clone()).await;
    assert!(
        !is_wall_time(modified),
        "our own stamp is on the boot clock"
    );

    // A stamp written before stamps named their time namespace: which clock it was read on is
    // unknown, so it is not trusted.
    let path = dir.path().join("k");
    let nanos = boot.since_boot.as_nanos();
    set_stamp(&path, &format!("{} {nanos}", boot.boot_id));
    let (modified, now) = last_modified(s.clone()).await;
    assert!(is_wall_time(modified) && is_wall_time(now), "{modified:?}");

    // A stamp from another time namespace of this boot.
    set_stamp(&path, &format!("{} {nanos} time:[1]", boot.boot_id));
    let (modified, now) = last_modified(s.clone()).await;
    assert!(is_wall_time(modified) && is_wall_time(now), "{modified:?}");

    // Garbage is ignored the same way.
    set_stamp(&path, "garbage");
    let (modified, _) = last_modified(s.clone()).await;
    assert!(is_wall_time(modified), "{modified:?}");
}

// ---------------------------------------------------------------------------------------------
// The sidecar lock (issue 11 item 8): a process stopped inside it must not block writers
// forever, nor make each waiting call hold a thread; temp files of killed writers are removed.

/// The name of the threads of the runtime whose threads a test counts (at most 15 bytes, as
/// `/proc/self/task/*/comm` keeps them).
const COUNTED_RUNTIME: &str = "counted-rt";

/// The threads of this process named `COUNTED_RUNTIME`: the other tests of this binary run
/// their own runtimes at the same time.
fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == COUNTED_RUNTIME)
        .count()
}

/// A `flock(1)` process holding `path`'s lock, stopped with SIGSTOP; killed when dropped.
struct StoppedLockHolder {
    child: std::process::Child,
}

impl StoppedLockHolder {
    fn start(path: &std::path::Path) -> Self {
        // -o: the lock stays with flock itself, not with the `sleep` it runs. Its own process
        // group, so that dropping the holder ends the `sleep` too: left running, it kept every
        // descriptor it inherited (a lock file of whoever ran the tests) for two minutes.
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new("flock")
            .arg("-o")
            .arg(path)
            .args(["sleep", "120"])
            .process_group(0)
            .spawn()
            .expect("flock(1) is needed for this test");
        let holder = StoppedLockHolder { child };
        // Wait (bounded) until the lock is taken.
        let probe = std::fs::File::open(path).unwrap();
        let mut held = false;
        for _ in 0..500 {
            match probe.try_lock() {
                Ok(()) => probe.unlock().unwrap(),
                Err(std::fs::TryLockError::WouldBlock) => {
                    held = true;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(held, "flock did not take the lock within 5 s");
        // SAFETY: signalling our own child.
        assert_eq!(
            unsafe { libc::kill(holder.child.id() as i32, libc::SIGSTOP) },
            0
        );
        // A signal is only sent by kill(2): wait (bounded) until the holder is seen stopped, as
        // the store will look for it, or a loaded machine may still show it running.
        let stat = format!("/proc/{}/stat", holder.child.id());
        let stopped = (0..500).any(|_| {
            let state = std::fs::read_to_string(&stat).unwrap_or_default();
            let seen = state
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('T'));
            if !seen {
                std::thread::sleep(Duration::from_millis(10));
            }
            seen
        });
        assert!(stopped, "flock was not seen stopped within 5 s");
        holder
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for StoppedLockHolder {
    fn drop(&mut self) {
        // SAFETY: signalling our own child's process group (flock and its `sleep`).
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

#[test]
fn a_stopped_lock_holder_makes_writes_unavailable_within_a_bound_without_threads() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(COUNTED_RUNTIME)
        .enable_all()
        .build()
        .unwrap()
        .block_on(stopped_lock_holder())
}

async fn stopped_lock_holder() {
    let (dir, s) = store();
    let v = written(
        s.put("k", "1".into(), Cond::Create, &Meta::new())
            .await
            .unwrap(),
    );
    let lock_file = dir.path().join(".k.lock");
    std::fs::write(&lock_file, "").unwrap();
    let holder = StoppedLockHolder::start(&lock_file);

    let before = thread_count();
    const CALLS: usize = 24;
    let started = lease::clock::SystemClock.now();
    let mut calls = vec![];
    for i in 0..CALLS {
        let s = s.clone();
        let v = v.clone();
        calls.push(tokio::spawn(async move {
            let call = async {
                if i == 0 {
                    s.delete("k", &v).await.map(|_| ())
                } else {
                    s.put("k", "2".into(), Cond::Match(v), &Meta::new())
                        .await
                        .map(|_| ())
                }
            };
            // Far beyond the store's bound: on expiry the call hung.
            tokio::select! {
                r = call => Ok(r),
                _ = lease::clock::SystemClock.sleep(Duration::from_secs(10)) => Err(()),
            }
        }));
        // One at a time: a thread per waiting call shows as growth, not a burst of calls
        // starting together (which a blocking pool serves with several threads, waiting or not).
        lease::clock::SystemClock
            .sleep(Duration::from_millis(20))
            .await;
    }
    // All are waiting now: the first gives up after the store's bound (1 s).
    let during = thread_count();
    eprintln!("threads of the runtime: {before} before, {during} while {CALLS} calls waited");
    assert!(
        during <= before + 4,
        "{CALLS} waiting calls grew the threads from {before} to {during}"
    );
    for (i, call) in calls.into_iter().enumerate() {
        let result = call.await.unwrap();
        let e = match result {
            Ok(Err(e)) => e,
            Ok(Ok(())) => panic!("a write went through a held lock"),
            Err(_) => panic!("a write waited 10 s for a stopped lock holder"),
        };
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains(&lock_file.display().to_string())
                && msg.contains("held by another process")
                && msg.contains(&format!("pid {}", holder.pid()))
                && msg.contains("stopped"),
            "unclear error: {msg}"
        );
        if i == 0 {
            eprintln!("the error: {msg}");
        }
    }
    let waited = lease::clock::SystemClock.now() - started;
    assert!(
        waited < Duration::from_secs(5),
        "the lock wait is not bounded: {waited:?}"
    );
    // Reads never wait for the lock.
    assert!(matches!(
        s.get("k", GetOptions::default()).await.unwrap(),
        Get::Found(_)
    ));
    // Once the holder is gone, writes go through.
    drop(holder);
    assert!(matches!(
        s.put("k", "2".into(), Cond::Match(v), &Meta::new())
            .await
            .unwrap(),
        lease::store::Put::Written { .. }
    ));
}

fn set_age(path: &std::path::Path, age: Duration) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(lease::clock::SystemClock.wall() - age)
        .unwrap();
}

#[tokio::test]
async fn stale_temporary_files_are_removed_and_live_ones_kept() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("d");
    std::fs::create_dir(&d).unwrap();
    let hour = Duration::from_secs(3600);
    // Left by a writer killed mid-write an hour ago.
    let stale = d.join(".a.0123456789abcdef.tmp");
    std::fs::write(&stale, "torn").unwrap();
    set_age(&stale, hour);
    // Being written right now.
    let fresh = d.join(".a.fedcba9876543210.tmp");
    std::fs::write(&fresh, "new").unwrap();
    // Old, but its writer (stopped, say) still holds its lock.
    let in_use = d.join(".b.00000000000000aa.tmp");
    std::fs::write(&in_use, "slow").unwrap();
    set_age(&in_use, hour);
    let in_use_lock = std::fs::File::open(&in_use).unwrap();
    in_use_lock.lock().unwrap();
    // Not temporary files of this store.
    for other in [".c.lock", "notes.tmp", ".x.tmp", ".y.0123.tmp"] {
        std::fs::write(d.join(other), "").unwrap();
        set_age(&d.join(other), hour);
    }

    let s = FileStore::open(dir.path()).unwrap();
    // Reading does not clean up ...
    s.get("d/a", GetOptions::default()).await.unwrap();
    assert!(stale.exists());
    // ... a write in the directory does.
    s.put("d/a", "1".into(), Cond::Create, &Meta::new())
        .await
        .unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ".a.fedcba9876543210.tmp",
            ".b.00000000000000aa.tmp",
            ".c.lock",
            ".x.tmp",
            ".y.0123.tmp",
            "a",
            "notes.tmp"
        ]
    );
    drop(in_use_lock);
}

/// Many clients of one process writing one object queue on its lock file: when one call waits
/// out the bound, it says the holder is another call of this very process, not another process
/// (seen with a thousand participants of one queued lock in one process).
#[tokio::test]
async fn a_lock_held_within_this_process_is_named_as_such() {
    use std::os::fd::AsRawFd;
    let (dir, s) = store();
    let s = s.with_lock_wait(Duration::from_millis(100));
    let v = written(
        s.put("k", "1".into(), Cond::Create, &Meta::new())
            .await
            .unwrap(),
    );
    let lock_file = dir.path().join(".k.lock");
    let held = std::fs::File::create(&lock_file).unwrap();
    // SAFETY: flock(2) on a file this test owns; released when `held` is closed.
    assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
    let e = s
        .put("k", "2".into(), Cond::Match(v), &Meta::new())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!(
            "held by another call of this process (pid {})",
            std::process::id()
        )),
        "unclear error: {msg}"
    );
    drop(held);
}

/// A yield asked from the holder's own process reaches it at once, not at its next renewal (a
/// wake hint to a recipient of this process used to be skipped: a grant's write wakes its local
/// waiters directly, but nothing woke a local holder for a yield request). On the file store
/// (wake hints are for stores shared with other processes), in real time: ttl 30 s, so the
/// holder's next renewal is 10 s away; told well before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods)] // real time: the file store's holder renews on it
async fn a_yield_request_from_the_holders_own_process_reaches_it_before_its_next_renewal() {
    let dir = tempfile::tempdir().unwrap();
    let (client, key) =
        lease::Client::for_url(&format!("file://{}/job", dir.path().display())).unwrap();
    let opts = lease::LeaseOptions::new(std::time::Duration::from_secs(30)).queue();
    let held = client.acquire(&key, &opts).await.unwrap();
    let ask = lease::YieldAsk {
        by: "ops".into(),
        to: None,
        reason: None,
    };
    client.ask_yield(&key, ask).await.unwrap().unwrap();
    let told = tokio::time::timeout(std::time::Duration::from_secs(5), held.yield_request())
        .await
        .expect("told at once, not at the next renewal (10 s away)");
    assert_eq!(told.by, "ops");
    held.release().await.unwrap();
}

/// The same for a grant held through a shared session (explicit, and the process's): it
/// keeps its wake-hint registration from its wait, and the session confirms that grant at
/// once instead of at its next confirmation round (10 s away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods)] // real time: the file store's session renews on it
async fn a_yield_request_reaches_a_shared_grant_before_its_sessions_next_confirmation() {
    let dir = tempfile::tempdir().unwrap();
    let (client, key) =
        lease::Client::for_url(&format!("file://{}/job", dir.path().display())).unwrap();
    let ttl = std::time::Duration::from_secs(30);
    let opts = lease::LeaseOptions::new(ttl);
    let session = lease::SharedSession::open(&client, lease::SessionOptions::new(ttl))
        .await
        .unwrap();
    let explicit = session.acquire(&key, &opts).await.unwrap();
    let other = format!("{key}-2");
    let per_process = lease::SharedSession::acquire_on_process_session(&client, &other, &opts)
        .await
        .unwrap();
    for (key, held) in [(&key, &explicit), (&other, &per_process)] {
        let ask = lease::YieldAsk {
            by: "ops".into(),
            to: None,
            reason: None,
        };
        client.ask_yield(key, ask).await.unwrap().unwrap();
        let told = tokio::time::timeout(std::time::Duration::from_secs(5), held.yield_request())
            .await
            .expect("told at once, not at the session's next confirmation (10 s away)");
        assert_eq!(told.by, "ops");
    }
    explicit.release().await.unwrap();
    per_process.release().await.unwrap();
    session.close().await;
}
