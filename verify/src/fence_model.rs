//! Model checking of fenced writes with stateright, using the protocol's own fenced-write state
//! machine (`lease::protocol::fence::FenceOp`).
//!
//! Two writers — a zombie at epoch 1 and a newer holder at epoch 2 (fencing needs no lease:
//! both act as if they held it) — read-modify-write one object: each reads it, appends its id,
//! and writes conditionally on the version it read ([`Expect::Version`]), retrying on
//! `Conflict`. The network may hold requests or answers up, lose answers, fail requests, and
//! land a request after its sender stopped waiting. Checked from the store's own history: no
//! write of a lower epoch lands after a write of a higher one; no update is lost (every write
//! that lands extends what was there); no write reported `Fenced` or `Conflict` landed; every
//! acknowledged write landed. Also on a store whose versions hash the bytes (S3's ETags), where
//! fenced writes add a trailer that makes each write's bytes unique. Negative controls: plain
//! (unconditional) fenced writes lose updates; without the trailer on such a store, a zombie's
//! write lands after the newer holder's.
//!
//! **Scopes and a reader** ([`FenceModel::scoped`], issue 22): three grants of one queued lock
//! share the object — a live writer of bytes 2..4 (token 1), a zombie writer of bytes 0..2
//! (token 2, whose grant ended before the reader's began), and a reader of bytes 0..2 (token 3)
//! that fences what it reads with the protocol's own fenced-read machine
//! (`lease::protocol::fence::PinOp`). Checked: no write or fence lands after a conflicting one
//! (overlapping scopes, either exclusive) with a higher token; the reader's data (the items of
//! the writers whose scopes overlap its own) does not change after its read returned; a live
//! grant (the disjoint writer, the reader) is never refused `Fenced`. Negative controls through
//! the `mutants` feature: one token per object (`FenceIgnoresScopes`: the live disjoint writer is
//! refused), and readers that do not fence (`ReadersDoNotPin`: the zombie's write lands under
//! the reader).

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use stateright::{Model, Property};

use lease::clock::Instant;
use lease::protocol::fence::{
    user_bytes, Expect, FenceEntry, FenceEvent, FenceOp, FenceStep, PinOp, PinStep, Stamp,
};
use lease::protocol::Entropy;
use lease::store::{Cond, Meta, Object, Put, Version};
use lease::{Error, ErrorKind, FencingToken, Mode, Scope};

use crate::network::{inject, Fault, Net};

pub(crate) fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

pub struct Counter<'a>(&'a Cell<u32>, usize);

impl Entropy for Counter<'_> {
    fn nonce(&self) -> String {
        let n = self.0.get() + 1;
        self.0.set(n);
        format!("w{}n{n}", self.1)
    }
    fn jitter(&self, d: Duration, _spread: f64) -> Duration {
        d
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stored {
    generation: u64,
    bytes: Bytes,
    meta: Meta,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Req {
    /// A full read (the read of a read-modify-write).
    Get,
    /// A metadata read (the fenced write's own).
    ReadMeta,
    Put {
        bytes: Bytes,
        cond: Cond,
        meta: Meta,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    Object(Option<Object>),
    Put(Put),
    Unavailable,
}

/// Where a writer's request is: the network's, over this model's requests and answers.
pub type Flight = crate::network::Flight<Req, Answer>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)] // model states are cloned whole anyway
pub enum Phase {
    /// About to read (with this many updates and conflicts left).
    Idle,
    Reading(Flight),
    Writing(FenceOp, Flight, String),
    /// A reader's fenced read.
    Pinning(PinOp, Flight),
    Done,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Writer {
    phase: Phase,
    nonces: u32,
    updates_left: u8,
    conflicts_left: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    store: Option<Stored>,
    generations: u64,
    writers: Vec<Writer>,
    orphans: Vec<Req>,
    faults: u8,
    /// Nonces of the writes that landed (fenced reads' too), with who made them, in landing
    /// order.
    landed: Vec<(String, usize)>,
    bad: Option<String>,
    acknowledged: u8,
    /// What the reader read (its view: the items of the writers it conflicts with), once its
    /// fenced read returned.
    reader_saw: Option<String>,
    /// A write of a grant that had ended was refused `Fenced`.
    stale_refused: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Start(usize),
    Deliver(usize),
    Delay(usize),
    DelayAnswer(usize),
    LoseReply(usize),
    Fail(usize),
    Timeout(usize),
    Reply(usize),
    DeliverOrphan(usize),
    DropOrphan(usize),
}

#[derive(Clone, Debug)]
pub struct FenceModel {
    /// The store's versions hash the bytes (S3) instead of counting writes.
    pub content_versions: bool,
    /// What fenced writes believe of the store (a negative control lies about it).
    pub writers_see_unique_versions: bool,
    /// Read-modify-write conditional on the version read (else plain fenced writes).
    pub conditional: bool,
    /// Each write appends its id to what was read (else every write stores the same bytes,
    /// which is how versions that hash the bytes repeat).
    pub append: bool,
    pub max_faults: u8,
    pub updates: u8,
    /// Three grants with scopes and a reader (see the module's documentation) instead of two
    /// writers of the whole lease.
    pub scoped: bool,
}

pub const URL: &str = "model://lock";

/// The properties of the scoped model, each a part of "fenced writes keep their history".
pub const ORDER: &str = "no write lands after a conflicting one with a higher token";
pub const READER: &str = "a reader's data does not change while it holds";
pub const LIVE: &str = "a live disjoint-scope writer (or reader) is never refused";

/// One participant: its token (with its mode and scope), and whether it is live (its grant
/// holds; a zombie's ended before a conflicting later grant began).
#[derive(Clone, Debug)]
pub struct Role {
    pub token: FencingToken,
    pub live: bool,
}

impl Role {
    fn reader(&self) -> bool {
        self.token.mode() == Mode::Shared
    }

    fn entry(&self) -> FenceEntry {
        FenceEntry::of_token(&self.token)
    }
}

fn role(w: usize, epoch: u64, mode: Mode, scope: Scope, live: bool) -> Role {
    Role {
        token: FencingToken::new(URL, epoch)
            .with_holder(format!("holder{w}"))
            .with_mode(mode)
            .with_scope(scope),
        live,
    }
}

/// Who made the write a nonce names (`w{W}n{N}`).
fn writer_of(nonce: &str) -> usize {
    nonce[1..nonce.find('n').unwrap()].parse().unwrap()
}

impl FenceModel {
    /// The participants: a zombie (epoch 1) and a newer holder (epoch 2) of the whole lease;
    /// or, scoped, a live writer of bytes 2..4, a zombie writer of bytes 0..2 and a reader of
    /// bytes 0..2 granted after the zombie's grant ended.
    pub fn roles(&self) -> Vec<Role> {
        if self.scoped {
            let r = |a, b| Scope::range(a, b).unwrap();
            vec![
                role(0, 1, Mode::Exclusive, r(2, 4), true),
                role(1, 2, Mode::Exclusive, r(0, 2), false),
                role(2, 3, Mode::Shared, r(0, 2), true),
            ]
        } else {
            vec![
                role(0, 1, Mode::Exclusive, Scope::Whole, false),
                role(1, 2, Mode::Exclusive, Scope::Whole, true),
            ]
        }
    }

    /// What the reader sees of `bytes`: the items of the writers whose grants conflict with
    /// its own (items are `W.N`, comma-separated).
    fn reader_view(&self, bytes: &[u8]) -> String {
        let roles = self.roles();
        let Some(reader) = roles.iter().find(|r| r.reader()) else {
            return String::new();
        };
        String::from_utf8_lossy(bytes)
            .split(',')
            .filter(|item| {
                item.split('.')
                    .next()
                    .and_then(|w| w.parse::<usize>().ok())
                    .is_some_and(|w| roles[w].token.scope().overlaps(reader.token.scope()))
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    fn version(&self, o: &Stored) -> Version {
        if self.content_versions {
            // Like an S3 ETag: the bytes alone decide it.
            let mut h: u64 = 1469598103934665603;
            for b in o.bytes.iter() {
                h = (h ^ *b as u64).wrapping_mul(1099511628211);
            }
            Version::etag(format!("{h:016x}"))
        } else {
            Version {
                etag: format!("g{}", o.generation),
                generation: Some(o.generation),
            }
        }
    }

    fn object(&self, o: &Stored) -> Object {
        Object {
            bytes: Some(o.bytes.clone()),
            size: o.bytes.len() as u64,
            version: self.version(o),
            last_modified: None,
            server_now: None,
            meta: o.meta.clone(),
        }
    }

    fn apply(&self, s: &mut State, req: &Req) -> Answer {
        match req {
            Req::Get | Req::ReadMeta => Answer::Object(s.store.as_ref().map(|o| self.object(o))),
            Req::Put { bytes, cond, meta } => {
                let allowed = match (cond, &s.store) {
                    (Cond::Create, None) => true,
                    (Cond::Match(v), Some(o)) => *v == self.version(o),
                    _ => false,
                };
                if !allowed {
                    return Answer::Put(Put::ConditionFailed);
                }
                let nonce = meta["lease-write"].clone();
                let roles = self.roles();
                let who = writer_of(&nonce);
                let me = roles[who].entry();
                // No write or fence lands after a conflicting one with a higher token (for two
                // whole-lease writers: no lower epoch after a higher one).
                if let Some((_, w)) = s.landed.iter().find(|(_, w)| {
                    let e = roles[*w].entry();
                    e.token > me.token
                        && e.scope.overlaps(&me.scope)
                        && (e.mode == Mode::Exclusive || me.mode == Mode::Exclusive)
                }) {
                    s.bad = Some(format!(
                        "order: epoch {} landed after the conflicting epoch {}",
                        me.token, roles[*w].token
                    ));
                }
                s.landed.push((nonce, who));
                let new = user_bytes(bytes.clone(), meta);
                // The reader's data does not change while it holds.
                if let Some(saw) = &s.reader_saw {
                    let now = self.reader_view(&new);
                    if *saw != now {
                        s.bad = Some(format!(
                            "reader: its data changed while it held: it read {saw:?}, now {now:?}"
                        ));
                    }
                }
                let stored = Stored {
                    generation: s.generations + 1,
                    bytes: bytes.clone(),
                    meta: meta.clone(),
                };
                if roles[who].reader() {
                    s.generations += 1;
                    let version = self.version(&stored);
                    s.store = Some(stored);
                    return Answer::Put(Put::Written {
                        version,
                        server_now: None,
                    });
                }
                // Every write appends one id to what its writer read: it must extend what is
                // there, or an update was lost.
                let old = s
                    .store
                    .as_ref()
                    .map(|o| user_bytes(o.bytes.clone(), &o.meta))
                    .unwrap_or_default();
                let base = match new.iter().rposition(|b| *b == b',') {
                    Some(i) => new.slice(..i),
                    None => Bytes::new(),
                };
                if self.append && base != old {
                    s.bad = Some(format!(
                        "lost update: {:?} landed over {:?}",
                        String::from_utf8_lossy(&new),
                        String::from_utf8_lossy(&old)
                    ));
                }
                s.generations += 1;
                let version = self.version(&stored);
                s.store = Some(stored);
                Answer::Put(Put::Written {
                    version,
                    server_now: None,
                })
            }
        }
    }

    fn flight(&self, s: &State, w: usize) -> Option<Flight> {
        match &s.writers[w].phase {
            Phase::Reading(f) | Phase::Writing(_, f, _) | Phase::Pinning(_, f) => Some(f.clone()),
            _ => None,
        }
    }

    fn set_flight(&self, s: &mut State, w: usize, f: Flight) {
        match &mut s.writers[w].phase {
            Phase::Reading(x) | Phase::Writing(_, x, _) | Phase::Pinning(_, x) => *x = f,
            _ => unreachable!(),
        }
    }

    /// Deliver an answer to writer `w` and run its machine to the next request.
    fn answer(&self, s: &mut State, w: usize, answer: Answer) {
        let unavailable = || Error::unavailable("the model's network failed");
        match s.writers[w].phase.clone() {
            Phase::Reading(_) => {
                let current = match answer {
                    // A fenced read's marker is absent to a fenced get.
                    Answer::Object(o) => o.filter(|o| !Stamp::of(&o.meta).absent),
                    _ => {
                        // A failed read: read again.
                        s.writers[w].phase = Phase::Reading(Flight::Sent(Req::Get));
                        return;
                    }
                };
                let id = format!("{w}.{}", s.writers[w].updates_left);
                let (payload, expect) = match &current {
                    _ if !self.append => (
                        Bytes::from_static(b"same"),
                        current
                            .as_ref()
                            .map_or(Expect::Absent, |o| Expect::Version(o.version.clone())),
                    ),
                    Some(o) => {
                        let mut p = user_bytes(o.bytes.clone().unwrap(), &o.meta).to_vec();
                        p.push(b',');
                        p.extend_from_slice(id.as_bytes());
                        (Bytes::from(p), Expect::Version(o.version.clone()))
                    }
                    None => (Bytes::from(format!(",{id}")), Expect::Absent),
                };
                let expect = if self.conditional {
                    expect
                } else {
                    Expect::Any
                };
                let nonces = Cell::new(s.writers[w].nonces);
                let nonce = Counter(&nonces, w).nonce();
                s.writers[w].nonces = nonces.get();
                let op = FenceOp::new(
                    URL,
                    self.roles()[w].token.clone(),
                    nonce.clone(),
                    payload,
                    expect,
                    None,
                    self.writers_see_unique_versions,
                );
                self.run(s, w, op, FenceEvent::Start, nonce);
            }
            Phase::Writing(op, flight, nonce) => {
                let event = match (flight.req(), answer) {
                    (_, Answer::Object(o)) => FenceEvent::Read(Ok(o)),
                    (_, Answer::Put(p)) => FenceEvent::Put(Ok(p)),
                    (Req::Put { .. }, Answer::Unavailable) => FenceEvent::Put(Err(unavailable())),
                    (_, Answer::Unavailable) => FenceEvent::Read(Err(unavailable())),
                };
                self.run(s, w, op, event, nonce);
            }
            Phase::Pinning(op, flight) => {
                let event = match (flight.req(), answer) {
                    (_, Answer::Object(o)) => FenceEvent::Read(Ok(o)),
                    (_, Answer::Put(p)) => FenceEvent::Put(Ok(p)),
                    (Req::Put { .. }, Answer::Unavailable) => FenceEvent::Put(Err(unavailable())),
                    (_, Answer::Unavailable) => FenceEvent::Read(Err(unavailable())),
                };
                self.pin(s, w, op, event);
            }
            _ => unreachable!(),
        }
    }

    /// Run reader `w`'s fenced read to its next request, or to its end.
    fn pin(&self, s: &mut State, w: usize, mut op: PinOp, mut event: FenceEvent) {
        let nonces = Cell::new(s.writers[w].nonces);
        loop {
            match op.step(event, origin(), &Counter(&nonces, w)) {
                PinStep::Read => {
                    s.writers[w].phase = Phase::Pinning(op, Flight::Sent(Req::Get));
                    break;
                }
                PinStep::Put { bytes, cond, meta } => {
                    let req = Req::Put { bytes, cond, meta };
                    s.writers[w].phase = Phase::Pinning(op, Flight::Sent(req));
                    break;
                }
                PinStep::Sleep(_) => event = FenceEvent::Slept,
                PinStep::Done(Ok(obj)) => {
                    let bytes = obj
                        .filter(|o| !Stamp::of(&o.meta).absent)
                        .map(|o| user_bytes(o.bytes.unwrap(), &o.meta))
                        .unwrap_or_default();
                    s.reader_saw = Some(self.reader_view(&bytes));
                    s.writers[w].phase = Phase::Done;
                    break;
                }
                PinStep::Done(Err(e)) => {
                    s.bad = Some(format!("the reader's fenced read failed: {e}"));
                    s.writers[w].phase = Phase::Done;
                    break;
                }
            }
        }
        s.writers[w].nonces = nonces.get();
    }

    fn run(&self, s: &mut State, w: usize, mut op: FenceOp, mut event: FenceEvent, nonce: String) {
        let nonces = Cell::new(s.writers[w].nonces);
        loop {
            match op.step(event, origin(), &Counter(&nonces, w)) {
                FenceStep::ReadMeta => {
                    s.writers[w].phase = Phase::Writing(op, Flight::Sent(Req::ReadMeta), nonce);
                    break;
                }
                FenceStep::Put { bytes, cond, meta } => {
                    let req = Req::Put { bytes, cond, meta };
                    s.writers[w].phase = Phase::Writing(op, Flight::Sent(req), nonce);
                    break;
                }
                // Backoff takes no model time.
                FenceStep::Sleep(_) => event = FenceEvent::Slept,
                FenceStep::Done(outcome) => {
                    self.done(s, w, &nonce, outcome);
                    break;
                }
            }
        }
        s.writers[w].nonces = nonces.get();
    }

    fn done(&self, s: &mut State, w: usize, nonce: &str, outcome: Result<Version, Error>) {
        let landed = s.landed.iter().any(|(n, _)| n == nonce);
        if let Err(e) = &outcome {
            s.stale_refused |= e.kind() == ErrorKind::Fenced && !self.roles()[w].live;
            if e.kind() == ErrorKind::Fenced && self.roles()[w].live {
                s.bad = Some(format!(
                    "live: the live grant {} was refused: {e}",
                    self.roles()[w].token
                ));
            }
        }
        let writer = &mut s.writers[w];
        match outcome {
            Ok(_) => {
                if !landed {
                    s.bad = Some(format!("write {nonce} acknowledged but never landed"));
                }
                s.acknowledged += 1;
                writer.updates_left -= 1;
            }
            Err(e) if e.kind() == ErrorKind::Conflict && writer.conflicts_left > 0 => {
                if landed {
                    s.bad = Some(format!("write {nonce} reported Conflict but landed"));
                }
                writer.conflicts_left -= 1;
            }
            Err(e) => {
                if matches!(e.kind(), ErrorKind::Fenced | ErrorKind::Conflict) && landed {
                    s.bad = Some(format!("write {nonce} reported {} but landed", e.kind()));
                }
                writer.updates_left -= 1;
            }
        }
        writer.phase = if writer.updates_left == 0 {
            Phase::Done
        } else {
            Phase::Idle
        };
    }
}

impl Model for FenceModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            store: None,
            generations: 0,
            writers: vec![
                Writer {
                    phase: Phase::Idle,
                    nonces: 0,
                    updates_left: self.updates,
                    conflicts_left: 2,
                };
                self.roles().len()
            ],
            orphans: vec![],
            faults: 0,
            landed: vec![],
            bad: None,
            acknowledged: 0,
            reader_saw: None,
            stale_refused: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.bad.is_some() {
            return;
        }
        let faults_left = s.faults < self.max_faults;
        for w in 0..s.writers.len() {
            if s.writers[w].phase == Phase::Idle {
                actions.push(Action::Start(w));
            }
            match self.flight(s, w) {
                Some(Flight::Sent(_)) => {
                    actions.push(Action::Deliver(w));
                    if faults_left {
                        actions.extend([
                            Action::Delay(w),
                            Action::DelayAnswer(w),
                            Action::LoseReply(w),
                            Action::Fail(w),
                        ]);
                    }
                }
                Some(Flight::Delayed(_)) => {
                    actions.extend([Action::Deliver(w), Action::Timeout(w)]);
                }
                Some(Flight::Answered(..)) => {
                    actions.extend([Action::Reply(w), Action::Timeout(w)]);
                }
                Some(Flight::Lost(_)) => actions.push(Action::Timeout(w)),
                None => {}
            }
        }
        for i in 0..s.orphans.len() {
            actions.extend([Action::DeliverOrphan(i), Action::DropOrphan(i)]);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Start(w) => {
                let role = &self.roles()[w];
                if role.reader() {
                    let nonces = Cell::new(s.writers[w].nonces);
                    let nonce = Counter(&nonces, w).nonce();
                    s.writers[w].nonces = nonces.get();
                    let op = PinOp::new(
                        URL,
                        role.token.clone(),
                        nonce,
                        self.writers_see_unique_versions,
                    );
                    self.pin(&mut s, w, op, FenceEvent::Start);
                } else {
                    s.writers[w].phase = Phase::Reading(Flight::Sent(Req::Get));
                }
            }
            Action::Deliver(w) => {
                let req = self.flight(&s, w)?.req();
                let answer = self.apply(&mut s, &req);
                self.answer(&mut s, w, answer);
            }
            Action::Delay(w) => inject(self, &mut s, w, Fault::Delay)?,
            Action::DelayAnswer(w) => inject(self, &mut s, w, Fault::DelayAnswer)?,
            Action::LoseReply(w) => inject(self, &mut s, w, Fault::LoseReply)?,
            Action::Fail(w) => inject(self, &mut s, w, Fault::Fail)?,
            Action::Timeout(w) => {
                if let Some(Flight::Delayed(req)) = self.flight(&s, w) {
                    s.orphans.push(req);
                }
                self.answer(&mut s, w, Answer::Unavailable);
            }
            Action::Reply(w) => match self.flight(&s, w)? {
                Flight::Answered(_, a) => self.answer(&mut s, w, a),
                _ => return None,
            },
            Action::DeliverOrphan(i) => {
                let req = s.orphans.remove(i);
                self.apply(&mut s, &req);
            }
            Action::DropOrphan(i) => {
                s.orphans.remove(i);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("fenced writes keep their history", |_, s: &State| {
                s.bad.is_none()
            }),
            Property::always(ORDER, |_, s: &State| {
                !s.bad.as_deref().is_some_and(|b| b.starts_with("order:"))
            }),
            Property::always(READER, |_, s: &State| {
                !s.bad.as_deref().is_some_and(|b| b.starts_with("reader:"))
            }),
            Property::always(LIVE, |_, s: &State| {
                !s.bad.as_deref().is_some_and(|b| b.starts_with("live:"))
            }),
            Property::sometimes(
                "every writer's update lands",
                |m: &FenceModel, s: &State| {
                    let roles = m.roles();
                    let writers: std::collections::BTreeSet<usize> = s
                        .landed
                        .iter()
                        .map(|(_, w)| *w)
                        .filter(|w| !roles[*w].reader())
                        .collect();
                    writers.len() == roles.iter().filter(|r| !r.reader()).count()
                },
            ),
            Property::sometimes("a stale write is refused", |_, s: &State| s.stale_refused),
            Property::sometimes(
                "the reader reads what the zombie wrote",
                |m: &FenceModel, s: &State| {
                    !m.scoped || s.reader_saw.as_deref().is_some_and(|v| v.starts_with("1."))
                },
            ),
        ]
    }
}

pub fn model() -> FenceModel {
    let deep = std::env::var("LEASE_MODEL").is_ok_and(|v| v == "deep");
    FenceModel {
        content_versions: false,
        writers_see_unique_versions: true,
        conditional: true,
        append: true,
        max_faults: if deep { 3 } else { 2 },
        updates: if deep { 2 } else { 1 },
        scoped: false,
    }
}

/// The scoped model with a reader: three participants, one update each, 2 faults
/// (`LEASE_MODEL=deep`: 3 faults, two updates each).
pub fn scoped_model() -> FenceModel {
    FenceModel {
        scoped: true,
        ..model()
    }
}

pub fn run(m: FenceModel, what: &str) -> stateright::CheckerBuilder<FenceModel> {
    eprintln!("{what}: {m:?}");
    m.checker()
}

impl Net for FenceModel {
    type State = State;
    type Req = Req;
    type Answer = Answer;

    fn faults(s: &mut State) -> &mut u8 {
        &mut s.faults
    }

    fn pending_req(&self, s: &State, w: usize) -> Option<Req> {
        match self.flight(s, w) {
            Some(Flight::Sent(r)) => Some(r),
            _ => None,
        }
    }

    fn set_flight(&self, s: &mut State, w: usize, f: Flight) {
        FenceModel::set_flight(self, s, w, f)
    }

    fn apply(&self, s: &mut State, _w: usize, req: &Req) -> Answer {
        FenceModel::apply(self, s, req)
    }

    fn answer(&self, s: &mut State, w: usize, a: Answer) {
        FenceModel::answer(self, s, w, a)
    }

    fn unavailable() -> Answer {
        Answer::Unavailable
    }
}
