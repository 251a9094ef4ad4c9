//! The simulated world the protocol tests share: the memory store's objects on a simulated
//! clock driven by tokio's paused time, and clients that each have their own connection (own
//! faults and request counts), clock and randomness. Hours of leases run in milliseconds,
//! deterministically.

#![allow(dead_code, clippy::disallowed_methods)] // each test file uses part of it

use std::sync::Arc;
use std::time::Duration;

use lease::clock::{Clock, Instant, Rng, SimClock};
use lease::record::{Parsed, Record};
use lease::store::memory::MemoryStore;
use lease::store::{Get, GetOptions, Store};
use lease::{Client, LeaseOptions};

pub const TTL: Duration = Duration::from_secs(10);
pub const GRACE: Duration = Duration::from_secs(1); // max(1 s, ttl / 10)
pub const RESOLUTION: Duration = Duration::from_millis(1); // the memory store's default
pub const POLL: Duration = Duration::from_secs(1);
/// The store's clock in milliseconds at the start of a simulation (2026-01-01T00:00:00Z,
/// `SimClock::at_2026`): records made where none was start there, above any epoch that can
/// have been handed out before.
pub const CLOCK_MS: u64 = 1_767_225_600_000;
/// The epoch of a lease of a key made at the start of a simulation. **(changed, issue 22)** The
/// create makes the record released at [`CLOCK_MS`] (it grants nobody); the lease is the take
/// conditional on it, one above (at least the clock read after the create's answer).
pub const FIRST: u64 = CLOCK_MS + 1;

pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

pub async fn sleep(d: Duration) {
    tokio::time::sleep(d).await;
}

/// The options most tests use: a 10 s ttl, polls every second.
pub fn opts() -> LeaseOptions {
    LeaseOptions::new(TTL).poll_interval(POLL)
}

/// The options of a queued lock most tests use ([`opts`], queued).
pub fn queued() -> LeaseOptions {
    opts().queue()
}

/// Start acquiring in the background; the handle resolves to the lease.
pub fn spawn_acquire(
    c: &Client,
    key: &'static str,
    o: LeaseOptions,
) -> tokio::task::JoinHandle<lease::Result<lease::Lease>> {
    let c = c.clone();
    tokio::spawn(async move { c.acquire(key, &o).await })
}

/// A world: the store's objects on the true simulated clock.
pub struct World {
    pub clock: Arc<SimClock>,
    pub store: MemoryStore,
}

impl World {
    pub fn new() -> World {
        let clock = Arc::new(SimClock::at_2026());
        let store = MemoryStore::with_clock(clock.clone());
        World { clock, store }
    }

    /// A client on its own connection (own faults) and its own clock.
    pub fn client_on(&self, name: &str, seed: u64, clock: Arc<dyn Clock>) -> (Client, MemoryStore) {
        let conn = self.store.connection();
        let client = Client::builder(Arc::new(conn.clone()))
            .clock(clock)
            .rng(Rng::seeded(seed))
            .identity(name, seed as u32)
            .build();
        (client, conn)
    }

    pub fn client(&self, name: &str, seed: u64) -> (Client, MemoryStore) {
        self.client_on(name, seed, self.clock.clone())
    }

    /// Keys in the store under `prefix`.
    pub fn keys_under(&self, prefix: &str) -> Vec<String> {
        let mut keys = self.store.keys();
        keys.retain(|k| k.starts_with(prefix));
        keys
    }

    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    pub async fn record(&self, key: &str) -> Option<Parsed> {
        match self
            .store
            .connection()
            .get(key, GetOptions::default())
            .await
            .unwrap()
        {
            Get::Found(o) => Some(Record::parse(o.bytes.as_deref(), o.size)),
            _ => None,
        }
    }

    /// The queued lock's record at `key` as stored.
    pub async fn queue_record(&self, key: &str) -> lease::protocol::queue::QueueRecord {
        use lease::protocol::queue::{classify, Classified};
        match self
            .store
            .connection()
            .get(key, GetOptions::default())
            .await
        {
            Ok(Get::Found(o)) => match classify(o.bytes.as_deref().unwrap()) {
                Classified::Queue(r) => r,
                other => panic!("expected a queued lock's record, got {other:?}"),
            },
            other => panic!("expected a queued lock's record, got {other:?}"),
        }
    }

    pub async fn valid(&self, key: &str) -> Record {
        match self.record(key).await {
            Some(Parsed::Valid(r)) => r,
            other => panic!("expected a valid record, got {other:?}"),
        }
    }
}

/// One stretch of work a holder did while it believed it held the lease: it called
/// `ensure_held(step)` at `start` and finished at `end`, in the simulation's true time.
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    pub who: usize,
    pub epoch: u64,
    pub start: Instant,
    pub end: Instant,
}

/// Pairs of holds by different holders (or different epochs) that overlap in time. Two
/// holders with the *same* epoch overlapping is a violation too: it is how a re-issued epoch
/// shows.
pub fn overlaps(history: &[Hold]) -> Vec<(Hold, Hold)> {
    let mut h = history.to_vec();
    h.sort_by_key(|x| x.start);
    let mut bad = vec![];
    for (i, a) in h.iter().enumerate() {
        for b in &h[i + 1..] {
            if b.start >= a.end {
                break;
            }
            if a.who != b.who || a.epoch != b.epoch {
                bad.push((*a, *b));
            }
        }
    }
    bad
}
