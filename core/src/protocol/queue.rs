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
//! absent for its ttl plus grace.
//!
//! The rule for who may go (see [`QueueRecord::settle`]): a waiter is granted when it fits
//! beside the current grants and no earlier waiter *competes* with it. Two requests compete
//! when their scopes overlap and either is exclusive, or the lock has a permit limit (then
//! every grant takes a permit an earlier waiter needs). A later request goes ahead of an earlier
//! one only when it takes nothing the earlier one needs, so nobody starves: what blocks a
//! waiter are grants made to requests that arrived before it, a finite set that only shrinks.
//!
//! Everything here is pure; the driver is `core/src/queue.rs`.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::record::{Holder, MAX_RECORD_LEN};
pub use crate::scope::{Mode, Scope, MAX_PARTICIPANTS};

/// The format of a queued lock's record.
pub const QUEUE_FORMAT: u32 = 2;

/// One participant: a grant (with its token) or a waiter (without).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Entry {
    /// Its `id` names the participant and its session key.
    pub holder: Holder,
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Scope::is_whole")]
    pub scope: Scope,
    /// The ttl of its session lease: how long to wait it out.
    pub ttl_ms: u64,
    /// The fencing token of its grant; `None` while it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// When it joined the queue, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// A small user payload (as a lease's `data`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

impl Entry {
    pub fn id(&self) -> &str {
        &self.holder.id
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
    /// Who holds it now, in the order granted.
    #[serde(default)]
    pub grants: Vec<Entry>,
    /// Who waits, in arrival order.
    #[serde(default)]
    pub queue: Vec<Entry>,
}

/// Where a participant stands in a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    Granted {
        token: u64,
    },
    Waiting {
        /// How many waiters are ahead of it.
        ahead: usize,
        /// Whose sessions it checks for liveness: the grants that keep it waiting when no
        /// earlier waiter competes with it (it is at the head of its line), else the nearest
        /// earlier waiter that competes with it.
        blockers: Vec<Entry>,
    },
    Absent,
}

/// What a writer of a queued lock's record knows and wants.
#[allow(clippy::large_enum_variant)] // one at a time, short-lived: boxing would only allocate
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Join the queue (nothing if already in the record).
    Join(Entry),
    /// Leave it, granted or waiting (nothing if absent).
    Leave(String),
}

impl QueueRecord {
    /// A new record above every token that can have been handed out (`floor`).
    pub fn new(floor: u64, permits: Option<u32>) -> QueueRecord {
        QueueRecord {
            format: QUEUE_FORMAT,
            epoch: floor,
            rev: 0,
            permits,
            grants: Vec::new(),
            queue: Vec::new(),
        }
    }

    /// Parse a stored object; `None` when it is not a queued lock's record (a lease record, or
    /// something unreadable, which the lease record's parser judges).
    pub fn parse(bytes: &[u8]) -> Option<std::result::Result<QueueRecord, String>> {
        #[derive(Deserialize)]
        struct FormatOnly {
            format: u32,
        }
        let format = serde_json::from_slice::<FormatOnly>(bytes).ok()?.format;
        if format != QUEUE_FORMAT {
            return None;
        }
        Some(
            serde_json::from_slice::<QueueRecord>(bytes)
                .map_err(|e| format!("queued lock record does not parse: {e}"))
                .and_then(|r| r.check()),
        )
    }

    fn check(self) -> std::result::Result<QueueRecord, String> {
        let all = self.grants.iter().chain(&self.queue);
        if all.clone().any(|e| e.holder.id.is_empty() || e.ttl_ms == 0) {
            return Err("queued lock record lists a participant without id or ttl".into());
        }
        if self.grants.iter().any(|g| g.token.is_none()) {
            return Err("queued lock record lists a grant without a token".into());
        }
        Ok(self)
    }

    pub fn to_bytes(&self) -> Result<bytes::Bytes> {
        let bytes = serde_json::to_vec(self).expect("a queue record serializes");
        if bytes.len() as u64 > MAX_RECORD_LEN {
            return Err(Error::unavailable(format!(
                "the queue is full: its record would be {} bytes, over the {MAX_RECORD_LEN}-byte \
                 limit; try again later",
                bytes.len()
            )));
        }
        Ok(bytes.into())
    }

    /// The record after `change`, settled; `None` when it changes nothing (already joined,
    /// already gone).
    pub fn apply(&self, change: &Change) -> Result<Option<QueueRecord>> {
        let mut next = self.clone();
        match change {
            Change::Join(entry) => {
                if self.find(entry.id()).is_some() {
                    return Ok(None);
                }
                if self.grants.len() + self.queue.len() >= MAX_PARTICIPANTS {
                    return Err(Error::unavailable(format!(
                        "the queue is full: {MAX_PARTICIPANTS} participants hold or wait; try \
                         again later"
                    )));
                }
                let mut entry = entry.clone();
                entry.token = None;
                next.queue.push(entry);
            }
            Change::Leave(id) => {
                let before = next.grants.len() + next.queue.len();
                next.grants.retain(|e| e.id() != id);
                next.queue.retain(|e| e.id() != id);
                if next.grants.len() + next.queue.len() == before {
                    return Ok(None);
                }
            }
        }
        next.rev += 1;
        next.settle();
        Ok(Some(next))
    }

    /// Grant every waiter that may go now, in arrival order: one that fits beside the grants
    /// and that no earlier waiter competes with. Each grant gets the next token.
    pub fn settle(&mut self) {
        let mut i = 0;
        while i < self.queue.len() {
            let request = &self.queue[i];
            let overtakes = self.queue[..i]
                .iter()
                .any(|earlier| self.competes(earlier, request))
                && !super::mutants::on(super::mutants::Mutant::QueueOvertakes);
            if !overtakes && self.fits(request) {
                let mut granted = self.queue.remove(i);
                self.epoch += 1;
                granted.token = Some(self.epoch);
                self.grants.push(granted);
            } else {
                i += 1;
            }
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

    /// The participant `id`, granted or waiting.
    pub fn find(&self, id: &str) -> Option<&Entry> {
        self.grants.iter().chain(&self.queue).find(|e| e.id() == id)
    }

    /// Where participant `id` stands.
    pub fn position(&self, id: &str) -> Position {
        if let Some(g) = self.grants.iter().find(|g| g.id() == id) {
            return Position::Granted {
                token: g.token.unwrap_or(self.epoch),
            };
        }
        let Some(at) = self.queue.iter().position(|e| e.id() == id) else {
            return Position::Absent;
        };
        let request = &self.queue[at];
        let nearest_competitor = self.queue[..at]
            .iter()
            .rev()
            .find(|earlier| self.competes(earlier, request));
        let blockers = match nearest_competitor {
            // At the head of its line: the grants in its way.
            None => self
                .grants
                .iter()
                .filter(|g| {
                    self.blocks(g, request)
                        || (self.permits.is_some() && g.scope.overlaps(&request.scope))
                })
                .cloned()
                .collect(),
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
            blockers,
        }
    }

    /// Check that a request asking for `permits` may use this lock.
    pub fn check_permits(&self, url: &str, permits: Option<u32>) -> Result<()> {
        match (permits, self.permits) {
            (None, _) => Ok(()),
            (Some(a), Some(b)) if a == b => Ok(()),
            (Some(a), Some(b)) => Err(Error::invalid(format!(
                "{url} is a semaphore of {b} permits, not {a}: every participant must ask for \
                 the same number (or none)"
            ))),
            (Some(a), None) => Err(Error::invalid(format!(
                "{url} has no permit limit, but this request asked for {a} permits: a lock's \
                 permits are set by whoever creates it"
            ))),
        }
    }
}

#[cfg(test)]
mod tests;
