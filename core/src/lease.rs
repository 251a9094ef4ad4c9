//! A held lease: its deadline, its background renewal, its loss, its release.
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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::client::{local_wake, Backoff, Client, Written};
use crate::clock::Instant;
use crate::error::{Error, ErrorKind, Result};
use crate::options::{format_duration, Timing};
use crate::record::{timestamp, Holder, Parsed, Record, RecordState};
use crate::store::{Cond, Get, Version};
use crate::token::FencingToken;

/// Why a lease was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LostReason {
    /// The deadline passed without a renewal that landed (store unreachable, or too slow).
    Expired,
    /// Another holder's record replaced ours.
    TakenOver { holder: Holder, epoch: u64 },
    /// An operator broke the lease (`lease break`), with a higher epoch. Releasing the lease
    /// acknowledges the break, so the next holder need not wait out our ttl.
    Broken { by: Holder, epoch: u64 },
    /// The record was deleted.
    Vanished,
    /// The record was replaced by something that is not a lease record.
    Overwritten,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::Expired => f.write_str("its deadline passed without a successful renewal"),
            LostReason::TakenOver { holder, epoch } => {
                write!(f, "taken over by {} at epoch {epoch}", holder.describe())
            }
            LostReason::Broken { by, epoch } => {
                write!(f, "broken by {} (epoch now {epoch})", by.describe())
            }
            LostReason::Vanished => f.write_str("its record was deleted"),
            LostReason::Overwritten => {
                f.write_str("its record was overwritten with something unreadable")
            }
        }
    }
}

impl LostReason {
    /// What the store shows instead of the record of holder `ours`. Only a record that names
    /// us as the holder it broke is a break; any other record of another holder (held, or
    /// released after taking over) means we were taken over.
    fn from_current(current: &Get, ours: &str) -> LostReason {
        match current {
            Get::Found(obj) => match Record::parse(obj.bytes.as_deref(), obj.size) {
                Parsed::Valid(r) if r.broken.as_ref().is_some_and(|b| b.id == ours) => {
                    LostReason::Broken {
                        by: r.holder,
                        epoch: r.epoch,
                    }
                }
                Parsed::Valid(r) => LostReason::TakenOver {
                    holder: r.holder,
                    epoch: r.epoch,
                },
                Parsed::Corrupt { .. } => LostReason::Overwritten,
            },
            Get::NotFound { .. } => LostReason::Vanished,
            Get::NotModified { .. } => LostReason::Overwritten,
        }
    }
}

type LostCallback = Box<dyn FnOnce(&LostReason) + Send>;

enum Phase {
    Held,
    Released,
    Lost(LostReason),
}

struct State {
    record: Record,
    version: Version,
    /// `t_send` of the last write that landed.
    last_send: Instant,
    deadline: Instant,
    phase: Phase,
    callbacks: Vec<LostCallback>,
}

struct Shared {
    client: Client,
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
    /// The version (and write nonce) of each object this holder last wrote with a fenced
    /// write, so the next fenced write to it needs one request.
    fence_versions: Mutex<HashMap<String, (Version, String)>>,
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

impl Drop for DropGuard {
    fn drop(&mut self) {
        // Held: release. Lost: release too, which tidies up after the loss (releases our
        // record if it is still there, acknowledges a break) so nobody waits us out.
        if matches!(self.shared.state.lock().unwrap().phase, Phase::Released) {
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
        client: Client,
        key: String,
        url: String,
        record: Record,
        version: Version,
        t_send: Instant,
        timing: Timing,
    ) -> Lease {
        let shared = Arc::new(Shared {
            epoch: record.epoch,
            holder: record.holder.clone(),
            state: Mutex::new(State {
                record,
                version,
                last_send: t_send,
                deadline: t_send + timing.ttl,
                phase: Phase::Held,
                callbacks: Vec::new(),
            }),
            client,
            key,
            url,
            timing,
            writes: tokio::sync::Mutex::new(()),
            lost: CancellationToken::new(),
            stop: CancellationToken::new(),
            fence_versions: Mutex::default(),
        });
        tokio::spawn(shared.clone().renew_loop());
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

    pub(crate) fn fence_cache(&self) -> &Mutex<HashMap<String, (Version, String)>> {
        &self.shared().fence_versions
    }

    /// The fencing token: strictly increasing per lease, unchanged by renewals and release.
    pub fn epoch(&self) -> u64 {
        self.shared().epoch
    }

    /// The lease's name, epoch and holder id, to hand to resources that check it.
    pub fn token(&self) -> FencingToken {
        let s = self.shared();
        FencingToken::new(s.url.clone(), s.epoch).with_holder(s.holder.id.clone())
    }

    pub fn key(&self) -> &str {
        &self.shared().key
    }

    pub fn url(&self) -> &str {
        &self.shared().url
    }

    pub fn holder(&self) -> &Holder {
        &self.shared().holder
    }

    pub fn ttl(&self) -> Duration {
        self.shared().timing.ttl
    }

    pub fn client(&self) -> &Client {
        &self.shared().client
    }

    /// How long this holder may still rely on the lease (zero once lost or released).
    pub fn remaining(&self) -> Duration {
        let s = self.shared();
        let st = s.state.lock().unwrap();
        match st.phase {
            Phase::Held => st
                .deadline
                .saturating_duration_since(s.client.clock().now()),
            _ => Duration::ZERO,
        }
    }

    pub fn is_held(&self) -> bool {
        !self.remaining().is_zero()
    }

    /// Succeed, returning the time left, only if the lease is held for at least `min_remaining`
    /// more; otherwise fail with [`ErrorKind::Lost`]. Call it before each step that needs the
    /// lease.
    pub fn ensure_held(&self, min_remaining: Duration) -> Result<Duration> {
        let s = self.shared();
        let st = s.state.lock().unwrap();
        match &st.phase {
            Phase::Lost(reason) => Err(s.lost_error(reason)),
            Phase::Released => Err(
                Error::new(ErrorKind::Lost, format!("{} was released", s.url))
                    .with_lease(&s.url)
                    .with_epoch(s.epoch),
            ),
            Phase::Held => {
                let left = st
                    .deadline
                    .saturating_duration_since(s.client.clock().now());
                if left.is_zero() {
                    return Err(s.lost_error(&LostReason::Expired));
                }
                if left < min_remaining {
                    return Err(Error::new(
                        ErrorKind::Lost,
                        format!(
                            "{} has {} left, less than the {} required",
                            s.url,
                            format_duration(left),
                            format_duration(min_remaining)
                        ),
                    )
                    .with_lease(&s.url)
                    .with_epoch(s.epoch));
                }
                Ok(left)
            }
        }
    }

    /// Why the lease was lost, if it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        match &self.shared().state.lock().unwrap().phase {
            Phase::Lost(r) => Some(r.clone()),
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
        match &st.phase {
            Phase::Lost(r) => {
                let r = r.clone();
                drop(st);
                run_callback(Box::new(f), &r);
            }
            Phase::Held => st.callbacks.push(Box::new(f)),
            Phase::Released => {}
        }
    }

    /// Renew now instead of waiting for the background renewal (before a long step, say),
    /// and return the time left afterwards. Fails with [`ErrorKind::Lost`] if the lease is
    /// lost (or released).
    pub async fn renew(&self) -> Result<Duration> {
        let s = self.shared();
        s.renew_once().await;
        self.ensure_held(Duration::ZERO)
    }

    /// Release the lease: write `released` (same epoch) so a waiter can take it at once.
    /// Idempotent. Fails with [`ErrorKind::Lost`] if the lease was lost before it could be
    /// released: whatever was done under it may have overlapped with another holder.
    pub async fn release(&self) -> Result<()> {
        self.shared().release().await
    }
}

fn run_callback(f: LostCallback, reason: &LostReason) {
    if catch_unwind(AssertUnwindSafe(|| f(reason))).is_err() {
        warn!("a lost-lease callback panicked");
    }
}

impl Shared {
    fn lost_error(&self, reason: &LostReason) -> Error {
        let mut e = Error::new(
            ErrorKind::Lost,
            format!("{} (epoch {}) was lost: {reason}", self.url, self.epoch),
        )
        .with_lease(&self.url)
        .with_epoch(self.epoch);
        if let LostReason::TakenOver { holder, .. } | LostReason::Broken { by: holder, .. } = reason
        {
            e = e.with_holder(holder.clone());
        }
        e
    }

    fn mark_lost(&self, reason: LostReason) {
        let callbacks = {
            let mut st = self.state.lock().unwrap();
            if !matches!(st.phase, Phase::Held) {
                return;
            }
            st.phase = Phase::Lost(reason.clone());
            std::mem::take(&mut st.callbacks)
        };
        // Reported to the holder through the API; a log line at info is enough.
        tracing::info!(lease = %self.url, epoch = self.epoch, "lease lost: {reason}");
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
                if !matches!(st.phase, Phase::Held) {
                    return;
                }
                (st.last_send + self.timing.renew, st.deadline)
            };
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return,
                _ = clock.sleep_until(next) => {}
            }
            tokio::select! {
                biased;
                keep_going = self.renew_once() => if !keep_going { return },
                _ = clock.sleep_until(deadline) => {
                    self.mark_lost(LostReason::Expired);
                    return;
                }
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
        let (mut record, version, deadline) = {
            let st = self.state.lock().unwrap();
            if !matches!(st.phase, Phase::Held) {
                return false;
            }
            (st.record.clone(), st.version.clone(), st.deadline)
        };
        record = record.successor();
        record.renewed_at = Some(timestamp(clock.wall()));
        let mut backoff = Backoff::new(&self.timing);
        let rng = &self.client.inner.rng;
        loop {
            // A nonce per write: an attempt that gave up may still land, and must not be taken
            // for a later one.
            record.write = Some(rng.nonce());
            match self
                .client
                .write(
                    &self.key,
                    &record,
                    Cond::Match(version.clone()),
                    deadline,
                    &self.timing,
                )
                .await
            {
                Ok(Written::Landed { version, t_send }) => {
                    let mut st = self.state.lock().unwrap();
                    st.record = record;
                    st.version = version;
                    st.last_send = t_send;
                    st.deadline = t_send + self.timing.ttl;
                    debug!(lease = %self.url, rev = st.record.rev, "renewed");
                    return true;
                }
                // Replaced: our renewal landed, then someone else's write replaced it.
                Ok(Written::Rejected { current }) | Ok(Written::Replaced { current }) => {
                    self.mark_lost(LostReason::from_current(&current, &self.holder.id));
                    return false;
                }
                Err(e) => {
                    let now = clock.now();
                    if now >= deadline {
                        self.mark_lost(LostReason::Expired);
                        return false;
                    }
                    warn!(lease = %self.url, "renewal failed, retrying: {e}");
                    clock
                        .sleep(backoff.next(&self.client.inner.rng).min(deadline - now))
                        .await;
                }
            }
        }
    }

    async fn release(&self) -> Result<()> {
        self.stop.cancel();
        let _writing = self.writes.lock().await;
        let clock = self.client.clock();
        let held = {
            let st = self.state.lock().unwrap();
            match &st.phase {
                Phase::Released => return Ok(()),
                Phase::Lost(reason) => Err(self.lost_error(reason)),
                Phase::Held => Ok((st.record.clone(), st.version.clone(), st.deadline)),
            }
        };
        let (mut record, version, deadline) = match held {
            Ok(held) => held,
            Err(lost) => {
                self.tidy_after_loss().await;
                return Err(lost);
            }
        };
        if clock.now() >= deadline {
            self.mark_lost(LostReason::Expired);
            self.tidy_after_loss().await;
            return Err(self.lost_error(&LostReason::Expired));
        }
        record = record.successor();
        record.state = RecordState::Released;
        record.renewed_at = Some(timestamp(clock.wall()));
        record.write = Some(self.client.inner.rng.nonce());
        match self
            .client
            .write(
                &self.key,
                &record,
                Cond::Match(version),
                deadline,
                &self.timing,
            )
            .await
        {
            Ok(Written::Landed { version, .. }) => {
                self.state.lock().unwrap().phase = Phase::Released;
                debug!(lease = %self.url, epoch = self.epoch, "released");
                self.client.released(&self.key, version, record);
                Ok(())
            }
            // The release landed and a waiter has already taken the lease: released.
            Ok(Written::Replaced { .. }) => {
                self.state.lock().unwrap().phase = Phase::Released;
                debug!(lease = %self.url, epoch = self.epoch, "released (and already taken over)");
                local_wake(self.client.store().url(), &self.key).notify_waiters();
                Ok(())
            }
            Ok(Written::Rejected { current }) => {
                let reason = LostReason::from_current(&current, &self.holder.id);
                self.mark_lost(reason.clone());
                self.acknowledge_break(&current).await;
                Err(self.lost_error(&reason))
            }
            Err(e) => {
                if clock.now() >= deadline {
                    self.mark_lost(LostReason::Expired);
                }
                Err(e.with_lease(&self.url))
            }
        }
    }

    /// After a loss our record may still be in the store (the loss was by expiry: the store was
    /// unreachable, or this process was paused), or an operator's break that waits us out.
    /// Releasing either lets waiters in at once instead of after `ttl + grace`; we no longer
    /// believe we hold the lease, so this is safe. Best effort.
    async fn tidy_after_loss(&self) {
        let timeout = self.timing.request_timeout;
        let Ok(current) = self.client.get(&self.key, None, timeout).await else {
            return;
        };
        if !self.acknowledge_break(&current).await {
            self.release_if_ours(&current).await;
        }
    }

    /// If `current` is our own record, still held, release it.
    async fn release_if_ours(&self, current: &Get) -> bool {
        let Get::Found(obj) = current else {
            return false;
        };
        let Parsed::Valid(record) = Record::parse(obj.bytes.as_deref(), obj.size) else {
            return false;
        };
        // The same holder id at another epoch is a later lease of the same acquisition (one
        // that let an expired adoption go and took the lease again): not ours to release.
        let ours = record.holder.id == self.holder.id && record.epoch == self.epoch;
        if !ours || record.state != RecordState::Held {
            return false;
        }
        self.release_record(record, obj.version.clone()).await
    }

    /// If `current` is a break of our lease that waits us out, release it: the acknowledgement
    /// that we no longer believe we hold the lease, which lets the next holder in at once.
    async fn acknowledge_break(&self, current: &Get) -> bool {
        let Get::Found(obj) = current else {
            return false;
        };
        let Parsed::Valid(record) = Record::parse(obj.bytes.as_deref(), obj.size) else {
            return false;
        };
        let ours = record
            .broken
            .as_ref()
            .is_some_and(|b| b.id == self.holder.id && b.epoch == self.epoch);
        if !ours || record.state != RecordState::Held {
            return false;
        }
        if !matches!(self.state.lock().unwrap().phase, Phase::Lost(_)) {
            return false; // only a holder that has stopped believing may acknowledge
        }
        let released = self.release_record(record, obj.version.clone()).await;
        if released {
            debug!(lease = %self.url, "acknowledged the break of our lease");
        }
        released
    }

    /// Write `record`'s successor as `released` over `version`.
    async fn release_record(&self, record: Record, version: Version) -> bool {
        let timeout = self.timing.request_timeout;
        let mut next = record.successor();
        next.state = RecordState::Released;
        next.renewed_at = Some(timestamp(self.client.clock().wall()));
        next.write = Some(self.client.inner.rng.nonce());
        let give_up_at = self.client.clock().now() + timeout * 2;
        match self
            .client
            .write(
                &self.key,
                &next,
                Cond::Match(version),
                give_up_at,
                &self.timing,
            )
            .await
        {
            Ok(Written::Landed { version, .. }) => {
                debug!(lease = %self.url, "released the record after losing the lease");
                self.client.released(&self.key, version, next);
                true
            }
            _ => false,
        }
    }
}
