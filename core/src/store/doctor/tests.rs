//! The doctor against stores that break each rule, and one that keeps them all.

use super::*;
use crate::error::ErrorKind;
use crate::store::memory::MemoryStore;
use crate::store::{Capabilities, Store};
use async_trait::async_trait;
use std::time::SystemTime;

#[tokio::test]
async fn a_correct_store_passes_and_is_left_clean() {
    let mem = MemoryStore::new();
    let store: DynStore = Arc::new(mem.clone());
    let report = check(&store, "probes/").await.unwrap();
    assert!(report.ok(), "{}", report.verdict());
    assert!(report.probe_key.starts_with("probes/lease-doctor-"));
    assert!(report.cleaned_up);
    let json = report.to_json();
    assert_eq!(json["ok"], true);
    assert_eq!(json["conditional_delete"]["honoured"], true);
    for kind in ["create", "match"] {
        let rounds = json["races"][kind].as_array().unwrap();
        assert_eq!(rounds.len(), ROUNDS, "{json}");
        for r in rounds {
            assert_eq!(r["won"], 1, "{json}");
            assert_eq!(r["refused"], RACE as u64 - 1, "{json}");
            assert_eq!(r["contenders"], RACE as u64, "{json}");
        }
    }
    let names: Vec<&str> = report.checks.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "create",
            "duplicate_create",
            "update",
            "stale_update",
            "read",
            "etag",
            "not_modified",
            "missing_key",
            "create_race",
            "match_race",
            "store_clock",
            "stale_delete",
            "cleanup"
        ]
    );
    for key in [
        report.probe_key.clone(),
        format!("{}-create-race-0", report.probe_key),
        format!("{}-create-race-2", report.probe_key),
        format!("{}-match-race", report.probe_key),
        format!("{}-missing", report.probe_key),
    ] {
        let after = store.get(&key, GetOptions::default()).await.unwrap();
        assert!(matches!(after, Get::NotFound { .. }), "{key} left behind");
    }
}

/// A store that ignores every condition, like s3rver.
#[derive(Debug)]
struct Careless(MemoryStore);

#[async_trait]
impl Store for Careless {
    fn url(&self) -> &str {
        "careless://"
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
        self.0.get(key, opts).await
    }
    async fn put(&self, key: &str, bytes: Bytes, _: Cond, meta: &Meta) -> Result<Put> {
        let current = match self.0.get(key, GetOptions::default()).await? {
            Get::Found(o) => Cond::Match(o.version),
            _ => Cond::Create,
        };
        self.0.put(key, bytes, current, meta).await
    }
    async fn delete(&self, key: &str, _: &Version) -> Result<Delete> {
        match self.0.get(key, GetOptions::default()).await? {
            Get::Found(o) => self.0.delete(key, &o.version).await,
            _ => Ok(Delete::ConditionFailed),
        }
    }
}

#[tokio::test]
async fn a_store_that_ignores_conditions_is_refused() {
    let store: DynStore = Arc::new(Careless(MemoryStore::new()));
    let e = check(&store, "").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Store);
    for name in ["duplicate_create", "stale_update", "missing_key"] {
        assert!(e.message().contains(name), "{name}: {e}");
    }
    let report = inspect(&store, "").await.unwrap();
    assert!(!report.ok());
    assert_eq!(report.to_json()["conditional_delete"]["honoured"], false);
    assert!(report.cleaned_up);
}

/// A store that checks a condition, then writes, with other requests in between: every
/// single request is answered right, concurrent ones are not (what s3s-fs does).
#[derive(Debug)]
struct CheckThenWrite(MemoryStore);

#[async_trait]
impl Store for CheckThenWrite {
    fn url(&self) -> &str {
        "check-then-write://"
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
        self.0.get(key, opts).await
    }
    async fn put(&self, key: &str, bytes: Bytes, cond: Cond, meta: &Meta) -> Result<Put> {
        let found = match self.0.get(key, GetOptions::default()).await? {
            Get::Found(o) => Some(o.version),
            _ => None,
        };
        let holds = match (&cond, &found) {
            (Cond::Create, None) => true,
            (Cond::Match(v), Some(cur)) => v == cur,
            _ => false,
        };
        if !holds {
            return Ok(Put::ConditionFailed);
        }
        // The check is done; let the other requests in before writing.
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        let now = match self.0.get(key, GetOptions::default()).await? {
            Get::Found(o) => Cond::Match(o.version),
            _ => Cond::Create,
        };
        self.0.put(key, bytes, now, meta).await
    }
    async fn delete(&self, key: &str, v: &Version) -> Result<Delete> {
        self.0.delete(key, v).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_that_is_only_right_one_request_at_a_time_is_refused() {
    let store: DynStore = Arc::new(CheckThenWrite(MemoryStore::new()));
    let report = inspect(&store, "").await.unwrap();
    let failed: Vec<&str> = report.failures().iter().map(|c| c.name).collect();
    assert_eq!(
        failed,
        ["create_race", "match_race"],
        "{}",
        report.verdict()
    );
    assert!(
        report.create_race.iter().any(|r| r.won > 1),
        "{:?}",
        report.create_race
    );
    assert!(
        report.verdict().contains("non-atomically"),
        "{}",
        report.verdict()
    );
    let json = report.to_json();
    assert!(
        json["races"]["match"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["won"].as_u64().unwrap() > 1),
        "{json}"
    );
    assert!(report.cleaned_up);
    assert_eq!(
        check(&store, "").await.unwrap_err().kind(),
        ErrorKind::Store
    );
}

/// A store with GCS's write-rate limit: two writes of one key less than a second apart
/// fail as unavailable (429).
#[derive(Debug)]
struct RateLimited {
    mem: MemoryStore,
    /// The simulated clock the test runs on: on the real clock the doctor's pauses (tokio's
    /// paused time) would not advance the limit's, and the test spun for seconds.
    clock: Arc<dyn Clock>,
    last: std::sync::Mutex<HashMap<String, Instant>>,
}

#[async_trait]
impl Store for RateLimited {
    fn url(&self) -> &str {
        "rate-limited://"
    }
    fn capabilities(&self) -> Capabilities {
        self.mem.capabilities()
    }
    fn min_write_interval(&self) -> Duration {
        Duration::from_secs(1)
    }
    async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
        self.mem.get(key, opts).await
    }
    async fn put(&self, key: &str, bytes: Bytes, cond: Cond, meta: &Meta) -> Result<Put> {
        let now = self.clock.now();
        let last = self.last.lock().unwrap().get(key).copied();
        if last.is_some_and(|prev| now - prev < Duration::from_secs(1)) {
            return Err(Error::unavailable("429 rate limit exceeded"));
        }
        let put = self.mem.put(key, bytes, cond, meta).await?;
        if let Put::Written { .. } = put {
            self.last.lock().unwrap().insert(key.to_string(), now);
        }
        Ok(put)
    }
    async fn delete(&self, key: &str, v: &Version) -> Result<Delete> {
        self.mem.delete(key, v).await
    }
}

#[tokio::test(start_paused = true)]
async fn writes_of_one_key_are_spaced_by_the_minimum_interval() {
    let clock: Arc<dyn Clock> = Arc::new(crate::clock::SimClock::at_2026());
    let store: DynStore = Arc::new(RateLimited {
        mem: MemoryStore::with_clock(clock.clone()),
        clock: clock.clone(),
        last: Default::default(),
    });
    let report = inspect_with_clock(&store, "", clock).await.unwrap();
    assert!(report.ok(), "{}", report.verdict());
    assert_eq!(report.to_json()["min_write_interval_ms"], 1000);
}

/// A store behind a gateway that sets its own `Date`, `offset_ms` from the store's clock (nginx
/// does by default, without `proxy_pass_header Date;`). `Last-Modified` is passed through.
#[derive(Debug)]
struct GatewayDate {
    mem: MemoryStore,
    offset_ms: i64,
}

impl GatewayDate {
    fn shift(&self, t: Option<SystemTime>) -> Option<SystemTime> {
        let d = Duration::from_millis(self.offset_ms.unsigned_abs());
        t.map(|t| if self.offset_ms >= 0 { t + d } else { t - d })
    }
}

#[async_trait]
impl Store for GatewayDate {
    fn url(&self) -> &str {
        "gateway://"
    }
    fn capabilities(&self) -> Capabilities {
        self.mem.capabilities()
    }
    async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
        Ok(match self.mem.get(key, opts).await? {
            Get::Found(mut o) => {
                o.server_now = self.shift(o.server_now);
                Get::Found(o)
            }
            Get::NotModified { server_now } => Get::NotModified {
                server_now: self.shift(server_now),
            },
            Get::NotFound { server_now } => Get::NotFound {
                server_now: self.shift(server_now),
            },
        })
    }
    async fn put(&self, key: &str, bytes: Bytes, cond: Cond, meta: &Meta) -> Result<Put> {
        self.mem.put(key, bytes, cond, meta).await
    }
    async fn delete(&self, key: &str, v: &Version) -> Result<Delete> {
        self.mem.delete(key, v).await
    }
}

/// Issue 29: a `Date` 30 s ahead of the store's stamps used to pass (up to 61 s ahead was
/// accepted); it is the unsafe direction for clients that trust `Date`. Behind fails as
/// before; a `Date` within the resolution passes.
#[tokio::test]
async fn a_date_ahead_of_the_stores_stamps_is_refused_in_both_directions() {
    let report_for = |offset_ms| async move {
        let mem = MemoryStore::new();
        mem.set_clock_resolution(Duration::from_secs(1));
        let store: DynStore = Arc::new(GatewayDate { mem, offset_ms });
        inspect(&store, "").await.unwrap()
    };
    let ahead = report_for(30_000).await;
    let failed: Vec<&str> = ahead.failures().iter().map(|c| c.name).collect();
    assert_eq!(failed, ["store_clock"], "{}", ahead.verdict());
    let verdict = ahead.verdict();
    assert!(
        verdict.contains("30 s ahead") && verdict.contains("proxy_pass_header Date;"),
        "{verdict}"
    );
    let behind = report_for(-3_000).await;
    let failed: Vec<&str> = behind.failures().iter().map(|c| c.name).collect();
    assert_eq!(failed, ["store_clock"], "{}", behind.verdict());
    assert!(
        behind.verdict().contains("after the store's"),
        "{}",
        behind.verdict()
    );
    // Within the clock's resolution either way: fine.
    for offset_ms in [-900, 0, 900] {
        let report = report_for(offset_ms).await;
        assert!(report.ok(), "{offset_ms}: {}", report.verdict());
    }
}
