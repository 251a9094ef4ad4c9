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

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use stateright::{Model, Property};

use lease::clock::Instant;
use lease::protocol::fence::{user_bytes, Expect, FenceEvent, FenceOp, FenceStep};
use lease::protocol::Entropy;
use lease::store::{Cond, Meta, Object, Put, Version};
use lease::{Error, ErrorKind, FencingToken};

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

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Flight {
    Sent(Req),
    Delayed(Req),
    Answered(Req, Answer),
    Lost(Req),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)] // model states are cloned whole anyway
pub enum Phase {
    /// About to read (with this many updates and conflicts left).
    Idle,
    Reading(Flight),
    Writing(FenceOp, Flight, String),
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
    /// Nonces of the writes that landed, with their epochs, in landing order.
    landed: Vec<(String, u64)>,
    bad: Option<String>,
    acknowledged: u8,
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
}

pub const URL: &str = "model://lock";

pub(crate) fn epoch_of(w: usize) -> u64 {
    w as u64 + 1
}

pub(crate) fn token(w: usize) -> FencingToken {
    FencingToken::new(URL, epoch_of(w)).with_holder(format!("holder{w}"))
}

impl FenceModel {
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
                let epoch: u64 = meta["lease-epoch"].parse().unwrap();
                let nonce = meta["lease-write"].clone();
                if s.landed.iter().any(|(_, e)| *e > epoch) {
                    s.bad = Some(format!("epoch {epoch} landed after a higher epoch"));
                }
                // Every write appends one id to what its writer read: it must extend what is
                // there, or an update was lost.
                let new = user_bytes(bytes.clone(), meta);
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
                let stored = Stored {
                    generation: s.generations,
                    bytes: bytes.clone(),
                    meta: meta.clone(),
                };
                let version = self.version(&stored);
                s.store = Some(stored);
                s.landed.push((nonce, epoch));
                Answer::Put(Put::Written {
                    version,
                    server_now: None,
                })
            }
        }
    }

    fn flight(&self, s: &State, w: usize) -> Option<Flight> {
        match &s.writers[w].phase {
            Phase::Reading(f) | Phase::Writing(_, f, _) => Some(f.clone()),
            _ => None,
        }
    }

    fn set_flight(&self, s: &mut State, w: usize, f: Flight) {
        match &mut s.writers[w].phase {
            Phase::Reading(x) | Phase::Writing(_, x, _) => *x = f,
            _ => unreachable!(),
        }
    }

    fn req(f: &Flight) -> Req {
        match f {
            Flight::Sent(r) | Flight::Delayed(r) | Flight::Answered(r, _) | Flight::Lost(r) => {
                r.clone()
            }
        }
    }

    /// Deliver an answer to writer `w` and run its machine to the next request.
    fn answer(&self, s: &mut State, w: usize, answer: Answer) {
        let unavailable = || Error::unavailable("the model's network failed");
        match s.writers[w].phase.clone() {
            Phase::Reading(_) => {
                let current = match answer {
                    Answer::Object(o) => o,
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
                    token(w),
                    nonce.clone(),
                    payload,
                    expect,
                    None,
                    self.writers_see_unique_versions,
                );
                self.run(s, w, op, FenceEvent::Start, nonce);
            }
            Phase::Writing(op, flight, nonce) => {
                let event = match (Self::req(&flight), answer) {
                    (_, Answer::Object(o)) => FenceEvent::Read(Ok(o)),
                    (_, Answer::Put(p)) => FenceEvent::Put(Ok(p)),
                    (Req::Put { .. }, Answer::Unavailable) => FenceEvent::Put(Err(unavailable())),
                    (_, Answer::Unavailable) => FenceEvent::Read(Err(unavailable())),
                };
                self.run(s, w, op, event, nonce);
            }
            _ => unreachable!(),
        }
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
                2
            ],
            orphans: vec![],
            faults: 0,
            landed: vec![],
            bad: None,
            acknowledged: 0,
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
            Action::Start(w) => s.writers[w].phase = Phase::Reading(Flight::Sent(Req::Get)),
            Action::Deliver(w) => {
                let req = Self::req(&self.flight(&s, w)?);
                let answer = self.apply(&mut s, &req);
                self.answer(&mut s, w, answer);
            }
            Action::Delay(w) => {
                s.faults += 1;
                let req = Self::req(&self.flight(&s, w)?);
                self.set_flight(&mut s, w, Flight::Delayed(req));
            }
            Action::DelayAnswer(w) => {
                s.faults += 1;
                let req = Self::req(&self.flight(&s, w)?);
                let answer = self.apply(&mut s, &req);
                self.set_flight(&mut s, w, Flight::Answered(req, answer));
            }
            Action::LoseReply(w) => {
                s.faults += 1;
                let req = Self::req(&self.flight(&s, w)?);
                self.apply(&mut s, &req);
                self.set_flight(&mut s, w, Flight::Lost(req));
            }
            Action::Fail(w) => {
                s.faults += 1;
                self.answer(&mut s, w, Answer::Unavailable);
            }
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
            Property::sometimes("both writers' updates land", |_, s: &State| {
                let epochs: std::collections::BTreeSet<u64> =
                    s.landed.iter().map(|(_, e)| *e).collect();
                epochs.len() == 2
            }),
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
    }
}

pub fn run(m: FenceModel, what: &str) -> stateright::CheckerBuilder<FenceModel> {
    eprintln!("{what}: {m:?}");
    m.checker()
}
