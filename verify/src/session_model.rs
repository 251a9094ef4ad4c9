//! Model checking of a shared session's owner (docs/protocol.md §10, "Shared sessions",
//! issue 24) with stateright, driving the owner's own machine — [`Owner`], the very code the
//! driver is to run — and judging grants by rule 4's own verdict ([`attachment`]).
//!
//! The model: one process holds one shared session and two grants, one on each of two locks;
//! beside it, one checker per lock (another participant waiting on that lock). The session
//! object lives in a store that applies conditional writes atomically; the owner's writes go
//! through a network that may lose an answer (the owner then knows nothing: the write may land
//! later, or never). The owner attaches both grants, joins each lock once its number is
//! attached, holds, releases one grant or both (each leave may fail and be retried), and its
//! session may lapse (time passes without a renewal landing) or the process may crash. A
//! checker reads its lock's record, then — by a later request — the session, and removes the
//! grant it saw when the session proves it gone: by rule 4 (its number is not in the session's
//! attached set), rule 2 (released) or rules 1 and 3 (not renewed for the ttl plus the grace on
//! the store's clock: the checker takes the session over, writing it released). The world may
//! delete the session object.
//!
//! What is abstracted: the locks' records (one grant each: listed or not) and the checkers'
//! rules 1–3 (the waiter, the takeover rules and the locks' records are checked by
//! `queue_model` and `lease_model`; this model checks what sharing adds: numbers, the order of
//! attach and join, detaches, and one session's loss for many grants).
//!
//! Checked: a grant a checker removed is never believed by its owner; once the session is lost
//! no grant is believed; releasing one grant leaves the other believed; and each outcome is
//! reached (both grants held at once, a removal by rule 4, a session taken over).
//!
//! With an idle time (`idle`, the per-process default session's: one ttl), the owner releases
//! the session once nothing was attached and no leave pending for that long, in two steps an
//! attach may come between: the decision ([`Owner::decide_release`]) and the release write
//! (`hold::begin_release`, then its answer). A grant not yet attached may attach at any moment:
//! before the decision (which cancels it), between the decision and the write, while the write
//! is in flight, after it landed; a refused attach opens another session (outside the model).
//! Checked besides: no grant is attached to a session whose release was decided.
//!
//! `cargo test --release -p lease-verify --test session_model` runs the bounded checks;
//! `LEASE_MODEL=deep` adds a lost answer and a deleted session to the first.

use std::time::Duration;

use stateright::{Model, Property};

use lease::options::Timing;
use lease::protocol::hold::{
    after_write, begin_release, Hold, Phase as HoldPhase, ReleaseStart, Wrote,
};
use lease::protocol::session::owner::{Due, Outcome, Owner};
use lease::protocol::session::{attachment, opening_record, Attachment};
use lease::protocol::write::Written;
use lease::record::{Holder, Record, RecordState};
use lease::store::{Cond, Get, Object, Version};
use lease::{Error, ErrorKind};

use crate::lease_model::{at, store_time as wall, timing};
pub use crate::lease_model::{check, deep};
use crate::queue_model::Fixed;

/// The session's id (32 hex digits).
const SID: &str = "5e55105e55105e55105e55105e55105e";
/// The locks, one grant of the owner's on each.
const LOCKS: [&str; 2] = ["a", "b"];

fn version(generation: u64) -> Version {
    Version {
        etag: format!("s{generation}"),
        generation: Some(generation),
    }
}

/// The session object in the store.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stored {
    record: Record,
    generation: u64,
    /// The store's clock when it was written (whole seconds).
    written_at: u32,
}

/// A session write of the owner's on the network.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Flight {
    record: Record,
    cond: Cond,
    sent: u32,
    /// The generation it landed at, once applied; `Some(None)`: applied and refused.
    applied: Option<Option<u64>>,
    /// The session's release (not a renewal).
    release: bool,
}

/// One grant of the owner's, on `LOCKS[i]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Grant {
    Idle,
    /// Attached (its number `n`), not joined yet.
    Attached(u64),
    /// Its join landed: the lock lists it.
    Held(u64),
    /// Released; its leave not known done.
    Leaving(u64),
    Done,
    /// Its attach was refused (the session is released or being released): it opened another
    /// session, outside the model.
    Elsewhere,
}

/// A checker of one lock: the number it saw listed by its last read of the lock's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Checker {
    Idle,
    Saw(u64),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The time: the owner's clock and the store's (no drift here: `lease_model` checks it).
    t: u32,
    owner: Owner,
    crashed: bool,
    session: Option<Stored>,
    generations: u64,
    flight: Option<Flight>,
    /// A write whose answer was lost: it may still land.
    orphan: Option<Flight>,
    grants: [Grant; 2],
    /// The number each lock's record lists (`None`: no grant of the owner's).
    listed: [Option<u64>; 2],
    checkers: [Checker; 2],
    /// The numbers each checker removed.
    removed: [Option<u64>; 2],
    faults: u8,
    deletions: u8,
    taken_over: bool,
    /// The owner decided to release the session (idle).
    release_decided: bool,
    /// An attach came while the release was due and not yet decided (it cancelled it).
    cancelled_release: bool,
    /// A rule broken by a transition.
    violation: Option<&'static str>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The owner does what its session's machine says is due (a write, a lapse).
    Session,
    /// The owner's write in flight lands (or is refused) in the store.
    Apply,
    /// Its answer reaches the owner.
    Answer,
    /// Its answer is lost: the owner knows nothing, and the write may land later.
    LoseAnswer,
    /// The write whose answer was lost lands now (if it can).
    ApplyOrphan,
    /// The owner attaches grant `i`, joins its lock once attached, releases it, retries its
    /// leave.
    Attach(usize),
    Join(usize),
    Release(usize),
    Leave(usize),
    /// A leave that fails (the store refused it, or no answer): retried later.
    LeaveFails(usize),
    /// A checker reads its lock's record, then (later) the session.
    ReadRecord(usize),
    ReadSession(usize),
    Tick,
    Crash,
    DeleteSession,
}

#[derive(Clone, Debug)]
pub struct SessionModel {
    /// How many ticks (seconds) time may run: 5 reach a takeover (ttl 4 s, grace 1 s).
    pub max_t: u32,
    /// The locks that have a checker (1: only the first; the second grant is then never
    /// removed, only held, released and lost).
    pub checkers: usize,
    pub max_faults: u8,
    pub crashes: bool,
    pub deletions: u8,
    /// The session's idle time in seconds (`None`: an explicit session, never released by
    /// itself).
    pub idle: Option<u32>,
}

/// The safety properties (the others say what is reached).
pub const SAFETY: &[&str] = &[
    "a grant a checker removed is not believed",
    "a lost session ends every belief",
    "a grant released alone leaves the other believed",
    "no grant is attached to a session whose release was decided",
];

/// The bounded model of `./scripts/test`.
pub fn base() -> SessionModel {
    SessionModel {
        max_t: 5,
        checkers: 2,
        max_faults: 0,
        crashes: true,
        deletions: 0,
        idle: None,
    }
}

/// The per-process default session: released after one ttl (4 s) idle, two grants on two
/// locks, each lock with a checker, the process may crash, a reliable network; time runs long
/// enough (6 s) for the release to be decided, sent and landed with a grant still to attach.
pub fn idle() -> SessionModel {
    SessionModel {
        max_t: 6,
        idle: Some(4),
        ..base()
    }
}

impl SessionModel {
    fn timing(&self) -> Timing {
        timing(Duration::from_secs(1))
    }

    fn believes(&self, s: &State, n: u64) -> bool {
        s.owner.believes(n, at(s.t))
    }

    /// The session object as a checker reads it.
    fn read(&self, s: &State) -> Get {
        match &s.session {
            None => Get::NotFound { server_now: None },
            Some(stored) => {
                let bytes = stored.record.to_bytes();
                Get::Found(Object {
                    size: bytes.len() as u64,
                    bytes: Some(bytes),
                    version: version(stored.generation),
                    last_modified: Some(wall(stored.written_at)),
                    server_now: Some(wall(s.t)),
                    meta: Default::default(),
                })
            }
        }
    }

    /// Apply `f` to the store: it lands if its condition holds.
    fn apply(&self, s: &mut State, f: &Flight) -> Option<u64> {
        let holds = match (&f.cond, &s.session) {
            (Cond::Match(v), Some(stored)) => *v == version(stored.generation),
            (Cond::Create, None) => true,
            _ => false,
        };
        if !holds {
            return None;
        }
        s.generations += 1;
        s.session = Some(Stored {
            record: f.record.clone(),
            generation: s.generations,
            written_at: s.t,
        });
        Some(s.generations)
    }

    fn deliver(&self, s: &mut State, f: Flight) {
        let applied = match f.applied {
            Some(applied) => applied,
            None => self.apply(s, &f),
        };
        let outcome = match applied {
            Some(g) => Ok(Written::Landed {
                version: version(g),
                t_send: at(f.sent),
            }),
            None => Ok(Written::Rejected {
                current: self.read(s),
            }),
        };
        self.wrote(s, &f, outcome);
    }

    fn wrote(&self, s: &mut State, f: &Flight, outcome: Result<Written, Error>) {
        let record = f.record.clone();
        if f.release {
            // The session's release: nothing is attached (or the rule was broken, which the
            // properties find); the driver deletes it after (abstracted: a released record is
            // what a checker reads until then, rule 2).
            after_write(s.owner.hold_mut(), Wrote::Release, record, outcome, at(s.t));
            return;
        }
        match s.owner.wrote(record, outcome, at(s.t)) {
            Outcome::Renewed { .. } | Outcome::Retry(_) => {}
            Outcome::Lost(lost) => self.lost(s, &lost.grants),
        }
    }

    /// The session is lost: every grant it named ends (its leave, if any, is not sent: the
    /// session's loss proves it gone).
    fn lost(&self, s: &mut State, grants: &[u64]) {
        for g in s.grants.iter_mut() {
            match *g {
                Grant::Attached(n) | Grant::Held(n) if grants.contains(&n) => *g = Grant::Done,
                // Released already: its pending leave is dropped with the session.
                Grant::Leaving(_) => *g = Grant::Done,
                _ => {}
            }
        }
    }

    /// What a checker that saw `n` listed concludes from the session it reads now.
    fn gone(&self, s: &State, n: u64) -> bool {
        let Some(stored) = &s.session else {
            // Absent: rule 3 waits the ttl + grace from when it saw it absent; abstracted as
            // never (a deleted session is judged by the lease rules, `lease_model`).
            return false;
        };
        if stored.record.state == RecordState::Released {
            return true; // rule 2
        }
        match attachment(stored.record.attached.as_deref(), n) {
            Attachment::Detached => true, // rule 4
            Attachment::Attached | Attachment::Unknown => false,
        }
    }

    /// Rules 1 and 3: the session was not renewed for its ttl plus the grace on the store's
    /// clock.
    fn expired(&self, s: &State) -> bool {
        let timing = self.timing();
        s.session.as_ref().is_some_and(|stored| {
            let ttl = stored.record.ttl();
            stored.record.state == RecordState::Held
                && u64::from(s.t)
                    >= u64::from(stored.written_at) + (ttl + timing.grace_for(ttl)).as_secs()
        })
    }
}

impl Model for SessionModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let record = opening_record(
            SID,
            Holder::default(),
            self.timing().ttl,
            None,
            "open".into(),
        );
        let hold = Hold::new(
            "model://.lease-sessions/s",
            record.clone(),
            version(1),
            at(0),
            self.timing(),
        );
        vec![State {
            t: 0,
            owner: Owner::new(
                SID,
                hold,
                self.idle.map(|t| Duration::from_secs(t.into())),
                at(0),
            ),
            crashed: false,
            session: Some(Stored {
                record,
                generation: 1,
                written_at: 0,
            }),
            generations: 1,
            flight: None,
            orphan: None,
            grants: [Grant::Idle; 2],
            listed: [None; 2],
            checkers: [Checker::Idle; 2],
            removed: [None; 2],
            faults: 0,
            deletions: 0,
            taken_over: false,
            release_decided: false,
            cancelled_release: false,
            violation: None,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let now = at(s.t);
        if !s.crashed {
            match s.owner.due(now) {
                Due::Write | Due::Release if s.flight.is_none() => actions.push(Action::Session),
                Due::Lapsed => actions.push(Action::Session),
                _ => {}
            }
            for i in 0..2 {
                match s.grants[i] {
                    // With an idle release, an attach may come at any moment (refused or not).
                    Grant::Idle if self.idle.is_some() || s.owner.alive(now) => {
                        actions.push(Action::Attach(i))
                    }
                    Grant::Attached(n) if s.owner.may_join(n, now) => actions.push(Action::Join(i)),
                    Grant::Held(_) => actions.push(Action::Release(i)),
                    Grant::Leaving(_) => {
                        actions.push(Action::Leave(i));
                        if s.faults < self.max_faults {
                            actions.push(Action::LeaveFails(i));
                        }
                    }
                    _ => {}
                }
            }
            if self.crashes {
                actions.push(Action::Crash);
            }
        }
        if let Some(f) = &s.flight {
            if f.applied.is_none() {
                actions.push(Action::Apply);
            }
            if !s.crashed {
                actions.push(Action::Answer);
            }
            if s.faults < self.max_faults && s.orphan.is_none() {
                actions.push(Action::LoseAnswer);
            }
        }
        if s.orphan.as_ref().is_some_and(|o| o.applied.is_none()) {
            actions.push(Action::ApplyOrphan);
        }
        for i in 0..self.checkers {
            match s.checkers[i] {
                Checker::Idle if s.listed[i].is_some() => actions.push(Action::ReadRecord(i)),
                Checker::Saw(_) => actions.push(Action::ReadSession(i)),
                _ => {}
            }
        }
        if s.t < self.max_t {
            actions.push(Action::Tick);
        }
        if s.deletions < self.deletions && s.session.is_some() {
            actions.push(Action::DeleteSession);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let now = at(s.t);
        match action {
            Action::Session => match s.owner.due(now) {
                Due::Lapsed => {
                    if let Some(lost) = s.owner.expire(now) {
                        self.lost(&mut s, &lost.grants);
                    }
                }
                // The release: first decided (an attach may come next), then sent.
                Due::Release if !s.owner.is_releasing() => {
                    if !s.owner.decide_release(now) {
                        return None;
                    }
                    s.release_decided = true;
                }
                Due::Release => {
                    let ReleaseStart::Send(record, cond) =
                        begin_release(s.owner.hold_mut(), now, wall(s.t), &Fixed)
                    else {
                        return None;
                    };
                    s.flight = Some(Flight {
                        record,
                        cond,
                        sent: s.t,
                        applied: None,
                        release: true,
                    });
                }
                _ => {
                    let (record, cond) = s.owner.next_write(now, wall(s.t), &Fixed)?;
                    s.flight = Some(Flight {
                        record,
                        cond,
                        sent: s.t,
                        applied: None,
                        release: false,
                    });
                }
            },
            Action::Apply => {
                let mut f = s.flight.take()?;
                f.applied = Some(self.apply(&mut s, &f));
                s.flight = Some(f);
            }
            Action::Answer => {
                let f = s.flight.take()?;
                self.deliver(&mut s, f);
            }
            Action::LoseAnswer => {
                let f = s.flight.take()?;
                s.faults += 1;
                s.orphan = Some(f.clone());
                self.wrote(
                    &mut s,
                    &f,
                    Err(Error::new(ErrorKind::Unavailable, "the answer was lost")),
                );
            }
            Action::ApplyOrphan => {
                let mut f = s.orphan.take()?;
                f.applied = Some(self.apply(&mut s, &f));
                s.orphan = Some(f);
            }
            Action::Attach(i) => match s.owner.attach(LOCKS[i], now) {
                Ok(n) => {
                    if !s.release_decided && last.owner.due(now) == Due::Release {
                        s.cancelled_release = true;
                    }
                    s.grants[i] = Grant::Attached(n);
                }
                // Refused (released, or being released): it opens another session.
                Err(_) if self.idle.is_some() => s.grants[i] = Grant::Elsewhere,
                Err(_) => return None,
            },
            Action::Join(i) => {
                let Grant::Attached(n) = s.grants[i] else {
                    return None;
                };
                s.listed[i] = Some(n);
                s.grants[i] = Grant::Held(n);
            }
            Action::Release(i) => {
                let Grant::Held(n) = s.grants[i] else {
                    return None;
                };
                let other = match s.grants[1 - i] {
                    Grant::Held(m) => Some(m),
                    _ => None,
                };
                let before = other.is_some_and(|m| self.believes(&s, m));
                s.owner.release(n, true, now);
                if before && !other.is_some_and(|m| self.believes(&s, m)) {
                    s.violation = Some("a grant released alone leaves the other believed");
                }
                s.grants[i] = Grant::Leaving(n);
            }
            Action::Leave(i) => {
                let Grant::Leaving(n) = s.grants[i] else {
                    return None;
                };
                if s.listed[i] == Some(n) {
                    s.listed[i] = None;
                }
                s.owner.left(n, true, now);
                s.grants[i] = Grant::Done;
            }
            Action::LeaveFails(i) => {
                let Grant::Leaving(n) = s.grants[i] else {
                    return None;
                };
                s.faults += 1;
                s.owner.left(n, false, now);
            }
            Action::ReadRecord(i) => {
                s.checkers[i] = Checker::Saw(s.listed[i]?);
            }
            Action::ReadSession(i) => {
                let Checker::Saw(n) = s.checkers[i] else {
                    return None;
                };
                s.checkers[i] = Checker::Idle;
                let remove = if self.expired(&s) {
                    // Rule 1: take the session over (released in the checker's name).
                    let stored = s.session.as_mut()?;
                    let mut next = stored.record.successor();
                    next.state = RecordState::Released;
                    next.holder = Holder {
                        id: "checker".into(),
                        ..Holder::default()
                    };
                    s.generations += 1;
                    stored.record = next;
                    stored.generation = s.generations;
                    stored.written_at = s.t;
                    s.taken_over = true;
                    true
                } else {
                    self.gone(&s, n)
                };
                if remove && s.listed[i] == Some(n) {
                    s.listed[i] = None;
                    s.removed[i] = Some(n);
                }
            }
            Action::Tick => s.t += 1,
            Action::Crash => {
                s.crashed = true;
                for g in s.grants.iter_mut() {
                    *g = Grant::Done;
                }
            }
            Action::DeleteSession => {
                s.deletions += 1;
                s.session = None;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(
                "a grant a checker removed is not believed",
                |m: &Self, s: &State| {
                    s.crashed || s.removed.iter().flatten().all(|n| !m.believes(s, *n))
                },
            ),
            Property::always("a lost session ends every belief", |m: &Self, s: &State| {
                !matches!(s.owner.hold().phase, HoldPhase::Lost(_))
                    || (1..=2).all(|n| !m.believes(s, n))
            }),
            Property::always(
                "a grant released alone leaves the other believed",
                |_: &Self, s: &State| s.violation.is_none(),
            ),
            // A number handed out after the release was decided is in a session whose next
            // write is its release: its join could never be sent, and the request would fail
            // instead of opening another session.
            Property::always(
                "no grant is attached to a session whose release was decided",
                |_: &Self, s: &State| {
                    !s.release_decided
                        || !s
                            .grants
                            .iter()
                            .any(|g| matches!(g, Grant::Attached(_) | Grant::Held(_)))
                },
            ),
            Property::sometimes("both grants held at once", |m: &Self, s: &State| {
                s.grants
                    .iter()
                    .all(|g| matches!(*g, Grant::Held(n) if m.believes(s, n)))
            }),
            Property::sometimes("a grant removed by rule 4", |_: &Self, s: &State| {
                !s.taken_over && s.removed.iter().any(Option::is_some)
            }),
            Property::sometimes("a session taken over", |_: &Self, s: &State| s.taken_over),
            Property::sometimes("a session lost", |_: &Self, s: &State| {
                matches!(s.owner.hold().phase, HoldPhase::Lost(_))
            }),
        ];
        if self.idle.is_some() {
            properties.extend([
                Property::sometimes("a session released idle", |_: &Self, s: &State| {
                    s.release_decided
                        && s.session
                            .as_ref()
                            .is_some_and(|st| st.record.state == RecordState::Released)
                        && !s.taken_over
                }),
                Property::sometimes(
                    "an attach between the decision and the release write refused",
                    |_: &Self, s: &State| {
                        s.release_decided
                            && s.owner.hold().phase == HoldPhase::Held
                            && s.grants.contains(&Grant::Elsewhere)
                    },
                ),
                Property::sometimes(
                    "an attach after the idle release landed refused",
                    |_: &Self, s: &State| {
                        s.owner.hold().phase == HoldPhase::Released
                            && s.grants.contains(&Grant::Elsewhere)
                            && s.grants
                                .iter()
                                .all(|g| matches!(g, Grant::Elsewhere | Grant::Done))
                    },
                ),
                Property::sometimes(
                    "an attach that came before the decision cancelled the release, then held",
                    |m: &Self, s: &State| {
                        s.cancelled_release
                            && s.grants
                                .iter()
                                .any(|g| matches!(*g, Grant::Held(n) if m.believes(s, n)))
                    },
                ),
            ]);
        }
        properties
    }
}
