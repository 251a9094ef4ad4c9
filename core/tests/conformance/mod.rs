//! The store conformance suite: plain async functions that take a store, called from one test
//! module per backend (memory, file, and each real S3 server). Every function works under its
//! own `prefix`, so one server can serve several runs.
//!
//! What an emulator gets wrong is written beside the test that shows it.

#![allow(dead_code)]

/// Calls the store's `suite!` macro with every case every store must pass, then the `extra`
/// ones only some stores keep (one list, not one per store).
macro_rules! every_case {
    ($suite:ident $(, $extra:ident)* $(,)?) => {
        $suite!(
            create_race_has_one_winner,
            match_race_has_one_winner,
            stale_versions_fail,
            not_modified_works,
            missing_keys,
            large_and_odd_keys_round_trip,
            max_len_bounds_reads,
            metadata_round_trips,
            store_clock_is_sane,
            conditional_delete,
            rewrites_make_new_versions,
            $($extra,)*
        );
    };
}
pub(crate) use every_case;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lease::store::{Cond, Delete, DynStore, Get, GetOptions, Meta, Put, Version};

fn no_meta() -> Meta {
    Meta::new()
}

async fn put(store: &DynStore, key: &str, bytes: &[u8], cond: Cond) -> Put {
    store
        .put(key, Bytes::copy_from_slice(bytes), cond, &no_meta())
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e}"))
}

async fn get(store: &DynStore, key: &str) -> Get {
    store
        .get(key, GetOptions::default())
        .await
        .unwrap_or_else(|e| panic!("get {key}: {e}"))
}

fn written(p: Put) -> Version {
    match p {
        Put::Written { version, .. } => version,
        Put::ConditionFailed => panic!("expected the write to succeed"),
    }
}

fn found_bytes(g: Get) -> (Bytes, Version) {
    match g {
        Get::Found(o) => (o.bytes.expect("no size limit was set"), o.version),
        other => panic!("expected an object, got {other:?}"),
    }
}

/// Of 32 concurrent `Create`s of one key, exactly one succeeds, and the stored bytes are its.
pub async fn create_race_has_one_winner(store: DynStore, prefix: &str) {
    let key = format!("{prefix}/create-race");
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let store = store.clone();
            let key = key.clone();
            tokio::spawn(async move {
                (
                    i,
                    store
                        .put(
                            &key,
                            Bytes::from(format!("writer {i}")),
                            Cond::Create,
                            &Meta::new(),
                        )
                        .await,
                )
            })
        })
        .collect();
    let mut winners = vec![];
    for t in tasks {
        let (i, r) = t.await.unwrap();
        match r.unwrap() {
            Put::Written { .. } => winners.push(i),
            Put::ConditionFailed => {}
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let (bytes, _) = found_bytes(get(&store, &key).await);
    assert_eq!(bytes, format!("writer {}", winners[0]));
}

/// Of 32 concurrent `Match`es against the same version, exactly one succeeds.
pub async fn match_race_has_one_winner(store: DynStore, prefix: &str) {
    let key = format!("{prefix}/match-race");
    let v0 = written(put(&store, &key, b"initial", Cond::Create).await);
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let store = store.clone();
            let key = key.clone();
            let v0 = v0.clone();
            tokio::spawn(async move {
                (
                    i,
                    store
                        .put(
                            &key,
                            Bytes::from(format!("writer {i}")),
                            Cond::Match(v0),
                            &Meta::new(),
                        )
                        .await,
                )
            })
        })
        .collect();
    let mut winners = vec![];
    for t in tasks {
        let (i, r) = t.await.unwrap();
        if let Put::Written { .. } = r.unwrap() {
            winners.push(i);
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let (bytes, _) = found_bytes(get(&store, &key).await);
    assert_eq!(bytes, format!("writer {}", winners[0]));
}

/// A write or delete conditioned on a version that has been replaced fails.
pub async fn stale_versions_fail(store: DynStore, prefix: &str) {
    let key = format!("{prefix}/stale");
    let v1 = written(put(&store, &key, b"one", Cond::Create).await);
    let v2 = written(put(&store, &key, b"two", Cond::Match(v1.clone())).await);
    assert_ne!(v1, v2);
    assert!(matches!(
        put(&store, &key, b"three", Cond::Match(v1.clone())).await,
        Put::ConditionFailed
    ));
    assert!(matches!(
        put(&store, &key, b"again", Cond::Create).await,
        Put::ConditionFailed
    ));
    if store.capabilities().conditional_delete {
        assert!(matches!(
            store.delete(&key, &v1).await.unwrap(),
            Delete::ConditionFailed
        ));
    }
    let (bytes, v) = found_bytes(get(&store, &key).await);
    assert_eq!((bytes.as_ref(), v), (&b"two"[..], v2));
}

/// `If-None-Match` with the current version answers NotModified; after a change, the object.
pub async fn not_modified_works(store: DynStore, prefix: &str) {
    let key = format!("{prefix}/not-modified");
    let v1 = written(put(&store, &key, b"one", Cond::Create).await);
    let g = store
        .get(
            &key,
            GetOptions {
                if_none_match: Some(&v1),
                max_len: None,
            },
        )
        .await
        .unwrap();
    assert!(matches!(g, Get::NotModified { .. }), "{g:?}");
    let v2 = written(put(&store, &key, b"two", Cond::Match(v1.clone())).await);
    let g = store
        .get(
            &key,
            GetOptions {
                if_none_match: Some(&v1),
                max_len: None,
            },
        )
        .await
        .unwrap();
    let (bytes, v) = found_bytes(g);
    assert_eq!((bytes.as_ref(), v), (&b"two"[..], v2));
}

/// Missing keys: NotFound, a `Match` on them fails, a conditional delete of them fails.
pub async fn missing_keys(store: DynStore, prefix: &str) {
    let key = format!("{prefix}/missing");
    assert!(matches!(get(&store, &key).await, Get::NotFound { .. }));
    // S3 answers 404 (not 412) to If-Match on a missing key; a store must report it as a
    // failed condition.
    assert!(matches!(
        put(&store, &key, b"x", Cond::Match(Version::etag("\"nope\""))).await,
        Put::ConditionFailed
    ));
    if store.capabilities().conditional_delete {
        assert!(matches!(
            store
                .delete(&key, &Version::etag("\"nope\""))
                .await
                .unwrap(),
            Delete::ConditionFailed
        ));
    }
    assert!(matches!(get(&store, &key).await, Get::NotFound { .. }));
}

/// Long keys, odd characters and large or binary bodies round-trip unchanged.
pub async fn large_and_odd_keys_round_trip(store: DynStore, prefix: &str) {
    let long = format!(
        "{prefix}/{}/{}/{}/{}",
        "a".repeat(200),
        "b".repeat(200),
        "c".repeat(200),
        "d".repeat(200)
    );
    let odd = [
        format!("{prefix}/with space"),
        format!("{prefix}/ünïcödé/日本語"),
        format!("{prefix}/pct%20plus+eq=amp&hash#q?"),
        format!("{prefix}/quote'\"back\\tick`"),
        format!("{prefix}/dots.in..the.name..."),
        format!("{prefix}/emoji-🔒"),
        long,
    ];
    for (i, key) in odd.iter().enumerate() {
        let body: Vec<u8> = (0..=255u8).cycle().take(1000 + i).collect();
        written(put(&store, key, &body, Cond::Create).await);
        let (bytes, _) = found_bytes(get(&store, key).await);
        assert_eq!(bytes.as_ref(), &body[..], "{key}");
    }
    let big = format!("{prefix}/big-body");
    let body: Vec<u8> = (0..(3 << 20))
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    written(put(&store, &big, &body, Cond::Create).await);
    let (bytes, _) = found_bytes(get(&store, &big).await);
    assert!(bytes == body, "3 MiB body changed");
}

/// With `max_len`, a larger object is reported by size and never returned.
pub async fn max_len_bounds_reads(store: DynStore, prefix: &str) {
    let key = format!("{prefix}/bounded");
    written(put(&store, &key, &vec![7u8; 100_000], Cond::Create).await);
    match store
        .get(
            &key,
            GetOptions {
                if_none_match: None,
                max_len: Some(65_536),
            },
        )
        .await
        .unwrap()
    {
        Get::Found(o) => {
            assert!(o.bytes.is_none());
            assert_eq!(o.size, 100_000);
        }
        other => panic!("{other:?}"),
    }
}

/// Metadata is stored with the object and changes atomically with it.
pub async fn metadata_round_trips(store: DynStore, prefix: &str) {
    let key = format!("{prefix}/meta");
    let mut meta = BTreeMap::new();
    meta.insert("lease-epoch".to_string(), "7".to_string());
    meta.insert("lease-url".to_string(), "s3://b/k".to_string());
    let v1 = match store
        .put(&key, Bytes::from_static(b"data"), Cond::Create, &meta)
        .await
        .unwrap()
    {
        Put::Written { version, .. } => version,
        Put::ConditionFailed => panic!(),
    };
    match get(&store, &key).await {
        Get::Found(o) => assert_eq!(o.meta, meta),
        other => panic!("{other:?}"),
    }
    meta.insert("lease-epoch".to_string(), "8".to_string());
    assert!(matches!(
        store
            .put(&key, Bytes::from_static(b"data"), Cond::Match(v1), &meta)
            .await
            .unwrap(),
        Put::Written { .. }
    ));
    match get(&store, &key).await {
        Get::Found(o) => assert_eq!(o.meta.get("lease-epoch").map(String::as_str), Some("8")),
        other => panic!("{other:?}"),
    }
}

/// The store's clock: `last_modified` and `server_now` are present and consistent.
pub async fn store_clock_is_sane(store: DynStore, prefix: &str) {
    let key = format!("{prefix}/clock");
    written(put(&store, &key, b"x", Cond::Create).await);
    match get(&store, &key).await {
        Get::Found(o) => {
            let modified = o.last_modified.expect("last_modified");
            let now = o.server_now.expect("server_now");
            let res = store.capabilities().clock_resolution;
            assert!(
                modified <= now + res,
                "last_modified {modified:?} after server_now {now:?}"
            );
            assert!(now.duration_since(modified).unwrap_or_default() < Duration::from_secs(60));
        }
        other => panic!("{other:?}"),
    }
}

/// A conditional delete removes the object only at the given version.
pub async fn conditional_delete(store: DynStore, prefix: &str) {
    if !store.capabilities().conditional_delete {
        return;
    }
    let key = format!("{prefix}/delete");
    let v = written(put(&store, &key, b"x", Cond::Create).await);
    assert!(matches!(
        store.delete(&key, &v).await.unwrap(),
        Delete::Deleted
    ));
    assert!(matches!(get(&store, &key).await, Get::NotFound { .. }));
    written(put(&store, &key, b"again", Cond::Create).await);
}

/// Where a store says every write makes a new version (`versions_are_unique`), writes of the
/// very same bytes whose metadata differ only in a per-write nonce (as fenced writes' do) get
/// new versions, and conditions on the replaced ones fail. Fenced writes rely on the claim:
/// they make their bytes unique only where it is false (S3, whose ETag is the MD5 of the bytes
/// alone). The file store hashes bytes and metadata, so it needs the nonce.
pub async fn rewrites_make_new_versions(store: DynStore, prefix: &str) {
    rewrites_of_the_same_bytes(store, &format!("{prefix}/rewrite"), false).await;
}

/// Stronger, for stores whose versions do not depend on the contents at all (a GCS generation,
/// an Azure ETag): identical bytes *and* metadata written again still get a new version.
pub async fn identical_rewrites_make_new_versions(store: DynStore, prefix: &str) {
    assert!(store.capabilities().versions_are_unique);
    rewrites_of_the_same_bytes(store, &format!("{prefix}/identical-rewrite"), true).await;
}

async fn rewrites_of_the_same_bytes(store: DynStore, key: &str, same_meta: bool) {
    if !store.capabilities().versions_are_unique {
        return;
    }
    let meta_of = |i: usize| {
        let mut meta = Meta::new();
        meta.insert("lease-epoch".into(), "3".into());
        if !same_meta {
            meta.insert("lease-write".into(), format!("nonce-{i}"));
        }
        meta
    };
    let same = Bytes::from_static(b"the same bytes");
    let mut versions: Vec<Version> = vec![];
    for i in 0..3 {
        let cond = match versions.last() {
            None => Cond::Create,
            Some(v) => Cond::Match(v.clone()),
        };
        let v = written(
            store
                .put(key, same.clone(), cond, &meta_of(i))
                .await
                .unwrap(),
        );
        assert!(
            !versions.iter().any(|old| old.matches(&v)),
            "write {i} of identical bytes kept an old version: {v} (before: {versions:?})"
        );
        versions.push(v);
    }
    for stale in &versions[..2] {
        assert!(
            matches!(
                store
                    .put(key, same.clone(), Cond::Match(stale.clone()), &meta_of(9))
                    .await
                    .unwrap(),
                Put::ConditionFailed
            ),
            "a write conditioned on the replaced version {stale} landed"
        );
        if store.capabilities().conditional_delete {
            assert!(matches!(
                store.delete(key, stale).await.unwrap(),
                Delete::ConditionFailed
            ));
        }
    }
    let (bytes, v) = found_bytes(get(&store, key).await);
    assert_eq!(bytes, same);
    assert!(
        v.matches(&versions[2]),
        "read {v}, last written {}",
        versions[2]
    );
}

/// Run the whole suite.
pub async fn run_all(store: DynStore, prefix: &str) {
    create_race_has_one_winner(store.clone(), prefix).await;
    match_race_has_one_winner(store.clone(), prefix).await;
    stale_versions_fail(store.clone(), prefix).await;
    not_modified_works(store.clone(), prefix).await;
    missing_keys(store.clone(), prefix).await;
    large_and_odd_keys_round_trip(store.clone(), prefix).await;
    max_len_bounds_reads(store.clone(), prefix).await;
    metadata_round_trips(store.clone(), prefix).await;
    store_clock_is_sane(store.clone(), prefix).await;
    conditional_delete(store.clone(), prefix).await;
    rewrites_make_new_versions(store.clone(), prefix).await;
}

/// A store handle from a concrete store.
pub fn dyn_store<S: lease::store::Store>(s: S) -> DynStore {
    Arc::new(s)
}
