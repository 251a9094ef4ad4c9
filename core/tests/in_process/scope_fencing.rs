//! Fencing per scope and for readers (issue 22, items 4 and 5) in simulated time, with real
//! queued locks on the memory store.

#![allow(clippy::disallowed_methods)]

use lease::{ErrorKind, Scope};

use crate::sim;
use sim::*;

fn range(a: u64, b: u64) -> lease::LeaseOptions {
    opts().scope(Scope::range(a, b).unwrap())
}

/// Item 4: two live holders of disjoint byte ranges of one lock write the one object they
/// share (each its own part, read-modify-write); the later one's write must not fence the
/// earlier, live one.
#[tokio::test(start_paused = true)]
async fn a_fenced_write_under_one_range_does_not_fence_a_live_holder_of_a_disjoint_range() {
    let w = World::new();
    let (c, _) = w.client("c", 1);
    let a = c.acquire("blob", &range(0, 100)).await.unwrap();
    let b = c.acquire("blob", &range(100, 200)).await.unwrap();
    assert!(b.epoch() > a.epoch());
    a.fenced_update("data", |_| "a0".into()).await.unwrap();
    b.fenced_update("data", |_| "b0".into()).await.unwrap();
    a.fenced_update("data", |_| "a1".into())
        .await
        .expect("a live holder of a disjoint range is not fenced");
    b.fenced_put("data", "b1").await.unwrap();
    a.fenced_put("data", "a2")
        .await
        .expect("nor by a plain fenced write");
    a.release().await.unwrap();
    b.release().await.unwrap();
}

/// Item 5: an exclusive writer reads, is paused past its ttl; readers with later shared grants
/// read the object; the writer resumes and writes conditionally on the version it read. Its
/// write must not land while the readers hold: their data would change under them.
#[tokio::test(start_paused = true)]
async fn a_stale_writer_cannot_change_what_readers_with_later_grants_read() {
    let w = World::new();
    let (a, a_conn) = w.client("writer", 1);
    let writer = a.acquire("lock", &opts().queue()).await.unwrap();
    writer.fenced_put("data", "v0").await.unwrap();
    let seen = writer.fenced_get("data").await.unwrap().unwrap();
    // Paused between its read and its write, past its ttl: it is removed, readers go.
    a_conn.faults().set_unavailable(true);
    let mut readers = vec![];
    for i in 0..2 {
        let (r, _) = w.client(&format!("reader{i}"), 10 + i);
        let lease = r
            .acquire("lock", &opts().shared().wait(secs(600.0)))
            .await
            .unwrap();
        assert!(lease.epoch() > writer.epoch());
        // A reader fences what it reads.
        let got = lease.fenced_read("data").await.unwrap().unwrap();
        assert_eq!(&got.bytes[..], b"v0");
        readers.push(lease);
    }
    a_conn.faults().set_unavailable(false);
    let e = writer
        .fenced_put_if("data", "v1", Some(&seen.version))
        .await
        .expect_err("a stale writer's write landed under readers with later grants");
    assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");
    for r in &readers {
        let got = r.fenced_get("data").await.unwrap().unwrap();
        assert_eq!(
            &got.bytes[..],
            b"v0",
            "the readers' data changed under them"
        );
    }
}

/// The raw metadata of an object (what other versions and tools see).
async fn meta_of(w: &World, key: &str) -> lease::store::Meta {
    use lease::store::{Get, GetOptions, Store};
    match w.store.connection().get(key, GetOptions::default()).await {
        Ok(Get::Found(o)) => o.meta,
        other => panic!("{key}: {other:?}"),
    }
}

/// Scopes narrow what a token fences, never to nothing: a holder of an overlapping range or
/// path whose grant ended before a later one's is still refused once the later one wrote.
#[tokio::test(start_paused = true)]
async fn an_overlapping_scopes_stale_holder_is_still_fenced() {
    let w = World::new();
    let (c, c_conn) = w.client("c", 1);
    let (d, _) = w.client("d", 2);
    let old = c.acquire("blob", &range(0, 100)).await.unwrap();
    old.fenced_put("data", "old").await.unwrap();
    // The old holder stops renewing (paused); a holder of an overlapping range takes over.
    c_conn.faults().set_unavailable(true);
    let newer = d
        .acquire("blob", &range(50, 150).wait(secs(600.0)))
        .await
        .unwrap();
    assert!(newer.epoch() > old.epoch());
    newer.fenced_put("data", "newer").await.unwrap();
    c_conn.faults().set_unavailable(false);
    let e = old.fenced_put("data", "zombie").await.unwrap_err();
    assert_eq!(
        (e.kind(), e.epoch()),
        (ErrorKind::Fenced, Some(newer.epoch()))
    );
    assert!(e.to_string().contains("bytes 50..150"), "{e}");
    // Paths: a/b's holder is not fenced by a/c's, but is by a's.
    let path = |p| opts().scope(Scope::path(p).unwrap());
    let ab = c.acquire("tree", &path("a/b")).await.unwrap();
    let ac = d.acquire("tree", &path("a/c")).await.unwrap();
    ab.fenced_put("index", "ab").await.unwrap();
    ac.fenced_put("index", "ac").await.unwrap();
    ab.fenced_put("index", "ab again").await.unwrap();
    c_conn.faults().set_unavailable(true);
    ac.release().await.unwrap();
    let a = d
        .acquire("tree", &path("a").wait(secs(600.0)))
        .await
        .unwrap();
    a.fenced_put("index", "a").await.unwrap();
    c_conn.faults().set_unavailable(false);
    assert_eq!(
        ab.fenced_put("index", "stale").await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
    // a's token covers a/b's and a/c's: they are no longer recorded.
    let meta = meta_of(&w, "index").await;
    assert_eq!(
        meta["lease-fence"],
        format!("x:{}:{}:pa", a.epoch(), a.holder().id)
    );
}

/// Item 5 with a plain fenced write, with the writer's own cached version (it wrote last, so
/// its write is one conditional PUT with no read), and with the object absent when read.
#[tokio::test(start_paused = true)]
async fn readers_fence_plain_and_cached_writes_and_absence() {
    let w = World::new();
    let (a, a_conn) = w.client("writer", 1);
    let (r, r_conn) = w.client("reader", 2);
    let writer = a.acquire("lock", &opts().queue()).await.unwrap();
    writer.fenced_put("data", "v0").await.unwrap(); // cached: its next write needs no read
    assert!(writer.fenced_get("absent").await.unwrap().is_none());
    a_conn.faults().set_unavailable(true);
    let reader = r
        .acquire("lock", &opts().shared().wait(secs(600.0)))
        .await
        .unwrap();
    r_conn.reset_stats();
    let got = reader.fenced_read("data").await.unwrap().unwrap();
    assert_eq!(&got.bytes[..], b"v0");
    let s = r_conn.stats();
    assert_eq!((s.gets, s.puts), (1, 1), "a first fenced read: GET + PUT");
    r_conn.reset_stats();
    let again = reader.fenced_read("data").await.unwrap().unwrap();
    assert_eq!(
        (&again.bytes[..], &again.version),
        (&b"v0"[..], &got.version)
    );
    let s = r_conn.stats();
    assert_eq!(
        (s.gets, s.puts),
        (1, 0),
        "read again under the same grant: GET only"
    );
    assert!(reader.fenced_read("absent").await.unwrap().is_none());
    a_conn.faults().set_unavailable(false);
    for (key, e) in [
        ("data", writer.fenced_put("data", "v1").await.unwrap_err()),
        (
            "absent",
            writer.fenced_put_if("absent", "x", None).await.unwrap_err(),
        ),
        (
            "absent",
            writer.fenced_put("absent", "x").await.unwrap_err(),
        ),
    ] {
        assert_eq!(
            (e.kind(), e.epoch()),
            (ErrorKind::Fenced, Some(reader.epoch())),
            "{key}: {e}"
        );
    }
    assert_eq!(
        writer.fenced_delete("data").await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
    assert_eq!(
        &reader.fenced_read("data").await.unwrap().unwrap().bytes[..],
        b"v0"
    );
    assert!(reader.fenced_get("absent").await.unwrap().is_none());
    assert!(
        r.fenced_get("absent").await.unwrap().is_none(),
        "the marker reads as absent"
    );
    // Readers cannot write; the message says what they can do.
    let e = reader.fenced_put("data", "x").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("fenced_read"), "{e}");
    // Once the readers are gone, a later writer writes, over the marker too.
    reader.release().await.unwrap();
    let (b, _) = w.client("later", 3);
    let later = b.acquire("lock", &opts().queue()).await.unwrap();
    later.fenced_put_if("absent", "now", None).await.unwrap();
    later.fenced_put("data", "v2").await.unwrap();
    assert!(!later.fenced_delete("never-written").await.unwrap());
    assert_eq!(
        &b.fenced_get("absent").await.unwrap().unwrap().bytes[..],
        b"now"
    );
    // A stale reader is told so.
    assert_eq!(
        reader.fenced_read("data").await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
    later.release().await.unwrap();
}

/// A plain lease's fenced objects keep the metadata they always had, and objects written by
/// versions before scopes are fenced exactly as before.
#[tokio::test(start_paused = true)]
async fn whole_lease_objects_are_unchanged() {
    use lease::store::{Cond, Meta, Store};
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let held = a.acquire("lock", &opts()).await.unwrap();
    held.fenced_put("data", "x").await.unwrap();
    held.fenced_put("data", "y").await.unwrap();
    let meta = meta_of(&w, "data").await;
    let mut keys: Vec<&str> = meta.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "lease-epoch",
            "lease-holder",
            "lease-name",
            "lease-prev",
            "lease-write"
        ]
    );
    // Written by an older version at a higher epoch: refused, as before.
    let old = Meta::from([
        ("lease-epoch".to_string(), (held.epoch() + 1).to_string()),
        (
            "lease-name".to_string(),
            lease::protocol::fence::escape(held.url()),
        ),
    ]);
    w.store
        .connection()
        .put("old", "x".into(), Cond::Create, &old)
        .await
        .unwrap();
    assert_eq!(
        held.fenced_put("old", "y").await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
    assert_eq!(
        held.fenced_read("old").await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
}

/// Gates follow the same rules for tokens that say their scope and mode, in memory and in a
/// store, parsed from their text as `lease run` exports it.
#[tokio::test(start_paused = true)]
async fn gates_fence_per_scope_and_for_readers() {
    use std::sync::Arc;
    let w = World::new();
    let gates = [
        lease::FencingGate::in_memory(),
        lease::FencingGate::in_store(Arc::new(w.store.connection()), "gates").unwrap(),
    ];
    let t = |s: &str| -> lease::FencingToken { format!("s3://b/locks/db#{s}").parse().unwrap() };
    for gate in &gates {
        // Disjoint writers, in either order.
        gate.admit("row", &t("10@aa;range=0..100")).await.unwrap();
        gate.admit("row", &t("11@bb;range=100..200")).await.unwrap();
        gate.admit("row", &t("10@aa;range=0..100")).await.unwrap();
        // An overlapping stale writer is refused.
        let e = gate
            .admit("row", &t("9@cc;range=50..60"))
            .await
            .unwrap_err();
        assert_eq!((e.kind(), e.epoch()), (ErrorKind::Fenced, Some(10)));
        // Readers: admitted beside each other in any order; they refuse older writers.
        gate.admit("doc", &t("20@r1;shared")).await.unwrap();
        gate.admit("doc", &t("21@r2;shared")).await.unwrap();
        gate.admit("doc", &t("20@r1;shared")).await.unwrap();
        let e = gate.admit("doc", &t("19@ww")).await.unwrap_err();
        assert_eq!((e.kind(), e.epoch()), (ErrorKind::Fenced, Some(21)));
        // A later writer ends them: a stale reader is refused.
        gate.admit("doc", &t("22@ww")).await.unwrap();
        let e = gate.admit("doc", &t("21@r2;shared")).await.unwrap_err();
        assert_eq!((e.kind(), e.epoch()), (ErrorKind::Fenced, Some(22)));
    }
}
