//! Queued locks: the driver of [`protocol::queue`](crate::protocol::queue) (docs/protocol.md
//! §10). It only carries out steps — read the lock's record, apply a change, write it under a
//! condition, read a blocker's session, sleep — and reports.
//!
//! A participant first holds a session (an ordinary lease at `KEY.q/ID`, renewed in the
//! background), then joins the lock's record, then waits until the record shows its grant. The
//! handle it gets is its session lease, turned into the grant's handle ([`Lease::grant`]).

use std::collections::HashMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::client::{local_wake, Client};
use crate::clock::Instant;
use crate::duration::format_duration;
use crate::error::{Error, ErrorKind, Result};
use crate::lease::{Grant, Lease};
use crate::options::{LeaseOptions, Timing};
use crate::protocol::queue::{Change, Entry, Position, QueueRecord};
use crate::protocol::takeover::Decision;
use crate::protocol::view::{Seen, View};
use crate::protocol::write::Written;
use crate::protocol::Backoff;
use crate::record::{timestamp, Holder, Parsed, Record, RecordState};
use crate::store::{Cond, Get, Put, Version, Watch};
use crate::store_clock;

/// The key of participant `id`'s session lease for the lock at `key`.
pub(crate) fn session_key(key: &str, id: &str) -> String {
    format!("{key}.q/{id}")
}

/// What a read of a lock's key found.
fn queue_record(get: &Get) -> Option<std::result::Result<QueueRecord, String>> {
    match get {
        Get::Found(obj) => QueueRecord::parse(obj.bytes.as_deref()?),
        _ => None,
    }
}

/// A queued lock's record and its version, when `get` found a valid one.
pub(crate) fn queue_read(get: &Get) -> Option<(QueueRecord, Version)> {
    match (get, queue_record(get)) {
        (Get::Found(obj), Some(Ok(r))) => Some((r, obj.version.clone())),
        _ => None,
    }
}

/// Whether `get` shows a queued lock's record (a lease's acquire then hands over to the queue).
pub(crate) fn is_queue_record(get: &Get) -> bool {
    queue_record(get).is_some()
}

/// A blocker's session, as a head waiter watches it.
#[derive(Default)]
struct SessionWatch {
    view: View,
    next_check: Option<Instant>,
    absent_since: Option<Instant>,
}

/// Everything one queued acquisition needs.
pub(crate) struct Request<'a> {
    pub key: &'a str,
    pub url: &'a str,
    pub opts: &'a LeaseOptions,
    pub timing: Timing,
    pub try_once: bool,
    pub wait_deadline: Option<Instant>,
    pub cancel: &'a CancellationToken,
    /// A read of the lock's key already made (by a lease acquire that found a queued lock).
    pub first: Option<Get>,
}

impl Client {
    /// Acquire a grant of the queued lock at `req.key`.
    pub(crate) async fn acquire_queued(&self, req: Request<'_>) -> Result<Lease> {
        req.opts.check_queue().map_err(|e| e.with_lease(req.url))?;
        let me = self.new_holder(req.opts.label.clone());
        let mut session: Option<Lease> = None;
        let mut maybe_joined = false;
        let result = self
            .wait_for_grant(&req, &me, &mut session, &mut maybe_joined)
            .await;
        match result {
            Ok(lease) => Ok(lease),
            Err(e) => {
                // Leave no trace for others to wait out: leave the queue if a join may have
                // landed, then end the session.
                if maybe_joined {
                    if let Err(leave) = self.queue_leave(req.key, &me.id, &req.timing).await {
                        warn!(lease = %req.url, "could not leave the queue: {leave}");
                    }
                }
                if let Some(s) = session {
                    s.end_session().await;
                }
                Err(e.with_lease(req.url))
            }
        }
    }

    async fn wait_for_grant(
        &self,
        req: &Request<'_>,
        me: &Holder,
        session: &mut Option<Lease>,
        maybe_joined: &mut bool,
    ) -> Result<Lease> {
        let (key, url, timing) = (req.key, req.url, &req.timing);
        let clock = self.clock().clone();
        let rng = &self.inner.rng;
        let start = clock.now();
        let entry = Entry {
            holder: me.clone(),
            mode: req.opts.mode,
            scope: req.opts.scope.clone(),
            ttl_ms: timing.ttl.as_millis() as u64,
            token: None,
            since: Some(timestamp(clock.wall())),
            data: req.opts.data.clone(),
        };
        let mut view = View::default();
        let mut queue: Option<(QueueRecord, Version)> = None;
        let mut pending = req.first.clone();
        // After a write of ours landed, the record is known without reading it.
        let mut fresh = false;
        let mut watches: HashMap<String, SessionWatch> = HashMap::new();
        let mut backoff = Backoff::for_timing(timing);
        let mut last_answer = start;
        let wake = local_wake(self.store().url(), key);
        // Made before the first read, so no change after that read is missed.
        let mut watch = self.store().watch(key);
        loop {
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = clock.now();
            let timed_out = req.wait_deadline.is_some_and(|d| now >= d) && !req.try_once;
            if req.cancel.is_cancelled() {
                return Err(Error::new(
                    ErrorKind::Cancelled,
                    format!("acquiring {url} was cancelled"),
                ));
            }
            if !fresh {
                let get = match pending.take() {
                    Some(g) => Ok(g),
                    None => {
                        let version = queue.as_ref().map(|(_, v)| v).or(view.version());
                        self.read_record(key, version, timing).await
                    }
                };
                match get {
                    Ok(get) => {
                        last_answer = clock.now();
                        backoff = Backoff::for_timing(timing);
                        match queue_record(&get) {
                            Some(Ok(r)) => {
                                let Get::Found(obj) = &get else {
                                    unreachable!()
                                };
                                queue = Some((r, obj.version.clone()));
                            }
                            Some(Err(reason)) => {
                                warn!(lease = %url, "{reason}; taking it over by the usual rules");
                                queue = None;
                            }
                            None if matches!(get, Get::NotModified { .. }) => {}
                            None => queue = None,
                        }
                        view.absorb(get, clock.now());
                    }
                    Err(e) => {
                        let now = clock.now();
                        if req.try_once
                            || timed_out
                            || now - last_answer >= timing.unavailable_timeout
                        {
                            return Err(e);
                        }
                        warn!(lease = %url, "read failed, retrying: {e}");
                        clock.sleep(backoff.next(rng)).await;
                        continue;
                    }
                }
            }
            fresh = false;
            let now = clock.now();
            // What to write, if anything, to join (or to make the lock a queued lock).
            let write: Option<(QueueRecord, Cond)> = match &queue {
                Some((r, version)) => {
                    r.check_permits(url, req.opts.permits)?;
                    match r.position(&me.id) {
                        Position::Granted { token } => {
                            // A participant joins only once its session has begun.
                            let Some(lease) = session.take() else {
                                return Err(Error::new(
                                    ErrorKind::Internal,
                                    format!("{url} granted a participant that has no session"),
                                ));
                            };
                            if let Err(e) = lease.ensure_held(Duration::ZERO) {
                                *session = Some(lease);
                                return Err(Error::unavailable(format!(
                                    "{url} granted this participant token {token}, but its \
                                     session was lost meanwhile: {e}"
                                )));
                            }
                            lease.set_grant(Grant {
                                key: key.to_string(),
                                url: url.to_string(),
                                token,
                                mode: req.opts.mode,
                                scope: req.opts.scope.clone(),
                                permits: r.permits,
                            });
                            self.saw_epoch(key, r.epoch);
                            debug!(lease = %url, token, "granted");
                            return Ok(lease);
                        }
                        Position::Waiting { ahead, blockers } => {
                            *maybe_joined = true;
                            if req.try_once {
                                return Err(held_error(ErrorKind::Held, url, r, ahead, None));
                            }
                            if timed_out {
                                return Err(held_error(
                                    ErrorKind::Timeout,
                                    url,
                                    r,
                                    ahead,
                                    Some(now - start),
                                ));
                            }
                            let next_check = self
                                .check_blockers(key, &blockers, &mut watches, timing, me)
                                .await;
                            match next_check {
                                Checked::Removed => continue,
                                Checked::Next(at) => {
                                    self.wait_a_while(
                                        req,
                                        session,
                                        at,
                                        notified.as_mut(),
                                        &mut watch,
                                    )
                                    .await?;
                                    continue;
                                }
                            }
                        }
                        Position::Absent => {
                            let next = r
                                .apply(&Change::Join(entry.clone()))?
                                .expect("an absent participant joins");
                            let granted_at_once =
                                matches!(next.position(&me.id), Position::Granted { .. });
                            if req.try_once && !granted_at_once {
                                let ahead = next.queue.len().saturating_sub(1);
                                return Err(held_error(ErrorKind::Held, url, r, ahead, None));
                            }
                            Some((next, Cond::Match(version.clone())))
                        }
                    }
                }
                None => match &view.seen {
                    None => continue,
                    Some(Seen::Absent) => {
                        let floor = self.memo(key).epoch.max(view.time_epoch(clock.wall()));
                        let next = QueueRecord::new(floor, req.opts.permits)
                            .apply(&Change::Join(entry.clone()))?
                            .expect("a new record takes its first participant");
                        Some((next, Cond::Create))
                    }
                    // A lease (or an unreadable record): free it as any waiter would, then make
                    // it a queued lock whose tokens start above its epoch.
                    Some(Seen::Present { .. }) => {
                        let known = self.memo(key).epoch;
                        match store_clock::decide_confirmed(self, key, &mut view, timing, known)
                            .await
                        {
                            Decision::TakeOver { version, epoch, .. } => {
                                let next = QueueRecord::new(epoch - 1, req.opts.permits)
                                    .apply(&Change::Join(entry.clone()))?
                                    .expect("a new record takes its first participant");
                                Some((next, Cond::Match(version)))
                            }
                            Decision::Create { .. } => unreachable!("the record is present"),
                            Decision::Stamp => unreachable!("decide_confirmed asks for none"),
                            Decision::Wait {
                                until,
                                holder,
                                epoch,
                            } => {
                                let by = holder.as_ref().map_or_else(
                                    || "an unknown holder (the record is corrupt)".to_string(),
                                    Holder::describe,
                                );
                                let e = |kind, what: String| {
                                    let mut e = Error::new(kind, what);
                                    if let Some(h) = holder.clone() {
                                        e = e.with_holder(h);
                                    }
                                    if let Some(ep) = epoch {
                                        e = e.with_epoch(ep);
                                    }
                                    e
                                };
                                if req.try_once {
                                    return Err(e(
                                        ErrorKind::Held,
                                        format!("{url} is held by {by}"),
                                    ));
                                }
                                if timed_out {
                                    return Err(e(
                                        ErrorKind::Timeout,
                                        format!(
                                            "timed out after {} waiting for {url}, held by {by}",
                                            format_duration(now - start)
                                        ),
                                    ));
                                }
                                self.wait_a_while(
                                    req,
                                    session,
                                    Some(until),
                                    notified.as_mut(),
                                    &mut watch,
                                )
                                .await?;
                                continue;
                            }
                        }
                    }
                },
            };
            let Some((next, cond)) = write else { continue };
            if timed_out {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "timed out after {} waiting for {url}",
                        format_duration(now - start)
                    ),
                ));
            }
            // The session exists before any join can land: it is what shows we are alive.
            if session.is_none() {
                *session = Some(self.begin_session(key, me, req.opts, timing).await?);
            }
            // A lapsed session means we may have been granted, proven gone and removed while
            // a join's outcome was unknown: joining again would list us as a new arrival that
            // can never believe. Give up instead (found by the model checker).
            if let Some(Err(e)) = session.as_ref().map(|s| s.ensure_held(Duration::ZERO)) {
                return Err(Error::unavailable(format!(
                    "lost the session that kept this participant in the queue of {url}: {e}"
                )));
            }
            let bytes = next.to_bytes()?;
            *maybe_joined = true;
            match self.put_raw(key, bytes, cond, timing).await {
                Ok(Put::Written { version, .. }) => {
                    last_answer = clock.now();
                    wake.notify_waiters();
                    queue = Some((next, version));
                    fresh = true;
                }
                // Someone else wrote first, or the outcome is unknown: read and apply again
                // (joining is idempotent).
                Ok(Put::ConditionFailed) => {}
                Err(e) => {
                    if clock.now() - last_answer >= timing.unavailable_timeout {
                        return Err(e);
                    }
                    warn!(lease = %url, "joining: {e}; reading back");
                    clock.sleep(backoff.next(rng)).await;
                }
            }
        }
    }

    /// Sleep until `until` (or a poll), a release in this process, a cancellation, or the
    /// session's loss.
    async fn wait_a_while(
        &self,
        req: &Request<'_>,
        session: &Option<Lease>,
        until: Option<Instant>,
        notified: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
        watch: &mut Option<Box<dyn Watch>>,
    ) -> Result<()> {
        let clock = self.clock();
        let now = clock.now();
        let poll = self.inner.rng.jitter(req.timing.poll, 0.2);
        let mut wake_at = now + poll;
        if let Some(u) = until {
            wake_at = wake_at.min(u.max(now));
        }
        if let Some(d) = req.wait_deadline {
            wake_at = wake_at.min(d);
        }
        let lost = async {
            match session {
                Some(s) => s.lost().await,
                None => std::future::pending().await,
            }
        };
        let changed = async {
            match watch {
                Some(w) => w.changed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = clock.sleep_until(wake_at) => Ok(()),
            _ = notified => Ok(()),
            _ = changed => Ok(()),
            _ = req.cancel.cancelled() => Ok(()),
            reason = lost => Err(Error::unavailable(format!(
                "lost the session that kept this participant in the queue of {}: {reason}",
                req.url
            ))),
        }
    }

    /// Begin a participant's session: an ordinary lease on a fresh key.
    async fn begin_session(
        &self,
        key: &str,
        me: &Holder,
        opts: &LeaseOptions,
        timing: &Timing,
    ) -> Result<Lease> {
        let mut session_opts = LeaseOptions::new(timing.ttl).wait(Duration::ZERO);
        session_opts.label = opts.label.clone();
        session_opts.grace = opts.grace;
        session_opts.renew_interval = opts.renew_interval;
        session_opts.request_timeout = opts.request_timeout;
        session_opts.poll_interval = opts.poll_interval;
        session_opts.unavailable_timeout = opts.unavailable_timeout;
        session_opts.observation_rule = opts.observation_rule;
        session_opts.store_clock_rule = opts.store_clock_rule;
        let skey = session_key(key, &me.id);
        self.acquire_session(&skey, &session_opts, me.clone()).await
    }

    /// Leave the lock's record (granted or waiting): one conditional write that also grants
    /// whoever may go next. Nothing to do when absent.
    pub(crate) async fn queue_leave(&self, key: &str, id: &str, timing: &Timing) -> Result<()> {
        self.queue_change(key, &Change::Leave(id.to_string()), timing)
            .await
    }

    /// Apply `change` to the lock's record until it is there (idempotent by participant).
    async fn queue_change(&self, key: &str, change: &Change, timing: &Timing) -> Result<()> {
        let clock = self.clock();
        let url = self.lease_url(key);
        let mut backoff = Backoff::for_timing(timing);
        let give_up_at = clock.now() + timing.unavailable_timeout;
        for _ in 0..64 {
            let attempt = async {
                let get = self.read_record(key, None, timing).await?;
                let Some(Ok(r)) = queue_record(&get) else {
                    return Ok(true);
                };
                let Get::Found(obj) = &get else {
                    unreachable!()
                };
                let Some(next) = r.apply(change)? else {
                    return Ok(true);
                };
                let put = self
                    .put_raw(
                        key,
                        next.to_bytes()?,
                        Cond::Match(obj.version.clone()),
                        timing,
                    )
                    .await?;
                Ok::<bool, Error>(matches!(put, Put::Written { .. }))
            };
            match attempt.await {
                Ok(true) => {
                    local_wake(self.store().url(), key).notify_waiters();
                    return Ok(());
                }
                Ok(false) => {}
                Err(e) if e.kind() == ErrorKind::Unavailable && clock.now() < give_up_at => {
                    debug!(lease = %url, "changing the queue: {e}; again");
                }
                Err(e) => return Err(e),
            }
            clock.sleep(backoff.next(&self.inner.rng)).await;
        }
        Err(Error::unavailable(format!(
            "{url} kept changing while updating its queue; try again"
        )))
    }

    /// Check the sessions of those we wait for (at the head of our line, the grants in our
    /// way; behind another waiter, that one); remove those that cannot believe any more
    /// (docs/protocol.md §10 "Removing the gone").
    async fn check_blockers(
        &self,
        key: &str,
        blockers: &[Entry],
        watches: &mut HashMap<String, SessionWatch>,
        timing: &Timing,
        me: &Holder,
    ) -> Checked {
        let clock = self.clock();
        watches.retain(|id, _| blockers.iter().any(|b| b.id() == id));
        let mut next: Option<Instant> = None;
        for b in blockers {
            let watch = watches.entry(b.id().to_string()).or_default();
            let now = clock.now();
            if watch.next_check.is_some_and(|at| at > now) {
                next = Some(next.map_or(watch.next_check.unwrap(), |n| {
                    n.min(watch.next_check.unwrap())
                }));
                continue;
            }
            let skey = session_key(key, b.id());
            let read = self.read_record(&skey, watch.view.version(), timing).await;
            let Ok(get) = read else {
                watch.next_check = Some(clock.now() + timing.poll);
                continue;
            };
            let now = clock.now();
            watch.view.absorb(get, now);
            let b_ttl = Duration::from_millis(b.ttl_ms);
            let gone = match &watch.view.seen {
                None => false,
                Some(Seen::Absent) => {
                    let since = *watch.absent_since.get_or_insert(now);
                    let limit = b_ttl + timing.grace_for(b_ttl);
                    if now - since >= limit {
                        true
                    } else {
                        watch.next_check = Some(since + limit);
                        false
                    }
                }
                Some(Seen::Present {
                    parsed: Parsed::Valid(r),
                    ..
                }) if r.state == RecordState::Released => true,
                Some(Seen::Present { .. }) => {
                    watch.absent_since = None;
                    match store_clock::decide_confirmed(self, key, &mut watch.view, timing, 0).await
                    {
                        Decision::TakeOver {
                            version,
                            epoch,
                            rev,
                        } => {
                            self.end_their_session(
                                &skey,
                                &watch.view,
                                version,
                                epoch,
                                rev,
                                b_ttl,
                                timing,
                                me,
                            )
                            .await
                        }
                        Decision::Wait { until, .. } => {
                            watch.next_check = Some(until);
                            false
                        }
                        Decision::Create { .. } | Decision::Stamp => false,
                    }
                }
            };
            if gone {
                info!(
                    lease = %self.lease_url(key),
                    "removing {} from the queue: its session ended",
                    b.holder.describe()
                );
                if self
                    .queue_change(key, &Change::Leave(b.id().to_string()), timing)
                    .await
                    .is_ok()
                {
                    self.delete_if_released(&skey, timing).await;
                    watches.remove(b.id());
                    return Checked::Removed;
                }
            }
            if let Some(at) = watches.get(b.id()).and_then(|w| w.next_check) {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        Checked::Next(next)
    }

    /// Take over a gone participant's session by the rules of §4, writing it released in our
    /// name: its renewals then fail. True when it is done (by us or by anyone).
    #[allow(clippy::too_many_arguments)]
    async fn end_their_session(
        &self,
        skey: &str,
        view: &View,
        version: Version,
        epoch: u64,
        rev: u64,
        ttl: Duration,
        timing: &Timing,
        me: &Holder,
    ) -> bool {
        let clock = self.clock();
        let record = Record {
            format: crate::record::FORMAT,
            epoch,
            rev,
            state: RecordState::Released,
            ttl_ms: ttl.as_millis().max(1) as u64,
            holder: me.clone(),
            acquired_at: None,
            renewed_at: Some(timestamp(clock.wall())),
            data: None,
            prev: view.prev(),
            write: Some(self.inner.rng.nonce()),
            broken: None,
            history: Vec::new(),
        };
        let give_up_at = clock.now() + timing.ttl;
        matches!(
            self.write(skey, &record, Cond::Match(version), give_up_at, timing)
                .await,
            Ok(Written::Landed { .. } | Written::Replaced { .. })
        )
    }

    /// Delete a session record that is released (a gone participant's, after its removal).
    async fn delete_if_released(&self, skey: &str, timing: &Timing) {
        // The participant was removed: its session is never used again, so a store that
        // ignores the delete's condition deletes nothing that matters.
        if let Ok(Get::Found(obj)) = self.read_record(skey, None, timing).await {
            if let Parsed::Valid(r) = Record::parse(obj.bytes.as_deref(), obj.size) {
                if r.state == RecordState::Released {
                    let delete = self.store().delete(skey, &obj.version);
                    let _ = self.timed(timing.request_timeout, "delete", delete).await;
                }
            }
        }
    }
}

enum Checked {
    /// A blocker was removed: look at the record again now.
    Removed,
    /// Check again at this instant (if any).
    Next(Option<Instant>),
}

/// `Held` or `Timeout` for a queued lock, naming its holders and our place.
fn held_error(
    kind: ErrorKind,
    url: &str,
    r: &QueueRecord,
    ahead: usize,
    waited: Option<Duration>,
) -> Error {
    let holders: Vec<String> = r
        .grants
        .iter()
        .map(|g| format!("{} ({})", g.holder.describe(), g.mode.as_str()))
        .collect();
    let by = if holders.is_empty() {
        "waiters ahead".to_string()
    } else {
        holders.join(", ")
    };
    let what = match waited {
        None => format!("{url} is held by {by}; {ahead} waiting ahead"),
        Some(w) => format!(
            "timed out after {} waiting for {url}, held by {by}; {ahead} waiting ahead",
            format_duration(w)
        ),
    };
    let mut e = Error::new(kind, what).with_epoch(r.epoch);
    if let Some(g) = r.grants.first() {
        e = e.with_holder(g.holder.clone());
    }
    e
}
