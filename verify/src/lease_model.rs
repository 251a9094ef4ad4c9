//! Model checking of the exclusive-lease protocol with stateright, using the protocol's own
//! state machines (`lease::protocol`): the very code the drivers run, not a re-implementation.
//!
//! The model (docs/model.md): two clients and an operator share one lease record in a store
//! that applies conditional writes atomically. Each client is a [`Acquirer`] while acquiring and
//! a [`Hold`] (renewing with [`WriteOp`]) while holding. Time is discrete (1 tick = 1 s) and
//! global; each client reads its own clock, which may fall one tick behind once (bounded rate
//! drift). The network may delay a request past the client's timeout and apply it later (a
//! late-landing write), apply a request and lose its reply, or answer `Unavailable` without
//! applying. Any client may crash at any time (its requests in flight may still land), and the
//! operator may break the lease. Checked: at most one client believes it holds the lease at any
//! instant (by its own clock, given the grace covers the drift); epochs strictly increase; a
//! takeover does happen (so the check is not vacuous); and, in a fault-free variant, a crashed
//! holder is replaced within the documented bound. A holder may also change its ttl while it
//! holds (`ttl_change`), to a shorter or a longer one.
//!
//! `cargo test --release -p lease-verify` runs the bounded checks; `LEASE_MODEL=deep` explores
//! a larger bound (docs/verification.md has the figures).

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use stateright::{Checker, Model, Property};

use lease::clock::Instant;
use lease::options::{LeaseOptions, Preempt, Timing};
use lease::protocol::acquire::{Acquirer, Event, Plan, Step};
use lease::protocol::breaking::{self, BreakMode, BreakPlan};
use lease::protocol::dead_holder::{Probe, Proc};
use lease::protocol::hold::{
    self, after_write, begin_release, Hold, LostReason, Next, ReleaseStart, Wrote,
};
use lease::protocol::lease_yield::{LeaseYield, YieldWatch};
use lease::protocol::view::View;
use lease::protocol::write::{WriteEvent, WriteOp, WriteStep};
use lease::protocol::{Backoff, Entropy};
use lease::record::{Holder, HolderProcess, Record, RecordState};
use lease::store::{Capabilities, Cond, Get, Object, Put, Version};
use lease::Error;

use crate::network::{inject, Fault, Net};
pub use crate::network::{Answer, Flight, Req};

// ---------------------------------------------------------------------------------------------
// Time and randomness of the model.

/// The model's instants: one fixed origin plus whole ticks (seconds).
pub(crate) fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

pub(crate) fn at(ticks: u32) -> Instant {
    origin() + Duration::from_secs(ticks as u64)
}

/// The store's clock: whole seconds (an S3-like store; resolution 1 s).
pub(crate) fn store_time(ticks: u32) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + ticks as u64)
}

/// Deterministic randomness: nonces count up per client; no jitter.
pub(crate) struct Counter<'a>(&'a Cell<u32>, usize);

impl Entropy for Counter<'_> {
    fn nonce(&self) -> String {
        let n = self.0.get() + 1;
        self.0.set(n);
        format!("c{}n{n}", self.1)
    }
    fn jitter(&self, d: Duration, _spread: f64) -> Duration {
        d
    }
}

pub(crate) fn timing(grace: Duration) -> Timing {
    let caps = Capabilities {
        conditional_delete: true,
        clock_resolution: Duration::from_secs(1),
        store_clock_rule: true,
        wall_clock: true,
        versions_are_unique: true,
    };
    LeaseOptions::new(Duration::from_secs(4))
        .renew_interval(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(1))
        .poll_interval(Duration::from_secs(1))
        .grace(grace)
        .timing(&caps)
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// The state.

/// The lease record as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stored {
    generation: u64,
    bytes: Bytes,
    modified: u32,
}

/// What a client is waiting for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Io {
    Request(Flight),
    Sleep(Instant),
}

// A model state, hashed and cloned whole by the checker: boxing would only add allocations.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    Acquiring(Acquirer, Io),
    Holding(Hold, Option<(WriteOp, Record, Io)>),
    Crashed,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientState {
    phase: Phase,
    nonces: u32,
    acquisitions: u8,
    /// When the current acquisition started.
    since: u32,
    /// Ticks this client's clock is behind true time (0 or 1: bounded drift).
    lag: u32,
    /// Whether this client changed its ttl already (at most once).
    ttl_changed: bool,
    /// A renewal whose outcome was unknown is tried again from this instant (the driver's
    /// backoff), with a fresh write.
    retry_at: Option<Instant>,
    /// The record this client released and its version (the driver's memo): its next
    /// acquisition starts from it, with one write.
    released: Option<(Version, Record)>,
    /// The epoch of the tenure this client's acquisition set out to preempt (its first
    /// preemption's `preempted`), kept for the property that it never waits for that tenure.
    preempt_target: Option<u64>,
    /// The holder's side of yield requests (a new one per acquisition, as per `Lease`).
    yield_watch: YieldWatch,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    t: u32,
    /// How far the `Date` of every answer runs ahead of the store's clock (a gateway in front
    /// of the store that sets its own: issue 29); `last_modified` and stamps are the store's.
    date_ahead: u32,
    store: Option<Stored>,
    generations: u64,
    clients: Vec<ClientState>,
    /// Requests whose sender gave up (timed out or crashed); they may still land.
    orphans: Vec<Req>,
    faults: u8,
    breaks: u8,
    deletes: u8,
    /// The highest epoch acquired so far.
    granted: u64,
    /// The highest epoch handed out so far: by a write that landed a held record of a new
    /// holder or epoch (not a renewal), whether or not its answer came back.
    handed: u64,
    /// Set when a transition broke an invariant that is not a property of a single state.
    bad: Option<&'static str>,
    acquired_twice: bool,
    /// When a holder crashed (fault-free liveness variant), and whether someone acquired since.
    crashed_holding_at: Option<u32>,
    acquired_after_crash: bool,
    /// Someone acquired within the ttl of a crashed holder's crash (the dead-holder rule).
    replaced_early: bool,
    /// The epochs a preemption took the lease from (a landed record's `preempted`): their
    /// holders may still believe until their next renewal. Empty unless `preempting`.
    preempted: Vec<u64>,
    /// A holder lost its lease as `LostReason::Preempted`.
    learned_preempted: bool,
    /// A preempting acquisition waited for the live tenure it set out to preempt.
    waited_for_preempted: bool,
    /// The yield request object `KEY.yield` as the store keeps it.
    yield_object: Option<LeaseYield>,
    /// The epoch the asker's read of the record showed held, its write not yet made.
    asking: Option<u64>,
    /// Requests written so far.
    asks: u8,
    /// Every epoch the asker saw held when it read (the tenures it asked), sorted.
    asked: Vec<u64>,
    /// A holder was told of a yield request; one was told of a request not made of its tenure.
    yield_told: bool,
    yield_told_other: bool,
    /// The holder's paths taken so far ([`Witness`] bits), recorded only with
    /// `LeaseModel::witnesses` (they would split states the other checks need not tell apart).
    seen: u8,
}

/// A path of the holder's that a check shows taken (`LeaseModel::witnesses`): the decisions of
/// [`hold::after_write`] and [`hold::begin_release`] that only faults, breaks and a second
/// acquisition reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Witness {
    /// A release whose outcome was unknown, sent again.
    ReleaseSentAgain = 2,
    /// A release rejected (the lease was broken or taken), then the tidy write over what the
    /// store showed landed.
    TidiedAfterRejectedRelease = 4,
    /// An acquisition that started from the record its client released (one write).
    AcquiredFromReleased = 8,
}

impl Witness {
    pub const ALL: [Witness; 3] = [
        Witness::ReleaseSentAgain,
        Witness::TidiedAfterRejectedRelease,
        Witness::AcquiredFromReleased,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Witness::ReleaseSentAgain => "a release of unknown outcome is sent again",
            Witness::TidiedAfterRejectedRelease => "a rejected release is tidied over",
            Witness::AcquiredFromReleased => "an acquisition starts from its released record",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    Start(usize),
    /// Apply the client's request and answer it.
    Deliver(usize),
    DeliverOrphan(usize),
    DropOrphan(usize),
    /// Deliver an answer that was held up.
    Reply(usize),
    /// Faults: hold the request up; apply it but hold the answer up; apply it and lose the
    /// answer; fail it without applying it.
    Delay(usize),
    DelayAnswer(usize),
    LoseReply(usize),
    Fail(usize),
    /// The client stops waiting: a request held up stays in the network and may land later.
    Timeout(usize),
    Wake(usize),
    Renew(usize),
    /// The holder changes its ttl to the model's `ttl_change` and renews at once.
    SetTtl(usize),
    Release(usize),
    Crash(usize),
    Drift(usize),
    Break,
    /// The record is deleted by hand (or a lifecycle rule) while nobody believes they hold it.
    Delete,
    /// The yield asker reads the record (`yield_asks`): a held record's epoch is the tenure
    /// it asks.
    AskYieldRead,
    /// The yield asker writes `KEY.yield` naming the epoch it read.
    AskYieldWrite,
}

/// The model's bounds and switches.
#[derive(Clone, Debug)]
pub struct LeaseModel {
    pub clients: usize,
    pub max_time: u32,
    pub max_faults: u8,
    pub acquisitions: u8,
    pub breaks: u8,
    /// How the operator breaks (`AllowTwoHolders` is the old behaviour, a negative control).
    pub break_mode: BreakMode,
    /// Deletions of the record by hand, while nobody believes they hold it and once the clock
    /// has passed every epoch handed out.
    pub deletes: u8,
    pub grace: Duration,
    pub drift: bool,
    pub crashes: bool,
    /// Only this client's requests suffer faults (`None`: any client's).
    pub faulty: Option<usize>,
    /// Requests suffer faults at all (`false`: the faults are crashes only, a narrower search
    /// for checks about what a crash means, whose interplay with the network is checked
    /// elsewhere).
    pub network_faults: bool,
    /// The only fault is a request held up (no lost or failed answers): a narrower search.
    pub only_delays: bool,
    /// A holder may change its ttl to this, once, while it holds (`Lease::set_ttl`).
    pub ttl_change: Option<Duration>,
    /// Clients are processes of one machine, client `c` in pid namespace `pid_namespaces[c]`
    /// with pid `100 + c`: records name their processes and waiters probe them, taking over at
    /// once a holder provably gone (`protocol::dead_holder`). `None`: records name no
    /// processes (as from another machine).
    pub pid_namespaces: Option<Vec<u8>>,
    /// With `pid_namespaces`: client `c` runs on the machine boot `boots[c]` (empty: all on one
    /// boot). Machines sharing a directory over a network file system: each one's init pid
    /// namespace has the same name (`pid:[4026531836]` on every Linux host), so only the boot
    /// id tells them apart.
    pub boots: Vec<u8>,
    /// The answers' `Date` runs this many ticks ahead of the store's clock: every offset from
    /// 0 to this one is an initial state (0: the store's own `Date`).
    pub date_ahead: u32,
    /// Record the holder's paths taken ([`Witness`]) and check that each is: "sometimes"
    /// properties, so a model that never retries, tidies or re-acquires from its memo fails.
    pub witnesses: bool,
    /// This client's acquirer preempts (`Preempt::EveryEffectFenced`, docs/protocol.md §5):
    /// "at most one holder believes" is then replaced by "at most one holder believes, besides
    /// holders preempted by a later epoch" (until their next renewal), and a preempted holder
    /// must sometimes learn of it.
    pub preempting: Option<usize>,
    /// An operator asks the plain lease's holder to yield this many times (`lease yield`,
    /// docs/protocol.md §10, *Plain leases*): it reads the record, then writes `KEY.yield`
    /// naming the epoch it showed held — two actions, so the write may land after that tenure
    /// ended. Every holder listens: it reads the object after each landed renewal
    /// ([`YieldWatch`], as the driver does). Checked: a holder is told only of a request made
    /// of its own tenure, and sometimes one is told.
    pub yield_asks: u8,
}

impl LeaseModel {
    fn timing(&self) -> Timing {
        timing(self.grace)
    }

    fn local(&self, s: &State, c: usize) -> u32 {
        s.t.saturating_sub(s.clients[c].lag)
    }

    fn plan(&self, c: usize) -> Plan {
        let process = self.pid_namespaces.as_ref().map(|ns| {
            Box::new(HolderProcess {
                boot: self.boot(c),
                pid_ns: format!("pid:[{}]", ns[c]),
                time_ns: "time".into(),
                start: 1,
                also: vec![],
            })
        });
        Plan {
            url: "model://lease".into(),
            holder: Holder {
                id: format!("client-{c}"),
                pid: Some(100 + c as u32),
                process,
                ..Holder::default()
            },
            timing: self.timing(),
            data: None,
            try_once: false,
            wait_deadline: None,
            unavailable_timeout: None,
            // No decision reads the history (docs/protocol.md §3); leaving it out keeps the
            // model's records, and so its state space, as they were.
            history: false,
            probe_holders: self.pid_namespaces.is_some(),
            epoch_is_token: true,
            preempt: if self.preempting == Some(c) {
                Preempt::EveryEffectFenced
            } else {
                Preempt::Never
            },
        }
    }

    /// The boot id of client `c`'s machine.
    fn boot(&self, c: usize) -> String {
        format!("boot-{}", self.boots.get(c).copied().unwrap_or(0))
    }

    /// What client `w` finds of `pids` on its machine: the process of a client in its own pid
    /// namespace on its own boot is there until it crashes; a pid of another namespace or
    /// machine names no process in `w`'s (what a waiter would see of a container's holder, or
    /// of another host's).
    fn probe(&self, s: &State, w: usize, pids: &[u32]) -> Probe {
        let ns = self
            .pid_namespaces
            .as_ref()
            .expect("probes only with processes");
        Probe {
            boot: Some(self.boot(w)),
            pid_ns: Some(format!("pid:[{}]", ns[w])),
            time_ns: Some("time".into()),
            procs: pids
                .iter()
                .map(|&pid| {
                    let h = pid.checked_sub(100).map(|h| h as usize);
                    let state = match h {
                        Some(h)
                            if h < self.clients
                                && ns[h] == ns[w]
                                && self.boot(h) == self.boot(w) =>
                        {
                            if matches!(s.clients[h].phase, Phase::Crashed) {
                                Proc::Absent
                            } else {
                                Proc::Started(1)
                            }
                        }
                        _ => Proc::Absent,
                    };
                    (pid, state)
                })
                .collect(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The store.

pub(crate) fn apply(s: &mut State, req: &Req) -> Answer {
    match req {
        Req::Stamp => Answer::Stamp(store_time(s.t)),
        Req::Get { if_none_match } => {
            let server_now = Some(store_time(s.t + s.date_ahead));
            Answer::Get(match &s.store {
                None => Get::NotFound { server_now },
                Some(o) if if_none_match.as_ref() == Some(&version(o)) => {
                    Get::NotModified { server_now }
                }
                Some(o) => Get::Found(object(o, s.t + s.date_ahead)),
            })
        }
        Req::Put { bytes, cond } => {
            let allowed = match (cond, &s.store) {
                (Cond::Create, None) => true,
                (Cond::Match(v), Some(o)) => *v == version(o),
                _ => false,
            };
            if !allowed {
                return Answer::Put(Put::ConditionFailed);
            }
            let before = s.store.as_ref().and_then(|o| parsed(&o.bytes));
            hand_out(s, before, bytes);
            s.generations += 1;
            let stored = Stored {
                generation: s.generations,
                bytes: bytes.clone(),
                modified: s.t,
            };
            let v = version(&stored);
            s.store = Some(stored);
            Answer::Put(Put::Written {
                version: v,
                server_now: Some(store_time(s.t)),
            })
        }
    }
}

pub(crate) fn version(o: &Stored) -> Version {
    Version {
        etag: format!("g{}", o.generation),
        generation: Some(o.generation),
    }
}

pub(crate) fn object(o: &Stored, t: u32) -> Object {
    Object {
        bytes: Some(o.bytes.clone()),
        size: o.bytes.len() as u64,
        version: version(o),
        last_modified: Some(store_time(o.modified)),
        server_now: Some(store_time(t)),
        meta: Default::default(),
    }
}

/// The record in `bytes`, if valid.
fn parsed(bytes: &Bytes) -> Option<Record> {
    match Record::parse(Some(bytes), bytes.len() as u64) {
        lease::record::Parsed::Valid(r) => Some(r),
        _ => None,
    }
}

/// "Epochs strictly increase", checked where an epoch is handed out: when a write lands a held
/// record that is not a renewal of the one it replaced (`before`), answered or not, its epoch
/// must be above every epoch handed out before. **(changed, issue 22)** In the order the
/// writes land, not the order their writers learn of it: a record deleted while a takeover's
/// answer is held up is deleted under its holder (protocol.md §6, the window of a deletion),
/// and the next holder's epoch, above the clock, is rightly above that earlier one's, though it
/// learns of its own first. A write that grants nobody (a release, or a `Create`, which
/// writes the record released) hands nothing out.
fn hand_out(s: &mut State, before: Option<Record>, bytes: &Bytes) {
    let Some(r) = parsed(bytes) else { return };
    if let Some(p) = &r.preempted {
        if !s.preempted.contains(&p.epoch) {
            s.preempted.push(p.epoch);
            s.preempted.sort_unstable();
        }
    }
    let renewal = before.is_some_and(|b| {
        b.state == RecordState::Held && b.epoch == r.epoch && b.holder.id == r.holder.id
    });
    if r.state != RecordState::Held || renewal {
        return;
    }
    if r.epoch <= s.handed {
        s.bad = Some("an epoch was handed out twice or went backwards");
    }
    s.handed = s.handed.max(r.epoch);
}

pub(crate) fn record_holder(o: &Stored) -> String {
    match Record::parse(Some(&o.bytes), o.bytes.len() as u64) {
        lease::record::Parsed::Valid(r) => r.holder.id,
        _ => String::new(),
    }
}

pub(crate) fn unavailable() -> Error {
    Error::unavailable("the model's network failed")
}

// ---------------------------------------------------------------------------------------------
// Driving the protocol's machines.

impl LeaseModel {
    /// Feed an acquirer an event and turn its step into what the client waits for next.
    fn acquirer_step(&self, s: &mut State, c: usize, mut m: Acquirer, event: Event) {
        let now = at(self.local(s, c));
        let nonces = Cell::new(s.clients[c].nonces);
        let step = m.step(event, now, store_time(s.t), &Counter(&nonces, c));
        s.clients[c].nonces = nonces.get();
        if self.preempting == Some(c) {
            self.watch_preemption(s, c, &m, &step);
        }
        s.clients[c].phase = match step {
            Step::Read { if_none_match } => {
                Phase::Acquiring(m, Io::Request(Flight::Sent(Req::Get { if_none_match })))
            }
            Step::Put { bytes, cond } => {
                Phase::Acquiring(m, Io::Request(Flight::Sent(Req::Put { bytes, cond })))
            }
            Step::Stamp => Phase::Acquiring(m, Io::Request(Flight::Sent(Req::Stamp))),
            Step::Sleep { until, .. } => Phase::Acquiring(m, Io::Sleep(until)),
            // The driver answers at once, from what the machine shows.
            Step::Probe { pids } => {
                let probe = self.probe(s, c, &pids);
                return self.acquirer_step(s, c, m, Event::Probed(probe));
            }
            Step::Acquired {
                record,
                version,
                t_send,
            } => {
                if s.granted > 0 {
                    s.acquired_twice = true;
                }
                if let Some(crash) = s.crashed_holding_at {
                    s.acquired_after_crash = true;
                    // Before the dead holder's ttl was out: only a proof of its death allows it.
                    if s.t < crash + self.timing().ttl.as_secs() as u32 {
                        s.replaced_early = true;
                    }
                }
                s.granted = s.granted.max(record.epoch);
                Phase::Holding(
                    Hold::new("model://lease", record, version, t_send, self.timing()),
                    None,
                )
            }
            Step::Failed(_) => Phase::Idle,
        };
    }

    /// What a preempting client's step shows: the tenure its first preemption names is its
    /// target for the rest of the acquisition, and a wait for that tenure (still live: it
    /// waits only for a live holder) is a preemption lost to a renewal race (CI stop 38).
    fn watch_preemption(&self, s: &mut State, c: usize, m: &Acquirer, step: &Step) {
        match step {
            Step::Put { bytes, .. } if s.clients[c].preempt_target.is_none() => {
                if let lease::record::Parsed::Valid(r) =
                    Record::parse(Some(bytes), bytes.len() as u64)
                {
                    s.clients[c].preempt_target = r.preempted.map(|p| p.epoch);
                }
            }
            Step::Sleep { .. } => {
                let waits_for = m.waiting_for().and_then(|(_, e)| e);
                if waits_for.is_some() && waits_for == s.clients[c].preempt_target {
                    s.waited_for_preempted = true;
                }
            }
            _ => {}
        }
    }

    /// Feed a holder's write (a renewal, a release, or the tidy write after a loss) an event;
    /// its outcome goes to [`hold::after_write`], the decision the driver (`core/src/lease.rs`)
    /// runs, and the client does what it answers.
    fn hold_step(
        &self,
        s: &mut State,
        c: usize,
        mut h: Hold,
        mut op: WriteOp,
        record: Record,
        event: WriteEvent,
    ) {
        let now = at(self.local(s, c));
        let wrote = wrote(&h, &record);
        if wrote == Wrote::Renewal && now >= h.deadline() {
            // The driver's watchdog fired at the deadline: the lease is lost by expiry, and the
            // renewal in progress is abandoned (a request of it in flight may still land). A
            // release or a tidy write goes on until its outcome is known: no watchdog races it.
            if let Some(Io::Request(Flight::Sent(req) | Flight::Delayed(req))) = self.io(s, c) {
                s.orphans.push(req);
            }
            h.lose(LostReason::Expired);
            s.clients[c].phase = Phase::Idle;
            return;
        }
        let nonces = Cell::new(s.clients[c].nonces);
        let step = op.step(event, now, &Counter(&nonces, c));
        s.clients[c].nonces = nonces.get();
        let io = match step {
            WriteStep::Put { bytes, cond } => Io::Request(Flight::Sent(Req::Put { bytes, cond })),
            WriteStep::Read => Io::Request(Flight::Sent(Req::Get {
                if_none_match: None,
            })),
            WriteStep::Sleep(d) => Io::Sleep(now + d),
            WriteStep::Done(outcome) => {
                let next = after_write(&mut h, wrote, record.clone(), outcome, now);
                self.follow(s, c, h, record, next, now);
                return;
            }
        };
        s.clients[c].phase = Phase::Holding(h, Some((op, record, io)));
    }

    /// Start the holder's renewal or release of `record`, given up at its deadline (as the
    /// driver does).
    fn send(&self, s: &mut State, c: usize, h: Hold, record: Record, cond: Cond, now: Instant) {
        let give_up_at = h.deadline().max(now);
        let op = WriteOp::new("model://lease", &record, cond, give_up_at, &h.timing);
        self.hold_step(s, c, h, op, record, WriteEvent::Start);
    }

    fn saw(&self, s: &mut State, w: Witness) {
        if self.witnesses {
            s.seen |= w as u8;
        }
    }

    /// Do what [`hold::after_write`] answered for client `c`'s write of `record`.
    fn follow(
        &self,
        s: &mut State,
        c: usize,
        mut h: Hold,
        record: Record,
        next: Next,
        now: Instant,
    ) {
        s.clients[c].phase = match next {
            Next::Renewed => {
                if self.yield_asks > 0 {
                    self.read_yield(s, c, h.epoch());
                }
                Phase::Holding(h, None)
            }
            // Renewed again after a backoff (the first of the driver's), with a fresh write.
            // Reached in the driver by an error other than `Unavailable` (a 403, say): the
            // model's network fails only with `Unavailable`, whose renewal keeps reading back
            // until the deadline, so here it is a loss by expiry instead (pinned by the core's
            // tests, `hold/outcome/tests.rs`).
            Next::RetryRenewal(_) => {
                let no_nonce = Cell::new(0);
                let wait = Backoff::for_timing(&h.timing).next(&Counter(&no_nonce, c));
                s.clients[c].retry_at = Some(now + wait);
                Phase::Holding(h, None)
            }
            Next::Released { remember } => {
                if let Some(version) = remember {
                    s.clients[c].released = Some((version, record));
                }
                Phase::Idle
            }
            // Still being released (not believed): the client may release again.
            Next::ReleaseUnknown(_) => Phase::Holding(h, None),
            Next::Lost { reason, tidy } => {
                if matches!(reason, LostReason::Preempted { .. }) {
                    s.learned_preempted = true;
                }
                h.lose(reason);
                // What the store showed is in hand: tidy over it at once, as the driver does.
                let nonces = Cell::new(s.clients[c].nonces);
                let plan = tidy
                    .and_then(|current| h.tidy(&current, store_time(s.t), &Counter(&nonces, c)));
                s.clients[c].nonces = nonces.get();
                let Some((record, cond)) = plan else {
                    s.clients[c].phase = Phase::Idle;
                    return;
                };
                let give_up_at = now + h.timing.request_timeout * 2;
                let op = WriteOp::new("model://lease", &record, cond, give_up_at, &h.timing);
                return self.hold_step(s, c, h, op, record, WriteEvent::Start);
            }
            Next::Tidied { remember } => {
                if let Some(version) = remember {
                    self.saw(s, Witness::TidiedAfterRejectedRelease);
                    s.clients[c].released = Some((version, record));
                }
                Phase::Idle
            }
        };
    }

    /// Holder `c` of `epoch` reads `KEY.yield` after a landed renewal (the driver's read, here
    /// at once) and is told what its [`YieldWatch`] says.
    fn read_yield(&self, s: &mut State, c: usize, epoch: u64) {
        let bytes = s.yield_object.as_ref().map(LeaseYield::to_bytes);
        if s.clients[c]
            .yield_watch
            .read(epoch, bytes.as_deref())
            .is_some()
        {
            s.yield_told = true;
            if !s.asked.contains(&epoch) {
                s.yield_told_other = true;
            }
        }
    }

    /// Deliver an answer to client `c`.
    fn answer(&self, s: &mut State, c: usize, answer: Answer) {
        match s.clients[c].phase.clone() {
            Phase::Acquiring(m, _) => {
                let event = match answer {
                    Answer::Get(g) => Event::Read(Ok(g)),
                    Answer::Put(p) => Event::Put(Ok(p)),
                    Answer::Stamp(t) => Event::Stamped(Ok(Some(t))),
                    Answer::Unavailable => match self.req_of(s, c) {
                        Some(Req::Get { .. }) => Event::Read(Err(unavailable())),
                        Some(Req::Stamp) => Event::Stamped(Err(unavailable())),
                        _ => Event::Put(Err(unavailable())),
                    },
                };
                self.acquirer_step(s, c, m, event);
            }
            Phase::Holding(h, Some((op, record, _))) => {
                let event = match answer {
                    Answer::Get(g) => WriteEvent::Read(Ok(g)),
                    Answer::Put(p) => WriteEvent::Put(Ok(p)),
                    Answer::Stamp(_) => unreachable!("a holder asks for no stamp"),
                    Answer::Unavailable => match self.req_of(s, c) {
                        Some(Req::Get { .. }) => WriteEvent::Read(Err(unavailable())),
                        _ => WriteEvent::Put(Err(unavailable())),
                    },
                };
                self.hold_step(s, c, h, op, record, event);
            }
            other => unreachable!("an answer for a client that sent nothing: {other:?}"),
        }
    }

    fn io(&self, s: &State, c: usize) -> Option<Io> {
        match &s.clients[c].phase {
            Phase::Acquiring(_, io) => Some(io.clone()),
            Phase::Holding(_, Some((_, _, io))) => Some(io.clone()),
            _ => None,
        }
    }

    /// A request sent and not yet applied.
    fn pending_req(&self, s: &State, c: usize) -> Option<Req> {
        match self.io(s, c) {
            Some(Io::Request(Flight::Sent(r))) => Some(r),
            _ => None,
        }
    }

    /// The request of whatever is in flight.
    fn req_of(&self, s: &State, c: usize) -> Option<Req> {
        match self.io(s, c) {
            Some(Io::Request(
                Flight::Sent(r) | Flight::Delayed(r) | Flight::Answered(r, _) | Flight::Lost(r),
            )) => Some(r),
            _ => None,
        }
    }

    fn set_flight(&self, s: &mut State, c: usize, f: Flight) {
        match &mut s.clients[c].phase {
            Phase::Acquiring(_, io) => *io = Io::Request(f),
            Phase::Holding(_, Some((_, _, io))) => *io = Io::Request(f),
            _ => unreachable!(),
        }
    }

    /// Whether client `c` believes it holds the lease now, by its own clock.
    fn believes(&self, s: &State, c: usize) -> bool {
        match &s.clients[c].phase {
            Phase::Holding(h, _) => h.believes(at(self.local(s, c))),
            _ => false,
        }
    }
}

/// Which write of the holder's `record` is: a renewal carries a held record; a released one is
/// the release, or after a loss the tidy write (the driver knows it from where it sends it).
fn wrote(h: &Hold, record: &Record) -> Wrote {
    match (&record.state, &h.phase) {
        (RecordState::Held, _) => Wrote::Renewal,
        (RecordState::Released, hold::Phase::Lost(_)) => Wrote::Tidy,
        (RecordState::Released, _) => Wrote::Release,
    }
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        (0..=self.date_ahead)
            .map(|date_ahead| State {
                t: 0,
                date_ahead,
                store: None,
                generations: 0,
                clients: vec![
                    ClientState {
                        phase: Phase::Idle,
                        nonces: 0,
                        acquisitions: 0,
                        since: 0,
                        lag: 0,
                        ttl_changed: false,
                        retry_at: None,
                        released: None,
                        preempt_target: None,
                        yield_watch: YieldWatch::default(),
                    };
                    self.clients
                ],
                orphans: vec![],
                faults: 0,
                breaks: 0,
                deletes: 0,
                granted: 0,
                handed: 0,
                bad: None,
                acquired_twice: false,
                crashed_holding_at: None,
                acquired_after_crash: false,
                replaced_early: false,
                preempted: vec![],
                learned_preempted: false,
                waited_for_preempted: false,
                yield_object: None,
                asking: None,
                asks: 0,
                asked: vec![],
                yield_told: false,
                yield_told_other: false,
                seen: 0,
            })
            .collect()
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.bad.is_some() {
            return;
        }
        let faults_left = s.faults < self.max_faults;
        // Time moves on only when nothing is due now: requests not held up are applied and
        // answered, sleeps that are over end, renewals that are due start.
        let mut due = false;
        for c in 0..self.clients {
            let client = &s.clients[c];
            let now = at(self.local(s, c));
            match &client.phase {
                Phase::Crashed => continue,
                Phase::Idle if client.acquisitions < self.acquisitions => {
                    actions.push(Action::Start(c))
                }
                Phase::Holding(h, None) => {
                    // Renewals start when due (a retry after its backoff), before the deadline
                    // (the watchdog ends the lease at the deadline); none once a release was
                    // sent.
                    let held = h.phase == hold::Phase::Held && now < h.deadline();
                    let due_at = client
                        .retry_at
                        .map_or(h.renew_at(), |r| r.max(h.renew_at()));
                    if held && now >= due_at {
                        actions.push(Action::Renew(c));
                        due = true;
                    }
                    if self.ttl_change.is_some() && !client.ttl_changed && held {
                        actions.push(Action::SetTtl(c));
                    }
                    actions.push(Action::Release(c));
                }
                _ => {}
            }
            match self.io(s, c) {
                Some(Io::Sleep(until)) if now >= until => {
                    actions.push(Action::Wake(c));
                    due = true;
                }
                Some(Io::Request(Flight::Sent(_))) => {
                    due = true;
                    actions.push(Action::Deliver(c));
                    if faults_left && self.network_faults && self.faulty.is_none_or(|f| f == c) {
                        actions.push(Action::Delay(c));
                        if !self.only_delays {
                            actions.push(Action::DelayAnswer(c));
                            actions.push(Action::LoseReply(c));
                            actions.push(Action::Fail(c));
                        }
                    }
                }
                Some(Io::Request(Flight::Delayed(_))) => {
                    actions.push(Action::Deliver(c));
                    actions.push(Action::Timeout(c));
                }
                Some(Io::Request(Flight::Answered(..))) => {
                    actions.push(Action::Reply(c));
                    actions.push(Action::Timeout(c));
                }
                Some(Io::Request(Flight::Lost(_))) => actions.push(Action::Timeout(c)),
                _ => {}
            }
            if self.crashes && faults_left {
                actions.push(Action::Crash(c));
            }
            if self.drift && client.lag == 0 {
                actions.push(Action::Drift(c));
            }
        }
        for i in 0..s.orphans.len() {
            actions.push(Action::DeliverOrphan(i));
            actions.push(Action::DropOrphan(i));
        }
        // The assumption a deletion relies on (docs/protocol.md §6): by the time a record is
        // deleted, the clock has passed every epoch handed out (epochs grow by one per hand-over,
        // clocks by one per millisecond; in this model a tick is a second and actions take no
        // time, so the record must be at least a tick older than the last epoch). An epoch is
        // handed out when its write lands, answered or not (before, only epochs whose answers
        // had come back counted, so a record whose write's answer was held up could be
        // deleted in the second it was written).
        if s.deletes < self.deletes
            && s.store.is_some()
            && lease::unix_ms(store_time(s.t)) > s.granted.max(s.handed)
            && !(0..self.clients).any(|c| self.believes(s, c))
        {
            actions.push(Action::Delete);
        }
        if s.breaks < self.breaks && s.store.is_some() {
            actions.push(Action::Break);
        }
        if s.asks < self.yield_asks {
            actions.push(if s.asking.is_none() {
                Action::AskYieldRead
            } else {
                Action::AskYieldWrite
            });
        }
        if s.t < self.max_time && !due {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => s.t += 1,
            Action::Start(c) => {
                s.clients[c].acquisitions += 1;
                s.clients[c].since = s.t;
                let now = at(self.local(&s, c));
                // The remembered release is used once (`core/src/acquirer.rs`).
                let released = s.clients[c].released.take();
                if released.is_some() {
                    self.saw(&mut s, Witness::AcquiredFromReleased);
                }
                let known = released.as_ref().map_or(0, |(_, r)| r.epoch);
                let m = Acquirer::new(self.plan(c), known, released, now);
                s.clients[c].preempt_target = None;
                s.clients[c].yield_watch = YieldWatch::default();
                self.acquirer_step(&mut s, c, m, Event::Start);
            }
            Action::Deliver(c) => {
                let req = self.req_of(&s, c)?;
                let answer = apply(&mut s, &req);
                self.answer(&mut s, c, answer);
            }
            Action::Delay(c) => inject(self, &mut s, c, Fault::Delay)?,
            Action::DelayAnswer(c) => inject(self, &mut s, c, Fault::DelayAnswer)?,
            Action::LoseReply(c) => inject(self, &mut s, c, Fault::LoseReply)?,
            Action::Fail(c) => inject(self, &mut s, c, Fault::Fail)?,
            Action::Timeout(c) => {
                // A request held up and not yet applied stays in the network, and may land.
                if let Some(Io::Request(Flight::Delayed(req))) = self.io(&s, c) {
                    s.orphans.push(req);
                }
                self.answer(&mut s, c, Answer::Unavailable);
            }
            Action::Reply(c) => match self.io(&s, c) {
                Some(Io::Request(Flight::Answered(_, a))) => self.answer(&mut s, c, a),
                _ => return None,
            },
            Action::Wake(c) => match s.clients[c].phase.clone() {
                Phase::Acquiring(m, _) => self.acquirer_step(&mut s, c, m, Event::Slept),
                Phase::Holding(h, Some((op, record, _))) => {
                    self.hold_step(&mut s, c, h, op, record, WriteEvent::Slept)
                }
                _ => return None,
            },
            Action::Renew(c) | Action::SetTtl(c) => {
                let Phase::Holding(mut h, None) = s.clients[c].phase.clone() else {
                    return None;
                };
                if let (Action::SetTtl(_), Some(ttl)) = (&action, self.ttl_change) {
                    s.clients[c].ttl_changed = true;
                    h.want_ttl(ttl);
                }
                s.clients[c].retry_at = None;
                let now = at(self.local(&s, c));
                let nonces = Cell::new(s.clients[c].nonces);
                let write = h.next_write(RecordState::Held, store_time(s.t), &Counter(&nonces, c));
                s.clients[c].nonces = nonces.get();
                let Some((record, cond)) = write else {
                    s.clients[c].phase = Phase::Idle;
                    return Some(s);
                };
                // What the driver does before a write: a shorter ttl caps the belief from now.
                h.sending(&record, now);
                self.send(&mut s, c, h, record, cond, now);
            }
            Action::Release(c) => {
                let Phase::Holding(mut h, None) = s.clients[c].phase.clone() else {
                    return None;
                };
                let now = at(self.local(&s, c));
                if h.phase == hold::Phase::Releasing {
                    self.saw(&mut s, Witness::ReleaseSentAgain);
                }
                let nonces = Cell::new(s.clients[c].nonces);
                let start = begin_release(&mut h, now, store_time(s.t), &Counter(&nonces, c));
                s.clients[c].nonces = nonces.get();
                match start {
                    ReleaseStart::Send(record, cond) => self.send(&mut s, c, h, record, cond, now),
                    // Lost: the driver reads the record and tidies over it; that read is not
                    // modelled (the client goes idle, its record waited out).
                    ReleaseStart::Lost(_) | ReleaseStart::Done => s.clients[c].phase = Phase::Idle,
                }
            }
            Action::Crash(c) => {
                s.faults += 1;
                if self.believes(&s, c) {
                    s.crashed_holding_at = Some(s.t);
                }
                if let Some(Io::Request(Flight::Sent(req) | Flight::Delayed(req))) = self.io(&s, c)
                {
                    s.orphans.push(req);
                }
                s.clients[c].phase = Phase::Crashed;
            }
            Action::Drift(c) => s.clients[c].lag = 1,
            Action::Delete => {
                s.deletes += 1;
                s.store = None;
            }
            // `yielding::ask_lease`: a held record names the tenure asked; anything else asks
            // nobody (nothing is written, the ask is not spent).
            Action::AskYieldRead => {
                let held = s.store.as_ref().and_then(|o| {
                    match Record::parse(Some(&o.bytes), o.bytes.len() as u64) {
                        lease::record::Parsed::Valid(r) if r.state == RecordState::Held => {
                            Some(r.epoch)
                        }
                        _ => None,
                    }
                });
                let epoch = held?;
                s.asking = Some(epoch);
                if !s.asked.contains(&epoch) {
                    s.asked.push(epoch);
                    s.asked.sort_unstable();
                }
            }
            Action::AskYieldWrite => {
                let epoch = s.asking.take()?;
                s.asks += 1;
                s.yield_object = Some(LeaseYield {
                    epoch,
                    by: "ops".into(),
                    reason: None,
                });
            }
            Action::DeliverOrphan(i) => {
                let req = s.orphans.remove(i);
                apply(&mut s, &req);
            }
            Action::DropOrphan(i) => {
                s.orphans.remove(i);
            }
            Action::Break => {
                s.breaks += 1;
                let mut view = View::default();
                let read = apply(
                    &mut s,
                    &Req::Get {
                        if_none_match: None,
                    },
                );
                let Answer::Get(get) = read else {
                    unreachable!()
                };
                view.absorb(get, at(s.t));
                let operator = Holder {
                    id: "operator".into(),
                    ..Holder::default()
                };
                let nonces = Cell::new(s.breaks as u32);
                match breaking::plan(
                    &view,
                    0,
                    self.break_mode,
                    operator,
                    &self.timing(),
                    store_time(s.t),
                    &Counter(&nonces, 99),
                ) {
                    BreakPlan::Write { record, cond } => {
                        apply(
                            &mut s,
                            &Req::Put {
                                bytes: record.to_bytes(),
                                cond,
                            },
                        );
                    }
                    BreakPlan::Nothing | BreakPlan::AlreadyBroken => {}
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let one_believer = if self.preempting.is_some() {
            // What preemption gives up: a preempted holder believes until its next renewal.
            Property::always(
                "at most one holder believes, besides holders preempted by a later epoch",
                |m: &LeaseModel, s: &State| {
                    let preempted = |c: usize| match &s.clients[c].phase {
                        Phase::Holding(h, _) => s.preempted.contains(&h.epoch()),
                        _ => false,
                    };
                    (0..m.clients)
                        .filter(|&c| m.believes(s, c) && !preempted(c))
                        .count()
                        <= 1
                },
            )
        } else {
            Property::always(
                "at most one holder believes",
                |m: &LeaseModel, s: &State| {
                    (0..m.clients).filter(|&c| m.believes(s, c)).count() <= 1
                },
            )
        };
        let mut properties = vec![
            one_believer,
            Property::always("epochs strictly increase", |_, s: &State| s.bad.is_none()),
            Property::sometimes("a second holder gets the lease", |_, s: &State| {
                s.acquired_twice
            }),
        ];
        // Where a crash can be proven, the proof is used (the check is not vacuous).
        let one_namespace = self
            .pid_namespaces
            .as_ref()
            .is_some_and(|ns| ns.iter().all(|n| *n == ns[0]))
            && self.boots.iter().all(|b| Some(b) == self.boots.first());
        if self.witnesses {
            // A property's condition is a plain function: one per path.
            let seen: [fn(&LeaseModel, &State) -> bool; 3] = [
                |_, s| s.seen & Witness::ReleaseSentAgain as u8 != 0,
                |_, s| s.seen & Witness::TidiedAfterRejectedRelease as u8 != 0,
                |_, s| s.seen & Witness::AcquiredFromReleased as u8 != 0,
            ];
            for (w, seen) in Witness::ALL.into_iter().zip(seen) {
                properties.push(Property::sometimes(w.name(), seen));
            }
        }
        if self.preempting.is_some() {
            properties.push(Property::sometimes(
                "a holder loses its lease by preemption",
                |_, s: &State| s.learned_preempted,
            ));
            properties.push(Property::always(
                "a preempting acquisition never waits for the tenure it set out to preempt",
                |_, s: &State| !s.waited_for_preempted,
            ));
        }
        if self.yield_asks > 0 {
            properties.push(Property::always(
                "a holder is told only of a yield request made of its own tenure",
                |_, s: &State| !s.yield_told_other,
            ));
            properties.push(Property::sometimes(
                "a holder is told to yield",
                |_, s: &State| s.yield_told,
            ));
        }
        if self.crashes && one_namespace {
            properties.push(Property::sometimes(
                "a crashed holder is replaced within its ttl",
                |_, s: &State| s.replaced_early,
            ));
        }
        properties
    }
}

/// A fault-free world where a holder may crash: it is replaced within ttl + grace +
/// resolution + poll (+ the request round trips, a tick each here).
#[derive(Clone, Debug)]
pub struct Liveness(pub LeaseModel);

impl Model for Liveness {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        self.0.init_states()
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let mut all = vec![];
        self.0.actions(s, &mut all);
        // Only the holder crashes, once; the network is reliable and prompt (everything due
        // happens before time moves on); nobody releases.
        all.retain(|a| match a {
            Action::Crash(c) => s.crashed_holding_at.is_none() && self.0.believes(s, *c),
            Action::Release(_)
            | Action::Fail(_)
            | Action::LoseReply(_)
            | Action::Timeout(_)
            | Action::Delay(_)
            | Action::DelayAnswer(_)
            | Action::Break => false,
            _ => true,
        });
        actions.extend(all);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.0.next_state(last, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![Property::always(
            "a crashed holder is replaced within the bound",
            |m: &Liveness, s: &State| {
                let t = m.0.timing();
                let bound =
                    (t.ttl + t.grace_for(t.ttl) + t.resolution + t.poll).as_secs() as u32 + 1;
                let Some(crash) = s.crashed_holding_at else {
                    return true;
                };
                // The bound counts from the dead holder's last write that landed: a renewal it
                // sent before crashing may land after the crash, and nobody can tell it from a
                // live one.
                let crash = match &s.store {
                    Some(o) if record_holder(o) != "operator" && !s.acquired_after_crash => {
                        crash.max(o.modified)
                    }
                    _ => crash,
                };
                // Nobody still trying has been trying longer than the bound since the crash.
                s.clients.iter().all(|c| {
                    !matches!(c.phase, Phase::Acquiring(..)) || s.t <= c.since.max(crash) + bound
                })
            },
        )]
    }
}

/// The model with every feature off: two clients, one acquisition each, reliable network.
/// Each check below turns on what it is about; `LEASE_MODEL=deep` widens the bounds
/// (docs/verification.md has the figures of both).
pub fn base() -> LeaseModel {
    LeaseModel {
        clients: 2,
        max_time: 8,
        max_faults: 0,
        acquisitions: 1,
        breaks: 0,
        break_mode: BreakMode::WaitOutHolder,
        deletes: 0,
        grace: Duration::from_secs(1),
        drift: false,
        crashes: false,
        faulty: None,
        network_faults: true,
        only_delays: false,
        ttl_change: None,
        pid_namespaces: None,
        boots: vec![],
        date_ahead: 0,
        witnesses: false,
        preempting: None,
        yield_asks: 0,
    }
}

/// A holder changes its ttl to `ttl` while it holds (`Lease::set_ttl`: 4 s to 1 s shortens,
/// to 8 s lengthens), under one fault of its own (its write held up, landing late, its answer
/// lost); `deep` faults anyone's and adds crashes and drift. Checked by
/// `mutual_exclusion_when_a_holder_changes_its_ttl`; the shortening one without `deep` is also
/// the model of the `NoCapOnShorterTtl` negative control, which leans on that check for the
/// model's safety without the mutant rather than checking the same states twice.
pub fn ttl_change(ttl: Duration, deep: bool) -> LeaseModel {
    LeaseModel {
        ttl_change: Some(ttl),
        max_faults: 1,
        faulty: if deep { None } else { Some(0) },
        // 6 s: a waiter may take over a 4 s record from 5 s, a 1 s one from 2 s, and the
        // `NoCapOnShorterTtl` control's two holders come in 13 steps. At 7 s the two checks
        // walked 4.6 and 5.4 million states (184 s of the model step; 2.5 and 2.9 million,
        // 83 s, at 6 s: 2026-11-27). Deep goes to 10 s.
        max_time: if deep { 10 } else { 6 },
        crashes: deep,
        drift: deep,
        ..base()
    }
}

pub fn deep() -> bool {
    std::env::var("LEASE_MODEL").is_ok_and(|v| v == "deep")
}

pub fn check<M>(model: M, what: &str) -> usize
where
    M: Model + Send + Sync + 'static,
    M::State: std::fmt::Debug + std::hash::Hash + Send + Sync + Clone + PartialEq,
    M::Action: std::fmt::Debug + Send + Sync + Clone + PartialEq,
{
    let started = std::time::Instant::now();
    let checker = model.checker().threads(2).spawn_bfs().join();
    eprintln!(
        "{what}: {} states ({} unique) in {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        started.elapsed()
    );
    checker.assert_properties();
    checker.unique_state_count()
}

impl Net for LeaseModel {
    type State = State;
    type Req = Req;
    type Answer = Answer;

    fn faults(s: &mut State) -> &mut u8 {
        &mut s.faults
    }

    fn pending_req(&self, s: &State, c: usize) -> Option<Req> {
        LeaseModel::pending_req(self, s, c)
    }

    fn set_flight(&self, s: &mut State, c: usize, f: Flight) {
        LeaseModel::set_flight(self, s, c, f)
    }

    fn apply(&self, s: &mut State, _c: usize, req: &Req) -> Answer {
        apply(s, req)
    }

    fn answer(&self, s: &mut State, c: usize, a: Answer) {
        LeaseModel::answer(self, s, c, a)
    }

    fn unavailable() -> Answer {
        Answer::Unavailable
    }
}
