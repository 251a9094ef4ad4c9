//! Create, take over or wait: what a client that wants a lease does with what it has seen.
//!
//! A `held` record is taken over only when one of the two rules says its holder's deadline has
//! surely passed (docs/protocol.md §4):
//! - the observation rule: the same version seen unchanged for `ttl + grace` on our own
//!   monotonic clock, counted from after the answer that first showed it;
//! - the store-clock rule: `server_now - last_modified >= ttl + grace + resolution`, both
//!   readings from the store's clock (truncated to its resolution, hence the `>=` and the
//!   resolution: the measured age exceeds the true age by less than one resolution).
//!
//! or at once when its holder, on this machine, is provably gone ([`super::dead_holder`]).

use std::time::{Duration, SystemTime};

use super::view::{Seen, View};
use crate::clock::Instant;
use crate::options::{Timing, MAX_TTL};
use crate::record::{Holder, Parsed, RecordState};
use crate::store::Version;

/// What a client that wants the lease should do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The record is absent: create it at this epoch.
    Create { epoch: u64 },
    /// Replace the record at `version` with ours, at this epoch and rev.
    TakeOver {
        version: Version,
        epoch: u64,
        rev: u64,
    },
    /// Someone holds it: look again at `until` at the latest.
    Wait {
        until: Instant,
        holder: Option<Holder>,
        epoch: Option<u64>,
    },
}

/// Decide from `view` (which must hold an answer) at `now` on our monotonic clock, with `wall`
/// our wall clock (only for the epoch of a new or corrupt record) and `known` the highest
/// epoch this client has seen for the key.
pub fn decide(
    view: &View,
    timing: &Timing,
    known: u64,
    now: Instant,
    wall: SystemTime,
) -> Decision {
    let (version, parsed, last_modified, first_seen) = match &view.seen {
        None => unreachable!("decide is called after a read"),
        // A record that is absent may have been deleted while held (by hand, a lifecycle rule,
        // a restore): start above any epoch that can have been handed out, as for a corrupt
        // record.
        Some(Seen::Absent) => {
            if super::mutants::on(super::mutants::Mutant::RecreateAtKnownEpoch) {
                return Decision::Create { epoch: known + 1 };
            }
            return Decision::Create {
                epoch: (known + 1).max(view.time_epoch(wall)),
            };
        }
        Some(Seen::Present {
            version,
            parsed,
            last_modified,
            first_seen,
        }) => (version, parsed, last_modified, first_seen),
    };
    let (record_ttl, holder, epoch, rev, next_epoch) = match parsed {
        Parsed::Valid(r) if r.state == RecordState::Released => {
            return Decision::TakeOver {
                version: version.clone(),
                epoch: r.epoch.max(known) + 1,
                rev: r.rev + 1,
            };
        }
        Parsed::Valid(r) => (
            r.ttl().min(MAX_TTL),
            Some(r.holder.clone()),
            Some(r.epoch),
            r.rev,
            r.epoch.max(known) + 1,
        ),
        Parsed::Corrupt { epoch, .. } => {
            // Held by an unknown holder with our own ttl; the new epoch goes above any token
            // that could have been handed out, including ones we cannot read any more.
            let floor = epoch.unwrap_or(0).max(known) + 1;
            (
                timing.ttl,
                None,
                *epoch,
                0,
                floor.max(view.time_epoch(wall)),
            )
        }
    };
    let take_over = || Decision::TakeOver {
        version: version.clone(),
        epoch: next_epoch,
        rev: rev + 1,
    };
    if super::dead_holder::proven(view) {
        return take_over();
    }
    let grace = timing.grace_for(record_ttl);
    let mut until: Option<Instant> = None;
    if timing.observation_rule {
        let at = *first_seen + record_ttl + grace;
        if now >= at {
            return take_over();
        }
        until = Some(at);
    }
    if timing.store_clock_rule {
        if let (Some(modified), Some((server_now, at))) = (last_modified, view.server_now) {
            let limit = record_ttl + grace + timing.resolution;
            let age = server_now
                .duration_since(*modified)
                .unwrap_or(Duration::ZERO);
            if age >= limit {
                return take_over();
            }
            // Look again once the store's clock should show the record old enough.
            let estimate = at + (limit - age) + timing.resolution;
            until = Some(until.map_or(estimate, |u| u.min(estimate)));
        }
    }
    Decision::Wait {
        until: until.unwrap_or(now + MAX_TTL),
        holder,
        epoch,
    }
}
