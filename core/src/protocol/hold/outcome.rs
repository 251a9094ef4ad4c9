//! What a holder does with the outcome of one of its writes: a renewal, a release, or the tidy
//! write after a loss. One decision, called by the driver (`core/src/lease.rs`) and by the
//! model checker's holder (`verify/src/lease_model.rs`), so the model checks what ships.
//!
//! The hold follows what landed (a renewal's deadline, `Released`); a loss is returned, not
//! applied: the driver marks it through [`Hold::lose`] (naming a grant's loss, running the
//! callbacks once), and so does the model.

use std::time::SystemTime;

use crate::clock::Instant;
use crate::error::Error;
use crate::protocol::write::Written;
use crate::protocol::Entropy;
use crate::record::{Record, RecordState};
use crate::store::{Cond, Get, Version};

use super::{Hold, LostReason, Phase};

/// How a release begins ([`begin_release`]).
// Made once per release and matched at once: boxing the record would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ReleaseStart {
    /// Send this release (the hold is `Releasing` from now: it may land before its answer).
    Send(Record, Cond),
    /// Released already: report `Ok`.
    Done,
    /// Lost (already, or its deadline passed while it was held; mark it through
    /// [`Hold::lose`]): read the record, tidy over it ([`Hold::tidy`]), report the loss.
    Lost(LostReason),
}

/// Which write of the holder's an outcome is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wrote {
    /// A renewal ([`Hold::next_write`] with `RecordState::Held`).
    Renewal,
    /// A release ([`Hold::next_write`] with `RecordState::Released`, after
    /// [`Hold::start_release`]).
    Release,
    /// After a loss, our own record released or a break of us acknowledged ([`Hold::tidy`]).
    Tidy,
}

/// What the holder does next.
// Made once per write and matched at once: boxing what the store showed would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Next {
    /// The renewal landed; the hold follows it (deadline, ttl, version). Renew at `renew_at`.
    Renewed,
    /// The renewal's outcome is unknown and the deadline has not come: renew again after a
    /// backoff (no later than the deadline), with a fresh write and nonce — the attempt that
    /// gave up may still land and must not be taken for the next one.
    RetryRenewal(Error),
    /// The release is done; the hold is `Released`. `remember`: the version of the record we
    /// released, for the one-write re-acquire (with the record sent); `None` when what is there
    /// is not known to be that record (it was replaced already, or it is an earlier release of
    /// ours). Report `Ok`, and wake the waiters of this process.
    Released { remember: Option<Version> },
    /// The lease is lost for `reason` (not applied yet: mark it through [`Hold::lose`]).
    /// `tidy`: what the store shows, to tidy over at once ([`Hold::tidy`]); `None`: nothing to
    /// tidy now (a renewal's loss is tidied by the release that follows). A release reports
    /// the loss as its error; a renewal stops renewing.
    Lost {
        reason: LostReason,
        tidy: Option<Get>,
    },
    /// The release's outcome is unknown: the hold stays `Releasing` (not believed; another
    /// release tries again with a fresh nonce). Report the error.
    ReleaseUnknown(Error),
    /// The tidy write is over. `remember`: the version of the record it released, when it
    /// landed (the one-write re-acquire); `None`: it did not (best effort, nothing to report).
    Tidied { remember: Option<Version> },
}

/// Begin a release of `hold` at `now`: stop believing first (only while believed: past its
/// deadline the lease is lost, not released), then send the release unless it is released
/// or lost already. A release whose outcome was unknown (`Releasing`) is sent again, with a
/// fresh nonce, even past the deadline: it can only give the lease back sooner.
pub fn begin_release(
    hold: &mut Hold,
    now: Instant,
    wall: SystemTime,
    entropy: &dyn Entropy,
) -> ReleaseStart {
    match &hold.phase {
        Phase::Released => return ReleaseStart::Done,
        Phase::Lost(reason) => return ReleaseStart::Lost(reason.clone()),
        Phase::Held if !hold.believes(now) => return ReleaseStart::Lost(LostReason::Expired),
        Phase::Held => hold.start_release(),
        Phase::Releasing => {}
    }
    match hold.next_write(RecordState::Released, wall, entropy) {
        Some((record, cond)) => ReleaseStart::Send(record, cond),
        None => unreachable!("a hold being released has a release to write"),
    }
}

/// The outcome of our write of `record` (a [`Wrote`]) known at `now`: follow what landed,
/// and say what to do next. No I/O.
pub fn after_write(
    hold: &mut Hold,
    wrote: Wrote,
    record: Record,
    outcome: Result<Written, Error>,
    now: Instant,
) -> Next {
    match wrote {
        Wrote::Renewal => after_renewal(hold, record, outcome, now),
        Wrote::Release => after_release(hold, outcome),
        Wrote::Tidy => Next::Tidied {
            remember: match outcome {
                Ok(Written::Landed { version, .. }) => Some(version),
                _ => None,
            },
        },
    }
}

fn after_renewal(
    hold: &mut Hold,
    record: Record,
    outcome: Result<Written, Error>,
    now: Instant,
) -> Next {
    match outcome {
        Ok(Written::Landed { version, t_send }) => {
            hold.renewed(record, version, t_send);
            Next::Renewed
        }
        // Replaced: our renewal landed, then someone else's write replaced it.
        Ok(Written::Rejected { current } | Written::Replaced { current }) => Next::Lost {
            reason: LostReason::from_current(&current, &hold.holder().id),
            tidy: None,
        },
        Err(_) if now >= hold.deadline() => Next::Lost {
            reason: LostReason::Expired,
            tidy: None,
        },
        Err(e) => Next::RetryRenewal(e),
    }
}

fn after_release(hold: &mut Hold, outcome: Result<Written, Error>) -> Next {
    let remember = match outcome {
        Ok(Written::Landed { version, .. }) => Some(version),
        // The release landed and a waiter has already taken the lease.
        Ok(Written::Replaced { .. }) => None,
        // An earlier release of ours (its answer lost) is what is there.
        Ok(Written::Rejected { current }) if hold.is_our_release(&current) => None,
        Ok(Written::Rejected { current }) => {
            return Next::Lost {
                reason: LostReason::from_current(&current, &hold.holder().id),
                tidy: Some(current),
            }
        }
        Err(e) => return Next::ReleaseUnknown(e),
    };
    hold.released();
    Next::Released { remember }
}

#[cfg(test)]
mod tests;
