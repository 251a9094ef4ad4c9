//! The owner's side of a shared session (docs/protocol.md §10, "Shared sessions", "The owner's
//! order of writes"): one session lease, renewed every `ttl/3`, whose record's `attached` set
//! says which of the owner's grants and waiters may be believed. Pure: no I/O, the time passed
//! in; the driver carries out what it says, and the model checker drives the same machine.
//!
//! - **Attach before joining.** [`Owner::attach`] hands out the next number (never reused); a
//!   write is then due at once, and every attachment waiting at that moment goes into that one
//!   write (a group commit). A number may be used in a join ([`Owner::may_join`]) only once a
//!   write whose set holds it is known to have landed: a checker that read the lock's record
//!   listing `SID.N` and then the session (rule 4) must find `N`, or it removes a live grant.
//! - **Believe** a grant while the session is believed and it is attached
//!   ([`Owner::believes`]); the lock's record confirms it besides, as for a per-grant session
//!   (`queue::holder::GrantHold`): the caller asks both.
//! - **Release one grant** ([`Owner::release`]): it stops being believed at once; its leave is
//!   sent, and kept pending (retried after each renewal that lands) until it is known done; its
//!   number is dropped from the set of the session's *next* write, which is not hastened for it.
//!   The detach may land before the leave: safe by rule 4, because its owner stopped believing
//!   the grant before any write without its number was made, and the number is never reused.
//! - **Loss of the session is loss of every grant**: a renewal that failed (taken over, broken,
//!   deleted) or a lapse ([`Owner::expire`]) ends the belief of every number handed out, each
//!   named in [`Lost`] so that the driver reports it through that grant's own loss channel. A
//!   lost session is never written again but for its tidying (`Hold::tidy`).
//! - **The last grant**: with nothing attached and no leave pending for `idle`, the session is
//!   released ([`Due::Release`]); [`Owner::close`] releases every grant at once, then the session.
//! - **The release and an attach exclude each other** ([`Owner::decide_release`]): the release
//!   is decided in one step, which checks again that it is due — an attach that came first
//!   cancelled it (something is attached) — and from then on every attach is refused
//!   ([`Refused::Released`]: the caller opens another session). Without it, an attach racing
//!   the driver's release (the per-process default session, released after one idle ttl) would
//!   take a number in a session whose next write is its release: its join could never be sent.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::clock::Instant;
use crate::error::Error;
use crate::protocol::hold::{after_write, Hold, LostReason, Next, Phase, Wrote};
use crate::protocol::mutants::{on, Mutant};
use crate::protocol::write::Written;
use crate::protocol::Entropy;
use crate::record::{Record, RecordState};
use crate::store::Cond;

use super::{Attached, SharedId, MAX_ATTACHED_LEN};

/// Where one number handed out stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attach {
    /// No landed write holds it yet: its join must not be sent.
    Pending,
    /// A landed write holds it: its join may be sent, and its grant believed.
    Landed,
}

/// Why an attachment was refused: the caller opens another session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refused {
    /// The session is not believed (lost, lapsed, closing or released).
    NotHeld,
    /// Its attached set would grow past [`MAX_ATTACHED_LEN`].
    Full,
    /// Its release is decided ([`Owner::decide_release`]: idle, or closed): no write of it will
    /// ever carry another number.
    Released,
}

/// A grant (or waiter) of this session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Member {
    /// The lock it joins.
    lock: String,
    state: Attach,
}

/// A leave to send: remove `id` from the lock's record at `lock` (done when that record no
/// longer lists it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Leave {
    pub n: u64,
    pub lock: String,
    pub id: String,
}

/// What the session should do at `now` ([`Owner::due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Due {
    /// Write the session ([`Owner::next_write`]): a renewal, or attachments waiting.
    Write,
    /// Release the session (nothing attached, no leave pending): `Hold::start_release` then
    /// `hold::begin_release` on [`Owner::hold_mut`], then delete it.
    Release,
    /// Nothing before `until` (unless something is attached, released or answered meanwhile).
    Sleep { until: Instant },
    /// A write is in flight: wait for its outcome.
    Wait,
    /// Past the deadline with no renewal landed: call [`Owner::expire`] (never renew it).
    Lapsed,
    /// Lost, released or being released: nothing more.
    Done,
}

/// The session lost, and every number that was handed out and not released: each one's grant
/// (or waiter) is lost for `reason`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lost {
    pub reason: LostReason,
    pub grants: Vec<u64>,
}

/// The outcome of a session write ([`Owner::wrote`]).
#[derive(Debug)]
pub enum Outcome {
    /// It landed: `attached` may now send their joins; `leaves` are pending still (retry them).
    Renewed {
        attached: Vec<u64>,
        leaves: Vec<Leave>,
    },
    /// Unknown: write again after a backoff (no later than the deadline). Nothing it carried is
    /// known to have landed.
    Retry(Error),
    /// The session is lost.
    Lost(Lost),
}

/// The owner's view of one shared session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    sid: String,
    /// The session lease; its record's `attached` is the set of its last landed write.
    hold: Hold,
    /// The next number to hand out: from 1, never reused.
    next: u64,
    members: BTreeMap<u64, Member>,
    /// The numbers of `members`: the set the next write carries.
    set: Attached,
    /// The longest text of `set` (normally [`MAX_ATTACHED_LEN`]).
    max_len: usize,
    /// Leaves not known done, by number.
    leaves: BTreeMap<u64, Leave>,
    /// The set of the write in flight (`None`: none in flight).
    in_flight: Option<Attached>,
    /// How long the session stays open with nothing attached (`None`: until closed).
    idle: Option<Duration>,
    /// Since when nothing has been attached and no leave pending (`None`: something is).
    idle_since: Option<Instant>,
    closing: bool,
    /// The release is decided ([`Owner::decide_release`]): nothing attaches any more.
    releasing: bool,
}

impl Owner {
    /// The session `sid`, opened as `hold` (its first write landed) at `now`.
    pub fn new(sid: &str, hold: Hold, idle: Option<Duration>, now: Instant) -> Owner {
        Owner {
            sid: sid.to_string(),
            hold,
            next: 1,
            members: BTreeMap::new(),
            set: Attached::default(),
            max_len: MAX_ATTACHED_LEN,
            leaves: BTreeMap::new(),
            in_flight: None,
            idle,
            idle_since: Some(now),
            closing: false,
            releasing: false,
        }
    }

    /// With another bound on the attached set's text (tests, and stores whose objects are
    /// smaller than a session record may be).
    pub fn with_max_attached(mut self, len: usize) -> Owner {
        self.max_len = len;
        self
    }

    pub fn sid(&self) -> &str {
        &self.sid
    }

    pub fn hold(&self) -> &Hold {
        &self.hold
    }

    /// For the session's release and tidying, which follow `hold`'s own rules.
    pub fn hold_mut(&mut self) -> &mut Hold {
        &mut self.hold
    }

    /// The entry id of number `n`: `SID.N`.
    pub fn id(&self, n: u64) -> String {
        SharedId {
            sid: self.sid.clone(),
            n,
        }
        .id()
    }

    /// Attach a grant (or waiter) of the lock at `lock` at `now`: its number. Its join waits
    /// until [`Owner::may_join`] says so.
    pub fn attach(&mut self, lock: &str, now: Instant) -> Result<u64, Refused> {
        if self.releasing && !on(Mutant::SessionAttachWhileReleasing) {
            return Err(Refused::Released);
        }
        if self.closing || !self.hold.believes(now) {
            return Err(Refused::NotHeld);
        }
        let n = self.next;
        self.set.insert(n);
        if self.set.text_len() > self.max_len {
            self.set.remove(n);
            return Err(Refused::Full);
        }
        self.next += 1;
        self.members.insert(
            n,
            Member {
                lock: lock.to_string(),
                state: Attach::Pending,
            },
        );
        self.idle_since = None;
        Ok(n)
    }

    /// Where number `n` stands (`None`: released, lost, or never handed out).
    pub fn state(&self, n: u64) -> Option<Attach> {
        self.members.get(&n).map(|m| m.state)
    }

    /// Whether a landed write holds number `n` (and it was not released since).
    fn attached(&self, n: u64) -> bool {
        match self.state(n) {
            Some(Attach::Landed) => true,
            Some(Attach::Pending) => on(Mutant::SessionJoinBeforeAttach),
            None => false,
        }
    }

    /// Whether the join of number `n` may be sent: a landed write holds it, and the session is
    /// believed at `now`.
    pub fn may_join(&self, n: u64, now: Instant) -> bool {
        self.attached(n) && self.hold.believes(now)
    }

    /// Whether the owner may believe number `n`'s grant at `now`, as far as the session goes:
    /// attached by a landed write and not released, and the session believed. (The lock's
    /// record must confirm the grant too.)
    pub fn believes(&self, n: u64, now: Instant) -> bool {
        self.attached(n) && (self.hold.believes(now) || on(Mutant::SessionBeliefOutlivesLoss))
    }

    /// Whether the session itself is believed at `now`.
    pub fn alive(&self, now: Instant) -> bool {
        self.hold.believes(now)
    }

    /// How many numbers are attached or attaching.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Release number `n` at `now`: it is not believed from now on; its leave (unless `joined`
    /// is false: no join of it was sent) is returned to send, and kept pending until
    /// [`Owner::left`]. Its number leaves the set of the next write. `None`: nothing to send.
    pub fn release(&mut self, n: u64, joined: bool, now: Instant) -> Option<Leave> {
        let member = match on(Mutant::SessionDetachWhileBelieved) {
            // Detached, and still believed.
            true => self.members.get(&n)?.clone(),
            false => self.members.remove(&n)?,
        };
        self.set.remove(n);
        let leave = joined.then(|| Leave {
            n,
            lock: member.lock,
            id: self.id(n),
        });
        if let Some(l) = &leave {
            self.leaves.insert(n, l.clone());
        }
        self.settle_idle(now);
        leave
    }

    /// The leave of number `n` is over: `done` (the record no longer lists it) or not (retried
    /// after the next renewal that lands, unless the session is closing: its release then
    /// proves the grant gone, rule 2).
    pub fn left(&mut self, n: u64, done: bool, now: Instant) {
        if done || self.closing {
            self.leaves.remove(&n);
        }
        self.settle_idle(now);
    }

    fn settle_idle(&mut self, now: Instant) {
        if self.members.is_empty() && self.leaves.is_empty() && self.idle_since.is_none() {
            self.idle_since = Some(now);
        }
    }

    /// Close the session at `now`: every number is released (their leaves are returned, for
    /// those `joined` says were sent); the session is released once no leave is pending.
    pub fn close(&mut self, now: Instant, joined: impl Fn(u64) -> bool) -> Vec<Leave> {
        self.closing = true;
        let numbers: Vec<u64> = self.members.keys().copied().collect();
        numbers
            .into_iter()
            .filter_map(|n| self.release(n, joined(n), now))
            .collect()
    }

    /// Whether the session's release is decided ([`Owner::decide_release`]).
    pub fn is_releasing(&self) -> bool {
        self.releasing
    }

    /// Decide the release [`Owner::due`] says is due at `now` (idle for its idle time, or
    /// closed with nothing pending): true when it is, and from then on every
    /// [`Owner::attach`] is refused ([`Refused::Released`]) and `due` keeps saying
    /// [`Due::Release`] until the release is begun (`hold::begin_release` on
    /// [`Owner::hold_mut`]). False when it is not due — an attach (or a leave) came first and
    /// cancelled it — or was decided already: the driver asks `due` again.
    ///
    /// The one step that makes "release because idle" and "attach" exclusive: the driver
    /// decides here, under the same lock as its attaches, before sending anything.
    pub fn decide_release(&mut self, now: Instant) -> bool {
        if self.releasing || self.due(now) != Due::Release {
            return false;
        }
        self.releasing = true;
        true
    }

    /// What to do at `now`.
    pub fn due(&self, now: Instant) -> Due {
        if self.hold.phase != Phase::Held {
            return Due::Done;
        }
        if now >= self.hold.deadline() {
            return Due::Lapsed;
        }
        // Decided: nothing is written but the release (an attachment can no longer land).
        if self.releasing {
            return Due::Release;
        }
        if self.in_flight.is_some() {
            return Due::Wait;
        }
        // Quiet (nothing attached, no leave pending) since `idle_since`: a closing session is
        // released at once, another after its idle time.
        let release_at = self.idle_since.and_then(|since| match self.closing {
            true => Some(since),
            false => self.idle.map(|idle| since + idle),
        });
        if release_at.is_some_and(|at| now >= at) {
            return Due::Release;
        }
        let attaching = self.members.values().any(|m| m.state == Attach::Pending);
        if attaching || now >= self.hold.renew_at() {
            return Due::Write;
        }
        let until = release_at.map_or(self.hold.renew_at(), |at| at.min(self.hold.renew_at()));
        Due::Sleep { until }
    }

    /// The session's next write at `now` (a renewal carrying the attached set), to send
    /// conditional on the version of its last landed one; `None` unless the session is
    /// believed (a lapsed session is never renewed: a checker may have removed its grants) and
    /// no write is in flight.
    pub fn next_write(
        &mut self,
        now: Instant,
        wall: SystemTime,
        entropy: &dyn Entropy,
    ) -> Option<(Record, Cond)> {
        if self.in_flight.is_some() || !self.hold.believes(now) {
            return None;
        }
        let (mut record, cond) = self.hold.next_write(RecordState::Held, wall, entropy)?;
        let set = self.set.clone();
        record.attached = Some(set.text());
        self.hold.sending(&record, now);
        self.in_flight = Some(set);
        Some((record, cond))
    }

    /// The outcome of the write of `record` (from [`Owner::next_write`]) known at `now`.
    pub fn wrote(
        &mut self,
        record: Record,
        outcome: Result<Written, Error>,
        now: Instant,
    ) -> Outcome {
        // Nothing in flight (no write of ours): nothing is known to have landed.
        let set = self.in_flight.take().unwrap_or_default();
        match after_write(&mut self.hold, Wrote::Renewal, record, outcome, now) {
            Next::Renewed => {
                let mut attached = vec![];
                for (n, m) in self.members.iter_mut() {
                    if m.state == Attach::Pending && set.contains(*n) {
                        m.state = Attach::Landed;
                        attached.push(*n);
                    }
                }
                Outcome::Renewed {
                    attached,
                    leaves: self.leaves.values().cloned().collect(),
                }
            }
            Next::RetryRenewal(e) => {
                self.hold.renewal_failed();
                Outcome::Retry(e)
            }
            Next::Lost { reason, .. } => Outcome::Lost(self.lose(reason)),
            // A renewal's outcome is one of the three above.
            other => unreachable!("a shared session's renewal ended as {other:?}"),
        }
    }

    /// At `now`, past the session's deadline with no renewal landed: the session lapsed, and
    /// every grant with it. `None` while it is believed (or was lost or released already).
    pub fn expire(&mut self, now: Instant) -> Option<Lost> {
        if self.hold.phase == Phase::Held && now >= self.hold.deadline() {
            return Some(self.lose(LostReason::Expired));
        }
        None
    }

    /// The session is lost for `reason`: every number handed out and not released is lost
    /// with it; pending leaves are dropped (the session's release, or its lapse, proves those
    /// grants gone: rules 2 and 3).
    pub fn lose(&mut self, reason: LostReason) -> Lost {
        self.hold.lose(reason.clone());
        // A late answer of a write in flight then reports no leave to retry.
        self.leaves.clear();
        let grants = match on(Mutant::SessionBeliefOutlivesLoss) {
            true => self.members.keys().copied().collect(),
            false => std::mem::take(&mut self.members).into_keys().collect(),
        };
        Lost { reason, grants }
    }
}

#[cfg(test)]
mod tests;
