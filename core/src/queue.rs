//! Queued locks: the driver of the [`Waiter`] (docs/protocol.md §10). It only carries out
//! steps — read or write the lock's record, begin our session, read or end another's session,
//! sleep — and reports; every decision is the machine's.
//!
//! A participant holds a session (an ordinary lease at `KEY.q/ID`, renewed in the background,
//! begun with [`acquirer::run`] before its first join), joins the lock's record, and waits until
//! the record shows its grant. The handle it gets is its session lease, turned into the grant's
//! handle ([`Lease::set_grant`]), which confirms the lock's record at each renewal
//! ([`GrantHold`](crate::protocol::queue::holder::GrantHold)).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::acquirer::{self, Acquired};
use crate::error::{Error, ErrorKind, Result};
use crate::io::Io;
use crate::lease::{Grant, Lease, LostReason};
use crate::lock_change::{self, grant_wake, wake_granted};
use crate::options::{LeaseOptions, Timing};
use crate::protocol::acquire::Plan;
use crate::protocol::queue::holder::Confirmation;
use crate::protocol::queue::waiter::{
    held_error, hints_seen_after, Ctx, Event, Step, WaitPlan, Waiter, Why,
};
use crate::protocol::queue::{session_key, Change, Entry, OwnAsk, MAX_QUEUE_RECORD_LEN};
use crate::record::{Holder, Parsed, Record};
use crate::store::Get;
use crate::store_clock;
use crate::wake_hint::{self, Registration};

/// Everything one queued acquisition needs.
pub(crate) struct Request<'a> {
    pub key: &'a str,
    pub url: &'a str,
    pub opts: &'a LeaseOptions,
    pub timing: Timing,
    pub try_once: bool,
    pub wait_deadline: Option<crate::clock::Instant>,
    pub cancel: &'a CancellationToken,
}

/// Acquire a grant of the queued lock at `req.key` through a session of its own; `first`: a
/// read of the key already made (by a lease acquisition that found a queued lock).
pub(crate) async fn acquire(
    client: &Arc<Io>,
    req: Request<'_>,
    first: Option<Get>,
) -> Result<Lease> {
    match run::<NotShared>(client, req, first, None).await? {
        Granted::Own(lease) => Ok(lease),
        Granted::Shared { .. } => unreachable!("a request without a shared session"),
    }
}

/// A number in a shared session, as the queue's driver uses it (`shared_session.rs` implements
/// it; this module names no type of it, so that the session's module may call in here).
pub(crate) trait SharedNumber: Send {
    /// Its entry id, `SID.N`.
    fn id(&self) -> &str;
    /// Its session's prefix (the entry's `session`).
    fn prefix(&self) -> &str;
    /// Whether it may still be believed (not lost, its session believed).
    fn alive(&self) -> bool;
    /// Wait until a landed session write holds it (attach before join).
    fn landed(&mut self) -> impl std::future::Future<Output = Result<()>> + Send;
    /// Its loss.
    fn lost(&self) -> impl std::future::Future<Output = LostReason> + Send;
    /// Release it; its leave is sent when `joined`.
    fn release(self, joined: bool) -> impl std::future::Future<Output = Result<()>> + Send;
}

/// No shared session: the type of a request on a session of its own.
enum NotShared {}

impl SharedNumber for NotShared {
    fn id(&self) -> &str {
        match *self {}
    }
    fn prefix(&self) -> &str {
        match *self {}
    }
    fn alive(&self) -> bool {
        match *self {}
    }
    async fn landed(&mut self) -> Result<()> {
        match *self {}
    }
    async fn lost(&self) -> LostReason {
        match *self {}
    }
    async fn release(self, _: bool) -> Result<()> {
        match self {}
    }
}

/// Acquire a grant of the queued lock at `req.key` through the shared session number `number`
/// (docs/protocol.md §10, "Shared sessions"): its join is sent once a session write holding it
/// landed. The number back, with the grant, the read that showed it, and its wake-hint
/// registration from its wait (a yield request's hint reaches the grant the same way).
pub(crate) async fn acquire_shared<N: SharedNumber>(
    client: &Arc<Io>,
    req: Request<'_>,
    number: N,
) -> Result<(N, Grant, Confirmation, Option<Registration>)> {
    if req.opts.data.is_some() {
        let e = Error::new(
            ErrorKind::Invalid,
            "per-grant data is not kept on a shared session (its record is the process's): \
             acquire without a shared session to attach data",
        )
        .with_lease(req.url);
        let _ = number.release(false).await;
        return Err(e);
    }
    match run(client, req, None, Some(number)).await? {
        Granted::Shared {
            number,
            grant,
            confirmation,
            hinted,
        } => Ok((number, grant, *confirmation, hinted)),
        Granted::Own(_) => unreachable!("a request on a shared session"),
    }
}

/// What a request's participant is alive through: its own session lease (begun before its
/// first join), or a number in a shared session (attached before its first join).
enum Participant<N> {
    Own(Option<Lease>),
    Shared(N),
}

impl<N: SharedNumber> Participant<N> {
    fn alive(&self) -> bool {
        match self {
            Participant::Own(s) => s.as_ref().is_none_or(Lease::is_held),
            Participant::Shared(n) => n.alive(),
        }
    }

    async fn lost(&self) -> LostReason {
        match self {
            Participant::Own(Some(s)) => s.lost().await,
            Participant::Own(None) => std::future::pending().await,
            Participant::Shared(n) => n.lost().await,
        }
    }
}

enum Granted<N> {
    Own(Lease),
    Shared {
        number: N,
        grant: Grant,
        confirmation: Box<Confirmation>,
        hinted: Option<Registration>,
    },
}

async fn run<N: SharedNumber>(
    client: &Arc<Io>,
    req: Request<'_>,
    first: Option<Get>,
    shared: Option<N>,
) -> Result<Granted<N>> {
    req.opts.check_queue().map_err(|e| e.with_lease(req.url))?;
    let (key, url, timing) = (req.key, req.url, req.timing);
    let clock = client.clock().clone();
    let rng = &client.rng;
    let mut me = client.new_holder(req.opts.label.clone());
    // On a shared session the participant's id is `SID.N`, its number taken now: a session
    // write holding it is due at once, and the join waits for it to land.
    let session_prefix = shared.as_ref().map(|n| n.prefix().to_string());
    let mut participant = match shared {
        Some(number) => {
            me.id = number.id().to_string();
            Participant::Shared(number)
        }
        None => Participant::Own(None),
    };
    // Where writers that grant us can wake us (docs/protocol.md §10, "Wake hints"): our
    // process's listener, which wakes us by our id; none when hints are off.
    // A store whose clients all live in this process wakes them directly.
    let hints = match client.store().in_process() {
        true => None,
        false => wake_hint::listener(&req.opts.wake_hints),
    };
    let mut hinted = hints.as_ref().map(|l| l.register(key, &me.id));
    let plan = WaitPlan {
        key: key.to_string(),
        url: url.to_string(),
        me: me.clone(),
        entry: Entry {
            id: me.id.clone(),
            mode: req.opts.mode,
            scope: req.opts.scope.clone(),
            ttl_ms: timing.ttl.as_millis() as u64,
            token: None,
            session: session_prefix,
            wake: hints.as_ref().map(|l| l.wake_field()),
            priority: req.opts.priority,
            passed: 0,
        },
        permits: req.opts.permits,
        timing,
        try_once: req.try_once,
        wait_deadline: req.wait_deadline,
        unavailable_timeout: Some(timing.unavailable_timeout),
        max_len: MAX_QUEUE_RECORD_LEN,
        preempt: req.opts.preempt != crate::Preempt::Never,
    };
    let mut waiter = Waiter::new(plan, client.memo(key).epoch, clock.now());
    let mut event = match first {
        Some(get) => Event::Record(Ok(get)),
        None => Event::Start,
    };
    // Woken at once by a write in this process that grants us, and on the file store by the
    // kernel when the record changes; else at the next poll.
    let wake = grant_wake(client.store().url(), key, &me.id);
    let mut watch = client.store().watch(key);
    let mut warned_date = false;
    // A waiter's own yield request (docs/protocol.md §10, "Yield on request"): decided by
    // `OwnAsk` on each record read, written here.
    let mut own_ask = match req.opts.ask_yield {
        true => Some(OwnAsk::new(req.opts.yield_reason.clone()).map_err(|e| e.with_lease(url))?),
        false => None,
    };
    if own_ask.is_some() && req.try_once {
        return Err(Error::invalid(
            "ask_yield on a try asks nobody: a try never waits in the lock's record, where the \
             request is made. Give it a wait (acquire with a wait above 0), or drop ask_yield",
        )
        .with_lease(url));
    }
    let outcome = loop {
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if req.cancel.is_cancelled() && matches!(event, Event::Start | Event::Slept | Event::Woken)
        {
            event = Event::Cancelled;
        }
        let ctx = Ctx {
            now: clock.now(),
            wall: clock.wall(),
            session_alive: participant.alive(),
            hints_seen: hints.as_ref().is_some_and(|l| l.hints_seen(key)),
        };
        let step = waiter.step(event, ctx, rng);
        if !warned_date && waiter.date_refused() {
            warned_date = true;
            store_clock::warn_date_refused(client, key, None);
        }
        event = match step {
            // Beside the lock, whichever record asked: one probe per lock.
            Step::Stamp { .. } => {
                Event::Stamped(store_clock::stamp_step(client, key, &timing).await)
            }
            Step::ReadRecord { if_none_match } => {
                let read = client
                    .read_record(key, if_none_match.as_ref(), &timing)
                    .await;
                if let Err(e) = &read {
                    warn!(lease = %url, "read failed: {e}");
                }
                Event::Record(read)
            }
            Step::WriteRecord {
                bytes,
                cond,
                why,
                grants,
            } => {
                if let Why::Remove { id } = &why {
                    info!(lease = %url, "removing participant {id} from the queue: its session ended");
                }
                let put = client.put_raw(key, bytes, cond, &timing).await;
                if matches!(put, Ok(crate::store::Put::Written { .. })) {
                    // Whoever this write granted learns it at once: in this process directly,
                    // elsewhere by a wake hint.
                    wake_granted(client, key, grants.iter().filter(|g| g.id() != me.id));
                }
                Event::Wrote(put)
            }
            Step::BeginSession => match &mut participant {
                Participant::Own(session) => {
                    match begin_session(client, key, &me, &req, &timing).await {
                        Ok(lease) => {
                            *session = Some(lease);
                            Event::SessionBegun(Ok(()))
                        }
                        Err(e) => Event::SessionBegun(Err(e)),
                    }
                }
                // Attach before join: a write of the session holding our number has landed.
                Participant::Shared(attachment) => Event::SessionBegun(attachment.landed().await),
            },
            Step::ReadSession {
                key: skey,
                if_none_match,
            } => Event::Session(
                client
                    .read_record(&skey, if_none_match.as_ref(), &timing)
                    .await,
            ),
            Step::EndSession {
                key: skey,
                record,
                cond,
            } => {
                let give_up_at = clock.now() + timing.ttl;
                Event::Ended(
                    client
                        .write(&skey, &record, cond, give_up_at, &timing)
                        .await,
                )
            }
            Step::DeleteSession { key: skey, version } => {
                // The participant was removed: its session is never used again, so a store
                // that ignores the delete's condition deletes nothing that matters.
                let delete = client.store().delete(&skey, &version);
                let _ = client.timed(timing.request_timeout, "delete", delete).await;
                Event::Deleted
            }
            Step::Sleep { until } => {
                let ask = match (&mut own_ask, waiter.record()) {
                    (Some(own), Some(record)) => own.decide(record, &me.id),
                    _ => None,
                };
                if let Some(ask) = ask {
                    // Never twice for one tenure: a request that fails is not retried for it.
                    match crate::yielding::ask(client, key, ask).await {
                        Ok(Some(y)) => {
                            info!(lease = %url, tokens = ?y.tokens, "asked the holders in the way to yield")
                        }
                        Ok(None) => debug!(lease = %url, "nothing to ask to yield"),
                        Err(e) => warn!(lease = %url, "could not ask the holders to yield: {e}"),
                    }
                }
                let lost = participant.lost();
                let changed = async {
                    match &mut watch {
                        Some(w) => w.changed().await,
                        None => std::future::pending().await,
                    }
                };
                let hint = async {
                    match &hinted {
                        Some(r) => r.notify.notified().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = clock.sleep_until(until) => Event::Slept,
                    _ = &mut notified => Event::Woken,
                    _ = changed => Event::Woken,
                    _ = hint => {
                        debug!(lease = %url, "woken by a wake hint");
                        Event::Hinted
                    }
                    _ = req.cancel.cancelled() => Event::Cancelled,
                    reason = lost => Event::SessionLost(reason),
                }
            }
            Step::Granted {
                token,
                permits,
                confirmation,
            } => {
                let epoch = confirmation.record.epoch;
                // Whether hints reach this process's waiters on this lock: by how this grant
                // was learned (docs/protocol.md §10, "Wake hints": the poll's length).
                if let (Some(l), Some(learned)) = (&hints, waiter.learned()) {
                    l.set_hints_seen(key, hints_seen_after(l.hints_seen(key), learned, true));
                }
                let grant = Grant {
                    key: key.to_string(),
                    url: url.to_string(),
                    token,
                    mode: req.opts.mode,
                    scope: req.opts.scope.clone(),
                    permits,
                };
                let granted = match std::mem::replace(&mut participant, Participant::Own(None)) {
                    Participant::Own(Some(lease)) => {
                        // The hint registration is kept: a yield request's hint reaches the
                        // holder the same way.
                        lease.set_grant(grant, confirmation, hinted.take());
                        Granted::Own(lease)
                    }
                    Participant::Own(None) => {
                        break Err((
                            Error::internal(format!(
                                "{url} granted a participant that has no session"
                            )),
                            true,
                        ));
                    }
                    Participant::Shared(number) => Granted::Shared {
                        number,
                        grant,
                        confirmation: Box::new(confirmation),
                        hinted: hinted.take(),
                    },
                };
                client.saw_epoch(key, epoch);
                debug!(lease = %url, token, "granted");
                break Ok(granted);
            }
            Step::Held {
                kind,
                in_the_way,
                ahead,
                epoch,
                waited,
                listed,
            } => {
                // Name whoever is in the way: its session says who it is.
                let mut holders = vec![];
                if let Some(g) = in_the_way.first() {
                    let skey = g.session_key(key);
                    if let Ok(Get::Found(obj)) = client.read_record(&skey, None, &timing).await {
                        if let Parsed::Valid(r) = Record::parse(obj.bytes.as_deref(), obj.size) {
                            holders.push((g.id().to_string(), r.holder));
                        }
                    }
                }
                let e = held_error(url, kind, &in_the_way, &holders, ahead, epoch, waited);
                break Err((e, listed));
            }
            Step::Failed { error, listed } => break Err((error, listed)),
        };
    };
    client.saw_epoch(key, waiter.known_epoch());
    match outcome {
        Ok(lease) => Ok(lease),
        Err((e, listed)) => {
            // Leave no trace for others to wait out: leave the queue if a join may have
            // landed, then end the session (a shared one: detach).
            match participant {
                Participant::Own(session) => {
                    if listed {
                        let leave = Change::Leave(me.id.clone());
                        if let Err(err) = lock_change::run(client, key, leave, None, &timing).await
                        {
                            warn!(lease = %url, "could not leave the queue: {err}");
                        }
                    }
                    if let Some(s) = session {
                        s.end_session().await;
                    }
                }
                Participant::Shared(attachment) => {
                    if let Err(err) = attachment.release(listed).await {
                        warn!(lease = %url, "could not leave the queue: {err}");
                    }
                }
            }
            Err(e.with_lease(url))
        }
    }
}

/// Begin a participant's session: an ordinary lease on a fresh key, holding who it is (label,
/// host, pid, data): the lock's record lists only what deciding needs.
///
/// A store that fails in the way is retried within the request's own wait, as a plain lease's
/// acquire retries it (docs/protocol.md §5: the wait bounds the acquire whatever is in the
/// way): one 503 or one lost reply to the session's create does not fail a request that may
/// wait minutes. A lost create that landed is found on the next read as our own record.
async fn begin_session(
    client: &Arc<Io>,
    key: &str,
    me: &Holder,
    req: &Request<'_>,
    timing: &Timing,
) -> Result<Lease> {
    let skey = session_key(key, &me.id);
    let plan = Plan {
        url: client.lease_url(&skey),
        holder: me.clone(),
        timing: *timing,
        data: req.opts.data.clone(),
        // A fresh key: nobody else's holder to wait for.
        try_once: true,
        wait_deadline: req.wait_deadline,
        unavailable_timeout: Some(timing.unavailable_timeout),
        // A fresh key: there is no holder to ask about. (A session's holder names no processes
        // either, `Client::new_holder`: the dead-holder rule never ends a queued lock's session
        // early; its waiters go by the session's ttl, docs/protocol.md §10.)
        probe_holders: false,
        // A session's record keeps no tenures: the lock's record is what status reads.
        history: false,
        // Its epoch is no token: a session made where none was holds at once (one write).
        epoch_is_token: false,
        preempt: crate::Preempt::Never,
    };
    match acquirer::run(client, &skey, plan, req.cancel).await? {
        Acquired::Lease { lease, .. } => Ok(lease),
        Acquired::QueuedLock(_) => Err(Error::new(
            ErrorKind::Internal,
            format!("the session key {skey} holds a queued lock's record"),
        )),
    }
}
