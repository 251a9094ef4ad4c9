//! The client: acquiring leases on one store, and the two mechanisms every write relies on,
//! the view of a record a waiter builds up, and the write whose unknown outcome is resolved by
//! reading back.

use std::collections::HashMap;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::clock::{Clock, Instant, Rng, SystemClock};
use crate::error::{Error, ErrorKind, Result};
use crate::lease::Lease;
use crate::options::{format_duration, LeaseOptions, Timing, MAX_TTL};
use crate::record::{timestamp, Holder, Parsed, Prev, Record, RecordState, FORMAT, MAX_RECORD_LEN};
use crate::store::{validate_key, Cond, DynStore, Get, GetOptions, Meta, Put, Version};

/// The `client` field written into records: `lease 0.1.0 (rust)` unless a binding says otherwise.
static CLIENT_NAME: OnceLock<String> = OnceLock::new();

/// Name the language or tool this process uses the library from (`"python"`, `"node"`, …);
/// shown in records as `lease VERSION (NAME)`. The first call wins.
pub fn set_client_name(name: &str) {
    let _ = CLIENT_NAME.set(format!("lease {} ({name})", crate::VERSION));
}

fn client_name() -> String {
    CLIENT_NAME
        .get()
        .cloned()
        .unwrap_or_else(|| format!("lease {} (rust)", crate::VERSION))
}

fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for buf.len() bytes; gethostname NUL-terminates within it on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec())
        .ok()
        .filter(|s| !s.is_empty())
}

/// Local wake-ups: a release by one client wakes the waiters of every client in this process at
/// once, instead of at their next poll. Sharded by key; a spurious wake-up only costs a re-read.
pub(crate) fn local_wake(store_url: &str, key: &str) -> &'static Notify {
    static SLOTS: OnceLock<Vec<Notify>> = OnceLock::new();
    let slots = SLOTS.get_or_init(|| (0..64).map(|_| Notify::new()).collect());
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (store_url, key).hash(&mut h);
    &slots[(h.finish() % 64) as usize]
}

/// What this client remembers about a key between acquisitions.
#[derive(Debug, Clone, Default)]
struct Memo {
    /// Highest epoch seen: a recreated record starts above it.
    epoch: u64,
    /// A record this client released itself, at this version: the next acquisition can go
    /// straight to the conditional write.
    released: Option<(Version, Record)>,
}

pub(crate) struct ClientInner {
    pub(crate) store: DynStore,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rng: Rng,
    client: String,
    host: Option<String>,
    pid: u32,
    user: Option<String>,
    memo: Mutex<HashMap<String, Memo>>,
}

/// A client of one store. Cheap to clone; clones share what they know about keys.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("store", &self.inner.store.url())
            .finish()
    }
}

/// Builds a [`Client`] with injected time and randomness.
pub struct ClientBuilder {
    store: DynStore,
    clock: Arc<dyn Clock>,
    rng: Option<Rng>,
    client: Option<String>,
    host: Option<String>,
    pid: Option<u32>,
}

impl ClientBuilder {
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn rng(mut self, rng: Rng) -> Self {
        self.rng = Some(rng);
        self
    }

    /// The `client` field of records written by this client.
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client = Some(name.into());
        self
    }

    /// The `host` and `pid` fields of records (tests simulate several machines in one process).
    pub fn identity(mut self, host: impl Into<String>, pid: u32) -> Self {
        self.host = Some(host.into());
        self.pid = Some(pid);
        self
    }

    pub fn build(self) -> Client {
        Client {
            inner: Arc::new(ClientInner {
                store: self.store,
                clock: self.clock,
                rng: self.rng.unwrap_or_else(Rng::from_entropy),
                client: self.client.unwrap_or_else(client_name),
                host: self.host.or_else(host_name),
                pid: self.pid.unwrap_or_else(std::process::id),
                user: std::env::var("USER")
                    .or_else(|_| std::env::var("LOGNAME"))
                    .ok()
                    .filter(|u| !u.is_empty()),
                memo: Mutex::default(),
            }),
        }
    }
}

/// What a waiter has seen of a record.
#[derive(Debug, Clone, Default)]
pub(crate) struct View {
    pub(crate) seen: Option<Seen>,
    /// The store's clock at the last response, and when (on our clock) that response came.
    pub(crate) server_now: Option<(SystemTime, Instant)>,
}

#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one per waiter; boxing would only add an allocation
pub(crate) enum Seen {
    Absent,
    Present {
        version: Version,
        parsed: Parsed,
        last_modified: Option<SystemTime>,
        /// When this version was first seen, read *after* the response that showed it.
        first_seen: Instant,
    },
}

impl View {
    /// The `prev` list of a write that replaces the record seen.
    fn prev(&self) -> Vec<Prev> {
        match &self.seen {
            Some(Seen::Present {
                parsed: Parsed::Valid(r),
                ..
            }) => r.prev_for_successor(),
            _ => vec![],
        }
    }

    /// An epoch above any token that can have been handed out for a record we can no longer
    /// read: the wall clock in milliseconds, the store's or ours, whichever is later. (The
    /// file store's clock is the boot clock, whose milliseconds are small.)
    fn time_epoch(&self, clock: &dyn Clock) -> u64 {
        let store = self
            .server_now
            .map_or(0, |(t, _)| crate::status::unix_ms(t));
        store.max(crate::status::unix_ms(clock.wall()))
    }

    pub(crate) fn version(&self) -> Option<&Version> {
        match &self.seen {
            Some(Seen::Present { version, .. }) => Some(version),
            _ => None,
        }
    }

    /// Take in the answer to a read, made with `if_none_match = self.version()`.
    pub(crate) fn absorb(&mut self, get: Get, now: Instant) {
        match get {
            Get::Found(obj) => {
                let server_now = obj.server_now;
                if self.version() != Some(&obj.version) {
                    self.seen = Some(Seen::Present {
                        parsed: Record::parse(obj.bytes.as_deref(), obj.size),
                        version: obj.version,
                        last_modified: obj.last_modified,
                        first_seen: now,
                    });
                }
                self.server_now = server_now.map(|t| (t, now));
            }
            Get::NotModified { server_now } => self.server_now = server_now.map(|t| (t, now)),
            Get::NotFound { server_now } => {
                self.seen = Some(Seen::Absent);
                self.server_now = server_now.map(|t| (t, now));
            }
        }
    }
}

/// What a waiter should do next.
#[derive(Debug)]
enum Decision {
    Create {
        epoch: u64,
    },
    TakeOver {
        version: Version,
        epoch: u64,
        rev: u64,
    },
    Wait {
        until: Instant,
        holder: Option<Holder>,
        epoch: Option<u64>,
    },
}

/// The outcome of a conditional write, once known.
#[derive(Debug)]
pub(crate) enum Written {
    /// The write is in the store. `t_send` was read before the first attempt was sent.
    Landed { version: Version, t_send: Instant },
    /// The write is not in the store and never will be; `current` is what is there instead.
    Rejected { current: Get },
    /// The write landed, and another write has already replaced it (`current` names it as
    /// its `prev`).
    Replaced { current: Get },
}

/// Exponential backoff with jitter.
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(timing: &Timing) -> Self {
        let initial = Duration::from_millis(50)
            .min(timing.renew / 10)
            .max(Duration::from_millis(1));
        Backoff::between(initial, (timing.renew / 2).max(initial))
    }

    /// Starting at `initial`, doubling up to `max`.
    pub(crate) fn between(initial: Duration, max: Duration) -> Self {
        Backoff { next: initial, max }
    }

    pub(crate) fn next(&mut self, rng: &Rng) -> Duration {
        let d = rng.jitter(self.next, 0.25);
        self.next = (self.next * 2).min(self.max);
        d
    }
}

/// A record in the view that is one of our own earlier writes whose outcome stayed unknown:
/// its version, the record, and the instant read before that write was sent.
fn adopt_pending(view: &View, pending: &[(String, Instant)]) -> Option<(Version, Record, Instant)> {
    let Some(Seen::Present {
        version,
        parsed: Parsed::Valid(r),
        ..
    }) = &view.seen
    else {
        return None;
    };
    let (_, sent) = pending.iter().find(|(nonce, _)| r.is_write(nonce))?;
    Some((version.clone(), r.clone(), *sent))
}

/// The earliest of some instants.
fn earliest(a: Instant, b: Option<Instant>) -> Instant {
    b.map_or(a, |b| a.min(b))
}

impl Client {
    /// A client of `store` on the real clock.
    pub fn new(store: DynStore) -> Client {
        Client::builder(store).build()
    }

    pub fn builder(store: DynStore) -> ClientBuilder {
        ClientBuilder {
            store,
            clock: Arc::new(SystemClock),
            rng: None,
            client: None,
            host: None,
            pid: None,
        }
    }

    /// The shared client for the store of a lease URL, and the lease's key. Every call for the
    /// same store returns the same client, so what it learns about keys is shared.
    pub fn for_url(url: &str) -> Result<(Client, String)> {
        static CLIENTS: OnceLock<Mutex<HashMap<crate::StoreUrl, Client>>> = OnceLock::new();
        let lease = crate::LeaseUrl::parse(url)?;
        let clients = CLIENTS.get_or_init(Default::default);
        if let Some(c) = clients.lock().unwrap().get(&lease.store) {
            return Ok((c.clone(), lease.key));
        }
        let store = lease.store.open().map_err(|e| e.with_lease(url))?;
        let client = clients
            .lock()
            .unwrap()
            .entry(lease.store)
            .or_insert_with(|| Client::new(store))
            .clone();
        Ok((client, lease.key))
    }

    pub fn store(&self) -> &DynStore {
        &self.inner.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The URL of the lease at `key`, for messages and `LEASE_URL`.
    pub fn lease_url(&self, key: &str) -> String {
        let base = self.inner.store.url();
        match base.split_once('?') {
            Some((b, q)) => format!("{}/{key}?{q}", b.trim_end_matches('/')),
            None => format!("{}/{key}", base.trim_end_matches('/')),
        }
    }

    pub(crate) fn new_holder(&self, label: Option<String>) -> Holder {
        let i = &self.inner;
        Holder {
            id: i.rng.hex_id(),
            label,
            host: i.host.clone(),
            pid: Some(i.pid),
            user: i.user.clone(),
            client: Some(i.client.clone()),
        }
    }

    fn remember(&self, key: &str, f: impl FnOnce(&mut Memo)) {
        f(self
            .inner
            .memo
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_default());
    }

    pub(crate) fn known_epoch(&self, key: &str) -> u64 {
        self.inner
            .memo
            .lock()
            .unwrap()
            .get(key)
            .map_or(0, |m| m.epoch)
    }

    pub(crate) fn saw_epoch(&self, key: &str, epoch: u64) {
        self.remember(key, |m| m.epoch = m.epoch.max(epoch));
    }

    /// Remember a record this client released, so its next acquisition needs one request.
    pub(crate) fn released(&self, key: &str, version: Version, record: Record) {
        self.remember(key, |m| {
            m.epoch = m.epoch.max(record.epoch);
            m.released = Some((version, record));
        });
        local_wake(self.inner.store.url(), key).notify_waiters();
    }

    /// Run a store call with a timeout on the injected clock; a timeout is an unknown outcome.
    pub(crate) async fn timed<T>(
        &self,
        timeout: Duration,
        what: &str,
        f: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        tokio::select! {
            r = f => r,
            _ = self.inner.clock.sleep(timeout) => Err(Error::unavailable(format!(
                "{what} on {} timed out after {}", self.inner.store.url(), format_duration(timeout)
            ))),
        }
    }

    pub(crate) async fn get(
        &self,
        key: &str,
        if_none_match: Option<&Version>,
        timeout: Duration,
    ) -> Result<Get> {
        let opts = GetOptions {
            if_none_match,
            max_len: Some(MAX_RECORD_LEN),
        };
        self.timed(timeout, "read", self.inner.store.get(key, opts))
            .await
    }

    /// Write `record` under `cond`, resolving an unknown outcome by reading back, retrying
    /// while the outcome stays unknown until `give_up_at`.
    ///
    /// A failed condition is read back too: an SDK that retried a write which had landed gets
    /// 412 for its own write (the dynamolock#280 bug class). The write landed if and only if
    /// the record now carries its nonce (`record.write`, drawn for this write alone), or names
    /// it in `prev`. Resends within this call send the same bytes, so at most one copy lands,
    /// and `t_send` is read before the first: whichever copy landed was sent after it.
    pub(crate) async fn write(
        &self,
        key: &str,
        record: &Record,
        cond: Cond,
        give_up_at: Instant,
        timing: &Timing,
    ) -> Result<Written> {
        let nonce = record.write.clone().expect("every write carries a nonce");
        let bytes: Bytes = record.to_bytes();
        let clock = &self.inner.clock;
        let mut backoff = Backoff::new(timing);
        let no_meta = Meta::new();
        let t_send = clock.now();
        let mut send = true;
        loop {
            if send {
                let put = self
                    .inner
                    .store
                    .put(key, bytes.clone(), cond.clone(), &no_meta);
                match self.timed(timing.request_timeout, "write", put).await {
                    Ok(Put::Written { version, .. }) => {
                        return Ok(Written::Landed { version, t_send })
                    }
                    Ok(Put::ConditionFailed) => debug!(key, "condition failed; reading back"),
                    Err(e) if e.kind() == ErrorKind::Unavailable => {
                        warn!(key, "write outcome unknown, reading back: {e}")
                    }
                    Err(e) => return Err(e),
                }
            }
            let current = match self.get(key, None, timing.request_timeout).await {
                Ok(g) => g,
                Err(e) if e.kind() == ErrorKind::Unavailable => {
                    if clock.now() >= give_up_at {
                        return Err(e.context(format!(
                            "the outcome of a write to {} is unknown",
                            self.lease_url(key)
                        )));
                    }
                    warn!(key, "read-back failed, retrying: {e}");
                    send = false;
                    clock.sleep(backoff.next(&self.inner.rng)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            match &current {
                Get::Found(obj) => {
                    if let Parsed::Valid(r) = Record::parse(obj.bytes.as_deref(), obj.size) {
                        if r.is_write(&nonce) {
                            debug!(key, rev = r.rev, "read-back shows our write landed");
                            return Ok(Written::Landed {
                                version: obj.version.clone(),
                                t_send,
                            });
                        }
                        if r.replaced_write(&nonce) {
                            debug!(key, "read-back shows our write landed and was replaced");
                            return Ok(Written::Replaced { current });
                        }
                    }
                    if cond != Cond::Match(obj.version.clone()) {
                        return Ok(Written::Rejected { current });
                    }
                }
                Get::NotFound { .. } if cond != Cond::Create => {
                    return Ok(Written::Rejected { current })
                }
                Get::NotFound { .. } => {}
                Get::NotModified { .. } => unreachable!("read-back sends no if-none-match"),
            }
            // The condition still holds: our write did not land (yet). Send it again, same bytes,
            // so that at most one copy can ever land.
            if clock.now() >= give_up_at {
                return Err(Error::unavailable(format!(
                    "could not write {} before giving up",
                    self.lease_url(key)
                )));
            }
            send = true;
            clock.sleep(backoff.next(&self.inner.rng)).await;
        }
    }

    /// Decide from the view whether to create, take over or wait.
    fn decide(&self, key: &str, view: &View, timing: &Timing) -> Decision {
        let now = self.inner.clock.now();
        let known = self.known_epoch(key);
        let (version, parsed, last_modified, first_seen) = match &view.seen {
            None => unreachable!("decide is called after a read"),
            // A record that is absent may have been deleted while held (by hand, a lifecycle
            // rule, a restore): start above any epoch that can have been handed out, as for a
            // corrupt record.
            Some(Seen::Absent) => {
                return Decision::Create {
                    epoch: (known + 1).max(view.time_epoch(self.inner.clock.as_ref())),
                }
            }
            Some(Seen::Present {
                version,
                parsed,
                last_modified,
                first_seen,
            }) => (version, parsed, last_modified, first_seen),
        };
        let (record_ttl, holder, epoch, rev, next_epoch) = match parsed {
            Parsed::Valid(r) if r.state == RecordState::Released => {
                return Decision::TakeOver {
                    version: version.clone(),
                    epoch: r.epoch.max(known) + 1,
                    rev: r.rev + 1,
                };
            }
            Parsed::Valid(r) => (
                r.ttl().min(MAX_TTL),
                Some(r.holder.clone()),
                Some(r.epoch),
                r.rev,
                r.epoch.max(known) + 1,
            ),
            Parsed::Corrupt { epoch, .. } => {
                // Held by an unknown holder with our own ttl; the new epoch goes above any token
                // that could have been handed out, including ones we cannot read any more.
                let server_ms = view.time_epoch(self.inner.clock.as_ref());
                let floor = epoch.unwrap_or(0).max(known) + 1;
                (timing.ttl, None, *epoch, 0, floor.max(server_ms))
            }
        };
        let grace = timing.grace_for(record_ttl);
        let mut until: Option<Instant> = None;
        if timing.observation_rule {
            let at = *first_seen + record_ttl + grace;
            if now >= at {
                return Decision::TakeOver {
                    version: version.clone(),
                    epoch: next_epoch,
                    rev: rev + 1,
                };
            }
            until = Some(at);
        }
        if timing.store_clock_rule {
            if let (Some(modified), Some((server_now, at))) = (last_modified, view.server_now) {
                // Both readings are truncated to the resolution, so the measured age is at most
                // one resolution above the true age: `age >= ttl + grace + resolution` proves
                // a true age above ttl + grace (and fires at most one resolution later).
                let limit = record_ttl + grace + timing.resolution;
                let age = server_now
                    .duration_since(*modified)
                    .unwrap_or(Duration::ZERO);
                if age >= limit {
                    return Decision::TakeOver {
                        version: version.clone(),
                        epoch: next_epoch,
                        rev: rev + 1,
                    };
                }
                // Re-read once the store's clock should show the record old enough.
                let estimate = at + (limit - age) + timing.resolution;
                until = Some(earliest(estimate, until));
            }
        }
        Decision::Wait {
            until: until.unwrap_or(now + MAX_TTL),
            holder,
            epoch,
        }
    }

    /// Acquire the lease at `key`, waiting as `opts.wait` says.
    pub async fn acquire(&self, key: &str, opts: &LeaseOptions) -> Result<Lease> {
        self.acquire_inner(key, opts, false, None).await
    }

    /// Acquire, giving up with [`ErrorKind::Cancelled`] when `cancel` fires.
    ///
    /// Prefer this to dropping the future: once a write has been sent, a cancelled acquire still
    /// learns whether it landed and releases the lease if it did, so no phantom holder is left
    /// for others to wait out.
    pub async fn acquire_with_cancel(
        &self,
        key: &str,
        opts: &LeaseOptions,
        cancel: &CancellationToken,
    ) -> Result<Lease> {
        self.acquire_inner(key, opts, false, Some(cancel)).await
    }

    /// Try once: the lease, or `None` when someone else holds it.
    pub async fn try_acquire(&self, key: &str, opts: &LeaseOptions) -> Result<Option<Lease>> {
        match self.acquire_inner(key, opts, true, None).await {
            Ok(lease) => Ok(Some(lease)),
            Err(e) if e.kind() == ErrorKind::Held => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn acquire_inner(
        &self,
        key: &str,
        opts: &LeaseOptions,
        try_once: bool,
        cancel: Option<&CancellationToken>,
    ) -> Result<Lease> {
        let url = self.lease_url(key);
        validate_key(key).map_err(|e| e.with_lease(&url))?;
        let timing = opts
            .timing(&self.inner.store.capabilities())
            .map_err(|e| e.with_lease(&url))?;
        let clock = self.inner.clock.clone();
        let start = clock.now();
        let try_once = try_once || opts.wait == Some(Duration::ZERO);
        let wait_deadline = if try_once {
            Some(start)
        } else {
            opts.wait.map(|w| start + w)
        };
        // Transient store errors are retried until the wait ends, and for at least one renew
        // interval, so one dropped connection does not fail a try_acquire.
        let retry_deadline = wait_deadline.map(|d| d.max(start + timing.renew));
        let holder = self.new_holder(opts.label.clone());
        let never = CancellationToken::new();
        let cancel = cancel.unwrap_or(&never);
        let wake = local_wake(self.inner.store.url(), key);
        let mut backoff = Backoff::new(&timing);
        let mut view = View::default();
        // True while the view is as fresh as the last answer from the store.
        let mut fresh = false;
        let mut tried_blind_create = false;
        // Writes of this acquisition whose outcome stayed unknown, with the instant read before
        // each was sent: one may land later, and is then ours with that send time.
        let mut pending: Vec<(String, Instant)> = Vec::new();

        // A record this client released itself can be taken straight back with one write.
        let memo = self
            .inner
            .memo
            .lock()
            .unwrap()
            .get(key)
            .and_then(|m| m.released.clone());
        if let Some((version, record)) = memo {
            view.seen = Some(Seen::Present {
                version,
                parsed: Parsed::Valid(record),
                last_modified: None,
                first_seen: start,
            });
        }

        loop {
            if cancel.is_cancelled() {
                return Err(Error::new(
                    ErrorKind::Cancelled,
                    format!("acquire of {url} was cancelled"),
                )
                .with_lease(&url));
            }
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();

            // Read unless the view already allows a write (a released record this client
            // remembers, or a wait that has run out: the conditional write itself checks).
            if view.seen.is_none()
                || (!fresh && matches!(self.decide(key, &view, &timing), Decision::Wait { .. }))
            {
                let read = self.get(key, view.version(), timing.request_timeout).await;
                match read {
                    Ok(get) => {
                        view.absorb(get, clock.now());
                        backoff = Backoff::new(&timing);
                    }
                    Err(e) if e.kind() == ErrorKind::Unavailable => {
                        if retry_deadline.is_some_and(|d| clock.now() >= d) {
                            return Err(e.with_lease(&url));
                        }
                        warn!(lease = %url, "read failed, retrying: {e}");
                        tokio::select! {
                            _ = clock.sleep(backoff.next(&self.inner.rng)) => {}
                            _ = cancel.cancelled() => {}
                        }
                        continue;
                    }
                    // S3 answers 403, not 404, to a read of a missing key when the caller may
                    // not list the bucket. A create is safe whatever is there: try it once. If
                    // the key exists it fails, and the read-back reports the denial.
                    Err(e)
                        if e.kind() == ErrorKind::Store
                            && view.seen.is_none()
                            && !tried_blind_create =>
                    {
                        debug!(lease = %url, "read refused ({e}); trying to create the record");
                        tried_blind_create = true;
                        view.seen = Some(Seen::Absent);
                    }
                    Err(e) => return Err(e.with_lease(&url)),
                }
            }
            if let Some(Seen::Present {
                parsed: Parsed::Valid(r),
                ..
            }) = &view.seen
            {
                self.saw_epoch(key, r.epoch);
            }
            if let Some((version, record, t_send)) = adopt_pending(&view, &pending) {
                // An earlier attempt of ours landed late: we hold the lease since its send.
                pending.clear();
                match self
                    .start_or_let_go(key, &url, record, version, t_send, timing, cancel)
                    .await?
                {
                    Some(lease) => return Ok(lease),
                    None => {
                        fresh = false;
                        view = View::default();
                        continue;
                    }
                }
            }

            let (cond, epoch, rev) = match self.decide(key, &view, &timing) {
                Decision::Create { epoch } => (Cond::Create, epoch, 1),
                Decision::TakeOver {
                    version,
                    epoch,
                    rev,
                } => (Cond::Match(version), epoch, rev),
                Decision::Wait {
                    until,
                    holder,
                    epoch,
                } => {
                    let now = clock.now();
                    let held_error = |kind: ErrorKind, what: String| {
                        let mut e = Error::new(kind, what).with_lease(&url);
                        if let Some(h) = holder.clone() {
                            e = e.with_holder(h);
                        }
                        if let Some(ep) = epoch {
                            e = e.with_epoch(ep);
                        }
                        e
                    };
                    let by = holder.as_ref().map_or_else(
                        || "an unknown holder (the record is corrupt)".to_string(),
                        Holder::describe,
                    );
                    if try_once {
                        return Err(held_error(
                            ErrorKind::Held,
                            format!("{url} is held by {by}"),
                        ));
                    }
                    if wait_deadline.is_some_and(|d| now >= d) {
                        let waited = format_duration(now - start);
                        return Err(held_error(
                            ErrorKind::Timeout,
                            format!("timed out after {waited} waiting for {url}, held by {by}"),
                        ));
                    }
                    let poll = self.inner.rng.jitter(timing.poll, 0.2);
                    let wake_at = earliest(until.min(now + poll), wait_deadline);
                    debug!(lease = %url, "waiting {}", format_duration(wake_at - now));
                    tokio::select! {
                        _ = clock.sleep_until(wake_at) => {}
                        _ = &mut notified => {}
                        _ = cancel.cancelled() => {}
                    }
                    fresh = false;
                    continue;
                }
            };

            let now_wall = timestamp(clock.wall());
            let record = Record {
                format: FORMAT,
                epoch,
                rev,
                state: RecordState::Held,
                ttl_ms: timing.ttl.as_millis() as u64,
                holder: holder.clone(),
                acquired_at: Some(now_wall.clone()),
                renewed_at: Some(now_wall),
                data: opts.data.clone(),
                prev: if cond == Cond::Create {
                    vec![]
                } else {
                    view.prev()
                },
                write: Some(self.inner.rng.nonce()),
                broken: None,
            };
            // Once sent, resolve the outcome even if cancelled: a landed write must be released.
            let sent_at = clock.now();
            let give_up_at = sent_at + timing.ttl;
            match self.write(key, &record, cond, give_up_at, &timing).await {
                Ok(Written::Landed { version, t_send }) => {
                    pending.clear();
                    match self
                        .start_or_let_go(key, &url, record, version, t_send, timing, cancel)
                        .await?
                    {
                        Some(lease) => return Ok(lease),
                        None => {
                            fresh = false;
                            view = View::default();
                        }
                    }
                }
                // Replaced: landed, and someone (an operator's break) replaced it before we even
                // learned we held it; we never acted on it, so it is as if we lost the race.
                Ok(Written::Rejected { current }) | Ok(Written::Replaced { current }) => {
                    view.absorb(current, clock.now());
                    fresh = true;
                    self.remember(key, |m| m.released = None);
                }
                Err(e) if e.kind() == ErrorKind::Unavailable => {
                    pending.push((record.write.clone().unwrap_or_default(), sent_at));
                    if retry_deadline.is_some_and(|d| clock.now() >= d) {
                        return Err(e.with_lease(&url));
                    }
                    warn!(lease = %url, "write failed, retrying: {e}");
                    view = View::default();
                    fresh = false;
                    clock.sleep(backoff.next(&self.inner.rng)).await;
                }
                Err(e) => return Err(e.with_lease(&url)),
            }
        }
    }

    /// A write of ours landed at `version`, sent at `t_send`: start holding the lease, unless the
    /// acquisition was cancelled or the deadline (`t_send + ttl`) has already passed (a write
    /// that took longer than the ttl to land or to learn of). Then let it go again: release it,
    /// so nobody waits it out, and return `None` to go on trying (or `Cancelled`).
    #[allow(clippy::too_many_arguments)]
    async fn start_or_let_go(
        &self,
        key: &str,
        url: &str,
        record: Record,
        version: Version,
        t_send: Instant,
        timing: Timing,
        cancel: &CancellationToken,
    ) -> Result<Option<Lease>> {
        self.saw_epoch(key, record.epoch);
        self.remember(key, |m| m.released = None);
        let epoch = record.epoch;
        let lease = Lease::start(
            self.clone(),
            key.to_string(),
            url.to_string(),
            record,
            version,
            t_send,
            timing,
        );
        if cancel.is_cancelled() {
            let _ = lease.release().await;
            return Err(Error::new(
                ErrorKind::Cancelled,
                format!("acquire of {url} was cancelled"),
            )
            .with_lease(url));
        }
        if lease.remaining().is_zero() {
            warn!(lease = %url, epoch, "our write landed after its deadline; letting it go");
            let _ = lease.release().await;
            return Ok(None);
        }
        debug!(lease = %url, epoch, "acquired");
        Ok(Some(lease))
    }

    /// An operator's forced takeover. Returns the lease's status before the break, or `None`
    /// when there was no held lease to break.
    ///
    /// [`BreakMode::WaitOutHolder`] (the default) writes a record held by the breaker with the
    /// broken holder's ttl and epoch + 1. The broken holder learns of it at its next renewal and
    /// stops believing; waiters take the lease over by the usual rules, `ttl + grace` after the
    /// break, when the broken holder's deadline has surely passed — or at once when the broken
    /// holder acknowledges the loss by releasing its lease. [`BreakMode::AllowTwoHolders`]
    /// writes `released` at once: the next holder may start while the broken one still believes
    /// it holds, for up to its ttl; that is safe only where every write is fenced.
    pub async fn break_lease(
        &self,
        key: &str,
        label: Option<String>,
        mode: BreakMode,
    ) -> Result<Option<crate::Status>> {
        let url = self.lease_url(key);
        validate_key(key).map_err(|e| e.with_lease(&url))?;
        let timing = LeaseOptions::default().timing(&self.inner.store.capabilities())?;
        let mut backoff = Backoff::new(&timing);
        for _ in 0..20 {
            let mut view = View::default();
            view.absorb(
                self.get(key, None, timing.request_timeout)
                    .await
                    .map_err(|e| e.with_lease(&url))?,
                self.inner.clock.now(),
            );
            let before = crate::status::Status::from_view(&url, &view, &timing);
            let known = self.known_epoch(key);
            let (version, epoch, rev, ttl_ms, broken) = match &view.seen {
                Some(Seen::Present {
                    version,
                    parsed: Parsed::Valid(r),
                    ..
                }) => {
                    if r.state == RecordState::Released {
                        return Ok(None);
                    }
                    if r.broken.is_some() {
                        // Already broken, and waiting out the broken holder: nobody believes
                        // this record, so only releasing it is left to do.
                        if mode == BreakMode::WaitOutHolder {
                            return Ok(Some(before));
                        }
                        (
                            version.clone(),
                            r.epoch,
                            r.rev + 1,
                            r.ttl_ms,
                            r.broken.clone(),
                        )
                    } else {
                        let broken = crate::record::Broken {
                            id: r.holder.id.clone(),
                            epoch: r.epoch,
                        };
                        let epoch = r.epoch.max(known) + 1;
                        (version.clone(), epoch, r.rev + 1, r.ttl_ms, Some(broken))
                    }
                }
                Some(Seen::Present {
                    version,
                    parsed: Parsed::Corrupt { epoch, .. },
                    ..
                }) => {
                    let server_ms = view.time_epoch(self.inner.clock.as_ref());
                    (
                        version.clone(),
                        (epoch.unwrap_or(0).max(known) + 1).max(server_ms),
                        1,
                        timing.ttl.as_millis() as u64,
                        None,
                    )
                }
                _ => return Ok(None),
            };
            let now_wall = timestamp(self.inner.clock.wall());
            let record = Record {
                format: FORMAT,
                epoch,
                rev,
                state: match mode {
                    BreakMode::WaitOutHolder => RecordState::Held,
                    BreakMode::AllowTwoHolders => RecordState::Released,
                },
                ttl_ms,
                holder: self
                    .new_holder(Some(label.clone().unwrap_or_else(|| "lease break".into()))),
                acquired_at: Some(now_wall.clone()),
                renewed_at: Some(now_wall),
                data: None,
                prev: view.prev(),
                write: Some(self.inner.rng.nonce()),
                broken,
            };
            let give_up_at = self.inner.clock.now() + timing.ttl;
            match self
                .write(key, &record, Cond::Match(version), give_up_at, &timing)
                .await
                .map_err(|e| e.with_lease(&url))?
            {
                Written::Landed { version, .. } => {
                    self.saw_epoch(key, epoch);
                    if record.state == RecordState::Released {
                        self.released(key, version, record);
                    }
                    return Ok(Some(before));
                }
                // Our break landed and someone has already replaced it.
                Written::Replaced { .. } => {
                    self.saw_epoch(key, epoch);
                    local_wake(self.inner.store.url(), key).notify_waiters();
                    return Ok(Some(before));
                }
                Written::Rejected { .. } => {
                    self.inner.clock.sleep(backoff.next(&self.inner.rng)).await;
                }
            }
        }
        Err(
            Error::unavailable(format!("{url} kept changing while breaking it; try again"))
                .with_lease(url),
        )
    }
}

/// How [`Client::break_lease`] lets the next holder in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BreakMode {
    /// Nobody may acquire until the broken holder's deadline has surely passed (`ttl + grace`
    /// after the break), unless the broken holder acknowledges the loss by releasing.
    #[default]
    WaitOutHolder,
    /// The next holder may acquire at once, while the broken holder may still believe it holds
    /// for up to its ttl. Safe only where every write the holders make is fenced.
    AllowTwoHolders,
}
