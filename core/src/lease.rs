//! A held lease: the driver of [`protocol::hold`](crate::protocol::hold) — background renewal,
//! the deadline watchdog, loss notification, release.
//!
//! The holder believes it holds the lease until `t_send + ttl`, where `t_send` is its monotonic
//! clock read before sending the last write that landed. It renews every `renew_interval`
//! (ttl/3 by default) and stops believing at the deadline even when it cannot reach the store;
//! at that moment (or as soon as a renewal finds another record) the lease is *lost*: the lost
//! token is cancelled, callbacks run once, and every later `ensure_held` fails.
//!
//! All writes of one lease are serialized by one async mutex, so a renewal and a release never
//! race each other with the same version.

use std::collections::HashMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::clock::Instant;
use crate::duration::format_duration;
use crate::error::{Error, ErrorKind, Result};
use crate::fence::{FencedObject, Fencer, GrantRef};
use crate::io::{local_wake, Io};
use crate::metrics;
use crate::options::Timing;
use crate::protocol::hold::{after_write, begin_release, Hold, Next, Phase, ReleaseStart, Wrote};
use crate::protocol::lease_yield::{yield_key, YieldWatch};
use crate::protocol::queue::holder::{ConfirmEvent, ConfirmStep, Confirmation, GrantHold};
use crate::protocol::queue::{Change, Mode, Scope, YieldRequested};
use crate::protocol::Backoff;
use crate::record::{Holder, Record, RecordState};
use crate::store::{Get, Version};
use crate::token::FencingToken;

pub use crate::protocol::hold::{Health, HealthEvent, LostReason};

type LostCallback = Box<dyn FnOnce(&LostReason) + Send>;

type HealthCallback = Arc<dyn Fn(&HealthEvent) + Send + Sync>;

/// Who is told of health changes, and what they were last told. Deliveries all happen on one
/// task, in order; it starts with the first subscriber, so a lease nobody asks about costs
/// nothing more.
struct HealthMonitor {
    started: OnceLock<()>,
    wake: tokio::sync::Notify,
    /// Each callback, and whether it has been given the current state yet.
    callbacks: Mutex<Vec<(HealthCallback, bool)>>,
    changes: tokio::sync::watch::Sender<HealthEvent>,
}

struct State {
    hold: Hold,
    callbacks: Vec<LostCallback>,
    /// A queued lock's grant: the lock's record as last confirmed (docs/protocol.md §10,
    /// "Belief"). The holder believes only until the earlier of its session's deadline and
    /// this confirmation's.
    confirm: Option<GrantHold>,
}

impl State {
    /// The instant this holder stops believing (unless a renewal and a confirmation land).
    fn deadline(&self) -> Instant {
        let d = self.hold.deadline();
        self.confirm.as_ref().map_or(d, |c| d.min(c.deadline()))
    }

    fn remaining(&self, now: Instant) -> Duration {
        let left = self.hold.remaining(now);
        match &self.confirm {
            Some(c) => left.min(c.deadline().saturating_duration_since(now)),
            None => left,
        }
    }

    fn ensure_held(&self, now: Instant, min: Duration) -> Result<Duration> {
        let left = self.hold.ensure_held(now, min)?;
        let Some(c) = &self.confirm else {
            return Ok(left);
        };
        let confirmed = c.deadline().saturating_duration_since(now);
        if confirmed.is_zero() {
            return Err(self.hold.lost_error(&LostReason::Expired));
        }
        if confirmed < min {
            return Err(Error::new(
                ErrorKind::Lost,
                format!(
                    "{} has {} left (its grant was last confirmed in the lock's record {} ago), \
                     less than the {} required",
                    self.hold.url,
                    format_duration(confirmed),
                    format_duration(self.hold.timing.ttl.saturating_sub(confirmed)),
                    format_duration(min)
                ),
            )
            .with_lease(&self.hold.url)
            .with_epoch(self.hold.token.unwrap_or(self.hold.epoch())));
        }
        Ok(left.min(confirmed))
    }
}

struct Shared {
    client: Arc<Io>,
    key: String,
    url: String,
    epoch: u64,
    holder: Holder,
    timing: Timing,
    state: Mutex<State>,
    /// Serializes every write of this lease.
    writes: tokio::sync::Mutex<()>,
    lost: CancellationToken,
    stop: CancellationToken,
    /// Wakes the renewal task when the holder changed its ttl: its schedule moved.
    rescheduled: tokio::sync::Notify,
    /// Each object as this holder last wrote or fenced it (version, write nonce, fence), so
    /// the next fenced write to it needs one request.
    fence_versions: Mutex<HashMap<String, crate::protocol::fence::Known>>,
    /// Set when this lease is the session of a queued lock's participant that was granted:
    /// the lease's identity (key, URL, epoch) is then the grant's.
    grant: OnceLock<Grant>,
    /// When the lease was acquired (its tenure's start, for `lease_hold_seconds`).
    acquired: Instant,
    /// The runtime the lease was acquired on: the health monitor is spawned there, also when
    /// a binding subscribes from a thread of its own.
    runtime: tokio::runtime::Handle,
    /// Set once the tenure's end has been counted.
    ended: AtomicBool,
    health: HealthMonitor,
    /// Where its renewals are counted, resolved once.
    renewal_metrics: metrics::RenewalMetrics,
    /// The latest yield request that named this grant (docs/protocol.md §10, "Yield on
    /// request"): `None` until one does; each new one is sent once.
    yields: tokio::sync::watch::Sender<Option<YieldRequested>>,
    /// A plain lease's listening for yield requests in `KEY.yield`.
    yield_reads: Mutex<YieldReads>,
    /// A grant's registration with its process's wake-hint listener, kept from its wait: a
    /// hint (from `lease yield`) makes it confirm the record at once instead of at its next
    /// renewal (docs/protocol.md §10, "Yield on request").
    hinted: OnceLock<crate::wake_hint::Registration>,
}

/// A plain lease's reads of its yield request object `KEY.yield` (docs/protocol.md §10, "Yield
/// on request", *Plain leases*): made after each landed renewal once its holder listens
/// ([`Lease::on_yield`], [`Lease::yield_request`], [`Lease::yield_changes`]), never before.
#[derive(Default)]
struct YieldReads {
    listening: bool,
    watch: YieldWatch,
    /// The object's version last read (the next read is conditional on it: a 304 while
    /// unchanged).
    version: Option<Version>,
}

/// A grant of a queued lock (docs/protocol.md §10), held through the participant's session
/// lease: the handle's key, URL and epoch are the lock's and the grant's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub key: String,
    pub url: String,
    /// The fencing token: strictly increasing per lock across all modes and scopes.
    pub token: u64,
    pub mode: Mode,
    pub scope: Scope,
    /// The lock's permits, if it is a semaphore.
    pub permits: Option<u32>,
}

/// A held lease. Clones share it; when the last clone is dropped without [`Lease::release`],
/// the lease is released in the background (best effort).
#[derive(Clone)]
pub struct Lease {
    handle: Arc<DropGuard>,
}

struct DropGuard {
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Handle>,
}

/// A lease that does not keep it held ([`Lease::downgrade`]): what `owner.rs` remembers.
pub(crate) struct WeakLease(std::sync::Weak<DropGuard>);

impl WeakLease {
    /// The lease, while a handle of it is alive.
    pub(crate) fn upgrade(&self) -> Option<Lease> {
        self.0.upgrade().map(|handle| Lease { handle })
    }
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        // Held: release. Lost: release too, which tidies up after the loss (releases our
        // record if it is still there, acknowledges a break) so nobody waits us out.
        if self.shared.phase() == Phase::Released {
            return;
        }
        self.shared.stop.cancel();
        if let Some(rt) = &self.runtime {
            let shared = self.shared.clone();
            rt.spawn(async move {
                if let Err(e) = shared.release().await {
                    debug!(lease = %shared.url, "release on drop: {e}");
                }
            });
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.handle.shared;
        f.debug_struct("Lease")
            .field("url", &s.url)
            .field("epoch", &s.epoch)
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl Lease {
    pub(crate) fn start(
        client: Arc<Io>,
        key: String,
        url: String,
        record: Record,
        version: Version,
        t_send: Instant,
        timing: Timing,
    ) -> Lease {
        let hold = Hold::new(&url, record.clone(), version.clone(), t_send, timing);
        let now = client.clock().now();
        let (changes, _) = tokio::sync::watch::channel(hold.health_event(now));
        let shared = Arc::new(Shared {
            acquired: now,
            runtime: tokio::runtime::Handle::current(),
            ended: AtomicBool::new(false),
            renewal_metrics: metrics::RenewalMetrics::default(),
            health: HealthMonitor {
                started: OnceLock::new(),
                wake: tokio::sync::Notify::new(),
                callbacks: Mutex::default(),
                changes,
            },
            epoch: record.epoch,
            holder: record.holder.clone(),
            state: Mutex::new(State {
                hold,
                callbacks: Vec::new(),
                confirm: None,
            }),
            client,
            key,
            url,
            timing,
            writes: tokio::sync::Mutex::new(()),
            lost: CancellationToken::new(),
            stop: CancellationToken::new(),
            rescheduled: tokio::sync::Notify::new(),
            fence_versions: Mutex::default(),
            grant: OnceLock::new(),
            yields: tokio::sync::watch::channel(None).0,
            yield_reads: Mutex::default(),
            hinted: OnceLock::new(),
        });
        tokio::spawn(shared.clone().renew_loop());
        let weak = Arc::downgrade(&shared);
        metrics::watch_health(Box::new(move || {
            let s = weak.upgrade()?;
            let now = s.client.clock().now();
            let health = s.state.lock().unwrap().hold.health(now);
            (health != Health::Lost).then(|| (s.metric_key().to_string(), health))
        }));
        Lease {
            handle: Arc::new(DropGuard {
                shared,
                runtime: tokio::runtime::Handle::try_current().ok(),
            }),
        }
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    pub(crate) fn downgrade(&self) -> WeakLease {
        WeakLease(Arc::downgrade(&self.handle))
    }

    pub(crate) fn fence_cache(&self) -> &Mutex<HashMap<String, crate::protocol::fence::Known>> {
        &self.shared().fence_versions
    }

    /// The fencing token: strictly increasing per lease, unchanged by renewals and release.
    /// For a queued lock's grant, the grant's token.
    pub fn epoch(&self) -> u64 {
        let s = self.shared();
        s.grant.get().map_or(s.epoch, |g| g.token)
    }

    /// The lease's name, epoch and holder id, to hand to resources that check it; for a
    /// queued lock's grant, also its mode and scope, which decide what the token fences.
    pub fn token(&self) -> FencingToken {
        let token = FencingToken::new(self.url().to_string(), self.epoch())
            .with_holder(self.shared().holder.id.clone());
        match self.grant() {
            Some(g) => token.with_mode(g.mode).with_scope(g.scope.clone()),
            None => token,
        }
    }

    pub fn key(&self) -> &str {
        let s = self.shared();
        s.grant.get().map_or(&s.key, |g| &g.key)
    }

    pub fn url(&self) -> &str {
        let s = self.shared();
        s.grant.get().map_or(&s.url, |g| &g.url)
    }

    /// The grant, when this is a queued lock's (shared, permits, scope or queue).
    pub fn grant(&self) -> Option<&Grant> {
        self.shared().grant.get()
    }

    /// Release a queued lock participant's session that was never granted (an acquisition
    /// that gave up), and delete its record: session keys are used once.
    pub(crate) async fn end_session(&self) {
        let _ = self.shared().release().await;
        self.shared().delete_session().await;
    }

    /// Turn this session lease into the handle of `grant` (once), as `confirmation` (the read
    /// or write of the lock's record that showed it) showed it.
    pub(crate) fn set_grant(
        &self,
        grant: Grant,
        confirmation: Confirmation,
        hinted: Option<crate::wake_hint::Registration>,
    ) {
        let s = self.shared();
        if let Some(r) = hinted {
            let _ = s.hinted.set(r);
            // The renewal task, waiting since the session began, listens from now on.
            s.rescheduled.notify_one();
        }
        {
            let mut st = s.state.lock().unwrap();
            st.hold.token = Some(grant.token);
            st.hold.url = grant.url.clone();
            let mut confirm = GrantHold::new(&grant.key, &s.holder.id, s.timing.ttl, confirmation);
            s.tell_yield(confirm.take_yield());
            st.confirm = Some(confirm);
        }
        let _ = s.grant.set(grant);
    }

    /// The latest yield request that named this grant, if any: a waiter or an operator asked
    /// its holder to step aside (docs/protocol.md §10, "Yield on request"). A queued lock's
    /// holder learns it at its next confirmation of the lock's record (every renewal, `ttl/3`,
    /// or at once on a wake hint); **(changed, issue 23)** a plain lease's holder, once it
    /// listens ([`Lease::on_yield`], [`Lease::yield_request`], [`Lease::yield_changes`]),
    /// by reading the request object `KEY.yield` after each renewal. A request is not a loss:
    /// the grant is held as before ([`Lease::ensure_held`] keeps its meaning) until the holder
    /// releases it.
    pub fn yield_requested(&self) -> Option<YieldRequested> {
        self.shared().yields.borrow().clone()
    }

    /// Resolves when a yield request names this grant: at once if one already did, else at
    /// the first; never, for a grant nobody asks. Delivered beside the loss
    /// ([`Lease::lost`]): `select!` on both to stop on either. On a plain lease, from the
    /// first call on, its renewals read the request object (one conditional GET each).
    pub async fn yield_request(&self) -> YieldRequested {
        self.shared().listen_for_yields();
        let mut rx = self.shared().yields.subscribe();
        loop {
            if let Some(y) = rx.borrow_and_update().clone() {
                return y;
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// The yield requests that name this grant as a `watch` channel: `None` until the first,
    /// then each new one.
    pub fn yield_changes(&self) -> tokio::sync::watch::Receiver<Option<YieldRequested>> {
        self.shared().listen_for_yields();
        self.shared().yields.subscribe()
    }

    pub fn holder(&self) -> &Holder {
        &self.shared().holder
    }

    /// The ttl this holder goes by: the one it acquired with, or the last one
    /// [`Lease::set_ttl`] wrote.
    pub fn ttl(&self) -> Duration {
        self.shared().state.lock().unwrap().hold.timing.ttl
    }

    /// How long this holder may still rely on the lease (zero once lost or released).
    pub fn remaining(&self) -> Duration {
        let s = self.shared();
        let now = s.client.clock().now();
        s.state.lock().unwrap().remaining(now)
    }

    /// Whether this holder believes it holds the lease now: [`Hold::believes`], the decision the
    /// model checker's "at most one holder believes" checks.
    pub fn is_held(&self) -> bool {
        let s = self.shared();
        let now = s.client.clock().now();
        s.state.lock().unwrap().hold.believes(now)
    }

    /// Succeed, returning the time left, only if the lease is held for at least `min_remaining`
    /// more; otherwise fail with [`crate::ErrorKind::Lost`]. Call it before each step that
    /// needs the lease.
    pub fn ensure_held(&self, min_remaining: Duration) -> Result<Duration> {
        let s = self.shared();
        let now = s.client.clock().now();
        s.state.lock().unwrap().ensure_held(now, min_remaining)
    }

    /// Why the lease was lost, if it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        match self.shared().phase() {
            Phase::Lost(r) => Some(r),
            _ => None,
        }
    }

    /// A token cancelled the moment the lease is lost (not when it is released).
    pub fn lost_token(&self) -> CancellationToken {
        self.shared().lost.clone()
    }

    /// Resolves when the lease is lost; never, if it is released first.
    pub async fn lost(&self) -> LostReason {
        self.shared().lost.cancelled().await;
        self.lost_reason().unwrap_or(LostReason::Expired)
    }

    /// Call `f` once when the lease is lost: at once if it already is, else from the task that
    /// notices (a runtime thread). A panic in `f` is caught and logged.
    pub fn on_lost(&self, f: impl FnOnce(&LostReason) + Send + 'static) {
        let s = self.shared();
        let mut st = s.state.lock().unwrap();
        match st.hold.phase.clone() {
            Phase::Lost(r) => {
                drop(st);
                run_callback(Box::new(f), &r);
            }
            Phase::Held | Phase::Releasing => st.callbacks.push(Box::new(f)),
            Phase::Released => {}
        }
    }

    /// The lease's health now: `healthy`, `late`, `unknown` or `lost` (docs/protocol.md §4).
    pub fn health(&self) -> Health {
        let s = self.shared();
        let now = s.client.clock().now();
        s.state.lock().unwrap().hold.health(now)
    }

    /// The health now, with the time left and, once lost, why.
    pub fn health_event(&self) -> HealthEvent {
        let s = self.shared();
        let now = s.client.clock().now();
        s.state.lock().unwrap().hold.health_event(now)
    }

    /// Call `f` with the current health, then at each change (`healthy` → `late` → `unknown`
    /// → `lost`, or back to `healthy` when a renewal lands), with the time left. Calls come
    /// in order from one runtime task; a panic in `f` is caught and logged. A release ends
    /// them without a call.
    pub fn on_health(&self, f: impl Fn(&HealthEvent) + Send + Sync + 'static) {
        let s = self.shared();
        s.health
            .callbacks
            .lock()
            .unwrap()
            .push((Arc::new(f), false));
        s.start_health_monitor();
    }

    /// Call `f` for the yield request that already named this grant, if one did, then once for
    /// each new one (docs/protocol.md §10, "Yield on request"), until the lease is dropped.
    /// Calls come in order from one task spawned on the runtime the lease was acquired on
    /// (not the caller's); a panic in `f` is caught and logged and the next request is still
    /// delivered. A request is not a loss: the grant stays held ([`Lease::ensure_held`] keeps
    /// its meaning) until the holder releases it, which is how it steps aside. Two requests
    /// that arrive before the task ran once are delivered as the later one (the channel keeps
    /// the latest, [`Lease::yield_changes`]). On a plain lease, its renewals read the request
    /// object `KEY.yield` from this call on (one conditional GET each, a 304 while unchanged).
    pub fn on_yield(&self, f: impl Fn(&YieldRequested) + Send + Sync + 'static) {
        let s = self.shared();
        s.listen_for_yields();
        // The task holds the channel only, not the lease: dropping the lease closes the
        // channel and ends the task.
        let mut rx = s.yields.subscribe();
        s.runtime.spawn(async move {
            loop {
                let told = rx.borrow_and_update().clone();
                if let Some(y) = told {
                    run_notice_callback("yield", &f, &y);
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// The health as a `watch` channel: the current event now, and each change.
    pub fn health_changes(&self) -> tokio::sync::watch::Receiver<HealthEvent> {
        let s = self.shared();
        let rx = s.health.changes.subscribe();
        s.start_health_monitor();
        rx
    }

    /// Renew now instead of waiting for the background renewal (before a long step, say),
    /// and return the time left afterwards. Fails with [`crate::ErrorKind::Lost`] if the lease
    /// is lost (or released).
    pub async fn renew(&self) -> Result<Duration> {
        if self.shared().renew_once().await {
            self.shared().confirm_once().await;
        }
        self.ensure_held(Duration::ZERO)
    }

    /// Change the lease's ttl (redis-py's `extend`, with the new ttl whole): a renewal made at
    /// once writes it, and every renewal after it (at the same fraction of the new ttl as
    /// before: ttl/3 by default). Waiters go by the ttl of the record they see; this holder's
    /// deadline follows the ttl of its last write that landed, and while a write with a shorter
    /// ttl may land it believes no longer than that write's send + the shorter ttl. Returns the
    /// time left. Fails with [`crate::ErrorKind::Invalid`] for a ttl out of range (or, on a
    /// store such as GCS, renewals it cannot sustain), and for a queued lock's grant (it keeps
    /// the ttl it queued with); [`crate::ErrorKind::Lost`] if the lease is lost.
    pub async fn set_ttl(&self, ttl: Duration) -> Result<Duration> {
        let s = self.shared();
        let timing = {
            let st = s.state.lock().unwrap();
            st.hold.timing.with_ttl(ttl)
        };
        let timing = timing.map_err(|e| e.with_lease(self.url()))?;
        let min_write = s.client.store().min_write_interval();
        if timing.renew < min_write {
            return Err(crate::Error::invalid(format!(
                "a ttl of {} renews every {}, more often than the {} this store needs between \
                 writes of one object: use a ttl of at least {}",
                crate::format_duration(ttl),
                crate::format_duration(timing.renew),
                crate::format_duration(min_write),
                crate::format_duration(
                    ttl.mul_f64(min_write.as_secs_f64() / timing.renew.as_secs_f64())
                ),
            ))
            .with_lease(self.url()));
        }
        self.change(|hold| hold.want_ttl(ttl)).await
    }

    /// Change the data stored in the lease's record while holding it (etcd's `Proclaim`;
    /// `None` removes it): a renewal made at once writes it. Returns the time left. Fails with
    /// [`crate::ErrorKind::Invalid`] for data over 16 KiB, and for a queued lock's grant;
    /// [`crate::ErrorKind::Lost`] if the lease is lost.
    pub async fn set_data(&self, data: Option<&str>) -> Result<Duration> {
        if let Some(d) = data {
            if d.len() > crate::record::MAX_DATA_LEN {
                return Err(crate::Error::invalid(format!(
                    "data is {} bytes; at most {} bytes fit in a lease",
                    d.len(),
                    crate::record::MAX_DATA_LEN
                ))
                .with_lease(self.url()));
            }
        }
        let data = data.map(str::to_string);
        self.change(move |hold| hold.want_data(data)).await
    }

    /// Ask for a change of the record, then renew at once to write it.
    async fn change(&self, f: impl FnOnce(&mut Hold)) -> Result<Duration> {
        if let Some(grant) = self.grant() {
            return Err(crate::Error::invalid(format!(
                "{} is a queued lock's grant: it keeps the ttl and data it queued with (the \
                 lock's record lists them); set_ttl and set_data are for leases",
                grant.url
            ))
            .with_lease(&grant.url));
        }
        let s = self.shared();
        {
            let mut st = s.state.lock().unwrap();
            if st.hold.phase == Phase::Held {
                f(&mut st.hold);
            }
        }
        let renewed = self.renew().await;
        s.rescheduled.notify_one();
        renewed
    }

    /// Release the lease: write `released` (same epoch) so a waiter can take it at once.
    /// Idempotent. Fails with [`crate::ErrorKind::Lost`] if the lease was lost before it could
    /// be released: whatever was done under it may have overlapped with another holder.
    pub async fn release(&self) -> Result<()> {
        self.shared().release().await
    }
}

/// Fenced writes and reads of the objects a lease guards, carried out by `fence.rs` (which says
/// how the store enforces them).
impl Lease {
    fn fencer(&self) -> Fencer<'_> {
        Fencer {
            io: &self.shared().client,
            key: self.key(),
            url: self.url(),
            token: self.token(),
            holder: self.holder(),
            grant: self.grant().map(|g| GrantRef {
                key: &g.key,
                url: &g.url,
                token: g.token,
                mode: g.mode,
            }),
            cache: self.fence_cache(),
        }
    }

    /// The key in the store of the object `key` names for this lease: `key` read like a
    /// relative path from the lease's directory (`x`, `./x`: beside the lease; `jobs/x`: below
    /// it; `../x`: one level up, never above the store's root; `/x`: at the store's root). Every
    /// fenced operation of this lease places its key so ([`object_key`](crate::object_key)).
    pub fn object_key(&self, key: &str) -> Result<String> {
        self.fencer().object_key(key)
    }

    /// The URL of the object `key` names for this lease (see [`Lease::object_key`]).
    pub fn object_url(&self, key: &str) -> Result<String> {
        self.fencer().object_url(key)
    }

    /// Read the object `key` names for this lease (placed as [`Lease::object_key`] says), with
    /// the epoch, lease and holder of the fenced write that wrote it.
    pub async fn fenced_get(&self, key: &str) -> Result<Option<FencedObject>> {
        self.fencer().fenced_get(key).await
    }

    /// Read the object `key` names for this lease (placed as [`Lease::object_key`] says) and
    /// fence it with this lease's token: from the moment this returns, no request whose token
    /// this one's refuses can change it — for a shared grant (a reader), no writer whose grant
    /// ended before this one began (docs/protocol.md §7, "What each token fences"). A stale
    /// writer's write, conditional on an older version or not, then fails `Fenced`, so the
    /// data read does not change under this holder while it holds, except by writers of
    /// disjoint scopes (which promise not to touch this one's part).
    ///
    /// Costs 1 GET, plus 1 conditional PUT of the same bytes with this token added to the
    /// object's metadata the first time a grant reads the object (none when the object's fence
    /// already refuses all this token would: read again under the same grant, or after a later
    /// reader). Where nothing is, it leaves an empty marker that every fenced read sees as
    /// absent (`None`), so a stale writer cannot create the object under the readers either.
    /// Returns the object as read, or `None`.
    pub async fn fenced_read(&self, key: &str) -> Result<Option<FencedObject>> {
        self.fencer().fenced_read(key).await
    }

    /// Write `bytes` at `key` (placed as [`Lease::object_key`] says) unless a holder with a higher epoch of
    /// this lease has written it; then fail with [`ErrorKind::Fenced`](crate::ErrorKind::Fenced). Returns the new version
    /// (empty when the write landed but a newer writer replaced it before this call learned its
    /// version: it happened, and nothing can be conditioned on it any more).
    ///
    /// Not a read-modify-write: another writer of this epoch or a lower one may have written
    /// between a [`Client::fenced_get`](crate::Client::fenced_get) and this write. Use [`Lease::fenced_put_if`] or
    /// [`Lease::fenced_update`] for that.
    pub async fn fenced_put(&self, key: &str, bytes: impl Into<Bytes>) -> Result<Version> {
        self.fencer().fenced_put(key, bytes.into()).await
    }

    /// Write `bytes` at `key` only if the object is still at `expected` (as returned by
    /// [`Client::fenced_get`](crate::Client::fenced_get) or an earlier fenced write; its etag alone will do), or still
    /// absent when `expected` is `None`. A change by a holder with a higher epoch is [`ErrorKind::Fenced`](crate::ErrorKind::Fenced); any other
    /// change since is [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) (read again and decide again).
    pub async fn fenced_put_if(
        &self,
        key: &str,
        bytes: impl Into<Bytes>,
        expected: Option<&Version>,
    ) -> Result<Version> {
        self.fencer()
            .fenced_put_if(key, bytes.into(), expected)
            .await
    }

    /// Read-modify-write `key`: `f` gets the current object (or `None`) and returns the new
    /// contents, written with [`Lease::fenced_put_if`]; on a [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) it reads
    /// and calls `f` again. No update is lost, and none applied twice.
    pub async fn fenced_update<F>(&self, key: &str, f: F) -> Result<Version>
    where
        F: FnMut(Option<&FencedObject>) -> Bytes,
    {
        self.fencer().fenced_update(key, f).await
    }

    /// Delete `key` unless a holder with a higher epoch has written it (then `Fenced`).
    /// Returns false if there was nothing to delete. Needs a store with conditional deletes.
    ///
    /// A deleted key carries no fence any more: a zombie could create it again. Where that
    /// matters, write an empty value with [`Lease::fenced_put`] instead of deleting.
    pub async fn fenced_delete(&self, key: &str) -> Result<bool> {
        self.fencer().fenced_delete(key).await
    }
}

/// Call a user's notice callback (`what`: "health", "yield") with `event`, catching and logging
/// a panic: one callback's panic neither ends the deliveries nor reaches the runtime.
fn run_notice_callback<E: ?Sized>(what: &str, f: &(dyn Fn(&E) + Send + Sync), event: &E) {
    if catch_unwind(AssertUnwindSafe(|| f(event))).is_err() {
        warn!("a lease {what} callback panicked");
    }
}

fn run_callback(f: LostCallback, reason: &LostReason) {
    if catch_unwind(AssertUnwindSafe(|| f(reason))).is_err() {
        warn!("a lost-lease callback panicked");
    }
}

impl Shared {
    fn phase(&self) -> Phase {
        self.state.lock().unwrap().hold.phase.clone()
    }

    /// The name the metrics know this lease by: the lock's key for a queued lock's grant (not
    /// its session's, one per participant).
    fn metric_key(&self) -> &str {
        self.grant.get().map_or(&self.key, |g| &g.key)
    }

    /// Count the end of this tenure, once.
    fn tenure_ended(&self, lost: Option<&LostReason>) {
        if self.ended.swap(true, Ordering::Relaxed) {
            return;
        }
        let held = self
            .client
            .clock()
            .now()
            .saturating_duration_since(self.acquired);
        metrics::tenure_ended(self.metric_key(), held, lost);
    }

    /// Something that may change the health happened: let the monitor look.
    fn health_may_change(&self) {
        if self.health.started.get().is_some() {
            self.health.wake.notify_one();
        }
    }

    fn start_health_monitor(self: &Arc<Self>) {
        if self.health.started.set(()).is_ok() {
            self.runtime.spawn(self.clone().health_loop());
        } else {
            self.health.wake.notify_one();
        }
    }

    /// Deliver health changes, in order, until the lease is lost or released.
    async fn health_loop(self: Arc<Self>) {
        let clock = self.client.clock().clone();
        let mut last = None;
        loop {
            let now = clock.now();
            let (event, next, phase) = {
                let st = self.state.lock().unwrap();
                (
                    st.hold.health_event(now),
                    st.hold.next_health_change(now),
                    st.hold.phase.clone(),
                )
            };
            // A release is not a loss: it ends the deliveries without one.
            if matches!(phase, Phase::Releasing | Phase::Released) {
                return;
            }
            let changed = last != Some(event.health);
            last = Some(event.health);
            let due: Vec<HealthCallback> = {
                let mut callbacks = self.health.callbacks.lock().unwrap();
                callbacks
                    .iter_mut()
                    .filter(|(_, told)| changed || !*told)
                    .map(|(f, told)| {
                        *told = true;
                        f.clone()
                    })
                    .collect()
            };
            if changed {
                tracing::debug!(lease = %self.url, health = %event.health, "health changed");
                self.health.changes.send_replace(event.clone());
            }
            for f in &due {
                run_notice_callback("health", f.as_ref(), &event);
            }
            if event.health == Health::Lost {
                return;
            }
            let wake = self.health.wake.notified();
            match next {
                Some(at) => tokio::select! {
                    _ = wake => {}
                    _ = clock.sleep_until(at) => {}
                },
                None => wake.await,
            }
        }
    }

    fn mark_lost(&self, reason: LostReason) {
        // A grant's session: say what it means for the grant.
        let reason = match reason {
            LostReason::Vanished if self.grant.get().is_some() => LostReason::SessionDeleted,
            LostReason::TakenOver { holder, .. } if self.grant.get().is_some() => {
                LostReason::Removed { by: holder }
            }
            other => other,
        };
        let callbacks = {
            let mut st = self.state.lock().unwrap();
            if !st.hold.lose(reason.clone()) {
                return;
            }
            std::mem::take(&mut st.callbacks)
        };
        // Reported to the holder through the API; a log line at info is enough.
        tracing::info!(lease = %self.url, epoch = self.epoch, "lease lost: {reason}");
        self.tenure_ended(Some(&reason));
        self.health_may_change();
        self.lost.cancel();
        for f in callbacks {
            run_callback(f, &reason);
        }
    }

    async fn renew_loop(self: Arc<Self>) {
        let clock = self.client.clock().clone();
        loop {
            let (next, deadline) = {
                let st = self.state.lock().unwrap();
                if st.hold.phase != Phase::Held {
                    return;
                }
                (st.hold.renew_at(), st.deadline())
            };
            let hint = async {
                match self.hinted.get() {
                    Some(r) => r.notify.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return,
                _ = self.rescheduled.notified() => continue,
                // A hint (a yield request, or anything: it carries no authority) costs one
                // conditional read of the record, at most one per `HINTED_CONFIRM_EVERY`.
                _ = hint => {
                    if !self.confirm_once().await {
                        return;
                    }
                    clock.sleep(crate::wake_hint::HINTED_CONFIRM_EVERY).await;
                    continue;
                }
                _ = clock.sleep_until(next) => {}
                // A grant confirmed long ago (its reads failed) must not outlive its deadline.
                _ = clock.sleep_until(deadline) => {
                    self.mark_lost(LostReason::Expired);
                    return;
                }
            }
            // Renew the session; then, for a grant, confirm the lock's record.
            let renewed = async { self.renew_once().await && self.confirm_once().await };
            tokio::select! {
                biased;
                keep_going = renewed => if !keep_going { return },
                _ = clock.sleep_until(deadline) => {
                    // The renewal in flight (a write still resolving its outcome) did not land
                    // in time: a failed renewal, counted as one.
                    self.renewal_metrics.failed(self.metric_key());
                    self.mark_lost(LostReason::Expired);
                    return;
                }
            }
            // A plain lease whose holder listens reads its yield request object, after the
            // renewal landed and outside the race with the old deadline: a slow read must not
            // make a renewed lease look lost.
            if self.grant.get().is_none() {
                self.read_yield().await;
            }
        }
    }

    /// One renewal, retried until it lands or the deadline passes. False when renewing is over.
    async fn renew_once(&self) -> bool {
        let _writing = self.writes.lock().await;
        if self.stop.is_cancelled() {
            return false;
        }
        let clock = self.client.clock();
        let rng = &self.client.rng;
        let mut backoff = Backoff::for_timing(&self.timing);
        loop {
            // A fresh nonce per attempt: an attempt that gave up may still land, and must not be
            // taken for a later one.
            let (write, deadline, timing) = {
                let mut st = self.state.lock().unwrap();
                let write = st.hold.next_write(RecordState::Held, clock.wall(), rng);
                if let Some((record, _)) = &write {
                    st.hold.sending(record, clock.now());
                }
                (write, st.hold.deadline(), st.hold.timing)
            };
            let Some((record, cond)) = write else {
                return false;
            };
            let outcome = self
                .client
                .write(&self.key, &record, cond, deadline, &timing)
                .await;
            let rev = record.rev;
            let failed = outcome.is_err();
            let now = clock.now();
            let next = {
                let mut st = self.state.lock().unwrap();
                after_write(&mut st.hold, Wrote::Renewal, record, outcome, now)
            };
            if failed {
                self.renewal_metrics.failed(self.metric_key());
            }
            match next {
                Next::Renewed => {
                    debug!(lease = %self.url, rev, "renewed");
                    self.renewal_metrics
                        .landed(self.metric_key(), deadline.saturating_duration_since(now));
                    self.health_may_change();
                    return true;
                }
                Next::RetryRenewal(e) => {
                    // The attempt failed: the lease is `late` (its health, docs/protocol.md §4).
                    // Counted here, on after_write's answer, not in it: the count is no safety
                    // decision, and in the model's state it would only multiply states.
                    self.state.lock().unwrap().hold.renewal_failed();
                    self.health_may_change();
                    warn!(lease = %self.url, "renewal failed, retrying: {e}");
                    clock.sleep(backoff.next(rng).min(deadline - now)).await;
                }
                Next::Lost { reason, .. } => {
                    // A renewal's loss is tidied by the release that follows (or the drop).
                    self.mark_lost(reason);
                    return false;
                }
                other => unreachable!("not an answer to a renewal: {other:?}"),
            }
        }
    }

    /// From now on, a plain lease reads its yield request object after each landed renewal.
    fn listen_for_yields(&self) {
        self.yield_reads.lock().unwrap().listening = true;
    }

    /// A plain lease whose holder listens: read `KEY.yield` (a 304 while unchanged) and tell a
    /// request naming this epoch, once. Not a renewal's part: a failed read is logged and
    /// made again after the next renewal.
    async fn read_yield(&self) {
        let known = {
            let r = self.yield_reads.lock().unwrap();
            if !r.listening {
                return;
            }
            r.version.clone()
        };
        let key = yield_key(&self.key);
        let read = self
            .client
            .read_record(&key, known.as_ref(), &self.timing)
            .await;
        let told = {
            let mut r = self.yield_reads.lock().unwrap();
            match read {
                Ok(Get::Found(obj)) => {
                    r.version = Some(obj.version.clone());
                    r.watch.read(self.epoch, obj.bytes.as_deref())
                }
                Ok(Get::NotModified { .. }) => None,
                Ok(Get::NotFound { .. }) => {
                    r.version = None;
                    None
                }
                Err(e) => {
                    debug!(lease = %self.url, "reading the yield request object failed: {e}");
                    None
                }
            }
        };
        self.tell_yield(told);
    }

    /// Tell whoever listens of a yield request the confirmation reported (each once).
    fn tell_yield(&self, told: Option<YieldRequested>) {
        if let Some(y) = told {
            tracing::info!(
                lease = %self.grant.get().map_or(&self.url, |g| &g.url),
                by = %y.by,
                reason = y.reason.as_deref().unwrap_or(""),
                "asked to yield"
            );
            self.yields.send_replace(Some(y));
        }
    }

    /// A grant: read the lock's record (a 304 while unchanged) and confirm that it still lists
    /// the grant, making it again if it was deleted ([`GrantHold`]). Retried until the belief's
    /// deadline while the store does not answer. False when the grant is lost.
    async fn confirm_once(&self) -> bool {
        let Some(grant) = self.grant.get() else {
            return true;
        };
        let clock = self.client.clock();
        let rng = &self.client.rng;
        let mut backoff = Backoff::for_timing(&self.timing);
        let mut event = ConfirmEvent::Start;
        loop {
            let step = {
                let mut st = self.state.lock().unwrap();
                if st.hold.phase != Phase::Held {
                    return false;
                }
                let Some(c) = st.confirm.as_mut() else {
                    return true;
                };
                c.step(event, clock.now(), clock.wall())
            };
            event = match step {
                ConfirmStep::Read { if_none_match } => ConfirmEvent::Read(
                    self.client
                        .read_record(&grant.key, if_none_match.as_ref(), &self.timing)
                        .await,
                ),
                ConfirmStep::Write { bytes, cond } => {
                    tracing::info!(
                        lease = %grant.url,
                        "the lock's record was deleted; making it again as this holder last saw it"
                    );
                    ConfirmEvent::Wrote(
                        self.client
                            .put_raw(&grant.key, bytes, cond, &self.timing)
                            .await,
                    )
                }
                ConfirmStep::Confirmed => {
                    let told = self
                        .state
                        .lock()
                        .unwrap()
                        .confirm
                        .as_mut()
                        .and_then(GrantHold::take_yield);
                    self.tell_yield(told);
                    return true;
                }
                ConfirmStep::Retry => {
                    let deadline = self.state.lock().unwrap().deadline();
                    let now = clock.now();
                    if now >= deadline {
                        return true; // the watchdog reports the loss
                    }
                    clock.sleep(backoff.next(rng).min(deadline - now)).await;
                    ConfirmEvent::Start
                }
                ConfirmStep::Lost(reason) => {
                    self.mark_lost(reason);
                    // Release our session, so that nobody waits it out.
                    self.tidy_after_loss(None).await;
                    return false;
                }
            };
        }
    }

    async fn release(&self) -> Result<()> {
        let Some(grant) = self.grant.get() else {
            return self.release_record().await;
        };
        // A queued lock's grant: stop believing, leave the lock's record (which grants the
        // next in the same write), then release and delete the session.
        let believed = {
            let now = self.client.clock().now();
            let mut st = self.state.lock().unwrap();
            if st.hold.phase == Phase::Released {
                return Ok(());
            }
            let believed = st.hold.phase == Phase::Held && now < st.hold.deadline();
            if believed {
                st.hold.start_release();
            }
            believed || st.hold.phase == Phase::Releasing
        };
        self.health_may_change();
        let leave = Change::Leave(self.holder.id.clone());
        let left = crate::lock_change::run(&self.client, &grant.key, leave, None, &self.timing)
            .await
            .map(|_| ());
        match left {
            // Still ours to give back: calling release again tries again.
            Err(e) if believed => return Err(e.with_lease(&grant.url)),
            // Lost already: say so (the work may have overlapped); the waiters remove us
            // once our session shows we are gone.
            Err(e) => debug!(lease = %grant.url, "leaving after the loss: {e}"),
            Ok(()) => {}
        }
        let released = self.release_record().await;
        self.delete_session().await;
        released
    }

    /// Delete the session record this participant released (best effort: a session left
    /// behind is released, and harmless), and forget it: session keys are used once.
    async fn delete_session(&self) {
        let memo = self.client.memo(&self.key);
        self.client.forget(&self.key);
        let Some((version, _)) = memo.released else {
            return;
        };
        // Sent conditional on our released version; where a store ignores the condition
        // (`capabilities().conditional_delete` false) it deletes whatever is there, which is as
        // good: we have left the lock's record, and a session is never used again.
        let delete = self.client.store().delete(&self.key, &version);
        if let Err(e) = self
            .client
            .timed(self.timing.request_timeout, "delete", delete)
            .await
        {
            debug!(lease = %self.url, "could not delete the released session: {e}");
        }
    }

    async fn release_record(&self) -> Result<()> {
        self.stop.cancel();
        self.health_may_change();
        let _writing = self.writes.lock().await;
        let clock = self.client.clock();
        let (start, deadline) = {
            let mut st = self.state.lock().unwrap();
            let deadline = st.hold.deadline();
            let start = begin_release(&mut st.hold, clock.now(), clock.wall(), &self.client.rng);
            (start, deadline)
        };
        // Releasing: the health monitor ends without a call.
        self.health_may_change();
        let (record, cond) = match start {
            ReleaseStart::Send(record, cond) => (record, cond),
            ReleaseStart::Done => return Ok(()),
            ReleaseStart::Lost(reason) => {
                self.mark_lost(reason.clone());
                self.tidy_after_loss(None).await;
                return Err(self.lost_error(&reason));
            }
        };
        let outcome = self
            .client
            .write(&self.key, &record, cond, deadline, &self.timing)
            .await;
        let next = {
            let mut st = self.state.lock().unwrap();
            after_write(
                &mut st.hold,
                Wrote::Release,
                record.clone(),
                outcome,
                clock.now(),
            )
        };
        match next {
            Next::Released { remember } => {
                self.tenure_ended(None);
                debug!(lease = %self.url, epoch = self.epoch, "released");
                match remember {
                    Some(version) => self.client.released(&self.key, version, record),
                    // Taken over already, or an earlier release of ours: nothing to remember.
                    None => local_wake(self.client.store().url(), &self.key).notify_waiters(),
                }
                Ok(())
            }
            Next::Lost { reason, tidy } => {
                self.mark_lost(reason.clone());
                self.tidy_after_loss(tidy).await;
                Err(self.lost_error(&reason))
            }
            // The release's outcome is unknown: the lease stays "being released" (not
            // believed); calling release again tries again.
            Next::ReleaseUnknown(e) => Err(e.with_lease(&self.url)),
            other => unreachable!("not an answer to a release: {other:?}"),
        }
    }

    fn lost_error(&self, reason: &LostReason) -> crate::Error {
        self.state.lock().unwrap().hold.lost_error(reason)
    }

    /// After a loss, release our own record if it is still there, or acknowledge a break of our
    /// lease ([`Hold::tidy`]), so waiters need not wait out `ttl + grace`. Best effort.
    async fn tidy_after_loss(&self, current: Option<Get>) {
        let current = match current {
            Some(c) => c,
            None => match self.client.read_record(&self.key, None, &self.timing).await {
                Ok(c) => c,
                Err(_) => return,
            },
        };
        let clock = self.client.clock();
        let plan = self
            .state
            .lock()
            .unwrap()
            .hold
            .tidy(&current, clock.wall(), &self.client.rng);
        let Some((record, cond)) = plan else {
            return;
        };
        let give_up_at = clock.now() + self.timing.request_timeout * 2;
        let outcome = self
            .client
            .write(&self.key, &record, cond, give_up_at, &self.timing)
            .await;
        let next = after_write(
            &mut self.state.lock().unwrap().hold,
            Wrote::Tidy,
            record.clone(),
            outcome,
            clock.now(),
        );
        if let Next::Tidied {
            remember: Some(version),
        } = next
        {
            debug!(lease = %self.url, "released the record after losing the lease");
            self.client.released(&self.key, version, record);
        }
    }
}
