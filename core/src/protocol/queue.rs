//! Queued locks: who is granted what, in which order (docs/protocol.md §10).
//!
//! A queued lock is one record (format 2) at the lock's key that lists the *grants* (who holds
//! it now, in which mode and scope, with which fencing token) and the *queue* (who waits, in
//! arrival order). Every change to it is a conditional write by one participant: join the
//! queue, leave it (release, give up), or remove a participant proven gone. Whoever writes also
//! *settles* the record: it grants every waiter that may go now, in the same write — so a
//! release hands the lock over without a gap, with no race and no herd.
//!
//! Liveness is not in this record: each participant holds an ordinary lease (format 1) on its
//! own *session* key, renewed like any lease, so waiters' and holders' heartbeats never funnel
//! into one object. A participant is removed by someone else only once its session has been
//! taken over by the takeover rules of §4 (its deadline has surely passed), released, or seen
//! absent for its ttl plus grace. An entry holds only what deciding needs (id, mode, scope,
//! ttl, token): who the participant is (label, host, data) is in its session.
//!
//! The rule for who may go (see [`QueueRecord::settle`]): a waiter is granted when it fits
//! beside the current grants and no earlier waiter *competes* with it. Two requests compete
//! when their scopes overlap and either is exclusive, or the lock has a permit limit (then
//! every grant takes a permit an earlier waiter needs). A later request goes ahead of an earlier
//! one only when it takes nothing the earlier one needs, so nobody starves: what blocks a
//! waiter are grants made to requests that arrived before it, a finite set that only shrinks.
//!
//! **Capacity.** A join is accepted only if the record would still fit its limit with every
//! waiter granted the largest token and the counters at their largest ([`reserved_len`]): so
//! every later write that only shrinks the record or settles it (a leave, a removal, a break, a
//! change of permits) fits, and a lock can never be stranded by its own size.
//!
//! **Evolution** ([`classify`]): a record of a newer format, or one that lists a mode, a scope
//! kind or a required feature this version does not know, is written by a newer version: it is
//! reported as [`Classified::Newer`] and never taken over or written over.
//!
//! Everything here is pure; the machines that use it are [`waiter`], [`holder`] and
//! [`change`], and the drivers `core/src/queue.rs` and `core/src/lease.rs`.
//!
//! [`reserved_len`]: QueueRecord::reserved_len

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::session::{shared_session_key, valid_prefix, SharedId};
use crate::error::{Error, ErrorKind, Result};
pub use crate::scope::{Mode, Scope, MAX_PERMITS};
use crate::store::Get;

pub mod change;
pub mod holder;
pub mod preemption;
pub mod waiter;
pub mod yield_request;

pub use preemption::{PreemptedGrant, Preemption};

pub use yield_request::{OwnAsk, YieldAsk, YieldRequest, YieldRequested, YIELD_FEATURE};

/// The format of a queued lock's record.
pub const QUEUE_FORMAT: u32 = 2;

/// The largest record of a queued lock. A lease record's limit is 64 KiB; a queued lock lists
/// every participant, so it may be larger: about 2,500 participants over the whole lock.
pub const MAX_QUEUE_RECORD_LEN: usize = 256 * 1024;

/// The longest wake address an entry may carry (`udp:` and an IPv6 address with its port fit).
pub const MAX_WAKE_LEN: usize = 64;

/// The features (`requires`) this version knows. A record that requires another one was
/// written by a newer version (docs/protocol.md §10, "Evolution").
const KNOWN_FEATURES: [&str; 3] = [PRIORITY_FEATURE, SESSION_FEATURE, YIELD_FEATURE];

/// The feature a record requires while any entry carries a priority or a bypass count: an
/// older writer would settle it in join order and drop both (docs/protocol.md §10,
/// "Priorities").
pub const PRIORITY_FEATURE: &str = "priority";

/// The lowest and highest priority a request may carry (defined with the other bounds of what
/// a request asks, in `scope`).
pub use crate::scope::{MAX_PRIORITY, MIN_PRIORITY};

/// How many later-joined competing waiters may be granted before a waiter: at this many it is
/// *due* and goes first (docs/protocol.md §10, "Priorities": bounded bypass).
pub const MAX_BYPASS: u32 = 8;

/// The feature a record requires while it lists an entry attached to a shared session: a
/// version that does not know it would check `KEY.q/ID`, find nothing, and after ttl + grace
/// remove a live grant (docs/protocol.md §10, "Shared sessions", issue 24).
pub const SESSION_FEATURE: &str = "session";

/// The key of participant `id`'s own session lease for the lock at `key` (a per-grant session;
/// an entry attached to a shared session names another: [`Entry::session_key`]).
pub fn session_key(key: &str, id: &str) -> String {
    format!("{key}.q/{id}")
}

/// One participant: a grant (with its token) or a waiter (without). Only what deciding needs:
/// who the participant is (label, host, pid, data, when it joined) is in its session's record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Entry {
    /// Names the participant and its session key ([`session_key`]).
    pub id: String,
    #[serde(default, skip_serializing_if = "is_exclusive")]
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Scope::is_whole")]
    pub scope: Scope,
    /// The ttl of its session lease: how long to wait it out.
    pub ttl_ms: u64,
    /// The fencing token of its grant; `None` while it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// Attached to a shared session (issue 24): the prefix under which it lives (`""`: the
    /// store's root); the id is then `SID.N` ([`SharedId`]). `None`: its own session at
    /// `KEY.q/ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Where the participant can be woken when a write grants it: `udp:IP:PORT`
    /// (docs/protocol.md §10, "Wake hints"). It decides nothing and carries no authority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<String>,
    /// Higher goes first among competing waiters (docs/protocol.md §10, "Priorities"); 0 (the
    /// default) is omitted. Dropped at the grant: it orders only who is granted next.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub priority: i32,
    /// How many later-joined competing waiters were granted while this one waited (at most
    /// [`MAX_BYPASS`]); 0 is omitted, and it is dropped at the grant.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub passed: u32,
}

fn is_exclusive(m: &Mode) -> bool {
    *m == Mode::Exclusive
}

fn is_zero_i32(n: &i32) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl Entry {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its place in a shared session (`None`: it has its own session).
    pub fn shared(&self) -> Option<SharedId> {
        self.session
            .as_ref()
            .and_then(|_| SharedId::parse(&self.id))
    }

    /// The holder id of its session's record while its owner holds it: a shared session's id
    /// (its owner's), or its own id. A session held by another id was written by a checker
    /// that took it for gone.
    pub fn session_holder(&self) -> String {
        self.shared().map_or_else(|| self.id.clone(), |s| s.sid)
    }

    /// The key of the session that shows whether this participant is alive, for the lock at
    /// `key`: its shared session's, or its own (`KEY.q/ID`).
    pub fn session_key(&self, key: &str) -> String {
        match (&self.session, self.shared()) {
            (Some(prefix), Some(shared)) => shared_session_key(prefix, &shared.sid),
            _ => session_key(key, &self.id),
        }
    }

    /// Where to send this participant a wake hint, if it gave an address this version would
    /// have written (at most [`MAX_WAKE_LEN`] bytes); anything else is ignored.
    pub fn wake_hint(&self) -> Option<&str> {
        self.wake.as_deref().filter(|w| w.len() <= MAX_WAKE_LEN)
    }

    /// Whether this entry uses the priority feature (a priority, or a bypass count).
    fn uses_priority(&self) -> bool {
        self.priority != 0 || self.passed != 0
    }
}

/// A queued lock's record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QueueRecord {
    pub format: u32,
    /// The highest fencing token handed out (or the floor the record started above).
    pub epoch: u64,
    /// Grows on every write, so no two writes carry the same bytes (no ABA on S3's MD5 ETags).
    pub rev: u64,
    /// At most this many grants overlap; `None`: no limit for shared grants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// Features a reader must know to decide from this record ([`PRIORITY_FEATURE`] while any
    /// entry carries a priority; see [`classify`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// Who holds it now, in the order granted.
    #[serde(default)]
    pub grants: Vec<Entry>,
    /// Who waits, in arrival order.
    #[serde(default)]
    pub queue: Vec<Entry>,
    /// The standing request to the holders it names to step aside (docs/protocol.md §10,
    /// "Yield on request"); absent in every record without one.
    #[serde(default, rename = "yield", skip_serializing_if = "Option::is_none")]
    pub yield_request: Option<YieldRequest>,
    /// The latest preemption that removed grants (docs/protocol.md §10, "Preemption of a
    /// queued lock"): their holders learn from it who took their grant; absent until one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted: Option<Preemption>,
}

/// Where a participant stands in a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    Granted {
        token: u64,
    },
    Waiting {
        /// How many waiters are ahead of it in settling order ([`QueueRecord::order`]).
        ahead: usize,
        /// How many of those compete with it (must be granted before it).
        competing: usize,
        /// Whose sessions it checks for liveness: the grants that keep it waiting when no
        /// earlier waiter competes with it (it is at the head of its line), else the nearest
        /// earlier waiter that competes with it.
        blockers: Vec<Entry>,
    },
    Absent,
}

/// A change of a queued lock's record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Change {
    /// Join the queue (nothing if already in the record).
    Join(Entry),
    /// Leave it, granted or waiting (nothing if absent).
    Leave(String),
    /// Set the lock's permits (`None`: no limit); grants already made stay.
    SetPermits(Option<u32>),
    /// Ask the grants in the way to step aside (nothing if the same request stands, or
    /// nothing is in the way; docs/protocol.md §10, "Yield on request").
    Yield(YieldAsk),
    /// Take the lock at once: remove the grants in the way of this exclusive request and grant
    /// it ahead of the waiters (nothing if it is granted already; docs/protocol.md §10,
    /// "Preemption").
    Preempt(Entry),
}

impl Change {
    /// Whether this change can make the record larger (a join, a yield request).
    pub fn grows(&self) -> bool {
        matches!(
            self,
            Change::Join(_) | Change::Yield(_) | Change::Preempt(_)
        )
    }
}

/// What an object at a lock's key is, to a reader of this version.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // one per read, moved at once
pub enum Classified {
    /// A queued lock's record.
    Queue(QueueRecord),
    /// Written by a newer version: `what` names what this version does not know ("format 3",
    /// "mode \"intent\""). Never taken over or written over.
    Newer(String),
    /// Says it is a queued lock's record (format 2) but does not parse: corrupt.
    Corrupt(String),
    /// Anything else: a lease record (format 1), or something no version wrote; the lease
    /// record's parser judges it.
    Other,
}

/// Classify a stored object.
pub fn classify(bytes: &[u8]) -> Classified {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Classified::Other;
    };
    let Some(format) = value.get("format").and_then(serde_json::Value::as_u64) else {
        return Classified::Other;
    };
    if format > QUEUE_FORMAT as u64 {
        return Classified::Newer(format!("format {format}"));
    }
    if format != QUEUE_FORMAT as u64 {
        return Classified::Other;
    }
    if let Some(what) = newer_part(&value) {
        return Classified::Newer(what);
    }
    match serde_json::from_value::<QueueRecord>(value) {
        Ok(r) => match r.check() {
            Ok(r) => Classified::Queue(r),
            Err(reason) => Classified::Corrupt(reason),
        },
        Err(e) => Classified::Corrupt(format!("queued lock record does not parse: {e}")),
    }
}

/// A part of a format-2 record that only a newer version writes: a required feature, a mode or
/// a kind of scope this version does not know.
fn newer_part(value: &serde_json::Value) -> Option<String> {
    let strings = |v: Option<&serde_json::Value>| -> Vec<String> {
        v.and_then(serde_json::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    if let Some(f) = strings(value.get("requires"))
        .into_iter()
        .find(|f| !KNOWN_FEATURES.contains(&f.as_str()))
    {
        return Some(format!("feature {f:?}"));
    }
    let entries = ["grants", "queue"]
        .iter()
        .filter_map(|k| value.get(*k).and_then(serde_json::Value::as_array))
        .flatten();
    for e in entries {
        if let Some(mode) = e.get("mode").and_then(serde_json::Value::as_str) {
            if !["exclusive", "shared"].contains(&mode) {
                return Some(format!("mode {mode:?}"));
            }
        }
        match e.get("scope") {
            Some(serde_json::Value::Object(o)) => {
                if let Some(kind) = o.keys().find(|k| !["path", "range"].contains(&k.as_str())) {
                    return Some(format!("scope kind {kind:?}"));
                }
            }
            Some(serde_json::Value::String(s)) if s != "whole" => {
                return Some(format!("scope kind {s:?}"));
            }
            _ => {}
        }
    }
    None
}

/// What a read of a lock's key shows, classified ([`classify`]); `None` for an absent key or an
/// unchanged one (304), or an object too large to read (the lease parser judges its size).
pub fn classify_get(get: &Get) -> Option<Classified> {
    match get {
        Get::Found(obj) => Some(classify(obj.bytes.as_deref()?)),
        _ => None,
    }
}

/// The typed error for a record written by a newer version.
pub fn newer_error(url: &str, what: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "{url} was written by a newer version of lease ({what}, which this version {} does \
             not know): it is left as it is; upgrade this client (every client of a lock must \
             know what any of them writes)",
            crate::VERSION
        ),
    )
    .with_lease(url)
}

impl QueueRecord {
    /// A new record above every token that can have been handed out (`floor`).
    pub fn new(floor: u64, permits: Option<u32>) -> QueueRecord {
        QueueRecord {
            format: QUEUE_FORMAT,
            epoch: floor,
            rev: 0,
            permits,
            requires: Vec::new(),
            grants: Vec::new(),
            queue: Vec::new(),
            yield_request: None,
            preempted: None,
        }
    }

    /// This record made again where it was deleted: the same grants and waiters, tokens above
    /// `floor` (every token that can have been handed out since this version was read).
    pub fn restored(&self, floor: u64) -> QueueRecord {
        QueueRecord {
            epoch: self.epoch.max(floor),
            rev: self.rev + 1,
            ..self.clone()
        }
    }

    fn check(self) -> std::result::Result<QueueRecord, String> {
        let all = self.grants.iter().chain(&self.queue);
        if all.clone().any(|e| e.id.is_empty() || e.ttl_ms == 0) {
            return Err("queued lock record lists a participant without id or ttl".into());
        }
        // A shared entry names a key a checker reads and may write `released`: only a
        // `….lease-sessions/<32 hex>` one.
        if let Some(e) = all.clone().find(|e| {
            e.session
                .as_ref()
                .is_some_and(|p| !valid_prefix(p) || e.shared().is_none())
        }) {
            return Err(format!(
                "queued lock record lists a participant on a shared session with an id ({:?}) \
                 or a prefix that no version writes",
                e.id
            ));
        }
        if all.clone().any(|e| e.session.is_some())
            && !self.requires.iter().any(|f| f == SESSION_FEATURE)
        {
            return Err(format!(
                "queued lock record lists a participant on a shared session without requiring \
                 {SESSION_FEATURE:?}"
            ));
        }
        if self.grants.iter().any(|g| g.token.is_none()) {
            return Err("queued lock record lists a grant without a token".into());
        }
        Ok(self)
    }

    pub fn to_bytes(&self) -> Bytes {
        serde_json::to_vec(self)
            .expect("a queue record serializes")
            .into()
    }

    /// The most bytes this record can take without another join: every participant granted
    /// the largest token, the counters and permits at their largest. A write that only leaves,
    /// removes, breaks, settles or sets permits never makes a record larger than this.
    pub fn reserved_len(&self) -> usize {
        let mut worst = self.clone();
        worst.epoch = u64::MAX;
        worst.rev = u64::MAX;
        worst.permits = Some(u32::MAX);
        // In one list: the separators are then the most there can be.
        worst.grants.append(&mut worst.queue);
        // Bypass counts only grow where priorities differ: then each may reach the bound.
        let priorities = worst.grants.iter().any(Entry::uses_priority);
        for e in &mut worst.grants {
            e.token = Some(u64::MAX);
            if priorities {
                e.passed = e.passed.max(bypass_limit());
            }
        }
        worst.note_features();
        worst.to_bytes().len()
    }

    /// The record after `change`, settled with tokens above `floor`; `None` when it changes
    /// nothing (already joined, already gone, the same permits). A join that could make a later
    /// write overflow `max_len` is refused with [`ErrorKind::QueueFull`]; no other change can
    /// overflow. Only a write conditional on the version read may carry it (see [`settle`]).
    ///
    /// [`settle`]: QueueRecord::settle
    pub fn apply(
        &self,
        change: &Change,
        max_len: usize,
        floor: u64,
    ) -> Result<Option<QueueRecord>> {
        Ok(self.changed(change, max_len)?.map(|mut next| {
            if let Change::Preempt(entry) = change {
                next.grant_preemptor(entry.id(), floor);
            }
            next.settle(floor);
            next
        }))
    }

    /// The record after `change`, granting nobody: what a write that makes the record where
    /// none is (`Create`) carries. Such a write may land long after it was sent — after a
    /// record made meanwhile by someone else handed out tokens and was deleted — so its clock
    /// reading proves nothing about the tokens handed out before it landed (docs/protocol.md
    /// §10, "Tokens"). The next conditional write settles it ([`settled`]).
    ///
    /// [`settled`]: QueueRecord::settled
    pub fn changed(&self, change: &Change, max_len: usize) -> Result<Option<QueueRecord>> {
        let mut next = self.clone();
        match change {
            Change::Join(entry) => {
                if self.find(entry.id()).is_some() {
                    return Ok(None);
                }
                let mut entry = entry.clone();
                entry.token = None;
                entry.passed = 0;
                next.queue.push(entry);
                // Room for every later write that only shrinks or settles the record.
                let needed = if super::mutants::on(super::mutants::Mutant::QueueJoinIgnoresReserve)
                {
                    next.to_bytes().len()
                } else {
                    next.reserved_len()
                };
                if needed > max_len {
                    return Err(full_error(self, needed, max_len));
                }
            }
            Change::Leave(id) => {
                let before = next.grants.len() + next.queue.len();
                next.grants.retain(|e| e.id() != id);
                next.queue.retain(|e| e.id() != id);
                if next.grants.len() + next.queue.len() == before {
                    return Ok(None);
                }
            }
            Change::Preempt(entry) => {
                if !next.preempt_for(entry) {
                    return Ok(None);
                }
                // The same room rule as a join's.
                let needed = next.reserved_len();
                if needed > max_len {
                    return Err(full_error(self, needed, max_len));
                }
            }
            Change::SetPermits(permits) => {
                if *permits == self.permits {
                    return Ok(None);
                }
                next.permits = *permits;
            }
            Change::Yield(ask) => {
                let Some(request) = self.asked(ask)? else {
                    return Ok(None);
                };
                next.yield_request = Some(request);
                // The same room rule as a join's: every later write that only shrinks or
                // settles must still fit.
                let needed = next.reserved_len();
                if needed > max_len {
                    return Err(Error::new(
                        ErrorKind::QueueFull,
                        format!(
                            "the lock's record has no room for this yield request: it would \
                             need up to {needed} bytes of its {max_len}-byte limit; nothing was \
                             written: shorten the reason, or try again once some have left"
                        ),
                    ));
                }
            }
        }
        next.rev += 1;
        next.note_features();
        Ok(Some(next))
    }

    /// This record settled with tokens above `floor`, if that grants anyone (a record made
    /// where none is, or made again, lists its waiters unsettled: its first reader settles it).
    pub fn settled(&self, floor: u64) -> Option<QueueRecord> {
        let mut next = self.clone();
        next.settle(floor);
        if next.grants.len() == self.grants.len() {
            return None;
        }
        next.rev += 1;
        Some(next)
    }

    /// Grant every waiter that may go now, in settling order ([`order`]): one that fits beside
    /// the grants and that no waiter before it in that order competes with. Each grant gets the
    /// next token, above `floor` too: the writer's clock in ms (or the store's), read after the
    /// read that showed this record. Carried by a write conditional on that version, it lands
    /// only while this record exists, so after every earlier record's deletion, and by then the
    /// clock has passed every token those records handed out (assumption 4 of docs/model.md):
    /// tokens never repeat, whatever is deleted and whatever `Create` lands late **(changed,
    /// issue 22)**.
    ///
    /// A grant that makes a waiter due ends its pass, and the next pass orders that waiter
    /// first (docs/protocol.md §10, "Priorities"); a pass that ends by itself has seen every
    /// waiter with what it knows at the end, so nothing more can go. Each pass that ends early
    /// has granted someone: at most one pass more than there are waiters.
    ///
    /// [`order`]: QueueRecord::order
    pub fn settle(&mut self, floor: u64) {
        if !self.queue.iter().any(Entry::uses_priority) && self.yield_to().is_none() {
            // Without priorities nobody is passed over, so nobody becomes due: one pass.
            self.settle_pass(floor);
        } else {
            for _ in 0..=self.queue.len() {
                if !self.settle_pass(floor) {
                    break;
                }
            }
        }
        // After the passes, which went by its `to`: the write that ends its last grant ends it.
        self.prune_yield();
        self.note_features();
    }

    /// One pass over the waiters in settling order; whether it ended early, at a grant that
    /// made a waiter due (then another pass may grant more).
    fn settle_pass(&mut self, floor: u64) -> bool {
        let limit = bypass_limit();
        let mut granted = vec![false; self.queue.len()];
        // Considered in this pass and not granted: they go before the rest.
        let mut waiting: Vec<usize> = Vec::new();
        let mut ended_early = false;
        for i in self.order() {
            let request = &self.queue[i];
            let overtakes = waiting
                .iter()
                .any(|&w| self.competes(&self.queue[w], request))
                && !super::mutants::on(super::mutants::Mutant::QueueOvertakes);
            if overtakes || !self.fits(request) {
                waiting.push(i);
                continue;
            }
            self.epoch = self.epoch.max(floor) + 1;
            let mut grant = request.clone();
            grant.token = Some(self.epoch);
            // They ordered only who is granted next.
            grant.priority = 0;
            grant.passed = 0;
            self.grants.push(grant);
            granted[i] = true;
            // Every earlier competing waiter still waiting was passed over once more.
            let passed_over: Vec<usize> = granted[..i]
                .iter()
                .enumerate()
                .filter(|&(j, done)| !done && self.competes(&self.queue[j], &self.queue[i]))
                .map(|(j, _)| j)
                .collect();
            // A waiter that reaches the bound is due: the next pass orders it first (the order
            // is only ever recomputed, so ending early more often would cost passes, not
            // change the record).
            let mut newly_due = false;
            for j in passed_over {
                if super::mutants::on(super::mutants::Mutant::QueueBypassNotCounted) {
                    break;
                }
                let passed = &mut self.queue[j].passed;
                *passed = passed.saturating_add(1);
                newly_due |= *passed == limit;
            }
            if newly_due {
                ended_early = true;
                break;
            }
        }
        let mut at = 0;
        self.queue.retain(|_| {
            at += 1;
            !granted[at - 1]
        });
        ended_early
    }

    /// The order in which waiters are considered for a grant, as indexes into the queue
    /// (arrival order): *due* waiters first, in arrival order; then the rest by priority,
    /// higher first, then arrival. A waiter is due when it was passed over [`MAX_BYPASS`]
    /// times, or an earlier competing waiter of its priority is (so that FIFO within a priority
    /// holds whoever is due): no later competing waiter goes before a due one, so each is
    /// passed over at most that many times (docs/protocol.md §10, "Priorities").
    pub fn order(&self) -> Vec<usize> {
        let n = self.queue.len();
        let mut order: Vec<usize> = (0..n).collect();
        let to = self.yield_to();
        if !self.queue.iter().any(Entry::uses_priority) && to.is_none() {
            return order;
        }
        let limit = bypass_limit();
        let mut due: Vec<bool> = self.queue.iter().map(|e| e.passed >= limit).collect();
        // From the latest back, so that it passes on through a chain of one priority.
        for j in (0..n).rev() {
            if !due[j] || super::mutants::on(super::mutants::Mutant::QueueDueNotInherited) {
                continue;
            }
            let later = &self.queue[j];
            for (i, e) in self.queue[..j].iter().enumerate() {
                if e.priority == later.priority && self.competes(e, later) {
                    due[i] = true;
                }
            }
        }
        // The waiter a yield request hands over to is due, alone: see `yield_request`.
        if let Some(i) = self.queue.iter().position(|e| Some(e.id()) == to) {
            due[i] = true;
        }
        order.sort_by_key(|&i| {
            let rank = if due[i] {
                i64::MIN
            } else {
                -i64::from(self.queue[i].priority)
            };
            (rank, i)
        });
        order
    }

    /// List [`PRIORITY_FEATURE`] in `requires` while, and only while, some entry uses it, and
    /// [`SESSION_FEATURE`] while, and only while, an entry is attached to a shared session, and
    /// [`YIELD_FEATURE`] while a yield request names a `to`: an older version must refuse the
    /// record then, and may use the lock again once none is.
    fn note_features(&mut self) {
        let all = || self.grants.iter().chain(&self.queue);
        let priority = all().any(Entry::uses_priority);
        let shared = all().any(|e| e.session.is_some());
        let hands_over = self.yield_request.as_ref().is_some_and(|y| y.to.is_some());
        self.requires
            .retain(|f| f != PRIORITY_FEATURE && f != SESSION_FEATURE && f != YIELD_FEATURE);
        if priority {
            self.requires.push(PRIORITY_FEATURE.to_string());
        }
        if shared {
            self.requires.push(SESSION_FEATURE.to_string());
        }
        if hands_over {
            self.requires.push(YIELD_FEATURE.to_string());
        }
    }

    /// Whether `request` may be granted beside the current grants.
    pub fn fits(&self, request: &Entry) -> bool {
        self.grants.iter().all(|g| !self.blocks(g, request))
            && self.permits.is_none_or(|n| {
                let overlapping = self
                    .grants
                    .iter()
                    .filter(|g| g.scope.overlaps(&request.scope))
                    .count();
                overlapping < n as usize
            })
    }

    /// Whether grant `g` alone keeps `request` waiting, or takes one of the permits it needs.
    fn blocks(&self, g: &Entry, request: &Entry) -> bool {
        if super::mutants::on(super::mutants::Mutant::QueueIgnoresModes) {
            return false;
        }
        g.scope.overlaps(&request.scope)
            && (g.mode == Mode::Exclusive || request.mode == Mode::Exclusive)
    }

    /// Whether granting `later` could delay `earlier`: their scopes overlap and either is
    /// exclusive, or every grant takes a permit.
    pub fn competes(&self, earlier: &Entry, later: &Entry) -> bool {
        earlier.scope.overlaps(&later.scope)
            && (earlier.mode == Mode::Exclusive
                || later.mode == Mode::Exclusive
                || self.permits.is_some())
    }

    /// The grants of `self` that `before` did not list: whom a write of `self` over `before`
    /// grants, and so whom the writer wakes, in this process and by a hint, once it landed
    /// (docs/protocol.md §10, "Wake hints"). `None`: no record before (a `Create` grants
    /// nobody, but a record written without one read is taken as granting all it lists).
    pub fn newly_granted(&self, before: Option<&QueueRecord>) -> Vec<&Entry> {
        self.grants
            .iter()
            .filter(|g| before.is_none_or(|b| !b.grants.iter().any(|o| o.id() == g.id())))
            .collect()
    }

    /// The participant `id`, granted or waiting.
    pub fn find(&self, id: &str) -> Option<&Entry> {
        self.grants.iter().chain(&self.queue).find(|e| e.id() == id)
    }

    /// The grants that conflict with `request` (overlapping, and either exclusive or taking a
    /// permit it needs): who is in its way, for messages.
    pub fn in_the_way(&self, request: &Entry) -> Vec<&Entry> {
        self.grants
            .iter()
            .filter(|g| {
                self.blocks(g, request)
                    || (self.permits.is_some() && g.scope.overlaps(&request.scope))
            })
            .collect()
    }

    /// Where participant `id` stands.
    pub fn position(&self, id: &str) -> Position {
        if let Some(g) = self.grants.iter().find(|g| g.id() == id) {
            return Position::Granted {
                token: g.token.unwrap_or(self.epoch),
            };
        }
        let Some(me) = self.queue.iter().position(|e| e.id() == id) else {
            return Position::Absent;
        };
        let request = &self.queue[me];
        // Ahead of it: those before it in settling order (arrival order without priorities).
        let order = self.order();
        let at = order.iter().position(|&i| i == me).unwrap_or(me);
        let before = || order[..at].iter().map(|&i| &self.queue[i]);
        let competing = before()
            .filter(|earlier| self.competes(earlier, request))
            .count();
        let nearest_competitor = before()
            .rev()
            .find(|earlier| self.competes(earlier, request));
        let blockers = match nearest_competitor {
            // At the head of its line: the grants in its way.
            None => self.in_the_way(request).into_iter().cloned().collect(),
            // Behind another: that one. Were only heads to check, a dead head waiting behind
            // a dead holder would keep everyone behind it waiting forever (found by the model
            // checker).
            Some(_) if super::mutants::on(super::mutants::Mutant::QueueOnlyHeadsCheck) => {
                Vec::new()
            }
            Some(earlier) => vec![earlier.clone()],
        };
        Position::Waiting {
            ahead: at,
            competing,
            blockers,
        }
    }

    /// Check that a request asking for `permits` may use this lock.
    pub fn check_permits(&self, url: &str, permits: Option<u32>) -> Result<()> {
        let how = format!(
            "to change a lock's permits while it is in use, run `lease permits {url} N` \
             (`Client::set_permits`)"
        );
        match (permits, self.permits) {
            (None, _) => Ok(()),
            (Some(a), Some(b)) if a == b => Ok(()),
            (Some(a), Some(b)) => Err(Error::invalid(format!(
                "{url} is a semaphore of {b} permits, not {a}: every participant must ask for \
                 the same number (or none); {how}"
            ))),
            (Some(a), None) => Err(Error::invalid(format!(
                "{url} has no permit limit, but this request asked for {a} permits: a lock's \
                 permits are set by whoever creates it; {how}"
            ))),
        }
    }
}

/// Yield requests (docs/protocol.md §10, "Yield on request"; the types in [`yield_request`]).
impl QueueRecord {
    /// The request `ask` makes of this record, or `None` when it changes nothing (the same
    /// request is there already, or no grant is in the way). A later request replaces the
    /// standing one and keeps the union of their tokens (both asked those grants).
    pub(super) fn asked(&self, ask: &YieldAsk) -> Result<Option<YieldRequest>> {
        ask.check()?;
        let waiter = |id: &str| self.queue.iter().find(|e| e.id() == id);
        let to = ask
            .to
            .as_deref()
            .map(|to| self.waiter_named(to))
            .transpose()?;
        let tokens: Vec<u64> = match (to, waiter(&ask.by)) {
            (Some(w), _) => self.in_the_way(w).iter().filter_map(|g| g.token).collect(),
            (None, Some(me)) => self.in_the_way(me).iter().filter_map(|g| g.token).collect(),
            (None, None) => self.grants.iter().filter_map(|g| g.token).collect(),
        };
        if tokens.is_empty() {
            return Ok(None);
        }
        let mut all = tokens;
        if let Some(standing) = &self.yield_request {
            all.extend(standing.tokens.iter().copied().filter(|t| self.granted(*t)));
        }
        all.sort_unstable();
        all.dedup();
        let request = YieldRequest {
            tokens: all,
            by: ask.by.clone(),
            to: to.map(|w| w.id.clone()),
            reason: ask.reason.clone(),
        };
        if self.yield_request.as_ref() == Some(&request) {
            return Ok(None);
        }
        Ok(Some(request))
    }

    /// The waiter `to` names: its id, or a prefix of one id only (`lease status` shows the
    /// first 8 hex digits).
    fn waiter_named(&self, to: &str) -> Result<&Entry> {
        if let Some(w) = self.queue.iter().find(|e| e.id() == to) {
            return Ok(w);
        }
        let mut matching = self.queue.iter().filter(|e| e.id().starts_with(to));
        match (matching.next(), matching.next()) {
            (Some(w), None) => Ok(w),
            (Some(_), Some(_)) => Err(Error::new(
                ErrorKind::Invalid,
                format!("{to:?} is the start of more than one waiter's id: give more of it"),
            )),
            (None, _) => Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "no participant {to:?} waits for this lock: `to` must name a waiter (see \
                     `lease status`)"
                ),
            )),
        }
    }

    /// The standing request that names the grant of `token`.
    pub fn yield_for(&self, token: u64) -> Option<&YieldRequest> {
        if super::mutants::on(super::mutants::Mutant::YieldOutlivesTenure) {
            return self.yield_request.as_ref();
        }
        self.yield_request.as_ref().filter(|y| y.names(token))
    }

    /// The waiter the standing request hands over to, while it waits.
    pub fn yield_to(&self) -> Option<&str> {
        let to = self.yield_request.as_ref()?.to.as_deref()?;
        self.queue.iter().any(|e| e.id() == to).then_some(to)
    }

    /// Drop from the request the tokens no longer granted, and the request with the last of
    /// them; drop its `to` once that one no longer waits (granted, or gone).
    pub(super) fn prune_yield(&mut self) {
        if super::mutants::on(super::mutants::Mutant::YieldOutlivesTenure) {
            return;
        }
        let Some(mut request) = self.yield_request.take() else {
            return;
        };
        request.tokens.retain(|t| self.granted(*t));
        if request.tokens.is_empty() {
            return;
        }
        let waits = request
            .to
            .as_deref()
            .is_some_and(|to| self.queue.iter().any(|e| e.id() == to));
        if !waits {
            request.to = None;
        }
        self.yield_request = Some(request);
    }

    /// Whether a grant of `token` is listed.
    fn granted(&self, token: u64) -> bool {
        self.grants.iter().any(|g| g.token == Some(token))
    }
}

/// Preemption (docs/protocol.md §10, "Preemption of a queued lock"; the types in [`preemption`]).
impl QueueRecord {
    /// Remove from the queue the preempting `request` (a retried write may find its earlier
    /// join there) and every grant in its way, name them as the latest preemption (when it
    /// removes any), and put the request first in the queue for
    /// [`grant_preemptor`](QueueRecord::grant_preemptor). `false`: it is granted already.
    pub(super) fn preempt_for(&mut self, request: &Entry) -> bool {
        if self.grants.iter().any(|g| g.id() == request.id()) {
            return false;
        }
        self.queue.retain(|e| e.id() != request.id());
        let removed: Vec<PreemptedGrant> =
            if super::mutants::on(super::mutants::Mutant::QueuePreemptKeepsGrants) {
                Vec::new()
            } else {
                self.in_the_way(request)
                    .iter()
                    .map(|g| PreemptedGrant {
                        id: g.id().to_string(),
                        token: g.token.unwrap_or(self.epoch),
                    })
                    .collect()
            };
        self.grants
            .retain(|g| !removed.iter().any(|r| r.id == g.id()));
        if !removed.is_empty() {
            self.preempted = Some(Preemption {
                by: request.id().to_string(),
                // Set with its grant, in `grant_preemptor`.
                token: 0,
                removed,
            });
        }
        let mut entry = request.clone();
        entry.token = None;
        entry.passed = 0;
        self.queue.insert(0, entry);
        true
    }

    /// Grant the preempting participant `id` (first in the queue, nothing in its way) with the
    /// next token above `floor`, before the other waiters are settled.
    pub(super) fn grant_preemptor(&mut self, id: &str, floor: u64) {
        let Some(at) = self.queue.iter().position(|e| e.id() == id) else {
            return;
        };
        let mut grant = self.queue.remove(at);
        self.epoch = self.epoch.max(floor) + 1;
        grant.token = Some(self.epoch);
        grant.priority = 0;
        grant.passed = 0;
        self.grants.push(grant);
        if let Some(p) = self.preempted.as_mut().filter(|p| p.by == id) {
            p.token = self.epoch;
        }
    }

    /// The preemption that removed the grant of `id` at `token`: the preemptor's id and token.
    pub fn preempted_by(&self, id: &str, token: u64) -> Option<(&str, u64)> {
        let p = self.preempted.as_ref()?;
        p.removed
            .iter()
            .any(|r| r.id == id && r.token == token)
            .then_some((p.by.as_str(), p.token))
    }
}

/// The bypass bound in force: [`MAX_BYPASS`], or a smaller one the model checker sets to reach
/// it in few steps (the rule's argument does not depend on its value).
fn bypass_limit() -> u32 {
    super::mutants::bypass_limit().unwrap_or(MAX_BYPASS)
}

/// The "queue full" error: what the limit is, and what to do.
fn full_error(r: &QueueRecord, needed: usize, max_len: usize) -> Error {
    Error::new(
        ErrorKind::QueueFull,
        format!(
            "the queue is full: {} participants hold or wait, and one more would need up to \
             {needed} bytes of the record's {max_len}-byte limit; nothing was written: try \
             again once some have left",
            r.grants.len() + r.queue.len()
        ),
    )
}

#[cfg(test)]
mod tests;
