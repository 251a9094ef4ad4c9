//! Create, take over or wait: what a client that wants a lease does with what it has seen.
//!
//! A `held` record is taken over only when one of the two rules says its holder's deadline has
//! surely passed (docs/protocol.md §4):
//! - the observation rule: the same version seen unchanged for `ttl + grace` on our own
//!   monotonic clock, counted from after the answer that first showed it;
//! - the store-clock rule: `store_now - last_modified >= ttl + grace + resolution`, both
//!   readings from the store's clock (truncated to its resolution, hence the `>=` and the
//!   resolution: the measured age exceeds the true age by less than one resolution).
//!
//! **(changed)** `store_now` is judged from a time the store stamped itself: the
//! `last_modified` of a write read back (a probe, [`View::stamp`]) plus the time since that
//! answer came on our own clock. An answer's `Date` is not the store's clock when a gateway
//! in front of the store sets its own (nginx does by default), so `Date` only says *when* to
//! look: when it says the record is old enough, the decision is [`Decision::Stamp`], and the
//! takeover waits for a stamp that agrees (issue 29).

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
    /// The answer's `Date` says the store-clock rule allows a takeover: confirm it with the
    /// store's own stamp (write the probe object, read its `last_modified` back, and feed it to
    /// [`View::absorb_stamp`]), then decide again. Never returned once the view holds a stamp
    /// that is still usable or once its `Date` was refused.
    Stamp,
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
        if let Some(modified) = last_modified {
            let limit = record_ttl + grace + timing.resolution;
            let age_at = |store_now: SystemTime| {
                store_now
                    .duration_since(*modified)
                    .unwrap_or(Duration::ZERO)
            };
            if let Some((stamped, got)) = view.usable_stamp(now, record_ttl + grace) {
                // The store's clock now reads at least its own stamp plus the time since the
                // answer that carried it (rate drift over at most ttl + grace: what grace is for).
                let age = age_at(stamped + now.saturating_duration_since(got));
                if age >= limit {
                    return take_over();
                }
                let at = now + (limit - age);
                until = Some(until.map_or(at, |u| u.min(at)));
            } else if let (false, Some((server_now, at))) = (view.date_refused, view.server_now) {
                let age = age_at(server_now);
                if age >= limit {
                    if super::mutants::on(super::mutants::Mutant::TrustDate) {
                        return take_over();
                    }
                    return Decision::Stamp;
                }
                // Look again once the store's clock should show the record old enough.
                let estimate = at + (limit - age) + timing.resolution;
                until = Some(until.map_or(estimate, |u| u.min(estimate)));
            }
        }
    }
    Decision::Wait {
        until: until.unwrap_or(now + MAX_TTL),
        holder,
        epoch,
    }
}
