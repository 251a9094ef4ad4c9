//! A held lease: its deadline, its renewals, its loss, its release, and tidying up after a loss.
//!
//! The holder believes it holds the lease until `t_send + ttl`, `t_send` being its monotonic
//! clock read before sending the last write that landed and `ttl` that write's. It renews every
//! `renew` interval after that `t_send` and stops believing at the deadline even when it cannot
//! reach the store.
//!
//! A holder may change its ttl (and data) while it holds ([`Hold::want_ttl`]): its next writes
//! carry the new ttl. Waiters go by the ttl of the record they see, from when they see it; so
//! from the moment a write with a shorter ttl is sent, the holder believes at most until that
//! send + the shorter ttl ([`Hold::sending`]), since the write may land before its answer comes
//! back, or without one.

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::clock::Instant;
use crate::duration::format_duration;
use crate::error::{Error, ErrorKind, Result};
use crate::options::Timing;
use crate::record::{timestamp, Holder, Parsed, Record, RecordState};
use crate::store::{Cond, Get, Version};

use super::Entropy;

mod outcome;
pub use outcome::{after_write, begin_release, Next, ReleaseStart, Wrote};

/// Why a lease was lost.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LostReason {
    /// The deadline passed without a renewal that landed (store unreachable, or too slow).
    Expired,
    /// Another holder's record replaced ours.
    TakenOver { holder: Holder, epoch: u64 },
    /// An operator broke the lease (`lease break`), with a higher epoch. Releasing the lease
    /// acknowledges the break, so the next holder need not wait out our ttl.
    Broken { by: Holder, epoch: u64 },
    /// A preempting acquirer (`Preempt::EveryEffectFenced`) took the lease while we held it,
    /// with a higher epoch; our fenced writes are refused wherever it has written or fenced.
    Preempted { by: Holder, epoch: u64 },
    /// The record was deleted.
    Vanished,
    /// The record was replaced by something that is not a lease record.
    Overwritten,
    /// A queued lock's grant: its session's record was deleted.
    SessionDeleted,
    /// A queued lock's grant: another participant took its session for gone (it had lapsed)
    /// and removed it from the lock.
    Removed { by: Holder },
    /// A queued lock's grant: the lock's record no longer shows it; says what the record
    /// became ("made again without this grant (it was deleted)", "replaced by a lease record").
    LockReplaced(String),
}

impl LostReason {
    /// The `Lost` error for this loss of the lease `url` held at `epoch`, naming who took it
    /// over or broke it: what `ensure_held` raises, and what every binding reports.
    pub fn error(&self, url: &str, epoch: u64) -> Error {
        let mut e = Error::new(
            ErrorKind::Lost,
            format!("{url} (epoch {epoch}) was lost: {self}"),
        )
        .with_lease(url)
        .with_epoch(epoch);
        if let LostReason::TakenOver { holder, .. }
        | LostReason::Broken { by: holder, .. }
        | LostReason::Preempted { by: holder, .. }
        | LostReason::Removed { by: holder } = self
        {
            e = e.with_holder(holder.clone());
        }
        e
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::Expired => f.write_str("its deadline passed without a successful renewal"),
            LostReason::TakenOver { holder, epoch } => {
                write!(f, "taken over by {} at epoch {epoch}", holder.describe())
            }
            LostReason::Broken { by, epoch } => {
                write!(f, "broken by {} (epoch now {epoch})", by.describe())
            }
            LostReason::Preempted { by, epoch } => write!(
                f,
                "preempted by {} at epoch {epoch} (its mode asserts that every effect is fenced)",
                by.describe()
            ),
            LostReason::Vanished => f.write_str("its record was deleted"),
            LostReason::Overwritten => {
                f.write_str("its record was overwritten with something unreadable")
            }
            LostReason::SessionDeleted => f.write_str(
                "its session's record was deleted (by hand, or by a lifecycle rule on the lock's \
                 prefix)",
            ),
            LostReason::Removed { by } => write!(
                f,
                "its session lapsed (it was not renewed within its ttl) and {} removed it from \
                 the lock",
                by.describe()
            ),
            LostReason::LockReplaced(what) => write!(f, "the lock's record was {what}"),
        }
    }
}

impl LostReason {
    /// A short name for metrics labels and JSON: `expired`, `taken_over`, `broken`,
    /// `preempted`, `vanished`, `overwritten`, and a queued lock's grant's `session_deleted`, `removed`,
    /// `lock_replaced`.
    pub fn kind(&self) -> &'static str {
        match self {
            LostReason::Expired => "expired",
            LostReason::TakenOver { .. } => "taken_over",
            LostReason::Broken { .. } => "broken",
            LostReason::Preempted { .. } => "preempted",
            LostReason::Vanished => "vanished",
            LostReason::Overwritten => "overwritten",
            LostReason::SessionDeleted => "session_deleted",
            LostReason::Removed { .. } => "removed",
            LostReason::LockReplaced(_) => "lock_replaced",
        }
    }

    /// What the store shows instead of the record of holder `ours`. Only a record that names
    /// us as the holder it broke is a break, only one that names us as the holder it preempted
    /// a preemption; any other record of another holder (held, or
    /// released after taking over) means we were taken over.
    pub fn from_current(current: &Get, ours: &str) -> LostReason {
        match current {
            Get::Found(obj) => match Record::parse(obj.bytes.as_deref(), obj.size) {
                Parsed::Valid(r) if r.broken.as_ref().is_some_and(|b| b.id == ours) => {
                    LostReason::Broken {
                        by: r.holder,
                        epoch: r.epoch,
                    }
                }
                Parsed::Valid(r) if r.preempted.as_ref().is_some_and(|p| p.id == ours) => {
                    LostReason::Preempted {
                        by: r.holder,
                        epoch: r.epoch,
                    }
                }
                Parsed::Valid(r) => LostReason::TakenOver {
                    holder: r.holder,
                    epoch: r.epoch,
                },
                Parsed::Corrupt { .. } => LostReason::Overwritten,
            },
            Get::NotFound { .. } => LostReason::Vanished,
            Get::NotModified { .. } => LostReason::Overwritten,
        }
    }
}

/// How a held lease is doing (docs/protocol.md §4, "Health"): a pure function of the hold and
/// the time, [`Hold::health`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Health {
    /// Renewals are landing: the last one landed less than `renew + request_timeout` ago and
    /// no attempt since has failed.
    Healthy,
    /// A renewal attempt failed, or the one due has not landed within a request timeout; the
    /// deadline is still more than `unknown_within` away.
    Late,
    /// No renewal has landed and the deadline is near (no more than `unknown_within` left:
    /// when `lease run` sends its command SIGTERM). The holder still believes, but should act
    /// only through fenced writes.
    Unknown,
    /// The holder no longer believes: lost, expired, or released.
    Lost,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Late => "late",
            Health::Unknown => "unknown",
            Health::Lost => "lost",
        }
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A change of a held lease's health, as delivered to the holder: the new state, the time
/// left (zero once lost) and, for a loss, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthEvent {
    pub health: Health,
    pub remaining: Duration,
    pub reason: Option<LostReason>,
}

/// Where a held lease stands.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase {
    Held,
    /// A release was sent: it may land at any moment, so the holder no longer believes.
    Releasing,
    Released,
    Lost(LostReason),
}

/// A held lease, as its holder knows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Hold {
    pub url: String,
    pub timing: Timing,
    /// Our last record that landed, and its version.
    pub record: Record,
    pub version: Version,
    /// `t_send` of the last write that landed.
    pub last_send: Instant,
    pub phase: Phase,
    /// For a queued lock's grant held through this session lease: the grant's token, which
    /// messages name instead of the session's epoch (with `url` the lock's).
    pub token: Option<u64>,
    /// Renewal attempts that failed since the last one landed (health: `late`).
    pub failed_renewals: u32,
    /// A ttl and data the holder asked for that no landed write carries yet.
    pub wanted: Wanted,
    /// The latest instant the holder may believe while a write with a shorter ttl than the
    /// last landed one may land: its send + its ttl.
    pub cap: Option<Instant>,
}

/// A change a holder asked for, carried by its renewals until one lands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Wanted {
    pub ttl: Option<Duration>,
    /// `Some(None)` clears the data.
    pub data: Option<Option<String>>,
}

impl Hold {
    pub fn new(
        url: &str,
        record: Record,
        version: Version,
        t_send: Instant,
        timing: Timing,
    ) -> Hold {
        Hold {
            url: url.to_string(),
            timing,
            record,
            version,
            last_send: t_send,
            phase: Phase::Held,
            token: None,
            failed_renewals: 0,
            wanted: Wanted::default(),
            cap: None,
        }
    }

    /// The epoch messages and errors name: a grant's token, else the lease's epoch.
    fn shown_epoch(&self) -> u64 {
        self.token.unwrap_or(self.record.epoch)
    }

    pub fn epoch(&self) -> u64 {
        self.record.epoch
    }

    pub fn holder(&self) -> &Holder {
        &self.record.holder
    }

    /// The instant the holder stops believing it holds the lease.
    pub fn deadline(&self) -> Instant {
        let deadline = self.last_send + self.timing.ttl;
        self.cap.map_or(deadline, |cap| deadline.min(cap))
    }

    /// When the next renewal is due.
    pub fn renew_at(&self) -> Instant {
        self.last_send + self.timing.renew
    }

    /// Whether the holder believes it holds the lease at `now`: the lease is held (no release
    /// sent, not lost) and its deadline has not come. The one decision of belief: the model
    /// checker's "at most one holder believes" calls it, and so do [`Hold::remaining`] and
    /// [`Hold::ensure_held`], hence `Lease::is_held`, `remaining` and `ensure_held`.
    pub fn believes(&self, now: Instant) -> bool {
        let holding = match self.phase {
            Phase::Held => true,
            // A release was sent: it may land at any moment (a waiter may hold the lease
            // before the answer comes back).
            Phase::Releasing => super::mutants::on(super::mutants::Mutant::BelieveWhileReleasing),
            Phase::Released | Phase::Lost(_) => false,
        };
        holding && now < self.deadline()
    }

    /// How long this holder may still rely on the lease (zero once it no longer believes it
    /// holds it: lost, released, being released, or past its deadline).
    pub fn remaining(&self, now: Instant) -> Duration {
        if self.believes(now) {
            self.deadline().saturating_duration_since(now)
        } else {
            Duration::ZERO
        }
    }

    /// The time left, if the holder believes it holds the lease for at least `min` more; else a
    /// `Lost` error saying why.
    pub fn ensure_held(&self, now: Instant, min: Duration) -> Result<Duration> {
        if !self.believes(now) {
            return Err(match &self.phase {
                Phase::Lost(reason) => self.lost_error(reason),
                Phase::Releasing | Phase::Released => {
                    Error::new(ErrorKind::Lost, format!("{} was released", self.url))
                        .with_lease(&self.url)
                        .with_epoch(self.shown_epoch())
                }
                Phase::Held => self.lost_error(&LostReason::Expired),
            });
        }
        let left = self.remaining(now);
        if left < min {
            return Err(Error::new(
                ErrorKind::Lost,
                format!(
                    "{} has {} left, less than the {} required",
                    self.url,
                    format_duration(left),
                    format_duration(min)
                ),
            )
            .with_lease(&self.url)
            .with_epoch(self.shown_epoch()));
        }
        Ok(left)
    }

    pub fn lost_error(&self, reason: &LostReason) -> Error {
        reason.error(&self.url, self.shown_epoch())
    }

    /// The next write of ours (a renewal or a release): the successor record with a fresh
    /// nonce, conditional on our version. `None` unless held.
    pub fn next_write(
        &self,
        state: RecordState,
        wall: SystemTime,
        entropy: &dyn Entropy,
    ) -> Option<(Record, Cond)> {
        let allowed = match state {
            RecordState::Held => self.phase == Phase::Held,
            RecordState::Released => matches!(self.phase, Phase::Held | Phase::Releasing),
        };
        if !allowed {
            return None;
        }
        let mut record = self.record.successor();
        record.state = state;
        record.renewed_at = Some(timestamp(wall));
        record.write = Some(entropy.nonce());
        if state == RecordState::Held {
            if let Some(ttl) = self.wanted.ttl {
                record.ttl_ms = ttl.as_millis() as u64;
            }
            if let Some(data) = &self.wanted.data {
                record.data = data.clone();
            }
        }
        Some((record, Cond::Match(self.version.clone())))
    }

    /// Ask for a new ttl: the next renewal carries it. The caller checked it
    /// ([`Timing::with_ttl`]).
    pub fn want_ttl(&mut self, ttl: Duration) {
        self.wanted.ttl = Some(ttl);
    }

    /// Ask for new data (`None`: none): the next renewal carries it.
    pub fn want_data(&mut self, data: Option<String>) {
        self.wanted.data = Some(data);
    }

    /// `record` is about to be sent at `now` (or later): if its ttl is shorter than the one the
    /// holder goes by, it may land at any moment, and waiters then go by its ttl from when it
    /// lands, after `now`: believe no longer than `now` + its ttl.
    pub fn sending(&mut self, record: &Record, now: Instant) {
        if record.ttl() < self.timing.ttl
            && !super::mutants::on(super::mutants::Mutant::NoCapOnShorterTtl)
        {
            let cap = now + record.ttl();
            self.cap = Some(self.cap.map_or(cap, |c| c.min(cap)));
        }
    }

    /// A renewal landed: the deadline follows its ttl from its send. A write conditional on
    /// the version it replaced can no longer land, so no cap is left.
    pub fn renewed(&mut self, record: Record, version: Version, t_send: Instant) {
        if record.ttl() != self.timing.ttl {
            // Checked when it was asked for; a ttl this holder did not ask for (none) keeps
            // the timings.
            if let Ok(timing) = self.timing.with_ttl(record.ttl()) {
                self.timing = timing;
            }
        }
        if self.wanted.ttl == Some(record.ttl()) {
            self.wanted.ttl = None;
        }
        if self.wanted.data.as_ref() == Some(&record.data) {
            self.wanted.data = None;
        }
        self.cap = None;
        self.record = record;
        self.version = version;
        self.last_send = t_send;
        self.failed_renewals = 0;
    }

    /// A renewal attempt failed (it is retried until the deadline).
    pub fn renewal_failed(&mut self) {
        self.failed_renewals = self.failed_renewals.saturating_add(1);
    }

    /// The lease's health at `now`. The thresholds, from the last landed write's send:
    /// `late` at `renew + request_timeout` (or at once when an attempt fails), `unknown` when
    /// `unknown_within` is left, `lost` at the deadline. `ensure_held` is unchanged by it: a
    /// `late` or `unknown` lease is still held.
    pub fn health(&self, now: Instant) -> Health {
        let left = self.remaining(now);
        if left.is_zero() {
            Health::Lost
        } else if left <= self.timing.unknown_within {
            Health::Unknown
        } else if self.failed_renewals > 0 || now >= self.last_send + self.timing.late_after() {
            Health::Late
        } else {
            Health::Healthy
        }
    }

    /// The health at `now`, with the time left and why it was lost.
    pub fn health_event(&self, now: Instant) -> HealthEvent {
        let health = self.health(now);
        HealthEvent {
            health,
            remaining: self.remaining(now),
            reason: match (&self.phase, health) {
                (Phase::Lost(r), _) => Some(r.clone()),
                (Phase::Held, Health::Lost) => Some(LostReason::Expired),
                _ => None,
            },
        }
    }

    /// The next instant after `now` at which the health may change with nothing else
    /// happening (no renewal landing or failing): `None` once nothing is held.
    pub fn next_health_change(&self, now: Instant) -> Option<Instant> {
        if self.phase != Phase::Held {
            return None;
        }
        let deadline = self.deadline();
        let unknown_at = deadline
            .checked_sub(self.timing.unknown_within)
            .unwrap_or(self.last_send);
        [
            self.last_send + self.timing.late_after(),
            unknown_at,
            deadline,
        ]
        .into_iter()
        .filter(|t| *t > now)
        .min()
    }

    /// A release is about to be sent: from now on the holder does not believe it holds the
    /// lease (the release may land before its answer comes back, or without one).
    pub fn start_release(&mut self) {
        if self.phase == Phase::Held {
            self.phase = Phase::Releasing;
        }
    }

    /// The lease is lost; true when it was held (or being released) until now: the loss is
    /// news.
    pub fn lose(&mut self, reason: LostReason) -> bool {
        if !matches!(self.phase, Phase::Held | Phase::Releasing) {
            return false;
        }
        self.phase = Phase::Lost(reason);
        true
    }

    /// Whether `current` is our own release, landed (an earlier release whose answer was lost).
    pub fn is_our_release(&self, current: &Get) -> bool {
        let Get::Found(obj) = current else {
            return false;
        };
        matches!(
            Record::parse(obj.bytes.as_deref(), obj.size),
            Parsed::Valid(r) if r.holder.id == self.holder().id
                && r.epoch == self.epoch()
                && r.state == RecordState::Released
        )
    }

    /// The lease was released.
    pub fn released(&mut self) {
        self.phase = Phase::Released;
    }

    /// After a loss, what to write over `current` so that nobody waits us out: our own record,
    /// still held (the loss was by expiry: we were unreachable or paused), released; or a break
    /// of our lease released, which acknowledges it. Safe: we no longer believe we hold the
    /// lease. `None` when `current` is neither, or we still hold.
    pub fn tidy(
        &self,
        current: &Get,
        wall: SystemTime,
        entropy: &dyn Entropy,
    ) -> Option<(Record, Cond)> {
        if !matches!(self.phase, Phase::Lost(_)) {
            return None;
        }
        let Get::Found(obj) = current else {
            return None;
        };
        let Parsed::Valid(record) = Record::parse(obj.bytes.as_deref(), obj.size) else {
            return None;
        };
        if record.state != RecordState::Held {
            return None;
        }
        let id = &self.holder().id;
        // The same holder id at another epoch is a later lease of the same acquisition (one
        // that let a late adoption go and took the lease again): not ours.
        let ours = record.holder.id == *id && record.epoch == self.epoch();
        let breaks_us = record
            .broken
            .as_ref()
            .is_some_and(|b| b.id == *id && b.epoch == self.epoch());
        if !ours && !breaks_us {
            return None;
        }
        let mut next = record.successor();
        next.state = RecordState::Released;
        next.renewed_at = Some(timestamp(wall));
        next.write = Some(entropy.nonce());
        Some((next, Cond::Match(obj.version.clone())))
    }
}

#[cfg(test)]
mod tests;
