//! Acquiring a lease: read, decide, write, wait — as a state machine the driver feeds with the
//! answers of the store and the passing of time.
//!
//! - Read the record (with `if_none_match` once a version is known), then [`decide`]: create,
//!   take over, or wait until a rule could fire (or the poll interval, or the wait deadline).
//! - **(changed, issue 22)** A create grants nobody: it writes the record *released*, and the
//!   lease is taken by the next write, conditional on the version the create's answer (or a
//!   read) showed, with an epoch above the clock read after that answer. Only a conditional
//!   write hands an epoch out, and none can land after its record's deletion.
//! - A takeover by the store's clock that only the answer's `Date` supports first asks for the
//!   store's own stamp ([`Step::Stamp`]): a gateway's `Date` is not the store's clock.
//! - Write with [`WriteOp`]; a failed condition's read-back feeds the next decision without
//!   another read.
//! - A write whose outcome stayed unknown when it gave up may land later. Its nonce and send
//!   time are remembered: if a later read shows it, the lease is ours since *that* send — and
//!   when its deadline has already passed, the record is released ("let go") and the
//!   acquisition goes on.
//! - A landed write is also let go when the acquisition was cancelled meanwhile, so no phantom
//!   holder is left for others to wait out.

use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::dead_holder::{self, Probe};
use super::takeover::{decide, next_epoch, Decision};
use super::view::View;
use super::write::{WriteEvent, WriteOp, WriteStep, Written};
use super::{Backoff, Entropy};
use crate::clock::Instant;
use crate::duration::format_duration;
use crate::error::{Error, ErrorKind, Result};
use crate::options::{Preempt, Timing};
use crate::record::{timestamp, Displaced, Holder, Record, RecordState, FORMAT};
use crate::store::{Cond, Get, Put, Version};

/// What an acquisition wants.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Plan {
    /// The lease's URL, for messages.
    pub url: String,
    pub holder: Holder,
    pub timing: Timing,
    pub data: Option<String>,
    /// Give up with `Held` instead of waiting.
    pub try_once: bool,
    /// Give up at this instant, whatever is in the way: with `Timeout` for a holder, with
    /// `Unavailable` for a store that did not answer. A call in flight then is answered (or
    /// times out) first; a write whose outcome is still unknown is left to expire, as a
    /// crashed acquirer's would.
    pub wait_deadline: Option<Instant>,
    /// Give up with `Unavailable` once every call to the store has failed `Unavailable` for
    /// this long in a row (`None`: never; the model checker's acquirers retry forever).
    pub unavailable_timeout: Option<Duration>,
    /// Append the tenure this acquisition replaces to the record's history (§3).
    pub history: bool,
    /// Ask whether a holder on this machine is gone (`Step::Probe`), to take over at once
    /// ([`dead_holder`]).
    pub probe_holders: bool,
    /// Whether the lease's epoch is a token others go by (a plain lease's: fencing, gates).
    /// Then a record made where none is grants nobody and is taken by a second, conditional
    /// write. `false` only for a queued lock's session: a fresh key named by its participant's
    /// random id, made by nobody else, whose epoch no one reads (the lock's tokens come from
    /// the lock's record, docs/protocol.md §10) — its `Create` holds at once, one write fewer.
    pub epoch_is_token: bool,
    /// Whether a live holder's record is written over at once (docs/protocol.md §5,
    /// "Preemption for fenced workloads"): once per acquisition.
    pub preempt: Preempt,
}

/// What happened since the last step.
#[derive(Debug)]
pub enum Event {
    Start,
    Read(Result<Get>),
    Put(Result<Put>),
    /// The store's stamp of the probe write ([`Step::Stamp`]); `Ok(None)`: the store gave none.
    Stamped(Result<Option<SystemTime>>),
    Slept,
    /// The caller cancelled (delivered instead of `Slept` when a sleep was cut short).
    Cancelled,
    /// What this machine says of the holder's processes, as `Step::Probe` asked.
    Probed(Probe),
}

/// What to do next.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per step, moved at once; boxing would only allocate
pub enum Step {
    /// Read the record.
    Read {
        if_none_match: Option<Version>,
    },
    /// Send a conditional write.
    Put {
        bytes: Bytes,
        cond: Cond,
    },
    /// Learn the store's clock from a stamp of its own: write the probe object and read its
    /// `last_modified` back (answer with [`Event::Stamped`]).
    Stamp,
    /// Sleep until `until`; a release in this process may wake it early when `wake_on_release`.
    Sleep {
        until: Instant,
        wake_on_release: bool,
    },
    /// Say what these pids are on this machine, with its boot id and namespaces
    /// (`Event::Probed`): the record's holder may be a process of this machine that is gone.
    Probe {
        pids: Vec<u32>,
    },
    /// The lease is ours: `record` at `version`, written by a write sent at `t_send`.
    Acquired {
        record: Record,
        version: Version,
        t_send: Instant,
    },
    Failed(Error),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    Reading,
    Probing,
    Stamping,
    Waiting,
    BackingOff,
    /// Writing our record (an acquisition attempt).
    Writing {
        op: WriteOp,
        record: Record,
    },
    /// Releasing a record of ours we must not keep (landed past its deadline, or after a
    /// cancellation); then go on, or fail with `Cancelled`.
    LettingGo {
        op: WriteOp,
        record: Record,
    },
    Done,
}

/// An acquisition in progress.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Acquirer {
    plan: Plan,
    /// The highest epoch seen for the key (what the client knew, and what it learned since).
    known: u64,
    view: View,
    /// True while the view is as fresh as the last answer from the store.
    fresh: bool,
    tried_blind_create: bool,
    /// Writes of this acquisition whose outcome stayed unknown, with the instant read before
    /// each was sent: one may land later, and is then ours with that send time.
    pending: Vec<(String, Instant)>,
    backoff: Backoff,
    cancelled: bool,
    phase: Phase,
    start: Instant,
    /// When the store last answered (at the start: the start): the unavailable timeout runs
    /// from here, so a call that hangs counts from when it was sent, not when it gave up.
    last_answer: Instant,
    /// The last valid record seen: if the key is then found absent, its tenure ended by
    /// deletion, and the history goes on in the record created next.
    last_seen: Option<Record>,
    /// Who holds the lease while this acquisition waits for it (the holder, `None` for a
    /// corrupt record, and its epoch), for the driver to tell a waiting user; `None` when not
    /// waiting for a holder.
    waiting_for: Option<(Option<Holder>, Option<u64>)>,
    /// The tenure this acquisition set out to preempt (its first preemption's, whatever
    /// became of the write): it preempts that tenure again when a renewal beat its write, and
    /// no other — a later tenure (another preemptor's, a waiter's) is waited for by the usual
    /// rules, so two preempting acquirers cannot take the lease from each other in a loop
    /// inside one call.
    preempting: Option<Displaced>,
}

impl Acquirer {
    /// Start acquiring at `now`, knowing epochs up to `known` and, when this client released
    /// the lease itself, the record it released (then the first step is the write).
    pub fn new(plan: Plan, known: u64, released: Option<(Version, Record)>, now: Instant) -> Self {
        let view = match released {
            Some((version, record)) => View::known(version, record, now),
            None => View::default(),
        };
        Acquirer {
            backoff: Backoff::for_timing(&plan.timing),
            plan,
            known,
            view,
            fresh: false,
            tried_blind_create: false,
            pending: Vec::new(),
            cancelled: false,
            phase: Phase::Idle,
            start: now,
            last_answer: now,
            last_seen: None,
            waiting_for: None,
            preempting: None,
        }
    }

    /// Who holds the lease, and at which epoch, when the last step was a wait for a holder
    /// (`Some((None, _))`: a corrupt record); `None` otherwise.
    pub fn waiting_for(&self) -> Option<(Option<&Holder>, Option<u64>)> {
        self.waiting_for.as_ref().map(|(h, e)| (h.as_ref(), *e))
    }

    /// The highest epoch seen for the key.
    pub fn known_epoch(&self) -> u64 {
        self.known
    }

    /// Whether the store's answers' `Date` was refused: found ahead of the store's own stamp,
    /// or no stamp could be had (the driver warns once).
    pub fn date_refused(&self) -> bool {
        self.view.date_refused
    }

    /// The next step, given what happened, at `now` (monotonic) and `wall` (our wall clock).
    pub fn step(
        &mut self,
        event: Event,
        now: Instant,
        wall: SystemTime,
        entropy: &dyn Entropy,
    ) -> Step {
        if matches!(event, Event::Cancelled) {
            self.cancelled = true;
        }
        self.waiting_for = None;
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Writing { op, record } => self.writing(op, record, event, now, wall, entropy),
            Phase::LettingGo { op, record } => {
                self.letting_go(op, record, event, now, wall, entropy)
            }
            Phase::Reading => match event {
                Event::Read(result) => self.after_read(result, now, wall, entropy),
                other => unreachable!("a read answers with Read, not {other:?}"),
            },
            Phase::Probing => match event {
                Event::Probed(probe) => {
                    self.view.probe = Some(probe);
                    self.decide_and_act(now, wall, entropy)
                }
                other => unreachable!("a probe answers with Probed, not {other:?}"),
            },
            Phase::Stamping => match event {
                Event::Stamped(result) => self.after_stamp(result, now, wall, entropy),
                other => unreachable!("a stamp answers with Stamped, not {other:?}"),
            },
            Phase::Idle | Phase::Waiting | Phase::BackingOff => self.next(now, wall, entropy),
            Phase::Done => unreachable!("the acquisition is over"),
        }
    }

    fn fail(&mut self, e: Error) -> Step {
        self.phase = Phase::Done;
        Step::Failed(e.with_lease(&self.plan.url))
    }

    fn cancelled_error(&mut self) -> Step {
        let url = self.plan.url.clone();
        self.fail(Error::new(
            ErrorKind::Cancelled,
            format!("acquire of {url} was cancelled"),
        ))
    }

    /// Read, or decide from a view fresh enough.
    fn next(&mut self, now: Instant, wall: SystemTime, entropy: &dyn Entropy) -> Step {
        if self.cancelled {
            return self.cancelled_error();
        }
        // Read unless the view already allows a write (a released record this client
        // remembers, or a wait that has run out: the conditional write itself checks).
        let must_read = self.view.seen.is_none()
            || (!self.fresh
                && matches!(
                    decide(&self.view, &self.plan.timing, self.known, now, wall),
                    Decision::Wait { .. }
                ));
        if must_read {
            self.phase = Phase::Reading;
            return Step::Read {
                if_none_match: self.view.version().cloned(),
            };
        }
        self.decide_and_act(now, wall, entropy)
    }

    /// The store failed `Unavailable`: try again after a pause, unless the wait has ended or
    /// the store has not answered for the whole unavailable timeout.
    fn retry_later(&mut self, e: Error, now: Instant, entropy: &dyn Entropy) -> Step {
        let since = self.last_answer;
        let timeout_end = self.plan.unavailable_timeout.map(|t| since + t);
        let give_up_at = match (self.plan.wait_deadline, timeout_end) {
            (Some(w), Some(t)) => Some(w.min(t)),
            (w, t) => w.or(t),
        };
        if give_up_at.is_some_and(|g| now >= g) {
            let url = self.plan.url.clone();
            let tried = format_duration(now - self.start);
            let down = format_duration(now - since);
            return self.fail(e.context(format!(
                "gave up acquiring {url} after {tried}: the store has been unavailable for {down}"
            )));
        }
        let mut until = now + self.backoff.next(entropy);
        if let Some(g) = give_up_at {
            until = until.min(g);
        }
        self.phase = Phase::BackingOff;
        Step::Sleep {
            until,
            wake_on_release: false,
        }
    }

    fn after_read(
        &mut self,
        result: Result<Get>,
        now: Instant,
        wall: SystemTime,
        entropy: &dyn Entropy,
    ) -> Step {
        match result {
            Ok(get) => {
                self.view.absorb(get, now);
                self.backoff = Backoff::for_timing(&self.plan.timing);
                self.last_answer = now;
            }
            Err(e) if e.kind() == ErrorKind::Unavailable => {
                return self.retry_later(e, now, entropy)
            }
            // S3 answers 403, not 404, to a read of a missing key when the caller may not list
            // the bucket. A create is safe whatever is there: try it once. If the key exists it
            // fails, and the read-back reports the denial.
            Err(e)
                if e.kind() == ErrorKind::Store
                    && self.view.seen.is_none()
                    && !self.tried_blind_create =>
            {
                self.tried_blind_create = true;
                self.view.seen = Some(super::view::Seen::Absent);
            }
            Err(e) => return self.fail(e),
        }
        self.decide_and_act(now, wall, entropy)
    }

    fn after_stamp(
        &mut self,
        result: Result<Option<SystemTime>>,
        now: Instant,
        wall: SystemTime,
        entropy: &dyn Entropy,
    ) -> Step {
        let stamp = match result {
            Ok(stamp) => stamp,
            Err(e) if e.kind() == ErrorKind::Unavailable => {
                return self.retry_later(e, now, entropy)
            }
            // No stamp to be had (the probe may not be written, say): the store-clock rule
            // cannot be confirmed, and the observation rule decides.
            Err(_) => None,
        };
        self.last_answer = now;
        let timing = &self.plan.timing;
        let grace = timing.grace_for(timing.ttl);
        self.view.absorb_stamp(stamp, now, timing.resolution, grace);
        self.decide_and_act(now, wall, entropy)
    }

    fn decide_and_act(&mut self, now: Instant, wall: SystemTime, entropy: &dyn Entropy) -> Step {
        if let Some(r) = self.view.record() {
            self.known = self.known.max(r.epoch);
            // Any change, whatever its rev and nonce (an older writer's records carry none).
            if self.last_seen.as_ref() != Some(r) {
                self.last_seen = Some(r.clone());
            }
        }
        if let Some((version, record, t_send)) = self.adoptable() {
            // An earlier attempt of ours landed late: we hold the lease since its send.
            self.pending.clear();
            return self.landed(record, version, t_send, now, wall, entropy);
        }
        if self.cancelled {
            return self.cancelled_error();
        }
        if let Some(pids) = self.to_probe() {
            self.phase = Phase::Probing;
            return Step::Probe { pids };
        }
        let mut preempted = None;
        let (cond, epoch, rev) = match decide(&self.view, &self.plan.timing, self.known, now, wall)
        {
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
            } => match self.preemption(wall) {
                Some((version, epoch, rev, whom)) => {
                    self.preempting = Some(whom.clone());
                    preempted = Some(whom);
                    (Cond::Match(version), epoch, rev)
                }
                None => return self.wait(until, holder, epoch, now, entropy),
            },
            Decision::Stamp => {
                self.phase = Phase::Stamping;
                return Step::Stamp;
            }
        };
        let now_wall = timestamp(wall);
        // **(changed, issue 22)** A record made where none is grants nobody: it is written
        // released, and taken by the next write, conditional on its version, with an epoch
        // above the clock read after its answer. A `Create` may land long after it was sent
        // (held up in the network, or sent by an acquirer that gave up), after a record made
        // meanwhile handed epochs out and was deleted: its epoch, from the clock of its send,
        // may be one of theirs; a conditional write cannot land after its record's deletion.
        let makes = cond == Cond::Create;
        let grants = !makes
            || !self.plan.epoch_is_token
            || super::mutants::on(super::mutants::Mutant::LeaseCreateGrants);
        let history = self.history(makes, preempted.is_some(), &now_wall);
        let record = Record {
            history,
            format: FORMAT,
            epoch,
            rev,
            state: if grants {
                RecordState::Held
            } else {
                RecordState::Released
            },
            ttl_ms: self.plan.timing.ttl.as_millis() as u64,
            holder: self.plan.holder.clone(),
            acquired_at: grants.then(|| now_wall.clone()),
            renewed_at: Some(now_wall),
            data: if grants { self.plan.data.clone() } else { None },
            prev: if makes { vec![] } else { self.view.prev() },
            write: Some(entropy.nonce()),
            broken: None,
            preempted,
            attached: None,
        };
        // Once sent, the outcome is resolved even if cancelled: a landed write is let go. Not
        // past the wait deadline: an outcome still unknown then is left to expire.
        let mut give_up_at = now + self.plan.timing.ttl;
        if let Some(d) = self.plan.wait_deadline {
            give_up_at = give_up_at.min(d);
        }
        let op = WriteOp::new(&self.plan.url, &record, cond, give_up_at, &self.plan.timing);
        self.writing(op, record, Event::Start, now, wall, entropy)
    }

    /// The history of the record this acquisition writes: the record it replaces (or, for a
    /// create, the last one seen before the key was found absent) ends its tenure.
    fn history(&self, create: bool, preempts: bool, now_wall: &str) -> crate::record::History {
        let replaced = if create {
            self.last_seen.as_ref()
        } else {
            self.view.record()
        };
        let Some(r) = replaced else {
            return Default::default();
        };
        if !self.plan.history {
            return r.history.clone();
        }
        if preempts {
            return r.history_after(
                "preempted",
                Some(now_wall.to_string()),
                self.plan.holder.by(),
            );
        }
        let (end, at) = match (create, r.state) {
            (true, RecordState::Held) => ("deleted", Some(now_wall.to_string())),
            _ => r.ending(now_wall),
        };
        r.history_after(end, at, None)
    }

    /// The preemption of the live record in the view, when the plan asks for one and the
    /// record is the tenure this acquisition set out to preempt (or it has sent none yet): the
    /// version to write over, the epoch (as for a takeover: one above the record's and every
    /// epoch known, and above the clock read after the read when the record is a create's),
    /// the rev, and whom it preempts. Only a valid record held by another holder: a corrupt
    /// record's holder cannot be told of it.
    fn preemption(&self, wall: SystemTime) -> Option<(Version, u64, u64, Displaced)> {
        if self.plan.preempt != Preempt::EveryEffectFenced {
            return None;
        }
        let r = self.view.record()?;
        if r.state != RecordState::Held || r.holder.id == self.plan.holder.id {
            return None;
        }
        let whom = Displaced {
            id: r.holder.id.clone(),
            epoch: r.epoch,
        };
        // The same tenure, renewed since the write was sent (its condition failed, or its
        // outcome stayed unknown and the read shows it did not land): sent again.
        let spent = super::mutants::on(super::mutants::Mutant::PreemptOncePerCall);
        match &self.preempting {
            Some(first) if spent || *first != whom => return None,
            _ => {}
        }
        let epoch = if super::mutants::on(super::mutants::Mutant::PreemptSameEpoch) {
            r.epoch.max(self.known)
        } else {
            next_epoch(r, self.known, &self.view, wall)
        };
        Some((self.view.version()?.clone(), epoch, r.rev + 1, whom))
    }

    /// How long the lease had been free when this acquisition's write landed at `now`, by the
    /// store's clock: since the release it replaced, or since the deadline of the holder it
    /// took over (its last write + its ttl). `None` for a new record, the take of a record a
    /// create made (nobody held it), or when the store gave no clock.
    pub fn handover(&self, now: Instant) -> Option<Duration> {
        let Some(super::view::Seen::Present {
            parsed: crate::record::Parsed::Valid(r),
            last_modified: Some(modified),
            ..
        }) = &self.view.seen
        else {
            return None;
        };
        // Our own record hands nothing over, nor one a create made that nobody acquired.
        if r.holder.id == self.plan.holder.id || r.never_acquired() {
            return None;
        }
        let (server_now, at) = self.view.server_now?;
        let store_now = server_now + now.saturating_duration_since(at);
        let free_since = match r.state {
            RecordState::Released => *modified,
            RecordState::Held => *modified + r.ttl(),
        };
        Some(
            store_now
                .duration_since(free_since)
                .unwrap_or(Duration::ZERO),
        )
    }

    fn wait(
        &mut self,
        until: Instant,
        holder: Option<Holder>,
        epoch: Option<u64>,
        now: Instant,
        entropy: &dyn Entropy,
    ) -> Step {
        let url = self.plan.url.clone();
        let held_error = |kind: ErrorKind, what: String| {
            let mut e = Error::new(kind, what);
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
        if self.plan.try_once {
            return self.fail(held_error(
                ErrorKind::Held,
                format!("{url} is held by {by}"),
            ));
        }
        if self.plan.wait_deadline.is_some_and(|d| now >= d) {
            let waited = format_duration(now - self.start);
            return self.fail(held_error(
                ErrorKind::Timeout,
                format!("timed out after {waited} waiting for {url}, held by {by}"),
            ));
        }
        let poll = entropy.jitter(self.plan.timing.poll, 0.2);
        let mut wake_at = until.min(now + poll);
        if let Some(d) = self.plan.wait_deadline {
            wake_at = wake_at.min(d);
        }
        self.fresh = false;
        self.phase = Phase::Waiting;
        self.waiting_for = Some((holder, epoch));
        Step::Sleep {
            until: wake_at,
            wake_on_release: true,
        }
    }

    /// The pids to ask about before deciding: those of a held record's holder, once per answer
    /// of the store (a dead process stays dead: an answer that it is gone stays true).
    fn to_probe(&self) -> Option<Vec<u32>> {
        if !self.plan.probe_holders || self.view.probe.is_some() {
            return None;
        }
        let record = self.view.record()?;
        let pids = dead_holder::pids(&record.holder);
        (record.state == RecordState::Held && !pids.is_empty()).then_some(pids)
    }

    /// A record of ours in the view whose write's outcome stayed unknown.
    fn adoptable(&self) -> Option<(Version, Record, Instant)> {
        let r = self.view.record()?;
        let (_, sent) = self.pending.iter().find(|(nonce, _)| r.is_write(nonce))?;
        Some((self.view.version()?.clone(), r.clone(), *sent))
    }

    #[allow(clippy::too_many_arguments)]
    fn writing(
        &mut self,
        mut op: WriteOp,
        record: Record,
        event: Event,
        now: Instant,
        wall: SystemTime,
        entropy: &dyn Entropy,
    ) -> Step {
        let unanswered = matches!(&event, Event::Put(Err(e)) if e.kind() == ErrorKind::Unavailable);
        match op.step(write_event(event), now, entropy) {
            WriteStep::Done(Ok(Written::Landed { version, t_send })) => {
                self.pending.clear();
                self.landed(record, version, t_send, now, wall, entropy)
            }
            // Replaced: landed, and someone (an operator's break) replaced it before we even
            // learned we held it; we never acted on it, so it is as if we lost the race.
            WriteStep::Done(Ok(Written::Rejected { current } | Written::Replaced { current })) => {
                self.last_answer = now;
                self.view.absorb(current, now);
                self.fresh = true;
                self.next(now, wall, entropy)
            }
            WriteStep::Done(Err(e)) if e.kind() == ErrorKind::Unavailable => {
                let sent = op.t_send().unwrap_or(now);
                self.pending.push((op.nonce().to_string(), sent));
                self.view = View::default();
                self.fresh = false;
                self.retry_later(e, now, entropy)
            }
            WriteStep::Done(Err(e)) => self.fail(e),
            // The write's outcome is unknown and the wait is over: a read-back would take
            // another request timeout. Give up now; if the write lands, it expires.
            WriteStep::Read if unanswered && self.plan.wait_deadline.is_some_and(|d| now >= d) => {
                let url = self.plan.url.clone();
                let tried = format_duration(now - self.start);
                self.fail(Error::unavailable(format!(
                    "gave up acquiring {url} after {tried}: the store did not answer a write \
                     before the wait ended (if the write landed later, the lease expires after \
                     its ttl)"
                )))
            }
            step => {
                self.phase = Phase::Writing { op, record };
                io_step(step, now)
            }
        }
    }

    /// A write of ours landed: hold the lease — unless its deadline has already passed or we
    /// were cancelled; then release it again.
    fn landed(
        &mut self,
        record: Record,
        version: Version,
        t_send: Instant,
        now: Instant,
        wall: SystemTime,
        entropy: &dyn Entropy,
    ) -> Step {
        self.known = self.known.max(record.epoch);
        if record.state == RecordState::Released {
            // Our `Create` landed (answered, or found by a read): it made the record, which
            // grants nobody; take it now, from this answer, with a write conditional on it.
            self.view = View::known(version, record, now);
            self.fresh = true;
            return self.next(now, wall, entropy);
        }
        let expired = now >= t_send + self.plan.timing.ttl;
        if !expired && !self.cancelled {
            self.phase = Phase::Done;
            return Step::Acquired {
                record,
                version,
                t_send,
            };
        }
        let mut release = record.successor();
        release.state = RecordState::Released;
        release.renewed_at = Some(timestamp(wall));
        release.write = Some(entropy.nonce());
        let give_up_at = now + self.plan.timing.request_timeout * 2;
        let op = WriteOp::new(
            &self.plan.url,
            &release,
            Cond::Match(version),
            give_up_at,
            &self.plan.timing,
        );
        self.letting_go(op, release, Event::Start, now, wall, entropy)
    }

    #[allow(clippy::too_many_arguments)]
    fn letting_go(
        &mut self,
        mut op: WriteOp,
        record: Record,
        event: Event,
        now: Instant,
        wall: SystemTime,
        entropy: &dyn Entropy,
    ) -> Step {
        match op.step(write_event(event), now, entropy) {
            WriteStep::Done(outcome) => {
                // Best effort: a release that did not land leaves a record that expires.
                self.view = match outcome {
                    Ok(Written::Landed { version, .. }) => View::known(version, record, now),
                    _ => View::default(),
                };
                self.fresh = false;
                self.next(now, wall, entropy)
            }
            step => {
                self.phase = Phase::LettingGo { op, record };
                io_step(step, now)
            }
        }
    }
}

fn write_event(event: Event) -> WriteEvent {
    match event {
        Event::Start => WriteEvent::Start,
        Event::Read(r) => WriteEvent::Read(r),
        Event::Put(r) => WriteEvent::Put(r),
        Event::Stamped(_) => unreachable!("no stamp is asked for while writing"),
        // A write in flight resolves its outcome even when cancelled.
        Event::Slept | Event::Cancelled => WriteEvent::Slept,
        Event::Probed(_) => unreachable!("probes are asked for between writes"),
    }
}

fn io_step(step: WriteStep, now: Instant) -> Step {
    match step {
        WriteStep::Put { bytes, cond } => Step::Put { bytes, cond },
        WriteStep::Read => Step::Read {
            if_none_match: None,
        },
        WriteStep::Sleep(d) => Step::Sleep {
            until: now + d,
            wake_on_release: false,
        },
        WriteStep::Done(_) => unreachable!("handled by the caller"),
    }
}

/// How long an acquisition waited, for messages.
pub fn waited(start: Instant, now: Instant) -> Duration {
    now.saturating_duration_since(start)
}

#[cfg(test)]
mod tests;
