//! The per-process default session's driver on the memory store in simulated time: two
//! acquisitions share one session record; after the last release and one ttl the session is
//! released and its object deleted; an acquisition racing the idle release (refused once the
//! release is decided) gets a working grant on a fresh session.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::clock::{Clock, Rng, SimClock};
use crate::record::{Parsed, Record, RecordState};
use crate::store::memory::MemoryStore;
use crate::store::{Get, GetOptions, Store};
use crate::Client;

const TTL: Duration = Duration::from_secs(10);

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

struct World {
    clock: Arc<SimClock>,
    store: MemoryStore,
    client: Client,
    conn: MemoryStore,
}

fn world() -> World {
    let clock = Arc::new(SimClock::at_2026());
    let store = MemoryStore::with_clock(clock.clone());
    let conn = store.connection();
    let client = Client::builder(Arc::new(conn.clone()))
        .clock(clock.clone())
        .rng(Rng::seeded(7))
        .identity("a", 7)
        .build();
    World {
        clock,
        store,
        client,
        conn,
    }
}

impl World {
    async fn sleep(&self, d: Duration) {
        self.clock.sleep(d).await;
    }

    fn sessions(&self) -> Vec<String> {
        let mut keys = self.store.keys();
        keys.retain(|k| k.starts_with(".lease-sessions/"));
        keys
    }

    async fn record(&self, key: &str) -> Option<Record> {
        match self
            .store
            .connection()
            .get(key, GetOptions::default())
            .await
            .unwrap()
        {
            Get::Found(o) => match Record::parse(o.bytes.as_deref(), o.size) {
                Parsed::Valid(r) => Some(r),
                other => panic!("{other:?}"),
            },
            _ => None,
        }
    }

    async fn acquire(&self, key: &str, opts: &LeaseOptions) -> SharedGrant {
        acquire(&self.client.inner, "", key, opts, &CancellationToken::new())
            .await
            .unwrap()
    }
}

fn opts() -> LeaseOptions {
    LeaseOptions::new(TTL).poll_interval(secs(1.0))
}

#[tokio::test(start_paused = true)]
async fn two_acquisitions_share_one_default_session_record() {
    let w = world();
    let a = w.acquire("jobs/a", &opts()).await;
    let b = w.acquire("jobs/b", &opts()).await;
    assert_eq!(a.session().sid(), b.session().sid());
    assert_eq!(w.sessions(), vec![a.session().key().to_string()]);
    assert_eq!(
        w.record(a.session().key())
            .await
            .unwrap()
            .attached
            .as_deref(),
        Some("1-2")
    );
    assert!(a.is_held() && b.is_held());
    // Another ttl is another session.
    let c = w
        .acquire(
            "jobs/c",
            &LeaseOptions::new(TTL * 2).poll_interval(secs(1.0)),
        )
        .await;
    assert_ne!(c.session().sid(), a.session().sid());
    assert_eq!(w.sessions().len(), 2);
    for g in [a, b, c] {
        g.release().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn after_the_last_release_and_one_ttl_the_default_session_is_released_and_deleted() {
    let w = world();
    let a = w.acquire("jobs/a", &opts()).await;
    let b = w.acquire("jobs/b", &opts()).await;
    let session = a.session().clone();
    a.release().await.unwrap();
    // One still attached: renewed, never released, however long.
    w.sleep(TTL * 3).await;
    assert_eq!(w.sessions(), vec![session.key().to_string()]);
    assert!(session.is_alive() && b.is_held());
    b.release().await.unwrap();
    w.sleep(TTL - secs(1.0)).await;
    assert_eq!(
        w.sessions(),
        vec![session.key().to_string()],
        "not idle a ttl yet"
    );
    assert!(session.is_alive());
    w.sleep(secs(2.0)).await;
    assert!(
        w.sessions().is_empty(),
        "released and deleted: {:?}",
        w.sessions()
    );
    assert!(!session.is_alive());
    // The next acquisition opens a fresh one.
    let c = w.acquire("jobs/c", &opts()).await;
    assert_ne!(c.session().sid(), session.sid());
    assert!(c.is_held());
    c.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_acquisition_racing_the_idle_release_gets_a_working_grant_on_a_fresh_session() {
    let w = world();
    // Every request takes a while: the release write is in flight long enough to acquire in.
    w.conn.faults().set_latency(secs(0.5));
    let a = w.acquire("jobs/a", &opts()).await;
    let old = a.session().clone();
    a.release().await.unwrap();
    // The idle release decided and its write sent, not landed: the session is no longer
    // believed, its record still held.
    loop {
        w.sleep(secs(0.01)).await;
        if !old.is_alive() {
            break;
        }
    }
    assert_eq!(
        w.record(old.key()).await.map(|r| r.state),
        Some(RecordState::Held),
        "the release has not landed yet"
    );
    assert_eq!(
        current(&w.client.inner, "", TTL).map(|s| s.sid()),
        Some(old.sid())
    );
    let b = w.acquire("jobs/b", &opts()).await;
    assert_ne!(b.session().sid(), old.sid(), "a fresh session");
    assert!(b.is_held());
    b.ensure_held().unwrap();
    assert_eq!(
        current(&w.client.inner, "", TTL).map(|s| s.sid()),
        Some(b.session().sid())
    );
    // The old one is released and deleted; the grant stays held on the new one.
    w.sleep(TTL / 2).await;
    assert_eq!(w.sessions(), vec![b.session().key().to_string()]);
    assert!(b.is_held());
    b.release().await.unwrap();
}

/// A default session opened on a runtime that shut down has no renewal task: the next
/// acquisition, on another runtime, opens a fresh one instead of attaching to it and waiting
/// for a write nobody will send (real time: paused time is per runtime).
#[test]
#[allow(clippy::disallowed_methods)] // real time, bounded: a hang is the failure
fn a_default_session_whose_runtime_shut_down_is_replaced_by_the_next_acquisition() {
    let client = Client::new(Arc::new(MemoryStore::new()));
    let opts = LeaseOptions::new(Duration::from_secs(30));
    let first = tokio::runtime::Runtime::new().unwrap();
    let old = first.block_on(async {
        let a = SharedSession::acquire_on_process_session(&client, "jobs/a", &opts)
            .await
            .unwrap();
        let old = a.session().clone();
        a.release().await.unwrap();
        old
    });
    // Well within its ttl, still believed, but nothing renews it any more. (Shut down and
    // waited for: `shutdown_background` returns before the runtime's threads have dropped its
    // tasks, and the first cold run found the second acquisition attached to the old session
    // while its renewal task was still alive — not the case under test.)
    first.shutdown_timeout(Duration::from_secs(10));
    assert!(old.is_alive());
    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        let acquiring = SharedSession::acquire_on_process_session(&client, "jobs/b", &opts);
        let b = tokio::time::timeout(Duration::from_secs(10), acquiring)
            .await
            .expect("hung: attached to the session whose runtime shut down")
            .unwrap();
        assert_ne!(b.session().sid(), old.sid(), "a fresh session");
        assert!(b.is_held());
        b.release().await.unwrap();
    });
}
