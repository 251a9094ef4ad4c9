//! One change of a queued lock's record — a leave, the removal of a participant proven gone, a
//! change of permits — until it is in the record: read, apply, write conditionally on the
//! version read; a failed condition or an unknown outcome is resolved by reading again and
//! applying again (every change is idempotent by participant id). A change that only shrinks or
//! settles the record always fits (the join that made it large reserved the room). The tokens
//! it hands out start above the wall clock read when it writes, after the read that showed the
//! record (docs/protocol.md §10, "Tokens").

use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::{classify_get, newer_error, Change, Classified, QueueRecord};
use crate::clock::Instant;
use crate::error::{Error, ErrorKind, Result};
use crate::options::Timing;
use crate::protocol::mutants::{on, Mutant};
use crate::protocol::view::unix_ms;
use crate::protocol::{Backoff, Entropy};
use crate::store::{Cond, Get, Put, Version};

/// How many failed conditions in a row before giving up (the record keeps changing).
pub const MAX_ROUNDS: u32 = 64;

/// What happened since the last step.
#[derive(Debug)]
pub enum ChangeEvent {
    Start,
    Read(Result<Get>),
    Wrote(Result<Put>),
    Slept,
}

/// What to do next.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per step, moved at once
pub enum ChangeStep {
    /// Read the lock's record (no `if_none_match`).
    Read,
    /// Write `bytes` under `cond`.
    Write {
        bytes: Bytes,
        cond: Cond,
    },
    Sleep(Duration),
    Done(Result<Changed>),
}

/// The outcome of a change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // one per change, handed back once
pub enum Changed {
    /// The change is in the record: written by us (`wrote`; `before` is what it replaced), or
    /// it was there already.
    Applied {
        record: QueueRecord,
        version: Version,
        before: Option<QueueRecord>,
        wrote: bool,
    },
    /// The key shows no queued lock (absent, a lease record, something unreadable): there is
    /// nothing to change.
    NoLock,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)] // one per change in flight
enum Phase {
    Reading,
    Writing {
        next: QueueRecord,
        before: QueueRecord,
    },
    BackingOff,
    Done,
}

/// One change in progress.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChangeOp {
    url: String,
    change: Change,
    max_len: usize,
    give_up_at: Instant,
    backoff: Backoff,
    rounds: u32,
    phase: Phase,
    /// The record and version known before the first step, if any (then it writes first).
    known: Option<(QueueRecord, Version)>,
}

impl ChangeOp {
    /// Apply `change` to the lock `url`'s record, trying until `give_up_at` while the store is
    /// unavailable.
    pub fn new(
        url: &str,
        change: Change,
        max_len: usize,
        give_up_at: Instant,
        timing: &Timing,
    ) -> ChangeOp {
        ChangeOp {
            url: url.to_string(),
            change,
            max_len,
            give_up_at,
            backoff: Backoff::for_timing(timing),
            rounds: 0,
            phase: Phase::Reading,
            known: None,
        }
    }

    /// Start from `record` at `version`, known without reading (the first step is the write).
    pub fn knowing(mut self, record: QueueRecord, version: Version) -> ChangeOp {
        self.known = Some((record, version));
        self
    }

    pub fn change(&self) -> &Change {
        &self.change
    }

    /// The next step, given what happened, at `now` (monotonic) and `wall` (our wall clock:
    /// the floor of the tokens a write hands out).
    pub fn step(
        &mut self,
        event: ChangeEvent,
        now: Instant,
        wall: SystemTime,
        entropy: &dyn Entropy,
    ) -> ChangeStep {
        match (std::mem::replace(&mut self.phase, Phase::Done), event) {
            (_, ChangeEvent::Start) => match self.known.take() {
                Some((r, v)) => self.apply(r, v, wall),
                None => self.read(),
            },
            (Phase::BackingOff, ChangeEvent::Slept) => self.read(),
            (Phase::Reading, ChangeEvent::Read(Ok(get))) => self.after_read(get, wall),
            (Phase::Writing { next, before }, ChangeEvent::Wrote(Ok(put))) => match put {
                Put::Written { version, .. } => ChangeStep::Done(Ok(Changed::Applied {
                    record: next,
                    version,
                    before: Some(before),
                    wrote: true,
                })),
                Put::ConditionFailed => {
                    self.rounds += 1;
                    if self.rounds >= MAX_ROUNDS {
                        return ChangeStep::Done(Err(Error::unavailable(format!(
                            "{} kept changing while updating its queue ({MAX_ROUNDS} writes in \
                             a row found it changed); try again",
                            self.url
                        ))));
                    }
                    self.read()
                }
            },
            (Phase::Reading, ChangeEvent::Read(Err(e)))
            | (Phase::Writing { .. }, ChangeEvent::Wrote(Err(e))) => self.failed(e, now, entropy),
            (phase, event) => unreachable!("{event:?} in {phase:?}"),
        }
    }

    fn read(&mut self) -> ChangeStep {
        self.phase = Phase::Reading;
        ChangeStep::Read
    }

    fn after_read(&mut self, get: Get, wall: SystemTime) -> ChangeStep {
        let version = match &get {
            Get::Found(obj) => obj.version.clone(),
            _ => return ChangeStep::Done(Ok(Changed::NoLock)),
        };
        match classify_get(&get) {
            Some(Classified::Queue(r)) => self.apply(r, version, wall),
            Some(Classified::Newer(what)) => ChangeStep::Done(Err(newer_error(&self.url, &what))),
            _ => ChangeStep::Done(Ok(Changed::NoLock)),
        }
    }

    fn apply(&mut self, r: QueueRecord, version: Version, wall: SystemTime) -> ChangeStep {
        let floor = if on(Mutant::QueueRecreateAtKnownEpoch) {
            0
        } else {
            unix_ms(wall)
        };
        match r.apply(&self.change, self.max_len, floor) {
            Ok(Some(next)) => {
                let bytes = next.to_bytes();
                self.phase = Phase::Writing { next, before: r };
                ChangeStep::Write {
                    bytes,
                    cond: Cond::Match(version),
                }
            }
            Ok(None) => ChangeStep::Done(Ok(Changed::Applied {
                record: r,
                version,
                before: None,
                wrote: false,
            })),
            Err(e) => ChangeStep::Done(Err(e.with_lease(&self.url))),
        }
    }

    /// A read or write failed: an unknown outcome is resolved by reading again, after a pause,
    /// until `give_up_at`; anything else ends the change.
    fn failed(&mut self, e: Error, now: Instant, entropy: &dyn Entropy) -> ChangeStep {
        if e.kind() != ErrorKind::Unavailable || now >= self.give_up_at {
            return ChangeStep::Done(Err(e.with_lease(&self.url)));
        }
        self.phase = Phase::BackingOff;
        ChangeStep::Sleep(self.backoff.next(entropy))
    }
}

#[cfg(test)]
mod tests;
