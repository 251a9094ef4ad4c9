//! Acquiring and breaking leases: the drivers of [`protocol::acquire`] and
//! [`protocol::breaking`]. They only carry out steps — read, write, sleep — and report.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::client::{local_wake, Client};
use crate::duration::format_duration;
use crate::error::{Error, ErrorKind, Result};
use crate::lease::Lease;
use crate::metrics;
use crate::options::LeaseOptions;
use crate::protocol::acquire::{Acquirer, Event, Plan, Step};
use crate::protocol::breaking::{self, BreakMode, BreakPlan};
use crate::protocol::view::View;
use crate::protocol::write::Written;
use crate::protocol::Backoff;
use crate::record::{Holder, RecordState};
use crate::status::Status;
use crate::store::validate_key;
use crate::store_clock;

/// The `tracing` target of the event that says an acquisition waits for a holder: once, then
/// at each change of holder (`waiting for URL, held by "job" (id …, host h, pid 7) at epoch
/// N`), at info. `lease run` prints it on a terminal.
pub const WAITING_TARGET: &str = "lease::waiting";

/// Tell (at info, target [`WAITING_TARGET`]) who holds the lease when that changed since `told`.
fn say_who_holds(
    url: &str,
    waiting_for: Option<(Option<&Holder>, Option<u64>)>,
    told: &mut Option<(Option<String>, Option<u64>)>,
) {
    let Some((holder, epoch)) = waiting_for else {
        return;
    };
    let seen = (holder.map(|h| h.id.clone()), epoch);
    if told.as_ref() == Some(&seen) {
        return;
    }
    let by = holder.map_or_else(
        || "an unknown holder (the record is corrupt)".to_string(),
        Holder::describe,
    );
    let at = epoch.map_or_else(String::new, |e| format!(" at epoch {e}"));
    info!(target: WAITING_TARGET, lease = %url, "waiting for {url}, held by {by}{at}");
    *told = Some(seen);
}

impl Client {
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

    /// Begin a queued lock participant's session: one try on a fresh key, as `holder`.
    /// (Boxed: a queued acquisition begins a session, which is a lease acquisition.)
    pub(crate) fn acquire_session<'a>(
        &'a self,
        key: &'a str,
        opts: &'a LeaseOptions,
        holder: Holder,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Lease>> + Send + 'a>> {
        Box::pin(self.acquire_lease(key, opts, true, None, Some(holder)))
    }

    async fn acquire_inner(
        &self,
        key: &str,
        opts: &LeaseOptions,
        try_once: bool,
        cancel: Option<&CancellationToken>,
    ) -> Result<Lease> {
        // An owner that holds the lease already would wait for itself: fail at once.
        let owner = crate::owner::owner_of(opts);
        let me = std::sync::Arc::as_ptr(&self.inner) as usize;
        // A cancelled acquisition ends as cancelled, whoever holds the lease.
        let cancelled = cancel.is_some_and(|c| c.is_cancelled());
        if let Some(owner) = owner.as_ref().filter(|_| !cancelled) {
            let mine = crate::owner::holding(me, key, owner, opts);
            // A grant: the queue record shows grants by their sessions, which stay ours while
            // the grant believes. A plain lease: only if the store still shows it (one read),
            // not a lease broken or taken over whose holder has not noticed yet.
            let ours = match mine.iter().find(|l| l.grant().is_some()) {
                Some(grant) => Some(grant),
                None if mine.is_empty() => None,
                // On an error the acquisition goes on: it reads again and reports what fails.
                None => match opts.timing(&self.store().capabilities()) {
                    Ok(t) => match self.get(key, None, t.request_timeout).await {
                        Ok(get) => mine.iter().find(|l| crate::owner::still_held_by(l, &get)),
                        Err(_) => None,
                    },
                    Err(_) => None,
                },
            };
            if let Some(lease) = ours {
                let url = self.lease_url(key);
                return Err(crate::owner::waits_for_itself(&url, owner, lease));
            }
        }
        let lease = self
            .acquire_lease(key, opts, try_once, cancel, None)
            .await?;
        if let Some(owner) = owner {
            crate::owner::register(me, key, owner, &lease);
        }
        Ok(lease)
    }

    async fn acquire_lease(
        &self,
        key: &str,
        opts: &LeaseOptions,
        try_once: bool,
        cancel: Option<&CancellationToken>,
        holder: Option<Holder>,
    ) -> Result<Lease> {
        let url = self.lease_url(key);
        validate_key(key).map_err(|e| e.with_lease(&url))?;
        let timing = opts
            .timing(&self.store().capabilities())
            .map_err(|e| e.with_lease(&url))?;
        // A holder writes at every renewal: faster than the store sustains (GCS: about one
        // write per second per object) it would get 429s and lose the lease.
        let min_write = self.store().min_write_interval();
        if timing.renew < min_write {
            return Err(Error::invalid(format!(
                "renew interval {} is shorter than the {} this store needs between writes of one \
                 object: use a ttl of at least {} (or a renew interval of at least {})",
                format_duration(timing.renew),
                format_duration(min_write),
                format_duration(min_write * 3),
                format_duration(min_write),
            ))
            .with_lease(&url));
        }
        let clock = self.clock().clone();
        let rng = &self.inner.rng;
        let start = clock.now();
        let try_once = try_once || opts.wait == Some(Duration::ZERO);
        let wait_deadline = if try_once {
            Some(start)
        } else {
            opts.wait.map(|w| start + w)
        };
        let never = CancellationToken::new();
        let cancel = cancel.unwrap_or(&never);
        // A queued lock's acquisition, given what a read of the key showed, if any.
        let queued = |first: Option<crate::store::Get>| crate::queue::Request {
            key,
            url: &url,
            opts,
            timing,
            try_once,
            wait_deadline,
            cancel,
            first,
        };
        // A queued lock's session is an acquisition of its own key, not the lock's: only the
        // lock's acquisition is counted.
        let counted = holder.is_none();
        let count = |result: &Result<Lease>, handover| {
            if counted {
                let waited = clock.now().saturating_duration_since(start);
                metrics::acquisition(key, metrics::Outcome::of(result), waited, handover);
            }
        };
        if opts.wants_queue() {
            let result = self.acquire_queued(queued(None)).await;
            count(&result, None);
            return result;
        }
        let plan = Plan {
            url: url.clone(),
            holder: holder
                .unwrap_or_else(|| self.new_lease_holder(opts.label.clone(), &opts.companion_pids)),
            timing,
            data: opts.data.clone(),
            try_once,
            wait_deadline,
            unavailable_timeout: Some(timing.unavailable_timeout),
            history: opts.history,
            probe_holders: opts
                .dead_holder_rule
                .unwrap_or_else(|| self.store().dead_holder_rule()),
        };
        let memo = self.memo(key);
        // The remembered release is used once: whatever happens, the view moves on.
        self.remember(key, |m| m.released = None);
        let mut acquirer = Acquirer::new(plan, memo.epoch, memo.released, start);
        let wake = local_wake(self.store().url(), key);
        let mut event = Event::Start;
        let mut handover = None;
        let mut failed_read = None;
        let mut told = None;
        let mut warned_date = false;
        let result = loop {
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if cancel.is_cancelled() && matches!(event, Event::Start | Event::Slept) {
                event = Event::Cancelled;
            }
            let step = acquirer.step(event, clock.now(), clock.wall(), rng);
            say_who_holds(&url, acquirer.waiting_for(), &mut told);
            // A failed read that is retried is logged: nothing else says why the wait goes on.
            // One that ends the acquisition is not: the error returned is its report.
            if let (Some(e), Step::Sleep { .. }) = (failed_read.take(), &step) {
                warn!(lease = %url, "read failed, retrying: {e}");
            }
            if !warned_date && acquirer.date_refused() {
                warned_date = true;
                store_clock::warn_date_refused(self, key, None);
            }
            match step {
                Step::Read { if_none_match } => {
                    let read = self.read_record(key, if_none_match.as_ref(), &timing).await;
                    if let Err(e) = &read {
                        debug!(lease = %url, "read failed: {e}");
                        failed_read = Some(e.to_string());
                    }
                    // A queued lock: every request on it queues (docs/protocol.md §10). Seen
                    // before the lease's rules could take it for a corrupt lease record.
                    if let Ok(get) = &read {
                        if crate::queue::is_queue_record(get) {
                            self.saw_epoch(key, acquirer.known_epoch());
                            let result = self.acquire_queued(queued(Some(get.clone()))).await;
                            count(&result, None);
                            return result;
                        }
                    }
                    event = Event::Read(read);
                }
                Step::Put { bytes, cond } => {
                    event = Event::Put(self.put_raw(key, bytes, cond, &timing).await);
                }
                Step::Probe { pids } => event = Event::Probed(crate::process::probe(&pids)),
                Step::Stamp => {
                    let stamp = store_clock::stamp(self, key, &timing).await;
                    match &stamp {
                        Err(e) if e.kind() != ErrorKind::Unavailable => {
                            warned_date = true;
                            store_clock::warn_date_refused(self, key, Some(e));
                        }
                        Err(e) => warn!(lease = %url, "reading the store's clock failed: {e}"),
                        Ok(_) => {}
                    }
                    event = Event::Stamped(stamp);
                }
                Step::Sleep {
                    until,
                    wake_on_release,
                } => {
                    tokio::select! {
                        _ = clock.sleep_until(until) => event = Event::Slept,
                        _ = &mut notified, if wake_on_release => event = Event::Slept,
                        _ = cancel.cancelled() => event = Event::Cancelled,
                    }
                }
                Step::Acquired {
                    record,
                    version,
                    t_send,
                } => {
                    debug!(lease = %url, epoch = record.epoch, "acquired");
                    handover = acquirer.handover(clock.now());
                    break Ok(Lease::start(
                        self.clone(),
                        key.to_string(),
                        url.clone(),
                        record,
                        version,
                        t_send,
                        timing,
                    ));
                }
                Step::Failed(e) => break Err(e),
            }
        };
        self.saw_epoch(key, acquirer.known_epoch());
        count(&result, handover);
        result
    }

    /// An operator's forced takeover; see [`BreakMode`]. Returns the lease's status before the
    /// break, or `None` when there was no held lease to break.
    pub async fn break_lease(
        &self,
        key: &str,
        label: Option<String>,
        mode: BreakMode,
    ) -> Result<Option<Status>> {
        let url = self.lease_url(key);
        validate_key(key).map_err(|e| e.with_lease(&url))?;
        let timing = LeaseOptions::default().timing(&self.store().capabilities())?;
        let clock = self.clock().clone();
        let mut backoff = Backoff::for_timing(&timing);
        for _ in 0..20 {
            let mut view = View::default();
            let read = self
                .read_record(key, None, &timing)
                .await
                .map_err(|e| e.with_lease(&url))?;
            // A queued lock: break each grant's session, by the same rules (its holder learns
            // at its next renewal; the waiters remove it once the break shows it is gone).
            if let Some((record, version)) = crate::queue::queue_read(&read) {
                if record.grants.is_empty() {
                    return Ok(None);
                }
                let before = Status::from_queue(&url, &record, version);
                for g in &record.grants {
                    let skey = crate::queue::session_key(key, g.id());
                    Box::pin(self.break_lease(&skey, label.clone(), mode)).await?;
                }
                return Ok(Some(before));
            }
            view.absorb(read, clock.now());
            let before = Status::from_view(&url, &view, &timing);
            let breaker =
                self.new_holder(Some(label.clone().unwrap_or_else(|| "lease break".into())));
            let known = self.memo(key).epoch;
            let (record, cond) = match breaking::plan(
                &view,
                known,
                mode,
                breaker,
                &timing,
                clock.wall(),
                &self.inner.rng,
            ) {
                BreakPlan::Nothing => return Ok(None),
                BreakPlan::AlreadyBroken => return Ok(Some(before)),
                BreakPlan::Write { record, cond } => (record, cond),
            };
            let give_up_at = clock.now() + timing.ttl;
            match self
                .write(key, &record, cond, give_up_at, &timing)
                .await
                .map_err(|e| e.with_lease(&url))?
            {
                Written::Landed { version, .. } => {
                    self.saw_epoch(key, record.epoch);
                    if record.state == RecordState::Released {
                        self.released(key, version, record);
                    }
                    return Ok(Some(before));
                }
                // Our break landed and someone has already replaced it.
                Written::Replaced { .. } => {
                    self.saw_epoch(key, record.epoch);
                    local_wake(self.store().url(), key).notify_waiters();
                    return Ok(Some(before));
                }
                Written::Rejected { .. } => clock.sleep(backoff.next(&self.inner.rng)).await,
            }
        }
        Err(
            Error::unavailable(format!("{url} kept changing while breaking it; try again"))
                .with_lease(url),
        )
    }
}
