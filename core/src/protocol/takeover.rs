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
//!
//! or at once when its holder, on this machine, is provably gone ([`super::dead_holder`]).

use std::time::{Duration, SystemTime};

use super::view::{Seen, View};
use crate::clock::Instant;
use crate::options::{Timing, MAX_TTL};
use crate::record::{Holder, Parsed, Record, RecordState};
use crate::store::Version;

/// What a client that wants the lease should do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The record is absent: make it, *released*, at this epoch (a floor: the record grants
    /// nobody; the lease is then taken by a [`Decision::TakeOver`] of that version).
    Create { epoch: u64 },
    /// Replace the record at `version` with ours, at this epoch and rev: the only write that
    /// hands an epoch out.
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
            return Decision::Create {
                epoch: above_the_clock(known + 1, view, wall),
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
                epoch: next_epoch(r, known, view, wall),
                rev: r.rev + 1,
            };
        }
        Parsed::Valid(r) => (
            r.ttl().min(MAX_TTL),
            Some(r.holder.clone()),
            Some(r.epoch),
            r.rev,
            next_epoch(r, known, view, wall),
        ),
        // Held by an unknown holder with our own ttl; the new epoch goes above any token that
        // could have been handed out, including ones we cannot read any more.
        Parsed::Corrupt { epoch, .. } => (
            timing.ttl,
            None,
            *epoch,
            0,
            above_the_clock(epoch.unwrap_or(0).max(known) + 1, view, wall),
        ),
    };
    let take_over = || Decision::TakeOver {
        version: version.clone(),
        epoch: next_epoch,
        rev: rev + 1,
    };
    if holder_proven_gone(view) {
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

/// The epoch of a write that replaces `r`: one above its epoch and every epoch known.
/// **(changed, issue 22)** A record at rev 1 was made by a `Create` (this version's, released;
/// an older version's or a break's, held) or replaced a corrupt record, and a `Create` may land
/// long after it was sent, after a deletion, carrying the clock of its send: below epochs handed
/// out meanwhile. Its taker goes above the clock read after the read (or answer) that showed it
/// too, which is above them (docs/protocol.md §6). Every later record was written over its
/// predecessor by a conditional write, after those epochs: one above them is above every epoch
/// handed out, and epochs still grow by one per hand-over.
pub(super) fn next_epoch(r: &Record, known: u64, view: &View, wall: SystemTime) -> u64 {
    let above = r.epoch.max(known) + 1;
    if r.rev == 1 {
        return above_the_clock(above, view, wall);
    }
    above
}

/// `floor`, or the clock in ms when later (the store's `Date` or our `wall`, read after the
/// answer that showed the record: [`View::time_epoch`]).
fn above_the_clock(floor: u64, view: &View, wall: SystemTime) -> u64 {
    // The negative control: epochs by the known epoch + 1 alone (a record made again after a
    // deletion hands its epochs out again).
    if super::mutants::on(super::mutants::Mutant::RecreateAtKnownEpoch) {
        return floor;
    }
    floor.max(view.time_epoch(wall))
}

/// Whether the view holds a record held by a holder that its probe proves gone
/// ([`dead_holder`](super::dead_holder)): taken over at once. (Here, not in `dead_holder.rs`,
/// which the view's `Probe` comes from: the two would import each other.)
fn holder_proven_gone(view: &View) -> bool {
    match (view.record(), &view.probe) {
        (Some(r), Some(probe)) => {
            r.state == RecordState::Held && super::dead_holder::proven_gone(&r.holder, probe)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    //! The store-clock rule's decisions, each boundary pinned: ttl 20 s, grace 2 s (the
    //! default, ttl/10), resolution 1 s, so `limit` = 23 s; stamps usable for ttl + grace = 22 s.
    #![allow(clippy::disallowed_methods)] // a fixed origin for the instants

    use super::*;
    use crate::options::LeaseOptions;
    use crate::record::{Record, FORMAT};
    use crate::store::Capabilities;

    const MS: Duration = Duration::from_millis(1);
    const LIMIT: Duration = Duration::from_secs(23);

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn timing(observation: bool) -> Timing {
        let caps = Capabilities {
            conditional_delete: true,
            clock_resolution: s(1),
            store_clock_rule: true,
            wall_clock: true,
            versions_are_unique: true,
        };
        LeaseOptions::new(s(20))
            .observation_rule(observation)
            .timing(&caps)
            .unwrap()
    }

    /// The record's `Last-Modified`.
    fn modified() -> SystemTime {
        SystemTime::UNIX_EPOCH + s(1_800_000_000)
    }

    fn origin() -> Instant {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *ORIGIN.get_or_init(Instant::now)
    }

    /// A held record (ttl 20 s) first seen at `origin()`, the answer's `Date` `date_age` after
    /// its `Last-Modified`, received at `origin()`.
    fn view(date_age: Duration) -> View {
        let record = Record {
            format: FORMAT,
            epoch: 7,
            rev: 3,
            state: RecordState::Held,
            ttl_ms: 20_000,
            holder: Holder {
                id: "holder".into(),
                ..Holder::default()
            },
            acquired_at: None,
            renewed_at: None,
            data: None,
            prev: vec![],
            write: Some("w".into()),
            broken: None,
            preempted: None,
            history: Default::default(),
            attached: None,
        };
        View {
            seen: Some(Seen::Present {
                version: Version::etag("v"),
                parsed: Parsed::Valid(record),
                last_modified: Some(modified()),
                first_seen: origin(),
            }),
            server_now: Some((modified() + date_age, origin())),
            probe: None,
            stamp: None,
            date_refused: false,
        }
    }

    fn decide_at(view: &View, after: Duration) -> Decision {
        decide(view, &timing(false), 0, origin() + after, SystemTime::now())
    }

    fn wait_until(d: Decision) -> Instant {
        match d {
            Decision::Wait { until, .. } => until,
            other => panic!("expected Wait, got {other:?}"),
        }
    }

    /// `ms` milliseconds after the Unix epoch on our wall clock.
    fn wall_ms(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    /// A view of `parsed` with no `Date`: only our wall clock dates a new epoch.
    fn present(parsed: Parsed) -> View {
        View {
            seen: Some(Seen::Present {
                version: Version::etag("v"),
                parsed,
                last_modified: None,
                first_seen: origin(),
            }),
            ..View::default()
        }
    }

    fn epoch_of(d: Decision) -> u64 {
        match d {
            Decision::Create { epoch } | Decision::TakeOver { epoch, .. } => epoch,
            other => panic!("expected Create or TakeOver, got {other:?}"),
        }
    }

    /// A record that was deleted, or cannot be read, may have handed out any epoch: the new one
    /// goes above the epoch still readable in it, every epoch this client knows, and the clocks
    /// in milliseconds, whichever is highest, at each boundary.
    #[test]
    fn a_new_or_corrupt_records_epoch_goes_above_the_known_epoch_and_the_clock() {
        // Past the observation rule's ttl + grace, so that a corrupt record is taken over.
        let (t, now) = (timing(true), origin() + s(3600));
        let absent = View {
            seen: Some(Seen::Absent),
            ..View::default()
        };
        for (known, epoch) in [
            (5, 1_000),
            (998, 1_000),
            (999, 1_000),
            (1_000, 1_001),
            (5_000, 5_001),
        ] {
            assert_eq!(
                decide(&absent, &t, known, now, wall_ms(1_000)),
                Decision::Create { epoch },
                "known {known}"
            );
        }
        let corrupt = |epoch| {
            present(Parsed::Corrupt {
                reason: "not a lease record".into(),
                epoch,
            })
        };
        assert_eq!(
            decide(&corrupt(Some(7_000)), &t, 5, now, wall_ms(1_000)),
            Decision::TakeOver {
                version: Version::etag("v"),
                epoch: 7_001,
                rev: 1
            }
        );
        for (epoch, known, expected) in [
            (Some(7_000), 8_000, 8_001),
            (Some(500), 0, 1_000),
            (None, 0, 1_000),
            (None, 999, 1_000),
            (None, 1_000, 1_001),
        ] {
            assert_eq!(
                epoch_of(decide(&corrupt(epoch), &t, known, now, wall_ms(1_000))),
                expected,
                "epoch {epoch:?}, known {known}"
            );
        }
    }

    /// `view` with its record at `rev` in `state`, and no `Date`.
    fn at_rev(rev: u64, state: RecordState) -> View {
        let mut v = view(Duration::ZERO);
        v.server_now = None;
        if let Some(Seen::Present {
            parsed: Parsed::Valid(r),
            ..
        }) = &mut v.seen
        {
            (r.rev, r.state) = (rev, state);
        }
        v
    }

    /// A released or expired record written over another (rev 2 and up) is replaced one epoch
    /// above both its own and every epoch this client has seen, whatever the clock, one rev
    /// above its own.
    #[test]
    fn a_takeover_goes_one_above_the_records_epoch_and_the_known_one() {
        let t = timing(true);
        let (held, released) = (
            at_rev(3, RecordState::Held),
            at_rev(3, RecordState::Released),
        );
        for (known, epoch) in [(0, 8), (6, 8), (7, 8), (8, 9), (9, 10)] {
            let expected = Decision::TakeOver {
                version: Version::etag("v"),
                epoch,
                rev: 4,
            };
            // A released record at once, a held one once the observation rule allows it; a
            // clock far above changes nothing.
            for clock in [1, 1_000_000] {
                assert_eq!(
                    decide(&released, &t, known, origin(), wall_ms(clock)),
                    expected,
                    "released, known {known}"
                );
                assert_eq!(
                    decide(&held, &t, known, origin() + s(22), wall_ms(clock)),
                    expected,
                    "held, known {known}"
                );
            }
        }
    }

    /// **(changed, issue 22)** A record at rev 1 was made where none was, by a `Create` that may
    /// have landed long after it was sent: its taker goes one above its epoch and every epoch
    /// known, and above the clock (the later of the store's `Date` and ours, read after the
    /// answer that showed it) too — released (this version's create) or held (an older
    /// version's, a break's).
    #[test]
    fn a_record_made_by_a_create_is_taken_above_the_clock() {
        let t = timing(true);
        let (held, released) = (
            at_rev(1, RecordState::Held),
            at_rev(1, RecordState::Released),
        );
        // (known, our clock in ms, the epoch): the record's epoch is 7.
        for (known, clock, epoch) in [
            (0, 1, 8),
            (7, 1, 8),
            (8, 1, 9),
            (0, 8, 8),
            (0, 9, 9),
            (9, 10, 10),
            (9, 11, 11),
        ] {
            let taken = Decision::TakeOver {
                version: Version::etag("v"),
                epoch,
                rev: 2,
            };
            assert_eq!(
                decide(&released, &t, known, origin(), wall_ms(clock)),
                taken,
                "released, known {known}, clock {clock}"
            );
            assert_eq!(
                decide(&held, &t, known, origin() + s(22), wall_ms(clock)),
                taken,
                "held, known {known}, clock {clock}"
            );
        }
        // The store's `Date`, when later than our clock, is the clock.
        let mut dated = released.clone();
        dated.server_now = Some((wall_ms(20), origin()));
        assert_eq!(epoch_of(decide(&dated, &t, 0, origin(), wall_ms(1))), 20);
        assert_eq!(epoch_of(decide(&dated, &t, 0, origin(), wall_ms(30))), 30);
    }

    #[test]
    fn a_date_that_says_old_enough_asks_for_a_stamp_instead_of_taking_over() {
        assert_eq!(decide_at(&view(LIMIT), Duration::ZERO), Decision::Stamp);
        assert_eq!(decide_at(&view(s(3600)), Duration::ZERO), Decision::Stamp);
        // One ms short: wait until the Date should say so, plus its resolution.
        let until = wait_until(decide_at(&view(LIMIT - MS), Duration::ZERO));
        assert_eq!(until, origin() + MS + s(1));
    }

    #[test]
    fn a_stamp_old_enough_takes_over_and_one_short_waits_exactly() {
        let mut v = view(LIMIT);
        // Stamped 20 s after the record, received at 1 s: 3 s later it is 23 s old.
        v.stamp = Some((modified() + s(20), origin() + s(1)));
        assert!(matches!(
            decide_at(&v, s(4)),
            Decision::TakeOver {
                epoch: 8,
                rev: 4,
                ..
            }
        ));
        assert_eq!(
            wait_until(decide_at(&v, s(4) - MS)),
            origin() + s(4),
            "the time left by the stamp, counted on our clock"
        );
    }

    #[test]
    fn a_stamp_that_disagrees_with_date_waits_and_asks_for_no_other() {
        let mut v = view(s(60));
        v.stamp = Some((modified() + s(1), origin() + s(1)));
        // The Date says an hour; the store's stamp says 1 s + time since.
        assert_eq!(wait_until(decide_at(&v, s(2))), origin() + s(23));
    }

    #[test]
    fn a_stamp_is_used_for_ttl_plus_grace_on_our_clock_then_date_asks_again() {
        let mut v = view(s(60));
        v.stamp = Some((modified(), origin()));
        // 22 s after it came: still used (the Date is not looked at).
        assert!(matches!(decide_at(&v, s(22)), Decision::Wait { .. }));
        // A moment later it is too old to extrapolate: the Date asks for a new one.
        assert_eq!(decide_at(&v, s(22) + MS), Decision::Stamp);
        assert_eq!(v.usable_stamp(origin() + s(22), s(22)), v.stamp);
        assert_eq!(v.usable_stamp(origin() + s(22) + MS, s(22)), None);
    }

    #[test]
    fn a_refused_date_asks_for_no_stamp() {
        let mut v = view(s(3600));
        v.date_refused = true;
        // Nothing to go by but the observation rule (off here): look again after MAX_TTL.
        assert_eq!(
            wait_until(decide_at(&v, Duration::ZERO)),
            origin() + MAX_TTL
        );
        // With a fresh stamp the store-clock rule still works.
        v.stamp = Some((modified() + LIMIT, origin()));
        assert!(matches!(
            decide_at(&v, Duration::ZERO),
            Decision::TakeOver { .. }
        ));
    }

    #[test]
    fn the_observation_rule_needs_no_stamp() {
        let v = view(s(3600));
        let t = timing(true);
        // ttl + grace after first seen.
        let at = origin() + s(22);
        assert!(matches!(
            decide(&v, &t, 0, at, SystemTime::now()),
            Decision::TakeOver { .. }
        ));
        assert_eq!(
            decide(&v, &t, 0, at - MS, SystemTime::now()),
            Decision::Stamp
        );
    }

    #[test]
    fn without_the_store_clock_rule_neither_date_nor_stamp_counts() {
        let mut v = view(s(3600));
        v.stamp = Some((modified() + s(3600), origin()));
        let t = LeaseOptions::new(s(20))
            .store_clock_rule(false)
            .timing(&Capabilities {
                conditional_delete: true,
                clock_resolution: s(1),
                store_clock_rule: true,
                wall_clock: true,
                versions_are_unique: true,
            })
            .unwrap();
        assert_eq!(
            wait_until(decide(&v, &t, 0, origin(), SystemTime::now())),
            origin() + s(22)
        );
    }

    #[test]
    fn a_stamp_refuses_a_date_ahead_by_more_than_resolution_plus_grace() {
        let res = s(1);
        let grace = s(2);
        // The Date read before the probe: 3 s ahead of the stamp is refused...
        let mut v = view(s(3));
        assert!(v.absorb_stamp(Some(modified()), origin(), res, grace));
        assert!(v.date_refused);
        assert_eq!(v.stamp, Some((modified(), origin())));
        // ... and only once.
        assert!(!v.absorb_stamp(Some(modified()), origin(), res, grace));
        // A moment less is the truncation and skew an honest store shows.
        let mut v = view(s(3) - MS);
        assert!(!v.absorb_stamp(Some(modified()), origin(), res, grace));
        assert!(!v.date_refused);
        // No stamp to be had: the Date cannot be confirmed, and asks for no more.
        let mut v = view(Duration::ZERO);
        assert!(v.absorb_stamp(None, origin(), res, grace));
        assert!(v.date_refused && v.stamp.is_none());
    }
}
