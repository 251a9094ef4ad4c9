//! `memory://` — an in-process store for unit tests, with fault injection.
//!
//! Stores opened from the same `memory://NAMESPACE` URL in one process share their objects, so
//! several clients in one test contend for the same leases. Each *connection* to the objects
//! ([`MemoryStore::connection`]) has its own faults, clock and request counts, so a test can cut
//! one client off (a crashed or paused holder) while the others go on. The fault injector
//! ([`MemoryStore::faults`]) can apply a write but lose its reply, apply it and answer 412 as an
//! SDK retry would, fail the next calls, add latency before or after a call takes effect, or
//! fail at random; all on an injected clock.
//!
//! A call in flight is like a request on the network: once sent, it takes effect after its
//! latency whether or not the caller still waits for the answer. A client that times out and
//! drops the call does not stop a write from landing later, and two writes in flight with
//! different latencies land in the other order (see [`Faults::set_random_latency`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    validate_key, validate_meta, Capabilities, Cond, Delete, Get, GetOptions, Meta, Object, Put,
    Store, Version,
};
use crate::clock::{Clock, Rng, SystemClock};
use crate::error::{Error, Result};

#[derive(Debug, Clone)]
struct Entry {
    bytes: Bytes,
    version: Version,
    last_modified: SystemTime,
    meta: Meta,
}

/// Which calls a scripted fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Get,
    Put,
    Delete,
    /// Any call.
    Any,
    /// `put` or `delete`.
    Write,
}

impl Op {
    fn matches(self, op: Op) -> bool {
        self == Op::Any || self == op || (self == Op::Write && matches!(op, Op::Put | Op::Delete))
    }
}

/// What a fault does to the call it hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fail with `Unavailable` without applying the call.
    Fail,
    /// Apply the call, then fail with `Unavailable` as if the reply were lost in the network.
    LoseReply,
    /// Apply the call after waiting this long (request latency).
    DelayBefore(Duration),
    /// Apply the call at once, answer after this long (reply latency).
    DelayAfter(Duration),
    /// Apply a write, then answer "condition failed": what an SDK that retried a write which
    /// had already landed reports (the dynamolock#280 bug class).
    LandThenConditionFailed,
    /// Refuse the call with a permanent `Store` error, as S3 answers 403 to a read of a missing
    /// key without `s3:ListBucket`.
    Deny,
}

#[derive(Debug, Default)]
struct FaultState {
    script: VecDeque<(Op, Fault)>,
    unavailable: bool,
    latency: Duration,
    /// Random faults: probability (in parts per million) of `Fail` and of `LoseReply`.
    random_fail_ppm: u32,
    random_lose_ppm: u32,
    rng: Option<Rng>,
    /// Random extra latency before a call takes effect, up to this (reorders calls in flight).
    random_latency: Duration,
}

/// Counts of calls served, for asserting how many requests an operation costs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub gets: u64,
    pub not_modified: u64,
    pub puts: u64,
    pub deletes: u64,
}

/// The objects, shared by every connection.
#[derive(Debug)]
struct Shared {
    objects: Mutex<HashMap<String, Entry>>,
    next_generation: AtomicU64,
    /// Every write that took effect, in order, once a test asks for it.
    log: Mutex<Option<Vec<LoggedWrite>>>,
    /// Times are truncated to this (S3's HTTP dates have whole seconds).
    resolution: Mutex<Duration>,
    /// Versions are a hash of the bytes alone, as S3's ETags are MD5s of them.
    content_versions: std::sync::atomic::AtomicBool,
}

/// A write that took effect (a put, or a delete), in the order it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedWrite {
    pub key: String,
    pub deleted: bool,
    pub meta: Meta,
    /// The contents written (empty for a delete).
    pub bytes: Bytes,
}

/// The in-memory store: one connection to a set of objects. Clones share the connection.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    url: String,
    shared: Arc<Shared>,
    faults: Arc<Mutex<FaultState>>,
    stats: Arc<Mutex<Stats>>,
    clock: Arc<dyn Clock>,
}

fn registry() -> &'static Mutex<HashMap<String, Arc<Shared>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Arc<Shared>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

impl Shared {
    fn new() -> Self {
        Shared {
            objects: Mutex::default(),
            next_generation: AtomicU64::new(1),
            log: Mutex::default(),
            resolution: Mutex::new(Duration::from_millis(1)),
            content_versions: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// A private store on the real clock.
    pub fn new() -> Self {
        MemoryStore::with_clock(Arc::new(SystemClock))
    }

    /// A private store whose `last_modified` and `server_now` come from `clock`. Its URL,
    /// `memory://(private-N)`, is its own: what is keyed by a store's URL in this process (the
    /// local wake-ups of waiters) never mixes two private stores.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        static PRIVATE: AtomicU64 = AtomicU64::new(1);
        let n = PRIVATE.fetch_add(1, Ordering::Relaxed);
        MemoryStore::connect(
            format!("memory://(private-{n})"),
            Arc::new(Shared::new()),
            clock,
        )
    }

    fn connect(url: String, shared: Arc<Shared>, clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            url,
            shared,
            faults: Arc::default(),
            stats: Arc::default(),
            clock,
        }
    }

    /// The process-wide store for `memory://NAMESPACE`; every call with the same namespace
    /// shares the same objects.
    pub fn named(namespace: &str) -> Self {
        let shared = registry()
            .lock()
            .unwrap()
            .entry(namespace.to_string())
            .or_insert_with(|| Arc::new(Shared::new()))
            .clone();
        MemoryStore::connect(
            format!("memory://{namespace}"),
            shared,
            Arc::new(SystemClock),
        )
    }

    /// A new connection to the same objects, with its own faults and request counts.
    pub fn connection(&self) -> Self {
        MemoryStore::connect(self.url.clone(), self.shared.clone(), self.clock.clone())
    }

    /// A new connection to the same objects whose store clock is `clock` (a store node with a
    /// skewed clock, say).
    pub fn connection_on_clock(&self, clock: Arc<dyn Clock>) -> Self {
        MemoryStore::connect(self.url.clone(), self.shared.clone(), clock)
    }

    /// The fault injector of this connection.
    pub fn faults(&self) -> Faults<'_> {
        Faults {
            state: &self.faults,
        }
    }

    /// Requests served on this connection.
    pub fn stats(&self) -> Stats {
        *self.stats.lock().unwrap()
    }

    pub fn reset_stats(&self) {
        *self.stats.lock().unwrap() = Stats::default();
    }

    /// Truncate the store's times (`last_modified`, `server_now`) to multiples of `resolution`,
    /// as S3's whole-second HTTP dates are; every connection to these objects sees it.
    pub fn set_clock_resolution(&self, resolution: Duration) {
        assert!(
            !resolution.is_zero(),
            "a clock resolution must be above zero"
        );
        *self.shared.resolution.lock().unwrap() = resolution;
    }

    /// Make versions a hash of the bytes alone, as S3's ETags are (the MD5 of the bytes): the
    /// same bytes written again keep the version. Every connection to these objects sees it.
    pub fn set_content_versions(&self, on: bool) {
        self.shared.content_versions.store(on, Ordering::Relaxed);
    }

    fn content_versions(&self) -> bool {
        self.shared.content_versions.load(Ordering::Relaxed)
    }

    /// The store's clock now, truncated to its resolution.
    fn store_now(&self) -> SystemTime {
        truncate(self.clock.wall(), *self.shared.resolution.lock().unwrap())
    }

    /// Start recording every write that takes effect, on every connection to these objects.
    pub fn record_writes(&self) {
        self.shared.log.lock().unwrap().get_or_insert_with(Vec::new);
    }

    /// The writes recorded since [`MemoryStore::record_writes`], in the order they took effect.
    pub fn write_log(&self) -> Vec<LoggedWrite> {
        self.shared.log.lock().unwrap().clone().unwrap_or_default()
    }

    fn log(&self, key: &str, deleted: bool, meta: &Meta, bytes: &Bytes) {
        if let Some(log) = self.shared.log.lock().unwrap().as_mut() {
            log.push(LoggedWrite {
                key: key.to_string(),
                deleted,
                meta: meta.clone(),
                bytes: bytes.clone(),
            });
        }
    }

    /// Replace an object's bytes without any condition, as a person editing the bucket would.
    pub fn overwrite_raw(&self, key: &str, bytes: impl Into<Bytes>) {
        let bytes: Bytes = bytes.into();
        let version = self.next_version(&bytes);
        let entry = Entry {
            bytes,
            version,
            last_modified: self.store_now(),
            meta: Meta::new(),
        };
        self.shared
            .objects
            .lock()
            .unwrap()
            .insert(key.to_string(), entry);
    }

    /// Every key stored, sorted (what a test would LIST).
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .shared
            .objects
            .lock()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// Remove an object without any condition, as a person editing the bucket would.
    pub fn remove_raw(&self, key: &str) {
        self.shared.objects.lock().unwrap().remove(key);
    }

    /// The version of a write of `bytes`.
    fn next_version(&self, bytes: &[u8]) -> Version {
        if self.content_versions() {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(bytes);
            let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
            return Version::etag(format!("\"{hex}\""));
        }
        let generation = self.shared.next_generation.fetch_add(1, Ordering::Relaxed);
        Version {
            etag: format!("\"m{generation}\""),
            generation: Some(generation),
        }
    }

    /// Decide what happens to this call: fail now, or apply with some latency and maybe lose
    /// the reply.
    fn plan(&self, op: Op) -> Plan {
        let mut f = self.faults.lock().unwrap();
        let mut plan = Plan {
            fail: f.unavailable,
            deny: false,
            lose_reply: false,
            fail_condition: false,
            before: f.latency,
            after: Duration::ZERO,
        };
        if let Some(pos) = f.script.iter().position(|(o, _)| o.matches(op)) {
            let (_, fault) = f.script.remove(pos).expect("position is in range");
            match fault {
                Fault::Fail => plan.fail = true,
                Fault::LoseReply => plan.lose_reply = true,
                Fault::DelayBefore(d) => plan.before += d,
                Fault::DelayAfter(d) => plan.after += d,
                Fault::LandThenConditionFailed => plan.fail_condition = true,
                Fault::Deny => plan.deny = true,
            }
        }
        if !f.random_latency.is_zero() {
            if let Some(rng) = &f.rng {
                plan.before += f.random_latency.mul_f64(rng.fraction());
            }
        }
        if let Some(rng) = &f.rng {
            let roll = (rng.next_u64() % 1_000_000) as u32;
            if roll < f.random_fail_ppm {
                plan.fail = true;
            } else if roll < f.random_fail_ppm + f.random_lose_ppm
                && matches!(op, Op::Put | Op::Delete)
            {
                plan.lose_reply = true;
            }
        }
        plan
    }

    /// Carry out one call as the plan says. A call that takes effect does so after its latency
    /// in a task of its own, like a request already on the network: a caller that stops waiting
    /// (a timeout) does not stop it from landing.
    async fn run<T: Send + 'static>(
        &self,
        op: Op,
        apply: impl FnOnce(&MemoryStore) -> T + Send + 'static,
    ) -> Result<(T, Plan)> {
        let plan = self.plan(op);
        if plan.deny || plan.fail {
            if !plan.before.is_zero() {
                self.clock.sleep(plan.before).await;
            }
            return Err(if plan.deny {
                Error::store(format!("{}: access denied (injected)", self.url))
            } else {
                Error::unavailable(format!("{}: injected failure", self.url))
            });
        }
        let out = if plan.before.is_zero() {
            apply(self)
        } else {
            let store = self.clone();
            let before = plan.before;
            tokio::spawn(async move {
                store.clock.sleep(before).await;
                apply(&store)
            })
            .await
            .map_err(|e| Error::internal(format!("memory store task failed: {e}")))?
        };
        if !plan.after.is_zero() {
            self.clock.sleep(plan.after).await;
        }
        if plan.lose_reply {
            return Err(Error::unavailable(format!(
                "{}: injected lost reply (the call took effect)",
                self.url
            )));
        }
        Ok((out, plan))
    }
}

/// `t` rounded down to a multiple of `resolution` since the Unix epoch.
fn truncate(t: SystemTime, resolution: Duration) -> SystemTime {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let res = resolution.as_nanos();
    let kept = since.as_nanos() / res * res;
    SystemTime::UNIX_EPOCH + Duration::from_nanos(kept as u64)
}

struct Plan {
    fail: bool,
    deny: bool,
    lose_reply: bool,
    fail_condition: bool,
    before: Duration,
    after: Duration,
}

/// Fault injection for a [`MemoryStore`].
pub struct Faults<'a> {
    state: &'a Mutex<FaultState>,
}

impl Faults<'_> {
    fn state(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap()
    }

    /// Queue `fault` for the next call matching `op` (faults are used in order).
    pub fn push(&self, op: Op, fault: Fault) {
        self.state().script.push_back((op, fault));
    }

    /// Fail the next `n` calls matching `op` without applying them.
    pub fn fail_next(&self, op: Op, n: usize) {
        for _ in 0..n {
            self.push(op, Fault::Fail);
        }
    }

    /// Apply the next `n` writes but lose their replies.
    pub fn lose_next_replies(&self, n: usize) {
        for _ in 0..n {
            self.push(Op::Write, Fault::LoseReply);
        }
    }

    /// Every call fails until this is set back to false (a network partition).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.state().unavailable = unavailable;
    }

    /// Latency added before every call takes effect.
    pub fn set_latency(&self, latency: Duration) {
        self.state().latency = latency;
    }

    /// Fail calls at random (`fail`), or apply writes and lose their replies (`lose`), with the
    /// given probabilities, drawn from a generator seeded with `seed`.
    pub fn set_random(&self, fail: f64, lose: f64, seed: u64) {
        let mut s = self.state();
        s.random_fail_ppm = (fail * 1e6) as u32;
        s.random_lose_ppm = (lose * 1e6) as u32;
        s.rng = Some(Rng::seeded(seed));
    }

    /// Add a random latency of up to `max` before each call takes effect, drawn from a
    /// generator seeded with `seed`: calls in flight then land in another order than sent.
    pub fn set_random_latency(&self, max: Duration, seed: u64) {
        let mut s = self.state();
        s.random_latency = max;
        s.rng.get_or_insert_with(|| Rng::seeded(seed));
    }

    /// Remove every fault.
    pub fn clear(&self) {
        *self.state() = FaultState::default();
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn url(&self) -> &str {
        &self.url
    }

    fn in_process(&self) -> bool {
        true
    }

    fn answers_carry_store_clock(&self) -> bool {
        true
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            conditional_delete: true,
            clock_resolution: *self.shared.resolution.lock().unwrap(),
            versions_are_unique: !self.content_versions(),
            store_clock_rule: true,
            wall_clock: true,
        }
    }

    async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
        validate_key(key)?;
        let owned_key = key.to_string();
        let ((entry, now), _) = self
            .run(Op::Get, move |store| {
                let entry = store
                    .shared
                    .objects
                    .lock()
                    .unwrap()
                    .get(&owned_key)
                    .cloned();
                (entry, store.store_now())
            })
            .await?;
        let mut stats = self.stats.lock().unwrap();
        stats.gets += 1;
        let Some(entry) = entry else {
            return Ok(Get::NotFound {
                server_now: Some(now),
            });
        };
        if opts.if_none_match == Some(&entry.version) {
            stats.not_modified += 1;
            return Ok(Get::NotModified {
                server_now: Some(now),
            });
        }
        let size = entry.bytes.len() as u64;
        let too_large = opts.max_len.is_some_and(|max| size > max);
        Ok(Get::Found(Object {
            bytes: (!too_large).then_some(entry.bytes),
            size,
            version: entry.version,
            last_modified: Some(entry.last_modified),
            server_now: Some(now),
            meta: entry.meta,
        }))
    }

    async fn put(&self, key: &str, bytes: Bytes, cond: Cond, meta: &Meta) -> Result<Put> {
        validate_key(key)?;
        validate_meta(meta)?;
        let (key, meta) = (key.to_string(), meta.clone());
        let result = self
            .run(Op::Put, move |store| {
                let mut objects = store.shared.objects.lock().unwrap();
                let current = objects.get(&key).map(|e| &e.version);
                let allowed = match &cond {
                    Cond::Create => current.is_none(),
                    Cond::Match(v) => current == Some(v),
                };
                if !allowed {
                    return Put::ConditionFailed;
                }
                let version = store.next_version(&bytes);
                let now = store.store_now();
                store.log(&key, false, &meta, &bytes);
                let entry = Entry {
                    bytes,
                    version: version.clone(),
                    last_modified: now,
                    meta,
                };
                objects.insert(key, entry);
                Put::Written {
                    version,
                    server_now: Some(now),
                }
            })
            .await;
        self.stats.lock().unwrap().puts += 1;
        match result? {
            (Put::Written { .. }, plan) if plan.fail_condition => Ok(Put::ConditionFailed),
            (put, _) => Ok(put),
        }
    }

    async fn delete(&self, key: &str, version: &Version) -> Result<Delete> {
        validate_key(key)?;
        let (key, version) = (key.to_string(), version.clone());
        let result = self
            .run(Op::Delete, move |store| {
                let mut objects = store.shared.objects.lock().unwrap();
                if objects.get(&key).map(|e| &e.version) != Some(&version) {
                    return Delete::ConditionFailed;
                }
                objects.remove(&key);
                store.log(&key, true, &Meta::new(), &Bytes::new());
                Delete::Deleted
            })
            .await;
        self.stats.lock().unwrap().deletes += 1;
        match result? {
            (Delete::Deleted, plan) if plan.fail_condition => Ok(Delete::ConditionFailed),
            (delete, _) => Ok(delete),
        }
    }
}
