//! Model checking of queued locks (docs/protocol.md §10) with stateright, using the protocol's
//! own pure code (`lease::protocol::queue`): every record the model's participants write is
//! `QueueRecord::apply` of their change to the record they read, serialized with `to_bytes` and
//! read back with `parse`; where a participant stands is `QueueRecord::position`. Only the
//! driver's loops around them (read, apply, write conditionally, re-read on a failed condition
//! or an unknown outcome) are the model's, as docs/protocol.md §10 describes them.
//!
//! The model (docs/model.md, "Queued locks"): a few participants, each with one request (a mode
//! and a scope), share one lock record in a store that applies conditional writes atomically.
//! Each participant's *session* (an ordinary lease, model-checked by `lease_model`) is
//! abstracted to `Alive`, `Lapsed` (its lease expired: it can never believe again in this
//! acquisition) or `Crashed` (it stops for good). The network may hold a request up and apply
//! it later, apply it and lose or hold up its answer, or fail it without applying it; a request
//! whose sender gave up may still land. Checked: no two participants that believe at one
//! instant hold conflicting grants, and at most `permits` cover any point; every believer is
//! listed among the record's grants with its token; grants follow the order in which competing
//! joins landed; tokens strictly increase; and, in a fault-free variant where holders release,
//! crash or lapse, every participant whose session stays alive is served.
//!
//! `cargo test --release -p lease-verify --test queue_model` runs the bounded checks;
//! `LEASE_MODEL=deep` explores a larger bound (docs/verification.md has the figures).

use bytes::Bytes;
use stateright::{Model, Property};

use lease::protocol::queue::{Change, Entry, Mode, Position, QueueRecord, Scope};
use lease::record::Holder;
use lease::store::{Cond, Get, Object, Put, Version};

pub use crate::lease_model::{check, deep};
use crate::network::{inject, Answer, Fault, Flight, Net, Req};

// ---------------------------------------------------------------------------------------------
// The state.

/// The lock's record as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stored {
    generation: u64,
    bytes: Bytes,
}

/// A participant's session lease, abstracted (`lease_model` checks the lease itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Session {
    Alive,
    /// Its lease expired (paused, partitioned): it stopped believing at once and never will
    /// again in this acquisition, although it may still act, and still be listed.
    Lapsed,
    /// It stopped for good; its requests in flight may still land.
    Crashed,
}

/// Where a participant is. Each waits for at most one request at a time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// Joining the queue: the read / apply / conditional write loop of `Change::Join`.
    Joining(Flight),
    /// Listed and waiting: the record's generation it last read, and the grants that keep it
    /// waiting there (`Position::Waiting`'s blockers, by id; empty unless it is at the head of
    /// its line).
    Waiting {
        seen: u64,
        blockers: Vec<String>,
    },
    /// Re-reading the record (a poll), from `Waiting`.
    Polling {
        seen: u64,
        blockers: Vec<String>,
        flight: Flight,
    },
    /// Removing a participant proven gone (`Change::Leave` of its id), from `Waiting`.
    Removing {
        id: String,
        flight: Flight,
    },
    /// Granted (it read its grant): it believes while its session is alive.
    Holding {
        token: u64,
    },
    /// Leaving after holding (`Change::Leave` of its own id); it stopped believing first.
    Releasing {
        token: u64,
        flight: Flight,
    },
    /// This acquisition is over: released, or found removed.
    Done,
    Crashed,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Participant {
    phase: Phase,
    session: Session,
    acquisitions: u8,
    /// Granted while its session was alive, in some acquisition.
    served: bool,
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
    /// A participant whose session is alive found itself removed from the record.
    LiveRemoved,
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
    /// Participants' ids in the order their joins landed.
    landed: Vec<String>,
    /// The highest token granted so far.
    max_token: u64,
    /// Some participant was removed by another (it was proven gone).
    removed: bool,
    violation: Option<Violation>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The participant starts an acquisition: it joins.
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
    /// A waiter re-reads the record (only once it changed: an unchanged poll changes nothing).
    Poll(usize),
    /// A waiter removes the grant `id` that keeps it waiting, once its session cannot believe.
    Remove(usize, String),
    /// A holder stops believing, then leaves.
    Release(usize),
    /// The participant's session lease expires.
    Lapse(usize),
    Crash(usize),
}

/// The model's participants, bounds and switches.
#[derive(Clone, Debug)]
pub struct QueueModel {
    /// Each participant's request, in participant order.
    pub requests: Vec<(Mode, Scope)>,
    pub permits: Option<u32>,
    pub acquisitions: u8,
    /// Network faults (a request or answer held up, an answer lost, a request failed).
    pub max_faults: u8,
    /// Sessions that lapse or crash, in all.
    pub max_deaths: u8,
    pub lapses: bool,
    pub crashes: bool,
    /// Negative control: a waiter may remove a blocking grant whose session is alive.
    pub evict_live: bool,
    /// Negative control: a holder goes on believing until its leave's answer comes back.
    pub believe_while_leaving: bool,
    /// Negative control of a driver rule: a participant whose session lapsed still writes its
    /// join. The rule: a join's outcome may be unknown, and by the time the participant reads
    /// again it may have been granted, proven gone and removed; found absent, it would join
    /// again, as a new arrival, though it can never believe. So it gives up instead.
    pub rejoin_when_lapsed: bool,
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
        permits: None,
        acquisitions: 1,
        max_faults: 0,
        max_deaths: 0,
        lapses: false,
        crashes: false,
        evict_live: false,
        believe_while_leaving: false,
        rejoin_when_lapsed: false,
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

// ---------------------------------------------------------------------------------------------
// The store.

fn version(generation: u64) -> Version {
    Version {
        etag: format!("g{generation}"),
        generation: Some(generation),
    }
}

fn generation_of(v: &Version) -> u64 {
    v.generation.expect("the model's versions have generations")
}

fn record_of(bytes: &[u8]) -> QueueRecord {
    QueueRecord::parse(bytes)
        .expect("the lock's record is a queued lock's record")
        .expect("the lock's record parses")
}

/// Apply `req` to the store atomically; a write that lands is also judged: the joins it makes
/// land, and the grants it makes (FIFO, tokens).
fn apply(s: &mut State, req: &Req) -> Answer {
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
            let old = s.store.as_ref().map(|o| record_of(&o.bytes));
            judge(s, old.as_ref(), &record_of(bytes));
            s.generations += 1;
            s.store = Some(Stored {
                generation: s.generations,
                bytes: bytes.clone(),
            });
            Answer::Put(Put::Written {
                version: version(s.generations),
                server_now: None,
            })
        }
    }
}

/// Note what a landing write changes: who joined (arrival order), who was granted (their
/// tokens, and whether an earlier competing arrival still waits).
fn judge(s: &mut State, old: Option<&QueueRecord>, new: &QueueRecord) {
    let listed = |id: &str| old.is_some_and(|o| o.find(id).is_some());
    let granted = |id: &str| old.is_some_and(|o| o.grants.iter().any(|g| g.id() == id));
    for e in new.grants.iter().chain(&new.queue) {
        if !listed(e.id()) {
            if s.landed.iter().any(|l| l == e.id()) {
                s.violation.get_or_insert(Violation::JoinedTwice);
            }
            s.landed.push(e.id().to_string());
        }
    }
    let arrival = |id: &str| s.landed.iter().position(|l| l == id);
    for g in new.grants.iter().filter(|g| !granted(g.id())) {
        let token = g.token.expect("a grant has a token");
        let overtakes = new
            .queue
            .iter()
            .any(|w| arrival(w.id()) < arrival(g.id()) && new.competes(w, g));
        if overtakes {
            s.violation.get_or_insert(Violation::Overtaken);
        }
        if token <= s.max_token {
            s.violation.get_or_insert(Violation::TokenNotAbove);
        }
        s.max_token = s.max_token.max(token);
    }
}

// ---------------------------------------------------------------------------------------------
// The participants: the driver's loops around the record's pure code.

/// What a change loop does next.
enum Next {
    Send(Req),
    /// The change is in the record (or nothing to change): the record last read or written,
    /// `None` when there is none, and its generation.
    Done(Option<QueueRecord>, u64),
}

fn read() -> Req {
    Req::Get {
        if_none_match: None,
    }
}

impl QueueModel {
    /// Participant `c`'s id in its current acquisition (a session per acquisition).
    fn id(&self, s: &State, c: usize) -> String {
        format!("p{c}.{}", s.participants[c].acquisitions)
    }

    fn entry(&self, s: &State, c: usize) -> Entry {
        let (mode, scope) = self.requests[c].clone();
        Entry {
            holder: Holder {
                id: self.id(s, c),
                ..Holder::default()
            },
            mode,
            scope,
            ttl_ms: 4000,
            token: None,
            since: None,
            data: None,
        }
    }

    /// Whether the session behind `id` is alive: the current acquisition's session of its
    /// participant (an earlier acquisition's session was released after it left).
    fn session_alive(&self, s: &State, id: &str) -> bool {
        (0..self.requests.len())
            .any(|c| self.id(s, c) == id && s.participants[c].session == Session::Alive)
    }

    /// Whether participant `c` believes it holds its grant now.
    pub fn believes(&self, s: &State, c: usize) -> bool {
        let p = &s.participants[c];
        p.session == Session::Alive
            && match p.phase {
                Phase::Holding { .. } => true,
                Phase::Releasing { .. } => self.believe_while_leaving,
                _ => false,
            }
    }

    fn token(&self, s: &State, c: usize) -> Option<u64> {
        match s.participants[c].phase {
            Phase::Holding { token } | Phase::Releasing { token, .. } => Some(token),
            _ => None,
        }
    }

    /// One step of the loop that puts `change` into the record: read, apply, write on the
    /// version read; on a failed condition or an unknown outcome, read again.
    fn change_step(&self, change: &Change, req: &Req, answer: Answer) -> Next {
        let write = |next: QueueRecord, cond| {
            Next::Send(Req::Put {
                bytes: next.to_bytes().expect("the record fits"),
                cond,
            })
        };
        match (req, answer) {
            (_, Answer::Unavailable | Answer::Put(Put::ConditionFailed)) => Next::Send(read()),
            (_, Answer::Get(Get::NotFound { .. })) => match change {
                Change::Join(_) => {
                    let fresh = QueueRecord::new(0, self.permits);
                    let next = fresh.apply(change).expect("a join fits").expect("it joins");
                    write(next, Cond::Create)
                }
                Change::Leave(_) => Next::Done(None, 0),
            },
            (_, Answer::Get(Get::Found(o))) => {
                let record = record_of(o.bytes.as_ref().expect("the record is small"));
                match record.apply(change).expect("a change fits") {
                    Some(next) => write(next, Cond::Match(o.version)),
                    None => Next::Done(Some(record), generation_of(&o.version)),
                }
            }
            (Req::Put { bytes, .. }, Answer::Put(Put::Written { version, .. })) => {
                Next::Done(Some(record_of(bytes)), generation_of(&version))
            }
            (req, answer) => unreachable!("{answer:?} to {req:?}"),
        }
    }

    /// Participant `c` has read (or written) `record` at `generation`: where does it stand?
    fn arrive(&self, s: &mut State, c: usize, record: Option<QueueRecord>, generation: u64) {
        let id = self.id(s, c);
        let position = record
            .as_ref()
            .map_or(Position::Absent, |r| r.position(&id));
        let alive = s.participants[c].session == Session::Alive;
        s.participants[c].phase = match position {
            Position::Granted { token } => {
                if alive {
                    s.participants[c].served = true;
                }
                Phase::Holding { token }
            }
            Position::Waiting { blockers, ahead } => {
                let _ = ahead;
                let blockers: Vec<String> = blockers.iter().map(|b| b.id().to_string()).collect();
                Phase::Waiting {
                    seen: generation,
                    blockers,
                }
            }
            Position::Absent => {
                if alive {
                    s.violation.get_or_insert(Violation::LiveRemoved);
                }
                Phase::Done
            }
        };
    }

    /// Deliver `answer` to participant `c`.
    fn answer(&self, s: &mut State, c: usize, answer: Answer) {
        let req = self.req_of(s, c).expect("an answer to a request");
        match s.participants[c].phase.clone() {
            Phase::Joining(_) => {
                let change = Change::Join(self.entry(s, c));
                let lapsed = s.participants[c].session != Session::Alive;
                match self.change_step(&change, &req, answer) {
                    Next::Send(Req::Put { .. }) if lapsed && !self.rejoin_when_lapsed => {
                        s.participants[c].phase = Phase::Done;
                    }
                    Next::Send(r) => s.participants[c].phase = Phase::Joining(Flight::Sent(r)),
                    Next::Done(record, g) => self.arrive(s, c, record, g),
                }
            }
            Phase::Removing { id, .. } => {
                let change = Change::Leave(id.clone());
                match self.change_step(&change, &req, answer.clone()) {
                    Next::Send(r) => {
                        s.participants[c].phase = Phase::Removing {
                            id,
                            flight: Flight::Sent(r),
                        }
                    }
                    Next::Done(record, g) => {
                        if matches!(answer, Answer::Put(Put::Written { .. })) {
                            s.removed = true;
                        }
                        self.arrive(s, c, record, g)
                    }
                }
            }
            Phase::Releasing { token, .. } => {
                let change = Change::Leave(self.id(s, c));
                s.participants[c].phase = match self.change_step(&change, &req, answer) {
                    Next::Send(r) => Phase::Releasing {
                        token,
                        flight: Flight::Sent(r),
                    },
                    Next::Done(..) => {
                        if s.participants[c].acquisitions < self.acquisitions {
                            Phase::Idle
                        } else {
                            Phase::Done
                        }
                    }
                };
            }
            Phase::Polling { seen, blockers, .. } => match answer {
                Answer::Get(Get::Found(o)) => {
                    let record = record_of(o.bytes.as_ref().expect("the record is small"));
                    self.arrive(s, c, Some(record), generation_of(&o.version));
                }
                Answer::Get(Get::NotFound { .. }) => self.arrive(s, c, None, 0),
                Answer::Get(Get::NotModified { .. }) | Answer::Unavailable => {
                    s.participants[c].phase = Phase::Waiting { seen, blockers };
                }
                Answer::Put(_) | Answer::Stamp(_) => unreachable!("a poll reads"),
            },
            other => unreachable!("an answer for a participant that sent nothing: {other:?}"),
        }
    }

    fn flight(&self, s: &State, c: usize) -> Option<Flight> {
        match &s.participants[c].phase {
            Phase::Joining(f)
            | Phase::Polling { flight: f, .. }
            | Phase::Removing { flight: f, .. }
            | Phase::Releasing { flight: f, .. } => Some(f.clone()),
            _ => None,
        }
    }

    fn set_flight(&self, s: &mut State, c: usize, new: Flight) {
        match &mut s.participants[c].phase {
            Phase::Joining(f)
            | Phase::Polling { flight: f, .. }
            | Phase::Removing { flight: f, .. }
            | Phase::Releasing { flight: f, .. } => *f = new,
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

    fn believers(&self, s: &State) -> Vec<usize> {
        (0..self.requests.len())
            .filter(|&c| self.believes(s, c))
            .collect()
    }

    /// No two believers hold grants that conflict (overlapping scopes, either exclusive).
    fn mutually_exclusive(&self, s: &State) -> bool {
        let believers = self.believers(s);
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
        let believers = self.believers(s);
        self.probe_points().iter().all(|point| {
            let covering = believers
                .iter()
                .filter(|&&c| self.requests[c].1.overlaps(point))
                .count();
            covering <= n as usize
        })
    }

    /// Every believer is listed among the latest record's grants, with the token it holds
    /// (the safety argument's step 2, docs/protocol.md §10).
    fn believers_listed(&self, s: &State) -> bool {
        let record = s.store.as_ref().map(|o| record_of(&o.bytes));
        self.believers(s).into_iter().all(|c| {
            let id = self.id(s, c);
            record.as_ref().is_some_and(|r| {
                r.grants
                    .iter()
                    .any(|g| g.id() == id && g.token == self.token(s, c))
            })
        })
    }
}

impl Model for QueueModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            store: None,
            generations: 0,
            participants: vec![
                Participant {
                    phase: Phase::Idle,
                    session: Session::Alive,
                    acquisitions: 0,
                    served: false,
                };
                self.requests.len()
            ],
            orphans: vec![],
            faults: 0,
            deaths: 0,
            landed: vec![],
            max_token: 0,
            removed: false,
            violation: None,
        }]
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
                Phase::Idle if p.acquisitions < self.acquisitions => actions.push(Action::Start(c)),
                Phase::Waiting { seen, blockers } => {
                    if s.store.as_ref().is_some_and(|o| o.generation != *seen) {
                        actions.push(Action::Poll(c));
                    }
                    for b in blockers {
                        if self.evict_live || !self.session_alive(s, b) {
                            actions.push(Action::Remove(c, b.clone()));
                        }
                    }
                }
                Phase::Holding { .. } => actions.push(Action::Release(c)),
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
        }
        for i in 0..s.orphans.len() {
            actions.push(Action::DeliverOrphan(i));
            actions.push(Action::DropOrphan(i));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Start(c) => {
                let p = &mut s.participants[c];
                p.acquisitions += 1;
                p.session = Session::Alive;
                p.phase = Phase::Joining(Flight::Sent(read()));
            }
            Action::Deliver(c) => {
                let req = self.req_of(&s, c)?;
                let answer = apply(&mut s, &req);
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
                apply(&mut s, &req);
            }
            Action::DropOrphan(i) => {
                s.orphans.remove(i);
            }
            Action::Poll(c) => {
                let Phase::Waiting { seen, blockers } = s.participants[c].phase.clone() else {
                    return None;
                };
                s.participants[c].phase = Phase::Polling {
                    seen,
                    blockers,
                    flight: Flight::Sent(Req::Get {
                        if_none_match: Some(version(seen)),
                    }),
                };
            }
            Action::Remove(c, id) => {
                s.participants[c].phase = Phase::Removing {
                    id,
                    flight: Flight::Sent(read()),
                };
            }
            Action::Release(c) => {
                let Phase::Holding { token } = s.participants[c].phase else {
                    return None;
                };
                // It stops believing here, before its leave is sent (unless the negative
                // control says otherwise: `believes` reads the phase).
                s.participants[c].phase = Phase::Releasing {
                    token,
                    flight: Flight::Sent(read()),
                };
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
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(
                "no two believers hold conflicting grants",
                |m: &QueueModel, s: &State| m.mutually_exclusive(s),
            ),
            Property::always(
                "at most `permits` believers cover any point",
                |m: &QueueModel, s: &State| m.within_permits(s),
            ),
            Property::always(
                "every believer is listed among the grants",
                |m: &QueueModel, s: &State| m.believers_listed(s),
            ),
            Property::always(
                "grants follow the order competing joins landed in",
                |_, s: &State| s.violation != Some(Violation::Overtaken),
            ),
            Property::always("tokens strictly increase", |_, s: &State| {
                s.violation != Some(Violation::TokenNotAbove)
            }),
            Property::always("a participant joins once", |_, s: &State| {
                s.violation != Some(Violation::JoinedTwice)
            }),
            Property::always("a live participant is never removed", |_, s: &State| {
                s.violation != Some(Violation::LiveRemoved)
            }),
            Property::sometimes("someone is granted", |_, s: &State| s.max_token > 0),
            Property::sometimes("every participant is served", |_, s: &State| {
                s.participants.iter().all(|p| p.served)
            }),
        ];
        if self.requests.iter().any(|(m, _)| *m == Mode::Exclusive) {
            properties.push(Property::sometimes(
                "an exclusive request is granted",
                |m: &QueueModel, s: &State| {
                    (0..m.requests.len())
                        .any(|c| m.requests[c].0 == Mode::Exclusive && s.participants[c].served)
                },
            ));
        }
        if self.max_deaths > 0 {
            properties.push(Property::sometimes(
                "a gone participant is removed",
                |_, s: &State| s.removed,
            ));
        }
        properties
    }
}

/// The safety properties' names (the negative controls look for these).
pub const MUTUAL_EXCLUSION: &str = "no two believers hold conflicting grants";
pub const PERMITS: &str = "at most `permits` believers cover any point";
pub const FIFO: &str = "grants follow the order competing joins landed in";
pub const SERVED: &str = "every live participant is served";

/// A fault-free network where every holder eventually releases, crashes or lapses: at every
/// terminal state (nothing left to do), every participant whose session is alive was served
/// and is done. The state graph is acyclic (every write moves the generation on, a waiter
/// polls only a changed record, faults and deaths are bounded), so every run ends in one.
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

    fn faults(s: &mut State) -> &mut u8 {
        &mut s.faults
    }

    fn pending_req(&self, s: &State, c: usize) -> Option<Req> {
        QueueModel::pending_req(self, s, c)
    }

    fn set_flight(&self, s: &mut State, c: usize, f: Flight) {
        QueueModel::set_flight(self, s, c, f)
    }

    fn apply(s: &mut State, req: &Req) -> Answer {
        apply(s, req)
    }

    fn answer(&self, s: &mut State, c: usize, a: Answer) {
        QueueModel::answer(self, s, c, a)
    }
}
