//! Holding a grant of a queued lock: the confirmation of the lock's record at each renewal.
//!
//! A grant is held through its session lease (renewed every ttl/3) *and* the lock's record: the
//! holder believes only while its session is held and a read of the record sent less than a
//! ttl ago showed its grant. Right after each renewal of its session it reads the record again
//! (`If-None-Match`: an unchanged record costs a 304) and:
//! - the record still lists its grant: confirmed until that read's send time + ttl;
//! - the record is absent (deleted by hand or by a lifecycle rule): it makes the record again as
//!   it last saw it ([`QueueRecord::restored`], tokens above the store's clock in ms), listing
//!   itself, conditional on absence; if someone else made it first, it reads that one;
//! - anything else (a record without its grant, a lease record, a record of a newer version,
//!   something unreadable): the grant is lost, with a reason that says which.
//!
//! So a holder notices any change of the record at its next renewal: at most one renew interval
//! plus one request after it (docs/protocol.md §10, "Belief").
//!
//! A confirmation that shows a yield request naming this grant's token reports it once
//! ([`GrantHold::take_yield`]); a request is not a loss: the grant stays confirmed, and the
//! holder steps aside, when it chooses, by its release (docs/protocol.md §10, "Yield on
//! request").

use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::{classify_get, session_key, Classified, Position, QueueRecord, YieldRequested};
use crate::clock::Instant;
use crate::error::Result;
use crate::protocol::hold::LostReason;
use crate::protocol::view::View;
use crate::record::{Holder, Parsed, Record};
use crate::store::{Cond, Get, Put, Version};

/// A read (or write) of the lock's record that showed a participant's grant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Confirmation {
    pub record: QueueRecord,
    pub version: Version,
    /// Our monotonic clock read before that request was sent.
    pub sent: Instant,
}

/// What happened since the last step.
#[derive(Debug)]
pub enum ConfirmEvent {
    Start,
    Read(Result<Get>),
    Wrote(Result<Put>),
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfirmStep {
    /// Read the lock's record.
    Read { if_none_match: Option<Version> },
    /// Make the record again (`Create`).
    Write { bytes: Bytes, cond: Cond },
    /// The record lists the grant: believe until [`GrantHold::deadline`].
    Confirmed,
    /// The store did not answer: try again (the belief ends at the deadline anyway).
    Retry,
    /// The grant is lost.
    Lost(LostReason),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    Reading {
        sent: Instant,
    },
    /// (Boxed: a record is large beside the other phases.)
    Restoring {
        next: Box<QueueRecord>,
        sent: Instant,
    },
}

/// A held grant, as its holder knows the lock's record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GrantHold {
    key: String,
    id: String,
    ttl: Duration,
    /// The last record that showed the grant, and its version.
    record: QueueRecord,
    version: Version,
    /// When the request that last showed the grant was sent.
    confirmed: Instant,
    phase: Phase,
    /// The last yield request reported (so each is reported once), and one not yet taken.
    told: Option<YieldRequested>,
    news: Option<YieldRequested>,
}

impl GrantHold {
    /// The grant of participant `id` on the lock at `key`, as `confirmation` showed it; `ttl` is
    /// its session's.
    pub fn new(key: &str, id: &str, ttl: Duration, confirmation: Confirmation) -> GrantHold {
        let mut hold = GrantHold {
            key: key.to_string(),
            id: id.to_string(),
            ttl,
            record: confirmation.record,
            version: confirmation.version,
            confirmed: confirmation.sent,
            phase: Phase::Idle,
            told: None,
            news: None,
        };
        hold.notice_yield();
        hold
    }

    /// A yield request that names this grant, not yet taken: each request once. Taking it
    /// changes nothing else (the grant is held as before).
    pub fn take_yield(&mut self) -> Option<YieldRequested> {
        self.news.take()
    }

    /// Note a request in the record just confirmed that names this grant and was not reported.
    fn notice_yield(&mut self) {
        let Position::Granted { token } = self.record.position(&self.id) else {
            return;
        };
        let Some(request) = self.record.yield_for(token).map(|y| y.told()) else {
            return;
        };
        if self.told.as_ref() != Some(&request) {
            self.told = Some(request.clone());
            self.news = Some(request);
        }
    }

    /// The instant the holder stops believing unless a confirmation lands first.
    pub fn deadline(&self) -> Instant {
        self.confirmed + self.ttl
    }

    /// The key of the lock's record.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The record last confirmed.
    pub fn record(&self) -> &QueueRecord {
        &self.record
    }

    /// The next step, given what happened, at `now` (monotonic) and `wall` (our wall clock,
    /// only for the tokens of a record made again).
    pub fn step(&mut self, event: ConfirmEvent, now: Instant, wall: SystemTime) -> ConfirmStep {
        match (std::mem::replace(&mut self.phase, Phase::Idle), event) {
            (_, ConfirmEvent::Start) => {
                if super::super::mutants::on(
                    super::super::mutants::Mutant::QueueHolderSkipsConfirmation,
                ) {
                    self.confirmed = now;
                    return ConfirmStep::Confirmed;
                }
                self.read(now, Some(self.version.clone()))
            }
            (Phase::Reading { sent }, ConfirmEvent::Read(Ok(get))) => {
                self.after_read(get, sent, now, wall)
            }
            (Phase::Restoring { next, sent }, ConfirmEvent::Wrote(Ok(put))) => match put {
                Put::Written { version, .. } => {
                    self.record = *next;
                    self.version = version;
                    self.confirmed = sent;
                    ConfirmStep::Confirmed
                }
                // Someone made it first: see whether it lists us.
                Put::ConditionFailed => self.read(now, None),
            },
            (Phase::Reading { .. }, ConfirmEvent::Read(Err(_)))
            | (Phase::Restoring { .. }, ConfirmEvent::Wrote(Err(_))) => ConfirmStep::Retry,
            (phase, event) => unreachable!("{event:?} while {phase:?}"),
        }
    }

    fn read(&mut self, now: Instant, if_none_match: Option<Version>) -> ConfirmStep {
        self.phase = Phase::Reading { sent: now };
        ConfirmStep::Read { if_none_match }
    }

    fn after_read(
        &mut self,
        get: Get,
        sent: Instant,
        now: Instant,
        wall: SystemTime,
    ) -> ConfirmStep {
        let replaced = |what: &str| ConfirmStep::Lost(LostReason::LockReplaced(what.to_string()));
        match &get {
            Get::NotModified { .. } => {
                self.confirmed = sent;
                return ConfirmStep::Confirmed;
            }
            Get::NotFound { server_now } => {
                // Deleted: make it again as we last saw it, above every token handed out since.
                let view = View {
                    server_now: server_now.map(|t| (t, now)),
                    ..View::default()
                };
                let floor = (self.record.epoch + 1).max(view.time_epoch(wall));
                let next = self.record.restored(floor);
                let bytes = next.to_bytes();
                self.phase = Phase::Restoring {
                    next: Box::new(next),
                    sent: now,
                };
                return ConfirmStep::Write {
                    bytes,
                    cond: Cond::Create,
                };
            }
            Get::Found(_) => {}
        }
        let Get::Found(obj) = &get else {
            unreachable!()
        };
        match classify_get(&get) {
            Some(Classified::Queue(r)) => match r.position(&self.id) {
                Position::Granted { .. } => {
                    self.record = r;
                    self.version = obj.version.clone();
                    self.confirmed = sent;
                    self.notice_yield();
                    ConfirmStep::Confirmed
                }
                Position::Waiting { .. } => replaced(
                    "made again with this participant waiting, not granted (it was deleted)",
                ),
                Position::Absent => match self.preemption(&r) {
                    Some(reason) => ConfirmStep::Lost(reason),
                    None => replaced(
                        "made again without this grant (it was deleted), or this grant was \
                         removed",
                    ),
                },
            },
            Some(Classified::Newer(what)) => replaced(&format!(
                "replaced by a record of a newer version of lease ({what})"
            )),
            _ => match Record::parse(obj.bytes.as_deref(), obj.size) {
                Parsed::Valid(_) => replaced("replaced by a lease record (format 1)"),
                Parsed::Corrupt { .. } => replaced("overwritten with something unreadable"),
            },
        }
    }

    /// The preemption that removed our grant, if `r` names it (docs/protocol.md §10,
    /// "Preemption"): who took it, and at which token.
    fn preemption(&self, r: &QueueRecord) -> Option<LostReason> {
        let Position::Granted { token } = self.record.position(&self.id) else {
            return None;
        };
        let (by, epoch) = r.preempted_by(&self.id, token)?;
        Some(LostReason::Preempted {
            by: Holder {
                id: by.to_string(),
                ..Holder::default()
            },
            epoch,
        })
    }

    /// The key of this participant's session.
    pub fn session_key(&self) -> String {
        session_key(&self.key, &self.id)
    }
}

#[cfg(test)]
mod tests;
