//! Model checking of queued locks (docs/protocol.md §10) with stateright, driving the protocol's
//! own machines — the very code `core/src/queue.rs` and `core/src/lease.rs` run:
//! [`Waiter`] (from the first read to the grant), [`GrantHold`] (the holder's confirmation of
//! the lock's record at each renewal) and [`ChangeOp`] (a leave), over the record's own algebra
//! (`QueueRecord`). Nothing here decides what a participant does; the model only carries out
//! the machines' steps against a modelled store and network, and plays the world around them.
//!
//! The model (docs/model.md, "Queued locks"): a few participants, each with one request (a mode
//! and a scope), share one lock record in a store that applies conditional writes atomically.
//! Each participant's *session* (an ordinary lease, model-checked by `lease_model`) is
//! abstracted: its owner is `Alive`, `Lapsed` (its lease expired: it never believes again in
//! this acquisition) or `Crashed`, and its object in the store is held, ended (released by its
//! owner or by a checker that took it over) or deleted. A checker's read of a session is
//! answered from that abstraction with a session record the takeover rules judge as they would
//! a real one: a live session was just renewed, a dead one is older than any ttl. The network
//! may hold a request up and apply it later, apply it and lose or hold up its answer, or fail it
//! without applying it; a request whose sender gave up may still land. The world may delete the
//! lock's record or a session (by hand, or by a lifecycle rule) and write a record of a newer
//! format over the lock's record.
//!
//! Checked: no two participants that believe at one instant hold conflicting grants, and at
//! most `permits` cover any point — except a holder that has not confirmed the record since it
//! was last deleted or replaced (the stated window: until its next renewal); every such
//! confirmed believer is listed among the record's grants with its token; grants follow the
//! order in which competing joins landed; tokens strictly increase, across deletions too; a
//! record never exceeds its size limit; nothing is ever written over a record of a newer
//! format; and, in a fault-free variant, every participant whose session stays alive is served.
//!
//! `cargo test --release -p lease-verify --test queue_model` runs the bounded checks;
//! `LEASE_MODEL=deep` explores a larger bound (docs/verification.md has the figures).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use stateright::{Model, Property};

use lease::clock::Instant;
use lease::options::Timing;
use lease::protocol::hold::LostReason;
use lease::protocol::queue::change::{ChangeEvent, ChangeOp, ChangeStep};
use lease::protocol::queue::holder::{ConfirmEvent, ConfirmStep, GrantHold};
use lease::protocol::queue::waiter::{Ctx, Event, Step, WaitPlan, Waiter};
use lease::protocol::queue::{
    classify, Change, Classified, Entry, Mode, QueueRecord, Scope, YieldAsk,
};
use lease::protocol::write::Written;
use lease::protocol::Entropy;
use lease::record::{Holder, Record, RecordState, FORMAT};
use lease::store::{Cond, Get, Object, Put, Version};
use lease::ErrorKind;

use crate::lease_model::{at, timing};
pub use crate::lease_model::{check, deep};
use crate::network::{inject, Answer, Fault, Flight, Net, Req};

// ---------------------------------------------------------------------------------------------
// Time and randomness.

/// The lock's key.
const KEY: &str = "lock";
/// The wall clock's milliseconds at the start: tokens of a record made where none is start
/// above it (13 digits, as in real use: the record's size depends on it).
const BASE_MS: u64 = 1_767_225_600_000;

/// Deterministic randomness: no jitter; one nonce (the model answers the writes that use it).
pub(crate) struct Fixed;

impl Entropy for Fixed {
    fn nonce(&self) -> String {
        "n".into()
    }
    fn jitter(&self, d: Duration, _spread: f64) -> Duration {
        d
    }
}

/// The whole seconds from the model's origin to `t`, rounded up.
fn ticks_of(t: Instant) -> u32 {
    let d = t.saturating_duration_since(at(0));
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)) as u32
}

/// The store's clock for sessions: whole seconds.
fn store_time(ticks: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + ticks)
}

// ---------------------------------------------------------------------------------------------
// The state.

/// The lock's record as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stored {
    generation: u64,
    bytes: Bytes,
}

/// A participant's session owner, abstracted (`lease_model` checks the lease itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Session {
    Alive,
    /// Its lease expired (paused, partitioned, or its object deleted): it stopped believing at
    /// once and never will again in this acquisition, although it may still act, and still be
    /// listed.
    Lapsed,
    /// It stopped for good; its requests in flight may still land.
    Crashed,
}

/// A participant's session object in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SessionObj {
    /// Not begun yet.
    None,
    Held,
    /// Released, by its owner (after leaving) or by a checker that took it over.
    Ended,
    /// Deleted (by its owner after leaving, by a checker after removing it, or by the world).
    Deleted,
}

/// What a waiting participant waits for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Io {
    Request(Flight),
    /// A sleep; `retry`: after a failure (it may always end).
    Sleep {
        until: Instant,
        retry: bool,
    },
}

/// Where a participant is. Each waits for at most one request at a time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)] // cloned whole by the checker
pub enum Phase {
    Idle,
    /// Acquiring: the [`Waiter`].
    Waiting {
        waiter: Box<Waiter>,
        io: Io,
    },
    /// Granted: believes while its session is alive. `confirming`: a confirmation (read of the
    /// lock's record, or the record made again) in flight.
    Holding {
        token: u64,
        hold: Box<GrantHold>,
        confirming: Option<Flight>,
    },
    /// Leaving (release, give up, a lost grant): a [`ChangeOp`] of `Leave(own id)`; it does not
    /// believe. `token`: the grant it released, if it held one.
    Leaving {
        op: Box<ChangeOp>,
        flight: Flight,
        token: Option<u64>,
    },
    /// This acquisition is over.
    Done,
    Crashed,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Participant {
    phase: Phase,
    session: Session,
    obj: SessionObj,
    acquisitions: u8,
    /// Granted while its session was alive, in some acquisition.
    served: bool,
    /// Its own clock, in whole seconds.
    clock: u32,
    /// How many times the record had been deleted or replaced when the request that last
    /// showed its grant was applied (it is *confirmed* while that is still the count).
    confirmed_at: u8,
    /// The same count when its request in flight was applied.
    applied_at: u8,
    /// The generation of the record when its last request was applied (wake-ups).
    seen_gen: u64,
    /// Wake-ups without anything new, left.
    idle_wakes: u8,
    /// Wake hints (early wake-ups, no time passing), left.
    hints: u8,
    /// Its wall clock runs [`QueueModel::wall_lag_ms`] behind the others' (after a `Drift`).
    wall_behind: bool,
    /// The store generation of the record its grant was last confirmed by (the grant, or a
    /// read or write that showed it): a holder preempted at a later generation believes until
    /// its next confirmation.
    confirmed_gen: u64,
    /// The highest token granted when its last request was applied.
    read_token: u64,
    /// The highest token granted when the first read that showed the lock's record without
    /// it (in its current acquisition) was applied: a preemption it makes may remove only
    /// grants up to it (one set of tenures per acquisition, decided at that read).
    start_token: Option<u64>,
}

/// A rule broken by a transition (not a property of a single state).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Violation {
    /// A participant was granted while a competing one whose join landed earlier still waits.
    Overtaken,
    /// A grant's token was not above every token granted before it.
    TokenNotAbove,
    /// A participant's join landed twice (it was listed, gone, and listed again).
    JoinedTwice,
    /// A participant whose session is alive was removed from the record by another.
    LiveRemoved,
    /// A record larger than its limit was written.
    Overflow,
    /// A waiter was passed over by more later-joined competing waiters than the bound.
    Starved,
    /// A write landed over a record of a newer format.
    OverNewer,
    /// A holder was told of a yield request that did not name its grant's token.
    ToldWrongTenure,
    /// A write granted a waiter that competes with the one a standing yield request hands
    /// over to, while that one still waits.
    YieldToPassed,
    /// A holder's confirmation confirmed its grant from a record that named it preempted (or
    /// a later one).
    PreemptedConfirmed,
    /// A preemption removed a grant made after the preempting acquisition began.
    PreemptedLater,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    store: Option<Stored>,
    generations: u64,
    participants: Vec<Participant>,
    /// Requests whose sender gave up (timed out or crashed); they may still land.
    orphans: Vec<Req>,
    faults: u8,
    deaths: u8,
    /// Deletions of the record and writes of a newer format so far.
    replacements: u8,
    record_deletions: u8,
    session_deletions: u8,
    newer_writes: u8,
    /// Participants' ids in the order their joins landed (while nothing was replaced).
    landed: Vec<String>,
    /// Every grant that landed, with its token.
    granted: BTreeSet<(String, u64)>,
    /// The highest token granted so far.
    max_token: u64,
    /// Some participant was removed by another (it was proven gone).
    removed: bool,
    /// Some join was refused because the record was full.
    refused_full: bool,
    /// Some participant refused a record of a newer format.
    refused_newer: bool,
    /// Someone was granted after the record was deleted.
    granted_after_deletion: bool,
    /// How many later-joined competing waiters were granted while each waiter (by id) waited,
    /// counted from the grants themselves (while nothing was replaced).
    passes: std::collections::BTreeMap<String, u32>,
    /// A waiter was passed over; a due waiter went before a higher priority.
    passed_over: bool,
    due_went_first: bool,
    /// Yield requests written so far (each by its own asker, `op{n}`), and the tokens each
    /// named when it was written: the model's own record of whom a request may reach.
    yields: u8,
    asked: std::collections::BTreeMap<String, BTreeSet<u64>>,
    /// A holder was told of a request; a holder's release granted the request's `to`.
    yield_told: bool,
    yield_to_granted: bool,
    /// The tokens a landed write named preempted, with the store generation that write made
    /// and how many times the record had been deleted or replaced then: their holders may
    /// believe until a confirmation at that generation or later.
    preempted: std::collections::BTreeMap<u64, (u64, u8)>,
    /// The participants (by id) whose grant a preemption removed: one that had not yet learned
    /// of its grant joins again, as a participant left out of a record made again does.
    preempted_ids: BTreeSet<String>,
    /// A holder lost its grant as `LostReason::Preempted`.
    learned_preempted: bool,
    violation: Option<Violation>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The participant starts an acquisition.
    Start(usize),
    /// Apply the participant's request and answer it.
    Deliver(usize),
    /// Deliver an answer that was held up.
    Reply(usize),
    /// Faults: hold the request up; apply it but hold the answer up; apply it and lose the
    /// answer; fail it without applying it.
    Delay(usize),
    DelayAnswer(usize),
    LoseReply(usize),
    Fail(usize),
    /// The participant stops waiting: a request held up stays in the network and may land.
    Timeout(usize),
    DeliverOrphan(usize),
    DropOrphan(usize),
    /// A waiter's sleep ends (only when there is something new to see, or a few times idly).
    Wake(usize),
    /// A wake hint reaches a sleeping waiter, at any moment and with no time passing: real
    /// (after a grant), late, duplicated or forged — the waiter cannot tell (docs/protocol.md
    /// §10, "Wake hints").
    Hint(usize),
    /// A holder renews its session and confirms the lock's record.
    Renew(usize),
    /// A holder stops believing, then leaves.
    Release(usize),
    /// The participant's session lease expires.
    Lapse(usize),
    Crash(usize),
    /// The world deletes the lock's record (by hand, a lifecycle rule).
    DeleteRecord,
    /// The world deletes a participant's session object.
    DeleteSession(usize),
    /// A newer version writes a record of a format this one does not know.
    WriteNewer,
    /// The participant's wall clock falls behind the others' by `wall_lag_ms` (once).
    Drift(usize),
    /// An operator asks the holders to yield, handing over to the participant given (its
    /// current acquisition) or to nobody in particular: one conditional write on the record as
    /// it is now, which the network may then deliver at once, late or never
    /// (docs/protocol.md §10, "Yield on request").
    AskYield(Option<usize>),
}

/// The model's participants, bounds and switches.
#[derive(Clone, Debug)]
pub struct QueueModel {
    /// Each participant's request, in participant order.
    pub requests: Vec<(Mode, Scope)>,
    /// Each participant's priority (empty: all 0; docs/protocol.md §10, "Priorities").
    pub priorities: Vec<i32>,
    /// The bypass bound the protocol runs with in this model (`None`: `MAX_BYPASS`), set for
    /// the whole process when the checker starts: small, to reach it in few steps.
    pub bypass_limit: Option<u32>,
    pub permits: Option<u32>,
    pub acquisitions: u8,
    /// One participant that acquires once more than `acquisitions` (a stream of requests
    /// without the state space of every participant coming back).
    pub again: Option<usize>,
    /// Network faults (a request or answer held up, an answer lost, a request failed).
    pub max_faults: u8,
    /// Sessions that lapse or crash, in all.
    pub max_deaths: u8,
    pub lapses: bool,
    pub crashes: bool,
    /// The world deletes the lock's record, or sessions, up to this many times.
    pub record_deletions: u8,
    pub session_deletions: u8,
    /// The world writes a record of a newer format, up to this many times.
    pub newer_writes: u8,
    /// The record's size limit (small in the capacity scenario).
    pub max_len: usize,
    /// Wake-ups with nothing new to see, per participant and acquisition.
    pub idle_wakes: u8,
    /// Wake hints, per participant and acquisition: arbitrary extra wake-ups (0: none).
    pub hints: u8,
    /// Negative control: a checker takes a session whose owner is alive for a dead one.
    pub evict_live: bool,
    /// Negative control: a holder goes on believing until its leave's answer comes back.
    pub believe_while_leaving: bool,
    /// How far one participant's wall clock may fall behind the others' (0: never). Tokens
    /// rest on wall clocks agreeing within less than the clock has moved past a deleted
    /// record's tokens (docs/model.md, queued locks, assumption 2): the model's clock moves
    /// 1,000 ms at each deletion, so a lag below that minus a record's grants must keep tokens
    /// unique, and a lag of 1,000 ms or more must not (the negative control).
    pub wall_lag_ms: u64,
    /// Yield requests an operator may write, in all (0: none); and whether they name a waiter
    /// to hand over to (`to`), else nobody.
    pub yields: u8,
    pub yield_to: bool,
    /// This participant's requests preempt (`Preempt::EveryEffectFenced`, docs/protocol.md
    /// §10, "Preemption"): "no two believers conflict" then exempts a holder whose grant a
    /// landed preemption removed, until a confirmation that saw that preemption — and such a
    /// holder must conflict only with higher tokens (so fenced objects refuse it).
    pub preempting: Option<usize>,
}

/// The request scenarios of docs/model.md.
pub fn conserve() -> QueueModel {
    // Conserve: backups share the lock, garbage collection takes it alone; arriving in any
    // order, so GC may arrive between the backups.
    QueueModel {
        requests: vec![
            (Mode::Shared, Scope::Whole),
            (Mode::Exclusive, Scope::Whole),
            (Mode::Shared, Scope::Whole),
        ],
        priorities: Vec::new(),
        bypass_limit: None,
        permits: None,
        acquisitions: 1,
        again: None,
        max_faults: 0,
        max_deaths: 0,
        lapses: false,
        crashes: false,
        record_deletions: 0,
        session_deletions: 0,
        newer_writes: 0,
        max_len: lease::protocol::queue::MAX_QUEUE_RECORD_LEN,
        idle_wakes: 1,
        hints: 0,
        evict_live: false,
        believe_while_leaving: false,
        wall_lag_ms: 0,
        yields: 0,
        yield_to: false,
        preempting: None,
    }
}

/// Two participants: a reader and a writer of the whole lock — the smallest conflict, for the
/// checks whose faults need no third participant (deletions, a session deleted).
pub fn pair() -> QueueModel {
    QueueModel {
        requests: vec![
            (Mode::Shared, Scope::Whole),
            (Mode::Exclusive, Scope::Whole),
        ],
        ..conserve()
    }
}

/// Two readers and one permit: the permit count under faults, with two participants.
pub fn pair_semaphore() -> QueueModel {
    QueueModel {
        requests: vec![(Mode::Shared, Scope::Whole); 2],
        permits: Some(1),
        ..conserve()
    }
}

pub fn semaphore() -> QueueModel {
    QueueModel {
        requests: vec![(Mode::Shared, Scope::Whole); 3],
        permits: Some(2),
        ..conserve()
    }
}

pub fn byte_ranges() -> QueueModel {
    let range = |a, b| (Mode::Exclusive, Scope::range(a, b).unwrap());
    QueueModel {
        requests: vec![range(0, 10), range(5, 15), range(10, 20)],
        ..conserve()
    }
}

/// Priorities: a low-priority writer and two high-priority ones, one of which acquires twice,
/// with a bypass bound of 1: the low one may be passed over once, then goes before a high one
/// that came back, and each priority is served in arrival order.
pub fn priorities() -> QueueModel {
    QueueModel {
        requests: vec![(Mode::Exclusive, Scope::Whole); 3],
        priorities: vec![0, 1, 1],
        bypass_limit: Some(1),
        again: Some(1),
        ..conserve()
    }
}

/// Priorities over scopes: a writer of `a` holds; a reader of `a` and a writer of the whole
/// lock wait (priority 0); a reader of `b` (priority 1) passes the whole-lock writer, which is
/// then due (bound 1) — and so is the earlier reader of `a`, its priority, which it competes
/// with, although nothing passed that one over: FIFO within a priority holds.
pub fn priorities_scoped() -> QueueModel {
    let path = |p| Scope::path(p).unwrap();
    QueueModel {
        requests: vec![
            (Mode::Exclusive, path("a")),
            (Mode::Shared, path("a")),
            (Mode::Exclusive, Scope::Whole),
            (Mode::Shared, path("b")),
        ],
        priorities: vec![0, 0, 0, 1],
        bypass_limit: Some(1),
        // Four participants: only the wake-ups that have something new to see.
        idle_wakes: 0,
        ..conserve()
    }
}

/// Yield on request: three writers of the whole lock; an operator asks the holder to step
/// aside, to nobody or to a waiter (the later one, so that the hand-over is out of arrival
/// order), at any moment, the write landing at once, late or never; a holder releases when it
/// learns of a request naming its grant.
pub fn yielding() -> QueueModel {
    QueueModel {
        requests: vec![(Mode::Exclusive, Scope::Whole); 3],
        yields: 1,
        yield_to: true,
        idle_wakes: 0,
        ..conserve()
    }
}

/// Preemption (issue 23): a reader and a writer of the whole lock, and a writer that preempts
/// (docs/protocol.md §10, "Preemption"): it takes the lock from whichever holds it, at once,
/// and they believe until their next confirmation.
pub fn preempting() -> QueueModel {
    QueueModel {
        requests: vec![
            (Mode::Shared, Scope::Whole),
            (Mode::Exclusive, Scope::Whole),
            (Mode::Exclusive, Scope::Whole),
        ],
        preempting: Some(2),
        idle_wakes: 0,
        ..conserve()
    }
}

/// Preemption on two participants: a writer that holds and one that preempts it (for faults).
pub fn pair_preempting() -> QueueModel {
    QueueModel {
        requests: vec![(Mode::Exclusive, Scope::Whole); 2],
        preempting: Some(1),
        ..preempting()
    }
}

/// Capacity: a writer and three readers, with a record limit that holds all four joined but
/// not all four with tokens: the writer's leave grants the three readers in one write, which
/// fits only if the joins reserved the room for it.
pub fn capacity() -> QueueModel {
    let mut m = QueueModel {
        requests: vec![
            (Mode::Exclusive, Scope::Whole),
            (Mode::Shared, Scope::Whole),
            (Mode::Shared, Scope::Whole),
            (Mode::Shared, Scope::Whole),
        ],
        ..conserve()
    };
    // The largest record the four can make by joining: the first granted, three waiting.
    let mut r = QueueRecord::new(BASE_MS, None);
    let mut s = State::initial(&m);
    for c in 0..4 {
        s.participants[c].acquisitions = 1;
        r = r
            .apply(&Change::Join(m.entry(&s, c)), usize::MAX, BASE_MS)
            .unwrap()
            .unwrap();
    }
    m.max_len = r.to_bytes().len();
    m
}

// ---------------------------------------------------------------------------------------------
// The store.

fn version(generation: u64) -> Version {
    Version {
        etag: format!("g{generation}"),
        generation: Some(generation),
    }
}

/// The record a newer version writes: a format this version does not know.
fn newer_bytes(n: u8) -> Bytes {
    Bytes::from(format!(
        r#"{{"format":3,"epoch":{},"rev":{n}}}"#,
        BASE_MS + 999
    ))
}

/// Apply `req` of participant `by` (`None`: an orphan) to the store atomically; a write that
/// lands is judged.
fn apply(m: &QueueModel, s: &mut State, by: Option<usize>, req: &Req) -> Answer {
    if let Some(c) = by {
        let p = &mut s.participants[c];
        p.applied_at = s.replacements;
        p.seen_gen = s.store.as_ref().map_or(0, |o| o.generation);
        p.read_token = s.max_token;
    }
    match req {
        Req::Stamp => unreachable!("queued locks' participants ask for no stamp"),
        Req::Get { if_none_match } => Answer::Get(match &s.store {
            None => Get::NotFound { server_now: None },
            Some(o) if if_none_match.as_ref() == Some(&version(o.generation)) => {
                Get::NotModified { server_now: None }
            }
            Some(o) => Get::Found(Object {
                bytes: Some(o.bytes.clone()),
                size: o.bytes.len() as u64,
                version: version(o.generation),
                last_modified: None,
                server_now: None,
                meta: Default::default(),
            }),
        }),
        Req::Put { bytes, cond } => {
            let allowed = match (cond, &s.store) {
                (Cond::Create, None) => true,
                (Cond::Match(v), Some(o)) => *v == version(o.generation),
                _ => false,
            };
            if !allowed {
                return Answer::Put(Put::ConditionFailed);
            }
            let old = s.store.as_ref().map(|o| classify(&o.bytes));
            if matches!(old, Some(Classified::Newer(_))) {
                s.violation.get_or_insert(Violation::OverNewer);
            }
            if bytes.len() > m.max_len {
                s.violation.get_or_insert(Violation::Overflow);
            }
            let old = match old {
                Some(Classified::Queue(r)) => Some(r),
                _ => None,
            };
            judge(m, s, old.as_ref(), &record_of(bytes));
            s.generations += 1;
            s.store = Some(Stored {
                generation: s.generations,
                bytes: bytes.clone(),
            });
            if let Some(c) = by {
                s.participants[c].seen_gen = s.generations;
            }
            Answer::Put(Put::Written {
                version: version(s.generations),
                server_now: None,
            })
        }
    }
}

fn record_of(bytes: &[u8]) -> QueueRecord {
    match classify(bytes) {
        Classified::Queue(r) => r,
        other => {
            panic!("a participant wrote something else than a queued lock's record: {other:?}")
        }
    }
}

/// Note what a landing write changes: who joined (arrival order), who was removed, who was
/// granted (their tokens, and whether an earlier competing arrival still waits).
fn judge(m: &QueueModel, s: &mut State, old: Option<&QueueRecord>, new: &QueueRecord) {
    let untouched = s.replacements == 0;
    let listed = |id: &str| old.is_some_and(|o| o.find(id).is_some());
    if untouched {
        for e in new.grants.iter().chain(&new.queue) {
            if !listed(e.id()) {
                if s.preempted_ids.contains(e.id()) {
                    // Preempted before it learned of its grant: it joins again, arriving now.
                    s.landed.retain(|l| l != e.id());
                } else if s.landed.iter().any(|l| l == e.id()) {
                    s.violation.get_or_insert(Violation::JoinedTwice);
                }
                s.landed.push(e.id().to_string());
            }
        }
        // Removed by another while alive (a participant leaving itself is Leaving).
        for e in old
            .into_iter()
            .flat_map(|o| o.grants.iter().chain(&o.queue))
        {
            let preempted = e
                .token
                .is_some_and(|t| new.preempted_by(e.id(), t).is_some());
            if new.find(e.id()).is_none() && !preempted {
                if let Some(c) = m.owner(s, e.id()) {
                    let p = &s.participants[c];
                    if p.session == Session::Alive && !matches!(p.phase, Phase::Leaving { .. }) {
                        s.violation.get_or_insert(Violation::LiveRemoved);
                    }
                }
            }
        }
    }
    let arrival = |id: &str| s.landed.iter().position(|l| l == id);
    // The waiter a standing yield request hands over to (the model reads the field itself).
    let yield_to: Option<String> = old
        .and_then(|o| {
            let to = o.yield_request.as_ref()?.to.clone()?;
            o.queue.iter().any(|e| e.id() == to).then_some(to)
        })
        .filter(|_| untouched);
    // The write's new grants, in the order it made them: before each, the waiters are those
    // still waiting after the write and those it granted later.
    let newly: Vec<&Entry> = new
        .grants
        .iter()
        .filter(|g| {
            !s.granted
                .contains(&(g.id().to_string(), g.token.unwrap_or(0)))
        })
        .collect();
    for (k, g) in newly.iter().enumerate() {
        if !untouched {
            break;
        }
        // A preemptor is granted ahead of the waiters by design (docs/protocol.md §10,
        // "Preemption"): neither FIFO nor the bypass count judges its grant.
        if m.preempting.is_some() && m.owner(s, g.id()) == m.preempting {
            continue;
        }
        let waiting: Vec<&str> = new
            .queue
            .iter()
            .chain(newly[k + 1..].iter().copied())
            .map(Entry::id)
            .filter(|w| m.compete(w, g.id()))
            .collect();
        let due = m.due(s, g.id(), &waiting, &arrival);
        let handed_to = yield_to.as_deref() == Some(g.id());
        if handed_to {
            s.yield_to_granted = true;
        }
        if let Some(to) = &yield_to {
            let still_waits = new.queue.iter().any(|e| e.id() == to);
            if !handed_to && still_waits && m.compete(to, g.id()) && !due {
                s.violation.get_or_insert(Violation::YieldToPassed);
            }
        }
        for w in &waiting {
            let (pw, pg) = (m.priority_of(w), m.priority_of(g.id()));
            // Order: higher priority first, unless the grant is due; FIFO within a priority.
            // A yield request's `to` goes first, alone (docs/protocol.md §10).
            let misordered =
                !handed_to && ((arrival(w) < arrival(g.id()) && pw == pg) || (pw > pg && !due));
            if misordered {
                s.violation.get_or_insert(Violation::Overtaken);
            }
            if pw > pg {
                s.due_went_first = true;
            }
            if arrival(w) < arrival(g.id()) {
                let n = s.passes.entry(w.to_string()).or_default();
                *n += 1;
                s.passed_over = true;
                if *n > m.bypass() {
                    s.violation.get_or_insert(Violation::Starved);
                }
            }
        }
        s.passes.remove(g.id());
    }
    // Preemptions: whom each removed, and when (the generation this write makes).
    // (A record made again may name a grant again that a preemption removed before: a holder
    // restored it from what it last saw, and the preemptor removes it again.)
    let removed = new.preempted.iter().flat_map(|p| {
        p.removed
            .iter()
            .map(move |r| (r.id.clone(), r.token, p.by.clone()))
    });
    for (id, token, by) in removed.collect::<Vec<_>>() {
        if old.is_some_and(|o| o.preempted_by(&id, token).is_some()) {
            continue;
        }
        s.preempted
            .insert(token, (s.generations + 1, s.replacements));
        s.preempted_ids.insert(id);
        // Made by a preempting write (a `Create` only carries a record forward).
        if old.is_some() {
            let began = m.owner(s, &by).and_then(|c| s.participants[c].start_token);
            if began.is_none_or(|began| token > began) {
                s.violation.get_or_insert(Violation::PreemptedLater);
            }
        }
    }
    for g in &new.grants {
        let token = g.token.expect("a grant has a token");
        if s.granted.contains(&(g.id().to_string(), token)) {
            continue;
        }
        if token <= s.max_token {
            s.violation.get_or_insert(Violation::TokenNotAbove);
        }
        if s.record_deletions > 0 {
            s.granted_after_deletion = true;
        }
        s.max_token = s.max_token.max(token);
        s.granted.insert((g.id().to_string(), token));
    }
}

// ---------------------------------------------------------------------------------------------
// The participants: the protocol's machines, their steps carried out.

impl State {
    fn initial(m: &QueueModel) -> State {
        State {
            store: None,
            generations: 0,
            participants: vec![
                Participant {
                    phase: Phase::Idle,
                    session: Session::Alive,
                    obj: SessionObj::None,
                    acquisitions: 0,
                    served: false,
                    clock: 0,
                    confirmed_at: 0,
                    applied_at: 0,
                    seen_gen: 0,
                    idle_wakes: 0,
                    hints: 0,
                    wall_behind: false,
                    confirmed_gen: 0,
                    read_token: 0,
                    start_token: None,
                };
                m.requests.len()
            ],
            orphans: vec![],
            faults: 0,
            deaths: 0,
            replacements: 0,
            record_deletions: 0,
            session_deletions: 0,
            newer_writes: 0,
            landed: vec![],
            granted: BTreeSet::new(),
            max_token: 0,
            removed: false,
            refused_full: false,
            refused_newer: false,
            granted_after_deletion: false,
            passes: Default::default(),
            passed_over: false,
            due_went_first: false,
            yields: 0,
            asked: Default::default(),
            yield_told: false,
            yield_to_granted: false,
            preempted: Default::default(),
            preempted_ids: BTreeSet::new(),
            learned_preempted: false,
            violation: None,
        }
    }
}

impl QueueModel {
    fn timing(&self) -> Timing {
        timing(Duration::from_secs(1))
    }

    /// Participant `c`'s id in its current acquisition (a session per acquisition).
    fn id(&self, s: &State, c: usize) -> String {
        format!("p{c}.{}", s.participants[c].acquisitions)
    }

    /// The participant an id names, if it is its current acquisition.
    fn owner(&self, s: &State, id: &str) -> Option<usize> {
        (0..self.requests.len()).find(|&c| self.id(s, c) == id)
    }

    /// Whether the requests of participants `a` and `b` (by id) compete, so that FIFO orders
    /// them: their scopes overlap and either is exclusive, or the lock counts permits
    /// (docs/protocol.md §10). The model's own definition from its own requests, not the
    /// protocol's `QueueRecord::competes` that the FIFO property checks: with the property
    /// calling the code it checks, a wrong `competes` was wrong on both sides.
    fn compete(&self, a: &str, b: &str) -> bool {
        // An id names its participant whatever the acquisition (`p{c}.{n}`, [`Self::id`]): an
        // earlier acquisition's entry may still wait in the record.
        let request = |id: &str| &self.requests[Self::participant_of(id)];
        let ((ma, sa), (mb, sb)) = (request(a), request(b));
        sa.overlaps(sb)
            && (*ma == Mode::Exclusive || *mb == Mode::Exclusive || self.permits.is_some())
    }

    /// How many acquisitions participant `c` makes.
    fn acquisitions_of(&self, c: usize) -> u8 {
        self.acquisitions + u8::from(self.again == Some(c))
    }

    /// The participant of an id in the record (`p{c}.{n}`, [`Self::id`]).
    fn participant_of(id: &str) -> usize {
        id.strip_prefix('p')
            .and_then(|rest| rest.split('.').next())
            .and_then(|c| c.parse().ok())
            .expect("every id in the record is a participant's")
    }

    fn priority_of(&self, id: &str) -> i32 {
        self.priorities
            .get(Self::participant_of(id))
            .copied()
            .unwrap_or(0)
    }

    /// The bypass bound in force.
    fn bypass(&self) -> u32 {
        self.bypass_limit
            .unwrap_or(lease::protocol::queue::MAX_BYPASS)
    }

    /// Whether waiter `id` is due, by the model's own count of its bypasses: passed over to the
    /// bound, or a later competing waiter of its priority among `waiting` is due
    /// (docs/protocol.md §10, "Priorities").
    fn due(
        &self,
        s: &State,
        id: &str,
        waiting: &[&str],
        arrival: &dyn Fn(&str) -> Option<usize>,
    ) -> bool {
        s.passes.get(id).copied().unwrap_or(0) >= self.bypass()
            || waiting.iter().any(|h| {
                arrival(h) > arrival(id)
                    && self.priority_of(h) == self.priority_of(id)
                    && self.compete(h, id)
                    && self.due(s, h, waiting, arrival)
            })
    }

    fn entry(&self, s: &State, c: usize) -> Entry {
        let (mode, scope) = self.requests[c].clone();
        Entry {
            id: self.id(s, c),
            mode,
            scope,
            ttl_ms: self.timing().ttl.as_millis() as u64,
            token: None,
            session: None,
            wake: None,
            priority: self.priorities.get(c).copied().unwrap_or(0),
            passed: 0,
        }
    }

    /// Participant `c`'s wall clock: above every token handed out (assumption 4 of the lease
    /// model: a record is deleted only once the clock has passed every epoch handed out), less
    /// its lag once its clock has drifted behind.
    fn wall(&self, s: &State, c: usize) -> SystemTime {
        let lag = if s.participants[c].wall_behind {
            self.wall_lag_ms
        } else {
            0
        };
        SystemTime::UNIX_EPOCH
            + Duration::from_millis(BASE_MS + 1000 * u64::from(s.replacements) - lag)
    }

    /// Whether participant `c` believes it holds its grant now.
    pub fn believes(&self, s: &State, c: usize) -> bool {
        let p = &s.participants[c];
        p.session == Session::Alive
            && match &p.phase {
                Phase::Holding { .. } => true,
                Phase::Leaving { token, .. } => self.believe_while_leaving && token.is_some(),
                _ => false,
            }
    }

    /// Whether `c`'s belief rests on a record confirmed since the last deletion or replacement.
    fn confirmed(&self, s: &State, c: usize) -> bool {
        s.participants[c].confirmed_at == s.replacements
    }

    fn token(&self, s: &State, c: usize) -> Option<u64> {
        match &s.participants[c].phase {
            Phase::Holding { token, .. } => Some(*token),
            Phase::Leaving { token, .. } => *token,
            _ => None,
        }
    }

    fn ctx(&self, s: &State, c: usize) -> Ctx {
        Ctx {
            now: at(s.participants[c].clock),
            wall: self.wall(s, c),
            session_alive: s.participants[c].session == Session::Alive,
            // As a driver that has seen hints arrive: the long poll where an entry has a wake
            // address (the model's entries have none, to keep its records small, so its polls
            // stay the default: the poll's length is timing, and the model's wake-ups and hints
            // already come at arbitrary moments).
            hints_seen: true,
        }
    }

    fn plan(&self, s: &State, c: usize) -> WaitPlan {
        let id = self.id(s, c);
        WaitPlan {
            key: KEY.into(),
            url: "model://lock".into(),
            me: Holder {
                id: id.clone(),
                ..Holder::default()
            },
            entry: self.entry(s, c),
            permits: self.permits,
            timing: self.timing(),
            try_once: false,
            wait_deadline: None,
            unavailable_timeout: None,
            max_len: self.max_len,
            preempt: self.preempting == Some(c),
        }
    }

    // --- Sessions, as the store would answer about them.

    /// The participant and whether the session named `key` is its current one.
    fn session_of(&self, s: &State, key: &str) -> (usize, bool) {
        let id = key.rsplit('/').next().expect("a session key");
        let (c, a) = id[1..].split_once('.').expect("an id p<c>.<a>");
        let c: usize = c.parse().expect("a participant");
        let a: u8 = a.parse().expect("an acquisition");
        (c, a == s.participants[c].acquisitions)
    }

    /// A checker (participant `by`) reads the session at `key`.
    fn session_get(&self, s: &State, by: usize, key: &str, if_none_match: Option<Version>) -> Get {
        let (c, current) = self.session_of(s, key);
        let p = &s.participants[c];
        let obj = if current { p.obj } else { SessionObj::Ended };
        let now = u64::from(s.participants[by].clock);
        let record = |state, rev| Record {
            format: FORMAT,
            epoch: 1,
            rev,
            state,
            ttl_ms: self.timing().ttl.as_millis() as u64,
            holder: Holder {
                id: key.rsplit('/').next().unwrap().to_string(),
                ..Holder::default()
            },
            acquired_at: None,
            renewed_at: None,
            data: None,
            prev: vec![],
            write: None,
            broken: None,
            preempted: None,
            history: Default::default(),
            attached: None,
        };
        let found = |r: Record, v: &str, modified: u64, server_now: u64| {
            let version = Version::etag(format!("{key}:{v}"));
            if if_none_match.as_ref() == Some(&version) {
                return Get::NotModified {
                    server_now: Some(store_time(server_now)),
                };
            }
            let bytes = r.to_bytes();
            Get::Found(Object {
                size: bytes.len() as u64,
                bytes: Some(bytes),
                version,
                last_modified: Some(store_time(modified)),
                server_now: Some(store_time(server_now)),
                meta: Default::default(),
            })
        };
        let dead = !current || p.session != Session::Alive || self.evict_live;
        match obj {
            SessionObj::None | SessionObj::Deleted => Get::NotFound {
                server_now: Some(store_time(now)),
            },
            SessionObj::Ended => found(record(RecordState::Released, 3), "end", now, now),
            // Renewed just now: the takeover rules wait.
            SessionObj::Held if !dead => {
                found(record(RecordState::Held, 2), &format!("at{now}"), now, now)
            }
            // Not renewed for longer than any ttl.
            SessionObj::Held => found(record(RecordState::Held, 2), "dead", 0, now + 100_000),
        }
    }

    /// A checker writes the session at `key` released (it took it over).
    fn session_end(&self, s: &mut State, by: usize, key: &str, cond: &Cond) -> Written {
        let (c, current) = self.session_of(s, key);
        let dead_version = Version::etag(format!("{key}:dead"));
        if current
            && s.participants[c].obj == SessionObj::Held
            && *cond == Cond::Match(dead_version)
        {
            s.participants[c].obj = SessionObj::Ended;
            return Written::Landed {
                version: Version::etag(format!("{key}:end")),
                t_send: at(s.participants[by].clock),
            };
        }
        Written::Rejected {
            current: self.session_get(s, by, key, None),
        }
    }

    // --- Driving the machines.

    /// Feed `event` to participant `c`'s waiter and carry out its steps until it waits for the
    /// network, a sleep, or is done.
    fn drive_waiter(&self, s: &mut State, c: usize, mut event: Event, after_failure: bool) {
        loop {
            let ctx = self.ctx(s, c);
            let Phase::Waiting { waiter, .. } = &mut s.participants[c].phase else {
                unreachable!("not waiting")
            };
            let step = waiter.step(event, ctx, &Fixed);
            let set_io = |s: &mut State, io: Io| {
                if let Phase::Waiting { io: slot, .. } = &mut s.participants[c].phase {
                    *slot = io;
                }
            };
            event = match step {
                Step::ReadRecord { if_none_match } => {
                    return set_io(s, Io::Request(Flight::Sent(Req::Get { if_none_match })));
                }
                Step::WriteRecord { bytes, cond, .. } => {
                    return set_io(s, Io::Request(Flight::Sent(Req::Put { bytes, cond })));
                }
                Step::Sleep { until } => {
                    return set_io(
                        s,
                        Io::Sleep {
                            until,
                            retry: after_failure,
                        },
                    );
                }
                Step::BeginSession => {
                    s.participants[c].obj = SessionObj::Held;
                    Event::SessionBegun(Ok(()))
                }
                Step::ReadSession { key, if_none_match } => {
                    Event::Session(Ok(self.session_get(s, c, &key, if_none_match)))
                }
                // The store's own clock, stamped on the probe beside the lock: in the model the
                // clock that answered the session's read (its `Date` is the store's clock here;
                // a `Date` running ahead is the lease model's `TrustDate` control).
                Step::Stamp { session } => {
                    let now = u64::from(s.participants[c].clock);
                    let stamp = match session {
                        Some(key) => match self.session_get(s, c, &key, None) {
                            Get::Found(o) => o.server_now,
                            Get::NotFound { server_now } | Get::NotModified { server_now } => {
                                server_now
                            }
                        },
                        None => Some(store_time(now)),
                    };
                    Event::Stamped(Ok(stamp))
                }
                Step::EndSession { key, cond, .. } => {
                    Event::Ended(Ok(self.session_end(s, c, &key, &cond)))
                }
                Step::DeleteSession { key, .. } => {
                    let (o, current) = self.session_of(s, &key);
                    if current && s.participants[o].obj == SessionObj::Ended {
                        s.participants[o].obj = SessionObj::Deleted;
                    }
                    s.removed = true;
                    Event::Deleted
                }
                Step::Granted {
                    token,
                    confirmation,
                    ..
                } => {
                    let p = &mut s.participants[c];
                    if p.session == Session::Alive {
                        p.served = true;
                    }
                    p.confirmed_at = p.applied_at;
                    p.confirmed_gen = confirmation.version.generation.unwrap_or(0);
                    let hold = GrantHold::new(KEY, &self.id(s, c), self.timing().ttl, confirmation);
                    s.participants[c].phase = Phase::Holding {
                        token,
                        hold: Box::new(hold),
                        confirming: None,
                    };
                    return;
                }
                Step::Held { .. } => {
                    unreachable!("the model's waiters neither try once nor time out")
                }
                Step::Failed { error, listed } => {
                    match error.kind() {
                        ErrorKind::QueueFull => s.refused_full = true,
                        ErrorKind::Unsupported => s.refused_newer = true,
                        _ => {}
                    }
                    if listed {
                        return self.leave(s, c, None);
                    }
                    return self.end(s, c);
                }
            };
        }
    }

    /// An operator's yield request: the protocol's own change ([`ChangeOp`] of
    /// [`Change::Yield`]) applied to the record as it is now; its write goes into the network
    /// as a request nobody waits for (it may land at once, late — then its condition fails — or
    /// never). `None` when there is nothing to ask (no queued record, nobody in the way, the
    /// `to` not listed as a waiter).
    fn ask_yield(&self, s: &mut State, to: Option<usize>) -> Option<()> {
        let stored = s.store.as_ref()?;
        let Classified::Queue(r) = classify(&stored.bytes) else {
            return None;
        };
        let by = format!("op{}", s.yields);
        let ask = YieldAsk {
            by: by.clone(),
            to: to.map(|c| self.id(s, c)),
            reason: None,
        };
        let mut op = ChangeOp::new(
            "model://lock",
            Change::Yield(ask),
            self.max_len,
            at(u32::MAX / 2),
            &self.timing(),
        )
        .knowing(r, version(stored.generation));
        // The operator's clock agrees with the participants' (no lag).
        let wall = SystemTime::UNIX_EPOCH
            + Duration::from_millis(BASE_MS + 1000 * u64::from(s.replacements));
        let ChangeStep::Write { bytes, cond } = op.step(ChangeEvent::Start, at(0), wall, &Fixed)
        else {
            return None;
        };
        let named = record_of(&bytes).yield_request?.tokens;
        s.asked.insert(by, named.into_iter().collect());
        s.yields += 1;
        s.orphans.push(Req::Put { bytes, cond });
        Some(())
    }

    /// Start leaving the lock (its own id), not believing from now on; `token`: the grant it
    /// releases, if any.
    fn leave(&self, s: &mut State, c: usize, token: Option<u64>) {
        let timing = self.timing();
        let give_up_at = at(u32::MAX / 2);
        let mut op = ChangeOp::new(
            "model://lock",
            Change::Leave(self.id(s, c)),
            self.max_len,
            give_up_at,
            &timing,
        );
        let now = at(s.participants[c].clock);
        match op.step(ChangeEvent::Start, now, self.wall(s, c), &Fixed) {
            ChangeStep::Read => {
                s.participants[c].phase = Phase::Leaving {
                    op: Box::new(op),
                    flight: Flight::Sent(Req::Get {
                        if_none_match: None,
                    }),
                    token,
                };
            }
            other => unreachable!("a leave starts by reading, not {other:?}"),
        }
    }

    /// Feed `event` to participant `c`'s leave.
    fn drive_leave(&self, s: &mut State, c: usize, mut event: ChangeEvent) {
        loop {
            let now = at(s.participants[c].clock);
            let wall = self.wall(s, c);
            let Phase::Leaving { op, flight, .. } = &mut s.participants[c].phase else {
                unreachable!("not leaving")
            };
            match op.step(event, now, wall, &Fixed) {
                ChangeStep::Read => {
                    *flight = Flight::Sent(Req::Get {
                        if_none_match: None,
                    });
                    return;
                }
                ChangeStep::Write { bytes, cond } => {
                    *flight = Flight::Sent(Req::Put { bytes, cond });
                    return;
                }
                // A backoff: nothing else happens meanwhile that matters to it.
                ChangeStep::Sleep(_) => event = ChangeEvent::Slept,
                ChangeStep::Done(_) => return self.end(s, c),
            }
        }
    }

    /// The acquisition is over: its session released (it left, or gave up).
    fn end(&self, s: &mut State, c: usize) {
        let p = &mut s.participants[c];
        if p.obj == SessionObj::Held {
            p.obj = SessionObj::Ended;
        }
        p.phase = if p.acquisitions < self.acquisitions_of(c) {
            Phase::Idle
        } else {
            Phase::Done
        };
    }

    /// Feed `event` to participant `c`'s confirmation.
    fn drive_confirm(&self, s: &mut State, c: usize, event: ConfirmEvent) {
        let now = at(s.participants[c].clock);
        let wall = self.wall(s, c);
        // What the confirmation rests on: the request that showed the grant, as of when the
        // store applied it; or, confirmed without a request, the record as it is now (the
        // machine claims to know it: a claim the properties then hold it to).
        let rests_on = match event {
            ConfirmEvent::Start => s.replacements,
            _ => s.participants[c].applied_at,
        };
        // The generation of the record it shows, and whether it was read (not made again).
        let shown = match &event {
            ConfirmEvent::Start => Some((s.store.as_ref().map_or(0, |o| o.generation), true)),
            ConfirmEvent::Read(Ok(Get::Found(o))) => {
                Some((o.version.generation.unwrap_or(0), true))
            }
            ConfirmEvent::Read(Ok(Get::NotModified { .. })) => {
                Some((s.participants[c].seen_gen, true))
            }
            ConfirmEvent::Wrote(Ok(Put::Written { version, .. })) => {
                Some((version.generation.unwrap_or(0), false))
            }
            _ => None,
        };
        let token = self.token(s, c);
        let Phase::Holding {
            hold, confirming, ..
        } = &mut s.participants[c].phase
        else {
            unreachable!("not holding")
        };
        match hold.step(event, now, wall) {
            ConfirmStep::Read { if_none_match } => {
                *confirming = Some(Flight::Sent(Req::Get { if_none_match }));
            }
            ConfirmStep::Write { bytes, cond } => {
                *confirming = Some(Flight::Sent(Req::Put { bytes, cond }));
            }
            ConfirmStep::Confirmed => {
                *confirming = None;
                let told = hold.take_yield();
                s.participants[c].confirmed_at = rests_on;
                if let Some((generation, read)) = shown {
                    // A read of the record the preemption wrote, or of a later one, while it
                    // was not deleted or replaced since (a record made again from a stale view
                    // may list the grant again: §10, "Belief").
                    let preempted_at = token.and_then(|t| s.preempted.get(&t));
                    let applied_at = s.participants[c].applied_at;
                    if read
                        && preempted_at
                            .is_some_and(|&(at, reps)| generation >= at && applied_at == reps)
                    {
                        s.violation.get_or_insert(Violation::PreemptedConfirmed);
                    }
                    s.participants[c].confirmed_gen = generation;
                }
                if let Some(told) = told {
                    // Told of a request: it must be one that named this grant.
                    let token = self.token(s, c);
                    let named = s
                        .asked
                        .get(&told.by)
                        .is_some_and(|t| token.is_some_and(|token| t.contains(&token)));
                    if !named {
                        s.violation.get_or_insert(Violation::ToldWrongTenure);
                    }
                    s.yield_told = true;
                    // It steps aside: stop believing, then leave.
                    self.leave(s, c, token);
                }
            }
            ConfirmStep::Retry => *confirming = None,
            // The grant is lost: its holder releases it (it leaves, not believing).
            ConfirmStep::Lost(reason) => {
                if matches!(reason, LostReason::Preempted { .. }) {
                    s.learned_preempted = true;
                }
                self.leave(s, c, None)
            }
        }
    }

    /// Deliver `answer` to participant `c`.
    fn answer(&self, s: &mut State, c: usize, answer: Answer) {
        let unavailable = matches!(answer, Answer::Unavailable);
        let err = || lease::Error::unavailable("the model's network failed");
        match &s.participants[c].phase {
            Phase::Waiting { .. } => {
                // The first record it reads without itself in it is where a preempting waiter
                // decides which grants it sets out to preempt.
                if let Answer::Get(Get::Found(o)) = &answer {
                    let absent = match o.bytes.as_deref().map(classify) {
                        Some(Classified::Queue(r)) => r.find(&self.id(s, c)).is_none(),
                        _ => false,
                    };
                    let p = &mut s.participants[c];
                    if absent {
                        p.start_token = p.start_token.or(Some(p.read_token));
                    }
                }
                let event = match answer {
                    Answer::Get(g) => Event::Record(Ok(g)),
                    Answer::Put(p) => Event::Wrote(Ok(p)),
                    Answer::Stamp(_) => unreachable!("the model's stamps are answered at once"),
                    Answer::Unavailable => match self.req_of(s, c) {
                        Some(Req::Get { .. }) => Event::Record(Err(err())),
                        _ => Event::Wrote(Err(err())),
                    },
                };
                self.drive_waiter(s, c, event, unavailable);
            }
            Phase::Leaving { .. } => {
                let event = match answer {
                    Answer::Get(g) => ChangeEvent::Read(Ok(g)),
                    Answer::Put(p) => ChangeEvent::Wrote(Ok(p)),
                    Answer::Stamp(_) => unreachable!("a leaver asks for no stamp"),
                    Answer::Unavailable => match self.req_of(s, c) {
                        Some(Req::Get { .. }) => ChangeEvent::Read(Err(err())),
                        _ => ChangeEvent::Wrote(Err(err())),
                    },
                };
                self.drive_leave(s, c, event);
            }
            Phase::Holding { .. } => {
                let event = match answer {
                    Answer::Get(g) => ConfirmEvent::Read(Ok(g)),
                    Answer::Put(p) => ConfirmEvent::Wrote(Ok(p)),
                    Answer::Stamp(_) => unreachable!("a holder asks for no stamp"),
                    Answer::Unavailable => match self.req_of(s, c) {
                        Some(Req::Get { .. }) => ConfirmEvent::Read(Err(err())),
                        _ => ConfirmEvent::Wrote(Err(err())),
                    },
                };
                self.drive_confirm(s, c, event);
            }
            other => unreachable!("an answer for a participant that sent nothing: {other:?}"),
        }
    }

    fn flight(&self, s: &State, c: usize) -> Option<Flight> {
        match &s.participants[c].phase {
            Phase::Waiting {
                io: Io::Request(f), ..
            }
            | Phase::Leaving { flight: f, .. }
            | Phase::Holding {
                confirming: Some(f),
                ..
            } => Some(f.clone()),
            _ => None,
        }
    }

    fn set_flight(&self, s: &mut State, c: usize, new: Flight) {
        match &mut s.participants[c].phase {
            Phase::Waiting {
                io: Io::Request(f), ..
            }
            | Phase::Leaving { flight: f, .. }
            | Phase::Holding {
                confirming: Some(f),
                ..
            } => *f = new,
            other => unreachable!("no request in flight: {other:?}"),
        }
    }

    /// A request sent and not yet applied.
    fn pending_req(&self, s: &State, c: usize) -> Option<Req> {
        match self.flight(s, c) {
            Some(Flight::Sent(r)) => Some(r),
            _ => None,
        }
    }

    /// The request of whatever is in flight.
    fn req_of(&self, s: &State, c: usize) -> Option<Req> {
        match self.flight(s, c)? {
            Flight::Sent(r) | Flight::Delayed(r) | Flight::Answered(r, _) | Flight::Lost(r) => {
                Some(r)
            }
        }
    }

    /// Whether participant `c` is in an acquisition (it may lapse or crash).
    fn active(&self, s: &State, c: usize) -> bool {
        !matches!(
            s.participants[c].phase,
            Phase::Idle | Phase::Done | Phase::Crashed
        )
    }

    /// Whether a sleeping waiter has something new to see: the record changed since it last
    /// read it, or a session it watches (or its own) is no longer alive.
    fn news(&self, s: &State, c: usize) -> bool {
        let p = &s.participants[c];
        let Phase::Waiting { waiter, .. } = &p.phase else {
            return false;
        };
        let generation = s.store.as_ref().map_or(0, |o| o.generation);
        generation != p.seen_gen
            || p.session != Session::Alive
            || waiter.watched().iter().any(|id| match self.owner(s, id) {
                Some(o) => {
                    let q = &s.participants[o];
                    q.session != Session::Alive || q.obj != SessionObj::Held
                }
                None => true,
            })
    }

    /// The points at which permits are counted: every byte of the ranges, or the whole lock.
    fn probe_points(&self) -> Vec<Scope> {
        let ends: Vec<(u64, u64)> = self
            .requests
            .iter()
            .filter_map(|(_, scope)| match scope {
                Scope::Range { start, end } => Some((*start, *end)),
                _ => None,
            })
            .collect();
        if ends.is_empty() {
            return vec![Scope::Whole];
        }
        let from = ends.iter().map(|e| e.0).min().unwrap();
        let to = ends.iter().map(|e| e.1).max().unwrap();
        (from..to)
            .map(|b| Scope::range(b, b + 1).unwrap())
            .collect()
    }

    /// Believers whose belief rests on the current record (confirmed since its last deletion
    /// or replacement): the others stop at their next renewal, the stated window.
    fn confirmed_believers(&self, s: &State) -> Vec<usize> {
        (0..self.requests.len())
            .filter(|&c| self.believes(s, c) && self.confirmed(s, c) && !self.preempted(s, c))
            .collect()
    }

    /// Whether `c` believes a grant a landed preemption removed, not confirmed since: it
    /// believes until its next confirmation, the stated window (docs/protocol.md §10).
    fn preempted(&self, s: &State, c: usize) -> bool {
        let p = &s.participants[c];
        self.token(s, c)
            .and_then(|t| s.preempted.get(&t))
            .is_some_and(|&(at, _)| p.confirmed_gen < at)
    }

    /// A preempted holder that still believes conflicts only with grants of higher tokens: every
    /// object such a grant writes or fences refuses it (docs/protocol.md §7).
    fn preempted_fenced(&self, s: &State) -> bool {
        let confirmed = self.confirmed_believers(s);
        (0..self.requests.len())
            .filter(|&b| self.believes(s, b) && self.preempted(s, b))
            .all(|b| {
                confirmed.iter().all(|&a| {
                    let (ma, sa) = &self.requests[a];
                    let (mb, sb) = &self.requests[b];
                    let conflict =
                        sa.overlaps(sb) && (*ma == Mode::Exclusive || *mb == Mode::Exclusive);
                    !conflict || self.token(s, a) > self.token(s, b)
                })
            })
    }

    /// No two believers hold grants that conflict (overlapping scopes, either exclusive).
    fn mutually_exclusive(&self, s: &State) -> bool {
        let believers = self.confirmed_believers(s);
        believers.iter().enumerate().all(|(i, &a)| {
            believers[i + 1..].iter().all(|&b| {
                let (ma, sa) = &self.requests[a];
                let (mb, sb) = &self.requests[b];
                !(sa.overlaps(sb) && (*ma == Mode::Exclusive || *mb == Mode::Exclusive))
            })
        })
    }

    /// At most `permits` believers cover any one point.
    fn within_permits(&self, s: &State) -> bool {
        let Some(n) = self.permits else {
            return true;
        };
        let believers = self.confirmed_believers(s);
        self.probe_points().iter().all(|point| {
            let covering = believers
                .iter()
                .filter(|&&c| self.requests[c].1.overlaps(point))
                .count();
            covering <= n as usize
        })
    }

    /// Every believer is listed among the latest record's grants (the safety argument's step
    /// 2, docs/protocol.md §10). (By id: a record made again from a stale view may grant a
    /// holder again, with a new token, before it next confirms; it keeps the token it holds.)
    fn believers_listed(&self, s: &State) -> bool {
        let record = s.store.as_ref().and_then(|o| match classify(&o.bytes) {
            Classified::Queue(r) => Some(r),
            _ => None,
        });
        self.confirmed_believers(s).into_iter().all(|c| {
            let id = self.id(s, c);
            record
                .as_ref()
                .is_some_and(|r| r.grants.iter().any(|g| g.id() == id))
        })
    }
}

impl Model for QueueModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        // The protocol's bound is process-wide; this model's is the one it judges by.
        if !self.priorities.is_empty() {
            lease::protocol::mutants::set_bypass_limit(self.bypass_limit);
        }
        vec![State::initial(self)]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.violation.is_some() {
            return;
        }
        let faults_left = s.faults < self.max_faults;
        let deaths_left = s.deaths < self.max_deaths;
        for c in 0..self.requests.len() {
            let p = &s.participants[c];
            match &p.phase {
                Phase::Crashed => continue,
                Phase::Idle if p.acquisitions < self.acquisitions_of(c) => {
                    actions.push(Action::Start(c))
                }
                Phase::Waiting {
                    io: Io::Sleep { retry, .. },
                    ..
                } => {
                    if *retry || p.idle_wakes > 0 || self.news(s, c) {
                        actions.push(Action::Wake(c));
                    }
                    // A hint needs no news: a forged or duplicated one comes to a waiter with
                    // nothing new to see, as a real one may come before the write it follows.
                    if p.hints > 0 && p.session == Session::Alive {
                        actions.push(Action::Hint(c));
                    }
                }
                Phase::Holding {
                    confirming: None, ..
                } => {
                    if p.session == Session::Alive {
                        actions.push(Action::Renew(c));
                    }
                    actions.push(Action::Release(c));
                }
                _ => {}
            }
            match self.flight(s, c) {
                Some(Flight::Sent(_)) => {
                    actions.push(Action::Deliver(c));
                    if faults_left {
                        actions.push(Action::Delay(c));
                        actions.push(Action::DelayAnswer(c));
                        actions.push(Action::LoseReply(c));
                        actions.push(Action::Fail(c));
                    }
                }
                Some(Flight::Delayed(_)) => {
                    actions.push(Action::Deliver(c));
                    actions.push(Action::Timeout(c));
                }
                Some(Flight::Answered(..)) => {
                    actions.push(Action::Reply(c));
                    actions.push(Action::Timeout(c));
                }
                Some(Flight::Lost(_)) => actions.push(Action::Timeout(c)),
                None => {}
            }
            if deaths_left && self.active(s, c) {
                if self.lapses && p.session == Session::Alive {
                    actions.push(Action::Lapse(c));
                }
                if self.crashes {
                    actions.push(Action::Crash(c));
                }
            }
            if s.session_deletions < self.session_deletions && p.obj == SessionObj::Held {
                actions.push(Action::DeleteSession(c));
            }
            // One clock drifts: the others are the reference it lags behind.
            if self.wall_lag_ms > 0 && !s.participants.iter().any(|p| p.wall_behind) {
                actions.push(Action::Drift(c));
            }
        }
        for i in 0..s.orphans.len() {
            actions.push(Action::DeliverOrphan(i));
            actions.push(Action::DropOrphan(i));
        }
        // At any moment, whatever is in flight (docs/model.md, queued locks, assumption 2).
        if s.record_deletions < self.record_deletions && s.store.is_some() {
            actions.push(Action::DeleteRecord);
        }
        if s.newer_writes < self.newer_writes && s.store.is_some() {
            actions.push(Action::WriteNewer);
        }
        if s.yields < self.yields && s.store.is_some() {
            if !self.yield_to {
                actions.push(Action::AskYield(None));
            } else {
                for c in 0..self.requests.len() {
                    if matches!(s.participants[c].phase, Phase::Waiting { .. }) {
                        actions.push(Action::AskYield(Some(c)));
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Start(c) => {
                let p = &mut s.participants[c];
                p.acquisitions += 1;
                p.session = Session::Alive;
                p.obj = SessionObj::None;
                p.idle_wakes = self.idle_wakes;
                p.hints = self.hints;
                p.start_token = None;
                let now = at(p.clock);
                let waiter = Waiter::new(self.plan(&s, c), 0, now);
                s.participants[c].phase = Phase::Waiting {
                    waiter: Box::new(waiter),
                    io: Io::Sleep {
                        until: now,
                        retry: false,
                    },
                };
                self.drive_waiter(&mut s, c, Event::Start, false);
            }
            Action::Deliver(c) => {
                let req = self.req_of(&s, c)?;
                let answer = apply(self, &mut s, Some(c), &req);
                self.answer(&mut s, c, answer);
            }
            Action::Reply(c) => match self.flight(&s, c) {
                Some(Flight::Answered(_, a)) => self.answer(&mut s, c, a),
                _ => return None,
            },
            Action::Delay(c) => inject(self, &mut s, c, Fault::Delay)?,
            Action::DelayAnswer(c) => inject(self, &mut s, c, Fault::DelayAnswer)?,
            Action::LoseReply(c) => inject(self, &mut s, c, Fault::LoseReply)?,
            Action::Fail(c) => inject(self, &mut s, c, Fault::Fail)?,
            Action::Timeout(c) => {
                if let Some(Flight::Delayed(req)) = self.flight(&s, c) {
                    s.orphans.push(req);
                }
                self.answer(&mut s, c, Answer::Unavailable);
            }
            Action::DeliverOrphan(i) => {
                let req = s.orphans.remove(i);
                apply(self, &mut s, None, &req);
            }
            Action::DropOrphan(i) => {
                s.orphans.remove(i);
            }
            Action::Wake(c) => {
                let news = self.news(&s, c);
                let p = &mut s.participants[c];
                let Phase::Waiting {
                    io: Io::Sleep { until, retry },
                    ..
                } = &p.phase
                else {
                    return None;
                };
                if !retry && !news {
                    p.idle_wakes -= 1;
                }
                // Time passes: at least a second, and up to what the waiter asked for.
                p.clock = (p.clock + 1).max(ticks_of(*until));
                let event = if p.session == Session::Alive {
                    Event::Slept
                } else {
                    Event::SessionLost(LostReason::Expired)
                };
                self.drive_waiter(&mut s, c, event, false);
            }
            Action::Hint(c) => {
                let p = &mut s.participants[c];
                if !matches!(
                    &p.phase,
                    Phase::Waiting {
                        io: Io::Sleep { .. },
                        ..
                    }
                ) {
                    return None;
                }
                p.hints -= 1;
                // No time passes: the hint may come at once, before anything changed.
                self.drive_waiter(&mut s, c, Event::Hinted, false);
            }
            // (Its clock does not move: renewing again and again must not make new states.)
            Action::Renew(c) => self.drive_confirm(&mut s, c, ConfirmEvent::Start),
            Action::Release(c) => {
                let token = self.token(&s, c);
                self.leave(&mut s, c, token);
            }
            Action::Lapse(c) => {
                s.deaths += 1;
                s.participants[c].session = Session::Lapsed;
            }
            Action::Crash(c) => {
                s.deaths += 1;
                if let Some(Flight::Sent(req) | Flight::Delayed(req)) = self.flight(&s, c) {
                    s.orphans.push(req);
                }
                let p = &mut s.participants[c];
                p.phase = Phase::Crashed;
                p.session = Session::Crashed;
            }
            Action::DeleteRecord => {
                s.record_deletions += 1;
                s.replacements += 1;
                s.store = None;
            }
            Action::DeleteSession(c) => {
                s.session_deletions += 1;
                let p = &mut s.participants[c];
                p.obj = SessionObj::Deleted;
                // Its owner cannot renew it any more: it stops believing by its deadline.
                if p.session == Session::Alive {
                    p.session = Session::Lapsed;
                }
            }
            Action::Drift(c) => s.participants[c].wall_behind = true,
            Action::AskYield(to) => self.ask_yield(&mut s, to)?,
            Action::WriteNewer => {
                s.newer_writes += 1;
                s.replacements += 1;
                s.generations += 1;
                s.store = Some(Stored {
                    generation: s.generations,
                    bytes: newer_bytes(s.newer_writes),
                });
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(MUTUAL_EXCLUSION, |m: &QueueModel, s: &State| {
                m.mutually_exclusive(s)
            }),
            Property::always(PERMITS, |m: &QueueModel, s: &State| m.within_permits(s)),
            Property::always(LISTED, |m: &QueueModel, s: &State| m.believers_listed(s)),
            Property::always(FIFO, |_, s: &State| {
                s.violation != Some(Violation::Overtaken)
            }),
            Property::always(TOKENS, |_, s: &State| {
                s.violation != Some(Violation::TokenNotAbove)
            }),
            Property::always(JOINS_ONCE, |_, s: &State| {
                s.violation != Some(Violation::JoinedTwice)
            }),
            Property::always(LIVE_KEPT, |_, s: &State| {
                s.violation != Some(Violation::LiveRemoved)
            }),
            Property::always(FITS, |_, s: &State| {
                s.violation != Some(Violation::Overflow)
            }),
            Property::always(NEWER_KEPT, |_, s: &State| {
                s.violation != Some(Violation::OverNewer)
            }),
            Property::always(BYPASS, |_, s: &State| {
                s.violation != Some(Violation::Starved)
            }),
            Property::always(YIELD_TOLD, |_, s: &State| {
                s.violation != Some(Violation::ToldWrongTenure)
            }),
            Property::always(YIELD_TO, |_, s: &State| {
                s.violation != Some(Violation::YieldToPassed)
            }),
            Property::always(PREEMPTED_FENCED, |m: &QueueModel, s: &State| {
                m.preempted_fenced(s)
            }),
            Property::always(PREEMPTED_STOPS, |_, s: &State| {
                s.violation != Some(Violation::PreemptedConfirmed)
            }),
            Property::always(PREEMPTS_OWN, |_, s: &State| {
                s.violation != Some(Violation::PreemptedLater)
            }),
            Property::sometimes("someone is granted", |_, s: &State| s.max_token > 0),
        ];
        if self.preempting.is_some() {
            properties.push(Property::sometimes(
                "a preempted holder learns it",
                |_, s: &State| s.learned_preempted,
            ));
        }
        if self.newer_writes == 0 && self.max_len >= lease::protocol::queue::MAX_QUEUE_RECORD_LEN {
            properties.push(Property::sometimes(
                "every participant is served",
                |_, s: &State| s.participants.iter().all(|p| p.served),
            ));
        }
        if self.requests.iter().any(|(m, _)| *m == Mode::Exclusive) {
            properties.push(Property::sometimes(
                "an exclusive request is granted",
                |m: &QueueModel, s: &State| {
                    (0..m.requests.len())
                        .any(|c| m.requests[c].0 == Mode::Exclusive && s.participants[c].served)
                },
            ));
        }
        if self.priorities.iter().any(|p| *p != 0) {
            properties.push(Property::sometimes(
                "a waiter is passed over",
                |_, s: &State| s.passed_over,
            ));
        }
        // Due before a higher priority: needs two grants to higher ones past a lower one.
        if self.priorities.iter().any(|p| *p != 0) && self.again.is_some() {
            properties.push(Property::sometimes(
                "a due waiter goes before a higher priority",
                |_, s: &State| s.due_went_first,
            ));
        }
        if self.max_deaths > 0 {
            properties.push(Property::sometimes(
                "a gone participant is removed",
                |_, s: &State| s.removed,
            ));
        }
        if self.max_len < lease::protocol::queue::MAX_QUEUE_RECORD_LEN {
            properties.push(Property::sometimes(
                "a join is refused as full",
                |_, s: &State| s.refused_full,
            ));
        }
        if self.newer_writes > 0 {
            properties.push(Property::sometimes(
                "a record of a newer format is refused",
                |_, s: &State| s.refused_newer,
            ));
        }
        if self.yields > 0 {
            properties.push(Property::sometimes(
                "a holder is told to yield",
                |_, s: &State| s.yield_told,
            ));
        }
        if self.yields > 0 && self.yield_to {
            properties.push(Property::sometimes(
                "a yield hands over to its `to` out of arrival order",
                |_, s: &State| s.yield_to_granted,
            ));
        }
        if self.record_deletions > 0 {
            properties.push(Property::sometimes(
                "someone is granted after the record was deleted",
                |_, s: &State| s.granted_after_deletion,
            ));
        }
        properties
    }
}

/// The safety properties' names (the negative controls look for these).
pub const MUTUAL_EXCLUSION: &str = "no two believers hold conflicting grants";
pub const PERMITS: &str = "at most `permits` believers cover any point";
pub const LISTED: &str = "every believer is listed among the grants";
pub const FIFO: &str =
    "grants follow priority, then the order competing joins landed in, unless due";
pub const BYPASS: &str = "a waiter is passed over at most the bypass bound";
pub const TOKENS: &str = "tokens strictly increase";
pub const JOINS_ONCE: &str = "a participant joins once";
pub const LIVE_KEPT: &str = "a live participant is never removed";
pub const FITS: &str = "no record is written over its size limit";
pub const NEWER_KEPT: &str = "nothing is written over a record of a newer format";
pub const SERVED: &str = "every live participant is served";
pub const YIELD_TOLD: &str = "a yield request is reported only to a tenure it names";
pub const YIELD_TO: &str =
    "no waiter competing with a yield request's `to` is granted while it waits";
pub const PREEMPTED_FENCED: &str =
    "a preempted holder that still believes conflicts only with higher tokens";
pub const PREEMPTED_STOPS: &str =
    "a preempted grant is never confirmed from a record that shows its preemption";
pub const PREEMPTS_OWN: &str =
    "a preemption removes only grants in its way when its acquisition first read the lock";

/// Every safety property, mutual exclusion first.
pub const SAFETY: &[&str] = &[
    MUTUAL_EXCLUSION,
    PERMITS,
    LISTED,
    FIFO,
    TOKENS,
    JOINS_ONCE,
    LIVE_KEPT,
    FITS,
    NEWER_KEPT,
    BYPASS,
    YIELD_TOLD,
    YIELD_TO,
    PREEMPTED_FENCED,
    PREEMPTED_STOPS,
    PREEMPTS_OWN,
];

/// A fault-free network where every holder eventually releases, crashes or lapses: at every
/// terminal state (nothing left to do), every participant whose session is alive was served
/// and is done. The state graph is acyclic (every write moves the generation on, a waiter
/// wakes only to something new or a bounded number of times, faults and deaths are bounded),
/// so every run ends in one.
#[derive(Clone, Debug)]
pub struct QueueLiveness(pub QueueModel);

impl Model for QueueLiveness {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        self.0.init_states()
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let mut all = vec![];
        self.0.actions(s, &mut all);
        all.retain(|a| {
            !matches!(
                a,
                Action::Delay(_)
                    | Action::DelayAnswer(_)
                    | Action::LoseReply(_)
                    | Action::Fail(_)
                    | Action::Timeout(_)
                    // Renewals change nothing a waiter can see.
                    | Action::Renew(_)
            )
        });
        actions.extend(all);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.0.next_state(last, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(SERVED, |m: &QueueLiveness, s: &State| {
                let mut next = vec![];
                m.actions(s, &mut next);
                if !next.is_empty() {
                    return true;
                }
                s.violation.is_none()
                    && s.participants.iter().all(|p| {
                        p.session != Session::Alive || (p.served && p.phase == Phase::Done)
                    })
            }),
            Property::sometimes("a gone participant is removed", |_, s: &State| s.removed),
        ]
    }
}

impl Net for QueueModel {
    type State = State;
    type Req = Req;
    type Answer = Answer;

    fn faults(s: &mut State) -> &mut u8 {
        &mut s.faults
    }

    fn pending_req(&self, s: &State, c: usize) -> Option<Req> {
        QueueModel::pending_req(self, s, c)
    }

    fn set_flight(&self, s: &mut State, c: usize, f: Flight) {
        QueueModel::set_flight(self, s, c, f)
    }

    fn apply(&self, s: &mut State, c: usize, req: &Req) -> Answer {
        apply(self, s, Some(c), req)
    }

    fn answer(&self, s: &mut State, c: usize, a: Answer) {
        QueueModel::answer(self, s, c, a)
    }

    fn unavailable() -> Answer {
        Answer::Unavailable
    }
}
