//! Where objects go: one rule on every store (memory, file, S3, GCS, Azure) and from every
//! entry point. A fenced key is read like a relative path from the lease's own directory: `x`
//! and `./x` are siblings of the lease, `jobs/x` is below its directory, `../x` goes up (never
//! above the store's root: refused, `Invalid`, naming the key), and a leading `/` is the store's
//! root (the bucket or container; for a file store, the directory it was opened on).
//!
//! Each case writes through a lease and checks, with a plain read of the store from its root,
//! exactly which object was written. The remote stores run against the servers of
//! `scripts/stores.sh` (`LEASE_TEST_S3_MOTO`, `LEASE_TEST_GCS_FAKE`, `LEASE_TEST_AZURE_AZURITE`);
//! under CI each is mandatory, outside CI a missing one is reported loudly and skipped.

use crate::remote;

use std::time::Duration;

use lease::store::{DynStore, Get, GetOptions};
use lease::{Client, ErrorKind, FencingGate, LeaseOptions, LeaseUrl, StoreUrl};
use remote::unique;

/// A store to test: its name, the URL of its root (a file store's directory, a bucket, a
/// container, a memory namespace), and the temporary directory a file store lives in.
struct Root {
    name: &'static str,
    url: String,
    _dir: Option<tempfile::TempDir>,
}

fn roots() -> Vec<Root> {
    let dir = tempfile::tempdir().unwrap();
    let mut out = vec![
        Root {
            name: "file",
            url: format!("file://{}", dir.path().display()),
            _dir: Some(dir),
        },
        Root {
            name: "memory",
            url: format!("memory://{}", unique("where")),
            _dir: None,
        },
    ];
    let remote = [
        ("S3", "moto", "LEASE_TEST_S3_MOTO"),
        ("GCS", "fake-gcs-server", "LEASE_TEST_GCS_FAKE"),
        ("Azure", "azurite", "LEASE_TEST_AZURE_AZURITE"),
    ];
    for (kind, name, var) in remote {
        for (name, url) in remote::servers(kind, &[(name, var)]) {
            out.push(Root {
                name,
                url,
                _dir: None,
            });
        }
    }
    out
}

/// `base` (a store URL, maybe with a query) with `/path` appended before the query.
fn join(base: &str, path: &str) -> String {
    match base.split_once('?') {
        Some((b, q)) => format!("{}/{path}?{q}", b.trim_end_matches('/')),
        None => format!("{}/{path}", base.trim_end_matches('/')),
    }
}

/// A store of its own for `url` (not the process's shared one: each test has its own runtime,
/// and pooled connections must not outlive it).
fn open(url: &str) -> DynStore {
    StoreUrl::parse(url)
        .and_then(|s| s.open_new())
        .unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// What a plain read of `key` (from the store's root) finds: the bytes a fenced write gave it
/// (some stores keep its stamp in the body, which a fenced read takes off), or `None`.
async fn read(store: &DynStore, key: &str) -> Option<Vec<u8>> {
    match store.get(key, GetOptions::default()).await.unwrap() {
        Get::Found(_) => {}
        _ => return None,
    }
    let at_root = Client::new(store.clone());
    let obj = at_root.fenced_get(&format!("/{key}")).await.unwrap()?;
    Some(obj.bytes.to_vec())
}

fn opts() -> LeaseOptions {
    LeaseOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(5))
}

/// The lease `P/a/locks/gc` (P unique to this run, so shared servers keep runs apart) on each
/// store, opened at the store's root: every fenced key form lands where the rule says, and
/// nowhere else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_keys_are_relative_to_the_leases_directory_on_every_store() {
    for root in roots() {
        let name = root.name;
        let p = unique("placement");
        let store = open(&root.url);
        let client = Client::new(store.clone());
        let held = client
            .acquire(&format!("{p}/a/locks/gc"), &opts())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let cases = [
            ("a", format!("{p}/a/locks/a")),
            ("./b", format!("{p}/a/locks/b")),
            ("jobs/c", format!("{p}/a/locks/jobs/c")),
            ("./jobs/../d", format!("{p}/a/locks/d")),
            ("../e", format!("{p}/a/e")),
            ("../../f", format!("{p}/f")),
            (&*format!("/{p}/g"), format!("{p}/g")),
        ];
        for (key, expected) in &cases {
            held.fenced_put(key, key.to_string())
                .await
                .unwrap_or_else(|e| panic!("{name}: fenced_put({key:?}): {e}"));
            assert_eq!(
                read(&store, expected).await.as_deref(),
                Some(key.as_bytes()),
                "{name}: fenced_put({key:?}) did not write {expected:?}"
            );
            // The same key reads back what was written, through the lease.
            let got = held.fenced_get(key).await.unwrap().expect("written");
            assert_eq!(&got.bytes[..], key.as_bytes(), "{name}: {key:?}");
            assert_eq!(
                held.object_url(key).unwrap(),
                client.lease_url(expected),
                "{name}"
            );
        }
        // Nothing at the keys as written, taken from the store's root.
        for stray in ["a", "b", "jobs/c", "d", "e", "g"] {
            assert_eq!(read(&store, stray).await, None, "{name}: {stray:?}");
        }
        // Deletes follow the same rule (where the store has conditional deletes).
        if store.capabilities().conditional_delete {
            assert!(held.fenced_delete("./jobs/c").await.unwrap(), "{name}");
            assert_eq!(read(&store, &format!("{p}/a/locks/jobs/c")).await, None);
        }
        // The lease's own record cannot be overwritten under another spelling.
        let err = held.fenced_put("./gc", "x").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid, "{name}: {err}");
        held.release().await.unwrap();
    }
}

/// Up from the lease's directory stops at the store's root: `Invalid`, naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_above_the_stores_root_is_refused() {
    for root in roots() {
        let name = root.name;
        let p = unique("above");
        let store = open(&root.url);
        let held = Client::new(store.clone())
            .acquire(&format!("{p}/gc"), &opts())
            .await
            .unwrap();
        for key in ["../../x", "../../../x", "/../x", "../a/../../x"] {
            let err = held.fenced_put(key, "no").await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Invalid, "{name}: {key:?}: {err}");
            assert!(
                err.to_string().contains(key),
                "{name}: the error does not name {key:?}: {err}"
            );
            let err = held.fenced_get(key).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Invalid, "{name}: {key:?}: {err}");
        }
        for key in ["", "/", ".", "..", "jobs/", "a//b"] {
            let err = held.fenced_put(key, "no").await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Invalid, "{name}: {key:?}: {err}");
        }
        assert_eq!(read(&store, "x").await, None, "{name}");
        held.release().await.unwrap();
    }
}

/// The same URL code on every store: a lease at `ROOT/P/locks/gc`, opened from its URL (what
/// the CLI, C, Go, Python and Node do), writes `x` beside itself and `../x` one level up.
/// (For a `file://` URL the store is the lease's directory, so `../x` is above its root.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_opened_from_its_url_writes_beside_itself_on_every_store() {
    for root in roots() {
        let name = root.name;
        let p = unique("url");
        let url = join(&root.url, &format!("{p}/locks/gc"));
        let parsed = LeaseUrl::parse(&url).unwrap();
        let client = Client::new(parsed.store.open_new().unwrap());
        let held = client.acquire(&parsed.key, &opts()).await.unwrap();
        assert_eq!(LeaseUrl::parse(held.url()).unwrap(), parsed, "{name}");
        held.fenced_put("x", "beside").await.unwrap();
        held.fenced_put("jobs/y", "below").await.unwrap();
        let top = open(&root.url);
        assert_eq!(
            read(&top, &format!("{p}/locks/x")).await.as_deref(),
            Some(&b"beside"[..]),
            "{name}: x is not beside the lease"
        );
        assert_eq!(
            read(&top, &format!("{p}/locks/jobs/y")).await.as_deref(),
            Some(&b"below"[..]),
            "{name}"
        );
        assert_eq!(read(&top, "x").await, None, "{name}");
        let up = held.fenced_put("../z", "up").await;
        if name == "file" {
            let err = up.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Invalid, "{name}: {err}");
            assert!(err.to_string().contains("../z"), "{err}");
        } else {
            up.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                read(&top, &format!("{p}/z")).await.as_deref(),
                Some(&b"up"[..]),
                "{name}"
            );
        }
        held.release().await.unwrap();
    }
}

/// A `file://` URL whose directory does not exist yet: acquiring creates it (as bare names
/// and fenced writes below the lease do; what users of py-filelock expect), reading does not.
#[tokio::test]
async fn a_file_url_creates_the_leases_directory() {
    let dir = tempfile::tempdir().unwrap();
    let lease_dir = dir.path().join("not/yet");
    let url = format!("file://{}/gc", lease_dir.display());
    let parsed = LeaseUrl::parse(&url).unwrap();
    let client = Client::new(parsed.store.open_new().unwrap());
    // Reading a lease in a missing directory: nothing there, and nothing created.
    assert!(client.fenced_get("gc").await.unwrap().is_none());
    assert!(!lease_dir.exists(), "a read created the directory");
    let held = client.acquire(&parsed.key, &opts()).await.unwrap();
    assert!(lease_dir.join("gc").is_file());
    held.fenced_put("jobs/report", "r").await.unwrap();
    assert_eq!(
        std::fs::read(lease_dir.join("jobs/report")).unwrap(),
        b"r".to_vec()
    );
    held.release().await.unwrap();

    // The same through the process's shared stores (what every binding and the CLI use).
    let other = format!("file://{}/elsewhere/gc", dir.path().display());
    let (client, key) = Client::for_url(&other).unwrap();
    let held = client.acquire(&key, &opts()).await.unwrap();
    assert!(dir.path().join("elsewhere/gc").is_file());
    held.release().await.unwrap();
}

/// A gate kept in a store given by a URL with a path (`s3://bucket/P/locks`, what Python's and
/// Node's `FencingGate(url, prefix)` take) keeps its objects under that path on every store,
/// as a file store opened on `ROOT/P/locks` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_opened_from_a_store_url_keeps_its_objects_under_its_path() {
    for root in roots() {
        let name = root.name;
        let p = unique("gate");
        let url = join(&root.url, &format!("{p}/locks"));
        let (store, prefix) = FencingGate::store_and_prefix(&url, "fencing").unwrap();
        let gate = FencingGate::in_store(store.open_new().unwrap(), &prefix).unwrap();
        let top = open(&root.url);
        let held = Client::new(top.clone())
            .acquire(&format!("{p}/locks/gc"), &opts())
            .await
            .unwrap();
        gate.admit("orders", &held.token()).await.unwrap();
        let found = |key: String| {
            let top = top.clone();
            async move {
                matches!(
                    top.get(&key, GetOptions::default()).await.unwrap(),
                    Get::Found(_)
                )
            }
        };
        assert!(
            found(format!("{p}/locks/fencing/orders")).await,
            "{name}: the gate's object is not under the URL's path"
        );
        assert!(!found("fencing/orders".to_string()).await, "{name}");
        for bad in ["../../../x", ""] {
            let e = FencingGate::store_and_prefix(&url, bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Invalid, "{name}: {bad:?}: {e}");
        }
        held.release().await.unwrap();
    }
}
