//! Waiting for a grant of a queued lock: from the first read of the lock's record to the read
//! (or write) that shows the grant — as a state machine the driver (`core/src/queue.rs`) feeds
//! with the store's answers and the passing of time, and the model checker (`verify/`) with
//! its modelled store.
//!
//! - Read the lock's key. A queued lock's record: stand where [`QueueRecord::position`] says —
//!   granted (done), waiting (check the sessions of whoever keeps us waiting, remove those
//!   proven gone, sleep), or absent (join: one conditional write, after beginning our session).
//!   Absent: make the record (`Create`), carrying forward the last record we saw, with tokens
//!   above the store's clock in ms. A lease record: wait until it is free by the lease's rules
//!   ([`takeover::decide`]), then replace it with a queued lock's record whose tokens start
//!   above its epoch. A record of a newer version: fail, never take it over.
//! - A participant whose session lapsed never writes its join again (its earlier join may have
//!   landed, been granted, proven gone and removed while its outcome was unknown).
//! - The session of a participant that keeps us waiting is checked when a takeover rule could
//!   next fire, paced so that a coarse store clock cannot make us look a whole interval late;
//!   it is gone when taken over by those rules (we write it released in our name), released, or
//!   absent for its ttl plus grace on our clock.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::holder::Confirmation;
use super::{
    classify_get, newer_error, session_key, Change, Classified, Entry, Position, QueueRecord,
};
use crate::clock::Instant;
use crate::duration::format_duration;
use crate::error::{Error, ErrorKind, Result};
use crate::options::Timing;
use crate::protocol::hold::LostReason;
use crate::protocol::mutants::{on, Mutant};
use crate::protocol::session::{attachment, Attachment};
use crate::protocol::takeover::{self, Decision};
use crate::protocol::view::{Seen, View};
use crate::protocol::write::Written;
use crate::protocol::{Backoff, Entropy};
use crate::record::{timestamp, Holder, Parsed, Record, RecordState, FORMAT};
use crate::store::{Cond, Get, Put, Version};

/// What a waiter wants.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WaitPlan {
    /// The lock's key (participants' session keys derive from it) and URL (for messages).
    pub key: String,
    pub url: String,
    /// Who we are (our session's holder; its id names our entry).
    pub me: Holder,
    /// Our request: mode, scope, ttl (its id is `me.id`).
    pub entry: Entry,
    /// The permits we ask for (`None`: whatever the lock has).
    pub permits: Option<u32>,
    pub timing: Timing,
    /// Give up with `Held` instead of waiting (and write nothing).
    pub try_once: bool,
    /// Give up with `Timeout` at this instant.
    pub wait_deadline: Option<Instant>,
    /// Give up with `Unavailable` once the store has not answered for this long.
    pub unavailable_timeout: Option<Duration>,
    /// The record's size limit ([`super::MAX_QUEUE_RECORD_LEN`]; small in the model).
    pub max_len: usize,
    /// Take the lock at once, removing the grants in the way (`Preempt::EveryEffectFenced`,
    /// an exclusive request only; docs/protocol.md §10, "Preemption").
    pub preempt: bool,
}

/// What happened since the last step.
#[derive(Debug)]
pub enum Event {
    Start,
    /// The answer to [`Step::ReadRecord`].
    Record(Result<Get>),
    /// The answer to [`Step::WriteRecord`].
    Wrote(Result<Put>),
    /// Our session began (or could not).
    SessionBegun(Result<()>),
    /// The answer to [`Step::ReadSession`].
    Session(Result<Get>),
    /// The outcome of [`Step::EndSession`].
    Ended(Result<Written>),
    /// [`Step::DeleteSession`] was sent (its outcome does not matter).
    Deleted,
    /// A sleep ended at its time (or was cut short by a change of the record the driver could
    /// not tell from the time, as the model does).
    Slept,
    /// A sleep was cut short by a local sign that the record changed: a write in this process
    /// that granted us, or the file store's kernel watch. The same as [`Event::Slept`], except
    /// that the read it starts is no poll, so a grant it finds says nothing of whether wake
    /// hints reach us ([`Learned::Locally`]).
    Woken,
    /// The caller cancelled (delivered instead of `Slept`).
    Cancelled,
    /// A wake hint arrived while we slept (delivered instead of `Slept`): someone says a write
    /// granted us. It proves nothing: at most it moves our next read of the record earlier,
    /// no more often than once a [`hint_interval`] (docs/protocol.md §10, "Wake hints").
    Hinted,
    /// Our own session was lost while we waited.
    SessionLost(LostReason),
    /// The answer to [`Step::Stamp`]: the store's own stamp of a write of the probe object
    /// beside the lock (`Ok(None)`: the store gave none).
    Stamped(Result<Option<SystemTime>>),
}

/// What the driver knows at each step.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    /// Our monotonic clock.
    pub now: Instant,
    /// Our wall clock (only for the tokens of a record made where none is).
    pub wall: SystemTime,
    /// Whether our session is held (true before it began).
    pub session_alive: bool,
    /// Whether wake hints have been seen to arrive for this lock in this process: the driver's
    /// memory, kept by [`hints_seen_after`] from how each grant was learned. With it, and a wake
    /// address in our entry, the poll of the record lengthens to the renew interval
    /// ([`record_poll`]; docs/protocol.md §10, "Wake hints").
    pub hints_seen: bool,
}

/// How a waiter learned of its grant: what its driver's memory of wake hints goes by
/// ([`hints_seen_after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Learned {
    /// By a read a wake hint caused (at once, or at the end of the hint interval).
    Hint,
    /// By a read its poll's timer caused: no hint came first.
    Poll,
    /// By its own write, a read after a write that failed its condition, the first read, or a
    /// local wake-up ([`Event::Woken`]): nothing about hints either way.
    Locally,
}

/// The driver's memory of whether wake hints arrive for a lock, after one of its waiters with a
/// wake address in its entry (`listening`) learned of a grant as `learned`: a grant a hint
/// brought shows that they do; one a poll found first shows that they did not this time (a
/// firewall, an older writer, a lost datagram, or a hint slower than the poll), and the poll
/// goes back to its default until a hint brings a grant again. Liveness only: a hint grants
/// nothing, and the poll is never longer than the renew interval.
pub fn hints_seen_after(before: bool, learned: Learned, listening: bool) -> bool {
    match learned {
        Learned::Hint if listening => true,
        Learned::Poll if listening => false,
        _ => before,
    }
}

/// The interval between two polls of the lock's record by a waiter with `competing` waiters
/// ahead of it that compete for `permits`, given the jittered default poll `poll`. By default the
/// poll scales with the place (it cannot be granted before those ahead of it), to at most the
/// renew interval. **(changed, issue 23)** With hints trusted (a wake address in our entry, and
/// hints seen to arrive for this lock in this process), the poll is the renew interval itself:
/// a write that grants us sends us a hint, so the poll is only the fallback for a hint lost, and
/// a lost hint delays a grant by at most one renew interval. Never shorter than the default.
pub fn record_poll(
    timing: &Timing,
    poll: Duration,
    competing: usize,
    permits: u32,
    hints_trusted: bool,
) -> Duration {
    let cap = timing.renew.max(poll);
    if hints_trusted {
        return cap;
    }
    let depth = (competing as u32).saturating_div(permits.max(1));
    (poll * (1 + depth.min(1000))).min(cap)
}

/// Why a write of the lock's record is made (for the driver's log and wake-ups).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Why {
    /// Our join (also making the record where none is, or replacing a lease record).
    Join,
    /// Removing participant `id`, whose session is gone.
    Remove { id: String },
    /// Granting whoever may go in a record made where none was (which grants nobody).
    Settle,
}

/// What to do next.
#[derive(Debug)]
// One step at a time, moved to the driver and carried out: its size costs nothing (a session's
// record grew past clippy's bound with the holder's processes, issue 28).
#[allow(clippy::large_enum_variant)]
pub enum Step {
    ReadRecord {
        if_none_match: Option<Version>,
    },
    WriteRecord {
        bytes: Bytes,
        cond: Cond,
        why: Why,
        /// The participants this write grants: once it landed, the driver wakes them at once
        /// where they wait in this process, and sends a hint to those with a wake address.
        grants: Vec<Entry>,
    },
    /// Begin our session (an ordinary lease at our session key), then answer `SessionBegun`.
    BeginSession,
    /// Read a participant's session record.
    ReadSession {
        key: String,
        if_none_match: Option<Version>,
    },
    /// Write a gone participant's session `released` in our name (run to a known outcome).
    EndSession {
        key: String,
        record: Record,
        cond: Cond,
    },
    /// The takeover rule's `Date` says a record is old enough: read the store's own clock (a
    /// write of the probe object beside the lock, read back, `store_clock.rs`), then answer
    /// `Stamped` (issue 29: a gateway's `Date` running ahead must not fool a waiter).
    /// `session`: the key of the session being judged (`None`: the lock's own lease record).
    Stamp {
        session: Option<String>,
    },
    /// Delete a session we released after its participant was removed (best effort).
    DeleteSession {
        key: String,
        version: Version,
    },
    /// Sleep until then (a change of the record, a release in this process or a cancellation
    /// may cut it short).
    Sleep {
        until: Instant,
    },
    /// Granted: the record read (or written) that shows it.
    Granted {
        token: u64,
        permits: Option<u32>,
        confirmation: Confirmation,
    },
    /// Someone holds what we need and we may not wait (`Held`), or not any longer (`Timeout`):
    /// [`held_error`] makes the error, naming whoever is in the way.
    Held {
        kind: ErrorKind,
        in_the_way: Vec<Entry>,
        ahead: usize,
        epoch: u64,
        waited: Duration,
        listed: bool,
    },
    /// Give up. `listed`: a join of ours may be in the record: leave before ending the session.
    Failed {
        error: Error,
        listed: bool,
    },
}

/// What caused a waiter's reads: what the driver's memory of wake hints goes by
/// ([`hints_seen_after`]). It never decides a step, so the model checker's states do not tell
/// waiters apart by it (equal and hashed alike whatever it holds): counting it would only
/// multiply the states by the causes of the last read.
#[derive(Debug, Clone, Copy)]
struct Causes {
    /// A hint arrived and the read it causes has not been sent yet (put off to the end of the
    /// hint interval).
    hint_pending: bool,
    /// What caused the last read of the record (or our last write: [`Learned::Locally`]).
    cause: Learned,
    /// How our grant was learned, once granted.
    learned: Option<Learned>,
}

impl Default for Causes {
    fn default() -> Causes {
        Causes {
            hint_pending: false,
            cause: Learned::Locally,
            learned: None,
        }
    }
}

impl PartialEq for Causes {
    fn eq(&self, _: &Causes) -> bool {
        true
    }
}

impl Eq for Causes {}

impl std::hash::Hash for Causes {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

/// A participant whose session we watch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Watch {
    view: View,
    absent_since: Option<Instant>,
    next_check: Option<Instant>,
    /// Proven gone; with the version of its session record we released, when we did.
    gone: Option<Option<Version>>,
}

/// What the lock's key showed last.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Shown {
    Nothing,
    Queue,
    Absent,
    /// A lease record, or something unreadable (the lease's rules apply; see `view`).
    Lease,
    Newer(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)] // one per waiter
enum Phase {
    Idle,
    ReadingRecord {
        sent: Instant,
    },
    Writing {
        next: QueueRecord,
        sent: Instant,
        why: Why,
    },
    BeginningSession {
        next: QueueRecord,
        cond: Cond,
    },
    ReadingSession {
        id: String,
    },
    EndingSession {
        id: String,
    },
    /// Waiting for the store's stamp, for the session of `id` (`None`: the lock's own record).
    Stamping {
        id: Option<String>,
    },
    DeletingSession,
    Sleeping {
        until: Instant,
    },
    BackingOff {
        until: Instant,
    },
    Done,
}

/// A waiter in progress.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Waiter {
    plan: WaitPlan,
    /// The highest token seen for the lock.
    known: u64,
    shown: Shown,
    /// The last queued lock's record read or written, its version, and when the request that
    /// showed it was sent. Kept when the record vanishes: it is carried forward.
    record: Option<(QueueRecord, Version, Instant)>,
    /// What the key showed when it was not a queued lock's record.
    view: View,
    /// A join of ours was sent (it may have landed).
    joined: bool,
    /// We saw ourselves listed.
    listed: bool,
    session_begun: bool,
    watches: BTreeMap<String, (Entry, Watch)>,
    phase: Phase,
    start: Instant,
    last_answer: Instant,
    backoff: Backoff,
    /// A write of ours was refused `Unavailable` and none has been answered since. A store
    /// that throttles one hot object's writes (S3 503 `SlowDown`, GCS 429) still answers its
    /// reads, so an answered read then does not start the backoff over: only an answered
    /// write does (issue 24).
    writes_refused: bool,
    cancelled: bool,
    /// When the last read a hint caused was (or is to be) sent: the next one comes no sooner
    /// than a [`hint_interval`] after it.
    hint_read: Option<Instant>,
    /// What caused our reads, for the driver's memory of hints.
    causes: Causes,
    /// A `Date` was found ahead of the store's own stamps (or no stamp could be had): the
    /// driver says so once.
    date_refused: bool,
    /// The tokens of the grants this acquisition set out to preempt (those in its way when it
    /// first decided to): it preempts again only while nothing else is in its way.
    targets: Option<Vec<u64>>,
}

impl Waiter {
    /// Start waiting at `now`, knowing tokens up to `known`.
    pub fn new(plan: WaitPlan, known: u64, now: Instant) -> Waiter {
        Waiter {
            backoff: Backoff::for_timing(&plan.timing),
            plan,
            known,
            shown: Shown::Nothing,
            record: None,
            view: View::default(),
            joined: false,
            listed: false,
            session_begun: false,
            watches: BTreeMap::new(),
            phase: Phase::Idle,
            start: now,
            last_answer: now,
            writes_refused: false,
            cancelled: false,
            hint_read: None,
            causes: Causes::default(),
            date_refused: false,
            targets: None,
        }
    }

    /// The highest token seen for the lock.
    pub fn known_epoch(&self) -> u64 {
        self.known
    }

    /// Whether a join of ours may be in the record.
    pub fn maybe_listed(&self) -> bool {
        self.joined
    }

    /// Whether a `Date` was refused as the store's clock (the driver warns once).
    pub fn date_refused(&self) -> bool {
        self.date_refused
    }

    /// The last queued lock's record read or written (what a waiter's own yield request,
    /// [`OwnAsk`](super::OwnAsk), decides on).
    pub fn record(&self) -> Option<&QueueRecord> {
        self.record.as_ref().map(|(r, _, _)| r)
    }

    /// How our grant was learned (`None` before it): what the driver's memory of wake hints goes
    /// by ([`hints_seen_after`]).
    pub fn learned(&self) -> Option<Learned> {
        self.causes.learned
    }

    /// The ids of the participants whose sessions we watch (the model checker's wake-ups).
    pub fn watched(&self) -> Vec<String> {
        self.watches.keys().cloned().collect()
    }

    /// The next step, given what happened.
    pub fn step(&mut self, event: Event, ctx: Ctx, entropy: &dyn Entropy) -> Step {
        let now = ctx.now;
        if matches!(event, Event::Cancelled) {
            self.cancelled = true;
        }
        if let Event::SessionLost(reason) = &event {
            self.phase = Phase::Done;
            return self.fail(lost_session(&self.plan, reason));
        }
        match (std::mem::replace(&mut self.phase, Phase::Idle), event) {
            (Phase::Done, event) => unreachable!("the wait is over, yet {event:?}"),
            (Phase::Idle, Event::Start) => self.read(now),
            // A read made before we started (a lease acquisition that found a queued lock).
            (Phase::Idle, Event::Record(r)) => self.after_read(r, now, ctx, entropy),
            (Phase::ReadingRecord { sent }, Event::Record(r)) => {
                self.after_read(r, sent, ctx, entropy)
            }
            (Phase::Writing { next, sent, why }, Event::Wrote(r)) => {
                self.after_write(r, next, sent, why, ctx, entropy)
            }
            (Phase::BeginningSession { next, cond }, Event::SessionBegun(r)) => match r {
                Ok(()) => {
                    self.session_begun = true;
                    self.write(next, cond, Why::Join, ctx)
                }
                Err(e) => self.fail(e),
            },
            (Phase::ReadingSession { id }, Event::Session(r)) => {
                match r {
                    Ok(get) => {
                        if let Some((_, w)) = self.watches.get_mut(&id) {
                            w.view.absorb(get, now);
                        }
                        if let Some(step) = self.judge_session(&id, ctx, entropy) {
                            return step;
                        }
                    }
                    Err(_) => self.check_later(&id, now),
                }
                self.decide(ctx, entropy)
            }
            (Phase::EndingSession { id }, Event::Ended(r)) => {
                match r {
                    Ok(Written::Landed { version, .. }) => self.gone(&id, Some(version)),
                    Ok(Written::Replaced { .. }) => self.gone(&id, None),
                    Ok(Written::Rejected { current }) => {
                        if let Some((_, w)) = self.watches.get_mut(&id) {
                            w.view.absorb(current, now);
                        }
                        if let Some(step) = self.judge_session(&id, ctx, entropy) {
                            return step;
                        }
                    }
                    Err(_) => self.check_later(&id, now),
                }
                self.decide(ctx, entropy)
            }
            (Phase::Stamping { id }, Event::Stamped(r)) => self.after_stamp(id, r, ctx, entropy),
            (Phase::DeletingSession, Event::Deleted) => self.decide(ctx, entropy),
            // A retry after the store failed us: for whatever the failed request was for.
            (Phase::BackingOff { .. }, Event::Slept | Event::Woken) => {
                let cause = self.causes.cause;
                self.read_for(now, cause)
            }
            (Phase::Sleeping { .. } | Phase::Idle, Event::Slept) => {
                let cause = match self.causes.hint_pending {
                    true => Learned::Hint,
                    false => Learned::Poll,
                };
                self.read_for(now, cause)
            }
            (Phase::Sleeping { .. } | Phase::Idle, Event::Woken) => {
                self.read_for(now, Learned::Locally)
            }
            (Phase::Sleeping { .. } | Phase::BackingOff { .. } | Phase::Idle, Event::Cancelled) => {
                self.decide(ctx, entropy)
            }
            (Phase::Sleeping { until }, Event::Hinted) => self.hinted(until, now),
            // The store refused us: its backoff stands (a hint is no sign that it takes our
            // requests again).
            (Phase::BackingOff { until }, Event::Hinted) => {
                self.phase = Phase::BackingOff { until };
                Step::Sleep { until }
            }
            (phase, event) => unreachable!("{event:?} while {phase:?}"),
        }
    }

    /// Take in the store's stamp asked for by the view of `id`'s session (`None`: the lock's
    /// own record), and judge it again. A store that did not answer: look again after a poll.
    fn after_stamp(
        &mut self,
        id: Option<String>,
        r: Result<Option<SystemTime>>,
        ctx: Ctx,
        entropy: &dyn Entropy,
    ) -> Step {
        let now = ctx.now;
        let timing = self.plan.timing;
        let stamp = match r {
            Ok(stamp) => Some(stamp),
            Err(e) if e.kind() == ErrorKind::Unavailable => None,
            // No stamp can be had: `Date` is refused, the rules go by what we see unchanged.
            Err(_) => Some(None),
        };
        let Some(stamp) = stamp else {
            return match id {
                Some(id) => {
                    self.check_later(&id, now);
                    self.decide(ctx, entropy)
                }
                None => self.sleep(now + timing.poll),
            };
        };
        let grace = timing.grace_for(timing.ttl);
        let view = match &id {
            Some(id) => self.watches.get_mut(id).map(|(_, w)| &mut w.view),
            None => Some(&mut self.view),
        };
        if let Some(view) = view {
            if view.absorb_stamp(stamp, now, timing.resolution, grace) {
                self.date_refused = true;
            }
        }
        match id {
            Some(id) => match self.judge_session(&id, ctx, entropy) {
                Some(step) => step,
                None => self.decide(ctx, entropy),
            },
            None => self.on_lease(ctx, entropy),
        }
    }

    fn fail(&mut self, error: Error) -> Step {
        self.phase = Phase::Done;
        Step::Failed {
            error: error.with_lease(&self.plan.url),
            listed: self.joined,
        }
    }

    fn read(&mut self, now: Instant) -> Step {
        self.read_for(now, Learned::Locally)
    }

    /// Read the record, because of `cause` (what a grant the read shows was learned by).
    fn read_for(&mut self, now: Instant, cause: Learned) -> Step {
        self.causes.cause = cause;
        self.causes.hint_pending = false;
        self.phase = Phase::ReadingRecord { sent: now };
        let if_none_match = match self.shown {
            Shown::Queue => self.record.as_ref().map(|(_, v, _)| v.clone()),
            _ => self.view.version().cloned(),
        };
        Step::ReadRecord { if_none_match }
    }

    /// The answer to a read of the lock's key, sent at `sent`.
    fn after_read(
        &mut self,
        r: Result<Get>,
        sent: Instant,
        ctx: Ctx,
        entropy: &dyn Entropy,
    ) -> Step {
        let now = ctx.now;
        let get = match r {
            Ok(get) => get,
            Err(e) => return self.retry_later(e, now, entropy),
        };
        self.last_answer = now;
        if !self.writes_refused {
            self.backoff = Backoff::for_timing(&self.plan.timing);
        }
        match &get {
            // Nothing we keep changes. (The record's `sent` is not moved to this read: it only
            // dates a grant, and a grant is seen in a `Found` answer or in our own write's —
            // never after a 304, which shows the record our last decision already found us
            // not granted in.)
            Get::NotModified { .. } => {}
            Get::NotFound { .. } => self.shown = Shown::Absent,
            Get::Found(obj) => match classify_get(&get) {
                Some(Classified::Queue(r)) => {
                    self.known = self.known.max(r.epoch);
                    self.record = Some((r, obj.version.clone(), sent));
                    self.shown = Shown::Queue;
                }
                Some(Classified::Newer(what)) => self.shown = Shown::Newer(what),
                _ => self.shown = Shown::Lease,
            },
        }
        // The view judges what is not a queued lock's record (the lease's rules); of a queued
        // lock's answer it keeps only the store's clock, for the tokens of a record made where
        // none is.
        if self.shown == Shown::Queue {
            let server_now = match &get {
                Get::Found(obj) => obj.server_now,
                Get::NotModified { server_now } | Get::NotFound { server_now } => *server_now,
            };
            self.view.server_now = server_now.map(|t| (t, now));
        } else {
            self.view.absorb(get, now);
        }
        if let Some(r) = self.view.record() {
            self.known = self.known.max(r.epoch);
        }
        self.decide(ctx, entropy)
    }

    fn after_write(
        &mut self,
        r: Result<Put>,
        next: QueueRecord,
        sent: Instant,
        why: Why,
        ctx: Ctx,
        entropy: &dyn Entropy,
    ) -> Step {
        let now = ctx.now;
        // A grant this write shows is our own doing.
        self.causes.cause = Learned::Locally;
        match &r {
            // The store takes our writes again (a failed condition is an answer too).
            Ok(_) => {
                self.writes_refused = false;
                self.backoff = Backoff::for_timing(&self.plan.timing);
            }
            // Refused (`Unavailable`: retried below); any other error ends the wait.
            Err(_) => self.writes_refused = true,
        }
        match r {
            Ok(Put::Written { version, .. }) => {
                self.last_answer = now;
                self.known = self.known.max(next.epoch);
                self.record = Some((next, version, sent));
                self.shown = Shown::Queue;
                if let Why::Remove { id } = &why {
                    // A participant's own session is used once: the one who ended it deletes
                    // it. A shared session is its owner's to delete: its other grants' checkers
                    // still learn from its `released` record.
                    let released = self
                        .watches
                        .remove(id)
                        .filter(|(entry, _)| entry.session.is_none())
                        .and_then(|(entry, w)| Some((entry, w.gone.flatten()?)));
                    if let Some((entry, version)) = released {
                        self.phase = Phase::DeletingSession;
                        return Step::DeleteSession {
                            key: entry.session_key(&self.plan.key),
                            version,
                        };
                    }
                }
                self.decide(ctx, entropy)
            }
            // Someone else wrote first: read, and apply again (changes are idempotent by id).
            Ok(Put::ConditionFailed) => self.read(now),
            Err(e) => self.retry_later(e, now, entropy),
        }
    }

    /// The store failed: an unknown outcome or a refused read is tried again after a pause,
    /// unless the wait is over or the store has not answered for the unavailable timeout.
    fn retry_later(&mut self, e: Error, now: Instant, entropy: &dyn Entropy) -> Step {
        if e.kind() != ErrorKind::Unavailable || self.plan.try_once {
            return self.fail(e);
        }
        let timeout_end = self.plan.unavailable_timeout.map(|t| self.last_answer + t);
        let give_up_at = match (self.plan.wait_deadline, timeout_end) {
            (Some(w), Some(t)) => Some(w.min(t)),
            (w, t) => w.or(t),
        };
        if give_up_at.is_some_and(|g| now >= g) {
            let url = self.plan.url.clone();
            let down = format_duration(now - self.last_answer);
            return self.fail(e.context(format!(
                "gave up waiting for {url}: the store has been unavailable for {down}"
            )));
        }
        let mut until = now + self.backoff.next(entropy);
        if let Some(g) = give_up_at {
            until = until.min(g);
        }
        self.phase = Phase::BackingOff { until };
        Step::Sleep { until }
    }

    /// Decide from what the lock's key showed last.
    fn decide(&mut self, ctx: Ctx, entropy: &dyn Entropy) -> Step {
        if self.cancelled {
            return self.fail(Error::new(
                ErrorKind::Cancelled,
                format!("acquiring {} was cancelled", self.plan.url),
            ));
        }
        match self.shown.clone() {
            Shown::Nothing => self.read(ctx.now),
            Shown::Newer(_) if on(Mutant::QueueNewerTakenAsCorrupt) => self.on_lease(ctx, entropy),
            Shown::Newer(what) => {
                let e = newer_error(&self.plan.url, &what);
                self.fail(e)
            }
            Shown::Queue => self.on_queue(ctx, entropy),
            Shown::Absent => self.create(ctx),
            Shown::Lease => self.on_lease(ctx, entropy),
        }
    }

    fn timed_out(&self, now: Instant) -> bool {
        !self.plan.try_once && self.plan.wait_deadline.is_some_and(|d| now >= d)
    }

    fn timeout_error(&mut self, now: Instant) -> Step {
        let url = self.plan.url.clone();
        let waited = format_duration(now - self.start);
        self.fail(Error::new(
            ErrorKind::Timeout,
            format!("timed out after {waited} waiting for {url}"),
        ))
    }

    fn on_queue(&mut self, ctx: Ctx, entropy: &dyn Entropy) -> Step {
        let now = ctx.now;
        let Some((r, version, sent)) = self.record.clone() else {
            unreachable!("a queued lock's record was shown")
        };
        if let Err(e) = r.check_permits(&self.plan.url, self.plan.permits) {
            return self.fail(e);
        }
        let id = self.plan.me.id.clone();
        match r.position(&id) {
            Position::Granted { token } => {
                if !ctx.session_alive {
                    return self.fail(self.removed_error());
                }
                self.phase = Phase::Done;
                self.causes.learned = Some(self.causes.cause);
                Step::Granted {
                    token,
                    permits: r.permits,
                    confirmation: Confirmation {
                        record: r,
                        version,
                        sent,
                    },
                }
            }
            Position::Waiting {
                ahead,
                competing,
                blockers,
            } => {
                self.listed = true;
                self.joined = true;
                // A record made where none is grants nobody: its first reader settles it, in a
                // write conditional on the version it read (docs/protocol.md §10, "Tokens").
                if let Some(next) = r.settled(self.floor(ctx)) {
                    return self.write(next, Cond::Match(version), Why::Settle, ctx);
                }
                if self.plan.try_once || self.timed_out(now) {
                    return self.held(&r, ahead, now);
                }
                self.wait_for(&r, version, blockers, competing, ctx, entropy)
            }
            Position::Absent => {
                if self.listed && !ctx.session_alive {
                    // Listed before and gone now: the others took our lapsed session for gone.
                    return self.fail(self.removed_error());
                }
                // Listed before with a live session: the record was made again without us.
                self.listed = false;
                if self.timed_out(now) {
                    return self.timeout_error(now);
                }
                let join = if self.preempts(&r) {
                    Change::Preempt(self.plan.entry.clone())
                } else {
                    Change::Join(self.plan.entry.clone())
                };
                let next = match r.apply(&join, self.plan.max_len, self.floor(ctx)) {
                    Ok(Some(next)) => next,
                    Ok(None) => unreachable!("an absent participant joins"),
                    Err(e) => return self.fail(e),
                };
                if self.plan.try_once && !matches!(next.position(&id), Position::Granted { .. }) {
                    let ahead = r.queue.len();
                    return self.held(&r, ahead, now);
                }
                self.write(next, Cond::Match(version), Why::Join, ctx)
            }
        }
    }

    /// Whether to take the lock from the grants in our way rather than join behind them: one
    /// set of tenures per acquisition, as a lease's preemption (docs/protocol.md §5). The grants
    /// in our way when we first decide are the ones we set out to preempt; a write that failed
    /// its condition or whose outcome is unknown preempts again while only those are in the
    /// way. A grant made since (a waiter's, or another preemptor's) is waited for by the usual
    /// rules, so two preempting acquisitions cannot take the lock from each other in a loop.
    fn preempts(&mut self, r: &QueueRecord) -> bool {
        if !self.plan.preempt {
            return false;
        }
        let in_the_way: Vec<u64> = r
            .in_the_way(&self.plan.entry)
            .iter()
            .filter_map(|g| g.token)
            .collect();
        let targets = self.targets.get_or_insert_with(|| in_the_way.clone());
        on(Mutant::QueuePreemptAnyTenure) || in_the_way.iter().all(|t| targets.contains(t))
    }

    /// Someone holds what we need: `Held` (try once) or `Timeout`.
    fn held(&mut self, r: &QueueRecord, ahead: usize, now: Instant) -> Step {
        self.phase = Phase::Done;
        Step::Held {
            kind: if self.plan.try_once {
                ErrorKind::Held
            } else {
                ErrorKind::Timeout
            },
            in_the_way: r
                .in_the_way(&self.plan.entry)
                .into_iter()
                .cloned()
                .collect(),
            ahead,
            epoch: r.epoch,
            waited: now - self.start,
            listed: self.joined,
        }
    }

    /// The key is absent: make the lock's record, carrying forward the last one we saw, with
    /// tokens above every token that can have been handed out.
    fn create(&mut self, ctx: Ctx) -> Step {
        let now = ctx.now;
        // (One sum for both branches, as in `takeover::decide`: the control's branch is dead
        // code in this crate's build, and arithmetic of its own would be mutated where no test
        // can reach it.)
        let above_known = self.known + 1;
        let floor = if on(Mutant::QueueRecreateAtKnownEpoch) {
            above_known
        } else {
            above_known.max(self.view.time_epoch(ctx.wall))
        };
        let base = match &self.record {
            Some((r, _, _)) => r.restored(floor),
            None => QueueRecord::new(floor, self.plan.permits),
        };
        let id = self.plan.me.id.clone();
        // It grants nobody: it may land after a record made meanwhile handed out tokens above
        // `floor` and was deleted (found by the model checker once deletions were allowed at
        // any moment). Our grant comes from the conditional write that settles it.
        let join = Change::Join(self.plan.entry.clone());
        let made = if on(Mutant::QueueCreateGrants) {
            base.apply(&join, self.plan.max_len, floor)
        } else {
            base.changed(&join, self.plan.max_len)
        };
        let next = match made {
            Ok(Some(next)) => next,
            // Listed in what we carry forward.
            Ok(None) => base,
            Err(e) => return self.fail(e),
        };
        if self.timed_out(now) {
            return self.timeout_error(now);
        }
        let settled = next.settled(floor).unwrap_or_else(|| next.clone());
        if self.plan.try_once && !matches!(settled.position(&id), Position::Granted { .. }) {
            return self.held(&settled, settled.queue.len().saturating_sub(1), now);
        }
        self.write(next, Cond::Create, Why::Join, ctx)
    }

    /// A lease record (or something unreadable) at the key: free it by the lease's rules, then
    /// make it a queued lock whose tokens start above its epoch.
    fn on_lease(&mut self, ctx: Ctx, entropy: &dyn Entropy) -> Step {
        let now = ctx.now;
        match takeover::decide(&self.view, &self.plan.timing, self.known, now, ctx.wall) {
            Decision::TakeOver { version, epoch, .. } => {
                let fresh = QueueRecord::new(epoch - 1, self.plan.permits);
                let join = Change::Join(self.plan.entry.clone());
                let next = match fresh.apply(&join, self.plan.max_len, self.floor(ctx)) {
                    Ok(Some(next)) => next,
                    Ok(None) => unreachable!("a new record takes its first participant"),
                    Err(e) => return self.fail(e),
                };
                if self.timed_out(now) {
                    return self.timeout_error(now);
                }
                self.write(next, Cond::Match(version), Why::Join, ctx)
            }
            Decision::Create { .. } => self.create(ctx),
            Decision::Stamp => {
                self.phase = Phase::Stamping { id: None };
                Step::Stamp { session: None }
            }
            Decision::Wait {
                until,
                holder,
                epoch,
            } => {
                let url = self.plan.url.clone();
                let by = holder.as_ref().map_or_else(
                    || "an unknown holder (the record is corrupt)".to_string(),
                    Holder::describe,
                );
                let with = |mut e: Error| {
                    if let Some(h) = holder.clone() {
                        e = e.with_holder(h);
                    }
                    if let Some(ep) = epoch {
                        e = e.with_epoch(ep);
                    }
                    e
                };
                if self.plan.try_once {
                    return self.fail(with(Error::new(
                        ErrorKind::Held,
                        format!("{url} is held by {by}"),
                    )));
                }
                if self.timed_out(now) {
                    let waited = format_duration(now - self.start);
                    return self.fail(with(Error::new(
                        ErrorKind::Timeout,
                        format!("timed out after {waited} waiting for {url}, held by {by}"),
                    )));
                }
                let poll = entropy.jitter(self.plan.timing.poll, 0.2);
                self.sleep(until.min(now + poll))
            }
        }
    }

    /// The floor of the tokens a conditional write of ours hands out: our clock in ms (or the
    /// store's, where it told us a later one), read now — after the read that showed the record.
    fn floor(&self, ctx: Ctx) -> u64 {
        if on(Mutant::QueueRecreateAtKnownEpoch) {
            return 0;
        }
        self.view.time_epoch(ctx.wall)
    }

    fn sleep(&mut self, until: Instant) -> Step {
        let until = match self.plan.wait_deadline {
            Some(d) if !self.plan.try_once => until.min(d),
            _ => until,
        };
        self.phase = Phase::Sleeping { until };
        Step::Sleep { until }
    }

    /// A hint arrived while we slept until `until`: read now, unless a read caused by a hint
    /// was sent less than a [`hint_interval`] ago; then read at that interval's end (or at
    /// `until`, when sooner). A hint is never dropped, only delayed, and however many arrive
    /// they cause at most one read an interval.
    fn hinted(&mut self, until: Instant, now: Instant) -> Step {
        if on(Mutant::HintTakenAsGrant) {
            if let Some((record, version, sent)) = self.record.clone() {
                self.phase = Phase::Done;
                return Step::Granted {
                    token: record.epoch,
                    permits: record.permits,
                    confirmation: Confirmation {
                        record,
                        version,
                        sent,
                    },
                };
            }
        }
        let next = self
            .hint_read
            .map(|at| at + hint_interval(&self.plan.timing));
        match next {
            Some(next) if next > now => {
                if next < until {
                    self.hint_read = Some(next);
                }
                self.causes.hint_pending = true;
                self.sleep(until.min(next))
            }
            _ => {
                self.hint_read = Some(now);
                self.read_for(now, Learned::Hint)
            }
        }
    }

    /// Write `next` (our join, or a removal), beginning our session first for a join.
    fn write(&mut self, next: QueueRecord, cond: Cond, why: Why, ctx: Ctx) -> Step {
        if why == Why::Join {
            // The session exists before any join can land: it is what shows we are alive.
            if !self.session_begun {
                self.phase = Phase::BeginningSession { next, cond };
                return Step::BeginSession;
            }
            // A lapsed session means our earlier join may have landed, been granted, proven
            // gone and removed: joining again would list us as a new arrival that can never
            // believe. Give up instead (found by the model checker).
            if !ctx.session_alive && !on(Mutant::QueueRejoinWhenLapsed) {
                let e = lost_session(&self.plan, &LostReason::Expired);
                return self.fail(e);
            }
            self.joined = true;
        }
        let bytes = next.to_bytes();
        let before = self.record.as_ref().map(|(r, _, _)| r);
        let grants = next.newly_granted(before).into_iter().cloned().collect();
        self.phase = Phase::Writing {
            next,
            sent: ctx.now,
            why: why.clone(),
        };
        Step::WriteRecord {
            bytes,
            cond,
            why,
            grants,
        }
    }

    /// Waiting: remove a participant proven gone, or check a session that is due, or sleep.
    fn wait_for(
        &mut self,
        r: &QueueRecord,
        version: Version,
        blockers: Vec<Entry>,
        competing: usize,
        ctx: Ctx,
        entropy: &dyn Entropy,
    ) -> Step {
        let now = ctx.now;
        self.watches
            .retain(|id, _| blockers.iter().any(|b| b.id() == id));
        for b in &blockers {
            self.watches
                .entry(b.id().to_string())
                .or_insert_with(|| (b.clone(), Watch::default()));
        }
        // One proven gone: remove it, in a write that also grants whoever may go then.
        let gone = self
            .watches
            .iter()
            .find(|(_, (_, w))| w.gone.is_some())
            .map(|(id, _)| id.clone());
        if let Some(id) = gone {
            match r.apply(
                &Change::Leave(id.clone()),
                self.plan.max_len,
                self.floor(ctx),
            ) {
                Ok(Some(next)) => {
                    return self.write(next, Cond::Match(version), Why::Remove { id }, ctx)
                }
                _ => {
                    self.watches.remove(&id);
                }
            }
        }
        // A session check that is due.
        let due = self
            .watches
            .iter()
            .find(|(_, (_, w))| w.next_check.is_none_or(|at| at <= now))
            .map(|(id, (entry, w))| (id.clone(), entry.clone(), w.view.version().cloned()));
        if let Some((id, entry, if_none_match)) = due {
            self.phase = Phase::ReadingSession { id };
            return Step::ReadSession {
                key: entry.session_key(&self.plan.key),
                if_none_match,
            };
        }
        // Nothing to do now: sleep until the next check, or a poll of the record. A waiter far
        // back in its line polls less often: it cannot be granted before those ahead of it.
        // With hints trusted, at the renew interval: a write that grants us sends us a hint.
        let permits = r.permits.unwrap_or(1);
        let poll = entropy.jitter(self.plan.timing.poll, 0.2);
        let trusted = ctx.hints_seen && self.plan.entry.wake.is_some();
        // Never below the default poll, which `record_poll` promises: said again here so that
        // a wrong `record_poll` (a mutant: a zero poll) fails its own test instead of making
        // every waiter in the test suite read without pause until the run times out.
        let poll = record_poll(&self.plan.timing, poll, competing, permits, trusted).max(poll);
        let mut until = now + poll;
        for (_, w) in self.watches.values() {
            if let Some(at) = w.next_check {
                until = until.min(at);
            }
        }
        self.sleep(until)
    }

    fn check_later(&mut self, id: &str, now: Instant) {
        if let Some((_, w)) = self.watches.get_mut(id) {
            w.next_check = Some(now + self.plan.timing.poll);
        }
    }

    fn gone(&mut self, id: &str, released: Option<Version>) {
        if let Some((_, w)) = self.watches.get_mut(id) {
            w.gone = Some(released);
        }
    }

    /// Judge a watched session from what we have seen of it: gone, to be ended (a takeover
    /// rule fired), or to be checked again later. Returns the step when it is to be ended.
    fn judge_session(&mut self, id: &str, ctx: Ctx, entropy: &dyn Entropy) -> Option<Step> {
        let now = ctx.now;
        let timing = self.plan.timing;
        let (entry, w) = self.watches.get_mut(id)?;
        let ttl = Duration::from_millis(entry.ttl_ms);
        // Nothing to judge it by: check it again after a poll.
        let in_a_poll = |next_check: &mut Option<Instant>| *next_check = Some(now + timing.poll);
        let end = match &w.view.seen {
            None => {
                in_a_poll(&mut w.next_check);
                None
            }
            Some(Seen::Absent) => {
                // Its owner cannot renew a session that is gone (renewals are conditional on
                // its version): once absent for its ttl plus grace on our clock, it is gone.
                let since = *w.absent_since.get_or_insert(now);
                let limit = ttl + timing.grace_for(ttl);
                if now - since >= limit {
                    w.gone = Some(None);
                } else {
                    w.next_check = Some(since + limit);
                }
                None
            }
            Some(Seen::Present {
                parsed: Parsed::Valid(r),
                version,
                ..
            }) if r.state == RecordState::Released => {
                w.gone = Some(Some(version.clone()));
                None
            }
            // Rule 4 (shared sessions, issue 24): its number is not in the attached set of its
            // session, read after the read of the record that listed it (this watch began with
            // that read, and each watch has its own view): its owner stopped believing it.
            Some(Seen::Present {
                parsed: Parsed::Valid(r),
                ..
            }) if entry.shared().is_some_and(|s| {
                attachment(r.attached.as_deref(), s.n) == Attachment::Detached
            }) =>
            {
                w.gone = Some(None);
                None
            }
            Some(Seen::Present { .. }) => {
                w.absent_since = None;
                match takeover::decide(&w.view, &timing, 0, now, ctx.wall) {
                    Decision::TakeOver {
                        version,
                        epoch,
                        rev,
                    } => Some((version, epoch, rev, entry.ttl_ms, w.view.prev())),
                    Decision::Wait { until, .. } => {
                        w.next_check = Some(pace(until, now, &timing));
                        None
                    }
                    // (Not returned today: `decide` creates only where nothing is seen, the arm
                    // above; judged as a session that shows nothing, not a panic, if that
                    // changes.)
                    Decision::Create { .. } => {
                        in_a_poll(&mut w.next_check);
                        None
                    }
                    Decision::Stamp => {
                        let session = Some(entry.session_key(&self.plan.key));
                        self.phase = Phase::Stamping {
                            id: Some(id.to_string()),
                        };
                        return Some(Step::Stamp { session });
                    }
                }
            }
        };
        let (version, epoch, rev, ttl_ms, prev) = end?;
        let key = entry.session_key(&self.plan.key);
        // Its deadline has surely passed: write it released in our name, so that its renewals
        // fail from now on.
        let record = Record {
            format: FORMAT,
            epoch,
            rev,
            state: RecordState::Released,
            ttl_ms: ttl_ms.max(1),
            holder: self.plan.me.clone(),
            acquired_at: None,
            renewed_at: Some(timestamp(ctx.wall)),
            data: None,
            prev,
            write: Some(entropy.nonce()),
            broken: None,
            preempted: None,
            history: Default::default(),
            attached: None,
        };
        self.phase = Phase::EndingSession { id: id.to_string() };
        Some(Step::EndSession {
            key,
            record,
            cond: Cond::Match(version),
        })
    }

    fn removed_error(&self) -> Error {
        let ttl = format_duration(Duration::from_millis(self.plan.entry.ttl_ms));
        Error::new(
            ErrorKind::Lost,
            format!(
                "this participant was removed from the queue of {}: its session lapsed (it was \
                 not renewed within its ttl of {ttl}: the store was unreachable, or this process \
                 was paused), so the others took it for gone; nothing ran under it: acquire \
                 again",
                self.plan.url
            ),
        )
    }
}

/// The least time between two reads caused by wake hints: the poll, at most 50 ms. A real hint
/// is late by at most this much; a flood of forged ones costs a waiter at most one conditional
/// read (a 304 while unchanged) per interval.
pub fn hint_interval(timing: &Timing) -> Duration {
    timing.poll.min(HINT_INTERVAL)
}

/// The longest [`hint_interval`].
pub const HINT_INTERVAL: Duration = Duration::from_millis(50);

/// When to check a session next, given that a takeover rule could fire at `until` at the
/// latest: a resolution early (the store clock's estimate adds one), then every poll until it
/// fires — never a whole interval late.
pub fn pace(until: Instant, now: Instant, timing: &Timing) -> Instant {
    if on(Mutant::QueueSessionCheckLate) {
        return until;
    }
    let early = until.checked_sub(timing.resolution).unwrap_or(until);
    // Never now or before: a check that is due again at once would loop without a pause.
    early
        .max(now + timing.poll)
        .min(until)
        .max(now + Duration::from_millis(1))
}

/// The error for a waiter whose own session was lost while it waited.
fn lost_session(plan: &WaitPlan, reason: &LostReason) -> Error {
    let ttl = format_duration(Duration::from_millis(plan.entry.ttl_ms));
    let what = match reason {
        LostReason::Expired => format!(
            "its session lapsed: it was not renewed within its ttl of {ttl} (the store was \
             unreachable, or this process was paused)"
        ),
        LostReason::Vanished | LostReason::SessionDeleted => format!(
            "its session's record ({}) was deleted (by hand, or by a lifecycle rule)",
            session_key(&plan.key, &plan.me.id)
        ),
        LostReason::TakenOver { holder, .. } | LostReason::Removed { by: holder } => format!(
            "its session lapsed and {} took it for gone",
            holder.describe()
        ),
        other => format!("its session was lost: {other}"),
    };
    Error::new(
        ErrorKind::Lost,
        format!(
            "gave up waiting for {}: {what}; the others remove it from the queue; nothing ran \
             under it: acquire again",
            plan.url
        ),
    )
}

/// The `Held` or `Timeout` error of a queued lock: who is in the way, in which mode and scope
/// (`holders`: what their sessions say of them, by id, where known), and our place.
pub fn held_error(
    url: &str,
    kind: ErrorKind,
    in_the_way: &[Entry],
    holders: &[(String, Holder)],
    ahead: usize,
    epoch: u64,
    waited: Duration,
) -> Error {
    let name = |e: &Entry| {
        let who = holders
            .iter()
            .find(|(id, _)| id == e.id())
            .map(|(_, h)| h.describe())
            .unwrap_or_else(|| {
                format!("participant {}", e.id().chars().take(8).collect::<String>())
            });
        format!("{who} ({}, {})", e.mode.as_str(), e.scope)
    };
    let by = if in_the_way.is_empty() {
        "earlier waiters".to_string()
    } else {
        in_the_way.iter().map(name).collect::<Vec<_>>().join(", ")
    };
    let what = if kind == ErrorKind::Held {
        format!("{url} is held by {by}; {ahead} waiting ahead")
    } else {
        format!(
            "timed out after {} waiting for {url}, held by {by}; {ahead} waiting ahead",
            format_duration(waited)
        )
    };
    let mut e = Error::new(kind, what).with_epoch(epoch).with_lease(url);
    if let Some((_, h)) = in_the_way
        .first()
        .and_then(|g| holders.iter().find(|(id, _)| id == g.id()))
    {
        e = e.with_holder(h.clone());
    }
    e
}

#[cfg(test)]
mod tests;
